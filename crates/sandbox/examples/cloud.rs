//! A sandbox in E2B's cloud: create it from a template, run a command, write a file, kill it.
//!
//! ```sh
//! E2B_API_KEY=e2b_... cargo run -p e2b --example cloud            # the `base` template
//! E2B_API_KEY=e2b_... cargo run -p e2b --example cloud -- my-tpl  # another template
//! ```
//!
//! The same variables as E2B's SDKs: `E2B_API_KEY` (required), `E2B_DOMAIN` or `E2B_API_URL`
//! for a self-hosted E2B or `e2b serve` on this machine. Without a key it says what to do and
//! exits with status 2.

use std::time::Duration;

use e2b::{CommandOptions, Sandbox};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if std::env::var("E2B_API_KEY").map_or(true, |k| k.trim().is_empty()) {
        eprintln!(
            "E2B_API_KEY is not set: get an API key at https://e2b.dev/dashboard and run \
             `E2B_API_KEY=e2b_... cargo run -p e2b --example cloud`, or start `e2b serve` \
             here and export the E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY it prints"
        );
        std::process::exit(2);
    }
    let template = std::env::args().nth(1).unwrap_or_else(|| "base".to_owned());

    let sandbox = Sandbox::builder(template.as_str())
        .timeout(Duration::from_secs(120))
        .metadata("example", "e2b-rs cloud")
        .create()
        .await?;
    println!(
        "created sandbox {} (envd {})",
        sandbox.id(),
        sandbox.envd_version()
    );

    let result = async {
        let out = sandbox
            .commands()
            .run(
                "echo hello from $(hostname); uname -sr",
                CommandOptions::new(),
            )
            .await?;
        print!("{}", out.stdout);
        sandbox.files().write("/tmp/hello.txt", "hi").await?;
        let back = sandbox.files().read_text("/tmp/hello.txt").await?;
        println!("read back {back:?}");
        Ok::<_, e2b::SandboxError>(())
    }
    .await;

    // Kill it whatever happened above; it would otherwise live until its timeout.
    sandbox.kill().await?;
    println!("killed");
    Ok(result?)
}
