//! Helpers: start the real `e2b-exec-server` binary (embedded local envd) and connect rmcp's client.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_e2b-exec-server");

pub type Client = RunningService<RoleClient, ()>;

pub async fn stdio_client(args: &[&str], envs: &[(&str, &str)]) -> Client {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("--stdio")
        .args(args)
        .env_remove("SANDBOX_ID")
        .env_remove("API_KEY");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let (t, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn e2b-exec-server");
    ().serve(t).await.expect("MCP handshake over stdio")
}

/// The binary serving HTTP on a free loopback port; killed on drop.
pub struct HttpServer {
    pub child: tokio::process::Child,
    pub base: String,
}

impl HttpServer {
    pub async fn start(args: &[&str], envs: &[(&str, &str)]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.arg("--http")
            .arg(format!("127.0.0.1:{port}"))
            .args(args)
            .env_remove("SANDBOX_ID")
            .env_remove("API_KEY")
            .kill_on_drop(true)
            .stdout(Stdio::null());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn e2b-exec-server --http");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        for _ in 0..600 {
            if let Ok(r) = http.get(format!("{base}/health")).send().await
                && r.status().is_success()
            {
                return Self { child, base };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("e2b-exec-server did not answer GET /health within 30 s");
    }

    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    pub async fn health(&self) -> Value {
        reqwest::get(format!("{}/health", self.base))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn client(&self) -> Client {
        let t = rmcp::transport::StreamableHttpClientTransport::from_uri(self.url());
        ().serve(t).await.expect("MCP handshake over HTTP")
    }
}

pub fn obj(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

pub async fn call(c: &Client, tool: &str, args: Value) -> CallToolResult {
    c.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(obj(args)))
        .await
        .expect("call_tool")
}

pub fn text(r: &CallToolResult) -> String {
    r.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .expect("text block")
}

pub fn meta(r: &CallToolResult, k: &str) -> Value {
    r.meta
        .as_ref()
        .and_then(|m| m.0.get(k).cloned())
        .unwrap_or(Value::Null)
}
