//! Which host directories a command needs inside a sandbox whose template hides them (an agent
//! installed under `/work/…/node_modules`, a Python venv, an interpreter under `~/.pyenv`).

use std::path::{Path, PathBuf};

/// Directories the `base` template shows anyway (the host's, read-only).
const SHOWN: [&str; 8] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// Directories of the sandbox's own (private or special) that a bind must never cover whole.
const PRIVATE: [&str; 14] = [
    "/",
    "/home",
    "/home/user",
    "/root",
    "/tmp",
    "/run",
    "/var",
    "/var/tmp",
    "/proc",
    "/dev",
    "/sys",
    "/opt",
    "/mnt",
    "/srv",
];

/// The host paths to show read-only in a sandbox so that `command` can run there: the
/// program (its first word, looked up in `PATH` when it has no `/`) and every absolute path
/// among its words that exists on the host, each widened to its *package directory*:
///
/// - inside a Python virtual environment (an ancestor has `pyvenv.cfg`): the environment;
/// - inside `node_modules`: the directory that holds the outermost `node_modules`;
/// - a file in a `bin` directory: the prefix above it (`…/versions/3.11.7` for
///   `…/versions/3.11.7/bin/python3.11`, so its `lib` comes along);
/// - else the file's directory (or the directory itself).
///
/// Symlinks are followed too (a venv's `bin/python` points at the interpreter's own
/// prefix), so both the link's package and its target's are returned. Paths the `base`
/// template shows anyway (`/usr`, `/bin`, `/lib*`, `/etc`) are left out; a package directory
/// that would cover one of the sandbox's own directories (`/tmp`, `/home/user`, `/root`, …)
/// is narrowed to the file itself. Returns canonical paths, sorted, none inside another.
///
/// A one-element `command` is a shell line (split on whitespace, quotes removed at the ends
/// of words); more elements are a program and its arguments.
pub fn command_host_paths(command: &[String]) -> Vec<PathBuf> {
    let words: Vec<String> = match command {
        [line] => line
            .split_whitespace()
            .map(|w| w.trim_matches(|c| c == '\'' || c == '"').to_string())
            .collect(),
        _ => command.to_vec(),
    };
    let mut candidates: Vec<PathBuf> = Vec::new();
    // The program: the first word that is not an environment assignment.
    if let Some(program) = words.iter().find(|w| !is_assignment(w)) {
        if program.contains('/') {
            candidates.push(PathBuf::from(program));
        } else if let Some(found) = crate::which(program) {
            candidates.push(found);
        }
    }
    for w in &words {
        let w = w.split_once('=').map_or(w.as_str(), |(_, v)| v);
        if w.starts_with('/') {
            candidates.push(PathBuf::from(w));
        }
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for c in candidates {
        if !c.is_absolute() || std::fs::symlink_metadata(&c).is_err() {
            continue;
        }
        let mut add = |p: Option<PathBuf>| {
            if let Some(p) = p.and_then(|p| p.canonicalize().ok())
                && !SHOWN.iter().any(|s| p.starts_with(s))
            {
                out.push(p);
            }
        };
        add(package_dir(&c));
        if let Ok(real) = c.canonicalize()
            && real != c
        {
            add(package_dir(&real));
        }
    }
    out.sort();
    out.dedup();
    let all = out.clone();
    out.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    out
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

/// The directory to show for `path` (see [`command_host_paths`]); `None` when nothing safe
/// can be shown.
fn package_dir(path: &Path) -> Option<PathBuf> {
    let is_dir = path.is_dir();
    let mut chosen = None;
    for anc in path.ancestors().skip(usize::from(!is_dir)) {
        if anc.join("pyvenv.cfg").is_file() {
            chosen = Some(anc.to_path_buf());
            break;
        }
    }
    if chosen.is_none() {
        // The outermost node_modules.
        chosen = path
            .ancestors()
            .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
            .last()
            .and_then(Path::parent)
            .map(Path::to_path_buf);
    }
    if chosen.is_none() && !is_dir {
        let parent = path.parent()?;
        chosen = Some(if parent.file_name().is_some_and(|n| n == "bin") {
            parent.parent()?.to_path_buf()
        } else {
            parent.to_path_buf()
        });
    }
    let dir = chosen.unwrap_or_else(|| path.to_path_buf());
    let covers_private = PRIVATE.iter().any(|p| Path::new(p) == dir);
    if covers_private {
        // Never shadow the sandbox's own directory: show the file alone.
        return (!is_dir && !PRIVATE.iter().any(|p| Path::new(p) == path))
            .then(|| path.to_path_buf());
    }
    Some(dir)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn tree() -> tempfile_like::Dir {
        tempfile_like::Dir::new()
    }

    /// A throwaway directory under /tmp (no extra dev-dependency).
    mod tempfile_like {
        pub(super) struct Dir(pub(super) std::path::PathBuf);
        impl Dir {
            pub(super) fn new() -> Self {
                let p = std::env::temp_dir().join(format!(
                    "e2b-iso-paths-{}-{:?}",
                    std::process::id(),
                    std::thread::current().id()
                ));
                let _ = std::fs::remove_dir_all(&p);
                std::fs::create_dir_all(&p).unwrap();
                Self(p.canonicalize().unwrap())
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"").unwrap();
    }

    #[test]
    fn venv_node_modules_and_prefix_are_widened() {
        let t = tree();
        let r = &t.0;
        // An interpreter prefix, a venv whose python links to it, a script elsewhere.
        let interp = r.join("pyenv/versions/3.11/bin/python3.11");
        touch(&interp);
        let venv = r.join("agents/venv");
        touch(&venv.join("pyvenv.cfg"));
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::os::unix::fs::symlink(&interp, venv.join("bin/python")).unwrap();
        let script = r.join("agents/python/examples/echo.py");
        touch(&script);
        let js = r.join("agents/npm/node_modules/pkg/dist/cli.js");
        touch(&js);
        let line = format!(
            "{} {} --flag {}",
            venv.join("bin/python").display(),
            script.display(),
            js.display()
        );
        let got = command_host_paths(&[line]);
        assert_eq!(
            got,
            vec![
                r.join("agents/npm"),
                r.join("agents/python/examples"),
                r.join("agents/venv"),
                r.join("pyenv/versions/3.11"),
            ]
        );
    }

    #[test]
    fn system_paths_and_missing_paths_are_left_out() {
        let got =
            command_host_paths(&["/bin/sh".into(), "-c".into(), "/definitely/not/here".into()]);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_file_directly_in_a_private_directory_is_shown_alone() {
        assert_eq!(
            package_dir(Path::new("/tmp/agent.sh")),
            Some(PathBuf::from("/tmp/agent.sh"))
        );
        assert_eq!(package_dir(Path::new("/tmp")), None);
        assert_eq!(
            package_dir(Path::new("/root/bin/x")),
            Some(PathBuf::from("/root/bin/x"))
        );
    }
}
