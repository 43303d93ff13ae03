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
//! closes with Cease/Administrative Shutdown. SIGUSR1 is a planned restart
//! ([`bgp::session::Session::planned_restart`]: nothing withdrawn, graceful
//! restart leaves our routes at the peer); SIGUSR2 closes with the Cease
//! of SIGTERM without withdrawing first; SIGHUP toggles a hold-down
//! ([`bgp::session::Session::hold_down`] with Cease/BFD Down, then
//! [`bgp::session::Session::release`]), as BFD going Down and Up again
//! would. Without the variable it returns at once. This needs no other binary to be built (`cargo test -p
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
    if let Some(sessions) = v["sessions"].as_array() {
        return run_sessions_helper(sessions).await;
    }
    let my_asn = v["my_asn"].as_u64().context("my_asn")? as u32;
    let peer_asn = v["peer_asn"].as_u64().context("peer_asn")? as u32;
    let peer: IpAddr = v["peer"].as_str().context("peer")?.parse()?;
    let mut fsm = Config::new(my_asn, PeerAs::Fixed(peer_asn), "node-1");
    fsm.hold_time = v["hold_time"].as_u64().map(|h| h as u16);
    fsm.connect_time = Some(2);
    fsm.enhanced_route_refresh = v["enhanced_route_refresh"].as_bool().unwrap_or(false);
    let gr = &v["graceful_restart"];
    if gr.is_object() {
        fsm.enable_graceful_restart(
            gr["restart_time"].as_u64().context("restart_time")? as u16,
            gr["notification"].as_bool().unwrap_or(false),
            gr["restarted"].as_bool().unwrap_or(false),
        );
    }
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
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let mut usr2 = signal(SignalKind::user_defined2())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut held = false;
    let session = Session::spawn(cfg, None)?;
    let mut events = session.events();
    let mut state = session.state();
    // Before the session can come up: End-of-RIB follows these.
    session.set_advertisements(ads)?;
    println!("{{\"event\":\"helper_started\"}}");
    let how = loop {
        tokio::select! {
            _ = term.recv() => break "shutdown",
            _ = usr1.recv() => break "planned_restart",
            _ = usr2.recv() => break "cease",
            _ = hup.recv() => {
                held = !held;
                if held {
                    session.hold_down("interop BFD down", bgp::fsm::CeaseSubcode::BfdDown)?;
                    println!("{{\"event\":\"hold_down\"}}");
                } else {
                    session.release()?;
                    println!("{{\"event\":\"release\"}}");
                }
            }
            Ok(ev) = events.recv() => println!("{}", serde_json::to_string(&ev)?),
            Ok(()) = state.changed() => {
                let s = state.borrow_and_update().clone();
                println!("{}", serde_json::json!({"event": "state", "state": s}));
            }
        }
    };
    let last = session.state();
    match how {
        "shutdown" => {
            session.set_advertisements(Vec::new())?;
            session.shutdown("interop test done").await;
        }
        "planned_restart" => session.planned_restart("interop planned restart").await,
        _ => session.shutdown("interop test stop").await,
    }
    // The state as the session task left it (counters of what it sent
    // while closing, the last error).
    let s = last.borrow().clone();
    println!(
        "{}",
        serde_json::json!({"event": "final_state", "state": s})
    );
    if how == "shutdown" {
        println!("{{\"event\":\"stopped\"}}");
    } else {
        println!("{}", serde_json::json!({"event": "stopped", "how": how}));
    }
    Ok(())
}

/// Several sessions in one speaker, sharing one [`bgp::listener::Listeners`]
/// as the speaker does: each spec has `peer`, `my_asn`, `peer_asn`,
/// `prefixes` and optionally `password`, `listen` (our local address; port
/// 179), `passive` (PassiveTcpEstablishment) and `connect_time` (the
/// ConnectRetry time, default 2 s: with `passive`, how long before we dial
/// out ourselves).
/// Every printed event carries the session's `peer`; SIGTERM withdraws
/// and closes every session with Cease.
async fn run_sessions_helper(specs: &[serde_json::Value]) -> Result<()> {
    use bgp::fsm::{Config, PeerAs};
    use bgp::listener::Listeners;
    use bgp::rib_out::Advertisement;
    use bgp::session::{PeerConfig, Session};
    use tokio::signal::unix::{SignalKind, signal};

    let mut term = signal(SignalKind::terminate())?;
    let listeners = Listeners::new();
    let (out_tx, mut out) = tokio::sync::mpsc::unbounded_channel::<serde_json::Value>();
    let mut sessions = Vec::new();
    for v in specs {
        let peer: IpAddr = v["peer"].as_str().context("peer")?.parse()?;
        let my_asn = v["my_asn"].as_u64().context("my_asn")? as u32;
        let peer_asn = v["peer_asn"].as_u64().context("peer_asn")? as u32;
        let mut fsm = Config::new(my_asn, PeerAs::Fixed(peer_asn), "node-1");
        fsm.connect_time = Some(v["connect_time"].as_u64().unwrap_or(2) as u16);
        fsm.passive_tcp_establishment = v["passive"].as_bool().unwrap_or(false);
        let mut cfg = PeerConfig::new(fsm, std::net::SocketAddr::new(peer, 179));
        cfg.password = v["password"].as_str().map(str::to_owned);
        if let Some(listen) = v["listen"].as_str() {
            cfg.listen = Some(std::net::SocketAddr::new(listen.parse()?, 179));
        }
        let ads: Vec<Advertisement> = v["prefixes"]
            .as_array()
            .context("prefixes")?
            .iter()
            .map(|p| Advertisement::new(p.as_str().unwrap().parse().unwrap()))
            .collect();
        let session = Session::spawn_with_listeners(cfg, None, listeners.clone())?;
        let mut events = session.events();
        let mut state = session.state();
        let tx = out_tx.clone();
        let tag = peer.to_string();
        tokio::spawn(async move {
            loop {
                let mut line = tokio::select! {
                    ev = events.recv() => match ev {
                        Ok(ev) => serde_json::to_value(&ev).unwrap(),
                        Err(_) => return,
                    },
                    changed = state.changed() => match changed {
                        Ok(()) => {
                            let s = state.borrow_and_update().clone();
                            serde_json::json!({"event": "state", "state": s})
                        }
                        Err(_) => return,
                    },
                };
                line["peer"] = serde_json::json!(tag);
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        session.set_advertisements(ads)?;
        sessions.push(session);
    }
    println!("{{\"event\":\"helper_started\"}}");
    loop {
        tokio::select! {
            _ = term.recv() => break,
            Some(line) = out.recv() => println!("{line}"),
        }
    }
    for session in sessions {
        session.set_advertisements(Vec::new())?;
        session.shutdown("interop test done").await;
    }
    while let Ok(line) = out.try_recv() {
        println!("{line}");
    }
    println!(
        "{}",
        serde_json::json!({"event": "listeners", "stats": format!("{:?}", listeners.stats())})
    );
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
        // One log per speaker: a test may start several in one lab.
        static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = ns.state_dir().join(format!("speaker-{n}.log"));
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

    fn signal(&self, sig: testkit::process::Signal) {
        self.child.signal(sig);
    }

    /// The JSON events printed so far.
    /// (A `current` event, first of the subscription, counts as the events
    /// it summarises: [`testkit::session_log::json_events`].)
    fn events(&self) -> Vec<serde_json::Value> {
        testkit::session_log::json_events(&self.log())
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

    /// The session reached Established: its `state_changed` event (the events
    /// start with the state at the subscription, so one that happened before the
    /// helper subscribed is not lost).
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

    /// The published state in the latest `state` event.
    fn last_state(&self) -> Option<serde_json::Value> {
        self.events()
            .into_iter()
            .rev()
            .find(|e| e["event"] == "state")
            .map(|e| e["state"].clone())
    }

    /// Waits until the latest published state satisfies `f`; returns it.
    fn wait_state(
        &self,
        what: &str,
        timeout: Duration,
        f: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value> {
        wait_until(timeout, Duration::from_millis(100), || {
            match self.last_state() {
                Some(s) if f(&s) => Ok(s),
                _ => Err(format!("no {what} yet")),
            }
        })
        .map_err(|e| anyhow::anyhow!("{e}; speaker log:\n{}", self.log()))
    }

    /// The negotiation reported by the `negotiated` event.
    fn negotiated(&self) -> Result<serde_json::Value> {
        self.wait_event("negotiated", Duration::from_secs(10), |e| {
            e["event"] == "negotiated"
        })?;
        self.events()
            .into_iter()
            .rev()
            .find(|e| e["event"] == "negotiated")
            .context("a negotiated event")
    }

    /// SIGUSR1 (planned restart) or SIGUSR2 (Cease, nothing withdrawn):
    /// the process closes the session that way and exits; returns the
    /// state it left (`final_state`).
    fn stop_as(mut self, how: &str) -> Result<serde_json::Value> {
        let sig = match how {
            "planned_restart" => testkit::process::Signal::USR1,
            "cease" => testkit::process::Signal::USR2,
            other => anyhow::bail!("no way to stop {other:?}"),
        };
        let status = self.child.stop_with(sig, Duration::from_secs(10))?;
        let log = self.child.log();
        println!("speaker log:\n{log}");
        let events: Vec<serde_json::Value> = log
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        ensure!(
            events
                .iter()
                .any(|e| e["event"] == "stopped" && e["how"] == how),
            "speaker did not stop by {how} ({status}):\n{log}"
        );
        events
            .into_iter()
            .find(|e| e["event"] == "final_state")
            .map(|e| e["state"].clone())
            .context("no final state")
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

// ---------------------------------------------------------------- RFC 2545 next hop

/// node-1's link-local address on the interface holding its lab IPv6
/// address, with that interface's name.
fn node1_link_local(lab: &Lab) -> Result<(IpAddr, String)> {
    let v = lab.node(1).ip_json(&["-6", "addr", "show"])?;
    let want = node1_v6().to_string();
    for link in v.as_array().into_iter().flatten() {
        let addrs = link["addr_info"].as_array().cloned().unwrap_or_default();
        if addrs.iter().any(|a| a["local"].as_str() == Some(&want)) {
            for a in &addrs {
                if a["scope"].as_str() == Some("link")
                    && let Some(l) = a["local"].as_str()
                {
                    let name = link["ifname"].as_str().context("ifname")?;
                    return Ok((l.parse()?, name.to_owned()));
                }
            }
        }
    }
    anyhow::bail!("no link-local address beside {want}: {v}")
}

/// RFC 2545 section 3 (issue 13 item 5): to a directly connected peer the
/// IPv6 next hop is 32 bytes, node-1's global address then its link-local
/// one, on an IPv6 session and on an IPv4 session carrying IPv6. The
/// router shows both as the path's next hops, the global one in the global
/// slot, and (FRR) installs the route in its FIB via one of them. What
/// went on the wire is checked in a capture on node-1 (tcpdump's BGP
/// decoder: `nh-length: 32`, both addresses), since GoBGP's CLI shows the
/// global next hop only.
fn ipv6_next_hop_rfc2545(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let (ll, ifname) = node1_link_local(&lab)?;
    let pcap = lab
        .node(1)
        .state_dir()
        .join(format!("rfc2545-{}.pcap", kind.name()));
    let capture = testkit::Capture::start(lab.node(1), &ifname, &pcap, &["tcp", "port", "179"])?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(
        &at.config()
            .neighbor(Neighbor::new(node1_v6(), plan::NODE_AS))
            .neighbor(
                Neighbor::new(node1_v4(), plan::NODE_AS).families(&[Family::Ipv4, Family::Ipv6]),
            ),
    )?;
    // One speaker per session, one at a time: first the IPv6 session.
    for (session_family, prefix) in [
        (Family::Ipv6, "2001:db8:100::61/128"),
        (Family::Ipv4, "2001:db8:100::62/128"),
    ] {
        let speaker = Speaker::start(lab.node(1), ebgp_spec(&at, session_family, &[prefix]))?;
        let addr = at_local(session_family);
        wait_router_established(&router, addr, &speaker)?;
        let routes =
            wait_prefixes(&router, Family::Ipv6, &[prefix]).with_context(|| speaker.log())?;
        let path = routes
            .iter()
            .find(|r| r.prefix == prefix)
            .context("the path")?;
        let hops: Vec<IpAddr> = path
            .next_hops
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        match &router {
            // GoBGP's CLI and JSON show the MP_REACH next hop's global
            // address only (the link-local one is checked on the wire).
            Router::Gobgp(_) => {
                ensure!(hops == [node1_v6()], "{prefix}: next hops {hops:?}");
            }
            _ => {
                let mut sorted = hops.clone();
                sorted.sort();
                let mut want = vec![node1_v6(), ll];
                want.sort();
                ensure!(
                    sorted == want,
                    "{prefix}: next hops {hops:?}, want {want:?}"
                );
                // The global slot holds the global address.
                ensure!(hops[0] == node1_v6(), "{prefix}: global slot {hops:?}");
            }
        }
        if let Router::Frr(frr) = &router {
            let fib = testkit::wait_until(ROUTE_TIMEOUT, Duration::from_millis(250), || {
                let v = frr
                    .show_json(&format!("show ipv6 route {prefix} json"))
                    .map_err(|e| format!("{e:#}"))?;
                let hops: Vec<String> = v[prefix]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| r["selected"].as_bool() == Some(true))
                    .flat_map(|r| r["nexthops"].as_array().cloned().unwrap_or_default())
                    .filter(|n| n["active"].as_bool() == Some(true))
                    .filter_map(|n| n["ip"].as_str().map(str::to_owned))
                    .collect();
                if hops.is_empty() {
                    Err(format!("{prefix} not in FRR's FIB: {v}"))
                } else {
                    Ok(hops)
                }
            })?;
            ensure!(
                fib.iter().all(|h| h
                    .parse::<IpAddr>()
                    .ok()
                    .is_some_and(|h| h == ll || h == node1_v6())),
                "{prefix}: FIB next hops {fib:?}"
            );
        }
        stop_and_wait_withdrawn(speaker, &router, &[Family::Ipv6])?;
    }
    let pcap = capture.stop()?;
    let out = std::process::Command::new("tcpdump")
        .arg("-r")
        .arg(&pcap)
        .args(["-nn", "-vvv"])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let want = format!("nexthop: {}, {ll}, nh-length: 32", node1_v6());
    let seen = text.matches(&want).count();
    ensure!(
        seen >= 2,
        "both sessions' MP_REACH should carry {want:?} ({seen} seen):\n{text}"
    );
    ensure!(
        !text.contains(&format!("nexthop: {ll}")),
        "a link-local address in the global slot:\n{text}"
    );
    Ok(())
}

/// node-1's address of `family` (the session's local address).
fn at_local(family: Family) -> IpAddr {
    match family {
        Family::Ipv4 => node1_v4(),
        Family::Ipv6 => node1_v6(),
    }
}

#[test]
fn ipv6_next_hop_rfc2545_frr() -> Result<()> {
    ipv6_next_hop_rfc2545(RouterKind::Frr)
}

#[test]
fn ipv6_next_hop_rfc2545_bird() -> Result<()> {
    ipv6_next_hop_rfc2545(RouterKind::Bird)
}

#[test]
fn ipv6_next_hop_rfc2545_gobgp() -> Result<()> {
    ipv6_next_hop_rfc2545(RouterKind::Gobgp)
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

// ---------------------------------------------------------------- graceful restart

/// The restart time we advertise in the graceful restart rows: the peer
/// keeps our routes this long while we are away. Our restart takes a few
/// seconds; the rows check that it came back well within this.
const GR_RESTART_TIME: u64 = 30;
const GR_PREFIXES: [&str; 2] = ["198.51.100.70/32", "198.51.100.71/32"];

/// An eBGP IPv4 session offering graceful restart (RFC 4724: restart time,
/// every family with the Forwarding State bit; the RFC 8538 N bit when
/// `notification`; the R bit when `restarted`).
fn gr_spec(
    at: &L2Router,
    prefixes: &[&str],
    restart_time: u64,
    notification: bool,
    restarted: bool,
) -> serde_json::Value {
    let mut s = ebgp_spec(at, Family::Ipv4, prefixes);
    s["graceful_restart"] = serde_json::json!({
        "restart_time": restart_time,
        "notification": notification,
        "restarted": restarted,
    });
    s
}

/// What the router shows of our routes: all of `want` in its table, and
/// kept as stale (FRR and GoBGP flag the paths, BIRD says its helper
/// procedure runs) when `stale`, or not when `!stale`.
fn check_gr_view(router: &Router, want: &[&str], stale: bool) -> std::result::Result<(), String> {
    let have = router
        .prefixes(Family::Ipv4)
        .map_err(|e| format!("{e:#}"))?;
    let mut want_sorted: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want_sorted.sort();
    if have != want_sorted {
        return Err(format!("table {have:?}, want {want_sorted:?}"));
    }
    match router
        .stale_prefixes(Family::Ipv4)
        .map_err(|e| format!("{e:#}"))?
    {
        Some(s) if stale && s != want_sorted => Err(format!("stale {s:?}, want all")),
        Some(s) if !stale && !s.is_empty() => Err(format!("stale {s:?}, want none")),
        Some(_) => Ok(()),
        None => match router
            .graceful_restart_active(node1_v4())
            .map_err(|e| format!("{e:#}"))?
        {
            Some(active) if active != stale => {
                Err(format!("graceful restart active: {active}, want {stale}"))
            }
            _ => Ok(()),
        },
    }
}

/// Our planned restart with graceful restart negotiated (RFC 4724; with
/// the RFC 8538 N bit when `n_bit`): the speaker closes without
/// NOTIFICATION (N bit: Cease/Administrative Reset) and exits; the router
/// keeps both prefixes as stale while we are away; a new speaker (R bit)
/// announces only the first, and after its End-of-RIB the router has
/// exactly that one, no longer stale. The new session comes up well within
/// the restart time, so the removal is the End-of-RIB's doing, not the
/// restart timer's.
fn graceful_restart_ours(kind: RouterKind, n_bit: bool) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(
        &at.config()
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS).graceful_restart()),
    )?;
    let first = Speaker::start(
        lab.node(1),
        gr_spec(&at, &GR_PREFIXES, GR_RESTART_TIME, n_bit, false),
    )?;
    wait_router_established(&router, node1_v4(), &first)?;
    wait_prefixes(&router, Family::Ipv4, &GR_PREFIXES).with_context(|| first.log())?;
    let gr = first.negotiated()?["capabilities"]["graceful_restart"].clone();
    ensure!(
        gr.is_object(),
        "{} did not negotiate graceful restart: {}",
        kind.name(),
        first.log()
    );
    ensure!(
        gr["notification"] == n_bit,
        "N bit negotiated: {}, want {n_bit}",
        gr["notification"]
    );
    first.wait_state("End-of-RIB sent", Duration::from_secs(10), |s| {
        s["rib_out"]["initial_sync_done"] == true
    })?;

    // Our planned restart.
    let left = first.stop_as("planned_restart")?;
    let stopped = Instant::now();
    let notifications = left["sent"]["notifications"].as_u64();
    let last_error = left["last_error"]["text"].as_str().unwrap_or_default();
    if n_bit {
        ensure!(
            notifications == Some(1) && last_error.contains("Administrative Reset"),
            "N bit: one Cease/Administrative Reset expected: {left}"
        );
    } else {
        ensure!(
            notifications == Some(0),
            "no NOTIFICATION expected on a graceful restart: {left}"
        );
    }
    wait_until(ROUTE_TIMEOUT, Duration::from_millis(250), || {
        match router.established(node1_v4()) {
            Ok(false) => Ok(()),
            Ok(true) => Err("still established".to_string()),
            Err(e) => Err(format!("{e:#}")),
        }
    })
    .map_err(anyhow::Error::from)
    .with_context(|| router.logs(30))?;
    // During the gap: both prefixes kept, as stale.
    wait_until(Duration::from_secs(10), Duration::from_millis(250), || {
        check_gr_view(&router, &GR_PREFIXES, true)
    })
    .map_err(anyhow::Error::from)
    .with_context(|| format!("during our restart; {}", router.logs(30)))?;
    std::thread::sleep(Duration::from_secs(3));
    check_gr_view(&router, &GR_PREFIXES, true)
        .map_err(|e| anyhow::anyhow!("3 s into our restart: {e}"))?;
    let gap = stopped.elapsed();

    // Back, announcing only the first prefix.
    let kept = &GR_PREFIXES[..1];
    let second = Speaker::start(
        lab.node(1),
        gr_spec(&at, kept, GR_RESTART_TIME, n_bit, true),
    )?;
    wait_router_established(&router, node1_v4(), &second)?;
    let back = stopped.elapsed();
    ensure!(
        back < Duration::from_secs(GR_RESTART_TIME - 5),
        "the new session took {back:?}, too close to the restart time"
    );
    wait_until(ROUTE_TIMEOUT, Duration::from_millis(250), || {
        check_gr_view(&router, kept, false)
    })
    .map_err(anyhow::Error::from)
    .with_context(|| format!("after our End-of-RIB; {}", second.log()))?;
    let clean = stopped.elapsed();
    second.wait_state("End-of-RIB sent", Duration::from_secs(10), |s| {
        s["rib_out"]["initial_sync_done"] == true
    })?;
    let routes = router.routes(Family::Ipv4)?;
    ensure_next_hop(&routes, kept[0], node1_v4())?;
    // The new session's UPDATEs reached the router (its counters restart
    // with the session).
    let updates = router.updates_received(node1_v4())?;
    ensure!(updates >= 1, "the router counted {updates} UPDATEs from us");
    println!(
        "graceful restart ({}, N bit {n_bit}): gap {gap:?}, Established again after {back:?}, \
         stale route gone after {clean:?}",
        kind.name()
    );
    stop_and_wait_withdrawn(second, &router, &[Family::Ipv4])?;
    Ok(())
}

#[test]
fn graceful_restart_ours_frr() -> Result<()> {
    graceful_restart_ours(RouterKind::Frr, false)
}

#[test]
fn graceful_restart_ours_bird() -> Result<()> {
    graceful_restart_ours(RouterKind::Bird, false)
}

#[test]
fn graceful_restart_ours_gobgp() -> Result<()> {
    graceful_restart_ours(RouterKind::Gobgp, false)
}

// No BIRD cell with the N bit: BIRD 2.0 does not offer it (RFC 8538), so
// it is never negotiated; the Cease row below shows BIRD with our N bit
// offered.

#[test]
fn graceful_restart_ours_n_bit_frr() -> Result<()> {
    graceful_restart_ours(RouterKind::Frr, true)
}

#[test]
fn graceful_restart_ours_n_bit_gobgp() -> Result<()> {
    graceful_restart_ours(RouterKind::Gobgp, true)
}

/// The contrast: graceful restart negotiated (with the N bit where the
/// router has it), but we stop with a Cease (Administrative Shutdown,
/// wrapped in Hard Reset with the N bit) without withdrawing anything: the
/// router drops our routes at once, although we advertised a restart time
/// of 120 s.
fn cease_drops_routes_despite_graceful_restart(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(
        &at.config()
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS).graceful_restart()),
    )?;
    let speaker = Speaker::start(lab.node(1), gr_spec(&at, &GR_PREFIXES, 120, true, false))?;
    wait_router_established(&router, node1_v4(), &speaker)?;
    wait_prefixes(&router, Family::Ipv4, &GR_PREFIXES).with_context(|| speaker.log())?;
    let gr = speaker.negotiated()?["capabilities"]["graceful_restart"].clone();
    ensure!(gr.is_object(), "graceful restart not negotiated");
    let n_bit = gr["notification"] == true;
    let left = speaker.stop_as("cease")?;
    let stopped = Instant::now();
    let text = left["last_error"]["text"].as_str().unwrap_or_default();
    ensure!(
        left["sent"]["notifications"] == 1 && text.contains("Administrative Shutdown"),
        "one Cease/Administrative Shutdown expected: {left}"
    );
    ensure!(
        text.contains("Hard Reset") == n_bit,
        "Hard Reset exactly when the N bit was negotiated ({n_bit}): {text}"
    );
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(250),
        || match router.prefixes(Family::Ipv4) {
            Ok(p) if p.is_empty() => Ok(()),
            Ok(p) => Err(format!("still has {p:?}")),
            Err(e) => Err(format!("{e:#}")),
        },
    )
    .map_err(anyhow::Error::from)
    .with_context(|| router.logs(30))?;
    println!(
        "Cease ({}, N bit {n_bit}): routes gone after {:?}",
        kind.name(),
        stopped.elapsed()
    );
    Ok(())
}

#[test]
fn cease_drops_routes_despite_graceful_restart_frr() -> Result<()> {
    cease_drops_routes_despite_graceful_restart(RouterKind::Frr)
}

#[test]
fn cease_drops_routes_despite_graceful_restart_bird() -> Result<()> {
    cease_drops_routes_despite_graceful_restart(RouterKind::Bird)
}

#[test]
fn cease_drops_routes_despite_graceful_restart_gobgp() -> Result<()> {
    cease_drops_routes_despite_graceful_restart(RouterKind::Gobgp)
}

/// BFD gating: graceful restart negotiated (with the N bit where the router
/// has it: FRR, GoBGP), a hold-down (what the speaker does while BFD is
/// Down) sends Cease/BFD Down, inside Hard Reset with the N bit: the
/// router drops our routes at once instead of keeping them as stale for
/// our 120 s restart time; the session stays down while held (5 s here,
/// where a reset comes back after about 1 s, and the router retries on its
/// own), and after the release it is Established again with both
/// prefixes.
fn bfd_hold_down(kind: RouterKind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(
        &at.config()
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS).graceful_restart()),
    )?;
    let speaker = Speaker::start(lab.node(1), gr_spec(&at, &GR_PREFIXES, 120, true, false))?;
    wait_router_established(&router, node1_v4(), &speaker)?;
    wait_prefixes(&router, Family::Ipv4, &GR_PREFIXES).with_context(|| speaker.log())?;
    let gr = speaker.negotiated()?["capabilities"]["graceful_restart"].clone();
    ensure!(gr.is_object(), "graceful restart not negotiated");
    let n_bit = gr["notification"] == true;
    ensure!(
        n_bit == !matches!(kind, RouterKind::Bird),
        "N bit negotiated: {n_bit} ({gr})"
    );

    speaker.signal(testkit::process::Signal::HUP);
    let held = Instant::now();
    let s = speaker.wait_state("held down", Duration::from_secs(10), |s| {
        s["held_down"] == true && s["fsm_state"] == "Idle"
    })?;
    let text = s["last_error"]["text"].as_str().unwrap_or_default();
    ensure!(
        text.contains("BFD Down") && text.contains("Hard Reset") == n_bit,
        "Cease/BFD Down, in Hard Reset exactly when the N bit was negotiated ({n_bit}): {text}"
    );
    let opens = s["sent"]["opens"].clone();
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(250),
        || match router.prefixes(Family::Ipv4) {
            Ok(p) if p.is_empty() => Ok(()),
            Ok(p) => Err(format!("still has {p:?}")),
            Err(e) => Err(format!("{e:#}")),
        },
    )
    .map_err(anyhow::Error::from)
    .with_context(|| router.logs(30))?;
    let gone = held.elapsed();
    // Held: neither side brings the session up.
    while held.elapsed() < Duration::from_secs(5) {
        ensure!(
            !router.established(node1_v4())?,
            "Established again while held down; speaker log:\n{}",
            speaker.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let s = speaker.last_state().context("a state")?;
    ensure!(
        s["fsm_state"] == "Idle" && s["held_down"] == true && s["sent"]["opens"] == opens,
        "not Idle, or an OPEN sent, while held down: {s}"
    );

    speaker.signal(testkit::process::Signal::HUP);
    let released = Instant::now();
    wait_router_established(&router, node1_v4(), &speaker)?;
    wait_prefixes(&router, Family::Ipv4, &GR_PREFIXES).with_context(|| speaker.log())?;
    println!(
        "hold-down ({}, N bit {n_bit}): routes gone after {gone:?}; back with both prefixes \
         {:?} after the release",
        kind.name(),
        released.elapsed()
    );
    stop_and_wait_withdrawn(speaker, &router, &[Family::Ipv4])?;
    Ok(())
}

#[test]
fn bfd_hold_down_frr() -> Result<()> {
    bfd_hold_down(RouterKind::Frr)
}

#[test]
fn bfd_hold_down_bird() -> Result<()> {
    bfd_hold_down(RouterKind::Bird)
}

#[test]
fn bfd_hold_down_gobgp() -> Result<()> {
    bfd_hold_down(RouterKind::Gobgp)
}

// ---------------------------------------------------------------- route refresh

/// The router asks us for our routes again (ROUTE-REFRESH, RFC 2918; RFC
/// 7313 when `enhanced`): we count the request, send our whole
/// Adj-RIB-Out again (our UPDATE counter grows, and so does the router's
/// count of UPDATEs from us), and the router still has every prefix. With
/// enhanced route refresh the router marks our routes stale at our BoRR
/// and removes at our EoRR those not sent again in between, so the
/// prefixes still there were re-sent.
fn route_refresh(kind: RouterKind, enhanced: bool) -> Result<()> {
    let (_serial, lab) = setup()?;
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(
        &at.config()
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS)),
    )?;
    let mut s = ebgp_spec(&at, Family::Ipv4, &V4_PREFIXES);
    s["enhanced_route_refresh"] = serde_json::json!(enhanced);
    let speaker = Speaker::start(lab.node(1), s)?;
    wait_router_established(&router, node1_v4(), &speaker)?;
    wait_prefixes(&router, Family::Ipv4, &V4_PREFIXES).with_context(|| speaker.log())?;
    let caps = speaker.negotiated()?["capabilities"].clone();
    ensure!(
        caps["route_refresh"] == true,
        "route refresh not negotiated: {caps}"
    );
    ensure!(
        caps["enhanced_route_refresh"] == enhanced,
        "enhanced route refresh negotiated: {}, want {enhanced}",
        caps["enhanced_route_refresh"]
    );
    let before = speaker.wait_state("End-of-RIB sent", Duration::from_secs(10), |s| {
        s["rib_out"]["initial_sync_done"] == true
    })?;
    ensure!(
        before["received"]["route_refresh"] == 0,
        "a ROUTE-REFRESH before we asked for one: {before}"
    );
    let updates = before["sent"]["updates"].as_u64().context("sent updates")?;
    let router_updates = router.updates_received(node1_v4())?;

    router.request_route_refresh(node1_v4(), Family::Ipv4)?;
    let after = speaker
        .wait_state("a refresh answered", ROUTE_TIMEOUT, |s| {
            s["received"]["route_refresh"].as_u64() >= Some(1)
                && s["sent"]["updates"].as_u64() > Some(updates)
        })
        .with_context(|| router.logs(30))?;
    if enhanced {
        // BoRR and EoRR.
        ensure!(
            after["sent"]["route_refresh"].as_u64() >= Some(2),
            "no BoRR/EoRR sent: {after}"
        );
    } else {
        ensure!(
            after["sent"]["route_refresh"] == 0,
            "BoRR/EoRR without enhanced route refresh: {after}"
        );
    }
    wait_until(ROUTE_TIMEOUT, Duration::from_millis(250), || {
        match router.updates_received(node1_v4()) {
            Ok(n) if n > router_updates => Ok(()),
            Ok(n) => Err(format!("{n} updates received, {router_updates} before")),
            Err(e) => Err(format!("{e:#}")),
        }
    })
    .map_err(anyhow::Error::from)?;
    // Everything still there (and, after an EoRR, for good).
    std::thread::sleep(Duration::from_secs(1));
    let have = router.prefixes(Family::Ipv4)?;
    let mut want: Vec<String> = V4_PREFIXES.iter().map(|s| s.to_string()).collect();
    want.sort();
    ensure!(
        have == want,
        "after the refresh {} has {have:?}",
        kind.name()
    );
    if let Some(stale) = router.stale_prefixes(Family::Ipv4)? {
        ensure!(stale.is_empty(), "stale after the refresh: {stale:?}");
    }
    println!(
        "route refresh ({}, enhanced {enhanced}): {} UPDATEs sent before, {} after; \
         the router counted {router_updates} then {}",
        kind.name(),
        updates,
        after["sent"]["updates"],
        router.updates_received(node1_v4())?
    );
    stop_and_wait_withdrawn(speaker, &router, &[Family::Ipv4])?;
    Ok(())
}

// No GoBGP cells: GoBGP 3 keeps every Adj-RIB-In and its `neighbor X
// softresetin` re-runs the import policy over it; it never sends a
// ROUTE-REFRESH (it only answers them), nor offers enhanced route refresh.

#[test]
fn route_refresh_frr() -> Result<()> {
    route_refresh(RouterKind::Frr, false)
}

#[test]
fn route_refresh_bird() -> Result<()> {
    route_refresh(RouterKind::Bird, false)
}

#[test]
fn enhanced_route_refresh_frr() -> Result<()> {
    route_refresh(RouterKind::Frr, true)
}

#[test]
fn enhanced_route_refresh_bird() -> Result<()> {
    route_refresh(RouterKind::Bird, true)
}

// ---------------------------------------------------------------- listener

/// One listener on our one address, two routers dialling in (FRR from
/// `router`, BIRD from `router2`), each with its own TCP MD5 password:
/// both sessions of the one speaker are passive (PassiveTcpEstablishment,
/// ConnectRetry 300 s: we do not dial out during the test, the routers
/// retry every 5 s) and reach Established through the shared listener (the local port of
/// each negotiated connection is 179), each router gets its session's
/// prefix, and the passwords never show.
#[test]
fn listen_shared_two_routers_dial_in() -> Result<()> {
    let (_serial, lab) = setup()?;
    let frr_at = L2Router::of(RouterKind::Frr);
    let bird_at = L2Router::of(RouterKind::Bird);
    let frr = lab.start_l2_router(
        &frr_at
            .config()
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS).password("frr-listen-key")),
    )?;
    let bird = lab.start_l2_router(
        &bird_at
            .config()
            .neighbor(Neighbor::new(node1_v4(), plan::NODE_AS).password("bird-listen-key")),
    )?;
    let session = |at: &L2Router, password: &str, prefix: &str| {
        serde_json::json!({
            "peer": at.v4.to_string(),
            "my_asn": plan::NODE_AS,
            "peer_asn": at.asn,
            "password": password,
            "listen": node1_v4().to_string(),
            "passive": true,
            "connect_time": 300,
            "prefixes": [prefix],
        })
    };
    let spec = serde_json::json!({
        "sessions": [
            session(&frr_at, "frr-listen-key", "198.51.100.41/32"),
            session(&bird_at, "bird-listen-key", "198.51.100.42/32"),
        ],
    });
    let speaker = Speaker::start(lab.node(1), spec)?;
    wait_router_established(&frr, node1_v4(), &speaker)?;
    wait_router_established(&bird, node1_v4(), &speaker)?;
    let local = format!("{}:179", node1_v4());
    for at in [&frr_at, &bird_at] {
        let peer = at.v4.to_string();
        speaker.wait_event(
            &format!("Established with {peer}"),
            Duration::from_secs(10),
            |e| {
                e["peer"] == peer.as_str()
                    && e["event"] == "state_changed"
                    && e["to"] == "Established"
            },
        )?;
        // Dialled in: our end of the connection is the listener's port.
        speaker.wait_event(
            &format!("negotiated with {peer} on {local}"),
            Duration::from_secs(10),
            |e| {
                e["peer"] == peer.as_str()
                    && e["event"] == "negotiated"
                    && e["local"] == local.as_str()
                    && e["peer_as"] == at.asn
            },
        )?;
    }
    wait_prefixes(&frr, Family::Ipv4, &["198.51.100.41/32"]).with_context(|| speaker.log())?;
    wait_prefixes(&bird, Family::Ipv4, &["198.51.100.42/32"]).with_context(|| speaker.log())?;
    let log = speaker.log();
    ensure!(
        !log.contains("listener disabled") && !log.contains("listener stopped"),
        "listener error: {log}"
    );
    let log = speaker.stop()?;
    wait_prefixes(&frr, Family::Ipv4, &[]).with_context(|| log.clone())?;
    wait_prefixes(&bird, Family::Ipv4, &[]).with_context(|| log.clone())?;
    for key in ["frr-listen-key", "bird-listen-key"] {
        ensure!(!log.contains(key), "the password leaked: {log}");
    }
    Ok(())
}
