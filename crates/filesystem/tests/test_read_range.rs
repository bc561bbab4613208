//! `Filesystem::read_range` against the real daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use e2b_envd_client::{EnvdConnection, EnvdEndpoint};
use e2b_filesystem::{Filesystem, FilesystemError};
use e2b_test_support::spawn_envd;

#[tokio::test]
async fn ranges_sizes_and_errors() {
    let envd = spawn_envd().await;
    let mut ep = EnvdEndpoint::new(envd.url());
    if let Some(t) = envd.access_token() {
        ep = ep.access_token(t);
    }
    let fs = Filesystem::new(EnvdConnection::new(ep).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.bin");
    let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    std::fs::write(&p, &data).unwrap();
    let p = p.to_str().unwrap();

    let r = fs.read_range(p, 10, 5).await.unwrap();
    assert_eq!((&r.data[..], r.size), (&data[10..15], 1000));
    let r = fs.read_range(p, 990, 100).await.unwrap();
    assert_eq!((&r.data[..], r.size), (&data[990..], 1000));
    let r = fs.read_range(p, 1000, 10).await.unwrap();
    assert_eq!((r.data.len(), r.size), (0, 1000));
    let r = fs.read_range(p, 5000, 10).await.unwrap();
    assert_eq!((r.data.len(), r.size), (0, 1000));
    let r = fs.read_range(p, 3, 0).await.unwrap();
    assert_eq!((r.data.len(), r.size), (0, 1000));
    let r = fs.read_range(p, 0, u64::MAX).await.unwrap();
    assert_eq!(&r.data[..], &data[..]);

    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let r = fs.read_range(empty.to_str().unwrap(), 0, 10).await.unwrap();
    assert_eq!((r.data.len(), r.size), (0, 0));

    let missing = dir.path().join("missing");
    let e = fs
        .read_range(missing.to_str().unwrap(), 0, 1)
        .await
        .unwrap_err();
    assert!(matches!(e, FilesystemError::NotFound { .. }), "{e:?}");
}
