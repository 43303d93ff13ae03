//! Named topologies of network namespaces, L2 segments and routed links.
//!
//! Every namespace is `<prefix>-<name>` and every interface the kit creates
//! is `<prefix>-...` (at most 15 characters), where the run prefix is
//! `mlb<N>` (see [`crate::cleanup`]). L2 segments are bridges inside the
//! switch namespace `<prefix>-sw`, with IGMP/MLD snooping and a querier on;
//! each member namespace gets a veth whose other end is a bridge port. Only
//! the `/run/netns` handles appear in the root namespace.
//!
//! Inside a member namespace, interfaces are `<prefix>-eth0`, `-eth1`, ...
//! in the order the namespace joins segments, then links; use
//! [`Topology::iface`] rather than guessing.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use ipnet::IpNet;

use crate::Result;
use crate::cut::Cut;
use crate::netns::Netns;

/// Linux's limit on interface names (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;
/// The switch namespace's name inside a topology.
pub const SWITCH: &str = "sw";

#[derive(Clone, Debug)]
struct NsSpec {
    name: String,
    router: bool,
}

#[derive(Clone, Debug)]
struct Member {
    ns: String,
    addrs: Vec<String>,
}

#[derive(Clone, Debug)]
struct SegmentSpec {
    name: String,
    members: Vec<Member>,
}

#[derive(Clone, Debug)]
struct LinkSpec {
    name: String,
    a: Member,
    b: Member,
}

#[derive(Clone, Debug)]
struct RouteSpec {
    ns: String,
    dst: String,
    via: String,
}

/// What to build: namespaces, L2 segments (bridges), point-to-point links
/// and static routes. Validated when created.
#[derive(Clone, Debug)]
pub struct TopologySpec {
    name: String,
    namespaces: Vec<NsSpec>,
    segments: Vec<SegmentSpec>,
    links: Vec<LinkSpec>,
    routes: Vec<RouteSpec>,
}

fn member(m: (&str, &[&str])) -> Member {
    Member {
        ns: m.0.to_string(),
        addrs: m.1.iter().map(|s| s.to_string()).collect(),
    }
}

impl TopologySpec {
    /// An empty topology called `name` (for messages and log directories).
    pub fn new(name: &str) -> TopologySpec {
        TopologySpec {
            name: name.to_string(),
            namespaces: Vec::new(),
            segments: Vec::new(),
            links: Vec::new(),
            routes: Vec::new(),
        }
    }

    /// A plain namespace (a node, a client).
    pub fn namespace(mut self, name: &str) -> Self {
        self.namespaces.push(NsSpec {
            name: name.to_string(),
            router: false,
        });
        self
    }

    /// A router namespace: IPv4/IPv6 forwarding on, ICMP redirects off.
    pub fn router(mut self, name: &str) -> Self {
        self.namespaces.push(NsSpec {
            name: name.to_string(),
            router: true,
        });
        self
    }

    /// An L2 segment: a bridge in the switch namespace, one veth per member
    /// namespace with the given addresses (`"192.0.2.11/24"`).
    pub fn segment(mut self, name: &str, members: &[(&str, &[&str])]) -> Self {
        self.segments.push(SegmentSpec {
            name: name.to_string(),
            members: members.iter().map(|m| member(*m)).collect(),
        });
        self
    }

    /// A point-to-point veth link between two namespaces.
    pub fn link(mut self, name: &str, a: (&str, &[&str]), b: (&str, &[&str])) -> Self {
        self.links.push(LinkSpec {
            name: name.to_string(),
            a: member(a),
            b: member(b),
        });
        self
    }

    /// A static route in namespace `ns`: `dst` (`"203.0.113.0/25"`) via
    /// gateway `via`.
    pub fn route(mut self, ns: &str, dst: &str, via: &str) -> Self {
        self.routes.push(RouteSpec {
            ns: ns.to_string(),
            dst: dst.to_string(),
            via: via.to_string(),
        });
        self
    }

    fn validate(&self) -> Result<()> {
        let mut seen = std::collections::BTreeSet::new();
        for n in &self.namespaces {
            ensure!(
                !n.name.is_empty()
                    && n.name.len() <= 32
                    && n.name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "namespace name {:?}: use 1-32 of [a-z0-9-]",
                n.name
            );
            ensure!(n.name != SWITCH, "namespace name {SWITCH:?} is reserved");
            ensure!(seen.insert(&n.name), "namespace {} declared twice", n.name);
        }
        let known = |ns: &str| self.namespaces.iter().any(|n| n.name == ns);
        let check_member = |m: &Member, what: &str| -> Result<()> {
            ensure!(known(&m.ns), "{what} names unknown namespace {}", m.ns);
            for a in &m.addrs {
                let net: IpNet = a
                    .parse()
                    .with_context(|| format!("{what}: bad address {a}"))?;
                ensure!(
                    crate::plan::is_allowed_net(&net.trunc()),
                    "{what}: address {a} is outside the lab's ranges {:?}",
                    crate::plan::ALLOWED_RANGES
                );
            }
            Ok(())
        };
        let mut names = std::collections::BTreeSet::new();
        for s in &self.segments {
            ensure!(
                names.insert(&s.name),
                "segment/link name {} used twice",
                s.name
            );
            for m in &s.members {
                check_member(m, &format!("segment {}", s.name))?;
            }
        }
        for l in &self.links {
            ensure!(
                names.insert(&l.name),
                "segment/link name {} used twice",
                l.name
            );
            check_member(&l.a, &format!("link {}", l.name))?;
            check_member(&l.b, &format!("link {}", l.name))?;
            ensure!(
                l.a.ns != l.b.ns,
                "link {} joins {} to itself",
                l.name,
                l.a.ns
            );
        }
        for r in &self.routes {
            ensure!(known(&r.ns), "route names unknown namespace {}", r.ns);
            let dst: IpNet = r
                .dst
                .parse()
                .with_context(|| format!("bad route {}", r.dst))?;
            let via: IpAddr = r
                .via
                .parse()
                .with_context(|| format!("bad gateway {}", r.via))?;
            ensure!(
                crate::plan::is_allowed_net(&dst) && crate::plan::is_allowed_addr(via),
                "route {} via {} is outside the lab's ranges",
                r.dst,
                r.via
            );
        }
        Ok(())
    }

    /// Builds the topology under a fresh run prefix. On any error, whatever
    /// was created is removed again.
    pub fn create(&self) -> Result<Topology> {
        crate::require_root()?;
        self.validate()?;
        let prefix = crate::cleanup::claim_prefix()?;
        let state_dir = crate::cleanup::state_dir(&prefix);
        let mut topo = Topology {
            name: self.name.clone(),
            prefix: prefix.clone(),
            state_dir: state_dir.clone(),
            namespaces: Vec::new(),
            switch: None,
            ifaces: BTreeMap::new(),
            ports: BTreeMap::new(),
            bridges: BTreeMap::new(),
            destroyed: false,
        };
        if let Err(e) = crate::cleanup::create_dir(&state_dir) {
            crate::cleanup::release_prefix(&prefix);
            topo.destroyed = true;
            return Err(e).with_context(|| format!("cannot create {}", state_dir.display()));
        }
        // From here on, dropping `topo` removes whatever exists.
        self.build(&mut topo)
            .with_context(|| format!("creating topology {} ({prefix})", self.name))?;
        topo.check_root_namespace()?;
        self.wait_snooped(&topo)?;
        Ok(topo)
    }

    /// Restarts each bridge's querier once the bridge has an IPv6 link-local
    /// address. Its first start-up query went out when the bridge came up,
    /// before it had an address to send it from (no port, no carrier), and a
    /// Linux bridge whose own IPv6 query could not be sent floods IPv6
    /// multicast, registered groups too, until the next start-up query (~31 s
    /// later): NDP tests in that window could not see a node missing from a
    /// group. Restarted, it queries at once and snoops after one response
    /// interval.
    fn restart_queriers(&self, topo: &Topology) -> Result<()> {
        let Some(sw) = topo.switch.as_ref() else {
            return Ok(());
        };
        for br in topo.bridges.values() {
            crate::wait_until(
                std::time::Duration::from_secs(10),
                std::time::Duration::from_millis(20),
                || {
                    let out = sw
                        .ip(&["-6", "addr", "show", "dev", br, "scope", "link"])
                        .map_err(|e| format!("{e:#}"))?;
                    if out.contains("inet6 fe80:") {
                        Ok(())
                    } else {
                        Err(format!("bridge {br} has no IPv6 link-local address yet"))
                    }
                },
            )?;
            for on in ["0", "1"] {
                sw.ip(&["link", "set", br, "type", "bridge", "mcast_querier", on])?;
            }
        }
        Ok(())
    }

    /// Waits until the switch has learnt, for every member of every
    /// segment, the solicited-node group of each of its IPv6 addresses
    /// (MLD snooping forwards NDP to a node only once it has joined).
    fn wait_snooped(&self, topo: &Topology) -> Result<()> {
        self.restart_queriers(topo)?;
        let mut want = Vec::new();
        for s in &self.segments {
            for m in &s.members {
                for a in &m.addrs {
                    if let Ok(IpNet::V6(net)) = a.parse::<IpNet>() {
                        let port = topo.port(&s.name, &m.ns).to_string();
                        want.push((port, IpAddr::V6(solicited_node(net.addr()))));
                    }
                }
            }
        }
        // The querier's start-up flooding lasts one query response interval
        // (1 s) from its restart above. (A test that needs the snooping
        // checks it: flooding a little longer only weakens a test.)
        if topo.switch.is_some() {
            std::thread::sleep(std::time::Duration::from_millis(1100));
        }
        if want.is_empty() {
            return Ok(());
        }
        crate::wait_until(
            std::time::Duration::from_secs(30),
            std::time::Duration::from_millis(50),
            || {
                let mdb = topo.mdb().map_err(|e| format!("{e:#}"))?;
                let missing: Vec<String> = want
                    .iter()
                    .filter(|(p, g)| !mdb.iter().any(|e| e.port == *p && e.group == *g))
                    .map(|(p, g)| format!("{g} on {p}"))
                    .collect();
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(format!("groups not snooped yet: {missing:?}"))
                }
            },
        )
        .map_err(anyhow::Error::from)
        .context("waiting for the switch to learn the members' MLD joins")
    }

    fn build(&self, topo: &mut Topology) -> Result<()> {
        let prefix = topo.prefix.clone();
        let dad_off = [
            ("net.ipv6.conf.all.accept_dad", "0"),
            ("net.ipv6.conf.default.accept_dad", "0"),
            ("net.ipv6.conf.all.dad_transmits", "0"),
            ("net.ipv6.conf.default.dad_transmits", "0"),
        ];
        if !self.segments.is_empty() {
            let sw = topo.add_namespace(SWITCH)?;
            sw.sysctls(&dad_off)?;
            topo.switch = Some(sw.clone());
            for (i, s) in self.segments.iter().enumerate() {
                let br = if i == 0 {
                    format!("{prefix}-br")
                } else {
                    format!("{prefix}-br{i}")
                };
                check_ifname(&br)?;
                // Snooping first, with a 1 s query response interval; the
                // querier after it (and restarted once the ports are up:
                // `restart_queriers`). While a querier starts, the kernel floods
                // all multicast for one response interval; after that,
                // multicast goes only to ports that joined the group (and to
                // router ports), so a host must really join.
                sw.ip(&[
                    "link",
                    "add",
                    &br,
                    "type",
                    "bridge",
                    "mcast_snooping",
                    "1",
                    "mcast_query_response_interval",
                    "100",
                ])?;
                sw.ip(&["link", "set", &br, "type", "bridge", "mcast_querier", "1"])?;
                // Up before any port: member kernels send their MLD reports
                // when their links come up, and the bridge must see them.
                sw.ip(&["link", "set", &br, "up"])?;
                topo.bridges.insert(s.name.clone(), br);
            }
        }
        for n in &self.namespaces {
            let ns = topo.add_namespace(&n.name)?;
            ns.sysctls(&dad_off)?;
            if n.router {
                ns.sysctls(&[
                    ("net.ipv4.ip_forward", "1"),
                    ("net.ipv6.conf.all.forwarding", "1"),
                    ("net.ipv4.conf.all.send_redirects", "0"),
                    ("net.ipv4.conf.default.send_redirects", "0"),
                ])?;
            }
        }
        let routers: Vec<&str> = self
            .namespaces
            .iter()
            .filter(|n| n.router)
            .map(|n| n.name.as_str())
            .collect();
        let mut next_eth: BTreeMap<String, usize> = BTreeMap::new();
        let mut alloc_iface = |ns: &str| -> Result<String> {
            let k = next_eth.entry(ns.to_string()).or_insert(0);
            let name = format!("{prefix}-eth{k}");
            *k += 1;
            check_ifname(&name)?;
            Ok(name)
        };
        for s in &self.segments {
            let sw = topo.switch.clone().expect("switch exists with segments");
            let br = topo.bridges[&s.name].clone();
            for m in &s.members {
                let ifname = alloc_iface(&m.ns)?;
                let mut port = format!("{prefix}-{}", m.ns);
                if port.len() > IFNAME_MAX || topo.ports.values().any(|p| *p == port) {
                    port = format!("{prefix}-p{}", topo.ports.len());
                }
                check_ifname(&port)?;
                let target = topo.ns(&m.ns).clone();
                sw.ip(&[
                    "link",
                    "add",
                    &port,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &ifname,
                    "netns",
                    target.name(),
                ])?;
                topo.ports
                    .insert((s.name.clone(), m.ns.clone()), port.clone());
                topo.ifaces
                    .insert((m.ns.clone(), s.name.clone()), ifname.clone());
                sw.ip(&["link", "set", &port, "master", &br])?;
                sw.ip(&["link", "set", &port, "up"])?;
                configure_iface(&target, &ifname, &m.addrs, routers.contains(&m.ns.as_str()))?;
            }
        }
        for l in &self.links {
            let ifa = alloc_iface(&l.a.ns)?;
            let ifb = alloc_iface(&l.b.ns)?;
            let a = topo.ns(&l.a.ns).clone();
            let b = topo.ns(&l.b.ns).clone();
            a.ip(&[
                "link",
                "add",
                &ifa,
                "type",
                "veth",
                "peer",
                "name",
                &ifb,
                "netns",
                b.name(),
            ])?;
            topo.ifaces
                .insert((l.a.ns.clone(), l.name.clone()), ifa.clone());
            topo.ifaces
                .insert((l.b.ns.clone(), l.name.clone()), ifb.clone());
            configure_iface(&a, &ifa, &l.a.addrs, routers.contains(&l.a.ns.as_str()))?;
            configure_iface(&b, &ifb, &l.b.addrs, routers.contains(&l.b.ns.as_str()))?;
        }
        for r in &self.routes {
            let via: IpAddr = r.via.parse()?;
            topo.ns(&r.ns).add_route(&r.dst, via)?;
        }
        Ok(())
    }
}

fn check_ifname(name: &str) -> Result<()> {
    ensure!(
        name.len() <= IFNAME_MAX,
        "interface name {name} is longer than {IFNAME_MAX} characters"
    );
    Ok(())
}

/// Per-interface sysctls (no DAD; no redirects on routers), addresses, up.
fn configure_iface(ns: &Netns, ifname: &str, addrs: &[String], router: bool) -> Result<()> {
    let dad = format!("net.ipv6.conf.{ifname}.accept_dad");
    let tx = format!("net.ipv6.conf.{ifname}.dad_transmits");
    let redirects = format!("net.ipv4.conf.{ifname}.send_redirects");
    let mut settings = vec![(dad.as_str(), "0"), (tx.as_str(), "0")];
    if router {
        settings.push((redirects.as_str(), "0"));
    }
    ns.sysctls(&settings)?;
    for a in addrs {
        ns.add_addr(ifname, a)?;
    }
    ns.ip(&["link", "set", ifname, "up"])?;
    Ok(())
}

/// The solicited-node multicast group of `addr` (ff02::1:ffXX:XXXX).
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// One entry of a bridge's multicast database (`bridge mdb show`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MdbEntry {
    pub bridge: String,
    /// The port that joined (the bridge's own name for its own joins).
    pub port: String,
    pub group: IpAddr,
    /// `temp` (learnt) or `permanent`.
    pub state: String,
}

/// A created topology. Dropping it (or [`Topology::destroy`]) kills every
/// process in its namespaces and deletes them.
#[derive(Debug)]
pub struct Topology {
    name: String,
    prefix: String,
    state_dir: PathBuf,
    namespaces: Vec<Netns>,
    switch: Option<Netns>,
    ifaces: BTreeMap<(String, String), String>,
    ports: BTreeMap<(String, String), String>,
    bridges: BTreeMap<String, String>,
    destroyed: bool,
}

impl Topology {
    fn add_namespace(&mut self, short: &str) -> Result<Netns> {
        let full = format!("{}-{short}", self.prefix);
        let ns = Netns::create(&full, short, self.state_dir.join(short))?;
        self.namespaces.push(ns.clone());
        Ok(ns)
    }

    /// The topology's name (as given to [`TopologySpec::new`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The run prefix (`mlb1234`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `/run/metallb-testkit/<prefix>`: per-run files, removed on destroy.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The namespace called `short` in the spec. Panics if there is none.
    pub fn ns(&self, short: &str) -> &Netns {
        self.try_ns(short).unwrap_or_else(|| {
            panic!(
                "topology {} has no namespace {short:?} (has {:?})",
                self.name,
                self.namespaces
                    .iter()
                    .map(|n| n.short_name())
                    .collect::<Vec<_>>()
            )
        })
    }

    pub fn try_ns(&self, short: &str) -> Option<&Netns> {
        self.namespaces.iter().find(|n| n.short_name() == short)
    }

    /// Every namespace of the topology, the switch namespace included.
    pub fn namespaces(&self) -> &[Netns] {
        &self.namespaces
    }

    /// The switch namespace (`<prefix>-sw`), when there are segments.
    pub fn switch(&self) -> Option<&Netns> {
        self.switch.as_ref()
    }

    /// The interface of namespace `ns` on segment or link `net`. Panics if
    /// `ns` is not attached to `net`.
    pub fn iface(&self, ns: &str, net: &str) -> &str {
        self.ifaces
            .get(&(ns.to_string(), net.to_string()))
            .unwrap_or_else(|| panic!("namespace {ns:?} has no interface on {net:?}"))
    }

    /// The bridge of segment `segment` (in the switch namespace).
    pub fn bridge(&self, segment: &str) -> &str {
        self.bridges
            .get(segment)
            .unwrap_or_else(|| panic!("no segment {segment:?}"))
    }

    /// The bridge port (in the switch namespace) of `ns` on `segment`.
    pub fn port(&self, segment: &str, ns: &str) -> &str {
        self.ports
            .get(&(segment.to_string(), ns.to_string()))
            .unwrap_or_else(|| panic!("namespace {ns:?} has no port on segment {segment:?}"))
    }

    /// The switch's multicast database: which port joined which group.
    pub fn mdb(&self) -> Result<Vec<MdbEntry>> {
        let Some(sw) = &self.switch else {
            return Ok(Vec::new());
        };
        let out = crate::cmd::run(&mut crate::cmd::command(
            "bridge",
            &["-n", sw.name(), "-j", "mdb", "show"],
        ))?;
        let v: serde_json::Value = if out.trim().is_empty() {
            serde_json::Value::Array(vec![])
        } else {
            serde_json::from_str(&out).with_context(|| format!("parsing bridge mdb: {out}"))?
        };
        let mut r = Vec::new();
        for b in v.as_array().into_iter().flatten() {
            for e in b["mdb"].as_array().into_iter().flatten() {
                let Some(group) = e["grp"].as_str().and_then(|g| g.parse().ok()) else {
                    continue;
                };
                r.push(MdbEntry {
                    bridge: e["dev"].as_str().unwrap_or_default().to_string(),
                    port: e["port"].as_str().unwrap_or_default().to_string(),
                    group,
                    state: e["state"].as_str().unwrap_or_default().to_string(),
                });
            }
        }
        Ok(r)
    }

    /// Waits until `ns`'s port on `segment` has joined `group` (for tests
    /// of a speaker's MLD/IGMP joins).
    pub fn wait_joined(
        &self,
        segment: &str,
        ns: &str,
        group: IpAddr,
        timeout: std::time::Duration,
    ) -> Result<()> {
        let port = self.port(segment, ns).to_string();
        crate::wait_until(timeout, std::time::Duration::from_millis(100), || {
            let mdb = self.mdb().map_err(|e| format!("{e:#}"))?;
            if mdb.iter().any(|e| e.port == port && e.group == group) {
                Ok(())
            } else {
                let groups: Vec<String> = mdb
                    .iter()
                    .filter(|e| e.port == port)
                    .map(|e| e.group.to_string())
                    .collect();
                Err(format!("port {port} has joined {groups:?}"))
            }
        })
        .map_err(anyhow::Error::from)
        .with_context(|| format!("waiting for {ns} to join {group} on {segment}"))
    }

    /// Silently cuts `ns`'s cable at the switch: the bridge drops every frame
    /// from and to its port; neither end sees a link event or an error.
    pub fn cut_switch_port(&self, segment: &str, ns: &str) -> Result<Cut> {
        let sw = self
            .switch
            .as_ref()
            .context("topology has no switch namespace")?;
        crate::cut::cut_bridge_port(sw, self.port(segment, ns))
    }

    /// Fails if any interface carrying this run's prefix exists in the root
    /// namespace (the kit must only create namespaces there).
    pub fn check_root_namespace(&self) -> Result<()> {
        let out = crate::cmd::run(&mut crate::cmd::command("ip", &["-o", "link", "show"]))?;
        let ours: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split(':').nth(1))
            .map(|n| n.trim().split('@').next().unwrap_or(""))
            .filter(|n| n.starts_with(&format!("{}-", self.prefix)))
            .collect();
        if !ours.is_empty() {
            bail!(
                "interfaces {ours:?} of run {} are in the root namespace",
                self.prefix
            );
        }
        Ok(())
    }

    /// Kills every process in the topology's namespaces, deletes them, and
    /// removes the run's state (kept under `/tmp/metallb-testkit-logs/` when
    /// a test is panicking or `TESTKIT_KEEP_LOGS` is set).
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        if self.destroyed {
            return Ok(());
        }
        self.destroyed = true;
        let mut errors = Vec::new();
        // Switch last: member namespaces first, so nothing flaps first.
        let order: Vec<Netns> = self
            .namespaces
            .iter()
            .filter(|n| Some(*n) != self.switch.as_ref())
            .chain(self.switch.iter())
            .cloned()
            .collect();
        for ns in &order {
            if let Err(e) = ns.kill_all() {
                errors.push(format!("{e:#}"));
            }
        }
        for ns in &order {
            if let Err(e) = ns.delete() {
                errors.push(format!("{e:#}"));
            }
        }
        if std::thread::panicking() || std::env::var_os("TESTKIT_KEEP_LOGS").is_some() {
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let dest = PathBuf::from("/tmp/metallb-testkit-logs")
                .join(format!("{}-{}-{stamp}", self.name, self.prefix));
            if copy_files(&self.state_dir, &dest).is_ok() {
                eprintln!(
                    "testkit: logs of topology {} ({}) kept in {}",
                    self.name,
                    self.prefix,
                    dest.display()
                );
            }
        }
        let _ = std::fs::remove_dir_all(&self.state_dir);
        crate::cleanup::remove_frr_pathspaces(&self.prefix);
        match Netns::list() {
            Ok(left) => {
                let left: Vec<String> = left
                    .into_iter()
                    .filter(|n| crate::cleanup::prefix_of(n) == Some(self.prefix.as_str()))
                    .collect();
                if left.is_empty() {
                    crate::cleanup::release_prefix(&self.prefix);
                } else {
                    errors.push(format!("namespaces left after teardown: {left:?}"));
                }
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
        if !errors.is_empty() {
            bail!(
                "tearing down topology {} ({}): {}",
                self.name,
                self.prefix,
                errors.join("; ")
            );
        }
        Ok(())
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("testkit: {e:#}");
        }
    }
}

/// Copies the regular files under `src` to `dst` (sockets and the like are
/// skipped).
fn copy_files(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let ft = e.file_type()?;
        let to = dst.join(e.file_name());
        if ft.is_dir() {
            copy_files(&e.path(), &to)?;
        } else if ft.is_file() {
            std::fs::copy(e.path(), to)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solicited_node_groups() {
        let a: Ipv6Addr = "2001:db8:0:1::11".parse().unwrap();
        assert_eq!(solicited_node(a).to_string(), "ff02::1:ff00:11");
        let a: Ipv6Addr = "fe80::2459:aaff:fe59:1cd2".parse().unwrap();
        assert_eq!(solicited_node(a).to_string(), "ff02::1:ff59:1cd2");
    }
}
