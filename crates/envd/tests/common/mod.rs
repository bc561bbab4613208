//! Helpers shared by the integration tests: clients for each protocol.

#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::time::Duration;

use bytes::{Buf, Bytes};
use e2b_envd_proto::process::process_client::ProcessClient;
use e2b_envd_proto::process::process_event::{EndEvent, Event, data_event::Output};
use e2b_envd_proto::process::{ProcessConfig, ProcessEvent, StartRequest, StartResponse};
pub use e2b_test_support::{TestEnvd, spawn_envd, spawn_envd_open, spawn_envd_with};
use tonic::transport::Channel;

/// A `/bin/bash -l -c <cmd>` start request without stdin, as the SDKs send it.
pub fn bash(cmd: &str) -> StartRequest {
    StartRequest {
        process: Some(ProcessConfig {
            cmd: "/bin/bash".into(),
            args: vec!["-l".into(), "-c".into(), cmd.into()],
            ..Default::default()
        }),
        stdin: Some(false),
        ..Default::default()
    }
}

/// A tonic request carrying the daemon's access token.
pub fn req<T>(envd: &TestEnvd, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Some(t) = envd.access_token() {
        r.metadata_mut().insert(
            e2b_envd_proto::wire::headers::ACCESS_TOKEN,
            t.parse().unwrap(),
        );
    }
    r
}

/// Starts `bash -l -c <cmd>` (stdin closed) on `c` with the daemon's token; panics if the
/// call fails. Works on any channel: h2c, gRPC-Web or the in-process service.
pub async fn start_bash<T>(
    c: &mut ProcessClient<T>,
    envd: &TestEnvd,
    cmd: &str,
) -> tonic::Streaming<StartResponse>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    c.start(req(envd, bash(cmd))).await.unwrap().into_inner()
}

/// Reads a process stream's first message, which must be `start`, and returns the pid.
pub async fn start_pid(s: &mut tonic::Streaming<StartResponse>) -> u32 {
    match s.message().await.unwrap().and_then(|m| m.event?.event) {
        Some(Event::Start(st)) => st.pid,
        other => panic!("expected the start event first, got {other:?}"),
    }
}

/// gRPC over h2c.
pub async fn h2c(envd: &TestEnvd) -> ProcessClient<Channel> {
    let ch = tonic::transport::Endpoint::from_shared(envd.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    ProcessClient::new(ch)
}

/// Everything a process stream carried.
#[derive(Debug, Default)]
pub struct Collected {
    pub pid: Option<u32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub pty: Vec<u8>,
    pub end: Option<EndEvent>,
    pub keepalives: usize,
    pub events: usize,
    pub error: Option<tonic::Status>,
}

impl Collected {
    pub fn push(&mut self, ev: ProcessEvent) {
        self.events += 1;
        match ev.event {
            Some(Event::Start(s)) => {
                assert!(self.pid.is_none(), "two start events");
                assert_eq!(self.events, 1, "start must come first");
                self.pid = Some(s.pid);
            }
            Some(Event::Data(d)) => {
                assert!(self.end.is_none(), "data after end");
                match d.output {
                    Some(Output::Stdout(b)) => self.stdout.extend(b),
                    Some(Output::Stderr(b)) => self.stderr.extend(b),
                    Some(Output::Pty(b)) => self.pty.extend(b),
                    None => {}
                }
            }
            Some(Event::End(e)) => {
                assert!(self.end.is_none(), "two end events");
                self.end = Some(e);
            }
            Some(Event::Keepalive(_)) => self.keepalives += 1,
            None => panic!("empty event"),
        }
    }
}

/// Drains a tonic stream of StartResponse/ConnectResponse (anything with `.event`).
pub async fn collect<T, F>(mut s: tonic::Streaming<T>, event: F) -> Collected
where
    F: Fn(T) -> Option<ProcessEvent>,
{
    let mut c = Collected::default();
    loop {
        match tokio::time::timeout(Duration::from_secs(30), s.message())
            .await
            .expect("stream stalled")
        {
            Ok(Some(m)) => c.push(event(m).expect("event")),
            Ok(None) => break,
            Err(status) => {
                c.error = Some(status);
                break;
            }
        }
    }
    c
}

/// Raw Connect requests over HTTP/1.1 (reqwest).
pub struct ConnectClient {
    pub http: reqwest::Client,
    pub url: String,
    pub token: Option<String>,
}

impl ConnectClient {
    pub fn new(envd: &TestEnvd) -> Self {
        Self {
            http: reqwest::Client::builder().http1_only().build().unwrap(),
            url: envd.url(),
            token: envd.access_token(),
        }
    }

    pub fn post(&self, path: &str, content_type: &str) -> reqwest::RequestBuilder {
        let mut b = self
            .http
            .post(format!("{}{}", self.url, path))
            .header("content-type", content_type);
        if let Some(t) = &self.token {
            b = b.header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, t);
        }
        b
    }

    /// Unary JSON call: (HTTP status, JSON body).
    pub async fn unary(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        let r = self
            .post(path, "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        )
    }

    /// Server-streaming JSON call with an enveloped body; returns the HTTP status and the
    /// decoded envelopes (flags, JSON).
    pub async fn stream(
        &self,
        path: &str,
        body: &[u8],
        headers: &[(&str, &str)],
    ) -> (u16, Vec<(u8, serde_json::Value)>) {
        let mut b = self
            .post(path, "application/connect+json")
            .body(body.to_vec());
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let r = b.send().await.unwrap();
        let status = r.status().as_u16();
        let bytes = r.bytes().await.unwrap();
        (status, parse_envelopes(bytes))
    }
}

/// The `Authorization` value envd reads the user from: Basic auth with `user` and no password.
pub fn basic_auth(user: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:"))
    )
}

/// Frames a message in a Connect envelope.
pub fn envelope(flags: u8, msg: &[u8]) -> Vec<u8> {
    let mut v = vec![flags];
    v.extend((msg.len() as u32).to_be_bytes());
    v.extend(msg);
    v
}

/// Splits a Connect streaming body into (flags, JSON) envelopes.
pub fn parse_envelopes(mut b: Bytes) -> Vec<(u8, serde_json::Value)> {
    let mut out = Vec::new();
    while b.remaining() >= 5 {
        let flags = b.get_u8();
        let len = b.get_u32() as usize;
        assert!(b.remaining() >= len, "truncated envelope in response");
        let msg = b.split_to(len);
        out.push((flags, serde_json::from_slice(&msg).unwrap()));
    }
    assert_eq!(b.remaining(), 0, "trailing bytes in response");
    out
}

/// Number of open file descriptors of this (test) process, which hosts the daemon.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Polls until `pid` is gone (or a zombie); `false` when it is still alive after `limit`, a
/// generous hang guard, not a timing goal.
pub async fn gone_within(pid: i32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while alive(pid) {
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// Whether a pid exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            s.rsplit(')')
                .next()
                .map(|r| r.trim_start().starts_with('Z'))
                == Some(false)
        }
        Err(_) => false,
    }
}
