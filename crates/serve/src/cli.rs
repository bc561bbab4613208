//! `e2b serve` on the command line (shared by the `e2b-serve` binary and `e2b serve`).

use std::io::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::ServeError;
use crate::runtime::{EnvdCommand, PlainRuntime, SandboxLimits};
use crate::server::{Serve, ServeConfig};

/// Flags of `e2b serve`. Flatten it into a clap command as a subcommand's arguments.
#[derive(Debug, Clone, clap::Args)]
#[non_exhaustive]
pub struct ServeArgs {
    /// Address both ports bind.
    #[arg(long, default_value = "127.0.0.1", env = "E2B_SERVE_BIND")]
    pub bind: IpAddr,
    /// Port of E2B's sandbox API (point E2B_API_URL at it).
    #[arg(long, default_value_t = 3000)]
    pub api_port: u16,
    /// Port of the edge that reaches every sandbox's envd (point E2B_SANDBOX_URL at it).
    #[arg(long, default_value_t = e2b_envd_proto::wire::DEFAULT_PORT)]
    pub edge_port: u16,
    /// API key clients must send (X-API-Key). Default: the key stored in --key-file, generated
    /// on first use.
    #[arg(long, env = "E2B_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Where a generated API key is kept (owner-only permissions). Default
    /// `$XDG_CONFIG_HOME/e2b/serve-api-key` (or `~/.config/e2b/serve-api-key`).
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// Directory for the sandboxes' working directories (default: a fresh one under the
    /// system temporary directory, removed at exit).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The domain sandboxes answer with, from which the SDKs build host names
    /// (`get_host(8080)` = `8080-<id>.<domain>`), e.g. a wildcard DNS name pointing at this
    /// machine, for clients on other machines. Default: `localhost:<edge port>`.
    #[arg(long, value_name = "DOMAIN")]
    pub domain: Option<String>,
    /// Most sandboxes at once; more are refused with 429.
    #[arg(long, default_value_t = 256)]
    pub max_sandboxes: usize,
    /// Sandbox isolation: `auto` (isolated where this machine and binary support it, else
    /// plain), `plain` (each sandbox a plain envd process) or `isolated` (namespaces, private
    /// root, cgroup limits; fails when unsupported).
    #[arg(long, default_value = "auto", value_name = "auto|plain|isolated")]
    pub isolation: String,
    /// Memory of each isolated sandbox in MiB, also the size of its writable filesystem
    /// (default 2048). Info, list and metrics report it.
    #[arg(long, value_name = "MIB")]
    pub memory_mb: Option<u64>,
    /// CPU quota of each isolated sandbox in CPUs, fractions allowed (default: not limited).
    #[arg(long, value_name = "CPUS")]
    pub cpu_count: Option<f64>,
    /// Run this envd binary (for example `e2b-envd`) for each sandbox instead of this program's
    /// own envd (`e2b serve`'s default: `e2b-serve-envd` beside `e2b` when it is the same
    /// version).
    #[arg(long, value_name = "PATH")]
    pub envd_program: Option<PathBuf>,
    /// Internal modes used by the sandboxes themselves.
    #[command(subcommand)]
    pub internal: Option<Internal>,
}

/// What a sandbox runs: not for people.
#[derive(Debug, Clone, clap::Subcommand)]
#[non_exhaustive]
pub enum Internal {
    /// A sandbox's envd.
    #[command(hide = true)]
    Envd(e2b_envd::EnvdArgs),
}

fn default_key_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("e2b").join("serve-api-key"))
}

/// Reads the key stored at `path`, or generates `e2b_<40 hex>` and stores it there (directory
/// 0700, file 0600). Returns the key and whether it was generated.
///
/// # Errors
///
/// [`ServeError::Io`] when the file cannot be read or written.
pub fn load_or_create_key(path: &std::path::Path) -> Result<(String, bool), ServeError> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    if let Ok(text) = std::fs::read_to_string(path) {
        let key = text.trim().to_string();
        if !key.is_empty() {
            return Ok((key, false));
        }
    }
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let key = format!("e2b_{}", crate::util::random_hex(20));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{key}")?;
    Ok((key, true))
}

/// Runs `e2b serve` (or one of its internal modes) until SIGINT or SIGTERM, then kills every
/// sandbox. `prefix` is what reaches these arguments in the running binary (`["serve"]` for
/// `e2b`, `[]` for `e2b-serve`), so sandboxes can run this same program as their envd.
/// Returns the process exit code.
///
/// # Errors
///
/// [`ServeError`] when a port cannot be bound or the key cannot be stored.
///
/// # Cancel safety
///
/// Not cancel safe: dropping it skips the orderly kill (the sandboxes still die with the
/// process).
pub async fn run_cli(args: ServeArgs, prefix: &[&str]) -> Result<i32, ServeError> {
    run_cli_with(args, prefix, false).await
}

/// [`run_cli`] for a binary that calls `e2b_isolation::run_if_child()` first thing in `main`
/// (before any thread starts), and can therefore run isolated sandboxes (`can_isolate`).
///
/// # Errors
///
/// As [`run_cli`], and [`ServeError::Config`] for `--isolation isolated` where isolation is
/// unavailable.
///
/// # Cancel safety
///
/// As [`run_cli`].
pub async fn run_cli_with(
    args: ServeArgs,
    prefix: &[&str],
    can_isolate: bool,
) -> Result<i32, ServeError> {
    match args.internal {
        Some(Internal::Envd(envd)) => {
            return e2b_envd::run_cli(envd)
                .await
                .map(|()| 0)
                .map_err(|e| ServeError::Spawn(e.to_string()));
        }
        None => {}
    }
    let sized = args.memory_mb.is_some() || args.cpu_count.is_some();
    let limits = SandboxLimits::new(
        args.memory_mb.unwrap_or(SandboxLimits::DEFAULT_MEMORY_MB),
        args.cpu_count,
    )?;
    let (api_key, note) = match args.api_key.filter(|k| !k.is_empty()) {
        Some(k) => (k, "from --api-key / E2B_API_KEY".to_string()),
        None => {
            let path = args.key_file.or_else(default_key_file).ok_or_else(|| {
                ServeError::Config(
                    "no HOME to keep the API key in: pass --api-key or --key-file".into(),
                )
            })?;
            let (key, fresh) = load_or_create_key(&path)?;
            let how = if fresh {
                "generated, stored in"
            } else {
                "read from"
            };
            (key, format!("{how} {} (mode 0600)", path.display()))
        }
    };
    let command = match args.envd_program {
        Some(p) => EnvdCommand::envd(p, Vec::new()),
        None => EnvdCommand::current_exe(prefix)?,
    };
    let envd_line = format!("  each sandbox's envd: {command}");
    let available = if can_isolate {
        crate::runtime::isolation_available()
    } else {
        Err("this binary cannot start isolated sandboxes (use e2b-serve)".to_string())
    };
    let (runtime, why_plain) = match (args.isolation.as_str(), available) {
        ("plain", _) => (PlainRuntime::new(command), None),
        ("isolated", Ok(())) | ("auto", Ok(())) => {
            (PlainRuntime::isolated_with(command, limits), None)
        }
        ("isolated", Err(e)) => {
            return Err(ServeError::Config(format!("--isolation isolated: {e}")));
        }
        ("auto", Err(e)) => (PlainRuntime::new(command), Some(e)),
        (other, _) => {
            return Err(ServeError::Config(format!(
                "--isolation must be auto, plain or isolated, not {other:?}"
            )));
        }
    };
    if sized && !runtime.is_isolated() {
        // A size the runtime cannot hold is refused, not silently ignored.
        let why = why_plain
            .as_deref()
            .unwrap_or("--isolation plain runs each sandbox as a plain process");
        return Err(ServeError::Config(format!(
            "--memory-mb and --cpu-count size isolated sandboxes, and these would be plain \
             ({why}); drop the flags or run isolated sandboxes (e2b-serve --isolation isolated)"
        )));
    }
    let mut config = ServeConfig::new(api_key);
    config.bind = args.bind;
    config.api_port = args.api_port;
    config.edge_port = args.edge_port;
    config.state_dir = args.state_dir;
    config.max_sandboxes = args.max_sandboxes;
    config.domain = args.domain;
    let runtime_isolated = runtime.is_isolated();
    let handle = Serve::start(config, Arc::new(runtime)).await?;
    println!(
        "e2b serve: E2B's sandbox API on this machine (runtime: {})",
        handle.runtime_name()
    );
    if let Some(why) = why_plain {
        println!("  sandboxes are not isolated: {why}");
    }
    if runtime_isolated {
        println!("  each sandbox: {limits}");
    }
    println!("{envd_line}");
    println!(
        "  a sandbox's port P is reachable as P-<sandbox id>.{} (get_host)",
        handle.domain()
    );
    println!("  API key {note}");
    println!("export E2B_API_URL={}", handle.api_url());
    println!("export E2B_SANDBOX_URL={}", handle.edge_url());
    println!("export E2B_API_KEY={}", handle.api_key());
    let _ = std::io::stdout().flush();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!(
        "e2b serve: stopping, killing {} sandboxes",
        handle.sandbox_count()
    );
    handle.shutdown().await;
    Ok(0)
}
