//! Writes docs/tool-catalog.json and docs/tool-catalog.md from the server's tool definitions,
//! or with `--check` fails when the checked-in files differ.
//!
//! ```text
//! cargo run -p e2b-exec-server --example gen-catalog [-- --check] [--root DIR]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut check = false;
    let mut root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--check" => check = true,
            "--root" => match args.next() {
                Some(r) => root = PathBuf::from(r),
                None => {
                    eprintln!("gen-catalog: --root needs a directory");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!(
                    "gen-catalog: unknown argument {other:?}; usage: gen-catalog [--check] [--root DIR]"
                );
                return ExitCode::from(2);
            }
        }
    }
    if check {
        match e2b_exec_server::check_catalog(&root) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        }
    } else {
        match e2b_exec_server::write_catalog(&root) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!(
                    "gen-catalog: writing the catalog under {} failed: {e}",
                    root.display()
                );
                ExitCode::FAILURE
            }
        }
    }
}
