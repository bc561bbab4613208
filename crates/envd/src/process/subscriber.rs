//! A subscriber's queue: at most [`SUBSCRIBER_BUFFER`] events **and** at most
//! [`SUBSCRIBER_BYTE_BUDGET`] bytes of output. Sends wait when either is exhausted, which
//! back-pressures the reader (and then the process, through its full pipe) instead of
//! buffering without bound.
//!
//! A subscriber that lags beyond that bound while the process has other subscribers is cut
//! off: when its queue stays full for [`subscriber_lag_timeout`] it is marked *lagged*, the
//! fan-out drops it, and its stream ends with `resource_exhausted` once it has read what was
//! queued. The process and the other subscribers go on without losing anything. A sole
//! subscriber is never cut off: it back-pressures the process, as envd does.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use e2b_envd_proto::process::process_event::{DataEvent, Event, data_event::Output};
use tokio::sync::{Semaphore, mpsc};

/// Events queued per subscriber (envd: 64).
pub(crate) const SUBSCRIBER_BUFFER: usize = 64;
/// Output bytes queued per subscriber.
pub(crate) const SUBSCRIBER_BYTE_BUDGET: usize = 4 << 20;
/// Default of [`subscriber_lag_timeout`].
pub(crate) const SUBSCRIBER_LAG_TIMEOUT: Duration = Duration::from_secs(5);
const UNIT: usize = 1024;
const TOTAL_PERMITS: u32 = (SUBSCRIBER_BYTE_BUDGET / UNIT) as u32;

/// How long a full subscriber queue may stay full, while the process has other subscribers,
/// before that subscriber is dropped: `E2B_ENVD_SUBSCRIBER_LAG_MS` (milliseconds, 1 ms to
/// 1 hour), else [`SUBSCRIBER_LAG_TIMEOUT`].
pub(crate) fn subscriber_lag_timeout() -> Duration {
    static LAG: OnceLock<Duration> = OnceLock::new();
    *LAG.get_or_init(|| {
        std::env::var("E2B_ENVD_SUBSCRIBER_LAG_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|ms| (1..=3_600_000).contains(ms))
            .map(Duration::from_millis)
            .unwrap_or(SUBSCRIBER_LAG_TIMEOUT)
    })
}

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

#[derive(Debug)]
struct Shared {
    budget: Semaphore,
    /// Set when the fan-out gave up on this subscriber.
    lagged: AtomicBool,
    /// Set when the subscriber did not drain in time for the read-ahead wait; cleared when it
    /// takes an event. The read-ahead wait skips stalled subscribers.
    stalled: AtomicBool,
}

/// Sending side, held by the process's fan-out.
#[derive(Debug, Clone)]
pub(crate) struct SubTx {
    tx: mpsc::Sender<(Event, u32)>,
    shared: Arc<Shared>,
}

/// Receiving side, held by one Start/Connect stream. Dropping it releases any waiting sender.
#[derive(Debug)]
pub(crate) struct SubRx {
    rx: mpsc::Receiver<(Event, u32)>,
    shared: Arc<Shared>,
}

pub(crate) fn channel() -> (SubTx, SubRx) {
    let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
    let shared = Arc::new(Shared {
        budget: Semaphore::new(TOTAL_PERMITS as usize),
        lagged: AtomicBool::new(false),
        stalled: AtomicBool::new(false),
    });
    (
        SubTx {
            tx,
            shared: shared.clone(),
        },
        SubRx { rx, shared },
    )
}

/// Why an event could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendError {
    /// The subscriber went away.
    Gone,
    /// The subscriber's queue stayed full past the lag bound; it is now marked lagged.
    Lagged,
}

impl SubTx {
    /// Queues `ev`, waiting for room: without limit when `lag` is `None`, else at most `lag`
    /// (then the subscriber is marked lagged).
    pub(crate) async fn send(&self, ev: Event, lag: Option<Duration>) -> Result<(), SendError> {
        let n = permits_for(&ev);
        let fut = async {
            if n > 0 {
                match self.shared.budget.acquire_many(n).await {
                    Ok(p) => p.forget(),
                    Err(_) => return Err(SendError::Gone),
                }
            }
            self.tx.send((ev, n)).await.map_err(|_| SendError::Gone)
        };
        match lag {
            None => fut.await,
            Some(lag) => match tokio::time::timeout(lag, fut).await {
                Ok(r) => r,
                Err(_) => {
                    self.shared.lagged.store(true, Ordering::SeqCst);
                    Err(SendError::Lagged)
                }
            },
        }
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

    pub(crate) fn is_lagged(&self) -> bool {
        self.shared.lagged.load(Ordering::SeqCst)
    }

    pub(crate) fn is_stalled(&self) -> bool {
        self.shared.stalled.load(Ordering::Relaxed)
    }

    pub(crate) fn mark_stalled(&self) {
        self.shared.stalled.store(true, Ordering::Relaxed);
    }
}

impl SubRx {
    pub(crate) async fn recv(&mut self) -> Option<Event> {
        let (ev, n) = self.rx.recv().await?;
        self.shared.budget.add_permits(n as usize);
        if self.shared.stalled.load(Ordering::Relaxed) {
            self.shared.stalled.store(false, Ordering::Relaxed);
        }
        Some(ev)
    }

    /// Whether the fan-out dropped this subscriber for lagging.
    pub(crate) fn is_lagged(&self) -> bool {
        self.shared.lagged.load(Ordering::SeqCst)
    }
}

impl Drop for SubRx {
    fn drop(&mut self) {
        self.shared.budget.close();
    }
}
