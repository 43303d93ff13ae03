//! One face for FRR, BIRD and GoBGP, for tests that run the same scenario
//! against each router: a neutral neighbor description rendered into each
//! daemon's config ([`RouterConfig`]), and the session state, the routes as
//! the router sees them and a restart ([`Router`]).
//!
//! Each daemon's own type ([`Frr`], [`Bird`], [`Gobgp`]) stays available
//! through the enum for what only that daemon can show.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::bird::{Bird, BirdConfig, BirdNeighbor};
use crate::frr::{Frr, FrrConfig, FrrNeighbor};
use crate::gobgp::{Gobgp, GobgpConfig, GobgpPeer};
use crate::netns::Netns;
use crate::{Family, Result, wait_until};

/// Which daemon a [`Router`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouterKind {
    Frr,
    Bird,
    Gobgp,
}

impl RouterKind {
    pub fn name(self) -> &'static str {
        match self {
            RouterKind::Frr => "FRR",
            RouterKind::Bird => "BIRD",
            RouterKind::Gobgp => "GoBGP",
        }
    }
}

/// A BGP neighbor of a router, whichever daemon runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbor {
    pub addr: IpAddr,
    pub remote_as: u32,
    /// TCP MD5 password.
    pub password: Option<String>,
    /// eBGP multihop TTL.
    pub multihop: Option<u8>,
    /// Address families to exchange (default: the neighbor address's).
    pub families: Vec<Family>,
    /// Hold time in seconds; the keepalive interval is a third of it.
    pub hold_time: Option<u32>,
    /// The router is a graceful restart helper (RFC 4724) for this
    /// neighbor, with the RFC 8538 N bit where it has it: FRR
    /// `graceful-restart-helper` (FRR 8.4 sets the N bit by default), BIRD
    /// `graceful restart aware` (no N bit), GoBGP `graceful-restart` with
    /// `notification-enabled` and `mp-graceful-restart` on each family.
    pub graceful_restart: bool,
}

impl Neighbor {
    pub fn new(addr: IpAddr, remote_as: u32) -> Neighbor {
        Neighbor {
            addr,
            remote_as,
            password: None,
            multihop: None,
            families: vec![Family::of(addr)],
            hold_time: None,
            graceful_restart: false,
        }
    }

    /// Graceful restart helper for this neighbor (see the field).
    pub fn graceful_restart(mut self) -> Self {
        self.graceful_restart = true;
        self
    }

    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.to_string());
        self
    }

    pub fn multihop(mut self, ttl: u8) -> Self {
        self.multihop = Some(ttl);
        self
    }

    pub fn families(mut self, families: &[Family]) -> Self {
        self.families = families.to_vec();
        self
    }

    pub fn hold_time(mut self, seconds: u32) -> Self {
        self.hold_time = Some(seconds);
        self
    }

    fn keepalive(&self) -> Option<(u32, u32)> {
        self.hold_time.map(|h| (h, (h / 3).max(1)))
    }

    /// The FRR neighbor (`neighbor X ...` lines).
    pub fn frr(&self) -> FrrNeighbor {
        let mut n = FrrNeighbor::new(self.addr, self.remote_as).families(&self.families);
        if let Some(p) = &self.password {
            n = n.password(p);
        }
        if let Some(t) = self.multihop {
            n = n.ebgp_multihop(t);
        }
        if let Some((hold, keepalive)) = self.keepalive() {
            n = n.timers(keepalive, hold);
        }
        if self.graceful_restart {
            n = n.extra("graceful-restart-helper");
        }
        n
    }

    /// The BIRD neighbor (`protocol bgp <name>`).
    pub fn bird(&self, name: &str) -> BirdNeighbor {
        let mut n = BirdNeighbor::new(name, self.addr, self.remote_as).families(&self.families);
        if let Some(p) = &self.password {
            n = n.password(p);
        }
        match self.multihop {
            Some(t) => n = n.multihop(t),
            // What FRR and GoBGP assume of a neighbor without multihop.
            None => n = n.direct(),
        }
        if let Some((hold, keepalive)) = self.keepalive() {
            n = n.timers(hold, keepalive);
        }
        if self.graceful_restart {
            n = n.graceful_restart();
        }
        n
    }

    /// The GoBGP neighbor (`[[neighbors]]`).
    pub fn gobgp(&self) -> GobgpPeer {
        let mut n = GobgpPeer::new(self.addr, self.remote_as).families(&self.families);
        if let Some(p) = &self.password {
            n = n.password(p);
        }
        if let Some(t) = self.multihop {
            n = n.multihop(t);
        }
        if let Some((hold, keepalive)) = self.keepalive() {
            n = n.timers(hold, keepalive);
        }
        if self.graceful_restart {
            n = n.graceful_restart();
        }
        n
    }
}

/// A router of any kind: its AS, router id, neighbors and the prefixes it
/// announces. Rendered into the daemon's own config, which checks it
/// against the lab's plan before the daemon starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterConfig {
    pub kind: RouterKind,
    /// FRR's hostname.
    pub name: String,
    pub asn: u32,
    pub router_id: Ipv4Addr,
    pub neighbors: Vec<Neighbor>,
    pub announce: Vec<String>,
}

impl RouterConfig {
    pub fn new(kind: RouterKind, name: &str, asn: u32, router_id: Ipv4Addr) -> RouterConfig {
        RouterConfig {
            kind,
            name: name.to_string(),
            asn,
            router_id,
            neighbors: Vec::new(),
            announce: Vec::new(),
        }
    }

    pub fn neighbor(mut self, n: Neighbor) -> Self {
        self.neighbors.push(n);
        self
    }

    pub fn announce(mut self, prefix: &str) -> Self {
        self.announce.push(prefix.to_string());
        self
    }

    pub fn frr(&self) -> FrrConfig {
        let mut c = FrrConfig::new(&self.name, self.asn, self.router_id);
        for n in &self.neighbors {
            c = c.neighbor(n.frr());
        }
        for p in &self.announce {
            c = c.network(p);
        }
        c
    }

    /// Neighbor `i` is protocol `peer<i>`.
    pub fn bird(&self) -> BirdConfig {
        let mut c = BirdConfig::new(self.asn, self.router_id);
        for (i, n) in self.neighbors.iter().enumerate() {
            c = c.neighbor(n.bird(&format!("peer{i}")));
        }
        for p in &self.announce {
            c = c.announce(p);
        }
        c
    }

    pub fn gobgp(&self) -> GobgpConfig {
        let mut c = GobgpConfig::new(self.asn, self.router_id);
        for n in &self.neighbors {
            c = c.peer(n.gobgp());
        }
        for p in &self.announce {
            c = c.announce(p);
        }
        c
    }
}

/// One path as the router sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Route {
    pub prefix: String,
    /// The BGP next hops (an IPv6 route may carry a link-local one too).
    pub next_hops: Vec<String>,
    pub local_pref: Option<u32>,
    /// Empty for iBGP and local routes.
    pub as_path: Vec<u32>,
}

/// The AS numbers of an AS path as the daemons print it (`64513 64514`;
/// set brackets are skipped).
fn as_numbers(text: &str) -> Vec<u32> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter_map(|a| a.parse().ok())
        .collect()
}

/// A running router. Dropping it stops the daemon.
#[derive(Debug)]
pub enum Router {
    Frr(Frr),
    Bird(Bird),
    Gobgp(Gobgp),
}

impl Router {
    /// Starts `config.kind` in `ns`.
    pub fn start(ns: &Netns, config: &RouterConfig) -> Result<Router> {
        Ok(match config.kind {
            RouterKind::Frr => Router::Frr(Frr::start(ns, &config.frr())?),
            RouterKind::Bird => Router::Bird(Bird::start(ns, &config.bird())?),
            RouterKind::Gobgp => Router::Gobgp(Gobgp::start(ns, &config.gobgp())?),
        })
    }

    pub fn kind(&self) -> RouterKind {
        match self {
            Router::Frr(_) => RouterKind::Frr,
            Router::Bird(_) => RouterKind::Bird,
            Router::Gobgp(_) => RouterKind::Gobgp,
        }
    }

    pub fn ns(&self) -> &Netns {
        match self {
            Router::Frr(r) => r.ns(),
            Router::Bird(r) => r.ns(),
            Router::Gobgp(r) => r.ns(),
        }
    }

    /// The instance directory (config, logs).
    pub fn dir(&self) -> &Path {
        match self {
            Router::Frr(r) => r.dir(),
            Router::Bird(r) => r.dir(),
            Router::Gobgp(r) => r.dir(),
        }
    }

    /// The session state with `addr` as the daemon words it, or None when
    /// it has no such neighbor.
    pub fn state(&self, addr: IpAddr) -> Result<Option<String>> {
        match self {
            Router::Frr(r) => r.bgp_neighbor_state(addr),
            Router::Bird(r) => r.bgp_state(addr),
            Router::Gobgp(r) => r.neighbor_state(addr),
        }
    }

    /// Whether the BGP session with `addr` is established.
    pub fn established(&self, addr: IpAddr) -> Result<bool> {
        Ok(self
            .state(addr)?
            .is_some_and(|s| s.eq_ignore_ascii_case("established")))
    }

    /// Waits until the session with `addr` is established; the error has
    /// the daemon's log.
    pub fn wait_established(&self, addr: IpAddr, timeout: Duration) -> Result<()> {
        wait_until(timeout, Duration::from_millis(250), || {
            match self.state(addr) {
                Ok(Some(s)) if s.eq_ignore_ascii_case("established") => Ok(()),
                Ok(s) => Err(format!("{} neighbor {addr}: {s:?}", self.kind().name())),
                Err(e) => Err(format!("{e:#}")),
            }
        })
        .map_err(anyhow::Error::from)
        .with_context(|| {
            format!(
                "waiting for {} neighbor {addr} in {}; its log:\n{}",
                self.kind().name(),
                self.ns().name(),
                self.logs(20)
            )
        })
    }

    /// Every path of the router's IPv4 or IPv6 table.
    pub fn routes(&self, family: Family) -> Result<Vec<Route>> {
        Ok(match self {
            Router::Frr(r) => match family {
                Family::Ipv4 => r.routes_v4()?,
                Family::Ipv6 => r.routes_v6()?,
            }
            .into_iter()
            .map(|r| Route {
                prefix: r.prefix,
                next_hops: r.nexthops,
                local_pref: r.local_pref.and_then(|l| u32::try_from(l).ok()),
                as_path: as_numbers(&r.as_path),
            })
            .collect(),
            Router::Bird(r) => r
                .routes()?
                .into_iter()
                .filter(|r| r.prefix.contains(':') == (family == Family::Ipv6))
                .map(|r| Route {
                    next_hops: r
                        .attrs
                        .get("BGP.next_hop")
                        .map(|n| n.split_whitespace().map(str::to_string).collect())
                        .unwrap_or_default(),
                    local_pref: r.attrs.get("BGP.local_pref").and_then(|l| l.parse().ok()),
                    as_path: as_numbers(r.attrs.get("BGP.as_path").map_or("", String::as_str)),
                    prefix: r.prefix,
                })
                .collect(),
            Router::Gobgp(r) => match family {
                Family::Ipv4 => r.rib_v4()?,
                Family::Ipv6 => r.rib_v6()?,
            }
            .into_iter()
            .map(|r| Route {
                prefix: r.prefix,
                next_hops: r.nexthop.into_iter().collect(),
                local_pref: r.local_pref,
                as_path: r.as_path,
            })
            .collect(),
        })
    }

    /// The prefixes of the router's IPv4 or IPv6 table, sorted.
    pub fn prefixes(&self, family: Family) -> Result<Vec<String>> {
        let mut r: Vec<String> = self.routes(family)?.into_iter().map(|r| r.prefix).collect();
        r.sort();
        r.dedup();
        Ok(r)
    }

    /// The tail of the daemon's log.
    pub fn logs(&self, lines: usize) -> String {
        match self {
            Router::Frr(r) => r.logs(lines),
            Router::Bird(r) => r.logs(lines),
            Router::Gobgp(r) => r.logs(lines),
        }
    }

    /// Stops the daemon.
    pub fn stop(self) -> Result<()> {
        match self {
            Router::Frr(r) => r.stop(),
            Router::Bird(r) => r.stop(),
            Router::Gobgp(r) => r.stop(),
        }
    }

    /// Stops the daemon and starts a fresh one with `config` in the same
    /// namespace (empty tables, new sessions). The old instance directory
    /// is kept beside the new one as `<dir>.<n>`, logs included.
    pub fn restart(self, config: &RouterConfig) -> Result<Router> {
        let ns = self.ns().clone();
        let dir = self.dir().to_path_buf();
        self.stop()?;
        let kept = retire_dir(&dir)?;
        Router::start(&ns, config)
            .with_context(|| format!("restarting; the old instance is in {}", kept.display()))
    }
}

/// Graceful restart and route refresh, as each daemon shows them.
impl Router {
    /// The prefixes of `family` the router keeps as stale across a
    /// neighbor's graceful restart (RFC 4724): FRR and GoBGP flag each path
    /// (`"stale": true`); None for BIRD, which does not (see
    /// [`Router::graceful_restart_active`]).
    pub fn stale_prefixes(&self, family: Family) -> Result<Option<Vec<String>>> {
        let stale = |raw: &serde_json::Value| raw["stale"].as_bool() == Some(true);
        let mut r: Vec<String> = match self {
            Router::Frr(f) => match family {
                Family::Ipv4 => f.routes_v4()?,
                Family::Ipv6 => f.routes_v6()?,
            }
            .into_iter()
            .filter(|r| stale(&r.raw))
            .map(|r| r.prefix)
            .collect(),
            Router::Gobgp(g) => match family {
                Family::Ipv4 => g.rib_v4()?,
                Family::Ipv6 => g.rib_v6()?,
            }
            .into_iter()
            .filter(|r| stale(&r.raw))
            .map(|r| r.prefix)
            .collect(),
            Router::Bird(_) => return Ok(None),
        };
        r.sort();
        r.dedup();
        Ok(Some(r))
    }

    /// Whether the router runs the helper procedure of graceful restart for
    /// the neighbor at `addr`: BIRD says so (`Neighbor graceful restart
    /// active`); None for FRR and GoBGP, which flag the stale paths instead
    /// ([`Router::stale_prefixes`]).
    pub fn graceful_restart_active(&self, addr: IpAddr) -> Result<Option<bool>> {
        match self {
            Router::Bird(b) => b.graceful_restart_active(addr).map(Some),
            Router::Frr(_) | Router::Gobgp(_) => Ok(None),
        }
    }

    /// Makes the router ask the neighbor at `addr` for its `family` routes
    /// again with a ROUTE-REFRESH: FRR `clear bgp <afi> unicast <addr> in`
    /// (a ROUTE-REFRESH, as the kit's FRR has no `soft-reconfiguration
    /// inbound`), BIRD `reload in <protocol>`. GoBGP cannot: it keeps every
    /// Adj-RIB-In and its `softresetin` only re-runs its import policy over
    /// it, so this is an error there.
    pub fn request_route_refresh(&self, addr: IpAddr, family: Family) -> Result<()> {
        let afi = match family {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        };
        match self {
            Router::Frr(f) => {
                f.vtysh(&[&format!("clear bgp {afi} unicast {addr} in")])?;
            }
            Router::Bird(b) => {
                let Some(name) = b.protocol_of(addr)? else {
                    anyhow::bail!("BIRD has no BGP protocol for {addr}");
                };
                let out = b.birdc(&format!("reload in {name}"))?;
                anyhow::ensure!(
                    out.contains("reload") || out.contains("Reload"),
                    "birdc reload in {name}: {out}"
                );
            }
            Router::Gobgp(_) => anyhow::bail!(
                "GoBGP never sends ROUTE-REFRESH: `gobgp neighbor {addr} softresetin -a {afi}` \
                 re-applies its import policy to the Adj-RIB-In it keeps"
            ),
        }
        Ok(())
    }

    /// A count of what the router received from the neighbor at `addr`
    /// that grows with every UPDATE, duplicates included: FRR and GoBGP
    /// count UPDATE messages (`messageStats.updatesRecv`,
    /// `state.messages.received.update`), BIRD route updates (`Import
    /// updates`, received column).
    pub fn updates_received(&self, addr: IpAddr) -> Result<u64> {
        match self {
            Router::Frr(f) => {
                let v = f.show_json(&format!("show bgp neighbors {addr} json"))?;
                let n = &v[addr.to_string()]["messageStats"]["updatesRecv"];
                n.as_u64()
                    .with_context(|| format!("no messageStats.updatesRecv for {addr}: {v}"))
            }
            Router::Gobgp(g) => {
                let n = g
                    .neighbor(addr)?
                    .with_context(|| format!("GoBGP has no neighbor {addr}"))?;
                // Zero counters are left out of the JSON.
                Ok(n["state"]["messages"]["received"]["update"]
                    .as_u64()
                    .unwrap_or(0))
            }
            Router::Bird(b) => b.import_updates(addr),
        }
    }
}

/// Renames `dir` to the first free `<dir>.<n>`; returns the new name.
fn retire_dir(dir: &Path) -> Result<PathBuf> {
    let name = dir
        .file_name()
        .context("an instance directory has a name")?
        .to_string_lossy()
        .into_owned();
    let to = (1..)
        .map(|n| dir.with_file_name(format!("{name}.{n}")))
        .find(|p| !p.exists())
        .expect("an unbounded range");
    std::fs::rename(dir, &to)
        .with_context(|| format!("moving {} to {}", dir.display(), to.display()))?;
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(kind: RouterKind) -> RouterConfig {
        RouterConfig::new(kind, "r", 64514, "192.0.2.2".parse().unwrap()).neighbor(
            Neighbor::new("192.0.2.11".parse().unwrap(), 64513)
                .password("k")
                .multihop(255)
                .hold_time(9)
                .families(&[Family::Ipv4, Family::Ipv6]),
        )
    }

    #[test]
    fn one_neighbor_renders_alike_for_every_daemon() {
        let frr = config(RouterKind::Frr).frr().render();
        for line in [
            "neighbor 192.0.2.11 remote-as 64513",
            "neighbor 192.0.2.11 password k",
            "neighbor 192.0.2.11 ebgp-multihop 255",
            "neighbor 192.0.2.11 timers 3 9",
            "address-family ipv6 unicast\n  neighbor 192.0.2.11 activate",
        ] {
            assert!(frr.contains(line), "{line:?} not in\n{frr}");
        }
        let bird = config(RouterKind::Bird)
            .bird()
            .render(Path::new("/x/bird.log"));
        for line in [
            "protocol bgp peer0 {",
            "neighbor 192.0.2.11 as 64513;",
            "password \"k\";",
            "multihop 255;",
            "hold time 9;\n  keepalive time 3;",
            "ipv6 {",
        ] {
            assert!(bird.contains(line), "{line:?} not in\n{bird}");
        }
        let gobgp = config(RouterKind::Gobgp).gobgp().render();
        for line in [
            "auth-password = \"k\"",
            "multihop-ttl = 255",
            "hold-time = 9\n    keepalive-interval = 3",
            "afi-safi-name = \"ipv6-unicast\"",
        ] {
            assert!(gobgp.contains(line), "{line:?} not in\n{gobgp}");
        }
    }

    #[test]
    fn graceful_restart_renders_for_every_daemon() {
        let plain = config(RouterKind::Frr);
        assert!(!plain.frr().render().contains("graceful"));
        let gr = |kind| {
            let mut c = config(kind);
            c.neighbors[0] = c.neighbors[0].clone().graceful_restart();
            c
        };
        let frr = gr(RouterKind::Frr).frr().render();
        assert!(
            frr.contains(" neighbor 192.0.2.11 graceful-restart-helper\n"),
            "{frr}"
        );
        let bird = gr(RouterKind::Bird).bird().render(Path::new("/x/bird.log"));
        assert!(bird.contains("  graceful restart aware;\n"), "{bird}");
        let gobgp = gr(RouterKind::Gobgp).gobgp().render();
        assert!(gobgp.contains("notification-enabled = true"), "{gobgp}");
        assert!(
            gobgp.contains("[neighbors.afi-safis.mp-graceful-restart.config]"),
            "{gobgp}"
        );
    }

    #[test]
    fn as_paths_are_read_as_numbers() {
        assert_eq!(as_numbers("64513 64514"), vec![64513, 64514]);
        assert_eq!(as_numbers("64513 {64515,64516}"), vec![64513, 64515, 64516]);
        assert!(as_numbers("").is_empty());
    }

    #[test]
    fn a_retired_directory_keeps_its_files() {
        let base = std::env::temp_dir().join(format!("testkit-retire-{}", std::process::id()));
        let dir = base.join("bird");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("bird.log"), "old").unwrap();
        std::fs::create_dir_all(base.join("bird.1")).unwrap();
        let kept = retire_dir(&dir).unwrap();
        assert_eq!(kept, base.join("bird.2"));
        assert!(!dir.exists());
        assert_eq!(
            std::fs::read_to_string(kept.join("bird.log")).unwrap(),
            "old"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
