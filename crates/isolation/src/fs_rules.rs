//! Landlock rules for the `base` template, installed by the sandbox's init in the program's
//! process (as root of the user namespace, so without `no_new_privs`: setuid `sudo` keeps
//! working) before the seccomp filter and `execveat`; inherited and irreversible.
//!
//! Writing (creating, removing, renaming, truncating, writing files, making nodes) is allowed
//! only beneath the sandbox's writable places; everywhere else it fails with `EACCES`, even for
//! the sandbox's root and even where the mount itself is writable (the root tmpfs) or was
//! remounted read-write. A Landlock-restricted process also cannot change its mounts (no
//! `mount`, `umount`, `pivot_root`), so the read-only mounts cannot be undone from inside.
//! Reading is not restricted by these rules (the mounts decide what is visible).

use landlock::{
    ABI, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus,
};

/// Where a sandbox of the `base` template may write.
pub(crate) const WRITABLE: [&str; 7] = [
    "/home", "/tmp", "/root", "/run", "/var/tmp", "/dev", "/proc",
];

/// Installs the rules on the calling thread; returns whether they are fully, partially or not
/// enforced by this kernel (`Err` only when installing failed).
pub(crate) fn install() -> Result<&'static str, String> {
    let abi = ABI::V5;
    let write = AccessFs::from_write(abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(write)
        .map_err(|e| format!("landlock: {e}"))?
        .create()
        .map_err(|e| format!("landlock: {e}"))?;
    for dir in WRITABLE {
        let Ok(fd) = PathFd::new(dir) else { continue };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, write))
            .map_err(|e| format!("landlock rule for {dir}: {e}"))?;
    }
    let status = ruleset
        .no_new_privs(false)
        .restrict_self()
        .map_err(|e| format!("landlock: {e}"))?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => "fully enforced",
        RulesetStatus::PartiallyEnforced => "partially enforced",
        RulesetStatus::NotEnforced => "not enforced",
    })
}
