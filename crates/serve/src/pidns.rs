//! Starting each plain sandbox's envd as PID 1 of a PID namespace of its own.
//!
//! `unshare(CLONE_NEWPID)` does not move the caller: it puts the calling *thread's* next child
//! into a new namespace, as that namespace's PID 1. So one long-lived thread starts every
//! sandbox: it unshares, spawns envd, and returns to its own namespace with `setns` before the
//! next one. The thread never exits, which matters twice: envd's `PR_SET_PDEATHSIG` fires when
//! the *thread* that forked it ends (here: only when `e2b serve` itself dies, even by SIGKILL),
//! and when PID 1 of a namespace dies the kernel kills everything left in it. Without permission
//! for PID namespaces (not root, no `CAP_SYS_ADMIN`) the same thread starts envd as a plain child.

use std::fs::File;
use std::io;
use std::sync::OnceLock;
use std::sync::mpsc;

use nix::sched::{CloneFlags, setns, unshare};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// A started child and whether it is PID 1 of a namespace of its own.
pub(crate) struct Started {
    pub(crate) child: Child,
    pub(crate) own_pid_namespace: bool,
}

struct Job {
    command: Command,
    new_namespace: bool,
    runtime: tokio::runtime::Handle,
    reply: oneshot::Sender<io::Result<Started>>,
}

fn spawner() -> io::Result<&'static mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Result<mpsc::Sender<Job>, String>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("e2b-serve-spawner".into())
                .spawn(move || serve_jobs(rx))
                .map(|_| tx)
                .map_err(|e| format!("cannot start the sandbox spawner thread: {e}"))
        })
        .as_ref()
        .map_err(|e| io::Error::other(e.clone()))
}

/// The spawner thread's loop; it ends only with the process (the sender is a static).
fn serve_jobs(rx: mpsc::Receiver<Job>) {
    // This thread's own PID namespace, to return to after each unshare.
    let own = File::open("/proc/thread-self/ns/pid");
    // Set when a return failed: the thread's next child would land in the last sandbox's
    // namespace, so it starts nothing more.
    let mut stuck = false;
    for job in rx {
        let _runtime = job.runtime.enter();
        let mut command = job.command;
        let result = if stuck {
            Err(io::Error::other(
                "the sandbox spawner could not leave a sandbox's PID namespace; restart e2b serve",
            ))
        } else {
            let fresh =
                job.new_namespace && own.is_ok() && unshare(CloneFlags::CLONE_NEWPID).is_ok();
            let spawned = command.spawn();
            if fresh
                && let Ok(own) = &own
                && let Err(e) = setns(own, CloneFlags::CLONE_NEWPID)
            {
                tracing::error!(error = %e, "cannot return to e2b serve's PID namespace; no further sandbox can start");
                stuck = true;
            }
            spawned.map(|child| Started {
                child,
                own_pid_namespace: fresh,
            })
        };
        // The caller may have given up (its request was cancelled): the child is then dropped
        // here, and `kill_on_drop` ends it.
        let _ = job.reply.send(result);
    }
}

/// Spawns `command` from the spawner thread: as PID 1 of a new PID namespace when
/// `new_namespace` is set and the machine allows it, else as a plain child. Give `command`
/// `PR_SET_PDEATHSIG` (in `pre_exec`) so it dies with `e2b serve`.
///
/// # Cancel safety
///
/// Cancelling drops the child once it is started (`kill_on_drop` ends it).
pub(crate) async fn spawn(command: Command, new_namespace: bool) -> io::Result<Started> {
    let (reply, answer) = oneshot::channel();
    let job = Job {
        command,
        new_namespace,
        runtime: tokio::runtime::Handle::current(),
        reply,
    };
    spawner()?
        .send(job)
        .map_err(|_| io::Error::other("the sandbox spawner thread is gone"))?;
    answer
        .await
        .map_err(|_| io::Error::other("the sandbox spawner thread is gone"))?
}
