#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `StdinWriter`: stdin over one open `StreamInput` stream (ordering, large writes, close after
//! writes, errors), and its fallback to `SendInput` (gRPC-Web, envd without `StreamInput`).

mod common;

use common::Via;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use e2b_commands::{CommandOptions, Commands, EnvdConnection, EnvdEndpoint, Transport};
use e2b_envd_client::CallOptions;
use e2b_envd_proto::process::process_server::{Process, ProcessServer};
use e2b_envd_proto::process::*;
use futures::Stream;
use tonic::{Request, Response, Status};

const WAIT: Duration = Duration::from_secs(20);

async fn many_small_writes_arrive_in_order(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("cat", CommandOptions::new().stdin(true))
        .await
        .unwrap();
    let w = h.stdin_writer();
    assert!(w.is_streaming());
    let mut expected = String::new();
    for i in 0..3000 {
        let line = format!("line {i}\n");
        expected.push_str(&line);
        // Alternate between clones: they share one stream.
        if i % 2 == 0 {
            w.write(line).await.unwrap();
        } else {
            h.stdin_writer().write(line).await.unwrap();
        }
    }
    h.close_stdin().await.unwrap();
    let out = tokio::time::timeout(WAIT, h.wait()).await.unwrap().unwrap();
    assert_eq!(out.stdout.len(), expected.len());
    assert!(out.stdout == expected, "output out of order");
    assert!(w.is_streaming(), "the stream stayed in use");
}
common::transport_cases!(many_small_writes_arrive_in_order: h2c, in_process);

async fn large_writes_are_split_and_delivered_exactly(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("cat", CommandOptions::new().stdin(true))
        .await
        .unwrap();
    let w = h.stdin_writer();
    // 5 MiB in one write (split into stream messages), then odd sizes around the split size.
    let big: Vec<u8> = (0..5 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut expected = big.clone();
    w.write(big).await.unwrap();
    for n in [1usize, 256 * 1024 - 1, 256 * 1024, 256 * 1024 + 1, 777] {
        let chunk: Vec<u8> = (0..n).map(|i| (i % 13) as u8 + b'a').collect();
        expected.extend_from_slice(&chunk);
        w.write(chunk).await.unwrap();
    }
    w.close().await.unwrap();
    let out = tokio::time::timeout(WAIT, h.wait()).await.unwrap().unwrap();
    let got = h.stdout_bytes();
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "bytes differ");
    assert_eq!(out.exit_code, 0);
}
common::transport_cases!(large_writes_are_split_and_delivered_exactly: h2c, in_process);

async fn close_after_writes_delivers_everything_then_eof(via: Via) {
    let env = common::env_via(via).await;
    for round in 0..5 {
        let h = env
            .commands
            .start("wc -c", CommandOptions::new().stdin(true))
            .await
            .unwrap();
        let w = env.commands.stdin_writer(h.pid());
        let mut total = 0;
        for i in 0..200 {
            let s = "x".repeat(i % 17 + round);
            total += s.len();
            w.write(s).await.unwrap();
        }
        // No flush: close itself must deliver the queued writes before the EOF.
        w.close().await.unwrap();
        let out = tokio::time::timeout(WAIT, h.wait()).await.unwrap().unwrap();
        assert_eq!(out.stdout.trim(), total.to_string(), "round {round}");
    }
}
common::transport_cases!(close_after_writes_delivers_everything_then_eof: h2c, in_process);

async fn flush_confirms_delivery_and_writes_continue_after_it(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("cat", CommandOptions::new().stdin(true))
        .await
        .unwrap();
    let w = h.stdin_writer();
    w.write("a").await.unwrap();
    w.flush().await.unwrap();
    w.flush().await.unwrap(); // nothing open: fine
    w.write("b").await.unwrap();
    w.write("c\n").await.unwrap();
    h.close_stdin().await.unwrap();
    let out = tokio::time::timeout(WAIT, h.wait()).await.unwrap().unwrap();
    assert_eq!(out.stdout, "abc\n");
}
common::transport_cases!(flush_confirms_delivery_and_writes_continue_after_it: h2c, in_process);

async fn dropping_the_writer_still_delivers_queued_data(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("head -c 6", CommandOptions::new().stdin(true))
        .await
        .unwrap();
    {
        let w = env.commands.stdin_writer(h.pid());
        w.write("abc").await.unwrap();
        w.write("def").await.unwrap();
    }
    let out = tokio::time::timeout(WAIT, h.wait()).await.unwrap().unwrap();
    assert_eq!(out.stdout, "abcdef");
}
common::transport_cases!(dropping_the_writer_still_delivers_queued_data: h2c, in_process);

async fn errors_surface_on_a_later_write_or_flush(via: Via) {
    let env = common::env_via(via).await;
    // Unknown pid: the first write probes (or opens) and fails with not-found by flush at the
    // latest.
    let w = env.commands.stdin_writer(999_999);
    let r = match w.write("x").await {
        Err(e) => Err(e),
        Ok(()) => w.flush().await,
    };
    assert!(r.unwrap_err().is_not_found());

    // A process whose stdin is closed: writes are refused by envd, reported by flush.
    let h = env
        .commands
        .start("sleep 5", CommandOptions::new())
        .await
        .unwrap();
    let w = h.stdin_writer();
    let r = match w.write("x").await {
        Err(e) => Err(e),
        Ok(()) => w.flush().await,
    };
    assert!(r.is_err(), "{r:?}");
    h.kill().await.unwrap();

    // A process that exits while the stream is open: a later write or flush fails.
    let h = env
        .commands
        .start("head -c 1", CommandOptions::new().stdin(true))
        .await
        .unwrap();
    let w = h.stdin_writer();
    w.write("y").await.unwrap();
    tokio::time::timeout(WAIT, h.wait()).await.unwrap().unwrap();
    let mut failed = false;
    for _ in 0..50 {
        if w.write("more").await.is_err() {
            failed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if !failed {
        failed = w.flush().await.is_err();
    }
    assert!(failed, "writing to an exited process must fail eventually");
}
common::transport_cases!(errors_surface_on_a_later_write_or_flush: h2c, in_process);

async fn pty_writer_sends_terminal_input(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start(
            "head -n 1",
            CommandOptions::new().pty(e2b_commands::PtySize { cols: 80, rows: 24 }),
        )
        .await
        .unwrap();
    let w = h.stdin_writer();
    w.write("hi ").await.unwrap();
    w.write("there\n").await.unwrap();
    let out = tokio::time::timeout(WAIT, h.wait()).await.unwrap().unwrap();
    assert!(out.stdout.contains("hi there"), "{:?}", out.stdout);
}
common::transport_cases!(pty_writer_sends_terminal_input: h2c, in_process);

#[tokio::test]
async fn grpc_web_falls_back_to_send_input() {
    let env = common::env_via(Via::GrpcWeb).await;
    let h = env
        .commands
        .start("cat", CommandOptions::new().stdin(true))
        .await
        .unwrap();
    let w = h.stdin_writer();
    assert!(!w.is_streaming());
    for i in 0..50 {
        w.write(format!("{i},")).await.unwrap();
    }
    h.close_stdin().await.unwrap();
    let out = tokio::time::timeout(WAIT, h.wait()).await.unwrap().unwrap();
    let expected: String = (0..50).map(|i| format!("{i},")).collect();
    assert_eq!(out.stdout, expected);
}

/// A Process server that forwards to the real daemon but has no `StreamInput`, as an envd
/// without it would answer.
struct NoStreamInput {
    conn: EnvdConnection,
    send_inputs: Arc<AtomicUsize>,
    stream_inputs: Arc<AtomicUsize>,
}

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

impl NoStreamInput {
    fn req<T>(&self, msg: T) -> Request<T> {
        self.conn
            .request(msg, &CallOptions::default())
            .expect("request")
    }
}

#[tonic::async_trait]
impl Process for NoStreamInput {
    async fn list(&self, r: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        self.conn.process().list(self.req(r.into_inner())).await
    }
    type ConnectStream = Boxed<ConnectResponse>;
    async fn connect(
        &self,
        r: Request<ConnectRequest>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let s = self
            .conn
            .process()
            .connect(self.req(r.into_inner()))
            .await?;
        Ok(Response::new(Box::pin(s.into_inner())))
    }
    type StartStream = Boxed<StartResponse>;
    async fn start(&self, r: Request<StartRequest>) -> Result<Response<Self::StartStream>, Status> {
        let s = self.conn.process().start(self.req(r.into_inner())).await?;
        Ok(Response::new(Box::pin(s.into_inner())))
    }
    async fn update(&self, r: Request<UpdateRequest>) -> Result<Response<UpdateResponse>, Status> {
        self.conn.process().update(self.req(r.into_inner())).await
    }
    async fn stream_input(
        &self,
        _r: Request<tonic::Streaming<StreamInputRequest>>,
    ) -> Result<Response<StreamInputResponse>, Status> {
        self.stream_inputs.fetch_add(1, Ordering::SeqCst);
        Err(Status::unimplemented(
            "process.Process.StreamInput is not implemented",
        ))
    }
    async fn send_input(
        &self,
        r: Request<SendInputRequest>,
    ) -> Result<Response<SendInputResponse>, Status> {
        self.send_inputs.fetch_add(1, Ordering::SeqCst);
        self.conn
            .process()
            .send_input(self.req(r.into_inner()))
            .await
    }
    async fn send_signal(
        &self,
        r: Request<SendSignalRequest>,
    ) -> Result<Response<SendSignalResponse>, Status> {
        self.conn
            .process()
            .send_signal(self.req(r.into_inner()))
            .await
    }
    async fn close_stdin(
        &self,
        r: Request<CloseStdinRequest>,
    ) -> Result<Response<CloseStdinResponse>, Status> {
        self.conn
            .process()
            .close_stdin(self.req(r.into_inner()))
            .await
    }
}

#[tokio::test]
async fn envd_without_stream_input_falls_back_to_send_input() {
    let envd = e2b_test_support::spawn_envd().await;
    let upstream = EnvdConnection::new(common::endpoint(&envd, Transport::Grpc)).unwrap();
    let send_inputs = Arc::new(AtomicUsize::new(0));
    let stream_inputs = Arc::new(AtomicUsize::new(0));
    let proxy = NoStreamInput {
        conn: upstream,
        send_inputs: send_inputs.clone(),
        stream_inputs: stream_inputs.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = futures::stream::unfold(listener, |l| async move {
        let r = l.accept().await.map(|(s, _)| s);
        Some((r, l))
    });
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ProcessServer::new(proxy))
            .serve_with_incoming(incoming),
    );

    let ep = EnvdEndpoint::new(format!("http://{addr}")).transport(Transport::Grpc);
    let commands = Commands::new(EnvdConnection::new(ep).unwrap());
    let h = commands
        .start("cat", CommandOptions::new().stdin(true))
        .await
        .unwrap();
    let w = h.stdin_writer();
    let mut expected = String::new();
    for i in 0..20 {
        let s = format!("{i};");
        expected.push_str(&s);
        w.write(s).await.unwrap();
    }
    assert!(!w.is_streaming());
    // A second writer on the same `Commands` does not probe again.
    let w2 = commands.stdin_writer(h.pid());
    w2.write("end\n").await.unwrap();
    expected.push_str("end\n");
    h.close_stdin().await.unwrap();
    let out = tokio::time::timeout(WAIT, h.wait()).await.unwrap().unwrap();
    assert_eq!(out.stdout, expected);
    assert_eq!(stream_inputs.load(Ordering::SeqCst), 1, "one probe");
    assert_eq!(send_inputs.load(Ordering::SeqCst), 21);
    server.abort();
}
