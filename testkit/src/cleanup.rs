//! Run prefixes, their owner records, and removal of what crashed runs left.
//!
//! A run prefix is `mlb<N>` (N = pid % 10000, bumped while taken). Before a
//! topology creates anything, it records its owner (pid and start time) in
//! `/run/metallb-testkit/owners/<prefix>` (created exclusively, so two runs
//! never share a prefix). A prefix whose owner is gone, or that has
//! namespaces but no owner record, is stale: its processes are killed, its
//! namespaces deleted, its state removed.

use std::path::PathBuf;

use anyhow::Context;

use crate::Result;
use crate::netns::Netns;
use crate::process::{pid_alive, pid_start_time};

/// Root of the kit's runtime state (tmpfs).
pub const STATE_ROOT: &str = "/run/metallb-testkit";

fn owners_dir() -> PathBuf {
    PathBuf::from(STATE_ROOT).join("owners")
}

/// The per-run state directory of `prefix` (daemon dirs, sockets, logs).
pub fn state_dir(prefix: &str) -> PathBuf {
    PathBuf::from(STATE_ROOT).join(prefix)
}

/// Creates `dir` and its missing parents with mode 0755 whatever the umask
/// (FRR's daemons run as user `frr` and must reach their directory).
pub fn create_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true).mode(0o755);
    b.create(dir)?;
    // DirBuilder's mode is filtered by the umask: set it explicitly on the
    // kit's own directories.
    use std::os::unix::fs::PermissionsExt;
    let mut p = Some(dir);
    while let Some(d) = p {
        if !d.starts_with(STATE_ROOT) {
            break;
        }
        let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755));
        p = d.parent();
    }
    Ok(())
}

/// Whether `s` looks like a run prefix: `mlb` followed by 1-4 digits.
pub fn is_prefix(s: &str) -> bool {
    s.strip_prefix("mlb")
        .is_some_and(|d| (1..=4).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The run prefix of a kit namespace name (`mlb123-node-1` -> `mlb123`).
pub fn prefix_of(name: &str) -> Option<&str> {
    let (p, rest) = name.split_once('-')?;
    (is_prefix(p) && !rest.is_empty()).then_some(p)
}

/// Whether the owner recorded for `prefix` is a live process (and the same
/// process that wrote the record, not a later one with the same pid).
pub fn owner_alive(prefix: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(owners_dir().join(prefix)) else {
        return false;
    };
    let mut it = text.split_whitespace();
    let pid: Option<u32> = it.next().and_then(|s| s.parse().ok());
    let start: Option<u64> = it.next().and_then(|s| s.parse().ok());
    match pid {
        Some(pid) => pid_alive(pid) && (start.is_none() || pid_start_time(pid) == start),
        None => false,
    }
}

/// Claims a fresh run prefix for this process and records the owner.
pub(crate) fn claim_prefix() -> Result<String> {
    create_dir(&owners_dir())
        .with_context(|| format!("cannot create {}", owners_dir().display()))?;
    let me = std::process::id();
    let record = format!("{me} {}\n", pid_start_time(me).unwrap_or(0));
    // The record is written to a private file first and then hard-linked to
    // its final name: the link either fails (taken) or creates a complete
    // record, so nobody ever reads a half-written one.
    let tmp = owners_dir().join(format!(".claim-{me}"));
    std::fs::write(&tmp, &record).with_context(|| format!("cannot write {}", tmp.display()))?;
    let result = claim_with(&tmp, me);
    let _ = std::fs::remove_file(&tmp);
    result
}

fn claim_with(tmp: &std::path::Path, me: u32) -> Result<String> {
    let existing = kit_namespaces()?;
    let base = me % 10000;
    for i in 0..10000 {
        let prefix = format!("mlb{}", (base + i) % 10000);
        let path = owners_dir().join(&prefix);
        match std::fs::hard_link(tmp, &path) {
            Ok(()) => {
                // Namespaces of this prefix without an owner are leftovers.
                if existing
                    .iter()
                    .any(|n| prefix_of(n) == Some(prefix.as_str()))
                {
                    remove_prefix(&prefix, false)?;
                }
                return Ok(prefix);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if owner_alive(&prefix) {
                    continue;
                }
                // The recorded owner is gone: a crashed run's prefix. Take
                // it over if nobody else does first.
                remove_prefix(&prefix, true)?;
                if std::fs::hard_link(tmp, &path).is_ok() {
                    return Ok(prefix);
                }
            }
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
        }
    }
    anyhow::bail!("no free run prefix (mlb0..mlb9999 are all taken)")
}

/// Releases a prefix claimed by this process (its namespaces must be gone).
pub(crate) fn release_prefix(prefix: &str) {
    let _ = std::fs::remove_file(owners_dir().join(prefix));
}

/// Every namespace whose name carries a kit run prefix.
pub fn kit_namespaces() -> Result<Vec<String>> {
    Ok(Netns::list()?
        .into_iter()
        .filter(|n| prefix_of(n).is_some())
        .collect())
}

/// Removes everything of every run prefix whose owner is no longer alive:
/// kills the processes in its namespaces, deletes the namespaces, removes its
/// state (`/run/metallb-testkit/<prefix>`, `/run/frr/<prefix>-*`). Returns
/// the prefixes it removed. Live runs (of this or other processes) are left.
pub fn cleanup_stale() -> Result<Vec<String>> {
    let mut prefixes: Vec<String> = kit_namespaces()?
        .iter()
        .filter_map(|n| prefix_of(n).map(str::to_string))
        .collect();
    if let Ok(rd) = std::fs::read_dir(owners_dir()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if is_prefix(&name) {
                prefixes.push(name);
            } else if let Some(pid) = name
                .strip_prefix(".claim-")
                .and_then(|p| p.parse::<u32>().ok())
                && !pid_alive(pid)
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(STATE_ROOT) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if is_prefix(&name) {
                prefixes.push(name);
            }
        }
    }
    prefixes.sort();
    prefixes.dedup();
    let mut removed = Vec::new();
    for p in prefixes {
        if owner_alive(&p) {
            continue;
        }
        eprintln!("testkit: removing leftovers of stale run prefix {p}");
        remove_prefix(&p, true)?;
        removed.push(p);
    }
    Ok(removed)
}

/// Kills processes in, and deletes, every namespace of `prefix`, and removes
/// its state; with `owner_record`, also its owner record.
pub(crate) fn remove_prefix(prefix: &str, owner_record: bool) -> Result<()> {
    for name in kit_namespaces()? {
        if prefix_of(&name) == Some(prefix) {
            let ns = Netns::existing(&name);
            ns.kill_all()?;
            ns.delete()?;
        }
    }
    let _ = std::fs::remove_dir_all(state_dir(prefix));
    remove_frr_pathspaces(prefix);
    if owner_record {
        let _ = std::fs::remove_file(owners_dir().join(prefix));
    }
    Ok(())
}

/// FRR creates `/run/frr/<instance>` for `-N <instance>`; ours are
/// `<prefix>-<namespace>`.
pub(crate) fn remove_frr_pathspaces(prefix: &str) {
    if let Ok(rd) = std::fs::read_dir("/run/frr") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if prefix_of(&name) == Some(prefix) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert!(is_prefix("mlb1") && is_prefix("mlb9999"));
        assert!(!is_prefix("mlb") && !is_prefix("mlb12345") && !is_prefix("mlbx"));
        assert_eq!(prefix_of("mlb42-node-1"), Some("mlb42"));
        assert_eq!(prefix_of("mlb42-"), None);
        assert_eq!(prefix_of("other-node-1"), None);
    }
}
