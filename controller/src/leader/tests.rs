//! Unit tests of the election: the pure core with a fake clock, a simulated
//! API server shared by several electors (random latencies, lost requests and
//! answers, crashes, restarts, releases) checking that no two ever lead at
//! the same instant, and the tokio edge on an in-memory server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::ObjectMeta;
use proptest::prelude::*;
use tokio::sync::{oneshot, watch};

use super::testing::{LeaseServer, MemoryLeaseApi};
use super::*;

/// The fake clock: instants and wall times `ms` milliseconds after a fixed
/// origin.
fn t(ms: u64) -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now) + Duration::from_millis(ms)
}

fn ms(i: Instant) -> u64 {
    u64::try_from((i - t(0)).as_millis()).unwrap()
}

fn wall(ms: u64) -> Timestamp {
    Timestamp::from_millisecond(1_767_225_600_000 + i64::try_from(ms).unwrap()).unwrap()
}

fn record(holder: &str, duration: i32, transitions: i32) -> LeaseRecord {
    LeaseRecord {
        holder_identity: holder.to_owned(),
        lease_duration_seconds: duration,
        acquire_time: Some(wall(0)),
        renew_time: Some(wall(0)),
        lease_transitions: transitions,
    }
}

fn elector(id: &str, at: u64) -> Elector {
    Elector::new(id, LeaseConfig::default(), t(at)).unwrap()
}

/// Polls `e` at `now` and, when it asks, answers at once from `server`:
/// the transitions caused.
fn step(e: &mut Elector, server: &mut LeaseServer, now: u64) -> Vec<Transition> {
    let mut out: Vec<Transition> = e.tick(t(now)).into_iter().collect();
    while let Step::Send(request) = e.poll(t(now), wall(now)) {
        let response = server.handle(&request);
        out.extend(e.on_response(t(now), response));
    }
    out
}

/// Runs `e` with instant answers from `from` to `to` (ms), calling
/// `before(now, server)` at each instant it wakes; the transitions with
/// their times.
fn drive(
    e: &mut Elector,
    server: &mut LeaseServer,
    from: u64,
    to: u64,
    mut before: impl FnMut(u64, &mut LeaseServer),
) -> Vec<(u64, Transition)> {
    let mut out = Vec::new();
    let mut now = from;
    while now <= to {
        before(now, server);
        out.extend(step(e, server, now).into_iter().map(|tr| (now, tr)));
        let Step::Wait(until) = e.poll(t(now), wall(now)) else {
            unreachable!("step answered every request")
        };
        let deadline = e.leader_until().map_or(u64::MAX, ms);
        now = ms(until).min(deadline).max(now + 1);
    }
    out
}

#[test]
fn an_absent_lease_is_created_held_by_us() {
    let mut server = LeaseServer::new();
    let mut e = elector("a", 0);
    assert_eq!(e.poll(t(0), wall(0)), Step::Send(Request::Get));
    assert_eq!(e.on_response(t(5), Response::Read(None)), None);
    assert!(!e.is_leader(t(5)));
    let Step::Send(Request::Create(r)) = e.poll(t(10), wall(10)) else {
        panic!("expected a create")
    };
    assert_eq!(
        r,
        LeaseRecord {
            holder_identity: "a".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(wall(10)),
            renew_time: Some(wall(10)),
            lease_transitions: 0,
        }
    );
    let written = server.handle(&Request::Create(r));
    assert_eq!(e.on_response(t(30), written), Some(Transition::Acquired));
    assert!(e.is_leader(t(30)));
    // Leadership counts from when the write was sent, not answered.
    assert_eq!(e.leader_until(), Some(t(10_010)));
    assert!(e.is_leader(t(10_009)));
    assert!(!e.is_leader(t(10_010)));
}

#[test]
fn the_leader_renews_every_retry_period_keeping_acquire_time_and_transitions() {
    let mut server = LeaseServer::new();
    server.put(LeaseRecord::default());
    let mut e = elector("a", 0);
    assert_eq!(step(&mut e, &mut server, 0), vec![Transition::Acquired]);
    let acquired = server.lease().unwrap().clone();
    assert_eq!(acquired.record.lease_transitions, 1);
    assert_eq!(e.poll(t(1_999), wall(1_999)), Step::Wait(t(2_000)));
    // The renewal writes at the version it wrote, without reading first.
    let Step::Send(request) = e.poll(t(2_000), wall(2_000)) else {
        panic!("expected a renewal")
    };
    assert_eq!(
        request,
        Request::Update {
            record: LeaseRecord {
                holder_identity: "a".into(),
                lease_duration_seconds: 15,
                acquire_time: Some(wall(0)),
                renew_time: Some(wall(2_000)),
                lease_transitions: 1,
            },
            resource_version: acquired.resource_version,
        }
    );
    assert_eq!(e.on_response(t(2_050), server.handle(&request)), None);
    assert_eq!(e.leader_until(), Some(t(12_000)));
    // A minute of renewals: leading throughout, one write per 2 s.
    let transitions = drive(&mut e, &mut server, 2_050, 62_000, |_, _| {});
    assert_eq!(transitions, vec![]);
    assert!(e.is_leader(t(62_000)));
    assert_eq!(server.lease().unwrap().resource_version, "32");
}

#[test]
fn a_slow_renewal_counts_from_when_it_was_sent() {
    let mut server = LeaseServer::new();
    let mut e = elector("a", 0);
    step(&mut e, &mut server, 0);
    let Step::Send(renewal) = e.poll(t(2_000), wall(2_000)) else {
        panic!("expected a renewal")
    };
    // Answered at 9 s: leadership until 2 s + 10 s.
    assert_eq!(e.on_response(t(9_000), server.handle(&renewal)), None);
    assert_eq!(e.leader_until(), Some(t(12_000)));

    let Step::Send(renewal) = e.poll(t(11_000), wall(11_000)) else {
        panic!("expected a renewal")
    };
    assert_eq!(
        e.tick(t(12_000)),
        Some(Transition::Lost(LostReason::RenewDeadline))
    );
    // Answered after its own deadline (11 s + 10 s): too late to lead on.
    assert_eq!(e.on_response(t(21_000), server.handle(&renewal)), None);
    assert!(!e.is_leader(t(21_000)));
    assert_eq!(e.leader_until(), None);
}

#[test]
fn a_fresh_foreign_holder_blocks_us_for_a_lease_duration_of_our_clock() {
    let mut server = LeaseServer::new();
    // Renewed, by its clock, an hour ago: never trusted.
    server.put(LeaseRecord {
        renew_time: Some(wall(0) - jiff_hours(1)),
        ..record("b", 15, 3)
    });
    let mut e = elector("a", 0);
    let transitions = drive(&mut e, &mut server, 0, 15_999, |_, _| {});
    assert_eq!(transitions, vec![]);
    assert_eq!(server.lease().unwrap().resource_version, "1");
    assert_eq!(e.observed_holder(), Some("b"));
    // The read at 16 s (every 2 s from 0) finds it 15 s old by our clock.
    let transitions = drive(&mut e, &mut server, 16_000, 16_000, |_, _| {});
    assert_eq!(transitions, vec![(16_000, Transition::Acquired)]);
    let taken = &server.lease().unwrap().record;
    assert_eq!(taken.holder_identity, "a");
    assert_eq!(taken.lease_transitions, 4);
    assert_eq!(taken.acquire_time, Some(wall(16_000)));
    assert_eq!(taken.renew_time, Some(wall(16_000)));
}

fn jiff_hours(h: i64) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_hours(h)
}

#[test]
fn a_renewing_foreign_holder_keeps_us_standing_by() {
    let mut server = LeaseServer::new();
    let mut e = elector("a", 0);
    // b renews every 5 s (its renewals are all we see: a new version).
    let transitions = drive(&mut e, &mut server, 0, 120_000, |now, server| {
        if now % 5_000 < 2_000
            && server
                .lease()
                .is_none_or(|l| l.record.holder_identity == "b")
        {
            server.put(record("b", 15, 0));
        }
    });
    assert_eq!(transitions, vec![]);
    assert_eq!(server.lease().unwrap().record.holder_identity, "b");
    assert!(!e.is_leader(t(120_000)));
}

#[test]
fn a_foreign_record_without_a_duration_waits_ours() {
    let mut server = LeaseServer::new();
    server.put(LeaseRecord {
        lease_duration_seconds: 0,
        ..record("b", 0, 0)
    });
    let mut e = elector("a", 0);
    assert_eq!(drive(&mut e, &mut server, 0, 14_999, |_, _| {}), vec![]);
    let transitions = drive(&mut e, &mut server, 15_000, 20_000, |_, _| {});
    assert_eq!(transitions, vec![(16_000, Transition::Acquired)]);
}

#[test]
fn a_free_lease_is_taken_at_once_with_one_more_transition() {
    let mut server = LeaseServer::new();
    server.put(LeaseRecord {
        lease_duration_seconds: 1,
        ..record("", 1, 7)
    });
    let mut e = elector("a", 0);
    assert_eq!(step(&mut e, &mut server, 0), vec![Transition::Acquired]);
    assert_eq!(server.lease().unwrap().record.lease_transitions, 8);
}

#[test]
fn a_lost_create_race_makes_us_stand_by() {
    let mut server = LeaseServer::new();
    let mut e = elector("a", 0);
    assert_eq!(e.poll(t(0), wall(0)), Step::Send(Request::Get));
    e.on_response(t(1), server.handle(&Request::Get));
    let Step::Send(create) = e.poll(t(1), wall(1)) else {
        panic!("expected a create")
    };
    // b creates it first.
    server.put(record("b", 15, 0));
    assert_eq!(server.handle(&create), Response::Conflict);
    assert_eq!(e.on_response(t(2), Response::Conflict), None);
    assert_eq!(e.poll(t(2), wall(2)), Step::Wait(t(2_002)));
    assert_eq!(e.poll(t(2_002), wall(2_002)), Step::Send(Request::Get));
    e.on_response(t(2_003), server.handle(&Request::Get));
    assert_eq!(e.poll(t(2_003), wall(2_003)), Step::Wait(t(4_003)));
    assert_eq!(e.observed_holder(), Some("b"));
    assert_eq!(server.lease().unwrap().record.holder_identity, "b");
}

/// Transitions and when (ms).
type Timeline = Vec<(u64, Transition)>;

/// Two electors, instant answers; `a` leads from 0, its requests all fail
/// from `a_cut_off` on.
fn partitioned_leader(a_cut_off: u64) -> (Timeline, Timeline) {
    let mut server = LeaseServer::new();
    let mut a = elector("a", 0);
    let mut b = elector("b", 1);
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let mut wake_a = 0;
    let mut wake_b = 1;
    let mut now = 0;
    while now <= 40_000 {
        if now == wake_a || a.leader_until().is_some_and(|u| ms(u) == now) {
            ta.extend(a.tick(t(now)).map(|x| (now, x)));
            while let Step::Send(request) = a.poll(t(now), wall(now)) {
                let response = if now >= a_cut_off {
                    Response::Failed
                } else {
                    server.handle(&request)
                };
                ta.extend(a.on_response(t(now), response).map(|x| (now, x)));
            }
            let Step::Wait(u) = a.poll(t(now), wall(now)) else {
                unreachable!()
            };
            wake_a = ms(u);
        }
        if now == wake_b {
            tb.extend(step(&mut b, &mut server, now).into_iter().map(|x| (now, x)));
            let Step::Wait(u) = b.poll(t(now), wall(now)) else {
                unreachable!()
            };
            wake_b = ms(u);
        }
        assert!(
            !(a.is_leader(t(now)) && b.is_leader(t(now))),
            "both lead at {now} ms"
        );
        now += 1;
    }
    (ta, tb)
}

#[test]
fn a_leader_that_cannot_renew_stops_before_others_may_take_over() {
    // a's last successful write was sent at 0 (acquisition); b saw it at 1.
    let (a, b) = partitioned_leader(1);
    assert_eq!(
        a,
        vec![
            (0, Transition::Acquired),
            (10_000, Transition::Lost(LostReason::RenewDeadline))
        ]
    );
    // b reads every 2 s from 1 ms: the first read at least 15 s after it saw
    // a's last write (at 1 ms) takes over.
    assert_eq!(b, vec![(16_001, Transition::Acquired)]);

    // Cut off after renewals at 2, 4 and 6 s: lost at 16 s; b takes over at
    // its first read 15 s after it saw the 6 s renewal (at its 6.001 s read).
    let (a, b) = partitioned_leader(6_001);
    assert_eq!(
        a,
        vec![
            (0, Transition::Acquired),
            (16_000, Transition::Lost(LostReason::RenewDeadline))
        ]
    );
    assert_eq!(b, vec![(22_001, Transition::Acquired)]);
}

#[test]
fn a_leader_that_finds_another_holder_stops_at_once() {
    let mut server = LeaseServer::new();
    let mut a = elector("a", 0);
    step(&mut a, &mut server, 0);
    // An admin hands the lease to b: a's renewal conflicts, and its read at
    // once (not a retry period later) finds b.
    server.put(record("b", 15, 1));
    assert_eq!(
        step(&mut a, &mut server, 2_000),
        vec![Transition::Lost(LostReason::HeldBy("b".into()))]
    );
    assert!(!a.is_leader(t(2_000)));
    // Then a stands by like any candidate.
    assert_eq!(drive(&mut a, &mut server, 2_001, 16_999, |_, _| {}), vec![]);
}

#[test]
fn a_leader_whose_lease_is_deleted_stops_at_once_and_creates_it_again() {
    let mut server = LeaseServer::new();
    let mut a = elector("a", 0);
    step(&mut a, &mut server, 0);
    server.delete();
    // The renewal fails (404); the read finds no lease: lost, then created.
    assert_eq!(step(&mut a, &mut server, 2_000), vec![]);
    assert_eq!(
        step(&mut a, &mut server, 4_000),
        vec![Transition::Lost(LostReason::NotHeld), Transition::Acquired]
    );
    assert_eq!(server.lease().unwrap().record.holder_identity, "a");
}

#[test]
fn release_frees_the_lease_and_a_standby_takes_it_at_once() {
    let mut server = LeaseServer::new();
    let mut a = elector("a", 0);
    let mut b = elector("b", 0);
    step(&mut a, &mut server, 0);
    step(&mut b, &mut server, 1);
    assert_eq!(drive(&mut b, &mut server, 2, 2_001, |_, _| {}), vec![]);
    assert_eq!(b.observed_holder(), Some("a"));
    let transitions = server.lease().unwrap().record.lease_transitions;

    let request = a.release(t(3_000), wall(3_000)).unwrap();
    // Leadership ends before the release is even sent.
    assert!(!a.is_leader(t(3_000)));
    let version = server.lease().unwrap().resource_version.clone();
    assert_eq!(
        request,
        Request::Update {
            record: LeaseRecord {
                holder_identity: String::new(),
                lease_duration_seconds: 1,
                acquire_time: Some(wall(3_000)),
                renew_time: Some(wall(3_000)),
                lease_transitions: transitions,
            },
            resource_version: version,
        }
    );
    assert_eq!(
        a.on_response(t(3_010), server.handle(&request)),
        Some(Transition::Released)
    );
    assert_eq!(a.release(t(3_010), wall(3_010)), None);
    assert!(!a.is_leader(t(3_010)));

    // b's next read (at 2.001 s + 2 s) takes it, not 15 s later.
    let b_transitions = drive(&mut b, &mut server, 3_000, 6_000, |_, _| {});
    assert_eq!(b_transitions, vec![(4_001, Transition::Acquired)]);
    assert_eq!(
        server.lease().unwrap().record.lease_transitions,
        transitions + 1
    );
}

#[test]
fn release_after_an_unanswered_renewal_reads_first() {
    let mut server = LeaseServer::new();
    let mut a = elector("a", 0);
    step(&mut a, &mut server, 0);
    let Step::Send(renewal) = a.poll(t(2_000), wall(2_000)) else {
        panic!("expected a renewal")
    };
    // Applied, but the answer never comes (shutdown cancelled the call).
    server.handle(&renewal);
    assert_eq!(a.release(t(2_100), wall(2_100)), Some(Request::Get));
    assert!(!a.is_leader(t(2_100)));
    assert_eq!(a.on_response(t(2_110), server.handle(&Request::Get)), None);
    let Some(release) = a.release(t(2_110), wall(2_110)) else {
        panic!("expected the release")
    };
    assert_eq!(
        a.on_response(t(2_120), server.handle(&release)),
        Some(Transition::Released)
    );
    assert_eq!(server.lease().unwrap().record.holder(), None);
}

#[test]
fn release_after_a_conflict_rereads_and_releases_only_its_own_lease() {
    let mut server = LeaseServer::new();
    let mut a = elector("a", 0);
    step(&mut a, &mut server, 0);
    // Someone else writes (a label, say): same holder, new version.
    let mut same = server.lease().unwrap().record.clone();
    same.renew_time = Some(wall(50));
    server.put(same);
    let release = a.release(t(100), wall(100)).unwrap();
    assert_eq!(server.handle(&release), Response::Conflict);
    assert_eq!(a.on_response(t(110), Response::Conflict), None);
    assert_eq!(a.release(t(110), wall(110)), Some(Request::Get));
    a.on_response(t(120), server.handle(&Request::Get));
    let release = a.release(t(120), wall(120)).unwrap();
    assert_eq!(
        a.on_response(t(130), server.handle(&release)),
        Some(Transition::Released)
    );

    // A lease now held by b is left alone.
    let mut a = elector("a", 0);
    let mut server = LeaseServer::new();
    step(&mut a, &mut server, 0);
    server.put(record("b", 15, 1));
    let release = a.release(t(100), wall(100)).unwrap();
    assert_eq!(a.on_response(t(110), server.handle(&release)), None);
    assert_eq!(a.release(t(110), wall(110)), Some(Request::Get));
    a.on_response(t(120), server.handle(&Request::Get));
    assert_eq!(a.release(t(120), wall(120)), None);
    assert_eq!(server.lease().unwrap().record.holder(), Some("b"));
}

#[test]
fn a_candidate_releases_nothing_unless_its_write_may_have_landed() {
    let mut server = LeaseServer::new();
    server.put(record("b", 15, 0));
    let mut a = elector("a", 0);
    step(&mut a, &mut server, 0);
    assert_eq!(a.release(t(10), wall(10)), None);

    // A create whose answer was lost may have made us the holder.
    let mut server = LeaseServer::new();
    let mut a = elector("a", 0);
    a.poll(t(0), wall(0));
    a.on_response(t(0), Response::Read(None));
    let Step::Send(create) = a.poll(t(0), wall(0)) else {
        panic!("expected a create")
    };
    server.handle(&create);
    assert_eq!(a.on_response(t(5), Response::Failed), None);
    assert!(!a.is_leader(t(5)));
    assert_eq!(a.release(t(10), wall(10)), Some(Request::Get));
    a.on_response(t(11), server.handle(&Request::Get));
    assert!(matches!(
        a.release(t(11), wall(11)),
        Some(Request::Update { .. })
    ));
}

#[test]
fn decide_covers_every_case() {
    let config = LeaseConfig::default();
    let at = |lease: Option<Observed>, ms| Observation { lease, at: t(ms) };
    let seen = |record, rv: &str| {
        Some(Observed {
            record,
            resource_version: rv.into(),
        })
    };
    assert_eq!(decide(None, "a", &config, t(0), wall(0)), Decision::Observe);
    assert_eq!(
        decide(Some(&at(None, 0)), "a", &config, t(0), wall(5)),
        Decision::Create(LeaseRecord {
            holder_identity: "a".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(wall(5)),
            renew_time: Some(wall(5)),
            lease_transitions: 0,
        })
    );
    // Ours: renewed, whatever its age.
    let ours = LeaseRecord {
        acquire_time: Some(wall(1)),
        ..record("a", 15, 2)
    };
    assert_eq!(
        decide(
            Some(&at(seen(ours, "9"), 0)),
            "a",
            &config,
            t(99_000),
            wall(7)
        ),
        Decision::Renew {
            record: LeaseRecord {
                acquire_time: Some(wall(1)),
                renew_time: Some(wall(7)),
                ..record("a", 15, 2)
            },
            resource_version: "9".into(),
        }
    );
    // Another's, with its own duration (30 s), counted from our observation.
    let theirs = seen(record("b", 30, 2), "9");
    assert_eq!(
        decide(
            Some(&at(theirs.clone(), 1_000)),
            "a",
            &config,
            t(30_999),
            wall(7)
        ),
        Decision::StandBy {
            holder: "b".into(),
            expires: t(31_000),
        }
    );
    assert_eq!(
        decide(Some(&at(theirs, 1_000)), "a", &config, t(31_000), wall(7)),
        Decision::TryAcquire {
            record: LeaseRecord {
                acquire_time: Some(wall(7)),
                renew_time: Some(wall(7)),
                ..record("a", 15, 3)
            },
            resource_version: "9".into(),
        }
    );
    // Free: taken whatever its age.
    assert!(matches!(
        decide(Some(&at(seen(record("", 1, 0), "3"), 0)), "a", &config, t(0), wall(0)),
        Decision::TryAcquire { record, .. } if record.lease_transitions == 1
    ));
}

#[test]
fn durations_are_checked_as_client_go_does() {
    let ok = LeaseConfig::default();
    assert_eq!(ok.validate(), Ok(()));
    let with = |lease: u64, renew: u64, retry: u64| LeaseConfig {
        lease_duration: Duration::from_millis(lease),
        renew_deadline: Duration::from_millis(renew),
        retry_period: Duration::from_millis(retry),
    };
    assert_eq!(with(1_000, 500, 100).validate(), Ok(()));
    assert!(matches!(
        with(1_500, 500, 100).validate(),
        Err(ConfigError::LeaseDuration(_))
    ));
    assert!(matches!(
        with(0, 0, 0).validate(),
        Err(ConfigError::LeaseDuration(_))
    ));
    assert!(matches!(
        with(15_000, 15_000, 2_000).validate(),
        Err(ConfigError::RenewDeadline { .. })
    ));
    assert!(matches!(
        with(15_000, 0, 2_000).validate(),
        Err(ConfigError::RenewDeadline { .. })
    ));
    assert!(matches!(
        with(15_000, 2_400, 2_000).validate(),
        Err(ConfigError::RetryPeriod { .. })
    ));
    assert!(matches!(
        with(15_000, 10_000, 0).validate(),
        Err(ConfigError::RetryPeriod { .. })
    ));
    assert_eq!(
        Elector::new("", ok, t(0)).err(),
        Some(ConfigError::EmptyIdentity)
    );
    assert_eq!(
        ConfigError::RenewDeadline {
            renew_deadline: Duration::from_secs(15),
            lease_duration: Duration::from_secs(15),
        }
        .to_string(),
        "renew deadline 15s must be positive and shorter than the lease duration 15s"
    );
}

#[test]
fn records_map_to_lease_specs_keeping_unknown_fields() {
    let mut spec = LeaseSpec {
        strategy: Some("OldestEmulationVersion".into()),
        preferred_holder: Some("c".into()),
        holder_identity: Some("old".into()),
        ..LeaseSpec::default()
    };
    let r = LeaseRecord {
        acquire_time: Some(wall(1)),
        renew_time: Some(wall(2)),
        ..record("a", 15, 4)
    };
    r.apply_to(&mut spec);
    assert_eq!(spec.strategy.as_deref(), Some("OldestEmulationVersion"));
    assert_eq!(spec.preferred_holder.as_deref(), Some("c"));
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(LeaseRecord::from_spec(Some(&spec)), r);
    assert_eq!(LeaseRecord::from_spec(None), LeaseRecord::default());
    assert_eq!(LeaseRecord::from_spec(None).holder(), None);
    // MicroTime serializes with microseconds, as the API server expects.
    let json = serde_json_value(&spec);
    assert_eq!(json["renewTime"], "2026-01-01T00:00:00.002000Z");
    assert_eq!(json["leaseDurationSeconds"], 15);
    assert_eq!(json["leaseTransitions"], 4);
}

fn serde_json_value(spec: &LeaseSpec) -> serde_json::Value {
    let lease = Lease {
        metadata: ObjectMeta::default(),
        spec: Some(spec.clone()),
    };
    let text = k8s_openapi::serde_json::to_string(&lease).unwrap();
    let value: k8s_openapi::serde_json::Value = k8s_openapi::serde_json::from_str(&text).unwrap();
    value["spec"].clone()
}

#[test]
fn updates_keep_the_object_as_last_read() {
    let last = Lease {
        metadata: ObjectMeta {
            name: Some("l".into()),
            namespace: Some("ns".into()),
            resource_version: Some("7".into()),
            labels: Some(BTreeMap::from([("k".to_owned(), "v".to_owned())])),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            strategy: Some("s".into()),
            ..LeaseSpec::default()
        }),
    };
    let r = record("a", 15, 1);
    let kept = lease_for_update(Some(&last), "ns", "l", &r, "7");
    assert_eq!(kept.metadata.labels, last.metadata.labels);
    assert_eq!(kept.spec.as_ref().unwrap().strategy.as_deref(), Some("s"));
    assert_eq!(observed(&kept).unwrap().record, r);
    // Another version: a bare object at the version asked for.
    let bare = lease_for_update(Some(&last), "ns", "l", &r, "8");
    assert_eq!(bare.metadata.labels, None);
    assert_eq!(bare.metadata.name.as_deref(), Some("l"));
    assert_eq!(bare.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(bare.metadata.resource_version.as_deref(), Some("8"));
    assert_eq!(observed(&bare).unwrap().record, r);
    assert!(observed(&bare_lease("ns", "l")).is_err());
}

#[test]
fn conflicts_are_told_from_other_errors() {
    let api = |code: u16, reason: &str| {
        ApiError::from(kube::Error::Api(
            kube::core::Status::failure("m", reason)
                .with_code(code)
                .boxed(),
        ))
    };
    assert!(matches!(api(409, "Conflict"), ApiError::Conflict(_)));
    assert!(matches!(api(409, "AlreadyExists"), ApiError::Conflict(_)));
    assert!(matches!(api(404, "NotFound"), ApiError::Other(_)));
    assert!(matches!(api(403, "Forbidden"), ApiError::Other(_)));
}

#[test]
fn identities_are_the_pod_name_or_the_host_name_and_a_random_suffix() {
    // The same Pod is the same holder (a restarted container re-acquires at once).
    assert_eq!(identity("controller-7d9f"), "controller-7d9f");
    let a = identity("");
    let b = identity("");
    assert_ne!(a, b);
    let (name, suffix) = a.rsplit_once('_').unwrap();
    assert!(!name.is_empty());
    assert_eq!(suffix.len(), 16);
    assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
}

#[tokio::test]
async fn a_restarted_pod_takes_its_lease_back_at_once() {
    // The first process holds the Lease and dies without releasing it.
    let server = Arc::new(Mutex::new(LeaseServer::new()));
    let config = LeaseConfig {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_millis(100),
    };
    let (mut rx, _stop, task) = spawn(
        MemoryLeaseApi::new(server.clone()),
        &identity("controller-7d9f"),
        config,
    );
    wait_for(&mut rx, true).await;
    task.abort();
    let _ = task.await;
    // The same Pod, restarted: leads well before the 15 s lease duration.
    let started = Instant::now();
    let (mut rx, stop, task) = spawn(
        MemoryLeaseApi::new(server.clone()),
        &identity("controller-7d9f"),
        config,
    );
    wait_for(&mut rx, true).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(holder(&server).unwrap().lease_transitions, 0);
    stop.send(()).unwrap();
    task.await.unwrap();
}

#[tokio::test]
async fn each_acquisition_is_a_new_term_and_renewals_extend_it() {
    let server = Arc::new(Mutex::new(LeaseServer::new()));
    let api = MemoryLeaseApi::new(server.clone());
    let down = api.down.clone();
    let (mut rx, stop, task) = spawn(api, "a", fast());
    wait_for(&mut rx, true).await;
    let first = *rx.borrow();
    assert_eq!(first.term, 1);
    let now = tokio::time::Instant::now().into_std();
    assert!(first.leads(1, now) && !first.leads(2, now));
    assert!(first.remaining(1, now).unwrap() <= fast().renew_deadline);
    // A renewal moves the end of the same term.
    tokio::time::timeout(
        Duration::from_secs(5),
        rx.wait_for(|l| l.term == 1 && l.until > first.until),
    )
    .await
    .unwrap()
    .unwrap();
    // Lost and acquired again: term 2; term 1's writes are fenced off.
    down.store(true, std::sync::atomic::Ordering::SeqCst);
    wait_for(&mut rx, false).await;
    let lost = *rx.borrow();
    assert_eq!((lost.term, lost.until), (1, None));
    assert_eq!(
        lost.remaining(1, tokio::time::Instant::now().into_std()),
        None
    );
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    wait_for(&mut rx, true).await;
    let second = *rx.borrow();
    assert_eq!(second.term, 2);
    assert!(!second.leads(1, tokio::time::Instant::now().into_std()));
    stop.send(()).unwrap();
    task.await.unwrap();
}

#[test]
fn jitter_is_client_gos() {
    let base = Duration::from_secs(2);
    assert_eq!(jitter(base, 0.0), base);
    assert_eq!(jitter(base, 0.5), Duration::from_millis(3_200));
    assert_eq!(jitter(base, 1.0), Duration::from_millis(4_400));
    assert_eq!(jitter(base, 7.0), Duration::from_millis(4_400));
    let u = random_unit();
    assert!((0.0..1.0).contains(&u));
}

// The simulation: electors sharing one API server.

/// xorshift64*: a small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

#[derive(Clone, Debug)]
struct Sim {
    seed: u64,
    electors: usize,
    /// Latency of a request to its commit, and of the commit to the answer.
    max_latency: u64,
    /// A request lost before reaching the server.
    p_drop: f64,
    /// An answer lost after the server applied the request.
    p_lost: f64,
    /// Crashes, graceful stops and restarts.
    lifecycle: bool,
}

struct Flight {
    request: Request,
    commit_at: Option<u64>,
    respond_at: u64,
    lost: bool,
    response: Option<Response>,
}

#[derive(PartialEq)]
enum Life {
    Running,
    Stopping(u32),
    Dead,
}

struct Node {
    index: usize,
    e: Elector,
    life: Life,
    flight: Option<Flight>,
    wake: u64,
    next_life: u64,
    generation: u32,
}

#[derive(Debug, Default)]
struct Stats {
    acquisitions: usize,
    releases: usize,
    writes: usize,
}

/// Applies `request`; an error when it hands the lease over while an
/// elector other than the new holder leads.
fn commit(
    server: &mut LeaseServer,
    request: &Request,
    nodes: &[Node],
    now: u64,
) -> Result<Response, String> {
    let before = server.lease().map(|l| l.record.holder_identity.clone());
    let response = server.handle(request);
    if let Response::Written(o) = &response {
        let holder = &o.record.holder_identity;
        if before.as_ref() != Some(holder) {
            for n in nodes {
                if n.life != Life::Dead && n.e.identity() != holder && n.e.is_leader(t(now)) {
                    return Err(format!(
                        "at {now} ms the lease went from {before:?} to {holder:?} while {} leads",
                        n.e.identity()
                    ));
                }
            }
        }
    }
    Ok(response)
}

impl Sim {
    /// A request sent at `now`; the client gives up after `timeout` ms (the
    /// edge bounds each call by the renew deadline), while the server may
    /// still apply it later.
    fn flight(&self, rng: &mut Rng, now: u64, timeout: u64, request: Request) -> Flight {
        let max = self.max_latency;
        if rng.chance(self.p_drop) {
            return Flight {
                request,
                commit_at: None,
                respond_at: now + rng.range(1, max),
                lost: true,
                response: None,
            };
        }
        let commit_at = now + rng.range(1, max);
        let respond_at = commit_at + rng.range(0, max);
        Flight {
            request,
            commit_at: Some(commit_at),
            respond_at: respond_at.min(now + timeout),
            lost: rng.chance(self.p_lost) || respond_at > now + timeout,
            response: None,
        }
    }

    /// Runs ten simulated minutes; an error describes an instant where two
    /// electors lead, or a takeover written while another leads.
    fn run(&self, config: LeaseConfig) -> Result<Stats, String> {
        const HORIZON: u64 = 10 * 60 * 1_000;
        let mut rng = Rng(self.seed | 1);
        let timeout = u64::try_from(config.renew_deadline.as_millis()).unwrap();
        let mut server = LeaseServer::new();
        let mut stats = Stats::default();
        let mut orphans: Vec<Flight> = Vec::new();
        let new_elector = |i: usize, generation: u32, now: u64| {
            Elector::new_unchecked(format!("e{i}-{generation}"), config, t(now))
        };
        let mut nodes: Vec<Node> = (0..self.electors)
            .map(|i| Node {
                index: i,
                e: new_elector(i, 0, 0),
                life: Life::Running,
                flight: None,
                wake: rng.below(3_000),
                next_life: if self.lifecycle {
                    rng.range(5_000, 90_000)
                } else {
                    u64::MAX
                },
                generation: 0,
            })
            .collect();
        let mut now = 0;
        while now <= HORIZON {
            loop {
                let mut progressed = false;
                // Commits, in the order of the nodes (any order is a valid
                // linearization of simultaneous requests).
                let due = |f: &Flight| f.commit_at == Some(now) && f.response.is_none();
                for i in 0..nodes.len() + orphans.len() {
                    let flight = match i.checked_sub(nodes.len()) {
                        None => nodes[i].flight.as_ref(),
                        Some(j) => orphans.get(j),
                    };
                    let Some(request) = flight.filter(|f| due(f)).map(|f| f.request.clone()) else {
                        continue;
                    };
                    let response = commit(&mut server, &request, &nodes, now)?;
                    stats.writes += usize::from(matches!(response, Response::Written(_)));
                    let flight = match i.checked_sub(nodes.len()) {
                        None => nodes[i].flight.as_mut(),
                        Some(j) => orphans.get_mut(j),
                    };
                    flight.unwrap().response = Some(response);
                    progressed = true;
                }
                orphans.retain(|f| f.commit_at.is_some_and(|c| c > now));
                for n in nodes.iter_mut() {
                    // Answers.
                    if n.flight.as_ref().is_some_and(|f| f.respond_at == now) {
                        let f = n.flight.take().unwrap();
                        let response = if f.commit_at.is_some_and(|c| c > now) {
                            // Timed out, still on its way to the server.
                            orphans.push(f);
                            Response::Failed
                        } else {
                            match (f.lost, f.response) {
                                (false, Some(r)) => r,
                                _ => Response::Failed,
                            }
                        };
                        let tr = n.e.on_response(t(now), response);
                        match tr {
                            Some(Transition::Acquired) => stats.acquisitions += 1,
                            Some(Transition::Released) => stats.releases += 1,
                            _ => {}
                        }
                        if let Life::Stopping(attempts) = n.life {
                            if tr == Some(Transition::Released) || attempts >= 4 {
                                n.life = Life::Dead;
                            } else if let Some(request) = n.e.release(t(now), wall(now)) {
                                n.flight = Some(self.flight(&mut rng, now, timeout, request));
                                n.life = Life::Stopping(attempts + 1);
                            } else {
                                n.life = Life::Dead;
                            }
                        }
                        n.wake = now;
                        progressed = true;
                    }
                    // Crashes, stops, restarts.
                    if now >= n.next_life {
                        n.next_life = now + rng.range(5_000, 90_000);
                        progressed = true;
                        match n.life {
                            Life::Running if rng.chance(0.5) => {
                                orphans.extend(n.flight.take());
                                n.life = Life::Dead;
                            }
                            Life::Running => {
                                orphans.extend(n.flight.take());
                                match n.e.release(t(now), wall(now)) {
                                    Some(request) => {
                                        n.flight =
                                            Some(self.flight(&mut rng, now, timeout, request));
                                        n.life = Life::Stopping(1);
                                    }
                                    None => n.life = Life::Dead,
                                }
                            }
                            Life::Stopping(_) => {}
                            Life::Dead => {
                                n.generation += 1;
                                n.e = new_elector(n.index, n.generation, now);
                                n.life = Life::Running;
                                n.wake = now;
                            }
                        }
                    }
                    // Polls.
                    if n.life == Life::Running && n.flight.is_none() && now >= n.wake {
                        n.e.tick(t(now));
                        match n.e.poll(t(now), wall(now)) {
                            Step::Send(request) => {
                                n.flight = Some(self.flight(&mut rng, now, timeout, request));
                                progressed = true;
                            }
                            Step::Wait(until) => n.wake = ms(until),
                        }
                    }
                }
                if !progressed {
                    break;
                }
            }
            let mut leaders = Vec::new();
            for n in nodes.iter_mut().filter(|n| n.life != Life::Dead) {
                n.e.tick(t(now));
                if n.e.is_leader(t(now)) {
                    leaders.push(n.e.identity().to_owned());
                }
            }
            if leaders.len() > 1 {
                return Err(format!("at {now} ms {leaders:?} all lead"));
            }
            let next = nodes
                .iter()
                .flat_map(|n| {
                    let flight = n.flight.as_ref();
                    [
                        flight.and_then(|f| f.commit_at),
                        flight.map(|f| f.respond_at),
                        (n.life == Life::Running && flight.is_none()).then_some(n.wake),
                        n.e.leader_until().map(ms),
                        Some(n.next_life),
                    ]
                })
                .chain(orphans.iter().map(|f| f.commit_at))
                .flatten()
                .filter(|&x| x > now)
                .min();
            match next {
                Some(next) => now = next,
                None => break,
            }
        }
        Ok(stats)
    }
}

fn sims() -> impl Strategy<Value = Sim> {
    (
        any::<u64>(),
        2usize..=3,
        1u64..=8_000,
        0.0f64..0.3,
        0.0f64..0.3,
        any::<bool>(),
    )
        .prop_map(
            |(seed, electors, max_latency, p_drop, p_lost, lifecycle)| Sim {
                seed,
                electors,
                max_latency,
                p_drop,
                p_lost,
                lifecycle,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The safety property: with the default durations, whatever the
    /// latencies, losses, crashes and releases, no two electors lead at the
    /// same instant, and no takeover is written while another leads.
    ///
    /// Liveness is not claimed here: with crashes every 5-90 s on top of
    /// ~50 % lost requests and 7 s latencies, an elector can die before it
    /// has watched a dead holder's Lease for `lease_duration`, every time,
    /// for the whole ten minutes (about 1.6 % of such runs; the case that
    /// failed CI once, `nobody ever led`, was one of them). The two
    /// properties below claim it where it holds.
    #[test]
    fn never_two_leaders(sim in sims()) {
        let stats = sim.run(LeaseConfig::default()).map_err(TestCaseError::fail)?;
        prop_assert!(stats.writes >= stats.acquisitions);
    }

    /// Liveness without crashes: whatever the latencies and losses in
    /// range, someone leads within ten minutes.
    #[test]
    fn someone_leads_despite_losses(sim in sims()) {
        let sim = Sim { lifecycle: false, ..sim };
        let stats = sim.run(LeaseConfig::default()).map_err(TestCaseError::fail)?;
        prop_assert!(stats.acquisitions > 0, "nobody ever led: {stats:?}");
    }

    /// Liveness through crashes, stops and restarts, when requests are
    /// answered (any latency in range).
    #[test]
    fn someone_leads_despite_crashes(sim in sims()) {
        let sim = Sim { lifecycle: true, p_drop: 0.0, p_lost: 0.0, ..sim };
        let stats = sim.run(LeaseConfig::default()).map_err(TestCaseError::fail)?;
        prop_assert!(stats.acquisitions > 0, "nobody ever led: {stats:?}");
    }
}

/// The case that made `never_two_leaders` fail once as a liveness failure
/// (found again with 3,000 cases): two electors crash in turn on a lossy,
/// slow network and nobody ever leads, yet nobody ever leads twice either.
#[test]
fn a_lossy_network_with_crashes_may_elect_nobody_but_never_two() {
    let sim = Sim {
        seed: 7_424_051_605_143_854_016,
        electors: 2,
        max_latency: 7_405,
        p_drop: 0.278,
        p_lost: 0.274,
        lifecycle: true,
    };
    let stats = sim.run(LeaseConfig::default()).unwrap();
    assert!(stats.writes >= stats.acquisitions, "{stats:?}");
    // The same network without crashes, or the crashes without losses:
    // someone leads.
    for s in [
        Sim {
            lifecycle: false,
            ..sim
        },
        Sim {
            p_drop: 0.0,
            p_lost: 0.0,
            ..sim
        },
    ] {
        let stats = s.run(LeaseConfig::default()).unwrap();
        assert!(stats.acquisitions > 0, "{stats:?}");
    }
}

#[test]
fn the_simulation_catches_a_renew_deadline_longer_than_the_lease() {
    // Control: a leader that keeps leading 10 s on a 2 s lease must be
    // caught, else the check above proves nothing.
    let unsafe_config = LeaseConfig {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_millis(500),
    };
    let caught = (0..40).find_map(|seed| {
        Sim {
            seed,
            electors: 2,
            max_latency: 1_000,
            p_drop: 0.2,
            p_lost: 0.1,
            lifecycle: false,
        }
        .run(unsafe_config)
        .err()
    });
    assert!(caught.is_some(), "no overlap found with unsafe durations");
}

#[test]
fn with_a_standby_a_graceful_stop_hands_over_quickly() {
    // No losses, short latency, lifecycle on: releases happen and are
    // followed by acquisitions.
    let stats = Sim {
        seed: 42,
        electors: 2,
        max_latency: 50,
        p_drop: 0.0,
        p_lost: 0.0,
        lifecycle: true,
    }
    .run(LeaseConfig::default())
    .unwrap();
    assert!(stats.releases > 0, "{stats:?}");
    assert!(stats.acquisitions > stats.releases, "{stats:?}");
}

// The tokio edge, in real time on an in-memory server.

fn fast() -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(500),
        retry_period: Duration::from_millis(100),
    }
}

type Spawned = (
    watch::Receiver<Leadership>,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
);

fn spawn(api: MemoryLeaseApi, id: &str, config: LeaseConfig) -> Spawned {
    let elector = LeaderElector::with_api(api, "metallb-system/test", id, config).unwrap();
    assert_eq!(elector.identity(), id);
    let (tx, rx) = watch::channel(Leadership::default());
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(elector.run(tx, async {
        let _ = stop_rx.await;
    }));
    (rx, stop_tx, task)
}

async fn wait_for(rx: &mut watch::Receiver<Leadership>, value: bool) {
    tokio::time::timeout(
        Duration::from_secs(10),
        rx.wait_for(|v| v.is_leader() == value),
    )
    .await
    .unwrap_or_else(|_| panic!("is_leader never became {value}"))
    .unwrap();
}

fn holder(server: &Mutex<LeaseServer>) -> Option<LeaseRecord> {
    server.lock().unwrap().lease().map(|l| l.record.clone())
}

#[tokio::test]
async fn run_acquires_publishes_and_releases_on_stop() {
    let server = Arc::new(Mutex::new(LeaseServer::new()));
    let (mut rx, stop, task) = spawn(MemoryLeaseApi::new(server.clone()), "a", fast());
    wait_for(&mut rx, true).await;
    assert_eq!(holder(&server).unwrap().holder_identity, "a");
    stop.send(()).unwrap();
    task.await.unwrap();
    assert!(!rx.borrow().is_leader());
    let released = holder(&server).unwrap();
    assert_eq!(released.holder(), None);
    assert_eq!(released.lease_duration_seconds, 1);
    assert_eq!(released.lease_transitions, 0);
}

#[tokio::test]
async fn run_retries_api_errors() {
    let server = Arc::new(Mutex::new(LeaseServer::new()));
    let api = MemoryLeaseApi::new(server.clone());
    api.fail_next.store(3, std::sync::atomic::Ordering::SeqCst);
    let calls = api.calls.clone();
    let (mut rx, stop, task) = spawn(api, "a", fast());
    wait_for(&mut rx, true).await;
    // Three failures, then a read and a create.
    assert!(calls.load(std::sync::atomic::Ordering::SeqCst) >= 5);
    stop.send(()).unwrap();
    task.await.unwrap();
}

#[tokio::test]
async fn run_stops_leading_when_the_server_is_unreachable_and_leads_again_after() {
    let server = Arc::new(Mutex::new(LeaseServer::new()));
    let api = MemoryLeaseApi::new(server.clone());
    let down = api.down.clone();
    let (mut rx, stop, task) = spawn(api, "a", fast());
    wait_for(&mut rx, true).await;
    down.store(true, std::sync::atomic::Ordering::SeqCst);
    wait_for(&mut rx, false).await;
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    wait_for(&mut rx, true).await;
    stop.send(()).unwrap();
    task.await.unwrap();
}

#[tokio::test]
async fn two_electors_one_leader_and_a_handover_on_release() {
    let server = Arc::new(Mutex::new(LeaseServer::new()));
    // A 5 s lease: a takeover by expiry would take at least ~5 s; a release
    // lets the standby in within a few retry periods.
    let config = LeaseConfig {
        lease_duration: Duration::from_secs(5),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(100),
    };
    let (mut a_rx, a_stop, a_task) = spawn(MemoryLeaseApi::new(server.clone()), "a", config);
    wait_for(&mut a_rx, true).await;
    let (mut b_rx, b_stop, b_task) = spawn(MemoryLeaseApi::new(server.clone()), "b", config);
    // b stands by.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(a_rx.borrow().is_leader());
    assert!(!b_rx.borrow().is_leader());
    assert_eq!(holder(&server).unwrap().holder_identity, "a");

    let stopped = Instant::now();
    a_stop.send(()).unwrap();
    a_task.await.unwrap();
    assert!(!a_rx.borrow().is_leader());
    wait_for(&mut b_rx, true).await;
    assert!(
        stopped.elapsed() < Duration::from_secs(3),
        "handover took {:?}",
        stopped.elapsed()
    );
    let record = holder(&server).unwrap();
    assert_eq!(record.holder_identity, "b");
    assert_eq!(record.lease_transitions, 1);
    b_stop.send(()).unwrap();
    b_task.await.unwrap();
}

#[tokio::test]
async fn run_stops_leading_before_it_releases() {
    /// Records whether the elector published `false` before the release.
    struct Watching {
        inner: MemoryLeaseApi,
        is_leader: watch::Receiver<Leadership>,
        leading_at_writes: Arc<Mutex<Vec<(String, bool)>>>,
    }
    impl LeaseApi for Watching {
        async fn get(&mut self) -> Result<Option<Observed>, ApiError> {
            self.inner.get().await
        }
        async fn create(&mut self, record: &LeaseRecord) -> Result<Observed, ApiError> {
            self.inner.create(record).await
        }
        async fn replace(
            &mut self,
            record: &LeaseRecord,
            resource_version: &str,
        ) -> Result<Observed, ApiError> {
            let leading = self.is_leader.borrow().is_leader();
            self.leading_at_writes
                .lock()
                .unwrap()
                .push((record.holder_identity.clone(), leading));
            self.inner.replace(record, resource_version).await
        }
    }
    let server = Arc::new(Mutex::new(LeaseServer::new()));
    let (tx, mut rx) = watch::channel(Leadership::default());
    let writes = Arc::new(Mutex::new(Vec::new()));
    let api = Watching {
        inner: MemoryLeaseApi::new(server.clone()),
        is_leader: rx.clone(),
        leading_at_writes: writes.clone(),
    };
    let elector = LeaderElector::with_api(api, "ns/l", "a", fast()).unwrap();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(elector.run(tx, async {
        let _ = stop_rx.await;
    }));
    wait_for(&mut rx, true).await;
    // Let a renewal or two happen.
    tokio::time::sleep(Duration::from_millis(250)).await;
    stop_tx.send(()).unwrap();
    task.await.unwrap();
    let writes = writes.lock().unwrap().clone();
    assert_eq!(writes.last(), Some(&(String::new(), false)), "{writes:?}");
    assert!(writes.iter().any(|(h, _)| h == "a"), "{writes:?}");
}
