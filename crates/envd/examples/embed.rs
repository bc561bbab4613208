//! Embedding the daemon: start `e2b-envd` inside your program on a free loopback port, run a
//! command through it with the `e2b-envd-client` connection, print its output, shut down.
//!
//! ```text
//! cargo run -p e2b-envd --example embed
//! ```

use e2b_envd_client::{CallOptions, EnvdConnection, EnvdEndpoint};
use e2b_envd_proto::process::process_event::{Event, data_event::Output};
use e2b_envd_proto::process::{ProcessConfig, StartRequest};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Port 0 on 127.0.0.1 (`ephemeral`), with a token the client must send.
    let mut config = e2b_envd::EnvdConfig::ephemeral();
    config.access_token = Some("secret".into());
    let handle = e2b_envd::Envd::start(config).await?;
    println!("envd listening on {}", handle.url());

    let conn = EnvdConnection::new(EnvdEndpoint::new(handle.url()).access_token("secret"))?;
    let start = StartRequest {
        process: Some(ProcessConfig {
            cmd: "/bin/sh".into(),
            args: vec!["-c".into(), "echo hello from $0; uname -s".into()],
            ..Default::default()
        }),
        stdin: Some(false),
        ..Default::default()
    };
    let mut events = conn
        .process()
        .start(conn.request(start, &CallOptions::default())?)
        .await?
        .into_inner();
    while let Some(msg) = events.message().await? {
        match msg.event.and_then(|e| e.event) {
            Some(Event::Start(s)) => println!("started, pid {}", s.pid),
            Some(Event::Data(d)) => match d.output {
                Some(Output::Stdout(b)) => print!("{}", String::from_utf8_lossy(&b)),
                Some(Output::Stderr(b)) => eprint!("{}", String::from_utf8_lossy(&b)),
                _ => {}
            },
            Some(Event::End(e)) => println!("exited: {} ({})", e.exit_code, e.status),
            _ => {}
        }
    }

    // Kills and reaps anything still running, then stops the server.
    handle.shutdown().await;
    Ok(())
}
