//! Running (and recently exited) processes, output fan-out and the per-process supervisor.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use e2b_envd_proto::process::process_event::{DataEvent, EndEvent, Event, data_event::Output};
use e2b_envd_proto::process::{ProcessConfig, ProcessSelector, process_selector::Selector};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;

use super::pty::PtyMaster;
use super::spawn::Spawned;
use super::subscriber::{self, SubRx, SubTx};

/// Read block for stdout/stderr. envd reads 32 KiB; we read up to 1 MiB (from 1 MiB pipes) so a
/// fast producer costs fewer events. Chunk boundaries are arbitrary either way.
const PIPE_CHUNK: usize = 1024 * 1024;
const PTY_CHUNK: usize = 16 * 1024;
/// After a signalled process exits, how long output still in its pipes (or written by
/// descendants that hold them) is read before the end event goes out.
const SIGNAL_DRAIN: Duration = Duration::from_millis(500);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Debug)]
enum RunState {
    Running { subs: Vec<SubTx> },
    Ended(EndEvent),
}

/// What a new subscriber gets: a live feed, or the retained end of an exited process.
#[derive(Debug)]
pub(crate) enum Subscription {
    Live(SubRx),
    Ended(EndEvent),
}

/// One process started by the daemon.
#[derive(Debug)]
pub(crate) struct ProcEntry {
    pub(crate) pid: u32,
    pub(crate) tag: Option<String>,
    pub(crate) config: ProcessConfig,
    pty: Mutex<Option<Arc<PtyMaster>>>,
    is_pty: bool,
    stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    state: Mutex<RunState>,
    cancel_output: CancellationToken,
    /// The command's cgroup (taken when the process has ended).
    group: Mutex<Option<super::tree::CmdGroup>>,
    /// Cancelled by CloseStdin and at the end of the process; aborts a blocked stdin write.
    stdin_closed: CancellationToken,
    timed_out: AtomicBool,
    /// Set once the process has been waited for: its pid (and process group id) may then be
    /// reused by an unrelated process, so only its cgroup may still be signalled.
    reaped: AtomicBool,
    lag_timeout: Duration,
}

impl ProcEntry {
    pub(crate) fn is_running(&self) -> bool {
        matches!(*lock(&self.state), RunState::Running { .. })
    }

    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::SeqCst)
    }

    /// Adds a subscriber (or returns the retained end).
    pub(crate) fn subscribe(&self) -> Subscription {
        let mut st = lock(&self.state);
        match &mut *st {
            RunState::Running { subs } => {
                let (tx, rx) = subscriber::channel();
                subs.push(tx);
                Subscription::Live(rx)
            }
            RunState::Ended(end) => Subscription::Ended(end.clone()),
        }
    }

    /// Waits until no subscriber has more than one event waiting. The output pumps call this
    /// before each read: while a client is busy, output collects in the pipe and the next read
    /// takes all of it as one chunk, so a fast producer yields few, large events (less work
    /// per byte everywhere) while an idle client still gets each write at once. A subscriber
    /// that does not drain within the lag bound is marked stalled and no longer waited for
    /// here (until it takes an event); [`broadcast`](Self::broadcast) then decides its fate.
    async fn wait_for_demand(&self) {
        // Called before every read: only subscribers that are behind are cloned (usually none).
        let behind: Vec<SubTx> = match &*lock(&self.state) {
            RunState::Running { subs } => subs
                .iter()
                .filter(|s| !s.is_stalled() && !s.is_drained(1))
                .cloned()
                .collect(),
            RunState::Ended(_) => return,
        };
        if behind.is_empty() {
            return;
        }
        let all = futures::future::join_all(behind.iter().map(|s| s.wait_drained(1)));
        if tokio::time::timeout(self.lag_timeout, all).await.is_err() {
            for s in behind.iter().filter(|s| !s.is_drained(1)) {
                s.mark_stalled();
            }
        }
    }

    /// Sends `event` to every subscriber, waiting on each in turn (back-pressure). With no
    /// subscriber the event is dropped. With several, one whose queue stays full past the lag
    /// bound is dropped (its stream ends with `resource_exhausted`); a sole subscriber is
    /// waited for without limit, as envd does.
    async fn broadcast(&self, event: Event) {
        let subs: Vec<SubTx> = match &*lock(&self.state) {
            RunState::Running { subs } => subs.clone(),
            RunState::Ended(_) => return,
        };
        if subs.is_empty() {
            return;
        }
        let lag = (subs.len() > 1).then_some(self.lag_timeout);
        let mut dead = false;
        let last = subs.len() - 1;
        let mut event = Some(event);
        for (i, s) in subs.iter().enumerate() {
            // Clone for all but the last subscriber, which gets the original.
            let ev = if i == last {
                event.take()
            } else {
                event.clone()
            };
            if let Some(ev) = ev
                && s.send(ev, lag).await.is_err()
            {
                dead = true;
            }
        }
        if dead && let RunState::Running { subs } = &mut *lock(&self.state) {
            subs.retain(|s| !s.is_closed() && !s.is_lagged());
        }
    }

    async fn finish(&self, end: EndEvent) {
        let subs = {
            let mut st = lock(&self.state);
            match std::mem::replace(&mut *st, RunState::Ended(end.clone())) {
                RunState::Running { subs } => subs,
                RunState::Ended(_) => Vec::new(),
            }
        };
        self.stdin_closed.cancel();
        *self.stdin.lock().await = None;
        lock(&self.pty).take();
        let lag = (subs.len() > 1).then_some(self.lag_timeout);
        futures::future::join_all(subs.iter().map(|s| s.send(Event::End(end.clone()), lag))).await;
    }

    /// Sends `signal` to everything the command started: its process group, its cgroup (or,
    /// without one, every process descending from it or in its session or group, see
    /// [`super::tree::signal_tree`]). Output is then read until the process exits (see
    /// `supervise`).
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) -> Result<(), Status> {
        let pid = i32::try_from(self.pid).unwrap_or(i32::MAX);
        // The cgroup first, under its lock: once the group leader dies the supervisor may
        // finish and take the cgroup, and a `setsid` descendant would then be missed.
        let res = {
            let group = lock(&self.group);
            // Once the leader is reaped its pid (and so its group id) may name another
            // process: only the cgroup is signalled then.
            let reaped = self.reaped.load(Ordering::SeqCst);
            match &*group {
                Some(g) => {
                    g.signal(signal);
                    if reaped {
                        Ok(())
                    } else {
                        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), signal)
                    }
                }
                None if reaped => Ok(()),
                None => super::tree::signal_tree(pid, signal),
            }
        };
        self.cancel_output.cancel();
        match res {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(Status::internal(format!("error sending signal: {e}"))),
        }
    }

    pub(crate) async fn write_stdin(&self, data: &[u8]) -> Result<(), Status> {
        if self.is_pty {
            return Err(Status::internal(
                "error writing to stdin: the process runs in a pty; send pty input instead",
            ));
        }
        let closed = || Status::internal("error writing to stdin: stdin not enabled or closed");
        // A write blocked on a full pipe (a process that never reads) must not keep CloseStdin
        // or the end of the process waiting for this lock: both cancel `stdin_closed` first.
        let mut guard = tokio::select! {
            g = self.stdin.lock() => g,
            _ = self.stdin_closed.cancelled() => return Err(closed()),
        };
        let Some(stdin) = guard.as_mut() else {
            return Err(closed());
        };
        let res = tokio::select! {
            r = async {
                stdin.write_all(data).await?;
                stdin.flush().await
            } => r,
            _ = self.stdin_closed.cancelled() => return Err(Status::internal(
                "error writing to stdin: stdin was closed (CloseStdin or the process ended) during the write",
            )),
        };
        res.map_err(|e| Status::internal(format!("error writing to stdin: {e}")))
    }

    pub(crate) async fn write_pty(&self, data: &[u8]) -> Result<(), Status> {
        let pty = lock(&self.pty).clone();
        let Some(pty) = pty else {
            return Err(Status::internal(
                "error writing to pty: the process has no tty",
            ));
        };
        pty.write_all(data)
            .await
            .map_err(|e| Status::internal(format!("error writing to pty: {e}")))
    }

    pub(crate) async fn close_stdin(&self) -> Result<(), Status> {
        if self.is_pty {
            return Err(Status::unknown(
                "cannot close stdin for PTY process: send Ctrl+D (0x04) instead",
            ));
        }
        self.stdin_closed.cancel();
        *self.stdin.lock().await = None;
        Ok(())
    }

    pub(crate) fn resize(&self, cols: u32, rows: u32) -> Result<(), Status> {
        let pty = lock(&self.pty).clone();
        let Some(pty) = pty else {
            return Err(Status::internal(
                "error resizing tty: the process has no tty",
            ));
        };
        pty.resize(
            u16::try_from(cols).unwrap_or(u16::MAX),
            u16::try_from(rows).unwrap_or(u16::MAX),
        )
        .map_err(|e| Status::internal(format!("error resizing tty: {e}")))
    }
}

/// Every process the daemon started, live or retained after exit.
#[derive(Debug)]
pub(crate) struct ProcessTable {
    procs: Mutex<HashMap<u32, Arc<ProcEntry>>>,
    tasks: TaskTracker,
    closed: AtomicBool,
    tracker: super::tree::Tracker,
}

fn not_found(sel: &Selector) -> Status {
    match sel {
        Selector::Pid(pid) => Status::not_found(format!("process with pid {pid} not found")),
        Selector::Tag(tag) => Status::not_found(format!("process with tag {tag} not found")),
    }
}

fn selector(sel: Option<&ProcessSelector>) -> Result<&Selector, Status> {
    sel.and_then(|s| s.selector.as_ref())
        .ok_or_else(|| Status::unimplemented("invalid input type: the process selector is empty"))
}

impl ProcessTable {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            procs: Mutex::default(),
            tasks: TaskTracker::new(),
            closed: AtomicBool::new(false),
            tracker: super::tree::Tracker::new(),
        })
    }

    /// Descendant tracking (cgroups, sentinel, orphan reaping) of this daemon.
    pub(crate) fn tracker(&self) -> &super::tree::Tracker {
        &self.tracker
    }

    /// Finds a live process.
    pub(crate) fn find_live(
        &self,
        sel: Option<&ProcessSelector>,
    ) -> Result<Arc<ProcEntry>, Status> {
        let sel = selector(sel)?;
        let procs = lock(&self.procs);
        let found = match sel {
            Selector::Pid(pid) => procs.get(pid).filter(|e| e.is_running()).cloned(),
            Selector::Tag(tag) => {
                let mut live: Vec<_> = procs
                    .values()
                    .filter(|e| e.tag.as_deref() == Some(tag) && e.is_running())
                    .collect();
                live.sort_by_key(|e| e.pid);
                live.first().map(|e| Arc::clone(e))
            }
        };
        found.ok_or_else(|| not_found(sel))
    }

    /// Finds a live process, else a retained exited one.
    pub(crate) fn find_any(&self, sel: Option<&ProcessSelector>) -> Result<Arc<ProcEntry>, Status> {
        match self.find_live(sel) {
            Ok(e) => Ok(e),
            Err(err) if err.code() == tonic::Code::NotFound => {
                let sel = selector(sel)?;
                let procs = lock(&self.procs);
                let found = match sel {
                    Selector::Pid(pid) => procs.get(pid).cloned(),
                    Selector::Tag(tag) => procs
                        .values()
                        .find(|e| e.tag.as_deref() == Some(tag))
                        .cloned(),
                };
                found.ok_or(err)
            }
            Err(e) => Err(e),
        }
    }

    /// Live processes.
    pub(crate) fn live(&self) -> Vec<Arc<ProcEntry>> {
        let mut v: Vec<_> = lock(&self.procs)
            .values()
            .filter(|e| e.is_running())
            .cloned()
            .collect();
        v.sort_by_key(|e| e.pid);
        v
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Registers a spawned command with one initial subscriber and starts its supervisor.
    pub(crate) fn register(
        self: &Arc<Self>,
        spawned: Spawned,
        config: ProcessConfig,
        tag: Option<String>,
        deadline: Option<Instant>,
        retention: Duration,
    ) -> (Arc<ProcEntry>, SubRx) {
        let Spawned {
            child,
            pid,
            stdin,
            stdout,
            stderr,
            pty,
            group,
        } = spawned;
        let pty = pty.map(Arc::new);
        let (tx, rx) = subscriber::channel();
        let entry = Arc::new(ProcEntry {
            pid,
            tag: tag.clone(),
            config,
            is_pty: pty.is_some(),
            pty: Mutex::new(pty.clone()),
            group: Mutex::new(group),
            stdin: tokio::sync::Mutex::new(stdin),
            state: Mutex::new(RunState::Running { subs: vec![tx] }),
            cancel_output: CancellationToken::new(),
            stdin_closed: CancellationToken::new(),
            timed_out: AtomicBool::new(false),
            reaped: AtomicBool::new(false),
            lag_timeout: subscriber::subscriber_lag_timeout(),
        });
        {
            let mut procs = lock(&self.procs);
            // A new process evicts a retained entry with the same pid or tag.
            procs
                .retain(|_, e| e.is_running() || (e.pid != pid && (tag.is_none() || e.tag != tag)));
            procs.insert(pid, entry.clone());
        }
        let table = Arc::clone(self);
        let e = entry.clone();
        self.tasks.spawn(async move {
            supervise(table, e, child, stdout, stderr, pty, deadline, retention).await;
        });
        (entry, rx)
    }

    /// Shutdown: refuses new processes, SIGKILLs every live process group, and waits (up to
    /// `grace`) for the supervisors to reap them and deliver their end events.
    pub(crate) async fn shutdown(&self, grace: Duration) {
        self.kill_all();
        self.tasks.close();
        let _ = tokio::time::timeout(grace, self.tasks.wait()).await;
    }

    /// Refuses new processes and SIGKILLs every live process group (synchronous; used by Drop).
    pub(crate) fn kill_all(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for e in self.live() {
            let _ = e.signal(nix::sys::signal::Signal::SIGKILL);
        }
        // Descendants of commands that already ended (a `setsid` daemon, a background job).
        self.tracker.kill_everything();
    }
}

/// Reads go into one growing block: each chunk is split off as `Bytes` (no copy) and the next
/// read continues in the same block until fewer than this many bytes are left, then the next
/// block is started (see [`ReadBlocks`]). Small chunks (an agent's JSON-RPC lines) thus share a
/// block instead of costing an allocation each, and a bulk read is never copied.
const MIN_READ_SPACE: usize = PIPE_CHUNK / 2;

/// How many used blocks a pump keeps for reuse (see [`ReadBlocks`]).
const SPARE_BLOCKS: usize = 3;
/// A read shorter than this means the producer is not outrunning the pump: the spare blocks
/// are let go (an interactive or slow command keeps one block, as before).
const BULK_READ: usize = 64 * 1024;

/// A pump's read blocks: the one being filled and up to [`SPARE_BLOCKS`] spares, the blocks
/// filled before it. When the current block runs out, a spare is taken back if every chunk cut
/// from it has been sent and dropped (its memory is then reused as it is: mapped, and warm in
/// the cache), else a fresh block is allocated. A fast producer thus cycles through a few
/// blocks instead of faulting in a fresh megabyte per read, which was most of the daemon's page
/// faults (5–100 k per streamed GiB, 2–14 k with the spares). A pump holds at most
/// `1 + SPARE_BLOCKS` blocks of [`PIPE_CHUNK`], and only while its reads are bulk (at least
/// [`BULK_READ`]); chunks still queued or in flight keep their own block alive, as before,
/// within the subscriber's byte budget.
struct ReadBlocks {
    current: BytesMut,
    spares: std::collections::VecDeque<BytesMut>,
}

impl ReadBlocks {
    fn new() -> Self {
        Self {
            current: BytesMut::with_capacity(PIPE_CHUNK),
            spares: std::collections::VecDeque::with_capacity(SPARE_BLOCKS + 1),
        }
    }

    /// The block to read into, with at least [`MIN_READ_SPACE`] free.
    fn buf(&mut self) -> &mut BytesMut {
        if self.current.capacity() - self.current.len() < MIN_READ_SPACE {
            let free = self
                .spares
                .iter_mut()
                .position(|spare| spare.try_reclaim(PIPE_CHUNK));
            let next = free
                .and_then(|i| self.spares.remove(i))
                .unwrap_or_else(|| BytesMut::with_capacity(PIPE_CHUNK));
            // The used block's (possibly empty) tail keeps a handle on the whole block; the
            // oldest spare beyond the bound is left to its chunks to free.
            self.spares
                .push_back(std::mem::replace(&mut self.current, next));
            if self.spares.len() > SPARE_BLOCKS {
                self.spares.pop_front();
            }
        }
        &mut self.current
    }

    /// After a read of `n` bytes.
    fn read(&mut self, n: usize) {
        if n < BULK_READ {
            self.spares.clear();
        }
    }
}

async fn pump<R: AsyncRead + Unpin>(entry: &ProcEntry, mut reader: R, kind: fn(Bytes) -> Output) {
    let mut blocks = ReadBlocks::new();
    loop {
        entry.wait_for_demand().await;
        let buf = blocks.buf();
        match reader.read_buf(buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let data = buf.split().freeze();
                blocks.read(n);
                entry
                    .broadcast(Event::Data(DataEvent {
                        output: Some(kind(data)),
                    }))
                    .await;
            }
        }
    }
}

async fn pump_pty(entry: &ProcEntry, pty: &PtyMaster) {
    let mut buf = vec![0u8; PTY_CHUNK];
    loop {
        match pty.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                entry
                    .broadcast(Event::Data(DataEvent {
                        output: Some(Output::Pty(Bytes::copy_from_slice(&buf[..n]))),
                    }))
                    .await
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn supervise(
    table: Arc<ProcessTable>,
    entry: Arc<ProcEntry>,
    mut child: tokio::process::Child,
    stdout: Option<tokio::process::ChildStdout>,
    stderr: Option<tokio::process::ChildStderr>,
    pty: Option<Arc<PtyMaster>>,
    deadline: Option<Instant>,
    retention: Duration,
) {
    let timer = deadline.map(|d| {
        let e = entry.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(d).await;
            e.timed_out.store(true, Ordering::SeqCst);
            let _ = e.signal(nix::sys::signal::Signal::SIGKILL);
        })
    });
    let outputs = async {
        if let Some(pty) = pty {
            pump_pty(&entry, &pty).await;
        } else {
            let out = async {
                if let Some(r) = stdout {
                    pump(&entry, r, Output::Stdout).await;
                }
            };
            let err = async {
                if let Some(r) = stderr {
                    pump(&entry, r, Output::Stderr).await;
                }
            };
            tokio::join!(out, err);
        }
    };
    // Output is read until both pipes hit EOF (envd: a background grandchild holding stdout
    // keeps the command running). After a signal (SendSignal, the timeout, a kill) the pipes
    // are still read until the process exits, so a `trap … TERM` handler's output and exit
    // status arrive; then whatever is left is drained for at most `SIGNAL_DRAIN`.
    tokio::pin!(outputs);
    let mut status = None;
    loop {
        tokio::select! {
            _ = &mut outputs => break,
            // Waited for as soon as it exits (not only after EOF), so `reaped` is set before
            // its pid can be reused and no later signal can reach an unrelated process group.
            st = child.wait(), if status.is_none() => {
                entry.reaped.store(true, Ordering::SeqCst);
                status = Some(st);
            }
            _ = entry.cancel_output.cancelled() => {
                if status.is_none() {
                    tokio::select! {
                        _ = &mut outputs => break,
                        st = child.wait() => {
                            entry.reaped.store(true, Ordering::SeqCst);
                            status = Some(st);
                        }
                    }
                }
                let _ = tokio::time::timeout(SIGNAL_DRAIN, &mut outputs).await;
                break;
            }
        }
    }
    let status = match status {
        Some(st) => st,
        None => child.wait().await,
    };
    entry.reaped.store(true, Ordering::SeqCst);
    super::tree::forget_direct(entry.pid);
    if let Some(t) = timer {
        t.abort();
    }
    let end = end_event(status);
    entry.finish(end).await;
    if let Some(g) = lock(&entry.group).take() {
        table.tracker.ended(g);
    }
    let e = entry.clone();
    tokio::spawn(async move {
        tokio::time::sleep(retention).await;
        let mut procs = lock(&table.procs);
        if procs.get(&e.pid).is_some_and(|cur| Arc::ptr_eq(cur, &e)) {
            procs.remove(&e.pid);
        }
    });
}

/// Go's `syscall.Signal.String()` for the common signals.
fn signal_text(sig: i32) -> String {
    let s = match sig {
        libc::SIGHUP => "hangup",
        libc::SIGINT => "interrupt",
        libc::SIGQUIT => "quit",
        libc::SIGILL => "illegal instruction",
        libc::SIGTRAP => "trace/breakpoint trap",
        libc::SIGABRT => "aborted",
        libc::SIGBUS => "bus error",
        libc::SIGFPE => "floating point exception",
        libc::SIGKILL => "killed",
        libc::SIGUSR1 => "user defined signal 1",
        libc::SIGSEGV => "segmentation fault",
        libc::SIGUSR2 => "user defined signal 2",
        libc::SIGPIPE => "broken pipe",
        libc::SIGALRM => "alarm clock",
        libc::SIGTERM => "terminated",
        _ => return format!("signal {sig}"),
    };
    s.to_string()
}

/// envd's `EndEvent` for an exit status (Go `ProcessState` semantics).
pub(crate) fn end_event(status: std::io::Result<std::process::ExitStatus>) -> EndEvent {
    use std::os::unix::process::ExitStatusExt as _;
    match status {
        Ok(st) => {
            if let Some(code) = st.code() {
                let text = format!("exit status {code}");
                EndEvent {
                    exit_code: code,
                    exited: true,
                    status: text.clone(),
                    error: (code != 0).then_some(text),
                }
            } else if let Some(sig) = st.signal() {
                let mut text = format!("signal: {}", signal_text(sig));
                if st.core_dumped() {
                    text.push_str(" (core dumped)");
                }
                EndEvent {
                    exit_code: -1,
                    exited: false,
                    status: text.clone(),
                    error: Some(text),
                }
            } else {
                EndEvent {
                    exit_code: -1,
                    exited: false,
                    status: "unknown".into(),
                    error: Some("unknown exit status".into()),
                }
            }
        }
        Err(e) => EndEvent {
            exit_code: -1,
            exited: false,
            status: format!("wait error: {e}"),
            error: Some(format!("wait error: {e}")),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Fills the current block the way a bulk read does and cuts the chunk off.
    fn fill(blocks: &mut ReadBlocks) -> (Bytes, usize) {
        let buf = blocks.buf();
        let base = buf.as_ptr() as usize;
        let free = buf.capacity() - buf.len();
        buf.extend_from_slice(&vec![1u8; free]);
        let chunk = buf.split().freeze();
        blocks.read(chunk.len());
        (chunk, base)
    }

    #[test]
    fn a_block_is_reused_once_its_chunks_are_dropped() {
        let mut blocks = ReadBlocks::new();
        let (a, a_base) = fill(&mut blocks);
        assert_eq!(a.len(), PIPE_CHUNK);
        // `a` is still in flight: the next block is a fresh one.
        let (b, b_base) = fill(&mut blocks);
        assert_ne!(a_base, b_base);
        drop(a);
        // `a`'s block is free again: reused, not allocated.
        let (_c, c_base) = fill(&mut blocks);
        assert_eq!(c_base, a_base);
        drop(b);
        let (_d, d_base) = fill(&mut blocks);
        assert_eq!(d_base, b_base);
    }

    #[test]
    fn spares_are_bounded_and_let_go_when_reads_are_small() {
        let mut blocks = ReadBlocks::new();
        let held: Vec<Bytes> = (0..10).map(|_| fill(&mut blocks).0).collect();
        assert!(blocks.spares.len() <= SPARE_BLOCKS);
        drop(held);
        let buf = blocks.buf();
        buf.extend_from_slice(b"a line\n");
        let line = buf.split().freeze();
        blocks.read(line.len());
        assert!(blocks.spares.is_empty(), "a small read lets the spares go");
        // Small chunks still share the current block.
        let buf = blocks.buf();
        buf.extend_from_slice(b"another\n");
        let next = buf.split().freeze();
        assert_eq!(next.as_ptr() as usize, line.as_ptr() as usize + line.len());
    }
}
