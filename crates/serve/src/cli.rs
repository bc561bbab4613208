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

/// The most a key file may hold (a key is 44 bytes).
const MAX_KEY_FILE: u64 = 4096;

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
/// A stored key is used only from a regular file of this user that no other account can read
/// or write (as ssh treats a private key): a key others could read is no secret, so such a file
/// is refused with the fix rather than used or silently replaced. A new key is written to a
/// temporary file and linked into place, so two servers starting at once agree on one key and
/// none ever reads half a key.
///
/// # Errors
///
/// [`ServeError::Config`] for a key file that is not a regular file of this user with mode
/// 0600 (or stricter); [`ServeError::Io`] when the file cannot be read or written.
pub fn load_or_create_key(path: &std::path::Path) -> Result<(String, bool), ServeError> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    for _ in 0..3 {
        if let Some(key) = stored_key(path)? {
            return Ok((key, false));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let key = format!("e2b_{}", crate::util::random_hex(20));
        let tmp = path.with_file_name(format!(
            ".{}.{}.tmp",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            crate::util::random_hex(8)
        ));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| {
                writeln!(f, "{key}")?;
                f.sync_all()
            })
            .and_then(|()| std::fs::hard_link(&tmp, path));
        let _ = std::fs::remove_file(&tmp);
        match written {
            Ok(()) => return Ok((key, true)),
            // Another server stored its key first (or an empty file is in the way): read again.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ServeError::Config(format!(
        "the API key file {} keeps changing: stop the other process writing it, or pass --api-key",
        path.display()
    )))
}

/// The key in `path` when it holds one; `None` when there is no file or an empty one (which
/// is removed, so that a new key can take its place). The file is opened without following a
/// symlink and checked on the open descriptor, so what is checked is what is read.
fn stored_key(path: &std::path::Path) -> Result<Option<String>, ServeError> {
    use std::io::Read as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(key_file_refused(path, "is a symlink, not a regular file"));
        }
        Err(e) => return Err(e.into()),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(key_file_refused(path, "is not a regular file"));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(key_file_refused(
            path,
            format!(
                "belongs to uid {}, not to this user (uid {me}): another account may know or \
                 replace the key",
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(key_file_refused(
            path,
            format!(
                "has mode {mode:04o}: other accounts on this machine can read or change it, so \
                 the key may be known (if only you could ever read it, chmod 600 it instead)"
            ),
        ));
    }
    let mut raw = Vec::new();
    file.take(MAX_KEY_FILE + 1).read_to_end(&mut raw)?;
    if raw.len() as u64 > MAX_KEY_FILE {
        return Err(key_file_refused(
            path,
            format!("holds more than {MAX_KEY_FILE} bytes, not one key"),
        ));
    }
    let key = raw.trim_ascii();
    if !key.iter().all(u8::is_ascii_graphic) {
        return Err(key_file_refused(
            path,
            "holds something other than one key (spaces, control or non-ASCII characters, \
             which no X-API-Key header carries)",
        ));
    }
    if key.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(None),
        };
    }
    Ok(Some(String::from_utf8_lossy(key).into_owned()))
}

/// A key file refused because it `why`, with the fix.
fn key_file_refused(path: &std::path::Path, why: impl std::fmt::Display) -> ServeError {
    ServeError::Config(format!(
        "the API key file {} {why}: remove it (a new key is generated), or pass --key-file PATH \
         or --api-key",
        path.display()
    ))
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("e2b-serve-key-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn refused(path: &std::path::Path) -> String {
        match load_or_create_key(path) {
            Err(ServeError::Config(m)) => m,
            other => panic!("expected a refusal for {}, got {other:?}", path.display()),
        }
    }

    #[test]
    fn a_generated_key_is_stored_owner_only_and_read_back() {
        let d = dir("fresh");
        let path = d.join("e2b").join("serve-api-key");
        let (key, fresh) = load_or_create_key(&path).unwrap();
        assert!(fresh);
        assert!(key.starts_with("e2b_") && key.len() == 44, "{key}");
        assert!(key[4..].bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777,
            0o700
        );
        assert_eq!(load_or_create_key(&path).unwrap(), (key, false));
        // No temporary file is left beside it.
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn servers_starting_at_once_agree_on_one_key() {
        let d = dir("race");
        let path = d.join("serve-api-key");
        let keys: Vec<(String, bool)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| load_or_create_key(&path).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(keys.iter().all(|(k, _)| *k == keys[0].0), "{keys:?}");
        assert_eq!(
            keys.iter().filter(|(_, fresh)| *fresh).count(),
            1,
            "{keys:?}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_empty_key_file_is_replaced_by_a_new_key() {
        let d = dir("empty");
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("serve-api-key");
        std::fs::write(&path, "\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (key, fresh) = load_or_create_key(&path).unwrap();
        assert!(fresh && key.starts_with("e2b_"));
        assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), key);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn key_files_others_could_read_or_swap_are_refused() {
        let d = dir("hostile");
        std::fs::create_dir_all(&d).unwrap();
        let loose = d.join("loose");
        std::fs::write(&loose, "e2b_known\n").unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
        let m = refused(&loose);
        assert!(m.contains("mode 0644") && m.contains("chmod 600"), "{m}");
        // Refused, not replaced: the file is as it was.
        assert_eq!(std::fs::read_to_string(&loose).unwrap(), "e2b_known\n");

        let target = d.join("target");
        std::fs::write(&target, "e2b_elsewhere\n").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(refused(&link).contains("not a regular file"));
        std::fs::create_dir(d.join("a-dir")).unwrap();
        assert!(refused(&d.join("a-dir")).contains("not a regular file"));

        let garbage = d.join("garbage");
        std::fs::write(&garbage, "two words\n").unwrap();
        std::fs::set_permissions(&garbage, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(refused(&garbage).contains("other than one key"));
        std::fs::write(&garbage, b"e2b_\xff\xfe\n").unwrap();
        assert!(refused(&garbage).contains("other than one key"));
        let huge = d.join("huge");
        std::fs::write(&huge, vec![b'a'; 8192]).unwrap();
        std::fs::set_permissions(&huge, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(refused(&huge).contains("more than 4096 bytes"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_key_file_of_another_account_is_refused() {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "missing: root, to give the key file to another account (chown)"
        );
        let d = dir("owner");
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("serve-api-key");
        std::fs::write(&path, "e2b_theirs\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        let m = refused(&path);
        assert!(m.contains("belongs to uid 65534"), "{m}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
