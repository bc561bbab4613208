//! Giving freed heap memory back to the OS once the daemon goes idle.
//!
//! Under load the daemon allocates and frees large buffers (pipe reads, file chunks, HTTP/2
//! frames) on many threads. glibc's malloc keeps what was freed in its per-thread arenas, and
//! its dynamic mmap threshold moves large blocks into those arenas too, so after a burst the
//! resident size stays near its peak although the live heap is back to a few MiB (the soak
//! benchmark measured 3 MiB live against 215 MiB resident). The `e2b-envd` binary and
//! `e2b envd` therefore call `malloc_trim(0)` once the daemon has served no request for
//! [`IDLE`]: it returns every whole free page of every arena (a few milliseconds), and the
//! next burst takes its pages again. Embedding programs choose their own allocator policy;
//! [`crate::Envd::start`] does not do this.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Requests seen by every daemon of this process (a cheap activity signal).
pub(crate) static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// How long without a request counts as idle.
pub(crate) const IDLE: Duration = Duration::from_secs(5);

/// Counts one request.
pub(crate) fn request_seen() {
    REQUESTS.fetch_add(1, Ordering::Relaxed);
}

/// Starts the idle trimmer on the current runtime (glibc only; elsewhere it does nothing).
pub(crate) fn spawn_idle_trim() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        let mut last = REQUESTS.load(Ordering::Relaxed);
        let mut trimmed = true;
        loop {
            tokio::time::sleep(IDLE).await;
            let now = REQUESTS.load(Ordering::Relaxed);
            if now != last {
                last = now;
                trimmed = false;
            } else if !trimmed {
                trimmed = true;
                // The trim walks every arena under its lock: keep it off the runtime's workers.
                crate::blocking::run_or_inline(trim).await;
            }
        }
    })
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim takes a plain size and only touches the allocator's own state.
    let released = unsafe { libc::malloc_trim(0) };
    tracing::debug!(
        released = released != 0,
        "idle: returned freed heap memory to the OS"
    );
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
