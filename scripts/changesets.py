#!/usr/bin/env python3
"""Changesets for the workspace: check them, and turn them into versions and changelogs.

A changeset is a Markdown file in `.changeset/` (the changesets format, which knope also reads):

    ---
    "e2b-commands": minor
    "e2b": patch
    ---
    What changed, for the changelog.

Commands:
    changesets.py check [--base REF]   validate every changeset; with a base, also require one for
                                       each published crate whose files changed since REF
    changesets.py version [--dry-run]  apply the changesets: bump versions in crates/*/Cargo.toml
                                       (and the pins in the root Cargo.toml), give every published
                                       crate that depends on a bumped one a patch bump, prepend
                                       each crate's CHANGELOG.md, delete the applied changesets;
                                       with --dry-run, print that plan and change nothing
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHANGESET_DIR = ROOT / ".changeset"
BUMPS = ("major", "minor", "patch")


def crates() -> dict[str, dict]:
    """Package name -> {dir, version, publish} for every workspace crate."""
    out = {}
    for manifest in sorted((ROOT / "crates").glob("*/Cargo.toml")):
        text = manifest.read_text()
        pkg = text.split("[package]", 1)[1].split("\n[", 1)[0]
        name = re.search(r'^name\s*=\s*"([^"]+)"', pkg, re.M)
        version = re.search(r'^version\s*=\s*"([^"]+)"', pkg, re.M)
        if not name or not version:
            continue
        publish = not re.search(r"^publish\s*=\s*false", pkg, re.M)
        out[name.group(1)] = {"dir": manifest.parent, "version": version.group(1), "publish": publish}
    return out


def parse(path: pathlib.Path) -> tuple[dict[str, str], str]:
    text = path.read_text()
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    if not m:
        raise ValueError(f"{path.name}: expected front matter between '---' lines, then a summary")
    bumps = {}
    for line in m.group(1).splitlines():
        if not line.strip():
            continue
        lm = re.match(r'^\s*"?([A-Za-z0-9_-]+)"?\s*:\s*(major|minor|patch)\s*$', line)
        if not lm:
            raise ValueError(f"{path.name}: cannot read '{line}': expected '\"package\": major|minor|patch'")
        bumps[lm.group(1)] = lm.group(2)
    summary = m.group(2).strip()
    if not bumps:
        raise ValueError(f"{path.name}: names no package")
    if not summary:
        raise ValueError(f"{path.name}: has no summary")
    return bumps, summary


def changeset_files() -> list[pathlib.Path]:
    return sorted(p for p in CHANGESET_DIR.glob("*.md") if p.name.lower() != "readme.md")


def check(base: str | None) -> int:
    known = crates()
    errors = []
    named: dict[str, list[str]] = {}
    for path in changeset_files():
        try:
            bumps, _ = parse(path)
        except ValueError as e:
            errors.append(str(e))
            continue
        for pkg in bumps:
            if pkg not in known:
                errors.append(f"{path.name}: unknown package '{pkg}' (known: {', '.join(sorted(known))})")
            elif not known[pkg]["publish"]:
                errors.append(f"{path.name}: '{pkg}' is not published; it needs no changeset")
            named.setdefault(pkg, []).append(path.name)
    if base:
        diff = subprocess.run(
            ["git", "diff", "--name-only", f"{base}...HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
        added = set(
            subprocess.run(
                ["git", "diff", "--name-only", "--diff-filter=AM", f"{base}...HEAD", "--", ".changeset"],
                cwd=ROOT, capture_output=True, text=True, check=True,
            ).stdout.split()
        )
        for pkg, info in known.items():
            if not info["publish"]:
                continue
            rel = info["dir"].relative_to(ROOT).as_posix() + "/"
            touched = [f for f in diff if f.startswith(rel) and not f.endswith("CHANGELOG.md")]
            if touched and not any(f".changeset/{n}" in added for n in named.get(pkg, [])):
                errors.append(
                    f"{pkg} changed ({touched[0]}, ...) but no changeset added since {base} names it: "
                    f"add .changeset/<slug>.md with '\"{pkg}\": patch|minor|major' and a summary"
                )
    for e in errors:
        print(f"changeset: {e}", file=sys.stderr)
    print(f"changesets: {len(changeset_files())} checked, {len(errors)} problem(s)")
    return 1 if errors else 0


def bump(version: str, kind: str) -> str:
    major, minor, patch = (int(x) for x in version.split("-")[0].split("."))
    # Before 1.0, a breaking change bumps the minor and a feature the patch, as Cargo reads it.
    if major == 0:
        kind = {"major": "minor", "minor": "patch", "patch": "patch"}[kind]
    if kind == "major":
        return f"{major + 1}.0.0"
    if kind == "minor":
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"


def internal_deps() -> dict[str, set[str]]:
    """Package name -> the workspace crates it depends on (normal and build dependencies: the
    ones a published crate's manifest pins; dev-dependencies are not published with a version)."""
    known = crates()
    out: dict[str, set[str]] = {}
    for name, info in known.items():
        text = (info["dir"] / "Cargo.toml").read_text()
        deps: set[str] = set()
        section = ""
        for line in text.splitlines():
            sm = re.match(r"^\[([^\]]+)\]", line)
            if sm:
                section = sm.group(1)
                continue
            if section not in ("dependencies", "build-dependencies") and not re.match(
                r"^target\..*\.(dependencies|build-dependencies)$", section
            ):
                continue
            dm = re.match(r"^([A-Za-z0-9_-]+)\s*=", line)
            if dm and dm.group(1) in known:
                deps.add(dm.group(1))
        out[name] = deps
    return out


def released(pkg: str) -> bool:
    """Whether `pkg` has a release: a git tag `<pkg>-v<version>` (VERSIONING.md)."""
    out = subprocess.run(["git", "tag", "--list", f"{pkg}-v*"], cwd=ROOT, capture_output=True, text=True)
    return bool(out.stdout.strip())


def next_version(pkg: str, current: str, kind: str) -> str:
    """The version the release publishes: the bumped one, or the current one for a crate never
    released (its first release ships the version in its manifest)."""
    return bump(current, kind) if released(pkg) else current


def plan_release() -> tuple[dict[str, str], dict[str, list[str]], list[pathlib.Path]]:
    """The bump per crate and its changelog notes. A published crate that depends on a bumped
    crate gets at least a patch bump, so its pin on the new version is published too."""
    known = crates()
    plan: dict[str, str] = {}
    notes: dict[str, list[str]] = {}
    files = changeset_files()
    for path in files:
        bumps, summary = parse(path)
        for pkg, kind in bumps.items():
            if pkg not in known:
                raise SystemExit(f"{path.name}: unknown package {pkg}")
            # The largest bump wins (BUMPS is ordered largest first).
            plan[pkg] = min(kind, plan.get(pkg, kind), key=BUMPS.index)
            notes.setdefault(pkg, []).append(summary)
    deps = internal_deps()
    grew = True
    while grew:
        grew = False
        for pkg in sorted(known):
            if not known[pkg]["publish"]:
                continue
            bumped = sorted(
                d for d in deps.get(pkg, ()) if d in plan and next_version(d, known[d]["version"], plan[d]) != known[d]["version"]
            )
            if not bumped:
                continue
            if pkg not in plan:
                plan[pkg] = "patch"
                grew = True
            dep_note = "Dependencies: " + ", ".join(
                f"{d} {next_version(d, known[d]['version'], plan[d])}" for d in bumped
            )
            entries = notes.setdefault(pkg, [])
            entries[:] = [n for n in entries if not n.startswith("Dependencies: ")] + [dep_note]
    return plan, notes, files


def version(dry_run: bool) -> int:
    known = crates()
    plan, notes, files = plan_release()
    if not plan:
        print("changesets: nothing to release (no pending .changeset/*.md)")
        return 0
    root_manifest = ROOT / "Cargo.toml"
    root_text = root_manifest.read_text()
    for pkg, kind in sorted(plan.items()):
        info = known[pkg]
        new = next_version(pkg, info["version"], kind)
        n = len(notes[pkg])
        entries = f"{n} changelog entr{'y' if n == 1 else 'ies'}"
        if new == info["version"]:
            print(f"{pkg}: {new}, first release ({kind} changes; {entries})")
        else:
            print(f"{pkg}: {info['version']} -> {new} ({kind} change; {entries})")
        # The exact pin in [workspace.dependencies] moves with the crate.
        root_text, pins = re.subn(
            rf'^({re.escape(pkg)}\s*=\s*\{{[^}}]*version\s*=\s*"=?)[^"]+(")', rf"\g<1>{new}\g<2>", root_text, flags=re.M
        )
        if dry_run:
            if pins and new != info["version"]:
                print(f"  pin: {pkg} = \"{new}\" in [workspace.dependencies]")
            continue
        manifest = info["dir"] / "Cargo.toml"
        text = manifest.read_text()
        text = re.sub(r'(\[package\][^\[]*?\nversion\s*=\s*")[^"]+(")', rf"\g<1>{new}\g<2>", text, count=1, flags=re.S)
        manifest.write_text(text)
        changelog = info["dir"] / "CHANGELOG.md"
        entry = f"## {new}\n\n" + "\n".join(f"- {n.replace(chr(10), chr(10) + '  ')}" for n in notes[pkg]) + "\n"
        text = changelog.read_text() if changelog.exists() else f"# Changelog of {pkg}\n"
        # Newest first: the entry goes before the first release heading, after the intro.
        at = text.find("\n## ")
        head, rest = (text, "") if at < 0 else (text[: at + 1], text[at + 1 :])
        changelog.write_text(f"{head.rstrip()}\n\n{entry}\n{rest}".rstrip() + "\n")
    if dry_run:
        print(f"changesets: dry run, {len(files)} changeset(s) would be applied; nothing changed")
        return 0
    root_manifest.write_text(root_text)
    for path in files:
        path.unlink()
    return 0


def main() -> int:
    args = sys.argv[1:]
    if not args or args[0] not in ("check", "version"):
        print(__doc__)
        return 2
    if args[0] == "check":
        base = args[args.index("--base") + 1] if "--base" in args else None
        return check(base)
    return version("--dry-run" in args)


if __name__ == "__main__":
    sys.exit(main())
