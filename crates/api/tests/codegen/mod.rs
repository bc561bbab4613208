//! Generates `src/models.rs` from the vendored OpenAPI document (`openapi/e2b.yml`).
//!
//! The generator covers what the sandbox schemas use: objects with `properties`/`required`,
//! `nullable`, `$ref`, string enums, arrays, `additionalProperties` maps and primitive aliases.
//! Anything else in a selected schema is an error, so a spec change that needs more code fails
//! the freshness test instead of producing a wrong type.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::Value;

/// The schemas the client needs: the sandbox endpoints' bodies. Everything they reference is
/// generated too.
pub(crate) const ROOTS: &[&str] = &[
    "NewSandbox",
    "Sandbox",
    "SandboxDetail",
    "ListedSandbox",
    "ConnectSandbox",
    "SandboxTimeoutRequest",
    "SandboxPauseRequest",
    "ResumedSandbox",
    "SandboxMetric",
    "SandboxesWithMetrics",
    "SandboxLogs",
    "SandboxLogsV2Response",
    "OrderDirection",
    "LogsDirection",
    "Error",
];

/// Reads and parses the vendored spec into JSON values.
pub(crate) fn load_spec() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../openapi/e2b.yml");
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read the vendored spec {path}: {e}"));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path} is not valid YAML: {e}"))
}

fn schemas(spec: &Value) -> &serde_json::Map<String, Value> {
    spec["components"]["schemas"]
        .as_object()
        .expect("spec has components.schemas")
}

fn ref_name(v: &Value) -> Option<&str> {
    v.get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
}

fn collect_refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            if let Some(name) = ref_name(v) {
                out.insert(name.to_owned());
            }
            for (k, child) in map {
                if k != "$ref" {
                    collect_refs(child, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_refs(i, out)),
        _ => {}
    }
}

/// The selected schema names: [`ROOTS`] and everything they reference, in spec order.
pub(crate) fn selected(spec: &Value) -> Vec<String> {
    let all = schemas(spec);
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<String> = ROOTS.iter().map(|s| (*s).to_owned()).collect();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let schema = all
            .get(&name)
            .unwrap_or_else(|| panic!("schema {name} is missing from the spec"));
        let mut refs = BTreeSet::new();
        collect_refs(schema, &mut refs);
        todo.extend(refs);
    }
    let mut names: Vec<String> = all.keys().filter(|k| seen.contains(*k)).cloned().collect();
    names.sort();
    names
}

/// `templateID` → `template_id`, `memoryMB` → `memory_mb`, `allow_internet_access` unchanged.
pub(crate) fn snake(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1).copied();
            let boundary = match prev {
                None | Some('_') => false,
                Some(p) if p.is_ascii_lowercase() || p.is_ascii_digit() => true,
                Some(p) => p.is_ascii_uppercase() && next.is_some_and(|n| n.is_ascii_lowercase()),
            };
            if boundary {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    if matches!(out.as_str(), "type" | "ref" | "use" | "match") {
        out.insert_str(0, "r#");
    }
    out
}

fn camel(value: &str) -> String {
    value
        .split(['_', '-'])
        .map(|part| {
            let mut c = part.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn doc(out: &mut String, indent: &str, text: &str) {
    for line in text.trim().lines() {
        let line = line.trim_end();
        if line.is_empty() {
            let _ = writeln!(out, "{indent}///");
        } else {
            let _ = writeln!(
                out,
                "{indent}/// {}",
                line.replace('[', "\\[").replace(']', "\\]")
            );
        }
    }
}

/// The Rust type of a schema used as a field or item (not a named definition).
fn type_of(v: &Value, ctx: &str) -> String {
    if let Some(name) = ref_name(v) {
        return name.to_owned();
    }
    let ty = v.get("type").and_then(Value::as_str);
    match ty {
        Some("string") => {
            assert!(
                v.get("enum").is_none(),
                "{ctx}: inline enums are not supported"
            );
            "String".to_owned()
        }
        Some("integer") => match v.get("format").and_then(Value::as_str) {
            Some("int64") => "i64".to_owned(),
            _ => "i32".to_owned(),
        },
        Some("number") => "f64".to_owned(),
        Some("boolean") => "bool".to_owned(),
        Some("array") => format!("Vec<{}>", type_of(&v["items"], ctx)),
        Some("object") | None => {
            assert!(
                v.get("properties").is_none(),
                "{ctx}: inline objects with properties are not supported; name them in components"
            );
            match v.get("additionalProperties") {
                Some(Value::Object(m)) if m.is_empty() => {
                    "serde_json::Map<String, serde_json::Value>".to_owned()
                }
                Some(ap @ Value::Object(_)) => {
                    format!("BTreeMap<String, {}>", type_of(ap, ctx))
                }
                _ => panic!("{ctx}: untyped schema {v}"),
            }
        }
        Some(other) => panic!("{ctx}: unsupported type {other}"),
    }
}

fn describe(v: &Value, spec: &Value) -> String {
    let mut text = v
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            ref_name(v).and_then(|n| {
                schemas(spec)[n]
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
        })
        .unwrap_or_default();
    let mut notes = Vec::new();
    if v.get("format").and_then(Value::as_str) == Some("date-time") {
        notes.push("An RFC 3339 date-time.".to_owned());
    }
    if let Some(d) = v.get("default") {
        notes.push(format!("The server's default: `{d}`."));
    }
    if let Some(m) = v.get("minimum") {
        notes.push(format!("Minimum `{m}`."));
    }
    if let Some(m) = v.get("maximum") {
        notes.push(format!("Maximum `{m}`."));
    }
    if v.get("deprecated").and_then(Value::as_bool) == Some(true) {
        notes.push("Deprecated in the spec.".to_owned());
    }
    if !notes.is_empty() {
        if !text.trim().is_empty() {
            text = format!("{}\n\n", text.trim());
        }
        text.push_str(&notes.join(" "));
    }
    text
}

fn is_nullable(spec: &Value, v: &Value) -> bool {
    if v.get("nullable").and_then(Value::as_bool) == Some(true) {
        return true;
    }
    ref_name(v)
        .is_some_and(|n| schemas(spec)[n].get("nullable").and_then(Value::as_bool) == Some(true))
}

/// Generates the whole `models.rs` text (not yet formatted by rustfmt).
pub(crate) fn generate(spec: &Value) -> String {
    let all = schemas(spec);
    let names = selected(spec);
    let revision = spec["info"]["version"].as_str().unwrap_or("?");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "// @generated by crates/api/tests/codegen from openapi/e2b.yml (E2B API {revision}).\n\
         // Do not edit: change the spec, then run\n\
         //   E2B_API_REGENERATE=1 cargo nextest run -p e2b-api --test test_models_fresh\n\n\
         //! The E2B API's sandbox schemas (`components.schemas` of `openapi/e2b.yml`) as serde types.\n\
         //!\n\
         //! Type names are the schema names; field names are snake_case with `#[serde(rename)]` to\n\
         //! the wire name. A field the schema does not require (or marks `nullable`) is an `Option`\n\
         //! and is left out of the JSON when `None`. Timestamps are RFC 3339 strings, as on the wire.\n\
         //! Unknown fields are ignored when decoding, so a newer server still decodes.\n\n\
         use std::collections::BTreeMap;\n\nuse serde::{{Deserialize, Serialize}};\n"
    );
    let mut defaultable: BTreeMap<&str, bool> = BTreeMap::new();
    for name in &names {
        let s = &all[name];
        let ctx = name.as_str();
        let description = describe(s, spec);
        let description = if description.trim().is_empty() {
            format!("The `{name}` schema.")
        } else {
            description
        };
        let _ = writeln!(out);
        doc(&mut out, "", &description);
        if let Some(variants) = s.get("enum").and_then(Value::as_array) {
            defaultable.insert(ctx, false);
            let _ = writeln!(
                out,
                "#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]\npub enum {name} {{"
            );
            for v in variants {
                let v = v
                    .as_str()
                    .unwrap_or_else(|| panic!("{ctx}: non-string enum value"));
                let _ = writeln!(
                    out,
                    "    /// `{v}`\n    #[serde(rename = \"{v}\")]\n    {},",
                    camel(v)
                );
            }
            let _ = writeln!(
                out,
                "}}\n\nimpl {name} {{\n    /// The value's wire spelling.\n    pub fn as_str(self) -> &'static str {{\n        match self {{"
            );
            for v in variants {
                let v = v.as_str().unwrap_or_default();
                let _ = writeln!(out, "            Self::{} => \"{v}\",", camel(v));
            }
            let _ = writeln!(
                out,
                "        }}\n    }}\n}}\n\nimpl std::fmt::Display for {name} {{\n    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {{\n        f.write_str(self.as_str())\n    }}\n}}"
            );
            continue;
        }
        let props = s.get("properties").and_then(Value::as_object);
        let is_object = props.is_some();
        if !is_object {
            let ty = type_of(s, ctx);
            let _ = writeln!(out, "pub type {name} = {ty};");
            continue;
        }
        assert!(
            s.get("additionalProperties").is_none(),
            "{ctx}: properties together with additionalProperties are not supported"
        );
        let required: BTreeSet<&str> = s
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let props = props.unwrap_or_else(|| unreachable!());
        let all_optional = props.keys().all(|k| !required.contains(k.as_str()));
        defaultable.insert(ctx, all_optional);
        let derives = if all_optional {
            "Debug, Clone, Default, PartialEq, Serialize, Deserialize"
        } else {
            "Debug, Clone, PartialEq, Serialize, Deserialize"
        };
        let _ = writeln!(out, "#[derive({derives})]\npub struct {name} {{");
        // Sorted by wire name: serde_json's map keeps insertion order when another crate in
        // the build enables its `preserve_order` feature, so iteration order is not stable.
        let mut props: Vec<(&String, &Value)> = props.iter().collect();
        props.sort_by(|a, b| a.0.cmp(b.0));
        for (wire, p) in props {
            let fctx = format!("{ctx}.{wire}");
            let mut ty = type_of(p, &fctx);
            let req = required.contains(wire.as_str());
            let optional = !req || is_nullable(spec, p);
            let fdoc = describe(p, spec);
            let fdoc = if fdoc.trim().is_empty() {
                format!("`{wire}`.")
            } else {
                fdoc
            };
            doc(&mut out, "    ", &fdoc);
            let field = snake(wire);
            let mut attrs = Vec::new();
            if field.trim_start_matches("r#") != wire {
                attrs.push(format!("rename = \"{wire}\""));
            }
            if optional {
                ty = format!("Option<{ty}>");
                attrs.push("default".to_owned());
                if !req {
                    attrs.push("skip_serializing_if = \"Option::is_none\"".to_owned());
                }
            }
            if !attrs.is_empty() {
                let _ = writeln!(out, "    #[serde({})]", attrs.join(", "));
            }
            let _ = writeln!(out, "    pub {field}: {ty},");
        }
        let _ = writeln!(out, "}}");
    }
    out
}

/// Runs `rustfmt` (edition 2024) over generated code.
pub(crate) fn rustfmt(code: &str) -> String {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("rustfmt is needed to format the generated models (rustup component add rustfmt)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(code.as_bytes())
        .expect("write to rustfmt");
    let out = child.wait_with_output().expect("rustfmt runs");
    assert!(
        out.status.success(),
        "rustfmt rejected the generated code:\n{code}"
    );
    String::from_utf8(out.stdout).expect("rustfmt output is UTF-8")
}
