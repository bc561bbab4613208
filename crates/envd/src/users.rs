//! Unix accounts: lookup, Basic-auth user selection, and what a child process needs to switch
//! to a user.

use std::path::PathBuf;

use nix::unistd::{Gid, Uid};

/// A resolved account that commands (and file operations) run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    /// Account name, as given to `USER`/`LOGNAME`.
    pub(crate) name: String,
    /// Numeric user id.
    pub(crate) uid: u32,
    /// Primary group id.
    pub(crate) gid: u32,
    /// Home directory (`HOME`).
    pub(crate) home: PathBuf,
    /// Supplementary groups (from `getgrouplist`), computed in the parent so the child only
    /// calls async-signal-safe functions.
    pub(crate) groups: Vec<u32>,
}

impl User {
    /// Looks an account up by name in the system database.
    pub(crate) fn lookup(name: &str) -> Option<User> {
        let u = nix::unistd::User::from_name(name).ok().flatten()?;
        Some(Self::from_nix(u))
    }

    /// The account the daemon itself runs as.
    pub(crate) fn current() -> User {
        let uid = Uid::current();
        match nix::unistd::User::from_uid(uid).ok().flatten() {
            Some(u) => Self::from_nix(u),
            None => User {
                name: std::env::var("USER").unwrap_or_else(|_| uid.to_string()),
                uid: uid.as_raw(),
                gid: Gid::current().as_raw(),
                home: std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("/")),
                groups: Vec::new(),
            },
        }
    }

    fn from_nix(u: nix::unistd::User) -> User {
        let groups = std::ffi::CString::new(u.name.as_bytes())
            .ok()
            .and_then(|c| nix::unistd::getgrouplist(&c, u.gid).ok())
            .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_default();
        User {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            home: u.dir,
            groups,
        }
    }
}
