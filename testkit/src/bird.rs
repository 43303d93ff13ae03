//! BIRD 2 in a namespace: a rendered config, control via `birdc`, and
//! parsers for `show protocols all` and `show route all`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail, ensure};

use crate::netns::Netns;
use crate::process::{pid_alive, read_pid_file, stop_pid};
use crate::{Family, Result, cmd, plan, wait_until};

/// A BGP neighbor in a [`BirdConfig`] (one `protocol bgp` each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BirdNeighbor {
    /// The protocol name (`birdc show protocols` lists it).
    pub name: String,
    pub addr: IpAddr,
    pub remote_as: u32,
    pub multihop: Option<u8>,
    /// `direct`: on a connected network, next hops resolved on its
    /// interface (BIRD's default for eBGP; iBGP otherwise resolves them
    /// through an IGP table the kit's config does not fill).
    pub direct: bool,
    pub password: Option<String>,
    pub bfd: bool,
    pub passive: bool,
    /// Channels to open (default: the neighbor address's family).
    pub families: Vec<Family>,
    /// (hold, keepalive) seconds.
    pub timers: Option<(u32, u32)>,
    /// `graceful restart aware;`: BIRD keeps the neighbor's routes as
    /// stale across its graceful restart (RFC 4724 helper; BIRD 2.0 has no
    /// RFC 8538 N bit).
    pub graceful_restart: bool,
}

impl BirdNeighbor {
    pub fn new(name: &str, addr: IpAddr, remote_as: u32) -> BirdNeighbor {
        BirdNeighbor {
            name: name.to_string(),
            addr,
            remote_as,
            multihop: None,
            direct: false,
            password: None,
            bfd: false,
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

    pub fn multihop(mut self, ttl: u8) -> Self {
        self.multihop = Some(ttl);
        self
    }

    pub fn direct(mut self) -> Self {
        self.direct = true;
        self
    }

    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.to_string());
        self
    }

    pub fn bfd(mut self) -> Self {
        self.bfd = true;
        self
    }

    pub fn passive(mut self) -> Self {
        self.passive = true;
        self
    }

    pub fn families(mut self, families: &[Family]) -> Self {
        self.families = families.to_vec();
        self
    }

    pub fn timers(mut self, hold: u32, keepalive: u32) -> Self {
        self.timers = Some((hold, keepalive));
        self
    }
}

/// A bird.conf: BGP neighbors that import everything and export the static
/// routes listed in `announce` (blackhole routes, never installed in the
/// kernel: the config has no `kernel` protocol).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BirdConfig {
    pub router_id: Ipv4Addr,
    pub asn: u32,
    pub neighbors: Vec<BirdNeighbor>,
    pub announce: Vec<String>,
    /// Appended verbatim.
    pub extra: String,
}

impl BirdConfig {
    pub fn new(asn: u32, router_id: Ipv4Addr) -> BirdConfig {
        BirdConfig {
            router_id,
            asn,
            neighbors: Vec::new(),
            announce: Vec::new(),
            extra: String::new(),
        }
    }

    pub fn neighbor(mut self, n: BirdNeighbor) -> Self {
        self.neighbors.push(n);
        self
    }

    pub fn announce(mut self, prefix: &str) -> Self {
        self.announce.push(prefix.to_string());
        self
    }

    pub fn extra(mut self, text: &str) -> Self {
        self.extra.push_str(text);
        self.extra.push('\n');
        self
    }

    pub fn validate(&self) -> Result<()> {
        plan::check_router(
            self.asn,
            self.neighbors.iter().map(|n| (n.addr, n.remote_as)),
            &self.announce,
        )?;
        for n in &self.neighbors {
            ensure!(
                !n.name.is_empty()
                    && n.name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "BIRD protocol name {:?}: use [A-Za-z0-9_]",
                n.name
            );
        }
        Ok(())
    }

    /// The bird.conf text (`log_file` is where BIRD should log).
    pub fn render(&self, log_file: &Path) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "log \"{}\" all;", log_file.display());
        let _ = writeln!(s, "router id {};", self.router_id);
        let _ = writeln!(s, "timeformat protocol iso long;");
        let _ = writeln!(s, "protocol device {{ }}");
        let v4: Vec<&String> = self.announce.iter().filter(|p| !p.contains(':')).collect();
        let v6: Vec<&String> = self.announce.iter().filter(|p| p.contains(':')).collect();
        let _ = writeln!(s, "protocol static static4 {{\n  ipv4;");
        for p in &v4 {
            let _ = writeln!(s, "  route {p} blackhole;");
        }
        let _ = writeln!(s, "}}");
        let _ = writeln!(s, "protocol static static6 {{\n  ipv6;");
        for p in &v6 {
            let _ = writeln!(s, "  route {p} blackhole;");
        }
        let _ = writeln!(s, "}}");
        if self.neighbors.iter().any(|n| n.bfd) {
            let _ = writeln!(s, "protocol bfd {{ }}");
        }
        for n in &self.neighbors {
            let _ = writeln!(s, "protocol bgp {} {{", n.name);
            let _ = writeln!(s, "  local as {};", self.asn);
            let _ = writeln!(s, "  neighbor {} as {};", n.addr, n.remote_as);
            if let Some(t) = n.multihop {
                let _ = writeln!(s, "  multihop {t};");
            }
            if n.direct {
                let _ = writeln!(s, "  direct;");
            }
            if let Some(p) = &n.password {
                let _ = writeln!(s, "  password \"{p}\";");
            }
            if n.bfd {
                let _ = writeln!(s, "  bfd on;");
            }
            if n.passive {
                let _ = writeln!(s, "  passive on;");
            }
            if let Some((h, k)) = n.timers {
                let _ = writeln!(s, "  hold time {h};\n  keepalive time {k};");
            }
            if n.graceful_restart {
                let _ = writeln!(s, "  graceful restart aware;");
            }
            let _ = writeln!(s, "  connect retry time 5;");
            for f in &n.families {
                let (ch, st) = match f {
                    Family::Ipv4 => ("ipv4", "static4"),
                    Family::Ipv6 => ("ipv6", "static6"),
                };
                let _ = writeln!(
                    s,
                    "  {ch} {{ import all; export where proto = \"{st}\"; }};"
                );
            }
            let _ = writeln!(s, "}}");
        }
        s.push_str(&self.extra);
        s
    }
}

/// A channel section of `show protocols all` (`Channel ipv4`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BirdChannel {
    pub name: String,
    /// `UP`, `DOWN`, ...
    pub state: String,
    pub imported: Option<u64>,
    pub exported: Option<u64>,
    pub details: BTreeMap<String, String>,
}

/// One protocol of `birdc show protocols all`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BirdProtocol {
    pub name: String,
    /// `BGP`, `Static`, `Device`, `BFD`, ...
    pub proto: String,
    pub table: String,
    /// `up`, `down`, `start`
    pub state: String,
    pub since: String,
    /// `Established`, `Active`, `Connect`, ... for BGP.
    pub info: String,
    /// `BGP state:` line, when present.
    pub bgp_state: Option<String>,
    pub neighbor_address: Option<String>,
    pub neighbor_as: Option<u32>,
    /// Every `Key: value` line outside channel sections.
    pub details: BTreeMap<String, String>,
    pub channels: Vec<BirdChannel>,
}

/// One route (one path) of `birdc show route all`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BirdRoute {
    /// `master4`, `master6`
    pub table: String,
    pub prefix: String,
    /// `unicast`, `blackhole`, `unreachable`, ...
    pub kind: String,
    /// The protocol the route came from (`frr`, `static4`).
    pub protocol: String,
    /// Whether BIRD selected this path (`*`).
    pub primary: bool,
    pub preference: Option<u32>,
    /// Gateways (`via 192.0.2.1 on eth0`).
    pub via: Vec<String>,
    pub iface: Option<String>,
    /// Attribute lines (`BGP.as_path` -> `64512`, `Type` -> `BGP univ`).
    pub attrs: BTreeMap<String, String>,
}

fn split_kv(line: &str) -> Option<(String, String)> {
    let (k, v) = line.split_once(':')?;
    let k = k.trim();
    if k.is_empty() || k.contains("  ") {
        return None;
    }
    Some((k.to_string(), v.trim().to_string()))
}

/// Parses `birdc show protocols all` output.
pub fn parse_protocols(text: &str) -> Vec<BirdProtocol> {
    let mut r: Vec<BirdProtocol> = Vec::new();
    let mut in_channel = false;
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            if line.starts_with("BIRD ") || line.starts_with("Name ") {
                continue;
            }
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() < 4 {
                continue;
            }
            // Name Proto Table State Since[ date time] Info...
            let mut rest = cols[4..].to_vec();
            let mut since = String::new();
            if !rest.is_empty() {
                since = rest.remove(0).to_string();
                if since.contains('-') && rest.first().is_some_and(|t| t.contains(':')) {
                    since = format!("{since} {}", rest.remove(0));
                }
            }
            r.push(BirdProtocol {
                name: cols[0].to_string(),
                proto: cols[1].to_string(),
                table: cols[2].to_string(),
                state: cols[3].to_string(),
                since,
                info: rest.join(" "),
                ..Default::default()
            });
            in_channel = false;
            continue;
        }
        let Some(p) = r.last_mut() else { continue };
        let t = line.trim();
        if let Some(ch) = t.strip_prefix("Channel ") {
            p.channels.push(BirdChannel {
                name: ch.trim().to_string(),
                ..Default::default()
            });
            in_channel = true;
            continue;
        }
        let Some((k, v)) = split_kv(t) else { continue };
        if in_channel {
            let c = p.channels.last_mut().expect("in a channel");
            match k.as_str() {
                "State" => c.state = v.clone(),
                "Routes" => {
                    // "1 imported, 1 exported, 1 preferred"
                    for part in v.split(',') {
                        let mut it = part.split_whitespace();
                        if let (Some(n), Some(what)) = (it.next(), it.next()) {
                            let n = n.parse().ok();
                            match what {
                                "imported" => c.imported = n,
                                "exported" => c.exported = n,
                                _ => {}
                            }
                        }
                    }
                }
                _ => {}
            }
            c.details.insert(k, v);
        } else {
            match k.as_str() {
                "BGP state" => p.bgp_state = Some(v.clone()),
                "Neighbor address" => p.neighbor_address = Some(v.clone()),
                "Neighbor AS" => p.neighbor_as = v.parse().ok(),
                _ => {}
            }
            p.details.insert(k, v);
        }
    }
    r
}

/// Parses a route header (`unicast [frr 2024-01-01 10:00:00] * (100) [AS64512i]`).
fn parse_route_header(rest: &str, r: &mut BirdRoute) -> bool {
    let Some(open) = rest.find('[') else {
        return false;
    };
    let Some(close) = rest[open..].find(']').map(|c| c + open) else {
        return false;
    };
    r.kind = rest[..open].trim().to_string();
    if r.kind.is_empty() || r.kind.contains(' ') {
        return false;
    }
    r.protocol = rest[open + 1..close]
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let after = &rest[close + 1..];
    r.primary = after.split_whitespace().next() == Some("*");
    if let Some(o) = after.find('(')
        && let Some(c) = after[o..].find(')')
    {
        r.preference = after[o + 1..o + c]
            .split('/')
            .next()
            .and_then(|p| p.parse().ok());
    }
    true
}

/// Parses `birdc show route all` output.
pub fn parse_routes(text: &str) -> Vec<BirdRoute> {
    let mut r: Vec<BirdRoute> = Vec::new();
    let mut table = String::new();
    let mut prefix = String::new();
    for line in text.lines() {
        if line.trim().is_empty() || line.starts_with("BIRD ") {
            continue;
        }
        if let Some(t) = line.strip_prefix("Table ") {
            table = t.trim_end_matches(':').trim().to_string();
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            // A new prefix with its first path.
            let (p, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            prefix = p.to_string();
            let mut route = BirdRoute {
                table: table.clone(),
                prefix: prefix.clone(),
                ..Default::default()
            };
            if parse_route_header(rest.trim(), &mut route) {
                r.push(route);
            }
            continue;
        }
        let t = line.trim();
        // Another path of the same prefix (indented header line).
        let mut route = BirdRoute {
            table: table.clone(),
            prefix: prefix.clone(),
            ..Default::default()
        };
        if !t.starts_with("via ") && !line.starts_with('\t') && parse_route_header(t, &mut route) {
            r.push(route);
            continue;
        }
        let Some(cur) = r.last_mut() else { continue };
        if let Some(v) = t.strip_prefix("via ") {
            cur.via
                .push(v.split_whitespace().next().unwrap_or_default().to_string());
            if let Some((_, dev)) = v.split_once(" on ") {
                cur.iface = Some(dev.trim().to_string());
            }
        } else if let Some(dev) = t.strip_prefix("dev ") {
            cur.iface = Some(dev.trim().to_string());
        } else if let Some((k, v)) = t.split_once(':') {
            cur.attrs.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    r
}

/// A running BIRD in a namespace. Dropping it stops BIRD (pid file).
#[derive(Debug)]
pub struct Bird {
    ns: Netns,
    dir: PathBuf,
    stopped: bool,
}

impl Bird {
    /// Starts BIRD in `ns` with `config` rendered.
    pub fn start(ns: &Netns, config: &BirdConfig) -> Result<Bird> {
        config.validate()?;
        let dir = ns.state_dir().join("bird");
        Bird::start_raw(ns, &config.render(&dir.join("bird.log")))
    }

    /// Starts BIRD in `ns` with a hand-written bird.conf.
    pub fn start_raw(ns: &Netns, config: &str) -> Result<Bird> {
        let dir = ns.state_dir().join("bird");
        if dir.exists() {
            bail!("a BIRD instance already uses {}", dir.display());
        }
        crate::cleanup::create_dir(&dir)?;
        std::fs::write(dir.join("bird.conf"), config)?;
        let bird = Bird {
            ns: ns.clone(),
            dir,
            stopped: false,
        };
        let mut c = ns.command("bird");
        c.arg("-c")
            .arg(bird.dir.join("bird.conf"))
            .arg("-s")
            .arg(bird.socket())
            .arg("-P")
            .arg(bird.pid_file());
        cmd::run_logged(&mut c, &bird.dir.join("start.log"), Duration::from_secs(60))
            .with_context(|| format!("starting BIRD in {}", ns.name()))?;
        wait_until(Duration::from_secs(30), Duration::from_millis(50), || {
            bird.birdc("show status").map_err(|e| format!("{e:#}"))
        })
        .map_err(anyhow::Error::from)
        .with_context(|| format!("BIRD in {} does not answer birdc", ns.name()))?;
        Ok(bird)
    }

    pub fn ns(&self) -> &Netns {
        &self.ns
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("bird.ctl")
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.join("bird.pid")
    }

    pub fn pid(&self) -> Option<u32> {
        read_pid_file(&self.pid_file()).filter(|p| pid_alive(*p))
    }

    /// Runs `birdc -s SOCKET <command>`; returns its output.
    pub fn birdc(&self, command: &str) -> Result<String> {
        let mut c = self.ns.command("birdc");
        c.arg("-s").arg(self.socket());
        c.args(command.split_whitespace());
        let out = cmd::run(&mut c)?;
        if let Some(l) = out.lines().find(|l| l.starts_with("syntax error")) {
            bail!("birdc {command}: {l}");
        }
        Ok(out)
    }

    /// `show protocols all`, parsed.
    pub fn protocols(&self) -> Result<Vec<BirdProtocol>> {
        Ok(parse_protocols(&self.birdc("show protocols all")?))
    }

    pub fn protocol(&self, name: &str) -> Result<Option<BirdProtocol>> {
        Ok(self.protocols()?.into_iter().find(|p| p.name == name))
    }

    /// The BGP state of the neighbor at `addr` (`Established`, `Active`, ...).
    pub fn bgp_state(&self, addr: IpAddr) -> Result<Option<String>> {
        Ok(self
            .protocols()?
            .into_iter()
            .find(|p| {
                p.proto == "BGP"
                    && p.neighbor_address
                        .as_deref()
                        .and_then(|a| a.parse::<IpAddr>().ok())
                        == Some(addr)
            })
            .map(|p| p.bgp_state.unwrap_or(p.info)))
    }

    /// The name of the BGP protocol whose neighbor is `addr`.
    pub fn protocol_of(&self, addr: IpAddr) -> Result<Option<String>> {
        Ok(self
            .protocols()?
            .into_iter()
            .find(|p| {
                p.proto == "BGP"
                    && p.neighbor_address
                        .as_deref()
                        .and_then(|a| a.parse::<IpAddr>().ok())
                        == Some(addr)
            })
            .map(|p| p.name))
    }

    /// Whether BIRD keeps the routes of the neighbor at `addr` through its
    /// graceful restart (`Neighbor graceful restart active` in `show
    /// protocols all`).
    pub fn graceful_restart_active(&self, addr: IpAddr) -> Result<bool> {
        let Some(name) = self.protocol_of(addr)? else {
            bail!("BIRD has no BGP protocol for {addr}");
        };
        let text = self.birdc(&format!("show protocols all {name}"))?;
        Ok(graceful_restart_active_in(&text))
    }

    /// How many route updates BIRD received from the neighbor at `addr`,
    /// accepted or ignored as duplicates (the `received` column of `Import
    /// updates` in `show protocols all`, summed over the channels).
    pub fn import_updates(&self, addr: IpAddr) -> Result<u64> {
        let Some(name) = self.protocol_of(addr)? else {
            bail!("BIRD has no BGP protocol for {addr}");
        };
        let text = self.birdc(&format!("show protocols all {name}"))?;
        Ok(import_updates_received_in(&text))
    }

    /// `show route all`, parsed (both tables).
    pub fn routes(&self) -> Result<Vec<BirdRoute>> {
        Ok(parse_routes(&self.birdc("show route all")?))
    }

    /// Waits until the neighbor at `addr` is Established.
    pub fn wait_established(&self, addr: IpAddr, timeout: Duration) -> Result<()> {
        wait_until(timeout, Duration::from_millis(250), || {
            match self.bgp_state(addr) {
                Ok(Some(s)) if s == "Established" => Ok(()),
                Ok(s) => Err(format!("BIRD neighbor {addr}: {s:?}")),
                Err(e) => Err(format!("{e:#}")),
            }
        })
        .map_err(anyhow::Error::from)
        .with_context(|| format!("waiting for BIRD neighbor {addr} in {}", self.ns.name()))
    }

    /// Replaces the config and asks BIRD to reload it (`configure`).
    pub fn reconfigure(&self, config: &BirdConfig) -> Result<()> {
        config.validate()?;
        std::fs::write(
            self.dir.join("bird.conf"),
            config.render(&self.dir.join("bird.log")),
        )?;
        let out = self.birdc("configure")?;
        ensure!(
            out.contains("Reconfigured") || out.contains("Reconfiguration in progress"),
            "BIRD did not reconfigure: {out}"
        );
        Ok(())
    }

    /// The tail of BIRD's log.
    pub fn logs(&self, lines: usize) -> String {
        cmd::tail(&self.dir.join("bird.log"), lines)
    }

    /// Stops BIRD through its pid file.
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        if let Some(pid) = read_pid_file(&self.pid_file()) {
            ensure!(
                stop_pid(pid, Duration::from_secs(5)),
                "BIRD (pid {pid}) did not stop"
            );
        }
        Ok(())
    }
}

impl Drop for Bird {
    fn drop(&mut self) {
        if let Err(e) = self.stop_inner() {
            eprintln!("testkit: {e:#}");
        }
    }
}

/// `Neighbor graceful restart active` in one protocol's `show protocols
/// all` text.
fn graceful_restart_active_in(text: &str) -> bool {
    text.lines()
        .any(|l| l.trim() == "Neighbor graceful restart active")
}

/// The sum of the `received` column of the `Import updates:` lines.
fn import_updates_received_in(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Import updates:"))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROTOCOLS: &str = "BIRD 2.0.12 ready.
Name       Proto      Table      State  Since         Info
device1    Device     ---        up     2026-01-01 10:00:00  

static4    Static     master4    up     2026-01-01 10:00:00  
  Channel ipv4
    State:          UP
    Table:          master4
    Preference:     200
    Input filter:   ACCEPT
    Output filter:  REJECT
    Routes:         1 imported, 0 exported, 1 preferred

frr        BGP        ---        up     2026-01-01 10:00:05  Established   
  BGP state:          Established
    Neighbor address: 192.0.2.1
    Neighbor AS:      64512
    Local AS:         64514
  Channel ipv4
    State:          UP
    Table:          master4
    Routes:         2 imported, 1 exported, 2 preferred
";

    #[test]
    fn protocols_are_parsed() {
        let p = parse_protocols(PROTOCOLS);
        assert_eq!(p.len(), 3);
        let frr = &p[2];
        assert_eq!(frr.name, "frr");
        assert_eq!(frr.proto, "BGP");
        assert_eq!(frr.state, "up");
        assert_eq!(frr.since, "2026-01-01 10:00:05");
        assert_eq!(frr.info, "Established");
        assert_eq!(frr.bgp_state.as_deref(), Some("Established"));
        assert_eq!(frr.neighbor_address.as_deref(), Some("192.0.2.1"));
        assert_eq!(frr.neighbor_as, Some(64512));
        assert_eq!(frr.channels[0].imported, Some(2));
        assert_eq!(frr.channels[0].exported, Some(1));
        assert_eq!(p[1].channels[0].state, "UP");
    }

    #[test]
    fn graceful_restart_and_import_updates_are_read() {
        let text = "BIRD 2.0.12 ready.
peer0      BGP        ---        start  2026-01-01 10:00:05  Active        Socket: Connection closed
  BGP state:          Active
    Neighbor address: 192.0.2.11
    Neighbor AS:      64513
    Local AS:         64514
    Neighbor graceful restart active
  Channel ipv4
    State:          UP
    Route change stats:     received   rejected   filtered    ignored   accepted
      Import updates:              5          0          0          2          3
      Import withdraws:            0          0        ---          0          0
  Channel ipv6
      Import updates:              1          0          0          0          1
";
        assert!(graceful_restart_active_in(text));
        assert!(!graceful_restart_active_in(PROTOCOLS));
        assert_eq!(import_updates_received_in(text), 6);
        assert_eq!(import_updates_received_in(PROTOCOLS), 0);
    }

    const ROUTES: &str = "BIRD 2.0.12 ready.
Table master4:
198.51.100.30/32     unicast [frr 2026-01-01 10:00:06] * (100) [AS64512i]
\tvia 192.0.2.1 on mlb1-eth0
\tType: BGP univ
\tBGP.origin: IGP
\tBGP.as_path: 64512
\tBGP.next_hop: 192.0.2.1
                     unicast [frr2 2026-01-01 10:00:07] (100) [AS64513i]
\tvia 192.0.2.11 on mlb1-eth0
\tType: BGP univ
\tBGP.as_path: 64513
198.51.100.10/32     blackhole [static4 2026-01-01 10:00:00] * (200)
\tType: static univ
";

    #[test]
    fn routes_are_parsed() {
        let r = parse_routes(ROUTES);
        assert_eq!(r.len(), 3, "{r:#?}");
        assert_eq!(r[0].prefix, "198.51.100.30/32");
        assert_eq!(r[0].table, "master4");
        assert_eq!(r[0].protocol, "frr");
        assert!(r[0].primary);
        assert_eq!(r[0].preference, Some(100));
        assert_eq!(r[0].via, vec!["192.0.2.1"]);
        assert_eq!(r[0].iface.as_deref(), Some("mlb1-eth0"));
        assert_eq!(r[0].attrs["BGP.as_path"], "64512");
        assert_eq!(r[1].prefix, "198.51.100.30/32");
        assert_eq!(r[1].protocol, "frr2");
        assert!(!r[1].primary);
        assert_eq!(r[1].attrs["BGP.as_path"], "64513");
        assert_eq!(r[2].kind, "blackhole");
        assert_eq!(r[2].protocol, "static4");
    }
}
