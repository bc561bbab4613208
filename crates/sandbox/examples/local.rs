//! A local sandbox: an isolated envd, its commands and files, then kill.
//!
//! ```sh
//! cargo run -p e2b --example local
//! ```
//!
//! No account and no network: `Sandbox::local()` starts `e2b-envd --isolate` (build it with
//! `cargo build -p e2b-envd`; Linux, root) on a free loopback port with a random access token:
//! its own namespaces, root filesystem and limits. `Sandbox::local_unisolated()` embeds the
//! daemon in this process instead (no binary, no privileges; commands run on this machine).

use e2b::{CommandOptions, OutputCallback, Sandbox};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let sandbox = Sandbox::local().await?;
    println!(
        "sandbox {} at {} (envd {})",
        sandbox.id(),
        sandbox.url(),
        sandbox.envd_version()
    );

    // A command, its output printed as it arrives and kept in the result.
    let out = sandbox
        .commands()
        .run(
            "echo hello from $(hostname) in $(pwd) as $(whoami)",
            CommandOptions::new().on_stdout(OutputCallback::text(|s: &str| print!("  | {s}"))),
        )
        .await?;
    println!("exit code {}", out.exit_code);

    // Files. Relative paths resolve against the user's home (`/home/user`, as on E2B), which
    // is the sandbox's own: nothing here touches this machine's files.
    sandbox
        .files()
        .write("notes/hello.txt", "hi from the host\n")
        .await?;
    let cat = sandbox
        .commands()
        .run("cat ~/notes/hello.txt", CommandOptions::new().check(true))
        .await?;
    print!("the sandbox reads: {}", cat.stdout);
    let listed = sandbox.files().list("notes", 1).await?;
    println!(
        "notes/ holds {:?}",
        listed.iter().map(|e| &e.name).collect::<Vec<_>>()
    );

    // Kill: every process in the sandbox is killed, its daemon stopped and its root removed.
    sandbox.kill().await?;
    Ok(())
}
