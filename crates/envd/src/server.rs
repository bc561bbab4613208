//! The listener: one port, routed by content type to gRPC (h2c), gRPC-Web, Connect or REST.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::serve::ListenerExt as _;
use e2b_envd_proto::filesystem::filesystem_server::FilesystemServer;
use e2b_envd_proto::process::process_server::ProcessServer;
use http::{HeaderValue, Request, Response, StatusCode, header};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::{Layer as _, ServiceExt as _};

use crate::config::EnvdConfig;
use crate::connect::ConnectRouter;
use crate::error::EnvdError;
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

/// Paths that need no access token (envd's exemptions).
fn token_exempt(path: &str) -> bool {
    path == "/health" || path == "/init" || path == "/files" || path.starts_with("/files/")
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

async fn dispatch(app: App, req: Request<Body>) -> Response<Body> {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let is_grpc = ct.starts_with("application/grpc");
    if !token_exempt(req.uri().path()) && !app.state.token_ok(req.headers()) {
        return if is_grpc {
            let base = ct
                .split(';')
                .next()
                .unwrap_or("application/grpc")
                .trim()
                .to_string();
            grpc_error(&base, tonic::Code::Unauthenticated, UNAUTHORIZED_MESSAGE)
        } else {
            json_error(StatusCode::UNAUTHORIZED, UNAUTHORIZED_MESSAGE)
        };
    }
    if ct.starts_with("application/grpc-web") {
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
            return app.connect.handle_grpc(req).await;
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

/// The daemon. See [`Envd::start`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Envd;

impl Envd {
    /// Binds the listener and starts serving in the background (on the current tokio runtime).
    /// Returns once the port is bound, so [`EnvdHandle::url`] is immediately usable.
    pub async fn start(config: EnvdConfig) -> Result<EnvdHandle, EnvdError> {
        if config.max_message_bytes == 0 {
            return Err(EnvdError::Config(
                "max_message_bytes must be greater than 0".into(),
            ));
        }
        let state = State::new(&config);
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

        let cors = tower_http::cors::CorsLayer::new()
            .allow_origin(tower_http::cors::Any)
            .allow_methods(tower_http::cors::Any)
            .allow_headers(tower_http::cors::Any)
            .expose_headers(tower_http::cors::Any)
            .max_age(Duration::from_secs(7200));
        let router = Router::new()
            .fallback(move |req: Request<Body>| dispatch(app.clone(), req))
            .layer(cors);
        let local_router = router.clone();

        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .map_err(|source| EnvdError::Bind {
                addr: config.bind,
                source,
            })?;
        let local_addr = listener.local_addr()?;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let (shutdown_tx, mut shutdown_rx) = watch::channel(false);
        let server = tokio::spawn(async move {
            let shutdown = async move {
                let _ = shutdown_rx.wait_for(|v| *v).await;
            };
            if let Err(e) = axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %e, "envd server stopped with an error");
            }
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
/// `Sandbox::local()` does, for its gRPC calls): request and response bodies pass through as
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
            let grpc = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| ct.starts_with("application/grpc"));
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
