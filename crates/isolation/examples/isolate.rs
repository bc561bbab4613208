//! Runs a command in a fresh sandbox and prints its exit code:
//! `cargo run -p e2b-isolation --example isolate -- [--network none|internet|host] CMD [ARGS…]`.

use std::process::ExitCode;

fn main() -> ExitCode {
    e2b_isolation::run_if_child();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut network = e2b_isolation::Network::None;
    if args.first().map(String::as_str) == Some("--network") && args.len() > 1 {
        match args[1].parse() {
            Ok(n) => network = n,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
        args.drain(..2);
    }
    if args.is_empty() {
        eprintln!("usage: isolate [--network none|internet|host] CMD [ARGS…]");
        return ExitCode::FAILURE;
    }
    let Some(program) = which(&args[0]) else {
        eprintln!("{}: not found", args[0]);
        return ExitCode::FAILURE;
    };
    let spec = e2b_isolation::SandboxSpec::new("isolate-example").with_network(network);
    match e2b_isolation::IsolatedSandbox::spawn(&spec, &program, &args, &[]) {
        Ok(mut sandbox) => match sandbox.wait() {
            Ok(status) => {
                let code = e2b_isolation::IsolatedSandbox::exit_code(status);
                ExitCode::from(u8::try_from(code).unwrap_or(1))
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    if name.contains('/') {
        return Some(name.into());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
