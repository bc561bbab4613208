//! `GET /health` says when a sandbox's limits are weaker than asked: the `e2b-envd` binary
//! started with `E2B_SANDBOX_LIMITS_NOTE` (which the isolation supervisor sets for the daemon
//! inside) answers 200 with `{"limits": "<note>"}` and logs the note once at start; without it,
//! 204 No Content as E2B's envd (the SDKs check only for a success status).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead as _, Read as _};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const NOTE: &str = "no cgroup could be created: rlimits per process (memory, processes) instead";

/// The daemon binary on a free loopback port; killed however the test ends.
struct Daemon {
    child: Child,
    url: String,
}

impl Daemon {
    fn start(note: Option<&str>) -> Daemon {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_e2b-envd"));
        cmd.args(["--port", "0"])
            .env_remove("E2B_SANDBOX_LIMITS_NOTE")
            .env_remove("E2B_ENVD_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(note) = note {
            cmd.env("E2B_SANDBOX_LIMITS_NOTE", note);
        }
        let mut child = cmd.spawn().expect("start the e2b-envd binary");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line.trim().to_string();
        assert!(
            url.starts_with("http://"),
            "e2b-envd printed no URL: {line:?}"
        );
        Daemon { child, url }
    }

    /// Stops the daemon (SIGTERM, so it shuts down as in use) and returns its stderr.
    fn stop(mut self) -> String {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        err
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn get_health(url: &str) -> reqwest::Response {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    http.get(format!("{url}/health")).send().await.unwrap()
}

#[tokio::test]
async fn health_shows_the_limits_note_and_logs_it_once() {
    let daemon = Daemon::start(Some(NOTE));
    for _ in 0..2 {
        let r = get_health(&daemon.url).await;
        assert_eq!(r.status(), reqwest::StatusCode::OK);
        assert!(r.status().is_success(), "the SDKs need a success status");
        assert_eq!(
            r.headers()
                .get(reqwest::header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap()),
            Some("application/json")
        );
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body, serde_json::json!({ "limits": NOTE }));
    }
    let stderr = daemon.stop();
    assert_eq!(
        stderr.matches(NOTE).count(),
        1,
        "the note is logged once at start, not per request: {stderr}"
    );
}

#[tokio::test]
async fn health_is_204_without_a_note() {
    for note in [None, Some("")] {
        let daemon = Daemon::start(note);
        let r = get_health(&daemon.url).await;
        assert_eq!(r.status(), reqwest::StatusCode::NO_CONTENT, "note {note:?}");
        assert_eq!(r.bytes().await.unwrap().len(), 0);
        let stderr = daemon.stop();
        assert!(
            !stderr.contains("limits"),
            "no limits line without a note: {stderr}"
        );
    }
}

/// Embedded: the note comes from the configuration.
#[tokio::test]
async fn embedded_daemon_reports_the_configured_note() {
    let mut config = e2b_envd::EnvdConfig::ephemeral();
    config.limits_note = Some(NOTE.into());
    let handle = e2b_envd::Envd::start(config).await.unwrap();
    let r = get_health(&handle.url()).await;
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["limits"], NOTE);
    handle.shutdown().await;
}
