//! The connection: one channel (see [`channel`](crate::channel)) plus envd's headers and an HTTP
//! client for the REST routes.

use std::sync::Arc;
use std::time::Duration;

use e2b_envd_version::{EnvdVersion, Feature};
use http::{HeaderName, HeaderValue, Request, Response};
use tonic::body::Body;
use tonic::metadata::{AsciiMetadataValue, MetadataKey};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder};

use crate::call::{CallOptions, basic_auth_value, headers};
use crate::channel::{self, EnvdChannel, FilesystemClient, ProcessClient};
use crate::endpoint::{EnvdEndpoint, Transport};
use crate::error::EnvdError;
use crate::stream::ServerStream;

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
    /// gRPC-Web only: the same connections without tonic-web's layer, for server streams.
    web_streams: Option<EnvdChannel>,
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
        let (raw, web_streams) = match transport {
            Transport::GrpcWeb => {
                let (rpc, streams) = channel::grpc_web(&endpoint)?;
                (rpc, Some(streams))
            }
            _ => (channel::h2c(&endpoint)?, None),
        };
        Self::build(endpoint, transport, raw, web_streams)
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
        Self::build(
            endpoint,
            Transport::Grpc,
            channel::from_service(service),
            None,
        )
    }

    fn build(
        endpoint: EnvdEndpoint,
        transport: Transport,
        raw: EnvdChannel,
        web_streams: Option<EnvdChannel>,
    ) -> Result<Self, EnvdError> {
        // envd's headers, built once: the channel adds them to every RPC, the REST client has
        // them as defaults.
        let base = std::sync::Arc::new(static_headers(&endpoint)?);
        let default_headers = (*base).clone();
        let with_headers = |raw: EnvdChannel| {
            let base = base.clone();
            BoxCloneSyncService::new(
                ServiceBuilder::new()
                    .map_request(move |mut req: Request<Body>| {
                        for (name, value) in base.iter() {
                            req.headers_mut().insert(name, value.clone());
                        }
                        req
                    })
                    .service(raw),
            )
        };
        let channel = with_headers(raw);
        let web_streams = web_streams.map(with_headers);
        let mut http = reqwest::Client::builder().default_headers(default_headers);
        for der in &endpoint.extra_root_certificates {
            let cert = reqwest::Certificate::from_der(der).map_err(|e| {
                EnvdError::invalid_endpoint_from(format!("extra root certificate rejected: {e}"), e)
            })?;
            http = http.add_root_certificate(cert);
        }
        let http = http
            .connect_timeout(endpoint.connect_timeout)
            .build()
            .map_err(|e| {
                EnvdError::invalid_endpoint_from(format!("cannot build the HTTP client: {e}"), e)
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                endpoint,
                transport,
                channel,
                web_streams,
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
        match &self.inner.web_streams {
            Some(web) => {
                crate::stream::server_streaming(
                    web.clone(),
                    crate::stream::Framing::GrpcWeb,
                    path,
                    request,
                )
                .await
            }
            None => {
                crate::stream::server_streaming(
                    self.channel(),
                    crate::stream::Framing::Grpc,
                    path,
                    request,
                )
                .await
            }
        }
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
        let key = MetadataKey::from_bytes(name.as_bytes()).map_err(|e| {
            EnvdError::invalid_endpoint_from(format!("invalid header name '{name}'"), e)
        })?;
        req.metadata_mut().insert(key, ascii(value)?);
        Ok(())
    }
}

fn millis(d: Duration) -> u128 {
    d.as_millis().max(1)
}

fn ascii(value: &str) -> Result<AsciiMetadataValue, EnvdError> {
    value.parse().map_err(|e| {
        EnvdError::invalid_endpoint_from(
            format!("header value is not printable ASCII: {value:?}"),
            e,
        )
    })
}

fn static_headers(endpoint: &EnvdEndpoint) -> Result<http::HeaderMap, EnvdError> {
    let value = |v: &str| {
        HeaderValue::from_str(v).map_err(|e| {
            EnvdError::invalid_endpoint_from(
                format!("header value is not printable ASCII: {v:?}"),
                e,
            )
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
