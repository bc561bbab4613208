//! The transport's lifecycle: one [`Phase`] in one place ([`Lifecycle`], held in the transport's
//! `watch` channel), changed only by [`Phase::next`].
//!
//! The moves (any other pair is refused; "=" keeps the phase, the event changes nothing more):
//!
//! | from \ event   | `Stop`         | `UserKill`     | `OversizeKill`   | `WriterEnded` | `Exit`                   |
//! |----------------|----------------|----------------|------------------|---------------|--------------------------|
//! | `Running`      | `Stopping`     | `Killed{user}` | `Killed{!user}`  | `WriterEnded` | `Exited{!killed, !user}` |
//! | `WriterEnded`  | `Stopping`     | `Killed{user}` | `Killed{!user}`  | refused       | `Exited{!killed, !user}` |
//! | `Stopping`     | =              | `Killed{user}` | `Killed{user}`   | =             | `Exited{!killed, user}`  |
//! | `Killed{u}`    | `Killed{user}` | `Killed{user}` | =                | =             | `Exited{killed, u}`      |
//! | `Exited{k, u}` | `Exited{k, user}` | `Exited{k, user}` | =          | =             | refused                  |
//!
//! No move leads back to `Running`, out of `Exited`, or clears `user` (stop, kill or drop was
//! called) or `killed` (this crate killed the agent before its exit was known). The writer ends
//! once and the exit is reported once: a second report is refused.
//!
//! What the phases mean for the tasks: sends are accepted only while `Running`; the agent's
//! output is forwarded until the user closes (`stop`, `kill`, drop); queued writes go on until
//! the agent is killed or has exited.

use crate::error::AcpError;
use crate::process::ProcessExit;

/// How waiting for the agent ended: its exit, or why waiting failed (the agent may still run).
pub(crate) type ExitResult = Result<ProcessExit, String>;

/// Where the transport is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Sends accepted, output forwarded, writes flowing.
    Running,
    /// The writer ended on its own (a write failed): no new sends; output still forwarded.
    WriterEnded,
    /// `stop` was called: no new sends, output no longer forwarded; queued writes flush, then
    /// stdin is closed.
    Stopping,
    /// This crate killed the agent before its exit was known (`kill`, drop, `stop` past its
    /// grace period, an oversized message): nothing more is written. `user_closed`: stop, kill
    /// or drop was called (output no longer forwarded).
    Killed {
        /// Stop, kill or drop was called.
        user_closed: bool,
    },
    /// Waiting for the agent ended (its exit, or a failure to wait): nothing more is written.
    Exited {
        /// The exit, or why waiting failed.
        exit: ExitResult,
        /// This crate killed the agent before its exit was known.
        killed: bool,
        /// Stop, kill or drop was called.
        user_closed: bool,
    },
}

/// What happened to the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// `stop` was called.
    Stop,
    /// `kill` or drop was called, or `stop` gave up waiting after EOF.
    UserKill,
    /// The reader killed the agent for an oversized message.
    OversizeKill,
    /// The writer task ended (stdin closed, a write failed, or writes were halted).
    WriterEnded,
    /// Waiting for the agent ended.
    Exit(ExitResult),
}

/// A move the table in this module refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IllegalMove {
    pub(crate) from: Phase,
    pub(crate) event: Event,
}

impl Phase {
    /// The phase after `event`, or the refused move.
    pub(crate) fn next(&self, event: Event) -> Result<Phase, IllegalMove> {
        use Phase::{Exited, Killed, Running, Stopping, WriterEnded};
        Ok(match (self, event) {
            (Running | WriterEnded, Event::Stop) => Stopping,
            (Running | WriterEnded | Stopping | Killed { .. }, Event::UserKill)
            | (Stopping | Killed { .. }, Event::Stop)
            | (Stopping, Event::OversizeKill) => Killed { user_closed: true },
            (Running | WriterEnded, Event::OversizeKill) => Killed { user_closed: false },
            (Running, Event::WriterEnded) => WriterEnded,
            (Running | WriterEnded, Event::Exit(exit)) => Exited {
                exit,
                killed: false,
                user_closed: false,
            },
            (Stopping, Event::Exit(exit)) => Exited {
                exit,
                killed: false,
                user_closed: true,
            },
            (Killed { user_closed }, Event::Exit(exit)) => Exited {
                exit,
                killed: true,
                user_closed: *user_closed,
            },
            (Exited { exit, killed, .. }, Event::Stop | Event::UserKill) => Exited {
                exit: exit.clone(),
                killed: *killed,
                user_closed: true,
            },
            (Killed { .. } | Exited { .. }, Event::OversizeKill)
            | (Stopping | Killed { .. } | Exited { .. }, Event::WriterEnded) => self.clone(),
            (WriterEnded, event @ Event::WriterEnded) | (Exited { .. }, event @ Event::Exit(_)) => {
                return Err(IllegalMove {
                    from: self.clone(),
                    event,
                });
            }
        })
    }

    /// Only a running transport accepts new messages.
    pub(crate) fn accepts_sends(&self) -> bool {
        matches!(self, Phase::Running)
    }

    /// Stop, kill or drop was called: output is no longer forwarded and the SDK layer dispatches
    /// nothing more.
    pub(crate) fn user_closed(&self) -> bool {
        match self {
            Phase::Running | Phase::WriterEnded => false,
            Phase::Stopping => true,
            Phase::Killed { user_closed } | Phase::Exited { user_closed, .. } => *user_closed,
        }
    }

    /// Nothing more is written to the agent (queued writes are dropped).
    pub(crate) fn writes_halted(&self) -> bool {
        matches!(self, Phase::Killed { .. } | Phase::Exited { .. })
    }

    /// This crate killed the agent before its exit was known.
    pub(crate) fn killed(&self) -> bool {
        matches!(
            self,
            Phase::Killed { .. } | Phase::Exited { killed: true, .. }
        )
    }

    /// How waiting for the agent ended, once it has.
    pub(crate) fn exit(&self) -> Option<&ExitResult> {
        match self {
            Phase::Exited { exit, .. } => Some(exit),
            _ => None,
        }
    }

    /// The agent's exit was observed (a failure to wait is not an exit: it may still run).
    pub(crate) fn exit_known(&self) -> bool {
        matches!(self.exit(), Some(Ok(_)))
    }
}

/// The phase and what went wrong along the way. The failures are facts, not phases: a failed
/// output stream does not stop sends, and a write error stays the reason for later refusals
/// whatever happens next.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    pub(crate) phase: Phase,
    /// The first error that ended reading (oversized message, failed output stream), reported
    /// once by `recv` and by `wait`.
    pub(crate) read_error: Option<AcpError>,
    /// The agent's output stream failed (the sandbox connection broke): `stop` kills at once.
    pub(crate) output_failed: bool,
    /// Why writing to the agent failed.
    pub(crate) write_error: Option<String>,
}

impl Lifecycle {
    pub(crate) fn new() -> Self {
        Self {
            phase: Phase::Running,
            read_error: None,
            output_failed: false,
            write_error: None,
        }
    }

    /// True once the agent's output is no longer forwarded to the client.
    pub(crate) fn reads_halted(&self) -> bool {
        self.phase.user_closed()
    }

    /// True once nothing more is written to the agent.
    pub(crate) fn writes_halted(&self) -> bool {
        self.phase.writes_halted()
    }

    /// True once waiting for the agent ended.
    pub(crate) fn wait_ended(&self) -> bool {
        self.phase.exit().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> Vec<Event> {
        vec![
            Event::Stop,
            Event::UserKill,
            Event::OversizeKill,
            Event::WriterEnded,
            Event::Exit(Ok(ProcessExit::code(0))),
        ]
    }

    fn phases() -> Vec<Phase> {
        let mut v = vec![
            Phase::Running,
            Phase::WriterEnded,
            Phase::Stopping,
            Phase::Killed { user_closed: false },
            Phase::Killed { user_closed: true },
        ];
        for killed in [false, true] {
            for user_closed in [false, true] {
                for exit in [Ok(ProcessExit::code(1)), Err("lost".to_owned())] {
                    v.push(Phase::Exited {
                        exit,
                        killed,
                        user_closed,
                    });
                }
            }
        }
        v
    }

    #[test]
    fn the_documented_moves() {
        let exit: ExitResult = Ok(ProcessExit::code(3));
        let ok = |from: Phase, ev: Event, to: Phase| {
            assert_eq!(from.next(ev.clone()), Ok(to), "{from:?} on {ev:?}");
        };
        ok(Phase::Running, Event::Stop, Phase::Stopping);
        ok(
            Phase::Running,
            Event::UserKill,
            Phase::Killed { user_closed: true },
        );
        ok(
            Phase::Running,
            Event::OversizeKill,
            Phase::Killed { user_closed: false },
        );
        ok(Phase::Running, Event::WriterEnded, Phase::WriterEnded);
        ok(
            Phase::Running,
            Event::Exit(exit.clone()),
            Phase::Exited {
                exit: exit.clone(),
                killed: false,
                user_closed: false,
            },
        );
        ok(Phase::WriterEnded, Event::Stop, Phase::Stopping);
        ok(
            Phase::Stopping,
            Event::OversizeKill,
            Phase::Killed { user_closed: true },
        );
        ok(Phase::Stopping, Event::WriterEnded, Phase::Stopping);
        ok(
            Phase::Stopping,
            Event::Exit(exit.clone()),
            Phase::Exited {
                exit: exit.clone(),
                killed: false,
                user_closed: true,
            },
        );
        ok(
            Phase::Killed { user_closed: false },
            Event::Stop,
            Phase::Killed { user_closed: true },
        );
        ok(
            Phase::Killed { user_closed: false },
            Event::Exit(exit.clone()),
            Phase::Exited {
                exit: exit.clone(),
                killed: true,
                user_closed: false,
            },
        );
        ok(
            Phase::Exited {
                exit: exit.clone(),
                killed: false,
                user_closed: false,
            },
            Event::UserKill,
            Phase::Exited {
                exit,
                killed: false,
                user_closed: true,
            },
        );
    }

    #[test]
    fn illegal_moves_are_refused() {
        let refused = |from: Phase, ev: Event| {
            assert_eq!(
                from.next(ev.clone()),
                Err(IllegalMove {
                    from: from.clone(),
                    event: ev.clone()
                }),
                "{from:?} on {ev:?} must be refused"
            );
        };
        refused(Phase::WriterEnded, Event::WriterEnded);
        for p in phases() {
            if p.exit().is_some() {
                refused(p.clone(), Event::Exit(Ok(ProcessExit::code(0))));
                refused(p, Event::Exit(Err("again".to_owned())));
            }
        }
    }

    /// Every allowed move keeps what is already true: no way back to `Running`, out of
    /// `Exited`, and `user_closed`, `killed`, halted writes and refused sends stay so.
    #[test]
    fn no_move_goes_back() {
        for from in phases() {
            for ev in events() {
                let Ok(to) = from.next(ev.clone()) else {
                    continue;
                };
                let what = format!("{from:?} on {ev:?} gave {to:?}");
                assert_ne!(to, Phase::Running, "{what}");
                assert!(!from.user_closed() || to.user_closed(), "{what}");
                assert!(!from.killed() || to.killed(), "{what}");
                assert!(!from.writes_halted() || to.writes_halted(), "{what}");
                assert!(from.accepts_sends() || !to.accepts_sends(), "{what}");
                if let Some(exit) = from.exit() {
                    assert_eq!(to.exit(), Some(exit), "{what}");
                }
                if matches!(ev, Event::Stop | Event::UserKill) {
                    assert!(to.user_closed(), "{what}");
                }
                if matches!(ev, Event::UserKill | Event::OversizeKill) {
                    assert!(to.writes_halted(), "{what}");
                }
            }
        }
    }
}
