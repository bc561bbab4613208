//! Where an envd is and how to reach it.

use std::time::Duration;

use e2b_envd_version::EnvdVersion;

/// envd's port inside an E2B sandbox (`E2b-Sandbox-Port`); [`e2b_envd_proto::wire::DEFAULT_PORT`].
pub const DEFAULT_ENVD_PORT: u16 = e2b_envd_proto::wire::DEFAULT_PORT;

/// The wire transport for envd's RPCs. Both carry the same tonic clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Transport {
    /// Pick by URL: `https://` → [`Transport::GrpcWeb`] (real envd speaks no HTTP/2),
    /// `http://` → [`Transport::Grpc`] (our local daemon serves h2c).
    #[default]
    Auto,
    /// gRPC over HTTP/2 cleartext (h2c, prior knowledge). Our daemon (`e2b-envd`) serves it; a
    /// real envd does not.
    Grpc,
    /// gRPC-Web over HTTP/1.1, plain or TLS. Works with a real envd (connect-go accepts
    /// gRPC-Web) and with our daemon.
    GrpcWeb,
}

/// Everything needed to talk to one envd: an options type (private fields, one by-value setter
/// each, `docs/api-style.md`). An [`EnvdConnection`](crate::EnvdConnection) built from it reads
/// the settings back ([`url`](crate::EnvdConnection::url),
/// [`sandbox_id`](crate::EnvdConnection::sandbox_id), ...).
///
/// ```
/// use e2b_envd_client::{EnvdEndpoint, EnvdVersion, Transport};
/// let ep = EnvdEndpoint::new("https://49983-abc.e2b.app")
///     .access_token("token")
///     .sandbox_id("abc")
///     .envd_version(EnvdVersion::new(0, 5, 1))
///     .transport(Transport::GrpcWeb)
///     .user("user");
/// # let _ = ep;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EnvdEndpoint {
    /// Base URL, e.g. `http://127.0.0.1:49983` or `https://49983-<id>.e2b.app`.
    pub(crate) url: String,
    /// envd's access token (`X-Access-Token`), when the sandbox is secured.
    pub(crate) access_token: Option<String>,
    /// The sandbox id (`E2b-Sandbox-Id`), for E2B's shared proxy host.
    pub(crate) sandbox_id: Option<String>,
    /// The envd port sent as `E2b-Sandbox-Port`.
    pub(crate) sandbox_port: u16,
    /// The envd version the sandbox runs; gates features before anything is sent.
    pub(crate) envd_version: EnvdVersion,
    /// The transport; [`Transport::Auto`] picks by URL scheme.
    pub(crate) transport: Transport,
    /// The user commands and file operations run as when a call names none
    /// (`Authorization: Basic base64("<user>:")`). `None` = envd's default user.
    pub(crate) user: Option<String>,
    /// Bound on connecting to envd (TCP and TLS handshake).
    pub(crate) connect_timeout: Duration,
    /// Extra trusted root certificates (DER) for `https://` envds behind a private CA, on top
    /// of the public WebPKI roots.
    pub(crate) extra_root_certificates: Vec<Vec<u8>>,
}

impl EnvdEndpoint {
    /// An endpoint at `url` with no token, the version the local daemon implements, and
    /// [`Transport::Auto`].
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into().trim_end_matches('/').to_owned(),
            access_token: None,
            sandbox_id: None,
            sandbox_port: DEFAULT_ENVD_PORT,
            envd_version: EnvdVersion::implemented(),
            transport: Transport::Auto,
            user: None,
            connect_timeout: Duration::from_secs(10),
            extra_root_certificates: Vec::new(),
        }
    }

    /// Trusts `der` (a DER-encoded CA certificate) for TLS, besides the public WebPKI roots: for
    /// `https://` envds behind a private CA. Adds one; call again for more.
    pub fn add_root_certificate(mut self, der: impl Into<Vec<u8>>) -> Self {
        self.extra_root_certificates.push(der.into());
        self
    }

    /// envd's access token (`X-Access-Token`), when the sandbox is secured. Default: none.
    pub fn access_token(mut self, token: impl Into<String>) -> Self {
        self.access_token = Some(token.into());
        self
    }

    /// The sandbox id (`E2b-Sandbox-Id`), for E2B's shared proxy host. Default: none.
    pub fn sandbox_id(mut self, id: impl Into<String>) -> Self {
        self.sandbox_id = Some(id.into());
        self
    }

    /// The envd port sent as `E2b-Sandbox-Port`. Default [`DEFAULT_ENVD_PORT`].
    pub fn sandbox_port(mut self, port: u16) -> Self {
        self.sandbox_port = port;
        self
    }

    /// The envd version the sandbox runs; gates features before anything is sent. Default: the
    /// version the local daemon implements ([`EnvdVersion::implemented`]).
    pub fn envd_version(mut self, version: EnvdVersion) -> Self {
        self.envd_version = version;
        self
    }

    /// The wire transport. Default [`Transport::Auto`] (picked by URL scheme).
    pub fn transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// The user commands and file operations run as when a call names none
    /// (`Authorization: Basic base64("<user>:")`). Default: envd's default user.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Bound on connecting to envd (TCP and TLS handshake). Default 10 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The transport actually used: [`Transport::Auto`] resolved by the URL scheme.
    pub fn resolved_transport(&self) -> Transport {
        match self.transport {
            Transport::Auto if self.url.starts_with("https://") => Transport::GrpcWeb,
            Transport::Auto => Transport::Grpc,
            other => other,
        }
    }
}
