//! Run commands with their output streamed to callbacks.
//!
//! ```sh
//! cargo run -p e2b-commands --example streaming       # against an embedded local envd
//! E2B_SANDBOX_URL=http://127.0.0.1:49983 E2B_ACCESS_TOKEN=... \
//!     cargo run -p e2b-commands --example streaming   # against any envd
//! ```
//!
//! 1. `run` with text callbacks: each line is printed as it arrives, and the result keeps the
//!    output too; a non-zero exit is data, not an error.
//! 2. `start_streaming` with `retain_output(false)`: 64 MiB pass through a bytes callback and
//!    the handle keeps none of them, so memory stays flat whatever the output size.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use e2b_commands::{CommandOptions, Commands, EnvdConnection, EnvdEndpoint, OutputCallback};

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
    let commands = Commands::new(EnvdConnection::new(endpoint)?);

    // 1. Callbacks see the output as it arrives; the result keeps it as well.
    let out = commands
        .run(
            "for i in 1 2 3; do echo line $i; done; echo a warning >&2; exit 3",
            CommandOptions::new()
                .on_stdout(OutputCallback::text(|s: &str| print!("{s}")))
                .on_stderr(OutputCallback::text(|s: &str| eprint!("{s}"))),
        )
        .await?;
    println!(
        "run: exit code {} (a failed command is data), {} stdout bytes kept",
        out.exit_code,
        out.stdout.len()
    );

    // 2. A long output through a callback, none of it kept by the handle.
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    let handle = commands
        .start_streaming(
            "head -c 67108864 /dev/zero",
            CommandOptions::new()
                .retain_output(false)
                .on_stdout(OutputCallback::bytes(move |chunk: &[u8]| {
                    counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                })),
        )
        .await?;
    let end = handle.wait().await?;
    println!(
        "start_streaming: {} MiB through the callback, {} bytes kept, exit code {}",
        seen.load(Ordering::Relaxed) >> 20,
        handle.retained_len(),
        end.exit_code
    );
    Ok(())
}
