//! `e2b envd` runs the real daemon and shuts down cleanly on SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};

#[tokio::test]
async fn e2b_envd_serves_health_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_e2b"))
        .args(["envd", "--port", "0", "--bind", "127.0.0.1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim();
    assert!(
        url.starts_with("http://127.0.0.1:"),
        "first line is the URL: {url:?}"
    );

    let resp = reqwest::get(format!("{url}/health")).await.unwrap();
    assert_eq!(resp.status(), 204);

    // SIGTERM: graceful shutdown, exit 0.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "e2b envd exits 0 on SIGTERM: {exit:?}");
}
