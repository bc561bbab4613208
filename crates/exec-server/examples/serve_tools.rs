//! Serves the MCP exec tools on an isolated local sandbox (`Sandbox::local()`: needs root and
//! `cargo build -p e2b-envd`), over stdio (default) or Streamable
//! HTTP at `http://ADDR/mcp`, with `mount`/`unmount` enabled.
//!
//! ```text
//! cargo run -p e2b-exec-server --example serve_tools              # stdio
//! cargo run -p e2b-exec-server --example serve_tools -- 127.0.0.1:3005
//! ```

use e2b_exec_server::{ExecServerArgs, ExecServerHandle};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sandbox = e2b::Sandbox::local().await?;
    let mut args = ExecServerArgs::default();
    args.allow_mount = true;
    let server = ExecServerHandle::with_sandbox(args, sandbox)?;
    match std::env::args().nth(1) {
        None => server.serve_stdio().await?,
        Some(addr) => {
            let stop = tokio_util::sync::CancellationToken::new();
            let on_ctrl_c = stop.clone();
            tokio::spawn(async move {
                let _ = tokio::signal::ctrl_c().await;
                on_ctrl_c.cancel();
            });
            server
                .serve_http(addr.parse()?, stop, |bound| {
                    eprintln!("serving http://{bound}/mcp (an isolated local sandbox)");
                })
                .await?;
        }
    }
    Ok(())
}
