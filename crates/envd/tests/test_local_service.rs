//! `EnvdHandle::local_service`: the daemon called in-process, without a socket. The same checks
//! (access token), the same streams, and `unavailable` once the daemon is shut down.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use e2b_envd_proto::process::process_client::ProcessClient;
use e2b_envd_proto::process::{
    ProcessInput, ProcessSelector, StreamInputRequest, process_input, process_selector::Selector,
    stream_input_request,
};

#[tokio::test]
async fn start_streams_output_and_end_in_process() {
    let envd = spawn_envd().await;
    let mut c = ProcessClient::new(envd.handle().unwrap().local_service());
    let s = start_bash(&mut c, &envd, "echo hello; echo bad >&2; exit 3").await;
    let got = collect(s, |m| m.event).await;
    assert!(got.pid.unwrap() > 0);
    assert_eq!(got.stdout, b"hello\n");
    assert_eq!(got.stderr, b"bad\n");
    assert_eq!(got.end.unwrap().exit_code, 3);
}

#[tokio::test]
async fn the_access_token_is_required_in_process_too() {
    let envd = spawn_envd().await;
    let mut c = ProcessClient::new(envd.handle().unwrap().local_service());
    let err = c
        .start(tonic::Request::new(bash("echo never")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
}

/// One `StreamInput` data message carrying `bytes` for stdin.
fn stdin_data(bytes: &'static [u8]) -> StreamInputRequest {
    StreamInputRequest {
        event: Some(stream_input_request::Event::Data(
            stream_input_request::DataEvent {
                input: Some(ProcessInput {
                    input: Some(process_input::Input::Stdin(bytes::Bytes::from_static(
                        bytes,
                    ))),
                }),
            },
        )),
    }
}

#[tokio::test]
async fn client_streamed_stdin_reaches_the_process_in_process() {
    let envd = spawn_envd().await;
    let mut c = ProcessClient::new(envd.handle().unwrap().local_service());
    let mut start = bash("head -c 6");
    start.stdin = Some(true);
    let mut s = c.start(req(&envd, start)).await.unwrap().into_inner();
    let pid = start_pid(&mut s).await;
    let selector = Some(ProcessSelector {
        selector: Some(Selector::Pid(pid)),
    });
    let msgs = vec![
        StreamInputRequest {
            event: Some(stream_input_request::Event::Start(
                stream_input_request::StartEvent { process: selector },
            )),
        },
        stdin_data(b"abc"),
        stdin_data(b"def"),
    ];
    c.stream_input(req(&envd, futures::stream::iter(msgs)))
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), collect(s, |m| m.event))
        .await
        .expect("the process ends after six bytes of stdin");
    assert_eq!(got.stdout, b"abcdef");
    assert_eq!(got.end.unwrap().exit_code, 0);
}

#[tokio::test]
async fn calls_after_shutdown_are_unavailable() {
    let envd = spawn_envd().await;
    let svc = envd.handle().unwrap().local_service();
    let token = envd.access_token();
    envd.shutdown().await;
    let mut c = ProcessClient::new(svc);
    let mut r = tonic::Request::new(bash("echo never"));
    if let Some(t) = token {
        r.metadata_mut().insert(
            e2b_envd_proto::wire::headers::ACCESS_TOKEN,
            t.parse().unwrap(),
        );
    }
    let err = c.start(r).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains("shut down"), "{err:?}");
}

async fn health(svc: &e2b_envd::LocalService) -> http::StatusCode {
    use tower::ServiceExt as _;
    let req = http::Request::get("/health")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    svc.clone().oneshot(req).await.unwrap().status()
}

#[tokio::test]
async fn rest_after_shutdown_is_503() {
    let envd = spawn_envd().await;
    let svc = envd.handle().unwrap().local_service();
    assert_eq!(health(&svc).await, http::StatusCode::NO_CONTENT);
    envd.shutdown().await;
    assert_eq!(health(&svc).await, http::StatusCode::SERVICE_UNAVAILABLE);
}

/// A caller on another, short-lived runtime: the handler (and the process's supervisor it
/// starts) runs on the daemon's runtime, so the process is still reaped after the caller's
/// runtime is gone.
#[test]
fn a_caller_on_a_short_lived_runtime_leaves_the_process_supervised() {
    let daemon_rt = tokio::runtime::Runtime::new().unwrap();
    let envd = daemon_rt.block_on(spawn_envd());
    let svc = envd.handle().unwrap().local_service();
    let marker = envd.workdir().join("done");
    let start = req(
        &envd,
        bash(&format!("sleep 0.3; echo done > {}", marker.display())),
    );
    let caller_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pid = caller_rt.block_on(async move {
        let mut c = ProcessClient::new(svc);
        let mut s = c.start(start).await.unwrap().into_inner();
        start_pid(&mut s).await
    });
    drop(caller_rt);
    // The daemon forgets a process once its supervisor has reaped it and sent its end; with
    // the supervisor gone along with the caller's runtime it would stay listed forever.
    let listed = daemon_rt.block_on(async {
        let mut c = ProcessClient::new(envd.handle().unwrap().local_service());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let list = c
                .list(req(&envd, e2b_envd_proto::process::ListRequest {}))
                .await
                .unwrap()
                .into_inner();
            let listed = list.processes.iter().any(|p| p.pid == pid);
            if !listed || tokio::time::Instant::now() > deadline {
                break listed;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(marker.exists(), "the command ran to its end");
    assert!(
        !listed,
        "process {pid} still listed: its supervisor did not survive the caller's runtime"
    );
    daemon_rt.block_on(envd.shutdown());
}
