//! Hostile callers and stuck peers against the Process service (issue 12): a stalled second
//! subscriber, output after SIGTERM, header values near `u64::MAX`, a stdin write blocked on a
//! full pipe. Each test failed on the code before the fix (hang or wrong result).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use e2b_envd_proto::process::process_event::Event;
use e2b_envd_proto::process::process_selector::Selector;
use e2b_envd_proto::process::{
    CloseStdinRequest, ConnectRequest, ProcessInput, ProcessSelector, SendInputRequest,
    SendSignalRequest, Signal, process_input,
};

fn sel(pid: u32) -> Option<ProcessSelector> {
    Some(ProcessSelector {
        selector: Some(Selector::Pid(pid)),
    })
}

/// A second `Connect` that stops reading must not stop the `Start` stream or the process: it
/// is dropped with `resource_exhausted` once it lags past its bound, and the `Start` stream
/// receives every byte and the real exit status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_second_subscriber_is_dropped_and_the_process_goes_on() {
    let envd = spawn_envd().await;
    let mut a = h2c(&envd).await;
    // A separate connection, so its stalled flow-control window is its own.
    let mut b = h2c(&envd).await;
    const MIB: usize = 48;
    let mut start = start_bash(
        &mut a,
        &envd,
        &format!("read -t 5 _ < <(sleep 0.5; echo); head -c {MIB}M /dev/zero; echo done"),
    )
    .await;
    let pid = start_pid(&mut start).await;
    let mut stalled = b
        .connect(req(&envd, ConnectRequest { process: sel(pid) }))
        .await
        .unwrap()
        .into_inner();
    match stalled
        .message()
        .await
        .unwrap()
        .and_then(|m| m.event?.event)
    {
        Some(Event::Start(s)) => assert_eq!(s.pid, pid),
        other => panic!("expected start on Connect, got {other:?}"),
    }
    // `stalled` is never read again while the command runs.
    let got = tokio::time::timeout(Duration::from_secs(120), collect(start, |m| m.event))
        .await
        .expect("the Start stream stalled behind a subscriber that stopped reading");
    assert!(got.error.is_none(), "Start stream error: {:?}", got.error);
    assert_eq!(
        got.stdout.len(),
        MIB * 1024 * 1024 + 5,
        "bytes lost on the Start stream"
    );
    assert!(got.stdout.ends_with(b"done\n"));
    assert_eq!(got.end.expect("end event").exit_code, 0);
    // The stalled stream, read now, gives what was queued and then resource_exhausted.
    let status = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match stalled.message().await {
                Ok(Some(m)) => {
                    if let Some(Event::End(e)) = m.event.and_then(|e| e.event) {
                        panic!("the stalled subscriber was not dropped (got end {e:?})");
                    }
                }
                Ok(None) => panic!("the stalled stream ended without an error"),
                Err(s) => break s,
            }
        }
    })
    .await
    .expect("the stalled stream never ended");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("fell behind"), "{status:?}");
}

/// After SIGTERM the daemon keeps reading output until the process exits: a `trap … TERM`
/// handler's output and exit status arrive (not "broken pipe").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_trap_output_and_exit_status_arrive() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut s = start_bash(
        &mut c,
        &envd,
        "trap 'sleep 0.3; echo bye; exit 3' TERM; echo ready; while :; do sleep 0.05; done",
    )
    .await;
    let pid = start_pid(&mut s).await;
    // Wait for "ready" so the trap is installed.
    let mut seen = Vec::new();
    while !seen.ends_with(b"ready\n") {
        let m = tokio::time::timeout(Duration::from_secs(30), s.message())
            .await
            .expect("no output")
            .unwrap()
            .expect("stream ended early");
        if let Some(Event::Data(d)) = m.event.and_then(|e| e.event)
            && let Some(e2b_envd_proto::process::process_event::data_event::Output::Stdout(b)) =
                d.output
        {
            seen.extend_from_slice(&b);
        }
    }
    c.send_signal(req(
        &envd,
        SendSignalRequest {
            process: sel(pid),
            signal: Signal::Sigterm as i32,
        },
    ))
    .await
    .unwrap();
    let rest = collect(s, |m| m.event).await;
    let out = String::from_utf8_lossy(&rest.stdout).into_owned();
    let end = rest.end.expect("end event");
    assert!(
        out.contains("bye"),
        "trap output lost: {out:?}, end {end:?}"
    );
    assert_eq!(end.exit_code, 3, "{end:?}");
    assert_eq!(end.status, "exit status 3");
}

fn with_header<T>(envd: &TestEnvd, msg: T, k: &'static str, v: &str) -> tonic::Request<T> {
    let mut r = req(envd, msg);
    r.metadata_mut().insert(k, v.parse().unwrap());
    r
}

/// Timeout and keepalive headers near `u64::MAX` (an `Instant + Duration` overflow) get
/// `invalid_argument`, over gRPC and Connect, and the daemon keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_header_values_are_invalid_argument_not_a_panic() {
    let envd = spawn_envd().await;
    let max = u64::MAX.to_string();
    let cases: Vec<(&'static str, String)> = vec![
        (
            e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS,
            max.clone(),
        ),
        (
            e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS,
            "99999999999".into(),
        ),
        ("grpc-timeout", format!("{max}S")),
        ("grpc-timeout", format!("{max}H")),
        ("grpc-timeout", "1é".into()),
        (
            e2b_envd_proto::wire::headers::KEEPALIVE_PING_INTERVAL,
            max.clone(),
        ),
        (
            e2b_envd_proto::wire::headers::KEEPALIVE_PING_INTERVAL,
            "86401".into(),
        ),
    ];
    for (k, v) in &cases {
        let mut c = h2c(&envd).await;
        let res = c.start(with_header(&envd, bash("echo hi"), k, v)).await;
        let status = match res {
            Err(s) => s,
            Ok(r) => {
                let got = collect(r.into_inner(), |m| m.event).await;
                got.error
                    .clone()
                    .unwrap_or_else(|| panic!("{k}: {v} accepted: {got:?}"))
            }
        };
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{k}: {v}: {status:?}"
        );
    }
    // The same on Connect.
    let mut c = h2c(&envd).await;
    let mut s = start_bash(&mut c, &envd, "sleep 30").await;
    let pid = start_pid(&mut s).await;
    let cc = ConnectClient::new(&envd);
    let body = envelope(0, format!(r#"{{"process":{{"pid":{pid}}}}}"#).as_bytes());
    let (status, frames) = cc
        .stream(
            "/process.Process/Connect",
            &body,
            &[(
                e2b_envd_proto::wire::headers::KEEPALIVE_PING_INTERVAL,
                max.as_str(),
            )],
        )
        .await;
    assert_eq!(status, 200);
    let last = frames.last().expect("an end-stream envelope");
    assert_eq!(last.0, 2, "{frames:?}");
    assert_eq!(last.1["error"]["code"], "invalid_argument", "{frames:?}");
    // Still serving, and a sane value works.
    let ok = c
        .start(with_header(
            &envd,
            bash("echo ok"),
            e2b_envd_proto::wire::headers::KEEPALIVE_PING_INTERVAL,
            "1",
        ))
        .await
        .unwrap();
    let got = collect(ok.into_inner(), |m| m.event).await;
    assert_eq!(got.stdout, b"ok\n");
    c.send_signal(req(
        &envd,
        SendSignalRequest {
            process: sel(pid),
            signal: Signal::Sigkill as i32,
        },
    ))
    .await
    .unwrap();
}

/// `SendInput` blocked on a full stdin pipe (the process never reads) must not deadlock
/// `CloseStdin` or a kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_stdin_write_does_not_deadlock_close_stdin() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut r = bash("sleep 600");
    r.stdin = Some(true);
    let mut s = c.start(req(&envd, r)).await.unwrap().into_inner();
    let pid = start_pid(&mut s).await;
    // 8 MiB never fits the pipe: this write blocks.
    let mut c2 = h2c(&envd).await;
    let input = SendInputRequest {
        process: sel(pid),
        input: Some(ProcessInput {
            input: Some(process_input::Input::Stdin(vec![b'x'; 8 << 20].into())),
        }),
    };
    let r = req(&envd, input);
    let writer = tokio::spawn(async move { c2.send_input(r).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !writer.is_finished(),
        "the write should be blocked on the full pipe"
    );
    tokio::time::timeout(
        Duration::from_secs(20),
        c.close_stdin(req(&envd, CloseStdinRequest { process: sel(pid) })),
    )
    .await
    .expect("CloseStdin deadlocked behind a blocked SendInput")
    .unwrap();
    let res = tokio::time::timeout(Duration::from_secs(20), writer)
        .await
        .expect("the blocked SendInput never returned")
        .unwrap();
    let err = res.expect_err("a write cut short by CloseStdin must fail");
    assert_eq!(err.code(), tonic::Code::Internal, "{err:?}");
    tokio::time::timeout(
        Duration::from_secs(20),
        c.send_signal(req(
            &envd,
            SendSignalRequest {
                process: sel(pid),
                signal: Signal::Sigkill as i32,
            },
        )),
    )
    .await
    .expect("kill hung")
    .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), collect(s, |m| m.event))
        .await
        .expect("stream hung after kill");
    assert_eq!(got.end.expect("end").status, "signal: killed");
}
