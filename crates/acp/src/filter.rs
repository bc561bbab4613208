//! The rules that keep the agent's tools inside the sandbox.
//!
//! - Client → agent: [`rewrite_client_message`] rewrites `initialize` so that
//!   `clientCapabilities.fs.readTextFile`, `clientCapabilities.fs.writeTextFile` and
//!   `clientCapabilities.terminal` are `false` (objects created when absent, every other key and the
//!   id kept byte for byte), also inside a JSON array. Every other message is passed through
//!   byte-identical.
//! - Agent → client: [`inspect_agent_line`] answers `fs/*` and `terminal/*` requests with JSON-RPC
//!   `-32601` carrying the same id (byte for byte) and drops such notifications, so they never reach
//!   the client's handlers. Lookalikes (`_fs/x`, `terminals/x`) pass. A line is forwarded only
//!   when it is exactly one JSON-RPC message (a JSON object whose top-level keys are all distinct,
//!   compared after unescaping, whose `method` if present is a string and whose `id` if present
//!   is a string, a number or `null`) or a non-empty array of such messages; it is then forwarded
//!   byte-identical (an array with intercepted items is forwarded without them). Anything else is
//!   answered with a `-32700` parse error (id `null`) and nothing of it is forwarded: a line the
//!   filter would read one way and a client another (two `method` keys: the filter would see the
//!   first, JavaScript and Python clients keep the last) never reaches the client.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::value::RawValue;

/// The parse-error reply written to the agent for a line that is not JSON.
pub const PARSE_ERROR_REPLY: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;

/// True when an agent → client method must stay inside the sandbox (`fs/…`, `terminal/…`).
pub fn is_intercepted_method(method: &str) -> bool {
    method.starts_with("fs/") || method.starts_with("terminal/")
}

/// The `-32601` reply for an intercepted request with the given raw JSON id.
pub fn method_not_found_reply(raw_id: &str, method: &str) -> String {
    let method_json = serde_json::to_string(truncate(method)).unwrap_or_else(|_| "\"\"".to_owned());
    format!(
        r#"{{"jsonrpc":"2.0","id":{raw_id},"error":{{"code":-32601,"message":"Method not found","data":{{"method":{method_json},"reason":"this agent runs in a sandbox: file and terminal access stay inside it, the client does not serve fs/* or terminal/*"}}}}}}"#
    )
}

/// What to do with one line from the agent.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AgentVerdict {
    /// The bytes to forward to the client, if any (the original line unless an array was thinned).
    pub forward: Option<Bytes>,
    /// Replies to write to the agent's stdin, in order.
    pub replies: Vec<Bytes>,
}

/// The parts of one agent → client message the filter decides on.
struct Message<'a> {
    method: Option<Cow<'a, str>>,
    id: Option<&'a RawValue>,
}

/// Why a message was not accepted as exactly one JSON-RPC message.
#[derive(Debug)]
enum Reject {
    /// Not JSON, or not an object, or trailing data.
    Json,
    /// The same key twice at the top level (clients keep the last one, we would check the first).
    DuplicateKey,
    /// `method` is not a string, or `id` is not a string, number or `null`.
    Shape,
}

/// Parse one JSON-RPC message: an object whose top-level keys (compared decoded, so `"m\u0065thod"`
/// is `method`) are all distinct, whose `method` is a string and whose `id` is a string, a number
/// or `null`. Every value is checked to be valid JSON; nothing else is interpreted.
fn parse_message(raw: &[u8]) -> Result<Message<'_>, Reject> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Result<Message<'de>, Reject>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON-RPC message object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut keys: Vec<Cow<'de, str>> = Vec::new();
            let mut method = None;
            let mut id = None;
            let mut verdict = Ok(());
            while let Some(key) = map.next_key::<Key<'de>>()? {
                let value = map.next_value::<&'de RawValue>()?;
                let key = key.0;
                if verdict.is_err() {
                    continue;
                }
                if keys.contains(&key) {
                    verdict = Err(Reject::DuplicateKey);
                    continue;
                }
                match &*key {
                    "method" => match serde_json::from_str::<Cow<'de, str>>(value.get()) {
                        Ok(m) => method = Some(m),
                        Err(_) => verdict = Err(Reject::Shape),
                    },
                    "id" => {
                        if matches!(
                            value.get().as_bytes().first(),
                            Some(b'"' | b'-' | b'0'..=b'9' | b'n')
                        ) {
                            id = Some(value);
                        } else {
                            verdict = Err(Reject::Shape);
                        }
                    }
                    _ => {}
                }
                keys.push(key);
            }
            Ok(verdict.map(|()| Message { method, id }))
        }
    }
    let mut de = serde_json::Deserializer::from_slice(raw);
    let parsed = serde::Deserializer::deserialize_map(&mut de, V).map_err(|_| Reject::Json)?;
    de.end().map_err(|_| Reject::Json)?;
    parsed
}

/// An object key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KV;
        impl<'de> Visitor<'de> for KV {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KV)
    }
}

enum Single {
    Forward,
    Intercepted(Option<Bytes>),
}

fn inspect_object(raw: &[u8]) -> Result<Single, Reject> {
    let msg = parse_message(raw)?;
    match msg.method {
        Some(m) if is_intercepted_method(&m) => {
            let reply = msg
                .id
                .map(|id| Bytes::from(method_not_found_reply(id.get(), &m)));
            if reply.is_none() {
                tracing::debug!(method = %truncate(&m), "dropped an fs/terminal notification from the agent");
            } else {
                tracing::debug!(method = %truncate(&m), "answered an fs/terminal request from the agent with -32601");
            }
            Ok(Single::Intercepted(reply))
        }
        _ => Ok(Single::Forward),
    }
}

fn first_non_ws(line: &[u8]) -> Option<u8> {
    line.iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// Decide what happens to one (non-blank) line from the agent's stdout.
///
/// A line is forwarded only when it is exactly one JSON-RPC message, or a non-empty array of them
/// (see the module docs for what that means); `fs/*` and `terminal/*` requests are answered and
/// notifications dropped (inside an array too). Anything else — not UTF-8, not JSON, not an
/// object, a duplicate top-level key, a non-string `method`, an array with one such item — is
/// answered with [`PARSE_ERROR_REPLY`] and nothing of it reaches the client.
pub fn inspect_agent_line(line: &Bytes) -> AgentVerdict {
    let parse_error = |why: Reject| {
        tracing::warn!(
            line = %String::from_utf8_lossy(&line[..line.len().min(200)]),
            reason = ?why,
            "agent wrote a line that is not exactly one JSON-RPC message; answered with -32700"
        );
        AgentVerdict {
            forward: None,
            replies: vec![Bytes::from_static(PARSE_ERROR_REPLY.as_bytes())],
        }
    };
    if std::str::from_utf8(line).is_err() {
        return parse_error(Reject::Json);
    }
    if first_non_ws(line) == Some(b'[') {
        let items: Vec<&RawValue> = match serde_json::from_slice(line) {
            Ok(items) => items,
            Err(_) => return parse_error(Reject::Json),
        };
        if items.is_empty() {
            return parse_error(Reject::Shape);
        }
        let mut replies = Vec::new();
        let mut kept = Vec::with_capacity(items.len());
        let mut intercepted = false;
        for item in items {
            match inspect_object(item.get().as_bytes()) {
                Ok(Single::Intercepted(reply)) => {
                    intercepted = true;
                    replies.extend(reply);
                }
                Ok(Single::Forward) => kept.push(item),
                Err(why) => return parse_error(why),
            }
        }
        if !intercepted {
            return AgentVerdict {
                forward: Some(line.clone()),
                replies,
            };
        }
        let forward = (!kept.is_empty()).then(|| Bytes::from(join_array(&kept)));
        return AgentVerdict { forward, replies };
    }
    match inspect_object(line) {
        Ok(Single::Forward) => AgentVerdict {
            forward: Some(line.clone()),
            replies: Vec::new(),
        },
        Ok(Single::Intercepted(reply)) => AgentVerdict {
            forward: None,
            replies: reply.into_iter().collect(),
        },
        Err(why) => parse_error(why),
    }
}

/// At most this many bytes of a method name are echoed in a -32601 reply.
const MAX_ECHOED_METHOD: usize = 256;

fn truncate(s: &str) -> &str {
    if s.len() <= MAX_ECHOED_METHOD {
        return s;
    }
    let mut end = MAX_ECHOED_METHOD;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn join_array(items: &[&RawValue]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item.get());
    }
    out.push(']');
    out
}

/// An object's entries in order, values kept as raw JSON text.
struct Entries<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some((k, val)) = map.next_entry::<String, &'de RawValue>()? {
                    v.push((k, val));
                }
                Ok(Entries(v))
            }
        }
        d.deserialize_map(V)
    }
}

fn write_object(entries: &[(String, Cow<'_, str>)]) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(k).unwrap_or_else(|_| "\"\"".to_owned()));
        out.push(':');
        out.push_str(v);
    }
    out.push('}');
    out
}

fn parse_entries(raw: &str) -> Option<Vec<(String, Cow<'_, str>)>> {
    let e: Entries<'_> = serde_json::from_str(raw).ok()?;
    Some(
        e.0.into_iter()
            .map(|(k, v)| (k, Cow::Borrowed(v.get())))
            .collect(),
    )
}

fn set_key(entries: &mut Vec<(String, Cow<'_, str>)>, key: &str, value: String) {
    let mut found = false;
    for (k, v) in entries.iter_mut() {
        if k == key {
            *v = Cow::Owned(value.clone());
            found = true;
        }
    }
    if !found {
        entries.push((key.to_owned(), Cow::Owned(value)));
    }
}

fn get_key<'e>(entries: &'e [(String, Cow<'_, str>)], key: &str) -> Option<&'e str> {
    entries
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_ref())
}

const FS_OFF: &str = r#"{"readTextFile":false,"writeTextFile":false}"#;

fn rewrite_capabilities(raw: Option<&str>) -> String {
    let mut caps = raw.and_then(parse_entries).unwrap_or_default();
    let fs = get_key(&caps, "fs").and_then(|fs| {
        let mut fs = parse_entries(fs)?;
        set_key(&mut fs, "readTextFile", "false".to_owned());
        set_key(&mut fs, "writeTextFile", "false".to_owned());
        Some(write_object(&fs))
    });
    set_key(&mut caps, "fs", fs.unwrap_or_else(|| FS_OFF.to_owned()));
    set_key(&mut caps, "terminal", "false".to_owned());
    write_object(&caps)
}

/// Rewrite one message object if it is `initialize`; `None` when it is left unchanged.
fn rewrite_object(raw: &str) -> Option<String> {
    let mut entries = parse_entries(raw)?;
    let method: String = serde_json::from_str(get_key(&entries, "method")?).ok()?;
    if method != "initialize" {
        return None;
    }
    let mut params = parse_entries(get_key(&entries, "params")?)?;
    let caps = rewrite_capabilities(get_key(&params, "clientCapabilities"));
    set_key(&mut params, "clientCapabilities", caps);
    let params = write_object(&params);
    set_key(&mut entries, "params", params);
    Some(write_object(&entries))
}

/// Rewrite a client → agent message: `initialize` (alone or inside an array) gets the `fs` and
/// `terminal` client capabilities forced off. Anything else is returned unchanged (borrowed).
pub fn rewrite_client_message(line: &[u8]) -> Cow<'_, [u8]> {
    // Fast path: a message that cannot be an initialize is never parsed (prompts can be large).
    // `\u` covers a method name written with escapes.
    if memchr::memmem::find(line, b"initialize").is_none()
        && memchr::memmem::find(line, b"\\u").is_none()
    {
        return Cow::Borrowed(line);
    }
    let Ok(text) = std::str::from_utf8(line) else {
        return Cow::Borrowed(line);
    };
    if first_non_ws(line) == Some(b'[') {
        let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(text) else {
            return Cow::Borrowed(line);
        };
        let mut changed = false;
        let mut out = String::from("[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            match rewrite_object(item.get()) {
                Some(new) => {
                    changed = true;
                    out.push_str(&new);
                }
                None => out.push_str(item.get()),
            }
        }
        out.push(']');
        return if changed {
            Cow::Owned(out.into_bytes())
        } else {
            Cow::Borrowed(line)
        };
    }
    match rewrite_object(text) {
        Some(new) => Cow::Owned(new.into_bytes()),
        None => Cow::Borrowed(line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn rw(s: &str) -> String {
        String::from_utf8(rewrite_client_message(s.as_bytes()).into_owned()).unwrap()
    }

    fn v(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    // §7 item 13
    #[test]
    fn initialize_caps_forced_off_others_and_id_kept() {
        for id in [
            r#""a1a15a13-uuid""#,
            "7",
            r#""weird id \" x""#,
            "123456789012345678901234567890",
        ] {
            let msg = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":1,"clientCapabilities":{{"fs":{{"readTextFile":true,"writeTextFile":true,"_meta":{{"k":1}}}},"terminal":true,"auth":{{"terminal":true}},"elicitation":{{}}}},"clientInfo":{{"name":"zed"}}}}}}"#
            );
            let out = rw(&msg);
            assert!(out.contains(&format!(r#""id":{id}"#)), "{out}");
            let o = v(&out);
            let caps = &o["params"]["clientCapabilities"];
            assert_eq!(
                caps["fs"],
                json!({"readTextFile":false,"writeTextFile":false,"_meta":{"k":1}})
            );
            assert_eq!(caps["terminal"], json!(false));
            assert_eq!(caps["auth"], json!({"terminal":true}));
            assert_eq!(caps["elicitation"], json!({}));
            assert_eq!(o["params"]["clientInfo"], json!({"name":"zed"}));
            assert_eq!(o["params"]["protocolVersion"], json!(1));
            assert_eq!(o["jsonrpc"], json!("2.0"));
        }
    }

    #[test]
    fn key_order_is_kept() {
        let out = rw(
            r#"{"method":"initialize","id":1,"params":{"clientCapabilities":{"terminal":true,"fs":{"writeTextFile":true}},"protocolVersion":1}}"#,
        );
        assert_eq!(
            out,
            r#"{"method":"initialize","id":1,"params":{"clientCapabilities":{"terminal":false,"fs":{"writeTextFile":false,"readTextFile":false}},"protocolVersion":1}}"#
        );
    }

    // §7 item 14
    #[test]
    fn missing_objects_are_created() {
        let o = v(&rw(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#,
        ));
        assert_eq!(
            o["params"]["clientCapabilities"],
            json!({"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false})
        );
        let o = v(&rw(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"auth":{"terminal":false}}}}"#,
        ));
        assert_eq!(
            o["params"]["clientCapabilities"],
            json!({"auth":{"terminal":false},"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false})
        );
        let o = v(&rw(
            r#"{"id":1,"method":"initialize","params":{"clientCapabilities":{"fs":null}}}"#,
        ));
        assert_eq!(
            o["params"]["clientCapabilities"]["fs"],
            json!({"readTextFile":false,"writeTextFile":false})
        );
    }

    // §7 item 15
    #[test]
    fn initialize_inside_an_array_only_that_element_rewritten() {
        let msg = r#"[{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"x":"initialize"}},{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"clientCapabilities":{"terminal":true}}},3]"#;
        let out = rw(msg);
        let o = v(&out);
        assert_eq!(
            o[0],
            v(r#"{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"x":"initialize"}}"#)
        );
        assert_eq!(
            o[1]["params"]["clientCapabilities"]["terminal"],
            json!(false)
        );
        assert_eq!(o[1]["id"], json!(2));
        assert_eq!(o[2], json!(3));
        assert!(out.starts_with(
            r#"[{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"x":"initialize"}},"#
        ));
    }

    // §7 item 16
    #[test]
    fn non_initialize_passes_byte_identical() {
        for msg in [
            r#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"prompt":[{"type":"text","text":"please initialize the repo"}]}}"#,
            r#"{ "jsonrpc" : "2.0" , "id" : 1.50 , "method" : "session/new" }"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"x":"\u00e9 initialize"}}"#,
            "not json at all \\u initialize",
        ] {
            let out = rewrite_client_message(msg.as_bytes());
            assert_eq!(&*out, msg.as_bytes());
        }
        assert!(matches!(
            rewrite_client_message(br#"{"id":1,"method":"session/new"}"#),
            Cow::Borrowed(_)
        ));
    }

    // §7 item 17
    #[test]
    fn weird_initialize_does_not_crash() {
        // params not an object: unchanged
        let m = r#"{"id":1,"method":"initialize","params":[1,2]}"#;
        assert_eq!(rw(m), m);
        // no params: unchanged
        let m = r#"{"id":1,"method":"initialize"}"#;
        assert_eq!(rw(m), m);
        // notification without id: rewritten
        let o = v(&rw(r#"{"method":"initialize","params":{}}"#));
        assert_eq!(o["params"]["clientCapabilities"]["terminal"], json!(false));
        assert!(o.get("id").is_none());
        // escaped method name: rewritten since it parses as "initialize"
        let o = v(&rw(
            r#"{"id":1,"method":"\u0069nitialize","params":{"clientCapabilities":{"terminal":true}}}"#,
        ));
        assert_eq!(o["params"]["clientCapabilities"]["terminal"], json!(false));
        // truncated JSON: unchanged
        let m = r#"{"id":1,"method":"initialize","params":{"#;
        assert_eq!(rw(m), m);
        // v2-shaped initialize (no fs/terminal keys): they are added as false
        let o = v(&rw(
            r#"{"id":1,"method":"initialize","params":{"protocolVersion":2,"clientCapabilities":{}}}"#,
        ));
        assert_eq!(o["params"]["clientCapabilities"]["terminal"], json!(false));
    }

    fn agent(s: &str) -> AgentVerdict {
        inspect_agent_line(&Bytes::copy_from_slice(s.as_bytes()))
    }

    // §7 item 19
    #[test]
    fn fs_and_terminal_requests_get_method_not_found() {
        for m in [
            "fs/read_text_file",
            "fs/write_text_file",
            "terminal/create",
            "terminal/output",
            "terminal/wait_for_exit",
            "terminal/kill",
            "terminal/release",
            "fs/future_thing",
            "terminal/future",
        ] {
            let out = agent(&format!(
                r#"{{"jsonrpc":"2.0","id":9,"method":"{m}","params":{{"path":"/etc/passwd"}}}}"#
            ));
            assert_eq!(out.forward, None);
            assert_eq!(out.replies.len(), 1);
            let r = v(std::str::from_utf8(&out.replies[0]).unwrap());
            assert_eq!(r["id"], json!(9));
            assert_eq!(r["jsonrpc"], json!("2.0"));
            assert_eq!(r["error"]["code"], json!(-32601));
            assert_eq!(r["error"]["message"], json!("Method not found"));
            assert_eq!(r["error"]["data"]["method"], json!(m));
        }
    }

    // §7 item 20
    #[test]
    fn id_echoed_byte_exact() {
        for id in [
            "1",
            "1.0",
            "-0",
            "1e400",
            "123456789012345678901234567890",
            r#""s\"x""#,
            "null",
            r#""é""#,
        ] {
            let out = agent(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"fs/read_text_file"}}"#
            ));
            let reply = std::str::from_utf8(&out.replies[0]).unwrap();
            assert!(
                reply.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"error""#)),
                "{reply}"
            );
        }
    }

    // §7 item 21
    #[test]
    fn fs_and_terminal_notifications_are_dropped() {
        assert_eq!(
            agent(r#"{"jsonrpc":"2.0","method":"terminal/output","params":{}}"#),
            AgentVerdict::default()
        );
        assert_eq!(
            agent(r#"{"jsonrpc":"2.0","method":"fs/x"}"#),
            AgentVerdict::default()
        );
    }

    // §7 item 22
    #[test]
    fn lookalikes_pass_unchanged() {
        for m in [
            "_fs/x",
            "fsx/y",
            "terminals/x",
            "session/request_permission",
            "fs",
            "terminal",
            "xfs/read",
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}"}}"#);
            let out = agent(&line);
            assert_eq!(out.forward.as_deref(), Some(line.as_bytes()));
            assert!(out.replies.is_empty());
        }
    }

    #[test]
    fn responses_and_other_messages_pass_byte_identical() {
        for line in [
            r#"{"jsonrpc":"2.0","id":"a","result":{"protocolVersion":1}}"#,
            r#"{ "jsonrpc":"2.0", "method":"session/update","params":{"x":"fs/read_text_file"} }"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"m"}}"#,
        ] {
            let out = agent(line);
            assert_eq!(out.forward.as_deref(), Some(line.as_bytes()), "{line}");
            assert!(out.replies.is_empty());
        }
    }

    #[test]
    fn escaped_method_name_is_intercepted() {
        let out = agent(r#"{"jsonrpc":"2.0","id":2,"method":"fs\/read_text_file"}"#);
        assert!(out.forward.is_none());
        assert_eq!(out.replies.len(), 1);
    }

    // §7 items 11 and 40 (filter part)
    #[test]
    fn junk_and_invalid_utf8_get_a_parse_error_reply() {
        for line in [
            &b"this is not json"[..],
            b"{\"a\":",
            b"\xff\xfe{}",
            b"{\"a\":\"\xff\"}",
            b"[1,",
        ] {
            let out = inspect_agent_line(&Bytes::copy_from_slice(line));
            assert_eq!(out.forward, None);
            assert_eq!(
                out.replies,
                vec![Bytes::from_static(PARSE_ERROR_REPLY.as_bytes())]
            );
        }
        let r = v(PARSE_ERROR_REPLY);
        assert_eq!(r["id"], Value::Null);
        assert_eq!(r["error"]["code"], json!(-32700));
    }

    // §7 item 24
    #[test]
    fn agent_batch_with_fs_requests() {
        let line = r#"[{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file"},{"jsonrpc":"2.0","method":"session/update","params":{}},{"jsonrpc":"2.0","method":"terminal/x"}]"#;
        let out = agent(line);
        assert_eq!(
            out.forward.as_deref(),
            Some(&br#"[{"jsonrpc":"2.0","method":"session/update","params":{}}]"#[..])
        );
        assert_eq!(out.replies.len(), 1);
        let only = r#"[{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file"}]"#;
        let out = agent(only);
        assert_eq!(out.forward, None);
        assert_eq!(out.replies.len(), 1);
        let plain = r#"[{"jsonrpc":"2.0","id":1,"result":{}}]"#;
        assert_eq!(agent(plain).forward.as_deref(), Some(plain.as_bytes()));
    }

    fn assert_parse_error(line: &str) {
        let out = agent(line);
        assert_eq!(out.forward, None, "{line} must not be forwarded");
        assert_eq!(
            out.replies,
            vec![Bytes::from_static(PARSE_ERROR_REPLY.as_bytes())],
            "{line} gets the parse-error reply"
        );
    }

    // Issue 12: a duplicate key is read as its first occurrence by a first-match parser and as
    // its last by JavaScript's JSON.parse and Python's json.loads.
    #[test]
    fn duplicate_keys_are_refused_not_forwarded() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"session/update","method":"fs/read_text_file","params":{"path":"/etc/passwd"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","method":"session/update"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","m\u0065thod":"fs/read_text_file"}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"session/request_permission"}"#,
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"result":{}}"#,
        ] {
            assert_parse_error(line);
        }
        // duplicates below the top level are the client's business (the filter decides nothing there)
        let nested = r#"{"jsonrpc":"2.0","method":"session/update","params":{"a":1,"a":2}}"#;
        assert_eq!(agent(nested).forward.as_deref(), Some(nested.as_bytes()));
    }

    #[test]
    fn a_batch_with_an_item_that_fails_to_parse_is_refused_whole() {
        for line in [
            r#"[{"jsonrpc":"2.0","method":"session/update","params":{}},{"jsonrpc":"2.0","id":1,"method":"session/update","method":"fs/read_text_file"}]"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file"},{"id":2,"id":3,"method":"fs/write_text_file"}]"#,
            r#"[{"jsonrpc":"2.0","method":"session/update"},3]"#,
            r#"[{"jsonrpc":"2.0","method":"session/update"},"fs/read_text_file"]"#,
            r#"[{"jsonrpc":"2.0","method":"session/update"},[{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file"}]]"#,
            "[]",
        ] {
            assert_parse_error(line);
        }
    }

    #[test]
    fn anything_but_one_message_gets_the_parse_error() {
        for line in [
            "42",
            r#""fs/read_text_file""#,
            "null",
            r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":["fs/read_text_file"]}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"session/update"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"session/update"}"#,
            r#"{"jsonrpc":"2.0","method":"session/update"} {"jsonrpc":"2.0","id":1,"method":"fs/read_text_file"}"#,
            r#"{"jsonrpc":"2.0","method":"session/update"}{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file"}"#,
            r#"{"jsonrpc":"2.0","method":"fs/\ud800"}"#,
        ] {
            assert_parse_error(line);
        }
    }

    #[test]
    fn method_echoed_in_a_reply_is_bounded() {
        let long = "fs/".to_owned() + &"é".repeat(10_000);
        let out = agent(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{long}"}}"#));
        assert!(out.forward.is_none());
        assert!(out.replies[0].len() < 1024, "{}", out.replies[0].len());
        assert!(serde_json::from_slice::<Value>(&out.replies[0]).is_ok());
    }
}
