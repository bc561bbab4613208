//! A subscriber's queue: at most [`SUBSCRIBER_BUFFER`] events **and** at most
//! [`SUBSCRIBER_BYTE_BUDGET`] bytes of output. Sends wait when either is exhausted, which
//! back-pressures the reader (and then the process, through its full pipe) instead of
//! buffering without bound.

use std::sync::Arc;

use e2b_envd_proto::process::process_event::{DataEvent, Event, data_event::Output};
use tokio::sync::{Semaphore, mpsc};

/// Events queued per subscriber (envd: 64).
pub(crate) const SUBSCRIBER_BUFFER: usize = 64;
/// Output bytes queued per subscriber.
pub(crate) const SUBSCRIBER_BYTE_BUDGET: usize = 4 << 20;
const UNIT: usize = 1024;
const TOTAL_PERMITS: u32 = (SUBSCRIBER_BYTE_BUDGET / UNIT) as u32;

fn permits_for(ev: &Event) -> u32 {
    match ev {
        Event::Data(DataEvent {
            output: Some(Output::Stdout(b) | Output::Stderr(b) | Output::Pty(b)),
        }) => u32::try_from(b.len() / UNIT + 1)
            .unwrap_or(TOTAL_PERMITS)
            .min(TOTAL_PERMITS),
        _ => 0,
    }
}

/// Sending side, held by the process's fan-out.
#[derive(Debug, Clone)]
pub(crate) struct SubTx {
    tx: mpsc::Sender<(Event, u32)>,
    budget: Arc<Semaphore>,
}

/// Receiving side, held by one Start/Connect stream. Dropping it releases any waiting sender.
#[derive(Debug)]
pub(crate) struct SubRx {
    rx: mpsc::Receiver<(Event, u32)>,
    budget: Arc<Semaphore>,
}

pub(crate) fn channel() -> (SubTx, SubRx) {
    let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
    let budget = Arc::new(Semaphore::new(TOTAL_PERMITS as usize));
    (
        SubTx {
            tx,
            budget: budget.clone(),
        },
        SubRx { rx, budget },
    )
}

impl SubTx {
    /// Queues `ev`, waiting for room. `Err` = the subscriber is gone.
    pub(crate) async fn send(&self, ev: Event) -> Result<(), ()> {
        let n = permits_for(&ev);
        if n > 0 {
            match self.budget.acquire_many(n).await {
                Ok(p) => p.forget(),
                Err(_) => return Err(()),
            }
        }
        self.tx.send((ev, n)).await.map_err(|_| ())
    }

    /// Waits until at most `queued` events wait in the queue (or the subscriber is gone).
    pub(crate) async fn wait_drained(&self, queued: usize) {
        if !self.is_drained(queued) {
            // The permits go straight back; holding them only meant "this much room exists".
            let _ = self
                .tx
                .reserve_many(SUBSCRIBER_BUFFER - queued.min(SUBSCRIBER_BUFFER))
                .await;
        }
    }

    /// Whether at most `queued` events wait in the queue now.
    pub(crate) fn is_drained(&self, queued: usize) -> bool {
        self.tx.capacity() >= SUBSCRIBER_BUFFER.saturating_sub(queued)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl SubRx {
    pub(crate) async fn recv(&mut self) -> Option<Event> {
        let (ev, n) = self.rx.recv().await?;
        self.budget.add_permits(n as usize);
        Some(ev)
    }
}

impl Drop for SubRx {
    fn drop(&mut self) {
        self.budget.close();
    }
}
