//! The writer: the single ordered queue to the agent's stdin (client messages, transport
//! replies, EOF).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot, watch};

use super::state::{Event, Lifecycle};
use super::{Shared, until};
use crate::error::AcpError;

pub(super) enum WriteCmd {
    Line(Bytes, Option<OwnedSemaphorePermit>),
    Eof(oneshot::Sender<Result<(), AcpError>>),
}

/// Largest write the writer assembles from queued lines (one `write_stdin` call).
const MAX_WRITE_BATCH: usize = 256 * 1024;

pub(super) async fn write_loop(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<WriteCmd>) {
    let mut life = shared.follow();
    loop {
        let cmd = tokio::select! {
            biased;
            () = until(&mut life, Lifecycle::writes_halted) => break,
            c = rx.recv() => c,
        };
        match cmd {
            None => break,
            Some(WriteCmd::Line(first, permit)) => {
                // Coalesce lines already queued into one write (one RPC for a sandbox agent).
                // Whole lines only, in queue order; an EOF behind them is handled right after.
                let mut replies = usize::from(permit.is_none());
                let mut reply_bytes = if permit.is_none() { first.len() } else { 0 };
                let mut permits: Vec<OwnedSemaphorePermit> = permit.into_iter().collect();
                let mut size = first.len();
                let mut joined: Option<BytesMut> = None;
                let mut eof = None;
                while size < MAX_WRITE_BATCH {
                    match rx.try_recv() {
                        Ok(WriteCmd::Line(more, p)) => {
                            let buf = joined.get_or_insert_with(|| {
                                let mut m = BytesMut::with_capacity(MAX_WRITE_BATCH.min(size * 4));
                                m.extend_from_slice(&first);
                                m
                            });
                            buf.extend_from_slice(&more);
                            size += more.len();
                            match p {
                                Some(p) => permits.push(p),
                                None => {
                                    replies += 1;
                                    reply_bytes += more.len();
                                }
                            }
                        }
                        Ok(WriteCmd::Eof(ack)) => {
                            eof = Some(ack);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let data = match joined {
                    Some(m) => m.freeze(),
                    None => first,
                };
                let r = tokio::select! {
                    biased;
                    () = until(&mut life, Lifecycle::writes_halted) => break,
                    r = shared.process.write_stdin(data) => r,
                };
                drop(permits);
                shared.queued_replies.fetch_sub(replies, Ordering::AcqRel);
                shared
                    .queued_reply_bytes
                    .fetch_sub(reply_bytes, Ordering::AcqRel);
                if let Err(e) = r {
                    tracing::debug!(error = %e, "writing to the agent's stdin failed");
                    let reason = e.to_string();
                    shared.record(|l| l.write_error = Some(reason));
                    break;
                }
                if let Some(ack) = eof {
                    close_stdin(&shared, &mut life, ack).await;
                    break;
                }
            }
            Some(WriteCmd::Eof(ack)) => {
                close_stdin(&shared, &mut life, ack).await;
                break;
            }
        }
    }
    // Later sends fail; pending EOF acks are dropped (the stopper treats that as closed).
    shared.transition(Event::WriterEnded);
    shared.write_permits.close();
    rx.close();
}

async fn close_stdin(
    shared: &Shared,
    life: &mut watch::Receiver<Lifecycle>,
    ack: oneshot::Sender<Result<(), AcpError>>,
) {
    let r = tokio::select! {
        biased;
        () = until(life, Lifecycle::writes_halted) => return,
        r = shared.process.close_stdin() => r,
    };
    let _ = ack.send(r);
}
