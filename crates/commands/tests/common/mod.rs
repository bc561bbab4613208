//! Shared helpers: a real daemon on an ephemeral port, `Commands` over it by a named transport,
//! and `transport_cases!`, which turns one `async fn case(via: Via)` into one visible test per
//! transport (`<case>::h2c`, `<case>::grpc_web`, `<case>::in_process`).
#![allow(dead_code, unreachable_pub, unused_macros, unused_imports)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use e2b_commands::{Commands, EnvdConnection, EnvdEndpoint, Transport};
use e2b_test_support::TestEnvd;

/// How a test's client reaches the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// gRPC over h2c on loopback (our daemon's own transport).
    H2c,
    /// gRPC-Web over HTTP/1.1 on loopback (what a real envd serves).
    GrpcWeb,
    /// The daemon's in-process service, no socket (what `e2b::Sandbox::local_unisolated()` uses).
    InProcess,
}

impl Via {
    /// The wire transport of the endpoint (in-process calls carry gRPC).
    pub fn transport(self) -> Transport {
        match self {
            Via::H2c | Via::InProcess => Transport::Grpc,
            Via::GrpcWeb => Transport::GrpcWeb,
        }
    }
}

/// A daemon plus a client.
pub struct Env {
    pub envd: TestEnvd,
    pub commands: Commands,
}

/// A daemon plus a client over h2c.
pub async fn env() -> Env {
    env_via(Via::H2c).await
}

/// A daemon plus a client reaching it `via`.
pub async fn env_via(via: Via) -> Env {
    let envd = e2b_test_support::spawn_envd().await;
    let commands = commands_via(&envd, via);
    Env { envd, commands }
}

pub fn endpoint(envd: &TestEnvd, transport: Transport) -> EnvdEndpoint {
    let mut ep = EnvdEndpoint::new(envd.url()).transport(transport);
    if let Some(t) = envd.access_token() {
        ep = ep.access_token(t);
    }
    ep
}

/// `Commands` reaching `envd` `via`.
pub fn commands_via(envd: &TestEnvd, via: Via) -> Commands {
    let ep = endpoint(envd, via.transport());
    let conn = match via {
        Via::InProcess => {
            let handle = envd
                .handle()
                .expect("the in-process case needs the embedded daemon's handle");
            EnvdConnection::with_service(ep, handle.local_service())
        }
        Via::H2c | Via::GrpcWeb => EnvdConnection::new(ep),
    };
    Commands::new(conn.expect("connection"))
}

/// The [`Via`] named by a case name.
macro_rules! via {
    (h2c) => {
        $crate::common::Via::H2c
    };
    (grpc_web) => {
        $crate::common::Via::GrpcWeb
    };
    (in_process) => {
        $crate::common::Via::InProcess
    };
}
pub(crate) use via;

/// `transport_cases!(name: h2c, grpc_web, in_process)` after `async fn name(via: Via)`: a module
/// `name` with one `#[tokio::test]` per listed transport, so each shows (and fails) on its own.
macro_rules! transport_cases {
    ($name:ident: $($case:ident),+ $(,)?) => {
        mod $name {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$name($crate::common::via!($case)).await
                }
            )+
        }
    };
}
pub(crate) use transport_cases;
