//! The sandbox registry: create, look up, pause, resume, expire, sample and kill sandboxes.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use e2b_envd_proto::wire::{FileOperation, file_signature, headers::ACCESS_TOKEN};
use http::StatusCode;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use subtle::ConstantTimeEq as _;
use time::OffsetDateTime;

use crate::runtime::{Instance, Runtime, SandboxLimits, SandboxSpec};
use crate::util;
use crate::wire;

/// The only template: E2B's `base`.
pub(crate) const TEMPLATE: &str = "base";
/// `clientID` as infra returns it (kept for backwards compatibility).
pub(crate) const CLIENT_ID: &str = "6532622b";
/// Samples kept per sandbox (one per interval; 720 × 5 s = 1 hour).
const MAX_SAMPLES: usize = 720;
/// Log entries kept per sandbox.
const MAX_LOGS: usize = 1000;
/// `network.denyOut` entry for all egress.
const ALL_TRAFFIC: &str = "0.0.0.0/0";
/// Where `network.maskRequestHost` puts the port.
const PORT_PLACEHOLDER: &str = "${PORT}";

/// What a `/files` URL signature covers, and the signature.
pub(crate) struct SignedUrl<'a> {
    pub(crate) path: &'a str,
    pub(crate) op: FileOperation,
    pub(crate) user: &'a str,
    /// Unix seconds.
    pub(crate) expiration: Option<i64>,
    pub(crate) signature: &'a str,
}

/// A failed API call: the status and the message of E2B's `Error` body.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            format!("sandbox \"{id}\" doesn't exist or you don't have access to it"),
        )
    }
}

/// The size of a sandbox as info, list and metrics report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resources {
    pub(crate) cpu_count: u32,
    pub(crate) memory_mb: u64,
    pub(crate) disk_size_mb: u64,
}

impl Resources {
    /// A sandbox on this machine (`self`, the machine's resources) held to `limits`: its memory
    /// limit, its writable filesystem (as large as its memory) and its CPU quota rounded up,
    /// never more than the machine has. Without limits, the machine's.
    pub(crate) fn within(self, limits: Option<SandboxLimits>) -> Resources {
        let Some(l) = limits else {
            return self;
        };
        let cpus = l.cpu_count().map_or(self.cpu_count, |c| {
            // A quota of 0.5 CPU is reported as 1, as E2B reports whole vCPUs.
            (c.ceil().clamp(1.0, f64::from(u32::MAX)) as u32).min(self.cpu_count)
        });
        Resources {
            cpu_count: cpus.max(1),
            // The machine's memory is 0 when /proc/meminfo could not be read.
            memory_mb: match self.memory_mb {
                0 => l.memory_mb(),
                host => l.memory_mb().min(host),
            },
            disk_size_mb: l.memory_mb(),
        }
    }
}

/// Capacity and reported resources.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The machine's resources (what a sandbox without limits reports).
    pub(crate) host: Resources,
    pub(crate) max_sandboxes: usize,
    pub(crate) max_timeout: Duration,
    pub(crate) state_dir: PathBuf,
    /// The domain the SDKs build sandbox host names with (`<port>-<id>.<domain>`).
    pub(crate) domain: String,
}

/// `running` or `paused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Running,
    Paused,
}

impl State {
    pub(crate) fn wire(self) -> wire::SandboxState {
        match self {
            State::Running => wire::SandboxState::Running,
            State::Paused => wire::SandboxState::Paused,
        }
    }
}

struct LogItem {
    at: OffsetDateTime,
    level: wire::LogLevel,
    message: String,
}

struct Inner {
    state: State,
    started_at: OffsetDateTime,
    end_at: OffsetDateTime,
    samples: VecDeque<(OffsetDateTime, wire::SandboxMetric)>,
    logs: VecDeque<LogItem>,
    last_cpu: Option<(Instant, f64)>,
}

/// One sandbox.
pub(crate) struct Sandbox {
    pub(crate) id: String,
    pub(crate) token: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) allow_internet_access: Option<bool>,
    pub(crate) auto_pause: bool,
    /// Traffic to a paused sandbox resumes it (`autoResume`), for `timeout` seconds.
    auto_resume: bool,
    timeout: i32,
    /// Required in `e2b-traffic-access-token` on the sandbox's user ports
    /// (`network.allowPublicTraffic: false`).
    traffic_token: Option<String>,
    /// The `Host` the sandbox's user-port servers see (`network.maskRequestHost`, `${PORT}`
    /// replaced by the port).
    mask_host: Option<String>,
    pub(crate) envd_version: String,
    pub(crate) envd_addr: SocketAddr,
    /// Its size, as reported.
    resources: Resources,
    dir: PathBuf,
    instance: Box<dyn Instance>,
    inner: Mutex<Inner>,
}

/// A snapshot of a sandbox's changing fields.
#[derive(Debug, Clone)]
pub(crate) struct View {
    pub(crate) state: State,
    pub(crate) started_at: OffsetDateTime,
    pub(crate) end_at: OffsetDateTime,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sandbox {
    pub(crate) fn view(&self) -> View {
        let i = lock(&self.inner);
        View {
            state: i.state,
            started_at: i.started_at,
            end_at: i.end_at,
        }
    }

    fn log(&self, level: wire::LogLevel, message: impl Into<String>) {
        let mut i = lock(&self.inner);
        if i.logs.len() == MAX_LOGS {
            i.logs.pop_front();
        }
        i.logs.push_back(LogItem {
            at: util::now(),
            level,
            message: message.into(),
        });
    }

    /// `Sandbox` body (create/connect).
    pub(crate) fn wire(&self, s: &Settings) -> wire::Sandbox {
        wire::Sandbox {
            template_id: TEMPLATE.into(),
            sandbox_id: self.id.clone(),
            client_id: CLIENT_ID.into(),
            alias: Some(TEMPLATE.into()),
            envd_version: self.envd_version.clone(),
            envd_access_token: self.token.clone(),
            traffic_access_token: self.traffic_token.clone(),
            domain: Some(s.domain.clone()),
        }
    }

    pub(crate) fn detail(&self, s: &Settings) -> wire::SandboxDetail {
        // The fields both schemas have come from `listed`.
        let l = self.listed(&self.view());
        wire::SandboxDetail {
            alias: l.alias,
            client_id: l.client_id,
            cpu_count: l.cpu_count,
            disk_size_mb: l.disk_size_mb,
            end_at: l.end_at,
            envd_version: l.envd_version,
            memory_mb: l.memory_mb,
            metadata: l.metadata,
            sandbox_id: l.sandbox_id,
            started_at: l.started_at,
            state: l.state,
            template_id: l.template_id,
            volume_mounts: l.volume_mounts,
            envd_access_token: self.token.clone(),
            allow_internet_access: self.allow_internet_access,
            domain: Some(s.domain.clone()),
            network: (self.traffic_token.is_some() || self.mask_host.is_some()).then(|| {
                wire::SandboxNetworkConfig {
                    allow_public_traffic: self.traffic_token.is_some().then_some(false),
                    mask_request_host: self.mask_host.clone(),
                    ..Default::default()
                }
            }),
            lifecycle: Some(wire::SandboxLifecycle {
                auto_resume: self.auto_resume,
                on_timeout: if self.auto_pause {
                    wire::SandboxOnTimeout::Pause
                } else {
                    wire::SandboxOnTimeout::Kill
                },
            }),
        }
    }

    pub(crate) fn listed(&self, v: &View) -> wire::ListedSandbox {
        let r = &self.resources;
        wire::ListedSandbox {
            template_id: TEMPLATE.into(),
            sandbox_id: self.id.clone(),
            client_id: CLIENT_ID.into(),
            alias: Some(TEMPLATE.into()),
            started_at: util::rfc3339(v.started_at),
            end_at: util::rfc3339(v.end_at),
            cpu_count: wire::int32(u64::from(r.cpu_count)),
            memory_mb: wire::int32(r.memory_mb),
            disk_size_mb: wire::int32(r.disk_size_mb),
            state: v.state.wire(),
            envd_version: self.envd_version.clone(),
            metadata: Some(self.metadata.clone()),
            volume_mounts: None,
        }
    }

    /// Metrics samples with `start <= timestampUnix <= end`.
    pub(crate) fn metrics(&self, start: Option<i64>, end: Option<i64>) -> Vec<wire::SandboxMetric> {
        let i = lock(&self.inner);
        i.samples
            .iter()
            .map(|(_, m)| m)
            .filter(|m| start.is_none_or(|s| m.timestamp_unix >= s))
            .filter(|m| end.is_none_or(|e| m.timestamp_unix <= e))
            .cloned()
            .collect()
    }

    pub(crate) fn latest_metric(&self) -> Option<wire::SandboxMetric> {
        lock(&self.inner).samples.back().map(|(_, m)| m.clone())
    }

    /// Log entries at or after `start` (unix ms), at most `limit`.
    pub(crate) fn logs(
        &self,
        start_ms: Option<i64>,
        limit: usize,
    ) -> Vec<(OffsetDateTime, wire::LogLevel, String)> {
        let i = lock(&self.inner);
        i.logs
            .iter()
            .filter(|l| {
                start_ms.is_none_or(|s| (l.at.unix_timestamp_nanos() / 1_000_000) as i64 >= s)
            })
            .take(limit)
            .map(|l| (l.at, l.level, l.message.clone()))
            .collect()
    }

    /// Takes one resource sample (running sandboxes only).
    fn sample(&self) {
        let usage = self.instance.usage();
        let now_i = Instant::now();
        let at = util::now();
        let disk = usage.disk.unwrap_or_else(|| {
            nix::sys::statvfs::statvfs(&self.dir)
                .map(|v| util::fs_usage(&v))
                .unwrap_or((0, 0))
        });
        let r = &self.resources;
        let mut i = lock(&self.inner);
        if i.state != State::Running {
            return;
        }
        let pct = match i.last_cpu {
            Some((t, cpu)) => {
                let wall = now_i.duration_since(t).as_secs_f64();
                if wall > 0.0 {
                    ((usage.cpu_seconds - cpu).max(0.0) / wall / f64::from(r.cpu_count.max(1))
                        * 100.0)
                        .min(100.0)
                } else {
                    0.0
                }
            }
            None => 0.0,
        };
        i.last_cpu = Some((now_i, usage.cpu_seconds));
        let metric = wire::SandboxMetric {
            timestamp: util::rfc3339(at),
            timestamp_unix: at.unix_timestamp(),
            cpu_count: wire::int32(u64::from(r.cpu_count)),
            cpu_used_pct: (pct * 100.0).round() / 100.0,
            mem_used: wire::int64(usage.memory_bytes),
            mem_total: wire::int64(r.memory_mb.saturating_mul(1024 * 1024)),
            mem_cache: 0,
            disk_used: wire::int64(disk.0),
            disk_total: wire::int64(disk.1),
        };
        if i.samples.len() == MAX_SAMPLES {
            i.samples.pop_front();
        }
        i.samples.push_back((at, metric));
    }

    /// The `Host` a request to user port `port` carries to the sandbox's server, when the
    /// sandbox masks it (`network.maskRequestHost`).
    pub(crate) fn masked_host(&self, port: u16) -> Option<String> {
        self.mask_host
            .as_ref()
            .map(|m| m.replace(PORT_PLACEHOLDER, &port.to_string()))
    }

    /// Whether a request to the sandbox's user ports carrying `token` (the
    /// `e2b-traffic-access-token` header) may pass: always when its ports are public, else only
    /// with its traffic access token (compared in constant time). `Err` says what is wrong.
    pub(crate) fn admits_traffic(&self, token: Option<&[u8]>) -> Result<(), &'static str> {
        let Some(want) = &self.traffic_token else {
            return Ok(());
        };
        match token {
            None => Err("missing traffic access token"),
            Some(t) if bool::from(want.as_bytes().ct_eq(t)) => Ok(()),
            Some(_) => Err("invalid traffic access token"),
        }
    }

    /// Whether `url`'s signature is the `v1_` signature the SDKs put on `/files` URLs, made
    /// with this sandbox's token (compared in constant time).
    pub(crate) fn signs(&self, url: &SignedUrl<'_>) -> bool {
        let Some(token) = &self.token else {
            return false;
        };
        let expected = file_signature(url.path, url.op, url.user, token, url.expiration);
        bool::from(expected.as_bytes().ct_eq(url.signature.as_bytes()))
    }
}

/// All sandboxes, and what starts them.
pub(crate) struct Registry {
    map: Mutex<HashMap<String, Arc<Sandbox>>>,
    pending: AtomicUsize,
    runtime: Arc<dyn Runtime>,
    pub(crate) settings: Settings,
    client: Client<HttpConnector, Full<Bytes>>,
    idempotency: Mutex<HashMap<String, String>>,
}

/// Idempotency keys remembered (then forgotten all at once).
const MAX_IDEMPOTENCY_KEYS: usize = 4096;

/// Where a request for a sandbox's envd goes.
pub(crate) enum Route {
    /// The envd of a running sandbox.
    Envd(SocketAddr),
    /// No such sandbox, or it is not running.
    NotFound,
}

impl Registry {
    pub(crate) fn new(runtime: Arc<dyn Runtime>, settings: Settings) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            pending: AtomicUsize::new(0),
            runtime,
            settings,
            client: Client::builder(TokioExecutor::new()).build_http(),
            idempotency: Mutex::new(HashMap::new()),
        }
    }

    /// The live sandbox a create with this `Idempotency-Key` made.
    pub(crate) fn by_idempotency_key(&self, key: &str) -> Option<Arc<Sandbox>> {
        let id = lock(&self.idempotency).get(key).cloned()?;
        self.get(&id)
    }

    /// Remembers which sandbox a create with `key` made.
    pub(crate) fn remember_idempotency_key(&self, key: String, id: &str) {
        let mut map = lock(&self.idempotency);
        if map.len() >= MAX_IDEMPOTENCY_KEYS {
            map.clear();
        }
        map.insert(key, id.to_owned());
    }

    pub(crate) fn runtime_name(&self) -> &'static str {
        self.runtime.name()
    }

    pub(crate) fn get(&self, id: &str) -> Option<Arc<Sandbox>> {
        lock(&self.map).get(id).cloned()
    }

    pub(crate) fn all(&self) -> Vec<Arc<Sandbox>> {
        lock(&self.map).values().cloned().collect()
    }

    /// Sandbox `id` when it is running, resuming it first when it is paused with
    /// `autoResume` (traffic wakes it, as on E2B).
    pub(crate) fn running(&self, id: &str) -> Option<Arc<Sandbox>> {
        let s = self.get(id)?;
        match s.view().state {
            State::Running => Some(s),
            State::Paused if s.auto_resume => {
                tracing::info!(sandbox = %id, "traffic for a paused sandbox with autoResume: resuming it");
                self.connect(id, s.timeout).ok().map(|(s, _)| s)
            }
            State::Paused => None,
        }
    }

    /// The envd a request for sandbox `id` goes to.
    pub(crate) fn route(&self, id: &str) -> Route {
        match self.running(id) {
            Some(s) => Route::Envd(s.envd_addr),
            None => Route::NotFound,
        }
    }

    /// A process in running sandbox `id`'s own network namespace (`Some(None)`: it shares the
    /// machine's network; `None`: no such running sandbox).
    pub(crate) fn netns_of(&self, id: &str) -> Option<Option<i32>> {
        Some(self.running(id)?.instance.netns_pid())
    }

    /// Whether `port` is the loopback port of some sandbox's envd.
    pub(crate) fn is_envd_port(&self, port: u16) -> bool {
        lock(&self.map).values().any(|s| s.envd_addr.port() == port)
    }

    /// The running sandbox whose token signed this `/files` URL (a paused one with
    /// `autoResume` is resumed first).
    pub(crate) fn route_signed(&self, url: &SignedUrl<'_>) -> Option<(String, SocketAddr)> {
        let s = self
            .all()
            .into_iter()
            .find(|s| (s.auto_resume || s.view().state == State::Running) && s.signs(url))?;
        let s = self.running(&s.id)?;
        Some((s.id.clone(), s.envd_addr))
    }

    fn timeout_of(&self, secs: i32) -> Result<Duration, Failure> {
        if secs < 0 {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                "timeout must be 0 or more seconds",
            ));
        }
        Ok(Duration::from_secs(secs as u64).min(self.settings.max_timeout))
    }

    /// `POST /sandboxes`.
    pub(crate) async fn create(&self, req: wire::NewSandbox) -> Result<Arc<Sandbox>, Failure> {
        let template = req.template_id.split(':').next().unwrap_or("");
        if template != TEMPLATE {
            return Err(Failure::new(
                StatusCode::NOT_FOUND,
                format!(
                    "template '{}' not found: e2b serve has only the '{TEMPLATE}' template",
                    req.template_id
                ),
            ));
        }
        let secs = req.timeout.unwrap_or(15);
        if secs <= 0 {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                "Timeout must be greater than 0",
            ));
        }
        let ttl = self.timeout_of(secs)?;
        let allow_internet_access = self.internet_access(&req)?;
        let slots = self.pending.fetch_add(1, Ordering::SeqCst) + lock(&self.map).len();
        let _pending = PendingGuard(&self.pending);
        if slots >= self.settings.max_sandboxes {
            return Err(Failure::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "You have reached the maximum number of concurrent sandboxes ({}); kill some or start e2b serve with a larger --max-sandboxes",
                    self.settings.max_sandboxes
                ),
            ));
        }
        let id = util::sandbox_id();
        let dir = self.settings.state_dir.join(&id);
        let instance = self
            .runtime
            .spawn(SandboxSpec {
                id: id.clone(),
                dir: dir.clone(),
                allow_internet_access,
            })
            .await
            .map_err(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
            })?;
        let token = req.secure.unwrap_or(false).then(|| util::random_hex(32));
        let mut env: HashMap<String, String> =
            req.env_vars.unwrap_or_default().into_iter().collect();
        env.insert("E2B_SANDBOX_ID".into(), id.clone());
        env.insert("E2B_TEMPLATE_ID".into(), TEMPLATE.into());
        let version = match self.init(instance.as_ref(), token.as_deref(), env).await {
            Ok(v) => v,
            Err(e) => {
                instance.kill().await;
                let _ = std::fs::remove_dir_all(&dir);
                return Err(Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e));
            }
        };
        let now = util::now();
        let sandbox = Arc::new(Sandbox {
            id: id.clone(),
            token,
            metadata: req.metadata.unwrap_or_default(),
            allow_internet_access: req.allow_internet_access,
            auto_pause: req.auto_pause.unwrap_or(false),
            auto_resume: req.auto_resume.as_ref().is_some_and(|a| a.enabled),
            timeout: secs,
            traffic_token: req
                .network
                .as_ref()
                .is_some_and(|n| n.allow_public_traffic == Some(false))
                .then(|| util::random_hex(32)),
            mask_host: req
                .network
                .as_ref()
                .and_then(|n| n.mask_request_host.clone())
                .filter(|h| !h.is_empty()),
            envd_version: version,
            envd_addr: instance.envd_addr(),
            resources: self.settings.host.within(instance.limits()),
            dir,
            instance,
            inner: Mutex::new(Inner {
                state: State::Running,
                started_at: now,
                end_at: now + ttl,
                samples: VecDeque::new(),
                logs: VecDeque::new(),
                last_cpu: None,
            }),
        });
        sandbox.sample();
        sandbox.log(
            wire::LogLevel::Info,
            format!("sandbox {id} created (runtime {})", self.runtime.name()),
        );
        lock(&self.map).insert(id, sandbox.clone());
        Ok(sandbox)
    }

    /// Whether the sandbox `req` asks for may reach the internet; a 400 for what of the request
    /// `e2b serve` cannot hold (egress rules, volumes, MCP, workload identity, a network of its
    /// own on a runtime without one): refused, never silently dropped, since a caller that asked
    /// for a restriction must not get a sandbox without it.
    fn internet_access(&self, req: &wire::NewSandbox) -> Result<bool, Failure> {
        let refuse = |what: &str, why: &str| {
            Err(Failure::new(
                StatusCode::BAD_REQUEST,
                format!("{what}: e2b serve {why}; leave it out, or use E2B's cloud"),
            ))
        };
        if req.volume_mounts.as_ref().is_some_and(|v| !v.is_empty()) {
            return refuse("volumeMounts", "has no volumes");
        }
        if req.mcp.as_ref().is_some_and(|m| !m.is_empty()) {
            return refuse("mcp", "has no MCP gateway");
        }
        if req
            .iam
            .as_ref()
            .and_then(|i| i.tokens.as_ref())
            .is_some_and(|t| !t.is_empty())
        {
            return refuse("iam", "issues no workload identity tokens");
        }
        let mut allow = req.allow_internet_access.unwrap_or(true);
        if let Some(n) = &req.network {
            if n.allow_out.as_ref().is_some_and(|v| !v.is_empty()) {
                return refuse(
                    "network.allowOut",
                    "cannot filter a sandbox's egress by destination (allow_internet_access=false, \
                     or network.denyOut [\"0.0.0.0/0\"], cuts it off entirely)",
                );
            }
            if let Some(deny) = n.deny_out.as_ref().filter(|v| !v.is_empty()) {
                if deny.iter().any(|d| d.trim() != ALL_TRAFFIC) {
                    return refuse(
                        "network.denyOut",
                        "can deny all egress ([\"0.0.0.0/0\"]) but not single destinations",
                    );
                }
                allow = false;
            }
            if n.egress_proxy.is_some() {
                return refuse("network.egressProxy", "has no egress proxy");
            }
            if n.rules.as_ref().is_some_and(|r| !r.is_empty()) {
                return refuse("network.rules", "has no egress proxy to apply rules");
            }
            if let Some(h) = n.mask_request_host.as_deref().filter(|h| !h.is_empty())
                && http::HeaderValue::from_str(&h.replace(PORT_PLACEHOLDER, "65535")).is_err()
            {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    format!("network.maskRequestHost {h:?} is not a valid Host header"),
                ));
            }
        }
        if !allow && !self.runtime.isolates_network() {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "a sandbox without internet access needs a network of its own, and this e2b \
                     serve runs {} sandboxes, which share the machine's: start it with \
                     --isolation isolated (as root), or allow internet access",
                    self.runtime.name()
                ),
            ));
        }
        Ok(allow)
    }

    /// `POST /init` to a new envd, as E2B's orchestrator does; returns `X-Envd-Version`.
    async fn init(
        &self,
        instance: &dyn Instance,
        token: Option<&str>,
        env: HashMap<String, String>,
    ) -> Result<String, String> {
        let mut body = serde_json::json!({
            "envVars": env,
            "defaultUser": instance.default_user(),
            "defaultWorkdir": instance.default_workdir(),
            "timestamp": util::rfc3339(util::now()),
        });
        if let (Some(t), Some(obj)) = (token, body.as_object_mut()) {
            obj.insert("accessToken".into(), t.into());
        }
        let body = Bytes::from(body.to_string());
        let uri = format!("http://{}/init", instance.envd_addr());
        let mut last = String::new();
        for _ in 0..200 {
            let mut req =
                http::Request::post(&uri).header(http::header::CONTENT_TYPE, "application/json");
            if let Some(t) = token {
                req = req.header(ACCESS_TOKEN, t);
            }
            let req = req
                .body(Full::new(body.clone()))
                .map_err(|e| e.to_string())?;
            match tokio::time::timeout(Duration::from_secs(10), self.client.request(req)).await {
                Ok(Ok(resp)) => {
                    let status = resp.status();
                    let version = resp
                        .headers()
                        .get("x-envd-version")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    if status.is_success() {
                        return version.ok_or_else(|| {
                            "envd answered /init without X-Envd-Version".to_string()
                        });
                    }
                    let text = resp
                        .into_body()
                        .collect()
                        .await
                        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                        .unwrap_or_default();
                    return Err(format!("envd refused /init: {status} {text}"));
                }
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "timed out".into(),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Err(format!("envd did not accept /init: {last}"))
    }

    /// Removes and kills a sandbox (running or paused). `false` when there is none.
    pub(crate) async fn kill(&self, id: &str) -> bool {
        let Some(s) = lock(&self.map).remove(id) else {
            return false;
        };
        s.log(wire::LogLevel::Info, "sandbox killed");
        s.instance.kill().await;
        let _ = std::fs::remove_dir_all(&s.dir);
        true
    }

    /// `POST /sandboxes/{id}/timeout`: `endAt = now + timeout` (may shorten; 0 = now).
    pub(crate) fn set_timeout(&self, id: &str, secs: i32) -> Result<(), Failure> {
        let s = self.get(id).ok_or_else(|| Failure::not_found(id))?;
        let ttl = self.timeout_of(secs)?;
        let mut i = lock(&s.inner);
        if i.state == State::Paused {
            return Err(Failure::new(
                StatusCode::CONFLICT,
                format!("sandbox {id} is paused; connect to it first"),
            ));
        }
        i.end_at = util::now() + ttl;
        drop(i);
        s.log(wire::LogLevel::Info, format!("timeout set to {secs} s"));
        Ok(())
    }

    /// `POST /sandboxes/{id}/connect`: resumes a paused sandbox (`true` = it was resumed) and
    /// only ever extends the TTL.
    pub(crate) fn connect(&self, id: &str, secs: i32) -> Result<(Arc<Sandbox>, bool), Failure> {
        let s = self.get(id).ok_or_else(|| Failure::not_found(id))?;
        let ttl = self.timeout_of(secs)?;
        let mut i = lock(&s.inner);
        let now = util::now();
        let resumed = i.state == State::Paused;
        if resumed {
            s.instance
                .resume()
                .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            i.state = State::Running;
            i.started_at = now;
            i.end_at = now + ttl;
            i.last_cpu = None;
        } else if now + ttl > i.end_at {
            i.end_at = now + ttl;
        }
        drop(i);
        s.log(
            wire::LogLevel::Info,
            if resumed {
                "sandbox resumed"
            } else {
                "connected"
            },
        );
        Ok((s, resumed))
    }

    /// `POST /sandboxes/{id}/refreshes`: keeps a running sandbox alive `secs` more (only ever
    /// extends). A paused sandbox is not running, so it is not found here (as E2B answers),
    /// and is never resumed by a refresh.
    pub(crate) fn refresh(&self, id: &str, secs: i32) -> Result<(), Failure> {
        let s = self.get(id).ok_or_else(|| Failure::not_found(id))?;
        let ttl = self.timeout_of(secs)?;
        let mut i = lock(&s.inner);
        if i.state == State::Paused {
            return Err(Failure::new(
                StatusCode::NOT_FOUND,
                format!(
                    "sandbox {id} is paused, and a refresh only keeps a running sandbox alive: \
                     connect to it to resume it"
                ),
            ));
        }
        let now = util::now();
        if now + ttl > i.end_at {
            i.end_at = now + ttl;
        }
        Ok(())
    }

    /// Deprecated `POST /sandboxes/{id}/resume`: 409 when running.
    pub(crate) fn resume(&self, id: &str, secs: i32) -> Result<Arc<Sandbox>, Failure> {
        let s = self.get(id).ok_or_else(|| Failure::not_found(id))?;
        if s.view().state == State::Running {
            return Err(Failure::new(
                StatusCode::CONFLICT,
                format!("Sandbox {id} is already running"),
            ));
        }
        self.connect(id, secs).map(|(s, _)| s)
    }

    /// `POST /sandboxes/{id}/pause`: 409 when already paused.
    pub(crate) fn pause(&self, id: &str) -> Result<(), Failure> {
        let s = self.get(id).ok_or_else(|| Failure::not_found(id))?;
        s.sample();
        let mut i = lock(&s.inner);
        if i.state == State::Paused {
            return Err(Failure::new(
                StatusCode::CONFLICT,
                format!("Sandbox {id} is already paused"),
            ));
        }
        s.instance
            .pause()
            .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        i.state = State::Paused;
        i.end_at = util::now();
        drop(i);
        s.log(wire::LogLevel::Info, "sandbox paused");
        Ok(())
    }

    /// Kills (or pauses, with `autoPause`) every running sandbox whose time is up.
    pub(crate) async fn expire(&self) {
        let now = util::now();
        let due: Vec<Arc<Sandbox>> = self
            .all()
            .into_iter()
            .filter(|s| {
                let v = s.view();
                v.state == State::Running && v.end_at <= now
            })
            .collect();
        for s in due {
            if s.auto_pause {
                let _ = self.pause(&s.id);
            } else {
                tracing::info!(sandbox = %s.id, "timeout: killing the sandbox");
                self.kill(&s.id).await;
            }
        }
    }

    /// Takes a metrics sample of every running sandbox.
    pub(crate) fn sample_all(&self) {
        for s in self.all() {
            s.sample();
        }
    }

    /// Kills every sandbox.
    pub(crate) async fn kill_all(&self) {
        let ids: Vec<String> = lock(&self.map).keys().cloned().collect();
        for id in ids {
            self.kill(&id).await;
        }
    }

    /// How many sandboxes exist.
    pub(crate) fn len(&self) -> usize {
        lock(&self.map).len()
    }
}

struct PendingGuard<'a>(&'a AtomicUsize);

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_reports_its_limits_within_the_machine() {
        let host = Resources {
            cpu_count: 2,
            memory_mb: 24_000,
            disk_size_mb: 250_000,
        };
        assert_eq!(
            host.within(None),
            host,
            "a plain sandbox reports the machine"
        );
        let half = SandboxLimits::new(256, Some(0.5)).unwrap();
        assert_eq!(
            host.within(Some(half)),
            Resources {
                cpu_count: 1,
                memory_mb: 256,
                disk_size_mb: 256,
            }
        );
        // More than the machine has is reported as what the machine has.
        let big = SandboxLimits::new(64 << 10, Some(8.0)).unwrap();
        let r = host.within(Some(big));
        assert_eq!(
            (r.cpu_count, r.memory_mb, r.disk_size_mb),
            (2, 24_000, 64 << 10)
        );
        let unlimited_cpu = SandboxLimits::new(2048, None).unwrap();
        assert_eq!(host.within(Some(unlimited_cpu)).cpu_count, 2);
    }
}
