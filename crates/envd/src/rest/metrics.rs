//! `GET /metrics`: host CPU, memory and disk figures, as envd reports them.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State as AxState;
use http::Response;

use crate::state::State;

fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let vals: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = vals.iter().sum();
    let idle = vals.get(3).copied().unwrap_or(0) + vals.get(4).copied().unwrap_or(0);
    Some((total, idle))
}

fn meminfo() -> (u64, u64, u64, u64, u64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let get = |key: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (
        get("MemTotal"),
        get("MemFree"),
        get("Buffers"),
        get("Cached"),
        get("SReclaimable"),
    )
}

fn disk() -> (u64, u64) {
    match nix::sys::statvfs::statvfs("/") {
        Ok(s) => {
            let frsize = s.fragment_size();
            let total = s.blocks() * frsize;
            let free = s.blocks_free() * frsize;
            (total.saturating_sub(free), total)
        }
        Err(_) => (0, 0),
    }
}

pub(crate) async fn metrics(AxState(_state): AxState<Arc<State>>) -> Response<Body> {
    let before = cpu_times();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = cpu_times();
    let cpu_used_pct = match (before, after) {
        (Some((t0, i0)), Some((t1, i1))) if t1 > t0 => {
            let busy = (t1 - t0).saturating_sub(i1.saturating_sub(i0));
            (busy as f64 * 100.0 / (t1 - t0) as f64 * 100.0).round() / 100.0
        }
        _ => 0.0,
    };
    let (total, free, buffers, cached, sreclaimable) = meminfo();
    let cache = cached + sreclaimable;
    let used = total
        .saturating_sub(free)
        .saturating_sub(buffers)
        .saturating_sub(cache);
    let (disk_used, disk_total) = disk();
    let body = serde_json::json!({
        "ts": SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "cpu_count": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu_used_pct": cpu_used_pct,
        "mem_total": total,
        "mem_used": used,
        "mem_cache": cache,
        "mem_total_mib": total / (1024 * 1024),
        "mem_used_mib": used / (1024 * 1024),
        "disk_used": disk_used,
        "disk_total": disk_total,
    });
    super::json_response(body.to_string())
}
