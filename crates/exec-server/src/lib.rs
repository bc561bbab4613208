#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

mod backend;
mod catalog;
mod compat;
mod config;
mod envd;
mod error;
mod exec;
mod files;
mod http;
mod mounts;
mod output;
mod procs;
mod server;
mod session_json;
mod shape;
mod transport;

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::ServiceExt as _;
use tokio_util::sync::CancellationToken;

pub use catalog::{
    CATALOG_JSON, CATALOG_MD, catalog_json, catalog_markdown, check_catalog, write_catalog,
};
pub use config::{ExecServerArgs, LocalSandboxArgs};
pub use error::ExecServerError;

use crate::backend::SandboxBackend;
use crate::server::{ExecServer, ServerSettings};

/// A configured server bound to one sandbox, ready to serve over stdio or HTTP.
#[derive(Clone)]
pub struct ExecServerHandle {
    server: ExecServer,
    args: ExecServerArgs,
}

impl std::fmt::Debug for ExecServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecServerHandle")
            .field("sandbox_id", &self.sandbox_id())
            .finish_non_exhaustive()
    }
}

impl ExecServerHandle {
    /// Opens the sandbox named by `args` (`--sandbox URL`, else the local one as
    /// [`ExecServerArgs::local`] says: isolated by default) and prepares the server.
    pub async fn open(args: ExecServerArgs) -> Result<Self, ExecServerError> {
        args.validate()?;
        let backend = open_backend(&args).await?;
        Ok(Self::with_backend(args, backend))
    }

    /// Prepares the server on a sandbox you opened yourself (`e2b::Sandbox::local()`,
    /// `Sandbox::connect(..)`, ...). `args.sandbox` / `args.access_token` are ignored.
    pub fn with_sandbox(
        args: ExecServerArgs,
        sandbox: e2b::Sandbox,
    ) -> Result<Self, ExecServerError> {
        args.validate()?;
        Ok(Self::with_backend(
            args,
            Arc::new(envd::EnvdBackend::new(sandbox)),
        ))
    }

    fn with_backend(args: ExecServerArgs, backend: Arc<dyn SandboxBackend>) -> Self {
        let sandbox_id = args
            .sandbox_id
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| backend.sandbox_id());
        let settings = ServerSettings {
            sandbox_id,
            limits: args.limits(),
            legacy_text: args.legacy_text,
            max_chunk_bytes: args.max_chunk_bytes,
            default_cwd: args.cwd.clone(),
            shell: args.shell.clone(),
            login_shell: args.login_shell,
            file_timeout: args.file_timeout(),
            process_output_bytes: args.process_output_bytes,
            max_processes: args.max_processes,
            allow_mount: args.allow_mount,
            upload_idle: args.upload_idle(),
            max_mounts: args.max_mounts,
        };
        Self {
            server: ExecServer::new(backend, settings),
            args,
        }
    }

    /// The sandbox id the server reports.
    pub fn sandbox_id(&self) -> &str {
        self.server.sandbox_id()
    }

    /// Serves one MCP session over this process's stdin/stdout until the client closes it.
    pub async fn serve_stdio(&self) -> Result<(), ExecServerError> {
        let (stdin, stdout) = rmcp::transport::stdio();
        let max = self.args.max_body_bytes;
        // rmcp counts the newline; the filter does not.
        let stdin = transport::LineLimit::new(stdin, max.saturating_sub(1));
        let t = rmcp::transport::async_rw::AsyncRwTransport::new_server(stdin, stdout)
            .with_max_line_length(max);
        let t = transport::InjectServerInfo::new(t, self.sandbox_id().to_owned());
        let running = self
            .server
            .clone()
            .serve(t)
            .await
            .map_err(|e| ExecServerError::Mcp(e.to_string()))?;
        let end = running
            .waiting()
            .await
            .map_err(|e| ExecServerError::Mcp(e.to_string()));
        self.server.shutdown().await;
        end.map(|_| ())
    }

    /// Serves Streamable HTTP at `/mcp` (and `GET /health`) on `addr` until `shutdown` is
    /// cancelled. `on_bound` receives the bound address (useful with port 0). Also serves
    /// `/mcp/legacy` (exec results in the Node server's text format, for a Phase-1 adapter) and
    /// `/mcp/json` (stateless, plain JSON answers).
    ///
    /// # Errors
    ///
    /// [`ExecServerError::Config`] for a non-loopback `addr` without an API key (unless
    /// `--insecure-no-auth`), [`ExecServerError::Bind`] when `addr` cannot be bound.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops serving; use `shutdown` for a graceful stop.
    pub async fn serve_http(
        &self,
        addr: SocketAddr,
        shutdown: CancellationToken,
        on_bound: impl FnOnce(SocketAddr) + Send,
    ) -> Result<(), ExecServerError> {
        self.args.check_exposure(addr)?;
        let keyed = self.args.api_key.as_deref().is_some_and(|k| !k.is_empty());
        if !keyed && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "SERVING WITHOUT AUTHENTICATION on a non-loopback address (--insecure-no-auth): anyone who can reach it runs commands in the sandbox");
            eprintln!(
                "e2b-exec-server: WARNING: serving {addr} WITHOUT AUTHENTICATION (--insecure-no-auth); anyone who can reach this port runs commands in the sandbox"
            );
        }
        let opts = http::HttpOptions {
            api_key: self.args.api_key.clone().filter(|k| !k.is_empty()),
            allowed_hosts: self.args.resolved_allowed_hosts(addr),
            max_body_bytes: self.args.max_body_bytes,
            json_response: self.args.json_response,
            session_json: self.args.session_json,
            session_json_limits: self.args.session_json_limits(),
            allowed_origins: self.args.allowed_origins.clone(),
        };
        let r = http::serve(self.server.clone(), addr, opts, shutdown, on_bound).await;
        self.server.shutdown().await;
        r
    }
}

/// The built-in tool definitions (name, description, input and output schemas, annotations),
/// sorted by name, generated from the tools' Rust types: no server or sandbox is needed. A
/// catalog of the tools can be generated from this. `mount` and `unmount` are among them but
/// are listed by a server only when it runs with `--allow-mount`; mounted tools are not.
pub fn tool_definitions() -> Vec<rmcp::model::Tool> {
    ExecServer::tool_router().list_all()
}

/// Runs the server as `args` say: HTTP when `--http` is given, else stdio. Returns when the
/// stdio client disconnects, or on Ctrl-C / SIGTERM for HTTP.
pub async fn run(args: ExecServerArgs) -> Result<(), ExecServerError> {
    let addr = checked_addr(&args)?;
    let handle = ExecServerHandle::open(args).await?;
    serve_until_done(handle, addr).await
}

/// [`run`] on a sandbox that `open` opens once the flags are checked (`e2b exec-server
/// --sandbox-id` passes one connected through E2B's API); `args.sandbox` is ignored.
///
/// # Errors
///
/// As [`run`], and what `open` returns.
///
/// # Cancel safety
///
/// Dropping the future stops serving.
pub async fn run_with_sandbox<F, Fut>(args: ExecServerArgs, open: F) -> Result<(), ExecServerError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<e2b::Sandbox, ExecServerError>>,
{
    let addr = checked_addr(&args)?;
    let handle = ExecServerHandle::with_sandbox(args, open().await?)?;
    serve_until_done(handle, addr).await
}

fn checked_addr(args: &ExecServerArgs) -> Result<Option<SocketAddr>, ExecServerError> {
    let addr = args.http_addr()?;
    if let Some(a) = addr {
        // Before the sandbox is opened: a refused exposure costs nothing.
        args.check_exposure(a)?;
    }
    Ok(addr)
}

async fn serve_until_done(
    handle: ExecServerHandle,
    addr: Option<SocketAddr>,
) -> Result<(), ExecServerError> {
    match addr {
        None => handle.serve_stdio().await,
        Some(addr) => {
            let ct = CancellationToken::new();
            let stop = ct.clone();
            tokio::spawn(async move {
                shutdown_signal().await;
                stop.cancel();
            });
            let id = handle.sandbox_id().to_owned();
            handle
                .serve_http(addr, ct, move |a| {
                    tracing::info!(addr = %a, sandbox_id = %id, "exec-server listening on http://{a}/mcp");
                    eprintln!("e2b-exec-server listening on http://{a}/mcp (sandbox {id})");
                })
                .await
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

async fn open_backend(args: &ExecServerArgs) -> Result<Arc<dyn SandboxBackend>, ExecServerError> {
    let backend = match &args.sandbox {
        Some(url) => envd::EnvdBackend::remote(url, args.access_token.as_deref()).await,
        None => envd::EnvdBackend::local(args.local.options()?).await,
    }
    .map_err(|e| ExecServerError::Sandbox(e.message))?;
    Ok(Arc::new(backend))
}

#[cfg(test)]
mod tests;
