//! The transport over a hand-written `AgentProcess`: behaviours that need a process the fake agent
//! cannot imitate (an output stream that fails without an exit, a close-stdin that is unsupported).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a test waits for something that must happen before it fails as hung (not a speed
/// check).
const HANG_GUARD: Duration = Duration::from_secs(30);

use bytes::Bytes;
use e2b_acp::{AcpError, AcpOptions, AcpTransport, AgentProcess, ByteStream, ProcessExit};
use futures::future::BoxFuture;
use futures::{StreamExt, stream};
use tokio::sync::watch;

struct Scripted {
    stdout: std::sync::Mutex<Option<ByteStream>>,
    killed: watch::Sender<bool>,
    kills: Arc<AtomicUsize>,
    close_unsupported: bool,
}

impl Scripted {
    fn new(stdout: ByteStream, close_unsupported: bool) -> (Self, Arc<AtomicUsize>) {
        let kills = Arc::new(AtomicUsize::new(0));
        (
            Self {
                stdout: std::sync::Mutex::new(Some(stdout)),
                killed: watch::channel(false).0,
                kills: kills.clone(),
                close_unsupported,
            },
            kills,
        )
    }
}

impl AgentProcess for Scripted {
    fn pid(&self) -> u32 {
        4242
    }
    fn take_stdout(&mut self) -> Option<ByteStream> {
        self.stdout.lock().unwrap().take()
    }
    fn take_stderr(&mut self) -> Option<ByteStream> {
        None
    }
    fn write_stdin(&self, _data: Bytes) -> BoxFuture<'_, Result<(), AcpError>> {
        Box::pin(async { Ok(()) })
    }
    fn close_stdin(&self) -> BoxFuture<'_, Result<(), AcpError>> {
        let unsupported = self.close_unsupported;
        Box::pin(async move {
            if unsupported {
                Err(AcpError::Unsupported {
                    feature: "closing a command's stdin",
                    required: "0.5.2".into(),
                    actual: "0.4.0".into(),
                })
            } else {
                Ok(()) // but the "agent" ignores EOF: it only ends when killed
            }
        })
    }
    fn kill(&self) -> BoxFuture<'_, Result<bool, AcpError>> {
        self.kills.fetch_add(1, Ordering::SeqCst);
        let was = self.killed.send_replace(true);
        Box::pin(async move { Ok(!was) })
    }
    fn wait(&self) -> BoxFuture<'_, Result<ProcessExit, AcpError>> {
        let mut rx = self.killed.subscribe();
        Box::pin(async move {
            let _ = rx.wait_for(|k| *k).await;
            Ok(ProcessExit::signal(9))
        })
    }
}

#[tokio::test]
async fn stop_kills_at_once_when_the_output_stream_failed_without_an_exit() {
    let out = stream::iter([
        Ok(Bytes::from_static(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"_a\"}\n",
        )),
        Err(AcpError::Process {
            action: "reading output",
            reason: "stream broke".into(),
        }),
    ])
    .chain(stream::pending())
    .boxed();
    let (p, kills) = Scripted::new(out, false);
    let t = AcpTransport::start(p, &AcpOptions::new()).unwrap();
    assert!(t.recv().await.unwrap().is_ok());
    assert!(matches!(
        t.recv().await,
        Some(Err(AcpError::Process { .. }))
    ));
    // An hour's grace: stop ends within the guard only if it kills at once (the failed stream
    // means EOF cannot be seen to work).
    tokio::time::timeout(HANG_GUARD, t.stop(Duration::from_secs(3600)))
        .await
        .expect("stop waited for its grace period after the output stream failed")
        .unwrap();
    assert_eq!(kills.load(Ordering::SeqCst), 1);
    assert!(t.wait().await.unwrap().killed);
}

#[tokio::test]
async fn stop_kills_when_closing_stdin_is_unsupported() {
    let (p, kills) = Scripted::new(stream::pending().boxed(), true);
    let t = AcpTransport::start(p, &AcpOptions::new()).unwrap();
    // An hour's grace: stop ends within the guard only if it kills as soon as EOF is refused.
    let r = tokio::time::timeout(HANG_GUARD, t.stop(Duration::from_secs(3600)))
        .await
        .expect("stop waited for its grace period although closing stdin is unsupported");
    assert!(matches!(r, Err(AcpError::Unsupported { .. })), "{r:?}");
    assert_eq!(kills.load(Ordering::SeqCst), 1);
    assert!(t.wait().await.unwrap().killed);
}

#[tokio::test]
async fn stop_is_bounded_when_the_exit_never_comes() {
    struct Immortal;
    impl AgentProcess for Immortal {
        fn pid(&self) -> u32 {
            1
        }
        fn take_stdout(&mut self) -> Option<ByteStream> {
            Some(stream::pending().boxed())
        }
        fn take_stderr(&mut self) -> Option<ByteStream> {
            None
        }
        fn write_stdin(&self, _d: Bytes) -> BoxFuture<'_, Result<(), AcpError>> {
            Box::pin(async { Ok(()) })
        }
        fn close_stdin(&self) -> BoxFuture<'_, Result<(), AcpError>> {
            Box::pin(async { Ok(()) })
        }
        fn kill(&self) -> BoxFuture<'_, Result<bool, AcpError>> {
            Box::pin(async { Ok(true) })
        }
        fn wait(&self) -> BoxFuture<'_, Result<ProcessExit, AcpError>> {
            Box::pin(std::future::pending())
        }
    }
    let t = AcpTransport::start(Immortal, &AcpOptions::new()).unwrap();
    let t0 = Instant::now();
    let r = tokio::time::timeout(HANG_GUARD, t.stop(Duration::from_millis(400)))
        .await
        .expect("stop was not bounded by its timeout when the exit never came");
    assert!(matches!(r, Err(AcpError::StopTimeout { .. })), "{r:?}");
    // It gave up no earlier than its timeout (a lower bound cannot be flaky under load).
    assert!(
        t0.elapsed() >= Duration::from_millis(390),
        "{:?}",
        t0.elapsed()
    );
}

/// A process whose output the test writes, and which keeps "writing" after it was killed (as an
/// agent whose signal handler still writes, or output already on its way from a remote sandbox).
struct Controlled {
    stdout: std::sync::Mutex<Option<ByteStream>>,
    killed: watch::Sender<bool>,
}

fn controlled() -> (
    Controlled,
    tokio::sync::mpsc::UnboundedSender<Result<Bytes, AcpError>>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed();
    (
        Controlled {
            stdout: std::sync::Mutex::new(Some(out)),
            killed: watch::channel(false).0,
        },
        tx,
    )
}

impl AgentProcess for Controlled {
    fn pid(&self) -> u32 {
        4243
    }
    fn take_stdout(&mut self) -> Option<ByteStream> {
        self.stdout.lock().unwrap().take()
    }
    fn take_stderr(&mut self) -> Option<ByteStream> {
        None
    }
    fn write_stdin(&self, _data: Bytes) -> BoxFuture<'_, Result<(), AcpError>> {
        Box::pin(async { Ok(()) })
    }
    fn close_stdin(&self) -> BoxFuture<'_, Result<(), AcpError>> {
        Box::pin(async { Ok(()) })
    }
    fn kill(&self) -> BoxFuture<'_, Result<bool, AcpError>> {
        let was = self.killed.send_replace(true);
        Box::pin(async move { Ok(!was) })
    }
    fn wait(&self) -> BoxFuture<'_, Result<ProcessExit, AcpError>> {
        let mut rx = self.killed.subscribe();
        Box::pin(async move {
            let _ = rx.wait_for(|k| *k).await;
            Ok(ProcessExit::signal(9))
        })
    }
}

fn update(i: usize) -> Result<Bytes, AcpError> {
    Ok(Bytes::from(format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{{\"sessionId\":\"s\",\"update\":{{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{{\"type\":\"text\",\"text\":\"m{i}\"}}}}}}}}\n"
    )))
}

// Issue 15: output that arrives after kill() is not received. (Messages already queued before
// the kill stay readable; the agent here writes on after the kill request.)
#[tokio::test]
async fn nothing_is_received_after_kill_even_if_the_agent_keeps_emitting() {
    let (p, out) = controlled();
    let t = AcpTransport::start(p, &AcpOptions::new()).unwrap();
    out.send(update(0)).unwrap();
    assert!(t.recv().await.unwrap().is_ok());
    assert!(t.kill().await.unwrap());
    for i in 1..=5 {
        out.send(update(i)).unwrap();
    }
    drop(out);
    let after = tokio::time::timeout(Duration::from_secs(5), t.recv())
        .await
        .expect("the stream ends after kill");
    assert!(after.is_none(), "received after kill: {after:?}");
}

// Issue 15: nothing is dispatched to the client's handlers after kill(), also what the official
// client had already read ahead while a handler was busy.
#[tokio::test]
async fn nothing_is_dispatched_after_kill() {
    use agent_client_protocol::v1::schema::SessionNotification;
    use agent_client_protocol::{Client, on_receive_notification};
    let (p, out) = controlled();
    let entered = Arc::new(AtomicUsize::new(0));
    let (gate_tx, gate_rx) = watch::channel(false);
    let e2 = entered.clone();
    let client = Client.v1().on_receive_notification(
        async move |_n: SessionNotification, _cx| {
            e2.fetch_add(1, Ordering::SeqCst);
            let mut gate = gate_rx.clone();
            let _ = gate.wait_for(|open| *open).await;
            Ok(())
        },
        on_receive_notification!(),
    );
    let agent = e2b_acp::AcpAgent::connect(p, client, AcpOptions::new())
        .await
        .unwrap();
    // The first update blocks its handler; the next ones wait behind it (read ahead by the
    // client or still in the transport).
    for i in 0..10 {
        out.send(update(i)).unwrap();
    }
    tokio::time::timeout(Duration::from_secs(5), async {
        while entered.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(agent.kill().await.unwrap());
    gate_tx.send(true).unwrap();
    for i in 10..20 {
        out.send(update(i)).unwrap();
    }
    // Give a dispatch loop that ignored the kill time to deliver the 19 others.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        entered.load(Ordering::SeqCst),
        1,
        "messages were dispatched after kill()"
    );
    assert!(agent.wait().await.unwrap().killed);
}
