//! Running one command: timeout, cancellation, bounded capture, progress.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::backend::{ProcEvent, RunSpec, SandboxBackend};
use crate::error::BackendError;
use crate::output::HeadTail;

/// Exit code reported when the server's timeout killed the command (GNU `timeout`'s).
pub(crate) const TIMEOUT_EXIT_CODE: i32 = 124;
/// How long to wait for the process group to go away after a kill.
pub(crate) const DRAIN_AFTER_KILL: Duration = Duration::from_secs(5);
/// The most output one progress notification carries.
const PROGRESS_CHUNK_MAX: usize = 64 * 1024;

/// Limits that apply to every command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExecLimits {
    pub(crate) default_timeout: Duration,
    pub(crate) max_timeout: Duration,
    pub(crate) output_cap: usize,
    pub(crate) progress_interval: Duration,
}

/// Receives new output while a command runs: (bytes of output so far, the new text).
pub(crate) type ProgressFn =
    Box<dyn Fn(u64, String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// What came of a command.
#[derive(Debug, Clone, Default)]
pub(crate) struct ExecOutcome {
    /// Combined output in arrival order (head + marker + tail when truncated).
    pub(crate) output: Vec<u8>,
    /// stdout and stderr apart, kept only for the legacy text format.
    pub(crate) legacy: Option<(Vec<u8>, Vec<u8>)>,
    /// With `legacy`, when stdout was cut: its first bytes only (no marker, no tail).
    pub(crate) stdout_head: Option<Vec<u8>>,
    pub(crate) exit_code: i32,
    pub(crate) signal: Option<i32>,
    pub(crate) timed_out: bool,
    pub(crate) cancelled: bool,
    pub(crate) truncated: bool,
    pub(crate) duration_ms: u64,
    pub(crate) stdout_bytes: u64,
    pub(crate) stderr_bytes: u64,
}

/// Resolves the requested timeout in seconds: `None` → default, `0` → maximum, capped at the
/// maximum (any finite size, however large, is capped, never a panic); negative, NaN or
/// infinite values are refused.
pub(crate) fn resolve_timeout(
    requested: Option<f64>,
    limits: &ExecLimits,
) -> Result<Duration, String> {
    match requested {
        None => Ok(limits.default_timeout.min(limits.max_timeout)),
        Some(t) if !t.is_finite() || t < 0.0 => Err(format!(
            "timeout must be a non-negative number of seconds, got {t}; use 0 for the server's maximum ({} s)",
            limits.max_timeout.as_secs_f64()
        )),
        Some(0.0) => Ok(limits.max_timeout),
        Some(t) => Ok(Duration::try_from_secs_f64(t)
            .unwrap_or(limits.max_timeout)
            .min(limits.max_timeout)),
    }
}

/// Runs `spec` to its end (or timeout / cancellation), capturing bounded output.
pub(crate) async fn run(
    backend: &dyn SandboxBackend,
    mut spec: RunSpec,
    timeout: Duration,
    limits: &ExecLimits,
    ct: CancellationToken,
    progress: Option<ProgressFn>,
    legacy: bool,
) -> Result<ExecOutcome, BackendError> {
    let started = tokio::time::Instant::now();
    // The sandbox's own kill is a safety net in case this server dies mid-command.
    spec.hard_timeout = Some(timeout + Duration::from_secs(10));
    let spawned = backend.spawn(spec).await?;
    let mut events = spawned.events;
    let killer = spawned.killer;

    let mut combined = HeadTail::new(limits.output_cap);
    let mut legacy_bufs = legacy.then(|| {
        (
            HeadTail::new(limits.output_cap / 2),
            HeadTail::new(limits.output_cap - limits.output_cap / 2),
        )
    });
    let mut stdout_bytes = 0u64;
    let mut stderr_bytes = 0u64;
    let mut pending_progress: Vec<u8> = Vec::new();
    let mut pending_dropped = 0u64;
    let mut tick = tokio::time::interval(limits.progress_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    // The timeout counts from the request, not from when the sandbox answered the spawn: a
    // slow spawn (a loaded machine, a queue of starts) must not give the command extra time.
    let deadline = started + timeout;
    let mut killed_at: Option<tokio::time::Instant> = None;
    let mut timed_out = false;
    let mut cancelled = false;
    let mut exit = None;

    loop {
        let drain_deadline = killed_at.map(|t| t + DRAIN_AFTER_KILL);
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(ProcEvent::Stdout(b))) | Some(Ok(ProcEvent::Stderr(b))) if b.is_empty() => {}
                Some(Ok(ProcEvent::Stdout(b))) => {
                    stdout_bytes += b.len() as u64;
                    combined.push(&b);
                    if let Some((o, _)) = legacy_bufs.as_mut() { o.push(&b); }
                    if progress.is_some() { queue_progress(&mut pending_progress, &mut pending_dropped, &b); }
                }
                Some(Ok(ProcEvent::Stderr(b))) => {
                    stderr_bytes += b.len() as u64;
                    combined.push(&b);
                    if let Some((_, e)) = legacy_bufs.as_mut() { e.push(&b); }
                    if progress.is_some() { queue_progress(&mut pending_progress, &mut pending_dropped, &b); }
                }
                Some(Ok(ProcEvent::Exit(info))) => { exit = Some(info); break; }
                Some(Err(e)) => {
                    if killed_at.is_some() { break; }
                    return Err(e);
                }
                None => break,
            },
            _ = tokio::time::sleep_until(deadline), if killed_at.is_none() => {
                timed_out = true;
                tracing::info!(timeout_s = timeout.as_secs_f64(), "command timed out; killing its process group");
                if let Err(e) = killer.kill().await { tracing::warn!(error = %e, "kill after timeout failed"); }
                killed_at = Some(tokio::time::Instant::now());
            }
            _ = ct.cancelled(), if killed_at.is_none() => {
                cancelled = true;
                tracing::info!("request cancelled; killing the command's process group");
                if let Err(e) = killer.kill().await { tracing::warn!(error = %e, "kill after cancel failed"); }
                killed_at = Some(tokio::time::Instant::now());
            }
            _ = async {
                match drain_deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending::<()>().await,
                }
            } => {
                tracing::warn!("process group still holds its output open after kill; giving up on it");
                break;
            }
            _ = tick.tick(), if progress.is_some() && !pending_progress.is_empty() => {
                if let Some(p) = progress.as_ref() {
                    flush_progress(p, &mut pending_progress, &mut pending_dropped, stdout_bytes + stderr_bytes).await;
                }
            }
        }
    }
    if let Some(p) = progress.as_ref()
        && !pending_progress.is_empty()
    {
        flush_progress(
            p,
            &mut pending_progress,
            &mut pending_dropped,
            stdout_bytes + stderr_bytes,
        )
        .await;
    }

    let (exit_code, signal) = if timed_out {
        (TIMEOUT_EXIT_CODE, exit.and_then(|e| e.signal))
    } else {
        match exit {
            Some(info) => (info.code(), info.signal),
            // Killed on cancel and no exit seen: report the kill signal.
            None if cancelled => (128 + 9, Some(9)),
            None => {
                return Err(BackendError::new(
                    "the sandbox closed the command's output without reporting an exit status",
                ));
            }
        }
    };

    let truncated = combined.truncated();
    Ok(ExecOutcome {
        output: combined.render(),
        stdout_head: legacy_bufs
            .as_ref()
            .filter(|(o, _)| o.truncated())
            .map(|(o, _)| o.head().to_vec()),
        legacy: legacy_bufs.map(|(o, e)| (o.render(), e.render())),
        exit_code,
        signal,
        timed_out,
        cancelled,
        truncated,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        stdout_bytes,
        stderr_bytes,
    })
}

fn queue_progress(pending: &mut Vec<u8>, dropped: &mut u64, b: &[u8]) {
    let room = PROGRESS_CHUNK_MAX.saturating_sub(pending.len());
    let n = room.min(b.len());
    pending.extend_from_slice(&b[..n]);
    *dropped += (b.len() - n) as u64;
}

async fn flush_progress(p: &ProgressFn, pending: &mut Vec<u8>, dropped: &mut u64, total: u64) {
    let mut text = String::from_utf8_lossy(pending).into_owned();
    if *dropped > 0 {
        text.push_str(&format!(
            "\n[... exec-server: {} bytes of output not shown in progress ...]\n",
            *dropped
        ));
    }
    pending.clear();
    *dropped = 0;
    p(total, text).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ExecLimits {
        ExecLimits {
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(3600),
            output_cap: 1024,
            progress_interval: Duration::from_millis(250),
        }
    }

    #[test]
    fn resolve_timeout_defaults_caps_and_refuses() {
        let l = limits();
        assert_eq!(resolve_timeout(None, &l), Ok(Duration::from_secs(120)));
        assert_eq!(
            resolve_timeout(Some(0.0), &l),
            Ok(Duration::from_secs(3600))
        );
        assert_eq!(
            resolve_timeout(Some(1.5), &l),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(
            resolve_timeout(Some(7200.0), &l),
            Ok(Duration::from_secs(3600))
        );
        // Values past Duration's range are capped, not a panic.
        assert_eq!(
            resolve_timeout(Some(1e300), &l),
            Ok(Duration::from_secs(3600))
        );
        assert_eq!(
            resolve_timeout(Some(f64::MAX), &l),
            Ok(Duration::from_secs(3600))
        );
        assert!(resolve_timeout(Some(-1.0), &l).is_err());
        assert!(resolve_timeout(Some(f64::NAN), &l).is_err());
        assert!(resolve_timeout(Some(f64::INFINITY), &l).is_err());
        let small = ExecLimits {
            default_timeout: Duration::from_secs(500),
            max_timeout: Duration::from_secs(60),
            ..l
        };
        assert_eq!(resolve_timeout(None, &small), Ok(Duration::from_secs(60)));
    }
}
