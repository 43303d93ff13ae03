//! Tests of the defects the review found: hung requests, backoff, leadership
//! loss, metadata of existing objects, shutdown, over-long messages, and the
//! label-keyed writer of the speaker's per-node objects.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use config::api::v1beta1::{
    BGPSessionStatus, ConfigurationState, MetalLBServiceL2Status, ServiceBGPStatus, ServiceL2Status,
};
use config::api::{LABEL_NODE, LABEL_PEER, LABEL_SERVICE_NAME, LABEL_SERVICE_NAMESPACE};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::{Harness, NS, at, bgp, exact, key};
use crate::configuration_state::{self, Component};
use crate::testing::{Call, FakeApi, FakeObject};
use crate::{
    Action, Class, Desired, Engine, FakeClock, LabelScope, Labels, MAX_CONDITION_MESSAGE, Metrics,
    ObjectKey, Observed, Outcome, StatusObject, StatusWriter, SystemClock, TRUNCATION_MARKER,
    WriteBudget, WriterConfig,
};

fn pod(uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: format!("speaker-{uid}"),
        uid: uid.into(),
        ..Default::default()
    }
}

/// A writer on the system clock (tokio's, paused in these tests).
fn system_writer<K: StatusObject>(config: WriterConfig) -> StatusWriter<K> {
    StatusWriter::with_budget(
        config,
        Arc::new(SystemClock),
        Metrics::unregistered(),
        WriteBudget::unlimited(),
    )
}

fn calls_for(api: &FakeApi<impl Clone>, k: &ObjectKey) -> Vec<Call> {
    api.calls()
        .into_iter()
        .filter(|c| c.key() == Some(k))
        .collect()
}

// ----- 1. deadlines and concurrency

/// Defect: a request that never answers wedged the whole writer (every
/// other object's writes waited for the batch; no deadline).
#[tokio::test(start_paused = true)]
async fn a_hung_request_for_one_object_stops_no_other_and_ends_at_its_deadline() {
    let api = Arc::new(FakeApi::new());
    let writer = system_writer::<ServiceBGPStatus>(WriterConfig {
        request_timeout: Duration::from_secs(10),
        ..exact()
    });
    api.hang(key("stuck"));
    writer.set_desired(key("stuck"), Desired::new(bgp(&["r1"])));
    writer.set_desired(key("free"), Desired::new(bgp(&["r1"])));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn({
        let writer = writer.clone();
        let api = api.clone();
        async move {
            writer
                .run(api, async {
                    let _ = stopped.await;
                })
                .await;
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(api.object(&key("free")).unwrap().status, bgp(&["r1"]));
    // A change of the free object while the other request still hangs.
    writer.set_desired(key("free"), Desired::new(bgp(&["r2"])));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        api.object(&key("free")).unwrap().status,
        bgp(&["r2"]),
        "written while the other request hangs"
    );
    assert_eq!(calls_for(&api, &key("stuck")), [Call::Get(key("stuck"))]);
    // The hung request ends at its deadline (10 s) and is retried after
    // the backoff (500 ms).
    tokio::time::sleep(Duration::from_millis(10_000 - 4_000 + 400)).await;
    assert_eq!(calls_for(&api, &key("stuck")).len(), 1);
    assert_eq!(writer.failed(), 1, "the timed-out object counts as failed");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(calls_for(&api, &key("stuck")).len(), 2, "retried");
    // Answers again: written.
    api.unhang(&key("stuck"));
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(api.object(&key("stuck")).unwrap().status, bgp(&["r1"]));
    assert_eq!(writer.pending(), 0);
    let _ = stop.send(());
    run.await.unwrap();
}

/// Defect: `step` awaited a hung request forever.
#[tokio::test(start_paused = true)]
async fn step_ends_at_the_request_deadline() {
    let api = FakeApi::new();
    let writer = system_writer::<ServiceBGPStatus>(WriterConfig {
        request_timeout: Duration::from_secs(3),
        ..exact()
    });
    api.hang_all();
    writer.set_desired(key("a"), Desired::new(bgp(&["r1"])));
    let started = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), writer.step(&api))
        .await
        .expect("step ends");
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert_eq!(writer.failed(), 1);
}

// ----- 2. backoff and classification

/// Defect: every error was retried alike (a 403 as fast as a 500) and a 409
/// backed off instead of reading the object again.
#[tokio::test]
async fn permanent_errors_are_retried_slowly_and_conflicts_are_read_again() {
    let h = Harness::<ServiceBGPStatus>::new();
    h.api.insert(key("a"), bgp(&[]));
    h.writer.observe(key("a"), Some(bgp(&[])));
    h.api.fail_next_with(1, 403, "forbidden");
    h.writer.set_desired(key("a"), Desired::new(bgp(&["r1"])));
    h.settle().await;
    assert_eq!(h.api.calls().len(), 1);
    // Not after the transient backoff's 500 ms, nor a minute.
    h.advance(60_000);
    h.settle().await;
    assert_eq!(h.api.calls().len(), 1, "a 403 is not retried like a 500");
    h.advance(240_000);
    h.settle().await;
    assert_eq!(h.api.calls().len(), 2, "retried after 5 minutes");
    assert_eq!(h.api.object(&key("a")).unwrap().status, bgp(&["r1"]));

    // A permanent error is retried at once when the status changes.
    h.advance(2_000);
    h.api.fail_next_with(1, 422, "invalid");
    h.writer.set_desired(key("a"), Desired::new(bgp(&["r2"])));
    h.settle().await;
    h.writer.set_desired(key("a"), Desired::new(bgp(&["r3"])));
    h.advance(1_000);
    h.settle().await;
    assert_eq!(h.api.object(&key("a")).unwrap().status, bgp(&["r3"]));

    // 409: read again and apply at once (after the write interval).
    h.advance(2_000);
    h.api.fail_next_with(1, 409, "the object has been modified");
    let before = h.api.calls().len();
    h.writer.set_desired(key("a"), Desired::new(bgp(&["r4"])));
    h.settle().await;
    h.advance(1_000);
    h.settle().await;
    assert_eq!(
        h.api.calls()[before..],
        [
            Call::Apply(key("a")),
            Call::Get(key("a")),
            Call::Apply(key("a"))
        ]
    );
    assert_eq!(h.api.object(&key("a")).unwrap().status, bgp(&["r4"]));
}

/// Defect: objects that failed together retried together (no jitter).
#[tokio::test]
async fn objects_failing_together_retry_at_jittered_times() {
    let h = Harness::<ServiceBGPStatus>::with_config(WriterConfig::default());
    for i in 0..20 {
        let k = key(&format!("o{i}"));
        h.api.insert(k.clone(), bgp(&[]));
        h.writer.observe(k.clone(), Some(bgp(&[])));
        h.writer.set_desired(k, Desired::new(bgp(&["r1"])));
    }
    h.api.fail_next(20, "etcdserver: leader changed");
    h.settle().await;
    assert_eq!(h.api.calls().len(), 20);
    // Delays are drawn from [400, 500] ms (20 % jitter).
    h.advance(399);
    assert_eq!(h.settle().await, 0);
    h.advance(51);
    let early = h.settle().await;
    assert!(
        early > 0 && early < 20,
        "{early} of 20 retried in the first half of the jitter band"
    );
    h.advance(50);
    h.settle().await;
    assert_eq!(h.writer.pending(), 0);
}

// ----- 3. leadership loss

/// Defect: a controller that lost its lease kept re-applying its statuses.
#[tokio::test]
async fn forget_all_drops_every_desired_status_and_deletes_nothing() {
    let h = Harness::<ServiceBGPStatus>::new();
    h.writer
        .set_desired(key("written"), Desired::new(bgp(&["r1"])));
    h.settle().await;
    h.writer
        .set_desired(key("written"), Desired::new(bgp(&["r2"])));
    h.writer
        .set_desired(key("failing"), Desired::new(bgp(&["r1"])));
    h.api.fail_next(1, "boom");
    h.settle().await;
    h.writer.remove(&key("written"));
    assert!(h.writer.pending() > 0);
    let calls = h.api.calls().len();

    assert_eq!(h.writer.forget_all(), 2);
    assert_eq!(h.writer.pending(), 0);
    assert_eq!(h.writer.next_deadline(), None);
    // The new leader changes the object; the former one writes nothing.
    h.api.insert(key("written"), bgp(&["new-leader"]));
    h.writer.observe(key("written"), Some(bgp(&["new-leader"])));
    for _ in 0..10 {
        h.advance(60_000);
        h.settle().await;
    }
    assert_eq!(h.api.calls().len(), calls, "no request after forget_all");
    assert_eq!(
        h.api.object(&key("written")).unwrap().status,
        bgp(&["new-leader"])
    );

    // Leading again: what it hands in is written.
    h.writer
        .set_desired(key("written"), Desired::new(bgp(&["r3"])));
    h.settle().await;
    assert_eq!(h.api.object(&key("written")).unwrap().status, bgp(&["r3"]));
}

/// Defect: a request in flight when the lease was lost still went on and
/// wrote; `run` must drop it.
#[tokio::test(start_paused = true)]
async fn forget_all_abandons_requests_in_flight() {
    let api = Arc::new(FakeApi::new());
    api.insert(key("a"), bgp(&["old"]));
    let writer = system_writer::<ServiceBGPStatus>(exact());
    writer.observe(key("a"), Some(bgp(&["old"])));
    api.hang(key("a"));
    writer.set_desired(key("a"), Desired::new(bgp(&["r1"])));
    let run = tokio::spawn({
        let (writer, api) = (writer.clone(), api.clone());
        async move { writer.run(api, std::future::pending()).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(api.calls(), [Call::Apply(key("a"))]);
    writer.forget_all();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The request would go on now: it was dropped.
    api.unhang(&key("a"));
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(api.object(&key("a")).unwrap().status, bgp(&["old"]));
    assert_eq!(api.calls(), [Call::Apply(key("a"))], "nothing more");
    assert_eq!(writer.pending(), 0);
    run.abort();
}

// ----- 4. labels and owner of existing objects

/// Defect: labels and ownerReferences were set only at creation, so an
/// object created by the previous Pod stayed owned by it (and was garbage
/// collected with it).
#[tokio::test]
async fn an_existing_object_gets_the_new_owner_and_labels_in_place() {
    let h = Harness::<ConfigurationState>::new();
    let comp = Component::Speaker {
        node: "node-1".into(),
    };
    let k = comp.key(NS);
    let status = configuration_state::valid(&comp, at(0));
    h.api.insert_object(
        k.clone(),
        FakeObject {
            labels: Labels::from([("metallb.io/component-type".into(), "speaker".into())]),
            owner: Some(pod("old-uid")),
            status: status.clone(),
        },
    );
    h.writer.set_desired(
        k.clone(),
        configuration_state::desired(&comp, &Ok::<(), &str>(()), Some(pod("new-uid")), at(5)),
    );
    h.settle().await;
    assert_eq!(
        h.api.calls(),
        [Call::Get(k.clone()), Call::ApplyMetadata(k.clone())],
        "a metadata apply, no delete, no create, no status write"
    );
    let obj = h.api.object(&k).unwrap();
    assert_eq!(obj.owner, Some(pod("new-uid")));
    assert_eq!(obj.labels, comp.labels());
    assert_eq!(obj.status, status, "status (and its time) untouched");
    // Stable afterwards.
    h.advance(5_000);
    h.writer.set_desired(
        k.clone(),
        configuration_state::desired(&comp, &Ok::<(), &str>(()), Some(pod("new-uid")), at(9)),
    );
    h.settle().await;
    assert_eq!(h.api.calls().len(), 2);

    // From a watch event too (an owner changed by someone else).
    h.advance(5_000);
    h.writer.observe_object(
        k.clone(),
        Some(Observed {
            status: status.clone(),
            labels: comp.labels(),
            owners: vec![pod("someone-else")],
            resource_version: None,
        }),
    );
    h.settle().await;
    assert_eq!(h.api.calls().last(), Some(&Call::ApplyMetadata(k)));
}

// ----- 5. shutdown

/// Defect: `run` did not return at shutdown while a request hung.
#[tokio::test(start_paused = true)]
async fn run_returns_at_shutdown_with_a_request_in_flight() {
    let api = Arc::new(FakeApi::new());
    let writer = system_writer::<ServiceBGPStatus>(WriterConfig {
        request_timeout: Duration::from_secs(3600),
        ..exact()
    });
    api.hang_all();
    writer.set_desired(key("a"), Desired::new(bgp(&["r1"])));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn({
        let (writer, api) = (writer.clone(), api.clone());
        async move {
            writer
                .run(api, async {
                    let _ = stopped.await;
                })
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(api.calls().len(), 1, "the request hangs");
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_millis(10), run)
        .await
        .expect("run returns at once")
        .unwrap();
    // The abandoned object is not stuck in flight: a final flush writes it.
    let answering = FakeApi::new();
    assert_eq!(writer.pending(), 1);
    writer.step(&answering).await;
    writer.step(&answering).await;
    assert_eq!(answering.object(&key("a")).unwrap().status, bgp(&["r1"]));
}

// ----- 6. over-long messages

/// Defect: a condition message over the CRD's maxLength (32768) was sent
/// as is and rejected by the API server forever.
#[tokio::test]
async fn over_long_messages_are_truncated_on_a_character_boundary() {
    let h = Harness::<ConfigurationState>::new();
    let comp = Component::Controller;
    let k = comp.key(NS);
    let error = "é€".repeat(25_000); // 50 000 characters, 125 000 bytes
    h.writer.set_desired(
        k.clone(),
        configuration_state::desired(&comp, &Err(&error), None, at(0)),
    );
    h.settle().await;
    let s = h.api.object(&k).unwrap().status;
    for text in [&s.conditions[0].message, &s.last_error, &s.error_summary] {
        assert_eq!(text.chars().count(), MAX_CONDITION_MESSAGE);
        assert!(text.starts_with("configuration error: é€é€"));
        assert!(
            text.ends_with(TRUNCATION_MARKER),
            "{}",
            &text[text.len() - 40..]
        );
    }
    // The same error again is no rewrite.
    h.advance(5_000);
    h.writer.set_desired(
        k.clone(),
        configuration_state::desired(&comp, &Err(&error), None, at(1)),
    );
    h.settle().await;
    assert_eq!(h.api.writes(), 1);
    // Short texts are kept.
    let mut short = "x".repeat(MAX_CONDITION_MESSAGE);
    assert!(!crate::truncate(&mut short, MAX_CONDITION_MESSAGE));
}

// ----- 7. the label-keyed writer

fn l2(node: &str, svc: &str) -> MetalLBServiceL2Status {
    MetalLBServiceL2Status {
        node: node.into(),
        service_name: svc.into(),
        service_namespace: "demo".into(),
        interfaces: Vec::new(),
    }
}

fn svc_labels(svc: &str) -> Labels {
    Labels::from([
        (LABEL_SERVICE_NAME.into(), svc.into()),
        (LABEL_SERVICE_NAMESPACE.into(), "demo".into()),
    ])
}

fn l2_object(node: &str, svc: &str, owner: &str) -> FakeObject<MetalLBServiceL2Status> {
    let mut labels = svc_labels(svc);
    labels.insert(LABEL_NODE.into(), node.into());
    FakeObject {
        labels,
        owner: Some(pod(owner)),
        status: l2(node, svc),
    }
}

fn l2_writer(
    clock: Arc<FakeClock>,
    node: &str,
    budget: WriteBudget,
) -> StatusWriter<ServiceL2Status> {
    StatusWriter::labeled(
        exact(),
        LabelScope::node(NS, node),
        clock,
        Metrics::unregistered(),
        budget,
    )
}

async fn settle<K: StatusObject>(writer: &StatusWriter<K>, api: &FakeApi<K::Status>) {
    while writer.step(api).await > 0 {}
}

/// Speaker restart: its objects are found by label and adopted (no
/// duplicate), those no longer wanted are deleted only after the first full
/// desired set, other nodes' are left alone until asked.
#[tokio::test]
async fn a_restarted_speaker_adopts_its_objects_prunes_the_rest_after_the_initial_sync() {
    let clock = Arc::new(FakeClock::new());
    let api = FakeApi::new();
    api.insert_object(key("l2-aaaaa"), l2_object("node-1", "web", "old"));
    api.insert_object(key("l2-bbbbb"), l2_object("node-1", "gone", "old"));
    api.insert_object(key("l2-ccccc"), l2_object("node-2", "web", "other"));
    api.insert_object(key("l2-ddddd"), l2_object("node-2", "db", "other"));

    let writer = l2_writer(clock.clone(), "node-1", WriteBudget::unlimited());
    let want = |svc: &str| Desired::new(l2("node-1", svc)).owner(Some(pod("new")));
    writer.set_labeled(svc_labels("web"), want("web"));
    writer.set_labeled(svc_labels("api"), want("api"));
    settle(&writer, &api).await;
    let node1 = Labels::from([(LABEL_NODE.to_owned(), "node-1".to_owned())]);
    assert_eq!(api.calls()[0], Call::List(NS.into(), node1));
    // Adopted: no new object for web, its owner moved in place.
    assert_eq!(
        writer.labeled_key(&svc_labels("web")),
        Some(key("l2-aaaaa"))
    );
    assert_eq!(
        api.object(&key("l2-aaaaa")).unwrap().owner,
        Some(pod("new"))
    );
    let api_key = writer.labeled_key(&svc_labels("api")).expect("created");
    assert!(api_key.name.starts_with("l2-"), "{api_key}");
    let created = api.object(&api_key).unwrap();
    assert_eq!(created.labels[LABEL_NODE], "node-1");
    assert_eq!(created.labels[LABEL_SERVICE_NAME], "api");
    assert_eq!(created.owner, Some(pod("new")));
    // Not wanted, but the initial sync is not done: kept.
    assert!(api.object(&key("l2-bbbbb")).is_some());
    writer.initial_sync_done();
    settle(&writer, &api).await;
    assert!(api.object(&key("l2-bbbbb")).is_none(), "pruned");
    assert!(api.object(&key("l2-ccccc")).is_some(), "other node's kept");
    assert!(
        !api.calls()
            .iter()
            .any(|c| matches!(c, Call::Create(k) if *k == key("l2-aaaaa"))),
    );

    // This node now owns web: other nodes' web objects go, not db's.
    writer.delete_others(svc_labels("web"));
    settle(&writer, &api).await;
    assert!(api.object(&key("l2-ccccc")).is_none());
    assert!(api.object(&key("l2-ddddd")).is_some());
    assert!(api.object(&key("l2-aaaaa")).is_some());

    // A second restart: same objects, no create at all.
    let calls = api.calls().len();
    let again = l2_writer(clock.clone(), "node-1", WriteBudget::unlimited());
    again.set_labeled(svc_labels("web"), want("web"));
    again.set_labeled(svc_labels("api"), want("api"));
    again.initial_sync_done();
    settle(&again, &api).await;
    assert_eq!(api.calls().len(), calls + 1, "one list, nothing else");
    let node1_objects: Vec<ObjectKey> = api
        .objects()
        .into_iter()
        .filter(|(_, o)| o.labels[LABEL_NODE] == "node-1")
        .map(|(k, _)| k)
        .collect();
    assert_eq!(node1_objects.len(), 2, "{node1_objects:?}");

    // Withdrawn: deleted; an object appearing for nothing wanted: deleted.
    again.remove_labeled(svc_labels("api"));
    api.insert_object(key("l2-eeeee"), l2_object("node-1", "stray", "x"));
    again.observe_object(
        key("l2-eeeee"),
        Some(Observed {
            status: l2("node-1", "stray"),
            labels: l2_object("node-1", "stray", "x").labels,
            owners: vec![],
            resource_version: None,
        }),
    );
    settle(&again, &api).await;
    assert!(api.object(&api_key).is_none());
    assert!(api.object(&key("l2-eeeee")).is_none());
    assert_eq!(again.pending(), 0);
}

/// Duplicates of one identity (two objects with the same labels) leave one.
#[tokio::test]
async fn duplicates_of_one_identity_are_deleted() {
    let clock = Arc::new(FakeClock::new());
    let api = FakeApi::new();
    api.insert_object(key("l2-aaaaa"), l2_object("node-1", "web", "p"));
    api.insert_object(key("l2-bbbbb"), l2_object("node-1", "web", "p"));
    let writer = l2_writer(clock, "node-1", WriteBudget::unlimited());
    writer.set_labeled(svc_labels("web"), Desired::new(l2("node-1", "web")));
    settle(&writer, &api).await;
    assert_eq!(api.objects().len(), 1);
    assert_eq!(
        api.calls()
            .iter()
            .filter(|c| matches!(c, Call::Create(_)))
            .count(),
        0
    );
}

/// The watch's event of the writer's own create, ahead of the create's
/// answer, is no duplicate (nor pruned).
#[test]
fn the_watch_event_of_our_own_create_is_not_a_duplicate() {
    let mut e = Engine::<ServiceL2Status>::labeled(exact(), LabelScope::node(NS, "node-1"));
    let t = std::time::Instant::now();
    e.initial_sync_done();
    let list = e.poll(t);
    assert!(matches!(&list[..], [Action::List { .. }]));
    e.complete(&list[0], Outcome::Listed(Vec::new()), t);
    e.set_labeled(svc_labels("web"), Desired::new(l2("node-1", "web")));
    let create = e.poll(t);
    let [
        Action::CreateGenerated {
            generate_name,
            desired,
            ..
        },
    ] = &create[..]
    else {
        panic!("{create:?}")
    };
    assert_eq!(generate_name, "l2-");
    let returned = Observed {
        status: desired.status.clone(),
        labels: desired.labels.clone(),
        owners: vec![],
        resource_version: None,
    };
    e.observe_object(key("l2-x1"), Some(returned.clone()));
    e.complete(
        &create[0],
        Outcome::Created {
            key: key("l2-x1"),
            sent: desired.status.clone(),
            returned,
        },
        t,
    );
    assert_eq!(e.poll(t + Duration::from_secs(5)), []);
    assert_eq!(e.labeled_key(&svc_labels("web")), Some(&key("l2-x1")));
    assert_eq!(e.pending(), 0);
}

/// A labeled engine of node-1, listed empty, whose first poll after Service
/// web's ServiceL2Status was set made its create (returned, still in flight).
fn create_in_flight(
    t: std::time::Instant,
) -> (Engine<ServiceL2Status>, Vec<Action<MetalLBServiceL2Status>>) {
    let mut e = Engine::<ServiceL2Status>::labeled(exact(), LabelScope::node(NS, "node-1"));
    e.initial_sync_done();
    let list = e.poll(t);
    e.complete(&list[0], Outcome::Listed(Vec::new()), t);
    e.set_labeled(svc_labels("web"), Desired::new(l2("node-1", "web")));
    let create = e.poll(t);
    (e, create)
}

/// The watch's event of the writer's own POST (no status yet) ahead of the
/// create's answer: the adopted object gets no write of its own while the
/// create (which writes the status next) is in flight; if that create then
/// fails, the object is written like any other. Seen in the lab: two status
/// patches of a new object 1 ms apart.
#[test]
fn an_object_adopted_while_our_create_is_in_flight_waits_for_it() {
    let t = std::time::Instant::now();
    let (mut e, create) = create_in_flight(t);
    let [Action::CreateGenerated { desired, .. }] = &create[..] else {
        panic!("{create:?}")
    };
    let posted = Observed {
        status: Default::default(),
        labels: desired.labels.clone(),
        owners: vec![],
        resource_version: Some(10),
    };
    e.observe_object(key("l2-x1"), Some(posted));
    assert_eq!(e.labeled_key(&svc_labels("web")), Some(&key("l2-x1")));
    assert_eq!(e.poll(t), [], "no write while the create is in flight");
    // The create's status write fails (e.g. a timeout): the object is
    // written on its own after the backoff.
    e.complete(&create[0], Outcome::Failed(Class::Timeout), t);
    let later = e.poll(t + Duration::from_secs(60));
    assert!(
        matches!(&later[..], [Action::Apply(k, _)] if *k == key("l2-x1")),
        "{later:?}"
    );
}

/// An identity removed while its create is in flight, after the watch's event
/// of that create was adopted: the object is deleted once the create answers.
/// Seen at scale: the per-service cap's switch (every ServiceBGPStatus removed
/// at once) left 6 objects that nothing deleted (their entries stayed "in
/// flight" for good).
#[test]
fn an_identity_removed_while_its_adopted_create_is_in_flight_is_deleted() {
    let t = std::time::Instant::now();
    let (mut e, create) = create_in_flight(t);
    let [Action::CreateGenerated { desired, .. }] = &create[..] else {
        panic!("{create:?}")
    };
    let returned = Observed {
        status: desired.status.clone(),
        labels: desired.labels.clone(),
        owners: vec![],
        resource_version: Some(10),
    };
    e.observe_object(key("l2-x1"), Some(returned.clone()));
    assert_eq!(e.labeled_key(&svc_labels("web")), Some(&key("l2-x1")));
    e.remove_labeled(svc_labels("web"));
    assert_eq!(e.poll(t), [], "nothing while the create is in flight");
    e.complete(
        &create[0],
        Outcome::Created {
            key: key("l2-x1"),
            sent: desired.status.clone(),
            returned,
        },
        t,
    );
    let after = e.poll(t + Duration::from_secs(1));
    assert!(
        matches!(&after[..], [Action::Delete(k, ..)] if *k == key("l2-x1")),
        "{after:?}"
    );
}

/// The watch's event of the writer's own create (labels, owner, no status
/// yet) arriving after the answer of the status write that followed it is
/// stale (older resourceVersion): no second status write. Seen in the lab:
/// every new object's status was written twice.
#[test]
fn a_stale_watch_event_after_our_create_writes_nothing() {
    let t = std::time::Instant::now();
    let (mut e, create) = create_in_flight(t);
    let [Action::CreateGenerated { desired, .. }] = &create[..] else {
        panic!("{create:?}")
    };
    let at = |rv: u64, status| Observed {
        status,
        labels: desired.labels.clone(),
        owners: vec![],
        resource_version: Some(rv),
    };
    e.complete(
        &create[0],
        Outcome::Created {
            key: key("l2-x1"),
            sent: desired.status.clone(),
            returned: at(11, desired.status.clone()),
        },
        t,
    );
    // The POST's event: resourceVersion 10, an empty status.
    e.observe_object(key("l2-x1"), Some(at(10, Default::default())));
    assert_eq!(e.poll(t + Duration::from_secs(5)), []);
    // The status write's own event: nothing to do either.
    e.observe_object(key("l2-x1"), Some(at(11, desired.status.clone())));
    assert_eq!(e.poll(t + Duration::from_secs(5)), []);
    // Someone else clears the status later (newer): written back.
    e.observe_object(key("l2-x1"), Some(at(12, Default::default())));
    let again = e.poll(t + Duration::from_secs(10));
    assert!(
        matches!(&again[..], [Action::Apply(k, _)] if *k == key("l2-x1")),
        "{again:?}"
    );
}

/// A speaker starting with thousands of Services must not flood the API
/// server: every request takes a token of a budget shared by its writers.
#[tokio::test]
async fn a_start_with_many_objects_stays_within_the_shared_budget() {
    let clock = Arc::new(FakeClock::new());
    let budget = WriteBudget::new(5.0, 10);
    let l2w = l2_writer(clock.clone(), "node-1", budget.clone());
    let bgpw: StatusWriter<ServiceBGPStatus> = StatusWriter::labeled(
        exact(),
        LabelScope::node(NS, "node-1"),
        clock.clone(),
        Metrics::unregistered(),
        budget,
    );
    let (l2api, bgpapi) = (FakeApi::new(), FakeApi::new());
    for i in 0..1000 {
        let svc = format!("svc-{i}");
        l2w.set_labeled(svc_labels(&svc), Desired::new(l2("node-1", &svc)));
        bgpw.set_labeled(svc_labels(&svc), Desired::new(bgp(&["r1"])));
    }
    let requests = || l2api.calls().len() + bgpapi.calls().len();
    settle(&l2w, &l2api).await;
    settle(&bgpw, &bgpapi).await;
    assert_eq!(requests(), 10, "the burst");
    // The next token is 200 ms away.
    let next = l2w.next_deadline().unwrap();
    assert_eq!(
        next - crate::Clock::now(&*clock),
        Duration::from_millis(200)
    );
    for _ in 0..10 {
        clock.advance(Duration::from_secs(1));
        settle(&l2w, &l2api).await;
        settle(&bgpw, &bgpapi).await;
    }
    assert_eq!(requests(), 10 + 50, "5 per second");
}

/// Per-kind pending and failed gauges.
#[tokio::test]
async fn pending_and_failed_gauges_per_kind() {
    let h = Harness::<ServiceBGPStatus>::new();
    h.writer.set_desired(key("a"), Desired::new(bgp(&["r1"])));
    h.writer.set_desired(key("b"), Desired::new(bgp(&["r1"])));
    let gauge = |name: &str| h.counter(name, &[("kind", "ServiceBGPStatus")]);
    assert_eq!(gauge("metallb_rs_status_pending"), 2);
    h.api.fail_next(1, "boom");
    h.settle().await;
    assert_eq!(gauge("metallb_rs_status_failed"), 1);
    assert_eq!(gauge("metallb_rs_status_pending"), 1);
    h.advance(1_000);
    h.settle().await;
    assert_eq!(
        (
            gauge("metallb_rs_status_pending"),
            gauge("metallb_rs_status_failed")
        ),
        (0, 0)
    );
}

/// BGPSessionStatus: one object per (node, peer) identified by its labels,
/// named `<node>-<peer>`; its name never changes when other pairs appear, and
/// a pair whose name is taken by another pair (`node a-b` + `peer c` and
/// `node a` + `peer b-c` both read `a-b-c`) gets a generated one.
#[tokio::test]
async fn bgp_session_names_are_node_dash_peer_and_never_change() {
    let clock = Arc::new(FakeClock::new());
    let api = FakeApi::new();
    let writer = |node: &str| -> StatusWriter<BGPSessionStatus> {
        StatusWriter::labeled(
            exact(),
            LabelScope::node(NS, node),
            clock.clone(),
            Metrics::unregistered(),
            WriteBudget::unlimited(),
        )
    };
    let ab = writer("a-b");
    let peer = |p: &str| Labels::from([(LABEL_PEER.to_owned(), p.to_owned())]);
    ab.set_labeled(peer("c"), Desired::new(Default::default()));
    settle(&ab, &api).await;
    let first = ab.labeled_key(&peer("c")).unwrap();
    assert_eq!(first.name, "a-b-c");
    ab.set_labeled(peer("d"), Desired::new(Default::default()));
    settle(&ab, &api).await;
    assert_eq!(ab.labeled_key(&peer("c")), Some(first.clone()));
    assert_eq!(ab.labeled_key(&peer("d")).unwrap().name, "a-b-d");

    // Node `a`, peer `b-c`: `a-b-c` is taken by the other pair's object.
    let a = writer("a");
    a.set_labeled(peer("b-c"), Desired::new(Default::default()));
    settle(&a, &api).await;
    let other = a.labeled_key(&peer("b-c")).unwrap();
    assert!(other.name.starts_with("a-b-c-"), "{other}");
    assert_eq!(ab.labeled_key(&peer("c")), Some(first.clone()));
    let names: BTreeSet<String> = api.objects().into_keys().map(|k| k.name).collect();
    assert_eq!(names.len(), 3, "{names:?}");

    let id = |node: &str, peer: &str| {
        Labels::from([
            (LABEL_NODE.to_owned(), node.to_owned()),
            (LABEL_PEER.to_owned(), peer.to_owned()),
        ])
    };
    let ipv6 = id("Node_1", "2001:db8::1");
    assert_eq!(
        BGPSessionStatus::name(&ipv6).as_deref(),
        Some("node-1-2001-db8--1")
    );
    assert_eq!(
        BGPSessionStatus::generate_name(&ipv6),
        "node-1-2001-db8--1-"
    );
    // Dotted names stay valid subdomains (each part alphanumeric at both ends).
    assert_eq!(
        BGPSessionStatus::name(&id("-n1.example.", "peer-.x")).as_deref(),
        Some("n1.example.peer.x")
    );
    // Too long for a name: the server names it.
    assert_eq!(
        BGPSessionStatus::name(&id(&"n".repeat(200), &"p".repeat(60))),
        None
    );
    assert_eq!(ServiceBGPStatus::name(&ipv6), None);
    assert_eq!(ServiceBGPStatus::generate_name(&ipv6), "bgp-");
    // Failures of a create back off like any other request.
    assert_eq!(Class::of_code(503), Class::Transient);
}

/// The scope's own list refused (403: a returning API server whose RBAC
/// cache is not filled yet) is asked again within the transient backoff,
/// not after the 5 minutes of a refused write: every create of the writer
/// waits for it. Seen in bench-bgp-faults: a speaker started while the API
/// server was down wrote no ServiceBGPStatus for a new Service for minutes.
#[test]
fn a_refused_scope_list_is_retried_soon() {
    let mut e = Engine::<ServiceL2Status>::labeled(exact(), LabelScope::node(NS, "node-1"));
    let t = std::time::Instant::now();
    e.initial_sync_done();
    e.set_labeled(svc_labels("web"), Desired::new(l2("node-1", "web")));
    let list = e.poll(t);
    assert!(matches!(&list[..], [Action::List { .. }]), "{list:?}");
    e.complete(&list[0], Outcome::Failed(Class::Permanent), t);
    assert_eq!(e.poll(t), [], "not at once");
    let again = e.poll(t + Duration::from_secs(2));
    assert!(matches!(&again[..], [Action::List { .. }]), "{again:?}");
    e.complete(
        &again[0],
        Outcome::Listed(Vec::new()),
        t + Duration::from_secs(2),
    );
    let create = e.poll(t + Duration::from_secs(2));
    assert!(
        matches!(&create[..], [Action::CreateGenerated { .. }]),
        "{create:?}"
    );
}
