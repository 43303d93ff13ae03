//! The gratuitous announcement schedule.

mod common;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use arp_ndp::announce::{AnnounceConfig, Announcer, Outgoing};
use arp_ndp::packet::*;
use common::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Polls at every wakeup until `until`, returning (offset in ms, frames).
fn run(a: &mut Announcer, t0: Instant, until: Duration) -> Vec<(u128, Vec<Outgoing>)> {
    let mut rounds = Vec::new();
    while let Some(w) = a.next_wakeup() {
        if w > t0 + until {
            break;
        }
        rounds.push(((w - t0).as_millis(), a.poll(w)));
    }
    rounds
}

#[test]
fn burst_then_ticks_then_stop_after_five_seconds() {
    let mut a = Announcer::new(AnnounceConfig::default());
    let t0 = Instant::now();
    assert!(a.set(t0, ip("192.0.2.10"), &[eth0()]));
    let rounds = run(&mut a, t0, Duration::from_secs(60));
    let times: Vec<u128> = rounds.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, [0, 1100, 2200, 3300, 4400]);
    assert_eq!(a.next_wakeup(), None);
    for (_, frames) in &rounds {
        // ARP request then reply form, both sender = target = IP, broadcast.
        assert_eq!(frames.len(), 2);
        let req = ArpFrame::decode(&frames[0].frame).unwrap();
        let rep = ArpFrame::decode(&frames[1].frame).unwrap();
        assert_eq!(req.arp.op, ArpOp::Request);
        assert_eq!(rep.arp.op, ArpOp::Reply);
        for f in [req, rep] {
            assert_eq!(f.eth_dst, MacAddr::BROADCAST);
            assert_eq!(f.eth_src, OUR_MAC);
            assert_eq!(f.arp.sender_mac, OUR_MAC);
            assert_eq!(f.arp.sender_ip, f.arp.target_ip);
            assert_eq!(IpAddr::V4(f.arp.sender_ip), ip("192.0.2.10"));
        }
        assert_eq!(frames[0].interface, "eth0");
        assert_eq!(frames[0].ifindex, 2);
    }
}

#[test]
fn first_round_is_immediate() {
    let mut a = Announcer::new(AnnounceConfig::default());
    let t0 = Instant::now();
    a.set(t0, ip("192.0.2.10"), &[eth0()]);
    assert_eq!(a.next_wakeup(), Some(t0));
    assert_eq!(a.poll(t0).len(), 2);
    assert_eq!(a.poll(t0).len(), 0, "nothing more due at the same instant");
    assert_eq!(a.next_wakeup(), Some(t0 + ms(1100)));
    assert!(a.poll(t0 + ms(1099)).is_empty());
}

#[test]
fn unchanged_resync_sends_nothing_and_does_not_extend() {
    let mut a = Announcer::new(AnnounceConfig::default());
    let t0 = Instant::now();
    a.set(t0, ip("192.0.2.10"), &[eth0()]);
    a.poll(t0);
    // Re-syncs during the burst: no extra round, window unchanged.
    assert!(!a.set(t0 + ms(500), ip("192.0.2.10"), &[eth0()]));
    assert!(a.poll(t0 + ms(500)).is_empty());
    assert!(!a.set(t0 + ms(4000), ip("192.0.2.10"), &[eth0()]));
    let rest = run(&mut a, t0, Duration::from_secs(60));
    let times: Vec<u128> = rest.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, [1100, 2200, 3300, 4400]);
    // And after the burst a re-sync is silent too.
    assert!(!a.set(t0 + ms(30_000), ip("192.0.2.10"), &[eth0()]));
    assert_eq!(a.next_wakeup(), None);
}

#[test]
fn a_change_restarts_the_burst_from_the_change() {
    let mut a = Announcer::new(AnnounceConfig::default());
    let t0 = Instant::now();
    a.set(t0, ip("192.0.2.10"), &[eth0()]);
    a.poll(t0);
    a.poll(t0 + ms(1100));
    // A second interface appears at 2 s.
    let eth1 = iface("eth1", 3, OTHER_MAC);
    assert!(a.set(t0 + ms(2000), ip("192.0.2.10"), &[eth0(), eth1]));
    let rounds = run(&mut a, t0, Duration::from_secs(60));
    let times: Vec<u128> = rounds.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, [2000, 3100, 4200, 5300, 6400]);
    for (_, frames) in &rounds {
        let names: Vec<&str> = frames.iter().map(|f| f.interface.as_str()).collect();
        assert_eq!(names, ["eth0", "eth0", "eth1", "eth1"]);
    }
    assert_eq!(a.announced_on(&ip("192.0.2.10")).unwrap(), ["eth0", "eth1"]);
}

#[test]
fn ipv6_round_is_one_unsolicited_na_per_interface() {
    let mut a = Announcer::new(AnnounceConfig::default());
    let t0 = Instant::now();
    a.set(t0, ip("2001:db8::10"), &[eth0()]);
    let out = a.poll(t0);
    assert_eq!(out.len(), 1);
    let (eth, ip6, na) = NeighborAdvertisement::decode_frame(&out[0].frame).unwrap();
    assert_eq!(eth.dst, ipv6_multicast_mac(ALL_NODES));
    assert_eq!(eth.src, OUR_MAC);
    assert_eq!(ip6.dst, ALL_NODES);
    assert_eq!(ip6.src, v6(0x10));
    assert_eq!(ip6.hop_limit, 255);
    assert!(na.override_flag && !na.solicited && !na.router);
    assert_eq!(na.target, v6(0x10));
    assert_eq!(na.target_lla, Some(OUR_MAC));
}

#[test]
fn interfaces_not_serving_the_family_are_skipped() {
    let mut a = Announcer::new(AnnounceConfig::default());
    let t0 = Instant::now();
    let mut no_ndp = iface("eth1", 3, OTHER_MAC);
    no_ndp.ndp = false;
    a.set(t0, ip("2001:db8::10"), &[eth0(), no_ndp]);
    let out = a.poll(t0);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].interface, "eth0");
}

#[test]
fn removal_stops_sending() {
    let mut a = Announcer::new(AnnounceConfig::default());
    let t0 = Instant::now();
    a.set(t0, ip("192.0.2.10"), &[eth0()]);
    a.poll(t0);
    assert!(a.remove(&ip("192.0.2.10")));
    assert_eq!(a.next_wakeup(), None);
    assert!(a.poll(t0 + ms(1100)).is_empty());
    assert!(a.announced_on(&ip("192.0.2.10")).is_none());
}

#[test]
fn periodic_reannouncement_after_the_burst() {
    let mut a = Announcer::new(AnnounceConfig {
        periodic: Some(Duration::from_secs(60)),
        ..AnnounceConfig::default()
    });
    let t0 = Instant::now();
    a.set(t0, ip("192.0.2.10"), &[eth0()]);
    let rounds = run(&mut a, t0, Duration::from_secs(200));
    let times: Vec<u128> = rounds.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, [0, 1100, 2200, 3300, 4400, 64_400, 124_400, 184_400]);
}

#[test]
fn late_poll_sends_one_round_not_a_catch_up() {
    let mut a = Announcer::new(AnnounceConfig::default());
    let t0 = Instant::now();
    a.set(t0, ip("192.0.2.10"), &[eth0()]);
    a.poll(t0);
    // The driver wakes 3 s late.
    assert_eq!(a.poll(t0 + ms(4000)).len(), 2);
    assert_eq!(a.next_wakeup(), None, "4000 + 1100 is past the window");
}

#[test]
fn several_ips_have_independent_schedules() {
    let mut a = Announcer::new(AnnounceConfig::default());
    let t0 = Instant::now();
    a.set(t0, ip("192.0.2.10"), &[eth0()]);
    a.set(t0 + ms(300), ip("2001:db8::10"), &[eth0()]);
    let rounds = run(&mut a, t0, Duration::from_secs(60));
    let times: Vec<u128> = rounds.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        times,
        [0, 300, 1100, 1400, 2200, 2500, 3300, 3600, 4400, 4700]
    );
}

#[test]
fn empty_interface_set_sends_nothing_until_one_appears() {
    let mut a = Announcer::new(AnnounceConfig::default());
    let t0 = Instant::now();
    a.set(t0, ip("192.0.2.10"), &[]);
    assert!(a.poll(t0).is_empty());
    assert!(a.set(t0 + ms(10_000), ip("192.0.2.10"), &[eth0()]));
    assert_eq!(a.poll(t0 + ms(10_000)).len(), 2);
}
