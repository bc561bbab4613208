//! Template archives: a `docker export` tarball or an OCI image layout, unpacked once into a
//! cache directory named by its content digest and then used as a directory template.
//!
//! Archives are treated as hostile. Every entry is created relative to a directory descriptor
//! of the unpack directory, one path component at a time with `O_NOFOLLOW`, so neither `..`,
//! an absolute name, nor a symlink planted by an earlier entry can make a write land outside
//! it. Bad entries are refused with [`ArchiveProblem`] naming the entry.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::io::{Read, Seek as _, SeekFrom};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use crate::IsolationError;
use crate::spec::Template;

/// Highest id kept from an archive: larger uids and gids become 65534 (`nobody`), since a
/// sandbox maps ids 0..65535 only.
const MAX_ID: u64 = 65535;
/// The id that replaces out-of-range ones.
const NOBODY: u32 = 65534;
/// Longest path (bytes) accepted for an entry or a link target.
const MAX_PATH: usize = 4096;
/// Largest pax extended header accepted.
const MAX_PAX: u64 = 1024 * 1024;
/// Largest JSON document (index, manifest) read from an OCI layout.
const MAX_JSON: u64 = 4 * 1024 * 1024;

/// What is wrong with a template archive (the entry is named by [`IsolationError::Archive`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveProblem {
    /// An entry name contains `..`.
    #[error("its path contains `..`")]
    ParentDir,
    /// An entry name (or a hard link's target) is absolute.
    #[error("its path is absolute")]
    Absolute,
    /// An entry name or link target contains a NUL byte.
    #[error("its name contains a NUL byte")]
    Nul,
    /// An entry name or link target is longer than 4,096 bytes (or a component than 255).
    #[error("its name is too long")]
    NameTooLong,
    /// A symlink's relative target climbs above the template's root.
    #[error("symlink target {0:?} leaves the template's root")]
    SymlinkEscapes(String),
    /// A hard link's target is outside the archive's tree or not yet unpacked.
    #[error("hard link target {0:?} is not a file unpacked before it")]
    BadHardLink(String),
    /// A parent of the entry is a symlink or a file (writing through it could leave the root).
    #[error("parent {0:?} is a symlink or not a directory")]
    ParentNotDirectory(String),
    /// The unpacked size would exceed the limit (bytes).
    #[error("unpacking it would exceed the limit of {0} bytes")]
    TooLarge(u64),
    /// The archive has more entries than the limit.
    #[error("the archive has more than {0} entries")]
    TooManyEntries(u64),
    /// A blob's content does not match its digest, or a digest is malformed.
    #[error("digest mismatch or malformed digest: {0}")]
    Digest(String),
    /// The archive or layout is malformed or uses something not supported.
    #[error("{0}")]
    Invalid(String),
}

/// Limits on what unpacking one template may produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnpackLimits {
    /// Total bytes of entry data, as the archive declares it, of all entries (skipped ones
    /// too) in all layers; file content written is also counted as it is written. Default
    /// 8 GiB.
    pub max_bytes: u64,
    /// Number of archive entries (all layers together). Default 1,000,000.
    pub max_entries: u64,
}

impl Default for UnpackLimits {
    fn default() -> Self {
        Self {
            max_bytes: 8 << 30,
            max_entries: 1_000_000,
        }
    }
}

/// Where template archives are unpacked: one directory per content digest
/// (`<dir>/sha256-<hex>`), created once and shared read-only by every sandbox of that
/// template. The directory is made (mode 0700) on first use.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TemplateCache {
    /// The cache directory.
    pub dir: PathBuf,
    /// Limits for each unpack.
    pub limits: UnpackLimits,
}

/// A template ready for a sandbox (see [`TemplateCache::prepare`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PreparedTemplate {
    /// What the sandbox uses: [`Template::Base`] or a [`Template::Dir`] (the unpacked tree for
    /// archives).
    pub template: Template,
    /// `sha256:<hex>` of the tarball, or the OCI manifest's digest (`None` for base and
    /// directories).
    pub digest: Option<String>,
    /// This call unpacked the archive (`false` when the cache already had it).
    pub unpacked: bool,
}

impl Default for TemplateCache {
    fn default() -> Self {
        Self::new(Self::default_dir())
    }
}

impl TemplateCache {
    /// A cache in `dir` with the default [`UnpackLimits`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            limits: UnpackLimits::default(),
        }
    }

    /// `$E2B_CACHE/templates`, else `$XDG_CACHE_HOME/e2b/templates`, else
    /// `~/.cache/e2b/templates`, else `/var/cache/e2b/templates`.
    pub fn default_dir() -> PathBuf {
        if let Some(c) = std::env::var_os("E2B_CACHE").filter(|c| !c.is_empty()) {
            return PathBuf::from(c).join("templates");
        }
        if let Some(c) = std::env::var_os("XDG_CACHE_HOME").filter(|c| !c.is_empty()) {
            return PathBuf::from(c).join("e2b/templates");
        }
        if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            return PathBuf::from(h).join(".cache/e2b/templates");
        }
        PathBuf::from("/var/cache/e2b/templates")
    }

    /// Makes `template` usable by a sandbox: archives ([`Template::Archive`],
    /// [`Template::OciLayout`]) are unpacked into this cache unless already there; `base` and
    /// directories are returned as they are. Blocking; unpacking a large archive takes seconds
    /// (progress on stderr).
    ///
    /// # Errors
    ///
    /// [`IsolationError::Archive`] for a malformed or hostile archive (naming the entry),
    /// [`IsolationError::Io`] when the archive cannot be read or the cache written,
    /// [`IsolationError::Spec`] when the cache directory is unsafe (not owned by this user, or
    /// writable by others).
    pub fn prepare(&self, template: &Template) -> Result<PreparedTemplate, IsolationError> {
        let plain = |t: &Template| PreparedTemplate {
            template: t.clone(),
            digest: None,
            unpacked: false,
        };
        match template {
            Template::Base => Ok(plain(template)),
            Template::Dir(p) if p.join("oci-layout").is_file() => {
                self.make_dir()?;
                self.prepare_oci(p)
            }
            Template::Dir(p) if p.is_file() => {
                self.make_dir()?;
                self.prepare_tarball(p)
            }
            Template::Dir(_) => Ok(plain(template)),
            Template::Archive(p) => {
                self.make_dir()?;
                self.prepare_tarball(p)
            }
            Template::OciLayout(p) => {
                self.make_dir()?;
                self.prepare_oci(p)
            }
        }
    }

    fn prepare_tarball(&self, path: &Path) -> Result<PreparedTemplate, IsolationError> {
        let io = |context| move |source| IsolationError::Io { context, source };
        use std::os::unix::fs::OpenOptionsExt as _;
        // Non-blocking: a FIFO named as the template must not hang the supervisor.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| IsolationError::Archive {
                template: path.to_path_buf(),
                entry: None,
                problem: ArchiveProblem::Invalid(format!("cannot be opened: {e}")),
            })?;
        let meta = file.metadata().map_err(io("read the template tarball"))?;
        if !meta.is_file() {
            return Err(IsolationError::Archive {
                template: path.to_path_buf(),
                entry: None,
                problem: ArchiveProblem::Invalid("not a regular file".into()),
            });
        }
        let size = meta.len();
        // Hashing a large tarball for every sandbox would cost seconds: the digest of this
        // exact file (device, inode, size, mtime, ctime) is remembered in the cache.
        let stamp = self.stamp_path(path);
        let identity = format!(
            "{} {} {} {} {} {}",
            meta.dev(),
            meta.ino(),
            size,
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime() * 1_000_000_000 + meta.ctime_nsec()
        );
        let remembered = std::fs::read_to_string(&stamp).ok().and_then(|s| {
            let (id, hex) = s.trim_end().rsplit_once(' ')?;
            (id == identity && digest_hex(&format!("sha256:{hex}")).is_ok()).then(|| hex.to_owned())
        });
        if let Some(hex) = remembered {
            let dir = self.dir.join(format!("sha256-{hex}"));
            if dir.is_dir() {
                return Ok(PreparedTemplate {
                    template: Template::Dir(dir),
                    digest: Some(format!("sha256:{hex}")),
                    unpacked: false,
                });
            }
        }
        let mut hasher = Sha256::new();
        std::io::copy(&mut file, &mut hasher).map_err(io("read the template tarball"))?;
        let hex = hex::encode(hasher.finalize());
        let digest = format!("sha256:{hex}");
        let limits = self.limits;
        let result = self.unpack_once(path, &hex, size, |root, err| {
            file.seek(SeekFrom::Start(0))
                .map_err(|e| err(None, ArchiveProblem::Invalid(format!("seek: {e}"))))?;
            let mut reader = HashingReader::new(&mut file);
            let mut u = Unpacker::new(root, limits, false);
            u.layer(&mut reader, err)?;
            // The tarball must not have changed since it was hashed.
            std::io::copy(&mut reader, &mut std::io::sink())
                .map_err(|e| err(None, ArchiveProblem::Invalid(format!("read: {e}"))))?;
            if reader.hex() != hex {
                return Err(err(
                    None,
                    ArchiveProblem::Digest("the tarball changed while it was unpacked".into()),
                ));
            }
            Ok(u.skipped_devices)
        });
        let (dir, unpacked) = result?;
        // Best effort: without the stamp the next sandbox hashes the tarball again.
        let _ = write_atomic(&stamp, format!("{identity} {hex}\n").as_bytes());
        Ok(PreparedTemplate {
            template: Template::Dir(dir),
            digest: Some(digest),
            unpacked,
        })
    }

    /// `<dir>/.by-file/<sha256 of the tarball's absolute path>`: its identity and digest.
    fn stamp_path(&self, path: &Path) -> PathBuf {
        let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let key = hex::encode(Sha256::digest(abs.as_os_str().as_bytes()));
        self.dir.join(".by-file").join(key)
    }

    fn prepare_oci(&self, layout: &Path) -> Result<PreparedTemplate, IsolationError> {
        let err = |problem| IsolationError::Archive {
            template: layout.to_path_buf(),
            entry: None,
            problem,
        };
        if !layout.join("oci-layout").is_file() {
            return Err(err(ArchiveProblem::Invalid(
                "not an OCI image layout (no `oci-layout` file)".into(),
            )));
        }
        let index: Index = read_json(&layout.join("index.json"), None, layout)?;
        let manifest_desc = pick_manifest(layout, index, 0)?;
        let manifest: Manifest = read_json(
            &blob_path(layout, &manifest_desc.digest)?,
            Some(&manifest_desc.digest),
            layout,
        )?;
        let hex = digest_hex(&manifest_desc.digest).map_err(err)?.to_owned();
        let mut size = 0u64;
        for l in &manifest.layers {
            let p = blob_path(layout, &l.digest)?;
            size += std::fs::metadata(&p)
                .map_err(|source| IsolationError::Io {
                    context: "read an OCI layer",
                    source,
                })?
                .len();
        }
        let limits = self.limits;
        self.unpack_once(layout, &hex, size, |root, err| {
            let mut u = Unpacker::new(root, limits, true);
            for l in &manifest.layers {
                let path = blob_path(layout, &l.digest)
                    .map_err(|_| err(None, ArchiveProblem::Digest(l.digest.clone())))?;
                let want = digest_hex(&l.digest).map_err(|p| err(None, p))?;
                let mut file = open_layout_file(&path).map_err(|e| {
                    err(
                        None,
                        ArchiveProblem::Invalid(format!("layer {}: {e}", l.digest)),
                    )
                })?;
                let mut reader = HashingReader::new(&mut file);
                u.created.clear();
                let applied = u.layer(&mut reader, err);
                let drained = std::io::copy(&mut reader, &mut std::io::sink());
                // A blob that is not what its digest says is reported as such, whether or not
                // it also failed to unpack.
                if drained.is_ok() && reader.hex() == want {
                    applied?;
                } else if let Err(e) = drained {
                    applied?;
                    return Err(err(None, ArchiveProblem::Invalid(format!("read: {e}"))));
                } else {
                    return Err(err(
                        None,
                        ArchiveProblem::Digest(format!(
                            "layer {} has content sha256:{}",
                            l.digest,
                            reader.hex()
                        )),
                    ));
                }
            }
            Ok(u.skipped_devices)
        })
        .map(|(dir, unpacked)| PreparedTemplate {
            template: Template::Dir(dir),
            digest: Some(manifest_desc.digest.clone()),
            unpacked,
        })
    }

    /// Returns `<dir>/sha256-<hex>`, unpacking into it first (through a temporary directory
    /// beside it, renamed into place: a concurrent unpack of the same template loses the race
    /// harmlessly) unless it exists. `unpack` fills the directory behind the descriptor.
    fn unpack_once<F>(
        &self,
        source: &Path,
        hex: &str,
        size: u64,
        unpack: F,
    ) -> Result<(PathBuf, bool), IsolationError>
    where
        F: FnOnce(
            RawFd,
            &dyn Fn(Option<String>, ArchiveProblem) -> IsolationError,
        ) -> Result<u64, IsolationError>,
    {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let io = |context| move |source| IsolationError::Io { context, source };
        let name = format!("sha256-{hex}");
        let final_dir = self.dir.join(&name);
        if final_dir.is_dir() {
            return Ok((final_dir, false));
        }
        self.make_dir()?;
        self.remove_stale_unpacks();
        let tmp = self.dir.join(format!(
            ".tmp-{name}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&tmp).map_err(io("create the template's unpack directory"))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
            .map_err(io("create the template's unpack directory"))?;
        let root = match open_dir_nofollow(&tmp) {
            Ok(fd) => fd,
            Err(source) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(IsolationError::Io {
                    context: "open the template's unpack directory",
                    source,
                });
            }
        };
        eprint!(
            "e2b-isolation: unpacking template {} ({} MiB)…",
            source.display(),
            size.div_ceil(1 << 20)
        );
        let started = Instant::now();
        let err = |entry: Option<String>, problem: ArchiveProblem| IsolationError::Archive {
            template: source.to_path_buf(),
            entry,
            problem,
        };
        let result = unpack(root.as_raw_fd(), &err);
        drop(root);
        let skipped = match result {
            Ok(skipped) => skipped,
            Err(e) => {
                eprintln!("failed");
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
        };
        eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
        if skipped > 0 {
            eprintln!(
                "e2b-isolation: template {}: {skipped} device node(s) skipped (a sandbox has \
                 its own /dev)",
                source.display()
            );
        }
        match rename_noreplace(&tmp, &final_dir) {
            Ok(()) => Ok((final_dir, true)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST) | Some(libc::ENOTEMPTY)) => {
                // Another process unpacked the same template first: use its copy.
                let _ = std::fs::remove_dir_all(&tmp);
                Ok((final_dir, false))
            }
            Err(source) => {
                let _ = std::fs::remove_dir_all(&tmp);
                Err(IsolationError::Io {
                    context: "move the unpacked template into the cache",
                    source,
                })
            }
        }
    }

    /// Removes `.tmp-…-<pid>-<n>` directories of unpacks whose process is gone (killed
    /// mid-unpack).
    fn remove_stale_unpacks(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(".tmp-")) else {
                continue;
            };
            let pid = rest.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid
                && pid != std::process::id()
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    /// Creates the cache directory (0700) and checks that nobody else can write to it: its
    /// trees hold the archive's owners and set-id bits, which only the sandbox's id mapping
    /// may give meaning to.
    fn make_dir(&self) -> Result<(), IsolationError> {
        let io = |context| move |source| IsolationError::Io { context, source };
        if !self.dir.exists() {
            std::fs::create_dir_all(&self.dir).map_err(io("create the template cache"))?;
            std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io("create the template cache"))?;
        }
        let meta = std::fs::symlink_metadata(&self.dir).map_err(io("create the template cache"))?;
        // SAFETY: plain getter.
        let euid = unsafe { libc::geteuid() };
        if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o077 != 0 {
            return Err(IsolationError::Spec(format!(
                "template cache {} must be a directory owned by uid {euid} with mode 0700 \
                 (it holds unpacked templates' set-id programs)",
                self.dir.display()
            )));
        }
        Ok(())
    }
}

/// Reads through and hashes everything read (sha256).
struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> HashingReader<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
        }
    }

    fn hex(&self) -> String {
        hex::encode(self.hasher.clone().finalize())
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
}

// ---------------------------------------------------------------- OCI image layout

#[derive(Debug, Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Debug, Clone, Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Debug, Clone, Deserialize)]
struct Platform {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
}

/// The OCI name of this machine's architecture.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

fn is_index(media_type: &str) -> bool {
    media_type.ends_with("image.index.v1+json") || media_type.ends_with("manifest.list.v2+json")
}

/// The manifest to use: the only one, or the one for linux/<host arch> (following one level of
/// nested index, as `docker buildx` and `skopeo` write).
fn pick_manifest(layout: &Path, index: Index, depth: u32) -> Result<Descriptor, IsolationError> {
    let err = |msg: String| IsolationError::Archive {
        template: layout.to_path_buf(),
        entry: None,
        problem: ArchiveProblem::Invalid(msg),
    };
    let arch = host_arch();
    let chosen = if index.manifests.len() == 1 {
        index.manifests.into_iter().next()
    } else {
        index.manifests.into_iter().find(|d| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.os == "linux" && p.architecture == arch)
        })
    };
    let Some(desc) = chosen else {
        return Err(err(format!(
            "index.json has no manifest, or none for linux/{arch} among several"
        )));
    };
    if is_index(&desc.media_type) {
        if depth >= 2 {
            return Err(err("image indexes nested more than two deep".into()));
        }
        let nested: Index = read_json(
            &blob_path(layout, &desc.digest)?,
            Some(&desc.digest),
            layout,
        )?;
        return pick_manifest(layout, nested, depth + 1);
    }
    Ok(desc)
}

/// The hex part of a `sha256:<64 hex>` digest.
fn digest_hex(digest: &str) -> Result<&str, ArchiveProblem> {
    match digest.split_once(':') {
        Some(("sha256", hex))
            if hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Ok(hex)
        }
        _ => Err(ArchiveProblem::Digest(format!(
            "{digest:?} is not a sha256 digest"
        ))),
    }
}

/// `blobs/sha256/<hex>` of the layout (the digest is validated, so it cannot name a path
/// outside `blobs/`).
fn blob_path(layout: &Path, digest: &str) -> Result<PathBuf, IsolationError> {
    let hex = digest_hex(digest).map_err(|problem| IsolationError::Archive {
        template: layout.to_path_buf(),
        entry: None,
        problem,
    })?;
    Ok(layout.join("blobs/sha256").join(hex))
}

/// Opens a file of an OCI layout: a regular file, not through a symlink in its last component
/// (a blob pointing at a host file such as `/etc/shadow` is refused).
fn open_layout_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// Reads a bounded JSON document, checking its digest when given.
fn read_json<T: for<'de> Deserialize<'de>>(
    path: &Path,
    digest: Option<&str>,
    layout: &Path,
) -> Result<T, IsolationError> {
    let err = |problem| IsolationError::Archive {
        template: layout.to_path_buf(),
        entry: path
            .strip_prefix(layout)
            .ok()
            .map(|p| p.display().to_string()),
        problem,
    };
    let file = open_layout_file(path).map_err(|source| IsolationError::Io {
        context: "read the OCI image layout",
        source,
    })?;
    let mut data = Vec::new();
    file.take(MAX_JSON + 1)
        .read_to_end(&mut data)
        .map_err(|source| IsolationError::Io {
            context: "read the OCI image layout",
            source,
        })?;
    if data.len() as u64 > MAX_JSON {
        return Err(err(ArchiveProblem::Invalid(format!(
            "larger than {MAX_JSON} bytes"
        ))));
    }
    if let Some(d) = digest {
        let want = digest_hex(d).map_err(err)?;
        let have = hex::encode(Sha256::digest(&data));
        if have != want {
            return Err(err(ArchiveProblem::Digest(format!(
                "{d} has content sha256:{have}"
            ))));
        }
    }
    serde_json::from_slice(&data).map_err(|e| err(ArchiveProblem::Invalid(format!("JSON: {e}"))))
}

// ---------------------------------------------------------------- unpacking

type ErrFn<'a> = &'a dyn Fn(Option<String>, ArchiveProblem) -> IsolationError;

/// Applies tar streams to the directory behind `root`, never following a symlink.
struct Unpacker {
    root: RawFd,
    limits: UnpackLimits,
    /// OCI layer semantics: `.wh.` whiteouts.
    oci: bool,
    /// Running as root: entries get their archive's owners and set-id bits.
    as_root: bool,
    bytes: u64,
    /// Declared data size of every entry read so far.
    streamed: u64,
    entries: u64,
    skipped_devices: u64,
    /// Paths created by the current layer (whiteouts affect only lower layers), as 128-bit
    /// hashes: a million 4 KiB names would otherwise be held in memory.
    created: HashSet<[u8; 16]>,
}

/// An entry's name, link target and ids after GNU long names and pax records.
struct Meta {
    path: Vec<u8>,
    link: Option<Vec<u8>>,
    uid: Option<u64>,
    gid: Option<u64>,
}

impl Meta {
    /// Applies a pax header's `path`, `linkpath`, `uid` and `gid`; a `size` other than the
    /// header's is refused (it would change how the rest of the stream is read).
    fn apply_pax(&mut self, pax: &[u8], header_size: u64) -> Result<(), ArchiveProblem> {
        let bad = |what: &str| ArchiveProblem::Invalid(format!("bad pax record: {what}"));
        for ext in tar::PaxExtensions::new(pax) {
            let ext = ext.map_err(|e| bad(&e.to_string()))?;
            let number = || {
                std::str::from_utf8(ext.value_bytes())
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| bad("not a number"))
            };
            match ext.key_bytes() {
                b"path" => self.path = ext.value_bytes().to_vec(),
                b"linkpath" => self.link = Some(ext.value_bytes().to_vec()),
                b"uid" => self.uid = Some(number()?),
                b"gid" => self.gid = Some(number()?),
                b"size" if number()? != header_size => {
                    return Err(bad("a size other than the header's"));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A validated archive path: its normal components.
fn components(raw: &[u8]) -> Result<Vec<&[u8]>, ArchiveProblem> {
    if raw.contains(&0) {
        return Err(ArchiveProblem::Nul);
    }
    if raw.len() > MAX_PATH {
        return Err(ArchiveProblem::NameTooLong);
    }
    if raw.starts_with(b"/") {
        return Err(ArchiveProblem::Absolute);
    }
    let mut out = Vec::new();
    for c in raw.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err(ArchiveProblem::ParentDir),
            c if c.len() > 255 => return Err(ArchiveProblem::NameTooLong),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn cstring(c: &[u8]) -> Result<CString, ArchiveProblem> {
    CString::new(c).map_err(|_| ArchiveProblem::Nul)
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn open_dir_nofollow(path: &Path) -> std::io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: valid C string; the fd is new.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: fd is new and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn openat_dir(dir: RawFd, name: &CStr) -> std::io::Result<OwnedFd> {
    // SAFETY: valid fd and C string; the fd is new.
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: fd is new and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `lstat` of `name` in `dir`; `None` when it does not exist.
fn stat_at(dir: RawFd, name: &CStr) -> std::io::Result<Option<libc::stat>> {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, C string and out-pointer.
    if unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } == 0 {
        return Ok(Some(st));
    }
    let e = errno();
    if e.raw_os_error() == Some(libc::ENOENT) {
        Ok(None)
    } else {
        Err(e)
    }
}

fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// Names in the directory behind `dir` (without `.` and `..`).
fn list_dir(dir: RawFd) -> std::io::Result<Vec<CString>> {
    // SAFETY: dup of a valid fd; fdopendir takes ownership of the duplicate.
    let dup = unsafe { libc::fcntl(dir, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(errno());
    }
    // SAFETY: dup is a directory fd we own.
    let d = unsafe { libc::fdopendir(dup) };
    if d.is_null() {
        let e = errno();
        // SAFETY: fdopendir failed, so dup is still ours.
        unsafe { libc::close(dup) };
        return Err(e);
    }
    // SAFETY: rewind so the listing starts at the beginning.
    unsafe { libc::rewinddir(d) };
    let mut names = Vec::new();
    loop {
        // SAFETY: d is a valid DIR*.
        let ent = unsafe { libc::readdir(d) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated within the entry.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            names.push(name.to_owned());
        }
    }
    // SAFETY: closes the DIR* and its fd.
    unsafe { libc::closedir(d) };
    Ok(names)
}

/// Removes `name` in `dir` and everything under it, never following a symlink.
fn remove_all_at(dir: RawFd, name: &CStr) -> std::io::Result<()> {
    let Some(st) = stat_at(dir, name)? else {
        return Ok(());
    };
    if is_dir(&st) {
        let sub = openat_dir(dir, name)?;
        for child in list_dir(sub.as_raw_fd())? {
            remove_all_at(sub.as_raw_fd(), &child)?;
        }
        // SAFETY: valid fd and C string.
        if unsafe { libc::unlinkat(dir, name.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
            return Err(errno());
        }
    } else {
        // SAFETY: valid fd and C string.
        if unsafe { libc::unlinkat(dir, name.as_ptr(), 0) } != 0 {
            return Err(errno());
        }
    }
    Ok(())
}

fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    let f = CString::new(from.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let t = CString::new(to.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: valid C strings.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r != 0 {
        return Err(errno());
    }
    Ok(())
}

/// The set key of an archive path: its sha256, truncated to 128 bits.
fn path_key(path: &[u8]) -> [u8; 16] {
    let d = Sha256::digest(path);
    let mut k = [0u8; 16];
    k.copy_from_slice(d.get(..16).unwrap_or(&[0; 16]));
    k
}

/// Writes `path` through a temporary file renamed over it.
fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension(format!(
        "tmp-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The first bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// A zstd stream of one or more frames (as `zstd -T` and `pzstd` write them), decoded as one.
/// Each frame's window is bounded by ruzstd's default (128 MiB), so a hostile header cannot
/// make the decoder allocate more; the decompressed size is bounded by [`UnpackLimits`].
struct ZstdFrames<'a> {
    frame: Option<
        ruzstd::decoding::StreamingDecoder<Box<dyn Read + 'a>, ruzstd::decoding::FrameDecoder>,
    >,
    source: Option<Box<dyn Read + 'a>>,
}

impl<'a> ZstdFrames<'a> {
    fn new(source: impl Read + 'a) -> Self {
        Self {
            frame: None,
            source: Some(Box::new(source)),
        }
    }
}

impl Read for ZstdFrames<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(frame) = self.frame.as_mut() {
                let n = frame.read(buf)?;
                if n > 0 || buf.is_empty() {
                    return Ok(n);
                }
                // This frame is done: the next one, if the stream has more.
                self.source = self.frame.take().map(|f| f.into_inner());
            }
            let Some(mut source) = self.source.take() else {
                return Ok(0);
            };
            let mut first = [0u8; 1];
            if source.read(&mut first)? == 0 {
                return Ok(0);
            }
            let rest: Box<dyn Read + '_> = Box::new(std::io::Cursor::new(first).chain(source));
            let frame = ruzstd::decoding::StreamingDecoder::new(rest).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("zstd: {e}"))
            })?;
            self.frame = Some(frame);
        }
    }
}

/// `fchown`'s "leave unchanged" id (-1).
const KEEP_ID: u32 = u32::MAX;

fn clamp_id(id: u64) -> u32 {
    if id > MAX_ID { NOBODY } else { id as u32 }
}

impl Unpacker {
    fn new(root: RawFd, limits: UnpackLimits, oci: bool) -> Self {
        Self {
            root,
            limits,
            oci,
            // SAFETY: plain getter.
            as_root: unsafe { libc::geteuid() } == 0,
            bytes: 0,
            streamed: 0,
            entries: 0,
            skipped_devices: 0,
            created: HashSet::new(),
        }
    }

    /// Applies one tar stream (gzip- or zstd-compressed or plain, by its first bytes).
    fn layer(&mut self, reader: &mut dyn Read, err: ErrFn<'_>) -> Result<(), IsolationError> {
        let mut magic = [0u8; 4];
        let mut have = 0;
        while have < magic.len() {
            let n = reader
                .read(magic.get_mut(have..).unwrap_or_default())
                .map_err(|e| err(None, ArchiveProblem::Invalid(format!("read: {e}"))))?;
            if n == 0 {
                break;
            }
            have += n;
        }
        let head = magic.get(..have).unwrap_or_default();
        let chained = std::io::Cursor::new(head.to_vec()).chain(reader);
        if head == ZSTD_MAGIC {
            self.entries_of(ZstdFrames::new(chained), err)
        } else if head.starts_with(&[0x1f, 0x8b]) {
            self.entries_of(flate2::read::MultiGzDecoder::new(chained), err)
        } else {
            self.entries_of(chained, err)
        }
    }

    /// Reads the entries one by one in raw mode: GNU long names and pax headers are read here,
    /// bounded (the `tar` crate would read them whole into memory, whatever their size).
    fn entries_of<R: Read>(&mut self, r: R, err: ErrFn<'_>) -> Result<(), IsolationError> {
        let tar_err = |e: std::io::Error| err(None, ArchiveProblem::Invalid(format!("tar: {e}")));
        let mut archive = tar::Archive::new(r);
        let entries = archive.entries().map_err(tar_err)?.raw(true);
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut pax: Option<Vec<u8>> = None;
        for entry in entries {
            let mut entry = entry.map_err(tar_err)?;
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                return Err(err(
                    None,
                    ArchiveProblem::TooManyEntries(self.limits.max_entries),
                ));
            }
            let kind = entry.header().entry_type();
            let header_name = || String::from_utf8_lossy(&entry.header().path_bytes()).into_owned();
            // Every entry's data is read (skipped entries too): all of it counts, so a stream
            // of huge ignored entries cannot keep the decompressor busy for hours.
            self.streamed = self.streamed.saturating_add(entry.size());
            if self.streamed > self.limits.max_bytes {
                return Err(err(
                    Some(header_name()),
                    ArchiveProblem::TooLarge(self.limits.max_bytes),
                ));
            }
            let bounded = |entry: &mut tar::Entry<'_, R>, max: u64, problem: ArchiveProblem| {
                let name = String::from_utf8_lossy(&entry.header().path_bytes()).into_owned();
                if entry.size() > max {
                    return Err(err(Some(name), problem));
                }
                let mut data = Vec::new();
                entry
                    .take(max)
                    .read_to_end(&mut data)
                    .map_err(|e| err(Some(name), ArchiveProblem::Invalid(format!("tar: {e}"))))?;
                // A GNU long name ends with a NUL.
                if data.last() == Some(&0) {
                    data.pop();
                }
                Ok(data)
            };
            match kind {
                tar::EntryType::GNULongName => {
                    long_name = Some(bounded(
                        &mut entry,
                        MAX_PATH as u64 + 1,
                        ArchiveProblem::NameTooLong,
                    )?);
                    continue;
                }
                tar::EntryType::GNULongLink => {
                    long_link = Some(bounded(
                        &mut entry,
                        MAX_PATH as u64 + 1,
                        ArchiveProblem::NameTooLong,
                    )?);
                    continue;
                }
                tar::EntryType::XHeader => {
                    pax = Some(bounded(
                        &mut entry,
                        MAX_PAX,
                        ArchiveProblem::Invalid(format!("pax header larger than {MAX_PAX} bytes")),
                    )?);
                    continue;
                }
                tar::EntryType::XGlobalHeader => continue,
                tar::EntryType::GNUSparse => {
                    return Err(err(
                        Some(header_name()),
                        ArchiveProblem::Invalid("GNU sparse files are not supported".into()),
                    ));
                }
                _ => {}
            }
            let mut meta = Meta {
                path: long_name
                    .take()
                    .unwrap_or_else(|| entry.header().path_bytes().into_owned()),
                link: long_link
                    .take()
                    .or_else(|| entry.header().link_name_bytes().map(|c| c.into_owned())),
                uid: None,
                gid: None,
            };
            if let Some(p) = pax.take() {
                meta.apply_pax(&p, entry.size())
                    .map_err(|problem| err(Some(header_name()), problem))?;
            }
            let name = String::from_utf8_lossy(&meta.path).into_owned();
            self.entry(&mut entry, &meta)
                .map_err(|problem| err(Some(name), problem))?;
        }
        Ok(())
    }

    /// Opens the directory holding `comps`' last component, walking from the root one
    /// component at a time without following symlinks; missing directories are created (mode
    /// 0755, root) when `create`, else `None`.
    fn parent(&self, comps: &[&[u8]], create: bool) -> Result<Option<OwnedFd>, ArchiveProblem> {
        let io = |e: std::io::Error| ArchiveProblem::Invalid(e.to_string());
        // SAFETY: dup of the valid root fd.
        let dup = unsafe { libc::fcntl(self.root, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(io(errno()));
        }
        // SAFETY: dup is new and ours.
        let mut cur = unsafe { OwnedFd::from_raw_fd(dup) };
        let parents = comps.len().saturating_sub(1);
        for (i, c) in comps.iter().take(parents).enumerate() {
            let name = cstring(c)?;
            let shown = || {
                String::from_utf8_lossy(&comps.get(..=i).unwrap_or_default().join(&b'/'))
                    .into_owned()
            };
            match openat_dir(cur.as_raw_fd(), &name) {
                Ok(fd) => cur = fd,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    if !create {
                        return Ok(None);
                    }
                    // SAFETY: valid fd and C string.
                    if unsafe { libc::mkdirat(cur.as_raw_fd(), name.as_ptr(), 0o755) } != 0 {
                        return Err(io(errno()));
                    }
                    cur = openat_dir(cur.as_raw_fd(), &name).map_err(io)?;
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)) => {
                    return Err(ArchiveProblem::ParentNotDirectory(shown()));
                }
                Err(e) => return Err(io(e)),
            }
        }
        Ok(Some(cur))
    }

    fn entry<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        meta: &Meta,
    ) -> Result<(), ArchiveProblem> {
        let io = |e: std::io::Error| ArchiveProblem::Invalid(e.to_string());
        let comps = components(&meta.path)?;
        let kind = entry.header().entry_type();
        let Some(last) = comps.last().copied() else {
            // The root itself (`./`): it keeps its own owner and mode.
            return Ok(());
        };
        if self.oci && last.starts_with(b".wh.") {
            return self.whiteout(&comps, last);
        }
        use tar::EntryType as T;
        match kind {
            T::Regular
            | T::Continuous
            | T::GNUSparse
            | T::Directory
            | T::Symlink
            | T::Link
            | T::Fifo => {}
            T::Char | T::Block => {
                self.skipped_devices += 1;
                return Ok(());
            }
            // Metadata-only entries (pax global headers, volume labels, …).
            _ => return Ok(()),
        }
        let Some(parent) = self.parent(&comps, true)? else {
            return Ok(());
        };
        let dir = parent.as_raw_fd();
        let name = cstring(last)?;
        let header = entry.header();
        let mut mode = header.mode().map_err(io)? & 0o7777;
        let mut uid = clamp_id(meta.uid.map_or_else(|| header.uid(), Ok).map_err(io)?);
        let mut gid = clamp_id(meta.gid.map_or_else(|| header.gid(), Ok).map_err(io)?);
        if !self.as_root {
            // Only root can give files away. Unprivileged, every file stays the
            // supervisor's (the sandbox's `user`, its one account), and set-id bits are
            // dropped: a set-uid program of the host user in the cache would be one.
            (uid, gid) = (KEEP_ID, KEEP_ID);
            mode &= !0o6000;
        }
        let mtime = header.mtime().unwrap_or(0);
        let existing = stat_at(dir, &name).map_err(io)?;
        if self.oci {
            self.created.insert(path_key(&comps.join(&b'/')));
        }
        if kind == T::Directory {
            match existing {
                Some(st) if is_dir(&st) => {}
                Some(_) => {
                    remove_all_at(dir, &name).map_err(io)?;
                    mkdir_at(dir, &name)?;
                }
                None => mkdir_at(dir, &name)?,
            }
            return chown_chmod_at(dir, &name, uid, gid, Some(mode));
        }
        if kind == T::Link
            && existing.is_some()
            && meta
                .link
                .as_deref()
                .and_then(|t| components(t).ok())
                .is_some_and(|t| t == comps)
        {
            // A hard link to itself (GNU tar writes one for a file named twice): nothing to do.
            return Ok(());
        }
        if existing.is_some() {
            remove_all_at(dir, &name).map_err(io)?;
        }
        match kind {
            T::Symlink => {
                let target = meta
                    .link
                    .clone()
                    .ok_or_else(|| ArchiveProblem::Invalid("symlink without a target".into()))?;
                check_symlink(&comps, &target)?;
                let t = cstring(&target)?;
                // SAFETY: valid fd and C strings.
                if unsafe { libc::symlinkat(t.as_ptr(), dir, name.as_ptr()) } != 0 {
                    return Err(io(errno()));
                }
                let time = libc::timespec {
                    tv_sec: mtime as libc::time_t,
                    tv_nsec: 0,
                };
                // SAFETY: valid fd, C string and two timespecs; the link itself is touched.
                unsafe {
                    libc::utimensat(
                        dir,
                        name.as_ptr(),
                        [time, time].as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                };
                chown_chmod_at(dir, &name, uid, gid, None)
            }
            T::Link => {
                let target = meta
                    .link
                    .clone()
                    .ok_or_else(|| ArchiveProblem::Invalid("hard link without a target".into()))?;
                let shown = String::from_utf8_lossy(&target).into_owned();
                let bad = || ArchiveProblem::BadHardLink(shown.clone());
                let tcomps = components(&target).map_err(|p| match p {
                    ArchiveProblem::ParentDir | ArchiveProblem::Absolute => bad(),
                    other => other,
                })?;
                let tlast = tcomps.last().copied().ok_or_else(bad)?;
                let tparent = self
                    .parent(&tcomps, false)
                    .map_err(|_| bad())?
                    .ok_or_else(bad)?;
                let tname = cstring(tlast)?;
                match stat_at(tparent.as_raw_fd(), &tname).map_err(io)? {
                    Some(st) if !is_dir(&st) => {}
                    _ => return Err(bad()),
                }
                // SAFETY: valid fds and C strings; no AT_SYMLINK_FOLLOW: a symlink is linked
                // itself, never its target.
                if unsafe {
                    libc::linkat(tparent.as_raw_fd(), tname.as_ptr(), dir, name.as_ptr(), 0)
                } != 0
                {
                    return Err(io(errno()));
                }
                Ok(())
            }
            T::Fifo => {
                // SAFETY: valid fd and C string.
                if unsafe { libc::mknodat(dir, name.as_ptr(), libc::S_IFIFO | 0o600, 0) } != 0 {
                    return Err(io(errno()));
                }
                chown_chmod_at(dir, &name, uid, gid, Some(mode))
            }
            _ => {
                // SAFETY: valid fd and C string; the fd is new.
                let fd = unsafe {
                    libc::openat(
                        dir,
                        name.as_ptr(),
                        libc::O_WRONLY
                            | libc::O_CREAT
                            | libc::O_EXCL
                            | libc::O_NOFOLLOW
                            | libc::O_CLOEXEC,
                        0o600,
                    )
                };
                if fd < 0 {
                    return Err(io(errno()));
                }
                // SAFETY: fd is new and ours.
                let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
                let room = self.limits.max_bytes.saturating_sub(self.bytes);
                let n = std::io::copy(&mut (&mut *entry).take(room.saturating_add(1)), &mut file)
                    .map_err(io)?;
                if n > room {
                    return Err(ArchiveProblem::TooLarge(self.limits.max_bytes));
                }
                self.bytes += n;
                let fd = file.as_raw_fd();
                // SAFETY: valid fd; chown before chmod (chown clears set-id bits).
                unsafe {
                    if libc::fchown(fd, uid, gid) != 0 || libc::fchmod(fd, mode) != 0 {
                        return Err(io(errno()));
                    }
                    let t = libc::timespec {
                        tv_sec: mtime as libc::time_t,
                        tv_nsec: 0,
                    };
                    libc::futimens(fd, [t, t].as_ptr());
                }
                Ok(())
            }
        }
    }

    /// An OCI whiteout: `.wh..wh..opq` empties its directory of lower layers' entries,
    /// `.wh.<name>` removes `<name>` from lower layers. Neither is unpacked itself.
    fn whiteout(&mut self, comps: &[&[u8]], last: &[u8]) -> Result<(), ArchiveProblem> {
        let io = |e: std::io::Error| ArchiveProblem::Invalid(e.to_string());
        let Some(parent) = self.parent(comps, false)? else {
            return Ok(());
        };
        let dir_path = comps
            .get(..comps.len().saturating_sub(1))
            .unwrap_or_default()
            .join(&b'/');
        if last == b".wh..wh..opq" {
            return self.purge(parent.as_raw_fd(), &dir_path).map_err(io);
        }
        let target = last.get(4..).unwrap_or_default();
        if target.is_empty() || target == b"." || target == b".." {
            return Err(ArchiveProblem::Invalid("whiteout of nothing".into()));
        }
        let mut full = dir_path.clone();
        if !full.is_empty() {
            full.push(b'/');
        }
        full.extend_from_slice(target);
        if self.created.contains(&path_key(&full)) {
            return Ok(());
        }
        remove_all_at(parent.as_raw_fd(), &cstring(target)?).map_err(io)
    }

    /// Removes every entry under `dir` not created by the current layer.
    fn purge(&self, dir: RawFd, path: &[u8]) -> std::io::Result<()> {
        for child in list_dir(dir)? {
            let mut full = path.to_vec();
            if !full.is_empty() {
                full.push(b'/');
            }
            full.extend_from_slice(child.to_bytes());
            if !self.created.contains(&path_key(&full)) {
                remove_all_at(dir, &child)?;
            } else if stat_at(dir, &child)?.is_some_and(|st| is_dir(&st)) {
                let sub = openat_dir(dir, &child)?;
                self.purge(sub.as_raw_fd(), &full)?;
            }
        }
        Ok(())
    }
}

fn mkdir_at(dir: RawFd, name: &CStr) -> Result<(), ArchiveProblem> {
    // SAFETY: valid fd and C string.
    if unsafe { libc::mkdirat(dir, name.as_ptr(), 0o700) } != 0 {
        return Err(ArchiveProblem::Invalid(errno().to_string()));
    }
    Ok(())
}

/// Sets the owner (not following a symlink) and, unless `None`, the mode.
fn chown_chmod_at(
    dir: RawFd,
    name: &CStr,
    uid: u32,
    gid: u32,
    mode: Option<u32>,
) -> Result<(), ArchiveProblem> {
    // SAFETY: valid fd and C string.
    unsafe {
        if libc::fchownat(dir, name.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) != 0 {
            return Err(ArchiveProblem::Invalid(errno().to_string()));
        }
        if let Some(mode) = mode
            && libc::fchmodat(dir, name.as_ptr(), mode, 0) != 0
        {
            return Err(ArchiveProblem::Invalid(errno().to_string()));
        }
    }
    Ok(())
}

/// A symlink's target must stay inside the template's root: an absolute target is resolved
/// in the sandbox's root (where it points inside the template), a relative one must not climb
/// above the root from the link's directory.
fn check_symlink(comps: &[&[u8]], target: &[u8]) -> Result<(), ArchiveProblem> {
    let shown = || String::from_utf8_lossy(target).into_owned();
    if target.is_empty() {
        return Err(ArchiveProblem::Invalid(
            "symlink with an empty target".into(),
        ));
    }
    if target.contains(&0) {
        return Err(ArchiveProblem::Nul);
    }
    if target.len() > MAX_PATH {
        return Err(ArchiveProblem::NameTooLong);
    }
    if target.starts_with(b"/") {
        return Ok(());
    }
    let mut depth = comps.len().saturating_sub(1) as i64;
    for c in target.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                depth -= 1;
                if depth < 0 {
                    return Err(ArchiveProblem::SymlinkEscapes(shown()));
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

/// Guesses the kind of template a command-line value names: `base`, a tarball (`.tar`,
/// `.tar.gz`, `.tgz`, or any regular file), an OCI image layout (a directory with an
/// `oci-layout` file), else a root filesystem directory.
pub(crate) fn template_from_path(s: &str) -> Template {
    let p = PathBuf::from(s);
    let lower = s.to_ascii_lowercase();
    if [".tar", ".tar.gz", ".tgz"]
        .iter()
        .any(|ext| lower.ends_with(ext))
        || p.is_file()
    {
        Template::Archive(p)
    } else if p.join("oci-layout").is_file() {
        Template::OciLayout(p)
    } else {
        Template::Dir(p)
    }
}
