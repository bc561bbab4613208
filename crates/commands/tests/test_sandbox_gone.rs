#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The sandbox disappears while a command runs (E2B's sandboxKilledDuringRun): the connection
//! drops without an exit status, the health probe finds envd gone, and `wait()` says so.

mod common;

use common::Via;

use std::time::Duration;

use e2b_commands::{CommandError, CommandOptions, Commands, EnvdConnection, EnvdEndpoint};
use tokio::task::JoinSet;

/// A TCP proxy to `target` that can be cut at once (listener and every connection).
async fn proxy(target: std::net::SocketAddr) -> (String, JoinSet<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut set = JoinSet::new();
    set.spawn(async move {
        let mut conns = JoinSet::new();
        while let Ok((mut inbound, _)) = listener.accept().await {
            conns.spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (url, set)
}

async fn wait_reports_a_vanished_sandbox(via: Via) {
    let envd = e2b_test_support::spawn_envd().await;
    let (url, mut cut) = proxy(envd.addr()).await;
    let mut ep = EnvdEndpoint::new(url).transport(via.transport());
    if let Some(tok) = envd.access_token() {
        ep = ep.access_token(tok);
    }
    let commands = Commands::new(EnvdConnection::new(ep).unwrap());
    let h = commands
        .start("echo started; sleep 30", CommandOptions::new())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    cut.abort_all(); // the "sandbox" is gone: no end event, nothing listening
    while cut.join_next().await.is_some() {}
    let err = tokio::time::timeout(Duration::from_secs(10), h.wait())
        .await
        .expect("wait resolves")
        .unwrap_err();
    assert!(
        matches!(err, CommandError::SandboxUnavailable { .. }),
        "{via:?}: {err:?}"
    );
    assert!(
        err.to_string()
            .contains("killed or reached its end of life"),
        "{err}"
    );
    // A new call teaches the same.
    let err = commands.list().await.unwrap_err();
    assert!(
        matches!(err, CommandError::SandboxUnavailable { .. }),
        "{err:?}"
    );
}
// No in-process case: the sandbox vanishes by cutting its socket.
common::transport_cases!(wait_reports_a_vanished_sandbox: h2c, grpc_web);
