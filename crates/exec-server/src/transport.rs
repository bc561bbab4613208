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
