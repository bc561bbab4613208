//! Blocking work that must go on when no thread can be made.

/// Runs `f` on tokio's blocking pool, or on this task when the pool has no thread and none can
/// be made: inside a sandbox whose pids limit a fork bomb has reached, tokio panics at the
/// spawn, and the work here (reaping zombies, which is what frees the pids) must still happen.
/// `f` is cloned before the attempt so it can run again here.
pub(crate) async fn run_or_inline<F, R>(f: F) -> R
where
    F: FnOnce() -> R + Clone + Send + std::panic::UnwindSafe + 'static,
    R: Send + 'static,
{
    let again = f.clone();
    match std::panic::catch_unwind(|| tokio::task::spawn_blocking(f)) {
        Ok(handle) => match handle.await {
            Ok(r) => r,
            Err(_) => again(),
        },
        Err(_) => {
            tracing::warn!("no thread could be started for blocking work: running it inline");
            again()
        }
    }
}
