//! Background processes: `exec_command` with `background: true` starts a process whose output
//! (stdout and stderr in arrival order) is kept in a bounded ring; `read_output`,
//! `write_stdin`, `kill_process` and `list_processes` work on it by id (`p-<n>`).
//!
//! Every process has one owner, the [`ProcessTable`]: when the server goes away, every
//! process still running is killed (process group) and its pump task stopped.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;

use crate::backend::{ExitInfo, Killer, ProcEvent, Spawned};

/// The most bytes one `read_output` call returns.
pub(crate) const MAX_READ_BYTES: usize = 256 * 1024;
/// The bytes one `read_output` call returns when it does not say.
pub(crate) const DEFAULT_READ_BYTES: usize = 64 * 1024;

/// A ring of the last `cap` bytes of a stream, addressed by absolute offsets (cursors).
#[derive(Debug)]
pub(crate) struct Ring {
    cap: usize,
    buf: VecDeque<u8>,
    /// The absolute offset of `buf[0]`.
    start: u64,
}

/// What one read of a [`Ring`] returned.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RingRead {
    /// The bytes from the (adjusted) cursor on.
    pub(crate) data: Vec<u8>,
    /// The cursor to pass next time.
    pub(crate) next_cursor: u64,
    /// Bytes between the asked cursor and the oldest byte still kept (the reader was lapped).
    pub(crate) lost: u64,
}

impl Ring {
    /// A ring keeping at most `cap` bytes (at least one).
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            buf: VecDeque::new(),
            start: 0,
        }
    }

    /// The absolute offset one past the newest byte.
    pub(crate) fn end(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    /// Appends bytes, dropping the oldest past the cap.
    pub(crate) fn push(&mut self, data: &[u8]) {
        if data.len() >= self.cap {
            let skip = data.len() - self.cap;
            self.start = self.end() + skip as u64;
            self.buf.clear();
            self.buf.extend(&data[skip..]);
            return;
        }
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.start += overflow as u64;
        self.buf.extend(data);
    }

    /// At most `max` bytes from `cursor` on; a cursor older than what is kept starts at the
    /// oldest byte and reports the gap as `lost`; one past the end reads nothing.
    pub(crate) fn read(&self, cursor: u64, max: usize) -> RingRead {
        let lost = self.start.saturating_sub(cursor);
        let from = cursor.clamp(self.start, self.end());
        let off = usize::try_from(from - self.start).unwrap_or(usize::MAX);
        let n = max.min(self.buf.len().saturating_sub(off));
        let data: Vec<u8> = self.buf.range(off..off + n).copied().collect();
        RingRead {
            next_cursor: from + n as u64,
            data,
            lost,
        }
    }
}

/// Cuts `data` back to the last complete UTF-8 character (at most 3 bytes), so a character
/// split across two reads is returned whole by the next one.
pub(crate) fn utf8_boundary(data: &[u8]) -> usize {
    match std::str::from_utf8(data) {
        Ok(_) => data.len(),
        Err(e) if e.error_len().is_none() && data.len() - e.valid_up_to() <= 3 => e.valid_up_to(),
        Err(_) => data.len(),
    }
}

/// The mutable state of one process.
#[derive(Debug)]
struct ProcState {
    ring: Ring,
    exit: Option<ExitInfo>,
    /// The output stream ended (with or without an exit status).
    done: bool,
    /// Why the stream ended without an exit status.
    error: Option<String>,
}

/// One background process.
pub(crate) struct Proc {
    /// `p-<n>`.
    pub(crate) id: String,
    /// The command line.
    pub(crate) command: String,
    /// The caller's label, if any.
    pub(crate) tag: Option<String>,
    /// When it started (for running time).
    pub(crate) started: Instant,
    /// When it started, seconds since the epoch.
    pub(crate) started_unix: u64,
    state: Mutex<ProcState>,
    killer: Box<dyn Killer>,
    pump: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Proc {
    fn state(&self) -> MutexGuard<'_, ProcState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The process's own control (kill, terminate, stdin).
    pub(crate) fn control(&self) -> &dyn Killer {
        self.killer.as_ref()
    }

    /// Reads output from `cursor`.
    pub(crate) fn read(&self, cursor: u64, max: usize) -> ProcRead {
        let st = self.state();
        let mut r = st.ring.read(cursor, max);
        let at_end = r.next_cursor == st.ring.end();
        if !(st.done && at_end) {
            let keep = utf8_boundary(&r.data);
            r.next_cursor -= (r.data.len() - keep) as u64;
            r.data.truncate(keep);
        }
        let eof = st.done && r.next_cursor == st.ring.end();
        ProcRead {
            read: r,
            eof,
            exit: st.exit,
            running: !st.done,
            error: st.error.clone(),
            total: st.ring.end(),
        }
    }

    /// Whether the process is still running (its output not ended).
    pub(crate) fn running(&self) -> bool {
        !self.state().done
    }

    /// How it ended, if it did.
    pub(crate) fn exit(&self) -> Option<ExitInfo> {
        self.state().exit
    }
}

/// What [`Proc::read`] returned.
pub(crate) struct ProcRead {
    pub(crate) read: RingRead,
    /// The process ended and this read reached the end of its output.
    pub(crate) eof: bool,
    pub(crate) exit: Option<ExitInfo>,
    pub(crate) running: bool,
    pub(crate) error: Option<String>,
    /// Bytes written in all.
    pub(crate) total: u64,
}

/// The server's background processes.
pub(crate) struct ProcessTable {
    ring_bytes: usize,
    max: usize,
    next: Mutex<u64>,
    procs: Mutex<BTreeMap<u64, Arc<Proc>>>,
}

impl ProcessTable {
    /// A table keeping `ring_bytes` of output per process and at most `max` processes.
    pub(crate) fn new(ring_bytes: usize, max: usize) -> Self {
        Self {
            ring_bytes,
            max,
            next: Mutex::new(0),
            procs: Mutex::new(BTreeMap::new()),
        }
    }

    fn procs(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Proc>>> {
        self.procs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Room for one more: finished processes are forgotten oldest first when the table is full;
    /// an error naming the running ones when every slot runs.
    pub(crate) fn reserve(&self) -> Result<(), String> {
        let mut procs = self.procs();
        while procs.len() >= self.max {
            let done = procs.iter().find(|(_, p)| !p.running()).map(|(k, _)| *k);
            match done {
                Some(k) => {
                    procs.remove(&k);
                }
                None => {
                    let ids: Vec<&str> = procs.values().map(|p| p.id.as_str()).collect();
                    return Err(format!(
                        "{} background processes are running, the most this server keeps (--max-processes); stop one with kill_process (running: {})",
                        procs.len(),
                        ids.join(", ")
                    ));
                }
            }
        }
        Ok(())
    }

    /// Registers a started process and pumps its output into its ring.
    pub(crate) fn insert(
        &self,
        spawned: Spawned,
        command: String,
        tag: Option<String>,
    ) -> Arc<Proc> {
        let n = {
            let mut next = self
                .next
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *next += 1;
            *next
        };
        let Spawned { mut events, killer } = spawned;
        let proc = Arc::new(Proc {
            id: format!("p-{n}"),
            command,
            tag,
            started: Instant::now(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            state: Mutex::new(ProcState {
                ring: Ring::new(self.ring_bytes),
                exit: None,
                done: false,
                error: None,
            }),
            killer,
            pump: Mutex::new(None),
        });
        let weak = Arc::downgrade(&proc);
        let task = tokio::spawn(async move {
            while let Some(ev) = events.next().await {
                let Some(p) = weak.upgrade() else { return };
                let mut st = p.state();
                match ev {
                    Ok(ProcEvent::Stdout(b) | ProcEvent::Stderr(b)) => st.ring.push(&b),
                    Ok(ProcEvent::Exit(info)) => {
                        st.exit = Some(info);
                        st.done = true;
                        return;
                    }
                    Err(e) => {
                        st.error = Some(e.message);
                        st.done = true;
                        return;
                    }
                }
            }
            if let Some(p) = weak.upgrade() {
                let mut st = p.state();
                if !st.done {
                    st.done = true;
                    st.error = Some("the sandbox closed the output without an exit status".into());
                }
            }
        });
        *proc
            .pump
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(task);
        self.procs().insert(n, proc.clone());
        proc
    }

    /// The process `id`, or an error listing the known ids.
    pub(crate) fn get(&self, id: &str) -> Result<Arc<Proc>, String> {
        let procs = self.procs();
        if let Some(p) = procs.values().find(|p| p.id == id) {
            return Ok(p.clone());
        }
        let ids: Vec<&str> = procs.values().map(|p| p.id.as_str()).collect();
        Err(if ids.is_empty() {
            format!(
                "no background process {id:?}; none is known. Start one with exec_command and background: true"
            )
        } else {
            format!(
                "no background process {id:?}; known: {} (list_processes shows them)",
                ids.join(", ")
            )
        })
    }

    /// Every known process, oldest first.
    pub(crate) fn list(&self) -> Vec<Arc<Proc>> {
        self.procs().values().cloned().collect()
    }
}

impl Drop for ProcessTable {
    fn drop(&mut self) {
        let procs = std::mem::take(&mut *self.procs());
        let running: Vec<Arc<Proc>> = procs.into_values().filter(|p| p.running()).collect();
        if running.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                for p in running {
                    if let Err(e) = p.killer.kill().await {
                        tracing::debug!(id = %p.id, error = %e, "killing a background process at shutdown failed");
                    }
                    if let Some(t) = p
                        .pump
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .take()
                    {
                        t.abort();
                    }
                }
            });
        }
    }
}

/// Bytes written to a process's stdin, as one message.
pub(crate) fn stdin_bytes(data: String) -> Bytes {
    Bytes::from(data.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_reads_incrementally() {
        let mut r = Ring::new(8);
        r.push(b"abc");
        let a = r.read(0, 2);
        assert_eq!(
            (a.data.as_slice(), a.next_cursor, a.lost),
            (&b"ab"[..], 2, 0)
        );
        let b = r.read(a.next_cursor, 100);
        assert_eq!(
            (b.data.as_slice(), b.next_cursor, b.lost),
            (&b"c"[..], 3, 0)
        );
        let c = r.read(b.next_cursor, 100);
        assert!(c.data.is_empty());
        assert_eq!(c.next_cursor, 3);
    }

    #[test]
    fn a_lapped_reader_is_told_what_it_lost() {
        let mut r = Ring::new(4);
        r.push(b"0123");
        r.push(b"45");
        let a = r.read(1, 100);
        assert_eq!(
            (a.data.as_slice(), a.next_cursor, a.lost),
            (&b"2345"[..], 6, 1)
        );
        r.push(b"0123456789");
        assert_eq!(r.end(), 16);
        let b = r.read(6, 100);
        assert_eq!(
            (b.data.as_slice(), b.next_cursor, b.lost),
            (&b"6789"[..], 16, 6)
        );
        // A cursor from the future reads nothing and stays at the end.
        let c = r.read(99, 100);
        assert_eq!((c.data.len(), c.next_cursor, c.lost), (0, 16, 0));
    }

    #[test]
    fn reads_stop_before_a_split_character() {
        let s = "aé".as_bytes();
        assert_eq!(utf8_boundary(&s[..2]), 1);
        assert_eq!(utf8_boundary(s), 3);
        assert_eq!(utf8_boundary(b"\xff\xfe"), 2);
    }
}
