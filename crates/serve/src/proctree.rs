//! Process trees read from `/proc`: the descendants of a pid, their CPU time and memory, and
//! signals to all of them (pause = SIGSTOP, resume = SIGCONT, kill = SIGKILL).

use std::collections::{HashMap, HashSet};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, Copy)]
struct Stat {
    ppid: i32,
    state: u8,
    ticks: u64,
    rss_pages: u64,
}

fn read_stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: parse after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] = state (field 3), f[1] = ppid (4), f[11] = utime (14), f[12] = stime (15),
    // f[21] = rss (24).
    Some(Stat {
        state: f.first()?.bytes().next()?,
        ppid: f.get(1)?.parse().ok()?,
        ticks: f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?,
        rss_pages: f.get(21)?.parse().ok()?,
    })
}

fn all_stats() -> HashMap<i32, Stat> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(s) = read_stat(pid) {
            out.insert(pid, s);
        }
    }
    out
}

/// The descendants of `root` (not `root` itself), parents before children.
fn descendants_in(stats: &HashMap<i32, Stat>, root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (&pid, s) in stats {
        children.entry(s.ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(p) = queue.pop() {
        if let Some(kids) = children.get(&p) {
            for &k in kids {
                out.push(k);
                queue.push(k);
            }
        }
    }
    out
}

/// The current descendants of `root`.
pub(crate) fn descendants(root: i32) -> Vec<i32> {
    descendants_in(&all_stats(), root)
}

/// Stops every descendant of `root` with SIGSTOP, walking again until a walk finds no process
/// that is still running (so a process forked during the walk is stopped too).
pub(crate) fn stop_tree(root: i32) {
    let mut signalled: HashSet<i32> = HashSet::new();
    for _ in 0..50 {
        let stats = all_stats();
        let mut fresh = false;
        for pid in descendants_in(&stats, root) {
            let stopped = stats
                .get(&pid)
                .is_some_and(|s| matches!(s.state, b'T' | b't'));
            if !stopped && signalled.insert(pid) {
                fresh = true;
                let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
            }
        }
        if !fresh {
            // Give stops in flight a moment, then look once more.
            let pending = descendants_in(&all_stats(), root).into_iter().any(|pid| {
                read_stat(pid).is_some_and(|s| !matches!(s.state, b'T' | b't' | b'Z' | b'X'))
            });
            if !pending {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// Sends `signal` to every descendant of `root`.
pub(crate) fn signal_tree(root: i32, signal: Signal) {
    for pid in descendants(root) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// CPU time (seconds) and resident memory (bytes) of `root` and its descendants.
pub(crate) fn usage(root: i32) -> (f64, u64) {
    let stats = all_stats();
    let tick = ticks_per_second();
    let page = page_size();
    let mut ticks = 0u64;
    let mut rss = 0u64;
    for pid in descendants_in(&stats, root).into_iter().chain([root]) {
        if let Some(s) = stats.get(&pid) {
            ticks += s.ticks;
            rss += s.rss_pages * page;
        }
    }
    (ticks as f64 / tick as f64, rss)
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as u64 } else { 100 }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 { v as u64 } else { 4096 }
}
