//! The tonic client over gRPC-Web (HTTP/1.1) against the real daemon.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use e2b_envd_proto::process::process_client::ProcessClient;
use e2b_envd_proto::process::{
    ConnectRequest, ListRequest, ProcessSelector, process_selector::Selector,
};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tonic::body::Body;

type WebClient = ProcessClient<
    tonic_web::GrpcWebClientService<
        Client<hyper_util::client::legacy::connect::HttpConnector, tonic_web::GrpcWebCall<Body>>,
    >,
>;

fn web_client(envd: &TestEnvd) -> WebClient {
    let client = Client::builder(TokioExecutor::new()).build_http();
    let svc = tower::ServiceBuilder::new()
        .layer(tonic_web::GrpcWebClientLayer::new())
        .service(client);
    ProcessClient::with_origin(svc, envd.url().parse().unwrap())
}

#[tokio::test]
async fn start_over_grpc_web() {
    let envd = spawn_envd().await;
    let mut c = web_client(&envd);
    let s = start_bash(&mut c, &envd, "echo web; exit 2").await;
    let got = collect(s, |m| m.event).await;
    assert_eq!(got.stdout, b"web\n");
    assert_eq!(got.end.unwrap().exit_code, 2);
    assert!(got.error.is_none());
    c.list(req(&envd, ListRequest {})).await.unwrap();
}

#[tokio::test]
async fn errors_over_grpc_web() {
    let envd = spawn_envd().await;
    let mut c = web_client(&envd);
    let sel = Some(ProcessSelector {
        selector: Some(Selector::Pid(4_000_000)),
    });
    let err = c
        .connect(req(&envd, ConnectRequest { process: sel }))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert_eq!(err.message(), "process with pid 4000000 not found");
    // No token → unauthenticated.
    let err = c
        .list(tonic::Request::new(ListRequest {}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
}
