//! A minimal stand-alone ACP bridge against an envd URL (a development and test helper; the
//! user-facing command is `e2b acp`):
//!
//! ```text
//! e2b-acp-bridge --envd http://127.0.0.1:49983 [--token TOKEN] -- AGENT_CMD [ARGS...]
//! ```
//!
//! It serves ACP on its own stdin/stdout; the agent runs in the sandbox behind the
//! initialize rewrite and the fs/terminal interception. The exit code is the agent's.

use e2b_acp::{AcpOptions, CommandLine, Commands, run_bridge_in_sandbox};
use e2b_commands::{EnvdConnection, EnvdEndpoint};

fn usage() -> ! {
    eprintln!("usage: e2b-acp-bridge --envd URL [--token TOKEN] -- AGENT_CMD [ARGS...]");
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut url = std::env::var("E2B_ENVD_URL").ok();
    let mut token = std::env::var("E2B_ACCESS_TOKEN").ok();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--envd" => {
                i += 1;
                url = args.get(i).cloned();
            }
            "--token" => {
                i += 1;
                token = args.get(i).cloned();
            }
            "--" => {
                i += 1;
                break;
            }
            _ => usage(),
        }
        i += 1;
    }
    let (Some(url), Some(program)) = (url, args.get(i)) else {
        usage()
    };
    let mut ep = EnvdEndpoint::new(url);
    if let Some(t) = token {
        ep = ep.access_token(t);
    }
    let commands = match EnvdConnection::new(ep) {
        Ok(c) => Commands::new(c),
        Err(e) => {
            eprintln!("e2b-acp-bridge: {e}");
            std::process::exit(1)
        }
    };
    let command = CommandLine::exec(program.clone(), args[i + 1..].iter().cloned());
    let r = run_bridge_in_sandbox(
        &commands,
        command,
        tokio::io::stdin(),
        tokio::io::stdout(),
        AcpOptions::new().on_stderr(|b| {
            use std::io::Write;
            std::io::stderr().write_all(b).map_err(Into::into)
        }),
    )
    .await;
    match r {
        Ok(exit) => std::process::exit(exit.code.unwrap_or(0)),
        Err(e) => {
            eprintln!("e2b-acp-bridge: {e}");
            std::process::exit(1)
        }
    }
}
