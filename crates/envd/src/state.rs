//! State shared by every service of the daemon: access token, default user and workdir, the
//! global environment, limits. The Process service, the REST routes and (later) the Filesystem
//! service all read it through an `Arc<State>`.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http::HeaderMap;

use crate::config::EnvdConfig;
pub(crate) use crate::users::User;

/// Shared daemon state. Cheap to read; the mutable parts sit behind locks that are never held
/// across an `await`.
#[derive(Debug)]
pub(crate) struct State {
    access_token: RwLock<Option<String>>,
    default_user: RwLock<Option<String>>,
    default_workdir: RwLock<Option<PathBuf>>,
    env_vars: RwLock<HashMap<String, String>>,
    user_alias: Option<String>,
    current: User,
    is_root: bool,
    envd_version: String,
    keepalive: Duration,
    exited_retention: Duration,
    root: Option<PathBuf>,
    limits: Limits,
    /// [`EnvdConfig::limits_note`], for `/health`.
    limits_note: Option<String>,
    /// Serialises `POST /init` (check the token, then change it).
    init_lock: std::sync::Mutex<()>,
}

/// The request limits of the REST routes, copied from the configuration.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub(crate) max_json_body_bytes: usize,
    pub(crate) max_multipart_parts: usize,
    pub(crate) max_multipart_header_bytes: usize,
    pub(crate) max_decompressed_bytes: u64,
    pub(crate) max_gzip_ratio: u64,
    pub(crate) signature_max_age: Option<Duration>,
    pub(crate) debug_panic_route: bool,
}

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    match lock.read() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

fn write<T>(lock: &RwLock<T>, value: T) {
    match lock.write() {
        Ok(mut g) => *g = value,
        Err(p) => *p.into_inner() = value,
    }
}

impl State {
    /// Builds the state from a configuration.
    pub(crate) fn new(config: &EnvdConfig) -> Arc<State> {
        let current = User::current();
        Arc::new(State {
            access_token: RwLock::new(config.access_token.clone().filter(|t| !t.is_empty())),
            default_user: RwLock::new(config.default_user.clone().filter(|u| !u.is_empty())),
            default_workdir: RwLock::new(config.default_workdir.clone()),
            env_vars: RwLock::new(config.env_vars.clone()),
            user_alias: config.user_alias.clone().filter(|a| !a.is_empty()),
            is_root: current.uid == 0,
            current,
            envd_version: config.envd_version.clone(),
            keepalive: config.keepalive,
            exited_retention: config.exited_retention,
            root: config.root.clone(),
            limits_note: config.limits_note.clone().filter(|n| !n.is_empty()),
            limits: Limits {
                max_json_body_bytes: config.max_json_body_bytes,
                max_multipart_parts: config.max_multipart_parts,
                max_multipart_header_bytes: config.max_multipart_header_bytes,
                max_decompressed_bytes: config.max_decompressed_bytes,
                max_gzip_ratio: config.max_gzip_ratio,
                signature_max_age: config.signature_max_age,
                debug_panic_route: config.debug_panic_route,
            },
            init_lock: std::sync::Mutex::new(()),
        })
    }

    /// The current access token, if one is set.
    pub(crate) fn access_token(&self) -> Option<String> {
        read(&self.access_token)
    }

    /// Sets (or, with `None` or an empty string, clears) the access token.
    pub(crate) fn set_access_token(&self, token: Option<String>) {
        write(&self.access_token, token.filter(|t| !t.is_empty()));
    }

    /// True when no token is set, or when `headers` carry the right `X-Access-Token`
    /// (compared in constant time).
    pub(crate) fn token_ok(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = self.access_token() else {
            return true;
        };
        match headers.get(e2b_envd_proto::wire::headers::ACCESS_TOKEN) {
            Some(v) => constant_time_eq(v.as_bytes(), expected.as_bytes()),
            None => false,
        }
    }

    /// True when a token is set and `headers` carry it (a caller that proved it holds it).
    pub(crate) fn token_presented(&self, headers: &HeaderMap) -> bool {
        self.access_token().is_some() && self.token_ok(headers)
    }

    /// The REST request limits.
    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Runs `f` with `POST /init` serialised against other `/init` calls.
    pub(crate) fn with_init_lock<T>(&self, f: impl FnOnce() -> T) -> T {
        let _guard = match self.init_lock.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f()
    }

    /// The user name used when a request names none.
    pub(crate) fn default_user_name(&self) -> String {
        read(&self.default_user).unwrap_or_else(|| {
            if self.is_root {
                "root".into()
            } else {
                self.current.name.clone()
            }
        })
    }

    /// Sets the default user (`POST /init` `defaultUser`).
    pub(crate) fn set_default_user(&self, user: String) {
        write(&self.default_user, Some(user));
    }

    /// The default working directory, if set.
    pub(crate) fn default_workdir(&self) -> Option<PathBuf> {
        read(&self.default_workdir)
    }

    /// Sets the default working directory (`POST /init` `defaultWorkdir`).
    pub(crate) fn set_default_workdir(&self, dir: PathBuf) {
        write(&self.default_workdir, Some(dir));
    }

    /// The global environment given to every command: `E2B_SANDBOX=true` plus the variables set
    /// by configuration or `POST /init` (those win).
    pub(crate) fn env_vars(&self) -> HashMap<String, String> {
        let mut env = HashMap::from([("E2B_SANDBOX".to_string(), "true".to_string())]);
        env.extend(read(&self.env_vars));
        env
    }

    /// Replaces the user-set global environment (`POST /init` `envVars`).
    pub(crate) fn set_env_vars(&self, vars: HashMap<String, String>) {
        write(&self.env_vars, vars);
    }

    /// Whether the daemon runs as root (and can therefore switch users).
    pub(crate) fn is_root(&self) -> bool {
        self.is_root
    }

    /// The account the daemon runs as.
    pub(crate) fn current_user(&self) -> &User {
        &self.current
    }

    /// The reported envd version.
    pub(crate) fn envd_version(&self) -> &str {
        &self.envd_version
    }

    /// Default keepalive interval for streams.
    pub(crate) fn keepalive(&self) -> Duration {
        self.keepalive
    }

    /// How long an exited process's end event is kept.
    pub(crate) fn exited_retention(&self) -> Duration {
        self.exited_retention
    }

    /// The configured filesystem root, if any (reserved for the Filesystem service).
    pub(crate) fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// Why limits are weaker than asked, when they are (shown by `/health`).
    pub(crate) fn limits_note(&self) -> Option<&str> {
        self.limits_note.as_deref()
    }

    /// Resolves the user a request runs as: the Basic-auth user name in `headers`
    /// (`Authorization: Basic base64("<name>:")`), else the default user.
    ///
    /// Errors carry envd's message (`invalid username: '<name>'`); callers map them to
    /// `unauthenticated` (RPC) or 401 (REST).
    pub(crate) fn user_from_headers(&self, headers: &HeaderMap) -> Result<User, String> {
        let value = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let name = match value {
            Some(v) => e2b_envd_proto::wire::basic_auth_user(v).map_err(|e| e.to_string())?,
            None => None,
        };
        self.resolve_user(name.as_deref())
    }

    /// Resolves a user by name (`None` = the default user).
    pub(crate) fn resolve_user(&self, name: Option<&str>) -> Result<User, String> {
        let name = match name {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => self.default_user_name(),
        };
        let is_alias = self.user_alias.as_deref() == Some(name.as_str());
        if !self.is_root {
            if name == self.current.name || is_alias {
                return Ok(self.current.clone());
            }
            return Err(format!(
                "invalid username: '{name}' (the daemon runs as '{}' without root, so it can only run as that user{})",
                self.current.name,
                self.user_alias
                    .as_deref()
                    .map(|a| format!(" or its alias '{a}'"))
                    .unwrap_or_default()
            ));
        }
        match User::lookup(&name) {
            Some(u) => Ok(u),
            None if is_alias => Ok(self.current.clone()),
            None => Err(format!("invalid username: '{name}'")),
        }
    }

    /// envd's `ExpandAndResolve`: empty → default workdir, else the user's home; `~` and `~/x`
    /// → the home; other relative paths are joined to the home; the result is cleaned
    /// lexically (no symlink resolution).
    pub(crate) fn resolve_path(&self, user: &User, path: &str) -> Result<PathBuf, String> {
        if path.is_empty() {
            return Ok(self.default_workdir().unwrap_or_else(|| user.home.clone()));
        }
        let expanded = if path == "~" {
            user.home.clone()
        } else if let Some(rest) = path.strip_prefix("~/") {
            user.home.join(rest)
        } else if path.starts_with('~') {
            return Err(format!(
                "path '{path}' uses ~user expansion, which is not supported"
            ));
        } else {
            let p = Path::new(path);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                user.home.join(p)
            }
        };
        Ok(clean(&expanded))
    }
}

/// Lexically cleans a path: removes `.`, resolves `..` against the preceding component.
pub(crate) fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("/");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    if out.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out
    }
}

/// Compares two byte strings in time independent of where they differ (`subtle`; a length
/// difference is not hidden, which is fine for tokens and signatures of public length).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ct_eq() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn cleans() {
        assert_eq!(clean(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(clean(Path::new("/..")), PathBuf::from("/"));
    }
}
