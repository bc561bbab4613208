//! Runs a command in a fresh sandbox and exits with its exit code:
//! `cargo run -p e2b-isolation --example isolate -- [--network none|internet|host]
//! [--template base|DIR|TARBALL|OCI-DIR] CMD [ARGS…]`.

use std::process::ExitCode;

fn main() -> ExitCode {
    e2b_isolation::run_if_child();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut network = e2b_isolation::Network::None;
    let mut template = e2b_isolation::Template::Base;
    while args.len() > 1 && args[0].starts_with("--") {
        let parsed = match args[0].as_str() {
            "--network" => args[1].parse().map(|n| network = n),
            "--template" => args[1].parse().map(|t| template = t),
            _ => break,
        };
        if let Err(e) = parsed {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
        args.drain(..2);
    }
    if args.is_empty() {
        eprintln!(
            "usage: isolate [--network none|internet|host] [--template base|DIR|TARBALL|OCI-DIR] \
             CMD [ARGS…]"
        );
        return ExitCode::FAILURE;
    }
    let Some(program) = which(&args[0]) else {
        eprintln!("{}: not found", args[0]);
        return ExitCode::FAILURE;
    };
    let spec = e2b_isolation::SandboxSpec::new("isolate-example")
        .network(network)
        .template(template);
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
