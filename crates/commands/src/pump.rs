//! The output pump: the task that reads a command's envd events and delivers them, in order, to
//! the callbacks, the event stream and the retained buffers, with back-pressure (it awaits each
//! delivery before it reads the next event).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use e2b_envd_proto::process::process_event::{Event, data_event::Output};
use futures::StreamExt as _;
use tokio::time::Instant;

use crate::decode::Utf8Decoder;
use crate::error::{CallbackError, CommandError};
use crate::options::{CallbackKind, OutputCallback};
use crate::output::{CommandEvent, ExitStatus};
use crate::state::{Guard, ProcessEvents, Shared, lock};

/// A callback panicked (its message).
#[derive(Debug)]
struct CallbackPanic(String);

impl std::fmt::Display for CallbackPanic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the callback panicked: {}", self.0)
    }
}

impl std::error::Error for CallbackPanic {}

/// Starts the pump of one command: reads `events` until the end event, a failure, the handle's
/// disconnect, or (for a reattached command) `follow_until`.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    guard: Weak<Guard>,
    on_stdout: Option<OutputCallback>,
    on_stderr: Option<OutputCallback>,
    events: ProcessEvents,
    follow_until: Option<(Instant, Duration)>,
) {
    let reader = Reader {
        shared: shared.clone(),
        guard,
        on_stdout,
        on_stderr,
        out_dec: Utf8Decoder::new(),
        err_dec: Utf8Decoder::new(),
    };
    let supervised = shared;
    tokio::spawn(async move {
        let run = std::panic::AssertUnwindSafe(reader.run(events, follow_until));
        if let Err(panic) = futures::FutureExt::catch_unwind(run).await {
            // A callback panicked: end the command's outcome with that, so `wait()` and the
            // event stream do not hang.
            let text = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a callback panicked".to_owned());
            let err = CommandError::Callback {
                stream: "output",
                source: Arc::new(CallbackPanic(text)),
            };
            if supervised.done.borrow().is_none() {
                supervised.done.send_replace(Some(Err(err.clone())));
            }
            let tx = lock(&supervised.events_tx).take();
            if let Some(tx) = tx {
                let _ = tx.try_send(Err(err));
            }
        }
    });
}

#[derive(Clone, Copy)]
enum Kind {
    Stdout,
    Stderr,
    Pty,
}

struct Reader {
    shared: Arc<Shared>,
    guard: Weak<Guard>,
    on_stdout: Option<OutputCallback>,
    on_stderr: Option<OutputCallback>,
    out_dec: Utf8Decoder,
    err_dec: Utf8Decoder,
}

enum Flow {
    Go,
    Stop(CommandError),
}

impl Reader {
    async fn run(mut self, mut events: ProcessEvents, follow_until: Option<(Instant, Duration)>) {
        let pid = self.shared.pid;
        let cancel = self.shared.cancel.clone();
        let until = async {
            match follow_until {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(until);
        let result: Result<ExitStatus, CommandError> = loop {
            let item = tokio::select! {
                biased;
                _ = cancel.cancelled() => break Err(CommandError::Disconnected { pid }),
                _ = &mut until => {
                    let after = follow_until.map(|(_, d)| d).unwrap_or_default();
                    break Err(CommandError::DeadlineExceeded {
                        message: format!(
                            "stopped following process {pid} after {after:?} (ConnectOptions::timeout); the process was not killed and keeps running"
                        ),
                    });
                }
                item = events.next() => item,
            };
            let event = match item {
                None => break Err(CommandError::NoExitStatus { pid }),
                Some(Err(status)) => break Err(CommandError::from(status)),
                Some(Ok(ev)) => ev,
            };
            match event {
                Some(Event::Data(d)) => {
                    let (kind, bytes) = match d.output {
                        Some(Output::Stdout(b)) => (Kind::Stdout, b),
                        Some(Output::Stderr(b)) => (Kind::Stderr, b),
                        Some(Output::Pty(b)) => (Kind::Pty, b),
                        None => continue,
                    };
                    if let Flow::Stop(e) = self.deliver(kind, bytes).await {
                        break Err(e);
                    }
                }
                Some(Event::End(end)) => break Ok(ExitStatus::from_end(end)),
                Some(Event::Start(_) | Event::Keepalive(_)) | None => {}
            }
        };
        drop(events);

        // Flush the decoders (end, error, or stream closed without an end), unless the user
        // disconnected or a callback failed.
        let stopped_by_us = matches!(
            result,
            Err(CommandError::Disconnected { .. } | CommandError::Callback { .. })
        ) || self.shared.disconnected.load(Ordering::SeqCst);
        let mut result = result;
        if !stopped_by_us && let Err(e) = self.flush().await {
            result = Err(e);
        }
        let lost = matches!(
            &result,
            Err(CommandError::NoExitStatus { .. } | CommandError::Transport { .. })
                | Err(CommandError::Rpc {
                    code: tonic::Code::Internal | tonic::Code::Unknown,
                    ..
                })
        );
        if lost && self.shared.rpc.sandbox_gone().await {
            result = Err(CommandError::SandboxUnavailable {
                message: format!(
                    "the sandbox was killed or reached its end of life while process {pid} was running"
                ),
            });
        }

        {
            let mut r = lock(&self.shared.retained);
            let out = r.stdout.split().freeze();
            let err = r.stderr.split().freeze();
            r.frozen = Some((out, err));
        }
        let final_item = match &result {
            Ok(st) => Ok(CommandEvent::Exit(st.clone())),
            Err(e) => Err(e.clone()),
        };
        self.shared.done.send_replace(Some(result));

        let tx = lock(&self.shared.events_tx).take();
        if let Some(tx) = tx {
            if cancel.is_cancelled() {
                let _ = tx.try_send(final_item);
            } else {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => {}
                    _ = tx.send(final_item) => {}
                }
            }
        }
    }

    async fn flush(&mut self) -> Result<(), CommandError> {
        let out = self.out_dec.finish();
        if !out.is_empty()
            && let Some(cb) = self.on_stdout.clone()
            && let Flow::Stop(e) = self.call_text(&cb, "on_stdout", out).await
        {
            return Err(e);
        }
        let err = self.err_dec.finish();
        if !err.is_empty()
            && let Some(cb) = self.on_stderr.clone()
            && let Flow::Stop(e) = self.call_text(&cb, "on_stderr", err).await
        {
            return Err(e);
        }
        Ok(())
    }

    async fn deliver(&mut self, kind: Kind, bytes: Bytes) -> Flow {
        if self.shared.retain {
            let mut r = lock(&self.shared.retained);
            match kind {
                Kind::Stdout | Kind::Pty => r.stdout.extend_from_slice(&bytes),
                Kind::Stderr => r.stderr.extend_from_slice(&bytes),
            }
        }
        let (cb, name) = match kind {
            Kind::Stdout | Kind::Pty => (self.on_stdout.clone(), "on_stdout"),
            Kind::Stderr => (self.on_stderr.clone(), "on_stderr"),
        };
        if let Some(cb) = cb {
            let flow = if cb.wants_text() {
                let dec = match kind {
                    Kind::Stderr => &mut self.err_dec,
                    _ => &mut self.out_dec,
                };
                let text = dec.decode(&bytes);
                if text.is_empty() {
                    Flow::Go
                } else {
                    self.call_text(&cb, name, text).await
                }
            } else {
                self.call_bytes(&cb, name, bytes.clone()).await
            };
            if let Flow::Stop(e) = flow {
                return Flow::Stop(e);
            }
        }
        self.send_event(match kind {
            Kind::Stdout => CommandEvent::Stdout(bytes),
            Kind::Stderr => CommandEvent::Stderr(bytes),
            Kind::Pty => CommandEvent::Pty(bytes),
        })
        .await
    }

    fn disconnected(&self) -> Option<Flow> {
        self.shared.disconnected.load(Ordering::SeqCst).then(|| {
            Flow::Stop(CommandError::Disconnected {
                pid: self.shared.pid,
            })
        })
    }

    async fn call_text(&self, cb: &OutputCallback, name: &'static str, text: String) -> Flow {
        if let Some(stop) = self.disconnected() {
            return stop;
        }
        let res = match &cb.0 {
            CallbackKind::Text(f) => (*lock(f))(&text),
            CallbackKind::TextAsync(f) => {
                let fut = (*lock(f))(text);
                self.unless_cancelled(fut).await
            }
            CallbackKind::Bytes(_) | CallbackKind::BytesAsync(_) => Ok(()),
        };
        Self::after_callback(name, res)
    }

    async fn call_bytes(&self, cb: &OutputCallback, name: &'static str, bytes: Bytes) -> Flow {
        if let Some(stop) = self.disconnected() {
            return stop;
        }
        let res = match &cb.0 {
            CallbackKind::Bytes(f) => (*lock(f))(&bytes),
            CallbackKind::BytesAsync(f) => {
                let fut = (*lock(f))(bytes);
                self.unless_cancelled(fut).await
            }
            CallbackKind::Text(_) | CallbackKind::TextAsync(_) => Ok(()),
        };
        Self::after_callback(name, res)
    }

    /// Awaits an async callback's future; a disconnect stops waiting for it (as success: the
    /// disconnect itself decides what `wait` reports).
    async fn unless_cancelled(
        &self,
        fut: impl Future<Output = Result<(), CallbackError>>,
    ) -> Result<(), CallbackError> {
        tokio::select! {
            biased;
            _ = self.shared.cancel.cancelled() => Ok(()),
            r = fut => r,
        }
    }

    fn after_callback(name: &'static str, res: Result<(), CallbackError>) -> Flow {
        match res {
            Ok(()) => Flow::Go,
            Err(e) => Flow::Stop(CommandError::callback(name, e)),
        }
    }

    async fn send_event(&self, event: CommandEvent) -> Flow {
        let tx = lock(&self.shared.events_tx).clone();
        let Some(tx) = tx else {
            return Flow::Go;
        };
        tokio::select! {
            biased;
            _ = self.shared.cancel.cancelled() => Flow::Stop(CommandError::Disconnected { pid: self.shared.pid }),
            r = tx.send(Ok(event)) => {
                if r.is_err() {
                    // The stream was dropped: stop feeding it. With no handle and no callbacks
                    // left, nobody needs the output any more.
                    lock(&self.shared.events_tx).take();
                    if self.guard.strong_count() == 0 && !self.shared.has_callbacks {
                        return Flow::Stop(CommandError::Disconnected { pid: self.shared.pid });
                    }
                }
                Flow::Go
            }
        }
    }
}
