//! The tonic client over gRPC (h2c) against the real daemon.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use e2b_envd_proto::process::{
    CloseStdinRequest, ConnectRequest, ListRequest, ProcessInput, ProcessSelector,
    SendInputRequest, SendSignalRequest, Signal, process_input, process_selector::Selector,
};

fn pid_sel(pid: u32) -> Option<ProcessSelector> {
    Some(ProcessSelector {
        selector: Some(Selector::Pid(pid)),
    })
}

#[tokio::test]
async fn start_echo_and_exit_codes() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let s = start_bash(&mut c, &envd, "echo hello; echo bad >&2").await;
    let got = collect(s, |m| m.event).await;
    assert!(got.pid.unwrap() > 0);
    assert_eq!(got.stdout, b"hello\n");
    assert_eq!(got.stderr, b"bad\n");
    let end = got.end.unwrap();
    assert_eq!(
        (end.exit_code, end.exited, end.status.as_str(), end.error),
        (0, true, "exit status 0", None)
    );
    assert!(got.error.is_none());

    let s = start_bash(&mut c, &envd, "exit 42").await;
    let end = collect(s, |m| m.event).await.end.unwrap();
    assert_eq!(
        (end.exit_code, end.status.as_str(), end.error.as_deref()),
        (42, "exit status 42", Some("exit status 42"))
    );
}

#[tokio::test]
async fn sigterm_and_sigkill_end_events() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    for (sig, text) in [
        (Signal::Sigterm, "signal: terminated"),
        (Signal::Sigkill, "signal: killed"),
    ] {
        let mut s = start_bash(&mut c, &envd, "sleep 30").await;
        let pid = start_pid(&mut s).await;
        c.send_signal(req(
            &envd,
            SendSignalRequest {
                process: pid_sel(pid),
                signal: sig as i32,
            },
        ))
        .await
        .unwrap();
        let got = collect(s, |m| m.event).await;
        let end = got.end.unwrap();
        assert_eq!(
            (
                end.exit_code,
                end.exited,
                end.status.as_str(),
                end.error.as_deref()
            ),
            (-1, false, text, Some(text))
        );
    }
}

#[tokio::test]
async fn list_connect_stdin_close() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut start = bash("cat");
    start.stdin = Some(true);
    start.tag = Some("my-cat".into());
    let mut s = c.start(req(&envd, start)).await.unwrap().into_inner();
    s.message().await.unwrap().unwrap();
    let list = c
        .list(req(&envd, ListRequest {}))
        .await
        .unwrap()
        .into_inner();
    let info = list
        .processes
        .iter()
        .find(|p| p.tag.as_deref() == Some("my-cat"))
        .unwrap()
        .clone();
    assert_eq!(info.config.unwrap().args[2], "cat");
    // A second subscriber by tag.
    let tag_sel = Some(ProcessSelector {
        selector: Some(Selector::Tag("my-cat".into())),
    });
    let s2 = c
        .connect(req(&envd, ConnectRequest { process: tag_sel }))
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let input = Some(ProcessInput {
        input: Some(process_input::Input::Stdin(bytes::Bytes::from_static(
            b"ping\n",
        ))),
    });
    c.send_input(req(
        &envd,
        SendInputRequest {
            process: pid_sel(info.pid),
            input,
        },
    ))
    .await
    .unwrap();
    c.close_stdin(req(
        &envd,
        CloseStdinRequest {
            process: pid_sel(info.pid),
        },
    ))
    .await
    .unwrap();
    let a = collect(s, |m| m.event).await;
    let b = collect(s2, |m| m.event).await;
    assert_eq!(a.stdout, b"ping\n");
    assert_eq!(b.stdout, b"ping\n");
    assert_eq!(b.pid, Some(info.pid));
    assert_eq!(a.end.unwrap().exit_code, 0);
    assert_eq!(b.end.unwrap().exit_code, 0);
    // Writes after close fail; close again on an exited process is not_found.
    let input = Some(ProcessInput {
        input: Some(process_input::Input::Stdin(bytes::Bytes::from_static(b"x"))),
    });
    let err = c
        .send_input(req(
            &envd,
            SendInputRequest {
                process: pid_sel(info.pid),
                input,
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn write_to_closed_stdin_is_internal() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut start = bash("sleep 30");
    start.stdin = Some(true);
    let mut s = c.start(req(&envd, start)).await.unwrap().into_inner();
    let pid = start_pid(&mut s).await;
    c.close_stdin(req(
        &envd,
        CloseStdinRequest {
            process: pid_sel(pid),
        },
    ))
    .await
    .unwrap();
    c.close_stdin(req(
        &envd,
        CloseStdinRequest {
            process: pid_sel(pid),
        },
    ))
    .await
    .unwrap();
    let input = Some(ProcessInput {
        input: Some(process_input::Input::Stdin(bytes::Bytes::from_static(b"x"))),
    });
    let err = c
        .send_input(req(
            &envd,
            SendInputRequest {
                process: pid_sel(pid),
                input,
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Internal);
    assert!(
        err.message().contains("stdin not enabled or closed"),
        "{}",
        err.message()
    );
    c.send_signal(req(
        &envd,
        SendSignalRequest {
            process: pid_sel(pid),
            signal: Signal::Sigkill as i32,
        },
    ))
    .await
    .unwrap();
}

#[tokio::test]
async fn connect_timeout_header_is_the_process_lifetime_over_grpc() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut r = req(&envd, bash("sleep 30"));
    r.metadata_mut().insert(
        e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS,
        "500".parse().unwrap(),
    );
    // `sleep 30` outlives the 500 ms timeout by far: the guard only catches a hang, the
    // DeadlineExceeded end is the behaviour.
    let got = tokio::time::timeout(
        Duration::from_secs(25),
        collect(c.start(r).await.unwrap().into_inner(), |m| m.event),
    )
    .await
    .expect("the stream outlived its connect-timeout-ms: the timeout did not end it");
    assert_eq!(got.error.unwrap().code(), tonic::Code::DeadlineExceeded);
    assert!(
        gone_within(got.pid.unwrap() as i32, Duration::from_secs(10)).await,
        "process survived its timeout"
    );

    // grpc-timeout is the fallback.
    let mut r = req(&envd, bash("sleep 30"));
    r.set_timeout(Duration::from_millis(500));
    let res = c.start(r).await;
    let pid = match res {
        Ok(s) => collect(s.into_inner(), |m| m.event).await.pid,
        Err(e) => {
            assert_eq!(e.code(), tonic::Code::Cancelled);
            None
        }
    };
    if let Some(pid) = pid {
        assert!(
            gone_within(pid as i32, Duration::from_secs(10)).await,
            "process survived its grpc-timeout"
        );
    }
}

#[tokio::test]
async fn keepalive_events_follow_the_header() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut r = req(&envd, bash("sleep 2.5"));
    r.metadata_mut().insert(
        e2b_envd_proto::wire::headers::KEEPALIVE_PING_INTERVAL,
        "1".parse().unwrap(),
    );
    let got = collect(c.start(r).await.unwrap().into_inner(), |m| m.event).await;
    assert!(
        (2..=3).contains(&got.keepalives),
        "{} keepalives",
        got.keepalives
    );
    assert_eq!(got.end.unwrap().exit_code, 0);
}

#[tokio::test]
async fn client_disconnect_does_not_kill() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut s = start_bash(&mut c, &envd, "sleep 1; echo survived > marker").await;
    s.message().await.unwrap().unwrap();
    drop(s);
    drop(c);
    // The command outlives its stream: poll for its marker (a loaded machine may take a while
    // to run a login shell), failing after 20 s.
    let marker = envd.workdir().join("marker");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !marker.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap_or_default(),
        "survived\n",
        "the command was killed when its client disconnected"
    );
}

#[tokio::test]
async fn kill_reaches_the_whole_process_group() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut s = start_bash(&mut c, &envd, "sleep 1000 & echo $!; wait").await;
    let mut got = Collected::default();
    while got.stdout.is_empty() {
        got.push(s.message().await.unwrap().unwrap().event.unwrap());
    }
    let grandchild: i32 = String::from_utf8(got.stdout.clone())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(grandchild));
    c.send_signal(req(
        &envd,
        SendSignalRequest {
            process: pid_sel(got.pid.unwrap()),
            signal: Signal::Sigterm as i32,
        },
    ))
    .await
    .unwrap();
    let t = Instant::now();
    while alive(grandchild) && t.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !alive(grandchild),
        "grandchild survived SIGTERM of its command"
    );
}

#[tokio::test]
async fn env_and_cwd_rules() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut r = bash("echo \"$HOME|$USER|$LOGNAME|$E2B_SANDBOX|$X\"; pwd");
    r.process
        .as_mut()
        .unwrap()
        .envs
        .insert("X".into(), "1".into());
    let got = collect(c.start(req(&envd, r)).await.unwrap().into_inner(), |m| {
        m.event
    })
    .await;
    let out = String::from_utf8(got.stdout).unwrap();
    let me = nix::unistd::User::from_uid(nix::unistd::Uid::current())
        .unwrap()
        .unwrap();
    let expect = format!(
        "{}|{}|{}|true|1\n{}\n",
        me.dir.display(),
        me.name,
        me.name,
        envd.workdir().display()
    );
    assert_eq!(out, expect);

    // Relative cwd → the user's home.
    let mut r = bash("pwd");
    r.process.as_mut().unwrap().cwd = Some(".".into());
    let got = collect(c.start(req(&envd, r)).await.unwrap().into_inner(), |m| {
        m.event
    })
    .await;
    assert_eq!(
        String::from_utf8(got.stdout).unwrap().trim(),
        me.dir.display().to_string()
    );

    // Spawn failure → invalid_argument.
    let mut r = bash("");
    r.process.as_mut().unwrap().cmd = "/no/such/binary".into();
    let err = c.start(req(&envd, r)).await.err().unwrap();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn exited_process_is_kept_for_late_connect() {
    let envd = spawn_envd_with(|mut c| {
        c.exited_retention = Duration::from_millis(800);
        c
    })
    .await;
    let mut c = h2c(&envd).await;
    let got = collect(start_bash(&mut c, &envd, "exit 4").await, |m| m.event).await;
    let pid = got.pid.unwrap();
    let late = collect(
        c.connect(req(
            &envd,
            ConnectRequest {
                process: pid_sel(pid),
            },
        ))
        .await
        .unwrap()
        .into_inner(),
        |m| m.event,
    )
    .await;
    assert_eq!(late.pid, Some(pid));
    assert_eq!(late.end.unwrap().exit_code, 4);
    let list = c
        .list(req(&envd, ListRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(list.processes.iter().all(|p| p.pid != pid));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let err = c
        .connect(req(
            &envd,
            ConnectRequest {
                process: pid_sel(pid),
            },
        ))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn root_confines_the_working_directory() {
    let root = tempfile::tempdir().unwrap();
    let inside = root.path().join("work");
    std::fs::create_dir(&inside).unwrap();
    let rp = root.path().to_path_buf();
    let wd = inside.clone();
    let envd = e2b_test_support::spawn_envd_with(move |mut c| {
        c.root = Some(rp);
        c.default_workdir = Some(wd);
        c
    })
    .await;
    let mut c = h2c(&envd).await;
    let outside = tempfile::tempdir().unwrap();
    for cwd in [
        outside.path().display().to_string(),
        format!("{}/..", root.path().display()),
        "/".to_string(),
    ] {
        let mut r = bash("pwd");
        r.process.as_mut().unwrap().cwd = Some(cwd.clone());
        let e = c.start(req(&envd, r)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{cwd}");
        assert!(e.message().contains("outside the daemon's root"), "{e:?}");
    }
    // Inside the root (explicitly, and the default workdir) commands start.
    let mut r = bash("pwd");
    r.process.as_mut().unwrap().cwd = Some(inside.display().to_string());
    let got = collect(c.start(req(&envd, r)).await.unwrap().into_inner(), |m| {
        m.event
    })
    .await;
    assert_eq!(
        String::from_utf8_lossy(&got.stdout).trim(),
        inside.display().to_string()
    );
    let got = collect(start_bash(&mut c, &envd, "pwd").await, |m| m.event).await;
    assert_eq!(got.end.unwrap().exit_code, 0);
}
