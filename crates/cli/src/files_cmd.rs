//! `e2b files put|get|ls`: move files in and out of a sandbox, with a progress bar (bytes, rate,
//! ETA) on a terminal and plain lines otherwise.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Instant;

use bytes::Bytes;
use e2b::{Sandbox, WriteOptions};
use futures::StreamExt as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::io::AsyncWriteExt as _;

use crate::args::SandboxArgs;
use crate::sandbox_cmd::CloudCliError;

/// `e2b files`.
#[derive(Debug, Clone, clap::Args)]
pub struct FilesArgs {
    /// The sandbox.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: FilesCmd,
}

/// The `e2b files` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum FilesCmd {
    /// Upload a local file into the sandbox.
    Put {
        /// The local file.
        local: PathBuf,
        /// The path in the sandbox (relative paths resolve against the user's home).
        remote: String,
    },
    /// Download a file from the sandbox.
    Get {
        /// The path in the sandbox.
        remote: String,
        /// The local file (default: the remote file's name in the current directory).
        local: Option<PathBuf>,
    },
    /// List a directory in the sandbox.
    Ls {
        /// The directory (default: the user's home).
        #[arg(default_value = ".")]
        path: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Progress of one transfer: an indicatif bar on a terminal, else a start and an end line.
struct Progress {
    bar: Option<ProgressBar>,
    label: String,
    started: Instant,
    done: u64,
}

impl Progress {
    fn new(label: String, total: Option<u64>) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = match total {
                Some(t) => ProgressBar::new(t),
                None => ProgressBar::no_length(),
            };
            bar.set_draw_target(ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_message(label.clone());
            bar
        });
        if bar.is_none() {
            match total {
                Some(t) => eprintln!("{label}: {t} bytes"),
                None => eprintln!("{label}"),
            }
        }
        Self {
            bar,
            label,
            started: Instant::now(),
            done: 0,
        }
    }

    fn add(&mut self, n: u64) {
        self.done += n;
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    fn finish(&mut self) {
        let secs = self.started.elapsed().as_secs_f64().max(1e-6);
        let rate = self.done as f64 / secs / (1024.0 * 1024.0);
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        eprintln!(
            "{}: {} bytes in {:.2} s ({rate:.1} MiB/s)",
            self.label, self.done, secs
        );
    }
}

async fn open(args: &SandboxArgs) -> Result<Sandbox, CloudCliError> {
    crate::run::open_sandbox(args)
        .await
        .map_err(|e| CloudCliError::Io(e.to_string()))
}

/// Runs `e2b files ...`; returns the exit code.
pub async fn files(args: FilesArgs) -> Result<i32, CloudCliError> {
    if args.sandbox.sandbox.is_none() && args.sandbox.sandbox_id.is_none() {
        return Err(CloudCliError::Usage(
            "name the sandbox: --sandbox-id ID (E2B's API) or --sandbox URL (an envd)".into(),
        ));
    }
    let sandbox = open(&args.sandbox).await?;
    let result = match args.command {
        FilesCmd::Put { local, remote } => put(&sandbox, local, &remote).await,
        FilesCmd::Get { remote, local } => get(&sandbox, &remote, local).await,
        FilesCmd::Ls { path, json } => ls(&sandbox, &path, json).await,
    };
    // Connected by URL or endpoint: this only closes the connection.
    let _ = sandbox.kill().await;
    result
}

async fn put(sandbox: &Sandbox, local: PathBuf, remote: &str) -> Result<i32, CloudCliError> {
    let file = tokio::fs::File::open(&local)
        .await
        .map_err(|e| CloudCliError::Io(format!("cannot open {}: {e}", local.display())))?;
    let total = file.metadata().await.ok().map(|m| m.len());
    let progress = std::sync::Arc::new(std::sync::Mutex::new(Progress::new(
        format!("put {} -> {remote}", local.display()),
        total,
    )));
    let counter = progress.clone();
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024).map(
        move |chunk: std::io::Result<Bytes>| {
            if let Ok(c) = &chunk
                && let Ok(mut p) = counter.lock()
            {
                p.add(c.len() as u64);
            }
            chunk
        },
    );
    let info = sandbox
        .files()
        .write_stream(remote, stream, &WriteOptions::default())
        .await?;
    if let Ok(mut p) = progress.lock() {
        p.finish();
    }
    println!("{}", info.path);
    Ok(0)
}

async fn get(
    sandbox: &Sandbox,
    remote: &str,
    local: Option<PathBuf>,
) -> Result<i32, CloudCliError> {
    let local = local.unwrap_or_else(|| {
        PathBuf::from(
            remote
                .rsplit('/')
                .find(|s| !s.is_empty())
                .unwrap_or("download"),
        )
    });
    let total = sandbox.files().get_info(remote).await.ok().map(|i| i.size);
    let mut stream = sandbox.files().read_stream(remote).await?;
    let mut out = tokio::fs::File::create(&local)
        .await
        .map_err(|e| CloudCliError::Io(format!("cannot create {}: {e}", local.display())))?;
    let mut progress = Progress::new(format!("get {remote} -> {}", local.display()), total);
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| CloudCliError::Io(format!("download of {remote} failed: {e}")))?;
        out.write_all(&chunk)
            .await
            .map_err(|e| CloudCliError::Io(format!("cannot write {}: {e}", local.display())))?;
        progress.add(chunk.len() as u64);
    }
    out.flush()
        .await
        .map_err(|e| CloudCliError::Io(format!("cannot write {}: {e}", local.display())))?;
    progress.finish();
    Ok(0)
}

async fn ls(sandbox: &Sandbox, path: &str, json: bool) -> Result<i32, CloudCliError> {
    let mut entries = sandbox.files().list(path, 1).await?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    if json {
        let v: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| {
                serde_json::json!({
                    "name": e.name, "path": e.path, "type": if e.is_dir() { "dir" } else { "file" },
                    "size": e.size, "permissions": e.permissions, "owner": e.owner,
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&v)
            .map_err(|e| CloudCliError::Io(format!("cannot print JSON: {e}")))?;
        println!("{text}");
        return Ok(0);
    }
    for e in &entries {
        let name = if e.is_dir() {
            format!("{}/", e.name)
        } else {
            e.name.clone()
        };
        println!("{}  {:>12}  {}", e.permissions, e.size, name);
    }
    Ok(0)
}
