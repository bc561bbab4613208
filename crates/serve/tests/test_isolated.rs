//! The isolated runtime (`e2b-isolation`): each sandbox its own root, `/tmp`, hostname and
//! `user` with sudo; pause freezes it, kill leaves nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use e2b_commands::{CommandOptions, Transport};
use e2b_serve::SandboxLimits;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_sandboxes_see_only_themselves() {
    let env = start_isolated().await;
    assert_eq!(env.serve.runtime_name(), "isolated");
    let a = env.create(json!({})).await;
    let b = env.create(json!({})).await;
    let ca = env.commands(&a, Transport::Grpc);
    let cb = env.commands(&b, Transport::GrpcWeb);
    let out = ca
        .run(
            "whoami; pwd; hostname; sudo -n true && echo sudo-ok; echo secret > /tmp/only-a",
            CommandOptions::new(),
        )
        .await
        .unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines,
        ["user", "/home/user", id(&a).as_str(), "sudo-ok"],
        "{}",
        out.stderr
    );
    let out = cb
        .run("cat /tmp/only-a", CommandOptions::new())
        .await
        .unwrap();
    assert_ne!(out.exit_code, 0, "sandbox b sees sandbox a's /tmp");

    // Pause freezes the sandbox's processes; connect resumes them.
    let marker = format!("isomarker{}", id(&a));
    ca.start(
        format!("exec -a {marker} sleep 3600"),
        CommandOptions::new().no_timeout(),
    )
    .await
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || !pids_with(&marker).is_empty()).await);
    let (status, _) = env
        .post(&format!("/sandboxes/{}/pause", id(&a)), json!({}))
        .await;
    assert_eq!(status, 204);
    for pid in pids_with(&marker) {
        assert_eq!(proc_state(pid), Some('T'));
    }
    assert_eq!(env.health(&id(&a)).await, 502);
    let (status, _) = env
        .post(
            &format!("/sandboxes/{}/connect", id(&a)),
            json!({"timeout": 60}),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(
        ca.run("echo back", CommandOptions::new())
            .await
            .unwrap()
            .stdout,
        "back\n"
    );

    // Kill leaves nothing of it.
    let (status, _) = env.delete(&format!("/sandboxes/{}", id(&a))).await;
    assert_eq!(status, 204);
    assert!(
        eventually(Duration::from_secs(10), || pids_with(&marker).is_empty()).await,
        "survivors: {:?}",
        pids_with(&marker)
    );
    env.serve.shutdown().await;
}

/// `allow_internet_access` picks the isolated sandbox's network: `false` → loopback only (no
/// interface but `lo`, no route), `true` → a user-mode NAT helper runs for it and it has a
/// default route. Nothing is sent outside: only the routing tables are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_internet_access_maps_to_the_sandbox_network() {
    if let Err(e) = e2b_isolation::probe().check(e2b_isolation::Network::Internet) {
        panic!("missing: a NAT helper for isolated sandboxes with internet access ({e})");
    }
    let env = start_isolated().await;
    let offline = env.create(json!({"allow_internet_access": false})).await;
    let online = env.create(json!({"allow_internet_access": true})).await;
    // E2B's other spelling of "no internet": every destination denied.
    let denied = env
        .create(json!({"network": {"denyOut": ["0.0.0.0/0"]}}))
        .await;
    for s in [&offline, &denied] {
        assert!(
            nat_helpers_of(&id(s)).is_empty(),
            "no NAT helper for an offline sandbox"
        );
    }
    assert!(
        !nat_helpers_of(&id(&online)).is_empty(),
        "a NAT helper runs for the online sandbox"
    );
    let script = "awk -F: 'NR>2 {gsub(/ /, \"\", $1); printf \"%s \", $1}' /proc/net/dev; echo; awk 'NR>1 && $2==\"00000000\"' /proc/net/route | wc -l";
    let out = env
        .commands(&offline, Transport::Grpc)
        .run(script, CommandOptions::new())
        .await
        .unwrap();
    let lines: Vec<&str> = out.stdout.lines().map(str::trim).collect();
    assert_eq!(
        lines,
        ["lo", "0"],
        "offline: loopback only ({})",
        out.stderr
    );
    let out = env
        .commands(&denied, Transport::Grpc)
        .run(script, CommandOptions::new())
        .await
        .unwrap();
    let lines: Vec<&str> = out.stdout.lines().map(str::trim).collect();
    assert_eq!(lines, ["lo", "0"], "denyOut all: loopback only");
    let out = env
        .commands(&online, Transport::Grpc)
        .run(script, CommandOptions::new())
        .await
        .unwrap();
    let lines: Vec<&str> = out.stdout.lines().map(str::trim).collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    assert!(
        lines[0].split(' ').any(|i| i != "lo"),
        "online: an interface besides lo: {}",
        lines[0]
    );
    assert_eq!(lines[1], "1", "online: a default route");
    let online_helpers = nat_helpers_of(&id(&online));
    let (status, _) = env.delete(&format!("/sandboxes/{}", id(&online))).await;
    assert_eq!(status, 204);
    assert!(
        eventually(Duration::from_secs(10), || pids_with("slirp4netns")
            .into_iter()
            .chain(pids_with("pasta"))
            .all(|p| !online_helpers.contains(&p)))
        .await,
        "the NAT helper ends with its sandbox"
    );
    env.serve.shutdown().await;
}

/// NAT helper processes (slirp4netns, pasta) started for sandbox `id` (descendants of its envd).
fn nat_helpers_of(id: &str) -> Vec<i32> {
    let envd = pids_with(&format!("--sandbox-id {id}"));
    let parent = |pid: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    pids_with("slirp4netns")
        .into_iter()
        .chain(pids_with("pasta"))
        .filter(|&p| {
            let mut cur = p;
            for _ in 0..32 {
                match parent(cur) {
                    Some(pp) if envd.contains(&pp) => return true,
                    Some(pp) if pp > 1 => cur = pp,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// A server an isolated sandbox starts on its own loopback is reached through the edge with
/// `Host: <port>-<id>.<domain>` (the edge connects inside the sandbox's network namespace);
/// the machine's loopback is not what it reaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_ports_reach_inside_an_isolated_sandbox() {
    let env = start_isolated().await;
    let a = env.create(json!({"allow_internet_access": false})).await;
    let cmds = env.commands(&a, Transport::Grpc);
    cmds.run(
        "mkdir -p site && echo inside-the-namespace > site/index.html",
        CommandOptions::new(),
    )
    .await
    .unwrap();
    // The same port on the machine's loopback serves something else.
    let decoy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = decoy.local_addr().unwrap().port();
    let _server = cmds
        .start_streaming(
            e2b_commands::CommandLine::shell(format!(
                "exec python3 -m http.server {port} --bind 127.0.0.1 --directory site"
            )),
            CommandOptions::new().retain_output(false),
        )
        .await
        .unwrap();
    let body = env
        .fetch_port_page(&format!("{port}-{}.localhost", id(&a)), "/index.html")
        .await;
    assert_eq!(body, "inside-the-namespace\n");
    drop(decoy);
    env.serve.shutdown().await;
}

/// `e2b serve --memory-mb 256 --cpu-count 0.5`: the sandbox is held to 256 MiB (an allocation
/// beyond it fails, the sandbox stays up), and info, list and metrics report its size, not the
/// machine's: a program that sizes its work by `memoryMB` must fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_and_info_and_metrics_report_the_sandbox_size() {
    const MIB: u64 = 1024 * 1024;
    let limits = SandboxLimits::new(256, Some(0.5)).unwrap();
    let env = start_isolated_with(limits, |mut c| {
        c.metrics_interval = Duration::from_millis(200);
        c
    })
    .await;
    let sbx = env.create(json!({})).await;
    let id = id(&sbx);
    let size = |v: &Value| {
        (
            v["memoryMB"].as_u64(),
            v["cpuCount"].as_u64(),
            v["diskSizeMB"].as_u64(),
        )
    };
    let (status, info) = env.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(size(&info), (Some(256), Some(1), Some(256)), "{info}");
    let (_, listed) = env.get("/v2/sandboxes").await;
    let item = listed
        .as_array()
        .and_then(|a| a.iter().find(|s| s["sandboxID"] == id.as_str()))
        .unwrap_or_else(|| panic!("{id} not listed: {listed}"));
    assert_eq!(size(item), (Some(256), Some(1), Some(256)), "{item}");

    // `tail` keeps a line without newline whole: 400 MiB in a 256 MiB sandbox is killed.
    let cmds = env.commands(&sbx, Transport::Grpc);
    let out = cmds
        .run(
            "head -c 400M /dev/zero | tail > /dev/null",
            CommandOptions::new(),
        )
        .await
        .unwrap();
    assert_ne!(out.exit_code, 0, "400 MiB fit in a 256 MiB sandbox");
    let out = cmds
        .run(
            "head -c 64M /dev/zero > /home/user/fill && echo ok",
            CommandOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        out.stdout, "ok\n",
        "the sandbox did not survive: {}",
        out.stderr
    );

    // A sample taken after the write: the sandbox's own memory and filesystem.
    let mut last = Value::Null;
    let mut seen = false;
    for _ in 0..100 {
        last = env.get(&format!("/sandboxes/{id}/metrics")).await.1;
        let newest = last.as_array().and_then(|a| a.last());
        if newest.is_some_and(|m| m["diskUsed"].as_u64().is_some_and(|d| d >= 64 * MIB)) {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(seen, "no sample shows the 64 MiB written: {last}");
    let m = last.as_array().and_then(|a| a.last()).unwrap();
    assert_eq!(m["memTotal"].as_u64(), Some(256 * MIB), "{m}");
    assert_eq!(m["diskTotal"].as_u64(), Some(256 * MIB), "{m}");
    assert_eq!(m["cpuCount"].as_u64(), Some(1), "{m}");
    env.serve.shutdown().await;
}
