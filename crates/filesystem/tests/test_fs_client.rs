//! The `e2b-filesystem` client against the real daemon, in-process on an ephemeral port.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use bytes::Bytes;
use e2b_envd_client::{EnvdConnection, EnvdEndpoint, EnvdVersion};
use e2b_filesystem::{
    EventType, FileType, Filesystem, FilesystemError, WatchOptions, WriteEntry, WriteOptions,
};
use e2b_test_support::{TestEnvd, spawn_envd};
use futures::StreamExt as _;

fn fs_for(envd: &TestEnvd) -> Filesystem {
    let mut ep = EnvdEndpoint::new(envd.url());
    if let Some(t) = envd.access_token() {
        ep = ep.access_token(t);
    }
    Filesystem::new(EnvdConnection::new(ep).unwrap())
}

fn fs_with_version(envd: &TestEnvd, v: &str) -> Filesystem {
    let version: EnvdVersion = v.parse().unwrap();
    let ep = EnvdEndpoint::new(envd.url())
        .access_token(envd.access_token().unwrap())
        .envd_version(version);
    Filesystem::new(EnvdConnection::new(ep).unwrap())
}

#[tokio::test]
async fn write_read_roundtrip() {
    let envd = spawn_envd().await;
    let fs = fs_for(&envd);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a/b/c.txt");
    let p = p.to_str().unwrap();
    let info = fs.write(p, "hello").await.unwrap();
    assert_eq!(info.path, p);
    assert_eq!(info.name, "c.txt");
    assert_eq!(fs.read_text(p).await.unwrap(), "hello");
    assert_eq!(fs.read(p).await.unwrap(), Bytes::from_static(b"hello"));
    // Overwrite.
    fs.write(p, Bytes::from_static(b"bye")).await.unwrap();
    let mut s = fs.read_stream(p).await.unwrap();
    let mut got = Vec::new();
    while let Some(c) = s.next().await {
        got.extend_from_slice(&c.unwrap());
    }
    assert_eq!(got, b"bye");
    // No temporary file is left next to it.
    let names: Vec<_> = std::fs::read_dir(dir.path().join("a/b"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["c.txt"]);
}

#[tokio::test]
async fn stream_and_file_transfers() {
    let envd = spawn_envd().await;
    let fs = fs_for(&envd);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    let remote = dir.path().join("remote/copy.bin");
    let remote = remote.to_str().unwrap();
    fs.write_from_file(remote, &local, &WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(std::fs::read(remote).unwrap(), data);
    let back = dir.path().join("back.bin");
    assert_eq!(
        fs.read_to_file(remote, &back).await.unwrap(),
        data.len() as u64
    );
    assert_eq!(std::fs::read(&back).unwrap(), data);
    // A streamed upload with gzip on the wire.
    let chunks: Vec<std::io::Result<Bytes>> = data
        .chunks(100_000)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let gz = dir.path().join("remote/gz.bin");
    let gz = gz.to_str().unwrap();
    fs.write_stream(
        gz,
        futures::stream::iter(chunks),
        &WriteOptions::default().gzip(true),
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read(gz).unwrap(), data);
}

#[tokio::test]
async fn several_files_and_metadata() {
    let envd = spawn_envd().await;
    let fs = fs_for(&envd);
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m/a.txt").to_str().unwrap().to_string();
    let b = dir.path().join("m/n/b.txt").to_str().unwrap().to_string();
    let out = fs
        .write_files(vec![
            WriteEntry::bytes(a.clone(), "A"),
            WriteEntry::bytes(b.clone(), "BB"),
        ])
        .await
        .unwrap();
    assert_eq!(
        out.iter().map(|i| i.path.clone()).collect::<Vec<_>>(),
        vec![a.clone(), b.clone()]
    );
    assert_eq!(std::fs::read(&b).unwrap(), b"BB");
    let opts = WriteOptions::default()
        .metadata("Owner", "alice")
        .metadata("k2", "v 2");
    let info = fs.write_with(&a, "meta", &opts).await.unwrap();
    let md = info.metadata.unwrap();
    assert_eq!(md.get("owner").map(String::as_str), Some("alice"));
    let stat = fs.get_info(&a).await.unwrap();
    assert_eq!(stat.metadata.get("k2").map(String::as_str), Some("v 2"));
    // An upload without metadata replaces (clears) it.
    fs.write(&a, "plain").await.unwrap();
    assert!(fs.get_info(&a).await.unwrap().metadata.is_empty());
}

#[tokio::test]
async fn rpcs_list_info_dirs_move_remove() {
    let envd = spawn_envd().await;
    let fs = fs_for(&envd);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    for p in [
        "file1.txt",
        "subdir1/a",
        "subdir1/b",
        "subdir2/c",
        "subdir2/d",
    ] {
        fs.write(&format!("{root}/{p}"), "x").await.unwrap();
    }
    let names = |v: Vec<e2b_filesystem::EntryInfo>| {
        v.into_iter()
            .map(|e| e.path[root.len() + 1..].to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(fs.list(root, 1).await.unwrap()),
        vec!["file1.txt", "subdir1", "subdir2"]
    );
    assert_eq!(
        names(fs.list(root, 2).await.unwrap()),
        vec![
            "file1.txt",
            "subdir1",
            "subdir1/a",
            "subdir1/b",
            "subdir2",
            "subdir2/c",
            "subdir2/d"
        ]
    );
    assert!(matches!(
        fs.list(root, 0).await,
        Err(FilesystemError::InvalidArgument { .. })
    ));
    let info = fs.get_info(&format!("{root}/file1.txt")).await.unwrap();
    assert_eq!(info.file_type, FileType::File);
    assert_eq!(info.permissions, "-rw-r--r--");
    assert_eq!(info.mode, 0o644);
    assert_eq!(info.size, 1);
    assert!(info.modified_time.is_some());
    let d = fs.get_info(&format!("{root}/subdir1")).await.unwrap();
    assert!(d.is_dir());
    assert_eq!(d.permissions, "drwxr-xr-x");
    // Symlink: type from the target, resolved target reported.
    std::os::unix::fs::symlink(format!("{root}/subdir1"), format!("{root}/link")).unwrap();
    let l = fs.get_info(&format!("{root}/link")).await.unwrap();
    assert_eq!(l.file_type, FileType::Dir);
    assert_eq!(l.path, format!("{root}/link"));
    assert_eq!(l.permissions, "Lrwxrwxrwx");
    assert_eq!(
        l.symlink_target.as_deref(),
        Some(
            std::fs::canonicalize(format!("{root}/subdir1"))
                .unwrap()
                .to_str()
                .unwrap()
        )
    );
    assert!(fs.exists(&format!("{root}/file1.txt")).await.unwrap());
    assert!(!fs.exists(&format!("{root}/nope")).await.unwrap());
    assert!(fs.make_dir(&format!("{root}/x/y/z")).await.unwrap());
    assert!(!fs.make_dir(&format!("{root}/x/y/z")).await.unwrap());
    let moved = fs
        .rename(
            &format!("{root}/file1.txt"),
            &format!("{root}/new/dir/f.txt"),
        )
        .await
        .unwrap();
    assert_eq!(moved.name, "f.txt");
    assert!(matches!(
        fs.rename(&format!("{root}/gone"), &format!("{root}/g2"))
            .await,
        Err(FilesystemError::NotFound { .. })
    ));
    fs.remove(&format!("{root}/subdir2")).await.unwrap();
    fs.remove(&format!("{root}/subdir2")).await.unwrap();
    assert!(!fs.exists(&format!("{root}/subdir2")).await.unwrap());
}

#[tokio::test]
async fn typed_errors() {
    let envd = spawn_envd().await;
    let fs = fs_for(&envd);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    assert!(matches!(
        fs.read(&format!("{root}/missing")).await,
        Err(FilesystemError::NotFound { .. })
    ));
    assert!(matches!(
        fs.read(root).await,
        Err(FilesystemError::IsDirectory { .. })
    ));
    fs.write(&format!("{root}/f"), "x").await.unwrap();
    assert!(matches!(
        fs.list(&format!("{root}/f"), 1).await,
        Err(FilesystemError::InvalidArgument { .. })
    ));
    assert!(matches!(
        fs.write(root, "x").await,
        Err(FilesystemError::IsDirectory { .. })
    ));
    assert!(matches!(
        fs.get_info(&format!("{root}/missing")).await,
        Err(FilesystemError::NotFound { .. })
    ));
    // A wrong token.
    let bad = Filesystem::new(
        EnvdConnection::new(EnvdEndpoint::new(envd.url()).access_token("wrong")).unwrap(),
    );
    assert!(matches!(
        bad.read(&format!("{root}/f")).await,
        Err(FilesystemError::Authentication { .. })
    ));
}

#[tokio::test]
async fn version_gates_fail_before_sending() {
    let envd = spawn_envd().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let old = fs_with_version(&envd, "0.1.0");
    let e = old
        .watch_dir(root, &WatchOptions::default().recursive(true))
        .await
        .unwrap_err();
    assert!(matches!(e, FilesystemError::UnsupportedFeature(_)), "{e}");
    let e = old
        .write_with(
            &format!("{root}/m"),
            "x",
            &WriteOptions::default().metadata("a", "b"),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, FilesystemError::UnsupportedFeature(_)), "{e}");
    let e = old
        .write_with(
            &format!("{root}/g"),
            "x",
            &WriteOptions::default().gzip(true),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, FilesystemError::UnsupportedFeature(_)), "{e}");
    // Old envd: uploads fall back to multipart and still work (as user `user` on < 0.4.0, so
    // use 0.5.0 here, which has the default user).
    let mid = fs_with_version(&envd, "0.5.0");
    mid.write(&format!("{root}/multi.txt"), "via multipart")
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(format!("{root}/multi.txt")).unwrap(),
        "via multipart"
    );
}

async fn next_event(h: &mut e2b_filesystem::WatchHandle) -> e2b_filesystem::FilesystemEvent {
    tokio::time::timeout(Duration::from_secs(5), h.next())
        .await
        .expect("event in time")
        .expect("stream open")
        .unwrap()
}

#[tokio::test]
async fn watch_dir_stream() {
    let envd = spawn_envd().await;
    let fs = fs_for(&envd);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let mut h = fs
        .watch_dir(root, &WatchOptions::default().include_entry(true))
        .await
        .unwrap();
    fs.write(&format!("{root}/w.txt"), "data").await.unwrap();
    let evs = [
        next_event(&mut h).await,
        next_event(&mut h).await,
        next_event(&mut h).await,
    ];
    assert_eq!(
        evs.iter().map(|e| e.event_type).collect::<Vec<_>>(),
        vec![EventType::Create, EventType::Chmod, EventType::Write]
    );
    assert!(evs.iter().all(|e| e.name == "w.txt"));
    assert_eq!(evs[2].entry.as_ref().unwrap().size, 4);
    fs.remove(&format!("{root}/w.txt")).await.unwrap();
    let ev = next_event(&mut h).await;
    assert_eq!(
        (ev.event_type, ev.name.as_str(), ev.entry.is_none()),
        (EventType::Remove, "w.txt", true)
    );
    h.stop();

    // Recursive: a new subdirectory is watched too.
    let mut h = fs
        .watch_dir(root, &WatchOptions::default().recursive(true))
        .await
        .unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let ev = next_event(&mut h).await;
    assert_eq!(
        (ev.event_type, ev.name.as_str()),
        (EventType::Create, "sub")
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::write(dir.path().join("sub/inner.txt"), "x").unwrap();
    let ev = next_event(&mut h).await;
    assert_eq!(
        (ev.event_type, ev.name.as_str()),
        (EventType::Create, "sub/inner.txt")
    );
    // Watching a missing directory or a file fails.
    assert!(matches!(
        fs.watch_dir(&format!("{root}/none"), &WatchOptions::default())
            .await,
        Err(FilesystemError::NotFound { .. })
    ));
    assert!(matches!(
        fs.watch_dir(&format!("{root}/sub/inner.txt"), &WatchOptions::default())
            .await,
        Err(FilesystemError::InvalidArgument { .. })
    ));
}

#[tokio::test]
async fn signed_urls() {
    let envd = spawn_envd().await;
    let fs = fs_for(&envd);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.txt");
    let p = p.to_str().unwrap();
    fs.write(p, "signed").await.unwrap();
    let plain = reqwest::Client::new();
    let url = fs.download_url(p, &Default::default()).unwrap();
    assert!(url.contains("signature=v1_"));
    let r = plain.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "signed");
    let url = fs
        .download_url(
            p,
            &e2b_filesystem::UrlOptions::default().expires_in(Duration::from_secs(60)),
        )
        .unwrap();
    assert_eq!(plain.get(&url).send().await.unwrap().status(), 200);
    // Upload through a signed URL.
    let up = fs.upload_url(Some(p), &Default::default()).unwrap();
    let r = plain
        .post(&up)
        .header("content-type", "application/octet-stream")
        .body("new")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(std::fs::read_to_string(p).unwrap(), "new");
    // A read signature does not allow writing; no signature at all is refused.
    let r = plain
        .post(&url)
        .header("content-type", "application/octet-stream")
        .body("z")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.text().await.unwrap(),
        r#"{"code":401,"message":"invalid signature"}"#
    );
    let r = plain
        .get(format!("{}/files?path={p}", envd.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.text().await.unwrap(),
        r#"{"code":401,"message":"missing signature query parameter"}"#
    );
}

#[tokio::test]
async fn runs_as_the_requested_user() {
    assert_eq!(
        nix_uid(),
        0,
        "this test switches users: run it as root (the daemon can only run commands as itself otherwise)"
    );
    e2b_test_support::ensure_user_account("user");
    let envd = spawn_envd().await;
    let fs = fs_for(&envd).with_user("user");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("owned/by/user.txt");
    let info = fs.write(p.to_str().unwrap(), "x").await.unwrap();
    assert_eq!(info.path, p.to_str().unwrap());
    let st = fs.get_info(p.to_str().unwrap()).await.unwrap();
    assert_eq!((st.owner.as_str(), st.group.as_str()), ("user", "user"));
    let parent = fs
        .get_info(dir.path().join("owned").to_str().unwrap())
        .await
        .unwrap();
    assert_eq!(parent.owner, "user");
    // Relative paths resolve against the user's home.
    let rel = format!("e2b-fs-test-{}.txt", std::process::id());
    let info = fs.write(&rel, "home").await.unwrap();
    assert_eq!(info.path, format!("/home/user/{rel}"));
    fs.remove(&rel).await.unwrap();
}

fn nix_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(1)
}
