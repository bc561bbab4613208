//! The stream of a watched directory.

use std::pin::Pin;
use std::task::{Context, Poll};

use e2b_envd_proto::filesystem::{WatchDirResponse, watch_dir_response::Event};
use futures::{Stream, StreamExt as _};

use crate::error::{FilesystemError, Result};
use crate::types::{EntryInfo, EventType, FilesystemEvent};

/// A watched directory: a [`Stream`] of [`FilesystemEvent`]s (keepalives are skipped). The
/// stream ends with an error if envd's watcher fails. Dropping it stops the watch.
pub struct WatchHandle {
    inner: tonic::Streaming<WatchDirResponse>,
}

impl std::fmt::Debug for WatchHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHandle").finish_non_exhaustive()
    }
}

impl WatchHandle {
    /// Waits for envd's `start` event.
    pub(crate) async fn start(mut inner: tonic::Streaming<WatchDirResponse>) -> Result<Self> {
        loop {
            match inner.message().await? {
                Some(WatchDirResponse {
                    event: Some(Event::Start(_)),
                }) => return Ok(Self { inner }),
                Some(WatchDirResponse {
                    event: Some(Event::Keepalive(_)),
                }) => continue,
                Some(other) => {
                    return Err(FilesystemError::Protocol(format!(
                        "expected a start event first, got {other:?}"
                    )));
                }
                None => {
                    return Err(FilesystemError::Protocol(
                        "the watch stream ended before it started".into(),
                    ));
                }
            }
        }
    }

    /// Stops watching.
    pub fn stop(self) {}
}

impl Stream for WatchHandle {
    type Item = Result<FilesystemEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match self.inner.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(Err(s))) => return Poll::Ready(Some(Err(s.into()))),
                Poll::Ready(Some(Ok(WatchDirResponse {
                    event: Some(Event::Filesystem(ev)),
                }))) => {
                    let Some(event_type) = EventType::from_pb(ev.r#type) else {
                        continue;
                    };
                    return Poll::Ready(Some(Ok(FilesystemEvent {
                        name: ev.name,
                        event_type,
                        entry: ev.entry.map(EntryInfo::from_pb),
                    })));
                }
                Poll::Ready(Some(Ok(_))) => continue,
            }
        }
    }
}
