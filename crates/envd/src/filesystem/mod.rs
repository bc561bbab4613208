//! envd's `filesystem.Filesystem` service: one tonic implementation served over gRPC, gRPC-Web
//! and Connect (`Stat`, `MakeDir`, `Move`, `ListDir`, `Remove`, `WatchDir`, `CreateWatcher`,
//! `GetWatcherEvents`, `RemoveWatcher`).

pub(crate) mod entry;
pub(crate) mod paths;
pub(crate) mod watch;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2b_envd_proto::filesystem::filesystem_server::Filesystem;
use e2b_envd_proto::filesystem::watch_dir_response::{Event, KeepAlive, StartEvent};
use e2b_envd_proto::filesystem::{
    CreateWatcherRequest, CreateWatcherResponse, EntryInfo, GetWatcherEventsRequest,
    GetWatcherEventsResponse, ListDirRequest, ListDirResponse, MakeDirRequest, MakeDirResponse,
    MoveRequest, MoveResponse, RemoveRequest, RemoveResponse, RemoveWatcherRequest,
    RemoveWatcherResponse, StatRequest, StatResponse, WatchDirRequest, WatchDirResponse,
};
use futures::Stream;
use tonic::{Request, Response, Status};

use crate::connect::ConnectRouter;
use crate::state::{State, User};
use entry::entry_info;
use paths::{PathError, make_dirs};
use watch::{PolledWatcher, WatchSpec};

type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchDirResponse, Status>> + Send + 'static>>;

type WatcherMap = HashMap<String, (Arc<PolledWatcher>, WatcherSlot)>;

/// One of the daemon's [`watch::max_watchers`] watcher slots, released on drop.
#[derive(Debug)]
struct WatcherSlot(Arc<AtomicUsize>);

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The Filesystem service implementation shared by every protocol.
#[derive(Debug, Clone)]
pub(crate) struct FilesystemService {
    state: Arc<State>,
    watchers: Arc<Mutex<WatcherMap>>,
    /// Watchers in use: `WatchDir` streams plus `CreateWatcher` watchers.
    slots: Arc<AtomicUsize>,
}

/// Removes polled watchers nobody drained for [`watch::watcher_idle`].
fn expire_idle(map: &Mutex<WatcherMap>, idle: Duration) {
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    m.retain(|id, (w, _)| {
        let keep = !w.idle_for(idle);
        if !keep {
            tracing::info!(watcher = %id, "removing a watcher nobody polled for {idle:?}");
        }
        keep
    });
}

impl FilesystemService {
    pub(crate) fn new(state: Arc<State>) -> Self {
        let watchers = Arc::new(Mutex::new(HashMap::new()));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&watchers);
            let idle = watch::watcher_idle();
            let every = (idle / 2).clamp(Duration::from_millis(50), Duration::from_secs(60));
            rt.spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(map) = weak.upgrade() else { return };
                    expire_idle(&map, idle);
                }
            });
        }
        Self {
            state,
            watchers,
            slots: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Takes a watcher slot, or `resource_exhausted` when the daemon has its maximum.
    fn watcher_slot(&self) -> Result<WatcherSlot, Status> {
        let max = watch::max_watchers();
        if self.slots.fetch_add(1, Ordering::SeqCst) >= max {
            self.slots.fetch_sub(1, Ordering::SeqCst);
            expire_idle(&self.watchers, watch::watcher_idle());
            if self.slots.fetch_add(1, Ordering::SeqCst) >= max {
                self.slots.fetch_sub(1, Ordering::SeqCst);
                return Err(Status::resource_exhausted(format!(
                    "this daemon already has {max} directory watchers (WatchDir streams and CreateWatcher watchers); \
                     close a WatchDir stream or RemoveWatcher one you no longer need"
                )));
            }
        }
        Ok(WatcherSlot(self.slots.clone()))
    }

    fn user<T>(&self, req: &Request<T>) -> Result<User, Status> {
        self.state
            .user_from_headers(&req.metadata().clone().into_headers())
            .map_err(Status::unauthenticated)
    }

    fn resolve(&self, user: &User, path: &str) -> Result<PathBuf, Status> {
        paths::resolve(&self.state, user, path).map_err(PathError::into_status)
    }

    fn watchers(&self) -> std::sync::MutexGuard<'_, WatcherMap> {
        match self.watchers.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// What `WatchDir` and `CreateWatcher` both do first: envd's watch validation (the path
    /// must exist, be a directory, and unless allowed not sit on a network or FUSE filesystem),
    /// then a watcher slot.
    async fn prepare_watch(
        &self,
        user: &User,
        params: WatchParams,
    ) -> Result<(WatchSpec, WatcherSlot), Status> {
        let spec = self.watch_spec(user, params).await?;
        Ok((spec, self.watcher_slot()?))
    }

    async fn watch_spec(&self, user: &User, params: WatchParams) -> Result<WatchSpec, Status> {
        let WatchParams {
            path,
            recursive,
            include_entry,
            allow_network_mounts,
        } = params;
        let resolved = self.resolve(user, &path)?;
        blocking(move || {
            let meta = std::fs::metadata(&resolved).map_err(|e| io_status(&e, &resolved, "path not found"))?;
            if !meta.is_dir() {
                return Err(Status::invalid_argument(format!("path {} not a directory", resolved.display())));
            }
            if !allow_network_mounts && let Some(kind) = watch::network_mount_kind(&resolved) {
                return Err(Status::invalid_argument(format!(
                    "path {} is on a network mount ({kind}); watching it is refused unless allow_network_mounts is set",
                    resolved.display()
                )));
            }
            Ok(WatchSpec { dir: resolved, recursive, include_entry })
        })
        .await
    }
}

/// The fields `WatchDirRequest` and `CreateWatcherRequest` share.
struct WatchParams {
    path: String,
    recursive: bool,
    include_entry: bool,
    allow_network_mounts: bool,
}

impl From<WatchDirRequest> for WatchParams {
    fn from(r: WatchDirRequest) -> Self {
        Self {
            path: r.path,
            recursive: r.recursive,
            include_entry: r.include_entry,
            allow_network_mounts: r.allow_network_mounts,
        }
    }
}

impl From<CreateWatcherRequest> for WatchParams {
    fn from(r: CreateWatcherRequest) -> Self {
        Self {
            path: r.path,
            recursive: r.recursive,
            include_entry: r.include_entry,
            allow_network_mounts: r.allow_network_mounts,
        }
    }
}

/// Runs blocking filesystem work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(Status::internal(format!("filesystem task failed: {e}"))))
}

/// Maps an I/O error to envd's codes: missing → `not_found` with `what`, else `internal`.
fn io_status(e: &io::Error, path: &Path, what: &str) -> Status {
    match e.kind() {
        io::ErrorKind::NotFound => Status::not_found(format!("{what}: {}", path.display())),
        io::ErrorKind::PermissionDenied => {
            Status::permission_denied(format!("{}: {e}", path.display()))
        }
        _ if e.raw_os_error() == Some(libc::ELOOP) => Status::failed_precondition(format!(
            "cyclic symlink or too many symlinks: {}",
            path.display()
        )),
        _ => Status::internal(format!("{}: {e}", path.display())),
    }
}

/// The keepalive interval from `Keepalive-Ping-Interval` (seconds), else `default`.
fn keepalive_interval(md: &tonic::metadata::MetadataMap, default: Duration) -> Duration {
    crate::process::requested_keepalive_secs(md)
        // At most a day: a huge value must not overflow a deadline anywhere.
        .map(|s| Duration::from_secs(s.min(crate::process::MAX_KEEPALIVE_SECS)))
        .unwrap_or(default)
}

/// Lists `root` (already resolved, a directory) down to `depth` levels: lexical depth-first
/// pre-order, root excluded, symlinks listed but not followed. Paths are reported under
/// `display_root`.
fn walk(
    root: &Path,
    display_root: &Path,
    depth: u32,
    max_entries: usize,
    out: &mut Vec<EntryInfo>,
) -> Result<(), Status> {
    fn visit(
        dir: &Path,
        display: &Path,
        level: u32,
        (depth, max_entries): (u32, usize),
        out: &mut Vec<EntryInfo>,
    ) -> Result<(), Status> {
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            // Vanished mid-walk: skip, as envd does.
            Err(e) if e.kind() == io::ErrorKind::NotFound && level > 1 => return Ok(()),
            Err(e) => {
                return Err(Status::internal(format!(
                    "error reading directory {}: {e}",
                    dir.display()
                )));
            }
        };
        let mut names: Vec<_> = rd.filter_map(Result::ok).map(|e| e.file_name()).collect();
        names.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
        for name in names {
            let path = dir.join(&name);
            let shown = display.join(&name);
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(_) => continue,
            };
            if out.len() >= max_entries {
                return Err(Status::resource_exhausted(format!(
                    "the listing has more than {max_entries} entries; list a smaller depth or a subdirectory"
                )));
            }
            out.push(entry::entry_from_metadata(&path, &shown, &meta));
            if meta.is_dir() && level < depth {
                visit(&path, &shown, level + 1, (depth, max_entries), out)?;
            }
        }
        Ok(())
    }
    visit(root, display_root, 1, (depth, max_entries), out)
}

/// Deepest `ListDir` accepted, unless `E2B_ENVD_LISTDIR_MAX_DEPTH` says otherwise.
pub(crate) const LISTDIR_MAX_DEPTH: u32 = 512;
/// Most entries one `ListDir` returns, unless `E2B_ENVD_LISTDIR_MAX_ENTRIES` says otherwise.
pub(crate) const LISTDIR_MAX_ENTRIES: usize = 100_000;

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
}

fn listdir_max_depth() -> u32 {
    env_number("E2B_ENVD_LISTDIR_MAX_DEPTH")
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(LISTDIR_MAX_DEPTH)
}

fn listdir_max_entries() -> usize {
    env_number("E2B_ENVD_LISTDIR_MAX_ENTRIES")
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(LISTDIR_MAX_ENTRIES)
}

#[tonic::async_trait]
impl Filesystem for FilesystemService {
    async fn stat(&self, request: Request<StatRequest>) -> Result<Response<StatResponse>, Status> {
        let user = self.user(&request)?;
        let path = self.resolve(&user, &request.get_ref().path)?;
        let entry = blocking(move || {
            entry_info(&path, &path).map_err(|e| io_status(&e, &path, "file not found"))
        })
        .await?;
        Ok(Response::new(StatResponse { entry: Some(entry) }))
    }

    async fn make_dir(
        &self,
        request: Request<MakeDirRequest>,
    ) -> Result<Response<MakeDirResponse>, Status> {
        let user = self.user(&request)?;
        let path = self.resolve(&user, &request.get_ref().path)?;
        let state = self.state.clone();
        let entry = blocking(move || {
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => {
                    return Err(Status::already_exists(format!(
                        "directory already exists: {}",
                        path.display()
                    )));
                }
                Ok(_) => {
                    return Err(Status::invalid_argument(format!(
                        "path already exists, but it is not a directory: {}",
                        path.display()
                    )));
                }
                Err(_) => {}
            }
            make_dirs(&state, &user, &path).map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists | io::ErrorKind::NotADirectory => {
                    Status::invalid_argument(format!(
                        "error creating directory {}: a parent exists and is not a directory",
                        path.display()
                    ))
                }
                _ => Status::internal(format!("error creating directory {}: {e}", path.display())),
            })?;
            entry_info(&path, &path).map_err(|e| io_status(&e, &path, "directory not found"))
        })
        .await?;
        Ok(Response::new(MakeDirResponse { entry: Some(entry) }))
    }

    async fn r#move(
        &self,
        request: Request<MoveRequest>,
    ) -> Result<Response<MoveResponse>, Status> {
        let user = self.user(&request)?;
        let source = self.resolve(&user, &request.get_ref().source)?;
        let destination = self.resolve(&user, &request.get_ref().destination)?;
        let state = self.state.clone();
        let entry = blocking(move || {
            if let Err(e) = std::fs::symlink_metadata(&source) {
                return Err(io_status(&e, &source, "source file not found"));
            }
            if let Some(parent) = destination.parent() {
                make_dirs(&state, &user, parent).map_err(|e| {
                    Status::internal(format!(
                        "error creating parent directory of {}: {e}",
                        destination.display()
                    ))
                })?;
            }
            std::fs::rename(&source, &destination).map_err(|e| {
                Status::internal(format!(
                    "error renaming {} to {}: {e}",
                    source.display(),
                    destination.display()
                ))
            })?;
            entry_info(&destination, &destination)
                .map_err(|e| io_status(&e, &destination, "file not found"))
        })
        .await?;
        Ok(Response::new(MoveResponse { entry: Some(entry) }))
    }

    async fn list_dir(
        &self,
        request: Request<ListDirRequest>,
    ) -> Result<Response<ListDirResponse>, Status> {
        let user = self.user(&request)?;
        let requested = self.resolve(&user, &request.get_ref().path)?;
        let depth = request.get_ref().depth.max(1);
        let max_depth = listdir_max_depth();
        if depth > max_depth {
            return Err(Status::invalid_argument(format!(
                "depth {depth} is too large: at most {max_depth} levels are listed"
            )));
        }
        let max_entries = listdir_max_entries();
        let entries = blocking(move || {
            let real = std::fs::canonicalize(&requested)
                .map_err(|e| io_status(&e, &requested, "path not found"))?;
            let meta = std::fs::metadata(&real)
                .map_err(|e| io_status(&e, &requested, "path not found"))?;
            if !meta.is_dir() {
                return Err(Status::invalid_argument(format!(
                    "path is not a directory: {}",
                    requested.display()
                )));
            }
            let mut out = Vec::new();
            walk(&real, &requested, depth, max_entries, &mut out)?;
            Ok(out)
        })
        .await?;
        Ok(Response::new(ListDirResponse { entries }))
    }

    async fn remove(
        &self,
        request: Request<RemoveRequest>,
    ) -> Result<Response<RemoveResponse>, Status> {
        let user = self.user(&request)?;
        let path = self.resolve(&user, &request.get_ref().path)?;
        blocking(move || {
            let result = match std::fs::symlink_metadata(&path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
                Ok(_) => std::fs::remove_file(&path),
            };
            match result {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(Status::internal(format!(
                    "error removing {}: {e}",
                    path.display()
                ))),
            }
        })
        .await?;
        Ok(Response::new(RemoveResponse {}))
    }

    type WatchDirStream = WatchStream;

    async fn watch_dir(
        &self,
        request: Request<WatchDirRequest>,
    ) -> Result<Response<Self::WatchDirStream>, Status> {
        let user = self.user(&request)?;
        let keepalive = keepalive_interval(request.metadata(), self.state.keepalive());
        let r = request.into_inner();
        let (spec, slot) = self.prepare_watch(&user, r.into()).await?;
        let (rx, task) = blocking(move || watch::start(spec)).await?;
        struct St {
            rx: tokio::sync::mpsc::Receiver<
                Result<e2b_envd_proto::filesystem::FilesystemEvent, Status>,
            >,
            _task: watch::WatchTask,
            _slot: WatcherSlot,
            started: bool,
            done: bool,
            keepalive: Duration,
        }
        let st = St {
            rx,
            _task: task,
            _slot: slot,
            started: false,
            done: false,
            keepalive,
        };
        let stream = futures::stream::unfold(st, |mut st| async move {
            if st.done {
                return None;
            }
            if !st.started {
                st.started = true;
                return Some((
                    Ok(WatchDirResponse {
                        event: Some(Event::Start(StartEvent {})),
                    }),
                    st,
                ));
            }
            let item = tokio::select! {
                ev = st.rx.recv() => match ev {
                    Some(Ok(ev)) => Ok(WatchDirResponse { event: Some(Event::Filesystem(ev)) }),
                    Some(Err(status)) => {
                        st.done = true;
                        Err(status)
                    }
                    None => return None,
                },
                _ = tokio::time::sleep(st.keepalive) => Ok(WatchDirResponse { event: Some(Event::Keepalive(KeepAlive {})) }),
            };
            Some((item, st))
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn create_watcher(
        &self,
        request: Request<CreateWatcherRequest>,
    ) -> Result<Response<CreateWatcherResponse>, Status> {
        let user = self.user(&request)?;
        let r = request.into_inner();
        let (spec, slot) = self.prepare_watch(&user, r.into()).await?;
        let watcher =
            blocking(move || PolledWatcher::start(spec, watch::watcher_buffer_events())).await?;
        let id = format!("w{}", uuid::Uuid::new_v4().simple());
        self.watchers()
            .insert(id.clone(), (Arc::new(watcher), slot));
        Ok(Response::new(CreateWatcherResponse { watcher_id: id }))
    }

    async fn get_watcher_events(
        &self,
        request: Request<GetWatcherEventsRequest>,
    ) -> Result<Response<GetWatcherEventsResponse>, Status> {
        let id = &request.get_ref().watcher_id;
        let watcher = self.watchers().get(id).map(|(w, _)| w.clone());
        let Some(watcher) = watcher else {
            return Err(Status::not_found(format!("watcher with id {id} not found")));
        };
        let events = watcher.drain()?;
        Ok(Response::new(GetWatcherEventsResponse { events }))
    }

    async fn remove_watcher(
        &self,
        request: Request<RemoveWatcherRequest>,
    ) -> Result<Response<RemoveWatcherResponse>, Status> {
        let id = &request.get_ref().watcher_id;
        match self.watchers().remove(id) {
            Some(_) => Ok(Response::new(RemoveWatcherResponse {})),
            None => Err(Status::not_found(format!("watcher with id {id} not found"))),
        }
    }
}

impl crate::connect::StreamMessage for WatchDirResponse {}

/// Registers the nine Filesystem procedures in a Connect router.
pub(crate) fn register_connect(
    router: ConnectRouter,
    svc: Arc<FilesystemService>,
) -> ConnectRouter {
    macro_rules! unary {
        ($router:expr, $name:literal, $method:ident) => {{
            let s = svc.clone();
            $router.unary(concat!("/filesystem.Filesystem/", $name), move |req| {
                let s = s.clone();
                async move { Filesystem::$method(&*s, req).await }
            })
        }};
    }
    let router = unary!(router, "Stat", stat);
    let router = unary!(router, "MakeDir", make_dir);
    let router = unary!(router, "Move", r#move);
    let router = unary!(router, "ListDir", list_dir);
    let router = unary!(router, "Remove", remove);
    let router = unary!(router, "CreateWatcher", create_watcher);
    let router = unary!(router, "GetWatcherEvents", get_watcher_events);
    let router = unary!(router, "RemoveWatcher", remove_watcher);
    let s = svc;
    router.server_stream("/filesystem.Filesystem/WatchDir", move |req| {
        let s = s.clone();
        async move { Filesystem::watch_dir(&*s, req).await }
    })
}
