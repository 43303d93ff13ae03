//! GoBGP 3 in a namespace: `gobgpd` from a rendered TOML config, its gRPC
//! API on 127.0.0.1 inside the namespace, state read with `gobgp ... -j`.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use serde_json::Value;

use crate::netns::Netns;
use crate::process::NsChild;
use crate::{Family, Result, cmd, plan, wait_until};

/// The API port (on the namespace's own loopback).
pub const API_PORT: u16 = 50051;

/// A neighbor in a [`GobgpConfig`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GobgpPeer {
    pub addr: IpAddr,
    pub remote_as: u32,
    pub password: Option<String>,
    pub multihop: Option<u8>,
    pub passive: bool,
    pub families: Vec<Family>,
    /// (hold, keepalive) seconds.
    pub timers: Option<(u32, u32)>,
    /// Graceful restart (RFC 4724) with the RFC 8538 N bit
    /// (`notification-enabled`) for this neighbor and its families: GoBGP
    /// then keeps the neighbor's routes as stale across its restart.
    pub graceful_restart: bool,
}

impl GobgpPeer {
    pub fn new(addr: IpAddr, remote_as: u32) -> GobgpPeer {
        GobgpPeer {
            addr,
            remote_as,
            password: None,
            multihop: None,
            passive: false,
            families: vec![Family::of(addr)],
            timers: None,
            graceful_restart: false,
        }
    }

    /// Graceful restart helper for this neighbor (see the field).
    pub fn graceful_restart(mut self) -> Self {
        self.graceful_restart = true;
        self
    }

    pub fn password(mut self, p: &str) -> Self {
        self.password = Some(p.to_string());
        self
    }

    pub fn multihop(mut self, ttl: u8) -> Self {
        self.multihop = Some(ttl);
        self
    }

    pub fn passive(mut self) -> Self {
        self.passive = true;
        self
    }

    pub fn families(mut self, f: &[Family]) -> Self {
        self.families = f.to_vec();
        self
    }

    pub fn timers(mut self, hold: u32, keepalive: u32) -> Self {
        self.timers = Some((hold, keepalive));
        self
    }
}

/// A gobgpd TOML config plus prefixes to announce once it runs (added to
/// the global RIB through the API).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GobgpConfig {
    pub asn: u32,
    pub router_id: Ipv4Addr,
    pub peers: Vec<GobgpPeer>,
    pub announce: Vec<String>,
    /// Appended verbatim to the TOML.
    pub extra: String,
}

impl GobgpConfig {
    pub fn new(asn: u32, router_id: Ipv4Addr) -> GobgpConfig {
        GobgpConfig {
            asn,
            router_id,
            peers: Vec::new(),
            announce: Vec::new(),
            extra: String::new(),
        }
    }

    pub fn peer(mut self, p: GobgpPeer) -> Self {
        self.peers.push(p);
        self
    }

    pub fn announce(mut self, prefix: &str) -> Self {
        self.announce.push(prefix.to_string());
        self
    }

    pub fn validate(&self) -> Result<()> {
        plan::check_router(
            self.asn,
            self.peers.iter().map(|p| (p.addr, p.remote_as)),
            &self.announce,
        )
    }

    /// The gobgpd.toml text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "[global.config]");
        let _ = writeln!(s, "  as = {}", self.asn);
        let _ = writeln!(s, "  router-id = \"{}\"", self.router_id);
        for p in &self.peers {
            let _ = writeln!(s, "\n[[neighbors]]");
            let _ = writeln!(s, "  [neighbors.config]");
            let _ = writeln!(s, "    neighbor-address = \"{}\"", p.addr);
            let _ = writeln!(s, "    peer-as = {}", p.remote_as);
            if let Some(pw) = &p.password {
                let _ = writeln!(s, "    auth-password = \"{pw}\"");
            }
            let _ = writeln!(s, "  [neighbors.timers.config]");
            let _ = writeln!(s, "    connect-retry = 5");
            if let Some((h, k)) = p.timers {
                let _ = writeln!(s, "    hold-time = {h}");
                let _ = writeln!(s, "    keepalive-interval = {k}");
            }
            if let Some(t) = p.multihop {
                let _ = writeln!(s, "  [neighbors.ebgp-multihop.config]");
                let _ = writeln!(s, "    enabled = true");
                let _ = writeln!(s, "    multihop-ttl = {t}");
            }
            if p.passive {
                let _ = writeln!(s, "  [neighbors.transport.config]");
                let _ = writeln!(s, "    passive-mode = true");
            }
            if p.graceful_restart {
                let _ = writeln!(s, "  [neighbors.graceful-restart.config]");
                let _ = writeln!(s, "    enabled = true");
                let _ = writeln!(s, "    notification-enabled = true");
            }
            for f in &p.families {
                let name = match f {
                    Family::Ipv4 => "ipv4-unicast",
                    Family::Ipv6 => "ipv6-unicast",
                };
                let _ = writeln!(s, "  [[neighbors.afi-safis]]");
                let _ = writeln!(s, "    [neighbors.afi-safis.config]");
                let _ = writeln!(s, "      afi-safi-name = \"{name}\"");
                if p.graceful_restart {
                    let _ = writeln!(s, "    [neighbors.afi-safis.mp-graceful-restart.config]");
                    let _ = writeln!(s, "      enabled = true");
                }
            }
        }
        s.push_str(&self.extra);
        s
    }
}

/// One neighbor of `gobgp neighbor -j`.
#[derive(Clone, Debug)]
pub struct GobgpNeighbor {
    pub addr: String,
    pub peer_as: Option<u32>,
    /// `idle`, `connect`, `active`, `opensent`, `openconfirm`, `established`
    pub state: String,
    pub raw: Value,
}

/// One path of `gobgp global rib -a ipv4|ipv6 -j`.
#[derive(Clone, Debug)]
pub struct GobgpRoute {
    pub prefix: String,
    pub best: bool,
    pub nexthop: Option<String>,
    pub as_path: Vec<u32>,
    /// LOCAL_PREF (iBGP paths).
    pub local_pref: Option<u32>,
    /// The neighbor it came from (absent for local routes).
    pub neighbor: Option<String>,
    pub raw: Value,
}

/// GoBGP's session state enum (apipb.PeerState.SessionState) as a word.
pub fn session_state_name(v: &Value) -> String {
    match v.as_u64() {
        Some(1) => "idle".into(),
        Some(2) => "connect".into(),
        Some(3) => "active".into(),
        Some(4) => "opensent".into(),
        Some(5) => "openconfirm".into(),
        Some(6) => "established".into(),
        Some(n) => format!("unknown({n})"),
        None => v.as_str().unwrap_or("unknown").to_ascii_lowercase(),
    }
}

/// Parses `gobgp neighbor -j`.
pub fn parse_neighbors(v: &Value) -> Vec<GobgpNeighbor> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|n| GobgpNeighbor {
            addr: n["state"]["neighbor_address"]
                .as_str()
                .or(n["conf"]["neighbor_address"].as_str())
                .unwrap_or_default()
                .to_string(),
            peer_as: n["state"]["peer_asn"]
                .as_u64()
                .or(n["conf"]["peer_asn"].as_u64())
                .map(|x| x as u32),
            state: session_state_name(&n["state"]["session_state"]),
            raw: n.clone(),
        })
        .collect()
}

/// Parses `gobgp global rib -a ... -j` (prefix -> paths).
pub fn parse_rib(v: &Value) -> Vec<GobgpRoute> {
    let mut r = Vec::new();
    for (prefix, paths) in v.as_object().into_iter().flatten() {
        for p in paths.as_array().into_iter().flatten() {
            let mut nexthop = None;
            let mut as_path = Vec::new();
            let mut local_pref = None;
            for a in p["attrs"].as_array().into_iter().flatten() {
                match a["type"].as_u64() {
                    Some(2) => {
                        for seg in a["as_paths"].as_array().into_iter().flatten() {
                            for asn in seg["asns"].as_array().into_iter().flatten() {
                                if let Some(x) = asn.as_u64() {
                                    as_path.push(x as u32);
                                }
                            }
                        }
                    }
                    Some(3) | Some(14) => {
                        if let Some(n) = a["nexthop"].as_str() {
                            nexthop = Some(n.to_string());
                        }
                    }
                    Some(5) => local_pref = a["value"].as_u64().and_then(|l| u32::try_from(l).ok()),
                    _ => {}
                }
            }
            r.push(GobgpRoute {
                prefix: prefix.clone(),
                best: p["best"].as_bool().unwrap_or(false),
                nexthop,
                as_path,
                local_pref,
                neighbor: p["neighbor-ip"]
                    .as_str()
                    .filter(|s| !s.is_empty() && *s != "<nil>")
                    .map(str::to_string),
                raw: p.clone(),
            });
        }
    }
    r
}

/// A running gobgpd in a namespace (a child process: dropping the handle
/// kills it; its pid is also written to `gobgpd.pid` in its directory).
#[derive(Debug)]
pub struct Gobgp {
    ns: Netns,
    dir: PathBuf,
    child: Option<NsChild>,
}

impl Gobgp {
    /// Starts gobgpd in `ns` with `config`, then announces its prefixes.
    pub fn start(ns: &Netns, config: &GobgpConfig) -> Result<Gobgp> {
        config.validate()?;
        let g = Gobgp::start_raw(ns, &config.render())?;
        for p in &config.announce {
            g.add_route(p)?;
        }
        Ok(g)
    }

    /// Starts gobgpd in `ns` with a hand-written TOML config.
    pub fn start_raw(ns: &Netns, toml: &str) -> Result<Gobgp> {
        let dir = ns.state_dir().join("gobgp");
        if dir.exists() {
            bail!("a GoBGP instance already uses {}", dir.display());
        }
        crate::cleanup::create_dir(&dir)?;
        let conf = dir.join("gobgpd.toml");
        std::fs::write(&conf, toml)?;
        let mut c = ns.command("gobgpd");
        c.arg("-f")
            .arg(&conf)
            .args(["-t", "toml", "-p", "--pprof-disable", "-l", "info"])
            .arg(format!("--api-hosts=127.0.0.1:{API_PORT}"));
        let child = NsChild::spawn_logged(c, &dir.join("gobgpd.log"))
            .with_context(|| format!("starting gobgpd in {}", ns.name()))?;
        std::fs::write(dir.join("gobgpd.pid"), format!("{}\n", child.pid()))?;
        let mut g = Gobgp {
            ns: ns.clone(),
            dir,
            child: Some(child),
        };
        let ready = wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
            if let Some(c) = g.child.as_mut()
                && !c.is_running()
            {
                return Ok(false);
            }
            g.cli(&["global"])
                .map(|_| true)
                .map_err(|e| format!("{e:#}"))
        })
        .map_err(anyhow::Error::from)
        .with_context(|| format!("gobgpd in {} does not answer", ns.name()))?;
        if !ready {
            bail!("gobgpd in {} exited:\n{}", ns.name(), g.logs(30));
        }
        Ok(g)
    }

    pub fn ns(&self) -> &Netns {
        &self.ns
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.pid())
    }

    /// Runs `gobgp -u 127.0.0.1 -p 50051 args...` in the namespace.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        let mut c = self.ns.command("gobgp");
        c.args(["-u", "127.0.0.1", "-p", &API_PORT.to_string()])
            .args(args);
        cmd::run(&mut c)
    }

    fn cli_json(&self, args: &[&str]) -> Result<Value> {
        let out = self.cli(args)?;
        if out.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&out).with_context(|| format!("parsing gobgp {args:?}: {out}"))
    }

    /// `gobgp neighbor -j`, typed.
    pub fn neighbors(&self) -> Result<Vec<GobgpNeighbor>> {
        Ok(parse_neighbors(&self.cli_json(&["neighbor", "-j"])?))
    }

    /// The session state of neighbor `addr` (`established`, `active`, ...).
    pub fn neighbor_state(&self, addr: IpAddr) -> Result<Option<String>> {
        Ok(self
            .neighbors()?
            .into_iter()
            .find(|n| n.addr.parse::<IpAddr>().ok() == Some(addr))
            .map(|n| n.state))
    }

    /// `gobgp global rib -a ipv4 -j`, typed.
    pub fn rib_v4(&self) -> Result<Vec<GobgpRoute>> {
        Ok(parse_rib(
            &self.cli_json(&["global", "rib", "-a", "ipv4", "-j"])?,
        ))
    }

    /// `gobgp global rib -a ipv6 -j`, typed.
    pub fn rib_v6(&self) -> Result<Vec<GobgpRoute>> {
        Ok(parse_rib(
            &self.cli_json(&["global", "rib", "-a", "ipv6", "-j"])?,
        ))
    }

    /// Neighbor `addr` as `gobgp neighbor -j` shows it (its JSON).
    pub fn neighbor(&self, addr: IpAddr) -> Result<Option<Value>> {
        Ok(self
            .neighbors()?
            .into_iter()
            .find(|n| n.addr.parse::<IpAddr>().ok() == Some(addr))
            .map(|n| n.raw))
    }

    /// Adds `prefix` to the global RIB (announced to the peers).
    pub fn add_route(&self, prefix: &str) -> Result<()> {
        let net: ipnet::IpNet = prefix
            .parse()
            .with_context(|| format!("bad prefix {prefix}"))?;
        ensure!(
            plan::is_allowed_net(&net),
            "prefix {prefix} is outside the lab's ranges"
        );
        let fam = if net.addr().is_ipv4() { "ipv4" } else { "ipv6" };
        self.cli(&["global", "rib", "add", prefix, "-a", fam])?;
        Ok(())
    }

    /// Withdraws `prefix` from the global RIB.
    pub fn del_route(&self, prefix: &str) -> Result<()> {
        let fam = if prefix.contains(':') { "ipv6" } else { "ipv4" };
        self.cli(&["global", "rib", "del", prefix, "-a", fam])?;
        Ok(())
    }

    /// Waits until neighbor `addr` is established.
    pub fn wait_established(&self, addr: IpAddr, timeout: Duration) -> Result<()> {
        wait_until(timeout, Duration::from_millis(250), || {
            match self.neighbor_state(addr) {
                Ok(Some(s)) if s == "established" => Ok(()),
                Ok(s) => Err(format!("GoBGP neighbor {addr}: {s:?}")),
                Err(e) => Err(format!("{e:#}")),
            }
        })
        .map_err(anyhow::Error::from)
        .with_context(|| format!("waiting for GoBGP neighbor {addr} in {}", self.ns.name()))
    }

    /// The tail of gobgpd's log.
    pub fn logs(&self, lines: usize) -> String {
        cmd::tail(&self.dir.join("gobgpd.log"), lines)
    }

    /// Stops gobgpd (SIGTERM, then SIGKILL).
    pub fn stop(mut self) -> Result<()> {
        if let Some(c) = self.child.take() {
            c.stop()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbor_and_rib_json_are_parsed() {
        let n: Value = serde_json::from_str(
            r#"[{"conf":{"neighbor_address":"192.0.2.1","peer_asn":64512},"state":{"neighbor_address":"192.0.2.1","peer_asn":64512,"session_state":6}}]"#,
        )
        .unwrap();
        let n = parse_neighbors(&n);
        assert_eq!(n[0].addr, "192.0.2.1");
        assert_eq!(n[0].state, "established");
        assert_eq!(n[0].peer_as, Some(64512));
        let r: Value = serde_json::from_str(
            r#"{"198.51.100.30/32":[{"nlri":{"prefix":"198.51.100.30/32"},"best":true,"attrs":[{"type":1,"value":0},{"type":2,"as_paths":[{"segment_type":2,"num":1,"asns":[64512]}]},{"type":3,"nexthop":"192.0.2.1"},{"type":5,"value":250}],"neighbor-ip":"192.0.2.1"}]}"#,
        )
        .unwrap();
        let r = parse_rib(&r);
        assert_eq!(r[0].prefix, "198.51.100.30/32");
        assert!(r[0].best);
        assert_eq!(r[0].as_path, vec![64512]);
        assert_eq!(r[0].nexthop.as_deref(), Some("192.0.2.1"));
        assert_eq!(r[0].local_pref, Some(250));
        assert_eq!(r[0].neighbor.as_deref(), Some("192.0.2.1"));
    }

    #[test]
    fn renders_graceful_restart() {
        let c = GobgpConfig::new(64514, "192.0.2.2".parse().unwrap()).peer(
            GobgpPeer::new("192.0.2.11".parse().unwrap(), 64513)
                .families(&[Family::Ipv4, Family::Ipv6])
                .graceful_restart(),
        );
        let s = c.render();
        assert!(
            s.contains("[neighbors.graceful-restart.config]\n    enabled = true\n    notification-enabled = true"),
            "{s}"
        );
        assert_eq!(
            s.matches("[neighbors.afi-safis.mp-graceful-restart.config]\n      enabled = true")
                .count(),
            2,
            "{s}"
        );
        // The neighbor's tables come before its afi-safis array.
        let gr = s.find("[neighbors.graceful-restart.config]").unwrap();
        assert!(gr < s.find("[[neighbors.afi-safis]]").unwrap(), "{s}");
    }

    #[test]
    fn renders_toml() {
        let c = GobgpConfig::new(64514, "192.0.2.2".parse().unwrap())
            .peer(GobgpPeer::new("192.0.2.1".parse().unwrap(), 64512).multihop(4));
        let s = c.render();
        assert!(s.contains("neighbor-address = \"192.0.2.1\""), "{s}");
        assert!(s.contains("multihop-ttl = 4"), "{s}");
        assert!(s.contains("afi-safi-name = \"ipv4-unicast\""), "{s}");
    }
}
