//! Tools mounted at runtime (`mount` / `unmount`, with `--allow-mount`): the validated
//! definitions, the mount table with each mount's calls in flight, and the broadcaster of
//! `notifications/tools/list_changed` to every connected client.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::RoleServer;
use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use rmcp::service::{Peer, SubscriptionSink};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The default bound on mounted tools per server (`--max-mounts`).
pub(crate) const DEFAULT_MAX_MOUNTS: usize = 64;
/// The largest definition (name, description, schema and command, as JSON) accepted.
pub(crate) const MAX_DEFINITION_BYTES: usize = 64 * 1024;
/// The longest tool name (MCP tool-name rules: 1 to 128 characters of `A-Za-z0-9_.-`).
pub(crate) const MAX_NAME_CHARS: usize = 128;
/// The time limit of one call of a mounted tool when `timeout_seconds` is not given.
pub(crate) const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The shortest `timeout_seconds` accepted.
pub(crate) const MIN_CALL_TIMEOUT_SECS: f64 = 1.0;
/// The default grace period of `unmount` before calls still in flight are killed.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// The longest `grace_seconds` accepted.
pub(crate) const MAX_GRACE_SECS: f64 = 60.0;
/// The largest arguments of one call (they are also passed in the `TOOL_ARGS` environment
/// variable, and Linux limits one variable to 128 KiB).
pub(crate) const MAX_CALL_ARGS_BYTES: usize = 96 * 1024;
/// The most clients kept for list-change notifications (closed ones are pruned first).
const MAX_PEERS: usize = 1024;
/// How long one client may take to accept a notification.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(2);

/// The `_meta` key of a mounted tool's definition (in `tools/list`) that carries its mount id.
pub(crate) const TOOL_META_MOUNT_ID: &str = "e2b/mount_id";

/// One mounted tool.
pub(crate) struct Mount {
    /// `dyn-<n>`.
    pub(crate) id: String,
    /// The tool's definition as listed.
    pub(crate) tool: Tool,
    /// The shell line run per call.
    pub(crate) command: String,
    /// The time limit of one call.
    pub(crate) timeout: Duration,
    /// The compiled argument schema.
    pub(crate) validator: jsonschema::Validator,
    /// Seconds since the Unix epoch when it was mounted.
    pub(crate) created_unix: u64,
    /// Calls made (accepted) so far.
    pub(crate) calls: AtomicU64,
    draining: AtomicBool,
    in_flight: watch::Sender<usize>,
    /// Cancelled when `unmount`'s grace period ends: calls still running are killed.
    pub(crate) kill: CancellationToken,
}

impl Mount {
    /// The tool's name.
    pub(crate) fn name(&self) -> &str {
        &self.tool.name
    }

    /// Calls running now.
    pub(crate) fn in_flight(&self) -> usize {
        *self.in_flight.borrow()
    }

    /// `"active"`, or `"draining"` while an `unmount` waits for its calls.
    pub(crate) fn state(&self) -> &'static str {
        if self.draining.load(Ordering::SeqCst) {
            "draining"
        } else {
            "active"
        }
    }

    /// The entry of `inspect`'s mounts section.
    pub(crate) fn describe(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "name": self.name(),
            "description": self.tool.description,
            "created": self.created_unix,
            "in_flight": self.in_flight(),
            "state": self.state(),
            "calls": self.calls.load(Ordering::Relaxed),
            "command": self.command,
            "timeout_seconds": self.timeout.as_secs_f64(),
            "input_schema": Value::Object((*self.tool.input_schema).clone()),
        })
    }
}

/// A call of a mounted tool in flight; dropping it ends the call.
pub(crate) struct InFlight {
    pub(crate) mount: Arc<Mount>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.mount
            .in_flight
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The mount table of one server.
pub(crate) struct Mounts {
    /// `--allow-mount`.
    pub(crate) enabled: bool,
    /// `--max-mounts`.
    pub(crate) max: usize,
    next: AtomicU64,
    table: Mutex<Vec<Arc<Mount>>>,
}

/// A validated definition, ready to be registered.
pub(crate) struct Definition {
    pub(crate) tool: Tool,
    pub(crate) command: String,
    pub(crate) timeout: Duration,
    pub(crate) validator: jsonschema::Validator,
}

impl Mounts {
    pub(crate) fn new(enabled: bool, max: usize) -> Self {
        Self {
            enabled,
            max,
            next: AtomicU64::new(1),
            table: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Mount>>> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every mount, oldest first.
    pub(crate) fn list(&self) -> Vec<Arc<Mount>> {
        self.lock().clone()
    }

    /// The definitions of the mounted tools.
    pub(crate) fn tools(&self) -> Vec<Tool> {
        self.lock().iter().map(|m| m.tool.clone()).collect()
    }

    /// The definition of the mounted tool `name`.
    pub(crate) fn tool(&self, name: &str) -> Option<Tool> {
        self.lock()
            .iter()
            .find(|m| m.name() == name)
            .map(|m| m.tool.clone())
    }

    /// Registers `def` unless its name is taken (checked again under the lock) or the table is
    /// full.
    pub(crate) fn insert(&self, def: Definition) -> Result<Arc<Mount>, String> {
        let mut t = self.lock();
        if let Some(m) = t.iter().find(|m| m.name() == def.tool.name) {
            return Err(format!(
                "a tool named {:?} is already mounted as {}; pick another name, or unmount(id=\"{}\") first",
                m.name(),
                m.id,
                m.id
            ));
        }
        if t.len() >= self.max {
            return Err(format!(
                "this server already has {} mounted tools, its limit (--max-mounts {}); unmount one you no longer need (inspect lists them under \"mounts\") and mount again",
                t.len(),
                self.max
            ));
        }
        let id = format!("dyn-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let mut tool = def.tool;
        let mut meta = tool.meta.take().map(|m| m.0).unwrap_or_default();
        meta.insert(TOOL_META_MOUNT_ID.into(), id.clone().into());
        tool.meta = Some(MetaObject(meta));
        let (in_flight, _) = watch::channel(0usize);
        let m = Arc::new(Mount {
            id,
            tool,
            command: def.command,
            timeout: def.timeout,
            validator: def.validator,
            created_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            calls: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            in_flight,
            kill: CancellationToken::new(),
        });
        t.push(m.clone());
        Ok(m)
    }

    /// Starts a call of the mounted tool `name`: `None` when there is no such tool, an error
    /// when it is being unmounted.
    pub(crate) fn begin_call(&self, name: &str) -> Option<Result<InFlight, String>> {
        let t = self.lock();
        let m = t.iter().find(|m| m.name() == name)?;
        if m.draining.load(Ordering::SeqCst) {
            return Some(Err(format!(
                "the tool {name:?} ({}) is being unmounted and accepts no new calls; it disappears from tools/list when its calls in flight have ended. Mount it again (under a new name, or this one once it is gone) if you still need it",
                m.id
            )));
        }
        m.in_flight.send_modify(|n| *n += 1);
        m.calls.fetch_add(1, Ordering::Relaxed);
        Some(Ok(InFlight { mount: m.clone() }))
    }

    /// Marks mount `id` as draining (no new calls) and returns it.
    pub(crate) fn start_drain(&self, id: &str) -> Result<Arc<Mount>, String> {
        let t = self.lock();
        let Some(m) = t.iter().find(|m| m.id == id) else {
            let live = if t.is_empty() {
                "none mounted".to_owned()
            } else {
                t.iter()
                    .map(|m| format!("{} ({})", m.id, m.name()))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(format!(
                "no mount has the id {id:?}; live mounts: {live}. Pass one of those ids (the mount_id that mount returned), e.g. unmount(id=\"dyn-1\")"
            ));
        };
        if m.draining.swap(true, Ordering::SeqCst) {
            return Err(format!(
                "{id} ({}) is already being unmounted by another call; it disappears from tools/list once that call returns",
                m.name()
            ));
        }
        Ok(m.clone())
    }

    /// Removes mount `id` from the table.
    pub(crate) fn remove(&self, id: &str) {
        self.lock().retain(|m| m.id != id);
    }
}

/// What came of draining a mount.
pub(crate) struct Drained {
    /// Calls in flight when the unmount began.
    pub(crate) in_flight_at_start: usize,
    /// Calls that ended by themselves within the grace period.
    pub(crate) finished: usize,
    /// Calls killed when the grace period ended.
    pub(crate) killed: usize,
    /// Calls that did not confirm their end even after the kill (should be 0).
    pub(crate) unconfirmed: usize,
}

/// Waits up to `grace` for `m`'s calls to end, then kills the rest and waits (bounded) for
/// them to go.
pub(crate) async fn drain(m: &Mount, grace: Duration) -> Drained {
    let at_start = m.in_flight();
    let mut rx = m.in_flight.subscribe();
    let _ = tokio::time::timeout(grace, rx.wait_for(|n| *n == 0)).await;
    let left = m.in_flight();
    let mut unconfirmed = 0;
    if left > 0 {
        m.kill.cancel();
        let bound = crate::exec::DRAIN_AFTER_KILL + Duration::from_secs(2);
        let _ = tokio::time::timeout(bound, rx.wait_for(|n| *n == 0)).await;
        unconfirmed = m.in_flight();
    }
    Drained {
        in_flight_at_start: at_start,
        finished: at_start.saturating_sub(left),
        killed: left,
        unconfirmed,
    }
}

/// The limits a definition is checked against.
pub(crate) struct DefLimits {
    pub(crate) max_timeout: Duration,
}

fn name_ok(name: &str) -> Result<(), String> {
    let n = name.chars().count();
    let bad: Vec<char> = name
        .chars()
        .filter(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .collect();
    if n == 0 || n > MAX_NAME_CHARS || !bad.is_empty() {
        let why = if n == 0 {
            "it is empty".to_owned()
        } else if n > MAX_NAME_CHARS {
            format!("it is {n} characters long")
        } else {
            let mut shown: Vec<String> = bad.iter().map(|c| format!("{c:?}")).collect();
            shown.dedup();
            shown.truncate(5);
            format!("it contains {}", shown.join(", "))
        };
        return Err(format!(
            "invalid tool name {name:?}: {why}. A tool name is 1 to {MAX_NAME_CHARS} characters of A-Z, a-z, 0-9, '_', '-' and '.' (the MCP tool-name rules), e.g. \"word_count\""
        ));
    }
    Ok(())
}

const SCHEMA_EXAMPLE: &str =
    r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}"#;

/// The `$schema` values accepted (the drafts the validator knows).
const KNOWN_DIALECTS: &[&str] = &[
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema",
    "http://json-schema.org/draft-06/schema",
    "http://json-schema.org/draft-04/schema",
];

fn dialect_ok(d: &str) -> bool {
    let d = d.trim_end_matches('#');
    KNOWN_DIALECTS.iter().any(|k| {
        *k == d
            || k.strip_prefix("http://")
                .is_some_and(|rest| d == format!("https://{rest}"))
    })
}

/// Every `$ref` in `v` that does not point inside the schema (`#...`).
fn external_ref(v: &Value) -> Option<String> {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref")
                && !r.starts_with('#')
            {
                return Some(r.clone());
            }
            m.values().find_map(external_ref)
        }
        Value::Array(a) => a.iter().find_map(external_ref),
        _ => None,
    }
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The deepest nesting of an input schema accepted.
const MAX_SCHEMA_DEPTH: usize = 32;

/// Checks and compiles an input schema.
fn schema_ok(schema: &Value) -> Result<(JsonObject, jsonschema::Validator), String> {
    let Value::Object(obj) = schema else {
        let hint = if let Value::String(s) = schema
            && s.trim_start().starts_with('{')
        {
            " (you sent the schema as a string of JSON: send the object itself, not a string)"
        } else {
            ""
        };
        return Err(format!(
            "input_schema must be a JSON Schema object, got {}{hint}. Send e.g. {SCHEMA_EXAMPLE}",
            crate::shape::kind(schema)
        ));
    };
    match obj.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => {
            return Err(format!(
                "input_schema must have \"type\": \"object\" (a tool's arguments are an object), got \"type\": {other}. Send e.g. {SCHEMA_EXAMPLE}"
            ));
        }
        None => {
            return Err(format!(
                "input_schema has no \"type\": add \"type\": \"object\" (a tool's arguments are an object), e.g. {SCHEMA_EXAMPLE}"
            ));
        }
    }
    if let Some(d) = obj.get("$schema") {
        match d.as_str() {
            Some(d) if dialect_ok(d) => {}
            _ => {
                return Err(format!(
                    "input_schema's \"$schema\" is {d}, a dialect this server cannot validate; drop \"$schema\" (2020-12 is the default) or use one of: {}",
                    KNOWN_DIALECTS.join(", ")
                ));
            }
        }
    }
    if depth(schema) > MAX_SCHEMA_DEPTH {
        return Err(format!(
            "input_schema is nested deeper than {MAX_SCHEMA_DEPTH} levels; flatten it"
        ));
    }
    if let Some(r) = external_ref(schema) {
        return Err(format!(
            "input_schema refers to {r:?}, outside the schema; external references are not fetched. Put the definition under \"$defs\" and refer to it as \"#/$defs/name\""
        ));
    }
    if let Err(e) = jsonschema::meta::validate(schema) {
        let at = e.instance_path().to_string();
        return Err(format!(
            "input_schema is not a valid JSON Schema: {e} (at {}). Fix that keyword, e.g. {SCHEMA_EXAMPLE}",
            if at.is_empty() { "the root".into() } else { at }
        ));
    }
    let validator = jsonschema::options()
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .build(schema)
        .map_err(|e| {
            format!("input_schema cannot be compiled: {e}. Fix it, e.g. {SCHEMA_EXAMPLE}")
        })?;
    Ok((obj.clone(), validator))
}

/// Validates a `mount` request. `taken(name)` says whether a tool of that name exists
/// (built-in or mounted) and what it is.
pub(crate) fn validate(
    args: &crate::server::MountArgs,
    taken: impl Fn(&str) -> Option<String>,
    limits: &DefLimits,
) -> Result<Definition, String> {
    name_ok(&args.name)?;
    if let Some(what) = taken(&args.name) {
        return Err(format!(
            "the name {:?} is taken by {what}; mount the tool under another name, e.g. \"{}_2\" or \"my_{}\"",
            args.name, args.name, args.name
        ));
    }
    let size = args.name.len()
        + args.description.len()
        + args.command.len()
        + args.input_schema.to_string().len();
    if size > MAX_DEFINITION_BYTES {
        return Err(format!(
            "the definition is {size} bytes, over the limit of {MAX_DEFINITION_BYTES}; put long logic in a script file (upload_file or write) and make `command` run it"
        ));
    }
    if args.description.trim().is_empty() {
        return Err(
            "description is empty; say what the tool does and what it returns (the model reads it in tools/list)".into(),
        );
    }
    if args.command.trim().is_empty() {
        return Err("command is empty; give the shell line that does the work, e.g. \"python3 /tmp/tool.py\" (the arguments arrive as JSON on stdin and in $TOOL_ARGS)".into());
    }
    let max = limits.max_timeout.as_secs_f64();
    let timeout = match args.timeout_seconds {
        None => DEFAULT_CALL_TIMEOUT.min(limits.max_timeout),
        Some(t) if t.is_finite() && (MIN_CALL_TIMEOUT_SECS..=max).contains(&t) => {
            Duration::from_secs_f64(t)
        }
        Some(t) => {
            return Err(format!(
                "timeout_seconds is {t}, outside the bounds: give a number from {MIN_CALL_TIMEOUT_SECS} to {max} seconds (the server's --max-timeout), or leave it out for {} s",
                DEFAULT_CALL_TIMEOUT.min(limits.max_timeout).as_secs_f64()
            ));
        }
    };
    let (schema, validator) = schema_ok(&args.input_schema)?;
    let tool = Tool::new(
        args.name.clone(),
        args.description.clone(),
        Arc::new(schema),
    )
    .with_annotations(
        ToolAnnotations::new()
            .destructive(true)
            .open_world(true)
            .read_only(false),
    );
    Ok(Definition {
        tool,
        command: args.command.clone(),
        timeout,
        validator,
    })
}

/// The connected clients that hear `notifications/tools/list_changed`: legacy sessions (their
/// peer, from `notifications/initialized`) and 2026-07-28 `subscriptions/listen` streams.
#[derive(Default)]
pub(crate) struct Listeners {
    peers: Mutex<Vec<Peer<RoleServer>>>,
    sinks: Mutex<Vec<(u64, SubscriptionSink)>>,
    next: AtomicU64,
}

impl Listeners {
    /// Adds a legacy session's peer (closed ones are pruned first).
    pub(crate) fn add_peer(&self, peer: Peer<RoleServer>) {
        let mut p = self
            .peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        p.retain(|x| !x.is_transport_closed());
        if p.len() >= MAX_PEERS {
            p.remove(0);
        }
        p.push(peer);
    }

    /// Adds a listen stream's sink; returns the key that removes it.
    pub(crate) fn add_sink(&self, sink: SubscriptionSink) -> u64 {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let mut s = self
            .sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.len() >= MAX_PEERS {
            s.remove(0);
        }
        s.push((key, sink));
        key
    }

    /// Removes a listen stream's sink.
    pub(crate) fn remove_sink(&self, key: u64) {
        self.sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(k, _)| *k != key);
    }

    /// Sends `notifications/tools/list_changed` to every client (each bounded in time);
    /// returns how many accepted it.
    pub(crate) async fn tool_list_changed(&self) -> usize {
        let peers: Vec<Peer<RoleServer>> = {
            let mut p = self
                .peers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            p.retain(|x| !x.is_transport_closed());
            p.clone()
        };
        let sinks: Vec<SubscriptionSink> = self
            .sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(_, s)| s.clone())
            .collect();
        let a = futures::future::join_all(peers.iter().map(|p| async move {
            matches!(
                tokio::time::timeout(NOTIFY_TIMEOUT, p.notify_tool_list_changed()).await,
                Ok(Ok(()))
            )
        }));
        let b = futures::future::join_all(sinks.iter().map(|s| async move {
            matches!(
                tokio::time::timeout(NOTIFY_TIMEOUT, s.notify_tool_list_changed()).await,
                Ok(Ok(()))
            )
        }));
        let (a, b) = futures::future::join(a, b).await;
        a.into_iter().chain(b).filter(|ok| *ok).count()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::server::MountArgs;

    fn args(name: &str, schema: Value, timeout: Option<f64>) -> MountArgs {
        MountArgs {
            name: name.into(),
            description: "d".into(),
            input_schema: schema,
            command: "cat".into(),
            timeout_seconds: timeout,
        }
    }

    fn limits() -> DefLimits {
        DefLimits {
            max_timeout: Duration::from_secs(3600),
        }
    }

    fn check(a: &MountArgs) -> Result<Definition, String> {
        validate(
            a,
            |n| (n == "exec_command").then(|| "the built-in tool exec_command".into()),
            &limits(),
        )
    }

    #[test]
    fn a_good_definition_compiles_and_validates_arguments() {
        let d = check(&args(
            "word_count",
            json!({"type":"object","properties":{"n":{"type":"integer","pattern":"^a"}},"required":["n"]}),
            Some(5.0),
        ))
        .unwrap();
        assert_eq!(d.timeout, Duration::from_secs(5));
        assert!(d.validator.is_valid(&json!({"n": 3})));
        assert!(!d.validator.is_valid(&json!({"n": "x"})));
        assert!(!d.validator.is_valid(&json!({})));
    }

    #[test]
    fn each_bad_definition_is_a_teaching_error() {
        let obj = json!({"type":"object"});
        for (a, want) in [
            (args("", obj.clone(), None), "it is empty"),
            (args("has space", obj.clone(), None), "' '"),
            (args(&"x".repeat(129), obj.clone(), None), "129 characters"),
            (
                args("exec_command", obj.clone(), None),
                "taken by the built-in",
            ),
            (
                args("t", json!("{\"type\":\"object\"}"), None),
                "not a string",
            ),
            (args("t", json!([1]), None), "got an array"),
            (
                args("t", json!({"type":"string"}), None),
                "\"type\": \"object\"",
            ),
            (args("t", json!({"properties":{}}), None), "has no \"type\""),
            (
                args(
                    "t",
                    json!({"type":"object","properties":{"a":{"type":"nope"}}}),
                    None,
                ),
                "not a valid JSON Schema",
            ),
            (
                args(
                    "t",
                    json!({"type":"object","$schema":"http://example.com/s"}),
                    None,
                ),
                "dialect",
            ),
            (
                args(
                    "t",
                    json!({"type":"object","properties":{"a":{"$ref":"http://x/y.json"}}}),
                    None,
                ),
                "external references",
            ),
            (args("t", obj.clone(), Some(0.0)), "from 1 to 3600"),
            (args("t", obj.clone(), Some(1e9)), "from 1 to 3600"),
            (args("t", obj.clone(), Some(f64::NAN)), "outside the bounds"),
        ] {
            let e = check(&a).err().unwrap_or_default();
            assert!(e.contains(want), "{want}: {e}");
        }
        let mut big = args("t", obj, None);
        big.command = "x".repeat(MAX_DEFINITION_BYTES);
        assert!(
            check(&big)
                .err()
                .unwrap_or_default()
                .contains("over the limit")
        );
    }

    #[test]
    fn draining_refuses_new_calls_and_counts_in_flight() {
        let m = Mounts::new(true, 2);
        let d = check(&args("a", json!({"type":"object"}), None)).unwrap();
        let a = m.insert(d).unwrap();
        assert_eq!(a.id, "dyn-1");
        let dup = check(&args("a", json!({"type":"object"}), None)).unwrap();
        assert!(
            m.insert(dup)
                .err()
                .unwrap_or_default()
                .contains("already mounted as dyn-1")
        );
        let d = check(&args("b", json!({"type":"object"}), None)).unwrap();
        m.insert(d).unwrap();
        let d = check(&args("c", json!({"type":"object"}), None)).unwrap();
        assert!(
            m.insert(d)
                .err()
                .unwrap_or_default()
                .contains("--max-mounts 2")
        );
        let call = m.begin_call("a").unwrap().unwrap();
        assert_eq!(a.in_flight(), 1);
        let drained = m.start_drain("dyn-1").unwrap();
        assert_eq!(drained.state(), "draining");
        assert!(
            m.begin_call("a")
                .unwrap()
                .err()
                .unwrap_or_default()
                .contains("being unmounted")
        );
        assert!(
            m.start_drain("dyn-1")
                .err()
                .unwrap_or_default()
                .contains("already")
        );
        let e = m.start_drain("dyn-9").err().unwrap_or_default();
        assert!(e.contains("dyn-1 (a), dyn-2 (b)"), "{e}");
        drop(call);
        assert_eq!(a.in_flight(), 0);
        m.remove("dyn-1");
        m.remove("dyn-2");
        assert!(
            m.start_drain("dyn-1")
                .err()
                .unwrap_or_default()
                .contains("none mounted")
        );
        assert!(m.begin_call("a").is_none());
    }
}
