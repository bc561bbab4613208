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
use tokio::net::{TcpListener, TcpStream};

// envd's port is also the port in E2B's host names (`49983-<id>.<domain>`).
use e2b_envd_proto::wire::headers::{SANDBOX_ID, SANDBOX_PORT};
use e2b_envd_proto::wire::{DEFAULT_PORT, FileOperation, files_query};

use crate::h2splice::{self, Admit, HeaderList, Peeked};
use crate::sandboxes::{Registry, Route, SignedUrl};
use crate::util;

/// How long the edge waits for a sandbox's envd to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

type Body = BoxBody<Bytes, hyper::Error>;

/// h2 frames up to 1 MiB, 4 MiB per stream, 16 MiB per connection: the edge's own HTTP/2
/// sessions (not the bound h2c relay, whose windows are the client's and envd's). Larger than
/// `e2b-envd-client`'s loopback windows: the edge hands a window back as soon as it has
/// forwarded a frame, so it never holds a window's worth while the sender waits.
const H2_MAX_FRAME: u32 = 1 << 20;
const H2_STREAM_WINDOW: u32 = 4 << 20;
const H2_CONNECTION_WINDOW: u32 = 16 << 20;

/// The forwarding clients (one per HTTP version) and the registry.
#[derive(Clone)]
pub(crate) struct Edge {
    registry: Arc<Registry>,
    /// Ports of `e2b serve` itself (API, edge), never reachable as a sandbox's user port.
    own_ports: Arc<[u16]>,
    h1: Client<HttpConnector, Incoming>,
    h2: Client<HttpConnector, Incoming>,
}

fn connector() -> HttpConnector {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    c.set_connect_timeout(Some(CONNECT_TIMEOUT));
    c
}

impl Edge {
    pub(crate) fn new(registry: Arc<Registry>, own_ports: &[u16]) -> Self {
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
        Self {
            registry,
            own_ports: own_ports.into(),
            h1,
            h2,
        }
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
                if let Some(stream) = edge.try_relay(stream).await {
                    edge.serve_http(stream).await;
                }
            });
        }
    }

    /// An h2c connection whose first request names a running sandbox is relayed to that
    /// sandbox's envd byte for byte (see [`h2splice`]); anything else comes back to be served
    /// by the HTTP server and its forwarding clients.
    async fn try_relay(&self, stream: TcpStream) -> Option<TcpStream> {
        let first = match h2splice::peek(&stream).await {
            Peeked::First(list) => list,
            _ => return Some(stream),
        };
        let Ok(id) = h2_sandbox(&first) else {
            return Some(stream);
        };
        let Route::Envd(addr) = self.registry.route(&id) else {
            return Some(stream);
        };
        let envd = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            _ => return Some(stream),
        };
        let registry = self.registry.clone();
        let bound = id.clone();
        let admit: Admit = Arc::new(move |list| match h2_sandbox(list) {
            Ok(other) if other != bound => Err(format!(
                "this HTTP/2 connection is bound to sandbox {bound} (its first request): open a new connection for sandbox {other}"
            )),
            Ok(_) if h2splice::route_is(&registry, &bound, addr) => Ok(()),
            Ok(_) => Err("The sandbox was not found".to_string()),
            Err(message) => Err(message),
        });
        h2splice::relay(stream, envd, id, admit).await;
        None
    }

    async fn serve_http(self, stream: TcpStream) {
        let edge = self;
        let service = hyper::service::service_fn(move |req| {
            let edge = edge.clone();
            async move { Ok::<_, Infallible>(edge.handle(req).await) }
        });
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
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
    }

    async fn handle(&self, mut req: Request<Incoming>) -> Response<Body> {
        let (id, addr, user_port, netns) = match self.target(&req) {
            Ok(Target::Envd(id, addr)) => (id, addr, false, None),
            Ok(Target::Port(id, addr)) => (id, addr, true, None),
            Ok(Target::NetnsPort(id, pid, addr)) => (id, addr, true, Some(pid)),
            Err(resp) => {
                tracing::debug!(
                    uri = %req.uri(),
                    headers = ?req.headers(),
                    "edge: no route, answered {}",
                    resp.status()
                );
                return resp;
            }
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
        // A user's server speaks HTTP/1.1 (h2c to it is not assumed); envd gets each version.
        let h2 = req.version() == http::Version::HTTP_2 && !user_port;
        if user_port {
            req.headers_mut().remove(SANDBOX_ID);
            req.headers_mut().remove(SANDBOX_PORT);
        }
        req.headers_mut().remove(header::HOST);
        // `network.maskRequestHost`: the Host the sandbox's server sees (else its address).
        let masked = user_port
            .then(|| self.registry.get(&id))
            .flatten()
            .and_then(|s| s.masked_host(addr.port()))
            .and_then(|h| HeaderValue::from_str(&h).ok());
        if let Some(h) = &masked {
            req.headers_mut().insert(header::HOST, h.clone());
        }
        if !h2 {
            *req.version_mut() = http::Version::HTTP_11;
        }
        let result = if let Some(pid) = netns {
            // Origin form on a connection of its own.
            let path = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_else(|| "/".into());
            if let Ok(u) = path.parse::<http::Uri>() {
                *req.uri_mut() = u;
            }
            if masked.is_none()
                && let Ok(h) = HeaderValue::from_str(&addr.to_string())
            {
                req.headers_mut().insert(header::HOST, h);
            }
            match self.netns_request(pid, addr, req).await {
                Ok(r) => Ok(r),
                Err(e) => {
                    tracing::debug!(sandbox = %id, "edge: port {} unreachable: {e}", addr.port());
                    return port_not_open(&id, addr.port());
                }
            }
        } else if h2 {
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
            Err(e) if user_port => {
                tracing::debug!(sandbox = %id, "edge: port {} unreachable: {e}", addr.port());
                port_not_open(&id, addr.port())
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

    /// The sandbox (and port) a request is for, or the response to give instead.
    #[allow(clippy::result_large_err)]
    fn target(&self, req: &Request<Incoming>) -> Result<Target, Response<Body>> {
        let headers = req.headers();
        let header_id = headers
            .get(SANDBOX_ID)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_string());
        let header_port = headers
            .get(SANDBOX_PORT)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_string());
        let host = host_id(req);
        // The port: the header's, else the host's, else envd's.
        let port = match (&header_port, &host) {
            (Some(p), _) => match p.parse::<u16>() {
                Ok(p) => p,
                Err(_) => return Err(port_closed(p)),
            },
            (None, Some((p, _))) if header_id.is_none() => *p,
            _ => DEFAULT_PORT,
        };
        let id = header_id.or_else(|| host.map(|(_, id)| id));
        if let Some(id) = id {
            if !util::valid_id(&id) {
                return Err(not_found(&id, "Invalid sandbox ID"));
            }
            if port != DEFAULT_PORT {
                let token = req
                    .headers()
                    .get(TRAFFIC_ACCESS_TOKEN)
                    .map(|v| v.as_bytes());
                return self.user_port(id, port, token);
            }
            return match self.registry.route(&id) {
                Route::Envd(addr) => Ok(Target::Envd(id, addr)),
                Route::NotFound => Err(not_found(&id, "The sandbox was not found")),
            };
        }
        if req.uri().path() == "/files"
            && let Some((id, addr)) = self.signed(req)
        {
            return Ok(Target::Envd(id, addr));
        }
        Err(plain(StatusCode::BAD_GATEWAY, NO_SANDBOX))
    }

    /// A user's port inside sandbox `id` (E2B's `<port>-<id>.<domain>`). Plain sandboxes
    /// share the machine's loopback, so the port is `127.0.0.1:<port>` (never a port of
    /// `e2b serve` itself or of a sandbox's envd); isolated sandboxes are reached inside their
    /// own network namespace. A sandbox created with `network.allowPublicTraffic: false` admits
    /// only requests that carry its traffic access token (`token`), as E2B's proxy.
    #[allow(clippy::result_large_err)]
    fn user_port(
        &self,
        id: String,
        port: u16,
        token: Option<&[u8]>,
    ) -> Result<Target, Response<Body>> {
        // The token first: a request without it must not even wake a paused sandbox.
        if let Some(sandbox) = self.registry.get(&id)
            && let Err(why) = sandbox.admits_traffic(token)
        {
            return Err(forbidden(&id, why));
        }
        let Some(netns) = self.registry.netns_of(&id) else {
            return Err(not_found(&id, "The sandbox was not found"));
        };
        if port == 0 {
            return Err(port_closed("0"));
        }
        let addr = SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
        match netns {
            Some(pid) => Ok(Target::NetnsPort(id, pid, addr)),
            None if self.registry.runtime_name() != "plain" => Err(plain(
                StatusCode::BAD_GATEWAY,
                &format!("port {port} of sandbox {id}: its network namespace was not found"),
            )),
            None if self.own_ports.contains(&port) || self.registry.is_envd_port(port) => {
                Err(port_closed(&port.to_string()))
            }
            None => Ok(Target::Port(id, addr)),
        }
    }

    /// Sends `req` over a new HTTP/1.1 connection to `addr` inside the network namespace of
    /// process `pid` (an isolated sandbox's loopback).
    async fn netns_request(
        &self,
        pid: i32,
        addr: SocketAddr,
        req: Request<Incoming>,
    ) -> Result<Response<Incoming>, String> {
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
            .map_err(|e| format!("open the sandbox's network namespace: {e}"))?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A thread of its own: setns changes the calling thread's namespace, and this thread
        // ends right after (the socket stays in the namespace it was made in).
        std::thread::spawn(move || {
            let r = nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("enter the sandbox's network namespace: {e}"))
                .and_then(|()| {
                    std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                        .map_err(|e| format!("connect: {e}"))
                });
            let _ = tx.send(r);
        });
        let std_stream = rx
            .await
            .map_err(|_| "the connecting thread died".to_string())??;
        std_stream
            .set_nonblocking(true)
            .map_err(|e| format!("socket: {e}"))?;
        let stream = TcpStream::from_std(std_stream).map_err(|e| format!("socket: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP/1.1 handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        sender
            .send_request(req)
            .await
            .map_err(|e| format!("request: {e}"))
    }

    fn signed(&self, req: &Request<Incoming>) -> Option<(String, SocketAddr)> {
        let op = match *req.method() {
            http::Method::GET | http::Method::HEAD => FileOperation::Read,
            http::Method::POST => FileOperation::Write,
            _ => return None,
        };
        let pairs = util::query_pairs(req.uri().query())?;
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        // As envd reads it: an expiration that is not unix seconds signs nothing.
        let expiration = match get(files_query::SIGNATURE_EXPIRATION).filter(|e| !e.is_empty()) {
            None => None,
            Some(e) => Some(e.trim().parse::<i64>().ok()?),
        };
        self.registry.route_signed(&SignedUrl {
            path: get(files_query::PATH).unwrap_or(""),
            op,
            user: get(files_query::USERNAME).unwrap_or(""),
            expiration,
            signature: get(files_query::SIGNATURE)?,
        })
    }
}

/// Where a request goes.
enum Target {
    /// A sandbox's envd.
    Envd(String, SocketAddr),
    /// A user's port in a sandbox that shares the machine's loopback.
    Port(String, SocketAddr),
    /// A user's port in a sandbox with its own network namespace (a process in it).
    NetnsPort(String, i32, SocketAddr),
}

/// `(port, id)` from a `Host` (or h2 `:authority`) of the form `<port>-<id>.<domain>`.
fn host_id(req: &Request<Incoming>) -> Option<(u16, String)> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().host())?;
    host_port_id(host)
}

fn host_port_id(host: &str) -> Option<(u16, String)> {
    let first = host.split('.').next()?;
    if !host.contains('.') {
        return None;
    }
    let (port, id) = first.split_once('-')?;
    let port: u16 = port.parse().ok()?;
    util::valid_id(id).then(|| (port, id.to_string()))
}

/// The sandbox an HTTP/2 request's headers name (the rules of [`Edge::target`] without the
/// signed `/files` URLs), or why none.
fn h2_sandbox(list: &HeaderList) -> Result<String, String> {
    if let Some(port) = h2splice::header(list, SANDBOX_PORT)
        && port.trim() != DEFAULT_PORT.to_string()
    {
        return Err(port_message(port));
    }
    let host = h2splice::header(list, ":authority")
        .or_else(|| h2splice::header(list, "host"))
        .and_then(host_port_id);
    let id = match h2splice::header(list, SANDBOX_ID) {
        Some(id) => id.trim().to_string(),
        None => match host {
            Some((port, _)) if port != DEFAULT_PORT => return Err(port_message(&port.to_string())),
            Some((_, id)) => id,
            None => return Err(NO_SANDBOX.to_string()),
        },
    };
    if util::valid_id(&id) {
        Ok(id)
    } else {
        Err("Invalid sandbox ID".into())
    }
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

/// E2B's proxy answer for a user-port request without the sandbox's traffic access token.
fn forbidden(id: &str, why: &str) -> Response<Body> {
    full(
        StatusCode::FORBIDDEN,
        "application/json",
        serde_json::json!({
            "sandboxId": id,
            "message": format!("{why}: this sandbox's ports need its traffic access token in the {TRAFFIC_ACCESS_TOKEN} header (sandbox.traffic_access_token)"),
            "code": 403,
        })
        .to_string(),
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

/// The header a sandbox's user ports need when it was created without public traffic.
const TRAFFIC_ACCESS_TOKEN: &str = "e2b-traffic-access-token";

const NO_SANDBOX: &str = "no sandbox named: send the E2b-Sandbox-Id header, use the host 49983-<sandbox id>.<domain>, or a signed /files URL";

fn port_message(port: &str) -> String {
    format!(
        "port {port} is not served by e2b serve's edge (envd is port {DEFAULT_PORT}; user ports are 1-65535 other than e2b serve's own)"
    )
}

/// E2B's proxy answer when nothing listens on the port inside the sandbox.
fn port_not_open(id: &str, port: u16) -> Response<Body> {
    full(
        StatusCode::BAD_GATEWAY,
        "application/json",
        serde_json::json!({
            "sandboxId": id,
            "message": format!("The sandbox is running but port {port} is not open: start a server on it inside the sandbox"),
            "port": port,
            "code": 502,
        })
        .to_string(),
    )
}

fn port_closed(port: &str) -> Response<Body> {
    plain(StatusCode::BAD_GATEWAY, &port_message(port))
}
