//! The MCP server: tool list, dispatch, result shapes.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, DiscoverResult,
    Implementation, InitializeRequestParams, InitializeResult, JsonObject, ListToolsResult,
    MetaObject, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::{RunSpec, SandboxBackend};
use crate::compat;
use crate::exec::{self, ExecLimits, ExecOutcome, ProgressFn};
use crate::files;

/// The server's name in `serverInfo`.
pub(crate) const SERVER_NAME: &str = "e2b-exec-server";
/// The crate version.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Arguments of `exec_command` / `execute`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ExecArgs {
    /// The command line, run by the sandbox's shell.
    #[serde(alias = "command")]
    pub(crate) cmd: String,
    /// Timeout in seconds (default 120; 0 = the server's maximum; capped at the maximum). On
    /// timeout the whole process group is killed and exit_code is 124.
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
}

struct Inner {
    backend: Arc<dyn SandboxBackend>,
    settings: ServerSettings,
    tools: Vec<Tool>,
}

/// The MCP handler. Cheap to clone; every session and stateless request shares one sandbox.
#[derive(Clone)]
pub(crate) struct ExecServer {
    inner: Arc<Inner>,
}

fn schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_type::<T>()
}

/// The declared output schema of `exec_command`.
pub(crate) fn exec_output_schema() -> Arc<JsonObject> {
    let v = json!({
        "type": "object",
        "properties": {
            "exit_code": {"type": "integer", "description": "The program's exit code; 128+N when killed by signal N; 124 on timeout; 127/126 not found / not executable."},
            "truncated": {"type": "boolean", "description": "Output exceeded the cap; head and tail were kept with a marker."},
            "sandbox_id": {"type": "string"},
            "timed_out": {"type": "boolean"},
            "signal": {"type": ["integer", "null"], "description": "The signal that killed the program, if any."},
            "duration_ms": {"type": "integer"},
            "stdout_bytes": {"type": "integer", "description": "Bytes the program wrote to stdout (before truncation)."},
            "stderr_bytes": {"type": "integer", "description": "Bytes the program wrote to stderr (before truncation)."}
        },
        "required": ["exit_code", "truncated", "sandbox_id", "timed_out", "signal", "duration_ms", "stdout_bytes", "stderr_bytes"]
    });
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
}

fn tool_list() -> Vec<Tool> {
    let exec_desc = "Run a shell command in the sandbox. content[0].text is exactly what the program wrote (stdout and stderr combined in arrival order); the exit code and other facts are in _meta and structuredContent.";
    let exec_ann = ToolAnnotations::new().destructive(true).open_world(true);
    vec![
        Tool::new("exec_command", exec_desc, schema::<ExecArgs>())
            .with_raw_output_schema(exec_output_schema())
            .with_annotations(exec_ann.clone()),
        Tool::new(
            "execute",
            "Alias of exec_command (same arguments and result), for clients of the Node exec_server.",
            schema::<ExecArgs>(),
        )
        .with_raw_output_schema(exec_output_schema())
        .with_annotations(exec_ann),
        Tool::new(
            "upload_file",
            "Write base64 content (standard, padded, no line breaks) to an absolute path; parents are created; a whole-file write replaces the file atomically. Send large files in chunks with offset or append. Text: 'Written N bytes to P'.",
            schema::<files::UploadArgs>(),
        )
        .with_annotations(ToolAnnotations::new().destructive(true).idempotent(true).open_world(false)),
        Tool::new(
            "download_file",
            "Read a file (or a chunk of it with offset/length) as standard padded base64 without line breaks. _meta has size, sha256 of the chunk and eof.",
            schema::<files::DownloadArgs>(),
        )
        .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true).open_world(false)),
        Tool::new("read", "Read a text file in `cat -n` form (exit_code 1 when missing).", schema::<compat::ReadArgs>())
            .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
        Tool::new("write", "Write a text file, creating parent directories.", schema::<compat::WriteArgs>())
            .with_annotations(ToolAnnotations::new().destructive(true).open_world(false)),
        Tool::new("edit", "Replace text in a file. exit_code 0 ok, 1 not found, 2 several matches, 3 file missing.", schema::<compat::EditArgs>())
            .with_annotations(ToolAnnotations::new().destructive(true).open_world(false)),
        Tool::new("grep", "Search files for a literal string. JSON lines {path,line,text}; exit_code 1 when nothing matches.", schema::<compat::GrepArgs>())
            .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
        Tool::new("glob", "Find paths matching a glob. JSON lines {path,is_dir,size,mtime}.", schema::<compat::GlobArgs>())
            .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
        Tool::new("ls", "List a directory. JSON lines {path,is_dir}; exit_code 1 when it is missing.", schema::<compat::LsArgs>())
            .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
    ]
}

fn parse_args<T: for<'de> Deserialize<'de>>(
    name: &str,
    args: &mut Option<JsonObject>,
) -> Result<T, ErrorData> {
    // Taken, not cloned: an upload chunk's argument is megabytes of base64.
    let v = Value::Object(args.take().unwrap_or_default());
    serde_json::from_value(v)
        .map_err(|e| ErrorData::invalid_params(format!("invalid arguments for {name}: {e}"), None))
}

impl ExecServer {
    pub(crate) fn new(backend: Arc<dyn SandboxBackend>, settings: ServerSettings) -> Self {
        Self {
            inner: Arc::new(Inner {
                backend,
                settings,
                tools: tool_list(),
            }),
        }
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

    fn compat_result(&self, o: compat::CompatOut) -> CallToolResult {
        let mut m = serde_json::Map::new();
        m.insert("exit_code".into(), o.exit_code.into());
        CallToolResult::success(vec![ContentBlock::text(o.text)]).with_meta(Some(self.meta(m)))
    }

    /// The fields shared by `_meta` and `structuredContent` of an exec result.
    fn exec_fields(&self, o: &ExecOutcome) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("exit_code".into(), o.exit_code.into());
        m.insert("truncated".into(), o.truncated.into());
        m.insert("sandbox_id".into(), self.sandbox_id().into());
        m.insert("timed_out".into(), o.timed_out.into());
        m.insert("signal".into(), o.signal.map_or(Value::Null, Value::from));
        m.insert("duration_ms".into(), o.duration_ms.into());
        m.insert("stdout_bytes".into(), o.stdout_bytes.into());
        m.insert("stderr_bytes".into(), o.stderr_bytes.into());
        m
    }

    pub(crate) fn exec_result(&self, o: &ExecOutcome) -> CallToolResult {
        let text = if self.inner.settings.legacy_text {
            legacy_text(o)
        } else {
            crate::output::lossy(&o.output)
        };
        let fields = self.exec_fields(o);
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
        let spec = RunSpec {
            cmd: args.cmd,
            shell: s.shell.clone(),
            login_shell: s.login_shell,
            cwd: args.cwd.or_else(|| s.default_cwd.clone()),
            env: args.env.unwrap_or_default(),
            stdin: args.stdin.map(|t| Bytes::from(t.into_bytes())),
            hard_timeout: None,
        };
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
            s.legacy_text,
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
                self.exec_result(&o)
            }
            Err(e) => self.exec_could_not_run(e.to_string()),
        }
    }

    /// Dispatches one tool call.
    pub(crate) async fn dispatch(
        &self,
        req: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let b = self.inner.backend.as_ref();
        let limits = &self.inner.settings.limits;
        let name = req.name.to_string();
        let mut args = req.arguments;
        Ok(match name.as_str() {
            "exec_command" | "execute" => {
                let a: ExecArgs = parse_args(&name, &mut args)?;
                self.exec_tool(a, &context).await
            }
            "upload_file" => match files::upload(b, parse_args(&name, &mut args)?).await {
                Ok(ok) => self.file_ok(ok),
                Err(e) => self.file_error(e),
            },
            "download_file" => {
                match files::download(
                    b,
                    parse_args(&name, &mut args)?,
                    self.inner.settings.max_chunk_bytes,
                )
                .await
                {
                    Ok(ok) => self.file_ok(ok),
                    Err(e) => self.file_error(e),
                }
            }
            "read" => self.compat_result(compat::read(b, parse_args(&name, &mut args)?).await),
            "write" => self.compat_result(compat::write(b, parse_args(&name, &mut args)?).await),
            "edit" => self.compat_result(compat::edit(b, parse_args(&name, &mut args)?).await),
            "grep" => {
                self.compat_result(compat::grep(b, parse_args(&name, &mut args)?, limits).await)
            }
            "glob" => {
                self.compat_result(compat::glob(b, parse_args(&name, &mut args)?, limits).await)
            }
            "ls" => self.compat_result(compat::ls(b, parse_args(&name, &mut args)?, limits).await),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other}"),
                    None,
                ));
            }
        })
    }

    fn file_ok(&self, ok: files::FileOk) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(ok.text)])
            .with_meta(Some(self.meta(ok.meta)))
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
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.dispatch(request, context).await.map(Into::into)
    }
}
