//! Shared helpers: a real daemon on an ephemeral port and `Commands` over it.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use e2b_commands::{Commands, EnvdConnection, EnvdEndpoint, Transport};
use e2b_test_support::TestEnvd;

/// A daemon plus a client over `transport`.
pub struct Env {
    pub envd: TestEnvd,
    pub commands: Commands,
}

pub async fn env() -> Env {
    env_with(Transport::Grpc).await
}

pub async fn env_with(transport: Transport) -> Env {
    let envd = e2b_test_support::spawn_envd().await;
    let commands = commands_for(&envd, transport);
    Env { envd, commands }
}

pub fn endpoint(envd: &TestEnvd, transport: Transport) -> EnvdEndpoint {
    let mut ep = EnvdEndpoint::new(envd.url()).transport(transport);
    if let Some(t) = envd.access_token() {
        ep = ep.access_token(t);
    }
    ep
}

/// `Commands` over `transport`. With `E2B_TEST_IN_PROCESS` set (scripts/test runs this crate's
/// suite a second time so), `Transport::Grpc` means the daemon's in-process service instead of
/// h2c over loopback, as `e2b::Sandbox::local()` uses it.
pub fn commands_for(envd: &TestEnvd, transport: Transport) -> Commands {
    let ep = endpoint(envd, transport);
    let conn = if transport == Transport::Grpc && std::env::var_os("E2B_TEST_IN_PROCESS").is_some()
    {
        let handle = envd
            .handle()
            .expect("E2B_TEST_IN_PROCESS needs the embedded daemon's handle");
        EnvdConnection::with_service(ep, handle.local_service())
    } else {
        EnvdConnection::new(ep)
    };
    Commands::new(conn.expect("connection"))
}

/// Both transports, for tests that must pass on each.
pub const TRANSPORTS: [Transport; 2] = [Transport::Grpc, Transport::GrpcWeb];
