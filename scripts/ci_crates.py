#!/usr/bin/env python3
"""Per-crate release checks (scripts/ci-crates is the entry point; see its header).

Build and tests are scripts/test's job; this script checks what publishing needs, per workspace
member, reusing the one target directory:

  docs       cargo doc --no-deps -p X with RUSTDOCFLAGS="-D warnings", one call per crate
  doctests   cargo test --doc for the selected crates (nextest, in scripts/test, runs none): the
             README examples each crate includes as its crate docs
  features   cargo check -p X --no-default-features, for each crate that has default features
             (a crate without any builds the same as the normal build)
  publish    cargo publish --dry-run over the selected published crates plus the workspace crates
             they depend on, in one call, so cargo packages them in dependency order and the
             internal version pins resolve against each other (needs the crates.io index)
  semver     cargo semver-checks against the last release tag `<crate>-v<version>`; skipped, with
             a line saying so, while a crate has no release tag
  msrv       cargo +<rust-version> check -p X when that toolchain is installed; otherwise a line
             says it is skipped (CI_CRATES_REQUIRE_MSRV=1 makes that an error)
  examples   cargo build --examples for the selected crates, then runs the examples a crate lists
             in `[package.metadata.ci] run-examples` (the ones that need no account: they embed
             the local daemon), each with a hang guard, so the usage examples stay true
  changesets scripts/changeset-version --dry-run: what the next release would publish
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = ("docs", "doctests", "features", "examples", "publish", "semver", "msrv", "changesets")
# A hang guard for one example run (they take a few seconds; none may hang CI).
EXAMPLE_HANG_GUARD_SECS = 120


def say(msg: str) -> None:
    print(f"==> {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], env: dict[str, str] | None = None) -> bool:
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    full = dict(os.environ)
    if env:
        full.update(env)
    return subprocess.run(cmd, cwd=ROOT, env=full).returncode == 0


def members() -> list[dict]:
    """Workspace members in dependency order (a crate after every workspace crate it uses)."""
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--locked"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    meta = json.loads(out)
    ids = set(meta["workspace_members"])
    pkgs = {p["name"]: p for p in meta["packages"] if p["id"] in ids}
    crates = {}
    for name, p in pkgs.items():
        deps = sorted({d["name"] for d in p["dependencies"] if d["name"] in pkgs and d["kind"] != "dev"})
        crates[name] = {
            "name": name,
            "version": p["version"],
            "publish": p["publish"] != [],
            "deps": deps,
            # With dev-dependencies: what a change can break the tests of.
            "all_deps": sorted({d["name"] for d in p["dependencies"] if d["name"] in pkgs}),
            "default_features": bool(p["features"].get("default")),
            "rust_version": p.get("rust_version"),
            "run_examples": ((p.get("metadata") or {}).get("ci") or {}).get("run-examples", []),
            "dir": os.path.relpath(os.path.dirname(p["manifest_path"]), ROOT),
        }
    ordered: list[dict] = []
    seen: set[str] = set()

    def visit(n: str) -> None:
        if n in seen:
            return
        seen.add(n)
        for d in crates[n]["deps"]:
            visit(d)
        ordered.append(crates[n])

    for n in sorted(crates):
        visit(n)
    return ordered


def closure(names: list[str], by_name: dict[str, dict]) -> set[str]:
    """The named crates and every workspace crate they need, dev-dependencies included (a
    versioned dev-dependency must resolve in the publish dry run too)."""
    out: set[str] = set()
    todo = list(names)
    while todo:
        n = todo.pop()
        if n in out:
            continue
        out.add(n)
        todo.extend(by_name[n]["all_deps"])
    return out


def changed(base: str, crates: list[dict]) -> list[str]:
    """Crates whose files changed since `base`, plus every crate that depends on one of them.
    A change outside crates/ (root manifest, lock file, proto/, scripts) selects every crate."""
    files = subprocess.run(
        ["git", "diff", "--name-only", f"{base}...HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    direct = set()
    for f in files:
        if f.startswith(("Cargo.toml", "Cargo.lock", "proto/", "rust-toolchain", ".cargo/")):
            return [c["name"] for c in crates]
        for c in crates:
            if f.startswith(c["dir"] + "/"):
                direct.add(c["name"])
    picked = set(direct)
    grew = True
    while grew:
        grew = False
        for c in crates:
            if c["name"] not in picked and picked.intersection(c["all_deps"]):
                picked.add(c["name"])
                grew = True
    return [c["name"] for c in crates if c["name"] in picked]


def installed_toolchain(version: str) -> str | None:
    out = subprocess.run(["rustup", "toolchain", "list"], capture_output=True, text=True).stdout
    short = ".".join(version.split(".")[:2])
    for line in out.splitlines():
        tc = line.split()[0] if line.split() else ""
        if tc.startswith(f"{version}-") or tc.startswith(f"{short}-") or tc in (version, short) or tc.startswith(f"{short}.0-"):
            return tc.split("-")[0]
    return None


def tag_exists(tag: str) -> bool:
    return subprocess.run(["git", "rev-parse", "-q", "--verify", f"refs/tags/{tag}"], cwd=ROOT,
                          capture_output=True).returncode == 0


def last_release_tag(name: str) -> str | None:
    out = subprocess.run(["git", "tag", "--list", f"{name}-v*", "--sort=-v:refname"], cwd=ROOT,
                         capture_output=True, text=True).stdout.split()
    return out[0] if out else None


def main(argv: list[str]) -> int:
    steps = list(STEPS)
    verify = False
    picked: list[str] = []
    base = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(open(os.path.join(ROOT, "scripts", "ci-crates")).read().split("set -euo")[0])
            return 0
        if a == "--only":
            steps = argv[i + 1].split(",")
            i += 1
        elif a == "--skip":
            skip = set(argv[i + 1].split(","))
            steps = [s for s in steps if s not in skip]
            i += 1
        elif a == "--verify":
            verify = True
        elif a == "--changed-since":
            base = argv[i + 1]
            i += 1
        elif a == "--list":
            print(json.dumps([c["name"] for c in members()]))
            return 0
        elif a.startswith("-"):
            print(f"ci-crates: unknown option {a} (see scripts/ci-crates --help)", file=sys.stderr)
            return 2
        else:
            picked.append(a)
        i += 1
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        print(f"ci-crates: unknown step {unknown[0]} (steps: {', '.join(STEPS)})", file=sys.stderr)
        return 2

    crates = members()
    by_name = {c["name"]: c for c in crates}
    if base is not None:
        sel = changed(base, crates)
        if not picked:
            print(json.dumps(sel))
            return 0
    for p in picked:
        if p not in by_name:
            print(f"ci-crates: {p} is not a workspace member ({', '.join(by_name)})", file=sys.stderr)
            return 2
    selected = [c for c in crates if not picked or c["name"] in picked]
    names = [c["name"] for c in selected]
    failed: list[str] = []
    started = time.monotonic()

    if "docs" in steps:
        # One cargo call per crate, as docs.rs builds them: in one call, a binary and another
        # crate's library of the same name (`e2b`) would collide in target/doc.
        flags = (os.environ.get("RUSTDOCFLAGS", "") + " -D warnings").strip()
        for n in names:
            say(f"cargo doc -D warnings: {n}")
            if not run(["cargo", "doc", "--no-deps", "--locked", "-p", n], {"RUSTDOCFLAGS": flags}):
                failed.append(f"docs {n}")

    if "doctests" in steps:
        say(f"cargo test --doc: {' '.join(names)}")
        args = ["cargo", "test", "--doc", "--locked"]
        for c in selected:
            # A binary-only crate has no doctests (and `--doc` refuses it).
            if os.path.exists(os.path.join(ROOT, c["dir"], "src", "lib.rs")):
                args += ["-p", c["name"]]
        if not run(args):
            failed.append("doctests")

    if "features" in steps:
        for c in selected:
            if not c["default_features"]:
                print(f"    {c['name']}: no default features; --no-default-features is the normal build",
                      file=sys.stderr)
                continue
            say(f"cargo check --no-default-features: {c['name']}")
            if not run(["cargo", "check", "-p", c["name"], "--no-default-features", "--locked"]):
                failed.append(f"features {c['name']}")

    if "examples" in steps:
        say(f"cargo build --examples: {' '.join(names)}")
        args = ["cargo", "build", "--examples", "--locked"]
        for n in names:
            args += ["-p", n]
        # `Sandbox::local()` in the examples runs the isolated daemon binary (found next to them).
        if not run(args) or not run(["cargo", "build", "-p", "e2b-envd", "--bin", "e2b-envd", "--locked"]):
            failed.append("examples build")
        else:
            target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
            # The examples that embed the daemon must not reach for another envd or the cloud.
            env = {k: v for k, v in os.environ.items()
                   if k not in ("E2B_SANDBOX_URL", "E2B_ACCESS_TOKEN", "E2B_API_KEY", "E2B_API_URL")}
            for c in selected:
                for ex in c["run_examples"]:
                    exe = os.path.join(target, "debug", "examples", ex)
                    say(f"example {c['name']}/{ex}")
                    t0 = time.monotonic()
                    try:
                        code = subprocess.run([exe], cwd=ROOT, env=env,
                                              timeout=EXAMPLE_HANG_GUARD_SECS).returncode
                    except subprocess.TimeoutExpired:
                        print(f"ci-crates: example {c['name']}/{ex} still ran after "
                              f"{EXAMPLE_HANG_GUARD_SECS} s (hang guard): it was stopped", file=sys.stderr)
                        code = -1
                    except FileNotFoundError:
                        print(f"ci-crates: {c['name']} lists example {ex} in [package.metadata.ci] "
                              f"run-examples, but {exe} was not built: fix the name", file=sys.stderr)
                        code = -1
                    print(f"    {c['name']}/{ex}: exit {code} in {time.monotonic() - t0:.1f} s",
                          file=sys.stderr)
                    if code != 0:
                        failed.append(f"example {c['name']}/{ex}")

    if "publish" in steps:
        pub = [c["name"] for c in selected if c["publish"]]
        if pub:
            # Every selected crate and the workspace crates it needs, so the internal pins
            # resolve inside the one dry run.
            needed = closure(pub, by_name)
            order = [c["name"] for c in crates if c["name"] in needed and c["publish"]]
            say(f"cargo publish --dry-run ({'verified builds' if verify else 'no build'}): {' '.join(order)}")
            args = ["cargo", "publish", "--dry-run", "--locked"]
            if not verify:
                args.append("--no-verify")
            if os.environ.get("CI_CRATES_ALLOW_DIRTY"):
                args.append("--allow-dirty")
            for n in order:
                args += ["-p", n]
            if not run(args):
                failed.append("publish")

    if "semver" in steps:
        tool = shutil.which("cargo-semver-checks")
        for c in selected:
            if not c["publish"]:
                continue
            tag = last_release_tag(c["name"])
            if tag is None:
                print(f"    {c['name']}: no release yet (no tag {c['name']}-v*): semver check skipped "
                      "(see VERSIONING.md)", file=sys.stderr)
                continue
            if tool is None:
                print(f"ci-crates: {c['name']} has release {tag} but cargo-semver-checks is not installed: "
                      "cargo install --locked cargo-semver-checks", file=sys.stderr)
                failed.append(f"semver {c['name']}")
                continue
            say(f"cargo semver-checks {c['name']} against {tag}")
            if not run(["cargo", "semver-checks", "-p", c["name"], "--baseline-rev", tag]):
                failed.append(f"semver {c['name']}")

    if "msrv" in steps:
        versions = sorted({c["rust_version"] for c in selected if c["rust_version"]})
        for v in versions:
            group = [c["name"] for c in selected if c["rust_version"] == v]
            tc = installed_toolchain(v)
            if tc is None:
                msg = (f"MSRV {v} toolchain is not installed (rustup toolchain list): MSRV build of "
                       f"{len(group)} crate(s) skipped; install it with `rustup toolchain install {v}`")
                if os.environ.get("CI_CRATES_REQUIRE_MSRV") == "1":
                    print(f"ci-crates: {msg}", file=sys.stderr)
                    failed.append(f"msrv {v}")
                else:
                    print(f"    {msg}", file=sys.stderr)
                continue
            say(f"cargo +{tc} check (MSRV {v}): {' '.join(group)}")
            args = ["cargo", f"+{tc}", "check", "--locked"]
            for n in group:
                args += ["-p", n]
            # Its own target dir: a second toolchain would evict the main build's artifacts.
            target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
            if not run(args, {"CARGO_TARGET_DIR": os.path.join(target, f"msrv-{tc}")}):
                failed.append(f"msrv {v}")

    if "changesets" in steps:
        say("scripts/changeset-version --dry-run")
        if not run([os.path.join(ROOT, "scripts", "changeset-version"), "--dry-run"]):
            failed.append("changesets")

    say(f"ci-crates: {len(selected)} crate(s) in {time.monotonic() - started:.0f} s; "
        + ("all checks passed" if not failed else f"FAILED: {', '.join(failed)}"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
