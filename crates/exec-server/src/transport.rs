//! Transport wrappers: the literal `serverInfo.sandbox_id` in the initialize response.
//!
//! rmcp's `Implementation` has no room for extra keys, so the initialize result is rewritten as
//! it leaves: over stdio by wrapping the transport, over HTTP by a body filter (see `http.rs`).

use std::borrow::Cow;
use std::future::Future;

use rmcp::RoleServer;
use rmcp::model::{CustomResult, JsonRpcMessage, ServerResult};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;

/// Wraps a server transport and adds `sandbox_id` to `serverInfo` of the initialize response.
pub(crate) struct InjectServerInfo<T> {
    inner: T,
    sandbox_id: String,
}

impl<T> InjectServerInfo<T> {
    pub(crate) fn new(inner: T, sandbox_id: String) -> Self {
        Self { inner, sandbox_id }
    }
}

/// Adds `serverInfo.sandbox_id` to a serialized initialize result.
pub(crate) fn inject_into_value(v: &mut Value, sandbox_id: &str) {
    if let Some(info) = v.get_mut("serverInfo").and_then(Value::as_object_mut) {
        info.insert("sandbox_id".into(), Value::String(sandbox_id.to_owned()));
    }
}

impl<T> Transport<RoleServer> for InjectServerInfo<T>
where
    T: Transport<RoleServer>,
{
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let item = match item {
            JsonRpcMessage::Response(mut resp) => {
                if let ServerResult::InitializeResult(init) = &resp.result {
                    match serde_json::to_value(init) {
                        Ok(mut v) => {
                            inject_into_value(&mut v, &self.sandbox_id);
                            resp.result = ServerResult::CustomResult(CustomResult(v));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "could not serialize the initialize result");
                        }
                    }
                }
                JsonRpcMessage::Response(resp)
            }
            other => other,
        };
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// The tool name a too-long stdio request line is replaced with (never listed).
pub(crate) const LINE_TOO_LONG_TOOL: &str = "e2b_exec_server_line_too_long";
/// How much of a line is kept to find its `id` once it turns out too long.
const PREFIX_KEEP: usize = 4096;

/// Bounds the lines read from stdio. A line longer than `max` bytes (newline excluded) is
/// never buffered: its first `max + 1` bytes pass (so rmcp, bounded at `max + 1` bytes with the
/// newline, drops it), the rest is skipped, and a small
/// substitute request with the same `id` follows, which the server answers with an error naming
/// the limit. So the client gets an answer instead of waiting forever.
pub(crate) struct LineLimit<R> {
    inner: R,
    max: usize,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    line_len: usize,
    prefix: Vec<u8>,
    skipping: bool,
    skipped: u64,
    pending: std::collections::VecDeque<u8>,
}

impl<R> LineLimit<R> {
    pub(crate) fn new(inner: R, max: usize) -> Self {
        Self {
            inner,
            max: max.max(1),
            buf: vec![0u8; 64 * 1024].into_boxed_slice(),
            pos: 0,
            end: 0,
            line_len: 0,
            prefix: Vec::new(),
            skipping: false,
            skipped: 0,
            pending: std::collections::VecDeque::new(),
        }
    }

    fn keep_prefix(&mut self, bytes: &[u8]) {
        let room = PREFIX_KEEP.saturating_sub(self.prefix.len());
        self.prefix
            .extend_from_slice(&bytes[..room.min(bytes.len())]);
    }

    /// The substitute request for the line that was too long (`None` without an id).
    fn substitute(&self) -> Option<String> {
        let id = find_id(&self.prefix)?;
        Some(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"{LINE_TOO_LONG_TOOL}\",\"arguments\":{{\"bytes\":{},\"max\":{}}}}}}}\n",
            self.skipped,
            self.max.saturating_add(1)
        ))
    }
}

/// The JSON text of the top-level `"id"` value (a number or a plain string) near the start of
/// a JSON-RPC request line.
pub(crate) fn find_id(prefix: &[u8]) -> Option<String> {
    let s = String::from_utf8_lossy(prefix);
    let mut from = 0;
    while let Some(i) = s[from..].find("\"id\"") {
        let rest = s[from + i + 4..].trim_start();
        from += i + 4;
        let Some(rest) = rest.strip_prefix(':') else {
            continue;
        };
        let rest = rest.trim_start();
        if let Some(body) = rest.strip_prefix('"') {
            let end = body.find(['"', '\\'])?;
            if body[end..].starts_with('\\') {
                return None;
            }
            return Some(serde_json::Value::String(body[..end].to_owned()).to_string());
        }
        let num: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        if !num.is_empty() && num.parse::<i64>().is_ok() {
            return Some(num);
        }
        return None;
    }
    None
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for LineLimit<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = &mut *self;
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(out.remaining());
                let bytes: Vec<u8> = this.pending.drain(..n).collect();
                out.put_slice(&bytes);
                return Poll::Ready(Ok(()));
            }
            if this.pos == this.end {
                let mut rb = tokio::io::ReadBuf::new(&mut this.buf);
                match std::pin::Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) => {
                        let n = rb.filled().len();
                        if n == 0 {
                            return Poll::Ready(Ok(()));
                        }
                        this.pos = 0;
                        this.end = n;
                    }
                }
            }
            let avail = &this.buf[this.pos..this.end];
            let nl = memchr::memchr(b'\n', avail);
            if this.skipping {
                match nl {
                    Some(i) => {
                        this.skipped += i as u64;
                        this.pos += i + 1;
                        this.skipping = false;
                        // Ends the dropped line for rmcp, then asks for the error answer.
                        this.pending.push_back(b'\n');
                        if let Some(sub) = this.substitute() {
                            tracing::warn!(
                                bytes = this.skipped,
                                max = this.max,
                                "a stdio request line was over the limit; answering it with an error"
                            );
                            this.pending.extend(sub.as_bytes());
                        } else {
                            tracing::warn!(
                                bytes = this.skipped,
                                max = this.max,
                                "a stdio line without an id was over the limit; dropped"
                            );
                        }
                        this.line_len = 0;
                        this.prefix.clear();
                    }
                    None => {
                        this.skipped += avail.len() as u64;
                        this.pos = this.end;
                    }
                }
                continue;
            }
            let line_part = nl.unwrap_or(avail.len());
            // A line of up to `max` bytes passes whole; of a longer one, `max + 1` bytes pass,
            // which rmcp (bounded at `max + 1` with the newline) drops.
            let take = if this.line_len + line_part <= this.max {
                nl.map_or(avail.len(), |i| i + 1)
            } else if this.line_len <= this.max {
                (this.max + 1 - this.line_len).min(avail.len())
            } else {
                this.skipping = true;
                this.skipped = this.line_len as u64;
                continue;
            };
            let n = take.min(out.remaining());
            let chunk = avail[..n].to_vec();
            out.put_slice(&chunk);
            this.keep_prefix(&chunk);
            this.pos += n;
            if chunk.last() == Some(&b'\n') {
                this.line_len = 0;
                this.prefix.clear();
            } else {
                this.line_len += n;
            }
            return Poll::Ready(Ok(()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt as _;

    #[test]
    fn ids() {
        assert_eq!(
            find_id(br#"{"jsonrpc":"2.0","id":17,"method":"x"#),
            Some("17".into())
        );
        assert_eq!(
            find_id(br#"{"jsonrpc":"2.0", "id" : "a-b","#),
            Some("\"a-b\"".into())
        );
        assert_eq!(find_id(br#"{"jsonrpc":"2.0","method":"x""#), None);
    }

    #[tokio::test]
    async fn long_lines_become_a_short_request_with_their_id() {
        let long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{{\"x\":\"{}\"}}}}\n",
            "a".repeat(500)
        );
        let input = format!("{{\"id\":1}}\n{long}{{\"id\":2}}\n");
        let mut r = LineLimit::new(input.as_bytes(), 100);
        let mut got = String::new();
        r.read_to_string(&mut got).await.unwrap();
        let lines: Vec<&str> = got.split('\n').collect();
        assert_eq!(lines[0], "{\"id\":1}");
        assert_eq!(
            lines[1].len(),
            101,
            "max + 1 bytes pass, then the line ends"
        );
        assert!(lines[2].contains("\"id\":5") && lines[2].contains(LINE_TOO_LONG_TOOL));
        assert_eq!(lines[3], "{\"id\":2}");
    }
}
