#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `Sandbox::local_unisolated()` (the embedded daemon): commands work in a temp workdir;
//! kill/drop stop every process. The isolated default is in `test_local_isolated.rs`.

use std::time::Duration;

use e2b::{CommandOptions, EnvdEndpoint, Sandbox};

fn alive(pid: u32) -> bool {
    // A zombie is not alive for our purpose.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[tokio::test]
async fn local_runs_commands_in_its_workdir() {
    let sb = Sandbox::local_unisolated().await.unwrap();
    assert!(sb.is_local());
    assert!(sb.id().starts_with("local-"), "{}", sb.id());
    assert_eq!(sb.envd_version().to_string(), "0.6.13");
    let wd = sb.workdir().unwrap().to_path_buf();
    let out = sb
        .commands()
        .run("pwd; echo $E2B_SANDBOX", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, format!("{}\ntrue\n", wd.display()));
    sb.kill().await.unwrap();
    assert!(!wd.exists(), "the temporary workdir is removed");
}

#[tokio::test]
async fn kill_stops_every_process_including_grandchildren() {
    let sb = Sandbox::local_unisolated().await.unwrap();
    let h = sb
        .commands()
        .start(
            "sleep 1000 & echo $!; wait",
            CommandOptions::new().no_timeout(),
        )
        .await
        .unwrap();
    let pid = h.pid();
    let grandchild = wait_for_line(&h).await;
    assert!(alive(pid) && alive(grandchild));
    sb.kill().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!alive(pid), "the command is gone");
    assert!(!alive(grandchild), "its background child is gone too");
}

#[tokio::test]
async fn drop_stops_every_process() {
    let sb = Sandbox::local_unisolated().await.unwrap();
    let h = sb
        .commands()
        .start(
            "sleep 1000 & echo $!; wait",
            CommandOptions::new().no_timeout(),
        )
        .await
        .unwrap();
    let grandchild = wait_for_line(&h).await;
    drop(sb);
    for _ in 0..50 {
        if !alive(grandchild) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("process {grandchild} survived dropping the sandbox");
}

async fn wait_for_line(h: &e2b::CommandHandle) -> u32 {
    for _ in 0..100 {
        let s = h.stdout();
        if let Some(line) = s.lines().next() {
            return line.trim().parse().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no output");
}

#[tokio::test]
async fn connect_reaches_an_envd_by_endpoint() {
    let local = Sandbox::local_unisolated().await.unwrap();
    let token = local.connection().access_token().unwrap().to_owned();
    let remote = Sandbox::connect(
        EnvdEndpoint::new(local.url())
            .access_token(token)
            .sandbox_id("sbx-1"),
    )
    .await
    .unwrap();
    assert_eq!(remote.id(), "sbx-1");
    assert!(!remote.is_local());
    let out = remote
        .commands()
        .run("echo via connect", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "via connect\n");

    // A wrong token teaches.
    let bad = Sandbox::connect(EnvdEndpoint::new(local.url()).access_token("wrong"))
        .await
        .unwrap();
    let err = bad
        .commands()
        .run("true", CommandOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, e2b::CommandError::Authentication { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("access token"), "{err}");
}

struct FixedControlPlane(String, String);

#[async_trait::async_trait]
impl e2b::ControlPlane for FixedControlPlane {
    async fn create(
        &self,
        template: &str,
        _opts: e2b::CreateOptions,
    ) -> Result<EnvdEndpoint, e2b::SandboxError> {
        Ok(EnvdEndpoint::new(self.0.clone())
            .access_token(self.1.clone())
            .sandbox_id(format!("{template}-1")))
    }
}

#[tokio::test]
async fn control_plane_seam_creates_through_the_trait() {
    let local = Sandbox::local_unisolated().await.unwrap();
    let cp = FixedControlPlane(
        local.url().to_owned(),
        local.connection().access_token().unwrap().to_owned(),
    );
    let sb = Sandbox::create_with(&cp, "base", e2b::CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(sb.id(), "base-1");
    let out = sb
        .commands()
        .run("echo ok", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "ok\n");
}

#[tokio::test]
async fn files_and_commands_share_the_sandbox() {
    let sb = Sandbox::local_unisolated().await.unwrap();
    let wd = sb.workdir().unwrap().to_path_buf();
    let path = wd.join("hello.txt");
    let path = path.to_str().unwrap();
    sb.files().write(path, "from files\n").await.unwrap();
    let out = sb
        .commands()
        .run(
            format!("cat {path}; echo from commands >> {path}"),
            CommandOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "from files\n");
    assert_eq!(
        sb.files().read_text(path).await.unwrap(),
        "from files\nfrom commands\n"
    );
    let names: Vec<String> = sb
        .files()
        .list(wd.to_str().unwrap(), 1)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["hello.txt".to_owned()]);
}

/// One case per local transport: `local_transport_runs_stream_stdin_and_files::in_process` and
/// `::loopback`.
mod local_transport_runs_stream_stdin_and_files {
    use e2b::LocalTransport;

    #[tokio::test]
    async fn in_process() {
        super::local_transport_runs_stream_stdin_and_files(LocalTransport::InProcess).await
    }

    #[tokio::test]
    async fn loopback() {
        super::local_transport_runs_stream_stdin_and_files(LocalTransport::Loopback).await
    }
}

async fn local_transport_runs_stream_stdin_and_files(transport: e2b::LocalTransport) {
    use e2b::{EnvdConfig, OutputCallback};
    use std::sync::{Arc, Mutex};
    {
        let sb = Sandbox::local_with_transport(EnvdConfig::ephemeral(), transport)
            .await
            .unwrap();
        let out = sb
            .commands()
            .run("echo out; echo err >&2; exit 4", CommandOptions::new())
            .await
            .unwrap();
        assert_eq!(
            (out.stdout.as_str(), out.stderr.as_str(), out.exit_code),
            ("out\n", "err\n", 4),
            "{transport:?}"
        );

        // A long-lived process: stdin in, output to a callback, nothing retained.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let h = sb
            .commands()
            .start_streaming(
                "cat",
                CommandOptions::new()
                    .stdin(true)
                    .retain_output(false)
                    .on_stdout(OutputCallback::bytes(move |b: &[u8]| {
                        s2.lock().unwrap().extend_from_slice(b)
                    })),
            )
            .await
            .unwrap();
        h.send_stdin(b"ping\n".to_vec()).await.unwrap();
        h.close_stdin().await.unwrap();
        let end = h.wait().await.unwrap();
        assert_eq!(end.exit_code, 0, "{transport:?}");
        assert_eq!(seen.lock().unwrap().as_slice(), b"ping\n", "{transport:?}");
        assert_eq!(h.retained_len(), 0);

        sb.files()
            .write("note.txt", b"hello".to_vec())
            .await
            .unwrap();
        let back = sb.files().read("note.txt").await.unwrap();
        assert_eq!(&back[..], b"hello", "{transport:?}");
        assert!(
            sb.files().exists("note.txt").await.unwrap(),
            "{transport:?}"
        );
        sb.kill().await.unwrap();
    }
}
