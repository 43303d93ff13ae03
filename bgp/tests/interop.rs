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
//! Each test is one cell of the matrix, named `<row>_<router>`.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use testkit::plan;
use testkit::{
    Frr, FrrConfig, FrrNeighbor, Lab, LabOptions, Netns, NsChild, Router2, Router2Kind, wait_until,
};

const HELPER_ENV: &str = "BGP_INTEROP_HELPER";
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);
const ROUTE_TIMEOUT: Duration = Duration::from_secs(30);

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
    let serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions {
        nodes: 1,
        far: false,
    })?;
    Ok((serial, lab))
}

fn node1_v4() -> IpAddr {
    plan::node_v4(1).into()
}

fn node1_v6() -> IpAddr {
    plan::node_v6(1).into()
}

fn frr_prefixes(frr: &Frr, v6: bool) -> Result<Vec<String>> {
    let mut r: Vec<String> = if v6 {
        frr.routes_v6()?
    } else {
        frr.routes_v4()?
    }
    .into_iter()
    .map(|r| r.prefix)
    .collect();
    r.sort();
    r.dedup();
    Ok(r)
}

fn wait_frr_prefixes(frr: &Frr, v6: bool, want: &[&str]) -> Result<()> {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    wait_until(
        ROUTE_TIMEOUT,
        Duration::from_millis(200),
        || match frr_prefixes(frr, v6) {
            Ok(have) if have == want => Ok(()),
            Ok(have) => Err(format!("FRR has {have:?}, want {want:?}")),
            Err(e) => Err(format!("{e:#}")),
        },
    )
    .map_err(anyhow::Error::from)
}

// ---------------------------------------------------------------- FRR

const V4_PREFIXES: [&str; 3] = ["198.51.100.1/32", "198.51.100.2/32", "198.51.100.3/32"];

/// eBGP over IPv4 vs FRR: Established, 3 prefixes with communities and
/// large communities, withdrawal seen after the speaker stops.
#[test]
fn ebgp_ipv4_frr() -> Result<()> {
    let (_serial, lab) = setup()?;
    let frr = lab.start_router(
        &FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
            .neighbor(FrrNeighbor::new(node1_v4(), plan::NODE_AS)),
    )?;
    let mut s = spec(
        plan::ROUTER_V4.into(),
        plan::NODE_AS,
        plan::ROUTER_AS,
        &V4_PREFIXES,
    );
    s["communities"] = serde_json::json!(["64513:100", "65000:7"]);
    s["large_communities"] = serde_json::json!(["64513:1:2"]);
    let speaker = Speaker::start(lab.node(1), s)?;
    frr.wait_established(node1_v4(), ESTABLISH_TIMEOUT)
        .with_context(|| speaker.log())?;
    speaker.wait_established(Duration::from_secs(10))?;
    // The negotiated capabilities are reported.
    speaker.wait_event("negotiated", Duration::from_secs(5), |e| {
        e["event"] == "negotiated" && e["peer_as"] == plan::ROUTER_AS
    })?;
    wait_frr_prefixes(&frr, false, &V4_PREFIXES)?;
    for p in V4_PREFIXES {
        let detail = frr.show_json(&format!("show bgp ipv4 unicast {p} json"))?;
        let text = detail.to_string();
        for c in ["64513:100", "65000:7", "64513:1:2"] {
            ensure!(text.contains(c), "{p}: {c} missing in {text}");
        }
        let route = frr.route(p)?;
        ensure!(
            route
                .iter()
                .any(|r| r.nexthops.iter().any(|n| n == "192.0.2.11")),
            "{p}: next hop {route:?}"
        );
    }
    let log = speaker.stop()?;
    wait_frr_prefixes(&frr, false, &[]).with_context(|| log.clone())?;
    // Cease/Administrative Shutdown reached FRR.
    let n = frr.vtysh(&[&format!("show bgp neighbors {} json", node1_v4())])?;
    ensure!(
        n.contains("Administrative Shutdown") || n.contains("Cease"),
        "FRR did not record our Cease: {n}"
    );
    Ok(())
}

/// iBGP vs FRR: LOCAL_PREF seen by the peer.
#[test]
fn ibgp_frr() -> Result<()> {
    let (_serial, lab) = setup()?;
    let frr = lab.start_router(
        &FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
            .neighbor(FrrNeighbor::new(node1_v4(), plan::ROUTER_AS)),
    )?;
    let mut s = spec(
        plan::ROUTER_V4.into(),
        plan::ROUTER_AS,
        plan::ROUTER_AS,
        &["198.51.100.10/32"],
    );
    s["local_pref"] = serde_json::json!(250);
    let speaker = Speaker::start(lab.node(1), s)?;
    frr.wait_established(node1_v4(), ESTABLISH_TIMEOUT)
        .with_context(|| speaker.log())?;
    wait_frr_prefixes(&frr, false, &["198.51.100.10/32"])?;
    let r = frr.route("198.51.100.10/32")?;
    ensure!(
        r.iter().any(|r| r.local_pref == Some(250)),
        "LOCAL_PREF not seen: {:?}",
        r.iter().map(|r| &r.raw).collect::<Vec<_>>()
    );
    ensure!(
        r.iter().all(|r| r.as_path.is_empty()),
        "iBGP AS_PATH not empty"
    );
    speaker.stop()?;
    wait_frr_prefixes(&frr, false, &[])?;
    Ok(())
}

/// An IPv6 session announcing IPv6 prefixes vs FRR.
#[test]
fn ipv6_session_frr() -> Result<()> {
    let (_serial, lab) = setup()?;
    let frr = lab.start_router(
        &FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
            .neighbor(FrrNeighbor::new(node1_v6(), plan::NODE_AS)),
    )?;
    let prefixes = ["2001:db8:100::1/128", "2001:db8:100::2/128"];
    let speaker = Speaker::start(
        lab.node(1),
        spec(
            plan::ROUTER_V6.into(),
            plan::NODE_AS,
            plan::ROUTER_AS,
            &prefixes,
        ),
    )?;
    frr.wait_established(node1_v6(), ESTABLISH_TIMEOUT)
        .with_context(|| speaker.log())?;
    wait_frr_prefixes(&frr, true, &prefixes).with_context(|| speaker.log())?;
    let r = frr.route(prefixes[0])?;
    ensure!(
        r.iter()
            .any(|r| r.nexthops.iter().any(|n| n == &node1_v6().to_string())),
        "next hop: {:?}",
        r.iter().map(|r| &r.raw).collect::<Vec<_>>()
    );
    speaker.stop()?;
    wait_frr_prefixes(&frr, true, &[])?;
    Ok(())
}

/// TCP MD5 (RFC 2385) vs FRR, same password on both sides: Established,
/// prefixes seen, and the password never in our output.
#[test]
fn md5_match_frr() -> Result<()> {
    let (_serial, lab) = setup()?;
    let frr = lab.start_router(
        &FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
            .neighbor(FrrNeighbor::new(node1_v4(), plan::NODE_AS).password("interop-key")),
    )?;
    let mut s = spec(
        plan::ROUTER_V4.into(),
        plan::NODE_AS,
        plan::ROUTER_AS,
        &V4_PREFIXES,
    );
    s["password"] = serde_json::json!("interop-key");
    let speaker = Speaker::start(lab.node(1), s)?;
    frr.wait_established(node1_v4(), ESTABLISH_TIMEOUT)
        .with_context(|| speaker.log())?;
    speaker.wait_established(Duration::from_secs(10))?;
    wait_frr_prefixes(&frr, false, &V4_PREFIXES).with_context(|| speaker.log())?;
    let log = speaker.stop()?;
    ensure!(!log.contains("interop-key"), "the password leaked: {log}");
    wait_frr_prefixes(&frr, false, &[]).with_context(|| log.clone())?;
    Ok(())
}

/// TCP MD5 vs FRR with different passwords: never Established (the
/// kernels drop the unsigned-for-them segments), our last error says to
/// check the password without showing it, and FRR is not Established
/// either.
#[test]
fn md5_mismatch_frr() -> Result<()> {
    let (_serial, lab) = setup()?;
    let frr = lab.start_router(
        &FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
            .neighbor(FrrNeighbor::new(node1_v4(), plan::NODE_AS).password("frr-side-key")),
    )?;
    let mut s = spec(
        plan::ROUTER_V4.into(),
        plan::NODE_AS,
        plan::ROUTER_AS,
        &V4_PREFIXES,
    );
    s["password"] = serde_json::json!("our-side-key");
    let speaker = Speaker::start(lab.node(1), s)?;
    speaker.wait_event("MD5 hint", Duration::from_secs(15), |e| {
        e["event"] == "error"
            && e["text"]
                .as_str()
                .is_some_and(|t| t.contains("TCP MD5 is configured"))
    })?;
    // Give the session the rest of a 15 s window to (wrongly) come up.
    std::thread::sleep(Duration::from_secs(5));
    let frr_state = frr.bgp_neighbor_state(node1_v4())?;
    ensure!(
        frr_state.as_deref() != Some("Established"),
        "FRR came up with a mismatched password"
    );
    let state_log = speaker.log();
    let last_error = speaker
        .events()
        .iter()
        .rev()
        .find(|e| e["event"] == "state" && !e["state"]["last_error"].is_null())
        .map(|e| e["state"]["last_error"]["text"].to_string());
    ensure!(
        last_error
            .as_deref()
            .is_some_and(|t| t.contains("check the password")),
        "last error: {last_error:?}; log:\n{state_log}"
    );
    let log = speaker.stop()?;
    ensure!(!log.contains("our-side-key"), "the password leaked: {log}");
    ensure!(
        !log.contains("\"to\":\"Established\""),
        "came up with a mismatched password"
    );
    Ok(())
}

/// Hold time 9 s and a silent cut: FRR drops the session within the hold
/// time (plus margin) and our side leaves Established.
#[test]
fn hold_expiry_after_silent_cut_frr() -> Result<()> {
    let (_serial, lab) = setup()?;
    let frr = lab.start_router(
        &FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
            .neighbor(FrrNeighbor::new(node1_v4(), plan::NODE_AS).timers(3, 9)),
    )?;
    let mut s = spec(
        plan::ROUTER_V4.into(),
        plan::NODE_AS,
        plan::ROUTER_AS,
        &["198.51.100.20/32"],
    );
    s["hold_time"] = serde_json::json!(9);
    let speaker = Speaker::start(lab.node(1), s)?;
    frr.wait_established(node1_v4(), ESTABLISH_TIMEOUT)
        .with_context(|| speaker.log())?;
    speaker.wait_established(Duration::from_secs(10))?;
    speaker.wait_event("hold time 9", Duration::from_secs(5), |e| {
        e["event"] == "negotiated" && e["hold_time"] == 9
    })?;
    let cut = lab.cut_cable(&plan::node_name(1))?;
    let t0 = Instant::now();
    // 9 s hold plus a margin for a loaded 2-core machine.
    let margin = Duration::from_secs(9 + 10);
    wait_until(margin, Duration::from_millis(250), || {
        match frr.bgp_neighbor_state(node1_v4()) {
            Ok(Some(s)) if s != "Established" => Ok(()),
            Ok(s) => Err(format!("FRR says {s:?}")),
            Err(e) => Err(format!("{e:#}")),
        }
    })?;
    let frr_down = t0.elapsed();
    speaker.wait_event("leaving Established", margin, |e| {
        e["event"] == "state_changed" && e["from"] == "Established"
    })?;
    let ours_down = t0.elapsed();
    ensure!(
        ours_down < margin + Duration::from_secs(2),
        "our side took {ours_down:?}"
    );
    println!("hold expiry: FRR down after {frr_down:?}, ours after {ours_down:?}");
    ensure!(
        speaker.log().contains("Hold Timer Expired"),
        "our last error should be the hold timer: {}",
        speaker.log()
    );
    cut.restore()?;
    speaker.stop()?;
    Ok(())
}

// ---------------------------------------------------------------- BIRD / GoBGP

fn ebgp_ipv4_router2(kind: Router2Kind) -> Result<()> {
    let (_serial, lab) = setup()?;
    let r2 = lab.start_router2(kind, &[(node1_v4(), plan::NODE_AS)], &[])?;
    let prefixes = ["198.51.100.31/32", "198.51.100.32/32", "198.51.100.33/32"];
    let speaker = Speaker::start(
        lab.node(1),
        spec(
            plan::ROUTER2_V4.into(),
            plan::NODE_AS,
            plan::ROUTER2_AS,
            &prefixes,
        ),
    )?;
    wait_until(ESTABLISH_TIMEOUT, Duration::from_millis(250), || {
        match r2.established(node1_v4()) {
            Ok(true) => Ok(()),
            Ok(false) => Err("not established".to_string()),
            Err(e) => Err(format!("{e:#}")),
        }
    })
    .map_err(|e| anyhow::anyhow!("{e}; speaker log:\n{}", speaker.log()))?;
    speaker.wait_established(Duration::from_secs(10))?;
    let want: Vec<String> = prefixes.iter().map(|s| s.to_string()).collect();
    let have = |r2: &Router2| r2.prefixes(testkit::Family::Ipv4);
    wait_until(ROUTE_TIMEOUT, Duration::from_millis(250), || {
        match have(&r2) {
            Ok(p) if want.iter().all(|w| p.contains(w)) => Ok(()),
            Ok(p) => Err(format!("router2 has {p:?}")),
            Err(e) => Err(format!("{e:#}")),
        }
    })?;
    speaker.stop()?;
    wait_until(ROUTE_TIMEOUT, Duration::from_millis(250), || {
        match have(&r2) {
            Ok(p) if !want.iter().any(|w| p.contains(w)) => Ok(()),
            Ok(p) => Err(format!("router2 still has {p:?}")),
            Err(e) => Err(format!("{e:#}")),
        }
    })?;
    Ok(())
}

#[test]
fn ebgp_ipv4_bird() -> Result<()> {
    ebgp_ipv4_router2(Router2Kind::Bird)
}

#[test]
fn ebgp_ipv4_gobgp() -> Result<()> {
    ebgp_ipv4_router2(Router2Kind::Gobgp)
}

/// One IPv4 session carrying both families vs FRR: IPv6 prefixes go in
/// MP_REACH with the IPv6 address of the same interface as next hop.
#[test]
fn both_families_one_session_frr() -> Result<()> {
    let (_serial, lab) = setup()?;
    let frr = lab.start_router(
        &FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4).neighbor(
            FrrNeighbor::new(node1_v4(), plan::NODE_AS)
                .families(&[testkit::Family::Ipv4, testkit::Family::Ipv6]),
        ),
    )?;
    let v4 = ["198.51.100.50/32"];
    let v6 = ["2001:db8:100::50/128"];
    let speaker = Speaker::start(
        lab.node(1),
        spec(
            plan::ROUTER_V4.into(),
            plan::NODE_AS,
            plan::ROUTER_AS,
            &[v4[0], v6[0]],
        ),
    )?;
    frr.wait_established(node1_v4(), ESTABLISH_TIMEOUT)
        .with_context(|| speaker.log())?;
    wait_frr_prefixes(&frr, false, &v4).with_context(|| speaker.log())?;
    wait_frr_prefixes(&frr, true, &v6).with_context(|| speaker.log())?;
    let r = frr.route(v6[0])?;
    ensure!(
        r.iter()
            .any(|r| r.nexthops.iter().any(|n| n == &node1_v6().to_string())),
        "IPv6 next hop should be node-1's IPv6 address on the same interface: {:?}",
        r.iter().map(|r| &r.raw).collect::<Vec<_>>()
    );
    speaker.stop()?;
    wait_frr_prefixes(&frr, false, &[])?;
    wait_frr_prefixes(&frr, true, &[])?;
    Ok(())
}

/// FRR restarts: we reconnect and send everything again.
#[test]
fn peer_restart_reconnect_resend_frr() -> Result<()> {
    let (_serial, lab) = setup()?;
    let config = FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
        .neighbor(FrrNeighbor::new(node1_v4(), plan::NODE_AS));
    let frr = lab.start_router(&config)?;
    let speaker = Speaker::start(
        lab.node(1),
        spec(
            plan::ROUTER_V4.into(),
            plan::NODE_AS,
            plan::ROUTER_AS,
            &V4_PREFIXES,
        ),
    )?;
    frr.wait_established(node1_v4(), ESTABLISH_TIMEOUT)
        .with_context(|| speaker.log())?;
    wait_frr_prefixes(&frr, false, &V4_PREFIXES)?;
    frr.stop()?;
    // testkit keeps a stopped instance's directory (one FRR per namespace
    // and lab); this lab's router runs no other FRR, so start afresh.
    std::fs::remove_dir_all(lab.router().state_dir().join("frr"))?;
    speaker.wait_event("leaving Established", Duration::from_secs(30), |e| {
        e["event"] == "state_changed" && e["from"] == "Established"
    })?;
    let frr = lab.start_router(&config)?;
    frr.wait_established(node1_v4(), ESTABLISH_TIMEOUT)
        .with_context(|| speaker.log())?;
    wait_frr_prefixes(&frr, false, &V4_PREFIXES).with_context(|| speaker.log())?;
    speaker.stop()?;
    wait_frr_prefixes(&frr, false, &[])?;
    Ok(())
}

/// eBGP multihop through the router to FRR in `far` (203.0.113.2): with
/// TTL 1 the session cannot come up and the error says to set
/// ebgpMultiHop; with it, the session is Established and routes arrive.
#[test]
fn ebgp_multihop_routed_frr() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions {
        nodes: 1,
        far: true,
    })?;
    let far = Frr::start(
        lab.far(),
        &FrrConfig::new("far", plan::FAR_AS, plan::FAR_V4)
            .neighbor(FrrNeighbor::new(node1_v4(), plan::NODE_AS).ebgp_multihop(255)),
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
    let mut s = spec(plan::FAR_V4.into(), plan::NODE_AS, plan::FAR_AS, &prefixes);
    s["multihop"] = serde_json::json!(true);
    let speaker = Speaker::start(lab.node(1), s)?;
    far.wait_established(node1_v4(), ESTABLISH_TIMEOUT)
        .with_context(|| speaker.log())?;
    wait_frr_prefixes(&far, false, &prefixes)?;
    speaker.stop()?;
    wait_frr_prefixes(&far, false, &[])?;
    Ok(())
}
