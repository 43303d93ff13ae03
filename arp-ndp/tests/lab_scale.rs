//! The driver owning many IPs in the project lab (`testkit`: node-1 and
//! the client on the MLD-snooping bridge). Needs root; fails (does not
//! skip) without it; takes `testkit::serial()`.
//!
//! Addresses: 1,000 IPv4 from the benchmark prefix 198.18.0.0/15
//! (198.18.0.1 to 198.18.3.232) and 1,000 IPv6 from 2001:db8:100::/116
//! (2001:db8:100::1 to ::3e8), owned and assigned nowhere. Requests come
//! from a raw client (see `lab_support`), one per address, so the counters
//! must come out exact. No timing is asserted beyond generous bounds.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use anyhow::ensure;
use arp_ndp::packet::MacAddr;
use arp_ndp::state::IpCounters;

mod lab_support;
use lab_support::{Client, OWNED_V4_BASE, OWNED_V6_BASE, Responder, addresses, groups_of};

const N: u32 = 1000;

#[test]
fn lab_a_thousand_ips_of_each_family_are_all_answered() -> anyhow::Result<()> {
    let _serial = testkit::serial()?;
    let lab = lab_support::lab()?;
    let if1 = lab.l2_iface("node-1").to_owned();
    let mac1: MacAddr = lab.node(1).mac(&if1)?.parse()?;
    let client = Client::open(&lab)?;
    let (v4, v6) = addresses(OWNED_V4_BASE, OWNED_V6_BASE, N);
    let all: Vec<IpAddr> = v4.iter().chain(&v6).copied().collect();
    let responder = Responder::start(lab.node(1))?;
    let t0 = std::time::Instant::now();
    responder.own_all(&all)?;

    // Every owned IPv6 address's solicited-node group is joined on the
    // interface (1,000 distinct groups), and the snooping switch learnt
    // them all from the MLD reports.
    let want = groups_of(&v6);
    assert_eq!(want.len(), 1000);
    testkit::wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
        let joined = lab_support::joined_groups(lab.node(1), &if1).map_err(|e| e.to_string())?;
        let missing = want.difference(&joined).count();
        if missing == 0 {
            Ok(())
        } else {
            Err(format!("{missing} groups not in node-1's /proc/net/igmp6"))
        }
    })?;
    lab_support::wait_snooped(&lab, "node-1", &want, Duration::from_secs(60))?;
    eprintln!(
        "groups joined and snooped {:?} after the first own",
        t0.elapsed()
    );

    // The burst completes for every address: 5 rounds, 2 ARP packets or 1
    // NA each (let it end before asking: its ARP replies are broadcast).
    testkit::wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        let g = responder.totals(&all).2;
        if g == u64::from(N) * 15 {
            Ok(())
        } else {
            Err(format!("gratuitous sent: {g}"))
        }
    })?;
    eprintln!("burst done {:?} after the first own", t0.elapsed());
    std::thread::sleep(Duration::from_millis(200));

    // One request for each owned address, and for two that are not owned.
    let not_owned = [
        IpAddr::V4(Ipv4Addr::new(198, 18, 3, 233)),
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x3e9)),
    ];
    let asked: Vec<IpAddr> = all.iter().chain(&not_owned).copied().collect();
    let answers = lab_support::ask_each(
        &client,
        &asked,
        Duration::from_millis(1),
        Duration::from_secs(2),
    )?;
    let mut unanswered = Vec::new();
    let mut wrong = Vec::new();
    for ip in &all {
        match answers.get(ip).map(Vec::as_slice) {
            None | Some([]) => unanswered.push(*ip),
            Some([(mac, flags_ok)]) if *mac == Some(mac1) && *flags_ok => {}
            Some(other) => wrong.push((*ip, other.to_vec())),
        }
    }
    ensure!(
        unanswered.is_empty(),
        "{} of {} owned IPs unanswered, e.g. {:?}",
        unanswered.len(),
        all.len(),
        &unanswered[..unanswered.len().min(10)]
    );
    ensure!(
        wrong.is_empty(),
        "{} wrong answers (want one, from {mac1}, ARP to the client / NA with S and O), e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    let extra: BTreeSet<&IpAddr> = answers.keys().filter(|ip| !all.contains(ip)).collect();
    ensure!(extra.is_empty(), "answers for IPs not owned: {extra:?}");

    // Exact counters: one request received and answered per address.
    for ip in &all {
        let grat = if ip.is_ipv4() { 10 } else { 5 };
        assert_eq!(
            responder.handle.counters(ip),
            IpCounters {
                requests_received: 1,
                responses_sent: 1,
                gratuitous_sent: grat,
            },
            "{ip}"
        );
    }
    Ok(())
}
