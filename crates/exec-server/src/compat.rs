//! Compatibility tools for Orchestra's current adapter (the ruska exec_server contract):
//! `read`, `write`, `edit`, `grep`, `glob`, `ls`, with its exit codes and JSON-lines output.

use base64::Engine as _;
use bytes::Bytes;
use schemars::JsonSchema;
use serde::Deserialize;

use tokio_util::sync::CancellationToken;

use crate::backend::{RunSpec, SandboxBackend};
use crate::error::{FileError, FileErrorKind};
use crate::exec::{self, ExecLimits};

/// Arguments of `read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
pub(crate) struct WriteArgs {
    /// Absolute path of the file; parents are created, an existing file is replaced.
    pub(crate) path: String,
    /// The text to write.
    pub(crate) content: String,
}

/// Arguments of `edit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
pub(crate) struct GlobArgs {
    /// A glob pattern; `**` matches across directories.
    pub(crate) pattern: String,
    /// The directory the pattern is relative to (default `/`).
    #[serde(default)]
    pub(crate) path: Option<String>,
}

/// Arguments of `ls`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LsArgs {
    /// The directory to list.
    pub(crate) path: String,
}

/// A compat tool's outcome: its text, its exit code and whether the text was cut.
#[derive(Debug)]
pub(crate) struct CompatOut {
    pub(crate) text: String,
    pub(crate) exit_code: i32,
    /// `Some(true)` when the text was cut (always at a line boundary, with a last line saying
    /// how to get the rest); `None` for tools that never cut.
    pub(crate) truncated: Option<bool>,
}

fn out(text: impl Into<String>, exit_code: i32) -> CompatOut {
    CompatOut {
        text: text.into(),
        exit_code,
        truncated: None,
    }
}

/// Exit code of `edit` (and `read`) when the file cannot be handled whole.
pub(crate) const EXIT_CANNOT_EDIT: i32 = 4;
/// The largest file `edit` loads whole.
pub(crate) const MAX_EDIT_BYTES: u64 = 32 * 1024 * 1024;
/// Bytes read per request by `read` and `edit`.
const READ_PIECE: u64 = 1024 * 1024;
/// The most text one `read` result carries.
pub(crate) const MAX_READ_TEXT: usize = 512 * 1024;
/// The most bytes of one line `read` shows.
pub(crate) const MAX_READ_LINE: usize = 16 * 1024;

fn file_error_text(path: &str, e: &FileError) -> String {
    match e.kind {
        Some(FileErrorKind::FileNotFound) => format!("Error: File '{path}' not found"),
        _ => format!("Error: {e}"),
    }
}

/// Stats `path` and refuses anything but a regular file (`Err(exit code, text)`).
async fn regular_file(backend: &dyn SandboxBackend, path: &str) -> Result<u64, (i32, String)> {
    crate::files::validate_path(path).map_err(|e| (1, file_error_text(path, &e)))?;
    let st = backend.stat(path).await.map_err(|e| {
        let code = if e.kind == Some(FileErrorKind::FileNotFound) {
            3
        } else {
            1
        };
        (code, file_error_text(path, &e))
    })?;
    if st.is_dir {
        return Err((1, format!("Error: {path} is a directory")));
    }
    if !st.is_file {
        return Err((
            EXIT_CANNOT_EDIT,
            format!(
                "Error: {path} is not a regular file (a FIFO, socket or device?); it was not opened"
            ),
        ));
    }
    Ok(st.size)
}

/// `cat -n` rendering of lines `offset..offset+limit`, bounded in memory and output.
struct Lines {
    offset: u64,
    limit: u64,
    line_no: u64,
    shown: u64,
    cur: Vec<u8>,
    cur_cut: u64,
    text: String,
    cut_lines: u64,
    done: bool,
}

impl Lines {
    fn new(offset: u64, limit: u64) -> Self {
        Self {
            offset,
            limit,
            line_no: 0,
            shown: 0,
            cur: Vec::new(),
            cur_cut: 0,
            text: String::new(),
            cut_lines: 0,
            done: limit == 0,
        }
    }

    fn showing(&self) -> bool {
        self.line_no >= self.offset
    }

    fn end_line(&mut self) {
        if self.showing() {
            let line = String::from_utf8_lossy(&self.cur);
            self.text
                .push_str(&format!("{:>6}\t{}", self.line_no + 1, line));
            if self.cur_cut > 0 {
                self.cut_lines += 1;
                self.text.push_str(&format!(
                    " [... line cut: {} more bytes; use download_file for the raw bytes ...]",
                    self.cur_cut
                ));
            }
            self.text.push('\n');
            self.shown += 1;
            if self.shown >= self.limit || self.text.len() >= MAX_READ_TEXT {
                self.done = true;
            }
        }
        self.cur.clear();
        self.cur_cut = 0;
        self.line_no += 1;
    }

    /// Feeds bytes; returns how many were consumed (all, unless done).
    fn feed(&mut self, mut data: &[u8]) -> usize {
        let total = data.len();
        while !data.is_empty() && !self.done {
            let (seg, nl) = match memchr::memchr(b'\n', data) {
                Some(i) => (&data[..i], true),
                None => (data, false),
            };
            if self.showing() {
                let room = MAX_READ_LINE.saturating_sub(self.cur.len());
                let n = room.min(seg.len());
                self.cur.extend_from_slice(&seg[..n]);
                self.cur_cut += (seg.len() - n) as u64;
            }
            data = &data[seg.len() + usize::from(nl)..];
            if nl {
                self.end_line();
            }
        }
        total - data.len()
    }
}

/// `read`: the file in `cat -n` form. Missing file: exit 1. Never cut silently.
pub(crate) async fn read(backend: &dyn SandboxBackend, a: ReadArgs) -> CompatOut {
    let size = match regular_file(backend, &a.path).await {
        Ok(s) => s,
        Err((code, text)) => return out(text, if code == 3 { 1 } else { code }),
    };
    let mut lines = Lines::new(a.offset.unwrap_or(0), a.limit.unwrap_or(2000));
    let mut pos = 0u64;
    while pos < size && !lines.done {
        let chunk = match backend.read_chunk(&a.path, pos, READ_PIECE).await {
            Ok(c) => c,
            Err(e) => return out(file_error_text(&a.path, &e), 1),
        };
        if chunk.data.is_empty() {
            break;
        }
        let used = lines.feed(&chunk.data);
        pos += used as u64;
    }
    let more = pos < size;
    if !more && !lines.done && (!lines.cur.is_empty() || lines.cur_cut > 0) {
        lines.end_line();
    }
    let truncated = more || lines.cut_lines > 0;
    let mut text = lines.text;
    if more {
        text.push_str(&format!(
            "[... read: stopped after line {} ({} of {size} bytes read); call read with offset={} to continue ...]\n",
            lines.line_no, pos, lines.line_no
        ));
    }
    CompatOut {
        text,
        exit_code: 0,
        truncated: Some(truncated),
    }
}

/// `write`: replace the file with `content`.
pub(crate) async fn write(backend: &dyn SandboxBackend, a: WriteArgs) -> CompatOut {
    if let Err(e) = crate::files::validate_path(&a.path) {
        return out(file_error_text(&a.path, &e), 1);
    }
    let n = a.content.len();
    match backend
        .write_file(&a.path, Bytes::from(a.content.into_bytes()))
        .await
    {
        Ok(_) => out(format!("Wrote {n} bytes to {}", a.path), 0),
        Err(e) => out(file_error_text(&a.path, &e), 1),
    }
}

/// Non-overlapping occurrences of `needle` in `hay`.
fn find_all(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    memchr::memmem::find_iter(hay, needle).fold(Vec::new(), |mut v, i| {
        if v.last().is_none_or(|&last| i >= last + needle.len()) {
            v.push(i);
        }
        v
    })
}

/// `edit`: 0 ok, 1 old_string not found, 2 several matches without replace_all, 3 file
/// missing, 4 the file cannot be edited whole (left untouched). Bytes outside the replaced
/// text are kept exactly.
pub(crate) async fn edit(backend: &dyn SandboxBackend, a: EditArgs) -> CompatOut {
    let size = match regular_file(backend, &a.path).await {
        Ok(s) => s,
        Err((code, text)) => return out(text, code),
    };
    if a.old_string.is_empty() {
        return out("Error: old_string is empty", 1);
    }
    if size > MAX_EDIT_BYTES {
        return out(
            format!(
                "Error: {} is {size} bytes; edit loads files of at most {MAX_EDIT_BYTES} bytes whole, so it was left untouched. Edit it with exec_command (for example sed -i or a python script) instead",
                a.path
            ),
            EXIT_CANNOT_EDIT,
        );
    }
    let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    loop {
        let chunk = match backend
            .read_chunk(&a.path, data.len() as u64, READ_PIECE)
            .await
        {
            Ok(c) => c,
            Err(e) => return out(file_error_text(&a.path, &e), 1),
        };
        if chunk.size > MAX_EDIT_BYTES {
            return out(
                format!(
                    "Error: {} grew to {} bytes while it was read; it was left untouched",
                    a.path, chunk.size
                ),
                EXIT_CANNOT_EDIT,
            );
        }
        data.extend_from_slice(&chunk.data);
        if chunk.data.is_empty() || data.len() as u64 >= chunk.size {
            break;
        }
    }
    let old = a.old_string.as_bytes();
    let hits = find_all(&data, old);
    let count = hits.len();
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
    let new = a.new_string.as_bytes();
    let mut edited = Vec::with_capacity(data.len() + count * new.len());
    let mut last = 0;
    for &i in &hits {
        edited.extend_from_slice(&data[last..i]);
        edited.extend_from_slice(new);
        last = i + old.len();
    }
    edited.extend_from_slice(&data[last..]);
    match backend.write_file(&a.path, Bytes::from(edited)).await {
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

/// A helper command's stdout (whole lines only), whether it was cut, its exit code and stderr.
struct ScriptOut {
    stdout: Vec<u8>,
    cut: bool,
    code: i32,
    stderr: String,
}

async fn run_script(
    backend: &dyn SandboxBackend,
    cmd: String,
    limits: &ExecLimits,
    ct: CancellationToken,
) -> Result<ScriptOut, String> {
    let spec = RunSpec::sh(cmd);
    let o = exec::run(backend, spec, limits.max_timeout, limits, ct, None, true)
        .await
        .map_err(|e| e.to_string())?;
    if o.cancelled {
        return Err("cancelled".into());
    }
    if o.timed_out {
        return Err(format!(
            "timed out after {} s",
            limits.max_timeout.as_secs_f64()
        ));
    }
    let (stdout, stderr) = o.legacy.unwrap_or_default();
    let (mut stdout, cut) = match o.stdout_head {
        Some(head) => (head, true),
        None => (stdout, false),
    };
    if cut {
        // Keep whole lines only.
        let end = memchr::memrchr(b'\n', &stdout).map_or(0, |i| i + 1);
        stdout.truncate(end);
    }
    Ok(ScriptOut {
        stdout,
        cut,
        code: o.exit_code,
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

fn cut_note(tool: &str, what: &str) -> String {
    format!(
        "{{\"truncated\":true,\"note\":\"{tool}: the output was cut at a line boundary; {what}\"}}\n"
    )
}

/// `grep`: JSON lines `{"path","line","text"}`; exit 1 when nothing matches; exit 2 on an error
/// (unreadable files), with the matches found kept.
pub(crate) async fn grep(
    backend: &dyn SandboxBackend,
    a: GrepArgs,
    limits: &ExecLimits,
    ct: CancellationToken,
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
    let r = match run_script(backend, cmd, limits, ct).await {
        Ok(r) => r,
        Err(e) => return out(format!("Error: {e}"), 2),
    };
    if r.code == 1 && r.stdout.is_empty() {
        return out(String::new(), 1);
    }
    let mut s = String::new();
    for rec in r.stdout.split(|b| *b == b'\n').filter(|r| !r.is_empty()) {
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
    if r.cut {
        s.push_str(&cut_note(
            "grep",
            "narrow the search with a more specific pattern, a deeper path or a glob",
        ));
    }
    let code = match r.code {
        0 | 1 => 0,
        c => {
            s.push_str(&format!(
                "Error: grep failed for {path} (exit {c}): {}\n",
                r.stderr.trim()
            ));
            2
        }
    };
    CompatOut {
        text: s,
        exit_code: code,
        truncated: Some(r.cut),
    }
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

fn listing(tool: &str, r: ScriptOut, what: &str) -> CompatOut {
    let mut text = String::from_utf8_lossy(&r.stdout).into_owned();
    if r.cut {
        text.push_str(&cut_note(tool, what));
    }
    CompatOut {
        text,
        exit_code: r.code,
        truncated: Some(r.cut),
    }
}

/// `glob`: JSON lines `{"path","is_dir","size","mtime"}`.
pub(crate) async fn glob(
    backend: &dyn SandboxBackend,
    a: GlobArgs,
    limits: &ExecLimits,
    ct: CancellationToken,
) -> CompatOut {
    let args =
        serde_json::json!({"pattern": a.pattern, "path": a.path.unwrap_or_else(|| "/".into())});
    match run_script(backend, python_cmd(GLOB_PY, &args), limits, ct).await {
        Ok(r) => listing("glob", r, "use a narrower pattern or a deeper path"),
        Err(e) => out(format!("Error: {e}"), 2),
    }
}

/// `ls`: JSON lines `{"path","is_dir"}`; exit 1 when the directory is missing.
pub(crate) async fn ls(
    backend: &dyn SandboxBackend,
    a: LsArgs,
    limits: &ExecLimits,
    ct: CancellationToken,
) -> CompatOut {
    let args = serde_json::json!({"path": a.path});
    match run_script(backend, python_cmd(LS_PY, &args), limits, ct).await {
        Ok(r) => listing("ls", r, "list a subdirectory, or use glob with a pattern"),
        Err(e) => out(format!("Error: {e}"), 2),
    }
}

/// One of the searching tools (`grep`, `glob`, `ls`): each runs a helper command in the
/// sandbox, so the server runs them through one path.
pub(crate) enum Search {
    Grep(GrepArgs),
    Glob(GlobArgs),
    Ls(LsArgs),
}

impl Search {
    /// The tool's name.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Grep(_) => "grep",
            Self::Glob(_) => "glob",
            Self::Ls(_) => "ls",
        }
    }

    /// Runs the search; the helper command stops itself on `ct` and at `limits.max_timeout`.
    pub(crate) async fn run(
        self,
        backend: &dyn SandboxBackend,
        limits: &ExecLimits,
        ct: CancellationToken,
    ) -> CompatOut {
        match self {
            Self::Grep(a) => grep(backend, a, limits, ct).await,
            Self::Glob(a) => glob(backend, a, limits, ct).await,
            Self::Ls(a) => ls(backend, a, limits, ct).await,
        }
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
