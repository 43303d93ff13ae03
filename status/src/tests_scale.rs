//! Tests of the status writer at scale (project issue 25): a missing CRD
//! backs off and starves no other writer (review H3), a restarted speaker
//! adopts its objects whatever the order of its first list and its desired
//! state (H5), and the gauges follow every change exactly (R12).

use std::sync::Arc;
use std::time::{Duration, Instant};

use config::api::v1beta1::{
    BGPSessionStatus, BGPSessionStatusStatus, ConfigurationState, MetalLBServiceL2Status,
    ServiceBGPStatus, ServiceL2Status,
};
use config::api::{LABEL_NODE, LABEL_PEER, LABEL_SERVICE_NAME, LABEL_SERVICE_NAMESPACE};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::{Harness, NS, exact, key};
use crate::configuration_state::{self, Component};
use crate::testing::{Call, FakeApi, FakeObject};
use crate::{
    Action, Class, Desired, Engine, FakeClock, LabelScope, Labels, Metrics, ObjectKey, Observed,
    Outcome, StatusObject, StatusWriter, WriteBudget, WriterConfig,
};

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

fn peer(p: &str) -> Labels {
    Labels::from([(LABEL_PEER.to_owned(), p.to_owned())])
}

fn labeled<K: StatusObject>(
    config: WriterConfig,
    clock: &Arc<FakeClock>,
    budget: &WriteBudget,
) -> StatusWriter<K> {
    StatusWriter::labeled(
        config,
        LabelScope::node(NS, "node-1"),
        clock.clone(),
        Metrics::unregistered(),
        budget.clone(),
    )
}

/// Runs the actions due now, at most `max` rounds (a writer that retries
/// at once would never stop).
async fn steps<K: StatusObject>(
    writer: &StatusWriter<K>,
    api: &FakeApi<K::Status>,
    max: usize,
) -> usize {
    let mut n = 0;
    for _ in 0..max {
        let ran = writer.step(api).await;
        if ran == 0 {
            break;
        }
        n += ran;
    }
    n
}

fn lists<S: Clone>(api: &FakeApi<S>) -> usize {
    api.calls()
        .iter()
        .filter(|c| matches!(c, Call::List(..)))
        .count()
}

// ----- H3: a missing CRD

/// Review H3: a speaker whose `BGPSessionStatus` CRD is missing (an upstream
/// MetalLB install's CRDs) got a 404 on its list and retried it at once,
/// forever, at the whole request budget of the process (20 requests/s), so
/// its `ServiceL2Status` writer wrote nothing. The list now backs off
/// (0.5 s doubling to 60 s, jittered), and the other writer's 600 objects
/// are written within the budget meanwhile; once the CRD is installed, the
/// session's object is written within the backoff's cap.
#[tokio::test]
async fn a_missing_crd_is_listed_with_backoff_and_starves_no_other_writer() {
    let clock = Arc::new(FakeClock::new());
    let budget = WriteBudget::new(20.0, 30);
    let sessions = labeled::<BGPSessionStatus>(WriterConfig::default(), &clock, &budget);
    let l2w = labeled::<ServiceL2Status>(exact(), &clock, &budget);
    let (sessions_api, l2_api) = (FakeApi::new(), FakeApi::new());
    sessions_api.set_kind_missing(true);
    sessions.set_labeled(peer("r1"), Desired::new(Default::default()));
    for i in 0..600 {
        let svc = format!("svc-{i}");
        l2w.set_labeled(svc_labels(&svc), Desired::new(l2("node-1", &svc)));
    }
    // Ten minutes in 50 ms ticks, the failing writer first at every tick.
    let tick = Duration::from_millis(50);
    let mut l2_done_at = None;
    for t in 1..=12_000u32 {
        clock.advance(tick);
        steps(&sessions, &sessions_api, 100).await;
        steps(&l2w, &l2_api, 100).await;
        if l2_done_at.is_none() && l2w.pending() == 0 && l2_api.objects().len() == 600 {
            l2_done_at = Some(t * 50);
        }
    }
    let tries = lists(&sessions_api);
    assert_eq!(sessions_api.calls().len(), tries, "nothing but lists");
    // 0.5 + 1 + ... + 32 s, then about one a minute: ~16 without jitter,
    // a few more with it (each delay is 80-100 % of the full one).
    assert!(
        (10..=25).contains(&tries),
        "{tries} lists of the missing kind in 10 minutes (12,000 before the fix)"
    );
    assert!(sessions.failed() > 0);
    let done = l2_done_at.expect("the other writer's objects are all written");
    // 601 requests at 20/s after a burst of 30: about 29 s.
    assert!(done <= 35_000, "other writer done after {done} ms");

    // The CRD is installed: listed and written within the cap (60 s).
    sessions_api.set_kind_missing(false);
    for _ in 0..1_220 {
        clock.advance(tick);
        steps(&sessions, &sessions_api, 100).await;
    }
    let k = sessions.labeled_key(&peer("r1")).expect("created");
    assert_eq!(k.name, "node-1-r1");
    assert!(sessions_api.object(&k).is_some());
    assert_eq!((sessions.pending(), sessions.failed()), (0, 0));
}

/// Review H3, name-keyed writers: a `ConfigurationState` whose CRD is
/// missing was read (nothing found), created (404) and read again at once,
/// in a loop bounded only by the budget. The create now backs off (and the
/// object is not read again between tries: a 404 created nothing).
#[tokio::test]
async fn a_missing_crd_is_created_with_backoff() {
    let h = Harness::<ConfigurationState>::new();
    h.api.set_kind_missing(true);
    let component = Component::Speaker {
        node: "node-1".into(),
    };
    let status = configuration_state::valid(&component, super::at(0));
    h.writer
        .set_desired(key(&component.name()), Desired::new(status));
    for _ in 0..12_000 {
        h.advance(50);
        steps(&h.writer, &h.api, 100).await;
    }
    let calls = h.api.calls();
    let creates = calls
        .iter()
        .filter(|c| matches!(c, Call::Create(_)))
        .count();
    // One read, then creates 0.5 s, 1 s, ... 32 s apart, then one a minute.
    assert!(
        (10..=20).contains(&creates) && calls.len() == creates + 1,
        "{creates} creates, {} requests in 10 minutes",
        calls.len()
    );
    h.api.set_kind_missing(false);
    h.advance(60_000);
    steps(&h.writer, &h.api, 100).await;
    assert!(h.api.object(&key(&component.name())).is_some());
    assert_eq!((h.writer.pending(), h.writer.failed()), (0, 0));
}

/// Review H3, fair share: the writers of a process share one budget; a kind
/// with a bulk to write (2,000 new objects, 100 s of budget) no longer holds
/// back another kind's write until it is done: writers waiting for a token
/// are served in turn.
#[tokio::test]
async fn one_kinds_bulk_does_not_hold_back_another_kinds_write() {
    let clock = Arc::new(FakeClock::new());
    let budget = WriteBudget::new(20.0, 30);
    let l2w = labeled::<ServiceL2Status>(exact(), &clock, &budget);
    let sessions = labeled::<BGPSessionStatus>(exact(), &clock, &budget);
    let (l2_api, sessions_api) = (FakeApi::new(), FakeApi::new());
    for i in 0..2_000 {
        let svc = format!("svc-{i}");
        l2w.set_labeled(svc_labels(&svc), Desired::new(l2("node-1", &svc)));
    }
    let tick = Duration::from_millis(50);
    for _ in 0..20 {
        clock.advance(tick);
        steps(&l2w, &l2_api, 100).await;
    }
    assert!(l2_api.calls().len() >= 30, "the bulk is under way");
    sessions.set_labeled(peer("r1"), Desired::new(Default::default()));
    let mut waited = Duration::ZERO;
    while sessions_api.objects().is_empty() {
        assert!(
            waited < Duration::from_secs(1),
            "the session's object waits behind the bulk"
        );
        clock.advance(tick);
        waited += tick;
        steps(&l2w, &l2_api, 100).await;
        steps(&sessions, &sessions_api, 100).await;
    }
    // The bulk still gets the rest of the budget: 2,001 requests at 20/s.
    for _ in 0..2_000 {
        clock.advance(tick);
        steps(&l2w, &l2_api, 100).await;
        steps(&sessions, &sessions_api, 100).await;
    }
    assert_eq!(l2_api.objects().len(), 2_000);
    assert_eq!(l2w.pending(), 0);
}

// ----- H5: adoption after a restart, in either order

fn pod(uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: format!("speaker-{uid}"),
        uid: uid.into(),
        ..Default::default()
    }
}

fn with_node(mut labels: Labels) -> Labels {
    labels.insert(LABEL_NODE.into(), "node-1".into());
    labels
}

/// What a speaker left behind: `web` and `db` (`ServiceL2Status`), owned
/// by the Pod `old`.
fn l2_left_behind(api: &FakeApi<MetalLBServiceL2Status>) {
    for (name, svc) in [("l2-aaaaa", "web"), ("l2-bbbbb", "db")] {
        api.insert_object(
            key(name),
            FakeObject {
                labels: with_node(svc_labels(svc)),
                owner: Some(pod("old")),
                status: l2("node-1", svc),
            },
        );
    }
}

/// The restarted speaker's desired set: `web` owned by the new Pod (its
/// object differs: one metadata write), `db` as it is (no write).
fn l2_restarted(writer: &StatusWriter<ServiceL2Status>) {
    writer.set_labeled(
        svc_labels("web"),
        Desired::new(l2("node-1", "web")).owner(Some(pod("new"))),
    );
    writer.set_labeled(svc_labels("db"), Desired::new(l2("node-1", "db")));
    writer.initial_sync_done();
}

/// The watch's initial list, as `watch_into` hands it in.
fn watch_list<K: StatusObject>(writer: &StatusWriter<K>, api: &FakeApi<K::Status>) {
    writer.observe_all_objects(api.objects().into_iter().map(|(k, o)| {
        let observed = Observed {
            status: o.status,
            labels: o.labels,
            owners: o.owner.into_iter().collect(),
            resource_version: None,
        };
        (k, observed)
    }));
}

fn writes_of<S: Clone>(api: &FakeApi<S>) -> Vec<Call> {
    api.calls()
        .into_iter()
        .filter(|c| !matches!(c, Call::Get(_) | Call::List(..)))
        .collect()
}

/// Review H5, the daemon's order: the writer lists its scope (and the
/// watch delivers its initial list) before the speaker's first pass hands
/// in the desired set. Before, every object was created again and the old
/// one pruned (3 writes each: POST, status, DELETE). Now the existing
/// objects are adopted: the one that differs costs one metadata write, the
/// one that matches none.
#[tokio::test]
async fn a_restarted_speaker_listing_first_adopts_its_objects() {
    let clock = Arc::new(FakeClock::new());
    let api = FakeApi::new();
    l2_left_behind(&api);
    let writer = labeled::<ServiceL2Status>(exact(), &clock, &WriteBudget::unlimited());
    steps(&writer, &api, 100).await;
    assert_eq!(lists(&api), 1, "listed before any desired state");
    watch_list(&writer, &api);
    l2_restarted(&writer);
    steps(&writer, &api, 100).await;
    assert_eq!(writes_of(&api), [Call::ApplyMetadata(key("l2-aaaaa"))]);
    assert_eq!(
        writer.labeled_key(&svc_labels("web")),
        Some(key("l2-aaaaa"))
    );
    assert_eq!(writer.labeled_key(&svc_labels("db")), Some(key("l2-bbbbb")));
    assert_eq!(api.objects().len(), 2);
    assert_eq!(
        api.object(&key("l2-aaaaa")).unwrap().owner,
        Some(pod("new"))
    );
    assert_eq!(writer.pending(), 0);
}

/// Review H5, the other order (the only one tested before): desired state
/// first, then the list. Same writes.
#[tokio::test]
async fn a_restarted_speaker_setting_first_adopts_its_objects() {
    let clock = Arc::new(FakeClock::new());
    let api = FakeApi::new();
    l2_left_behind(&api);
    let writer = labeled::<ServiceL2Status>(exact(), &clock, &WriteBudget::unlimited());
    l2_restarted(&writer);
    steps(&writer, &api, 100).await;
    watch_list(&writer, &api);
    steps(&writer, &api, 100).await;
    assert_eq!(writes_of(&api), [Call::ApplyMetadata(key("l2-aaaaa"))]);
    assert_eq!(
        writer.labeled_key(&svc_labels("web")),
        Some(key("l2-aaaaa"))
    );
    assert_eq!(writer.labeled_key(&svc_labels("db")), Some(key("l2-bbbbb")));
    assert_eq!(api.objects().len(), 2);
}

/// Review H5: a `BGPSessionStatus` keeps its name `<node>-<peer>` across
/// restarts in the daemon's order. Before, the restarted speaker created
/// `node-1-r1-<generated>` (the plain name being taken by its old object)
/// and pruned the old one, so the name alternated at every restart.
#[tokio::test]
async fn a_bgp_session_keeps_its_name_across_restarts_listing_first() {
    let clock = Arc::new(FakeClock::new());
    let api = FakeApi::new();
    let session = |established: bool| BGPSessionStatusStatus {
        node: "node-1".into(),
        peer: "r1".into(),
        bgp_status: if established { "Established" } else { "Active" }.into(),
        ..Default::default()
    };
    for restart in 0..3 {
        let writer = labeled::<BGPSessionStatus>(exact(), &clock, &WriteBudget::unlimited());
        steps(&writer, &api, 100).await;
        watch_list(&writer, &api);
        let before = writes_of(&api).len();
        writer.set_labeled(peer("r1"), Desired::new(session(restart % 2 == 1)));
        writer.initial_sync_done();
        steps(&writer, &api, 100).await;
        assert_eq!(
            writer.labeled_key(&peer("r1")),
            Some(key("node-1-r1")),
            "restart {restart}"
        );
        let names: Vec<ObjectKey> = api.objects().into_keys().collect();
        assert_eq!(names, [key("node-1-r1")], "restart {restart}");
        let writes = writes_of(&api)[before..].to_vec();
        let expected = if restart == 0 {
            vec![Call::Create(key("node-1-r1"))]
        } else {
            // The state changed across the restart: one status write.
            vec![Call::Apply(key("node-1-r1"))]
        };
        assert_eq!(writes, expected, "restart {restart}");
    }
}

// ----- R12: the gauges, kept per change

/// A small deterministic generator (xorshift64*): the same sequence of
/// operations at every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        usize::try_from(x >> 33).unwrap_or(0) % n
    }
}

/// An outcome for `action`, as a server could answer it (or a failure).
fn outcome_for(
    rng: &mut Rng,
    action: &Action<MetalLBServiceL2Status>,
    created: &mut u32,
) -> Outcome<MetalLBServiceL2Status> {
    if rng.below(5) == 0 {
        let class = [
            Class::Transient,
            Class::Conflict,
            Class::Permanent,
            Class::NotFound,
            Class::Timeout,
        ][rng.below(5)];
        return Outcome::Failed(class);
    }
    let echo = |d: &Desired<MetalLBServiceL2Status>| Observed {
        status: d.status.clone(),
        labels: d.labels.clone(),
        owners: d.owner.iter().cloned().collect(),
        resource_version: None,
    };
    match action {
        Action::Fetch(_) => {
            Outcome::Fetched((rng.below(2) == 0).then(|| Observed::status(l2("node-1", "x"))))
        }
        Action::Create(_, d) => Outcome::Written {
            sent: d.status.clone(),
            returned: echo(d),
        },
        Action::Apply(_, st) => match rng.below(4) {
            0 => Outcome::NotFound,
            _ => Outcome::Written {
                sent: st.clone(),
                returned: Observed::status(st.clone()),
            },
        },
        Action::ApplyMetadata(..) => Outcome::Written {
            sent: Default::default(),
            returned: Observed::status(Default::default()),
        },
        Action::Delete(_) => Outcome::Deleted,
        Action::List { .. } => Outcome::Listed(Vec::new()),
        Action::CreateGenerated { desired, .. } => {
            *created += 1;
            Outcome::Created {
                key: key(&format!("l2-{created:05}")),
                sent: desired.status.clone(),
                returned: echo(desired),
            }
        }
    }
}

/// Review R12: `pending` and `failed` (the gauges) are kept per change
/// instead of scanning every entry at each one; after every step of 20,000
/// random operations of every kind (sets, removals, observations, polls and
/// outcomes, failures, prunes, restarts of the list, forget_all), they equal
/// a count from scratch.
#[test]
fn the_counts_kept_equal_a_full_count_after_every_operation() {
    let mut e = Engine::<ServiceL2Status>::labeled(exact(), LabelScope::node(NS, "node-1"));
    let mut rng = Rng(0x5eed_1234_abcd_0042);
    let mut now = Instant::now();
    let mut in_flight: Vec<(Action<MetalLBServiceL2Status>, u64)> = Vec::new();
    let mut created = 0u32;
    let svc = |i: usize| format!("svc-{i}");
    for step in 0..20_000 {
        match rng.below(100) {
            0..=29 => {
                let i = rng.below(60);
                let mut d = Desired::new(l2("node-1", &svc(i)));
                if rng.below(3) == 0 {
                    d = d.owner(Some(pod(if rng.below(2) == 0 { "a" } else { "b" })));
                }
                e.set_labeled(svc_labels(&svc(i)), d);
            }
            30..=37 => e.remove_labeled(svc_labels(&svc(rng.below(60)))),
            38..=47 => {
                let name = format!("l2-{:05}", rng.below(created as usize + 20));
                let object = (rng.below(4) != 0).then(|| Observed {
                    status: l2("node-1", &svc(rng.below(60))),
                    labels: with_node(svc_labels(&svc(rng.below(60)))),
                    owners: Vec::new(),
                    resource_version: None,
                });
                e.observe_object(key(&name), object);
            }
            48..=52 => {
                let i = rng.below(20);
                e.set_desired(key(&format!("named-{i}")), Desired::new(l2("node-1", "n")));
            }
            53..=54 => e.remove(&key(&format!("named-{}", rng.below(20)))),
            55..=74 => {
                let epoch = e.epoch();
                in_flight.extend(e.poll(now).into_iter().map(|a| (a, epoch)));
            }
            75..=92 => {
                if !in_flight.is_empty() {
                    let (action, epoch) = in_flight.swap_remove(rng.below(in_flight.len()));
                    let outcome = outcome_for(&mut rng, &action, &mut created);
                    if epoch == e.epoch() {
                        e.complete(&action, outcome, now);
                    }
                }
            }
            93 => e.initial_sync_done(),
            94 => {
                e.prune_unwanted();
            }
            95 => e.delete_others(svc_labels(&svc(rng.below(60)))),
            96 => {
                e.abandon_in_flight();
                in_flight.clear();
            }
            97 if rng.below(10) == 0 => {
                e.forget_all();
            }
            _ => now += Duration::from_millis(rng.below(3_000) as u64),
        }
        assert_eq!(
            (e.pending(), e.failed()),
            e.counts_scanned(),
            "after step {step}"
        );
    }
    // The sequence went through every state worth counting.
    assert!(created > 100, "{created} objects created");
}

/// The gauges of a writer after a bulk of 10,000 sets, then half of them
/// removed and the rest written: exact at every point.
#[tokio::test]
async fn the_gauges_stay_exact_through_a_bulk() {
    let h = Harness::<ServiceBGPStatus>::new();
    let gauge = |name: &str| h.counter(name, &[("kind", "ServiceBGPStatus")]);
    for i in 0..10_000 {
        h.writer
            .set_desired(key(&format!("o{i}")), Desired::new(super::bgp(&["r1"])));
    }
    assert_eq!(gauge("metallb_rs_status_pending"), 10_000);
    h.api.fail_next(100, "etcdserver: leader changed");
    h.settle().await;
    assert_eq!(gauge("metallb_rs_status_failed"), 100);
    assert_eq!(gauge("metallb_rs_status_pending"), 100);
    // The first 100 requests failed: those of the objects kept still count.
    let odd = |c: &Call| {
        c.key()
            .and_then(|k| k.name[1..].parse::<u32>().ok())
            .is_some_and(|i| i % 2 == 1)
    };
    let failed_kept = h.api.calls()[..100].iter().filter(|c| odd(c)).count() as u64;
    assert!(failed_kept > 0 && failed_kept < 100);
    for i in (0..10_000).step_by(2) {
        h.writer.remove(&key(&format!("o{i}")));
    }
    // The others are now deletes (a delete starts afresh).
    assert_eq!(gauge("metallb_rs_status_failed"), failed_kept);
    assert_eq!(gauge("metallb_rs_status_pending"), 5_000 + failed_kept);
    h.settle().await;
    h.advance(1_000);
    h.settle().await;
    assert_eq!(
        (
            gauge("metallb_rs_status_pending"),
            gauge("metallb_rs_status_failed")
        ),
        (0, 0)
    );
    assert_eq!(h.api.objects().len(), 5_000);
}

/// Review H3 in the daemon's setup: three writers sharing one budget
/// (20/s, bursts of 30), each in its own `run` loop on the system clock
/// (tokio's, paused: a writer that spun waiting for its turn would hang
/// this test). The `BGPSessionStatus` CRD is missing for 10 minutes: its
/// writer lists about once a minute, and the two others write their 600
/// objects each within the budget.
#[tokio::test(start_paused = true)]
async fn the_daemons_writers_in_their_loops_with_a_missing_crd() {
    let budget = WriteBudget::new(20.0, 30);
    let clock: Arc<dyn crate::Clock> = Arc::new(crate::SystemClock);
    let scope = LabelScope::node(NS, "node-1");
    let writer = |budget: &WriteBudget| {
        (
            scope.clone(),
            clock.clone(),
            Metrics::unregistered(),
            budget.clone(),
        )
    };
    let (s, c, m, b) = writer(&budget);
    let sessions: StatusWriter<BGPSessionStatus> =
        StatusWriter::labeled(WriterConfig::default(), s, c, m, b);
    let (s, c, m, b) = writer(&budget);
    let l2w: StatusWriter<ServiceL2Status> =
        StatusWriter::labeled(WriterConfig::default(), s, c, m, b);
    let (s, c, m, b) = writer(&budget);
    let bgpw: StatusWriter<ServiceBGPStatus> =
        StatusWriter::labeled(WriterConfig::default(), s, c, m, b);
    let sessions_api = Arc::new(FakeApi::new());
    let l2_api = Arc::new(FakeApi::new());
    let bgp_api = Arc::new(FakeApi::new());
    sessions_api.set_kind_missing(true);
    sessions.set_labeled(peer("r1"), Desired::new(Default::default()));
    for i in 0..600 {
        let svc = format!("svc-{i}");
        l2w.set_labeled(svc_labels(&svc), Desired::new(l2("node-1", &svc)));
        bgpw.set_labeled(svc_labels(&svc), Desired::new(super::bgp(&["r1"])));
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let tasks = [
        tokio::spawn({
            let (w, api, stop) = (sessions.clone(), sessions_api.clone(), until_stopped());
            async move { w.run(api, stop).await }
        }),
        tokio::spawn({
            let (w, api, stop) = (l2w.clone(), l2_api.clone(), until_stopped());
            async move { w.run(api, stop).await }
        }),
        tokio::spawn({
            let (w, api, stop) = (bgpw.clone(), bgp_api.clone(), until_stopped());
            async move { w.run(api, stop).await }
        }),
    ];
    let start = tokio::time::Instant::now();
    let mut both_done = None;
    while start.elapsed() < Duration::from_secs(600) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if both_done.is_none() && l2w.pending() == 0 && bgpw.pending() == 0 {
            both_done = Some(start.elapsed());
        }
    }
    stop.send(true).unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let tries = lists(&sessions_api);
    assert!(
        (10..=25).contains(&tries),
        "{tries} lists of the missing kind"
    );
    // 1,202 requests at 20/s after a burst of 30: about 59 s.
    let done = both_done.expect("both other writers done");
    assert!(done <= Duration::from_secs(65), "done after {done:?}");
    assert_eq!(
        (l2_api.objects().len(), bgp_api.objects().len()),
        (600, 600)
    );
    // Nothing but the budget's requests: each object once, one list each.
    assert_eq!(l2_api.calls().len() + bgp_api.calls().len(), 1_202);
    // Each loop wakes for a token, an answer or a new desired state, no
    // more (a writer waiting for its turn woke every millisecond: 10^5).
    let turns = sessions.turns() + l2w.turns() + bgpw.turns();
    assert!(turns < 6_000, "{turns} turns of the writers' loops");
}

/// A read that failed, then one that finds the object as wanted: nothing
/// more to do, and nothing counted as failed (a read keeps the failures in
/// a row only while a write is still due).
#[tokio::test]
async fn a_failed_read_then_a_good_one_leaves_nothing_failed() {
    let h = Harness::<ServiceBGPStatus>::new();
    h.api.insert(key("a"), super::bgp(&["r1"]));
    h.writer
        .set_desired(key("a"), Desired::new(super::bgp(&["r1"])));
    h.api.fail_next(1, "etcdserver: leader changed");
    h.settle().await;
    assert_eq!(h.writer.failed(), 1);
    h.advance(500);
    h.settle().await;
    assert_eq!(h.api.calls(), [Call::Get(key("a")), Call::Get(key("a"))]);
    assert_eq!((h.writer.pending(), h.writer.failed()), (0, 0));
    assert_eq!(
        h.counter("metallb_rs_status_failed", &[("kind", "ServiceBGPStatus")]),
        0
    );
}
