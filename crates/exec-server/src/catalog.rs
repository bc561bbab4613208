//! The tool catalog (`docs/tool-catalog.json` and `docs/tool-catalog.md`), generated from the
//! server's own tool definitions, and the freshness check CI runs on the checked-in copies.

use std::path::Path;

use serde_json::{Value, json};

/// The catalog's JSON file, relative to the repository root.
pub const CATALOG_JSON: &str = "docs/tool-catalog.json";
/// The catalog's Markdown file, relative to the repository root.
pub const CATALOG_MD: &str = "docs/tool-catalog.md";

/// The `_meta` keys of each built-in tool's results (kept next to the tools; a unit test checks
/// that every tool has an entry).
fn result_meta_keys(tool: &str) -> &'static [&'static str] {
    const EXEC: &[&str] = &[
        "exit_code",
        "truncated",
        "sandbox_id",
        "timed_out",
        "signal",
        "duration_ms",
        "stdout_bytes",
        "stderr_bytes",
        "process_id",
        "pid",
        "background",
    ];
    match tool {
        "exec_command" | "execute" => EXEC,
        "upload_file" => &[
            "sandbox_id",
            "path",
            "size",
            "sha256",
            "exit_code",
            "error",
            "message",
        ],
        "download_file" => &[
            "sandbox_id",
            "path",
            "size",
            "sha256",
            "eof",
            "exit_code",
            "error",
            "message",
        ],
        "read" | "write" | "edit" | "grep" | "glob" | "ls" => {
            &["sandbox_id", "exit_code", "truncated", "timed_out"]
        }
        "read_output" => &[
            "sandbox_id",
            "process_id",
            "next_cursor",
            "eof",
            "running",
            "exit_code",
            "signal",
            "output_lost",
            "output_bytes",
            "error",
        ],
        "write_stdin" => &["sandbox_id", "process_id", "bytes", "closed", "error"],
        "kill_process" => &[
            "sandbox_id",
            "process_id",
            "signal",
            "exit_code",
            "running",
            "error",
        ],
        "list_processes" => &["sandbox_id", "count"],
        "inspect" => &["sandbox_id", "sections", "truncated", "error"],
        "mount" => &[
            "sandbox_id",
            "mount_id",
            "name",
            "timeout_seconds",
            "clients_notified",
            "error",
        ],
        "unmount" => &[
            "sandbox_id",
            "mount_id",
            "name",
            "in_flight",
            "finished",
            "killed",
            "grace_seconds",
            "clients_notified",
            "unconfirmed",
            "error",
            "live_ids",
        ],
        _ => &[],
    }
}

/// The server flag a built-in tool needs to be registered, if any.
fn requires_flag(tool: &str) -> Option<&'static str> {
    crate::server::MOUNT_TOOLS
        .contains(&tool)
        .then_some("--allow-mount")
}

/// `v` with every object's keys in sorted order, so the catalog is the same whether or not
/// serde_json's `preserve_order` feature is unified into the build (a workspace build enables it
/// through `agent-client-protocol`; `cargo run -p e2b-exec-server` does not).
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// The catalog as JSON: every built-in tool with name, description, input and output schema,
/// annotations, the `_meta` keys of its results and the server flag it needs (`requires_flag`:
/// `--allow-mount` for `mount` and `unmount`, else null), sorted by name. Mounted tools are
/// not in it.
pub fn catalog_json() -> String {
    let tools: Vec<Value> = crate::tool_definitions()
        .into_iter()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "input_schema": sorted(Value::Object((*t.input_schema).clone())),
                "output_schema": t.output_schema.map(|s| sorted(Value::Object((*s).clone()))),
                "annotations": t.annotations,
                "result_meta_keys": result_meta_keys(&t.name),
                "requires_flag": requires_flag(&t.name),
            })
        })
        .collect();
    let doc = json!({
        "server": crate::server::SERVER_NAME,
        "generated_by": "cargo run -p e2b-exec-server --example gen-catalog",
        "tools": tools,
    });
    let mut s = serde_json::to_string_pretty(&sorted(doc)).unwrap_or_default();
    s.push('\n');
    s
}

/// The catalog as Markdown (the same content as [`catalog_json`], for people).
pub fn catalog_markdown() -> String {
    let mut md = String::from(
        "# Tool catalog of `e2b exec-server`\n\nGenerated by `cargo run -p e2b-exec-server --example gen-catalog` from the server's own tool\ndefinitions; do not edit (CI runs `scripts/check-catalog`). Machine-readable: `tool-catalog.json`.\n",
    );
    for t in crate::tool_definitions() {
        md.push_str(&format!("\n## `{}`\n\n", t.name));
        if let Some(flag) = requires_flag(&t.name) {
            md.push_str(&format!(
                "Registered only when the server runs with `{flag}` (off by default).\n\n"
            ));
        }
        md.push_str(t.description.as_deref().unwrap_or(""));
        md.push_str("\n\nResult `_meta` keys: ");
        let keys: Vec<String> = result_meta_keys(&t.name)
            .iter()
            .map(|k| format!("`{k}`"))
            .collect();
        md.push_str(&keys.join(", "));
        md.push_str("\n\nInput schema:\n\n```json\n");
        md.push_str(
            &serde_json::to_string_pretty(&sorted(Value::Object((*t.input_schema).clone())))
                .unwrap_or_default(),
        );
        md.push_str("\n```\n");
        if let Some(o) = &t.output_schema {
            md.push_str("\nOutput schema:\n\n```json\n");
            md.push_str(
                &serde_json::to_string_pretty(&sorted(Value::Object((**o).clone())))
                    .unwrap_or_default(),
            );
            md.push_str("\n```\n");
        }
    }
    md
}

/// Checks the catalog files under `root` against the tool definitions.
///
/// # Errors
///
/// A message naming each stale or missing file and the command that regenerates them.
pub fn check_catalog(root: &Path) -> Result<(), String> {
    let mut stale = Vec::new();
    for (rel, want) in [
        (CATALOG_JSON, catalog_json()),
        (CATALOG_MD, catalog_markdown()),
    ] {
        match std::fs::read_to_string(root.join(rel)) {
            Ok(have) if have == want => {}
            Ok(_) => stale.push(format!("{rel} differs from the tool definitions")),
            Err(e) => stale.push(format!("{rel} cannot be read ({e})")),
        }
    }
    if stale.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the tool catalog is stale: {}; regenerate it with `cargo run -p e2b-exec-server --example gen-catalog` and commit the result",
            stale.join("; ")
        ))
    }
}

/// Writes the catalog files under `root`.
///
/// # Errors
///
/// The I/O error of a file that could not be written.
pub fn write_catalog(root: &Path) -> std::io::Result<()> {
    std::fs::write(root.join(CATALOG_JSON), catalog_json())?;
    std::fs::write(root.join(CATALOG_MD), catalog_markdown())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_its_meta_keys() {
        for t in crate::tool_definitions() {
            assert!(!result_meta_keys(&t.name).is_empty(), "{}", t.name);
        }
    }

    #[test]
    fn the_checked_in_catalog_is_fresh_and_the_gate_catches_an_edit() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        check_catalog(&repo).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(scratch.path().join("docs")).unwrap();
        for rel in [CATALOG_JSON, CATALOG_MD] {
            std::fs::copy(repo.join(rel), scratch.path().join(rel)).unwrap();
        }
        check_catalog(scratch.path()).unwrap();
        let p = scratch.path().join(CATALOG_JSON);
        let edited = std::fs::read_to_string(&p).unwrap().replacen(
            "Run a shell command",
            "Runs a shell command",
            1,
        );
        std::fs::write(&p, edited).unwrap();
        let e = check_catalog(scratch.path()).unwrap_err();
        assert!(e.contains(CATALOG_JSON) && e.contains("gen-catalog"), "{e}");
        assert!(!e.contains(CATALOG_MD), "{e}");
    }
}
