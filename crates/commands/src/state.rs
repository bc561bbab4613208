//! A command's state, shared by its handle ([`handle`](crate::handle)) and its output pump
//! ([`pump`](crate::pump)).

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::{Bytes, BytesMut};
use e2b_envd_proto::process::process_event::Event;
use futures::stream::BoxStream;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::error::CommandError;
use crate::output::{CommandEvent, ExitStatus};
use crate::rpc::ProcessRpc;
use crate::stdin::StdinWriter;

/// The envd events of one Start/Connect stream, after the start event.
pub(crate) type ProcessEvents = BoxStream<'static, Result<Option<Event>, tonic::Status>>;

pub(crate) type EventItem = Result<CommandEvent, CommandError>;
pub(crate) type Outcome = Option<Result<ExitStatus, CommandError>>;

pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
pub(crate) struct Retained {
    pub(crate) stdout: BytesMut,
    pub(crate) stderr: BytesMut,
    /// Set once the command ended: the buffers, frozen, so every reader shares them.
    pub(crate) frozen: Option<(Bytes, Bytes)>,
}

pub(crate) struct Shared {
    pub(crate) pid: u32,
    pub(crate) rpc: ProcessRpc,
    pub(crate) is_pty: bool,
    pub(crate) retain: bool,
    pub(crate) has_callbacks: bool,
    pub(crate) retained: Mutex<Retained>,
    pub(crate) done: watch::Sender<Outcome>,
    pub(crate) disconnected: AtomicBool,
    pub(crate) cancel: CancellationToken,
    pub(crate) events_tx: Mutex<Option<mpsc::Sender<EventItem>>>,
    pub(crate) events_rx: Mutex<Option<mpsc::Receiver<EventItem>>>,
    /// The handle's stream writer, created by the first `stdin_writer()` call.
    pub(crate) stdin_writer: OnceLock<StdinWriter>,
}

/// Dropped with the last [`CommandHandle`](crate::CommandHandle) clone: an event stream nobody took is discarded, and
/// the reader stops when nothing else (callbacks, a taken stream) needs the output.
pub(crate) struct Guard {
    pub(crate) shared: Arc<Shared>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        drop(lock(&self.shared.events_rx).take());
        let stream_live = lock(&self.shared.events_tx)
            .as_ref()
            .is_some_and(|tx| !tx.is_closed());
        if !self.shared.has_callbacks && !stream_live {
            self.shared.cancel.cancel();
        }
    }
}
