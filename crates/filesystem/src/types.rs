//! The values file operations take and return.

use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use e2b_envd_proto::filesystem as pb;
use futures::Stream;

/// A stream of bytes, as downloads return and streamed uploads take.
pub type ByteStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send + 'static>>;

/// What kind of entry a path is. For a symlink envd reports its target's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileType {
    /// A regular file (or a symlink to one).
    File,
    /// A directory (or a symlink to one).
    Dir,
    /// Anything else: a dangling symlink, a device, a socket.
    Other,
}

impl FileType {
    pub(crate) fn from_pb(v: i32) -> Self {
        match pb::FileType::try_from(v) {
            Ok(pb::FileType::File) => Self::File,
            Ok(pb::FileType::Directory) => Self::Dir,
            _ => Self::Other,
        }
    }
}

/// Information about a file or directory (envd's `EntryInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EntryInfo {
    /// The base name.
    pub name: String,
    /// The kind (of the target, for a symlink).
    pub file_type: FileType,
    /// The absolute path, as requested (symlinks not resolved).
    pub path: String,
    /// Size in bytes (of the link itself, for a symlink).
    pub size: u64,
    /// Permission bits, e.g. `0o644`.
    pub mode: u32,
    /// Go-style permission string, e.g. `-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`.
    pub permissions: String,
    /// Owner user name (or numeric id).
    pub owner: String,
    /// Owner group name (or numeric id).
    pub group: String,
    /// Last modification time.
    pub modified_time: Option<SystemTime>,
    /// For a symlink: the fully resolved target.
    pub symlink_target: Option<String>,
    /// Metadata stored with the file (`X-Metadata-*` on upload, `user.e2b.*` xattrs).
    pub metadata: HashMap<String, String>,
}

impl EntryInfo {
    /// Whether this is a directory (or a symlink to one).
    pub fn is_dir(&self) -> bool {
        self.file_type == FileType::Dir
    }

    pub(crate) fn from_pb(e: pb::EntryInfo) -> Self {
        let modified_time = e.modified_time.and_then(|t| {
            if t.seconds < 0 {
                return None;
            }
            Some(SystemTime::UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos.max(0) as u32))
        });
        Self {
            name: e.name,
            file_type: FileType::from_pb(e.r#type),
            path: e.path,
            size: e.size.max(0) as u64,
            mode: e.mode,
            permissions: e.permissions,
            owner: e.owner,
            group: e.group,
            modified_time,
            symlink_target: e.symlink_target,
            metadata: e.metadata,
        }
    }
}

/// What an upload wrote (envd's `/files` answer).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[non_exhaustive]
pub struct WriteInfo {
    /// The absolute path written.
    pub path: String,
    /// The base name.
    pub name: String,
    /// `file`.
    #[serde(rename = "type", default)]
    pub file_type: Option<String>,
    /// The metadata stored with the file, if any was sent.
    #[serde(default)]
    pub metadata: Option<HashMap<String, String>>,
}

/// Options of an upload.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WriteOptions {
    /// Compress the body with gzip on the way (envd ≥ 0.5.7, octet-stream uploads).
    pub(crate) gzip: bool,
    /// Metadata stored with the file(s) as `user.e2b.*` xattrs (envd ≥ 0.6.2). Keys are
    /// lowercased by envd; keys and values must be printable ASCII.
    pub(crate) metadata: HashMap<String, String>,
    /// Send a `multipart/form-data` body even when envd accepts raw octet-stream uploads.
    pub(crate) force_multipart: bool,
}

impl WriteOptions {
    /// Turns gzip on or off.
    pub fn gzip(mut self, on: bool) -> Self {
        self.gzip = on;
        self
    }

    /// Adds a metadata entry.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

/// What to upload in [`Filesystem::write_files`](crate::Filesystem::write_files).
#[non_exhaustive]
pub enum WriteData {
    /// Bytes in memory.
    Bytes(Bytes),
    /// A stream (sent as it is produced; never buffered whole).
    Stream(ByteStream),
    /// A local file, streamed from disk.
    File(PathBuf),
}

impl std::fmt::Debug for WriteData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Self::Stream(_) => f.write_str("Stream(..)"),
            Self::File(p) => write!(f, "File({})", p.display()),
        }
    }
}

/// One file of a multi-file upload.
#[derive(Debug)]
#[non_exhaustive]
pub struct WriteEntry {
    /// Where to write it in the sandbox (relative paths are under the user's home).
    pub path: String,
    /// The content.
    pub data: WriteData,
}

impl WriteEntry {
    /// A file with in-memory content.
    pub fn bytes(path: impl Into<String>, data: impl Into<Bytes>) -> Self {
        Self {
            path: path.into(),
            data: WriteData::Bytes(data.into()),
        }
    }

    /// A file whose content is streamed.
    pub fn stream<S>(path: impl Into<String>, stream: S) -> Self
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    {
        Self {
            path: path.into(),
            data: WriteData::Stream(Box::pin(stream)),
        }
    }

    /// A file streamed from a local file.
    pub fn file(path: impl Into<String>, local: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            data: WriteData::File(local.into()),
        }
    }
}

/// The kind of a filesystem event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventType {
    /// A file or directory appeared.
    Create,
    /// A file was written.
    Write,
    /// A file or directory was removed.
    Remove,
    /// A file or directory was renamed away.
    Rename,
    /// Permissions or ownership changed.
    Chmod,
}

impl EventType {
    pub(crate) fn from_pb(v: i32) -> Option<Self> {
        Some(match pb::EventType::try_from(v).ok()? {
            pb::EventType::Create => Self::Create,
            pb::EventType::Write => Self::Write,
            pb::EventType::Remove => Self::Remove,
            pb::EventType::Rename => Self::Rename,
            pb::EventType::Chmod => Self::Chmod,
            pb::EventType::Unspecified => return None,
        })
    }
}

/// A change in a watched directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FilesystemEvent {
    /// The path relative to the watched directory, e.g. `sub/file.txt`.
    pub name: String,
    /// What happened.
    pub event_type: EventType,
    /// Entry info (only with [`WatchOptions::include_entry`], only for create, write, chmod).
    pub entry: Option<EntryInfo>,
}

/// Options of [`Filesystem::watch_dir`](crate::Filesystem::watch_dir).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WatchOptions {
    /// Watch subdirectories too (envd ≥ 0.1.4).
    pub(crate) recursive: bool,
    /// Attach entry info to create/write/chmod events (envd ≥ 0.6.3).
    pub(crate) include_entry: bool,
    /// Allow watching a directory on NFS/CIFS/SMB/FUSE (envd ≥ 0.6.4).
    pub(crate) allow_network_mounts: bool,
}

impl WatchOptions {
    /// Watch subdirectories too (envd ≥ 0.1.4).
    pub fn recursive(mut self, on: bool) -> Self {
        self.recursive = on;
        self
    }

    /// Attach entry info to create/write/chmod events (envd ≥ 0.6.3).
    pub fn include_entry(mut self, on: bool) -> Self {
        self.include_entry = on;
        self
    }

    /// Allow watching a directory on NFS/CIFS/SMB/FUSE (envd ≥ 0.6.4).
    pub fn allow_network_mounts(mut self, on: bool) -> Self {
        self.allow_network_mounts = on;
        self
    }
}

/// Options of a signed URL.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct UrlOptions {
    /// How long the signature stays valid (`None` = no expiry).
    pub(crate) expires_in: Option<Duration>,
}

impl UrlOptions {
    /// How long the signature stays valid (`None` = no expiry).
    pub fn expires_in(mut self, d: Duration) -> Self {
        self.expires_in = Some(d);
        self
    }
}
