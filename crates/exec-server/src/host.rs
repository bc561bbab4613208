//! A sandbox backend that runs commands and file operations directly on this host, each command
//! in its own process group. Used by the unit tests of the server logic.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use bytes::Bytes;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::backend::{
    ExitInfo, FileChunk, FileStat, Killer, ProcEvent, RunSpec, SandboxBackend, Spawned, WriteMode,
};
use crate::error::{BackendError, FileError, FileErrorKind};

/// Runs everything on the host.
pub(crate) struct HostBackend {
    id: String,
}

impl HostBackend {
    pub(crate) fn new(id: impl Into<String>) -> Self {
        Self { id: id.into() }
    }
}

struct GroupKiller {
    pgid: Option<i32>,
}

#[async_trait::async_trait]
impl Killer for GroupKiller {
    async fn kill(&self) -> Result<(), BackendError> {
        if let Some(pgid) = self.pgid {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        Ok(())
    }
}

async fn pump(
    mut r: impl tokio::io::AsyncRead + Unpin,
    tx: mpsc::Sender<Result<ProcEvent, BackendError>>,
    is_err: bool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let b = Bytes::copy_from_slice(&buf[..n]);
                let ev = if is_err {
                    ProcEvent::Stderr(b)
                } else {
                    ProcEvent::Stdout(b)
                };
                if tx.send(Ok(ev)).await.is_err() {
                    break;
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl SandboxBackend for HostBackend {
    fn sandbox_id(&self) -> String {
        self.id.clone()
    }

    async fn spawn(&self, spec: RunSpec) -> Result<Spawned, BackendError> {
        let mut cmd = tokio::process::Command::new(&spec.shell);
        if spec.login_shell {
            cmd.arg("-l");
        }
        cmd.arg("-c")
            .arg(&spec.cmd)
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if spec.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .envs(&spec.env)
            .kill_on_drop(false);
        if let Some(cwd) = &spec.cwd {
            cmd.current_dir(cwd);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| BackendError::new(format!("spawn failed: {e}")))?;
        let pgid = child.id().and_then(|p| i32::try_from(p).ok());
        if let (Some(data), Some(mut stdin)) = (spec.stdin, child.stdin.take()) {
            tokio::spawn(async move {
                let _ = stdin.write_all(&data).await;
                drop(stdin);
            });
        }
        let (tx, rx) = mpsc::channel(16);
        let out = child.stdout.take();
        let err = child.stderr.take();
        tokio::spawn(async move {
            let a = out.map(|o| tokio::spawn(pump(o, tx.clone(), false)));
            let b = err.map(|e| tokio::spawn(pump(e, tx.clone(), true)));
            if let Some(a) = a {
                let _ = a.await;
            }
            if let Some(b) = b {
                let _ = b.await;
            }
            let ev = match child.wait().await {
                Ok(st) => Ok(ProcEvent::Exit(ExitInfo {
                    exit_code: st.code().unwrap_or(-1),
                    signal: st.signal(),
                })),
                Err(e) => Err(BackendError::new(format!("wait failed: {e}"))),
            };
            let _ = tx.send(ev).await;
        });
        Ok(Spawned {
            events: tokio_stream_from(rx).boxed(),
            killer: Box::new(GroupKiller { pgid }),
        })
    }

    async fn stat(&self, path: &str) -> Result<FileStat, FileError> {
        let m = tokio::fs::metadata(path)
            .await
            .map_err(|e| FileError::from_io(path, &e))?;
        Ok(FileStat {
            is_dir: m.is_dir(),
            size: m.len(),
        })
    }

    async fn read_chunk(&self, path: &str, offset: u64, len: u64) -> Result<FileChunk, FileError> {
        let mut f = tokio::fs::File::open(path)
            .await
            .map_err(|e| FileError::from_io(path, &e))?;
        let size = f
            .metadata()
            .await
            .map_err(|e| FileError::from_io(path, &e))?
            .len();
        if size == 0 && f.metadata().await.is_ok_and(|m| m.is_dir()) {
            return Err(FileError::new(FileErrorKind::IsDirectory, path));
        }
        f.seek(std::io::SeekFrom::Start(offset))
            .await
            .map_err(|e| FileError::from_io(path, &e))?;
        let want = usize::try_from(len.min(size.saturating_sub(offset))).unwrap_or(0);
        let mut buf = vec![0u8; want];
        let mut got = 0;
        while got < want {
            let n = f
                .read(&mut buf[got..])
                .await
                .map_err(|e| FileError::from_io(path, &e))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        buf.truncate(got);
        Ok(FileChunk {
            data: Bytes::from(buf),
            size,
        })
    }

    async fn write_chunk(
        &self,
        path: &str,
        data: Bytes,
        mode: WriteMode,
    ) -> Result<u64, FileError> {
        let p = std::path::Path::new(path);
        if tokio::fs::metadata(p).await.is_ok_and(|m| m.is_dir()) {
            return Err(FileError::new(FileErrorKind::IsDirectory, path));
        }
        if let Some(parent) = p.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| FileError::from_io(path, &e))?;
        }
        match mode {
            WriteMode::Replace => {
                let tmp = format!("{path}.exec-server-tmp-{}", uuid::Uuid::new_v4());
                tokio::fs::write(&tmp, &data)
                    .await
                    .map_err(|e| FileError::from_io(path, &e))?;
                if let Err(e) = tokio::fs::rename(&tmp, path).await {
                    let _ = tokio::fs::remove_file(&tmp).await;
                    return Err(FileError::from_io(path, &e));
                }
            }
            WriteMode::Append | WriteMode::At(_) => {
                let mut f = tokio::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .append(mode == WriteMode::Append)
                    .open(path)
                    .await
                    .map_err(|e| FileError::from_io(path, &e))?;
                if let WriteMode::At(o) = mode {
                    f.set_len(o)
                        .await
                        .map_err(|e| FileError::from_io(path, &e))?;
                    f.seek(std::io::SeekFrom::Start(o))
                        .await
                        .map_err(|e| FileError::from_io(path, &e))?;
                }
                f.write_all(&data)
                    .await
                    .map_err(|e| FileError::from_io(path, &e))?;
                f.flush().await.map_err(|e| FileError::from_io(path, &e))?;
            }
        }
        self.stat(path).await.map(|s| s.size)
    }
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
