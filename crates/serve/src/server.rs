//! Starting and stopping `e2b serve`: the API listener, the edge listener and the background
//! loops (expiry, metrics).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::api::{self, Api};
use crate::edge::Edge;
use crate::error::ServeError;
use crate::runtime::Runtime;
use crate::sandboxes::{Registry, Resources, Settings};

/// How often expired sandboxes are looked for.
const EXPIRY_TICK: Duration = Duration::from_millis(50);

/// Configuration of [`Serve`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeConfig {
    /// Address both listeners bind. Default `127.0.0.1`.
    pub bind: IpAddr,
    /// Port of E2B's API (`E2B_API_URL`). Default 3000; 0 = any free port.
    pub api_port: u16,
    /// Port of the edge that reaches each sandbox's envd (`E2B_SANDBOX_URL`). Default 49983;
    /// 0 = any free port.
    pub edge_port: u16,
    /// The key every API request must carry in `X-API-Key`.
    pub api_key: String,
    /// Where each sandbox's directory is made (removed again when the sandbox is killed).
    /// Default: a fresh directory under the system temporary directory.
    pub state_dir: Option<PathBuf>,
    /// Most sandboxes at once (running and paused); more gets 429. Default 256.
    pub max_sandboxes: usize,
    /// Longest sandbox timeout; longer requests are cut to it. Default 24 h.
    pub max_timeout: Duration,
    /// Interval between metrics samples. Default 5 s (E2B's collection interval).
    pub metrics_interval: Duration,
    /// The domain create and connect answer, from which the SDKs build a sandbox's host names
    /// (`get_host(port)` = `<port>-<id>.<domain>`; the edge routes such a `Host`). Default:
    /// `localhost:<edge port>` (`*.localhost` names reach this machine); clients on other
    /// machines need a name of their own here, such as a wildcard DNS name. Never none: the
    /// SDKs would then fall back to `E2B_DOMAIN` and name E2B's cloud.
    pub domain: Option<String>,
}

impl ServeConfig {
    /// Defaults with `api_key`: `127.0.0.1`, ports 3000 and 49983.
    pub fn new(api_key: impl Into<String>) -> Self {
        Self {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            api_port: 3000,
            edge_port: e2b_envd_proto::wire::DEFAULT_PORT,
            api_key: api_key.into(),
            state_dir: None,
            max_sandboxes: 256,
            max_timeout: Duration::from_secs(24 * 3600),
            metrics_interval: Duration::from_secs(5),
            domain: None,
        }
    }

    /// Both ports 0 (any free port): for tests and embedding.
    pub fn ephemeral(api_key: impl Into<String>) -> Self {
        Self {
            api_port: 0,
            edge_port: 0,
            ..Self::new(api_key)
        }
    }
}

/// The local control plane.
#[derive(Debug)]
#[non_exhaustive]
pub struct Serve;

impl Serve {
    /// Binds both ports and starts serving with `runtime`.
    ///
    /// # Errors
    ///
    /// [`ServeError::Bind`] when a port cannot be bound, [`ServeError::Config`] for an empty
    /// API key, [`ServeError::Io`] when the state directory cannot be made.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is started before the last await.
    pub async fn start(
        config: ServeConfig,
        runtime: Arc<dyn Runtime>,
    ) -> Result<ServeHandle, ServeError> {
        if config.api_key.is_empty() {
            return Err(ServeError::Config("the API key is empty".into()));
        }
        if let Some(d) = &config.domain {
            check_domain(d)?;
        }
        let api_addr = SocketAddr::new(config.bind, config.api_port);
        let edge_addr = SocketAddr::new(config.bind, config.edge_port);
        let bind = |addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind { addr, source })
        };
        let api_listener = bind(api_addr).await?;
        let edge_listener = bind(edge_addr).await?;
        let (state_dir, owned_dir) = match &config.state_dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (d.clone(), false)
            }
            None => {
                let d = std::env::temp_dir().join(format!("e2b-serve-{}", std::process::id()));
                std::fs::create_dir_all(&d)?;
                (d, true)
            }
        };
        let api_local = api_listener.local_addr()?;
        let edge_local = edge_listener.local_addr()?;
        // Without a domain the SDKs would name E2B's cloud; a `localhost` name at worst fails
        // on a client on another machine, which then needs --domain.
        let domain = config
            .domain
            .clone()
            .unwrap_or_else(|| format!("localhost:{}", edge_local.port()));
        let (memory_mb, disk_size_mb) = host_resources(&state_dir);
        let settings = Settings {
            host: Resources {
                cpu_count: std::thread::available_parallelism()
                    .map(|n| n.get() as u32)
                    .unwrap_or(1),
                memory_mb,
                disk_size_mb,
            },
            max_sandboxes: config.max_sandboxes.max(1),
            max_timeout: config.max_timeout,
            state_dir: state_dir.clone(),
            domain,
        };
        let registry = Arc::new(Registry::new(runtime, settings));
        let api = Api {
            registry: registry.clone(),
            api_key: config.api_key.clone().into(),
        };
        let mut tasks = Vec::new();
        let router = api::router(api);
        tasks.push(tokio::spawn(async move {
            let _ = axum::serve(api_listener, router).await;
        }));
        tasks.push(tokio::spawn(
            Edge::new(registry.clone(), &[api_local.port(), edge_local.port()])
                .serve(edge_listener),
        ));
        let r = registry.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(EXPIRY_TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                r.expire().await;
            }
        }));
        let r = registry.clone();
        let every = config.metrics_interval.max(Duration::from_millis(100));
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                let r = r.clone();
                let _ = tokio::task::spawn_blocking(move || r.sample_all()).await;
            }
        }));
        Ok(ServeHandle {
            api_addr: api_local,
            edge_addr: edge_local,
            api_key: config.api_key,
            registry,
            tasks,
            state_dir: owned_dir.then_some(state_dir),
        })
    }
}

/// A domain is a host name with an optional port: no scheme, path or spaces.
fn check_domain(domain: &str) -> Result<(), ServeError> {
    let ok = !domain.is_empty()
        && domain.len() <= 253
        && domain
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'))
        && !domain.starts_with(['.', '-', ':']);
    if ok {
        Ok(())
    } else {
        Err(ServeError::Config(format!(
            "--domain {domain:?} is not a host name: give one like sandboxes.example.com or \
             localhost:49983 (no scheme, no path)"
        )))
    }
}

#[allow(clippy::unnecessary_cast)] // statvfs field types differ between targets
fn host_resources(dir: &std::path::Path) -> (u64, u64) {
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let disk = nix::sys::statvfs::statvfs(dir)
        .map(|v| v.blocks() as u64 * v.fragment_size() as u64)
        .unwrap_or(0);
    (mem_kib / 1024, disk / (1024 * 1024))
}

/// A running `e2b serve`. Dropping it without [`shutdown`](Self::shutdown) still kills every
/// sandbox (their envd processes die with this process, and with the drop of their handles).
#[derive(Debug)]
pub struct ServeHandle {
    api_addr: SocketAddr,
    edge_addr: SocketAddr,
    api_key: String,
    registry: Arc<Registry>,
    tasks: Vec<JoinHandle<()>>,
    state_dir: Option<PathBuf>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("sandboxes", &self.len())
            .finish()
    }
}

impl ServeHandle {
    /// The API's base URL (`E2B_API_URL`).
    pub fn api_url(&self) -> String {
        format!("http://{}", self.api_addr)
    }

    /// The edge's base URL (`E2B_SANDBOX_URL`).
    pub fn edge_url(&self) -> String {
        format!("http://{}", self.edge_addr)
    }

    /// The API's address.
    pub fn api_addr(&self) -> SocketAddr {
        self.api_addr
    }

    /// The edge's address.
    pub fn edge_addr(&self) -> SocketAddr {
        self.edge_addr
    }

    /// The domain create and connect answer (see [`ServeConfig::domain`]).
    pub fn domain(&self) -> &str {
        &self.registry.settings.domain
    }

    /// The API key.
    pub fn api_key(&self) -> &str {
        &self.api_key
    }

    /// The runtime's name (`plain`, `isolated`).
    pub fn runtime_name(&self) -> &'static str {
        self.registry.runtime_name()
    }

    /// How many sandboxes exist now (running and paused).
    pub fn sandbox_count(&self) -> usize {
        self.registry.len()
    }

    /// The loopback address of a running sandbox's envd (for measuring the edge against it).
    pub fn envd_addr(&self, sandbox_id: &str) -> Option<SocketAddr> {
        self.registry.get(sandbox_id).map(|s| s.envd_addr)
    }

    /// Stops listening and kills every sandbox, waiting until their processes are gone.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped future may leave some sandboxes running until this process
    /// exits (their envd processes still die with it).
    pub async fn shutdown(mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.registry.kill_all().await;
        if let Some(d) = self.state_dir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl Drop for ServeHandle {
    fn drop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}
