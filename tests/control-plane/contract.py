"""Validates `e2b serve`'s responses against the vendored OpenAPI document (openapi/e2b.yml)."""

import json
import pathlib
import re

import yaml
from jsonschema import Draft202012Validator

REPO = pathlib.Path(__file__).resolve().parents[2]
SPEC_PATH = REPO / "openapi" / "e2b.yml"


def _load():
    if not SPEC_PATH.exists():
        raise AssertionError(f"missing {SPEC_PATH}: the contract tests need the vendored OpenAPI document")
    return yaml.safe_load(SPEC_PATH.read_text())


def _to_json_schema(node):
    """OpenAPI 3.0 schema -> JSON Schema: `nullable: true` becomes a `null` alternative."""
    if isinstance(node, list):
        return [_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_json_schema(v) for k, v in node.items() if k not in ("nullable", "example", "deprecated", "x-go-type")}
    if isinstance(out.get("$ref"), str):
        out["$ref"] = out["$ref"].replace("#/components/schemas/", "#/$defs/")
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


class Contract:
    def __init__(self):
        spec = _load()
        self.spec = spec
        self.defs = {k: _to_json_schema(v) for k, v in spec["components"]["schemas"].items()}
        self.responses = spec["components"].get("responses", {})

    # The pinned SDK (e2b 2.63) calls two endpoints newer than the vendored document (pinned by
    # E2B's spec/infra-ref): they answer the same `Sandbox` body as their v1 forms.
    NEWER = {
        ("POST", "/v2/sandboxes"): "/sandboxes",
        ("POST", "/v2/sandboxes/{id}/connect"): "/sandboxes/{id}/connect",
    }

    # Error statuses the pinned SDK's generated client documents for those newer endpoints.
    NEWER_ERRORS = {400, 401, 403, 404, 409, 422, 429, 500, 503, 504}

    def _schema_for(self, method: str, path: str, status: int):
        for (m, newer), older in self.NEWER.items():
            found = re.match("^" + newer.replace("{id}", "([^/]+)") + "$", path)
            documented = method.lower() in self.spec["paths"].get(newer.replace("{id}", "{sandboxID}"), {})
            if m == method.upper() and found and not documented:
                if status in self.NEWER_ERRORS:
                    return newer, {"$ref": "#/components/schemas/Error"}
                path = older.replace("{id}", found.group(1)) if found.groups() else older
                break
        for template, item in self.spec["paths"].items():
            pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
            if not re.match(pattern, path):
                continue
            op = item.get(method.lower())
            if op is None:
                continue
            resp = op["responses"].get(str(status))
            if resp is None:
                raise AssertionError(f"{method} {template}: status {status} is not in the spec ({sorted(op['responses'])})")
            if "$ref" in resp:
                resp = self.responses[resp["$ref"].split("/")[-1]]
            content = resp.get("content", {}).get("application/json")
            return template, (content or {}).get("schema")
        raise AssertionError(f"{method} {path} is not in the spec")

    def check(self, method: str, path: str, status: int, body: bytes):
        template, schema = self._schema_for(method, path, status)
        if schema is None:
            assert not body.strip(), f"{method} {template} {status}: the spec has no body, got {body[:200]!r}"
            return
        value = json.loads(body)
        full = dict(_to_json_schema(schema))
        full["$defs"] = self.defs
        errors = sorted(Draft202012Validator(full).iter_errors(value), key=lambda e: list(e.path))
        assert not errors, f"{method} {template} {status}: " + "; ".join(
            f"{list(e.path)}: {e.message}" for e in errors[:5]
        )
