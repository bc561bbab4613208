//! Compatibility tools for Orchestra's current adapter (the ruska exec_server contract):
//! `read`, `write`, `edit`, `grep`, `glob`, `ls`, with its exit codes and JSON-lines output.

use base64::Engine as _;
use bytes::Bytes;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::backend::{RunSpec, SandboxBackend, WriteMode};
use crate::error::{FileError, FileErrorKind};
use crate::exec::{self, ExecLimits};

/// The most bytes `read` and `edit` load from a file.
const MAX_TEXT_FILE: u64 = 10 * 1024 * 1024;

/// Arguments of `read`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ReadArgs {
    /// Absolute path of the file.
    pub(crate) path: String,
    /// First line to show, 0-based (default 0).
    #[serde(default)]
    pub(crate) offset: Option<u64>,
    /// Most lines to show (default 2000).
    #[serde(default)]
    pub(crate) limit: Option<u64>,
}

/// Arguments of `write`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct WriteArgs {
    /// Absolute path of the file; parents are created, an existing file is replaced.
    pub(crate) path: String,
    /// The text to write.
    pub(crate) content: String,
}

/// Arguments of `edit`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct EditArgs {
    /// Absolute path of the file.
    pub(crate) path: String,
    /// The exact text to replace.
    pub(crate) old_string: String,
    /// The replacement.
    pub(crate) new_string: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    pub(crate) replace_all: Option<bool>,
}

/// Arguments of `grep`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct GrepArgs {
    /// The literal text to search for.
    pub(crate) pattern: String,
    /// File or directory to search (default: the working directory).
    #[serde(default)]
    pub(crate) path: Option<String>,
    /// Only files whose name matches this glob (e.g. `*.py`).
    #[serde(default)]
    pub(crate) glob: Option<String>,
}

/// Arguments of `glob`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct GlobArgs {
    /// A glob pattern; `**` matches across directories.
    pub(crate) pattern: String,
    /// The directory the pattern is relative to (default `/`).
    #[serde(default)]
    pub(crate) path: Option<String>,
}

/// Arguments of `ls`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct LsArgs {
    /// The directory to list.
    pub(crate) path: String,
}

/// A compat tool's outcome: its text and its exit code.
#[derive(Debug)]
pub(crate) struct CompatOut {
    pub(crate) text: String,
    pub(crate) exit_code: i32,
}

fn out(text: impl Into<String>, exit_code: i32) -> CompatOut {
    CompatOut {
        text: text.into(),
        exit_code,
    }
}

async fn load_text(backend: &dyn SandboxBackend, path: &str) -> Result<String, FileError> {
    crate::files::validate_path(path)?;
    let stat = backend.stat(path).await?;
    if stat.is_dir {
        return Err(FileError::new(
            FileErrorKind::IsDirectory,
            format!("{path} is a directory"),
        ));
    }
    let chunk = backend.read_chunk(path, 0, MAX_TEXT_FILE).await?;
    Ok(String::from_utf8_lossy(&chunk.data).into_owned())
}

fn file_error_text(path: &str, e: &FileError) -> String {
    match e.kind {
        Some(FileErrorKind::FileNotFound) => format!("Error: File '{path}' not found"),
        _ => format!("Error: {e}"),
    }
}

/// `read`: the file in `cat -n` form. Missing file: exit 1.
pub(crate) async fn read(backend: &dyn SandboxBackend, a: ReadArgs) -> CompatOut {
    let text = match load_text(backend, &a.path).await {
        Ok(t) => t,
        Err(e) => return out(file_error_text(&a.path, &e), 1),
    };
    let offset = a.offset.unwrap_or(0) as usize;
    let limit = a.limit.unwrap_or(2000) as usize;
    let mut s = String::new();
    for (i, line) in text.lines().enumerate().skip(offset).take(limit) {
        s.push_str(&format!("{:>6}\t{}\n", i + 1, line));
    }
    out(s, 0)
}

/// `write`: replace the file with `content`.
pub(crate) async fn write(backend: &dyn SandboxBackend, a: WriteArgs) -> CompatOut {
    if let Err(e) = crate::files::validate_path(&a.path) {
        return out(file_error_text(&a.path, &e), 1);
    }
    let n = a.content.len();
    match backend
        .write_chunk(
            &a.path,
            Bytes::from(a.content.into_bytes()),
            WriteMode::Replace,
        )
        .await
    {
        Ok(_) => out(format!("Wrote {n} bytes to {}", a.path), 0),
        Err(e) => out(file_error_text(&a.path, &e), 1),
    }
}

/// `edit`: 0 ok, 1 old_string not found, 2 several matches without replace_all, 3 file missing.
pub(crate) async fn edit(backend: &dyn SandboxBackend, a: EditArgs) -> CompatOut {
    let text = match load_text(backend, &a.path).await {
        Ok(t) => t,
        Err(e) if e.kind == Some(FileErrorKind::FileNotFound) => {
            return out(file_error_text(&a.path, &e), 3);
        }
        Err(e) => return out(file_error_text(&a.path, &e), 1),
    };
    if a.old_string.is_empty() {
        return out("Error: old_string is empty", 1);
    }
    let count = text.matches(&a.old_string).count();
    if count == 0 {
        return out(
            format!("Error: String not found in file: '{}'", a.old_string),
            1,
        );
    }
    let all = a.replace_all.unwrap_or(false);
    if count > 1 && !all {
        return out(
            format!(
                "Error: String '{}' appears {count} times in file. Use replace_all=true to replace all instances, or provide a more specific string with surrounding context.",
                a.old_string
            ),
            2,
        );
    }
    let new = if all {
        text.replace(&a.old_string, &a.new_string)
    } else {
        text.replacen(&a.old_string, &a.new_string, 1)
    };
    match backend
        .write_chunk(&a.path, Bytes::from(new.into_bytes()), WriteMode::Replace)
        .await
    {
        Ok(_) => out(
            format!(
                "Successfully replaced {count} occurrence{} in '{}'",
                if count == 1 { "" } else { "s" },
                a.path
            ),
            0,
        ),
        Err(e) => out(file_error_text(&a.path, &e), 1),
    }
}

/// Single-quotes `s` for `sh`.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

async fn run_script(
    backend: &dyn SandboxBackend,
    cmd: String,
    limits: &ExecLimits,
) -> Result<(Vec<u8>, i32), String> {
    let spec = RunSpec::sh(cmd);
    let o = exec::run(
        backend,
        spec,
        limits.max_timeout.min(std::time::Duration::from_secs(300)),
        limits,
        tokio_util::sync::CancellationToken::new(),
        None,
        true,
    )
    .await
    .map_err(|e| e.to_string())?;
    let (stdout, _stderr) = o.legacy.unwrap_or_default();
    Ok((stdout, o.exit_code))
}

/// `grep`: JSON lines `{"path","line","text"}`; exit 1 when nothing matches.
pub(crate) async fn grep(
    backend: &dyn SandboxBackend,
    a: GrepArgs,
    limits: &ExecLimits,
) -> CompatOut {
    let path = a.path.unwrap_or_else(|| ".".into());
    let include = a
        .glob
        .map(|g| format!(" --include={}", sh_quote(&g)))
        .unwrap_or_default();
    let cmd = format!(
        "grep -rHnIZF{include} -e {} -- {}",
        sh_quote(&a.pattern),
        sh_quote(&path)
    );
    let (stdout, code) = match run_script(backend, cmd, limits).await {
        Ok(r) => r,
        Err(e) => return out(format!("Error: {e}"), 2),
    };
    if code != 0 {
        let text = if code == 1 {
            String::new()
        } else {
            format!("Error: grep failed for {path} (exit {code})")
        };
        return out(text, code);
    }
    let mut s = String::new();
    for rec in stdout.split(|b| *b == b'\n').filter(|r| !r.is_empty()) {
        let Some(nul) = rec.iter().position(|b| *b == 0) else {
            continue;
        };
        let file = String::from_utf8_lossy(&rec[..nul]);
        let rest = &rec[nul + 1..];
        let Some(colon) = rest.iter().position(|b| *b == b':') else {
            continue;
        };
        let line: u64 = String::from_utf8_lossy(&rest[..colon]).parse().unwrap_or(0);
        let text = String::from_utf8_lossy(&rest[colon + 1..]);
        s.push_str(&serde_json::json!({"path": file, "line": line, "text": text}).to_string());
        s.push('\n');
    }
    out(s, 0)
}

const GLOB_PY: &str = r#"
import base64, glob, json, os, sys
a = json.loads(base64.b64decode(sys.argv[1]))
root = a["path"]
if not os.path.isdir(root):
    print(json.dumps({"error": "not a directory: " + root}))
    sys.exit(1)
for p in sorted(glob.glob(os.path.join(glob.escape(root), a["pattern"]), recursive=True)):
    try:
        st = os.stat(p)
    except OSError:
        continue
    print(json.dumps({"path": p, "is_dir": os.path.isdir(p), "size": st.st_size, "mtime": st.st_mtime}))
"#;

const LS_PY: &str = r#"
import base64, json, os, sys
a = json.loads(base64.b64decode(sys.argv[1]))
root = a["path"]
if not os.path.isdir(root):
    print(json.dumps({"error": "not a directory: " + root}))
    sys.exit(1)
for e in sorted(os.scandir(root), key=lambda e: e.name):
    print(json.dumps({"path": e.path, "is_dir": e.is_dir()}))
"#;

fn python_cmd(script: &str, args: &serde_json::Value) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    format!(
        "python3 -c \"import base64;exec(base64.b64decode('{}'))\" {}",
        b64.encode(script),
        sh_quote(&b64.encode(args.to_string()))
    )
}

/// `glob`: JSON lines `{"path","is_dir","size","mtime"}`.
pub(crate) async fn glob(
    backend: &dyn SandboxBackend,
    a: GlobArgs,
    limits: &ExecLimits,
) -> CompatOut {
    let args =
        serde_json::json!({"pattern": a.pattern, "path": a.path.unwrap_or_else(|| "/".into())});
    match run_script(backend, python_cmd(GLOB_PY, &args), limits).await {
        Ok((stdout, code)) => out(String::from_utf8_lossy(&stdout).into_owned(), code),
        Err(e) => out(format!("Error: {e}"), 2),
    }
}

/// `ls`: JSON lines `{"path","is_dir"}`; exit 1 when the directory is missing.
pub(crate) async fn ls(backend: &dyn SandboxBackend, a: LsArgs, limits: &ExecLimits) -> CompatOut {
    let args = serde_json::json!({"path": a.path});
    match run_script(backend, python_cmd(LS_PY, &args), limits).await {
        Ok((stdout, code)) => out(String::from_utf8_lossy(&stdout).into_owned(), code),
        Err(e) => out(format!("Error: {e}"), 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("a'b"), r"'a'\''b'");
        assert_eq!(sh_quote(""), "''");
    }
}
