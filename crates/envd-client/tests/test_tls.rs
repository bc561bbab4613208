//! gRPC-Web over HTTP/1.1 + TLS, as a real envd behind E2B's proxy is reached, against a
//! loopback TLS server whose certificate comes from a private CA the endpoint trusts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use e2b_envd_client::{CallOptions, EnvdConnection, EnvdEndpoint, EnvdError, Transport};
use e2b_envd_proto::process::process_server::{Process, ProcessServer};
use e2b_envd_proto::process::*;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tonic::{Request, Response, Status, Streaming};

#[derive(Clone, Default)]
struct Echo;

type Stream<T> = std::pin::Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl Process for Echo {
    async fn list(&self, req: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let token = req
            .metadata()
            .get("x-access-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        Ok(Response::new(ListResponse {
            processes: vec![ProcessInfo {
                config: Some(ProcessConfig {
                    cmd: token,
                    ..Default::default()
                }),
                pid: 7,
                tag: None,
            }],
        }))
    }
    type ConnectStream = Stream<ConnectResponse>;
    async fn connect(
        &self,
        _: Request<ConnectRequest>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        Err(Status::unimplemented(""))
    }
    type StartStream = Stream<StartResponse>;
    async fn start(&self, _: Request<StartRequest>) -> Result<Response<Self::StartStream>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn update(&self, _: Request<UpdateRequest>) -> Result<Response<UpdateResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn stream_input(
        &self,
        _: Request<Streaming<StreamInputRequest>>,
    ) -> Result<Response<StreamInputResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn send_input(
        &self,
        _: Request<SendInputRequest>,
    ) -> Result<Response<SendInputResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn send_signal(
        &self,
        _: Request<SendSignalRequest>,
    ) -> Result<Response<SendSignalResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn close_stdin(
        &self,
        _: Request<CloseStdinRequest>,
    ) -> Result<Response<CloseStdinResponse>, Status> {
        Err(Status::unimplemented(""))
    }
}

/// Serves gRPC-Web over HTTP/1.1 + TLS on loopback; returns the port and the CA certificate.
async fn serve_tls() -> (u16, Vec<u8>) {
    let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert_der = ca.cert.der().to_vec();
    let key = rustls::pki_types::PrivateKeyDer::try_from(ca.signing_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![rustls::pki_types::CertificateDer::from(cert_der.clone())],
        key,
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let router = tonic::service::Routes::new(ProcessServer::new(Echo))
        .into_axum_router()
        .layer(tonic_web::GrpcWebLayer::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let svc = TowerToHyperService::new(router.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .http1_only()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (port, cert_der)
}

#[tokio::test]
async fn grpc_web_over_tls_with_a_private_root() {
    let (port, ca) = serve_tls().await;
    let endpoint = EnvdEndpoint::new(format!("https://localhost:{port}"))
        .access_token("tls-token")
        .add_root_certificate(ca);
    let conn = EnvdConnection::new(endpoint).unwrap();
    assert_eq!(conn.transport(), Transport::GrpcWeb, "https picks gRPC-Web");
    let resp = conn
        .process()
        .list(
            conn.request(ListRequest {}, &CallOptions::default())
                .unwrap(),
        )
        .await
        .unwrap();
    let info = resp.into_inner().processes.remove(0);
    assert_eq!(info.pid, 7);
    assert_eq!(
        info.config.unwrap().cmd,
        "tls-token",
        "headers arrive over TLS"
    );
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_transport_error() {
    let (port, _ca) = serve_tls().await;
    let conn = EnvdConnection::new(EnvdEndpoint::new(format!("https://localhost:{port}"))).unwrap();
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
        "{err:?}"
    );
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "the error names the certificate: {err}"
    );
}
