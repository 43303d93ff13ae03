//! Interop matrix of the session driver against FRR, BIRD 2 and GoBGP 3, in
//! the lab's network namespaces (`testkit`). Needs root: these tests fail,
//! they do not skip.
//!
//! How our side runs inside `node-1`: this test binary re-executes itself
//! in the namespace (`ip netns exec <node-1> <this exe> --exact
//! helper_speaker`) with the session described in the `BGP_INTEROP_HELPER`
//! environment variable (JSON). The `helper_speaker` "test" then runs
//! [`bgp::session::Session`] exactly as `metallbctl bgp-probe` does, prints
//! every event as a JSON line, and on SIGTERM withdraws everything and
//! closes with Cease/Administrative Shutdown. Without the variable it
//! returns at once. This needs no other binary to be built (`cargo test -p
//! bgp` does not build `metallbctl`, and `CARGO_BIN_EXE_*` is per crate),
//! and no `setns` inside a multi-threaded tokio runtime.
//!
//! Each test is one cell of the matrix, named `<row>_<router>`: a row is
//! one scenario function taking the [`RouterKind`], run against FRR in
//! `router` or BIRD / GoBGP in `router2` ([`L2Router`]; the multihop row
//! puts the router in `far`), and each cell asserts what the router itself
//! shows (vtysh, birdc, gobgp CLI) as well as our side.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use testkit::plan;
use testkit::{
    Family, L2Router, Lab, LabOptions, Neighbor, Netns, NsChild, Route, Router, RouterConfig,
    RouterKind, wait_until,
};

const HELPER_ENV: &str = "BGP_INTEROP_HELPER";
/// Generous for a loaded 2-core machine: BIRD and GoBGP retry every 5 s.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);
const ROUTE_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- helper

/// The speaker run inside a namespace (see the module documentation).
#[test]
fn helper_speaker() {
    let Ok(spec) = std::env::var(HELPER_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run_helper(&spec)).unwrap();
}

async fn run_helper(spec: &str) -> Result<()> {
    use bgp::fsm::{Config, PeerAs};
    use bgp::rib_out::Advertisement;
    use bgp::session::{PeerConfig, Session};
    use bgp::wire::{Community, LargeCommunity};
    use tokio::signal::unix::{SignalKind, signal};

    let v: serde_json::Value = serde_json::from_str(spec)?;
    let my_asn = v["my_asn"].as_u64().context("my_asn")? as u32;
    let peer_asn = v["peer_asn"].as_u64().context("peer_asn")? as u32;
    let peer: IpAddr = v["peer"].as_str().context("peer")?.parse()?;
    let mut fsm = Config::new(my_asn, PeerAs::Fixed(peer_asn), "node-1");
    fsm.hold_time = v["hold_time"].as_u64().map(|h| h as u16);
    fsm.connect_time = Some(2);
    let mut cfg = PeerConfig::new(fsm, std::net::SocketAddr::new(peer, 179));
    cfg.password = v["password"].as_str().map(str::to_owned);
    cfg.ebgp_multihop = v["multihop"].as_bool().unwrap_or(false);
    let strings = |k: &str| -> Vec<String> {
        v[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let communities: Vec<Community> = strings("communities")
        .iter()
        .map(|c| {
            let (a, b) = c.split_once(':').unwrap();
            Community::new(a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    let large: Vec<LargeCommunity> = strings("large_communities")
        .iter()
        .map(|c| {
            let p: Vec<u32> = c.split(':').map(|x| x.parse().unwrap()).collect();
            LargeCommunity {
                global_admin: p[0],
                local_data1: p[1],
                local_data2: p[2],
            }
        })
        .collect();
    let local_pref = v["local_pref"].as_u64().map(|l| l as u32);
    let ads: Vec<Advertisement> = strings("prefixes")
        .iter()
        .map(|p| {
            let mut a = Advertisement::new(p.parse().unwrap())
                .with_communities(communities.iter().copied())
                .with_large_communities(large.iter().copied());
            a.local_pref = local_pref;
            a
        })
        .collect();

    let mut term = signal(SignalKind::terminate())?;
    let session = Session::spawn(cfg, None)?;
    let mut events = session.events();
    let mut state = session.state();
    session.set_advertisements(ads)?;
    println!("{{\"event\":\"helper_started\"}}");
    loop {
        tokio::select! {
            _ = term.recv() => break,
            Ok(ev) = events.recv() => println!("{}", serde_json::to_string(&ev)?),
            Ok(()) = state.changed() => {
                let s = state.borrow_and_update().clone();
                println!("{}", serde_json::json!({"event": "state", "state": s}));
            }
        }
    }
    session.set_advertisements(Vec::new())?;
    session.shutdown("interop test done").await;
    println!("{{\"event\":\"stopped\"}}");
    Ok(())
}

/// Our speaker, running in a namespace.
struct Speaker {
    child: NsChild,
}

impl Speaker {
    fn start(ns: &Netns, spec: serde_json::Value) -> Result<Speaker> {
        let exe = std::env::current_exe()?;
        let log = ns.state_dir().join(format!(
            "speaker-{}.log",
            Instant::now().elapsed().as_nanos() ^ u128::from(std::process::id())
        ));
        let mut cmd = ns.command(&exe);
        cmd.args([
            "--exact",
            "helper_speaker",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, spec.to_string());
        let child = NsChild::spawn_logged(cmd, &log)?;
        Ok(Speaker { child })
    }

    fn log(&self) -> String {
        self.child.log()
    }

    /// The JSON events printed so far.
    fn events(&self) -> Vec<serde_json::Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn wait_event(
        &self,
        what: &str,
        timeout: Duration,
        f: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<()> {
        wait_until(timeout, Duration::from_millis(100), || {
            if self.events().iter().any(&f) {
                Ok(())
            } else {
                Err(format!("no {what} yet"))
            }
        })
        .map_err(|e| anyhow::anyhow!("{e}; speaker log:\n{}", self.log()))
    }

    fn wait_established(&self, timeout: Duration) -> Result<()> {
        self.wait_event("Established", timeout, |e| {
            e["event"] == "state_changed" && e["to"] == "Established"
        })
    }

    fn wait_left_established(&self, timeout: Duration) -> Result<()> {
        self.wait_event("leaving Established", timeout, |e| {
            e["event"] == "state_changed" && e["from"] == "Established"
        })
    }

    /// The text of the last error in the published session state.
    fn last_error(&self) -> Option<String> {
        self.events()
            .iter()
            .rev()
            .find(|e| e["event"] == "state" && !e["state"]["last_error"].is_null())
            .map(|e| e["state"]["last_error"]["text"].to_string())
    }

    /// SIGTERM: withdraw, Cease, exit.
    fn stop(mut self) -> Result<String> {
        let status = self
            .child
            .stop_with(testkit::process::Signal::TERM, Duration::from_secs(10))?;
        let log = self.child.log();
        println!("speaker log:\n{log}");
        ensure!(
            log.contains("{\"event\":\"stopped\"}"),
            "speaker did not stop cleanly ({status}):\n{log}"
        );
        Ok(log)
    }
}

fn spec(peer: IpAddr, my_asn: u32, peer_asn: u32, prefixes: &[&str]) -> serde_json::Value {
    serde_json::json!({
        "peer": peer.to_string(),
        "my_asn": my_asn,
        "peer_asn": peer_asn,
        "prefixes": prefixes,
    })
}

fn setup() -> Result<(testkit::SerialGuard, Lab)> {
    setup_lab(false)
}

/// The lab with one node, and with `far` behind the router when asked.
fn setup_lab(far: bool) -> Result<(testkit::SerialGuard, Lab)> {
    let serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions { nodes: 1, far })?;
    Ok((serial, lab))
}

fn node1_v4() -> IpAddr {
    plan::node_v4(1).into()
}

fn node1_v6() -> IpAddr {
    plan::node_v6(1).into()
}

/// The router's session with `addr` is established (the error carries our
/// speaker's log too).
fn wait_router_established(router: &Router, addr: IpAddr, speaker: &Speaker) -> Result<()> {
    router
        .wait_established(addr, ESTABLISH_TIMEOUT)
        .with_context(|| format!("speaker log:\n{}", speaker.log()))
}

/// Waits until the router's `family` table holds exactly `want`; returns
/// its paths.
fn wait_prefixes(router: &Router, family: Family, want: &[&str]) -> Result<Vec<Route>> {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    wait_until(ROUTE_TIMEOUT, Duration::from_millis(250), || {
        let routes = router.routes(family).map_err(|e| format!("{e:#}"))?;
        let mut have: Vec<String> = routes.iter().map(|r| r.prefix.clone()).collect();
        have.sort();
        have.dedup();
        if have == want {
            Ok(routes)
        } else {
            Err(format!(
                "{} has {have:?}, want {want:?}",
                router.kind().name()
            ))
        }
    })
    .map_err(anyhow::Error::from)
}

/// Stops our speaker (withdraw, Cease); the router's tables of `families`
/// empty. Returns the speaker's log.
fn stop_and_wait_withdrawn(
    speaker: Speaker,
    router: &Router,
    families: &[Family],
) -> Result<String> {
    let log = speaker.stop()?;
    for f in families {
        wait_prefixes(router, *f, &[]).with_context(|| log.clone())?;
    }
    Ok(log)
}

/// Some path of `prefix` has `next_hop` among its next hops.
fn ensure_next_hop(routes: &[Route], prefix: &str, next_hop: IpAddr) -> Result<()> {
    ensure!(
        routes.iter().any(|r| r.prefix == prefix
            && r.next_hops
                .iter()
                .any(|n| n.parse::<IpAddr>().ok() == Some(next_hop))),
        "{prefix}: next hop {next_hop} not seen: {routes:?}"
    );
    Ok(())
}

/// The eBGP session of our speaker (AS 64513) to `at`'s address of `family`.
fn ebgp_spec(at: &L2Router, family: Family, prefixes: &[&str]) -> serde_json::Value {
    spec(at.addr(family), plan::NODE_AS, at.asn, prefixes)
}

const V4_PREFIXES: [&str; 3] = ["198.51.100.1/32", "198.51.100.2/32", "198.51.100.3/32"];

// ---------------------------------------------------------------- eBGP IPv4

/// eBGP over IPv4 vs FRR: Established, 3 prefixes with communities and
/// large communities, withdrawal seen after the speaker stops.
#[test]
fn ebgp_ipv4_frr() -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(RouterKind::Frr);
    let router = lab.start_l2_router(
        &at.config()
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS)),
    )?;
    let Router::Frr(frr) = &router else {
        unreachable!("an FRR config starts FRR")
    };
    let mut s = ebgp_spec(&at, Family::Ipv4, &V4_PREFIXES);
    s["communities"] = serde_json::json!(["64513:100", "65000:7"]);
    s["large_communities"] = serde_json::json!(["64513:1:2"]);
    let speaker = Speaker::start(lab.node(1), s)?;
    wait_router_established(&router, node1_v4(), &speaker)?;
    speaker.wait_established(Duration::from_secs(10))?;
    // The negotiated capabilities are reported.
    speaker.wait_event("negotiated", Duration::from_secs(5), |e| {
        e["event"] == "negotiated" && e["peer_as"] == plan::ROUTER_AS
    })?;
    let routes = wait_prefixes(&router, Family::Ipv4, &V4_PREFIXES)?;
    for p in V4_PREFIXES {
        let detail = frr.show_json(&format!("show bgp ipv4 unicast {p} json"))?;
        let text = detail.to_string();
        for c in ["64513:100", "65000:7", "64513:1:2"] {
            ensure!(text.contains(c), "{p}: {c} missing in {text}");
        }
        ensure_next_hop(&routes, p, node1_v4())?;
    }
    stop_and_wait_withdrawn(speaker, &router, &[Family::Ipv4])?;
    // Cease/Administrative Shutdown reached FRR.
    let n = frr.vtysh(&[&format!("show bgp neighbors {} json", node1_v4())])?;
    ensure!(
        n.contains("Administrative Shutdown") || n.contains("Cease"),
        "FRR did not record our Cease: {n}"
    );
    Ok(())
}

/// eBGP over IPv4 vs BIRD or GoBGP: Established, 3 prefixes with our next
/// hop and AS path, withdrawal seen after the speaker stops.
fn ebgp_ipv4(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(
        &at.config()
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS)),
    )?;
    let prefixes = ["198.51.100.31/32", "198.51.100.32/32", "198.51.100.33/32"];
    let speaker = Speaker::start(lab.node(1), ebgp_spec(&at, Family::Ipv4, &prefixes))?;
    wait_router_established(&router, node1_v4(), &speaker)?;
    speaker.wait_established(Duration::from_secs(10))?;
    let routes = wait_prefixes(&router, Family::Ipv4, &prefixes)?;
    for p in prefixes {
        ensure_next_hop(&routes, p, node1_v4())?;
    }
    ensure!(
        routes.iter().all(|r| r.as_path == [plan::NODE_AS]),
        "AS path: {routes:?}"
    );
    stop_and_wait_withdrawn(speaker, &router, &[Family::Ipv4])?;
    Ok(())
}

#[test]
fn ebgp_ipv4_bird() -> Result<()> {
    ebgp_ipv4(RouterKind::Bird)
}

#[test]
fn ebgp_ipv4_gobgp() -> Result<()> {
    ebgp_ipv4(RouterKind::Gobgp)
}

// ---------------------------------------------------------------- iBGP

/// iBGP (our speaker in the router's AS): the router sees LOCAL_PREF 250
/// and an empty AS_PATH.
fn ibgp(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(&at.config().neighbor(Neighbor::new(node1_v4(), at.asn)))?;
    let prefix = "198.51.100.10/32";
    let mut s = spec(at.v4.into(), at.asn, at.asn, &[prefix]);
    s["local_pref"] = serde_json::json!(250);
    let speaker = Speaker::start(lab.node(1), s)?;
    wait_router_established(&router, node1_v4(), &speaker)?;
    let routes = wait_prefixes(&router, Family::Ipv4, &[prefix])?;
    ensure!(
        routes.iter().any(|r| r.local_pref == Some(250)),
        "LOCAL_PREF not seen: {routes:?}"
    );
    ensure!(
        routes.iter().all(|r| r.as_path.is_empty()),
        "iBGP AS_PATH not empty: {routes:?}"
    );
    ensure_next_hop(&routes, prefix, node1_v4())?;
    stop_and_wait_withdrawn(speaker, &router, &[Family::Ipv4])?;
    Ok(())
}

#[test]
fn ibgp_frr() -> Result<()> {
    ibgp(RouterKind::Frr)
}

#[test]
fn ibgp_bird() -> Result<()> {
    ibgp(RouterKind::Bird)
}

#[test]
fn ibgp_gobgp() -> Result<()> {
    ibgp(RouterKind::Gobgp)
}

// ---------------------------------------------------------------- IPv6

/// An IPv6 session announcing IPv6 /128s: the router sees them with our
/// IPv6 address as next hop.
fn ipv6_session(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(
        &at.config()
            .neighbor(Neighbor::new(node1_v6(), plan::NODE_AS)),
    )?;
    let prefixes = ["2001:db8:100::1/128", "2001:db8:100::2/128"];
    let speaker = Speaker::start(lab.node(1), ebgp_spec(&at, Family::Ipv6, &prefixes))?;
    wait_router_established(&router, node1_v6(), &speaker)?;
    let routes = wait_prefixes(&router, Family::Ipv6, &prefixes).with_context(|| speaker.log())?;
    for p in prefixes {
        ensure_next_hop(&routes, p, node1_v6())?;
    }
    stop_and_wait_withdrawn(speaker, &router, &[Family::Ipv6])?;
    Ok(())
}

#[test]
fn ipv6_session_frr() -> Result<()> {
    ipv6_session(RouterKind::Frr)
}

#[test]
fn ipv6_session_bird() -> Result<()> {
    ipv6_session(RouterKind::Bird)
}

#[test]
fn ipv6_session_gobgp() -> Result<()> {
    ipv6_session(RouterKind::Gobgp)
}

// ---------------------------------------------------------------- both families

/// One IPv4 session carrying both families: the IPv6 prefix goes in
/// MP_REACH with the IPv6 address of the same interface as next hop.
fn both_families_one_session(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(&at.config().neighbor(
        Neighbor::new(node1_v4(), plan::NODE_AS).families(&[Family::Ipv4, Family::Ipv6]),
    ))?;
    let (v4, v6) = ("198.51.100.50/32", "2001:db8:100::50/128");
    let speaker = Speaker::start(lab.node(1), ebgp_spec(&at, Family::Ipv4, &[v4, v6]))?;
    wait_router_established(&router, node1_v4(), &speaker)?;
    let routes = wait_prefixes(&router, Family::Ipv4, &[v4]).with_context(|| speaker.log())?;
    ensure_next_hop(&routes, v4, node1_v4())?;
    let routes = wait_prefixes(&router, Family::Ipv6, &[v6]).with_context(|| speaker.log())?;
    ensure_next_hop(&routes, v6, node1_v6())?;
    stop_and_wait_withdrawn(speaker, &router, &[Family::Ipv4, Family::Ipv6])?;
    Ok(())
}

#[test]
fn both_families_one_session_frr() -> Result<()> {
    both_families_one_session(RouterKind::Frr)
}

#[test]
fn both_families_one_session_bird() -> Result<()> {
    both_families_one_session(RouterKind::Bird)
}

#[test]
fn both_families_one_session_gobgp() -> Result<()> {
    both_families_one_session(RouterKind::Gobgp)
}

// ---------------------------------------------------------------- multihop

/// eBGP multihop through the router to a router of `kind` in `far`
/// (203.0.113.2, AS 64515): with TTL 1 the session cannot come up and the
/// error says to set ebgpMultiHop; with it, the session is Established and
/// routes arrive.
fn ebgp_multihop_routed(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup_lab(true)?;
    let far = Router::start(
        lab.far(),
        &RouterConfig::new(kind, "far", plan::FAR_AS, plan::FAR_V4)
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS).multihop(255)),
    )?;
    let prefixes = ["198.51.100.60/32"];
    let direct = Speaker::start(
        lab.node(1),
        spec(plan::FAR_V4.into(), plan::NODE_AS, plan::FAR_AS, &prefixes),
    )?;
    direct.wait_event("multihop hint", Duration::from_secs(30), |e| {
        e["event"] == "error"
            && e["text"]
                .as_str()
                .is_some_and(|t| t.contains("set ebgpMultiHop"))
    })?;
    let log = direct.stop()?;
    ensure!(
        !log.contains("\"to\":\"Established\""),
        "TTL 1 came up: {log}"
    );
    ensure!(
        !far.established(node1_v4())?,
        "{} in far came up with TTL 1",
        kind.name()
    );
    let mut s = spec(plan::FAR_V4.into(), plan::NODE_AS, plan::FAR_AS, &prefixes);
    s["multihop"] = serde_json::json!(true);
    let speaker = Speaker::start(lab.node(1), s)?;
    wait_router_established(&far, node1_v4(), &speaker)?;
    let routes = wait_prefixes(&far, Family::Ipv4, &prefixes)?;
    ensure_next_hop(&routes, prefixes[0], node1_v4())?;
    stop_and_wait_withdrawn(speaker, &far, &[Family::Ipv4])?;
    Ok(())
}

#[test]
fn ebgp_multihop_routed_frr() -> Result<()> {
    ebgp_multihop_routed(RouterKind::Frr)
}

#[test]
fn ebgp_multihop_routed_bird() -> Result<()> {
    ebgp_multihop_routed(RouterKind::Bird)
}

#[test]
fn ebgp_multihop_routed_gobgp() -> Result<()> {
    ebgp_multihop_routed(RouterKind::Gobgp)
}

// ---------------------------------------------------------------- TCP MD5

/// TCP MD5 (RFC 2385), same password on both sides: Established, prefixes
/// seen, and the password never in our output.
fn md5_match(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(
        &at.config()
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS).password("interop-key")),
    )?;
    let mut s = ebgp_spec(&at, Family::Ipv4, &V4_PREFIXES);
    s["password"] = serde_json::json!("interop-key");
    let speaker = Speaker::start(lab.node(1), s)?;
    wait_router_established(&router, node1_v4(), &speaker)?;
    speaker.wait_established(Duration::from_secs(10))?;
    wait_prefixes(&router, Family::Ipv4, &V4_PREFIXES).with_context(|| speaker.log())?;
    let log = stop_and_wait_withdrawn(speaker, &router, &[Family::Ipv4])?;
    ensure!(!log.contains("interop-key"), "the password leaked: {log}");
    Ok(())
}

#[test]
fn md5_match_frr() -> Result<()> {
    md5_match(RouterKind::Frr)
}

#[test]
fn md5_match_bird() -> Result<()> {
    md5_match(RouterKind::Bird)
}

#[test]
fn md5_match_gobgp() -> Result<()> {
    md5_match(RouterKind::Gobgp)
}

/// TCP MD5 with different passwords: never Established (the kernels drop
/// the segments signed with the other key), our last error says to check
/// the password without showing it, and the router is not Established
/// either.
fn md5_mismatch(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(
        &at.config()
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS).password("router-side-key")),
    )?;
    let mut s = ebgp_spec(&at, Family::Ipv4, &V4_PREFIXES);
    s["password"] = serde_json::json!("our-side-key");
    let speaker = Speaker::start(lab.node(1), s)?;
    speaker.wait_event("MD5 hint", Duration::from_secs(30), |e| {
        e["event"] == "error"
            && e["text"]
                .as_str()
                .is_some_and(|t| t.contains("TCP MD5 is configured"))
    })?;
    // Give the session a few more attempts to (wrongly) come up.
    std::thread::sleep(Duration::from_secs(5));
    let state = router.state(node1_v4())?;
    ensure!(
        !state
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("established")),
        "{} came up with a mismatched password",
        kind.name()
    );
    let last_error = speaker.last_error();
    ensure!(
        last_error
            .as_deref()
            .is_some_and(|t| t.contains("check the password")),
        "last error: {last_error:?}; log:\n{}",
        speaker.log()
    );
    let log = speaker.stop()?;
    ensure!(!log.contains("our-side-key"), "the password leaked: {log}");
    ensure!(
        !log.contains("\"to\":\"Established\""),
        "came up with a mismatched password"
    );
    Ok(())
}

#[test]
fn md5_mismatch_frr() -> Result<()> {
    md5_mismatch(RouterKind::Frr)
}

#[test]
fn md5_mismatch_bird() -> Result<()> {
    md5_mismatch(RouterKind::Bird)
}

#[test]
fn md5_mismatch_gobgp() -> Result<()> {
    md5_mismatch(RouterKind::Gobgp)
}

// ---------------------------------------------------------------- hold timer

/// Hold time 9 s on both sides and a silent cut at the switch: the router
/// drops the session when its hold timer expires (not before, and within
/// the hold time plus a margin for a loaded machine) and says so in its
/// log; our side leaves Established with Hold Timer Expired too.
fn hold_expiry_after_silent_cut(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(
        &at.config()
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS).hold_time(9)),
    )?;
    let mut s = ebgp_spec(&at, Family::Ipv4, &["198.51.100.20/32"]);
    s["hold_time"] = serde_json::json!(9);
    let speaker = Speaker::start(lab.node(1), s)?;
    wait_router_established(&router, node1_v4(), &speaker)?;
    speaker.wait_established(Duration::from_secs(10))?;
    speaker.wait_event("hold time 9", Duration::from_secs(5), |e| {
        e["event"] == "negotiated" && e["hold_time"] == 9
    })?;
    wait_prefixes(&router, Family::Ipv4, &["198.51.100.20/32"])?;
    let cut = lab.cut_cable(&plan::node_name(1))?;
    let t0 = Instant::now();
    // 9 s hold plus a margin for a loaded 2-core machine.
    let margin = Duration::from_secs(9 + 20);
    wait_until(margin, Duration::from_millis(250), || {
        match router.established(node1_v4()) {
            Ok(false) => Ok(()),
            Ok(true) => Err("still established".to_string()),
            Err(e) => Err(format!("{e:#}")),
        }
    })
    .map_err(anyhow::Error::from)
    .with_context(|| router.logs(20))?;
    let router_down = t0.elapsed();
    // The last keepalive arrived at most 3 s before the cut.
    ensure!(
        router_down >= Duration::from_secs(5),
        "{} dropped the session {router_down:?} after the cut, before its hold time",
        kind.name()
    );
    speaker.wait_left_established(margin)?;
    let ours_down = t0.elapsed();
    ensure!(
        ours_down < margin + Duration::from_secs(2),
        "our side took {ours_down:?}"
    );
    println!(
        "hold expiry: {} down after {router_down:?}, ours after {ours_down:?}",
        kind.name()
    );
    let router_log = router.logs(200);
    ensure!(
        router_log
            .to_ascii_lowercase()
            .contains("hold timer expired"),
        "{} does not say its hold timer expired:\n{router_log}",
        kind.name()
    );
    ensure!(
        speaker.log().contains("Hold Timer Expired"),
        "our last error should be the hold timer: {}",
        speaker.log()
    );
    cut.restore()?;
    speaker.stop()?;
    Ok(())
}

#[test]
fn hold_expiry_after_silent_cut_frr() -> Result<()> {
    hold_expiry_after_silent_cut(RouterKind::Frr)
}

#[test]
fn hold_expiry_after_silent_cut_bird() -> Result<()> {
    hold_expiry_after_silent_cut(RouterKind::Bird)
}

#[test]
fn hold_expiry_after_silent_cut_gobgp() -> Result<()> {
    hold_expiry_after_silent_cut(RouterKind::Gobgp)
}

// ---------------------------------------------------------------- peer restart

/// The router restarts (a fresh daemon, empty tables): we notice, reconnect
/// and send everything again.
fn peer_restart_reconnect_resend(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let config = at
        .config()
        .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS));
    let router = lab.start_l2_router(&config)?;
    let speaker = Speaker::start(lab.node(1), ebgp_spec(&at, Family::Ipv4, &V4_PREFIXES))?;
    wait_router_established(&router, node1_v4(), &speaker)?;
    wait_prefixes(&router, Family::Ipv4, &V4_PREFIXES)?;
    let router = router.restart(&config)?;
    speaker.wait_left_established(Duration::from_secs(30))?;
    wait_router_established(&router, node1_v4(), &speaker)?;
    wait_prefixes(&router, Family::Ipv4, &V4_PREFIXES).with_context(|| speaker.log())?;
    wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let n = speaker
            .events()
            .iter()
            .filter(|e| e["event"] == "state_changed" && e["to"] == "Established")
            .count();
        if n >= 2 {
            Ok(())
        } else {
            Err(format!("{n} sessions"))
        }
    })
    .map_err(|e| anyhow::anyhow!("{e}: no second session; log:\n{}", speaker.log()))?;
    stop_and_wait_withdrawn(speaker, &router, &[Family::Ipv4])?;
    Ok(())
}

#[test]
fn peer_restart_reconnect_resend_frr() -> Result<()> {
    peer_restart_reconnect_resend(RouterKind::Frr)
}

#[test]
fn peer_restart_reconnect_resend_bird() -> Result<()> {
    peer_restart_reconnect_resend(RouterKind::Bird)
}

#[test]
fn peer_restart_reconnect_resend_gobgp() -> Result<()> {
    peer_restart_reconnect_resend(RouterKind::Gobgp)
}
