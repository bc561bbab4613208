//! Upload and download a file with progress, streamed both ways.
//!
//! ```sh
//! cargo run -p e2b-filesystem --example transfer       # against an embedded local envd
//! E2B_SANDBOX_URL=http://127.0.0.1:49983 E2B_ACCESS_TOKEN=... \
//!     cargo run -p e2b-filesystem --example transfer   # against any envd
//! ```
//!
//! The upload is a stream of chunks ([`Filesystem::write_stream`]) that reports each chunk as
//! the HTTP client takes it; the download ([`Filesystem::read_stream`]) reports each chunk as it
//! arrives. Neither holds the file whole in memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use e2b_envd_client::{EnvdConnection, EnvdEndpoint};
use e2b_filesystem::{Filesystem, WriteOptions};
use futures::StreamExt as _;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CHUNK: usize = 1 << 20;
const CHUNKS: usize = 32;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // The envd named by E2B_SANDBOX_URL, else a daemon embedded in this process.
    let (endpoint, _daemon) = match std::env::var("E2B_SANDBOX_URL") {
        Ok(url) => {
            let mut endpoint = EnvdEndpoint::new(url);
            if let Ok(token) = std::env::var("E2B_ACCESS_TOKEN") {
                endpoint = endpoint.access_token(token);
            }
            (endpoint, None)
        }
        Err(_) => {
            let mut config = e2b_envd::EnvdConfig::ephemeral();
            config.access_token = Some("example-token".into());
            let daemon = e2b_envd::Envd::start(config).await?;
            let endpoint = EnvdEndpoint::new(daemon.url()).access_token("example-token");
            (endpoint, Some(daemon))
        }
    };
    let fs = Filesystem::new(EnvdConnection::new(endpoint)?);
    let path = format!("/tmp/e2b-transfer-example-{}.bin", std::process::id());
    let total = (CHUNK * CHUNKS) as u64;

    // Upload: a stream of chunks, each counted as the client sends it.
    let sent = Arc::new(AtomicU64::new(0));
    let progress = sent.clone();
    let body = futures::stream::iter(0..CHUNKS).map(move |i| {
        let done = progress.fetch_add(CHUNK as u64, Ordering::Relaxed) + CHUNK as u64;
        if (i + 1) % 8 == 0 {
            println!("upload: {} / {} MiB", done >> 20, total >> 20);
        }
        Ok::<_, std::io::Error>(Bytes::from(vec![(i % 251) as u8; CHUNK]))
    });
    let info = fs
        .write_stream(&path, body, &WriteOptions::default())
        .await?;
    println!("uploaded {} as {}", info.path, info.name);

    // Download: count the chunks as they arrive.
    let mut stream = fs.read_stream(&path).await?;
    let mut received = 0u64;
    let mut next_report = 8u64 << 20;
    while let Some(chunk) = stream.next().await {
        received += chunk?.len() as u64;
        if received >= next_report || received == total {
            println!("download: {} / {} MiB", received >> 20, total >> 20);
            next_report += 8 << 20;
        }
    }
    if received != total {
        return Err(format!("downloaded {received} bytes of {total}").into());
    }
    fs.remove(&path).await?;
    println!("done: {} MiB each way", total >> 20);
    Ok(())
}
