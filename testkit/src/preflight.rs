//! Checks that a test can run here: root, the tools, and no routing daemon
//! in the root namespace.

use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::Result;
use crate::process::{Signal, kill_pid, pid_alive, wait_pid_gone};

/// Each tool the kit runs, and the Debian package that has it.
pub const REQUIRED: [(&str, &str); 17] = [
    ("ip", "iproute2"),
    ("bridge", "iproute2"),
    ("sysctl", "procps"),
    ("nft", "nftables"),
    ("tcpdump", "tcpdump"),
    ("vtysh", "frr"),
    ("/usr/lib/frr/zebra", "frr"),
    ("/usr/lib/frr/bgpd", "frr"),
    ("/usr/lib/frr/bfdd", "frr"),
    ("/usr/lib/frr/staticd", "frr"),
    ("bird", "bird2"),
    ("birdc", "bird2"),
    ("gobgpd", "gobgpd"),
    ("gobgp", "gobgpd"),
    ("arping", "iputils-arping"),
    ("ndisc6", "ndisc6"),
    ("chown", "coreutils"),
];

/// Executables of the routing daemons that must not run in the root
/// namespace.
pub const DAEMON_EXES: [&str; 9] = [
    "/usr/lib/frr/zebra",
    "/usr/lib/frr/bgpd",
    "/usr/lib/frr/bfdd",
    "/usr/lib/frr/staticd",
    "/usr/lib/frr/watchfrr",
    "/usr/lib/frr/mgmtd",
    "/usr/sbin/bird",
    "/usr/sbin/bird6",
    "/usr/bin/gobgpd",
];

/// Pid files the Debian services use when started without systemd.
const SERVICE_PID_FILES: [&str; 9] = [
    "/run/frr/watchfrr.pid",
    "/run/frr/zebra.pid",
    "/run/frr/bgpd.pid",
    "/run/frr/bfdd.pid",
    "/run/frr/staticd.pid",
    "/run/frr/mgmtd.pid",
    "/run/bird/bird.pid",
    "/run/bird.pid",
    "/run/gobgpd.pid",
];

/// Fails unless the effective user is root (tests need it: fail, not skip).
pub fn require_root() -> Result<()> {
    if !rustix::process::geteuid().is_root() {
        bail!(
            "the network test kit needs root (namespaces, veths, nftables); run the tests as root"
        );
    }
    Ok(())
}

/// Finds `tool` (an absolute path, or a name looked up on PATH).
pub fn which(tool: &str) -> Option<PathBuf> {
    if tool.starts_with('/') {
        let p = PathBuf::from(tool);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Checks root, every tool in [`REQUIRED`] and that no routing daemon runs
/// in the root namespace (stopping the Debian services first: with systemd
/// `systemctl disable --now frr bird gobgpd`, without it through their pid
/// files). Fails loudly, naming what is missing and the apt packages.
pub fn preflight() -> Result<()> {
    require_root()?;
    let missing: Vec<(&str, &str)> = REQUIRED
        .iter()
        .copied()
        .filter(|(tool, _)| which(tool).is_none())
        .collect();
    if !missing.is_empty() {
        let mut pkgs: Vec<&str> = missing.iter().map(|(_, p)| *p).collect();
        pkgs.sort();
        pkgs.dedup();
        bail!(
            "missing tools: {}\ninstall them with: apt-get install -y {}",
            missing
                .iter()
                .map(|(t, p)| format!("{t} (package {p})"))
                .collect::<Vec<_>>()
                .join(", "),
            pkgs.join(" ")
        );
    }
    stop_root_services()?;
    let running = root_namespace_daemons();
    if !running.is_empty() {
        bail!(
            "routing daemons run in the root namespace (they would answer lab traffic or hold port 179): {}\n\
             stop them (systemctl disable --now frr bird gobgpd, or kill their pids) and run again",
            running
                .iter()
                .map(|(pid, exe)| format!("pid {pid} {exe}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

/// Stops and disables the Debian services of frr, bird2 and gobgpd.
pub fn stop_root_services() -> Result<()> {
    if Path::new("/run/systemd/system").is_dir() {
        for unit in ["frr", "bird", "gobgpd"] {
            // A unit that does not exist is not an error here.
            let _ = crate::cmd::output(&mut crate::cmd::command(
                "systemctl",
                &["disable", "--now", unit],
            ));
        }
        return Ok(());
    }
    // No systemd: the init scripts leave pid files under /run. Only a pid
    // that is a routing daemon in the root namespace is stopped (a stale
    // pid file may name an unrelated process by now).
    let root = root_net_ns();
    for f in SERVICE_PID_FILES {
        let Some(pid) = crate::process::read_pid_file(Path::new(f)) else {
            continue;
        };
        if pid_alive(pid)
            && net_ns_of(pid) == root
            && exe_of(pid).is_some_and(|e| DAEMON_EXES.contains(&e.as_str()))
        {
            eprintln!("testkit: stopping root-namespace daemon pid {pid} (from {f})");
            kill_pid(pid, Signal::TERM);
            if !wait_pid_gone(pid, std::time::Duration::from_secs(5)) {
                kill_pid(pid, Signal::KILL);
                wait_pid_gone(pid, std::time::Duration::from_secs(2));
            }
        }
    }
    Ok(())
}

fn net_ns_of(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()
}

/// The root network namespace: that of pid 1 when readable (it is not in
/// some sandboxes), else our own (the kit itself never leaves the root
/// namespace; only its children enter lab namespaces).
fn root_net_ns() -> Option<PathBuf> {
    net_ns_of(1).or_else(|| std::fs::read_link("/proc/self/ns/net").ok())
}

fn exe_of(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| {
            p.to_string_lossy()
                .trim_end_matches(" (deleted)")
                .to_string()
        })
}

/// Routing daemons (by executable path) whose network namespace is the
/// root namespace: `(pid, exe)`.
pub fn root_namespace_daemons() -> Vec<(u32, String)> {
    let root = root_net_ns();
    let mut r = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return r;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(exe) = exe_of(pid)
            && DAEMON_EXES.contains(&exe.as_str())
            && net_ns_of(pid) == root
            && root.is_some()
        {
            r.push((pid, exe));
        }
    }
    r
}
