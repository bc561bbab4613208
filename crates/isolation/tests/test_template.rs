//! Tarball (`docker export`) and OCI image layout templates: unpacked once into the cache,
//! used as a sandbox's root; hostile archives refused without writing outside the cache.
//! Sandbox tests need root and user namespaces and fail saying so. Own `main` (no libtest):
//! the test binary is re-executed to build each sandbox.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use e2b_isolation::{
    ArchiveProblem, IsolatedSandbox, IsolationError, Network, SandboxSpec, Template, TemplateCache,
};
use sha2::Digest as _;

fn main() {
    e2b_isolation::run_if_child();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(UNPRIVILEGED_ARG) {
        std::process::exit(unprivileged_supervisor(&args[1..]));
    }
    let tests: [(&str, fn()); 12] = [
        (
            "zstd_archives_of_several_frames_are_unpacked_and_huge_windows_refused",
            zstd_archives_of_several_frames_are_unpacked_and_huge_windows_refused,
        ),
        (
            "an_unprivileged_supervisor_unpacks_and_runs_a_tarball",
            an_unprivileged_supervisor_unpacks_and_runs_a_tarball,
        ),
        (
            "tarball_template_runs_with_its_own_files",
            tarball_template_runs_with_its_own_files,
        ),
        (
            "second_sandbox_reuses_the_unpacked_tarball",
            second_sandbox_reuses_the_unpacked_tarball,
        ),
        (
            "concurrent_unpacks_of_one_template_agree",
            concurrent_unpacks_of_one_template_agree,
        ),
        (
            "oci_layout_layers_apply_in_order_with_whiteouts",
            oci_layout_layers_apply_in_order_with_whiteouts,
        ),
        (
            "hostile_archives_are_refused_and_write_nothing_outside",
            hostile_archives_are_refused_and_write_nothing_outside,
        ),
        (
            "devices_are_skipped_and_ids_clamped",
            devices_are_skipped_and_ids_clamped,
        ),
        (
            "size_and_entry_limits_are_enforced",
            size_and_entry_limits_are_enforced,
        ),
        (
            "template_symlinks_cannot_redirect_setup_writes_to_the_host",
            template_symlinks_cannot_redirect_setup_writes_to_the_host,
        ),
        (
            "template_kinds_parse_from_paths",
            template_kinds_parse_from_paths,
        ),
        (
            "long_names_and_pax_records_are_applied_and_bounded",
            long_names_and_pax_records_are_applied_and_bounded,
        ),
    ];
    // The listing protocol of libtest, which cargo-nextest uses.
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            for (name, _) in tests {
                println!("{name}: test");
            }
        }
        return;
    }
    let filter: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        println!("test {name} ...");
        test();
        println!("test {name} ... ok");
    }
}

fn need_sandboxes() {
    let probe = e2b_isolation::probe();
    assert!(
        probe.root,
        "this test needs root (ranges of host ids are mapped into sandboxes)"
    );
    assert!(
        probe.user_namespaces,
        "the kernel has user namespaces disabled"
    );
}

/// A host directory of its own for a test, removed on drop.
struct HostDir(PathBuf);

impl HostDir {
    fn new(name: &str) -> Self {
        let p = PathBuf::from(format!("/var/tmp/e2b-tmpl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    fn cache(&self) -> TemplateCache {
        TemplateCache::new(self.0.join("cache"))
    }

    /// Everything under the directory (relative paths), sorted.
    fn listing(&self) -> Vec<String> {
        fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                let p = e.path();
                out.push(p.strip_prefix(base).unwrap().display().to_string());
                if e.file_type().unwrap().is_dir() {
                    walk(base, &p, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.0, &self.0, &mut out);
        out.sort();
        out
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spec(name: &str, template: Template, cache: TemplateCache) -> SandboxSpec {
    SandboxSpec::new(format!("t-{name}-{}", std::process::id()))
        .network(Network::None)
        .template(template)
        .template_cache(cache)
}

/// Runs `script` with the host's `/bin/sh` (dash, executed by descriptor) in a sandbox of
/// `spec`; its exit code. Only shell builtins are used: the template holds no other program.
fn run(spec: &SandboxSpec, script: &str) -> i32 {
    let mut s = IsolatedSandbox::spawn(
        spec,
        Path::new("/bin/sh"),
        &["sh".into(), "-c".into(), script.into()],
        &[],
    )
    .unwrap();
    let status = s.wait().unwrap();
    IsolatedSandbox::exit_code(status)
}

// ------------------------------------------------------------------ building archives

/// A tar entry header with a raw name (no validation, so hostile names can be written).
fn header(kind: tar::EntryType, name: &[u8], size: u64, mode: u32) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_700_000_000);
    let old = h.as_old_mut();
    old.name = [0; 100];
    old.name[..name.len()].copy_from_slice(name);
    h
}

struct Tar(tar::Builder<Vec<u8>>);

impl Tar {
    fn new() -> Self {
        Self(tar::Builder::new(Vec::new()))
    }

    fn file(&mut self, name: &str, data: &[u8], mode: u32) -> &mut Self {
        self.file_owned(name, data, mode, 0)
    }

    fn file_owned(&mut self, name: &str, data: &[u8], mode: u32, uid: u64) -> &mut Self {
        let mut h = header(
            tar::EntryType::Regular,
            name.as_bytes(),
            data.len() as u64,
            mode,
        );
        h.set_uid(uid);
        h.set_gid(uid);
        h.set_cksum();
        self.0.append(&h, data).unwrap();
        self
    }

    fn dir(&mut self, name: &str) -> &mut Self {
        let mut h = header(tar::EntryType::Directory, name.as_bytes(), 0, 0o755);
        h.set_cksum();
        self.0.append(&h, &[][..]).unwrap();
        self
    }

    fn link(&mut self, kind: tar::EntryType, name: &str, target: &str) -> &mut Self {
        let mut h = header(kind, name.as_bytes(), 0, 0o777);
        let old = h.as_old_mut();
        old.linkname = [0; 100];
        old.linkname[..target.len()].copy_from_slice(target.as_bytes());
        h.set_cksum();
        self.0.append(&h, &[][..]).unwrap();
        self
    }

    fn device(&mut self, name: &str) -> &mut Self {
        let mut h = header(tar::EntryType::Char, name.as_bytes(), 0, 0o666);
        h.set_device_major(1).unwrap();
        h.set_device_minor(3).unwrap();
        h.set_cksum();
        self.0.append(&h, &[][..]).unwrap();
        self
    }

    /// A pax extended header setting `path` (may hold any bytes, NUL included).
    fn pax_path(&mut self, path: &[u8]) -> &mut Self {
        let mut rec = Vec::new();
        // "<len> path=<value>\n" where len counts the whole record.
        let body_len = " path=".len() + path.len() + 1;
        let mut len = body_len + 1;
        while len.to_string().len() + body_len != len {
            len = len.to_string().len() + body_len;
        }
        rec.extend_from_slice(len.to_string().as_bytes());
        rec.extend_from_slice(b" path=");
        rec.extend_from_slice(path);
        rec.push(b'\n');
        let mut h = header(tar::EntryType::XHeader, b"pax", rec.len() as u64, 0o644);
        h.set_cksum();
        self.0.append(&h, &rec[..]).unwrap();
        self
    }

    /// The host's `/bin/sh` needs its dynamic loader and libraries in the template: the
    /// paths `ldd` names, as regular files at the same paths.
    fn shell_libraries(&mut self) -> &mut Self {
        let out = std::process::Command::new("ldd")
            .arg("/bin/sh")
            .output()
            .expect("this test needs `ldd` (package libc-bin) to find /bin/sh's libraries");
        assert!(out.status.success(), "ldd /bin/sh failed");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut dirs = std::collections::BTreeSet::new();
        let mut files = Vec::new();
        for word in text.split_whitespace() {
            if word.starts_with('/') {
                let rel = word.trim_start_matches('/').to_string();
                let mut p = Path::new(&rel).parent();
                while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
                    dirs.insert(d.display().to_string());
                    p = d.parent();
                }
                files.push((word.to_string(), rel));
            }
        }
        assert!(
            files
                .iter()
                .any(|(_, r)| r.contains("ld-linux") || r.contains("ld-musl")),
            "ldd /bin/sh named no dynamic loader: {text}"
        );
        for d in dirs {
            self.dir(&d);
        }
        for (host, rel) in files {
            self.file(&rel, &std::fs::read(&host).unwrap(), 0o755);
        }
        self
    }

    fn bytes(self) -> Vec<u8> {
        self.0.into_inner().unwrap()
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

/// A tiny root: the shell's libraries, `/etc/os-release` with `marker`, a relative symlink.
fn tiny_root(marker: &str) -> Tar {
    let mut t = Tar::new();
    t.dir("etc")
        .file("etc/os-release", format!("{marker}\n").as_bytes(), 0o644)
        .link(tar::EntryType::Symlink, "etc/release-link", "os-release")
        .file_owned("home-owned-by-user", b"mine\n", 0o600, 1000)
        .shell_libraries();
    t
}

// ------------------------------------------------------------------ tests

fn tarball_template_runs_with_its_own_files() {
    need_sandboxes();
    let dir = HostDir::new("tarball");
    let tarball = dir.0.join("rootfs.tar.gz");
    std::fs::write(&tarball, gzip(&tiny_root("ID=e2b-tarball-test").bytes())).unwrap();
    let template: Template = tarball.display().to_string().parse().unwrap();
    assert_eq!(template, Template::Archive(tarball.clone()));
    // The template's files, not the host's: the host's /etc/os-release says something else
    // and the host's /usr is not there.
    let code = run(
        &spec("tarball", template, dir.cache()),
        "read l < /etc/os-release && [ \"$l\" = ID=e2b-tarball-test ] || exit 3; \
         read l < /etc/release-link && [ \"$l\" = ID=e2b-tarball-test ] || exit 4; \
         [ ! -e /usr/bin/dash ] || exit 5; [ -d /home/user ] && [ -d /tmp ] || exit 6; \
         echo x > /tmp/w && echo y > /etc/os-release || exit 7",
    );
    assert_eq!(
        code, 0,
        "the sandbox did not see the tarball's files (exit {code})"
    );
    // The shared tree is untouched by the sandbox's writes and keeps numeric owners.
    let digest = hex::encode(sha2::Sha256::digest(std::fs::read(&tarball).unwrap()));
    let tree = dir.0.join("cache").join(format!("sha256-{digest}"));
    assert_eq!(
        std::fs::read_to_string(tree.join("etc/os-release")).unwrap(),
        "ID=e2b-tarball-test\n"
    );
    assert!(!tree.join("tmp/w").exists());
    assert_eq!(
        std::fs::symlink_metadata(tree.join("etc/release-link"))
            .unwrap()
            .mtime(),
        1_700_000_000,
        "the symlink's own mtime was not kept"
    );
    assert_eq!(
        std::fs::metadata(tree.join("home-owned-by-user"))
            .unwrap()
            .uid(),
        1000
    );
    let cache_mode = std::fs::metadata(dir.0.join("cache")).unwrap().mode() & 0o777;
    assert_eq!(
        cache_mode, 0o700,
        "the cache must be reachable by its owner only"
    );
}

fn second_sandbox_reuses_the_unpacked_tarball() {
    need_sandboxes();
    let dir = HostDir::new("reuse");
    let tarball = dir.0.join("rootfs.tar");
    std::fs::write(&tarball, tiny_root("ID=reuse").bytes()).unwrap();
    let template = Template::Archive(tarball.clone());
    let first = dir.cache().prepare(&template).unwrap();
    assert!(first.unpacked);
    let Template::Dir(tree) = &first.template else {
        panic!("not a directory template: {:?}", first.template)
    };
    // A file only the cached tree has: the second sandbox sees it, so nothing was unpacked.
    std::fs::write(tree.join("unpacked-once"), "cached\n").unwrap();
    let second = dir.cache().prepare(&template).unwrap();
    assert!(!second.unpacked, "the template was unpacked a second time");
    assert_eq!(second.template, first.template);
    assert_eq!(second.digest, first.digest);
    let code = run(
        &spec("reuse", template.clone(), dir.cache()),
        "read l < /unpacked-once && [ \"$l\" = cached ]",
    );
    assert_eq!(code, 0, "the sandbox did not use the cached tree");
    // A changed tarball (same path) is hashed and unpacked again.
    std::fs::write(&tarball, tiny_root("ID=changed").bytes()).unwrap();
    let third = dir.cache().prepare(&template).unwrap();
    assert!(third.unpacked, "a changed tarball was not unpacked again");
    assert_ne!(third.digest, first.digest);
}

fn concurrent_unpacks_of_one_template_agree() {
    let dir = HostDir::new("race");
    let tarball = dir.0.join("rootfs.tar");
    let mut t = Tar::new();
    for i in 0..200 {
        t.file(&format!("d{}/f{i}", i % 7), &vec![b'x'; 4096], 0o644);
    }
    std::fs::write(&tarball, t.bytes()).unwrap();
    let template = Template::Archive(tarball);
    // The leftover of an unpack killed midway (its process is gone) is cleaned up.
    let stale = dir.0.join("cache/.tmp-sha256-0000-999999999-0/etc");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::set_permissions(dir.0.join("cache"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| dir.cache().prepare(&template).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &results {
        assert_eq!(r.template, results[0].template);
    }
    let cache: Vec<String> = std::fs::read_dir(dir.0.join("cache"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".by-file")
        .collect();
    assert_eq!(
        cache.len(),
        1,
        "temporary directories left behind: {cache:?}"
    );
    let Template::Dir(tree) = &results[0].template else {
        panic!()
    };
    let files: usize = (0..7)
        .map(|d| {
            std::fs::read_dir(tree.join(format!("d{d}")))
                .unwrap()
                .count()
        })
        .sum();
    assert_eq!(files, 200, "the cached tree is incomplete");
}

fn sha(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)))
}

fn oci_layout_layers_apply_in_order_with_whiteouts() {
    need_sandboxes();
    let dir = HostDir::new("oci");
    let layout = dir.0.join("image");
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    let blob = |data: &[u8]| {
        let d = sha(data);
        std::fs::write(
            layout
                .join("blobs/sha256")
                .join(d.trim_start_matches("sha256:")),
            data,
        )
        .unwrap();
        d
    };
    let mut l1 = tiny_root("ID=layer1");
    l1.file("etc/gone", b"lower\n", 0o644)
        .dir("etc/opq")
        .file("etc/opq/a", b"lower\n", 0o644)
        .dir("etc/opq/sub")
        .file("etc/opq/sub/deep", b"lower\n", 0o644)
        .file("etc/kept", b"lower\n", 0o644);
    let l1 = gzip(&l1.bytes());
    let mut l2 = Tar::new();
    l2.dir("etc")
        .file("etc/.wh.gone", b"", 0o644)
        .dir("etc/opq")
        .file("etc/opq/b", b"upper\n", 0o644)
        .file("etc/opq/.wh..wh..opq", b"", 0o644)
        .file("etc/os-release", b"ID=layer2\n", 0o644);
    let l2 = l2.bytes(); // plain tar
    let (d1, d2) = (blob(&l1), blob(&l2));
    let config = blob(b"{}");
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
        "config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{config}","size":2}},
        "layers":[
          {{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{d1}","size":{}}},
          {{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"{d2}","size":{}}}]}}"#,
        l1.len(),
        l2.len()
    );
    let m = blob(manifest.as_bytes());
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    // Two manifests: the other architecture's names a blob that does not exist.
    let missing = format!("sha256:{}", "0".repeat(64));
    let index = format!(
        r#"{{"schemaVersion":2,"manifests":[
          {{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{missing}","size":1,
            "platform":{{"os":"linux","architecture":"s390x"}}}},
          {{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{m}","size":{},
            "platform":{{"os":"linux","architecture":"{arch}"}}}}]}}"#,
        manifest.len()
    );
    std::fs::write(layout.join("index.json"), index).unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let template: Template = layout.display().to_string().parse().unwrap();
    assert_eq!(template, Template::OciLayout(layout.clone()));
    let prepared = dir.cache().prepare(&template).unwrap();
    assert_eq!(prepared.digest.as_deref(), Some(m.as_str()));
    let code = run(
        &spec("oci", template, dir.cache()),
        "read l < /etc/os-release && [ \"$l\" = ID=layer2 ] || exit 3; \
         [ ! -e /etc/gone ] || exit 4; [ ! -e /etc/.wh.gone ] || exit 5; \
         [ ! -e /etc/opq/a ] && [ ! -e /etc/opq/sub ] || exit 6; \
         read l < /etc/opq/b && [ \"$l\" = upper ] || exit 7; \
         [ ! -e /etc/opq/.wh..wh..opq ] || exit 8; read l < /etc/kept || exit 9",
    );
    assert_eq!(
        code, 0,
        "the layers were not applied as OCI says (exit {code})"
    );

    // A blob that is a symlink (to a host file) is refused.
    let l1_path = layout
        .join("blobs/sha256")
        .join(d1.trim_start_matches("sha256:"));
    std::fs::rename(&l1_path, dir.0.join("l1")).unwrap();
    std::os::unix::fs::symlink(dir.0.join("l1"), &l1_path).unwrap();
    let err = TemplateCache::new(dir.0.join("cache3"))
        .prepare(&Template::OciLayout(layout.clone()))
        .unwrap_err();
    assert!(
        matches!(err, IsolationError::Archive { .. }) && err.to_string().contains(&d1),
        "{err}"
    );
    std::fs::remove_file(&l1_path).unwrap();
    std::fs::rename(dir.0.join("l1"), &l1_path).unwrap();

    // A layer whose content does not match its digest is refused.
    std::fs::write(
        layout
            .join("blobs/sha256")
            .join(d2.trim_start_matches("sha256:")),
        b"tampered",
    )
    .unwrap();
    let err = TemplateCache::new(dir.0.join("cache2"))
        .prepare(&Template::OciLayout(layout))
        .unwrap_err();
    assert!(
        matches!(
            err,
            IsolationError::Archive {
                problem: ArchiveProblem::Digest(_),
                ..
            }
        ),
        "{err}"
    );
}

/// Each archive is refused with the problem and the entry named; nothing appears outside the
/// cache, and the cache holds nothing afterwards (the partial unpack is removed).
fn hostile_archives_are_refused_and_write_nothing_outside() {
    let dir = HostDir::new("hostile");
    // A host directory anyone may write to: what an escape would reach.
    let target = HostDir::new("hostile-target");
    std::fs::set_permissions(&target.0, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let t = target.0.display().to_string();
    let depth_up = "../".repeat(12);
    let shadow_before = std::fs::metadata("/etc/shadow").map(|m| m.nlink()).ok();
    type Case<'a> = (
        &'static str,
        Box<dyn Fn(&mut Tar) + 'a>,
        &'static str,
        ArchiveProblem,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "dotdot",
            Box::new(|a: &mut Tar| {
                a.file("ok", b"x", 0o644).file(
                    &format!("a/{depth_up}{}/escape", t.trim_start_matches('/')),
                    b"pwned",
                    0o644,
                );
            }),
            "escape",
            ArchiveProblem::ParentDir,
        ),
        (
            "absolute",
            Box::new(|a: &mut Tar| {
                a.file(&format!("{t}/abs"), b"pwned", 0o644);
            }),
            "/abs",
            ArchiveProblem::Absolute,
        ),
        (
            "symlink-then-write-through",
            Box::new(|a: &mut Tar| {
                a.link(tar::EntryType::Symlink, "evil", &t)
                    .file("evil/planted", b"pwned", 0o644);
            }),
            "evil/planted",
            ArchiveProblem::ParentNotDirectory("evil".into()),
        ),
        (
            "relative-symlink-above-root",
            Box::new(|a: &mut Tar| {
                a.link(
                    tar::EntryType::Symlink,
                    "etc/up",
                    &format!("../{depth_up}{}", t.trim_start_matches('/')),
                );
            }),
            "etc/up",
            ArchiveProblem::SymlinkEscapes(format!("../{depth_up}{}", t.trim_start_matches('/'))),
        ),
        (
            "hardlink-to-etc-shadow",
            Box::new(|a: &mut Tar| {
                a.link(tar::EntryType::Link, "shadow", "/etc/shadow");
            }),
            "shadow",
            ArchiveProblem::BadHardLink("/etc/shadow".into()),
        ),
        (
            "hardlink-dotdot-to-etc-shadow",
            Box::new(|a: &mut Tar| {
                a.link(
                    tar::EntryType::Link,
                    "shadow",
                    &format!("{depth_up}etc/shadow"),
                );
            }),
            "shadow",
            ArchiveProblem::BadHardLink(format!("{depth_up}etc/shadow")),
        ),
        (
            "hardlink-through-symlink",
            Box::new(|a: &mut Tar| {
                a.link(tar::EntryType::Symlink, "hostetc", "/etc").link(
                    tar::EntryType::Link,
                    "shadow",
                    "hostetc/shadow",
                );
            }),
            "shadow",
            ArchiveProblem::BadHardLink("hostetc/shadow".into()),
        ),
        (
            "nul-in-name",
            Box::new(|a: &mut Tar| {
                a.pax_path(b"etc/a\0b").file("placeholder", b"x", 0o644);
            }),
            "etc/a",
            ArchiveProblem::Nul,
        ),
    ];
    for (name, build, entry, problem) in cases {
        let mut a = Tar::new();
        build(&mut a);
        let tarball = dir.0.join(format!("{name}.tar"));
        std::fs::write(&tarball, a.bytes()).unwrap();
        let err = dir
            .cache()
            .prepare(&Template::Archive(tarball.clone()))
            .unwrap_err();
        match &err {
            IsolationError::Archive {
                template,
                entry: Some(e),
                problem: p,
            } => {
                assert_eq!(template, &tarball, "{name}");
                assert!(e.contains(entry), "{name}: entry {e:?}, wanted {entry:?}");
                assert_eq!(p, &problem, "{name}: {err}");
                assert!(err.to_string().contains(entry), "{name}: {err}");
            }
            other => panic!("{name}: not a refusal naming the entry: {other}"),
        }
        assert!(
            target.listing().is_empty(),
            "{name}: something was written outside the cache: {:?}",
            target.listing()
        );
        let cached: Vec<_> = std::fs::read_dir(dir.0.join("cache")).unwrap().collect();
        assert!(
            cached.is_empty(),
            "{name}: the partial unpack was left behind"
        );
        let outside: Vec<String> = dir
            .listing()
            .into_iter()
            .filter(|p| !p.ends_with(".tar") && p != "cache")
            .collect();
        assert!(
            outside.is_empty(),
            "{name}: written beside the cache: {outside:?}"
        );
    }
    assert_eq!(
        std::fs::metadata("/etc/shadow").map(|m| m.nlink()).ok(),
        shadow_before,
        "a hard link to the host's /etc/shadow was made"
    );
}

fn devices_are_skipped_and_ids_clamped() {
    let dir = HostDir::new("devices");
    let mut a = Tar::new();
    a.dir("dev")
        .device("dev/mem-like")
        .file_owned("far-owner", b"x", 0o4755, 1 << 31)
        .file_owned("suid", b"x", 0o4755, 0);
    let tarball = dir.0.join("dev.tar");
    std::fs::write(&tarball, a.bytes()).unwrap();
    let p = dir.cache().prepare(&Template::Archive(tarball)).unwrap();
    let Template::Dir(tree) = p.template else {
        panic!()
    };
    assert!(
        std::fs::symlink_metadata(tree.join("dev/mem-like")).is_err(),
        "a device node was created"
    );
    let far = std::fs::metadata(tree.join("far-owner")).unwrap();
    assert_eq!(
        far.uid(),
        65534,
        "an id outside the sandbox's range was kept"
    );
    // Set-id bits stay (they take effect only through the sandbox's id mapping), under a
    // directory only its owner can enter.
    assert_eq!(
        std::fs::metadata(tree.join("suid")).unwrap().mode() & 0o7777,
        0o4755
    );
    assert_eq!(
        std::fs::metadata(dir.0.join("cache")).unwrap().mode() & 0o777,
        0o700
    );
    // A cache others may write to is refused, even when the tree is already there.
    std::fs::set_permissions(dir.0.join("cache"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = dir
        .cache()
        .prepare(&Template::Archive(dir.0.join("dev.tar")))
        .unwrap_err();
    assert!(
        matches!(err, IsolationError::Spec(_)) && err.to_string().contains("0700"),
        "{err}"
    );
}

fn size_and_entry_limits_are_enforced() {
    let dir = HostDir::new("limits");
    let mut a = Tar::new();
    a.file("big", &vec![0u8; 2 << 20], 0o644);
    let tarball = dir.0.join("big.tar.gz");
    std::fs::write(&tarball, gzip(&a.bytes())).unwrap();
    let mut cache = dir.cache();
    cache.limits.max_bytes = 1 << 20;
    let err = cache.prepare(&Template::Archive(tarball)).unwrap_err();
    assert!(
        matches!(
            &err,
            IsolationError::Archive { entry: Some(e), problem: ArchiveProblem::TooLarge(n), .. }
                if e == "big" && *n == 1 << 20
        ),
        "{err}"
    );
    let mut a = Tar::new();
    for i in 0..50 {
        a.file(&format!("f{i}"), b"", 0o644);
    }
    let tarball = dir.0.join("many.tar");
    std::fs::write(&tarball, a.bytes()).unwrap();
    let mut cache = dir.cache();
    cache.limits.max_entries = 20;
    let err = cache.prepare(&Template::Archive(tarball)).unwrap_err();
    assert!(
        matches!(
            err,
            IsolationError::Archive {
                problem: ArchiveProblem::TooManyEntries(20),
                ..
            }
        ),
        "{err}"
    );
    // Skipped entries count too: a device entry declaring 2 GiB of data (not even present).
    let mut h = header(tar::EntryType::Char, b"dev/huge", 2 << 30, 0o644);
    h.set_cksum();
    let tarball = dir.0.join("skipped.tar");
    std::fs::write(&tarball, h.as_bytes()).unwrap();
    let mut cache = dir.cache();
    cache.limits.max_bytes = 1 << 30;
    let err = cache.prepare(&Template::Archive(tarball)).unwrap_err();
    assert!(
        matches!(
            err,
            IsolationError::Archive {
                problem: ArchiveProblem::TooLarge(_),
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(dir.0.join("cache")).unwrap().count(), 0);
}

/// A template whose `etc` is a symlink to a host directory: the sandbox's setup writes its
/// `hostname`, `hosts` and `resolv.conf` before `pivot_root`, which must resolve inside the
/// template, never at the host's directory.
fn template_symlinks_cannot_redirect_setup_writes_to_the_host() {
    need_sandboxes();
    let dir = HostDir::new("etclink");
    let target = HostDir::new("etclink-target");
    std::fs::set_permissions(&target.0, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let mut a = Tar::new();
    a.shell_libraries()
        .link(
            tar::EntryType::Symlink,
            "etc",
            &target.0.display().to_string(),
        )
        .link(
            tar::EntryType::Symlink,
            "tmp",
            &target.0.display().to_string(),
        )
        .link(
            tar::EntryType::Symlink,
            "home",
            &target.0.display().to_string(),
        );
    let tarball = dir.0.join("etclink.tar");
    std::fs::write(&tarball, a.bytes()).unwrap();
    let code = run(
        &spec("etclink", Template::Archive(tarball), dir.cache()),
        "[ -d /tmp ] && [ ! -L /tmp ] && [ -d /home/user ] || exit 3",
    );
    assert_eq!(
        code, 0,
        "the sandbox's /tmp or /home/user is missing (exit {code})"
    );
    assert!(
        target.listing().is_empty(),
        "the sandbox's setup wrote to the host through the template's symlinks: {:?}",
        target.listing()
    );
}

fn template_kinds_parse_from_paths() {
    let dir = HostDir::new("parse");
    let parse = |s: &str| s.parse::<Template>().unwrap();
    assert_eq!(parse("base"), Template::Base);
    assert_eq!(parse("/x/img.tar"), Template::Archive("/x/img.tar".into()));
    assert_eq!(parse("/x/img.TGZ"), Template::Archive("/x/img.TGZ".into()));
    assert_eq!(
        parse("/x/img.tar.gz"),
        Template::Archive("/x/img.tar.gz".into())
    );
    let d = dir.0.display().to_string();
    assert_eq!(parse(&d), Template::Dir(dir.0.clone()));
    std::fs::write(dir.0.join("oci-layout"), "{}").unwrap();
    assert_eq!(parse(&d), Template::OciLayout(dir.0.clone()));
    assert!("".parse::<Template>().is_err());
}

fn long_names_and_pax_records_are_applied_and_bounded() {
    let dir = HostDir::new("longnames");
    // A 150-byte name (the builder writes a GNU long-name entry), and a pax `path` record.
    let long = format!("deep/{}/file", "n".repeat(140));
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(3);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, &long, &b"abc"[..]).unwrap();
    let mut a = Tar(b);
    a.pax_path(b"from-pax")
        .file("placeholder", b"pax", 0o644)
        // GNU tar's entry for a file named twice: a hard link to itself; and a real one.
        .link(tar::EntryType::Link, "from-pax", "from-pax")
        .link(tar::EntryType::Link, "second-name", "from-pax");
    let tarball = dir.0.join("long.tar");
    std::fs::write(&tarball, a.bytes()).unwrap();
    let p = dir.cache().prepare(&Template::Archive(tarball)).unwrap();
    let Template::Dir(tree) = p.template else {
        panic!()
    };
    assert_eq!(std::fs::read(tree.join(&long)).unwrap(), b"abc");
    assert_eq!(std::fs::read(tree.join("from-pax")).unwrap(), b"pax");
    assert_eq!(std::fs::read(tree.join("second-name")).unwrap(), b"pax");
    assert_eq!(
        std::fs::metadata(tree.join("from-pax")).unwrap().ino(),
        std::fs::metadata(tree.join("second-name")).unwrap().ino()
    );
    assert!(!tree.join("placeholder").exists());

    // Long-name and pax entries that claim a gigabyte: refused from the header alone (the
    // data is not even there), so nothing is read into memory.
    for (kind, problem) in [
        (tar::EntryType::GNULongName, "too long"),
        (tar::EntryType::XHeader, "pax header larger"),
    ] {
        let mut h = header(kind, b"././@LongLink", 1 << 30, 0o644);
        h.set_cksum();
        let tarball = dir.0.join("bomb.tar");
        std::fs::write(&tarball, h.as_bytes()).unwrap();
        let err = dir
            .cache()
            .prepare(&Template::Archive(tarball))
            .unwrap_err();
        assert!(
            matches!(err, IsolationError::Archive { .. }) && err.to_string().contains(problem),
            "{kind:?}: {err}"
        );
    }
}

/// First argument of the re-executed test binary acting as an unprivileged supervisor:
/// `UNPRIVILEGED_ARG TARBALL CACHE SCRIPT`: `run`s `SCRIPT` in a sandbox of that template.
const UNPRIVILEGED_ARG: &str = "__unprivileged-template";

fn unprivileged_supervisor(args: &[String]) -> i32 {
    let template: Template = args[0].parse().unwrap();
    let spec = spec("unpriv", template, TemplateCache::new(&args[1]));
    match IsolatedSandbox::spawn(
        &spec,
        Path::new("/bin/sh"),
        &["sh".into(), "-c".into(), args[2].clone()],
        &[],
    ) {
        Ok(mut s) => IsolatedSandbox::exit_code(s.wait().unwrap()),
        Err(e) => {
            eprintln!("{e}");
            125
        }
    }
}

/// As `nobody`: the tarball is unpacked into a cache of its own, every file owned by the
/// supervisor (it cannot give files away) and set-id bits dropped (a set-uid program of the
/// host user would otherwise sit in the cache); inside, the template's files belong to `user`,
/// the sandbox's one account.
fn an_unprivileged_supervisor_unpacks_and_runs_a_tarball() {
    use std::os::unix::fs::{PermissionsExt as _, chown};
    let dir = HostDir::new("unpriv");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = dir.0.join("cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    chown(&cache, Some(65534), Some(65534)).unwrap();
    let mut root = tiny_root("ID=e2b-unpriv-test");
    root.file_owned("suid-root", b"#!/bin/sh\n", 0o4755, 0);
    let tarball = dir.0.join("rootfs.tar.gz");
    std::fs::write(&tarball, gzip(&root.bytes())).unwrap();
    std::fs::set_permissions(&tarball, std::fs::Permissions::from_mode(0o644)).unwrap();
    let exe = std::env::current_exe().unwrap();
    let out = e2b_test_support::as_nobody::<&str>(&[], &exe)
        .args([
            UNPRIVILEGED_ARG,
            &tarball.display().to_string(),
            &cache.display().to_string(),
        ])
        .arg(
            "read l < /etc/os-release && [ \"$l\" = ID=e2b-unpriv-test ] || exit 3; \
             [ -O /etc/os-release ] && [ -O /suid-root ] && [ -O /home-owned-by-user ] || exit 4; \
             [ ! -u /suid-root ] || exit 5; echo x > /tmp/w || exit 6",
        )
        .output()
        .expect("setpriv (util-linux) runs the supervisor as nobody");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = hex::encode(sha2::Sha256::digest(std::fs::read(&tarball).unwrap()));
    let suid = std::fs::metadata(cache.join(format!("sha256-{digest}")).join("suid-root")).unwrap();
    assert_eq!(
        suid.uid(),
        65534,
        "the unpacked file is not the supervisor's"
    );
    assert_eq!(suid.mode() & 0o7777, 0o755, "the set-uid bit was kept");
}

/// A `.tar.zst` written as two zstd frames (as `zstd -T`/`pzstd` write them) is one archive;
/// a frame header claiming a 1 TiB window is refused from its header, nothing is cached.
fn zstd_archives_of_several_frames_are_unpacked_and_huge_windows_refused() {
    need_sandboxes();
    let dir = HostDir::new("zstd");
    let tar = tiny_root("ID=e2b-zstd-test").bytes();
    let (a, b) = tar.split_at(tar.len() / 2);
    let mut zst = ruzstd::encoding::compress_to_vec(a, ruzstd::encoding::CompressionLevel::Fastest);
    zst.extend(ruzstd::encoding::compress_to_vec(
        b,
        ruzstd::encoding::CompressionLevel::Fastest,
    ));
    let tarball = dir.0.join("rootfs.tar.zst");
    std::fs::write(&tarball, &zst).unwrap();
    let template: Template = tarball.display().to_string().parse().unwrap();
    let code = run(
        &spec("zstd", template, dir.cache()),
        "read l < /etc/os-release && [ \"$l\" = ID=e2b-zstd-test ] || exit 3",
    );
    assert_eq!(code, 0, "the sandbox did not see the zstd tarball's files");

    // Magic, a frame header descriptor without single-segment, a window descriptor of 2^40.
    let hostile = dir.0.join("huge-window.tar.zst");
    let mut bytes = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 30 << 3];
    bytes.extend([0u8; 64]);
    std::fs::write(&hostile, &bytes).unwrap();
    let before = dir.listing();
    let err = dir
        .cache()
        .prepare(&Template::Archive(hostile.clone()))
        .unwrap_err();
    assert!(
        matches!(&err, IsolationError::Archive { problem: ArchiveProblem::Invalid(m), .. } if m.contains("zstd")),
        "{err}"
    );
    let cached: Vec<String> = dir
        .listing()
        .into_iter()
        .filter(|p| !before.contains(p) && p.contains("sha256-"))
        .collect();
    assert!(cached.is_empty(), "a refused archive left {cached:?}");
}
