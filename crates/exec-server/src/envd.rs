//! The sandbox backend over envd: commands through `e2b-commands` (output streamed as events),
//! files through `e2b-filesystem` over envd's file API (`Stat`, range reads of `GET /files`,
//! atomic `POST /files` uploads, `POST /files/compose` to publish staged chunks), so no shell
//! or coreutils are needed in the image and memory stays bounded by one chunk.

use bytes::Bytes;
use e2b_commands::{CommandEvent, CommandLine, CommandOptions};
use e2b_envd_version::Feature;
use e2b_filesystem::{FileType, FilesystemError};
use futures::StreamExt;

use crate::backend::{
    ExitInfo, FileChunk, FileStat, Killer, ProcEvent, RunSpec, SandboxBackend, Spawned,
};
use crate::error::{BackendError, FileError, FileErrorKind};

/// Bytes per stdin message when writing a command's stdin.
const STDIN_PIECE: usize = 1024 * 1024;

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

    /// A backend on a new local sandbox (isolated unless `opts` say otherwise).
    pub(crate) async fn local(opts: e2b::LocalOptions) -> Result<Self, BackendError> {
        let sandbox = e2b::Sandbox::local_with_options(opts)
            .await
            .map_err(|e| match e {
                e2b::SandboxError::Isolated(m) => BackendError::new(format!(
                    "the isolated local sandbox could not start: {m} (--isolation none runs \
                     without isolation, on this machine)"
                )),
                e => BackendError::new(format!("starting the local sandbox failed: {e}")),
            })?;
        Ok(Self::new(sandbox))
    }

    fn supports(&self, f: Feature) -> bool {
        self.sandbox.envd_version().supports(f)
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

/// Maps a file API error to DeepAgents' literals.
fn classify(path: &str, e: FilesystemError) -> FileError {
    let kind = match &e {
        FilesystemError::NotFound { .. } => Some(FileErrorKind::FileNotFound),
        FilesystemError::IsDirectory { .. } => Some(FileErrorKind::IsDirectory),
        FilesystemError::PermissionDenied { .. } => Some(FileErrorKind::PermissionDenied),
        FilesystemError::InvalidArgument { .. } => Some(FileErrorKind::InvalidPath),
        _ => None,
    };
    let message = match kind {
        Some(FileErrorKind::FileNotFound) => format!("{path}: no such file"),
        Some(FileErrorKind::IsDirectory) => format!("{path}: is a directory"),
        Some(FileErrorKind::PermissionDenied) => format!("{path}: permission denied ({e})"),
        Some(FileErrorKind::InvalidPath) => format!("{path}: {e}"),
        None => format!("{path}: {e}"),
    };
    FileError { kind, message }
}

/// The answer of `POST /files/compose`.
#[derive(serde::Deserialize)]
struct Composed {
    #[serde(default)]
    size: u64,
}

/// The namespaces compared to tell whether commands run beside this server.
const NAMESPACES: &[&str] = &["pid", "mnt", "user"];

/// How the sandbox is isolated, from what this server knows of it and, for an envd on this
/// machine, from comparing the namespaces its commands run in with this server's own (envd's
/// `/health` and `/envs` do not say).
async fn isolation_of(b: &EnvdBackend) -> (&'static str, String) {
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m).to_string())
        .unwrap_or_else(|_| "?".into());
    if b.sandbox.is_embedded() {
        return (
            "off",
            format!(
                "the embedded local sandbox (Sandbox::local_unisolated(), --isolation none): commands run directly on this machine as this server's user (uid {uid}), with that user's powers. For isolation, drop --isolation none (the default local sandbox is isolated) or run the server against an isolated envd (--sandbox URL of `e2b envd --isolate` or of a sandbox of `e2b serve`)"
            ),
        );
    }
    let url = b.sandbox.url().to_owned();
    let host = url
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| {
            u.host()
                .map(|h| h.trim_matches(['[', ']']).to_ascii_lowercase())
        })
        .unwrap_or_default();
    if host.ends_with(".e2b.app") || host.ends_with(".e2b.dev") {
        return (
            "on",
            format!("a sandbox of E2B's cloud at {url}: a microVM"),
        );
    }
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return (
            "unknown",
            format!(
                "the envd at {url} is on another machine; this server cannot see how it is isolated (neither envd's /health nor /envs says)"
            ),
        );
    }
    let mine: Vec<String> = NAMESPACES
        .iter()
        .map(|n| {
            std::fs::read_link(format!("/proc/self/ns/{n}"))
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        })
        .collect();
    let probe = NAMESPACES
        .iter()
        .map(|n| format!("/proc/self/ns/{n}"))
        .collect::<Vec<_>>()
        .join(" ");
    let spec = RunSpec::sh(format!("readlink {probe}"));
    let limits = crate::exec::ExecLimits {
        default_timeout: std::time::Duration::from_secs(10),
        max_timeout: std::time::Duration::from_secs(10),
        output_cap: 4096,
        progress_interval: std::time::Duration::from_secs(1),
    };
    let out = crate::exec::run(
        b,
        spec,
        limits.max_timeout,
        &limits,
        tokio_util::sync::CancellationToken::new(),
        None,
        false,
    )
    .await;
    let theirs: Vec<String> = match out {
        Ok(o) if o.exit_code == 0 => String::from_utf8_lossy(&o.output)
            .lines()
            .map(|l| l.trim().to_owned())
            .collect(),
        Ok(o) => {
            return (
                "unknown",
                format!(
                    "probing the envd at {url} failed (readlink exited with {}); neither envd's /health nor /envs says how it is isolated",
                    o.exit_code
                ),
            );
        }
        Err(e) => {
            return ("unknown", format!("probing the envd at {url} failed: {e}"));
        }
    };
    judge(&url, &mine, &theirs)
}

/// Compares the namespaces (`pid:[...]`, `mnt:[...]`, `user:[...]` as `readlink` prints them,
/// in [`NAMESPACES`] order) of this server with those of a command in the sandbox.
fn judge(url: &str, mine: &[String], theirs: &[String]) -> (&'static str, String) {
    if mine.iter().any(String::is_empty) || theirs.len() != mine.len() {
        return (
            "unknown",
            format!("the namespaces of the envd at {url} could not be compared with this server's"),
        );
    }
    let differ: Vec<&str> = NAMESPACES
        .iter()
        .zip(mine.iter().zip(theirs))
        .filter(|(_, (a, b))| a != b)
        .map(|(n, _)| *n)
        .collect();
    if differ.contains(&"pid") && differ.contains(&"mnt") {
        (
            "on",
            format!(
                "the envd at {url} runs commands in their own namespaces ({}), apart from this server: an isolated sandbox on this machine",
                differ.join(", ")
            ),
        )
    } else {
        (
            "off",
            format!(
                "the envd at {url} runs commands in this machine's own PID and mount namespaces: not isolated; a command has the powers of the envd's user on this machine"
            ),
        )
    }
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

    async fn terminate(&self) -> Result<(), BackendError> {
        self.handle
            .signal(e2b_commands::Signal::Term)
            .await
            .map(|_| ())
            .map_err(|e| BackendError::new(e.to_string()))
    }

    async fn write_stdin(&self, data: Bytes) -> Result<(), BackendError> {
        send_all(&self.handle, data).await
    }

    async fn close_stdin(&self) -> Result<(), BackendError> {
        self.handle
            .close_stdin()
            .await
            .map_err(|e| BackendError::new(format!("closing stdin failed: {e}")))
    }

    fn pid(&self) -> Option<u32> {
        Some(self.handle.pid())
    }
}

#[async_trait::async_trait]
impl SandboxBackend for EnvdBackend {
    fn sandbox_id(&self) -> String {
        self.sandbox.id().to_owned()
    }

    fn describe(&self) -> serde_json::Value {
        let v = self.sandbox.envd_version();
        let features: serde_json::Map<String, serde_json::Value> = Feature::ALL
            .iter()
            .map(|f| (format!("{f:?}"), v.supports(*f).into()))
            .collect();
        serde_json::json!({
            "envd_version": v.to_string(),
            "features": features,
        })
    }

    async fn isolation(&self) -> serde_json::Value {
        let (isolation, detail) = isolation_of(self).await;
        serde_json::json!({ "isolation": isolation, "detail": detail })
    }

    async fn spawn(&self, spec: RunSpec) -> Result<Spawned, BackendError> {
        let has_stdin = spec.stdin.is_some() || spec.keep_stdin;
        let keep_stdin = spec.keep_stdin;
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
                if keep_stdin {
                    return;
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
        let e = self
            .sandbox
            .files()
            .get_info(path)
            .await
            .map_err(|e| classify(path, e))?;
        Ok(FileStat {
            is_dir: e.file_type == FileType::Dir,
            is_file: e.file_type == FileType::File,
            size: e.size,
        })
    }

    async fn read_chunk(&self, path: &str, offset: u64, len: u64) -> Result<FileChunk, FileError> {
        let r = self
            .sandbox
            .files()
            .read_range(path, offset, len)
            .await
            .map_err(|e| classify(path, e))?;
        Ok(FileChunk {
            data: r.data,
            size: r.size,
        })
    }

    async fn write_file(&self, path: &str, data: Bytes) -> Result<u64, FileError> {
        let n = data.len() as u64;
        self.sandbox
            .files()
            .write(path, data)
            .await
            .map_err(|e| classify(path, e))?;
        Ok(n)
    }

    async fn compose(&self, sources: &[String], destination: &str) -> Result<u64, FileError> {
        let fs = self.sandbox.files();
        let conn = fs.connection();
        let mut body = serde_json::json!({
            "source_paths": sources,
            "destination": destination,
        });
        if let Some(u) = conn.effective_user(None) {
            body["username"] = u.into();
        }
        let resp = conn
            .http()
            .post(format!("{}/files/compose", conn.url()))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| {
                FileError::other(format!("{destination}: publishing the upload failed: {e}"))
            })?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| {
            FileError::other(format!("{destination}: publishing the upload failed: {e}"))
        })?;
        if status.as_u16() == 404 && bytes.is_empty() {
            return Err(FileError::other(format!(
                "{destination}: this envd has no POST /files/compose, so chunked uploads cannot be published atomically; upload the file in one call"
            )));
        }
        if !status.is_success() {
            let msg = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
            let kind = match status.as_u16() {
                403 => Some(FileErrorKind::PermissionDenied),
                400 if msg.contains("is a directory") => Some(FileErrorKind::IsDirectory),
                400 => Some(FileErrorKind::InvalidPath),
                _ => None,
            };
            return Err(FileError {
                kind,
                message: format!(
                    "{destination}: publishing the upload failed: HTTP {status}: {msg}"
                ),
            });
        }
        let c: Composed = serde_json::from_slice(&bytes).map_err(|e| {
            FileError::other(format!("{destination}: unexpected compose answer: {e}"))
        })?;
        Ok(c.size)
    }

    async fn remove(&self, path: &str) -> Result<(), FileError> {
        self.sandbox
            .files()
            .remove(path)
            .await
            .map_err(|e| classify(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_decide_isolation() {
        let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let host = v(&["pid:[1]", "mnt:[2]", "user:[3]"]);
        assert_eq!(judge("u", &host, &host).0, "off");
        let sandbox = v(&["pid:[7]", "mnt:[8]", "user:[3]"]);
        let (iso, detail) = judge("u", &host, &sandbox);
        assert_eq!(iso, "on");
        assert!(detail.contains("pid, mnt"), "{detail}");
        // Only a PID namespace apart (the files are the host's): not a sandbox.
        assert_eq!(
            judge("u", &host, &v(&["pid:[7]", "mnt:[2]", "user:[3]"])).0,
            "off"
        );
        assert_eq!(judge("u", &host, &v(&["pid:[7]"])).0, "unknown");
        assert_eq!(judge("u", &v(&["", "", ""]), &host).0, "unknown");
    }
}
