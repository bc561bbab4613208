//! `EntryInfo` as envd builds it (`packages/shared/pkg/filesystem/entry.go`): lstat data, the
//! symlink target's type and mode, Go's `FileMode.String()` permissions, owner/group names and
//! the `user.e2b.*` extended attributes as metadata.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use e2b_envd_proto::filesystem::{EntryInfo, FileType};
use e2b_envd_proto::pbjson_types::Timestamp;

/// The xattr namespace holding file metadata.
pub(crate) const METADATA_PREFIX: &str = "user.e2b.";

const S_IFMT: u32 = 0o170_000;
const S_IFSOCK: u32 = 0o140_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFREG: u32 = 0o100_000;
const S_IFBLK: u32 = 0o060_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFCHR: u32 = 0o020_000;
const S_IFIFO: u32 = 0o010_000;

/// Go's `os.FileMode.String()` for a Unix `st_mode`: type letters from `dalTLDpSugct?` in that
/// order (or `-`), then `rwxrwxrwx`.
pub(crate) fn go_mode_string(st_mode: u32) -> String {
    let fmt = st_mode & S_IFMT;
    let mut out = String::with_capacity(12);
    // Order of Go's letters: d a l T L D p S u g c t ?
    if fmt == S_IFDIR {
        out.push('d');
    }
    if fmt == S_IFLNK {
        out.push('L');
    }
    if fmt == S_IFBLK || fmt == S_IFCHR {
        out.push('D');
    }
    if fmt == S_IFIFO {
        out.push('p');
    }
    if fmt == S_IFSOCK {
        out.push('S');
    }
    if st_mode & 0o4000 != 0 {
        out.push('u');
    }
    if st_mode & 0o2000 != 0 {
        out.push('g');
    }
    if fmt == S_IFCHR {
        out.push('c');
    }
    if st_mode & 0o1000 != 0 {
        out.push('t');
    }
    if out.is_empty() {
        out.push('-');
    }
    const RWX: &[u8; 9] = b"rwxrwxrwx";
    for (i, c) in RWX.iter().enumerate() {
        if st_mode & (1 << (8 - i)) != 0 {
            out.push(*c as char);
        } else {
            out.push('-');
        }
    }
    out
}

fn file_type(st_mode: u32) -> FileType {
    match st_mode & S_IFMT {
        S_IFREG => FileType::File,
        S_IFDIR => FileType::Directory,
        S_IFLNK => FileType::Symlink,
        _ => FileType::Unspecified,
    }
}

type NameCache = Mutex<HashMap<u32, String>>;

fn cached_name(
    cache: &'static OnceLock<NameCache>,
    id: u32,
    lookup: impl FnOnce(u32) -> Option<String>,
) -> String {
    let cache = cache.get_or_init(Default::default);
    if let Ok(g) = cache.lock()
        && let Some(n) = g.get(&id)
    {
        return n.clone();
    }
    match lookup(id) {
        Some(name) => {
            if let Ok(mut g) = cache.lock() {
                g.insert(id, name.clone());
            }
            name
        }
        // Not cached: the account may be created later (useradd in a running sandbox).
        None => id.to_string(),
    }
}

/// The user name of `uid`, else its number.
pub(crate) fn owner_name(uid: u32) -> String {
    static CACHE: OnceLock<NameCache> = OnceLock::new();
    cached_name(&CACHE, uid, |id| {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(id))
            .ok()
            .flatten()
            .map(|u| u.name)
    })
}

/// The group name of `gid`, else its number.
pub(crate) fn group_name(gid: u32) -> String {
    static CACHE: OnceLock<NameCache> = OnceLock::new();
    cached_name(&CACHE, gid, |id| {
        nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(id))
            .ok()
            .flatten()
            .map(|g| g.name)
    })
}

/// The `user.e2b.*` extended attributes of `path` (following symlinks), prefix stripped.
/// Filesystems without xattr support, and non-UTF-8 names or values, yield nothing.
pub(crate) fn read_metadata(path: &Path) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let Ok(names) = xattr::list_deref(path) else {
        return out;
    };
    for name in names {
        let Some(name) = name.to_str() else { continue };
        let Some(key) = name.strip_prefix(METADATA_PREFIX) else {
            continue;
        };
        if let Ok(Some(value)) = xattr::get_deref(path, name)
            && let Ok(value) = String::from_utf8(value)
        {
            out.insert(key.to_string(), value);
        }
    }
    out
}

/// The `basename` of a path as Go's `filepath.Base` computes it (`/` for the root).
pub(crate) fn base_name(path: &Path) -> String {
    match path.file_name() {
        Some(n) => n.to_string_lossy().into_owned(),
        None => "/".to_string(),
    }
}

/// Builds the `EntryInfo` of `path` (lstat), reporting `display_path` as its `path`.
pub(crate) fn entry_info(path: &Path, display_path: &Path) -> io::Result<EntryInfo> {
    let meta = std::fs::symlink_metadata(path)?;
    Ok(entry_from_metadata(path, display_path, &meta))
}

/// Builds the `EntryInfo` of `path` from its lstat metadata.
pub(crate) fn entry_from_metadata(
    path: &Path,
    display_path: &Path,
    meta: &std::fs::Metadata,
) -> EntryInfo {
    let st_mode = meta.mode();
    let (ty, mode, symlink_target) = if st_mode & S_IFMT == S_IFLNK {
        let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        match std::fs::metadata(&target) {
            Ok(t) => (file_type(t.mode()), t.mode() & 0o777, Some(target)),
            Err(_) => (FileType::Unspecified, 0, Some(target)),
        }
    } else {
        (file_type(st_mode), st_mode & 0o777, None)
    };
    let modified_time = if meta.mtime() == 0 && meta.mtime_nsec() == 0 {
        None
    } else {
        Some(Timestamp {
            seconds: meta.mtime(),
            nanos: meta.mtime_nsec() as i32,
        })
    };
    EntryInfo {
        name: base_name(display_path),
        r#type: ty as i32,
        path: display_path.to_string_lossy().into_owned(),
        size: meta.size() as i64,
        mode,
        permissions: go_mode_string(st_mode),
        owner: owner_name(meta.uid()),
        group: group_name(meta.gid()),
        modified_time,
        symlink_target: symlink_target.map(|t| t.to_string_lossy().into_owned()),
        metadata: read_metadata(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_mode_strings() {
        assert_eq!(go_mode_string(S_IFREG | 0o644), "-rw-r--r--");
        assert_eq!(go_mode_string(S_IFDIR | 0o755), "drwxr-xr-x");
        assert_eq!(go_mode_string(S_IFLNK | 0o777), "Lrwxrwxrwx");
        assert_eq!(go_mode_string(S_IFDIR | 0o1777), "dtrwxrwxrwx");
        assert_eq!(go_mode_string(S_IFCHR | 0o666), "Dcrw-rw-rw-");
        assert_eq!(go_mode_string(S_IFREG | 0o4755), "urwxr-xr-x");
        assert_eq!(go_mode_string(S_IFIFO | 0o600), "prw-------");
        assert_eq!(go_mode_string(S_IFSOCK | 0o755), "Srwxr-xr-x");
    }
}
