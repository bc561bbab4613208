//! `e2b run --template TARBALL`: the isolated local sandbox's root filesystem comes from a
//! `docker export`-style tarball (unpacked once into `$E2B_CACHE/templates`), not from the
//! host. Needs root, user namespaces, `ldd` and `tar`; fails saying which is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

/// Copies `file` (following links) to the same path under `root`.
fn copy_in(root: &Path, file: &str) {
    let dest = root.join(file.trim_start_matches('/'));
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(file, &dest).unwrap_or_else(|e| panic!("copy {file} into the root: {e}"));
}

/// A tiny root: bash, the shared libraries it and the daemon binary need, `/etc/passwd` with
/// `user`, and a marker file that only this template has.
fn tiny_root(root: &Path, daemon: &str) {
    let out = Command::new("ldd")
        .args([daemon, "/bin/bash"])
        .output()
        .expect("this test needs `ldd` (package libc-bin)");
    assert!(out.status.success(), "ldd failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs: Vec<&str> = text
        .split_whitespace()
        .filter(|w| w.starts_with('/') && !w.ends_with(':'))
        .collect();
    libs.sort_unstable();
    libs.dedup();
    assert!(
        libs.iter().any(|l| l.contains("ld-linux")),
        "ldd named no dynamic loader: {text}"
    );
    for lib in libs {
        copy_in(root, lib);
    }
    copy_in(root, "/bin/bash");
    for d in ["etc", "home/user", "tmp", "root"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::os::unix::fs::symlink("bash", root.join("bin/sh")).unwrap();
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0::/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\nuser:x:1000:\n").unwrap();
    std::fs::write(root.join("etc/e2b-marker"), "from the tarball\n").unwrap();
}

#[test]
fn run_uses_a_tarball_template_as_the_sandbox_root() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    tiny_root(&root, env!("CARGO_BIN_EXE_e2b"));
    let tarball = work.path().join("tiny.tar.gz");
    let st = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-czf")
        .arg(&tarball)
        .arg(".")
        .status()
        .expect("this test needs `tar`");
    assert!(st.success(), "tar failed");
    let cache = work.path().join("cache");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_e2b"))
            .env("E2B_CACHE", &cache)
            .env_remove("E2B_ISOLATION")
            .args(["run", "--network", "none", "--template"])
            .arg(&tarball)
            .args([
                "--",
                "read l < /etc/e2b-marker; echo \"$l\"; \
                 [ -e /usr/bin/env ] && echo host-usr || echo own-root; echo \"$HOME\"",
            ])
            .output()
            .unwrap()
    };
    let out = run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "e2b run --template failed (needs root and user namespaces): {stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "from the tarball\nown-root\n/home/user\n"
    );
    assert!(stderr.contains("unpacking template"), "{stderr}");
    // The second sandbox reuses the unpacked tree: no second unpack.
    let again = run();
    assert!(again.status.success(), "{again:?}");
    assert!(
        !String::from_utf8_lossy(&again.stderr).contains("unpacking template"),
        "the template was unpacked twice: {again:?}"
    );
}

#[test]
fn a_missing_template_is_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_e2b"))
        .env_remove("E2B_ISOLATION")
        .args([
            "run",
            "--network",
            "none",
            "--template",
            "/nonexistent/e2b-template.tar.gz",
            "--",
            "echo ran",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        stderr.contains("/nonexistent/e2b-template.tar.gz"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
}
