//! Both transports against a tonic test server on loopback: headers seen, errors mapped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

use e2b_envd_client::{
    CallOptions, EnvdConnection, EnvdEndpoint, EnvdError, EnvdVersion, Feature, Transport,
};
use e2b_envd_proto::process::process_server::{Process, ProcessServer};
use e2b_envd_proto::process::*;
use futures::Stream;
use tonic::{Request, Response, Status, Streaming};

/// A tiny Process service that reflects what it saw, so tests can check headers and errors.
#[derive(Clone, Default)]
struct Reflector;

fn seen_headers<T>(req: &Request<T>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for key in [
        "x-access-token",
        "e2b-sandbox-id",
        "e2b-sandbox-port",
        "authorization",
        "keepalive-ping-interval",
        "connect-timeout-ms",
        "grpc-timeout",
        "user-agent",
        "x-seen-content-type",
    ] {
        if let Some(v) = req.metadata().get(key).and_then(|v| v.to_str().ok()) {
            out.insert(key.to_owned(), v.to_owned());
        }
    }
    out
}

type EventStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl Process for Reflector {
    async fn list(&self, req: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let envs = seen_headers(&req);
        Ok(Response::new(ListResponse {
            processes: vec![ProcessInfo {
                config: Some(ProcessConfig {
                    cmd: "reflect".into(),
                    envs,
                    ..Default::default()
                }),
                pid: 1,
                tag: None,
            }],
        }))
    }

    type ConnectStream = EventStream<ConnectResponse>;
    async fn connect(
        &self,
        _: Request<ConnectRequest>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        Err(Status::not_found("process with pid 999999 not found"))
    }

    type StartStream = EventStream<StartResponse>;
    async fn start(
        &self,
        req: Request<StartRequest>,
    ) -> Result<Response<Self::StartStream>, Status> {
        let headers = seen_headers(&req);
        let pid = headers
            .get("connect-timeout-ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let events = vec![
            Ok(StartResponse {
                event: Some(ProcessEvent {
                    event: Some(process_event::Event::Start(process_event::StartEvent {
                        pid,
                    })),
                }),
            }),
            Err(Status::deadline_exceeded("the process timed out")),
        ];
        Ok(Response::new(Box::pin(futures::stream::iter(events))))
    }

    async fn update(
        &self,
        req: Request<UpdateRequest>,
    ) -> Result<Response<UpdateResponse>, Status> {
        // The selected pid picks the error, so one RPC exercises the whole mapping.
        let code = match req.into_inner().process.and_then(|p| p.selector) {
            Some(process_selector::Selector::Pid(p)) => p,
            _ => 0,
        };
        Err(match code {
            3 => Status::invalid_argument("cwd '/nope' does not exist"),
            5 => Status::not_found("gone"),
            6 => Status::already_exists("exists"),
            7 => Status::permission_denied("denied"),
            8 => Status::resource_exhausted("slow down"),
            9 => Status::failed_precondition("cyclic symlink"),
            14 => Status::unavailable("sandbox down"),
            16 => Status::unauthenticated("invalid username: 'x'"),
            4 => Status::deadline_exceeded("deadline"),
            1 => Status::cancelled("cancelled"),
            _ => Status::internal("boom"),
        })
    }

    async fn stream_input(
        &self,
        _: Request<Streaming<StreamInputRequest>>,
    ) -> Result<Response<StreamInputResponse>, Status> {
        Err(Status::unimplemented("no"))
    }

    async fn send_input(
        &self,
        _: Request<SendInputRequest>,
    ) -> Result<Response<SendInputResponse>, Status> {
        Ok(Response::new(SendInputResponse {}))
    }

    async fn send_signal(
        &self,
        _: Request<SendSignalRequest>,
    ) -> Result<Response<SendSignalResponse>, Status> {
        Err(Status::not_found("process with pid 1 not found"))
    }

    async fn close_stdin(
        &self,
        _: Request<CloseStdinRequest>,
    ) -> Result<Response<CloseStdinResponse>, Status> {
        Ok(Response::new(CloseStdinResponse {}))
    }
}

/// Serves the reflector on one loopback port for h2c gRPC and HTTP/1.1 gRPC-Web.
async fn serve() -> String {
    let router = tonic::service::Routes::new(ProcessServer::new(Reflector))
        .into_axum_router()
        .layer(tonic_web::GrpcWebLayer::new())
        // Outermost: record the content type as it arrived on the wire, before gRPC-Web translation.
        .layer(axum::middleware::map_request(
            |mut req: axum::extract::Request| async move {
                if let Some(ct) = req.headers().get("content-type").cloned() {
                    req.headers_mut().insert("x-seen-content-type", ct);
                }
                req
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

fn endpoint(url: &str, transport: Transport) -> EnvdEndpoint {
    EnvdEndpoint::new(url)
        .access_token("tok-123")
        .sandbox_id("sbx-1")
        .user("alice")
        .transport(transport)
}

async fn headers_seen(transport: Transport) {
    let url = serve().await;
    let conn = EnvdConnection::new(endpoint(&url, transport)).unwrap();
    assert_eq!(conn.transport(), transport);
    let opts = CallOptions::streaming().deadline(Duration::from_millis(1500));
    let resp = conn
        .process()
        .list(conn.request(ListRequest {}, &opts).unwrap())
        .await
        .unwrap();
    let seen = resp.into_inner().processes.remove(0).config.unwrap().envs;
    assert_eq!(
        seen.get("x-access-token").map(String::as_str),
        Some("tok-123")
    );
    assert_eq!(
        seen.get("e2b-sandbox-id").map(String::as_str),
        Some("sbx-1")
    );
    assert_eq!(
        seen.get("e2b-sandbox-port").map(String::as_str),
        Some("49983")
    );
    // base64("alice:")
    assert_eq!(
        seen.get("authorization").map(String::as_str),
        Some("Basic YWxpY2U6")
    );
    assert_eq!(
        seen.get("keepalive-ping-interval").map(String::as_str),
        Some("50")
    );
    assert_eq!(
        seen.get("connect-timeout-ms").map(String::as_str),
        Some("1500")
    );
    assert!(
        !seen.contains_key("grpc-timeout"),
        "no gRPC deadline on envd calls: {seen:?}"
    );
    assert!(seen["user-agent"].contains("e2b-rust/"), "{seen:?}");
    let ct = &seen["x-seen-content-type"];
    match transport {
        Transport::GrpcWeb => assert!(ct.starts_with("application/grpc-web"), "{ct}"),
        _ => assert!(
            ct.starts_with("application/grpc") && !ct.contains("web"),
            "{ct}"
        ),
    }

    // A call may drop the user (envd's Connect/List take none).
    let resp = conn
        .process()
        .list(
            conn.request(ListRequest {}, &CallOptions::default().without_user())
                .unwrap(),
        )
        .await
        .unwrap();
    let seen = resp.into_inner().processes.remove(0).config.unwrap().envs;
    assert!(!seen.contains_key("authorization"));
}

#[tokio::test]
async fn h2c_sends_envd_headers() {
    headers_seen(Transport::Grpc).await;
}

#[tokio::test]
async fn grpc_web_sends_envd_headers() {
    headers_seen(Transport::GrpcWeb).await;
}

async fn errors_mapped(transport: Transport) {
    let url = serve().await;
    let conn = EnvdConnection::new(endpoint(&url, transport)).unwrap();
    let call = |pid: u32| {
        let conn = conn.clone();
        async move {
            let req = UpdateRequest {
                process: Some(ProcessSelector {
                    selector: Some(process_selector::Selector::Pid(pid)),
                }),
                pty: None,
            };
            EnvdError::from(
                conn.process()
                    .update(conn.request(req, &CallOptions::default()).unwrap())
                    .await
                    .unwrap_err(),
            )
        }
    };
    assert!(
        matches!(call(3).await, EnvdError::InvalidArgument { message } if message.contains("/nope"))
    );
    assert!(matches!(call(5).await, EnvdError::NotFound { .. }));
    assert!(matches!(call(6).await, EnvdError::AlreadyExists { .. }));
    assert!(matches!(call(7).await, EnvdError::PermissionDenied { .. }));
    assert!(matches!(call(8).await, EnvdError::RateLimited { .. }));
    assert!(matches!(call(9).await, EnvdError::InvalidArgument { .. }));
    let unavailable = call(14).await;
    assert!(matches!(unavailable, EnvdError::SandboxUnavailable { .. }));
    assert!(
        unavailable.to_string().contains("create a new sandbox"),
        "{unavailable}"
    );
    let auth = call(16).await;
    assert!(matches!(auth, EnvdError::Authentication { .. }));
    assert!(auth.to_string().contains("access token"), "{auth}");
    assert!(matches!(call(4).await, EnvdError::DeadlineExceeded { .. }));
    assert!(matches!(call(1).await, EnvdError::Cancelled { .. }));
    let other = call(0).await;
    assert!(
        matches!(
            other,
            EnvdError::Rpc {
                code: tonic::Code::Internal,
                ..
            }
        ),
        "{other:?}"
    );

    // Streams: the error after the first event arrives as the mapped deadline error.
    let opts = CallOptions::streaming().deadline(Duration::from_millis(777));
    let mut stream = conn
        .process()
        .start(conn.request(StartRequest::default(), &opts).unwrap())
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert!(matches!(
        first.event.and_then(|e| e.event),
        Some(process_event::Event::Start(process_event::StartEvent {
            pid: 777
        }))
    ));
    let err = EnvdError::from(stream.message().await.unwrap_err());
    assert!(matches!(err, EnvdError::DeadlineExceeded { .. }), "{err:?}");
    assert!(err.to_string().contains("zero for no timeout"));

    // A stream refused before its first event.
    let err = conn
        .process()
        .connect(
            conn.request(ConnectRequest::default(), &CallOptions::streaming())
                .unwrap(),
        )
        .await
        .unwrap_err();
    assert!(EnvdError::from(err).is_not_found());
}

#[tokio::test]
async fn h2c_maps_errors() {
    errors_mapped(Transport::Grpc).await;
}

#[tokio::test]
async fn grpc_web_maps_errors() {
    errors_mapped(Transport::GrpcWeb).await;
}

async fn unreachable_envd_is_a_transport_error(transport: Transport) {
    // Bind and drop to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conn = EnvdConnection::new(
        EnvdEndpoint::new(format!("http://127.0.0.1:{port}")).transport(transport),
    )
    .unwrap();
    let err = conn
        .process()
        .list(
            conn.request(ListRequest {}, &CallOptions::default())
                .unwrap(),
        )
        .await
        .unwrap_err();
    let err = EnvdError::from(err);
    assert!(
        matches!(
            err,
            EnvdError::Transport { .. } | EnvdError::SandboxUnavailable { .. }
        ),
        "{transport:?}: {err:?}"
    );
    if let EnvdError::Transport { .. } = err {
        // The cause is kept, not flattened into the message.
        assert!(
            std::error::Error::source(&err).is_some(),
            "{transport:?}: a transport error without its source: {err:?}"
        );
    }
}

#[tokio::test]
async fn h2c_unreachable_envd_is_a_transport_error() {
    unreachable_envd_is_a_transport_error(Transport::Grpc).await;
}

#[tokio::test]
async fn grpc_web_unreachable_envd_is_a_transport_error() {
    unreachable_envd_is_a_transport_error(Transport::GrpcWeb).await;
}

#[tokio::test]
async fn transport_auto_picks_by_scheme_and_bad_urls_are_refused() {
    assert_eq!(
        EnvdEndpoint::new("http://x:1").resolved_transport(),
        Transport::Grpc
    );
    assert_eq!(
        EnvdEndpoint::new("https://x").resolved_transport(),
        Transport::GrpcWeb
    );
    let err = EnvdConnection::new(EnvdEndpoint::new("ftp://x")).unwrap_err();
    assert!(matches!(err, EnvdError::InvalidEndpoint { .. }));
    let err =
        EnvdConnection::new(EnvdEndpoint::new("https://x").transport(Transport::Grpc)).unwrap_err();
    assert!(err.to_string().contains("GrpcWeb"), "{err}");
    let err =
        EnvdConnection::new(EnvdEndpoint::new("http://x").access_token("bad\ntoken")).unwrap_err();
    assert!(matches!(err, EnvdError::InvalidEndpoint { .. }));
}

#[tokio::test]
async fn version_gates_and_default_user() {
    let old = EnvdConnection::new(
        EnvdEndpoint::new("http://x:1").envd_version("0.3.0".parse::<EnvdVersion>().unwrap()),
    )
    .unwrap();
    let err = old.require(Feature::CloseStdin).unwrap_err();
    assert!(matches!(err, EnvdError::UnsupportedFeature(_)));
    assert!(err.to_string().contains("0.5.2"));
    // envd < 0.4.0 has no default user: the SDKs send `user`.
    assert_eq!(old.effective_user(None), Some("user"));
    assert_eq!(old.effective_user(Some("root")), Some("root"));
    let new = EnvdConnection::new(EnvdEndpoint::new("http://x:1")).unwrap();
    assert_eq!(new.effective_user(None), None);
    assert!(new.require(Feature::CloseStdin).is_ok());
}
