//! The transports an [`EnvdConnection`](crate::EnvdConnection) sends its RPCs over: gRPC over
//! h2c, gRPC-Web over HTTP/1.1 (plain or TLS), or any in-process tower service, all behind one
//! [`EnvdChannel`] type.

use std::time::Duration;

use http::{Request, Response};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use tonic::body::Body;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder, ServiceExt as _};

use crate::endpoint::EnvdEndpoint;
use crate::error::EnvdError;

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
/// HTTP/2 flow-control windows of the h2c transport: per stream and per connection (four
/// streams' worth, so concurrent commands do not wait on each other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct H2Windows {
    stream: u32,
    connection: u32,
}

/// Windows straight to an envd on this machine (`e2b-envd`, `Sandbox::local()`, a local port
/// forward).
///
/// 1 MiB, not more: the client hands a window back (WINDOW_UPDATE) once its output pump has
/// taken the buffered data, so envd sends a window's worth and waits while the client works
/// through it, and the command behind envd waits on its full pipe. With 4 MiB that rhythm was
/// a 3.6 ms convoy with one core idle half of it on one machine; with 1 MiB a 1 GiB stream ran
/// 20–30 % faster there, and one stream holds a quarter of the memory
/// (`docs/bench-history/commands.md`, runs 11 and 12).
const LOOPBACK_WINDOWS: H2Windows = H2Windows {
    stream: 1 << 20,
    connection: 4 << 20,
};

/// Windows over a network (E2B's cloud) or through a proxy that routes by sandbox id (E2B's
/// edge, `e2b serve`'s edge): a window caps one stream at window / round trip, so 4 MiB keeps
/// 80 MiB/s at 50 ms; and through a relay on this machine each WINDOW_UPDATE takes two more
/// hops, so 1 MiB left envd idle (`e2b serve`'s edge carried 0.61–0.82 of the direct stream
/// with 1 MiB, 0.87–1.00 with 4 MiB: `docs/benchmarks.md`).
const NETWORK_WINDOWS: H2Windows = H2Windows {
    stream: 4 << 20,
    connection: 16 << 20,
};

/// The windows for `uri`: the loopback ones when its host is `localhost` or a loopback
/// address and no proxy sits between (`routed`: the endpoint names a sandbox id, which only a
/// proxy reads), the network ones otherwise.
fn h2_windows(uri: &http::Uri, routed: bool) -> H2Windows {
    let host = uri.host().unwrap_or_default();
    let ip = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || ip
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback && !routed {
        LOOPBACK_WINDOWS
    } else {
        NETWORK_WINDOWS
    }
}

/// A channel over an in-process service that speaks plain gRPC.
pub(crate) fn from_service<S, B>(service: S) -> EnvdChannel
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
    BoxCloneSyncService::new(channel)
}

fn parse_uri(url: &str) -> Result<http::Uri, EnvdError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| EnvdError::invalid_endpoint_from(format!("'{url}' is not a URL: {e}"), e))?;
    match uri.scheme_str() {
        Some("http" | "https") => Ok(uri),
        _ => Err(EnvdError::invalid_endpoint(format!(
            "'{url}' must start with http:// or https://"
        ))),
    }
}

pub(crate) fn h2c(endpoint: &EnvdEndpoint) -> Result<EnvdChannel, EnvdError> {
    let uri = parse_uri(&endpoint.url)?;
    if uri.scheme_str() == Some("https") {
        return Err(EnvdError::invalid_endpoint(format!(
            "'{}': the gRPC (h2c) transport is plaintext only; use Transport::GrpcWeb for https",
            endpoint.url
        )));
    }
    let windows = h2_windows(&uri, endpoint.sandbox_id.is_some());
    let channel = tonic::transport::Endpoint::from(uri)
        .connect_timeout(endpoint.connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true)
        // Output streams are bulk transfers: bigger frames and windows than h2's 16 KiB / 64 KiB
        // defaults let one stream run at pipe speed (about 3x the default here).
        .max_frame_size(H2_MAX_FRAME_SIZE)
        .initial_stream_window_size(windows.stream)
        .initial_connection_window_size(windows.connection)
        .connect_lazy();
    Ok(BoxCloneSyncService::new(channel.map_err(ChannelError::new)))
}

/// rustls with the public WebPKI roots plus the endpoint's extra roots.
fn tls_config(endpoint: &EnvdEndpoint) -> Result<rustls::ClientConfig, EnvdError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for der in &endpoint.extra_root_certificates {
        roots
            .add(rustls::pki_types::CertificateDer::from(der.clone()))
            .map_err(|e| {
                EnvdError::invalid_endpoint_from(
                    format!("TLS setup failed: extra root certificate rejected: {e}"),
                    e,
                )
            })?;
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| EnvdError::invalid_endpoint_from(format!("TLS setup failed: {e}"), e))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(config)
}

/// The gRPC-Web transport: the channel for every RPC (tonic-web's client layer over HTTP/1.1),
/// and a raw channel on the same connection pool that sends requests as they are, for the
/// server streams [`ServerStream`](crate::ServerStream) decodes itself (gRPC-Web framing,
/// trailers in the body) without tonic-web's copy of every received byte.
pub(crate) fn grpc_web(endpoint: &EnvdEndpoint) -> Result<(EnvdChannel, EnvdChannel), EnvdError> {
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
    let client: HyperClient<_, Body> = HyperClient::builder(TokioExecutor::new()).build(connector);
    let full_uri = move |mut req: Request<Body>| {
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
    };
    let svc = ServiceBuilder::new()
        .map_request(full_uri.clone())
        .layer(tonic_web::GrpcWebClientLayer::new())
        .map_request(|req: Request<tonic_web::GrpcWebCall<Body>>| req.map(Body::new))
        .service(client.clone())
        .map_response(|resp| resp.map(Body::new))
        .map_err(ChannelError::new);
    let raw = ServiceBuilder::new()
        .map_request(full_uri)
        .service(client)
        .map_response(|resp| resp.map(Body::new))
        .map_err(ChannelError::new);
    Ok((BoxCloneSyncService::new(svc), BoxCloneSyncService::new(raw)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(url: &str) -> H2Windows {
        h2_windows(&url.parse().unwrap_or_else(|e| panic!("{url}: {e}")), false)
    }

    #[test]
    fn loopback_hosts_get_the_small_windows_and_the_rest_the_network_ones() {
        for url in [
            "http://127.0.0.1:49983",
            "http://127.8.9.10",
            "http://localhost:3000",
            "http://LOCALHOST",
            "http://[::1]:49983",
        ] {
            assert_eq!(windows(url), LOOPBACK_WINDOWS, "{url}");
        }
        for url in [
            "http://49983-abc.e2b.app",
            "http://10.0.0.2:49983",
            "http://[2001:db8::1]",
            "http://localhost.example.com",
            "http://0.0.0.0:49983",
        ] {
            assert_eq!(windows(url), NETWORK_WINDOWS, "{url}");
        }
    }

    #[test]
    fn a_loopback_proxy_that_routes_by_sandbox_id_gets_the_network_windows() {
        for url in ["http://127.0.0.1:49983", "http://localhost:49983"] {
            let uri = url.parse().unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(h2_windows(&uri, true), NETWORK_WINDOWS, "{url}");
            assert_eq!(h2_windows(&uri, false), LOOPBACK_WINDOWS, "{url}");
        }
    }
}
