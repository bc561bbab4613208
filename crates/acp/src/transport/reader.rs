//! The reader: the agent's stdout → splitter → filter → the bounded read queue.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::{mpsc, watch};

use super::state::Lifecycle;
use super::{Queued, Shared, until};
use crate::filter;
use crate::framing::LineSplitter;
use crate::process::ByteStream;

pub(super) async fn read_loop(
    shared: Arc<Shared>,
    mut stdout: ByteStream,
    read_tx: mpsc::Sender<Queued>,
    mut splitter: LineSplitter,
) {
    let mut read_tx = Some(read_tx);
    let mut life = shared.follow();
    loop {
        let item = tokio::select! {
            biased;
            () = until(&mut life, Lifecycle::reads_halted), if read_tx.is_some() => {
                read_tx = None;
                continue;
            }
            item = stdout.next() => item,
        };
        let Some(item) = item else { break };
        let chunk = match item {
            Ok(c) => c,
            Err(e) => {
                let forwarding = read_tx.is_some();
                shared.record(|l| {
                    l.output_failed = true;
                    if forwarding && l.read_error.is_none() {
                        l.read_error = Some(e);
                    }
                });
                break;
            }
        };
        if read_tx.is_none() {
            continue; // stopped: keep draining so the process can end
        }
        splitter.push_bytes(chunk);
        while let Some(r) = splitter.next_line() {
            match r {
                Ok(line) => {
                    if !deliver(&shared, &mut life, &mut read_tx, line).await {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the agent sent an oversized message; killing it");
                    shared.set_error(e);
                    read_tx = None;
                    shared.kill_for_error();
                    break;
                }
            }
        }
    }
    if read_tx.is_some() {
        match splitter.finish() {
            Some(Ok(line)) => {
                deliver(&shared, &mut life, &mut read_tx, line).await;
            }
            Some(Err(e)) => shared.set_error(e),
            None => {}
        }
    }
}

/// Filter one line and forward it; false when forwarding has ended.
async fn deliver(
    shared: &Shared,
    life: &mut watch::Receiver<Lifecycle>,
    read_tx: &mut Option<mpsc::Sender<Queued>>,
    line: Bytes,
) -> bool {
    let verdict = filter::inspect_agent_line(&line);
    for reply in verdict.replies {
        shared.reply(reply);
    }
    let Some(fwd) = verdict.forward else {
        return true;
    };
    let Some(tx) = read_tx.as_ref() else {
        return false;
    };
    // The byte budget first (a message larger than the whole budget takes all of it and passes
    // alone), then a slot in the queue; kill and stop release both waits.
    let cost = u32::try_from(fwd.len())
        .unwrap_or(u32::MAX)
        .clamp(1, shared.read_bytes_max);
    let sent = tokio::select! {
        biased;
        () = until(life, Lifecycle::reads_halted) => false,
        r = async {
            let budget = shared.read_bytes.clone().acquire_many_owned(cost).await.ok()?;
            tx.send((fwd, budget)).await.ok()
        } => r.is_some(),
    };
    if !sent {
        *read_tx = None;
    }
    sent
}
