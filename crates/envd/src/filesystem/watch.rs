//! Directory watching with inotify: the `WatchDir` stream and the polled watchers of
//! `CreateWatcher` / `GetWatcherEvents` / `RemoveWatcher`.
//!
//! Events follow envd: `name` relative to the watched directory, one inotify event with several
//! operations split in the order CREATE, RENAME, CHMOD, WRITE, REMOVE, entry info only when asked
//! and only for CREATE/WRITE/CHMOD. Recursive watches add a watch to every new subdirectory.
//!
//! Uploads through `POST /files` write a hidden temporary file next to the target and rename it
//! into place (so a failed upload leaves nothing behind). Watchers hide the temporary file and
//! report the rename as envd's three events for a written file: CREATE, CHMOD, WRITE.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use e2b_envd_proto::filesystem::{EventType, FilesystemEvent};
use futures::StreamExt as _;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::mpsc;
use tonic::Status;

use super::entry::entry_info;

/// Prefix of the temporary files `POST /files` writes before renaming them into place.
pub(crate) const UPLOAD_TMP_PREFIX: &str = ".e2b-upload-";

/// Most events a `CreateWatcher` watcher keeps between two `GetWatcherEvents` calls, unless
/// `E2B_ENVD_WATCHER_BUFFER_EVENTS` says otherwise. envd keeps an unbounded buffer; we stop the
/// watcher and report an error instead of growing.
pub(crate) const WATCHER_BUFFER_EVENTS: usize = 65_536;

/// The polled-watcher buffer size: `E2B_ENVD_WATCHER_BUFFER_EVENTS`, else
/// [`WATCHER_BUFFER_EVENTS`].
pub(crate) fn watcher_buffer_events() -> usize {
    std::env::var("E2B_ENVD_WATCHER_BUFFER_EVENTS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(WATCHER_BUFFER_EVENTS)
}

/// Most directories one recursive watch covers, unless `E2B_ENVD_WATCH_MAX_DIRS` says
/// otherwise. Each is an inotify watch (the kernel's `max_user_watches` is shared by every
/// process of the user) and a directory read at setup.
pub(crate) const WATCH_MAX_DIRS: usize = 10_000;

fn env_limit(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// Most directories per recursive watch: `E2B_ENVD_WATCH_MAX_DIRS`, else [`WATCH_MAX_DIRS`].
pub(crate) fn watch_max_dirs() -> usize {
    env_limit("E2B_ENVD_WATCH_MAX_DIRS", WATCH_MAX_DIRS as u64) as usize
}

/// Most watchers (`WatchDir` streams plus `CreateWatcher` watchers) per daemon, unless
/// `E2B_ENVD_MAX_WATCHERS` says otherwise. Each holds an inotify instance (the kernel allows
/// 128 per user by default).
pub(crate) const MAX_WATCHERS: usize = 64;

/// `E2B_ENVD_MAX_WATCHERS`, else [`MAX_WATCHERS`].
pub(crate) fn max_watchers() -> usize {
    env_limit("E2B_ENVD_MAX_WATCHERS", MAX_WATCHERS as u64) as usize
}

/// A `CreateWatcher` watcher not polled by `GetWatcherEvents` for this long is removed, unless
/// `E2B_ENVD_WATCHER_IDLE_MS` says otherwise.
pub(crate) const WATCHER_IDLE: std::time::Duration = std::time::Duration::from_secs(600);

/// `E2B_ENVD_WATCHER_IDLE_MS`, else [`WATCHER_IDLE`].
pub(crate) fn watcher_idle() -> std::time::Duration {
    std::time::Duration::from_millis(env_limit(
        "E2B_ENVD_WATCHER_IDLE_MS",
        WATCHER_IDLE.as_millis() as u64,
    ))
}

/// Capacity of the channel between the inotify reader and its consumer.
const CHANNEL_CAPACITY: usize = 1024;

fn watch_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MODIFY
        | WatchMask::ATTRIB
        | WatchMask::DELETE
        | WatchMask::DELETE_SELF
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::MOVE_SELF
}

/// What to watch.
#[derive(Debug, Clone)]
pub(crate) struct WatchSpec {
    /// The directory, absolute and resolved.
    pub(crate) dir: PathBuf,
    /// Watch subdirectories too (and new ones as they appear).
    pub(crate) recursive: bool,
    /// Attach `EntryInfo` to CREATE/WRITE/CHMOD events.
    pub(crate) include_entry: bool,
}

/// Filesystem magic numbers of network and FUSE filesystems (`statfs(2)`), refused unless the
/// request allows network mounts.
pub(crate) fn network_mount_kind(path: &Path) -> Option<&'static str> {
    let st = nix::sys::statfs::statfs(path).ok()?;
    match st.filesystem_type().0 as i64 & 0xffff_ffff {
        0x6969 => Some("NFS"),
        0xFF53_4D42 => Some("CIFS"),
        0x517B => Some("SMB"),
        0xFE53_4D42 => Some("SMB2"),
        0x6573_5546 => Some("FUSE"),
        _ => None,
    }
}

fn is_upload_tmp(name: &OsStr) -> bool {
    name.as_encoded_bytes()
        .starts_with(UPLOAD_TMP_PREFIX.as_bytes())
}

struct Reader {
    spec: WatchSpec,
    watches: Watches,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    root_wd: Option<WatchDescriptor>,
    tmp_cookies: HashSet<u32>,
    max_dirs: usize,
    /// Set when the tree had more directories than `max_dirs`.
    too_big: bool,
}

impl Reader {
    /// Adds a watch on `rel` (relative to the root) and, when recursive, on every directory
    /// below it (symlinks are not followed).
    fn add_tree(&mut self, rel: PathBuf) {
        if self.dirs.len() >= self.max_dirs {
            self.too_big = true;
            return;
        }
        let abs = self.spec.dir.join(&rel);
        let mask = if rel.as_os_str().is_empty() {
            watch_mask()
        } else {
            watch_mask() | WatchMask::DONT_FOLLOW
        };
        match self.watches.add(&abs, mask | WatchMask::ONLYDIR) {
            Ok(wd) => {
                if rel.as_os_str().is_empty() {
                    self.root_wd = Some(wd.clone());
                }
                self.dirs.insert(wd, rel.clone());
            }
            Err(e) => {
                tracing::debug!(path = %abs.display(), error = %e, "cannot watch directory");
                return;
            }
        }
        if !self.spec.recursive {
            return;
        }
        let Ok(rd) = std::fs::read_dir(&abs) else {
            return;
        };
        let mut subdirs: Vec<_> = rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .map(|e| e.file_name())
            .collect();
        subdirs.sort();
        for name in subdirs {
            if self.too_big {
                return;
            }
            self.add_tree(rel.join(name));
        }
    }

    fn event(&self, rel: &Path, ty: EventType) -> FilesystemEvent {
        let entry = if self.spec.include_entry
            && matches!(ty, EventType::Create | EventType::Write | EventType::Chmod)
        {
            let abs = self.spec.dir.join(rel);
            entry_info(&abs, &abs).ok()
        } else {
            None
        };
        FilesystemEvent {
            name: rel.to_string_lossy().into_owned(),
            r#type: ty as i32,
            entry,
        }
    }

    fn too_big_status(&self) -> Status {
        Status::resource_exhausted(format!(
            "the recursive watch of '{}' would cover more than {} directories; watch a smaller tree",
            self.spec.dir.display(),
            self.max_dirs
        ))
    }

    /// Translates one inotify event into envd events.
    fn translate(
        &mut self,
        ev: &inotify::EventOwned,
        out: &mut Vec<FilesystemEvent>,
    ) -> Result<(), Status> {
        let mask = ev.mask;
        if mask.contains(EventMask::Q_OVERFLOW) {
            return Err(Status::internal(
                "the kernel's inotify event queue overflowed, so events were lost; watch a smaller tree or consume events faster",
            ));
        }
        if mask.contains(EventMask::IGNORED) {
            self.dirs.remove(&ev.wd);
            return Ok(());
        }
        let Some(dir) = self.dirs.get(&ev.wd).cloned() else {
            return Ok(());
        };
        let Some(name) = ev.name.as_deref() else {
            // Events about a watched directory itself: its parent reports them (or, for the
            // root, the client removed or moved what it watches).
            return Ok(());
        };
        let rel = dir.join(name);
        if is_upload_tmp(name) {
            if mask.contains(EventMask::MOVED_FROM) {
                self.tmp_cookies.insert(ev.cookie);
            }
            return Ok(());
        }
        if mask.contains(EventMask::MOVED_TO) && self.tmp_cookies.remove(&ev.cookie) {
            // A finished upload renamed into place: report it as envd's create, chown, write.
            for ty in [EventType::Create, EventType::Chmod, EventType::Write] {
                out.push(self.event(&rel, ty));
            }
            return Ok(());
        }
        if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
            out.push(self.event(&rel, EventType::Create));
        }
        if mask.intersects(EventMask::MOVED_FROM) {
            out.push(self.event(&rel, EventType::Rename));
        }
        if mask.contains(EventMask::ATTRIB) {
            out.push(self.event(&rel, EventType::Chmod));
        }
        if mask.contains(EventMask::MODIFY) {
            out.push(self.event(&rel, EventType::Write));
        }
        if mask.contains(EventMask::DELETE) {
            out.push(self.event(&rel, EventType::Remove));
        }
        if self.spec.recursive
            && mask.contains(EventMask::ISDIR)
            && mask.intersects(EventMask::CREATE | EventMask::MOVED_TO)
        {
            self.add_tree(rel);
            if self.too_big {
                return Err(self.too_big_status());
            }
        }
        Ok(())
    }
}

/// A running inotify reader. Dropping it stops the reader.
#[derive(Debug)]
pub(crate) struct WatchTask {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching. Events (or one terminal error) arrive on the returned channel; the reader
/// waits when the channel is full, so a slow consumer eventually overflows the kernel queue and
/// gets an error instead of the daemon growing. Setting up a recursive watch reads every
/// directory of the tree (at most [`watch_max_dirs`]): call it from a blocking thread.
pub(crate) fn start(
    spec: WatchSpec,
) -> Result<(mpsc::Receiver<Result<FilesystemEvent, Status>>, WatchTask), Status> {
    let inotify = Inotify::init()
        .map_err(|e| Status::internal(format!("cannot create an inotify instance: {e}")))?;
    let watches = inotify.watches();
    let mut reader = Reader {
        spec,
        watches,
        dirs: HashMap::new(),
        root_wd: None,
        tmp_cookies: HashSet::new(),
        max_dirs: watch_max_dirs(),
        too_big: false,
    };
    reader.add_tree(PathBuf::new());
    if reader.too_big {
        return Err(reader.too_big_status());
    }
    if reader.root_wd.is_none() {
        return Err(Status::internal(format!(
            "cannot watch '{}'",
            reader.spec.dir.display()
        )));
    }
    let mut stream = inotify
        .into_event_stream(vec![0u8; 64 * 1024])
        .map_err(|e| Status::internal(format!("cannot read inotify events: {e}")))?;
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    let task = tokio::spawn(async move {
        let mut out = Vec::new();
        while let Some(item) = stream.next().await {
            let ev = match item {
                Ok(ev) => ev,
                Err(e) => {
                    let _ = tx
                        .send(Err(Status::internal(format!("watcher failed: {e}"))))
                        .await;
                    return;
                }
            };
            out.clear();
            if let Err(status) = reader.translate(&ev, &mut out) {
                let _ = tx.send(Err(status)).await;
                return;
            }
            for e in out.drain(..) {
                if tx.send(Ok(e)).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok((rx, WatchTask { task }))
}

/// A watcher created by `CreateWatcher`: events wait in a bounded buffer until
/// `GetWatcherEvents` drains them.
#[derive(Debug)]
pub(crate) struct PolledWatcher {
    buffer: Arc<Mutex<Buffer>>,
    /// When `GetWatcherEvents` last drained it (or when it was created).
    last_poll: Mutex<std::time::Instant>,
    _reader: WatchTask,
    _collector: CollectorTask,
}

#[derive(Debug)]
struct CollectorTask(tokio::task::JoinHandle<()>);

impl Drop for CollectorTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Debug, Default)]
struct Buffer {
    events: VecDeque<FilesystemEvent>,
    error: Option<Status>,
}

impl PolledWatcher {
    /// Starts a polled watcher keeping at most `capacity` undrained events.
    pub(crate) fn start(spec: WatchSpec, capacity: usize) -> Result<Self, Status> {
        let (mut rx, reader) = start(spec)?;
        let buffer = Arc::new(Mutex::new(Buffer::default()));
        let buf = buffer.clone();
        let collector = tokio::spawn(async move {
            while let Some(item) = rx.recv().await {
                let mut b = match buf.lock() {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                match item {
                    Ok(ev) if b.events.len() < capacity => b.events.push_back(ev),
                    Ok(_) => {
                        b.error = Some(Status::resource_exhausted(format!(
                            "the watcher's event buffer overflowed ({capacity} events were not collected): \
                             call GetWatcherEvents more often, or remove this watcher and create a new one"
                        )));
                        return;
                    }
                    Err(status) => {
                        b.error = Some(status);
                        return;
                    }
                }
            }
        });
        Ok(Self {
            buffer,
            last_poll: Mutex::new(std::time::Instant::now()),
            _reader: reader,
            _collector: CollectorTask(collector),
        })
    }

    /// Drains the buffered events, or returns the watcher's terminal error.
    pub(crate) fn drain(&self) -> Result<Vec<FilesystemEvent>, Status> {
        *self.last_poll.lock().unwrap_or_else(|p| p.into_inner()) = std::time::Instant::now();
        let mut b = match self.buffer.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(err) = &b.error {
            return Err(Status::new(err.code(), err.message().to_string()));
        }
        Ok(b.events.drain(..).collect())
    }
}

impl PolledWatcher {
    /// Whether nobody polled this watcher for `idle`.
    pub(crate) fn idle_for(&self, idle: std::time::Duration) -> bool {
        self.last_poll
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
            >= idle
    }
}
