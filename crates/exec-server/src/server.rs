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
use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, DiscoverResult,
    Implementation, InitializeRequestParams, InitializeResult, ListToolsResult, MetaObject,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
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
/// The built-in tools registered only with `--allow-mount`.
pub(crate) const MOUNT_TOOLS: &[&str] = &["mount", "unmount"];
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

/// Arguments of `mount`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MountArgs {
    /// The new tool's name: 1 to 128 characters of A-Z a-z 0-9 _ - . (not the name of a tool
    /// that exists).
    pub(crate) name: String,
    /// What the tool does and returns (the model reads it in tools/list).
    pub(crate) description: String,
    /// JSON Schema of the tool's arguments: an object with "type": "object". Every call is
    /// validated against it.
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub(crate) input_schema: Value,
    /// The shell line run with `sh -c` in the sandbox for each call. The call's arguments
    /// arrive as JSON on stdin and in $TOOL_ARGS. It must print JSON to stdout:
    /// [{"type":"text","text":"..."}] or {"content":[...],"meta":{...}}; a non-zero exit
    /// fails the call with its stderr.
    pub(crate) command: String,
    /// Time limit of one call in seconds (default 60; from 1 to the server's --max-timeout).
    #[serde(default)]
    pub(crate) timeout_seconds: Option<f64>,
}

/// Arguments of `unmount`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UnmountArgs {
    /// The mount id (dyn-<n>) that mount returned in _meta.mount_id.
    pub(crate) id: String,
    /// How long calls in flight may take to finish before they are killed (default 5,
    /// 0 to 60).
    #[serde(default)]
    pub(crate) grace_seconds: Option<f64>,
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
    /// `--allow-mount`: the `mount` and `unmount` tools are registered.
    pub(crate) allow_mount: bool,
    /// The most tools mounted at once.
    pub(crate) max_mounts: usize,
    /// How long a chunked upload may wait for its next chunk.
    pub(crate) upload_idle: Duration,
}

struct Inner {
    backend: Arc<dyn SandboxBackend>,
    settings: ServerSettings,
    router: ToolRouter<ExecServer>,
    uploads: files::Uploads,
    procs: crate::procs::ProcessTable,
    mounts: crate::mounts::Mounts,
    listeners: crate::mounts::Listeners,
    /// The sandbox's isolation, probed once (see `SandboxBackend::isolation`).
    isolation: tokio::sync::OnceCell<Value>,
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
    /// description, input/output schema), "mounts" ({enabled, max_mounts, entries: id, name,
    /// created, in_flight, state active|draining}; mounting needs the server flag
    /// --allow-mount), "processes" (background processes: id, pid, tag, command, running
    /// time), "sandbox" (id, envd version and features, isolation, limits) and "catalog"
    /// (catalog entries of live built-in tools). `name` narrows tools, mounts, processes and
    /// catalog entries.
    #[tool(
        name = "inspect",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn inspect(&self, Parameters(args): Parameters<InspectArgs>) -> CallToolResult {
        self.inspect_tool(args).await
    }

    /// Add a tool at runtime (only on a server started with --allow-mount): a shell command
    /// run in the sandbox per call, with the call's arguments as JSON on stdin and in
    /// $TOOL_ARGS, validated against `input_schema` first. Its stdout must be JSON: an array
    /// of content blocks or {"content":[blocks],"meta":{...}}. Returns the mount id (dyn-<n>)
    /// in the text and _meta.mount_id; clients get notifications/tools/list_changed. The tool
    /// runs with the sandbox's powers (see docs/security.md).
    #[tool(
        name = "mount",
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn mount(&self, Parameters(args): Parameters<MountArgs>) -> CallToolResult {
        self.mount_tool(args).await
    }

    /// Remove a mounted tool by id and return only after quiescence: it takes no new calls at
    /// once, calls in flight get `grace_seconds` to finish and are then killed (their whole
    /// process tree), then the tool leaves tools/list and clients get
    /// notifications/tools/list_changed. The result says how many calls finished and how many
    /// were killed. Only on a server started with --allow-mount.
    #[tool(
        name = "unmount",
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn unmount(&self, Parameters(args): Parameters<UnmountArgs>) -> CallToolResult {
        self.unmount_tool(args).await
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
        self.search_tool(compat::Search::Grep(args), &context).await
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
        self.search_tool(compat::Search::Glob(args), &context).await
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
        self.search_tool(compat::Search::Ls(args), &context).await
    }
}

impl ExecServer {
    pub(crate) fn new(backend: Arc<dyn SandboxBackend>, settings: ServerSettings) -> Self {
        let legacy_text = settings.legacy_text;
        let procs =
            crate::procs::ProcessTable::new(settings.process_output_bytes, settings.max_processes);
        let mut router = Self::tool_router();
        if !settings.allow_mount {
            for t in MOUNT_TOOLS {
                router.remove_route(t);
            }
        }
        let mounts = crate::mounts::Mounts::new(settings.allow_mount, settings.max_mounts);
        let uploads = files::Uploads::new(settings.upload_idle);
        let inner = Arc::new(Inner {
            backend,
            settings,
            router,
            procs,
            uploads,
            mounts,
            listeners: crate::mounts::Listeners::default(),
            isolation: tokio::sync::OnceCell::new(),
        });
        // The reaper of abandoned chunked uploads: it stops when the server is dropped.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&inner);
            let every = (inner.settings.upload_idle / 4)
                .clamp(Duration::from_millis(50), Duration::from_secs(60));
            rt.spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(inner) = weak.upgrade() else { break };
                    inner.uploads.reap(inner.backend.as_ref()).await;
                }
            });
        }
        Self { inner, legacy_text }
    }

    /// Cleans up what the server leaves in the sandbox when it stops: the staged parts of
    /// unfinished chunked uploads.
    pub(crate) async fn shutdown(&self) {
        self.inner.uploads.clear(self.inner.backend.as_ref()).await;
    }

    /// The same server, with exec results in the Node server's text format (`true`) or as the
    /// program's exact output (`false`) unless a call says otherwise.
    pub(crate) fn with_legacy_text(&self, legacy_text: bool) -> Self {
        Self {
            inner: self.inner.clone(),
            legacy_text,
        }
    }

    /// Every tool definition, built-in and mounted, sorted by name (what `tools/list`
    /// returns).
    pub(crate) fn tools(&self) -> Vec<Tool> {
        let mut all = self.inner.router.list_all();
        all.extend(self.inner.mounts.tools());
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
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

    /// `grep`, `glob` and `ls`: the helper command in the sandbox, bounded by the file timeout.
    async fn search_tool(
        &self,
        search: compat::Search,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let (limits, limit) = self.script_limits();
        let tool = search.name();
        let fut = search.run(self.inner.backend.as_ref(), &limits, context.ct.clone());
        // The helper command stops itself on cancellation and at `limits.max_timeout`.
        self.compat_bounded(tool, limit, &CancellationToken::new(), fut)
            .await
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

    async fn inspect_tool(&self, args: InspectArgs) -> CallToolResult {
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
                "mounts" => {
                    let m = &self.inner.mounts;
                    let mut v = serde_json::json!({
                        "enabled": m.enabled,
                        "max_mounts": m.max,
                        "entries": m
                            .list()
                            .iter()
                            .filter(|x| want(x.name()) || want(&x.id))
                            .map(|x| x.describe())
                            .collect::<Vec<_>>(),
                    });
                    if !m.enabled {
                        v["note"] = "mounting is off on this server; it is enabled by starting the server with --allow-mount".into();
                    }
                    v
                }
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
                    let iso = self
                        .inner
                        .isolation
                        .get_or_init(|| self.inner.backend.isolation())
                        .await
                        .clone();
                    serde_json::json!({
                        "id": self.sandbox_id(),
                        "envd": self.inner.backend.describe(),
                        "isolation": iso.get("isolation").cloned().unwrap_or(Value::Null),
                        "isolation_detail": iso.get("detail").cloned().unwrap_or(Value::Null),
                        "limits": {
                            "default_timeout_s": s.limits.default_timeout.as_secs_f64(),
                            "max_timeout_s": s.limits.max_timeout.as_secs_f64(),
                            "max_output_bytes": s.limits.output_cap,
                            "max_chunk_bytes": s.max_chunk_bytes,
                            "file_timeout_s": s.file_timeout.as_secs_f64(),
                            "process_output_bytes": s.process_output_bytes,
                            "max_processes": s.max_processes,
                            "max_mounts": s.max_mounts,
                            "mount_enabled": s.allow_mount,
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

    fn mount_error(
        &self,
        message: String,
        error: &str,
        extra: Option<(&str, Value)>,
    ) -> CallToolResult {
        let mut m = serde_json::Map::new();
        m.insert("error".into(), error.into());
        if let Some((k, v)) = extra {
            m.insert(k.into(), v);
        }
        CallToolResult::error(vec![ContentBlock::text(format!("error: {message}"))])
            .with_meta(Some(self.meta(m)))
    }

    async fn mount_tool(&self, args: MountArgs) -> CallToolResult {
        let limits = crate::mounts::DefLimits {
            max_timeout: self.inner.settings.limits.max_timeout,
        };
        let taken = |n: &str| {
            if self.inner.router.has_route(n)
                || MOUNT_TOOLS.contains(&n)
                || n == crate::transport::LINE_TOO_LONG_TOOL
            {
                Some(format!("the built-in tool {n}"))
            } else {
                self.inner
                    .mounts
                    .list()
                    .iter()
                    .find(|m| m.name() == n)
                    .map(|m| {
                        format!(
                            "the mounted tool {} (unmount(id=\"{}\") frees it)",
                            m.id, m.id
                        )
                    })
            }
        };
        let def = match crate::mounts::validate(&args, taken, &limits) {
            Ok(d) => d,
            Err(e) => return self.mount_error(e, "invalid_definition", None),
        };
        let m = match self.inner.mounts.insert(def) {
            Ok(m) => m,
            Err(e) => return self.mount_error(e, "mount_refused", None),
        };
        let notified = self.inner.listeners.tool_list_changed().await;
        tracing::info!(mount_id = %m.id, name = m.name(), notified, "mounted a tool");
        let mut meta = serde_json::Map::new();
        meta.insert("mount_id".into(), m.id.clone().into());
        meta.insert("name".into(), m.name().into());
        meta.insert("timeout_seconds".into(), m.timeout.as_secs_f64().into());
        meta.insert("clients_notified".into(), notified.into());
        CallToolResult::success(vec![ContentBlock::text(format!(
            "mounted {name} as {id}: call it as the tool \"{name}\" (its arguments are checked against input_schema, then reach the command as JSON on stdin and in $TOOL_ARGS; each call may run {t} s). Remove it with unmount(id=\"{id}\").",
            name = m.name(),
            id = m.id,
            t = m.timeout.as_secs_f64()
        ))])
        .with_meta(Some(self.meta(meta)))
    }

    async fn unmount_tool(&self, args: UnmountArgs) -> CallToolResult {
        let grace = match args.grace_seconds {
            None => crate::mounts::DEFAULT_GRACE,
            Some(g) if g.is_finite() && (0.0..=crate::mounts::MAX_GRACE_SECS).contains(&g) => {
                Duration::from_secs_f64(g)
            }
            Some(g) => {
                return self.mount_error(
                    format!(
                        "grace_seconds is {g}; give a number from 0 to {} (default {})",
                        crate::mounts::MAX_GRACE_SECS,
                        crate::mounts::DEFAULT_GRACE.as_secs_f64()
                    ),
                    "invalid_arguments",
                    None,
                );
            }
        };
        let m = match self.inner.mounts.start_drain(args.id.trim()) {
            Ok(m) => m,
            Err(e) => {
                return self.mount_error(
                    e,
                    "unknown_mount",
                    Some((
                        "live_ids",
                        self.inner
                            .mounts
                            .list()
                            .iter()
                            .map(|m| Value::from(m.id.clone()))
                            .collect(),
                    )),
                );
            }
        };
        // Finished in its own task: a client that gives up on this call does not leave the
        // mount half-drained.
        let server = self.clone();
        let task = tokio::spawn(async move {
            let d = crate::mounts::drain(&m, grace).await;
            server.inner.mounts.remove(&m.id);
            let notified = server.inner.listeners.tool_list_changed().await;
            (m, d, notified)
        });
        let (m, d, notified) = match task.await {
            Ok(x) => x,
            Err(e) => {
                return self.mount_error(format!("unmounting failed: {e}"), "internal", None);
            }
        };
        tracing::info!(mount_id = %m.id, finished = d.finished, killed = d.killed, "unmounted a tool");
        let mut meta = serde_json::Map::new();
        meta.insert("mount_id".into(), m.id.clone().into());
        meta.insert("name".into(), m.name().into());
        meta.insert("in_flight".into(), d.in_flight_at_start.into());
        meta.insert("finished".into(), d.finished.into());
        meta.insert("killed".into(), d.killed.into());
        meta.insert("grace_seconds".into(), grace.as_secs_f64().into());
        meta.insert("clients_notified".into(), notified.into());
        let mut text = format!(
            "unmounted {} ({}): {} call(s) were in flight; {} finished, {} killed after the {} s grace period. The tool is gone from tools/list.",
            m.id,
            m.name(),
            d.in_flight_at_start,
            d.finished,
            d.killed,
            grace.as_secs_f64()
        );
        if d.unconfirmed > 0 {
            meta.insert("unconfirmed".into(), d.unconfirmed.into());
            text.push_str(&format!(
                " {} killed call(s) had not confirmed their end when the tool was removed.",
                d.unconfirmed
            ));
        }
        CallToolResult::success(vec![ContentBlock::text(text)]).with_meta(Some(self.meta(meta)))
    }

    /// Runs one call of a mounted tool.
    async fn call_mounted(
        &self,
        call: crate::mounts::InFlight,
        arguments: Option<rmcp::model::JsonObject>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let m = call.mount.clone();
        let with_id = |mut meta: serde_json::Map<String, Value>| {
            meta.insert("mount_id".into(), m.id.clone().into());
            self.meta(meta)
        };
        let fail = |text: String, meta: serde_json::Map<String, Value>| {
            CallToolResult::error(vec![ContentBlock::text(text)]).with_meta(Some(with_id(meta)))
        };
        let args = Value::Object(arguments.unwrap_or_default());
        let errors: Vec<String> = m
            .validator
            .iter_errors(&args)
            .take(5)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!("{}: {e}", if at.is_empty() { "(root)".into() } else { at })
            })
            .collect();
        if !errors.is_empty() {
            let mut meta = serde_json::Map::new();
            meta.insert("exit_code".into(), 2.into());
            meta.insert("error".into(), "invalid_arguments".into());
            return fail(
                format!(
                    "invalid arguments for {name}: {}. {name} takes {{{}}}; fix the arguments to match its inputSchema (tools/list) and call it again.",
                    errors.join("; "),
                    describe_arguments(&m.tool.input_schema),
                    name = m.name()
                ),
                meta,
            );
        }
        let json = args.to_string();
        if json.len() > crate::mounts::MAX_CALL_ARGS_BYTES {
            let mut meta = serde_json::Map::new();
            meta.insert("error".into(), "arguments_too_large".into());
            return fail(
                format!(
                    "the arguments are {} bytes of JSON, over the {} byte limit of a mounted tool (they travel in an environment variable); pass large data in a file (upload_file) and its path as the argument",
                    json.len(),
                    crate::mounts::MAX_CALL_ARGS_BYTES
                ),
                meta,
            );
        }
        let s = &self.inner.settings;
        let mut spec = RunSpec::sh(m.command.clone());
        spec.cwd = s.default_cwd.clone();
        spec.env.insert("TOOL_ARGS".into(), json.clone());
        spec.env.insert("TOOL_NAME".into(), m.name().to_owned());
        spec.env.insert("MOUNT_ID".into(), m.id.clone());
        spec.stdin = Some(Bytes::from(json.into_bytes()));
        // Killed when the client cancels or when unmount's grace period ends.
        let ct = m.kill.child_token();
        let link = {
            let req = context.ct.clone();
            let ct = ct.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = req.cancelled() => ct.cancel(),
                    _ = ct.cancelled() => {}
                }
            })
        };
        let run = exec::run(
            self.inner.backend.as_ref(),
            spec,
            m.timeout,
            &s.limits,
            ct,
            None,
            true,
        )
        .await;
        link.abort();
        let o = match run {
            Ok(o) => o,
            Err(e) => {
                let mut meta = serde_json::Map::new();
                meta.insert("exit_code".into(), 126.into());
                meta.insert("error".into(), "could_not_run".into());
                return fail(
                    format!("error: the mounted tool's command could not be run: {e}"),
                    meta,
                );
            }
        };
        let (stdout, stderr) = o.legacy.clone().unwrap_or_default();
        let mut meta = serde_json::Map::new();
        meta.insert("exit_code".into(), o.exit_code.into());
        meta.insert("duration_ms".into(), o.duration_ms.into());
        if o.cancelled {
            let by_unmount = m.kill.is_cancelled();
            meta.insert("killed_by_unmount".into(), by_unmount.into());
            meta.insert("error".into(), "killed".into());
            let why = if by_unmount {
                format!(
                    "{} was unmounted while this call ran and its grace period ended",
                    m.id
                )
            } else {
                "the client cancelled the call".into()
            };
            return fail(
                format!(
                    "error: the call of {} was killed (its whole process group): {why}",
                    m.name()
                ),
                meta,
            );
        }
        if o.timed_out {
            meta.insert("timed_out".into(), true.into());
            meta.insert("error".into(), "timed_out".into());
            return fail(
                format!(
                    "error: {} did not finish within its {} s timeout and was killed; make the command faster, or mount it again with a larger timeout_seconds",
                    m.name(),
                    m.timeout.as_secs_f64()
                ),
                meta,
            );
        }
        if o.exit_code != 0 {
            let tail = stderr_tail(&stderr);
            meta.insert("error".into(), "command_failed".into());
            meta.insert("stderr_tail".into(), tail.clone().into());
            if let Some(sig) = o.signal {
                meta.insert("signal".into(), sig.into());
            }
            return fail(
                format!(
                    "error: the command of {} exited with code {}. stderr (last {} bytes at most):\n{tail}",
                    m.name(),
                    o.exit_code,
                    STDERR_TAIL_BYTES
                ),
                meta,
            );
        }
        if o.stdout_head.is_some() {
            meta.insert("error".into(), "output_too_large".into());
            return fail(
                format!(
                    "error: {} wrote {} bytes to stdout, over the {} byte limit of a mounted tool's result (half of --max-output-bytes); return less, or write the data to a file and return its path",
                    m.name(),
                    o.stdout_bytes,
                    s.limits.output_cap / 2
                ),
                meta,
            );
        }
        let shaped = match crate::shape::check(&stdout) {
            Ok(x) => x,
            Err(e) => {
                meta.insert("error".into(), "bad_result_shape".into());
                return fail(format!("error: {e}"), meta);
            }
        };
        let mut blocks = Vec::with_capacity(shaped.content.len());
        for (i, b) in shaped.content.into_iter().enumerate() {
            let ty = b
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match serde_json::from_value::<ContentBlock>(b) {
                Ok(c) => blocks.push(c),
                Err(e) => {
                    meta.insert("error".into(), "bad_result_shape".into());
                    return fail(
                        format!(
                            "error: block {i} (type {ty:?}) is not a content block MCP can carry: {e}. Use a text block {{\"type\":\"text\",\"text\":\"...\"}}, or image/audio (data, mimeType), resource or resource_link. {}",
                            crate::shape::VALID_FORMS
                        ),
                        meta,
                    );
                }
            }
        }
        let r = CallToolResult::success(blocks);
        match shaped.meta {
            // The object form's meta is the result's _meta, exactly as the tool wrote it.
            Some(tool_meta) => r.with_meta(Some(MetaObject(tool_meta))),
            None => r.with_meta(Some(with_id(meta))),
        }
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
        if MOUNT_TOOLS.contains(&name.as_str()) && !self.inner.settings.allow_mount {
            let mut m = serde_json::Map::new();
            m.insert("error".into(), "mount_disabled".into());
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "error: {name} is off on this server: mounting tools is disabled by default. Whoever starts the server can enable it with --allow-mount (e2b exec-server --allow-mount); a mounted tool runs with the sandbox's powers"
            ))])
            .with_meta(Some(self.meta(m)))
            .into());
        }
        if self.inner.router.get(&name).is_none() {
            if let Some(call) = self.inner.mounts.begin_call(&name) {
                let r = match call {
                    Ok(call) => self.call_mounted(call, req.arguments, context).await,
                    Err(e) => self.mount_error(e, "being_unmounted", None),
                };
                return Ok(r.into());
            }
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

/// The most bytes of stderr a failed mounted tool's error shows.
const STDERR_TAIL_BYTES: usize = 2048;

/// The last [`STDERR_TAIL_BYTES`] of `stderr`, as text.
fn stderr_tail(stderr: &[u8]) -> String {
    let start = stderr.len().saturating_sub(STDERR_TAIL_BYTES);
    String::from_utf8_lossy(&stderr[start..]).into_owned()
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
        let caps = if self.inner.settings.allow_mount {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build()
        } else {
            ServerCapabilities::builder().enable_tools().build()
        };
        let mut info = InitializeResult::new(caps);
        info.server_info = Implementation::new(SERVER_NAME, VERSION).with_title("E2B exec server");
        info.instructions = Some(format!(
            "Tools run in sandbox {}. exec_command returns the program's output as text and its exit code in _meta/structuredContent; move files with upload_file/download_file (base64, chunked).{}",
            self.sandbox_id(),
            if self.inner.settings.allow_mount {
                " mount adds a tool at runtime (a shell command; see its description), unmount removes it."
            } else {
                ""
            }
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
        self.inner
            .router
            .get(name)
            .cloned()
            .or_else(|| self.inner.mounts.tool(name))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if self.inner.settings.allow_mount {
            self.inner.listeners.add_peer(context.peer);
        }
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        if context.accepted().tools_list_changed == Some(true) {
            let key = self.inner.listeners.add_sink(context.sink().clone());
            context.cancelled().await;
            self.inner.listeners.remove_sink(key);
        } else {
            context.cancelled().await;
        }
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.dispatch(request, context).await
    }
}
