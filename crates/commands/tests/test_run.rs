#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `run`: output, exit status as data, special characters, multiline, cwd, envs, check(), and
//! what dropping its future does (the command keeps running).

mod common;

use common::Via;

use e2b_commands::{CommandError, CommandLine, CommandOptions, ConnectOptions, OutputCallback};

async fn run_echo(via: Via) {
    let env = common::env_via(via).await;
    let out = env
        .commands
        .run("echo hello; echo oops >&2", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "hello\n", "{via:?}");
    assert_eq!(out.stderr, "oops\n", "{via:?}");
    assert_eq!(out.exit_code, 0);
    assert!(out.success());
    assert_eq!(&out.stdout_bytes[..], b"hello\n");
}
common::transport_cases!(run_echo: h2c, grpc_web, in_process);

async fn non_zero_exit_is_data_and_check_makes_it_an_error(via: Via) {
    let env = common::env_via(via).await;
    let out = env
        .commands
        .run("echo out; echo err >&2; exit 3", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.exit_code, 3);
    assert!(!out.success());
    assert_eq!(out.error.as_deref(), Some("exit status 3"));
    match out.check() {
        Err(CommandError::Exit(e)) => {
            assert_eq!(e.exit_code, 3);
            assert_eq!(e.stdout, "out\n");
            assert_eq!(e.stderr, "err\n");
        }
        other => panic!("expected Exit, got {other:?}"),
    }
    let err = env
        .commands
        .run("exit 4", CommandOptions::new().check(true))
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), Some(4));
}
common::transport_cases!(non_zero_exit_is_data_and_check_makes_it_an_error: h2c, in_process);

async fn special_characters_and_multiline(via: Via) {
    let env = common::env_via(via).await;
    let special = r#"!@#$%^&*()_+-=[]{}|;':",./<>?`~ äöü €𝄞"#;
    let out = env
        .commands
        .run(
            format!("printf '%s' {}", shell_quote(special)),
            CommandOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, special);
    let out = env
        .commands
        .run(
            "echo line1\necho line2\n\necho line3",
            CommandOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "line1\nline2\nline3\n");
}
common::transport_cases!(special_characters_and_multiline: h2c, in_process);

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

async fn cwd_envs_and_exec_without_shell(via: Via) {
    let env = common::env_via(via).await;
    let dir = env.envd.workdir().join("sub dir");
    std::fs::create_dir_all(&dir).unwrap();
    let out = env
        .commands
        .run(
            "pwd; echo \"$FOO-$BAR\"",
            CommandOptions::new()
                .cwd(dir.to_str().unwrap())
                .env("FOO", "foo")
                .envs([("BAR", "bar")]),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, format!("{}\nfoo-bar\n", dir.display()));

    // The default workdir is the daemon's.
    let out = env
        .commands
        .run("pwd", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout.trim_end(), env.envd.workdir().to_str().unwrap());

    // No shell: the argument reaches the program verbatim.
    let out = env
        .commands
        .run(
            CommandLine::exec("printf", ["%s|%s", "$HOME", "a b"]),
            CommandOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "$HOME|a b");
}
common::transport_cases!(cwd_envs_and_exec_without_shell: h2c, in_process);

async fn missing_cwd_is_invalid_argument(via: Via) {
    let env = common::env_via(via).await;
    let err = env
        .commands
        .run("true", CommandOptions::new().cwd("/definitely/not/here"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CommandError::InvalidArgument { .. }),
        "{err:?}"
    );
}
common::transport_cases!(missing_cwd_is_invalid_argument: h2c, in_process);

async fn run_futures_are_send(via: Via) {
    let env = common::env_via(via).await;
    let c = env.commands.clone();
    let out = tokio::spawn(async move { c.run("echo spawned", CommandOptions::new()).await })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.stdout, "spawned\n");
}
common::transport_cases!(run_futures_are_send: h2c, in_process);

/// `run`'s documented cancel safety: dropping its future once envd started the command does
/// not kill the command. Shown by event order, no clock: the command prints, the future is
/// dropped, the test reattaches by tag, releases the command (a file it waits for), and reads
/// its clean exit and its last line.
async fn dropping_the_run_future_leaves_the_command_running(via: Via) {
    let env = common::env_via(via).await;
    let dir = env
        .commands
        .run("mktemp -d", CommandOptions::new().check(true))
        .await
        .unwrap()
        .stdout
        .trim()
        .to_owned();
    let tag = format!("dropped-run-{via:?}");
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let started_tx = std::sync::Mutex::new(Some(started_tx));
    let opts = CommandOptions::new()
        .cwd(dir.clone())
        .tag(tag.clone())
        .on_stdout(OutputCallback::text(move |_: &str| {
            if let Some(tx) = started_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
        }));
    let run = env.commands.run(
        "echo started; while [ ! -e go ]; do sleep 0.02; done; echo finished",
        opts,
    );
    tokio::select! {
        out = run => panic!("run ended before it was released: {out:?}"),
        started = started_rx => started.unwrap(),
    }
    // The run future is dropped here, with the command waiting for `go`.

    let listed = env.commands.list().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|p| p.tag.as_deref() == Some(tag.as_str())),
        "the command is gone after its run future was dropped: {listed:?}"
    );
    let handle = env
        .commands
        .connect(tag.as_str(), ConnectOptions::new())
        .await
        .unwrap();
    env.commands
        .run(
            "touch go",
            CommandOptions::new().cwd(dir.clone()).check(true),
        )
        .await
        .unwrap();
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), handle.wait())
        .await
        .expect("hang guard: the released command did not end")
        .unwrap();
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(out.stdout.contains("finished"), "{out:?}");
    env.commands
        .run(format!("rm -rf '{dir}'"), CommandOptions::new())
        .await
        .unwrap();
}
common::transport_cases!(dropping_the_run_future_leaves_the_command_running: h2c, grpc_web, in_process);
