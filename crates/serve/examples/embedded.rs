//! Embedding `e2b serve`: start E2B's sandbox API inside your program on free loopback ports,
//! create a sandbox with the typed `e2b-api` client, run a command in it through the edge port
//! with `e2b-commands`, kill it, shut down.
//!
//! ```text
//! cargo run -p e2b-serve --example embedded
//! ```
//!
//! Each sandbox's envd is this same program, started as `<exe> envd …`
//! ([`EnvdCommand::current_exe`]), so `main` answers that mode before anything else, as the
//! `e2b-serve` binary does. Sandboxes run plain (no isolation): nothing here needs root.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser as _;
use e2b_api::models::NewSandbox;
use e2b_api::{ApiClient, ConnectionConfig, ListQuery};
use e2b_commands::{CommandOptions, Commands, EnvdConnection, EnvdEndpoint};
use e2b_serve::{EnvdCommand, PlainRuntime, Serve, ServeArgs, ServeConfig};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The key clients must send (`X-API-Key`); E2B's format, `e2b_` and 40 hex digits.
const API_KEY: &str = "e2b_0000000000000000000000000000000000000000";

/// The sandboxes' mode of this program (`envd`), parsed as `e2b-serve` does.
#[derive(Debug, clap::Parser)]
struct SandboxModes {
    #[command(flatten)]
    args: ServeArgs,
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1))
}

fn main() -> ExitCode {
    let mode = std::env::args_os().nth(1);
    if mode.as_deref().is_some_and(|m| m == "envd") {
        return sandbox_mode();
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("embedded: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(demo()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("embedded: {e}");
            ExitCode::FAILURE
        }
    }
}

/// This program run by a sandbox: its envd, on one thread.
fn sandbox_mode() -> ExitCode {
    let modes = SandboxModes::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("embedded envd: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(e2b_serve::run_cli(modes.args, &[])) {
        Ok(code) => exit(code),
        Err(e) => {
            eprintln!("embedded envd: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn demo() -> Result<(), BoxError> {
    let runtime = PlainRuntime::new(EnvdCommand::current_exe(&[])?);
    let serve = Serve::start(ServeConfig::ephemeral(API_KEY), Arc::new(runtime)).await?;
    println!(
        "e2b serve embedded: E2B_API_URL={} E2B_SANDBOX_URL={}",
        serve.api_url(),
        serve.edge_url()
    );

    // The API port, with the client any program would use against E2B's cloud.
    let api = ApiClient::new(
        ConnectionConfig::default()
            .api_key(API_KEY)
            .api_url(serve.api_url())
            .sandbox_url(serve.edge_url()),
    )?;
    let mut request = NewSandbox::new("base");
    request.secure = Some(true);
    let sandbox = api.create_sandbox(&request).await?;
    println!("created sandbox {}", sandbox.sandbox_id);

    // The edge port: one address for every sandbox's envd, routed by the sandbox id.
    let mut endpoint = EnvdEndpoint::new(serve.edge_url()).sandbox_id(&sandbox.sandbox_id);
    if let Some(token) = &sandbox.envd_access_token {
        endpoint = endpoint.access_token(token);
    }
    let commands = Commands::new(EnvdConnection::new(endpoint)?);
    let out = commands
        .run("echo hello from $(whoami) in $PWD", CommandOptions::new())
        .await?;
    print!("{}", out.stdout);

    let listed = api.list_sandboxes(&ListQuery::new()).await?;
    println!("{} sandbox(es) running", listed.sandboxes.len());
    api.kill_sandbox(&sandbox.sandbox_id).await?;
    println!("killed {}", sandbox.sandbox_id);

    // Kills every sandbox still running and stops both ports.
    serve.shutdown().await;
    Ok(())
}
