#![allow(clippy::unwrap_used, clippy::expect_used)]
//! PTY size, resize and input; the user option; the keepalive option.

mod common;

use common::Via;

use std::time::Duration;

use e2b_commands::{CommandEvent, CommandOptions, PtySize};
use futures::StreamExt as _;

async fn pty_command_sees_a_terminal_of_the_given_size(via: Via) {
    let env = common::env_via(via).await;
    let out = env
        .commands
        .run(
            "tty; stty size",
            CommandOptions::new().pty(PtySize::new(100, 30)),
        )
        .await
        .unwrap();
    assert!(out.stdout.starts_with("/dev/pts/"), "{:?}", out.stdout);
    assert!(out.stdout.contains("30 100"), "{:?}", out.stdout);
}
common::transport_cases!(pty_command_sees_a_terminal_of_the_given_size: h2c, in_process);

async fn pty_input_resize_and_events(via: Via) {
    let env = common::env_via(via).await;
    let mut h = env
        .commands
        .start(
            "read line; stty size; echo got:$line",
            CommandOptions::new().pty(PtySize::new(80, 24)).events(true),
        )
        .await
        .unwrap();
    assert!(h.is_pty());
    let mut events = h.take_events().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.resize(PtySize::new(120, 40)).await.unwrap();
    h.send_stdin("hello\n").await.unwrap();
    let mut pty = Vec::new();
    while let Some(ev) = events.next().await {
        match ev.unwrap() {
            CommandEvent::Pty(b) => pty.extend_from_slice(&b),
            CommandEvent::Exit(st) => assert_eq!(st.exit_code, 0),
            other => panic!("{other:?}"),
        }
    }
    let text = String::from_utf8_lossy(&pty);
    assert!(text.contains("40 120"), "{text:?}");
    assert!(text.contains("got:hello"), "{text:?}");
    assert_eq!(h.stdout(), text, "PTY output is retained as stdout");
}
common::transport_cases!(pty_input_resize_and_events: h2c, in_process);

async fn user_option_selects_the_user_and_unknown_users_teach(via: Via) {
    let env = common::env_via(via).await;
    let me = env
        .commands
        .run("id -un", CommandOptions::new())
        .await
        .unwrap();
    let me = me.stdout.trim().to_owned();
    let out = env
        .commands
        .run("id -un", CommandOptions::new().user(&me))
        .await
        .unwrap();
    assert_eq!(out.stdout.trim(), me);
    let err = env
        .commands
        .run("id -un", CommandOptions::new().user("no-such-user-xyz"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no-such-user-xyz"), "{err}");
    assert!(err.to_string().contains("user exists"), "{err}");
}
common::transport_cases!(user_option_selects_the_user_and_unknown_users_teach: h2c, in_process);

async fn keepalive_events_keep_an_idle_stream_open(via: Via) {
    let env = common::env_via(via).await;
    // A 1 s keepalive on a 2.5 s silent command: keepalives flow and are ignored.
    let out = env
        .commands
        .run(
            "sleep 2.5; echo awake",
            CommandOptions::new().keepalive(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "awake\n");
}
common::transport_cases!(keepalive_events_keep_an_idle_stream_open: h2c, in_process);
