//! FRR (Debian's `frr`, 8.4): one instance per namespace, controlled with
//! vtysh, state read as JSON.
//!
//! Each instance has its own directory (`<ns state dir>/frr`, owned by user
//! `frr`) holding the config, pid files, vty sockets, the zserv socket, the
//! bfdd control socket and per-daemon logs. Daemons are started in the
//! namespace with `-N <prefix>-<ns>` and every path overridden, and stopped
//! through their pid files, never by process name.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::Value;

use crate::netns::Netns;
use crate::process::{pid_alive, read_pid_file, stop_pid};
use crate::{Family, Result, cmd, plan, wait_until};

/// Where Debian installs the daemons.
pub const FRR_LIB: &str = "/usr/lib/frr";

/// An FRR daemon the kit can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrrDaemon {
    Zebra,
    Bgpd,
    Bfdd,
    Staticd,
}

impl FrrDaemon {
    pub fn name(self) -> &'static str {
        match self {
            FrrDaemon::Zebra => "zebra",
            FrrDaemon::Bgpd => "bgpd",
            FrrDaemon::Bfdd => "bfdd",
            FrrDaemon::Staticd => "staticd",
        }
    }
}

/// The daemons [`Frr::start`] runs.
pub const DEFAULT_DAEMONS: [FrrDaemon; 3] = [FrrDaemon::Zebra, FrrDaemon::Bgpd, FrrDaemon::Bfdd];

/// Removes FRR's per-process crash directory `/var/tmp/frr/<daemon>.<pid>`
/// when `comm` is an FRR daemon.
pub(crate) fn remove_crash_dir(comm: &str, pid: u32) {
    const DAEMONS: [&str; 6] = ["zebra", "bgpd", "bfdd", "staticd", "watchfrr", "mgmtd"];
    if DAEMONS.contains(&comm) {
        let _ = std::fs::remove_dir_all(format!("/var/tmp/frr/{comm}.{pid}"));
    }
}

/// A BFD profile (`bfd` / `profile NAME` in frr.conf).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BfdProfile {
    pub name: String,
    pub receive_interval_ms: u32,
    pub transmit_interval_ms: u32,
    pub detect_multiplier: u32,
    pub echo_mode: bool,
    pub echo_interval_ms: Option<u32>,
    pub passive: bool,
    pub minimum_ttl: Option<u8>,
}

impl BfdProfile {
    pub fn new(name: &str, receive_ms: u32, transmit_ms: u32, multiplier: u32) -> BfdProfile {
        BfdProfile {
            name: name.to_string(),
            receive_interval_ms: receive_ms,
            transmit_interval_ms: transmit_ms,
            detect_multiplier: multiplier,
            echo_mode: false,
            echo_interval_ms: None,
            passive: false,
            minimum_ttl: None,
        }
    }
}

/// A BGP neighbor in an [`FrrConfig`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrrNeighbor {
    pub addr: IpAddr,
    pub remote_as: u32,
    /// `neighbor X bfd` (implied by a profile).
    pub bfd: bool,
    pub bfd_profile: Option<String>,
    pub password: Option<String>,
    pub ebgp_multihop: Option<u8>,
    pub update_source: Option<String>,
    pub passive: bool,
    /// (keepalive, hold) seconds.
    pub timers: Option<(u32, u32)>,
    /// Connect retry seconds (default 5, so sessions come back quickly).
    pub connect_retry: Option<u32>,
    /// Address families to activate (default: the neighbor address's).
    pub families: Vec<Family>,
    /// Extra `neighbor X ...` lines (without the `neighbor X` part).
    pub extra: Vec<String>,
}

impl FrrNeighbor {
    pub fn new(addr: IpAddr, remote_as: u32) -> FrrNeighbor {
        FrrNeighbor {
            addr,
            remote_as,
            bfd: false,
            bfd_profile: None,
            password: None,
            ebgp_multihop: None,
            update_source: None,
            passive: false,
            timers: None,
            connect_retry: Some(5),
            families: vec![Family::of(addr)],
            extra: Vec::new(),
        }
    }

    pub fn bfd(mut self) -> Self {
        self.bfd = true;
        self
    }

    pub fn bfd_profile(mut self, profile: &str) -> Self {
        self.bfd = true;
        self.bfd_profile = Some(profile.to_string());
        self
    }

    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.to_string());
        self
    }

    pub fn ebgp_multihop(mut self, ttl: u8) -> Self {
        self.ebgp_multihop = Some(ttl);
        self
    }

    pub fn update_source(mut self, source: &str) -> Self {
        self.update_source = Some(source.to_string());
        self
    }

    pub fn passive(mut self) -> Self {
        self.passive = true;
        self
    }

    pub fn timers(mut self, keepalive: u32, hold: u32) -> Self {
        self.timers = Some((keepalive, hold));
        self
    }

    pub fn families(mut self, families: &[Family]) -> Self {
        self.families = families.to_vec();
        self
    }

    pub fn extra(mut self, line: &str) -> Self {
        self.extra.push(line.to_string());
        self
    }
}

/// An frr.conf for bgpd (+ bfdd), rendered by [`FrrConfig::render`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrrConfig {
    pub hostname: String,
    pub asn: u32,
    pub router_id: Ipv4Addr,
    pub neighbors: Vec<FrrNeighbor>,
    pub bfd_profiles: Vec<BfdProfile>,
    /// Prefixes announced with `network` (IPv4 or IPv6; no import check).
    pub networks: Vec<String>,
    /// Appended verbatim after everything else.
    pub extra: String,
}

impl FrrConfig {
    pub fn new(hostname: &str, asn: u32, router_id: Ipv4Addr) -> FrrConfig {
        FrrConfig {
            hostname: hostname.to_string(),
            asn,
            router_id,
            neighbors: Vec::new(),
            bfd_profiles: Vec::new(),
            networks: Vec::new(),
            extra: String::new(),
        }
    }

    /// The lab router: AS 64512, router-id 192.0.2.1, an eBGP neighbor
    /// (AS 64513) for each lab node over IPv4 and over IPv6.
    pub fn lab_router() -> FrrConfig {
        let mut c = FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4);
        for n in 1..=plan::NODES {
            c = c
                .neighbor(FrrNeighbor::new(plan::node_v4(n).into(), plan::NODE_AS))
                .neighbor(FrrNeighbor::new(plan::node_v6(n).into(), plan::NODE_AS));
        }
        c
    }

    pub fn neighbor(mut self, n: FrrNeighbor) -> Self {
        self.neighbors.push(n);
        self
    }

    pub fn bfd_profile(mut self, p: BfdProfile) -> Self {
        self.bfd_profiles.push(p);
        self
    }

    pub fn network(mut self, prefix: &str) -> Self {
        self.networks.push(prefix.to_string());
        self
    }

    pub fn extra(mut self, text: &str) -> Self {
        self.extra.push_str(text);
        self.extra.push('\n');
        self
    }

    /// Checks ASNs and addresses against the lab's plan.
    pub fn validate(&self) -> Result<()> {
        plan::check_router(
            self.asn,
            self.neighbors.iter().map(|n| (n.addr, n.remote_as)),
            &self.networks,
        )
    }

    /// The frr.conf text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "frr defaults traditional");
        let _ = writeln!(s, "hostname {}", self.hostname);
        let _ = writeln!(s, "!");
        if !self.bfd_profiles.is_empty() {
            let _ = writeln!(s, "bfd");
            for p in &self.bfd_profiles {
                let _ = writeln!(s, " profile {}", p.name);
                let _ = writeln!(s, "  receive-interval {}", p.receive_interval_ms);
                let _ = writeln!(s, "  transmit-interval {}", p.transmit_interval_ms);
                let _ = writeln!(s, "  detect-multiplier {}", p.detect_multiplier);
                if p.echo_mode {
                    let _ = writeln!(s, "  echo-mode");
                }
                if let Some(i) = p.echo_interval_ms {
                    let _ = writeln!(s, "  echo transmit-interval {i}");
                    let _ = writeln!(s, "  echo receive-interval {i}");
                }
                if p.passive {
                    let _ = writeln!(s, "  passive-mode");
                }
                if let Some(t) = p.minimum_ttl {
                    let _ = writeln!(s, "  minimum-ttl {t}");
                }
                let _ = writeln!(s, " exit");
            }
            let _ = writeln!(s, "exit");
            let _ = writeln!(s, "!");
        }
        let _ = writeln!(s, "router bgp {}", self.asn);
        let _ = writeln!(s, " bgp router-id {}", self.router_id);
        // Session ups and downs, with the reason, in bgpd.log.
        let _ = writeln!(s, " bgp log-neighbor-changes");
        let _ = writeln!(s, " no bgp ebgp-requires-policy");
        let _ = writeln!(s, " no bgp default ipv4-unicast");
        let _ = writeln!(s, " no bgp network import-check");
        for n in &self.neighbors {
            let a = n.addr;
            let _ = writeln!(s, " neighbor {a} remote-as {}", n.remote_as);
            if let Some(p) = &n.password {
                let _ = writeln!(s, " neighbor {a} password {p}");
            }
            if let Some(t) = n.ebgp_multihop {
                let _ = writeln!(s, " neighbor {a} ebgp-multihop {t}");
            }
            if let Some(u) = &n.update_source {
                let _ = writeln!(s, " neighbor {a} update-source {u}");
            }
            if n.passive {
                let _ = writeln!(s, " neighbor {a} passive");
            }
            if let Some((k, h)) = n.timers {
                let _ = writeln!(s, " neighbor {a} timers {k} {h}");
            }
            if let Some(c) = n.connect_retry {
                let _ = writeln!(s, " neighbor {a} timers connect {c}");
            }
            if n.bfd {
                let _ = writeln!(s, " neighbor {a} bfd");
            }
            if let Some(p) = &n.bfd_profile {
                let _ = writeln!(s, " neighbor {a} bfd profile {p}");
            }
            for e in &n.extra {
                let _ = writeln!(s, " neighbor {a} {e}");
            }
        }
        for (fam, afi) in [(Family::Ipv4, "ipv4"), (Family::Ipv6, "ipv6")] {
            let nets: Vec<&String> = self
                .networks
                .iter()
                .filter(|p| p.contains(':') == (fam == Family::Ipv6))
                .collect();
            let nbrs: Vec<&FrrNeighbor> = self
                .neighbors
                .iter()
                .filter(|n| n.families.contains(&fam))
                .collect();
            if nets.is_empty() && nbrs.is_empty() {
                continue;
            }
            let _ = writeln!(s, " !");
            let _ = writeln!(s, " address-family {afi} unicast");
            for p in nets {
                let _ = writeln!(s, "  network {p}");
            }
            for n in nbrs {
                let _ = writeln!(s, "  neighbor {} activate", n.addr);
            }
            let _ = writeln!(s, " exit-address-family");
        }
        let _ = writeln!(s, "exit");
        let _ = writeln!(s, "!");
        s.push_str(&self.extra);
        s
    }
}

/// A BGP neighbor as `show bgp neighbors json` reports it.
#[derive(Clone, Debug)]
pub struct BgpNeighbor {
    pub addr: IpAddr,
    pub remote_as: Option<u32>,
    pub local_as: Option<u32>,
    /// `Established`, `Active`, `Connect`, `OpenSent`, `Idle`, ...
    pub state: String,
    /// BFD status as bgpd sees it (`Up`, `Down`), when BFD is on.
    pub bfd_status: Option<String>,
    pub raw: Value,
}

/// One path of `show bgp ipv4|ipv6 unicast json`.
#[derive(Clone, Debug)]
pub struct BgpRoute {
    /// `198.51.100.1/32`
    pub prefix: String,
    pub valid: bool,
    pub best: bool,
    /// The peer the path came from (absent for local routes).
    pub peer: Option<String>,
    /// AS path as FRR prints it (`64513`, `64513 64514`, empty for local).
    pub as_path: String,
    pub origin: Option<String>,
    pub nexthops: Vec<String>,
    pub med: Option<u64>,
    pub local_pref: Option<u64>,
    pub raw: Value,
}

/// One session of `show bfd peers json`.
#[derive(Clone, Debug)]
pub struct BfdPeer {
    pub peer: String,
    pub local: Option<String>,
    pub interface: Option<String>,
    pub multihop: bool,
    /// `up`, `down`, `init`, `shutdown`
    pub status: String,
    pub diagnostic: Option<String>,
    pub remote_diagnostic: Option<String>,
    pub receive_interval_ms: Option<u64>,
    pub transmit_interval_ms: Option<u64>,
    pub detect_multiplier: Option<u64>,
    pub remote_receive_interval_ms: Option<u64>,
    pub remote_transmit_interval_ms: Option<u64>,
    pub remote_detect_multiplier: Option<u64>,
    pub raw: Value,
}

/// A running FRR instance in a namespace. Dropping it stops the daemons.
#[derive(Debug)]
pub struct Frr {
    ns: Netns,
    instance: String,
    dir: PathBuf,
    daemons: Vec<FrrDaemon>,
    stopped: bool,
}

/// FRR output lines that carry the `% ` error marker but report no error:
/// the command was applied. bfdd prints the first for every `echo-mode`
/// (the echo function of FRR 8.4 on Linux, IPv4 and IPv6).
const FRR_NOTICES: &[&str] =
    &["% Echo mode works correctly for IPv4, but only works when the peer is also FRR for IPv6."];

/// Whether `line` of vtysh's output is one of [`FRR_NOTICES`].
fn is_notice(line: &str) -> bool {
    FRR_NOTICES.contains(&line.trim())
}

fn same_addr(text: &str, addr: IpAddr) -> bool {
    text.parse::<IpAddr>().is_ok_and(|a| a == addr)
}

impl Frr {
    /// Starts zebra, bgpd and bfdd in `ns` with `config` rendered.
    pub fn start(ns: &Netns, config: &FrrConfig) -> Result<Frr> {
        config.validate()?;
        Frr::start_raw(ns, &config.render(), &DEFAULT_DAEMONS)
    }

    /// Starts `daemons` (zebra is always started first) in `ns` with a
    /// hand-written frr.conf.
    pub fn start_raw(ns: &Netns, config: &str, daemons: &[FrrDaemon]) -> Result<Frr> {
        let dir = ns.state_dir().join("frr");
        if dir.exists() {
            bail!(
                "an FRR instance already uses {} (one per namespace)",
                dir.display()
            );
        }
        crate::cleanup::create_dir(&dir)?;
        std::fs::write(dir.join("frr.conf"), config)?;
        // Each daemon starts from an empty file; vtysh then applies frr.conf
        // and sends each line to the daemon that owns it (a daemon reading
        // an integrated config itself would choke on other daemons' blocks).
        std::fs::write(dir.join("empty.conf"), "")?;
        cmd::run(cmd::command("chown", &["-R", "frr:frr"]).arg(&dir))
            .context("the FRR instance directory must belong to user frr")?;
        let mut order = vec![FrrDaemon::Zebra];
        order.extend(daemons.iter().copied().filter(|d| *d != FrrDaemon::Zebra));
        let mut frr = Frr {
            ns: ns.clone(),
            instance: ns.name().to_string(),
            dir,
            daemons: Vec::new(),
            stopped: false,
        };
        for d in order {
            frr.start_daemon(d)
                .with_context(|| format!("starting FRR {} in {}", d.name(), ns.name()))?;
        }
        wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
            frr.vtysh(&["show version"]).map_err(|e| format!("{e:#}"))
        })
        .map_err(anyhow::Error::from)
        .with_context(|| format!("FRR in {} does not answer vtysh", ns.name()))?;
        frr.apply_file(&frr.dir.join("frr.conf"))
            .with_context(|| format!("applying frr.conf in {}", ns.name()))?;
        Ok(frr)
    }

    /// Applies a config file through vtysh (`vtysh -f`); a line that no
    /// daemon accepts is an error.
    pub fn apply_file(&self, path: &Path) -> Result<()> {
        let mut c = self.ns.command("vtysh");
        c.arg("--vty_socket").arg(&self.dir).arg("-f").arg(path);
        let out = cmd::run(&mut c)?;
        if let Some(l) = out.lines().find(|l| l.contains("% ") && !is_notice(l)) {
            bail!("vtysh -f {}: {l}", path.display());
        }
        Ok(())
    }

    fn pid_file(&self, d: FrrDaemon) -> PathBuf {
        self.dir.join(format!("{}.pid", d.name()))
    }

    fn start_daemon(&mut self, d: FrrDaemon) -> Result<()> {
        let dir = self.dir.to_string_lossy().into_owned();
        let name = d.name();
        let mut c = self.ns.command(format!("{FRR_LIB}/{name}"));
        c.args(["-N", &self.instance, "-d", "-F", "traditional", "-P", "0"])
            .args(["--vty_socket", &dir])
            .args(["-i", &format!("{dir}/{name}.pid")])
            .args(["-z", &format!("{dir}/zserv.api")])
            .args(["-f", &format!("{dir}/empty.conf")])
            .args(["--log", &format!("file:{dir}/{name}.log")]);
        if d == FrrDaemon::Bfdd {
            c.args(["--bfdctl", &format!("{dir}/bfdd.sock")]);
        }
        let start_log = self.dir.join(format!("{name}.start.log"));
        cmd::run_logged(&mut c, &start_log, Duration::from_secs(60))?;
        self.daemons.push(d);
        let pid_file = self.pid_file(d);
        let vty = self.dir.join(format!("{name}.vty"));
        wait_until(
            Duration::from_secs(30),
            Duration::from_millis(20),
            || match read_pid_file(&pid_file) {
                Some(pid) if pid_alive(pid) && vty.exists() => Ok(()),
                Some(pid) if !pid_alive(pid) => Err(format!("{name} (pid {pid}) exited")),
                _ => Err(format!("no pid file or vty socket for {name} yet")),
            },
        )
        .map_err(anyhow::Error::from)
        .with_context(|| {
            format!(
                "{name} did not come up; its log:\n{}",
                cmd::tail(&self.dir.join(format!("{name}.log")), 20)
            )
        })?;
        Ok(())
    }

    /// The namespace the instance runs in.
    pub fn ns(&self) -> &Netns {
        &self.ns
    }

    /// The instance directory (config, sockets, pid files, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Pid of a running daemon.
    pub fn pid(&self, d: FrrDaemon) -> Option<u32> {
        read_pid_file(&self.pid_file(d)).filter(|p| pid_alive(*p))
    }

    /// Runs vtysh with one `-c` per command and returns its output. Output
    /// lines starting with `% ` (FRR's error marker) make it an error.
    pub fn vtysh(&self, commands: &[&str]) -> Result<String> {
        let mut c = self.ns.command("vtysh");
        c.arg("--vty_socket").arg(&self.dir);
        for command in commands {
            c.arg("-c").arg(command);
        }
        let out = cmd::run(&mut c)?;
        if let Some(l) = out.lines().find(|l| l.starts_with("% ") && !is_notice(l)) {
            bail!("vtysh {commands:?} in {}: {l}\n{out}", self.ns.name());
        }
        Ok(out)
    }

    /// Runs one `show ... json` command and parses its output.
    pub fn show_json(&self, command: &str) -> Result<Value> {
        let out = self.vtysh(&[command])?;
        serde_json::from_str(&out)
            .with_context(|| format!("parsing the output of `{command}`: {out}"))
    }

    /// Applies configuration lines (`configure terminal`, then each line).
    pub fn configure(&self, lines: &[&str]) -> Result<String> {
        let mut all = vec!["configure terminal"];
        all.extend_from_slice(lines);
        self.vtysh(&all)
    }

    /// `show bgp summary json`.
    pub fn bgp_summary(&self) -> Result<Value> {
        self.show_json("show bgp summary json")
    }

    /// `show bgp neighbors json`, typed.
    pub fn bgp_neighbors(&self) -> Result<Vec<BgpNeighbor>> {
        let v = self.show_json("show bgp neighbors json")?;
        let mut r = Vec::new();
        for (k, n) in v.as_object().into_iter().flatten() {
            let Ok(addr) = k.parse::<IpAddr>() else {
                continue;
            };
            r.push(BgpNeighbor {
                addr,
                remote_as: n["remoteAs"].as_u64().map(|x| x as u32),
                local_as: n["localAs"].as_u64().map(|x| x as u32),
                state: n["bgpState"].as_str().unwrap_or_default().to_string(),
                bfd_status: n["peerBfdInfo"]["status"].as_str().map(str::to_string),
                raw: n.clone(),
            });
        }
        Ok(r)
    }

    /// The BGP state of neighbor `addr` (`Established`, `Active`, ...), or
    /// None when bgpd has no such neighbor.
    pub fn bgp_neighbor_state(&self, addr: IpAddr) -> Result<Option<String>> {
        Ok(self
            .bgp_neighbors()?
            .into_iter()
            .find(|n| n.addr == addr)
            .map(|n| n.state))
    }

    fn routes(&self, afi: &str) -> Result<Vec<BgpRoute>> {
        let v = self.show_json(&format!("show bgp {afi} unicast json"))?;
        let mut r = Vec::new();
        for (prefix, paths) in v["routes"].as_object().into_iter().flatten() {
            for p in paths.as_array().into_iter().flatten() {
                let nexthops = p["nexthops"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|n| n["ip"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                r.push(BgpRoute {
                    prefix: prefix.clone(),
                    valid: p["valid"].as_bool().unwrap_or(false),
                    best: p["bestpath"].as_bool().unwrap_or(false),
                    peer: p["peerId"]
                        .as_str()
                        .filter(|s| *s != "(unspec)")
                        .map(str::to_string),
                    as_path: p["path"].as_str().unwrap_or_default().to_string(),
                    origin: p["origin"].as_str().map(str::to_string),
                    nexthops,
                    med: p["metric"].as_u64(),
                    local_pref: p["locPrf"].as_u64(),
                    raw: p.clone(),
                });
            }
        }
        Ok(r)
    }

    /// Every path of the IPv4 unicast table.
    pub fn routes_v4(&self) -> Result<Vec<BgpRoute>> {
        self.routes("ipv4")
    }

    /// Every path of the IPv6 unicast table.
    pub fn routes_v6(&self) -> Result<Vec<BgpRoute>> {
        self.routes("ipv6")
    }

    /// The paths for `prefix` (`198.51.100.1/32`), from the table of its family.
    pub fn route(&self, prefix: &str) -> Result<Vec<BgpRoute>> {
        let all = if prefix.contains(':') {
            self.routes_v6()?
        } else {
            self.routes_v4()?
        };
        Ok(all.into_iter().filter(|r| r.prefix == prefix).collect())
    }

    /// `show bfd peers json`, typed.
    pub fn bfd_peers(&self) -> Result<Vec<BfdPeer>> {
        let v = self.show_json("show bfd peers json")?;
        let s = |p: &Value, k: &str| p[k].as_str().map(str::to_string);
        Ok(v.as_array()
            .into_iter()
            .flatten()
            .map(|p| BfdPeer {
                peer: s(p, "peer").unwrap_or_default(),
                local: s(p, "local"),
                interface: s(p, "interface"),
                multihop: p["multihop"].as_bool().unwrap_or(false),
                status: s(p, "status").unwrap_or_default(),
                diagnostic: s(p, "diagnostic"),
                remote_diagnostic: s(p, "remote-diagnostic"),
                receive_interval_ms: p["receive-interval"].as_u64(),
                transmit_interval_ms: p["transmit-interval"].as_u64(),
                detect_multiplier: p["detect-multiplier"].as_u64(),
                remote_receive_interval_ms: p["remote-receive-interval"].as_u64(),
                remote_transmit_interval_ms: p["remote-transmit-interval"].as_u64(),
                remote_detect_multiplier: p["remote-detect-multiplier"].as_u64(),
                raw: p.clone(),
            })
            .collect())
    }

    /// The status (`up`, `down`, `init`) of the BFD session with `addr`, or
    /// None when bfdd has no session with it.
    pub fn bfd_peer_status(&self, addr: IpAddr) -> Result<Option<String>> {
        Ok(self
            .bfd_peers()?
            .into_iter()
            .find(|p| same_addr(&p.peer, addr))
            .map(|p| p.status))
    }

    /// Waits until neighbor `addr` is in BGP state `state`.
    pub fn wait_bgp_state(&self, addr: IpAddr, state: &str, timeout: Duration) -> Result<()> {
        wait_until(timeout, Duration::from_millis(250), || {
            match self.bgp_neighbor_state(addr) {
                Ok(Some(s)) if s == state => Ok(()),
                Ok(Some(s)) => Err(format!("neighbor {addr} is {s}")),
                Ok(None) => Err(format!("no neighbor {addr}")),
                Err(e) => Err(format!("{e:#}")),
            }
        })
        .map_err(anyhow::Error::from)
        .with_context(|| {
            format!(
                "waiting for BGP neighbor {addr} to be {state} in {}",
                self.ns.name()
            )
        })
    }

    /// Waits until neighbor `addr` is Established.
    pub fn wait_established(&self, addr: IpAddr, timeout: Duration) -> Result<()> {
        self.wait_bgp_state(addr, "Established", timeout)
    }

    /// Waits until the BFD session with `addr` has `status`; returns how long
    /// that took (polls every 50 ms).
    pub fn wait_bfd_status(
        &self,
        addr: IpAddr,
        status: &str,
        timeout: Duration,
    ) -> Result<Duration> {
        let start = Instant::now();
        wait_until(timeout, Duration::from_millis(50), || {
            match self.bfd_peer_status(addr) {
                Ok(Some(s)) if s == status => Ok(()),
                Ok(Some(s)) => Err(format!("BFD peer {addr} is {s}")),
                Ok(None) => Err(format!("no BFD peer {addr}")),
                Err(e) => Err(format!("{e:#}")),
            }
        })
        .map_err(anyhow::Error::from)
        .with_context(|| {
            format!(
                "waiting for BFD peer {addr} to be {status} in {}",
                self.ns.name()
            )
        })?;
        Ok(start.elapsed())
    }

    /// Waits until the table holds a valid best path for `prefix`; returns it.
    pub fn wait_route(&self, prefix: &str, timeout: Duration) -> Result<BgpRoute> {
        wait_until(timeout, Duration::from_millis(250), || {
            match self.route(prefix) {
                Ok(paths) => paths
                    .iter()
                    .find(|r| r.valid && r.best)
                    .cloned()
                    .ok_or_else(|| format!("no best path for {prefix}: {} paths", paths.len())),
                Err(e) => Err(format!("{e:#}")),
            }
        })
        .map_err(anyhow::Error::from)
        .with_context(|| format!("waiting for route {prefix} in {}", self.ns.name()))
    }

    /// The last `lines` lines of each daemon's log, for failure messages.
    pub fn logs(&self, lines: usize) -> String {
        let mut s = String::new();
        for d in &self.daemons {
            let p = self.dir.join(format!("{}.log", d.name()));
            let _ = writeln!(s, "--- {}:\n{}", p.display(), cmd::tail(&p, lines));
        }
        s
    }

    /// Stops the daemons (reverse start order) through their pid files.
    pub fn stop(mut self) -> Result<()> {
        self.stop_all()
    }

    fn stop_all(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let mut stuck = Vec::new();
        for d in self.daemons.iter().rev() {
            if let Some(pid) = read_pid_file(&self.pid_file(*d)) {
                if !stop_pid(pid, Duration::from_secs(5)) {
                    stuck.push(format!("{} (pid {pid})", d.name()));
                }
                remove_crash_dir(d.name(), pid);
            }
        }
        let _ = std::fs::remove_dir_all(format!("/run/frr/{}", self.instance));
        ensure!(stuck.is_empty(), "FRR daemons did not stop: {stuck:?}");
        Ok(())
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        if let Err(e) = self.stop_all() {
            eprintln!("testkit: {e:#}");
        }
    }
}

/// Neighbors of a `show bgp summary json` answer: address -> state.
pub fn summary_states(summary: &Value) -> BTreeMap<String, String> {
    let mut r = BTreeMap::new();
    for af in summary.as_object().into_iter().flatten().map(|(_, v)| v) {
        for (addr, p) in af["peers"].as_object().into_iter().flatten() {
            if let Some(s) = p["state"].as_str() {
                r.insert(addr.clone(), s.to_string());
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frr_notices_are_not_errors_but_errors_are() {
        assert!(is_notice(
            "% Echo mode works correctly for IPv4, but only works when the peer is also FRR for IPv6."
        ));
        assert!(!is_notice("% Unknown command: echo-mode"));
        assert!(!is_notice(
            "% Echo mode is only available for single hop sessions."
        ));
    }

    #[test]
    fn renders_neighbors_profiles_and_families() {
        let c = FrrConfig::new("r", 64512, "192.0.2.1".parse().unwrap())
            .bfd_profile(BfdProfile::new("fast", 300, 300, 3))
            .neighbor(
                FrrNeighbor::new("192.0.2.11".parse().unwrap(), 64513)
                    .bfd_profile("fast")
                    .families(&[Family::Ipv4, Family::Ipv6]),
            )
            .network("198.51.100.1/32")
            .network("2001:db8:100::1/128");
        c.validate().unwrap();
        let s = c.render();
        assert!(s.contains(" neighbor 192.0.2.11 remote-as 64513\n"), "{s}");
        assert!(s.contains(" neighbor 192.0.2.11 bfd profile fast\n"), "{s}");
        assert!(s.contains("  receive-interval 300\n"), "{s}");
        assert!(s.contains(" address-family ipv6 unicast\n  network 2001:db8:100::1/128\n  neighbor 192.0.2.11 activate\n"), "{s}");
        assert!(
            s.contains(" address-family ipv4 unicast\n  network 198.51.100.1/32\n"),
            "{s}"
        );
    }

    #[test]
    fn refuses_addresses_outside_the_plan() {
        let c = FrrConfig::new("r", 64512, "192.0.2.1".parse().unwrap())
            .neighbor(FrrNeighbor::new("10.0.0.1".parse().unwrap(), 64513));
        assert!(c.validate().is_err());
        let c = FrrConfig::new("r", 65535, "192.0.2.1".parse().unwrap());
        assert!(c.validate().is_err());
    }

    #[test]
    fn summary_states_are_read() {
        let v: Value = serde_json::from_str(
            r#"{"ipv4Unicast":{"peers":{"192.0.2.11":{"state":"Established"}}}}"#,
        )
        .unwrap();
        assert_eq!(summary_states(&v)["192.0.2.11"], "Established");
    }
}
