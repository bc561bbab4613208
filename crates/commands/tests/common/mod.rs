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

pub fn commands_for(envd: &TestEnvd, transport: Transport) -> Commands {
    Commands::new(EnvdConnection::new(endpoint(envd, transport)).expect("connection"))
}

/// Both transports, for tests that must pass on each.
pub const TRANSPORTS: [Transport; 2] = [Transport::Grpc, Transport::GrpcWeb];
