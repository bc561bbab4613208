//! The connection: one tonic channel over the chosen transport, plus envd's headers.

use std::sync::Arc;
use std::time::Duration;

use e2b_envd_version::{EnvdVersion, Feature};
use http::{HeaderName, HeaderValue, Request, Response};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use tonic::body::Body;
use tonic::metadata::{AsciiMetadataValue, MetadataKey};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder, ServiceExt as _};

use crate::call::{CallOptions, basic_auth_value, headers};
use crate::endpoint::{EnvdEndpoint, Transport};
use crate::error::EnvdError;
use crate::stream::ServerStream;

/// The channel every generated client runs on, whatever the transport.
///
/// Its error is the concrete [`ChannelError`] rather than a bare `Box<dyn Error>`: with a boxed
/// trait object the generated clients' futures cannot be proven `Send` (rustc's higher-ranked
/// `From` check), so they could not be spawned.
pub type EnvdChannel = BoxCloneSyncService<Request<Body>, Response<Body>, ChannelError>;

/// A failure below the RPC layer (connect, TLS, HTTP). Its source chain holds the cause, which
/// tonic inspects to pick the status code.
#[derive(Debug)]
pub struct ChannelError(BoxError);

impl ChannelError {
    fn new(e: impl Into<BoxError>) -> Self {
        Self(e.into())
    }
}

impl std::fmt::Display for ChannelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for ChannelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// envd's Process service client on an [`EnvdChannel`].
pub type ProcessClient = e2b_envd_proto::process::process_client::ProcessClient<EnvdChannel>;

/// envd's Filesystem service client on an [`EnvdChannel`].
pub type FilesystemClient =
    e2b_envd_proto::filesystem::filesystem_client::FilesystemClient<EnvdChannel>;

/// HTTP/2 frame size the h2c transport accepts.
const H2_MAX_FRAME_SIZE: u32 = 1 << 20;
/// Per-stream flow-control window of the h2c transport.
const H2_STREAM_WINDOW: u32 = 4 << 20;
/// Connection flow-control window of the h2c transport (shared by concurrent streams).
const H2_CONNECTION_WINDOW: u32 = 16 << 20;

const USER_AGENT: &str = concat!("e2b-rust/", env!("CARGO_PKG_VERSION"));

/// A connection to one envd. Cheap to clone; clones share the channel and HTTP pool.
#[derive(Clone)]
pub struct EnvdConnection {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: EnvdEndpoint,
    transport: Transport,
    channel: EnvdChannel,
    http: reqwest::Client,
}

impl std::fmt::Debug for EnvdConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvdConnection")
            .field("url", &self.inner.endpoint.url)
            .field("transport", &self.inner.transport)
            .field("sandbox_id", &self.inner.endpoint.sandbox_id)
            .field(
                "envd_version",
                &self.inner.endpoint.envd_version.to_string(),
            )
            .finish_non_exhaustive()
    }
}

impl EnvdConnection {
    /// Builds a connection. Nothing is dialled until the first call.
    ///
    /// Call it inside a Tokio runtime: the channel spawns its connection task there.
    pub fn new(endpoint: EnvdEndpoint) -> Result<Self, EnvdError> {
        let transport = endpoint.resolved_transport();
        let raw = match transport {
            Transport::GrpcWeb => grpc_web_channel(&endpoint)?,
            _ => h2c_channel(&endpoint)?,
        };
        Self::build(endpoint, transport, raw)
    }

    /// A connection whose RPCs go through `service` instead of a network transport, while REST
    /// calls (`/files`, `/health`, ...) still go to the endpoint's URL. The service must speak
    /// plain gRPC (`application/grpc` bodies, streaming both ways), as an embedded daemon's
    /// in-process service does (`e2b_envd::EnvdHandle::local_service`, used by the `e2b`
    /// crate's `Sandbox::local()`); the connection reports [`Transport::Grpc`]. envd's headers
    /// (access token, user agent, sandbox id) are added to every request as usual.
    pub fn with_service<S, B>(endpoint: EnvdEndpoint, service: S) -> Result<Self, EnvdError>
    where
        S: tower::Service<Request<Body>, Response = Response<B>> + Clone + Send + Sync + 'static,
        S::Error: Into<BoxError>,
        S::Future: Send + 'static,
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let channel = service
            .map_response(|resp: Response<B>| resp.map(Body::new))
            .map_err(ChannelError::new);
        Self::build(endpoint, Transport::Grpc, BoxCloneSyncService::new(channel))
    }

    fn build(
        endpoint: EnvdEndpoint,
        transport: Transport,
        raw: EnvdChannel,
    ) -> Result<Self, EnvdError> {
        // envd's headers, built once: the channel adds them to every RPC, the REST client has
        // them as defaults.
        let base = static_headers(&endpoint)?;
        let default_headers = base.clone();
        let channel = BoxCloneSyncService::new(
            ServiceBuilder::new()
                .map_request(move |mut req: Request<Body>| {
                    for (name, value) in &base {
                        req.headers_mut().insert(name, value.clone());
                    }
                    req
                })
                .service(raw),
        );
        let mut http = reqwest::Client::builder().default_headers(default_headers);
        for der in &endpoint.extra_root_certificates {
            let cert = reqwest::Certificate::from_der(der).map_err(|e| {
                EnvdError::InvalidEndpoint(format!("extra root certificate rejected: {e}"))
            })?;
            http = http.add_root_certificate(cert);
        }
        let http = http
            .connect_timeout(endpoint.connect_timeout)
            .build()
            .map_err(|e| {
                EnvdError::InvalidEndpoint(format!("cannot build the HTTP client: {e}"))
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                endpoint,
                transport,
                channel,
                http,
            }),
        })
    }

    /// The endpoint this connection was built from.
    pub fn endpoint(&self) -> &EnvdEndpoint {
        &self.inner.endpoint
    }

    /// The base URL of envd.
    pub fn url(&self) -> &str {
        &self.inner.endpoint.url
    }

    /// The transport in use (never [`Transport::Auto`]).
    pub fn transport(&self) -> Transport {
        self.inner.transport
    }

    /// The envd version the sandbox runs.
    pub fn envd_version(&self) -> &EnvdVersion {
        &self.inner.endpoint.envd_version
    }

    /// The sandbox id, if known.
    pub fn sandbox_id(&self) -> Option<&str> {
        self.inner.endpoint.sandbox_id.as_deref()
    }

    /// The access token, if any.
    pub fn access_token(&self) -> Option<&str> {
        self.inner.endpoint.access_token.as_deref()
    }

    /// Fails with the teaching error when the sandbox's envd lacks `feature`.
    pub fn require(&self, feature: Feature) -> Result<(), EnvdError> {
        Ok(self.inner.endpoint.envd_version.require(feature)?)
    }

    /// The user a call runs as: the call's, else the endpoint's, else envd's default. On envd
    /// older than 0.4.0 the default is `user`, as the E2B SDKs do.
    pub fn effective_user<'a>(&'a self, call_user: Option<&'a str>) -> Option<&'a str> {
        call_user
            .or(self.inner.endpoint.user.as_deref())
            .or_else(|| {
                if self
                    .inner
                    .endpoint
                    .envd_version
                    .supports(Feature::DefaultUser)
                {
                    None
                } else {
                    Some("user")
                }
            })
    }

    /// The shared channel.
    pub fn channel(&self) -> EnvdChannel {
        self.inner.channel.clone()
    }

    /// A Process service client on this connection.
    pub fn process(&self) -> ProcessClient {
        ProcessClient::new(self.channel())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    /// A Filesystem service client on this connection.
    pub fn filesystem(&self) -> FilesystemClient {
        FilesystemClient::new(self.channel())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    /// Calls a server-streaming RPC (`path`, e.g. `/process.Process/Start`) and decodes its
    /// messages without copying their payloads (see [`ServerStream`]); tonic's generated
    /// clients copy every received frame once more. Same statuses as tonic's client.
    ///
    /// # Errors
    ///
    /// [`EnvdError`](crate::EnvdError) when the request cannot be built or envd answers the call
    /// with an error status before the stream opens; errors during the stream come from the stream.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future before the stream opens cancels the call; envd sees the
    /// connection go away.
    pub async fn server_streaming<Req, Resp>(
        &self,
        path: &'static str,
        request: tonic::Request<Req>,
    ) -> Result<ServerStream<Resp>, tonic::Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        crate::stream::server_streaming(self.channel(), path, request).await
    }

    /// An HTTP client for envd's REST routes (`/files`, `/health`, ...), with envd's headers set.
    pub fn http(&self) -> &reqwest::Client {
        &self.inner.http
    }

    /// Wraps `message` in a request carrying the per-call headers.
    pub fn request<T>(
        &self,
        message: T,
        opts: &CallOptions,
    ) -> Result<tonic::Request<T>, EnvdError> {
        let mut req = tonic::Request::new(message);
        let md = req.metadata_mut();
        let user = if opts.no_user {
            None
        } else {
            self.effective_user(opts.user.as_deref())
        };
        if let Some(user) = user {
            md.insert(headers::AUTHORIZATION, ascii(&basic_auth_value(user))?);
        }
        if let Some(k) = opts.keepalive {
            md.insert(
                headers::KEEPALIVE_PING_INTERVAL,
                ascii(&k.as_secs().max(1).to_string())?,
            );
        }
        if let Some(d) = opts.deadline.filter(|d| !d.is_zero()) {
            md.insert(headers::CONNECT_TIMEOUT_MS, ascii(&millis(d).to_string())?);
        }
        Ok(req)
    }

    /// Inserts an extra header on a request (for headers this crate does not model).
    pub fn set_header<T>(
        req: &mut tonic::Request<T>,
        name: &str,
        value: &str,
    ) -> Result<(), EnvdError> {
        let key = MetadataKey::from_bytes(name.as_bytes())
            .map_err(|_| EnvdError::InvalidEndpoint(format!("invalid header name '{name}'")))?;
        req.metadata_mut().insert(key, ascii(value)?);
        Ok(())
    }
}

fn millis(d: Duration) -> u128 {
    d.as_millis().max(1)
}

fn ascii(value: &str) -> Result<AsciiMetadataValue, EnvdError> {
    value.parse().map_err(|_| {
        EnvdError::InvalidEndpoint(format!("header value is not printable ASCII: {value:?}"))
    })
}

fn static_headers(endpoint: &EnvdEndpoint) -> Result<http::HeaderMap, EnvdError> {
    let value = |v: &str| {
        HeaderValue::from_str(v).map_err(|_| {
            EnvdError::InvalidEndpoint(format!("header value is not printable ASCII: {v:?}"))
        })
    };
    let mut out = http::HeaderMap::new();
    out.insert(
        http::header::USER_AGENT,
        HeaderValue::from_static(USER_AGENT),
    );
    if let Some(token) = &endpoint.access_token {
        out.insert(
            HeaderName::from_static(headers::ACCESS_TOKEN),
            value(token)?,
        );
    }
    if let Some(id) = &endpoint.sandbox_id {
        out.insert(HeaderName::from_static(headers::SANDBOX_ID), value(id)?);
        out.insert(
            HeaderName::from_static(headers::SANDBOX_PORT),
            value(&endpoint.sandbox_port.to_string())?,
        );
    }
    Ok(out)
}

fn parse_uri(url: &str) -> Result<http::Uri, EnvdError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| EnvdError::InvalidEndpoint(format!("'{url}' is not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => Ok(uri),
        _ => Err(EnvdError::InvalidEndpoint(format!(
            "'{url}' must start with http:// or https://"
        ))),
    }
}

fn h2c_channel(endpoint: &EnvdEndpoint) -> Result<EnvdChannel, EnvdError> {
    let uri = parse_uri(&endpoint.url)?;
    if uri.scheme_str() == Some("https") {
        return Err(EnvdError::InvalidEndpoint(format!(
            "'{}': the gRPC (h2c) transport is plaintext only; use Transport::GrpcWeb for https",
            endpoint.url
        )));
    }
    let channel = tonic::transport::Endpoint::from(uri)
        .connect_timeout(endpoint.connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true)
        // Output streams are bulk transfers: bigger frames and windows than h2's 16 KiB / 64 KiB
        // defaults let one stream run at pipe speed (about 3x the default here).
        .max_frame_size(H2_MAX_FRAME_SIZE)
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        .connect_lazy();
    Ok(BoxCloneSyncService::new(channel.map_err(ChannelError::new)))
}

/// rustls with the public WebPKI roots plus the endpoint's extra roots.
fn tls_config(endpoint: &EnvdEndpoint) -> Result<rustls::ClientConfig, EnvdError> {
    let tls_err =
        |e: &dyn std::fmt::Display| EnvdError::InvalidEndpoint(format!("TLS setup failed: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for der in &endpoint.extra_root_certificates {
        roots
            .add(rustls::pki_types::CertificateDer::from(der.clone()))
            .map_err(|e| tls_err(&format!("extra root certificate rejected: {e}")))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls_err(&e))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(config)
}

fn grpc_web_channel(endpoint: &EnvdEndpoint) -> Result<EnvdChannel, EnvdError> {
    let uri = parse_uri(&endpoint.url)?;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(endpoint.connect_timeout));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_config(endpoint)?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let client: HyperClient<_, tonic_web::GrpcWebCall<Body>> =
        HyperClient::builder(TokioExecutor::new()).build(connector);
    let svc = ServiceBuilder::new()
        .map_request(move |mut req: Request<Body>| {
            // The generated client sends origin-form URIs; give hyper the full one.
            let path = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default();
            let mut parts = uri.clone().into_parts();
            parts.path_and_query = path.parse().ok();
            if let Ok(full) = http::Uri::from_parts(parts) {
                *req.uri_mut() = full;
            }
            req
        })
        .layer(tonic_web::GrpcWebClientLayer::new())
        .service(client)
        .map_response(|resp| resp.map(Body::new))
        .map_err(ChannelError::new);
    Ok(BoxCloneSyncService::new(svc))
}
