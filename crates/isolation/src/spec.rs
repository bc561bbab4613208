//! What a sandbox is made of: the public [`SandboxSpec`] and the internal description the
//! re-executed child receives.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The sandbox's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub enum Network {
    /// Its own network namespace with only a loopback interface: no traffic leaves it.
    None,
    /// Its own network namespace with outbound access through a user-mode NAT helper
    /// (`slirp4netns` or `pasta`) that cannot reach the host's loopback. E2B's default
    /// (`allow_internet_access` is true there).
    #[default]
    Internet,
    /// The host's network namespace, shared (explicit; the sandbox can reach every host port).
    Host,
}

impl std::str::FromStr for Network {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::None),
            "internet" => Ok(Self::Internet),
            "host" => Ok(Self::Host),
            other => Err(format!(
                "unknown network {other:?}: expected none, internet or host"
            )),
        }
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Internet => "internet",
            Self::Host => "host",
        })
    }
}

/// Where the sandbox's root filesystem comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub enum Template {
    /// The host's system directories (`/usr` and the `/bin`, `/lib*`, `/sbin` next to it)
    /// read-only, the host's `/etc` read-only with the sandbox's own `passwd`, `group`,
    /// `shadow`, `sudoers`, `hosts`, `hostname` and `resolv.conf` over it, and a private
    /// writable `/home/user`, `/tmp`, `/root`, `/run` and `/var/tmp`.
    #[default]
    Base,
    /// A root filesystem directory (for example a `docker export` tarball unpacked with
    /// `tar -x`), shared read-only; each sandbox writes to its own overlay layer.
    Dir(PathBuf),
    /// A tarball of a root filesystem (`docker export`; plain or gzip-compressed), unpacked
    /// once into the [`TemplateCache`](crate::TemplateCache) under its sha256 and then used as
    /// a [`Dir`](Self::Dir) template.
    Archive(PathBuf),
    /// An OCI image layout directory (`oci-layout`, `index.json`, `blobs/`): the single
    /// manifest, or the one for linux on this machine's architecture, its layers applied in
    /// order (whiteouts honoured) once into the [`TemplateCache`](crate::TemplateCache) under
    /// the manifest's digest, then used as a [`Dir`](Self::Dir) template.
    OciLayout(PathBuf),
}

impl std::str::FromStr for Template {
    type Err = String;
    /// `base`; a path ending in `.tar`, `.tar.gz` or `.tgz`, or naming a regular file:
    /// [`Archive`](Self::Archive); a directory with an `oci-layout` file:
    /// [`OciLayout`](Self::OciLayout); any other path: [`Dir`](Self::Dir).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "base" {
            Ok(Self::Base)
        } else if s.is_empty() {
            Err("empty template: expected base, a directory, a tarball or an OCI layout".into())
        } else {
            Ok(crate::template::template_from_path(s))
        }
    }
}

/// A host path shown read-only inside the sandbox (`--mount-ro HOST[:SANDBOX]`): for example
/// an agent installed under a host directory the template does not show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RoMount {
    /// The host path (a directory or a file); it must exist.
    pub host: PathBuf,
    /// Where it appears in the sandbox (absolute; default: the same path as on the host).
    pub sandbox: PathBuf,
}

impl RoMount {
    /// `host` shown at `sandbox` inside the sandbox.
    pub fn new(host: impl Into<PathBuf>, sandbox: impl Into<PathBuf>) -> Self {
        Self {
            host: host.into(),
            sandbox: sandbox.into(),
        }
    }

    /// `host` shown at the same path inside the sandbox.
    pub fn same_path(host: impl Into<PathBuf>) -> Self {
        let host = host.into();
        Self {
            sandbox: host.clone(),
            host,
        }
    }
}

impl std::str::FromStr for RoMount {
    type Err = String;
    /// Parses `HOST[:SANDBOX]`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (host, sandbox) = match s.split_once(':') {
            Some((h, t)) => (h, t),
            None => (s, s),
        };
        if !host.starts_with('/') || !sandbox.starts_with('/') {
            return Err(format!(
                "--mount-ro {s:?}: expected HOST[:SANDBOX] with absolute paths"
            ));
        }
        Ok(Self::new(host, sandbox))
    }
}

/// Everything that describes one sandbox: options, built with [`SandboxSpec::new`] and one
/// setter per field (docs/api-style.md); the struct is `#[non_exhaustive]`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SandboxSpec {
    /// The sandbox id: its hostname, and part of its cgroup's name. Letters, digits, `-`, `_`
    /// and `.`, at most 63 bytes.
    pub(crate) id: String,
    /// The network (default [`Network::Internet`]).
    pub(crate) network: Network,
    /// The root filesystem (default [`Template::Base`]).
    pub(crate) template: Template,
    /// Memory limit in MiB (default 2048), for the whole sandbox (cgroup), including its
    /// writable filesystem, which lives in memory.
    pub(crate) memory_mb: u64,
    /// CPU limit in CPUs (default: none).
    pub(crate) cpu_count: Option<f64>,
    /// Limit on processes and threads (default 1024).
    pub(crate) pids_max: u64,
    /// Size of the writable in-memory filesystem (`/home/user`, `/tmp`, …) in MiB. Default:
    /// the memory limit.
    pub(crate) writable_mb: Option<u64>,
    /// Extra environment of the program (in addition to `PATH`, `HOME=/root`, `HOSTNAME`).
    pub(crate) env: Vec<(String, String)>,
    /// Host paths shown read-only inside the sandbox (default: none).
    pub(crate) ro_mounts: Vec<RoMount>,
    /// Where archive templates are unpacked (default:
    /// [`TemplateCache::default`](crate::TemplateCache::default)).
    pub(crate) template_cache: Option<crate::TemplateCache>,
}

impl SandboxSpec {
    /// A sandbox with this id and the defaults (internet, base template, 2 GiB, 1024 pids).
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            network: Network::default(),
            template: Template::default(),
            memory_mb: 2048,
            cpu_count: None,
            pids_max: 1024,
            writable_mb: None,
            env: Vec::new(),
            ro_mounts: Vec::new(),
            template_cache: None,
        }
    }

    /// Where archive templates are unpacked (default:
    /// [`TemplateCache::default`](crate::TemplateCache::default)).
    pub fn template_cache(mut self, cache: crate::TemplateCache) -> Self {
        self.template_cache = Some(cache);
        self
    }

    /// Adds a host path shown read-only inside the sandbox (see [`RoMount`]).
    pub fn ro_mount(mut self, mount: RoMount) -> Self {
        self.ro_mounts.push(mount);
        self
    }

    /// The network (default [`Network::Internet`]).
    pub fn network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// The root filesystem (default [`Template::Base`]).
    pub fn template(mut self, template: Template) -> Self {
        self.template = template;
        self
    }

    /// Memory limit in MiB (default 2048), for the whole sandbox (cgroup), including its
    /// writable filesystem, which lives in memory.
    pub fn memory_mb(mut self, mb: u64) -> Self {
        self.memory_mb = mb;
        self
    }

    /// CPU limit in CPUs (default: none).
    pub fn cpu_count(mut self, cpus: Option<f64>) -> Self {
        self.cpu_count = cpus;
        self
    }

    /// Limit on processes and threads (default 1024).
    pub fn pids_max(mut self, max: u64) -> Self {
        self.pids_max = max;
        self
    }

    /// Size of the writable in-memory filesystem (`/home/user`, `/tmp`, …) in MiB. Default:
    /// the memory limit.
    pub fn writable_mb(mut self, mb: u64) -> Self {
        self.writable_mb = Some(mb);
        self
    }

    /// Adds an environment variable for the program.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
}

/// Which user-mode NAT helper gives the sandbox its outbound network.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) enum Nat {
    Slirp4netns(PathBuf),
    Pasta(PathBuf),
}

/// What the re-executed child needs (serialized as JSON on its command line).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ChildSpec {
    pub id: String,
    pub ids: IdMap,
    pub network: Network,
    pub nat: Option<Nat>,
    pub template: Template,
    pub program: PathBuf,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub keep_fds: Vec<i32>,
    pub status_fd: i32,
    pub cgroup_procs: Vec<PathBuf>,
    pub writable_mb: u64,
    /// When no cgroup limits memory: `RLIMIT_AS` in bytes for every process.
    pub rlimit_as: Option<u64>,
    /// When no cgroup limits processes: `RLIMIT_NPROC` (processes and threads of the
    /// sandbox's user, counted inside its user namespace).
    #[serde(default)]
    pub rlimit_nproc: Option<u64>,
    /// Read-only binds: (canonical host path, path in the sandbox).
    #[serde(default)]
    pub ro_mounts: Vec<(PathBuf, PathBuf)>,
    /// `E2B_ISOLATION_TIMINGS` was set: CLOCK_MONOTONIC (ns) when `spawn` began; each stage
    /// prints its offset from it on stderr.
    #[serde(default)]
    pub timings_from: Option<u64>,
}

/// How the sandbox's user namespace maps ids to the host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdMap {
    /// A root supervisor: sandbox ids `0..65536` are host ids `base..base + 65536`, which no
    /// host account owns. The sandbox has a root (for `sudo`) and a `user`.
    Range {
        /// The host id of the sandbox's id 0.
        base: u32,
    },
    /// An unprivileged supervisor (the kernel lets it map only its own ids): the supervisor's
    /// uid and gid are the sandbox's `user` (1000), and no other id exists inside: no root, no
    /// `sudo`. The sandbox keeps its own namespaces, root filesystem and (rlimit) limits.
    Single {
        /// The supervisor's uid on the host.
        uid: u32,
        /// The supervisor's gid on the host.
        gid: u32,
    },
}

impl IdMap {
    /// The host uid of sandbox uid `uid`, when it is mapped.
    pub fn host_uid(&self, uid: u32) -> Option<u32> {
        match *self {
            Self::Range { base } => (uid < ID_COUNT).then(|| base + uid),
            Self::Single { uid: host, .. } => (uid == SANDBOX_USER_ID).then_some(host),
        }
    }

    /// Whether the sandbox has a root account (only a root supervisor can give it one).
    pub fn has_root(&self) -> bool {
        matches!(self, Self::Range { .. })
    }
}

/// Number of ids mapped into each sandbox's user namespace (0..65536 inside).
pub(crate) const ID_COUNT: u32 = 65536;
/// The uid/gid of `user` inside the sandbox.
pub const SANDBOX_USER_ID: u32 = 1000;
