//! The MCP server: tools defined by rmcp's `#[tool]` macros over `schemars` argument types, so
//! the tool list, input/output schemas and dispatch come from the types below.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{ToolCallContext, schema_for_output};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, DiscoverResult,
    Implementation, InitializeRequestParams, InitializeResult, ListToolsResult, MetaObject,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::backend::{RunSpec, SandboxBackend};
use crate::compat;
use crate::exec::{self, ExecLimits, ExecOutcome, ProgressFn};
use crate::files;

/// The server's name in `serverInfo`.
pub(crate) const SERVER_NAME: &str = "e2b-exec-server";
/// The crate version.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The request `_meta` key that picks the Node server's text format for one call.
pub(crate) const LEGACY_TEXT_META: &str = "e2b/legacy_text";

/// Arguments of `exec_command` / `execute`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecArgs {
    /// The command line, run by the sandbox's shell.
    #[serde(alias = "command")]
    pub(crate) cmd: String,
    /// Timeout in seconds (default 120; 0 = the server's maximum; capped at the maximum). On
    /// timeout the whole process group is killed and exit_code is 124. A background child
    /// (`cmd &`) that keeps the output open is waited for until this timeout: redirect its
    /// output (`cmd >/tmp/log 2>&1 &`) to return at once.
    #[serde(default)]
    pub(crate) timeout: Option<f64>,
    /// Working directory (absolute).
    #[serde(default)]
    pub(crate) cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub(crate) env: Option<HashMap<String, String>>,
    /// Text fed to the command's standard input (default: none).
    #[serde(default)]
    pub(crate) stdin: Option<String>,
    /// Start the command and return at once with _meta.process_id (exit_code 0 means it
    /// started); follow it with read_output, write_stdin, kill_process and list_processes.
    /// Its stdin stays open for write_stdin; timeout does not apply.
    #[serde(default)]
    pub(crate) background: Option<bool>,
    /// A label for a background process (shown by list_processes).
    #[serde(default)]
    pub(crate) tag: Option<String>,
}

/// Arguments of `read_output`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadOutputArgs {
    /// The id from exec_command's _meta.process_id (p-<n>).
    pub(crate) process_id: String,
    /// Where to read from: 0 (default) for the start, then the previous _meta.next_cursor.
    #[serde(default)]
    pub(crate) cursor: Option<u64>,
    /// The most bytes to return (default 65536, at most 262144).
    #[serde(default)]
    pub(crate) max_bytes: Option<usize>,
}

/// Arguments of `write_stdin`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteStdinArgs {
    /// The id from exec_command's _meta.process_id.
    pub(crate) process_id: String,
    /// Text written to the process's stdin as is (add "\n" for a line).
    #[serde(default)]
    pub(crate) data: String,
    /// Close stdin (EOF) after writing.
    #[serde(default)]
    pub(crate) close: bool,
}

/// Arguments of `kill_process`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KillProcessArgs {
    /// The id from exec_command's _meta.process_id.
    pub(crate) process_id: String,
    /// "TERM" (default, a polite stop) or "KILL" (the whole process group, at once).
    #[serde(default)]
    pub(crate) signal: Option<String>,
}

/// Arguments of `inspect`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InspectArgs {
    /// Which sections to return: any of "tools", "mounts", "processes", "sandbox", "catalog"
    /// (default: all).
    #[serde(default)]
    pub(crate) sections: Option<Vec<String>>,
    /// Only entries whose name (tool name, process id or tag) contains this text.
    #[serde(default)]
    pub(crate) name: Option<String>,
}

/// The sections `inspect` knows.
pub(crate) const INSPECT_SECTIONS: &[&str] =
    &["tools", "mounts", "processes", "sandbox", "catalog"];

/// Arguments of `list_processes` (none).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoArgs {}

/// The structured result of `exec_command` (also its `_meta`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct ExecFields {
    /// The program's exit code; 128+N when killed by signal N; 124 on timeout; 127/126 not
    /// found / not executable.
    pub(crate) exit_code: i32,
    /// Output exceeded the cap; head and tail were kept with a marker.
    pub(crate) truncated: bool,
    /// The sandbox the command ran in.
    pub(crate) sandbox_id: String,
    /// The server's timeout killed the command.
    pub(crate) timed_out: bool,
    /// The signal that killed the program, if any.
    pub(crate) signal: Option<i32>,
    /// Wall time of the command in milliseconds.
    pub(crate) duration_ms: u64,
    /// Bytes the program wrote to stdout (before truncation).
    pub(crate) stdout_bytes: u64,
    /// Bytes the program wrote to stderr (before truncation).
    pub(crate) stderr_bytes: u64,
    /// With `background: true`: the id for read_output, write_stdin and kill_process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) process_id: Option<String>,
}

/// Settings of one server instance (shared by every session).
#[derive(Debug, Clone)]
pub(crate) struct ServerSettings {
    pub(crate) sandbox_id: String,
    pub(crate) limits: ExecLimits,
    pub(crate) legacy_text: bool,
    pub(crate) max_chunk_bytes: u64,
    pub(crate) default_cwd: Option<String>,
    pub(crate) shell: String,
    pub(crate) login_shell: bool,
    /// The limit on one file or compat tool call.
    pub(crate) file_timeout: Duration,
    /// Bytes of output kept per background process.
    pub(crate) process_output_bytes: usize,
    /// The most background processes kept.
    pub(crate) max_processes: usize,
}

struct Inner {
    backend: Arc<dyn SandboxBackend>,
    settings: ServerSettings,
    router: ToolRouter<ExecServer>,
    uploads: files::Uploads,
    procs: crate::procs::ProcessTable,
}

/// The MCP handler. Cheap to clone; every session and stateless request shares one sandbox.
#[derive(Clone)]
pub(crate) struct ExecServer {
    inner: Arc<Inner>,
    /// The text format of this session's exec results (a call may override it in `_meta`).
    legacy_text: bool,
}

/// The declared output schema of `exec_command`.
pub(crate) fn exec_output_schema() -> Arc<rmcp::model::JsonObject> {
    schema_for_output::<ExecFields>()
}

/// What a bounded file or compat call came to when it did not finish.
enum Stopped {
    TimedOut(Duration),
    Cancelled,
}

impl Stopped {
    fn message(&self, tool: &str) -> String {
        match self {
            Self::TimedOut(d) => format!(
                "{tool} did not finish within {} s (a FIFO, a device or a very slow filesystem?); nothing more was done; raise --file-timeout for slow files",
                d.as_secs_f64()
            ),
            Self::Cancelled => format!("{tool} was cancelled by the client"),
        }
    }
}

/// Runs `fut` until it ends, `limit` passes or `ct` fires; dropping it stops the work (an HTTP
/// request to envd is aborted, a helper process is killed by its owner).
async fn bounded<T>(
    limit: Duration,
    ct: &CancellationToken,
    fut: impl Future<Output = T>,
) -> Result<T, Stopped> {
    tokio::select! {
        r = fut => Ok(r),
        _ = tokio::time::sleep(limit) => Err(Stopped::TimedOut(limit)),
        _ = ct.cancelled() => Err(Stopped::Cancelled),
    }
}

#[tool_router(vis = "pub(crate)")]
impl ExecServer {
    /// Run a shell command in the sandbox. content[0].text is exactly what the program wrote
    /// (stdout and stderr combined in arrival order); the exit code and other facts are in
    /// _meta and structuredContent. A background child (`cmd &`) whose output is not
    /// redirected keeps the call open until the timeout (exit_code 124).
    #[tool(
        name = "exec_command",
        output_schema = exec_output_schema(),
        annotations(destructive_hint = true, open_world_hint = true)
    )]
    async fn exec_command(
        &self,
        Parameters(args): Parameters<ExecArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.exec_tool(args, &context).await
    }

    /// Read a background process's output (stdout and stderr in arrival order) from `cursor`.
    /// _meta: next_cursor (pass it next time), eof (the process ended and everything was
    /// read), exit_code (once it ended), running, output_lost (bytes dropped from the ring
    /// before this reader got them; the read then starts at the oldest byte kept).
    #[tool(
        name = "read_output",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn read_output(&self, Parameters(args): Parameters<ReadOutputArgs>) -> CallToolResult {
        self.read_output_tool(args)
    }

    /// Write text to a background process's stdin (optionally closing it after).
    #[tool(
        name = "write_stdin",
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn write_stdin(&self, Parameters(args): Parameters<WriteStdinArgs>) -> CallToolResult {
        self.write_stdin_tool(args).await
    }

    /// Stop a background process: signal "TERM" (default) or "KILL" (its whole process
    /// group). Its output stays readable with read_output.
    #[tool(
        name = "kill_process",
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn kill_process(&self, Parameters(args): Parameters<KillProcessArgs>) -> CallToolResult {
        self.kill_process_tool(args).await
    }

    /// List background processes: JSON lines {process_id,pid,tag,command,running,exit_code,
    /// running_ms,output_bytes}.
    #[tool(
        name = "list_processes",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_processes(&self, Parameters(_args): Parameters<NoArgs>) -> CallToolResult {
        self.list_processes_tool()
    }

    /// Describe this server (read-only): JSON with the sections asked for: "tools" (name,
    /// description, input/output schema), "mounts" (mounted tools; none: mounting is not
    /// enabled), "processes" (background processes: id, pid, tag, command, running time),
    /// "sandbox" (id, envd version and features, limits) and "catalog" (catalog entries of
    /// live tools). `name` narrows tools, processes and catalog entries.
    #[tool(
        name = "inspect",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn inspect(&self, Parameters(args): Parameters<InspectArgs>) -> CallToolResult {
        self.inspect_tool(args)
    }

    /// Alias of exec_command (same arguments and result), for clients of the Node exec_server.
    #[tool(
        name = "execute",
        output_schema = exec_output_schema(),
        annotations(destructive_hint = true, open_world_hint = true)
    )]
    async fn execute(
        &self,
        Parameters(args): Parameters<ExecArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.exec_tool(args, &context).await
    }

    /// Write base64 content (standard, padded, no line breaks) to an absolute path; parents are
    /// created; the file is replaced atomically and keeps the mode of the file it replaces.
    /// Large files: send chunks in order with `offset` and `total_size`; they are staged and
    /// published once, when the last byte arrives (the destination is untouched until then).
    /// Text: 'Written N bytes to P'; _meta has size and the whole file's sha256 once published.
    #[tool(
        name = "upload_file",
        annotations(
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn upload_file(
        &self,
        Parameters(args): Parameters<files::UploadArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let s = &self.inner.settings;
        let fut = files::upload(self.inner.backend.as_ref(), &self.inner.uploads, args);
        match bounded(s.file_timeout, &context.ct, fut).await {
            Ok(Ok(ok)) => self.file_ok(ok),
            Ok(Err(e)) => self.file_error(e),
            Err(stop) => {
                self.file_error(crate::error::FileError::other(stop.message("upload_file")))
            }
        }
    }

    /// Read a file as standard padded base64 without line breaks. Without offset/length the
    /// whole file is returned if it fits in one chunk; a larger file is an error naming the
    /// chunked form (offset + length, following _meta.eof). _meta has size, sha256 of the
    /// returned bytes and eof.
    #[tool(
        name = "download_file",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn download_file(
        &self,
        Parameters(args): Parameters<files::DownloadArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let s = &self.inner.settings;
        let fut = files::download(self.inner.backend.as_ref(), args, s.max_chunk_bytes);
        match bounded(s.file_timeout, &context.ct, fut).await {
            Ok(Ok(ok)) => self.file_ok(ok),
            Ok(Err(e)) => self.file_error(e),
            Err(stop) => self.file_error(crate::error::FileError::other(
                stop.message("download_file"),
            )),
        }
    }

    /// Read a text file in `cat -n` form (exit_code 1 when missing). Lines past `limit` are
    /// not shown; _meta.truncated says so and the text ends with how to read the rest.
    #[tool(
        name = "read",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn read(
        &self,
        Parameters(args): Parameters<compat::ReadArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let fut = compat::read(self.inner.backend.as_ref(), args);
        let limit = self.inner.settings.file_timeout;
        self.compat_bounded("read", limit, &context.ct, fut).await
    }

    /// Write a text file, creating parent directories.
    #[tool(
        name = "write",
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn write(
        &self,
        Parameters(args): Parameters<compat::WriteArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let fut = compat::write(self.inner.backend.as_ref(), args);
        let limit = self.inner.settings.file_timeout;
        self.compat_bounded("write", limit, &context.ct, fut).await
    }

    /// Replace text in a file (bytes are kept exactly; the file is replaced atomically).
    /// exit_code 0 ok, 1 not found, 2 several matches, 3 file missing, 4 the file cannot be
    /// edited whole (too large or not a regular file; it is left untouched).
    #[tool(
        name = "edit",
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn edit(
        &self,
        Parameters(args): Parameters<compat::EditArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let fut = compat::edit(self.inner.backend.as_ref(), args);
        let limit = self.inner.settings.file_timeout;
        self.compat_bounded("edit", limit, &context.ct, fut).await
    }

    /// Search files for a literal string. JSON lines {path,line,text}; exit_code 1 when nothing
    /// matches, 2 on an error (matches found before it are kept). _meta.truncated is true when
    /// the list was cut (at a line boundary) and the last line says how to narrow the search.
    #[tool(
        name = "grep",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn grep(
        &self,
        Parameters(args): Parameters<compat::GrepArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let (limits, limit) = self.script_limits();
        let fut = compat::grep(
            self.inner.backend.as_ref(),
            args,
            &limits,
            context.ct.clone(),
        );
        // The helper command stops itself on cancellation and at `limits.max_timeout`.
        self.compat_bounded("grep", limit, &CancellationToken::new(), fut)
            .await
    }

    /// Find paths matching a glob. JSON lines {path,is_dir,size,mtime}; _meta.truncated as for
    /// grep.
    #[tool(
        name = "glob",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn glob(
        &self,
        Parameters(args): Parameters<compat::GlobArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let (limits, limit) = self.script_limits();
        let fut = compat::glob(
            self.inner.backend.as_ref(),
            args,
            &limits,
            context.ct.clone(),
        );
        // The helper command stops itself on cancellation and at `limits.max_timeout`.
        self.compat_bounded("glob", limit, &CancellationToken::new(), fut)
            .await
    }

    /// List a directory. JSON lines {path,is_dir}; exit_code 1 when it is missing;
    /// _meta.truncated as for grep.
    #[tool(
        name = "ls",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn ls(
        &self,
        Parameters(args): Parameters<compat::LsArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let (limits, limit) = self.script_limits();
        let fut = compat::ls(
            self.inner.backend.as_ref(),
            args,
            &limits,
            context.ct.clone(),
        );
        // The helper command stops itself on cancellation and at `limits.max_timeout`.
        self.compat_bounded("ls", limit, &CancellationToken::new(), fut)
            .await
    }
}

impl ExecServer {
    pub(crate) fn new(backend: Arc<dyn SandboxBackend>, settings: ServerSettings) -> Self {
        let legacy_text = settings.legacy_text;
        let procs =
            crate::procs::ProcessTable::new(settings.process_output_bytes, settings.max_processes);
        Self {
            inner: Arc::new(Inner {
                backend,
                settings,
                router: Self::tool_router(),
                procs,
                uploads: files::Uploads::default(),
            }),
            legacy_text,
        }
    }

    /// The same server, with exec results in the Node server's text format (`true`) or as the
    /// program's exact output (`false`) unless a call says otherwise.
    pub(crate) fn with_legacy_text(&self, legacy_text: bool) -> Self {
        Self {
            inner: self.inner.clone(),
            legacy_text,
        }
    }

    /// Every tool definition, sorted by name (what `tools/list` returns).
    pub(crate) fn tools(&self) -> Vec<Tool> {
        self.inner.router.list_all()
    }

    pub(crate) fn sandbox_id(&self) -> &str {
        &self.inner.settings.sandbox_id
    }

    fn meta(&self, mut m: serde_json::Map<String, Value>) -> MetaObject {
        m.insert("sandbox_id".into(), self.sandbox_id().into());
        MetaObject(m)
    }

    fn file_error(&self, e: crate::error::FileError) -> CallToolResult {
        let mut m = serde_json::Map::new();
        m.insert("exit_code".into(), 1.into());
        let literal = e.kind.map(|k| k.literal());
        m.insert(
            "error".into(),
            literal
                .map_or_else(|| e.message.clone(), str::to_owned)
                .into(),
        );
        m.insert("message".into(), e.message.clone().into());
        let text = match literal {
            Some(l) => format!("error: {l}: {}", e.message),
            None => format!("error: {}", e.message),
        };
        CallToolResult::error(vec![ContentBlock::text(text)]).with_meta(Some(self.meta(m)))
    }

    /// The limits of a compat tool's helper command, and the outer limit of the call.
    fn script_limits(&self) -> (ExecLimits, Duration) {
        let s = &self.inner.settings;
        let mut limits = s.limits;
        limits.max_timeout = s.file_timeout;
        (
            limits,
            s.file_timeout + exec::DRAIN_AFTER_KILL + Duration::from_secs(1),
        )
    }

    async fn compat_bounded(
        &self,
        tool: &str,
        limit: Duration,
        ct: &CancellationToken,
        fut: impl Future<Output = compat::CompatOut>,
    ) -> CallToolResult {
        match bounded(limit, ct, fut).await {
            Ok(o) => self.compat_result(o),
            Err(stop) => {
                let mut m = serde_json::Map::new();
                m.insert("exit_code".into(), exec::TIMEOUT_EXIT_CODE.into());
                m.insert(
                    "timed_out".into(),
                    matches!(stop, Stopped::TimedOut(_)).into(),
                );
                CallToolResult::error(vec![ContentBlock::text(format!(
                    "Error: {}",
                    stop.message(tool)
                ))])
                .with_meta(Some(self.meta(m)))
            }
        }
    }

    fn compat_result(&self, o: compat::CompatOut) -> CallToolResult {
        let (text, cut) = crate::output::fit_json(o.text, crate::output::MAX_RESULT_JSON_TEXT);
        let mut m = serde_json::Map::new();
        m.insert("exit_code".into(), o.exit_code.into());
        if o.truncated.is_some() || cut {
            m.insert(
                "truncated".into(),
                (o.truncated.unwrap_or(false) || cut).into(),
            );
        }
        CallToolResult::success(vec![ContentBlock::text(text)]).with_meta(Some(self.meta(m)))
    }

    /// The fields shared by `_meta` and `structuredContent` of an exec result.
    fn exec_fields(&self, o: &ExecOutcome) -> ExecFields {
        ExecFields {
            exit_code: o.exit_code,
            truncated: o.truncated,
            sandbox_id: self.sandbox_id().to_owned(),
            timed_out: o.timed_out,
            signal: o.signal,
            duration_ms: o.duration_ms,
            stdout_bytes: o.stdout_bytes,
            stderr_bytes: o.stderr_bytes,
            process_id: None,
        }
    }

    pub(crate) fn exec_result(&self, o: &ExecOutcome, legacy: bool) -> CallToolResult {
        let text = if legacy {
            legacy_text(o)
        } else {
            crate::output::lossy(&o.output)
        };
        let (text, cut) = crate::output::fit_json(text, crate::output::MAX_RESULT_JSON_TEXT);
        let mut fields = self.exec_fields(o);
        fields.truncated |= cut;
        let fields = match serde_json::to_value(fields) {
            Ok(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
        r.structured_content = Some(Value::Object(fields.clone()));
        r.with_meta(Some(MetaObject(fields)))
    }

    fn exec_could_not_run(&self, message: String) -> CallToolResult {
        let mut m = serde_json::Map::new();
        m.insert("exit_code".into(), 126.into());
        m.insert("error".into(), message.clone().into());
        CallToolResult::error(vec![ContentBlock::text(format!(
            "error: the command could not be run: {message}"
        ))])
        .with_meta(Some(self.meta(m)))
    }

    /// Whether this call wants the legacy text: `_meta["e2b/legacy_text"]` if given, else the
    /// session's setting.
    fn legacy_for(&self, context: &RequestContext<RoleServer>) -> bool {
        context
            .meta
            .0
            .get(LEGACY_TEXT_META)
            .and_then(Value::as_bool)
            .unwrap_or(self.legacy_text)
    }

    async fn exec_tool(
        &self,
        args: ExecArgs,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let s = &self.inner.settings;
        let timeout = match exec::resolve_timeout(args.timeout, &s.limits) {
            Ok(t) => t,
            Err(e) => return self.exec_could_not_run(e),
        };
        let legacy = self.legacy_for(context);
        let spec = RunSpec {
            cmd: args.cmd,
            shell: s.shell.clone(),
            login_shell: s.login_shell,
            cwd: args.cwd.or_else(|| s.default_cwd.clone()),
            env: args.env.unwrap_or_default(),
            stdin: args.stdin.map(|t| Bytes::from(t.into_bytes())),
            hard_timeout: None,
            keep_stdin: args.background == Some(true),
        };
        if args.background == Some(true) {
            return self.start_background(spec, args.tag).await;
        }
        let progress: Option<ProgressFn> = context.meta.get_progress_token().map(|token| {
            let peer = context.peer.clone();
            let f: ProgressFn = Box::new(move |total: u64, text: String| {
                let peer = peer.clone();
                let token = token.clone();
                Box::pin(async move {
                    let p = ProgressNotificationParam::new(token, total as f64).with_message(text);
                    if let Err(e) = peer.notify_progress(p).await {
                        tracing::debug!(error = %e, "progress notification not delivered");
                    }
                })
            });
            f
        });
        match exec::run(
            self.inner.backend.as_ref(),
            spec,
            timeout,
            &s.limits,
            context.ct.clone(),
            progress,
            legacy,
        )
        .await
        {
            Ok(o) => {
                tracing::info!(
                    exit_code = o.exit_code,
                    timed_out = o.timed_out,
                    cancelled = o.cancelled,
                    duration_ms = o.duration_ms,
                    stdout_bytes = o.stdout_bytes,
                    stderr_bytes = o.stderr_bytes,
                    "exec_command finished"
                );
                self.exec_result(&o, legacy)
            }
            Err(e) => self.exec_could_not_run(e.to_string()),
        }
    }

    fn proc_error(&self, message: String) -> CallToolResult {
        let mut m = serde_json::Map::new();
        m.insert("error".into(), message.clone().into());
        CallToolResult::error(vec![ContentBlock::text(format!("error: {message}"))])
            .with_meta(Some(self.meta(m)))
    }

    async fn start_background(&self, spec: RunSpec, tag: Option<String>) -> CallToolResult {
        let procs = &self.inner.procs;
        if let Err(e) = procs.reserve() {
            return self.exec_could_not_run(e);
        }
        let command = spec.cmd.clone();
        let spawned = match self.inner.backend.spawn(spec).await {
            Ok(s) => s,
            Err(e) => return self.exec_could_not_run(e.to_string()),
        };
        let p = procs.insert(spawned, command, tag);
        let pid = p.control().pid();
        let fields = ExecFields {
            exit_code: 0,
            truncated: false,
            sandbox_id: self.sandbox_id().to_owned(),
            timed_out: false,
            signal: None,
            duration_ms: 0,
            stdout_bytes: 0,
            stderr_bytes: 0,
            process_id: Some(p.id.clone()),
        };
        let mut fields = match serde_json::to_value(fields) {
            Ok(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        let text = format!(
            "started background process {id}{pid}; read its output with read_output(process_id=\"{id}\", cursor=0), stop it with kill_process(process_id=\"{id}\")",
            id = p.id,
            pid = pid.map(|n| format!(" (pid {n})")).unwrap_or_default()
        );
        let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
        r.structured_content = Some(Value::Object(fields.clone()));
        if let Some(n) = pid {
            fields.insert("pid".into(), n.into());
        }
        fields.insert("background".into(), true.into());
        r.with_meta(Some(MetaObject(fields)))
    }

    fn read_output_tool(&self, args: ReadOutputArgs) -> CallToolResult {
        let p = match self.inner.procs.get(&args.process_id) {
            Ok(p) => p,
            Err(e) => return self.proc_error(e),
        };
        let max = args
            .max_bytes
            .unwrap_or(crate::procs::DEFAULT_READ_BYTES)
            .clamp(1, crate::procs::MAX_READ_BYTES);
        let r = p.read(args.cursor.unwrap_or(0), max);
        let mut text = crate::output::lossy(&r.read.data);
        if r.read.lost > 0 {
            text = format!(
                "[... exec-server: {} bytes of output were dropped before this read (the ring keeps the last --process-output-bytes); reading from the oldest byte kept ...]\n{text}",
                r.read.lost
            );
        }
        let mut m = serde_json::Map::new();
        m.insert("process_id".into(), p.id.clone().into());
        m.insert("next_cursor".into(), r.read.next_cursor.into());
        m.insert("eof".into(), r.eof.into());
        m.insert("running".into(), r.running.into());
        m.insert("output_lost".into(), r.read.lost.into());
        m.insert("output_bytes".into(), r.total.into());
        if let Some(x) = r.exit {
            m.insert("exit_code".into(), x.code().into());
            if let Some(sig) = x.signal {
                m.insert("signal".into(), sig.into());
            }
        }
        if let Some(e) = r.error {
            m.insert("error".into(), e.into());
        }
        CallToolResult::success(vec![ContentBlock::text(text)]).with_meta(Some(self.meta(m)))
    }

    async fn write_stdin_tool(&self, args: WriteStdinArgs) -> CallToolResult {
        let p = match self.inner.procs.get(&args.process_id) {
            Ok(p) => p,
            Err(e) => return self.proc_error(e),
        };
        if !p.running() {
            return self.proc_error(format!(
                "process {} has ended; nothing was written (read_output shows its exit code)",
                p.id
            ));
        }
        let n = args.data.len();
        if n > 0
            && let Err(e) = p
                .control()
                .write_stdin(crate::procs::stdin_bytes(args.data))
                .await
        {
            return self.proc_error(format!("writing to {}'s stdin failed: {e}", p.id));
        }
        if args.close
            && let Err(e) = p.control().close_stdin().await
        {
            return self.proc_error(format!("{}: {e}", p.id));
        }
        let mut m = serde_json::Map::new();
        m.insert("process_id".into(), p.id.clone().into());
        m.insert("bytes".into(), n.into());
        m.insert("closed".into(), args.close.into());
        CallToolResult::success(vec![ContentBlock::text(format!(
            "wrote {n} bytes to {}'s stdin{}",
            p.id,
            if args.close { " and closed it" } else { "" }
        ))])
        .with_meta(Some(self.meta(m)))
    }

    async fn kill_process_tool(&self, args: KillProcessArgs) -> CallToolResult {
        let p = match self.inner.procs.get(&args.process_id) {
            Ok(p) => p,
            Err(e) => return self.proc_error(e),
        };
        let sig = args
            .signal
            .as_deref()
            .unwrap_or("TERM")
            .trim_start_matches("SIG")
            .to_ascii_uppercase();
        if !p.running() {
            let code = p.exit().map(|x| x.code());
            let mut m = serde_json::Map::new();
            m.insert("process_id".into(), p.id.clone().into());
            m.insert("exit_code".into(), code.into());
            m.insert("running".into(), false.into());
            return CallToolResult::success(vec![ContentBlock::text(format!(
                "process {} had already ended; nothing was sent",
                p.id
            ))])
            .with_meta(Some(self.meta(m)));
        }
        let sent = match sig.as_str() {
            "TERM" | "15" => p.control().terminate().await,
            "KILL" | "9" => p.control().kill().await,
            other => {
                return self.proc_error(format!(
                    "signal {other:?} is not supported; use \"TERM\" (a polite stop) or \"KILL\" (at once)"
                ));
            }
        };
        if let Err(e) = sent {
            return self.proc_error(format!("signalling {} failed: {e}", p.id));
        }
        let mut m = serde_json::Map::new();
        m.insert("process_id".into(), p.id.clone().into());
        m.insert("signal".into(), sig.clone().into());
        CallToolResult::success(vec![ContentBlock::text(format!(
            "sent SIG{sig} to {}; read_output shows the exit code once it ends",
            p.id
        ))])
        .with_meta(Some(self.meta(m)))
    }

    fn inspect_tool(&self, args: InspectArgs) -> CallToolResult {
        let sections: Vec<String> = match args.sections {
            Some(s) if !s.is_empty() => s,
            _ => INSPECT_SECTIONS.iter().map(|s| (*s).to_owned()).collect(),
        };
        if let Some(bad) = sections
            .iter()
            .find(|s| !INSPECT_SECTIONS.contains(&s.as_str()))
        {
            return self.proc_error(format!(
                "inspect has no section {bad:?}; ask for any of {}, e.g. {{\"sections\": [\"tools\"]}}",
                INSPECT_SECTIONS.join(", ")
            ));
        }
        let want = |n: &str| args.name.as_deref().is_none_or(|f| n.contains(f));
        let tools = self.tools();
        let mut out = serde_json::Map::new();
        for sec in &sections {
            let v = match sec.as_str() {
                "tools" => Value::Array(
                    tools
                        .iter()
                        .filter(|t| want(&t.name))
                        .map(|t| {
                            serde_json::json!({
                                "name": t.name,
                                "description": t.description,
                                "input_schema": Value::Object((*t.input_schema).clone()),
                                "output_schema": t.output_schema.as_ref().map(|s| Value::Object((**s).clone())),
                            })
                        })
                        .collect(),
                ),
                "mounts" => Value::Array(Vec::new()),
                "processes" => Value::Array(
                    self.inner
                        .procs
                        .list()
                        .iter()
                        .filter(|p| want(&p.id) || p.tag.as_deref().is_some_and(&want))
                        .map(|p| {
                            serde_json::json!({
                                "process_id": p.id,
                                "pid": p.control().pid(),
                                "tag": p.tag,
                                "command": p.command,
                                "running": p.running(),
                                "exit_code": p.exit().map(|x| x.code()),
                                "running_ms": u64::try_from(p.started.elapsed().as_millis()).unwrap_or(u64::MAX),
                            })
                        })
                        .collect(),
                ),
                "sandbox" => {
                    let s = &self.inner.settings;
                    serde_json::json!({
                        "id": self.sandbox_id(),
                        "envd": self.inner.backend.describe(),
                        "isolation": Value::Null,
                        "limits": {
                            "default_timeout_s": s.limits.default_timeout.as_secs_f64(),
                            "max_timeout_s": s.limits.max_timeout.as_secs_f64(),
                            "max_output_bytes": s.limits.output_cap,
                            "max_chunk_bytes": s.max_chunk_bytes,
                            "file_timeout_s": s.file_timeout.as_secs_f64(),
                            "process_output_bytes": s.process_output_bytes,
                            "max_processes": s.max_processes,
                        },
                    })
                }
                _ => {
                    let live: std::collections::HashSet<&str> =
                        tools.iter().map(|t| t.name.as_ref()).collect();
                    let cat: Value =
                        serde_json::from_str(&crate::catalog::catalog_json()).unwrap_or_default();
                    Value::Array(
                        cat.get("tools")
                            .and_then(Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .filter(|e| {
                                        e.get("name").and_then(Value::as_str).is_some_and(|n| {
                                            live.contains(n) && want(n)
                                        })
                                    })
                                    .cloned()
                                    .collect()
                            })
                            .unwrap_or_default(),
                    )
                }
            };
            out.insert(sec.clone(), v);
        }
        let text = serde_json::to_string_pretty(&Value::Object(out)).unwrap_or_default();
        let (text, cut) = crate::output::fit_json(text, crate::output::MAX_RESULT_JSON_TEXT);
        let mut m = serde_json::Map::new();
        m.insert("sections".into(), sections.into());
        m.insert("truncated".into(), cut.into());
        CallToolResult::success(vec![ContentBlock::text(text)]).with_meta(Some(self.meta(m)))
    }

    fn list_processes_tool(&self) -> CallToolResult {
        let list = self.inner.procs.list();
        let mut lines = String::new();
        for p in &list {
            let r = p.read(u64::MAX, 0);
            let v = serde_json::json!({
                "process_id": p.id,
                "pid": p.control().pid(),
                "tag": p.tag,
                "command": p.command,
                "running": r.running,
                "exit_code": r.exit.map(|x| x.code()),
                "started_unix": p.started_unix,
                "running_ms": u64::try_from(p.started.elapsed().as_millis()).unwrap_or(u64::MAX),
                "output_bytes": r.total,
            });
            lines.push_str(&v.to_string());
            lines.push('\n');
        }
        let mut m = serde_json::Map::new();
        m.insert("count".into(), list.len().into());
        CallToolResult::success(vec![ContentBlock::text(lines)]).with_meta(Some(self.meta(m)))
    }

    fn file_ok(&self, ok: files::FileOk) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(ok.text)])
            .with_meta(Some(self.meta(ok.meta)))
    }

    /// Dispatches one tool call through the router. Argument errors (missing, ill-typed or
    /// unknown arguments) come back as `isError` results with a hint (SEP-1303); only an
    /// unknown tool is a JSON-RPC error.
    pub(crate) async fn dispatch(
        &self,
        req: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = req.name.to_string();
        if name == crate::transport::LINE_TOO_LONG_TOOL {
            let get = |k: &str| {
                req.arguments
                    .as_ref()
                    .and_then(|a| a.get(k))
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
            };
            let mut m = serde_json::Map::new();
            m.insert("exit_code".into(), 2.into());
            m.insert("error".into(), "request_too_large".into());
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "error: the request was {} bytes, over this server's limit of {} bytes per message (--max-body-bytes); nothing was done. Send files in smaller chunks (upload_file with offset and total_size)",
                get("bytes"),
                get("max")
            ))])
            .with_meta(Some(self.meta(m)))
            .into());
        }
        if self.inner.router.get(&name).is_none() {
            let known: Vec<String> = self.tools().iter().map(|t| t.name.to_string()).collect();
            return Err(ErrorData::invalid_params(
                format!("unknown tool {name}; this server has: {}", known.join(", ")),
                None,
            ));
        }
        let resp = self
            .inner
            .router
            .call(ToolCallContext::new(self, req, context))
            .await?;
        Ok(match resp {
            CallToolResponse::Complete(mut r) if r.is_error == Some(true) => {
                let schema = self.inner.router.get(&name).map(|t| t.input_schema.clone());
                teach_argument_error(&name, schema.as_deref(), &mut r);
                CallToolResponse::Complete(r)
            }
            other => other,
        })
    }
}

/// `name: type (required)` for every property of an input schema.
fn describe_arguments(schema: &rmcp::model::JsonObject) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return "none".into();
    };
    props
        .iter()
        .map(|(k, v)| {
            let ty = match v.get("type") {
                Some(Value::String(t)) => t.clone(),
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|t| *t != "null")
                    .collect::<Vec<_>>()
                    .join("|"),
                _ => "any".into(),
            };
            if required.contains(&k.as_str()) {
                format!("{k}: {ty} (required)")
            } else {
                format!("{k}: {ty}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Rewrites rmcp's "failed to deserialize parameters: ..." text into what to do.
fn teach_argument_error(
    tool: &str,
    schema: Option<&rmcp::model::JsonObject>,
    r: &mut CallToolResult,
) {
    for block in &mut r.content {
        if let Some(t) = block.as_text()
            && let Some(rest) = t.text.strip_prefix("failed to deserialize parameters:")
        {
            let args = schema.map_or_else(|| "see tools/list".into(), describe_arguments);
            let text = format!(
                "invalid arguments for {tool}:{rest}. {tool} takes {{{args}}}; fix the arguments to match its inputSchema (tools/list) and call it again."
            );
            *block = ContentBlock::text(text);
            let mut m = serde_json::Map::new();
            m.insert("exit_code".into(), 2.into());
            m.insert("error".into(), "invalid_arguments".into());
            r.meta = Some(MetaObject(m));
            return;
        }
    }
}

/// The Node server's text format, for adapters that still parse it (`--legacy-text`).
pub(crate) fn legacy_text(o: &ExecOutcome) -> String {
    let (out, err) = o
        .legacy
        .as_ref()
        .map(|(a, b)| (crate::output::lossy(a), crate::output::lossy(b)))
        .unwrap_or_else(|| (crate::output::lossy(&o.output), String::new()));
    let mut parts = Vec::new();
    if !out.is_empty() {
        parts.push(format!("stdout:\n{out}"));
    }
    if !err.is_empty() {
        parts.push(format!("stderr:\n{err}"));
    }
    if o.exit_code != 0 {
        parts.push(format!("exit_code: {}", o.exit_code));
    }
    if parts.is_empty() {
        "(no output)".into()
    } else {
        parts.join("\n")
    }
}

impl ServerHandler for ExecServer {
    fn get_info(&self) -> ServerConfig {
        let mut meta = serde_json::Map::new();
        meta.insert("sandbox_id".into(), self.sandbox_id().into());
        let mut info = InitializeResult::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new(SERVER_NAME, VERSION).with_title("E2B exec server");
        info.instructions = Some(format!(
            "Tools run in sandbox {}. exec_command returns the program's output as text and its exit code in _meta/structuredContent; move files with upload_file/download_file (base64, chunked).",
            self.sandbox_id()
        ));
        info.meta = Some(MetaObject(meta));
        info
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.router.get(name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.dispatch(request, context).await
    }
}
