//! `e2b sandbox ...` (alias `sbx`): manage sandboxes through E2B's API, the cloud
//! (`E2B_API_KEY`) or `e2b serve` (`E2B_API_URL`). The subcommand names are E2B's CLI's.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use e2b::api::models::{OrderDirection, SandboxState};
use e2b::api::{ApiClient, ApiError, ConnectionConfig, ListQuery};
use e2b::{Sandbox, SandboxError};
use serde_json::json;

/// What can stop `e2b sandbox` or `e2b files`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloudCliError {
    /// The API refused or failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The sandbox could not be reached.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// A file operation failed.
    #[error(transparent)]
    Files(#[from] e2b::FilesystemError),
    /// A local file could not be read or written.
    #[error("{0}")]
    Io(String),
    /// The arguments do not make sense together.
    #[error("{0}")]
    Usage(String),
}

/// `e2b sandbox`.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxCommandArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SandboxCmd,
}

/// Output format of the `e2b sandbox` subcommands.
#[derive(Debug, Clone, clap::Args)]
pub struct FormatArgs {
    /// Print JSON (the API's objects) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// `pretty` (default) or `json`, as in E2B's CLI.
    #[arg(short = 'f', long, value_name = "FORMAT")]
    pub format: Option<String>,
}

impl FormatArgs {
    fn json(&self) -> Result<bool, CloudCliError> {
        match self.format.as_deref() {
            None => Ok(self.json),
            Some("json") => Ok(true),
            Some("pretty") => Ok(self.json),
            Some(other) => Err(CloudCliError::Usage(format!(
                "--format {other:?}: use pretty or json"
            ))),
        }
    }
}

/// The `e2b sandbox` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum SandboxCmd {
    /// Create a sandbox and print its id (it keeps running until its timeout or `kill`).
    #[command(visible_alias = "cr")]
    Create {
        /// Template id or alias.
        #[arg(default_value = "base")]
        template: String,
        /// Time to live in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300)]
        timeout: u64,
        /// Metadata `key=value` (repeatable, or comma-separated).
        #[arg(short = 'm', long, value_name = "KEY=VALUE")]
        metadata: Vec<String>,
        /// Environment variable `KEY=VALUE` for every command (repeatable).
        #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
        envs: Vec<String>,
        /// Do not require an access token for envd.
        #[arg(long)]
        insecure: bool,
        /// Deny the sandbox internet access.
        #[arg(long)]
        no_internet: bool,
        /// Pause instead of kill when the timeout expires.
        #[arg(long)]
        auto_pause: bool,
        /// Resume the sandbox when traffic reaches it while paused (with --auto-pause).
        #[arg(long, requires = "auto_pause")]
        auto_resume: bool,
        /// Make the sandbox's ports private: requests to them need the printed traffic access
        /// token in the `e2b-traffic-access-token` header.
        #[arg(long)]
        private_ports: bool,
        /// Output format.
        #[command(flatten)]
        format: FormatArgs,
    },
    /// List sandboxes.
    #[command(visible_alias = "ls")]
    List {
        /// States to list, comma-separated: running, paused.
        #[arg(short = 's', long, default_value = "running")]
        state: String,
        /// Only sandboxes with this metadata `key=value` (repeatable, or comma-separated).
        #[arg(short = 'm', long, value_name = "KEY=VALUE")]
        metadata: Vec<String>,
        /// Only sandboxes of this template (id or alias).
        #[arg(short = 't', long)]
        template: Option<String>,
        /// Only sandboxes started at or after this RFC 3339 time.
        #[arg(long, value_name = "TIME")]
        started_after: Option<String>,
        /// Order by start time: asc or desc.
        #[arg(short = 'o', long)]
        order: Option<String>,
        /// At most this many sandboxes (0 = all); fetched in pages of 100.
        #[arg(short = 'l', long, default_value_t = 1000)]
        limit: usize,
        /// Output format.
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Show a sandbox's details.
    #[command(visible_alias = "in")]
    Info {
        /// The sandbox id.
        id: String,
        /// Output format.
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Kill sandboxes by id, or all matching the filters with `--all`.
    #[command(visible_alias = "kl")]
    Kill {
        /// Sandbox ids.
        ids: Vec<String>,
        /// Kill every sandbox matching --state and --metadata.
        #[arg(short = 'a', long)]
        all: bool,
        /// With --all: states, comma-separated.
        #[arg(short = 's', long, default_value = "running")]
        state: String,
        /// With --all: metadata `key=value` filters.
        #[arg(short = 'm', long, value_name = "KEY=VALUE")]
        metadata: Vec<String>,
        /// Output format: JSON is one `{"sandboxID", "killed"}` per sandbox.
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Set a sandbox to expire SECONDS from now (may shorten it; 0 expires it now).
    Timeout {
        /// The sandbox id.
        id: String,
        /// Seconds from now.
        seconds: u64,
        /// Output format: JSON is `{"sandboxID", "timeout"}`.
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Pause a sandbox (every process freezes).
    #[command(visible_alias = "ps")]
    Pause {
        /// The sandbox id.
        id: String,
        /// Output format: JSON is `{"sandboxID", "paused"}` (`paused` false: it already was).
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Resume a paused sandbox.
    #[command(visible_alias = "rs")]
    Resume {
        /// The sandbox id.
        id: String,
        /// Its time to live from now, in seconds (only ever extended).
        #[arg(long, value_name = "SECONDS", default_value_t = 300)]
        timeout: u64,
        /// Output format: JSON is the API's sandbox and `resumed` (false: it was running).
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Connect to a sandbox (resuming it if paused, extending its timeout) and print how to
    /// reach its envd, e.g. for `e2b run --sandbox-id`.
    #[command(visible_alias = "cn")]
    Connect {
        /// The sandbox id.
        id: String,
        /// Its time to live from now, in seconds (only ever extended).
        #[arg(long, value_name = "SECONDS", default_value_t = 300)]
        timeout: u64,
        /// Output format.
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Show a sandbox's CPU, memory and disk samples.
    #[command(visible_alias = "mt")]
    Metrics {
        /// The sandbox id.
        id: String,
        /// Output format.
        #[command(flatten)]
        format: FormatArgs,
    },
}

fn pairs(items: &[String], what: &str) -> Result<BTreeMap<String, String>, CloudCliError> {
    let mut out = BTreeMap::new();
    for item in items.iter().flat_map(|s| s.split(',')) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        match item.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                out.insert(k.to_owned(), v.to_owned());
            }
            _ => {
                return Err(CloudCliError::Usage(format!(
                    "{what} {item:?} is not KEY=VALUE"
                )));
            }
        }
    }
    Ok(out)
}

fn states(s: &str) -> Result<Vec<SandboxState>, CloudCliError> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.to_ascii_lowercase().as_str() {
            "running" => Ok(SandboxState::Running),
            "paused" => Ok(SandboxState::Paused),
            other => Err(CloudCliError::Usage(format!(
                "--state {other:?}: use running, paused or running,paused"
            ))),
        })
        .collect()
}

fn print_json(v: &impl serde::Serialize) -> Result<(), CloudCliError> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| CloudCliError::Io(format!("cannot print JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

/// Prints rows as an aligned table with a header.
fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    let line = |cells: Vec<&str>| -> String {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for row in rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
}

fn print_fields(fields: &[(&str, String)]) {
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in fields {
        println!("{k:<width$}  {v}");
    }
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

fn metadata_json(m: &Option<BTreeMap<String, String>>) -> String {
    m.as_ref()
        .filter(|m| !m.is_empty())
        .map(|m| serde_json::to_string(m).unwrap_or_default())
        .unwrap_or_default()
}

/// The API client for the CLI: the SDKs' environment variables.
pub fn api_client() -> Result<ApiClient, CloudCliError> {
    Ok(ApiClient::new(ConnectionConfig::from_env())?)
}

/// Runs `e2b sandbox ...`; returns the exit code.
pub async fn sandbox(args: SandboxCommandArgs) -> Result<i32, CloudCliError> {
    let api = api_client()?;
    match args.command {
        SandboxCmd::Create {
            template,
            timeout,
            metadata,
            envs,
            insecure,
            no_internet,
            auto_pause,
            auto_resume,
            private_ports,
            format,
        } => {
            let json = format.json()?;
            let mut b = Sandbox::builder(template)
                .api(api.clone())
                .timeout(Duration::from_secs(timeout))
                .secure(!insecure)
                .allow_internet_access(!no_internet)
                .envs(pairs(&envs, "--env")?);
            for (k, v) in pairs(&metadata, "--metadata")? {
                b = b.metadata(k, v);
            }
            if auto_pause {
                b = b.auto_pause(true);
            }
            if auto_resume {
                b = b.auto_resume(true);
            }
            if private_ports {
                b = b.allow_public_traffic(false);
            }
            let sbx = b.create().await?;
            let info = sbx.api_info().cloned();
            if json {
                print_json(&info)?;
            } else {
                let mut fields = vec![
                    ("Sandbox ID", sbx.id().to_owned()),
                    ("Envd version", sbx.envd_version().to_string()),
                    ("Envd URL", sbx.url().to_owned()),
                ];
                if let Some(i) = &info {
                    fields.insert(1, ("Template ID", i.template_id.clone()));
                }
                if let Some(t) = sbx.traffic_access_token() {
                    fields.push(("Traffic access token", t.to_owned()));
                }
                print_fields(&fields);
            }
            Ok(0)
        }
        SandboxCmd::List {
            state,
            metadata,
            template,
            started_after,
            order,
            limit,
            format,
        } => {
            let json = format.json()?;
            let mut q = ListQuery::new();
            for s in states(&state)? {
                q = q.state(s);
            }
            for (k, v) in pairs(&metadata, "--metadata")? {
                q = q.metadata(k, v);
            }
            if let Some(t) = template {
                q = q.template(t);
            }
            if let Some(t) = started_after {
                q = q.started_after(t);
            }
            let order = match order.as_deref() {
                None => None,
                Some("asc") => Some(OrderDirection::Asc),
                Some("desc") => Some(OrderDirection::Desc),
                Some(o) => {
                    return Err(CloudCliError::Usage(format!(
                        "--order {o:?}: use asc or desc"
                    )));
                }
            };
            if let Some(o) = order {
                q = q.order(o);
            }
            q = q.limit(if limit == 0 {
                100
            } else {
                limit.min(100) as u32
            });
            let max = (limit > 0).then_some(limit);
            let mut sandboxes = api.list(q).collect(max).await?;
            if order.is_none() {
                // E2B's CLI shows the oldest first unless told otherwise.
                sandboxes.sort_by(|a, b| {
                    (&a.started_at, &a.sandbox_id).cmp(&(&b.started_at, &b.sandbox_id))
                });
            }
            if json {
                return print_json(&sandboxes).map(|()| 0);
            }
            if sandboxes.is_empty() {
                println!("No sandboxes found");
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = sandboxes
                .iter()
                .map(|s| {
                    vec![
                        s.sandbox_id.clone(),
                        s.template_id.clone(),
                        s.alias.clone().unwrap_or_default(),
                        s.started_at.clone(),
                        s.end_at.clone(),
                        capitalise(s.state.as_str()),
                        s.cpu_count.to_string(),
                        s.memory_mb.to_string(),
                        s.envd_version.clone(),
                        metadata_json(&s.metadata),
                    ]
                })
                .collect();
            print_table(
                &[
                    "Sandbox ID",
                    "Template ID",
                    "Alias",
                    "Started at",
                    "End at",
                    "State",
                    "vCPUs",
                    "RAM MiB",
                    "Envd version",
                    "Metadata",
                ],
                &rows,
            );
            Ok(0)
        }
        SandboxCmd::Info { id, format } => {
            let json = format.json()?;
            let d = match api.get_sandbox(&id).await {
                Ok(d) => d,
                Err(ApiError::NotFound { .. }) => {
                    eprintln!("Sandbox {id} wasn't found");
                    return Ok(1);
                }
                Err(e) => return Err(e.into()),
            };
            if json {
                return print_json(&d).map(|()| 0);
            }
            let opt = |v: &Option<String>| v.clone().unwrap_or_default();
            print_fields(&[
                ("Sandbox ID", d.sandbox_id.clone()),
                ("Template ID", d.template_id.clone()),
                ("Alias", opt(&d.alias)),
                ("State", capitalise(d.state.as_str())),
                ("Started at", d.started_at.clone()),
                ("End at", d.end_at.clone()),
                ("vCPUs", d.cpu_count.to_string()),
                ("RAM MiB", d.memory_mb.to_string()),
                ("Envd version", d.envd_version.clone()),
                (
                    "Internet access",
                    d.allow_internet_access
                        .map(|b| b.to_string())
                        .unwrap_or_default(),
                ),
                (
                    "Lifecycle",
                    d.lifecycle
                        .as_ref()
                        .map(|l| serde_json::to_string(l).unwrap_or_default())
                        .unwrap_or_default(),
                ),
                (
                    "Network",
                    d.network
                        .as_ref()
                        .map(|n| serde_json::to_string(n).unwrap_or_default())
                        .unwrap_or_default(),
                ),
                ("Sandbox domain", opt(&d.domain)),
                ("Metadata", metadata_json(&d.metadata)),
            ]);
            Ok(0)
        }
        SandboxCmd::Kill {
            ids,
            all,
            state,
            metadata,
            format,
        } => {
            let json = format.json()?;
            let ids = if all {
                if !ids.is_empty() {
                    return Err(CloudCliError::Usage(
                        "give sandbox ids or --all, not both".into(),
                    ));
                }
                let mut q = ListQuery::new();
                for s in states(&state)? {
                    q = q.state(s);
                }
                for (k, v) in pairs(&metadata, "--metadata")? {
                    q = q.metadata(k, v);
                }
                let found = api.list(q).collect(None).await?;
                if found.is_empty() {
                    if json {
                        return print_json(&json!([])).map(|()| 0);
                    }
                    println!("No {state} sandboxes");
                    return Ok(0);
                }
                found.into_iter().map(|s| s.sandbox_id).collect()
            } else if ids.is_empty() {
                return Err(CloudCliError::Usage(
                    "name the sandboxes to kill, or use --all".into(),
                ));
            } else {
                ids
            };
            let mut missing = 0;
            let mut results = Vec::with_capacity(ids.len());
            for id in &ids {
                let killed = api.kill_sandbox(id).await?;
                if !killed {
                    missing += 1;
                }
                if json {
                    results.push(json!({ "sandboxID": id, "killed": killed }));
                } else if killed {
                    println!("Sandbox {id} has been killed");
                } else {
                    eprintln!("Sandbox {id} wasn't found");
                }
            }
            if json {
                print_json(&results)?;
            } else if all {
                println!("Killed {} {state} sandboxes", ids.len() - missing);
            }
            Ok(i32::from(missing > 0))
        }
        SandboxCmd::Timeout {
            id,
            seconds,
            format,
        } => {
            let json = format.json()?;
            api.set_timeout(&id, Duration::from_secs(seconds)).await?;
            if json {
                return print_json(&json!({ "sandboxID": id, "timeout": seconds })).map(|()| 0);
            }
            println!("Sandbox {id} now expires in {seconds} s");
            Ok(0)
        }
        SandboxCmd::Pause { id, format } => {
            let json = format.json()?;
            let paused = api.pause_sandbox(&id, true).await?;
            if json {
                return print_json(&json!({ "sandboxID": id, "paused": paused })).map(|()| 0);
            }
            if paused {
                println!("Sandbox {id} has been paused");
            } else {
                println!("Sandbox {id} is already paused");
            }
            Ok(0)
        }
        SandboxCmd::Resume {
            id,
            timeout,
            format,
        } => {
            let json = format.json()?;
            let c = api
                .resume_sandbox(&id, Duration::from_secs(timeout))
                .await?;
            if json {
                let mut out = serde_json::to_value(&c.sandbox)
                    .map_err(|e| CloudCliError::Io(format!("cannot print JSON: {e}")))?;
                if let Some(o) = out.as_object_mut() {
                    o.insert("resumed".into(), json!(c.resumed));
                }
                return print_json(&out).map(|()| 0);
            }
            if c.resumed {
                println!("Sandbox {id} has been resumed");
            } else {
                println!("Sandbox {id} is already running");
            }
            Ok(0)
        }
        SandboxCmd::Connect {
            id,
            timeout,
            format,
        } => {
            let json = format.json()?;
            let sbx = Sandbox::connect_by_id_with(&api, &id, Duration::from_secs(timeout)).await?;
            let token = sbx.connection().access_token().map(str::to_owned);
            if json {
                return print_json(&json!({
                    "sandboxID": sbx.id(),
                    "envdUrl": sbx.url(),
                    "envdVersion": sbx.envd_version().to_string(),
                    "envdAccessToken": token,
                }))
                .map(|()| 0);
            }
            println!("E2B_SANDBOX_ID={}", sbx.id());
            println!("E2B_SANDBOX_URL={}", sbx.url());
            println!("E2B_ENVD_VERSION={}", sbx.envd_version());
            if let Some(t) = token {
                println!("E2B_ACCESS_TOKEN={t}");
            }
            Ok(0)
        }
        SandboxCmd::Metrics { id, format } => {
            let json = format.json()?;
            let m = api.sandbox_metrics(&id, None, None).await?;
            if json {
                return print_json(&m).map(|()| 0);
            }
            const MIB: i64 = 1024 * 1024;
            for s in &m {
                println!(
                    "{}  CPU: {:.1}% / {} Cores | Memory: {} / {} MiB | Disk: {} / {} MiB",
                    s.timestamp,
                    s.cpu_used_pct,
                    s.cpu_count,
                    s.mem_used / MIB,
                    s.mem_total / MIB,
                    s.disk_used / MIB,
                    s.disk_total / MIB
                );
            }
            if m.is_empty() {
                println!("No metrics yet");
            }
            Ok(0)
        }
    }
}

/// Opens an existing sandbox by id through the API (resuming it if paused) for `e2b run`,
/// `e2b acp` and `e2b files`: connected by its envd endpoint, so the command's end does not
/// kill the sandbox.
pub async fn open_by_id(id: &str) -> Result<Sandbox, SandboxError> {
    let api = ApiClient::new(ConnectionConfig::from_env())?;
    if api.config().is_debug() {
        // As the SDKs in debug mode: no API call; the debug envd as sandbox `id`.
        return Sandbox::connect_by_id_with(&api, id, e2b::api::DEFAULT_SANDBOX_TIMEOUT).await;
    }
    let connected = api
        .connect_sandbox(id, e2b::api::DEFAULT_SANDBOX_TIMEOUT)
        .await?;
    let endpoint = e2b::endpoint_for(api.config(), &connected.sandbox)?;
    Sandbox::connect(endpoint).await
}

/// `e2b exec-server`. With `--sandbox-id ID` on the command line, no `--sandbox URL` on it, and
/// E2B's API configured (`E2B_API_KEY`, or `E2B_DEBUG=true`), the tools run in that existing
/// sandbox of E2B's cloud or `e2b serve`: it is connected through the API (resumed if paused, at
/// least 300 s left; `E2B_SANDBOX_URL` in the environment is then the API's envd address, as
/// for the SDKs) and keeps running afterwards. Otherwise as before: `--sandbox URL` (or
/// `E2B_SANDBOX_URL`) or the embedded local sandbox, and `--sandbox-id` (or `SANDBOX_ID`) only
/// names the sandbox in reports.
///
/// # Errors
///
/// What the exec server returns; an API sandbox that cannot be connected is
/// [`e2b_exec_server::ExecServerError::Sandbox`] naming the id.
///
/// # Cancel safety
///
/// Dropping the future stops serving.
pub async fn exec_server(
    args: e2b_exec_server::ExecServerArgs,
) -> Result<(), e2b_exec_server::ExecServerError> {
    match exec_server_api_id(&args) {
        Some(id) => {
            e2b_exec_server::run_with_sandbox(args, || async move {
                open_by_id(&id).await.map_err(|e| {
                    e2b_exec_server::ExecServerError::Sandbox(format!(
                        "sandbox {id} through E2B's API: {e}"
                    ))
                })
            })
            .await
        }
        None => e2b_exec_server::run(args).await,
    }
}

/// The id of the existing sandbox `e2b exec-server` works in through E2B's API, if this command
/// line asks for one (see [`exec_server`]).
pub(crate) fn exec_server_api_id(args: &e2b_exec_server::ExecServerArgs) -> Option<String> {
    let argv: Vec<String> = std::env::args().collect();
    let given = |flag: &str| {
        argv.iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
    };
    let on_command_line = given("--sandbox-id") && !given("--sandbox");
    let config = ConnectionConfig::from_env();
    let id = api_sandbox_id(args, on_command_line, &config);
    if id.is_none()
        && on_command_line
        && let Some(note) = label_only_note(args)
    {
        eprintln!("{note}");
    }
    id
}

/// What `e2b exec-server --sandbox-id ID` says when no API is configured: the id then only
/// names the local sandbox, which a user who meant an existing sandbox must not miss.
fn label_only_note(args: &e2b_exec_server::ExecServerArgs) -> Option<String> {
    let id = args
        .sandbox_id
        .as_deref()
        .map(str::trim)
        .filter(|i| !i.is_empty())?;
    Some(format!(
        "e2b exec-server: --sandbox-id {id} only names the local sandbox in reports: E2B_API_KEY \
         is not set, so no existing sandbox is looked up. To work in sandbox {id} of E2B's cloud \
         or `e2b serve`, set E2B_API_KEY (and E2B_API_URL, E2B_SANDBOX_URL for e2b serve)"
    ))
}

/// The sandbox `e2b exec-server` opens through E2B's API, if any (see [`exec_server`]):
/// `explicit` = `--sandbox-id` and no `--sandbox` on the command line.
fn api_sandbox_id(
    args: &e2b_exec_server::ExecServerArgs,
    explicit: bool,
    config: &ConnectionConfig,
) -> Option<String> {
    let id = args.sandbox_id.as_deref().map(str::trim).unwrap_or("");
    (explicit && !id.is_empty() && config.has_api()).then(|| id.to_owned())
}

#[cfg(test)]
mod exec_server_tests {
    use super::*;

    #[test]
    fn an_id_that_only_labels_the_local_sandbox_says_so() {
        let mut args = e2b_exec_server::ExecServerArgs::default();
        assert_eq!(label_only_note(&args), None);
        args.sandbox_id = Some("abc".into());
        let note = label_only_note(&args).unwrap_or_default();
        assert!(
            note.contains("--sandbox-id abc only names the local sandbox")
                && note.contains("set E2B_API_KEY"),
            "{note}"
        );
    }

    #[test]
    fn only_an_explicit_id_with_an_api_key_goes_through_the_api() {
        let mut args = e2b_exec_server::ExecServerArgs::default();
        args.sandbox_id = Some("abc".into());
        // E2B_SANDBOX_URL from the environment fills --sandbox: the API's envd address then.
        args.sandbox = Some("http://127.0.0.1:49983".into());
        let keyed = ConnectionConfig::default().api_key("e2b_00");
        let bare = ConnectionConfig::default();
        assert_eq!(api_sandbox_id(&args, true, &keyed).as_deref(), Some("abc"));
        assert_eq!(
            api_sandbox_id(&args, false, &keyed),
            None,
            "SANDBOX_ID from the environment, or --sandbox URL on the command line"
        );
        assert_eq!(
            api_sandbox_id(&args, true, &bare),
            None,
            "no API configured"
        );
    }
}
