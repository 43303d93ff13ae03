//! A network namespace handle: run commands in it, configure it, inspect it.

use std::ffi::OsStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use ipnet::IpNet;
use serde_json::Value;

use crate::Result;
use crate::cmd::{self, Output};
use crate::process::{AsyncNsChild, NsChild, Signal, kill_pid, pid_alive};

/// A named network namespace (`/run/netns/<name>`). Cloning the handle does
/// not clone the namespace; [`crate::Topology`] owns and deletes its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Netns {
    name: String,
    short: String,
    state_dir: PathBuf,
}

static SPAWNED: AtomicUsize = AtomicUsize::new(0);

/// One entry of the neighbour table (`ip neigh`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NeighEntry {
    pub dst: IpAddr,
    pub dev: String,
    /// Link-layer address, lower case `aa:bb:...` (None while incomplete).
    pub lladdr: Option<String>,
    /// States as `ip` prints them: `REACHABLE`, `STALE`, `FAILED`, ...
    pub state: Vec<String>,
}

/// Moves the calling thread, and only it, into the network namespace
/// `/run/netns/<name>`: sockets it creates from then on belong to that
/// namespace (and keep it after the thread ends). Used to run an in-process
/// driver in a node namespace, or to bind a listener there.
pub fn enter_thread(name: &str) -> Result<()> {
    use std::os::fd::AsFd;
    let path = format!("/run/netns/{name}");
    let f = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
    rustix::thread::move_into_link_name_space(
        f.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .with_context(|| format!("entering {path} (setns)"))?;
    Ok(())
}

impl Netns {
    /// Moves the calling thread into this namespace ([`enter_thread`]).
    pub fn enter_this_thread(&self) -> Result<()> {
        enter_thread(&self.name)
    }

    /// Creates `/run/netns/<name>` and brings its loopback up.
    pub(crate) fn create(name: &str, short: &str, state_dir: PathBuf) -> Result<Netns> {
        cmd::run(&mut cmd::command("ip", &["netns", "add", name]))?;
        let ns = Netns {
            name: name.to_string(),
            short: short.to_string(),
            state_dir,
        };
        crate::cleanup::create_dir(&ns.state_dir)
            .with_context(|| format!("cannot create {}", ns.state_dir.display()))?;
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A handle on a namespace that already exists (not created or deleted
    /// by this handle). Its state directory is derived from its name.
    pub fn existing(name: &str) -> Netns {
        let (short, state_dir) = match crate::cleanup::prefix_of(name) {
            Some(p) => {
                let short = &name[p.len() + 1..];
                (short.to_string(), crate::cleanup::state_dir(p).join(short))
            }
            None => (
                name.to_string(),
                PathBuf::from(crate::cleanup::STATE_ROOT)
                    .join("other")
                    .join(name),
            ),
        };
        Netns {
            name: name.to_string(),
            short,
            state_dir,
        }
    }

    /// The names in `/run/netns` (`ip netns list`).
    pub fn list() -> Result<Vec<String>> {
        let out = cmd::run(&mut cmd::command("ip", &["netns", "list"]))?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect())
    }

    /// Whether `/run/netns/<name>` exists.
    pub fn exists(&self) -> bool {
        Path::new("/run/netns").join(&self.name).exists()
    }

    /// The full name, with the run prefix (`mlb123-node-1`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name inside the topology, without the run prefix (`node-1`).
    pub fn short_name(&self) -> &str {
        &self.short
    }

    /// A directory for this namespace's files (daemon state, logs); removed
    /// with the topology.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// `ip netns exec <name> <program>`: add arguments and run or spawn it.
    pub fn command<S: AsRef<OsStr>>(&self, program: S) -> Command {
        let mut c = Command::new("ip");
        c.arg("netns").arg("exec").arg(&self.name).arg(program);
        c
    }

    /// The tokio flavour of [`Netns::command`].
    pub fn tokio_command<S: AsRef<OsStr>>(&self, program: S) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("ip");
        c.arg("netns").arg("exec").arg(&self.name).arg(program);
        c
    }

    /// Runs `program args` in the namespace; returns stdout, fails on a
    /// non-zero exit (the error quotes stderr).
    pub fn run<S: AsRef<OsStr>>(&self, program: &str, args: &[S]) -> Result<String> {
        let mut c = self.command(program);
        c.args(args);
        cmd::run(&mut c)
    }

    /// Like [`Netns::run`] with an explicit bound.
    pub fn run_timeout<S: AsRef<OsStr>>(
        &self,
        program: &str,
        args: &[S],
        timeout: Duration,
    ) -> Result<String> {
        let mut c = self.command(program);
        c.args(args);
        cmd::run_timeout(&mut c, timeout)
    }

    /// Runs `program args` in the namespace; a non-zero exit is not an error.
    pub fn output<S: AsRef<OsStr>>(&self, program: &str, args: &[S]) -> Result<Output> {
        let mut c = self.command(program);
        c.args(args);
        cmd::output(&mut c)
    }

    /// Runs a shell script in the namespace (`sh -c`).
    pub fn sh(&self, script: &str) -> Result<String> {
        self.run("sh", &["-c", script])
    }

    /// `ip -n <name> args...`.
    pub fn ip<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<String> {
        let mut c = Command::new("ip");
        c.arg("-n").arg(&self.name).args(args);
        cmd::run(&mut c)
    }

    /// `ip -j -n <name> args...`, parsed.
    pub fn ip_json<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Value> {
        let mut c = Command::new("ip");
        c.arg("-j").arg("-n").arg(&self.name).args(args);
        let out = cmd::run(&mut c)?;
        if out.trim().is_empty() {
            return Ok(Value::Array(vec![]));
        }
        serde_json::from_str(&out).with_context(|| format!("parsing `ip -j` output: {out}"))
    }

    /// Sets sysctls inside the namespace (`sysctl -qw k=v ...`).
    pub fn sysctls(&self, settings: &[(&str, &str)]) -> Result<()> {
        if settings.is_empty() {
            return Ok(());
        }
        let args: Vec<String> = std::iter::once("-qw".to_string())
            .chain(settings.iter().map(|(k, v)| format!("{k}={v}")))
            .collect();
        self.run("sysctl", &args)?;
        Ok(())
    }

    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        self.sysctls(&[(key, value)])
    }

    pub fn read_sysctl(&self, key: &str) -> Result<String> {
        Ok(self.run("sysctl", &["-n", key])?.trim().to_string())
    }

    /// Starts `program args` in the namespace as a process-group leader,
    /// stdout/stderr to a log file in the state directory; killed (with its
    /// children) when the returned handle is dropped.
    pub fn spawn<S: AsRef<OsStr>>(&self, program: &str, args: &[S]) -> Result<NsChild> {
        let mut c = self.command(program);
        c.args(args);
        let base = Path::new(program)
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "proc".into());
        let n = SPAWNED.fetch_add(1, Ordering::Relaxed);
        let logs = self.state_dir.join("logs");
        crate::cleanup::create_dir(&logs)?;
        NsChild::spawn_logged(c, &logs.join(format!("{base}.{n}.log")))
    }

    /// Starts a prepared command (from [`Netns::command`]) as a process-group
    /// leader with its stdio as configured.
    pub fn spawn_command(&self, cmd: Command) -> Result<NsChild> {
        NsChild::spawn(cmd)
    }

    /// The tokio flavour of [`Netns::spawn`] (stdio inherited unless set on
    /// a command made with [`Netns::tokio_command`] and
    /// [`AsyncNsChild::spawn`]).
    pub fn spawn_async<S: AsRef<OsStr>>(&self, program: &str, args: &[S]) -> Result<AsyncNsChild> {
        let mut c = self.tokio_command(program);
        c.args(args);
        AsyncNsChild::spawn(c)
    }

    /// Pids of the processes in this namespace (`ip netns pids`).
    pub fn pids(&self) -> Result<Vec<u32>> {
        let out = cmd::run(&mut cmd::command("ip", &["netns", "pids", &self.name]))?;
        Ok(out
            .split_whitespace()
            .filter_map(|s| s.parse().ok())
            .collect())
    }

    /// Kills every process in the namespace (SIGTERM, then SIGKILL after
    /// 3 s), and removes FRR's per-process crash directories of those that
    /// were FRR daemons.
    pub fn kill_all(&self) -> Result<()> {
        if !self.exists() {
            return Ok(());
        }
        let pids = self.pids()?;
        if pids.is_empty() {
            return Ok(());
        }
        let comms: Vec<(u32, String)> = pids
            .iter()
            .map(|&p| {
                let c = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                (p, c.trim().to_string())
            })
            .collect();
        for &p in &pids {
            kill_pid(p, Signal::TERM);
        }
        let alive = |ps: &[u32]| ps.iter().copied().filter(|&p| pid_alive(p)).count();
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while alive(&pids) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for &p in &pids {
            if pid_alive(p) {
                kill_pid(p, Signal::KILL);
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while alive(&pids) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for (p, comm) in &comms {
            crate::frr::remove_crash_dir(comm, *p);
        }
        let left: Vec<u32> = pids.into_iter().filter(|&p| pid_alive(p)).collect();
        ensure!(
            left.is_empty(),
            "processes {left:?} in namespace {} survived SIGKILL",
            self.name
        );
        Ok(())
    }

    /// Deletes `/run/netns/<name>` (a no-op when it does not exist).
    pub fn delete(&self) -> Result<()> {
        if !self.exists() {
            return Ok(());
        }
        cmd::run(&mut cmd::command("ip", &["netns", "delete", &self.name]))?;
        Ok(())
    }

    /// Names of the interfaces in the namespace.
    pub fn link_names(&self) -> Result<Vec<String>> {
        let v = self.ip_json(&["link", "show"])?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|l| l["ifname"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The MAC address of `ifname`, lower case `aa:bb:cc:dd:ee:ff`.
    pub fn mac(&self, ifname: &str) -> Result<String> {
        let v = self.ip_json(&["link", "show", "dev", ifname])?;
        v[0]["address"]
            .as_str()
            .map(str::to_ascii_lowercase)
            .with_context(|| format!("no address for {ifname} in {}: {v}", self.name))
    }

    /// The addresses on `ifname` (with prefix lengths), including link-local.
    pub fn addrs(&self, ifname: &str) -> Result<Vec<IpNet>> {
        let v = self.ip_json(&["addr", "show", "dev", ifname])?;
        let mut r = Vec::new();
        for a in v[0]["addr_info"].as_array().into_iter().flatten() {
            if let (Some(ip), Some(len)) = (a["local"].as_str(), a["prefixlen"].as_u64()) {
                r.push(format!("{ip}/{len}").parse()?);
            }
        }
        Ok(r)
    }

    /// Adds `addr` (`192.0.2.11/24`) to `ifname`, without duplicate address
    /// detection. Refuses addresses outside the lab's documentation ranges.
    pub fn add_addr(&self, ifname: &str, addr: &str) -> Result<()> {
        let net: IpNet = addr
            .parse()
            .with_context(|| format!("bad address {addr}"))?;
        ensure!(
            crate::plan::is_allowed_net(&net.trunc()),
            "address {addr} is outside the lab's ranges {:?}",
            crate::plan::ALLOWED_RANGES
        );
        let mut args = vec!["addr", "add", addr, "dev", ifname];
        if net.addr().is_ipv6() {
            args.push("nodad");
        }
        self.ip(&args)?;
        Ok(())
    }

    /// Removes `addr` (`192.0.2.11/24`) from `ifname`.
    pub fn del_addr(&self, ifname: &str, addr: &str) -> Result<()> {
        self.ip(&["addr", "del", addr, "dev", ifname])?;
        Ok(())
    }

    /// Adds a static route `dst via gateway`. Both must be inside the lab's
    /// ranges (no default routes).
    pub fn add_route(&self, dst: &str, via: IpAddr) -> Result<()> {
        let net: IpNet = dst.parse().with_context(|| format!("bad route {dst}"))?;
        ensure!(
            crate::plan::is_allowed_net(&net) && crate::plan::is_allowed_addr(via),
            "route {dst} via {via} is outside the lab's ranges {:?}",
            crate::plan::ALLOWED_RANGES
        );
        self.ip(&["route", "add", dst, "via", &via.to_string()])?;
        Ok(())
    }

    /// The neighbour table (`ip neigh show`), IPv4 and IPv6.
    pub fn neighbors(&self) -> Result<Vec<NeighEntry>> {
        let v = self.ip_json(&["neigh", "show"])?;
        let mut r = Vec::new();
        for e in v.as_array().into_iter().flatten() {
            let Some(dst) = e["dst"].as_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            r.push(NeighEntry {
                dst,
                dev: e["dev"].as_str().unwrap_or_default().to_string(),
                lladdr: e["lladdr"].as_str().map(str::to_ascii_lowercase),
                state: e["state"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|s| s.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
        Ok(r)
    }

    /// Resolves `target` with `arping` from `ifname` and returns the MAC that
    /// answers (lower case). Every reply is counted, not the first
    /// ([`Netns::arp_replies`]): fails when two MACs answer (a split brain) or
    /// when nobody answers within `count` rounds of one second.
    pub fn arping(&self, ifname: &str, target: Ipv4Addr, count: u32) -> Result<String> {
        for _ in 0..count.max(1) {
            let mut macs = self.arp_replies(ifname, None, target, 1)?;
            macs.sort();
            macs.dedup();
            match macs.as_slice() {
                [] => continue,
                [mac] => return Ok(mac.clone()),
                _ => bail!(
                    "{target} on {ifname} in {} is answered by {macs:?}",
                    self.name
                ),
            }
        }
        bail!(
            "arping {target} on {ifname} in {} got no reply in {count} s",
            self.name
        )
    }

    /// The MAC (lower case) of every ARP reply for `target` that reaches
    /// `ifname` within `wait_s` seconds, one per reply, in order: `arping`
    /// without `-c`, which prints every reply until its deadline (with `-c N`
    /// it stops at the N-th reply, so a second answering node would go
    /// unseen). `src`: the sender address of the requests (`-s`).
    pub fn arp_replies(
        &self,
        ifname: &str,
        src: Option<Ipv4Addr>,
        target: Ipv4Addr,
        wait_s: u32,
    ) -> Result<Vec<String>> {
        ensure!(
            crate::plan::is_allowed_addr(target.into()),
            "arping target {target} is outside the lab's ranges"
        );
        let wait = wait_s.max(1).to_string();
        let target_s = target.to_string();
        let src_s = src.map(|s| s.to_string());
        let mut args = vec!["-w", &wait, "-I", ifname];
        if let Some(s) = &src_s {
            args.extend(["-s", s]);
        }
        args.push(&target_s);
        let out = self.output("arping", &args)?;
        Ok(parse_arping_replies(&out.stdout))
    }
    /// Resolves `target` with `ndisc6` (a Neighbor Solicitation) on `ifname`
    /// and returns the advertised link-layer address (lower case).
    pub fn ndisc(&self, ifname: &str, target: Ipv6Addr, tries: u32) -> Result<String> {
        ensure!(
            crate::plan::is_allowed_addr(target.into()),
            "ndisc6 target {target} is outside the lab's ranges"
        );
        let tries_s = tries.max(1).to_string();
        let out = self.output(
            "ndisc6",
            &[
                "-1",
                "-r",
                &tries_s,
                "-w",
                "1000",
                &target.to_string(),
                ifname,
            ],
        )?;
        // "Target link-layer address: AA:BB:CC:DD:EE:FF"
        for l in out.stdout.lines() {
            if let Some((_, mac)) = l.split_once("Target link-layer address:") {
                return Ok(mac.trim().to_ascii_lowercase());
            }
        }
        bail!(
            "ndisc6 {target} on {ifname} in {} got no advertisement ({}):\n{}{}",
            self.name,
            out.status,
            out.stdout,
            out.stderr
        )
    }

    /// Silently cuts `ifname`: drops every frame in and out of it (all
    /// ethertypes, ARP and NDP included) with nftables `netdev` ingress and
    /// egress hooks, without any link event. See [`crate::Cut`].
    pub fn cut_interface(&self, ifname: &str) -> Result<crate::Cut> {
        crate::cut::cut_interface(self, ifname)
    }

    /// Silently drops IP packets from and to `addr` on every interface of
    /// the namespace (except `lo`). See [`crate::Cut`].
    pub fn cut_address(&self, addr: IpAddr) -> Result<crate::Cut> {
        crate::cut::cut_address(self, addr)
    }

    /// Starts `tcpdump -i ifname -w path [filter]` and returns once it is
    /// capturing. See [`crate::Capture`].
    pub fn capture(&self, ifname: &str, path: &Path, filter: &[&str]) -> Result<crate::Capture> {
        crate::capture::Capture::start(self, ifname, path, filter)
    }
}

/// The MACs of arping's reply lines, in order, lower case:
/// "Unicast reply from 192.0.2.11 [AA:BB:CC:DD:EE:FF]  0.6ms".
pub fn parse_arping_replies(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.contains("reply from"))
        .filter_map(|l| {
            let (_, rest) = l.split_once('[')?;
            let (mac, _) = rest.split_once(']')?;
            Some(mac.to_ascii_lowercase())
        })
        .collect()
}
