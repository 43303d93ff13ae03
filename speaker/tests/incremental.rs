//! Layer-2 decisions after a change of the live speakers, from the cached
//! election orders ([`NodeSpeaker::decide_live`]): which Services are
//! decided again, in which order, and that the outcome is the one a full
//! pass over every Service gives (over random live sets).
//!
//! `incremental_vs_full_pass_timing` prints the time of both after one node
//! is lost; its size comes from `REDECIDE_NODES` and `REDECIDE_SERVICES`
//! (defaults 100 x 1,000), e.g. in a release build:
//! `REDECIDE_NODES=1000 REDECIDE_SERVICES=10000 cargo test --release -p speaker --test incremental -- --nocapture timing`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arp_ndp::interfaces::AllowedInterfaces;
use cluster_view::endpoints::LeanSlice;
use common::{FakeBfd, FakeFactory};
use config::Config;
use config::load::{LoadOptions, Loader};
use k8s_openapi::api::core::v1::{Node, Service};
use serde_json::json;
use speaker::bgp_speaker::BgpSpeaker;
use speaker::config_state::Loaded;
use speaker::decide::NodeFacts;
use speaker::decide::bgp::Options;
use speaker::decide::l2;
use speaker::l2_speaker::L2Ops;
use speaker::node::{NodeSpeaker, OrderPrefix};
use tokio::sync::mpsc;

const ME: &str = "node-0";

/// Claims by address (owner Service keys), and when the first claim came.
#[derive(Clone, Default)]
struct FakeL2 {
    claims: common::Claims,
    first_claim: Arc<Mutex<Option<Instant>>>,
}

impl L2Ops for FakeL2 {
    fn interfaces(&self) -> BTreeSet<String> {
        BTreeSet::from(["eth0".to_owned()])
    }
    fn claim(&mut self, owner: &str, ip: IpAddr, _: AllowedInterfaces) {
        self.first_claim
            .lock()
            .unwrap()
            .get_or_insert_with(Instant::now);
        common::claim(&self.claims, owner, ip);
    }
    fn release(&mut self, owner: &str, ip: IpAddr) {
        common::release(&self.claims, owner, ip);
    }
}

impl FakeL2 {
    fn claims(&self) -> BTreeMap<IpAddr, BTreeSet<String>> {
        self.claims.lock().unwrap().clone()
    }
}

type Speaker = NodeSpeaker<FakeFactory, FakeBfd, FakeL2>;

/// A cluster of `nodes` nodes in `groups` groups (node i in group i %
/// groups; this node in all), one pool and one L2Advertisement per group
/// selecting its nodes (with a preference for the even ones in group 0),
/// and `services` Services spread over the pools; with `local`, every
/// third Service has `externalTrafficPolicy: Local` with endpoints on
/// three nodes.
struct World {
    config: Config,
    nodes: BTreeMap<String, NodeFacts>,
    services: Vec<(String, Service, Vec<Arc<LeanSlice>>)>,
}

fn node(i: usize, groups: usize) -> Node {
    let mut labels = serde_json::Map::new();
    for g in 0..groups {
        if i == 0 || i % groups == g {
            labels.insert(format!("g{g}"), json!("y"));
        }
    }
    labels.insert(
        "parity".into(),
        json!(if i.is_multiple_of(2) { "even" } else { "odd" }),
    );
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("node-{i}"), "labels": labels},
    }))
    .unwrap()
}

/// The first address of group `g`'s pool.
fn group_base(g: usize) -> std::net::Ipv4Addr {
    assert!(g < 8, "a /18 each in 198.18.0.0/15");
    std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0)) + (g as u32) * 16384)
}

impl World {
    fn new(nodes: usize, groups: usize, services: usize, local: bool) -> World {
        let mut l = Loader::new(LoadOptions::default());
        let objects: Vec<Node> = (0..nodes).map(|i| node(i, groups)).collect();
        for (i, n) in objects.iter().enumerate() {
            l.add_str(&format!("n{i}.yaml"), &serde_json::to_string(n).unwrap())
                .unwrap();
        }
        let mut yaml = String::new();
        for g in 0..groups {
            // 198.18.0.0/15, a /18 per group (16,384 addresses)
            yaml.push_str(&format!(
                r#"
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {{name: pool-{g}, namespace: metallb-system}}
spec: {{addresses: [{}/18]}}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {{name: l2-{g}, namespace: metallb-system}}
spec:
  ipAddressPools: [pool-{g}]
  nodeSelectors: [{{matchLabels: {{g{g}: "y"}}}}]
{}
"#,
                group_base(g),
                if g == 0 {
                    "  preferredNodeSelectors: [{weight: 10, preference: {matchLabels: {parity: even}}}]"
                } else {
                    ""
                }
            ));
        }
        l.add_str("c.yaml", &yaml).unwrap();
        let config = config::parse(&l.finish().resources).unwrap();
        let facts = objects
            .iter()
            .map(|n| {
                let f = NodeFacts::of(n);
                (f.name.clone(), f)
            })
            .collect();
        let services = (0..services)
            .map(|i| {
                let (g, j) = (i % groups, i / groups);
                let ip = std::net::Ipv4Addr::from(u32::from(group_base(g)) + 1 + j as u32);
                let name = format!("svc-{i}");
                let is_local = local && i % 3 == 0;
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"type": "LoadBalancer",
                        "externalTrafficPolicy": if is_local { "Local" } else { "Cluster" }},
                    "status": {"loadBalancer": {"ingress": [{"ip": ip}]}},
                }))
                .unwrap();
                let on: Vec<usize> = if is_local {
                    vec![(i * 7) % nodes, (i * 11 + 1) % nodes, 0]
                } else {
                    vec![1 % nodes]
                };
                let endpoints: Vec<_> = on
                    .iter()
                    .map(|n| json!({"addresses": ["10.0.0.1"], "nodeName": format!("node-{n}")}))
                    .collect();
                let slice: LeanSlice = serde_json::from_value(json!({
                    "metadata": {"name": format!("{name}-x"), "namespace": "default",
                        "labels": {"kubernetes.io/service-name": name}},
                    "addressType": "IPv4",
                    "endpoints": endpoints,
                }))
                .unwrap();
                (format!("default/{name}"), svc, vec![Arc::new(slice)])
            })
            .collect();
        World {
            config,
            nodes: facts,
            services,
        }
    }

    /// A speaker of this node, configured, with `live`, after a full pass.
    fn speaker(
        &self,
        live: Option<BTreeSet<String>>,
    ) -> (
        Speaker,
        FakeL2,
        mpsc::Receiver<speaker::bgp_speaker::PeerEvent>,
    ) {
        self.speaker_with(live, OrderPrefix::default())
    }

    /// The same, caching `prefix` of each election order.
    fn speaker_with(
        &self,
        live: Option<BTreeSet<String>>,
        prefix: OrderPrefix,
    ) -> (
        Speaker,
        FakeL2,
        mpsc::Receiver<speaker::bgp_speaker::PeerEvent>,
    ) {
        let (tx, rx) = mpsc::channel(16);
        let log = common::Log::default();
        let l2 = FakeL2::default();
        let mut s = NodeSpeaker::new(
            Options::default(),
            BgpSpeaker::new(ME, FakeFactory(log.clone()), FakeBfd(log, 0), tx),
        )
        .with_l2(l2.clone());
        s.set_l2_order_prefix(prefix);
        let out = s.load(Ok(self.config.clone()), self.nodes[ME].clone());
        assert!(matches!(out.loaded, Loaded::Accepted));
        s.set_nodes(self.nodes.clone());
        s.set_live(live);
        self.full_pass(&mut s);
        (s, l2, rx)
    }

    /// The Service and slices of a key, as the driver's stores give them.
    #[allow(clippy::type_complexity)]
    fn lookup(&self) -> impl FnMut(&str) -> (Option<Arc<Service>>, Vec<Arc<LeanSlice>>) + '_ {
        |key| {
            let i: usize = key.trim_start_matches("default/svc-").parse().unwrap();
            let (_, svc, slices) = &self.services[i];
            (Some(Arc::new(svc.clone())), slices.clone())
        }
    }

    fn full_pass(&self, s: &mut Speaker) {
        for (key, svc, slices) in &self.services {
            s.service(key, Some(svc), slices);
        }
        s.decide_live_done();
    }

    /// `decide::l2` itself for the Service `i`.
    fn decide(&self, i: usize, live: Option<&BTreeSet<String>>) -> l2::Decision {
        let (_, svc, slices) = &self.services[i];
        l2::decide(
            &self.config,
            ME,
            l2::Cluster {
                nodes: &self.nodes,
                live,
            },
            Some(svc),
            slices,
            &Options::default(),
        )
    }
}

fn names(v: impl IntoIterator<Item = usize>) -> BTreeSet<String> {
    v.into_iter().map(|i| format!("node-{i}")).collect()
}

#[test]
fn a_lost_node_re_decides_only_the_services_it_is_a_candidate_of_its_own_first() {
    let w = World::new(50, 5, 1000, false);
    let all = names(0..50);
    let (mut s, l2, _rx) = w.speaker(Some(all.clone()));
    assert_eq!(s.l2_cached().0, 1000);
    let lost = "node-7";
    let after: BTreeSet<String> = all.iter().filter(|n| *n != lost).cloned().collect();
    // What decide says, independently: the Services whose candidates (every
    // node, live or not) include node-7, and those it won.
    let candidate_of: BTreeSet<String> = (0..1000)
        .filter(|i| {
            w.decide(*i, None)
                .election
                .is_some_and(|e| e.candidates.iter().any(|c| c.node == lost))
        })
        .map(|i| w.services[i].0.clone())
        .collect();
    let owned: BTreeSet<String> = (0..1000)
        .filter(|i| {
            w.decide(*i, Some(&all))
                .election
                .is_some_and(|e| e.winner() == Some(lost))
        })
        .map(|i| w.services[i].0.clone())
        .collect();
    assert_eq!(candidate_of.len(), 200, "group 2's pool");
    assert!(!owned.is_empty() && owned.is_subset(&candidate_of));

    assert!(s.set_live(Some(after.clone())));
    let decided = s.decide_live(w.lookup());
    let keys: Vec<String> = decided.iter().map(|d| d.key.clone()).collect();
    assert_eq!(
        keys.iter().cloned().collect::<BTreeSet<_>>(),
        candidate_of,
        "exactly the Services node-7 is a candidate of"
    );
    assert_eq!(keys.len(), candidate_of.len(), "each once");
    let first: BTreeSet<String> = keys[..owned.len()].iter().cloned().collect();
    assert_eq!(first, owned, "the lost owner's Services first");
    // And each result is decide's with the new live set.
    for d in &decided {
        let i: usize = d.key.trim_start_matches("default/svc-").parse().unwrap();
        assert_eq!(
            d.result,
            w.decide(i, Some(&after)).result.map(|_| ()),
            "{}",
            d.key
        );
    }
    // Nothing left to do; a change of a node nobody elects decides nothing.
    assert!(s.decide_live(w.lookup()).is_empty());
    let mut with_stranger = after.clone();
    with_stranger.insert("node-unknown".into());
    s.set_live(Some(with_stranger));
    assert!(s.decide_live(w.lookup()).is_empty());
    // The claims are a full pass's.
    let (_full, full_l2, _rx2) = w.speaker(Some(after));
    assert_eq!(l2.claims(), full_l2.claims());
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// What a speaker ends up with: claims, next-in-line owners, Services
/// announced, and the layer-2 effects (sorted).
fn outcome(s: &mut Speaker, l2: &FakeL2) -> impl PartialEq + std::fmt::Debug {
    let mut fx = s.take_effects();
    fx.l2_announced_metric.sort();
    fx.l2_node_assigned.sort();
    fx.announce_failed.sort();
    (
        l2.claims(),
        s.watched_owners(),
        s.announced().map(str::to_owned).collect::<Vec<_>>(),
        fx,
    )
}

#[test]
fn decisions_from_the_cached_orders_are_a_full_pass_s_over_random_live_sets() {
    let w = World::new(12, 3, 90, true);
    // The default prefix holds every order here (5 candidates at most); the
    // short ones are cut after 2 or 3 candidates, so that most changes leave
    // some prefix with fewer than two live (decided in full then).
    let prefixes = [
        OrderPrefix::default(),
        OrderPrefix {
            min_len: 1,
            min_live: 2,
        },
        OrderPrefix {
            min_len: 3,
            min_live: 2,
        },
    ];
    for (seed, prefix) in (1..=12u64).zip(prefixes.into_iter().cycle()) {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let (mut inc, inc_l2, _r1) = w.speaker_with(None, prefix);
        let (mut full, full_l2, _r2) = w.speaker(None);
        for step in 0..60 {
            // Mostly small changes, sometimes membership off or a new set.
            let live = if rng.chance(5) {
                None
            } else {
                let mut l: BTreeSet<String> = (0..12)
                    .filter(|i| rng.chance(if *i == 0 { 90 } else { 70 }))
                    .map(|i| format!("node-{i}"))
                    .collect();
                if rng.chance(10) {
                    l.insert("node-unknown".into());
                }
                Some(l)
            };
            inc.set_live(live.clone());
            let decided = inc.decide_live(w.lookup());
            full.set_live(live.clone());
            w.full_pass(&mut full);
            assert_eq!(
                outcome(&mut inc, &inc_l2),
                outcome(&mut full, &full_l2),
                "seed {seed} step {step} live {live:?} prefix {prefix:?}"
            );
            for d in decided {
                let i: usize = d.key.trim_start_matches("default/svc-").parse().unwrap();
                assert_eq!(d.result, w.decide(i, live.as_ref()).result.map(|_| ()));
            }
        }
    }
}

#[test]
fn the_cache_holds_a_prefix_of_each_order_long_enough_for_the_live_ones() {
    let w = World::new(200, 1, 100, false);
    let all = names(0..200);
    // Every node live: 16 candidates of each order's 200.
    let (mut s, l2, _rx) = w.speaker(Some(all.clone()));
    assert_eq!(s.l2_cached(), (100, 100 * 16));
    // A node in no Service's prefix goes: nothing is decided again.
    let in_a_prefix: BTreeSet<String> = (0..100)
        .flat_map(|i| {
            let e = w.decide(i, None).election.unwrap();
            e.candidates.into_iter().take(16).map(|c| c.node)
        })
        .collect();
    let outside = all
        .iter()
        .find(|n| !in_a_prefix.contains(*n))
        .unwrap()
        .clone();
    let mut after = all.clone();
    after.remove(&outside);
    s.set_live(Some(after.clone()));
    assert!(
        s.decide_live(w.lookup()).is_empty(),
        "{outside} is in no prefix"
    );
    // Only 10 of the 200 live (speakers on a few nodes, every Node a
    // candidate): each prefix runs on until 8 of them, not over all 200.
    let few = names((0..200).step_by(20));
    let (few_s, _l2, _rx) = w.speaker(Some(few.clone()));
    let (cached, held) = few_s.l2_cached();
    assert_eq!(cached, 100);
    let longest = (0..100)
        .map(|i| {
            let e = w.decide(i, None).election.unwrap();
            // up to the 8th live one, 16 at least
            let eighth = e
                .candidates
                .iter()
                .enumerate()
                .filter(|(_, c)| few.contains(&c.node))
                .nth(7)
                .map_or(e.candidates.len(), |(i, _)| i + 1);
            eighth.max(16).min(e.candidates.len())
        })
        .sum::<usize>();
    assert_eq!(held, longest, "each order up to its 8th live candidate");
    assert!(held < 100 * 200 / 2, "{held} candidates held");
    // The live ones go one by one, down to this node alone: every step is
    // a full pass's (the prefixes run short of live candidates on the way).
    let mut live = few.clone();
    let (mut inc, inc_l2, _r) = w.speaker(Some(live.clone()));
    while live.len() > 1 {
        let gone = live.iter().next_back().unwrap().clone();
        live.remove(&gone);
        inc.set_live(Some(live.clone()));
        inc.decide_live(w.lookup());
        let (full, full_l2, _rf) = w.speaker(Some(live.clone()));
        assert_eq!(inc_l2.claims(), full_l2.claims(), "{} live", live.len());
        assert_eq!(inc.watched_owners(), full.watched_owners());
    }
    assert_eq!(inc_l2.claims().len(), 100, "this node alone answers all");
    drop(l2);
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn incremental_vs_full_pass_timing() {
    let (n, k) = (env("REDECIDE_NODES", 100), env("REDECIDE_SERVICES", 1000));
    let w = World::new(n, 1, k, false);
    let all = names(0..n);
    let (mut inc, inc_l2, _r1) = w.speaker(Some(all.clone()));
    let (mut full, full_l2, _r2) = w.speaker(Some(all.clone()));
    // The node this one takes over from most often goes.
    let mut succeeded: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..k {
        if let Some(e) = w.decide(i, Some(&all)).election
            && let Some(win) = e.winner()
            && e.next_after(win) == Some(ME)
        {
            *succeeded.entry(win.to_owned()).or_default() += 1;
        }
    }
    let (lost, owned) = succeeded
        .iter()
        .max_by_key(|(_, c)| **c)
        .map(|(n, c)| (n.clone(), *c))
        .unwrap();
    let after: BTreeSet<String> = all.iter().filter(|x| **x != lost).cloned().collect();
    *inc_l2.first_claim.lock().unwrap() = None;
    *full_l2.first_claim.lock().unwrap() = None;

    let t = Instant::now();
    full.set_live(Some(after.clone()));
    w.full_pass(&mut full);
    let full_took = t.elapsed();
    let full_first = full_l2.first_claim.lock().unwrap().map(|c| c - t);

    let t = Instant::now();
    inc.set_live(Some(after.clone()));
    let decided = inc.decide_live(w.lookup());
    let inc_took = t.elapsed();
    let inc_first = inc_l2.first_claim.lock().unwrap().map(|c| c - t);

    // What the old loop's pass spent in the election alone: decide::l2 for
    // every Service with the new live set.
    let t = Instant::now();
    let won = (0..k)
        .filter(|i| w.decide(*i, Some(&after)).result.is_ok())
        .count();
    let decide_took = t.elapsed();
    let (cached, entries) = inc.l2_cached();
    assert_eq!(cached, k, "every Service holds an election");
    println!(
        "{n} nodes x {k} Services, {lost} lost ({owned} of its Services move here): full pass {full_took:?} \
         (first takeover claim after {full_first:?}); cached orders {inc_took:?} for {} Services \
         (first takeover claim after {inc_first:?}); decide::l2 alone for every Service {decide_took:?}; \
         cache: {cached} Services, {entries} candidates",
        decided.len()
    );
    assert_eq!(won, inc.l2().announced().count());
    assert_eq!(inc_l2.claims(), full_l2.claims());
    assert_eq!(inc.watched_owners(), full.watched_owners());
}
