//! Connection settings, read as the official E2B SDKs read them.

use std::time::Duration;

use crate::error::ApiError;

/// The API key (`X-API-Key`).
pub const E2B_API_KEY: &str = "E2B_API_KEY";
/// The base domain (default [`DEFAULT_DOMAIN`]); the API is `https://api.<domain>`.
pub const E2B_DOMAIN: &str = "E2B_DOMAIN";
/// The API's base URL, overriding the domain (e.g. `http://127.0.0.1:3000` for `e2b serve`).
pub const E2B_API_URL: &str = "E2B_API_URL";
/// envd's base URL for every sandbox, overriding the per-sandbox URL rule; the sandbox is then
/// told apart by the `E2b-Sandbox-Id` header only.
pub const E2B_SANDBOX_URL: &str = "E2B_SANDBOX_URL";
/// `true` (any case): debug mode: API `http://localhost:3000`, envd `http://localhost:49983`.
pub const E2B_DEBUG: &str = "E2B_DEBUG";
/// `false` turns off the client-side API key format check (`^e2b_[0-9a-f]+$`), as in the SDKs.
pub const E2B_VALIDATE_API_KEY: &str = "E2B_VALIDATE_API_KEY";

/// E2B's cloud domain, the SDKs' default.
pub const DEFAULT_DOMAIN: &str = "e2b.app";
/// The API URL in debug mode.
pub const DEBUG_API_URL: &str = "http://localhost:3000";
/// The envd URL in debug mode.
pub const DEBUG_ENVD_URL: &str = "http://localhost:49983";
/// envd's port inside a sandbox (`E2b-Sandbox-Port`, and the `49983-<id>` host prefix).
pub const ENVD_PORT: u16 = 49983;
/// The SDKs' request timeout.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The SDKs' sandbox timeout (time to live) for create and connect.
pub const DEFAULT_SANDBOX_TIMEOUT: Duration = Duration::from_secs(300);
/// The template the SDKs create from when none is named.
pub const DEFAULT_TEMPLATE: &str = "base";

/// The domains served by E2B's own proxy, where envd is reached at the shared host
/// `sandbox.<domain>` plus the `E2b-Sandbox-Id` header (the SDKs' `sandbox_domains`).
pub const E2B_SHARED_HOST_DOMAINS: &[&str] = &["e2b.app", "e2b.dev", "e2b.pro", "e2b-staging.dev"];

/// Where the API and the sandboxes are, and how to authenticate.
///
/// [`ConnectionConfig::from_env`] reads the SDKs' variables; the builder methods override them.
#[derive(Clone)]
#[non_exhaustive]
pub struct ConnectionConfig {
    /// The API key (`X-API-Key`).
    pub(crate) api_key: Option<String>,
    /// The base domain; the default API URL is `https://api.<domain>`.
    pub(crate) domain: String,
    /// The API base URL, when set explicitly (or by debug mode).
    pub(crate) api_url: Option<String>,
    /// envd's URL for every sandbox, when set (`E2B_SANDBOX_URL`).
    pub(crate) sandbox_url: Option<String>,
    /// Debug mode (`E2B_DEBUG=true`).
    pub(crate) debug: bool,
    /// Bound on each API request; `None` means no bound.
    pub(crate) request_timeout: Option<Duration>,
    /// Whether the API key's format is checked before sending (`E2B_VALIDATE_API_KEY`).
    pub(crate) validate_api_key: bool,
}

impl std::fmt::Debug for ConnectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionConfig")
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("domain", &self.domain)
            .field("api_url", &self.api_url)
            .field("sandbox_url", &self.sandbox_url)
            .field("debug", &self.debug)
            .field("request_timeout", &self.request_timeout)
            .field("validate_api_key", &self.validate_api_key)
            .finish()
    }
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            api_key: None,
            domain: DEFAULT_DOMAIN.to_owned(),
            api_url: None,
            sandbox_url: None,
            debug: false,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            validate_api_key: true,
        }
    }
}

impl ConnectionConfig {
    /// The settings from the process environment (`E2B_API_KEY`, `E2B_DOMAIN`, `E2B_API_URL`,
    /// `E2B_SANDBOX_URL`, `E2B_DEBUG`, `E2B_VALIDATE_API_KEY`). Empty values count as unset.
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The settings from any variable lookup (`from_env` with `std::env::var`).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| {
            get(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        Self {
            api_key: get(E2B_API_KEY),
            domain: get(E2B_DOMAIN).unwrap_or_else(|| DEFAULT_DOMAIN.to_owned()),
            api_url: get(E2B_API_URL),
            sandbox_url: get(E2B_SANDBOX_URL),
            debug: get(E2B_DEBUG).is_some_and(|v| v.eq_ignore_ascii_case("true")),
            validate_api_key: !get(E2B_VALIDATE_API_KEY)
                .is_some_and(|v| v.eq_ignore_ascii_case("false")),
            ..Self::default()
        }
    }

    /// Sets the API key (sent as `X-API-Key`). Default: none (`E2B_API_KEY` with
    /// [`from_env`](Self::from_env)).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Sets the base domain; the default API URL is `https://api.<domain>`. Default `e2b.app`.
    pub fn domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = domain.into();
        self
    }

    /// Sets the API base URL (e.g. `http://127.0.0.1:3000` for `e2b serve`).
    pub fn api_url(mut self, url: impl Into<String>) -> Self {
        self.api_url = Some(url.into());
        self
    }

    /// Sets envd's URL for every sandbox (`E2B_SANDBOX_URL`). Default: per sandbox, from the
    /// domain.
    pub fn sandbox_url(mut self, url: impl Into<String>) -> Self {
        self.sandbox_url = Some(url.into());
        self
    }

    /// Sets debug mode (`E2B_DEBUG=true`): the API on `http://localhost:3000` and envd on
    /// `http://localhost:49983` unless set otherwise; as in the SDKs, the `e2b` facade then
    /// creates, connects to and kills sandboxes without an API call (the sandbox is the envd at
    /// [`envd_url`](Self::envd_url)). Requests this client does send still need an API key.
    /// Default off.
    pub fn debug(mut self, debug: bool) -> Self {
        self.debug = debug;
        self
    }

    /// Whether debug mode is on (see [`debug`](Self::debug)).
    pub fn is_debug(&self) -> bool {
        self.debug
    }

    /// Sets the per-request bound; zero means none (as `request_timeout=0` in the SDKs).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = (!timeout.is_zero()).then_some(timeout);
        self
    }

    /// Turns the client-side API key format check on or off (`E2B_VALIDATE_API_KEY`).
    pub fn validate_api_key(mut self, validate: bool) -> Self {
        self.validate_api_key = validate;
        self
    }

    /// Whether this configuration can reach a sandbox by id: an API key is set, or debug mode
    /// is on (where the SDKs connect to the debug envd without an API call).
    pub fn has_api(&self) -> bool {
        self.api_key.as_deref().is_some_and(|k| !k.is_empty()) || self.debug
    }

    /// The API base URL: explicit URL > debug (`http://localhost:3000`) > `https://api.<domain>`.
    /// No trailing slash.
    pub fn resolved_api_url(&self) -> String {
        let url = match (&self.api_url, self.debug) {
            (Some(u), _) => u.clone(),
            (None, true) => DEBUG_API_URL.to_owned(),
            (None, false) => format!("https://api.{}", self.domain),
        };
        url.trim_end_matches('/').to_owned()
    }

    /// The domain a sandbox's traffic goes to: the create/connect response's `domain` when it
    /// has one, else the configured domain.
    pub fn sandbox_domain<'a>(&'a self, response_domain: Option<&'a str>) -> &'a str {
        match response_domain {
            Some(d) if !d.is_empty() => d,
            _ => &self.domain,
        }
    }

    /// envd's base URL for a sandbox, by the SDKs' rule: `E2B_SANDBOX_URL` when set; debug →
    /// `http://localhost:49983`; for E2B's own domains ([`E2B_SHARED_HOST_DOMAINS`]) the shared
    /// host `https://sandbox.<domain>` (the sandbox is picked by the `E2b-Sandbox-Id` header);
    /// otherwise `https://49983-<id>.<domain>`. No trailing slash.
    pub fn envd_url(&self, sandbox_id: &str, response_domain: Option<&str>) -> String {
        if let Some(u) = &self.sandbox_url {
            return u.trim_end_matches('/').to_owned();
        }
        if self.debug {
            return DEBUG_ENVD_URL.to_owned();
        }
        let domain = self.sandbox_domain(response_domain);
        if E2B_SHARED_HOST_DOMAINS.contains(&domain) {
            format!("https://sandbox.{domain}")
        } else {
            self.envd_direct_url(sandbox_id, response_domain)
        }
    }

    /// envd's per-sandbox URL (the SDKs' "direct" URL, used for signed `/files` links):
    /// `E2B_SANDBOX_URL` when set, debug → `http://localhost:49983`, else
    /// `https://49983-<id>.<domain>`.
    pub fn envd_direct_url(&self, sandbox_id: &str, response_domain: Option<&str>) -> String {
        if let Some(u) = &self.sandbox_url {
            return u.trim_end_matches('/').to_owned();
        }
        if self.debug {
            return DEBUG_ENVD_URL.to_owned();
        }
        self.host_url(sandbox_id, ENVD_PORT, response_domain)
    }

    /// The public URL of `port` in a sandbox (the SDKs' `get_host`, with scheme):
    /// `https://<port>-<id>.<domain>`, or `http://localhost:<port>` in debug mode.
    pub fn host_url(&self, sandbox_id: &str, port: u16, response_domain: Option<&str>) -> String {
        if self.debug {
            return format!("http://localhost:{port}");
        }
        format!(
            "https://{port}-{sandbox_id}.{}",
            self.sandbox_domain(response_domain)
        )
    }

    /// The API key, checked as the SDKs check it before sending anything.
    ///
    /// # Errors
    ///
    /// [`ApiError::MissingApiKey`] when none is set; [`ApiError::InvalidApiKey`] when it does not
    /// look like `e2b_<hex>` and the check is on.
    pub fn checked_api_key(&self) -> Result<&str, ApiError> {
        let key = self.api_key.as_deref().ok_or(ApiError::MissingApiKey)?;
        if self.validate_api_key && !looks_like_api_key(key) {
            return Err(ApiError::InvalidApiKey);
        }
        Ok(key)
    }
}

/// Whether `key` matches the SDKs' API key format `^e2b_[0-9a-f]+$`.
pub fn looks_like_api_key(key: &str) -> bool {
    key.strip_prefix("e2b_").is_some_and(|hex| {
        !hex.is_empty()
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}
