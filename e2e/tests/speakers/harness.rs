//! The harness itself, with any speaker that watches its configuration: each speaker
//! runs in its node namespace, becomes ready, and writes its ConfigurationState
//! `speaker-node-N` Valid through its node's API relay.

use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::Lab;
use e2e::speakers::{SpeakerLab, SpeakerLabOptions, netns_available};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_speaker_runs_in_its_node_namespace_and_reports_valid_through_the_relay() -> Result<()>
{
    let test = "spk-harness";
    if !netns_available(test)? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let sl = SpeakerLab::start(&lab, SpeakerLabOptions::new(test)).await?;
    let body = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_configuration_valid(Duration::from_secs(15)).await?;
        for n in 1..=3 {
            ensure!(
                sl.net.relayed(n) >= 1,
                "node-{n}: nothing went through its API relay"
            );
            let sp = sl.speaker(n);
            let netns_of_pid = std::fs::read_link(format!("/proc/{}/ns/net", sp.child.pid()))?;
            let own = std::fs::read_link("/proc/self/ns/net")?;
            // The child is `ip netns exec ... speaker` (exec'd in place): its namespace
            // is the node's, not ours.
            ensure!(
                netns_of_pid != own,
                "the speaker of node-{n} runs in the root namespace ({netns_of_pid:?})"
            );
            let h = sp.health("/healthz").await?;
            ensure!(h.starts_with("HTTP/1.1 200 "), "node-{n} /healthz: {h}");
        }
        anyhow::Ok(())
    };
    let r = body.await;
    sl.finish(r).await
}

/// The router assertions read FRR's JSON right: FRR in `router2` (AS 64513, as a node
/// would be) announces a pool address with communities, a large community and
/// LOCAL_PREF to the router; the helpers see the path, its next hop, the sorted
/// communities, the FIB entry and the LOCAL_PREF, and an absent prefix reads as no path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_helpers_read_paths_next_hops_communities_and_local_pref() -> Result<()> {
    use e2e::speakers::{fib_next_hops, next_hops, paths, sessions};
    let test = "spk-helpers";
    if !netns_available(test)? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let sl = SpeakerLab::start(
        &lab,
        SpeakerLabOptions::new(test)
            .ibgp_router()
            .without_speakers(),
    )
    .await?;
    let body = async {
        let r2 = sl.ibgp.as_ref().expect("router2");
        sl.router.configure(&[
            "router bgp 64512",
            "neighbor 192.0.2.2 remote-as 64513",
            "address-family ipv4 unicast",
            "neighbor 192.0.2.2 activate",
        ])?;
        r2.configure(&[
            "route-map tag permit 10",
            "set community 64512:300 64512:200",
            "set large-community 64512:1:2",
            "set local-preference 150",
            "exit",
            "router bgp 64513",
            "neighbor 192.0.2.1 remote-as 64512",
            "address-family ipv4 unicast",
            "network 198.51.100.200/32 route-map tag",
            "neighbor 192.0.2.1 activate",
        ])?;
        let prefix = "198.51.100.200/32";
        e2e::wait_until(
            "the router's path to 198.51.100.200/32 from router2",
            Duration::from_secs(30),
            || async {
                let p = paths(&sl.router, prefix).map_err(|e| format!("{e:#}"))?;
                if p.len() == 1 {
                    Ok(())
                } else {
                    Err(format!(
                        "{p:?}; sessions {:?}",
                        sessions(&sl.router).map_err(|e| format!("{e:#}"))?
                    ))
                }
            },
        )
        .await?;
        let p = paths(&sl.router, prefix)?;
        ensure!(
            p[0].next_hop == "192.0.2.2"
                && p[0].peer == "192.0.2.2"
                && p[0].as_path == "64513"
                && p[0].valid
                && p[0].best
                && p[0].communities == ["64512:200", "64512:300"]
                && p[0].large_communities == ["64512:1:2"],
            "router's path: {:?}",
            p[0]
        );
        ensure!(
            next_hops(&sl.router, prefix)? == ["192.0.2.2".to_string()].into(),
            "next hops"
        );
        e2e::wait_until("the FIB entry", Duration::from_secs(5), || async {
            let f = fib_next_hops(&sl.router, prefix).map_err(|e| format!("{e:#}"))?;
            if f == ["192.0.2.2".to_string()].into() {
                Ok(())
            } else {
                Err(format!("{f:?}"))
            }
        })
        .await?;
        let own = paths(r2, prefix)?;
        ensure!(
            own.len() == 1 && own[0].local_pref == Some(150),
            "router2's own path: {own:?}"
        );
        ensure!(
            paths(&sl.router, "198.51.100.201/32")?.is_empty(),
            "a prefix the router lacks must read as no path"
        );
        let (_, took) = sl
            .wait_next_hops("198.51.100.201/32", &[], Duration::from_secs(1))
            .await?;
        ensure!(took < Duration::from_secs(1));
        anyhow::Ok(())
    };
    let r = body.await;
    sl.finish(r).await
}
