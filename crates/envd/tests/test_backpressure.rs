//! A slow subscriber back-pressures the process instead of the daemon buffering output
//! (alone in its binary so the RSS figure is the daemon's).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

#[tokio::test]
async fn slow_subscriber_back_pressures_instead_of_buffering() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    // 200 MB of output while the client reads nothing for a while: the daemon must not buffer it.
    let mut s = start_bash(&mut c, &envd, "head -c 200000000 /dev/zero").await;
    s.message().await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let rss_kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        rss_kb < 150_000,
        "RSS {rss_kb} kB: output is being buffered"
    );
    let got = collect(s, |m| m.event).await;
    assert_eq!(got.stdout.len(), 200_000_000);
    assert_eq!(got.end.unwrap().exit_code, 0);
}
