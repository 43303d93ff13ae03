//! IPv6 Services in BGP mode: an IPv6 BGPPeer (the router's 2001:db8:0:1::1) on every
//! node, an IPv6 and a dual-stack Service: each address reaches the router from every
//! node with the node's global IPv6 address as next hop (ECMP), only over the session
//! of its family, and is withdrawn when the Service goes.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::speakers::{
    SpeakerLab, SpeakerLabOptions, netns_available, paths, pool_ip, router_peer_spec,
    router_summary, router_v6_peer_spec, sessions,
};
use e2e::{EndpointSpec, Lab, wait_until};
use serde_json::json;
use testkit::plan;

const ROUTE_WITHIN: Duration = Duration::from_secs(5);

fn v6_ip(host: u8) -> IpAddr {
    format!("2001:db8:100::{host:x}")
        .parse()
        .expect("an IPv6 address")
}

/// Waits until the router's valid paths for `prefix` have exactly `hops` as next hops
/// (one path each; empty: withdrawn).
async fn wait_hops(sl: &SpeakerLab, prefix: &str, hops: &BTreeSet<String>) -> Result<()> {
    wait_until(
        &format!("{prefix} at the router via exactly {hops:?}"),
        ROUTE_WITHIN,
        || async {
            let p = paths(&sl.router, prefix).map_err(|e| format!("{e:#}"))?;
            let valid: Vec<_> = p.iter().filter(|p| p.valid).collect();
            let got: BTreeSet<String> = valid.iter().map(|p| p.next_hop.clone()).collect();
            if &got == hops && valid.len() == hops.len() {
                Ok(())
            } else {
                Err(format!(
                    "{prefix}: next hops {got:?}; {}",
                    router_summary(&sl.router).unwrap_or_else(|e| format!("{e:#}"))
                ))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_and_dual_stack_services_reach_the_router_over_ipv6_sessions() -> Result<()> {
    if !netns_available("spk-ipv6")? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let sl = SpeakerLab::start(&lab, SpeakerLabOptions::new("spk-ipv6").ipv6_peers()).await?;
    let body = async {
        sl.apply(
            "IPAddressPool",
            "pool",
            json!({"addresses": [plan::POOL_V4, plan::POOL_V6]}),
        )
        .await?;
        sl.apply("BGPPeer", "router", router_peer_spec()).await?;
        sl.apply("BGPPeer", "router6", router_v6_peer_spec())
            .await?;
        sl.apply("BGPAdvertisement", "adv", json!({})).await?;
        let all: Vec<IpAddr> = (1..=3)
            .flat_map(|n| [plan::node_v4(n).into(), plan::node_v6(n).into()])
            .collect();
        wait_until(
            "the router's IPv4 and IPv6 sessions with every node Established",
            Duration::from_secs(30),
            || async {
                let s = sessions(&sl.router).map_err(|e| format!("{e:#}"))?;
                if all
                    .iter()
                    .all(|a| s.get(a).map(String::as_str) == Some("Established"))
                {
                    Ok(())
                } else {
                    Err(format!("{s:?}"))
                }
            },
        )
        .await?;
        let v6_hops: BTreeSet<String> = (1..=3).map(|n| plan::node_v6(n).to_string()).collect();
        let v4_hops: BTreeSet<String> = (1..=3).map(|n| plan::node_v4(n).to_string()).collect();

        // An IPv6 Service.
        sl.create_service(
            sl.service("web6")
                .endpoints(vec![EndpointSpec::ready("node-1")]),
            &[v6_ip(0x14)],
        )
        .await?;
        let p6 = format!("{}/128", v6_ip(0x14));
        wait_hops(&sl, &p6, &v6_hops).await?;
        // Over the IPv6 sessions only: every path's peer is a node's IPv6 address.
        let peers: BTreeSet<String> = paths(&sl.router, &p6)?
            .into_iter()
            .map(|p| p.peer)
            .collect();
        ensure!(
            peers.iter().all(|p| p.contains(':')),
            "{p6} learned from {peers:?}, want the nodes' IPv6 sessions only"
        );
        ensure!(
            paths(&sl.router, &format!("{}/32", pool_ip(0x14)))?.is_empty(),
            "an IPv4 route appeared for an IPv6-only Service"
        );

        // A dual-stack Service: each address over its family.
        sl.create_service(
            sl.service("dual")
                .endpoints(vec![EndpointSpec::ready("node-2")]),
            &[pool_ip(0x15), v6_ip(0x15)],
        )
        .await?;
        wait_hops(&sl, &format!("{}/32", pool_ip(0x15)), &v4_hops).await?;
        wait_hops(&sl, &format!("{}/128", v6_ip(0x15)), &v6_hops).await?;

        // Withdrawn when the Services go.
        sl.delete_service("web6").await?;
        sl.delete_service("dual").await?;
        let none = BTreeSet::new();
        wait_hops(&sl, &p6, &none).await?;
        wait_hops(&sl, &format!("{}/128", v6_ip(0x15)), &none).await?;
        wait_hops(&sl, &format!("{}/32", pool_ip(0x15)), &none).await?;
        anyhow::Ok(())
    };
    let r = body.await;
    sl.finish(r).await
}
