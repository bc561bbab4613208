//! Sandboxes from E2B's API (E2B's cloud, a self-hosted E2B, or `e2b serve`): create, connect
//! by id, list, and the lifecycle calls on a sandbox.

use std::collections::BTreeMap;
use std::time::Duration;

use e2b_api::models::{ListedSandbox, NewSandbox, SandboxDetail, SandboxMetric, SandboxState};
use e2b_api::{ApiClient, ConnectionConfig, ListQuery, Paginator};
use e2b_envd_client::{EnvdConnection, EnvdEndpoint};
use e2b_envd_version::EnvdVersion;

use crate::error::SandboxError;
use crate::sandbox::Sandbox;

/// The first envd version the SDKs accept at all (older templates must be rebuilt).
const MIN_ENVD: EnvdVersion = EnvdVersion::new(0, 1, 0);
/// The first envd version that reports metrics (the SDKs' `ENVD_METRICS` gate).
const METRICS_ENVD: EnvdVersion = EnvdVersion::new(0, 1, 5);

/// What a sandbox from the API keeps: the client and the create/connect answer.
#[derive(Debug, Clone)]
pub(crate) struct CloudSandbox {
    pub(crate) api: ApiClient,
    pub(crate) info: e2b_api::models::Sandbox,
}

/// Options for [`Sandbox::create`], from [`Sandbox::builder`]. The defaults are the official
/// SDKs': a 300 s timeout, `secure` and internet access on, no metadata, no variables.
#[derive(Debug, Clone)]
#[must_use]
pub struct SandboxBuilder {
    template: String,
    timeout: Duration,
    metadata: BTreeMap<String, String>,
    envs: BTreeMap<String, String>,
    secure: bool,
    allow_internet_access: bool,
    auto_pause: Option<bool>,
    auto_resume: Option<bool>,
    allow_public_traffic: Option<bool>,
    api: Option<ApiClient>,
    config: Option<ConnectionConfig>,
}

impl SandboxBuilder {
    pub(crate) fn new(template: impl Into<String>) -> Self {
        Self {
            template: template.into(),
            timeout: e2b_api::DEFAULT_SANDBOX_TIMEOUT,
            metadata: BTreeMap::new(),
            envs: BTreeMap::new(),
            secure: true,
            allow_internet_access: true,
            auto_pause: None,
            auto_resume: None,
            allow_public_traffic: None,
            api: None,
            config: None,
        }
    }

    /// How long the sandbox lives (default 300 s); extend it later with
    /// [`Sandbox::set_timeout`]. Sent in whole seconds, rounded up.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Adds a metadata pair (for [`Sandbox::list`] filters).
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Adds an environment variable every command in the sandbox sees.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.envs.insert(key.into(), value.into());
        self
    }

    /// Adds environment variables.
    pub fn envs<K: Into<String>, V: Into<String>>(
        mut self,
        envs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.envs
            .extend(envs.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Whether envd requires an access token (default `true`, as in the SDKs).
    pub fn secure(mut self, secure: bool) -> Self {
        self.secure = secure;
        self
    }

    /// Whether the sandbox may reach the internet (default `true`).
    pub fn allow_internet_access(mut self, allow: bool) -> Self {
        self.allow_internet_access = allow;
        self
    }

    /// Pause instead of kill when the timeout expires (`autoPause`; default: the server's,
    /// kill).
    pub fn auto_pause(mut self, auto_pause: bool) -> Self {
        self.auto_pause = Some(auto_pause);
        self
    }

    /// Resume the sandbox when traffic reaches it while paused (`autoResume`; with
    /// [`auto_pause`](Self::auto_pause), the SDKs' `lifecycle` with `auto_resume`).
    pub fn auto_resume(mut self, auto_resume: bool) -> Self {
        self.auto_resume = Some(auto_resume);
        self
    }

    /// Whether the sandbox's ports are public (default `true`). With `false` every request
    /// to them needs [`Sandbox::traffic_access_token`] in the `e2b-traffic-access-token`
    /// header.
    pub fn allow_public_traffic(mut self, allow: bool) -> Self {
        self.allow_public_traffic = Some(allow);
        self
    }

    /// Uses these connection settings instead of the environment's.
    pub fn connection(mut self, config: ConnectionConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Uses this API client (and its settings).
    pub fn api(mut self, api: ApiClient) -> Self {
        self.api = Some(api);
        self
    }

    /// The `POST /sandboxes` body this builder sends. Like the Python SDK it always sends
    /// `timeout`, `metadata`, `envVars`, `secure` and `allow_internet_access`.
    pub fn request(&self) -> NewSandbox {
        let mut body = NewSandbox::new(self.template.clone());
        body.timeout = Some(e2b_api::seconds(self.timeout));
        body.metadata = Some(self.metadata.clone());
        body.env_vars = Some(self.envs.clone());
        body.secure = Some(self.secure);
        body.allow_internet_access = Some(self.allow_internet_access);
        body.auto_pause = self.auto_pause;
        body.auto_resume = self
            .auto_resume
            .map(|enabled| e2b_api::models::SandboxAutoResumeConfig { enabled });
        body.network =
            self.allow_public_traffic
                .map(|allow| e2b_api::models::SandboxNetworkConfig {
                    allow_public_traffic: Some(allow),
                    ..Default::default()
                });
        body
    }

    /// Creates the sandbox and connects to its envd.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Api`] when the API refuses (no key, unknown template, limits);
    /// [`SandboxError::Template`] when the template's envd is too old for this SDK (the new
    /// sandbox is killed).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after the API answered leaves a sandbox that expires after its
    /// timeout.
    pub async fn create(self) -> Result<Sandbox, SandboxError> {
        let body = self.request();
        let api = match (self.api, self.config) {
            (Some(api), _) => api,
            (None, Some(config)) => ApiClient::new(config)?,
            (None, None) => ApiClient::from_env()?,
        };
        if api.config().is_debug() {
            return debug_sandbox(api.config(), crate::env::DEBUG_SANDBOX_ID).await;
        }
        let info = api.create_sandbox(&body).await?;
        let version = parse_version(&info)?;
        if version < MIN_ENVD {
            // As the SDKs do: a sandbox this SDK cannot drive is killed at once.
            let _ = api.kill_sandbox(&info.sandbox_id).await;
            return Err(SandboxError::Template(format!(
                "the template {:?} runs envd {version}, older than {MIN_ENVD}: you need to update \
                 the template to use the new SDK (rebuild it with `e2b template build`)",
                body.template_id
            )));
        }
        Sandbox::from_api(api, info)
    }
}

/// Debug mode's sandbox (`E2B_DEBUG=true`), as the SDKs make it: no API call; the envd at the
/// config's envd URL (`E2B_SANDBOX_URL`, else `http://localhost:49983`) as sandbox `id`, envd
/// version 99.99.99, no access token. Connected by URL, so killing it only drops the connection.
async fn debug_sandbox(config: &ConnectionConfig, id: &str) -> Result<Sandbox, SandboxError> {
    let ep = EnvdEndpoint::new(config.envd_url(id, None))
        .sandbox_id(id)
        .envd_version(EnvdVersion::debug_fallback());
    let ep = crate::env::apply_transport_and_user(ep, |k| std::env::var(k).ok())?;
    Sandbox::connect(ep).await
}

fn parse_version(info: &e2b_api::models::Sandbox) -> Result<EnvdVersion, SandboxError> {
    info.envd_version.parse().map_err(|e| {
        SandboxError::Template(format!(
            "sandbox {} reports envd version {:?}, which is not a version ({e}); the template's envd \
             is broken or too old: rebuild the template",
            info.sandbox_id, info.envd_version
        ))
    })
}

/// The envd endpoint of a sandbox the API returned, by the SDKs' URL rule: the sandbox URL
/// override, the shared host for E2B's own domains (picked by `E2b-Sandbox-Id`), else
/// `https://49983-<id>.<domain>`. `E2B_ENVD_TRANSPORT` and `E2B_USER` apply as for
/// [`Sandbox::from_env`].
pub fn endpoint_for(
    config: &ConnectionConfig,
    info: &e2b_api::models::Sandbox,
) -> Result<EnvdEndpoint, SandboxError> {
    let version = parse_version(info)?;
    let url = config.envd_url(&info.sandbox_id, info.domain.as_deref());
    let mut ep = EnvdEndpoint::new(url)
        .sandbox_id(info.sandbox_id.clone())
        .envd_version(version);
    if let Some(t) = &info.envd_access_token {
        ep = ep.access_token(t.clone());
    }
    crate::env::apply_transport_and_user(ep, |k| std::env::var(k).ok())
}

impl Sandbox {
    /// Options for a new sandbox from `template` (an id or alias, e.g. `base`); finish with
    /// [`SandboxBuilder::create`].
    pub fn builder(template: impl Into<String>) -> SandboxBuilder {
        SandboxBuilder::new(template)
    }

    /// Creates a sandbox from `template` through E2B's API with the SDKs' defaults (300 s,
    /// secure), reading `E2B_API_KEY`, `E2B_API_URL`, `E2B_DOMAIN`, `E2B_SANDBOX_URL` like the
    /// official SDKs, and connects to its envd. `Sandbox::local()` needs none of that. In debug
    /// mode (`E2B_DEBUG=true`) no API call is made, as in the SDKs: the sandbox is the envd at
    /// `E2B_SANDBOX_URL` (or `http://localhost:49983`), id `debug_sandbox_id`.
    ///
    /// # Errors
    ///
    /// As [`SandboxBuilder::create`].
    ///
    /// # Cancel safety
    ///
    /// As [`SandboxBuilder::create`].
    pub async fn create(template: &str) -> Result<Sandbox, SandboxError> {
        Self::builder(template).create().await
    }

    /// Connects to an existing sandbox by id (`POST /sandboxes/{id}/connect`): a paused one is
    /// resumed; its timeout becomes at least 300 s from now (never shorter). In debug mode
    /// (`E2B_DEBUG=true`) no API call is made, as in the SDKs: the sandbox is the debug envd.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Api`] with [`ApiError::NotFound`](e2b_api::ApiError::NotFound) for an
    /// unknown id, or when the API refuses.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the sandbox resumed.
    pub async fn connect_by_id(sandbox_id: &str) -> Result<Sandbox, SandboxError> {
        let api = ApiClient::from_env()?;
        Self::connect_by_id_with(&api, sandbox_id, e2b_api::DEFAULT_SANDBOX_TIMEOUT).await
    }

    /// [`connect_by_id`](Self::connect_by_id) with your client and timeout.
    ///
    /// # Errors
    ///
    /// As [`connect_by_id`](Self::connect_by_id).
    ///
    /// # Cancel safety
    ///
    /// As [`connect_by_id`](Self::connect_by_id).
    pub async fn connect_by_id_with(
        api: &ApiClient,
        sandbox_id: &str,
        timeout: Duration,
    ) -> Result<Sandbox, SandboxError> {
        if api.config().is_debug() {
            return debug_sandbox(api.config(), sandbox_id).await;
        }
        let connected = api.connect_sandbox(sandbox_id, timeout).await?;
        Self::from_api(api.clone(), connected.sandbox)
    }

    /// Lists sandboxes (running and paused unless `query` says otherwise) through a paginator
    /// that follows `X-Next-Token`; settings from the environment.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Api`] when the settings are malformed; the API's answers come from the
    /// paginator.
    pub fn list(query: ListQuery) -> Result<Paginator, SandboxError> {
        Ok(ApiClient::from_env()?.list(query))
    }

    /// Kills a sandbox by id; `false` when there is no such sandbox.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Api`] when the API refuses.
    ///
    /// # Cancel safety
    ///
    /// Calling again is safe.
    pub async fn kill_by_id(sandbox_id: &str) -> Result<bool, SandboxError> {
        let api = ApiClient::from_env()?;
        if api.config().is_debug() {
            // As the SDKs: debug mode's sandbox is not the API's to kill.
            return Ok(true);
        }
        Ok(api.kill_sandbox(sandbox_id).await?)
    }

    fn from_api(api: ApiClient, info: e2b_api::models::Sandbox) -> Result<Sandbox, SandboxError> {
        let endpoint = endpoint_for(api.config(), &info)?;
        let conn = EnvdConnection::new(endpoint)?;
        Ok(Sandbox::with_cloud(
            info.sandbox_id.clone(),
            conn,
            CloudSandbox { api, info },
        ))
    }

    fn cloud(&self, operation: &'static str) -> Result<&CloudSandbox, SandboxError> {
        self.cloud_handle()
            .ok_or(SandboxError::NotFromApi { operation })
    }

    /// The API client this sandbox was created or connected with (`None` for a local sandbox
    /// or one connected by URL).
    pub fn api(&self) -> Option<&ApiClient> {
        self.cloud_handle().map(|c| &c.api)
    }

    /// The create/connect answer: template, alias, domain, tokens.
    pub fn api_info(&self) -> Option<&e2b_api::models::Sandbox> {
        self.cloud_handle().map(|c| &c.info)
    }

    /// The token for the sandbox's public ports when they are restricted
    /// (`e2b-traffic-access-token` header); the SDK never sends it itself.
    pub fn traffic_access_token(&self) -> Option<&str> {
        self.cloud_handle()
            .and_then(|c| c.info.traffic_access_token.as_deref())
    }

    /// The public host of `port` in this sandbox: `<port>-<id>.<domain>` (`localhost:<port>`
    /// in debug mode), as the SDKs' `get_host`.
    pub fn host(&self, port: u16) -> Option<String> {
        self.cloud_handle().map(|c| {
            let url = c
                .api
                .config()
                .host_url(self.id(), port, c.info.domain.as_deref());
            url.split_once("://")
                .map(|(_, h)| h.to_owned())
                .unwrap_or(url)
        })
    }

    /// Sets the sandbox to expire `timeout` from now (may shorten; zero expires it now).
    ///
    /// # Errors
    ///
    /// [`SandboxError::NotFromApi`] for a local sandbox; [`SandboxError::Api`] otherwise.
    ///
    /// # Cancel safety
    ///
    /// Calling again is safe.
    pub async fn set_timeout(&self, timeout: Duration) -> Result<(), SandboxError> {
        let c = self.cloud("set_timeout")?;
        Ok(c.api.set_timeout(self.id(), timeout).await?)
    }

    /// The sandbox's details: state, start and end time, CPU, memory, metadata.
    ///
    /// # Errors
    ///
    /// As [`set_timeout`](Self::set_timeout).
    ///
    /// # Cancel safety
    ///
    /// Safe: a read.
    pub async fn info(&self) -> Result<SandboxDetail, SandboxError> {
        let c = self.cloud("info")?;
        Ok(c.api.get_sandbox(self.id()).await?)
    }

    /// Whether the API reports the sandbox running (`false` when paused or gone).
    ///
    /// # Errors
    ///
    /// As [`set_timeout`](Self::set_timeout), except that an unknown sandbox is `false`.
    ///
    /// # Cancel safety
    ///
    /// Safe: a read.
    pub async fn is_running(&self) -> Result<bool, SandboxError> {
        match self.info().await {
            Ok(d) => Ok(d.state == SandboxState::Running),
            Err(SandboxError::Api(e)) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// CPU, memory and disk samples over the sandbox's life. Needs envd 0.1.5 or newer
    /// (checked before anything is sent).
    ///
    /// # Errors
    ///
    /// [`SandboxError::Template`] for an older envd; otherwise as
    /// [`set_timeout`](Self::set_timeout).
    ///
    /// # Cancel safety
    ///
    /// Safe: a read.
    pub async fn metrics(&self) -> Result<Vec<SandboxMetric>, SandboxError> {
        self.metrics_between(None, None).await
    }

    /// [`metrics`](Self::metrics) between `start` and `end` (Unix seconds).
    ///
    /// # Errors
    ///
    /// As [`metrics`](Self::metrics).
    ///
    /// # Cancel safety
    ///
    /// Safe: a read.
    pub async fn metrics_between(
        &self,
        start: Option<i64>,
        end: Option<i64>,
    ) -> Result<Vec<SandboxMetric>, SandboxError> {
        let c = self.cloud("metrics")?;
        let actual = self.envd_version();
        if *actual < METRICS_ENVD {
            return Err(SandboxError::Template(format!(
                "metrics need envd {METRICS_ENVD} or newer, but sandbox {} runs envd {actual}: \
                 rebuild its template (`e2b template build`) to get a newer envd",
                self.id()
            )));
        }
        Ok(c.api.sandbox_metrics(self.id(), start, end).await?)
    }

    /// Pauses the sandbox, keeping its memory (every process freezes; envd answers nothing
    /// until [`resume`](Self::resume)). `false` when it was already paused.
    ///
    /// # Errors
    ///
    /// As [`set_timeout`](Self::set_timeout).
    ///
    /// # Cancel safety
    ///
    /// The sandbox may be paused when the future is dropped; `resume` brings it back.
    pub async fn pause(&self) -> Result<bool, SandboxError> {
        let c = self.cloud("pause")?;
        Ok(c.api.pause_sandbox(self.id(), true).await?)
    }

    /// Resumes a paused sandbox (`POST /sandboxes/{id}/connect`, as the SDKs do) with a timeout
    /// of at least 300 s from now. `true` when it was paused and is now resumed, `false` when it
    /// was running already.
    ///
    /// # Errors
    ///
    /// As [`set_timeout`](Self::set_timeout).
    ///
    /// # Cancel safety
    ///
    /// Calling again is safe.
    pub async fn resume(&self) -> Result<bool, SandboxError> {
        let c = self.cloud("resume")?;
        let connected = c
            .api
            .connect_sandbox(self.id(), e2b_api::DEFAULT_SANDBOX_TIMEOUT)
            .await?;
        Ok(connected.resumed)
    }

    /// Lists every sandbox matching `query` with an explicit client (all pages, at most `max`).
    ///
    /// # Errors
    ///
    /// [`SandboxError::Api`] as the API answers.
    ///
    /// # Cancel safety
    ///
    /// Safe: reads.
    pub async fn list_all(
        api: &ApiClient,
        query: ListQuery,
        max: Option<usize>,
    ) -> Result<Vec<ListedSandbox>, SandboxError> {
        Ok(api.list(query).collect(max).await?)
    }
}
