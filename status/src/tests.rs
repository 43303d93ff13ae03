//! Unit tests of the writer with a fake clock and an in-memory API.

use std::sync::Arc;
use std::time::Duration;

use config::api::v1beta1::{
    ConfigurationResult, ConfigurationState, ConfigurationStateStatus, IPAddressPool,
    IPAddressPoolStatus, MetalLBServiceBGPStatus, ServiceBGPStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use prometheus::Registry;

use crate::configuration_state::{self, Component};
use crate::testing::{Call, FakeApi};
use crate::{
    Backoff, Desired, FakeClock, Metrics, ObjectKey, StatusObject, StatusWriter, WriteBudget,
    WriterConfig,
};

pub(crate) const NS: &str = "metallb-system";

pub(crate) struct Harness<K: StatusObject> {
    pub(crate) clock: Arc<FakeClock>,
    pub(crate) api: FakeApi<K::Status>,
    pub(crate) writer: StatusWriter<K>,
    pub(crate) registry: Registry,
}

/// The default timing without jitter (exact retry times).
pub(crate) fn exact() -> WriterConfig {
    WriterConfig {
        backoff: Backoff {
            jitter: 0.0,
            ..Backoff::default()
        },
        ..WriterConfig::default()
    }
}

impl<K: StatusObject> Harness<K> {
    pub(crate) fn new() -> Self {
        Self::with_config(exact())
    }

    pub(crate) fn with_config(config: WriterConfig) -> Self {
        let clock = Arc::new(FakeClock::new());
        let registry = Registry::new();
        let metrics = Metrics::register(&registry).unwrap();
        let writer =
            StatusWriter::with_budget(config, clock.clone(), metrics, WriteBudget::unlimited());
        Self {
            clock,
            api: FakeApi::new(),
            writer,
            registry,
        }
    }

    /// Runs due actions until none is due at the current (fake) time.
    pub(crate) async fn settle(&self) -> usize {
        let mut n = 0;
        loop {
            let ran = self.writer.step(&self.api).await;
            if ran == 0 {
                return n;
            }
            n += ran;
        }
    }

    pub(crate) fn advance(&self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
    }

    pub(crate) fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        for family in self.registry.gather() {
            if family.name() != name {
                continue;
            }
            for m in family.get_metric() {
                let matches = labels.iter().all(|(k, v)| {
                    m.get_label()
                        .iter()
                        .any(|l| l.name() == *k && l.value() == *v)
                });
                if matches {
                    return if name.ends_with("_total") {
                        m.get_counter().get_value() as u64
                    } else {
                        m.get_gauge().get_value() as u64
                    };
                }
            }
        }
        0
    }
}

pub(crate) fn bgp(peers: &[&str]) -> MetalLBServiceBGPStatus {
    MetalLBServiceBGPStatus {
        node: "node-1".into(),
        service_name: "web".into(),
        service_namespace: "demo".into(),
        peers: peers.iter().map(|p| p.to_string()).collect(),
    }
}

pub(crate) fn key(name: &str) -> ObjectKey {
    ObjectKey::new(NS, name)
}

pub(crate) fn at(second: i64) -> Time {
    Time(Timestamp::from_second(1_700_000_000 + second).unwrap())
}

#[tokio::test]
async fn no_write_when_nothing_changed() {
    let h = Harness::<ServiceBGPStatus>::new();
    h.api.insert(key("bgp-a"), bgp(&["r1"]));
    h.writer
        .set_desired(key("bgp-a"), Desired::new(bgp(&["r1"])));
    h.settle().await;
    // One read to learn what the server has, no write.
    assert_eq!(h.api.calls(), vec![Call::Get(key("bgp-a"))]);
    assert_eq!(h.api.writes(), 0);

    // The same status again, much later: nothing at all.
    h.advance(10_000);
    h.writer
        .set_desired(key("bgp-a"), Desired::new(bgp(&["r1"])));
    assert_eq!(h.settle().await, 0);
    assert_eq!(h.api.writes(), 0);
    assert_eq!(h.writer.pending(), 0);
    assert_eq!(h.writer.next_deadline(), None);
    assert_eq!(
        h.counter(
            "metallb_rs_status_skips_total",
            &[("kind", "ServiceBGPStatus")]
        ),
        1,
        "the first one was not known to be a skip when handed in"
    );

    // After a write of ours, the same desired status is a skip too.
    h.writer
        .set_desired(key("bgp-a"), Desired::new(bgp(&["r1", "r2"])));
    h.settle().await;
    assert_eq!(h.api.writes(), 1);
    h.advance(5_000);
    h.writer
        .set_desired(key("bgp-a"), Desired::new(bgp(&["r1", "r2"])));
    h.settle().await;
    assert_eq!(h.api.writes(), 1);
}

#[tokio::test]
async fn a_burst_of_50_changes_within_a_second_gives_one_write_of_the_last_value() {
    let h = Harness::<ServiceBGPStatus>::new();
    h.writer
        .set_desired(key("bgp-a"), Desired::new(bgp(&["initial"])));
    h.settle().await;
    assert_eq!(
        h.api.calls(),
        vec![Call::Get(key("bgp-a")), Call::Create(key("bgp-a"))]
    );
    let writes_before = h.api.writes();

    // 50 changes, 19 ms apart (all within the second after the last write),
    // with the writer running between them.
    for i in 0..50 {
        h.advance(19);
        h.writer
            .set_desired(key("bgp-a"), Desired::new(bgp(&[&format!("peer-{i}")])));
        h.settle().await;
    }
    assert_eq!(h.api.writes(), writes_before, "no write within the second");
    let deadline = h.writer.next_deadline().expect("a write is pending");
    h.advance(1000 - 50 * 19);
    assert_eq!(h.clock_now(), deadline);
    h.settle().await;
    assert_eq!(h.api.writes(), writes_before + 1);
    assert_eq!(
        h.api.object(&key("bgp-a")).unwrap().status,
        bgp(&["peer-49"])
    );
    assert_eq!(
        h.counter(
            "metallb_rs_status_coalesced_total",
            &[("kind", "ServiceBGPStatus")]
        ),
        49
    );
    // Nothing more afterwards.
    h.advance(10_000);
    assert_eq!(h.settle().await, 0);
    assert_eq!(h.api.writes(), writes_before + 1);
}

#[tokio::test]
async fn a_burst_from_idle_writes_at_once_then_once_more_a_second_later() {
    let h = Harness::<ServiceBGPStatus>::new();
    h.api.insert(key("bgp-a"), bgp(&[]));
    for i in 0..50 {
        h.writer
            .set_desired(key("bgp-a"), Desired::new(bgp(&[&format!("peer-{i}")])));
        h.settle().await;
        h.advance(10);
    }
    // The first change is written at once, the other 49 one second later.
    assert_eq!(h.api.writes(), 1);
    h.advance(500);
    h.settle().await;
    assert_eq!(h.api.writes(), 2);
    assert_eq!(
        h.api.object(&key("bgp-a")).unwrap().status,
        bgp(&["peer-49"])
    );
}

/// A status wanted with a longer interval (a BGP session down, hopping
/// between Connect and Active at each attempt) is written at most once per
/// that interval; the next status wanted without it goes out at the
/// writer's own pace.
#[tokio::test]
async fn a_status_with_a_longer_interval_is_written_at_that_pace() {
    let h = Harness::<ServiceBGPStatus>::new();
    h.api.insert(key("bgp-a"), bgp(&[]));
    let slow = |s: MetalLBServiceBGPStatus| Desired::new(s).min_interval(Duration::from_secs(30));
    h.writer.set_desired(key("bgp-a"), slow(bgp(&["down-0"])));
    h.settle().await;
    assert_eq!(h.api.writes(), 1, "the first change goes out at once");
    // 25 changes 1 s apart: none written within the 30 s
    for i in 1..=25 {
        h.advance(1_000);
        h.writer
            .set_desired(key("bgp-a"), slow(bgp(&[&format!("down-{i}")])));
        h.settle().await;
    }
    assert_eq!(h.api.writes(), 1, "coalesced for 30 s");
    h.advance(5_000);
    h.settle().await;
    assert_eq!(h.api.writes(), 2, "the last one 30 s after the first");
    assert_eq!(
        h.api.object(&key("bgp-a")).unwrap().status,
        bgp(&["down-25"])
    );
    // a status without the interval (the session Established) is not held
    h.advance(1_000);
    h.writer
        .set_desired(key("bgp-a"), Desired::new(bgp(&["up"])));
    h.settle().await;
    assert_eq!(h.api.writes(), 3, "written at the writer's pace");
    assert_eq!(h.api.object(&key("bgp-a")).unwrap().status, bgp(&["up"]));
}

impl<K: StatusObject> Harness<K> {
    fn clock_now(&self) -> std::time::Instant {
        use crate::Clock;
        self.clock.now()
    }
}

#[tokio::test]
async fn a_deleted_object_is_recreated_with_its_labels_and_owner() {
    let h = Harness::<ServiceBGPStatus>::new();
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: "speaker-x".into(),
        uid: "uid-1".into(),
        ..Default::default()
    };
    let desired = Desired::new(bgp(&["r1"]))
        .label("metallb.io/node", "node-1")
        .owner(Some(owner.clone()));
    h.writer.set_desired(key("bgp-a"), desired.clone());
    h.settle().await;
    let created = h.api.object(&key("bgp-a")).unwrap();
    assert_eq!(created.labels["metallb.io/node"], "node-1");

    // Deleted by someone; the watch tells the writer.
    h.api.remove(&key("bgp-a"));
    h.writer.observe(key("bgp-a"), None);
    h.settle().await;
    assert!(
        h.api.object(&key("bgp-a")).is_none(),
        "one write per second"
    );
    h.advance(1_000);
    h.settle().await;
    let again = h.api.object(&key("bgp-a")).expect("re-created");
    assert_eq!(again.status, bgp(&["r1"]));
    assert_eq!(again.owner, Some(owner));
    assert_eq!(again.labels["metallb.io/node"], "node-1");

    // Deleted without the writer knowing: the next status write finds it
    // missing and creates it.
    h.api.remove(&key("bgp-a"));
    h.advance(2_000);
    h.writer
        .set_desired(key("bgp-a"), desired.clone().owner(None));
    h.writer.set_desired(
        key("bgp-a"),
        Desired {
            status: bgp(&["r2"]),
            ..desired
        },
    );
    h.settle().await;
    assert_eq!(h.api.object(&key("bgp-a")).unwrap().status, bgp(&["r2"]));
    let calls = h.api.calls();
    assert_eq!(
        calls[calls.len() - 2..],
        [Call::Apply(key("bgp-a")), Call::Create(key("bgp-a"))]
    );
    assert_eq!(
        h.counter(
            "metallb_rs_status_writes_total",
            &[("op", "apply"), ("result", "not_found")]
        ),
        1
    );
}

#[tokio::test]
async fn an_api_error_is_retried_with_backoff_until_written() {
    let h = Harness::<ServiceBGPStatus>::new();
    h.api.insert(key("bgp-a"), bgp(&[]));
    h.writer.observe(key("bgp-a"), Some(bgp(&[])));
    h.api.fail_next(3, "etcdserver: request timed out");
    h.writer
        .set_desired(key("bgp-a"), Desired::new(bgp(&["r1"])));
    h.settle().await; // attempt 1 fails
    assert_eq!(h.api.calls().len(), 1);
    // Retries 500 ms, then 1 s, then 2 s after each failure.
    for (wait, calls_after) in [(499, 1), (1, 2), (999, 2), (1, 3), (1999, 3), (1, 4)] {
        h.advance(wait);
        h.settle().await;
        assert_eq!(h.api.calls().len(), calls_after, "after {wait} ms more");
    }
    assert_eq!(h.api.object(&key("bgp-a")).unwrap().status, bgp(&["r1"]));
    assert_eq!(
        h.counter(
            "metallb_rs_status_writes_total",
            &[("op", "apply"), ("result", "error")]
        ),
        3
    );
    assert_eq!(
        h.counter(
            "metallb_rs_status_writes_total",
            &[("op", "apply"), ("result", "ok")]
        ),
        1
    );

    // A change made during the backoff is what ends up written.
    h.api.fail_next(1, "boom");
    h.advance(1_000);
    h.writer
        .set_desired(key("bgp-a"), Desired::new(bgp(&["r2"])));
    h.settle().await;
    h.writer
        .set_desired(key("bgp-a"), Desired::new(bgp(&["r3"])));
    h.advance(500);
    h.settle().await;
    assert_eq!(h.api.object(&key("bgp-a")).unwrap().status, bgp(&["r3"]));
}

#[test]
fn the_backoff_is_kube_edges() {
    assert_eq!(WriterConfig::default().backoff, Backoff::default());
}

#[tokio::test]
async fn objects_no_longer_wanted_are_deleted() {
    let h = Harness::<ServiceBGPStatus>::new();
    h.writer
        .set_desired(key("bgp-a"), Desired::new(bgp(&["r1"])));
    h.settle().await;
    h.writer.remove(&key("bgp-a"));
    h.settle().await;
    assert!(h.api.object(&key("bgp-a")).is_none());
    assert_eq!(h.api.calls().last(), Some(&Call::Delete(key("bgp-a"))));

    // After a restart: the list shows two objects, the caller wants one.
    h.api.insert(key("bgp-old"), bgp(&["r1"]));
    h.api.insert(key("bgp-b"), bgp(&["r1"]));
    h.writer
        .observe_all([(key("bgp-old"), bgp(&["r1"])), (key("bgp-b"), bgp(&["r1"]))]);
    h.writer
        .set_desired(key("bgp-b"), Desired::new(bgp(&["r1"])));
    assert_eq!(h.settle().await, 0, "nothing before the caller says so");
    assert_eq!(h.writer.prune_unwanted(), 1);
    h.settle().await;
    assert!(h.api.object(&key("bgp-old")).is_none());
    assert!(h.api.object(&key("bgp-b")).is_some());
    assert_eq!(h.writer.pending(), 0);
}

#[tokio::test]
async fn pools_are_never_created_nor_deleted() {
    let h = Harness::<IPAddressPool>::new();
    let status = IPAddressPoolStatus {
        assigned_ipv4: 1,
        available_ipv4: 255,
        ..Default::default()
    };
    h.writer
        .set_desired(key("pool"), Desired::new(status.clone()));
    h.settle().await;
    assert_eq!(h.api.calls(), vec![Call::Get(key("pool"))]);
    assert_eq!(h.writer.pending(), 0);
    // The pool appears: its status is written.
    h.api.insert(key("pool"), IPAddressPoolStatus::default());
    h.writer
        .observe(key("pool"), Some(IPAddressPoolStatus::default()));
    h.settle().await;
    assert_eq!(h.api.object(&key("pool")).unwrap().status, status);
    h.writer.remove(&key("pool"));
    assert_eq!(h.writer.prune_unwanted(), 0);
    h.settle().await;
    assert!(h.api.object(&key("pool")).is_some());
}

#[test]
fn valid_and_invalid_configuration_states() {
    let speaker = Component::Speaker {
        node: "node-1".into(),
    };
    assert_eq!(speaker.name(), "speaker-node-1");
    assert_eq!(
        speaker.labels().into_iter().collect::<Vec<_>>(),
        vec![
            ("metallb.io/component-type".into(), "speaker".into()),
            ("metallb.io/node-name".into(), "node-1".into())
        ]
    );
    assert_eq!(Component::Controller.name(), "controller");
    assert_eq!(
        Component::Controller.labels()["metallb.io/component-type"],
        "controller"
    );

    let v = configuration_state::from_result::<config::ConfigError>(&speaker, &Ok(()), at(1));
    assert_eq!(v.result, Some(ConfigurationResult::Valid));
    assert_eq!((v.last_error.as_str(), v.error_summary.as_str()), ("", ""));
    let c = &v.conditions[0];
    assert_eq!(
        (
            c.type_.as_str(),
            c.status.as_str(),
            c.reason.as_str(),
            c.message.as_str()
        ),
        ("configReconcilerValid", "True", "Reconciled", "")
    );
    assert_eq!(c.last_transition_time, at(1));
    assert_eq!(c.observed_generation, None);
    // Empty fields are left out, as MetalLB's omitempty does.
    let json = serde_json::to_value(&v).unwrap();
    assert!(json.get("lastError").is_none() && json.get("errorSummary").is_none());

    let err = config::ConfigError {
        object: None,
        message: r#"CIDR "198.51.100.128/32" in pool "b" overlaps with already defined CIDR "198.51.100.0/24""#.into(),
        transient: false,
    };
    let i = configuration_state::from_result(&Component::Controller, &Err(err), at(2));
    let text = r#"configuration error: CIDR "198.51.100.128/32" in pool "b" overlaps with already defined CIDR "198.51.100.0/24""#;
    assert_eq!(i.result, Some(ConfigurationResult::Invalid));
    assert_eq!(i.last_error, text);
    assert_eq!(i.error_summary, text);
    let c = &i.conditions[0];
    assert_eq!(
        (
            c.type_.as_str(),
            c.status.as_str(),
            c.reason.as_str(),
            c.message.as_str()
        ),
        ("poolReconcilerValid", "False", "ConfigurationError", text)
    );

    let other = configuration_state::invalid(
        &Component::Controller,
        &"general handler sync state error",
        at(3),
    );
    assert_eq!(
        other.error_summary,
        "configuration error: general handler sync state error"
    );
}

#[tokio::test]
async fn last_transition_time_changes_only_with_the_condition_status() {
    let h = Harness::<ConfigurationState>::new();
    let comp = Component::Speaker {
        node: "node-1".into(),
    };
    let k = comp.key(NS);
    let report = |result: Result<(), &str>, t: i64| {
        h.writer.set_desired(
            k.clone(),
            configuration_state::desired(&comp, &result, None, at(t)),
        );
    };
    let on_server = || -> ConfigurationStateStatus { h.api.object(&k).unwrap().status };
    let ltt = || on_server().conditions[0].last_transition_time.clone();

    report(Ok(()), 0);
    h.settle().await;
    assert_eq!(h.api.object(&k).unwrap().labels, comp.labels());
    assert_eq!(ltt(), at(0));
    let writes = h.api.writes();

    // Valid again at every reconcile: no write, time kept.
    for t in 1..5 {
        h.advance(2_000);
        report(Ok(()), t);
        h.settle().await;
    }
    assert_eq!(h.api.writes(), writes);
    assert_eq!(ltt(), at(0));

    // Invalid: written, new time.
    h.advance(2_000);
    report(Err("bad"), 10);
    h.settle().await;
    assert_eq!(on_server().result, Some(ConfigurationResult::Invalid));
    assert_eq!(ltt(), at(10));

    // Another error: message written, time kept (still False).
    h.advance(2_000);
    report(Err("worse"), 11);
    h.settle().await;
    assert_eq!(on_server().last_error, "configuration error: worse");
    assert_eq!(ltt(), at(10));
    assert_eq!(h.api.writes(), writes + 2);

    // Valid again: new time, errors cleared.
    h.advance(2_000);
    report(Ok(()), 12);
    h.settle().await;
    assert_eq!(on_server().result, Some(ConfigurationResult::Valid));
    assert_eq!(on_server().last_error, "");
    assert_eq!(ltt(), at(12));
}

#[test]
fn metrics_have_the_documented_names() {
    let registry = Registry::new();
    let m = Metrics::register(&registry).unwrap();
    m.writes.with_label_values(&["k", "apply", "ok"]).inc();
    m.reads.with_label_values(&["k", "ok"]).inc();
    m.skips.with_label_values(&["k"]).inc();
    m.coalesced.with_label_values(&["k"]).inc();
    m.pending.with_label_values(&["k"]).set(1);
    m.failed.with_label_values(&["k"]).set(1);
    let mut names: Vec<String> = registry
        .gather()
        .iter()
        .map(|f| f.name().to_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "metallb_rs_status_coalesced_total",
            "metallb_rs_status_failed",
            "metallb_rs_status_pending",
            "metallb_rs_status_reads_total",
            "metallb_rs_status_skips_total",
            "metallb_rs_status_writes_total"
        ]
    );
    // Registering twice on one registry is an error, not a panic.
    assert!(Metrics::register(&registry).is_err());
}

#[path = "tests_defects.rs"]
mod defects;

#[path = "tests_scale.rs"]
mod scale;
