//! The edge port: one address for every sandbox's envd, as E2B's proxy is.
//!
//! A request reaches its sandbox by, in this order:
//! 1. the `E2b-Sandbox-Id` header (the SDKs send it on every envd call);
//! 2. a `Host` of the form `49983-<id>.<anything>`;
//! 3. for `GET`/`POST /files` with a `signature` (the SDKs' `download_url`/`upload_url`, used by
//!    browsers and curl without headers): the running sandbox whose access token produced that
//!    signature.
//!
//! Bodies stream both ways without buffering; HTTP/1.1 and h2c (prior knowledge) are both
//! accepted and forwarded in the same version, so gRPC trailers and Connect streams pass through.
//! An unknown, killed, expired or paused sandbox gets E2B's 502 answer, so the SDKs'
//! `is_running()` reads `false`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use crate::sandboxes::{Registry, Route};
use crate::util;

/// envd's port in E2B's host names (`49983-<id>.<domain>`).
pub(crate) const ENVD_PORT: u16 = 49983;

type Body = BoxBody<Bytes, hyper::Error>;

/// h2 frames up to 1 MiB, 4 MiB per stream, 16 MiB per connection (as `e2b-envd-client`).
const H2_MAX_FRAME: u32 = 1 << 20;
const H2_STREAM_WINDOW: u32 = 4 << 20;
const H2_CONNECTION_WINDOW: u32 = 16 << 20;

/// The forwarding clients (one per HTTP version) and the registry.
#[derive(Clone)]
pub(crate) struct Edge {
    registry: Arc<Registry>,
    h1: Client<HttpConnector, Incoming>,
    h2: Client<HttpConnector, Incoming>,
}

fn connector() -> HttpConnector {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    c.set_connect_timeout(Some(Duration::from_secs(10)));
    c
}

impl Edge {
    pub(crate) fn new(registry: Arc<Registry>) -> Self {
        let h1 = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector());
        // As our envd client: large frames and fixed windows (an adaptive window starts small).
        let h2 = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .http2_max_frame_size(Some(H2_MAX_FRAME))
            .http2_initial_stream_window_size(Some(H2_STREAM_WINDOW))
            .http2_initial_connection_window_size(Some(H2_CONNECTION_WINDOW))
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector());
        Self { registry, h1, h2 }
    }

    /// Accepts connections until the task is aborted.
    pub(crate) async fn serve(self, listener: TcpListener) {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("edge accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let edge = self.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let edge = edge.clone();
                    async move { Ok::<_, Infallible>(edge.handle(req).await) }
                });
                let mut builder =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                builder
                    .http1()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(30));
                builder
                    .http2()
                    .max_frame_size(H2_MAX_FRAME)
                    .initial_stream_window_size(H2_STREAM_WINDOW)
                    .initial_connection_window_size(H2_CONNECTION_WINDOW);
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    async fn handle(&self, mut req: Request<Incoming>) -> Response<Body> {
        let (id, addr) = match self.target(&req) {
            Ok(t) => t,
            Err(resp) => return resp,
        };
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .to_string();
        let uri = match format!("http://{addr}{path}").parse::<http::Uri>() {
            Ok(u) => u,
            Err(_) => return plain(StatusCode::BAD_REQUEST, "bad request path"),
        };
        *req.uri_mut() = uri;
        strip_hop_by_hop(req.headers_mut());
        let h2 = req.version() == http::Version::HTTP_2;
        req.headers_mut().remove(header::HOST);
        if !h2 {
            *req.version_mut() = http::Version::HTTP_11;
        }
        let result = if h2 {
            self.h2.request(req).await
        } else {
            self.h1.request(req).await
        };
        match result {
            Ok(resp) => {
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, body.boxed())
            }
            Err(e) => {
                tracing::debug!(sandbox = %id, "edge: envd unreachable: {e}");
                not_found(
                    &id,
                    "The sandbox is not reachable (it may have been killed)",
                )
            }
        }
    }

    /// The sandbox a request is for, or the response to give instead.
    #[allow(clippy::result_large_err)]
    fn target(&self, req: &Request<Incoming>) -> Result<(String, SocketAddr), Response<Body>> {
        let headers = req.headers();
        if let Some(port) = headers
            .get("e2b-sandbox-port")
            .and_then(|v| v.to_str().ok())
            && port.trim() != ENVD_PORT.to_string()
        {
            return Err(port_closed(port));
        }
        let id = headers
            .get("e2b-sandbox-id")
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_string())
            .or_else(|| host_id(req).and_then(|(p, id)| (p == ENVD_PORT).then_some(id)));
        if let Some((port, _)) = host_id(req)
            && port != ENVD_PORT
            && headers.get("e2b-sandbox-id").is_none()
        {
            return Err(port_closed(&port.to_string()));
        }
        if let Some(id) = id {
            if !util::valid_id(&id) {
                return Err(not_found(&id, "Invalid sandbox ID"));
            }
            return match self.registry.route(&id) {
                Route::Envd(addr) => Ok((id, addr)),
                Route::NotFound => Err(not_found(&id, "The sandbox was not found")),
            };
        }
        if req.uri().path() == "/files"
            && let Some(found) = self.signed(req)
        {
            return Ok(found);
        }
        Err(plain(
            StatusCode::BAD_GATEWAY,
            "no sandbox named: send the E2b-Sandbox-Id header, use the host 49983-<sandbox id>.<domain>, or a signed /files URL",
        ))
    }

    fn signed(&self, req: &Request<Incoming>) -> Option<(String, SocketAddr)> {
        let op = match *req.method() {
            http::Method::GET | http::Method::HEAD => "read",
            http::Method::POST => "write",
            _ => return None,
        };
        let pairs = util::query_pairs(req.uri().query())?;
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let sig = get("signature")?;
        let path = get("path").unwrap_or("");
        let user = get("username").unwrap_or("");
        let exp = get("signature_expiration");
        self.registry.route_signed(path, op, user, exp, sig)
    }
}

/// `(port, id)` from a `Host` (or h2 `:authority`) of the form `<port>-<id>.<domain>`.
fn host_id(req: &Request<Incoming>) -> Option<(u16, String)> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().host())?;
    let first = host.split('.').next()?;
    if !host.contains('.') {
        return None;
    }
    let (port, id) = first.split_once('-')?;
    let port: u16 = port.parse().ok()?;
    util::valid_id(id).then(|| (port, id.to_string()))
}

const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "proxy-authenticate",
    "proxy-authorization",
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .filter(|s| !s.is_empty())
        .collect();
    for h in HOP_BY_HOP
        .iter()
        .copied()
        .chain(named.iter().map(String::as_str))
    {
        headers.remove(h);
    }
}

fn full(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn plain(status: StatusCode, message: &str) -> Response<Body> {
    full(
        status,
        "application/json",
        serde_json::json!({"message": message, "code": status.as_u16()}).to_string(),
    )
}

/// E2B's proxy answer for a sandbox it cannot reach.
fn not_found(id: &str, message: &str) -> Response<Body> {
    full(
        StatusCode::BAD_GATEWAY,
        "application/json",
        serde_json::json!({"sandboxId": id, "message": message, "code": 502}).to_string(),
    )
}

fn port_closed(port: &str) -> Response<Body> {
    plain(
        StatusCode::BAD_GATEWAY,
        &format!(
            "port {port} is not served: e2b serve's edge reaches only envd (port {ENVD_PORT}) of each sandbox"
        ),
    )
}
