//! The listener: one port, routed by content type to gRPC (h2c), gRPC-Web, Connect or REST.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use e2b_envd_proto::filesystem::filesystem_server::FilesystemServer;
use e2b_envd_proto::process::process_server::ProcessServer;
use http::{HeaderValue, Request, Response, StatusCode, header};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::{Layer as _, ServiceExt as _};

use crate::config::EnvdConfig;
use crate::connect::ConnectRouter;
use crate::error::DaemonError;
use crate::process::{ProcessService, ProcessTable};
use crate::rest::{self, UNAUTHORIZED_MESSAGE, json_error};
use crate::state::State;

/// What [`LocalService`] answers once the daemon has been shut down.
const SHUT_DOWN: &str = "the sandbox's envd has been shut down";

/// How long shutdown waits for processes to be reaped and connections to close.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone)]
struct App {
    state: Arc<State>,
    connect: Arc<ConnectRouter>,
    grpc: tonic::service::Routes,
    grpc_web: tonic_web::GrpcWebService<tonic::service::Routes>,
    rest: Router,
}

/// Paths that need no access token (envd's exemptions: `/files` checks the token or a URL
/// signature itself, `/init` applies envd's token rules). `/files/compose` is not exempt: a
/// signature covers one path, and compose reads, writes and deletes several.
fn token_exempt(path: &str) -> bool {
    path == "/health" || path == "/init" || path == "/files"
}

fn grpc_error(content_type: &str, code: tonic::Code, message: &str) -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    let ct =
        HeaderValue::from_str(content_type).unwrap_or(HeaderValue::from_static("application/grpc"));
    resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    resp.headers_mut()
        .insert("grpc-status", HeaderValue::from(code as i32));
    if let Ok(v) = HeaderValue::from_str(message) {
        resp.headers_mut().insert("grpc-message", v);
    }
    resp
}

/// The request's `Content-Type`, trimmed and lower-cased (`""` when absent or not text).
fn content_type(headers: &http::HeaderMap) -> String {
    rest::content_type(headers).trim().to_ascii_lowercase()
}

/// An error answer in the request's protocol: a gRPC status (with the request's gRPC content
/// type, parameters dropped) for gRPC and gRPC-Web requests, else envd's JSON error.
fn error_response(
    content_type: &str,
    grpc_code: tonic::Code,
    http_status: StatusCode,
    message: &str,
) -> Response<Body> {
    if content_type.starts_with("application/grpc") {
        let base = content_type
            .split(';')
            .next()
            .unwrap_or("application/grpc")
            .trim();
        grpc_error(base, grpc_code, message)
    } else {
        json_error(http_status, message)
    }
}

async fn dispatch(app: App, req: Request<Body>) -> Response<Body> {
    let ct = content_type(req.headers());
    let is_grpc = ct.starts_with("application/grpc");
    if !token_exempt(req.uri().path()) && !app.state.token_ok(req.headers()) {
        return error_response(
            &ct,
            tonic::Code::Unauthenticated,
            StatusCode::UNAUTHORIZED,
            UNAUTHORIZED_MESSAGE,
        );
    }
    if ct.starts_with("application/grpc-web") {
        // Binary gRPC-Web server streams (process output, watch events) take our own path,
        // which writes output payloads without copying them; the rest goes to tonic-web.
        let base = ct.split(';').next().unwrap_or("").trim();
        if matches!(base, "application/grpc-web" | "application/grpc-web+proto")
            && app.connect.is_server_stream(req.uri().path())
        {
            return app
                .connect
                .handle_grpc(req, crate::connect::Framing::Web)
                .await;
        }
        match app.grpc_web.oneshot(req).await {
            Ok(resp) => resp.map(Body::new),
            Err(e) => grpc_error(
                "application/grpc-web+proto",
                tonic::Code::Internal,
                &e.to_string(),
            ),
        }
    } else if is_grpc {
        // Server streams (process output, watch events) take our own gRPC path, which writes
        // output payloads without copying them; everything else goes to tonic.
        let base = ct.split(';').next().unwrap_or("").trim();
        if matches!(base, "application/grpc" | "application/grpc+proto")
            && app.connect.is_server_stream(req.uri().path())
        {
            return app
                .connect
                .handle_grpc(req, crate::connect::Framing::Grpc)
                .await;
        }
        match app.grpc.oneshot(req).await {
            Ok(resp) => resp.map(Body::new),
            Err(never) => match never {},
        }
    } else if app.connect.serves_service_of(req.uri().path()) {
        app.connect.handle(req).await
    } else {
        match app.rest.oneshot(req).await {
            Ok(resp) => resp,
            Err(never) => match never {},
        }
    }
}

/// Path of the debug-only panic route (see `EnvdConfig::debug_panic_route`).
const DEBUG_PANIC_PATH: &str = "/__envd_test/panic";

/// [`dispatch`], with a panic in any handler (every protocol) turned into a 500 (REST,
/// Connect) or a gRPC `internal` status, so the daemon keeps serving. A panic inside a response
/// body that is already streaming ends that stream only.
async fn guarded_dispatch(app: App, req: Request<Body>) -> Response<Body> {
    use futures::FutureExt as _;
    let ct = content_type(req.headers());
    let path = req.uri().path().to_string();
    let debug_panic =
        cfg!(debug_assertions) && app.state.limits().debug_panic_route && path == DEBUG_PANIC_PATH;
    let outcome = std::panic::AssertUnwindSafe(async move {
        if debug_panic {
            panic!("test panic requested through {DEBUG_PANIC_PATH}");
        }
        dispatch(app, req).await
    })
    .catch_unwind()
    .await;
    match outcome {
        Ok(resp) => resp,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            tracing::error!(%path, panic = %what, "an envd handler panicked; answering 500");
            let message =
                format!("internal error: the handler of {path} panicked; the daemon keeps serving");
            error_response(
                &ct,
                tonic::Code::Internal,
                StatusCode::INTERNAL_SERVER_ERROR,
                &message,
            )
        }
    }
}

/// Connection limits of the accept loop.
#[derive(Debug, Clone, Copy)]
struct ConnLimits {
    max_connections: usize,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    h2_keepalive_interval: Duration,
    h2_keepalive_timeout: Duration,
}

impl ConnLimits {
    fn from_config(c: &EnvdConfig) -> Self {
        Self {
            max_connections: c.max_connections,
            header_read_timeout: c.header_read_timeout,
            idle_timeout: c.idle_timeout,
            h2_keepalive_interval: c.http2_keepalive_interval,
            h2_keepalive_timeout: c.http2_keepalive_timeout,
        }
    }
}

/// When a connection last moved a byte (milliseconds since `origin`), and whether it has
/// started a request.
#[derive(Debug)]
struct Activity {
    origin: tokio::time::Instant,
    last_ms: std::sync::atomic::AtomicU64,
    requests: std::sync::atomic::AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(0),
            requests: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    fn last(&self) -> tokio::time::Instant {
        self.origin + Duration::from_millis(self.last_ms.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// A socket that records when it last read or wrote a byte.
struct TrackedIo {
    inner: tokio::net::TcpStream,
    activity: Arc<Activity>,
}

impl tokio::io::AsyncRead for TrackedIo {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl tokio::io::AsyncWrite for TrackedIo {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Resolves when the connection must be closed: no request started within the header-read
/// timeout of the accept, or no byte moved either way for the idle timeout.
async fn watchdog(activity: Arc<Activity>, limits: ConnLimits) {
    let first_deadline = activity.origin + limits.header_read_timeout;
    loop {
        let now = tokio::time::Instant::now();
        let started = activity.requests.load(std::sync::atomic::Ordering::Relaxed) > 0;
        if !started && now >= first_deadline {
            tracing::debug!("closing a connection that sent no complete request headers in time");
            return;
        }
        let idle_deadline = activity.last() + limits.idle_timeout;
        if now >= idle_deadline {
            tracing::debug!("closing an idle connection");
            return;
        }
        let next = if started {
            idle_deadline
        } else {
            idle_deadline.min(first_deadline)
        };
        tokio::time::sleep_until(next).await;
    }
}

/// Resolves once `shutdown` turns true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|v| *v).await;
}

/// The accept loop: at most `max_connections` connections at once (further ones wait in the
/// listen backlog), each served over HTTP/1.1 or h2c with the timeouts of `limits`, until
/// `shutdown` turns true; then open connections are asked to finish (graceful shutdown).
async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .enable_connect_protocol()
        .keep_alive_interval(limits.h2_keepalive_interval)
        .keep_alive_timeout(limits.h2_keepalive_timeout);
    let builder = Arc::new(builder);
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = stopped(&mut shutdown) => break,
        };
        let (tcp, _peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(v) => v,
                Err(e) => {
                    // Out of descriptors and the like: wait a little instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => break,
        };
        let _ = tcp.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(TrackedIo {
            inner: tcp,
            activity: activity.clone(),
        });
        let counted = activity.clone();
        let svc = router.clone();
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            counted
                .requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            crate::memory::request_seen();
            counted.touch();
            svc.clone().oneshot(req.map(Body::new))
        });
        let builder = builder.clone();
        let conn = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                r = conn => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                }
                _ = watchdog(activity, limits) => {}
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("connections still open after the shutdown grace period");
    }
}

/// The daemon. See [`Envd::start`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Envd;

impl Envd {
    /// Binds the listener and starts serving in the background (on the current tokio runtime).
    /// Returns once the port is bound, so [`EnvdHandle::url`] is immediately usable.
    pub async fn start(config: EnvdConfig) -> Result<EnvdHandle, DaemonError> {
        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .map_err(|source| DaemonError::Bind {
                addr: config.bind,
                source,
            })?;
        Self::start_on(vec![listener], config).await
    }

    /// Serves already bound listeners (for example one inherited from a supervisor plus the
    /// sandbox's own loopback, as the daemon inside an isolated sandbox does) with every check
    /// and limit [`Envd::start`] applies, as one daemon (one process table). [`EnvdConfig::bind`]
    /// is replaced by the first listener's address, which the token rule and the `Host` check
    /// then use; each listener has its own connection cap.
    ///
    /// # Errors
    ///
    /// [`DaemonError::Config`] for an invalid configuration (no listener, a zero limit, a
    /// listener on a non-loopback address without a token and without `insecure_no_token`),
    /// [`DaemonError::Io`] when a listener's address cannot be read.
    pub async fn start_on(
        listeners: Vec<tokio::net::TcpListener>,
        mut config: EnvdConfig,
    ) -> Result<EnvdHandle, DaemonError> {
        let Some(first) = listeners.first() else {
            return Err(DaemonError::Config("no listener to serve".into()));
        };
        config.bind = first.local_addr()?;
        for listener in &listeners[1..] {
            let addr = listener.local_addr()?;
            if !addr.ip().is_loopback() && config.bind.ip().is_loopback() {
                config.bind = addr;
            }
        }
        if config.max_message_bytes == 0 {
            return Err(DaemonError::Config(
                "max_message_bytes must be greater than 0".into(),
            ));
        }
        if config.max_connections == 0 {
            return Err(DaemonError::Config(
                "max_connections must be greater than 0".into(),
            ));
        }
        let no_token = config.access_token.as_deref().is_none_or(str::is_empty);
        if no_token && !config.bind.ip().is_loopback() {
            if !config.insecure_no_token {
                return Err(DaemonError::Config(format!(
                    "refusing to listen on the non-loopback address {} without an access token: anyone who can reach it could run commands. Give a token (--access-token-file, E2B_ENVD_ACCESS_TOKEN or --access-token), bind 127.0.0.1, or pass --insecure-no-token",
                    config.bind
                )));
            }
            tracing::warn!(
                bind = %config.bind,
                "INSECURE: envd listens on a non-loopback address WITHOUT an access token (--insecure-no-token): anyone who can reach this address can run commands and read files"
            );
        }
        let state = State::new(&config);
        if let Some(note) = state.limits_note() {
            tracing::warn!(
                limits = note,
                "the sandbox's limits are weaker than asked; GET /health reports it"
            );
        }
        let table = ProcessTable::new();
        let process = Arc::new(ProcessService::new(state.clone(), table.clone()));

        let connect = crate::process::register_connect(
            ConnectRouter::new(config.max_message_bytes),
            process.clone(),
        );
        let process_grpc = ProcessServer::from_arc(process)
            .max_decoding_message_size(config.max_message_bytes)
            .max_encoding_message_size(usize::MAX);
        let filesystem = Arc::new(crate::filesystem::FilesystemService::new(state.clone()));
        let connect = crate::filesystem::register_connect(connect, filesystem.clone());
        let filesystem_grpc = FilesystemServer::from_arc(filesystem)
            .max_decoding_message_size(config.max_message_bytes)
            .max_encoding_message_size(usize::MAX);
        let grpc = tonic::service::Routes::new(process_grpc).add_service(filesystem_grpc);
        let grpc_web = tonic_web::GrpcWebLayer::new().layer(grpc.clone());
        let app = App {
            state: state.clone(),
            connect: Arc::new(connect),
            grpc,
            grpc_web,
            rest: rest::router(state.clone()),
        };

        let guard = crate::rest::guard::BrowserGuard::new(
            config.bind,
            &config.allow_hosts,
            &config.allow_origins,
        );
        let local_router =
            Router::new().fallback(move |req: Request<Body>| guarded_dispatch(app.clone(), req));
        // Only the configured origins get CORS answers; with none, no CORS layer at all (and
        // the guard refuses any request carrying an `Origin`).
        let with_cors = if guard.origins().is_empty() {
            local_router.clone()
        } else {
            let origins: Vec<HeaderValue> = guard
                .origins()
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect();
            local_router.clone().layer(
                tower_http::cors::CorsLayer::new()
                    .allow_origin(origins)
                    .allow_methods(tower_http::cors::Any)
                    .allow_headers(tower_http::cors::Any)
                    .expose_headers(tower_http::cors::Any)
                    .max_age(Duration::from_secs(7200)),
            )
        };
        let network_router = with_cors.layer(axum::middleware::from_fn(
            move |req: Request<Body>, next: axum::middleware::Next| {
                let verdict = guard.check(req.headers(), req.uri());
                async move {
                    match verdict {
                        Ok(()) => next.run(req).await,
                        Err((status, message)) => json_error(status, message.as_str()),
                    }
                }
            },
        ));

        let local_addr = config.bind;
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let limits = ConnLimits::from_config(&config);
        let loops: Vec<_> = listeners
            .into_iter()
            .map(|listener| {
                serve(
                    listener,
                    network_router.clone(),
                    limits,
                    shutdown_rx.clone(),
                )
            })
            .collect();
        let server = tokio::spawn(async move {
            futures::future::join_all(loops).await;
        });
        tracing::info!(%local_addr, "envd listening");
        Ok(EnvdHandle {
            local_addr,
            state,
            table,
            local: LocalService {
                router: local_router,
                shutdown: shutdown_tx.subscribe(),
                runtime: tokio::runtime::Handle::current(),
            },
            shutdown_tx,
            server: Some(server),
        })
    }
}

/// A running daemon. Dropping it stops the server and SIGKILLs every process group it
/// started; [`EnvdHandle::shutdown`] does the same and waits until everything is reaped.
#[derive(Debug)]
pub struct EnvdHandle {
    local_addr: SocketAddr,
    state: Arc<State>,
    table: Arc<ProcessTable>,
    local: LocalService,
    shutdown_tx: watch::Sender<bool>,
    server: Option<JoinHandle<()>>,
}

/// The daemon as an in-process [`tower::Service`]: every route the port serves (gRPC, gRPC-Web,
/// Connect, REST), called directly, without a socket or HTTP/2 framing in between. Get it from
/// [`EnvdHandle::local_service`].
///
/// An embedding program's own clients use it to skip the loopback hop (the `e2b` crate's
/// `Sandbox::local_unisolated()` does, for its gRPC calls): request and response bodies pass through as
/// they are, so a streamed response is produced as the caller reads it (the caller's reading is
/// the flow control) and dropping it is a client disconnect. Access tokens and users are checked
/// exactly as on the port. Handlers run on the daemon's runtime, whichever runtime calls. After
/// [`EnvdHandle::shutdown`] (or drop) gRPC calls fail with `unavailable` and other requests get
/// a 503.
#[derive(Clone)]
pub struct LocalService {
    router: Router,
    shutdown: watch::Receiver<bool>,
    /// The daemon's runtime: handlers run there (the tasks they start, such as a process's
    /// supervisor, must not live on a caller's runtime that may go away sooner).
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for LocalService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalService")
            .field("shut_down", &*self.shutdown.borrow())
            .finish_non_exhaustive()
    }
}

impl<B> tower::Service<Request<B>> for LocalService
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<tower::BoxError>,
{
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response<Body>, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if *self.shutdown.borrow() {
            let grpc = rest::content_type(req.headers()).starts_with("application/grpc");
            let resp = if grpc {
                grpc_error("application/grpc", tonic::Code::Unavailable, SHUT_DOWN)
            } else {
                json_error(StatusCode::SERVICE_UNAVAILABLE, SHUT_DOWN)
            };
            return Box::pin(std::future::ready(Ok(resp)));
        }
        let handler = self
            .runtime
            .spawn(self.router.clone().oneshot(req.map(Body::new)));
        Box::pin(async move {
            Ok(match handler.await {
                Ok(Ok(resp)) => resp,
                Ok(Err(never)) => match never {},
                Err(e) => grpc_error(
                    "application/grpc",
                    tonic::Code::Internal,
                    &format!("envd's handler failed: {e}"),
                ),
            })
        })
    }
}

impl EnvdHandle {
    /// The bound address (with the real port when the configuration asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The base URL, e.g. `http://127.0.0.1:49983`.
    pub fn url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// The access token currently required (`None` = open). `POST /init` may change it.
    pub fn access_token(&self) -> Option<String> {
        self.state.access_token()
    }

    /// The daemon as an in-process service (see [`LocalService`]).
    pub fn local_service(&self) -> LocalService {
        self.local.clone()
    }

    /// The reported envd version.
    pub fn envd_version(&self) -> &str {
        self.state.envd_version()
    }

    /// Waits until the server stops (after [`shutdown`](Self::shutdown) from elsewhere, or an
    /// accept-loop failure).
    pub async fn wait(&mut self) {
        if let Some(server) = self.server.as_mut() {
            let _ = server.await;
            self.server = None;
        }
    }

    /// Graceful shutdown: stop accepting connections and new processes, SIGKILL every process
    /// group the daemon started, reap them (their streams end with the `end` event), then wait
    /// up to 5 s for open connections to finish.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown_tx.send(true);
        self.table.shutdown(SHUTDOWN_GRACE).await;
        if let Some(mut server) = self.server.take()
            && tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
                .await
                .is_err()
        {
            server.abort();
        }
    }
}

impl Drop for EnvdHandle {
    fn drop(&mut self) {
        self.table.kill_all();
        let _ = self.shutdown_tx.send(true);
        if let Some(server) = self.server.take() {
            // Give open streams a moment to deliver their end events, then stop.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let mut server = server;
                    if tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
                        .await
                        .is_err()
                    {
                        server.abort();
                    }
                });
            } else {
                server.abort();
            }
        }
    }
}
