//! BGP mode end to end, against issue 14's promises: a LoadBalancer Service's address
//! reaches the router from every eligible node (ECMP) within a few seconds of its
//! address being written, and goes when the Service does; `aggregationLength`,
//! advertisement and peer `nodeSelectors`, advertisement `peers`, communities and
//! LOCAL_PREF (iBGP), `externalTrafficPolicy: Local`, the exclude label and
//! `--ignore-exclude-lb`, BFD and a silent link cut, an invalid configuration keeping
//! every route, advertisements whose LOCAL_PREF conflicts on one node
//! (`conflictingAdvertisements`), a pool deleted and created again withdrawing nothing
//! (upstream's `SetConfig`), SIGTERM's Cease, and the status objects (`BGPSessionStatus`,
//! `ServiceBGPStatus`) read with kube and `kubectl get`.
//!
//! No controller runs: each test writes the Service's `status.loadBalancer.ingress`
//! (and the pool annotation) as the controller would, so the addresses are known. The
//! EndpointSlices are the lab's kube-controller-manager's, made of backend Pods whose
//! status the harness writes (`Lab::set_endpoints` returns once they show them).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e::speakers::{
    RouterPath, SpeakerLab, SpeakerLabOptions, fib_next_hops, ibgp_peer_spec, netns_available,
    next_hops, paths, pool_ip, router_peer_spec, router_summary,
};
use e2e::{EndpointSpec, Lab, wait_until};
use kube::api::DynamicObject;
use serde_json::{Value, json};
use testkit::frr::BfdProfile;

/// How long a route may take to reach (or leave) the router after the write that
/// causes it. Issue 14 promises milliseconds; this leaves room for a loaded machine.
const ROUTE_WITHIN: Duration = Duration::from_secs(5);
/// How long the sessions may take to come up after the speakers start (FRR retries
/// its connection every 5 s; the speaker connects at once).
const SESSIONS_WITHIN: Duration = Duration::from_secs(30);
const ALL: [usize; 3] = [1, 2, 3];

fn host(prefix_host: u8) -> String {
    format!("{}/32", pool_ip(prefix_host))
}

/// Starts the lab of one test, or `None` when network tests are explicitly skipped.
async fn start(opts: SpeakerLabOptions) -> Result<Option<(Lab, SpeakerLab)>> {
    if !netns_available(&opts.test)? {
        return Ok(None);
    }
    let lab = Lab::connect().await?;
    let sl = SpeakerLab::start(&lab, opts).await?;
    Ok(Some((lab, sl)))
}

fn ensure_within(what: &str, took: Duration, limit: Duration) -> Result<()> {
    eprintln!("TIMING {what}: {took:?}");
    ensure!(took <= limit, "{what} took {took:?} (more than {limit:?})");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_is_announced_from_every_node_with_ecmp_and_withdrawn_when_deleted() -> Result<()>
{
    let Some((_lab, sl)) = start(SpeakerLabOptions::new("spk-announce")).await? else {
        return Ok(());
    };
    let body = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        sl.wait_configuration_valid(Duration::from_secs(10)).await?;

        let svc = sl
            .service("web")
            .endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[pool_ip(10)]).await?;
        let (p, took) = sl.wait_next_hops(&host(10), &ALL, ROUTE_WITHIN).await?;
        ensure_within(
            "ingress written -> /32 at the router from 3 nodes",
            took,
            ROUTE_WITHIN,
        )?;
        for path in &p {
            ensure!(
                path.as_path == "64513",
                "{}: AS path {:?}, want 64513 (the nodes' AS): {p:?}",
                host(10),
                path.as_path
            );
        }
        // ECMP: the router installs all three next hops.
        let fib = wait_until(
            &format!("{} in the router's FIB with 3 next hops", host(10)),
            Duration::from_secs(5),
            || async {
                let f = fib_next_hops(&sl.router, &host(10)).map_err(|e| format!("{e:#}"))?;
                if f.len() == 3 {
                    Ok(f)
                } else {
                    Err(format!("FIB next hops {f:?}"))
                }
            },
        )
        .await?;
        eprintln!("FIB next hops of {}: {fib:?}", host(10));

        // A new address: the old one withdrawn, the new one announced.
        sl.set_ingress("web", &[pool_ip(11)]).await?;
        sl.wait_next_hops(&host(11), &ALL, ROUTE_WITHIN).await?;
        let (_, took) = sl.wait_next_hops(&host(10), &[], ROUTE_WITHIN).await?;
        ensure_within("address changed -> old /32 withdrawn", took, ROUTE_WITHIN)?;

        // Deleting the Service withdraws it.
        let start = Instant::now();
        sl.delete_service("web").await?;
        sl.wait_next_hops(&host(11), &[], ROUTE_WITHIN).await?;
        ensure_within(
            "Service deleted -> /32 withdrawn from the router",
            start.elapsed(),
            ROUTE_WITHIN,
        )?;
        // The sessions stay up.
        sl.wait_sessions(&ALL, Duration::from_secs(1)).await?;
        anyhow::Ok(())
    };
    let r = body.await;
    sl.finish(r).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_present_when_the_speakers_start_is_announced_from_every_node() -> Result<()> {
    let opts = SpeakerLabOptions::new("spk-atstart").without_speakers();
    let Some((_lab, mut sl)) = start(opts).await? else {
        return Ok(());
    };
    let body = async {
        sl.apply_basic_config(json!({})).await?;
        let svc = sl
            .service("web")
            .endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[pool_ip(15)]).await?;
        for n in ALL {
            sl.start_speaker(n, &[]).await?;
        }
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        sl.wait_next_hops(&host(15), &ALL, ROUTE_WITHIN).await?;
        anyhow::Ok(())
    };
    let r = body.await;
    sl.finish(r).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregation_length_announces_the_aggregate_instead_of_each_address() -> Result<()> {
    let Some((_lab, sl)) = start(SpeakerLabOptions::new("spk-aggr")).await? else {
        return Ok(());
    };
    let body = async {
        sl.apply_basic_config(json!({"aggregationLength": 24}))
            .await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        let eps = || vec![EndpointSpec::ready("node-2")];
        sl.create_service(sl.service("a").endpoints(eps()), &[pool_ip(20)])
            .await?;
        sl.create_service(sl.service("b").endpoints(eps()), &[pool_ip(21)])
            .await?;
        let aggregate = "198.51.100.0/24";
        sl.wait_next_hops(aggregate, &ALL, ROUTE_WITHIN).await?;
        for h in [20, 21] {
            let p = paths(&sl.router, &host(h))?;
            ensure!(
                p.is_empty(),
                "{} announced besides the aggregate: {p:?}; router: {}",
                host(h),
                router_summary(&sl.router)?
            );
        }
        // One Service gone: the other keeps the aggregate.
        sl.delete_service("a").await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        sl.wait_next_hops(aggregate, &ALL, Duration::from_secs(1))
            .await
            .context("the aggregate must stay while Service b uses it")?;
        sl.delete_service("b").await?;
        sl.wait_next_hops(aggregate, &[], ROUTE_WITHIN).await?;
        anyhow::Ok(())
    };
    let r = body.await;
    sl.finish(r).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertisement_node_selectors_restrict_the_announcing_nodes() -> Result<()> {
    let Some((_lab, mut sl)) = start(SpeakerLabOptions::new("spk-advsel")).await? else {
        return Ok(());
    };
    let key = sl.label_key();
    let r = async {
        sl.label_node("node-2", &key, Some("yes")).await?;
        sl.apply_basic_config(json!({"nodeSelectors": [{"matchLabels": {&key: "yes"}}]}))
            .await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        let svc = sl
            .service("web")
            .endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[pool_ip(30)]).await?;
        sl.wait_next_hops(&host(30), &[2], ROUTE_WITHIN).await?;

        // A label added: that node announces too; removed: it stops.
        sl.label_node("node-3", &key, Some("yes")).await?;
        sl.wait_next_hops(&host(30), &[2, 3], ROUTE_WITHIN).await?;
        sl.label_node("node-2", &key, None).await?;
        sl.wait_next_hops(&host(30), &[3], ROUTE_WITHIN).await?;
        // Sessions are not the advertisement's business: all stay up.
        sl.wait_sessions(&ALL, Duration::from_secs(1)).await?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_node_selectors_run_sessions_only_on_matching_nodes_and_follow_label_changes()
-> Result<()> {
    let Some((_lab, mut sl)) = start(SpeakerLabOptions::new("spk-peersel")).await? else {
        return Ok(());
    };
    let key = sl.label_key();
    let r = async {
        sl.label_node("node-1", &key, Some("yes")).await?;
        let mut peer = router_peer_spec();
        peer["nodeSelectors"] = json!([{"matchLabels": {&key: "yes"}}]);
        sl.apply(
            "IPAddressPool",
            "pool",
            json!({"addresses": ["198.51.100.0/24"]}),
        )
        .await?;
        sl.apply("BGPPeer", "router", peer).await?;
        sl.apply("BGPAdvertisement", "adv", json!({})).await?;
        sl.wait_sessions(&[1], SESSIONS_WITHIN).await?;
        let svc = sl
            .service("web")
            .endpoints(vec![EndpointSpec::ready("node-2")]);
        sl.create_service(svc, &[pool_ip(40)]).await?;
        sl.wait_next_hops(&host(40), &[1], ROUTE_WITHIN).await?;
        // node-2 and node-3 have no session: give them time to (wrongly) open one.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let s = e2e::speakers::sessions(&sl.router)?;
        for n in [2, 3] {
            let st = s
                .get(&e2e::speakers::node_addr(n))
                .cloned()
                .unwrap_or_default();
            ensure!(
                st != "Established",
                "node-{n} has a session with the router although the BGPPeer selects only \
                 node-1: {}",
                router_summary(&sl.router)?
            );
        }
        // node-3 labelled: its session starts and it announces; node-1's session stays.
        sl.label_node("node-3", &key, Some("yes")).await?;
        sl.wait_sessions(&[1, 3], SESSIONS_WITHIN).await?;
        sl.wait_next_hops(&host(40), &[1, 3], ROUTE_WITHIN).await?;
        // node-1 unlabelled: its session stops and the router loses its path.
        sl.label_node("node-1", &key, None).await?;
        sl.wait_next_hops(&host(40), &[3], Duration::from_secs(10))
            .await?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

/// The path from node `n` among `p`.
fn from_node(p: &[RouterPath], n: usize) -> Result<&RouterPath> {
    let addr = e2e::speakers::node_addr(n).to_string();
    p.iter()
        .find(|p| p.next_hop == addr)
        .with_context(|| format!("no path from node-{n} ({addr}) in {p:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn communities_local_pref_to_ibgp_only_and_advertisement_peers() -> Result<()> {
    let Some((_lab, sl)) = start(SpeakerLabOptions::new("spk-comm").ibgp_router()).await? else {
        return Ok(());
    };
    let r = async {
        sl.apply("IPAddressPool", "pool", json!({"addresses": ["198.51.100.0/24"]}))
            .await?;
        sl.apply("BGPPeer", "router", router_peer_spec()).await?;
        sl.apply("BGPPeer", "router2", ibgp_peer_spec()).await?;
        sl.apply(
            "Community",
            "aliases",
            json!({"communities": [{"name": "gold", "value": "64512:200"}]}),
        )
        .await?;
        sl.apply(
            "BGPAdvertisement",
            "adv",
            json!({"communities": ["64512:300", "gold", "large:64512:1:2"], "localPref": 150}),
        )
        .await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        let svc = sl.service("web").endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[pool_ip(50)]).await?;
        let want_comm = vec!["64512:200".to_string(), "64512:300".to_string()];
        let want_large = vec!["64512:1:2".to_string()];

        // eBGP router: communities (alias resolved), all three nodes.
        let (p, _) = sl.wait_next_hops(&host(50), &ALL, ROUTE_WITHIN).await?;
        for n in ALL {
            let path = from_node(&p, n)?;
            ensure!(
                path.communities == want_comm && path.large_communities == want_large,
                "router (eBGP): {} from node-{n} has communities {:?} large {:?}, want {want_comm:?} \
                 large {want_large:?}",
                host(50),
                path.communities,
                path.large_communities
            );
        }
        // iBGP router: the same communities and LOCAL_PREF 150.
        let (p, _) = sl.wait_ibgp_next_hops(&host(50), &ALL, ROUTE_WITHIN).await?;
        for n in ALL {
            let path = from_node(&p, n)?;
            ensure!(
                path.local_pref == Some(150)
                    && path.communities == want_comm
                    && path.large_communities == want_large,
                "router2 (iBGP): {} from node-{n}: LOCAL_PREF {:?} communities {:?} large {:?}, \
                 want 150, {want_comm:?}, {want_large:?}",
                host(50),
                path.local_pref,
                path.communities,
                path.large_communities
            );
        }

        // The advertisement restricted to the eBGP peer: the iBGP router withdraws.
        sl.apply(
            "BGPAdvertisement",
            "adv",
            json!({"communities": ["64512:300", "gold", "large:64512:1:2"], "localPref": 150,
                   "peers": ["router"]}),
        )
        .await?;
        sl.wait_ibgp_next_hops(&host(50), &[], ROUTE_WITHIN).await?;
        sl.wait_next_hops(&host(50), &ALL, Duration::from_secs(1))
            .await
            .context("the eBGP router must keep the route")?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

/// Two BGPAdvertisements that select one Service on one node with different LOCAL_PREF
/// (one with serviceSelectors, so the configuration itself is valid): the Service is
/// withdrawn on that node only, with upstream's reason `conflictingAdvertisements` in
/// `metallbctl explain`; a Service only one of them selects is announced everywhere;
/// the LOCAL_PREF made equal, it is announced from that node again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertisements_with_different_local_pref_withdraw_the_service_on_their_common_node()
-> Result<()> {
    let Some((_lab, mut sl)) = start(SpeakerLabOptions::new("spk-conflict")).await? else {
        return Ok(());
    };
    let key = sl.label_key();
    let r = async {
        sl.label_node("node-1", &key, Some("gold")).await?;
        sl.apply_basic_config(json!({})).await?;
        let gold = |pref: u32| {
            json!({"localPref": pref,
                   "serviceSelectors": [{"matchLabels": {"tier": "gold"}}],
                   "nodeSelectors": [{"matchLabels": {&key: "gold"}}]})
        };
        sl.apply("BGPAdvertisement", "gold", gold(200)).await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        let web = sl
            .service("web")
            .label("tier", "gold")
            .endpoints(vec![EndpointSpec::ready("node-2")]);
        sl.create_service(web, &[pool_ip(60)]).await?;
        let plain = sl
            .service("plain")
            .endpoints(vec![EndpointSpec::ready("node-2")]);
        sl.create_service(plain, &[pool_ip(61)]).await?;
        // `plain`: only `adv` selects it, from every node; `web` on node-1: `adv`
        // (no LOCAL_PREF) and `gold` (200) disagree.
        sl.wait_next_hops(&host(61), &ALL, ROUTE_WITHIN).await?;
        sl.wait_next_hops(&host(60), &[2, 3], ROUTE_WITHIN).await?;
        let (_, v) = crate::explain::explain_json(&sl, "web").await?;
        let node1: Vec<&Value> = v["bgp"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["node"] == "node-1")
            .collect();
        ensure!(
            node1.len() == 1 && node1[0]["reason"] == "conflictingAdvertisements",
            "explain's node-1 for web: {node1:?}\n{v:#}"
        );
        // Held for a while, not a passing state.
        tokio::time::sleep(Duration::from_secs(2)).await;
        sl.wait_next_hops(&host(60), &[2, 3], Duration::from_millis(1))
            .await
            .context("node-1 must not announce web while its advertisements conflict")?;

        // The same LOCAL_PREF: node-1 announces web too.
        sl.apply("BGPAdvertisement", "adv", json!({"localPref": 200}))
            .await?;
        sl.wait_next_hops(&host(60), &ALL, ROUTE_WITHIN).await?;
        sl.wait_next_hops(&host(61), &ALL, Duration::from_secs(1))
            .await?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_traffic_policy_local_announces_only_from_nodes_with_serving_endpoints()
-> Result<()> {
    let Some((lab, sl)) = start(SpeakerLabOptions::new("spk-local")).await? else {
        return Ok(());
    };
    let r = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        let svc = sl.service("web").local().endpoints(vec![
            EndpointSpec::ready("node-1"),
            EndpointSpec::not_ready("node-2"),
        ]);
        let created = sl.create_service(svc, &[pool_ip(60)]).await?;
        sl.wait_next_hops(&host(60), &[1], ROUTE_WITHIN).await?;

        // Backends move to node-2 and node-3 (a terminating one still serving counts).
        lab.set_endpoints(
            &created,
            &[
                EndpointSpec::ready("node-2"),
                EndpointSpec::terminating("node-3", true),
                EndpointSpec::terminating("node-1", false),
            ],
        )
        .await?;
        sl.wait_next_hops(&host(60), &[2, 3], ROUTE_WITHIN).await?;

        // No serving endpoint anywhere: withdrawn from every node.
        lab.set_endpoints(&created, &[EndpointSpec::not_ready("node-1")])
            .await?;
        sl.wait_next_hops(&host(60), &[], ROUTE_WITHIN).await?;

        // Back on node-3 only.
        lab.set_endpoints(&created, &[EndpointSpec::ready("node-3")])
            .await?;
        sl.wait_next_hops(&host(60), &[3], ROUTE_WITHIN).await?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exclude_label_withdraws_from_its_node_unless_ignore_exclude_lb() -> Result<()> {
    let Some((_lab, mut sl)) = start(SpeakerLabOptions::new("spk-exclude")).await? else {
        return Ok(());
    };
    const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
    let r = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        let svc = sl
            .service("web")
            .endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[pool_ip(70)]).await?;
        sl.wait_next_hops(&host(70), &ALL, ROUTE_WITHIN).await?;
        sl.label_node("node-2", EXCLUDE, Some("true")).await?;
        sl.wait_next_hops(&host(70), &[1, 3], ROUTE_WITHIN).await?;
        // node-2's speaker restarted with --ignore-exclude-lb announces again.
        sl.start_speaker(2, &["--ignore-exclude-lb"]).await?;
        sl.wait_next_hops(&host(70), &ALL, SESSIONS_WITHIN).await?;
        sl.label_node("node-2", EXCLUDE, None).await?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

/// Checks for 3 s, every 250 ms, that `prefix` stays at the router from every node
/// and every session stays up.
async fn hold_routes(sl: &SpeakerLab, prefix: &str, why: &str) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        sl.wait_next_hops(prefix, &ALL, Duration::from_millis(1))
            .await
            .with_context(|| format!("the route must stay {why}"))?;
        sl.wait_sessions(&ALL, Duration::from_millis(1)).await?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_configuration_keeps_every_route_and_shows_invalid_until_fixed() -> Result<()> {
    let Some((_lab, sl)) = start(SpeakerLabOptions::new("spk-invalid")).await? else {
        return Ok(());
    };
    let r = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        let svc = sl
            .service("web")
            .endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[pool_ip(80)]).await?;
        sl.wait_next_hops(&host(80), &ALL, ROUTE_WITHIN).await?;
        // The status writer writes an object at most once a second.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // An overlapping pool: MetalLB refuses the whole configuration.
        sl.apply(
            "IPAddressPool",
            "overlap",
            json!({"addresses": ["198.51.100.0/25"]}),
        )
        .await?;
        sl.wait_configuration_state("Invalid", "overlap", Duration::from_secs(5))
            .await?;
        // Nothing moves at the router while the configuration is invalid.
        hold_routes(&sl, &host(80), "while the configuration is invalid").await?;
        sl.delete("IPAddressPool", "overlap").await?;
        sl.wait_configuration_valid(Duration::from_secs(5)).await?;
        sl.wait_next_hops(&host(80), &ALL, Duration::from_secs(1))
            .await?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

/// A pool deleted and created again (an edit done as delete + apply): MetalLB's
/// speaker refuses a configuration that leaves an announced Service's address in no
/// pool, so nothing is withdrawn for the gap. Every speaker keeps its routes and says
/// why in its ConfigurationState; the pool back, the configuration is loaded again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_deleted_and_created_again_withdraws_nothing() -> Result<()> {
    let Some((_lab, sl)) = start(SpeakerLabOptions::new("spk-repool")).await? else {
        return Ok(());
    };
    let r = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        let svc = sl
            .service("web")
            .endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[pool_ip(70)]).await?;
        sl.wait_next_hops(&host(70), &ALL, ROUTE_WITHIN).await?;

        sl.delete("IPAddressPool", "pool").await?;
        let want = format!("service {}/web has no configuration", sl.namespace());
        sl.wait_configuration_state("Invalid", &want, Duration::from_secs(5))
            .await?;
        // The route stays from every node while the pool is away.
        hold_routes(&sl, &host(70), "while the pool is away").await?;
        sl.apply(
            "IPAddressPool",
            "pool",
            json!({"addresses": ["198.51.100.0/24"]}),
        )
        .await?;
        sl.wait_configuration_valid(Duration::from_secs(5)).await?;
        sl.wait_next_hops(&host(70), &ALL, Duration::from_secs(1))
            .await?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bfd_notices_a_silent_link_cut_and_the_router_withdraws_until_the_link_is_back()
-> Result<()> {
    let profile = BfdProfile::new("fast", 100, 100, 3);
    let Some((_lab, sl)) = start(SpeakerLabOptions::new("spk-bfd").bfd(profile)).await? else {
        return Ok(());
    };
    let r = async {
        sl.apply(
            "BFDProfile",
            "fast",
            json!({"receiveInterval": 100, "transmitInterval": 100, "detectMultiplier": 3}),
        )
        .await?;
        let mut peer = router_peer_spec();
        peer["bfdProfile"] = json!("fast");
        sl.apply(
            "IPAddressPool",
            "pool",
            json!({"addresses": ["198.51.100.0/24"]}),
        )
        .await?;
        sl.apply("BGPPeer", "router", peer).await?;
        sl.apply("BGPAdvertisement", "adv", json!({})).await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        for n in ALL {
            sl.router
                .wait_bfd_status(e2e::speakers::node_addr(n), "up", Duration::from_secs(10))
                .with_context(|| format!("BFD with node-{n} at the router"))?;
        }
        let svc = sl
            .service("web")
            .endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[pool_ip(90)]).await?;
        sl.wait_next_hops(&host(90), &ALL, ROUTE_WITHIN).await?;

        // node-2's cable silently cut at the switch: BFD (3 x 100 ms) notices, the
        // router withdraws node-2's path long before BGP's hold timer (9 s) would.
        let cut = sl.net.net.cut_cable("node-2")?;
        let start = Instant::now();
        sl.router
            .wait_bfd_status(e2e::speakers::node_addr(2), "down", Duration::from_secs(3))?;
        sl.wait_next_hops(&host(90), &[1, 3], Duration::from_secs(3))
            .await?;
        ensure_within(
            "silent cut -> node-2's path withdrawn at the router",
            start.elapsed(),
            Duration::from_secs(2),
        )?;
        // BGP stays down while BFD is down: node-2's path does not come back while the
        // link is cut.
        tokio::time::sleep(Duration::from_secs(2)).await;
        ensure!(
            paths(&sl.router, &host(90))?
                .iter()
                .all(|p| p.next_hop != "192.0.2.12"),
            "node-2's path came back while its link is cut"
        );
        // The speaker reports it (its API writes go through the relay, not the cut link).
        wait_until(
            "BGPSessionStatus node-2-router: bfdStatus Down, bgpStatus not Established",
            Duration::from_secs(5),
            || async {
                let l = sl
                    .list("BGPSessionStatus", Some("metallb.io/node=node-2"))
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                let seen: Vec<String> = l
                    .iter()
                    .map(|o| format!("{:?} {}", o.metadata.name, o.data["status"]))
                    .collect();
                let ok = l.len() == 1
                    && l[0].data["status"]["bfdStatus"] == "Down"
                    && l[0].data["status"]["bgpStatus"] != "Established";
                if ok { Ok(()) } else { Err(seen.join("; ")) }
            },
        )
        .await?;
        cut.restore()?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        sl.wait_next_hops(&host(90), &ALL, SESSIONS_WITHIN).await?;
        wait_until(
            "every BGPSessionStatus bfdStatus Up again",
            Duration::from_secs(5),
            || async {
                let l = sl
                    .list("BGPSessionStatus", None)
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                let seen: Vec<String> = l
                    .iter()
                    .map(|o| {
                        format!(
                            "{} {}",
                            label(o, "metallb.io/node"),
                            o.data["status"]["bfdStatus"]
                        )
                    })
                    .collect();
                if l.len() == 3 && l.iter().all(|o| o.data["status"]["bfdStatus"] == "Up") {
                    Ok(())
                } else {
                    Err(seen.join(", "))
                }
            },
        )
        .await?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

/// Each node's (connectionsEstablished, connectionsDropped) at the router.
fn router_connections(sl: &SpeakerLab) -> Result<Vec<(u64, u64)>> {
    let neighbors = sl.router.bgp_neighbors()?;
    ALL.iter()
        .map(|&n| {
            let addr = e2e::speakers::node_addr(n);
            let nb = neighbors
                .iter()
                .find(|b| b.addr == addr)
                .with_context(|| format!("the router has no neighbor {addr}"))?;
            ensure!(
                nb.state == "Established",
                "node-{n} at the router: {}\n{}",
                nb.state,
                sl.router.logs(40)
            );
            Ok((
                nb.raw["connectionsEstablished"].as_u64().unwrap_or(0),
                nb.raw["connectionsDropped"].as_u64().unwrap_or(0),
            ))
        })
        .collect()
}

/// After `what`, for `settle`: every session stays Established at the router, none
/// dropped or re-established (FRR's counters), the Service's paths from all nodes.
async fn sessions_kept(
    sl: &SpeakerLab,
    what: &str,
    before: &[(u64, u64)],
    settle: Duration,
) -> Result<()> {
    let end = Instant::now() + settle;
    while Instant::now() < end {
        let now = router_connections(sl).with_context(|| format!("after {what}"))?;
        ensure!(
            now == before,
            "after {what}: (established, dropped) per node {before:?} -> {now:?}\n{}",
            sl.router.logs(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sl.wait_next_hops(&host(91), &ALL, ROUTE_WITHIN).await?;
    eprintln!("{what}: no session dropped in {settle:?}");
    Ok(())
}

/// Every node's BFD session up at the router, with our side at `tx_ms`.
fn wait_router_bfd(sl: &SpeakerLab, tx_ms: u64) -> Result<()> {
    for n in ALL {
        let addr = e2e::speakers::node_addr(n);
        wait_until_sync(Duration::from_secs(15), || {
            let peers = sl.router.bfd_peers().map_err(|e| format!("{e:#}"))?;
            let p = peers
                .iter()
                .find(|p| p.peer == addr.to_string())
                .ok_or_else(|| format!("no BFD peer {addr}"))?;
            if p.status == "up" && p.remote_transmit_interval_ms == Some(tx_ms) {
                Ok(())
            } else {
                Err(p.raw.to_string())
            }
        })
        .with_context(|| format!("BFD with node-{n} up at the router, remote tx {tx_ms} ms"))?;
    }
    Ok(())
}

fn wait_until_sync(
    timeout: Duration,
    mut f: impl FnMut() -> std::result::Result<(), String>,
) -> Result<()> {
    let end = Instant::now() + timeout;
    loop {
        match f() {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= end => anyhow::bail!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Sets (`profile`) or removes (`None`) BFD for every node's neighbor at the router.
fn router_bfd(sl: &SpeakerLab, profile: Option<&str>) -> Result<()> {
    let mut lines = vec![format!("router bgp {}", testkit::plan::ROUTER_AS)];
    for n in ALL {
        let addr = e2e::speakers::node_addr(n);
        lines.push(match profile {
            Some(p) => format!("neighbor {addr} bfd profile {p}"),
            None => format!("no neighbor {addr} bfd"),
        });
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    sl.router.configure(&refs)?;
    Ok(())
}

/// Attaching a BFDProfile to the BGPPeer of Established sessions, changing its timers,
/// the router removing BFD for its neighbors, detaching and re-attaching the profile,
/// and the router adding BFD again: no BGP session is dropped or reset at any step.
///
/// The router removing BFD makes its bfdd send one Down with diagnostic 3 per session
/// before freeing it: the packet FRR's bgpd also causes when it re-registers a session
/// with the BGP connection's source address as BGP comes up (the flap bench-bgp-faults
/// found). The speaker took it for a failure and held BGP down until BFD was Up again:
/// here, never (the router no longer runs BFD).
///
/// Not here: detaching the profile while the router still runs BFD for the neighbor.
/// Our session then ends with AdminDown (RFC 5880 §6.8.16), which RFC 5882 §3.2 says is
/// no failure, but FRR 8.4's bgpd resets the BGP session on it (NOTIFICATION sent,
/// Cease/BFD Down: measured while writing this test): remove BFD at the router first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bfd_attached_changed_and_removed_on_either_side_never_resets_a_session() -> Result<()> {
    let profile = BfdProfile::new("fast", 100, 100, 3);
    let Some((_lab, sl)) = start(SpeakerLabOptions::new("spk-bfd-keep").bfd(profile)).await? else {
        return Ok(());
    };
    let r = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        let svc = sl
            .service("web")
            .endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[pool_ip(91)]).await?;
        sl.wait_next_hops(&host(91), &ALL, ROUTE_WITHIN).await?;
        let settle = Duration::from_secs(3);
        let c0 = router_connections(&sl)?;

        // Attach.
        sl.apply(
            "BFDProfile",
            "fast",
            json!({"receiveInterval": 100, "transmitInterval": 100, "detectMultiplier": 3}),
        )
        .await?;
        let mut peer = router_peer_spec();
        peer["bfdProfile"] = json!("fast");
        sl.apply("BGPPeer", "router", peer.clone()).await?;
        let start = Instant::now();
        wait_router_bfd(&sl, 100)?;
        eprintln!(
            "TIMING attach -> BFD up at the router: {:?}",
            start.elapsed()
        );
        sessions_kept(&sl, "attaching the profile", &c0, settle).await?;

        // New timers (a Poll Sequence).
        sl.apply(
            "BFDProfile",
            "fast",
            json!({"receiveInterval": 200, "transmitInterval": 200, "detectMultiplier": 3}),
        )
        .await?;
        wait_router_bfd(&sl, 200)?;
        sessions_kept(&sl, "changing the profile's timers", &c0, settle).await?;

        // The router removes BFD for its neighbors (one Down, diagnostic 3, each).
        router_bfd(&sl, None)?;
        sessions_kept(&sl, "the router removing BFD", &c0, settle).await?;

        // Detach, attach again (BFD Down, nobody answers), the router adds BFD again.
        sl.apply("BGPPeer", "router", router_peer_spec()).await?;
        wait_bfd_statuses(&sl, "N/A").await?;
        sessions_kept(&sl, "detaching the profile", &c0, settle).await?;
        sl.apply("BGPPeer", "router", peer).await?;
        wait_bfd_statuses(&sl, "Down").await?;
        sessions_kept(&sl, "attaching it with no BFD at the router", &c0, settle).await?;
        router_bfd(&sl, Some("fast"))?;
        wait_router_bfd(&sl, 200)?;
        wait_bfd_statuses(&sl, "Up").await?;
        sessions_kept(&sl, "the router adding BFD again", &c0, settle).await?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

/// Every node's BGPSessionStatus shows `bfd`.
async fn wait_bfd_statuses(sl: &SpeakerLab, bfd: &str) -> Result<()> {
    wait_until(
        &format!("every BGPSessionStatus bfdStatus {bfd}"),
        Duration::from_secs(10),
        || async {
            let l = sl
                .list("BGPSessionStatus", None)
                .await
                .map_err(|e| format!("{e:#}"))?;
            if l.len() == 3 && l.iter().all(|o| o.data["status"]["bfdStatus"] == bfd) {
                Ok(())
            } else {
                Err(format!(
                    "{:?}",
                    l.iter().map(|o| &o.data["status"]).collect::<Vec<_>>()
                ))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_sends_a_cease_and_the_router_withdraws_at_once() -> Result<()> {
    let Some((_lab, mut sl)) = start(SpeakerLabOptions::new("spk-cease")).await? else {
        return Ok(());
    };
    let r = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        let svc = sl
            .service("web")
            .endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[pool_ip(100)]).await?;
        sl.wait_next_hops(&host(100), &ALL, ROUTE_WITHIN).await?;
        let start = Instant::now();
        sl.stop_speaker(3, Duration::from_secs(5))?;
        sl.wait_next_hops(&host(100), &[1, 2], Duration::from_secs(3))
            .await?;
        // The hold time is 9 s: within 3 s (the speaker's exit and the router polls
        // included), only a Cease explains the withdrawal.
        ensure_within(
            "SIGTERM to node-3's speaker -> its path withdrawn",
            start.elapsed(),
            Duration::from_secs(3),
        )?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

/// Graceful restart: the router keeps a SIGTERMed speaker's routes (stale) and the new
/// speaker announces them again: the router never loses the path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_graceful_restart_keeps_the_route_until_the_new_speaker_is_back() -> Result<()>
{
    let Some((_lab, mut sl)) = start(SpeakerLabOptions::new("spk-gr")).await? else {
        return Ok(());
    };
    let r = async {
        sl.router.vtysh(&[
            "configure terminal",
            "router bgp 64512",
            "bgp graceful-restart",
            "bgp graceful-restart restart-time 60",
        ])?;
        let mut peer = router_peer_spec();
        peer["enableGracefulRestart"] = json!(true);
        sl.apply(
            "IPAddressPool",
            "pool",
            json!({"addresses": ["198.51.100.0/24"]}),
        )
        .await?;
        sl.apply("BGPPeer", "router", peer).await?;
        sl.apply("BGPAdvertisement", "adv", json!({})).await?;
        sl.router.vtysh(&["clear bgp *"])?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        let svc = sl
            .service("web")
            .endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[pool_ip(110)]).await?;
        sl.wait_next_hops(&host(110), &ALL, ROUTE_WITHIN).await?;
        let gr = sl.router.vtysh(&["show bgp neighbors 192.0.2.13 json"])?;
        ensure!(
            gr.contains("gracefulRestart") || gr.contains("GracefulRestart"),
            "graceful restart not negotiated with node-3: {gr}"
        );
        sl.stop_speaker(3, Duration::from_secs(5))?;
        // The path from node-3 stays (stale) while its speaker is away.
        let away = Instant::now();
        while away.elapsed() < Duration::from_secs(3) {
            let hops = next_hops(&sl.router, &host(110))?;
            ensure!(
                hops.len() == 3,
                "{:?} after the SIGTERM the router has {hops:?}",
                away.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sl.start_speaker(3, &[]).await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;
        // Back, re-announced (End-of-RIB): still three paths a while later.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let hops = next_hops(&sl.router, &host(110))?;
        ensure!(hops.len() == 3, "after the restart the router has {hops:?}");
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}

/// A BGPSessionStatus name for (node, peer): `<node>-<peer>` (status/src/object.rs;
/// a generated name only when another pair's object holds that name, which the lab's
/// names never cause).
fn session_name_ok(name: &str, node: &str, peer: &str) -> bool {
    name == format!("{node}-{peer}")
}

fn status_of(o: &DynamicObject) -> &Value {
    &o.data["status"]
}

fn label<'a>(o: &'a DynamicObject, k: &str) -> &'a str {
    o.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(k))
        .map(String::as_str)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_objects_show_every_session_and_which_node_announces_which_service() -> Result<()> {
    let Some((lab, sl)) = start(SpeakerLabOptions::new("spk-status")).await? else {
        return Ok(());
    };
    let r = async {
        let ns = sl.namespace().to_owned();
        sl.apply_basic_config(json!({})).await?;
        sl.wait_sessions(&ALL, SESSIONS_WITHIN).await?;

        // BGPSessionStatus per (node, peer): `<node>-<peer>`, labelled, Established,
        // no BFD.
        let sessions = wait_until(
            "a BGPSessionStatus per node, Established",
            Duration::from_secs(10),
            || async {
                let l = sl
                    .list("BGPSessionStatus", None)
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                let seen: Vec<String> = l
                    .iter()
                    .map(|o| {
                        format!(
                            "{} {}",
                            o.metadata.name.clone().unwrap_or_default(),
                            status_of(o)["bgpStatus"]
                        )
                    })
                    .collect();
                let ok =
                    l.len() == 3 && l.iter().all(|o| status_of(o)["bgpStatus"] == "Established");
                if ok { Ok(l) } else { Err(seen.join(", ")) }
            },
        )
        .await?;
        for n in ALL {
            let node = format!("node-{n}");
            let o = sessions
                .iter()
                .find(|o| label(o, "metallb.io/node") == node)
                .with_context(|| format!("no BGPSessionStatus labelled metallb.io/node={node}"))?;
            let name = o.metadata.name.clone().unwrap_or_default();
            ensure!(
                session_name_ok(&name, &node, "router"),
                "BGPSessionStatus of ({node}, router) is named {name:?}: want \"{node}-router\""
            );
            let s = status_of(o);
            ensure!(
                label(o, "metallb.io/node") == node
                    && label(o, "metallb.io/peer") == "router"
                    && s["node"] == node.as_str()
                    && s["peer"] == "router"
                    && s["bfdStatus"] == "N/A"
                    && s["lastTransitionTime"].is_string(),
                "BGPSessionStatus {name}: labels {:?} status {s}",
                o.metadata.labels
            );
        }

        // ServiceBGPStatus: one per announcing node (Local: node-1 and node-3).
        let svc = sl.service("web").local().endpoints(vec![
            EndpointSpec::ready("node-1"),
            EndpointSpec::ready("node-3"),
        ]);
        sl.create_service(svc, &[pool_ip(110)]).await?;
        sl.wait_next_hops(&host(110), &[1, 3], ROUTE_WITHIN).await?;
        let selector = format!("metallb.io/service-name=web,metallb.io/service-namespace={ns}");
        let sbs = wait_until(
            "a ServiceBGPStatus for web from node-1 and node-3",
            Duration::from_secs(5),
            || async {
                let l = sl
                    .list("ServiceBGPStatus", Some(&selector))
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                let nodes: BTreeSet<String> = l
                    .iter()
                    .map(|o| label(o, "metallb.io/node").to_owned())
                    .collect();
                let want: BTreeSet<String> = ["node-1".into(), "node-3".into()].into();
                if nodes == want && l.len() == 2 {
                    Ok(l)
                } else {
                    Err(format!("{} objects, nodes {nodes:?}", l.len()))
                }
            },
        )
        .await?;
        for o in &sbs {
            let node = label(o, "metallb.io/node").to_owned();
            let s = status_of(o);
            let owner = o.metadata.owner_references.clone().unwrap_or_default();
            ensure!(
                o.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("bgp-"))
                    && o.metadata.generate_name.as_deref() == Some("bgp-")
                    && s["node"] == node.as_str()
                    && s["serviceName"] == "web"
                    && s["serviceNamespace"] == ns.as_str()
                    && s["peers"] == json!(["router"])
                    && owner.len() == 1
                    && owner[0].kind == "Node"
                    && owner[0].name == node,
                "ServiceBGPStatus {:?}: generateName {:?} status {s} owners {owner:?}",
                o.metadata.name,
                o.metadata.generate_name
            );
        }

        // What a user sees.
        let out = lab
            .kubectl_ok(
                &[
                    "get",
                    "bgpsessionstatuses,servicebgpstatuses",
                    "-n",
                    &ns,
                    "-o",
                    "wide",
                ],
                None,
            )
            .await?;
        eprintln!("$ kubectl get bgpsessionstatuses,servicebgpstatuses -n {ns} -o wide\n{out}");
        for want in [
            "node-1-router",
            "node-2-router",
            "node-3-router",
            "Established",
            "web",
        ] {
            ensure!(out.contains(want), "kubectl get shows no {want:?}:\n{out}");
        }

        // The same through `metallbctl status` (read-only, from the status objects).
        let metallbctl = e2e::process::workspace_binary(lab.repo(), "metallbctl", "metallbctl")?;
        let run = |format: &'static str| {
            let mut cmd = std::process::Command::new(&metallbctl);
            cmd.args(["status", "-n", &ns, "-o", format])
                .env("KUBECONFIG", &lab.env.kubeconfig);
            cmd.output()
        };
        let out = run("text")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!("$ metallbctl status -n {ns}\n{text}");
        let out = run("json")?;
        ensure!(
            out.status.success(),
            "metallbctl status: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout)?;
        let components: Vec<(String, String)> = v["components"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default().to_owned(),
                    c["result"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        for n in ["node-1", "node-2", "node-3"] {
            ensure!(
                components.contains(&(format!("speaker-{n}"), "Valid".to_owned())),
                "metallbctl status components {components:?}"
            );
        }
        let sessions: Vec<(String, String, String)> = v["sessions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| {
                (
                    x["node"].as_str().unwrap_or_default().to_owned(),
                    x["peer"].as_str().unwrap_or_default().to_owned(),
                    x["bgp"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        ensure!(
            sessions
                == ["node-1", "node-2", "node-3"].map(|n| (
                    n.to_owned(),
                    "router".to_owned(),
                    "Established".to_owned()
                )),
            "metallbctl status sessions {sessions:?}"
        );
        let web = v["services"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["service"] == format!("{ns}/web").as_str())
            .cloned()
            .unwrap_or_default();
        ensure!(
            web["ips"] == json!([pool_ip(110).to_string()])
                && web["bgp"] == json!({"node-1": ["router"], "node-3": ["router"]}),
            "metallbctl status of {ns}/web: {web}"
        );

        // The endpoints move to node-2: its object appears, node-1's and node-3's go.
        let svc_obj =
            kube::Api::<k8s_openapi::api::core::v1::Service>::namespaced(lab.client.clone(), &ns)
                .get("web")
                .await?;
        lab.set_endpoints(&svc_obj, &[EndpointSpec::ready("node-2")])
            .await?;
        sl.wait_next_hops(&host(110), &[2], ROUTE_WITHIN).await?;
        wait_until(
            "only node-2's ServiceBGPStatus for web",
            Duration::from_secs(5),
            || async {
                let l = sl
                    .list("ServiceBGPStatus", Some(&selector))
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                let nodes: Vec<&str> = l.iter().map(|o| label(o, "metallb.io/node")).collect();
                if nodes == ["node-2"] {
                    Ok(())
                } else {
                    Err(format!("{nodes:?}"))
                }
            },
        )
        .await?;

        // The Service deleted: its objects go. The BGPPeer deleted: the sessions' go.
        sl.delete_service("web").await?;
        wait_until(
            "no ServiceBGPStatus for web",
            Duration::from_secs(5),
            || async {
                let l = sl
                    .list("ServiceBGPStatus", Some(&selector))
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                if l.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{} left", l.len()))
                }
            },
        )
        .await?;
        sl.delete("BGPPeer", "router").await?;
        wait_until(
            "no BGPSessionStatus left",
            Duration::from_secs(5),
            || async {
                let l = sl
                    .list("BGPSessionStatus", None)
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                if l.is_empty() {
                    Ok(())
                } else {
                    Err(l
                        .iter()
                        .map(|o| o.metadata.name.clone().unwrap_or_default())
                        .collect::<Vec<_>>()
                        .join(", "))
                }
            },
        )
        .await?;
        anyhow::Ok(())
    }
    .await;
    sl.finish(r).await
}
