//! A local sandbox: the embedded envd, its commands and files, then kill.
//!
//! ```sh
//! cargo run -p e2b --example local
//! ```
//!
//! No account and no network: `Sandbox::local()` starts envd inside this process on a free
//! loopback port, with a random access token and a temporary working directory.

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
            "echo hello from $(pwd); uname -sr",
            CommandOptions::new().on_stdout(OutputCallback::text(|s: &str| print!("  | {s}"))),
        )
        .await?;
    println!("exit code {}", out.exit_code);

    // Files. Relative file paths resolve against the user's home, as in E2B; commands run in
    // the sandbox's working directory. Absolute paths in that directory keep this example tidy.
    let workdir = sandbox
        .workdir()
        .ok_or("a local sandbox has a temporary working directory")?
        .display()
        .to_string();
    let notes = format!("{workdir}/notes");
    sandbox
        .files()
        .write(&format!("{notes}/hello.txt"), "hi from the host\n")
        .await?;
    let cat = sandbox
        .commands()
        .run("cat notes/hello.txt", CommandOptions::new().check(true))
        .await?;
    print!("the sandbox reads: {}", cat.stdout);
    let listed = sandbox.files().list(&notes, 1).await?;
    println!(
        "notes/ holds {:?}",
        listed.iter().map(|e| &e.name).collect::<Vec<_>>()
    );

    // Kill: every process it started is killed and reaped, the workdir removed.
    sandbox.kill().await?;
    Ok(())
}
