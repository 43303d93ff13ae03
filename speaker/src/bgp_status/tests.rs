use std::sync::Arc;
use std::time::Duration;

use config::api::LABEL_NODE;
use config::api::v1beta1::{NodeBGPStatusStatus, PrefixCount};
use status::testing::{Call, FakeApi};
use status::{FakeClock, LabelScope, Metrics, ObjectKey, StatusObject, WriteBudget, WriterConfig};

use super::*;
use crate::decide::bgp::Route;

const NS: &str = "metallb-system";
const NODE: &str = "node-1";

fn service(name: &str, local: bool) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": { "namespace": "demo", "name": name },
        "spec": {
            "type": "LoadBalancer",
            "externalTrafficPolicy": if local { "Local" } else { "Cluster" },
        },
    }))
    .unwrap()
}

fn announced(ip: &str, ad: &str) -> Result<Announcement, Reason> {
    let ip: std::net::IpAddr = ip.parse().unwrap();
    Ok(Announcement {
        ips: vec![ip],
        pool: "pool".into(),
        routes: vec![Route {
            prefix: IpNet::from(ip),
            local_pref: None,
            communities: Vec::new(),
            peers: Vec::new(),
            advertisement: ad.into(),
        }],
    })
}

fn peers() -> Vec<String> {
    vec!["p1".into()]
}

#[test]
fn a_cluster_service_changes_no_summary() {
    let mut s = Summary::default();
    let before = s.status(NODE, &peers());
    for i in 0..50 {
        let svc = service(&format!("s{i}"), false);
        s.service(
            &format!("demo/s{i}"),
            Some(&svc),
            &announced(&format!("192.0.2.{i}"), "ad"),
            &peers(),
        );
        // not selected here, or no endpoints yet: derived, not listed
        s.service(
            &format!("demo/t{i}"),
            Some(&svc),
            &Err(Reason::NotOwner),
            &[],
        );
        s.service(
            &format!("demo/u{i}"),
            Some(&svc),
            &Err(Reason::NoEndpoints),
            &[],
        );
        s.service(
            &format!("demo/v{i}"),
            Some(&svc),
            &Err(Reason::NoLocalEndpoints),
            &[],
        );
    }
    assert_eq!(s.status(NODE, &peers()), before);
    assert_eq!(before.peers, peers());
    assert_eq!(before.node, NODE);
}

#[test]
fn local_services_and_withdrawn_ones_are_listed_and_counted() {
    let mut s = Summary::default();
    let local = service("local", true);
    s.service(
        "demo/local",
        Some(&local),
        &announced("192.0.2.1", "ad"),
        &peers(),
    );
    s.service(
        "demo/local2",
        Some(&local),
        &announced("192.0.2.1", "ad"),
        &peers(),
    );
    let svc = service("c", false);
    s.service(
        "demo/c",
        Some(&svc),
        &Err(Reason::ConflictingAdvertisements),
        &[],
    );
    let st = s.status(NODE, &peers());
    assert_eq!(st.local_services, 2);
    assert_eq!(st.withdrawn_services, 1);
    // two Services, one prefix
    assert_eq!(
        st.local_prefixes,
        vec![PrefixCount {
            pool: "pool".into(),
            advertisement: "ad".into(),
            prefixes: 1
        }]
    );
    let names: Vec<(&str, bool, &str)> = st
        .exceptions
        .iter()
        .map(|e| (e.service_name.as_str(), e.announced, e.reason.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("c", false, "conflictingAdvertisements"),
            ("local", true, ""),
            ("local2", true, "")
        ]
    );
    assert_eq!(st.exceptions[1].peers, peers());
    // withdrawn again, then deleted: counts follow
    s.service(
        "demo/local",
        Some(&local),
        &Err(Reason::NoLocalEndpoints),
        &[],
    );
    s.service("demo/local2", None, &Err(Reason::ServiceDeleted), &[]);
    s.service(
        "demo/c",
        Some(&svc),
        &announced("192.0.2.9", "ad"),
        &peers(),
    );
    let st = s.status(NODE, &peers());
    assert_eq!(
        st,
        NodeBGPStatusStatus {
            node: NODE.into(),
            peers: peers(),
            ..Default::default()
        }
    );
}

#[test]
fn a_node_wide_reason_is_said_once() {
    let mut s = Summary::default();
    let svc = service("a", false);
    for i in 0..10 {
        s.service(
            &format!("demo/a{i}"),
            Some(&svc),
            &Err(Reason::NodeLabeledExcludeBalancers),
            &[],
        );
    }
    let st = s.status(NODE, &[]);
    assert_eq!(st.withheld, "nodeLabeledExcludeBalancers");
    assert!(st.exceptions.is_empty());
    for i in 0..10 {
        s.service(
            &format!("demo/a{i}"),
            Some(&svc),
            &announced("192.0.2.1", "ad"),
            &[],
        );
    }
    assert_eq!(s.status(NODE, &[]).withheld, "");
}

#[test]
fn the_list_is_cut_past_its_cap() {
    let mut s = Summary::new(3);
    let local = service("l", true);
    for i in 0..5 {
        s.service(
            &format!("demo/l{i}"),
            Some(&local),
            &announced(&format!("192.0.2.{i}"), "ad"),
            &peers(),
        );
    }
    let st = s.status(NODE, &peers());
    assert_eq!(st.exceptions.len(), 3);
    assert!(st.exceptions_truncated);
    assert_eq!(st.local_services, 5);
    assert_eq!(st.local_prefixes[0].prefixes, 5);
}

struct Rig {
    clock: Arc<FakeClock>,
    svc_api: FakeApi<MetalLBServiceBGPStatus>,
    node_api: FakeApi<NodeBGPStatusStatus>,
    out: BgpStatusOutput,
    svc: StatusWriter<ServiceBGPStatus>,
    node: StatusWriter<NodeBGPStatus>,
}

fn rig(mode: Mode, cap: usize) -> Rig {
    let clock = Arc::new(FakeClock::new());
    let budget = WriteBudget::unlimited();
    let svc = StatusWriter::labeled(
        WriterConfig::default(),
        LabelScope::node(NS, NODE),
        clock.clone(),
        Metrics::unregistered(),
        budget.clone(),
    );
    let node = StatusWriter::labeled(
        WriterConfig {
            min_write_interval: SUMMARY_MIN_WRITE_INTERVAL,
            ..WriterConfig::default()
        },
        LabelScope::node(NS, NODE),
        clock.clone(),
        Metrics::unregistered(),
        budget,
    );
    let out = BgpStatusOutput::new(NODE, mode, cap, svc.clone(), node.clone());
    Rig {
        clock,
        svc_api: FakeApi::new(),
        node_api: FakeApi::new(),
        out,
        svc,
        node,
    }
}

impl Rig {
    async fn settle(&self) {
        for _ in 0..50 {
            let n = self.svc.step(&self.svc_api).await + self.node.step(&self.node_api).await;
            if n == 0 {
                break;
            }
        }
    }
}

fn writes<S: Clone>(api: &FakeApi<S>) -> usize {
    api.calls()
        .iter()
        .filter(|c| !matches!(c, Call::List(..) | Call::Get(..)))
        .count()
}

fn changes(keys: impl IntoIterator<Item = String>) -> BTreeMap<String, Option<Vec<String>>> {
    keys.into_iter().map(|k| (k, Some(peers()))).collect()
}

fn summary_of(n: usize) -> impl FnOnce() -> NodeBGPStatusStatus {
    move || NodeBGPStatusStatus {
        node: NODE.into(),
        peers: vec!["p1".into()],
        local_services: i32::try_from(n).unwrap(),
        ..Default::default()
    }
}

#[tokio::test]
async fn per_service_mode_writes_service_objects_only() {
    let mut r = rig(Mode::PerService, 10);
    assert!(
        !r.out
            .apply(changes((0..3).map(|i| format!("demo/s{i}"))), summary_of(0))
    );
    r.out.initial_sync_done();
    r.settle().await;
    assert_eq!(r.svc_api.objects().len(), 3);
    assert!(r.node_api.objects().is_empty());
    assert_eq!(r.out.mode(), Mode::PerService);
    assert!(r.out.switched().is_none());
}

#[tokio::test]
async fn summary_mode_writes_one_object_per_node_coalesced() {
    let mut r = rig(Mode::Summary, 10);
    r.out
        .apply(changes((0..3).map(|i| format!("demo/s{i}"))), summary_of(1));
    r.out.initial_sync_done();
    r.settle().await;
    assert!(r.svc_api.objects().is_empty());
    let objects = r.node_api.objects();
    assert_eq!(objects.len(), 1);
    let (key, obj) = objects.iter().next().unwrap();
    assert_eq!(key, &ObjectKey::new(NS, NODE));
    assert_eq!(obj.labels.get(LABEL_NODE).map(String::as_str), Some(NODE));
    assert_eq!(obj.status.local_services, 1);
    let first = writes(&r.node_api);
    // three changes within the interval: one write, of the last
    for n in 2..5 {
        r.out.apply(BTreeMap::new(), summary_of(n));
        r.settle().await;
    }
    assert_eq!(writes(&r.node_api), first);
    r.clock
        .advance(SUMMARY_MIN_WRITE_INTERVAL + Duration::from_millis(1));
    r.settle().await;
    assert_eq!(writes(&r.node_api), first + 1);
    assert_eq!(
        r.node_api
            .object(&ObjectKey::new(NS, NODE))
            .unwrap()
            .status
            .local_services,
        4
    );
    // at rest: nothing
    r.clock.advance(Duration::from_secs(60));
    r.out.apply(BTreeMap::new(), summary_of(4));
    r.settle().await;
    assert_eq!(writes(&r.node_api), first + 1);
}

#[tokio::test]
async fn past_the_cap_per_service_switches_to_the_summary() {
    let mut r = rig(Mode::PerService, 3);
    r.out
        .apply(changes((0..3).map(|i| format!("demo/s{i}"))), summary_of(0));
    r.out.initial_sync_done();
    r.settle().await;
    assert_eq!(r.svc_api.objects().len(), 3);
    assert!(r.out.apply(changes(["demo/s3".to_owned()]), summary_of(0)));
    r.settle().await;
    assert_eq!(r.out.mode(), Mode::Summary);
    assert_eq!(r.out.configured(), Mode::PerService);
    assert!(r.out.switched().unwrap().contains("past its cap of 3"));
    assert!(r.svc_api.objects().is_empty(), "the per-service objects go");
    assert_eq!(r.node_api.objects().len(), 1);
    // once switched, Service changes write no ServiceBGPStatus
    assert!(!r.out.apply(changes(["demo/s9".to_owned()]), summary_of(0)));
    r.settle().await;
    assert!(r.svc_api.objects().is_empty());
}

/// A batch that takes the node past the cap switches before any of it goes
/// to the writer, which runs in its own task as in the daemon: no
/// ServiceBGPStatus created only to be deleted (the scale run's first pass
/// created 23, then deleted them, and left 6 behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_past_the_cap_creates_no_service_object() {
    const N: usize = 20_000;
    let mut r = rig(Mode::PerService, N - 1);
    r.out.initial_sync_done();
    let api = Arc::new(FakeApi::new());
    let (w, a) = (r.svc.clone(), api.clone());
    let writer = tokio::spawn(async move { w.run(a, std::future::pending()).await });
    // the writer lists its scope first
    for _ in 0..200 {
        if !api.calls().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        r.out
            .apply(changes((0..N).map(|i| format!("demo/s{i}"))), summary_of(0))
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    writer.abort();
    assert_eq!(r.out.mode(), Mode::Summary);
    assert!(
        r.out
            .switched()
            .unwrap()
            .contains(&format!("hold {N} ServiceBGPStatus"))
    );
    assert_eq!(writes(&api), 0, "{} writes", writes(&api));
}

#[tokio::test]
async fn a_mode_change_cleans_the_other_modes_objects() {
    let r = rig(Mode::Summary, 10);
    let labels = status::Labels::from([
        (LABEL_NODE.to_owned(), NODE.to_owned()),
        (LABEL_SERVICE_NAME.to_owned(), "s".to_owned()),
        (LABEL_SERVICE_NAMESPACE.to_owned(), "demo".to_owned()),
    ]);
    r.svc_api.insert_object(
        ObjectKey::new(NS, "bgp-x"),
        status::testing::FakeObject {
            labels,
            owner: None,
            status: MetalLBServiceBGPStatus::default(),
        },
    );
    let mut r = r;
    r.out.apply(BTreeMap::new(), summary_of(0));
    r.out.initial_sync_done();
    r.settle().await;
    assert!(r.svc_api.objects().is_empty());
    assert_eq!(
        NodeBGPStatus::name(&status::Labels::from([(
            LABEL_NODE.to_owned(),
            NODE.to_owned()
        )])),
        Some(NODE.to_owned())
    );
}

#[test]
fn the_owner_is_the_node_without_blocking() {
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "n1", "uid": "u-1" },
    }))
    .unwrap();
    let o = node_owner(&node).unwrap();
    assert_eq!((o.api_version.as_str(), o.kind.as_str()), ("v1", "Node"));
    assert_eq!((o.name.as_str(), o.uid.as_str()), ("n1", "u-1"));
    assert_eq!(o.block_owner_deletion, None);
    assert_eq!(o.controller, None);
    let no_uid: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "n1" } })).unwrap();
    assert!(node_owner(&no_uid).is_none());
}

#[tokio::test]
async fn a_new_owner_is_set_on_the_summary() {
    let mut r = rig(Mode::Summary, 10);
    r.out.apply(BTreeMap::new(), summary_of(0));
    r.out.initial_sync_done();
    r.settle().await;
    let node = OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: NODE.into(),
        uid: "u-1".into(),
        ..Default::default()
    };
    r.out.set_owner(Some(node.clone()));
    r.out.apply(BTreeMap::new(), summary_of(0));
    r.clock.advance(SUMMARY_MIN_WRITE_INTERVAL * 2);
    r.settle().await;
    assert_eq!(
        r.node_api.object(&ObjectKey::new(NS, NODE)).unwrap().owner,
        Some(node)
    );
}
