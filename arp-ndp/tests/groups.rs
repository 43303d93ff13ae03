//! The solicited-node membership table ([`arp_ndp::groups`]): joins
//! counted only when they succeed, a socket closed only when nothing it
//! joined remains, `ENOBUFS` spread over more sockets, failures retried
//! with a bounded, jittered per-group backoff.

use std::collections::BTreeSet;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use arp_ndp::groups::{
    GroupAction, GroupKey, GroupTable, JoinError, MAX_SOCKETS_PER_INTERFACE, RETRY_MAX,
};

fn key(ifindex: u32, last: u16) -> GroupKey {
    (
        ifindex,
        format!("eth{ifindex}"),
        Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, last),
    )
}

fn wanted(keys: &[GroupKey]) -> BTreeSet<GroupKey> {
    keys.iter().cloned().collect()
}

/// Carries out `actions` against a fake kernel: `join` decides each
/// join's result; leaves succeed. Returns every action carried out.
fn run(
    t: &mut GroupTable,
    now: Instant,
    actions: Vec<GroupAction>,
    mut join: impl FnMut(&GroupKey, usize) -> Result<(), JoinError>,
) -> Vec<GroupAction> {
    let mut done = Vec::new();
    let mut queue = std::collections::VecDeque::from(actions);
    while let Some(a) = queue.pop_front() {
        let Some(a) = t.retarget(now, a) else {
            continue;
        };
        done.push(a.clone());
        let next = match &a {
            GroupAction::Join { key, socket } => {
                let r = join(key, *socket);
                t.join_result(now, key, *socket, r)
            }
            GroupAction::Leave { key, socket } => t.leave_result(now, key, *socket, Ok(())),
            GroupAction::Close { .. } => Vec::new(),
        };
        queue.extend(next);
        assert!(done.len() < 10_000, "runaway actions");
    }
    done
}

fn closes(actions: &[GroupAction]) -> Vec<(u32, usize)> {
    actions
        .iter()
        .filter_map(|a| match a {
            GroupAction::Close { ifindex, socket } => Some((*ifindex, *socket)),
            _ => None,
        })
        .collect()
}

/// The defect of issue 13 item 2: a failed join was counted, and leaving
/// it closed the socket holding the other groups.
#[test]
fn leaving_a_group_whose_join_failed_keeps_the_others() {
    let t0 = Instant::now();
    let mut t = GroupTable::new(1);
    let (a, b, c) = (key(2, 1), key(2, 2), key(2, 3));
    let actions = t.set_wanted(t0, wanted(&[a.clone(), b.clone(), c.clone()]));
    run(&mut t, t0, actions, |k, _| {
        if *k == b {
            Err(JoinError::Other("No such device".into()))
        } else {
            Ok(())
        }
    });
    assert_eq!(t.joined().len(), 2);
    assert_eq!(t.socket_load(2, 0), 2);
    assert_eq!(t.join_failures(), 1);
    let failed = t.failed();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].group, b.2);

    // b's address goes away: nothing to leave, nothing closed.
    let actions = t.set_wanted(t0, wanted(&[a.clone(), c.clone()]));
    assert_eq!(actions, []);
    assert!(
        t.failed().is_empty(),
        "the retry of an unwanted join is dropped"
    );
    // a goes: left, the socket stays for c.
    let actions = t.set_wanted(t0, wanted(std::slice::from_ref(&c)));
    let done = run(&mut t, t0, actions, |_, _| Ok(()));
    assert_eq!(
        done,
        [GroupAction::Leave {
            key: a.clone(),
            socket: 0
        }]
    );
    assert_eq!(t.socket_load(2, 0), 1);
    // c goes: the socket is empty and closed.
    let actions = t.set_wanted(t0, wanted(&[]));
    let done = run(&mut t, t0, actions, |_, _| Ok(()));
    assert_eq!(closes(&done), [(2, 0)]);
}

#[test]
fn a_failed_leave_keeps_the_socket_and_is_retried() {
    let t0 = Instant::now();
    let mut t = GroupTable::new(2);
    let (a, b) = (key(3, 1), key(3, 2));
    let actions = t.set_wanted(t0, wanted(&[a.clone(), b.clone()]));
    run(&mut t, t0, actions, |_, _| Ok(()));
    // Leaving a and b; a's leave fails.
    let actions = t.set_wanted(t0, wanted(&[]));
    assert_eq!(actions.len(), 2);
    let mut closed = Vec::new();
    for act in actions {
        let GroupAction::Leave { key, socket } = act else {
            panic!("{act:?}")
        };
        let r = if key == a {
            Err("Cannot allocate memory".to_owned())
        } else {
            Ok(())
        };
        closed.extend(closes(&t.leave_result(t0, &key, socket, r)));
    }
    assert_eq!(closed, [], "a is still held by socket 0");
    assert_eq!(t.socket_load(3, 0), 1);
    assert_eq!(t.failed().len(), 1);
    assert_eq!(t.poll(t0), []);
    let later = t0 + Duration::from_secs(2);
    let actions = t.poll(later);
    let done = run(&mut t, later, actions, |_, _| Ok(()));
    assert_eq!(closes(&done), [(3, 0)]);
    assert!(t.joined().is_empty());
    assert!(t.failed().is_empty());
}

#[test]
fn a_group_wanted_again_while_its_leave_waits_stays_joined() {
    let t0 = Instant::now();
    let mut t = GroupTable::new(3);
    let a = key(4, 1);
    let actions = t.set_wanted(t0, wanted(std::slice::from_ref(&a)));
    run(&mut t, t0, actions, |_, _| Ok(()));
    let actions = t.set_wanted(t0, wanted(&[]));
    let GroupAction::Leave { key, socket } = &actions[0] else {
        panic!()
    };
    t.leave_result(t0, key, *socket, Err("busy".into()));
    assert_eq!(t.set_wanted(t0, wanted(std::slice::from_ref(&a))), []);
    assert!(t.failed().is_empty());
    assert_eq!(t.poll(t0 + RETRY_MAX * 2), []);
    assert_eq!(t.joined().len(), 1);
}

#[test]
fn enobufs_on_a_full_socket_moves_the_join_to_another_socket() {
    let t0 = Instant::now();
    let mut t = GroupTable::new(4);
    // The kernel's option memory holds two groups per socket.
    let keys: Vec<GroupKey> = (1..=5).map(|i| key(5, i)).collect();
    let mut load = std::collections::BTreeMap::<usize, usize>::new();
    let actions = t.set_wanted(t0, wanted(&keys));
    run(&mut t, t0, actions, |_, socket| {
        let n = load.entry(socket).or_default();
        if *n == 2 {
            return Err(JoinError::NoBuffers);
        }
        *n += 1;
        Ok(())
    });
    assert_eq!(t.joined().len(), 5, "every group joined");
    assert!(t.failed().is_empty());
    assert_eq!(
        (0..3).map(|s| t.socket_load(5, s)).collect::<Vec<_>>(),
        [2, 2, 1]
    );
    // The five joins were issued together on socket 0; once it is found
    // full the others go to socket 1 without trying 0 again: two refusals
    // (the third group on 0, then on 1 behind the fourth and fifth).
    assert_eq!(t.join_failures(), 2);

    // A leave from socket 0 makes room there again.
    let keep: Vec<GroupKey> = keys.iter().skip(1).cloned().collect();
    let actions = t.set_wanted(t0, wanted(&keep));
    run(&mut t, t0, actions, |_, _| unreachable!());
    let sixth = key(5, 6);
    let mut all = keep.clone();
    all.push(sixth.clone());
    let actions = t.set_wanted(t0, wanted(&all));
    assert_eq!(
        actions,
        [GroupAction::Join {
            key: sixth,
            socket: 0
        }]
    );
}

/// Many groups, one per socket: refusals grow with the number of groups,
/// not with its square.
#[test]
fn a_batch_of_joins_does_not_fail_one_by_one_on_a_full_socket() {
    let t0 = Instant::now();
    let mut t = GroupTable::new(9);
    let keys: Vec<GroupKey> = (1..=40).map(|i| key(11, i)).collect();
    let mut load = std::collections::BTreeMap::<usize, usize>::new();
    let actions = t.set_wanted(t0, wanted(&keys));
    run(&mut t, t0, actions, |_, socket| {
        let n = load.entry(socket).or_default();
        if *n == 1 {
            return Err(JoinError::NoBuffers);
        }
        *n += 1;
        Ok(())
    });
    assert_eq!(t.joined().len(), 40);
    assert!(t.join_failures() <= 40, "{} refusals", t.join_failures());
}

#[test]
fn enobufs_on_an_empty_socket_is_retried_with_backoff_not_spread() {
    let t0 = Instant::now();
    let mut t = GroupTable::new(5);
    let a = key(6, 1);
    let actions = t.set_wanted(t0, wanted(std::slice::from_ref(&a)));
    let done = run(&mut t, t0, actions, |_, _| Err(JoinError::NoBuffers));
    // One attempt, its socket closed again: no cascade over 64 sockets.
    assert_eq!(done.len(), 2, "{done:?}");
    assert_eq!(closes(&done), [(6, 0)]);
    let f = t.failed();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].attempts, 1);
    assert!(f[0].error.contains("optmem_max"), "{}", f[0].error);
    let due = f[0].next_retry - t0;
    assert!(
        (Duration::from_millis(750)..=Duration::from_millis(1250)).contains(&due),
        "{due:?}"
    );
    assert_eq!(t.next_retry(), Some(f[0].next_retry));
    assert_eq!(t.poll(f[0].next_retry - Duration::from_millis(1)), []);
    // The limit was raised: the retry joins.
    let at = f[0].next_retry;
    let actions = t.poll(at);
    let done = run(&mut t, at, actions, |_, _| Ok(()));
    assert_eq!(done.len(), 1);
    assert_eq!(t.joined().len(), 1);
    assert!(t.failed().is_empty());
    assert_eq!(t.next_retry(), None);
}

#[test]
fn retries_double_with_jitter_up_to_a_minute() {
    let mut t = GroupTable::new(6);
    let a = key(7, 1);
    let mut now = Instant::now();
    let actions = t.set_wanted(now, wanted(std::slice::from_ref(&a)));
    run(&mut t, now, actions, |_, _| {
        Err(JoinError::Other("No such device".into()))
    });
    let mut delays = Vec::new();
    for attempt in 1..=12u32 {
        let f = t.failed();
        assert_eq!(f[0].attempts, attempt);
        let d = f[0].next_retry - now;
        let nominal = Duration::from_secs(1u64 << (attempt - 1).min(6)).min(RETRY_MAX);
        assert!(
            d >= nominal * 3 / 4,
            "attempt {attempt}: {d:?} < 3/4 of {nominal:?}"
        );
        assert!(
            d <= (nominal * 5 / 4).min(RETRY_MAX),
            "attempt {attempt}: {d:?}"
        );
        delays.push(d);
        now = f[0].next_retry;
        let actions = t.poll(now);
        assert_eq!(actions.len(), 1);
        run(&mut t, now, actions, |_, _| {
            Err(JoinError::Other("No such device".into()))
        });
    }
    // Jittered: not all capped delays are the same.
    let capped: BTreeSet<Duration> = delays[7..].iter().copied().collect();
    assert!(capped.len() > 1, "{delays:?}");
    // Two tables with other seeds draw other delays.
    let draw = |seed| {
        let mut t = GroupTable::new(seed);
        let now = Instant::now();
        let actions = t.set_wanted(now, wanted(std::slice::from_ref(&a)));
        run(&mut t, now, actions, |_, _| {
            Err(JoinError::Other("x".into()))
        });
        t.failed()[0].next_retry - now
    };
    assert!((1..20).map(draw).collect::<BTreeSet<_>>().len() > 1);
}

#[test]
fn sockets_per_interface_are_bounded() {
    let t0 = Instant::now();
    let mut t = GroupTable::new(7);
    let keys: Vec<GroupKey> = (1..=(MAX_SOCKETS_PER_INTERFACE as u16 + 3))
        .map(|i| key(8, i))
        .collect();
    // One group per socket.
    let mut used = BTreeSet::new();
    let actions = t.set_wanted(t0, wanted(&keys));
    run(&mut t, t0, actions, |_, socket| {
        if used.insert(socket) {
            Ok(())
        } else {
            Err(JoinError::NoBuffers)
        }
    });
    assert_eq!(t.joined().len(), MAX_SOCKETS_PER_INTERFACE);
    assert_eq!(t.failed().len(), 3);
    assert!(t.failed()[0].error.contains("full"), "{:?}", t.failed()[0]);
}

#[test]
fn a_vanished_interface_is_forgotten() {
    let t0 = Instant::now();
    let mut t = GroupTable::new(8);
    let (a, b) = (key(9, 1), key(10, 1));
    let actions = t.set_wanted(t0, wanted(&[a.clone(), b.clone()]));
    run(&mut t, t0, actions, |k, _| {
        if k.0 == 9 {
            Ok(())
        } else {
            Err(JoinError::Other("No such device".into()))
        }
    });
    t.forget_interface(9);
    t.forget_interface(10);
    assert!(t.joined().is_empty());
    assert!(t.failed().is_empty());
    // Dropped from the wanted set too: nothing left to leave.
    assert_eq!(t.set_wanted(t0, wanted(&[])), []);
}
