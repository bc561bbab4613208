//! Path handling shared by the Filesystem service and `/files`: resolution for a user, optional
//! root confinement, and directory creation owned by the user.

use std::io;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Component, Path, PathBuf};

use crate::state::{State, User};

/// Why a path was refused.
#[derive(Debug)]
pub(crate) enum PathError {
    /// The path cannot be expanded (for example `~other`).
    Invalid(String),
    /// The path resolves outside the configured root.
    OutsideRoot(String),
}

impl PathError {
    pub(crate) fn into_status(self) -> tonic::Status {
        match self {
            Self::Invalid(m) => tonic::Status::invalid_argument(m),
            Self::OutsideRoot(m) => tonic::Status::permission_denied(m),
        }
    }
}

/// Resolves `path` for `user` (envd's `ExpandAndResolve`) and checks it against the root.
pub(crate) fn resolve(state: &State, user: &User, path: &str) -> Result<PathBuf, PathError> {
    let resolved = state.resolve_path(user, path).map_err(PathError::Invalid)?;
    confine(state.root(), &resolved)?;
    Ok(resolved)
}

/// Resolves symlinks of the longest existing prefix of `path`, keeping the rest lexically.
pub(crate) fn real_path(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut out = real;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return crate::state::clean(&out);
        }
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return crate::state::clean(path),
        }
    }
}

/// With a root configured, refuses a path that resolves (after `..` and symlinks) outside it.
pub(crate) fn confine(root: Option<&Path>, path: &Path) -> Result<(), PathError> {
    let Some(root) = root else { return Ok(()) };
    let real_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let lexical = crate::state::clean(path);
    let real = real_path(&lexical);
    if real.starts_with(&real_root)
        && lexical
            .components()
            .all(|c| !matches!(c, Component::ParentDir))
    {
        Ok(())
    } else {
        Err(PathError::OutsideRoot(format!(
            "path '{}' is outside the daemon's root '{}'",
            path.display(),
            root.display()
        )))
    }
}

/// Changes the owner of `path` (not following symlinks) to `user` when the daemon runs as root.
pub(crate) fn chown_to(state: &State, user: &User, path: &Path) -> io::Result<()> {
    if state.is_root() {
        std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid))?;
    }
    Ok(())
}

/// Creates `dir` and its missing parents with mode 0755, each owned by `user`. Existing
/// directories are left as they are. A non-directory in the way fails with `NotADirectory`
/// (or `AlreadyExists` for `dir` itself).
pub(crate) fn make_dirs(state: &State, user: &User, dir: &Path) -> io::Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("'{}' exists and is not a directory", dir.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(parent) = dir.parent() {
        make_dirs(state, user, parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => chown_to(state, user, dir),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}
