//! `e2b run` against the embedded local sandbox: live output, exit codes, env, cwd, timeout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn e2b(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_e2b"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn run_streams_output_and_exits_with_the_command_code() {
    let out = e2b(&["run", "--", "echo out; echo err >&2; exit 42"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    assert_eq!(out.status.code(), Some(42));
}

#[test]
fn run_exec_form_passes_arguments_verbatim() {
    let out = e2b(&["run", "--", "printf", "%s|", "a b", "$HOME"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|$HOME|");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn run_env_and_cwd() {
    let out = e2b(&[
        "run",
        "--env",
        "GREETING=hi there",
        "--cwd",
        "/tmp",
        "--",
        "echo \"$GREETING\"; pwd",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi there\n/tmp\n");
    assert!(out.status.success());
}

#[test]
fn run_signal_is_128_plus_n() {
    let out = e2b(&["run", "--", "kill -TERM $$"]);
    assert_eq!(
        out.status.code(),
        Some(128 + 15),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn run_timeout_kills_and_exits_124() {
    let started = std::time::Instant::now();
    let out = e2b(&["run", "--timeout", "1", "--", "sleep 30"]);
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed().as_secs() < 20,
        "the timeout bounds the run"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("timeout"));
}

#[test]
fn run_bad_cwd_is_a_clear_error() {
    let out = e2b(&["run", "--cwd", "/definitely/not/here", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/definitely/not/here"), "{err}");
}
