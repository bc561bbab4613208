//! Shared helpers: a real `e2b serve` (library, ephemeral ports, the real `e2b-serve` binary as
//! each sandbox's envd) and clients for its API and, through the edge, for its sandboxes.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use e2b_commands::{Commands, EnvdConnection, EnvdEndpoint, Transport};
use e2b_serve::{EnvdCommand, PlainRuntime, SandboxLimits, Serve, ServeConfig, ServeHandle};
use serde_json::{Value, json};

pub const KEY: &str = "e2b_0123456789abcdef";
pub const BIN: &str = env!("CARGO_BIN_EXE_e2b-serve");

pub fn envd_command() -> EnvdCommand {
    EnvdCommand::envd(BIN, vec!["envd".into()])
}

pub struct Env {
    pub serve: ServeHandle,
    pub http: reqwest::Client,
}

pub async fn start() -> Env {
    start_with(|c| c).await
}

pub async fn start_with(f: impl FnOnce(ServeConfig) -> ServeConfig) -> Env {
    start_runtime(
        f(ServeConfig::ephemeral(KEY)),
        PlainRuntime::new(envd_command()),
    )
    .await
}

/// `e2b serve` with isolated sandboxes; fails naming what the machine lacks.
pub async fn start_isolated() -> Env {
    start_isolated_with(SandboxLimits::default(), |c| c).await
}

/// `e2b serve` with isolated sandboxes of size `limits`.
pub async fn start_isolated_with(
    limits: SandboxLimits,
    f: impl FnOnce(ServeConfig) -> ServeConfig,
) -> Env {
    if let Err(e) = e2b_serve::isolation_available() {
        panic!(
            "missing: sandbox isolation on this machine ({e}); this test needs root and user namespaces"
        );
    }
    start_runtime(
        f(ServeConfig::ephemeral(KEY)),
        PlainRuntime::isolated_with(envd_command(), limits),
    )
    .await
}

async fn start_runtime(config: ServeConfig, runtime: PlainRuntime) -> Env {
    // As root, a plain sandbox runs its commands as the machine's `user` account (E2B's base
    // template has one): make sure it exists, as the E2B SDK suites do.
    if nix::unistd::Uid::effective().is_root() {
        e2b_test_support::ensure_user_account("user");
    }
    let serve = Serve::start(config, Arc::new(runtime))
        .await
        .expect("e2b serve starts");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    Env { serve, http }
}

impl Env {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.serve.api_url())
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut req = self
            .http
            .request(method, self.url(path))
            .header("X-API-KEY", KEY);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("API answers");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
        };
        (status, headers, value)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let (s, _, v) = self.call(reqwest::Method::GET, path, None).await;
        (s, v)
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let (s, _, v) = self.call(reqwest::Method::POST, path, Some(body)).await;
        (s, v)
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let (s, _, v) = self.call(reqwest::Method::DELETE, path, None).await;
        (s, v)
    }

    /// Creates a `base` sandbox; returns the `Sandbox` body.
    pub async fn create(&self, extra: Value) -> Value {
        let mut body = json!({"templateID": "base", "timeout": 300, "secure": true});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        let (status, v) = self.post("/sandboxes", body).await;
        assert_eq!(status, 201, "create: {v}");
        v
    }

    /// `Commands` for a sandbox, through the edge port.
    pub fn commands(&self, sandbox: &Value, transport: Transport) -> Commands {
        commands_at(&self.serve.edge_url(), sandbox, transport)
    }

    /// `GET path` through the edge with `Host: host` (a user port), retried for up to 10 s
    /// until the server in the sandbox answers 200; its body (empty if it never did).
    pub async fn fetch_port_page(&self, host: &str, path: &str) -> String {
        let url = format!("{}{path}", self.serve.edge_url());
        for _ in 0..100 {
            let resp = self
                .http
                .get(&url)
                .header("Host", host)
                .send()
                .await
                .unwrap();
            if resp.status() == 200 {
                return resp.text().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        String::new()
    }

    /// `GET /health` of a sandbox's envd through the edge.
    pub async fn health(&self, id: &str) -> u16 {
        self.http
            .get(format!("{}/health", self.serve.edge_url()))
            .header("E2b-Sandbox-Id", id)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }
}

/// `Commands` for a sandbox (a create answer) through the edge at `edge`.
pub fn commands_at(edge: &str, sandbox: &Value, transport: Transport) -> Commands {
    let mut ep = EnvdEndpoint::new(edge.to_string())
        .transport(transport)
        .sandbox_id(sandbox["sandboxID"].as_str().unwrap());
    if let Some(t) = sandbox["envdAccessToken"].as_str() {
        ep = ep.access_token(t);
    }
    Commands::new(EnvdConnection::new(ep).unwrap())
}

/// Starts a plain process and a detached (setsid, reparented) one, both named by `marker`,
/// and waits until both run.
pub async fn spawn_marked(cmds: &Commands, marker: &str) {
    cmds.run(
        format!("(setsid bash -c 'exec -a {marker}a sleep 3600' >/dev/null 2>&1 &) ; true"),
        e2b_commands::CommandOptions::new(),
    )
    .await
    .unwrap();
    cmds.start(
        format!("exec -a {marker}b sleep 3600"),
        e2b_commands::CommandOptions::new().no_timeout(),
    )
    .await
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || pids_with(marker).len() >= 2).await,
        "marked processes did not start: {:?}",
        pids_with(marker)
    );
}

pub fn id(sandbox: &Value) -> String {
    sandbox["sandboxID"].as_str().unwrap().to_string()
}

/// Pids of live (not zombie) processes whose command line contains `marker`.
pub fn pids_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if cmdline.contains(marker) && !zombie && pid as u32 != std::process::id() {
            out.push(pid);
        }
    }
    out
}

/// Waits up to `limit` for `cond`.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + limit;
    while std::time::Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

/// The state (`R`, `S`, `T`, ...) of a process.
pub fn proc_state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit(')').next()?.trim_start().chars().next()
}
