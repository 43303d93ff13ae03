//! BIRD 2 and GoBGP 3 in `router2` each establish eBGP with FRR in
//! `router` through the kit, over IPv4 and IPv6, and exchange routes.
//! Needs root; takes the kit's serial lock.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use testkit::{Family, Frr, FrrConfig, FrrNeighbor, Lab, LabOptions, Router, RouterKind, plan};

const TIMEOUT: Duration = Duration::from_secs(90);

/// FRR in `router` peering with router2 (AS 64514) over IPv4 and IPv6,
/// announcing one IPv4 and one IPv6 prefix.
fn start_frr(lab: &Lab) -> Result<Frr> {
    lab.start_router(
        &FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
            .neighbor(FrrNeighbor::new(plan::ROUTER2_V4.into(), plan::ROUTER2_AS))
            .neighbor(FrrNeighbor::new(plan::ROUTER2_V6.into(), plan::ROUTER2_AS))
            .network("198.51.100.30/32")
            .network("2001:db8:100::30/128"),
    )
}

fn peers() -> Vec<(IpAddr, u32)> {
    vec![
        (plan::ROUTER_V4.into(), plan::ROUTER_AS),
        (plan::ROUTER_V6.into(), plan::ROUTER_AS),
    ]
}

fn check_frr_side(frr: &Frr, v4: &str, v6: &str) -> Result<()> {
    frr.wait_established(plan::ROUTER2_V4.into(), TIMEOUT)?;
    frr.wait_established(plan::ROUTER2_V6.into(), TIMEOUT)?;
    let r = frr.wait_route(v4, TIMEOUT)?;
    ensure!(r.as_path == "64514", "{v4}: as path {:?}", r.as_path);
    ensure!(
        r.nexthops.iter().any(|n| n == "192.0.2.2"),
        "{v4}: next hops {:?}",
        r.nexthops
    );
    let r = frr.wait_route(v6, TIMEOUT)?;
    ensure!(r.as_path == "64514", "{v6}: as path {:?}", r.as_path);
    Ok(())
}

#[test]
fn bird_establishes_with_frr() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions::default())?;
    let frr = start_frr(&lab)?;
    let r2 = lab.start_router2(
        RouterKind::Bird,
        &peers(),
        &["198.51.100.10/32", "2001:db8:100::10/128"],
    )?;
    let Router::Bird(bird) = &r2 else {
        unreachable!()
    };
    bird.wait_established(plan::ROUTER_V4.into(), TIMEOUT)
        .with_context(|| bird.logs(30))?;
    bird.wait_established(plan::ROUTER_V6.into(), TIMEOUT)?;
    check_frr_side(&frr, "198.51.100.10/32", "2001:db8:100::10/128")?;

    // `show protocols all` and `show route all`, parsed.
    let p = bird.protocol("peer0")?.context("no protocol peer0")?;
    ensure!(p.proto == "BGP" && p.state == "up", "{p:?}");
    ensure!(p.neighbor_as == Some(plan::ROUTER_AS), "{p:?}");
    ensure!(
        p.channels
            .iter()
            .any(|c| c.name == "ipv4" && c.state == "UP"),
        "{p:?}"
    );
    let route = testkit::wait_until(TIMEOUT, Duration::from_millis(250), || {
        let routes = bird.routes().map_err(|e| format!("{e:#}"))?;
        routes
            .into_iter()
            .find(|r| r.prefix == "198.51.100.30/32" && r.protocol == "peer0")
            .ok_or_else(|| "198.51.100.30/32 not learned yet".to_string())
    })?;
    ensure!(route.primary, "{route:?}");
    ensure!(
        route.attrs.get("BGP.as_path").map(String::as_str) == Some("64512"),
        "{route:?}"
    );
    ensure!(route.via.iter().any(|v| v == "192.0.2.1"), "{route:?}");
    ensure!(r2.established(plan::ROUTER_V4.into())?);
    let v6 = r2.prefixes(Family::Ipv6)?;
    ensure!(
        v6.iter().any(|p| p == "2001:db8:100::30/128"),
        "BIRD IPv6 table: {v6:?}"
    );
    drop(r2);
    lab.destroy()?;
    Ok(())
}

#[test]
fn gobgp_establishes_with_frr() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions::default())?;
    let frr = start_frr(&lab)?;
    let r2 = lab.start_router2(
        RouterKind::Gobgp,
        &peers(),
        &["198.51.100.20/32", "2001:db8:100::20/128"],
    )?;
    let Router::Gobgp(gobgp) = &r2 else {
        unreachable!()
    };
    gobgp
        .wait_established(plan::ROUTER_V4.into(), TIMEOUT)
        .with_context(|| gobgp.logs(30))?;
    gobgp.wait_established(plan::ROUTER_V6.into(), TIMEOUT)?;
    check_frr_side(&frr, "198.51.100.20/32", "2001:db8:100::20/128")?;

    let n = gobgp.neighbors()?;
    ensure!(n.len() == 2, "{n:?}");
    ensure!(
        n.iter()
            .all(|n| n.state == "established" && n.peer_as == Some(64512)),
        "{n:?}"
    );
    let route = testkit::wait_until(TIMEOUT, Duration::from_millis(250), || {
        let rib = gobgp.rib_v4().map_err(|e| format!("{e:#}"))?;
        rib.into_iter()
            .find(|r| r.prefix == "198.51.100.30/32")
            .ok_or_else(|| "198.51.100.30/32 not learned yet".to_string())
    })?;
    ensure!(route.best, "{route:?}");
    ensure!(route.as_path == vec![plan::ROUTER_AS], "{route:?}");
    ensure!(route.nexthop.as_deref() == Some("192.0.2.1"), "{route:?}");
    let v6 = r2.prefixes(Family::Ipv6)?;
    ensure!(
        v6.iter().any(|p| p == "2001:db8:100::30/128"),
        "GoBGP IPv6 RIB: {v6:?}"
    );

    // Withdraw through the API: FRR loses the route.
    gobgp.del_route("198.51.100.20/32")?;
    testkit::wait_until(TIMEOUT, Duration::from_millis(250), || {
        match frr.route("198.51.100.20/32") {
            Ok(r) if r.is_empty() => Ok(()),
            Ok(r) => Err(format!("still {} paths", r.len())),
            Err(e) => Err(format!("{e:#}")),
        }
    })?;
    drop(r2);
    lab.destroy()?;
    Ok(())
}
