//! Call envd's RPCs directly, with the generated clients and envd's headers.
//!
//! ```sh
//! cargo run -p e2b-envd-client --example raw_rpc       # against an embedded local envd
//! E2B_SANDBOX_URL=https://49983-<id>.e2b.app E2B_ACCESS_TOKEN=... \
//!     cargo run -p e2b-envd-client --example raw_rpc   # against any envd (gRPC-Web for https)
//! ```
//!
//! `Filesystem/Stat` of `/tmp`, `Process/List`, and a `Stat` of a missing path to show the typed
//! error envd's `not_found` becomes.

use e2b_envd_client::{CallOptions, EnvdConnection, EnvdEndpoint, EnvdError};
use e2b_envd_proto::filesystem::StatRequest;
use e2b_envd_proto::process::ListRequest;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // The envd named by E2B_SANDBOX_URL, else a daemon embedded in this process.
    let (endpoint, _daemon) = match std::env::var("E2B_SANDBOX_URL") {
        Ok(url) => {
            let mut endpoint = EnvdEndpoint::new(url);
            if let Ok(token) = std::env::var("E2B_ACCESS_TOKEN") {
                endpoint = endpoint.access_token(token);
            }
            (endpoint, None)
        }
        Err(_) => {
            let mut config = e2b_envd::EnvdConfig::ephemeral();
            config.access_token = Some("example-token".into());
            let daemon = e2b_envd::Envd::start(config).await?;
            let endpoint = EnvdEndpoint::new(daemon.url()).access_token("example-token");
            (endpoint, Some(daemon))
        }
    };
    let conn = EnvdConnection::new(endpoint)?;
    println!("envd at {} over {:?}", conn.url(), conn.transport());
    let call = CallOptions::default();

    let stat = conn
        .filesystem()
        .stat(conn.request(
            StatRequest {
                path: "/tmp".into(),
            },
            &call,
        )?)
        .await?
        .into_inner();
    if let Some(entry) = stat.entry {
        println!(
            "Stat /tmp: {} {} owned by {}",
            entry.permissions, entry.path, entry.owner
        );
    }

    let list = conn
        .process()
        .list(conn.request(ListRequest {}, &call.clone().without_user())?)
        .await?
        .into_inner();
    println!("List: {} processes running", list.processes.len());

    // envd's status codes become typed errors, classified in one place (EnvdError::from).
    let missing = conn
        .filesystem()
        .stat(conn.request(
            StatRequest {
                path: "/no/such/path".into(),
            },
            &call,
        )?)
        .await
        .map_err(EnvdError::from);
    match missing {
        Err(EnvdError::NotFound { message }) => {
            println!("Stat of a missing path: not found ({message})")
        }
        other => return Err(format!("expected NotFound, got {other:?}").into()),
    }
    Ok(())
}
