//! `e2b-serve-envd`: a sandbox's envd as `e2b serve` runs it. Installed beside `e2b`, it is
//! what each sandbox runs (a small binary with only envd in it, so an idle sandbox costs less
//! memory than the whole `e2b` binary would); not meant to be run by hand.

fn main() -> std::process::ExitCode {
    // Builds the sandbox when this is the re-execution for `--isolate` (before any thread).
    e2b_envd::isolated::enter_if_child();
    e2b_cli::sandbox_envd_main(e2b_cli::SANDBOX_ENVD_BIN, std::env::args_os().skip(1))
}
