//! The sandbox backend over envd, through `e2b-commands`: commands stream their output as events;
//! file chunks move through small POSIX `sh` scripts run as processes (offset reads with
//! `tail -c +N | head -c L`, writes from stdin with temp file + `mv` for atomic replace), so
//! memory stays bounded by one chunk and the bytes are exact.

use bytes::Bytes;
use e2b_commands::{CommandEvent, CommandLine, CommandOptions};
use e2b_envd_version::Feature;
use futures::StreamExt;

use crate::backend::{
    ExitInfo, FileChunk, FileStat, Killer, ProcEvent, RunSpec, SandboxBackend, Spawned, WriteMode,
};
use crate::error::{BackendError, FileError, FileErrorKind};

/// Bytes per stdin message when writing a chunk into the sandbox.
const STDIN_PIECE: usize = 1024 * 1024;

/// Exit codes the file scripts use for DeepAgents' literals.
const RC_NOT_FOUND: i32 = 10;
const RC_IS_DIR: i32 = 11;
const RC_PERMISSION: i32 = 12;
const RC_INVALID_PATH: i32 = 13;

/// Shared prologue: classify a missing path (a non-directory ancestor → invalid_path).
const MISSING: &str = r#"missing() {
  a=$(dirname -- "$1")
  while [ ! -e "$a" ] && [ "$a" != / ]; do a=$(dirname -- "$a"); done
  [ -d "$a" ] || exit 13
  [ -x "$a" ] || exit 12
  exit 10
}
"#;

const STAT_SH: &str = r#"p=$1
if [ ! -e "$p" ]; then missing "$p"; fi
if [ -d "$p" ]; then echo d 0; else printf 'f %s\n' "$(stat -c %s -- "$p")"; fi
"#;

const READ_SH: &str = r#"p=$1; off=$2; len=$3
if [ ! -e "$p" ]; then missing "$p"; fi
[ -d "$p" ] && exit 11
[ -r "$p" ] || exit 12
size=$(stat -c %s -- "$p") || exit 12
printf '%s\n' "$size"
[ "$len" -gt 0 ] || exit 0
tail -c +$((off + 1)) -- "$p" | head -c "$len"
"#;

const WRITE_SH: &str = r#"p=$1; mode=$2; off=$3
[ -d "$p" ] && exit 11
d=$(dirname -- "$p")
if [ ! -d "$d" ]; then
  e=$d
  while [ ! -e "$e" ] && [ "$e" != / ]; do e=$(dirname -- "$e"); done
  [ -d "$e" ] || exit 13
  mkdir -p -- "$d" 2>/dev/null || exit 12
fi
case $mode in
  replace)
    t="$d/.$(basename -- "$p").exec-server-tmp.$$"
    if ! cat > "$t" 2>/dev/null; then rm -f -- "$t"; exit 12; fi
    if ! mv -f -- "$t" "$p" 2>/dev/null; then rm -f -- "$t"; exit 12; fi ;;
  append)
    if [ -e "$p" ] && [ ! -w "$p" ]; then exit 12; fi
    cat >> "$p" 2>/dev/null || exit 12 ;;
  at)
    [ -e "$p" ] || exit 10
    [ -w "$p" ] || exit 12
    truncate -s "$off" -- "$p" 2>/dev/null || exit 12
    cat >> "$p" 2>/dev/null || exit 12 ;;
esac
stat -c %s -- "$p"
"#;

/// The backend: one `e2b::Sandbox` (its `Commands` client).
pub(crate) struct EnvdBackend {
    sandbox: e2b::Sandbox,
}

impl EnvdBackend {
    /// A backend on `sandbox` (kept alive, and for a local one its daemon, as long as the server).
    pub(crate) fn new(sandbox: e2b::Sandbox) -> Self {
        Self { sandbox }
    }

    /// A backend on the envd at `url`.
    pub(crate) async fn remote(url: &str, token: Option<&str>) -> Result<Self, BackendError> {
        let mut ep = e2b_commands::EnvdEndpoint::new(url);
        if let Some(t) = token {
            ep = ep.access_token(t);
        }
        let sandbox = e2b::Sandbox::connect(ep)
            .await
            .map_err(|e| BackendError::new(format!("envd at {url}: {e}")))?;
        Ok(Self::new(sandbox))
    }

    /// A backend on a new embedded local sandbox (`Sandbox::local()`).
    pub(crate) async fn local() -> Result<Self, BackendError> {
        let sandbox = e2b::Sandbox::local().await.map_err(|e| {
            BackendError::new(format!("starting the embedded local sandbox failed: {e}"))
        })?;
        Ok(Self::new(sandbox))
    }

    fn supports(&self, f: Feature) -> bool {
        self.sandbox.envd_version().supports(f)
    }

    /// Runs a file script with `args`, feeding `stdin`, and returns (exit code, stdout, stderr).
    async fn script(
        &self,
        body: &str,
        args: &[&str],
        stdin: Option<Bytes>,
    ) -> Result<(i32, Vec<u8>, String), BackendError> {
        let mut argv = vec![
            "-c".to_owned(),
            format!("{MISSING}{body}"),
            "exec-server".to_owned(),
        ];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        let cmd = CommandLine::Exec {
            program: "/bin/sh".into(),
            args: argv,
        };
        let spec_stdin = stdin.is_some();
        let spawned = self
            .start(cmd, None, Default::default(), spec_stdin, None)
            .await?;
        let (handle, mut events) = spawned;
        let feed = async {
            if let Some(data) = stdin {
                send_all(&handle, data).await?;
                handle
                    .close_stdin()
                    .await
                    .map_err(|e| BackendError::new(format!("closing stdin failed: {e}")))?;
            }
            Ok::<(), BackendError>(())
        };
        let collect = async {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let mut code = None;
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(CommandEvent::Stdout(b)) => out.extend_from_slice(&b),
                    Ok(CommandEvent::Stderr(b)) => err.extend_from_slice(&b),
                    Ok(CommandEvent::Exit(st)) => {
                        code = Some(st.code_or_128_plus_signal());
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => return Err(BackendError::new(e.to_string())),
                }
            }
            let code = code.ok_or_else(|| {
                BackendError::new("the sandbox ended the file operation without an exit status")
            })?;
            Ok((code, out, String::from_utf8_lossy(&err).into_owned()))
        };
        let (fed, res) = tokio::join!(feed, collect);
        let res = res?;
        // A script that failed has said why (its exit code); a script that succeeded while its
        // stdin could not be fed may have written partial data, so that is an error.
        if res.0 == 0 {
            fed?;
        }
        Ok(res)
    }

    async fn start(
        &self,
        cmd: CommandLine,
        cwd: Option<String>,
        env: std::collections::HashMap<String, String>,
        stdin: bool,
        timeout: Option<std::time::Duration>,
    ) -> Result<(e2b_commands::CommandHandle, e2b_commands::CommandEvents), BackendError> {
        let mut opts = CommandOptions::new().retain_output(false);
        if stdin {
            opts = opts.stdin(true);
        } else if self.supports(Feature::Stdin) {
            opts = opts.stdin(false);
        }
        if let Some(cwd) = cwd {
            opts = opts.cwd(cwd);
        }
        for (k, v) in env {
            opts = opts.env(k, v);
        }
        opts = match timeout {
            Some(t) => opts.timeout(t),
            None => opts.no_timeout(),
        };
        let mut handle = self
            .sandbox
            .commands()
            .start_streaming(cmd, opts)
            .await
            .map_err(|e| BackendError::new(e.to_string()))?;
        let events = handle
            .take_events()
            .ok_or_else(|| BackendError::new("the command's event stream was not available"))?;
        Ok((handle, events))
    }
}

async fn send_all(handle: &e2b_commands::CommandHandle, data: Bytes) -> Result<(), BackendError> {
    let mut off = 0;
    while off < data.len() {
        let end = (off + STDIN_PIECE).min(data.len());
        handle
            .send_stdin(data.slice(off..end))
            .await
            .map_err(|e| BackendError::new(format!("writing stdin failed: {e}")))?;
        off = end;
    }
    Ok(())
}

fn classify(path: &str, code: i32, stderr: &str) -> FileError {
    let kind = match code {
        RC_NOT_FOUND => FileErrorKind::FileNotFound,
        RC_IS_DIR => FileErrorKind::IsDirectory,
        RC_PERMISSION => FileErrorKind::PermissionDenied,
        RC_INVALID_PATH => FileErrorKind::InvalidPath,
        _ => {
            return FileError::other(format!(
                "{path}: file operation failed with exit code {code}: {}",
                stderr.trim()
            ));
        }
    };
    let what = match kind {
        FileErrorKind::FileNotFound => "no such file",
        FileErrorKind::IsDirectory => "is a directory",
        FileErrorKind::PermissionDenied => "permission denied",
        FileErrorKind::InvalidPath => "a parent is not a directory",
    };
    FileError::new(kind, format!("{path}: {what}"))
}

struct HandleKiller {
    handle: std::sync::Arc<e2b_commands::CommandHandle>,
}

#[async_trait::async_trait]
impl Killer for HandleKiller {
    async fn kill(&self) -> Result<(), BackendError> {
        self.handle
            .kill()
            .await
            .map(|_| ())
            .map_err(|e| BackendError::new(e.to_string()))
    }
}

#[async_trait::async_trait]
impl SandboxBackend for EnvdBackend {
    fn sandbox_id(&self) -> String {
        self.sandbox.id().to_owned()
    }

    async fn spawn(&self, spec: RunSpec) -> Result<Spawned, BackendError> {
        let has_stdin = spec.stdin.is_some();
        let mut args = Vec::with_capacity(3);
        if spec.login_shell {
            args.push("-l".to_owned());
        }
        args.push("-c".to_owned());
        args.push(spec.cmd);
        let cmd = CommandLine::Exec {
            program: spec.shell,
            args,
        };
        let (handle, events) = self
            .start(cmd, spec.cwd, spec.env, has_stdin, spec.hard_timeout)
            .await?;
        let handle = std::sync::Arc::new(handle);
        if let Some(data) = spec.stdin {
            // Fed in the background: a program that exits without reading all of its input is
            // not an error, and output must flow while the input is written.
            let h = handle.clone();
            tokio::spawn(async move {
                if let Err(e) = send_all(&h, data).await {
                    tracing::debug!(error = %e, "stdin not fully delivered (the program may have exited)");
                }
                if let Err(e) = h.close_stdin().await {
                    tracing::debug!(error = %e, "closing stdin failed (the program may have exited)");
                }
            });
        }
        let events = events
            .filter_map(|ev| async move {
                match ev {
                    Ok(CommandEvent::Stdout(b)) => Some(Ok(ProcEvent::Stdout(b))),
                    Ok(CommandEvent::Stderr(b)) => Some(Ok(ProcEvent::Stderr(b))),
                    Ok(CommandEvent::Pty(b)) => Some(Ok(ProcEvent::Stdout(b))),
                    Ok(CommandEvent::Exit(st)) => Some(Ok(ProcEvent::Exit(ExitInfo {
                        exit_code: st.exit_code,
                        signal: st.signal,
                    }))),
                    Ok(_) => None,
                    Err(e) => Some(Err(BackendError::new(e.to_string()))),
                }
            })
            .boxed();
        Ok(Spawned {
            events,
            killer: Box::new(HandleKiller { handle }),
        })
    }

    async fn stat(&self, path: &str) -> Result<FileStat, FileError> {
        let (code, out, err) = self.script(STAT_SH, &[path], None).await?;
        if code != 0 {
            return Err(classify(path, code, &err));
        }
        let s = String::from_utf8_lossy(&out);
        let mut it = s.split_whitespace();
        let kind = it.next().unwrap_or("");
        let size = it.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        Ok(FileStat {
            is_dir: kind == "d",
            size,
        })
    }

    async fn read_chunk(&self, path: &str, offset: u64, len: u64) -> Result<FileChunk, FileError> {
        let (o, l) = (offset.to_string(), len.to_string());
        let (code, out, err) = self.script(READ_SH, &[path, &o, &l], None).await?;
        if code != 0 {
            return Err(classify(path, code, &err));
        }
        let nl = out
            .iter()
            .position(|b| *b == b'\n')
            .ok_or_else(|| FileError::other(format!("{path}: malformed read reply")))?;
        let size = std::str::from_utf8(&out[..nl])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| FileError::other(format!("{path}: malformed size in read reply")))?;
        let data = Bytes::from(out).slice(nl + 1..);
        Ok(FileChunk { data, size })
    }

    async fn write_chunk(
        &self,
        path: &str,
        data: Bytes,
        mode: WriteMode,
    ) -> Result<u64, FileError> {
        let (m, off) = match mode {
            WriteMode::Replace => ("replace", 0),
            WriteMode::Append => ("append", 0),
            WriteMode::At(o) => ("at", o),
        };
        let off = off.to_string();
        let (code, out, err) = self.script(WRITE_SH, &[path, m, &off], Some(data)).await?;
        if code != 0 {
            return Err(classify(path, code, &err));
        }
        String::from_utf8_lossy(&out)
            .trim()
            .parse()
            .map_err(|_| FileError::other(format!("{path}: malformed size after write")))
    }
}
