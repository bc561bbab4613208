//! PTY commands (input, resize, errors) and running as another user (when the tests run as root).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use e2b_envd_proto::process::process_event::{Event, data_event::Output};
use e2b_envd_proto::process::{
    CloseStdinRequest, ProcessInput, ProcessSelector, Pty, SendInputRequest, SendSignalRequest,
    Signal, UpdateRequest, process_input, process_selector::Selector, pty,
};

fn sel(pid: u32) -> Option<ProcessSelector> {
    Some(ProcessSelector {
        selector: Some(Selector::Pid(pid)),
    })
}

fn pty_input(pid: u32, data: &[u8]) -> SendInputRequest {
    SendInputRequest {
        process: sel(pid),
        input: Some(ProcessInput {
            input: Some(process_input::Input::Pty(data.to_vec().into())),
        }),
    }
}

async fn read_until(
    s: &mut tonic::Streaming<e2b_envd_proto::process::StartResponse>,
    needle: &str,
) -> String {
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while !String::from_utf8_lossy(&seen).contains(needle) {
            let m = s.message().await.unwrap().unwrap();
            if let Some(Event::Data(d)) = m.event.unwrap().event {
                match d.output {
                    Some(Output::Pty(b)) => seen.extend(b),
                    other => panic!("non-pty output from a pty: {other:?}"),
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "never saw {needle:?} in {:?}",
            String::from_utf8_lossy(&seen)
        )
    });
    String::from_utf8_lossy(&seen).into_owned()
}

#[tokio::test]
async fn pty_input_resize_and_errors() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut start = bash("");
    start.process.as_mut().unwrap().args = vec!["-i".into()];
    start
        .process
        .as_mut()
        .unwrap()
        .envs
        .insert("TERM".into(), "xterm".into());
    start.pty = Some(Pty {
        size: Some(pty::Size { cols: 91, rows: 27 }),
    });
    start.stdin = None;
    let mut s = c.start(req(&envd, start)).await.unwrap().into_inner();
    let pid = start_pid(&mut s).await;
    c.send_input(req(&envd, pty_input(pid, b"tty; stty size\n")))
        .await
        .unwrap();
    let out = read_until(&mut s, "27 91").await;
    assert!(out.contains("/dev/pts/"), "{out}");

    c.update(req(
        &envd,
        UpdateRequest {
            process: sel(pid),
            pty: Some(Pty {
                size: Some(pty::Size {
                    cols: 120,
                    rows: 40,
                }),
            }),
        },
    ))
    .await
    .unwrap();
    c.update(req(
        &envd,
        UpdateRequest {
            process: sel(pid),
            pty: None,
        },
    ))
    .await
    .unwrap();
    c.send_input(req(&envd, pty_input(pid, b"stty size\n")))
        .await
        .unwrap();
    read_until(&mut s, "40 120").await;

    let err = c
        .close_stdin(req(&envd, CloseStdinRequest { process: sel(pid) }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unknown);
    let stdin = SendInputRequest {
        process: sel(pid),
        input: Some(ProcessInput {
            input: Some(process_input::Input::Stdin(b"x".to_vec().into())),
        }),
    };
    assert_eq!(
        c.send_input(req(&envd, stdin)).await.unwrap_err().code(),
        tonic::Code::Internal
    );

    c.send_input(req(&envd, pty_input(pid, b"exit 3\n")))
        .await
        .unwrap();
    let rest = collect(s, |m| m.event).await;
    assert_eq!(rest.end.unwrap().exit_code, 3);
}

#[tokio::test]
async fn update_and_pty_input_on_a_pipe_process_are_internal() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut s = start_bash(&mut c, &envd, "sleep 30").await;
    let pid = start_pid(&mut s).await;
    let err = c
        .update(req(
            &envd,
            UpdateRequest {
                process: sel(pid),
                pty: Some(Pty {
                    size: Some(pty::Size { cols: 1, rows: 1 }),
                }),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Internal);
    assert_eq!(
        c.send_input(req(&envd, pty_input(pid, b"x")))
            .await
            .unwrap_err()
            .code(),
        tonic::Code::Internal
    );
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

#[tokio::test]
async fn runs_as_the_basic_auth_user_when_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test switches users: run it as root"
    );
    let nobody = nix::unistd::User::from_name("nobody")
        .unwrap()
        .expect("missing: the 'nobody' account this test runs commands as");
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut start = bash("id -u; id -g; echo $USER $HOME; sleep 1000 & echo $!; wait");
    start.process.as_mut().unwrap().cwd = Some("/".into());
    let mut r = req(&envd, start);
    r.metadata_mut()
        .insert("authorization", basic_auth("nobody").parse().unwrap());
    let mut s = c.start(r).await.unwrap().into_inner();
    let mut got = Collected::default();
    while String::from_utf8_lossy(&got.stdout).lines().count() < 4 {
        got.push(s.message().await.unwrap().unwrap().event.unwrap());
    }
    let out = String::from_utf8(got.stdout.clone()).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], nobody.uid.to_string());
    assert_eq!(lines[1], nobody.gid.to_string());
    assert_eq!(lines[2], format!("nobody {}", nobody.dir.display()));
    // A kill from root reaches the user's whole group.
    let grandchild: i32 = lines[3].parse().unwrap();
    c.send_signal(req(
        &envd,
        SendSignalRequest {
            process: sel(got.pid.unwrap()),
            signal: Signal::Sigkill as i32,
        },
    ))
    .await
    .unwrap();
    let end = collect(s, |m| m.event).await.end.unwrap();
    assert_eq!(end.status, "signal: killed");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!alive(grandchild));
}

/// The daemon binary running as an ordinary user: it runs commands only as that user, accepts
/// the configured alias (`user`, which the E2B SDKs send) for it, and refuses other names.
/// As root the test drops the daemon to `nobody` with `setpriv`; otherwise it runs as is.
#[tokio::test]
async fn not_root_runs_only_as_itself_and_its_alias() {
    use std::io::BufRead as _;
    let workdir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        workdir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_e2b-envd");
    let daemon_args = [
        "--port",
        "0",
        "--user-alias",
        "user",
        "--default-workdir",
        workdir.path().to_str().unwrap(),
    ];
    let (mut cmd, expected) = if nix::unistd::Uid::effective().is_root() {
        let nobody = nix::unistd::User::from_name("nobody")
            .unwrap()
            .expect("this test drops the daemon to the 'nobody' account, which is missing");
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args([
            format!("--reuid={}", nobody.uid),
            format!("--regid={}", nobody.gid),
            "--clear-groups".to_string(),
            "--".to_string(),
            bin.to_string(),
        ]);
        (cmd, nobody.name)
    } else {
        let me = nix::unistd::User::from_uid(nix::unistd::Uid::effective())
            .unwrap()
            .expect("the current user has no passwd entry");
        (std::process::Command::new(bin), me.name)
    };
    /// Kills the daemon however the test ends.
    struct Daemon(std::process::Child);
    impl Drop for Daemon {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut daemon = Daemon(
        cmd.args(daemon_args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start e2b-envd (as root this needs `setpriv` from util-linux)"),
    );
    let mut line = String::new();
    std::io::BufReader::new(daemon.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().to_string();
    let ch = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = e2b_envd_proto::process::process_client::ProcessClient::new(ch);
    let run_as = |name: Option<&str>| {
        let mut r = tonic::Request::new(bash("id -un"));
        if let Some(name) = name {
            r.metadata_mut()
                .insert("authorization", basic_auth(name).parse().unwrap());
        }
        r
    };
    for name in [None, Some("user"), Some(expected.as_str())] {
        let s = c.start(run_as(name)).await.unwrap().into_inner();
        let got = collect(s, |m| m.event).await;
        assert_eq!(
            String::from_utf8_lossy(&got.stdout).trim(),
            expected,
            "as {name:?}"
        );
    }
    let other = if expected == "root" { "daemon" } else { "root" };
    let e = c.start(run_as(Some(other))).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
}
