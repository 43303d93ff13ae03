//! Adj-RIB-Out: diffing, packing, attributes, End-of-RIB, route refresh,
//! flap coalescing and determinism. Every output is decoded with
//! `bgp::wire` and checked.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bgp::rib_out::{AdjRibOut, Advertisement, DEFAULT_LOCAL_PREF, FamilyStatus, SessionContext};
use bgp::state::FamilyDisabled;
use bgp::wire::{
    AS_TRANS, AnnounceVia, AsPath, Bytes, BytesMut, Capabilities, Community, DecodeContext, Family,
    LargeCommunity, MAX_EXTENDED_MESSAGE_LEN, MAX_MESSAGE_LEN, Message, Negotiated, NextHop,
    Origin, PathAttribute, Prefix, RouteRefreshSubtype, Update, WithdrawVia, attr_type, negotiate,
    prefixes_per_update, read_message, withdrawals_per_update,
};
use ipnet::IpNet;

const V4: Family = Family::IPV4_UNICAST;
const V6: Family = Family::IPV6_UNICAST;
const OUR_AS: u32 = 65000;

fn negotiated(families: &[Family]) -> Negotiated {
    let none = Capabilities::default();
    Negotiated {
        families: families.to_vec(),
        four_octet_as: true,
        route_refresh: true,
        ..negotiate(&none, &none)
    }
}

/// eBGP over IPv4 from 192.0.2.1, both families, IPv6 next hop 2001:db8::1.
fn ebgp() -> SessionContext {
    let mut ctx = SessionContext::new(
        negotiated(&[V4, V6]),
        OUR_AS,
        false,
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
    );
    ctx.next_hop_ipv6 = Some(NextHop::from(IpAddr::V6(v6(1))));
    ctx
}

fn ibgp() -> SessionContext {
    SessionContext {
        ibgp: true,
        ..ebgp()
    }
}

fn v6(i: u128) -> Ipv6Addr {
    Ipv6Addr::from((0x2001_0db8_u128 << 96) | i)
}

fn v4_host(i: u32) -> Advertisement {
    Advertisement::host(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
}

fn v6_host(i: u32) -> Advertisement {
    Advertisement::host(IpAddr::V6(v6(0x1_0000 + u128::from(i))))
}

fn v4_hosts(n: u32) -> Vec<Advertisement> {
    (0..n).map(v4_host).collect()
}

fn v6_hosts(n: u32) -> Vec<Advertisement> {
    (0..n).map(v6_host).collect()
}

fn prefix(a: &Advertisement) -> Prefix {
    Prefix::new(a.prefix.addr(), a.prefix.prefix_len()).unwrap()
}

fn dctx(ctx: &SessionContext) -> DecodeContext {
    ctx.negotiated.decode_context(ctx.ibgp)
}

/// What a drain produced, decoded.
#[derive(Debug, Default)]
struct Out {
    messages: usize,
    updates: Vec<Update>,
    /// Route refresh subtypes in order, with their family.
    refresh: Vec<(Family, RouteRefreshSubtype)>,
    end_of_rib: Vec<Family>,
    announced: Vec<Prefix>,
    withdrawn: Vec<Prefix>,
    /// Largest message length.
    largest: usize,
}

impl Out {
    fn announcements(&self) -> impl Iterator<Item = &Update> {
        self.updates
            .iter()
            .filter(|u| !u.nlri.is_empty() || u.mp_reach().is_some())
    }

    fn withdrawals(&self) -> impl Iterator<Item = &Update> {
        self.updates.iter().filter(|u| {
            u.end_of_rib_family().is_none() && (!u.withdrawn.is_empty() || u.mp_unreach().is_some())
        })
    }

    fn announced_set(&self) -> BTreeSet<Prefix> {
        let set: BTreeSet<Prefix> = self.announced.iter().copied().collect();
        assert_eq!(set.len(), self.announced.len(), "a prefix announced twice");
        set
    }
}

fn decode(messages: &[Bytes], ctx: &SessionContext) -> Out {
    let d = dctx(ctx);
    let mut out = Out {
        messages: messages.len(),
        ..Out::default()
    };
    for m in messages {
        assert!(
            m.len() <= d.max_message_len(),
            "message of {} bytes",
            m.len()
        );
        out.largest = out.largest.max(m.len());
        let mut buf = BytesMut::from(&m[..]);
        let msg = read_message(&mut buf, &d)
            .expect("valid message")
            .expect("complete message");
        assert!(buf.is_empty(), "one message per Bytes");
        match msg {
            Message::Update(u) => {
                assert!(u.errors.is_empty(), "{:?}", u.errors);
                if let Some(f) = u.end_of_rib_family() {
                    out.end_of_rib.push(f);
                    out.updates.push(u);
                    continue;
                }
                out.announced.extend(u.nlri.iter().copied());
                out.withdrawn.extend(u.withdrawn.iter().copied());
                if let Some(r) = u.mp_reach() {
                    out.announced.extend(r.nlri.iter().copied());
                }
                if let Some(r) = u.mp_unreach() {
                    out.withdrawn.extend(r.withdrawn.iter().copied());
                }
                out.updates.push(u);
            }
            Message::RouteRefresh(rr) => out.refresh.push((rr.family, rr.subtype)),
            other => panic!("unexpected {other:?}"),
        }
    }
    out
}

/// A session that is up and has drained its initial sync.
fn synced(ads: Vec<Advertisement>, ctx: &SessionContext) -> (AdjRibOut, Out) {
    let mut rib = AdjRibOut::new();
    rib.set_advertisements(ads);
    rib.on_session_up();
    let out = decode(&rib.drain(ctx), ctx);
    (rib, out)
}

fn ebgp_v4_attrs(ctx: &SessionContext) -> Vec<PathAttribute> {
    vec![
        PathAttribute::Origin(Origin::Igp),
        PathAttribute::AsPath(AsPath::sequence([OUR_AS])),
        PathAttribute::NextHop(match ctx.next_hop_ipv4 {
            Some(NextHop::V4(a)) => a,
            _ => panic!("no IPv4 next hop"),
        }),
    ]
}

fn set(prefixes: impl IntoIterator<Item = Prefix>) -> BTreeSet<Prefix> {
    prefixes.into_iter().collect()
}

// ---------------------------------------------------------------- diffing

#[test]
fn diff_sends_additions_changes_and_removals_and_nothing_when_unchanged() {
    let ctx = ebgp();
    let a = v4_host(1);
    let b = v4_host(2).with_communities([Community::new(65000, 1)]);
    let (mut rib, out) = synced(vec![a.clone(), b.clone()], &ctx);
    assert_eq!(out.announced_set(), set([prefix(&a), prefix(&b)]));
    assert_eq!(rib.advertised(V4), 2);

    // Unchanged: nothing at all.
    rib.set_advertisements(vec![b.clone(), a.clone()]);
    assert!(!rib.has_pending());
    assert_eq!(rib.pending_prefixes(), 0);
    assert!(rib.drain(&ctx).is_empty());

    // b changes its communities, c is new with a's attributes, a stays.
    let b2 = v4_host(2).with_communities([Community::new(65000, 2)]);
    let c = v4_host(3);
    rib.set_advertisements(vec![a.clone(), b2.clone(), c.clone()]);
    assert_eq!(rib.pending_prefixes(), 2);
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(out.announced_set(), set([prefix(&b2), prefix(&c)]));
    assert!(out.withdrawn.is_empty());
    assert_eq!(out.updates.len(), 2, "one UPDATE per attribute set");
    let with_b2 = out
        .updates
        .iter()
        .find(|u| u.nlri == [prefix(&b2)])
        .unwrap();
    assert_eq!(
        with_b2.attribute(attr_type::COMMUNITIES),
        Some(&PathAttribute::Communities(vec![Community::new(65000, 2)]))
    );

    // a is removed: one withdrawal, nothing else.
    rib.set_advertisements(vec![b2.clone(), c.clone()]);
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(out.withdrawn, vec![prefix(&a)]);
    assert!(out.announced.is_empty());
    assert_eq!(out.messages, 1);
    assert_eq!(rib.advertised(V4), 2);
    assert!(!rib.is_advertised(&prefix(&a)));

    // Community order and duplicates do not count as a change.
    let b3 = v4_host(2).with_communities([Community::new(65000, 2), Community::new(65000, 2)]);
    rib.set_advertisements(vec![c, b3]);
    assert!(rib.drain(&ctx).is_empty());
}

#[test]
fn local_pref_changes_matter_on_ibgp_only() {
    for (ctx, resent) in [(ebgp(), false), (ibgp(), true)] {
        let (mut rib, _) = synced(vec![v4_host(1).with_local_pref(200)], &ctx);
        rib.set_advertisements(vec![v4_host(1).with_local_pref(300)]);
        let out = decode(&rib.drain(&ctx), &ctx);
        assert_eq!(!out.announced.is_empty(), resent, "ibgp={}", ctx.ibgp);
        // None is the default 100 on iBGP: 100 -> None is no change.
        let (mut rib, _) = synced(vec![v4_host(1).with_local_pref(DEFAULT_LOCAL_PREF)], &ctx);
        rib.set_advertisements(vec![v4_host(1)]);
        assert!(rib.drain(&ctx).is_empty());
    }
}

#[test]
fn duplicate_prefixes_merge_their_communities() {
    let ctx = ibgp();
    let (_, out) = synced(
        vec![
            v4_host(1)
                .with_communities([Community::new(1, 1)])
                .with_local_pref(50),
            v4_host(1)
                .with_communities([Community::new(2, 2)])
                .with_large_communities([LargeCommunity {
                    global_admin: 1,
                    local_data1: 2,
                    local_data2: 3,
                }])
                .with_local_pref(70),
        ],
        &ctx,
    );
    let u = out.announcements().next().unwrap();
    assert_eq!(u.nlri.len(), 1);
    assert_eq!(
        u.attribute(attr_type::COMMUNITIES),
        Some(&PathAttribute::Communities(vec![
            Community::new(1, 1),
            Community::new(2, 2)
        ]))
    );
    assert_eq!(
        u.attribute(attr_type::LOCAL_PREF),
        Some(&PathAttribute::LocalPref(70))
    );
    assert!(u.attribute(attr_type::LARGE_COMMUNITIES).is_some());
}

#[test]
fn host_bits_are_cleared() {
    let ctx = ebgp();
    let net: IpNet = "10.1.2.3/24".parse().unwrap();
    let (rib, out) = synced(vec![Advertisement::new(net)], &ctx);
    assert_eq!(
        out.announced,
        vec!["10.1.2.0/24".parse::<Prefix>().unwrap()]
    );
    assert!(rib.is_advertised(&"10.1.2.0/24".parse().unwrap()));
}

// ---------------------------------------------------------------- packing

fn check_ipv4_packing(n: u32) {
    let ctx = ebgp();
    let enc = ctx.encode_context();
    let limit = prefixes_per_update(&enc, &ebgp_v4_attrs(&ctx), &AnnounceVia::Classic, 32).unwrap();
    assert_eq!(limit, 810);
    let ads = v4_hosts(n);
    let (mut rib, out) = synced(ads.clone(), &ctx);
    let expected = usize::try_from(n).unwrap().div_ceil(limit);
    assert_eq!(out.announcements().count(), expected, "{n} prefixes");
    assert_eq!(out.end_of_rib, vec![V4, V6]);
    assert!(out.largest <= MAX_MESSAGE_LEN);
    assert_eq!(out.announced_set(), set(ads.iter().map(prefix)));
    // Sorted within the group.
    assert!(out.announced.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(rib.advertised(V4), ads.len());

    // Withdraw them all.
    rib.set_advertisements(Vec::new());
    let out = decode(&rib.drain(&ctx), &ctx);
    let wlimit = withdrawals_per_update(&enc, &WithdrawVia::Classic, 32);
    assert_eq!(wlimit, 814);
    assert_eq!(
        out.withdrawals().count(),
        usize::try_from(n).unwrap().div_ceil(wlimit)
    );
    assert_eq!(out.messages, out.withdrawals().count());
    assert_eq!(
        set(out.withdrawn.iter().copied()),
        set(ads.iter().map(prefix))
    );
    assert_eq!(out.withdrawn.len(), ads.len());
    assert_eq!(rib.advertised_total(), 0);
}

#[test]
fn ipv4_packing_1() {
    check_ipv4_packing(1);
}

#[test]
fn ipv4_packing_1000() {
    check_ipv4_packing(1000);
}

#[test]
fn ipv4_packing_10000() {
    check_ipv4_packing(10_000);
}

fn check_ipv6_packing(n: u32) {
    let ctx = ebgp();
    let enc = ctx.encode_context();
    let via = ctx.announce_via(V6).unwrap();
    let attrs = vec![
        PathAttribute::Origin(Origin::Igp),
        PathAttribute::AsPath(AsPath::sequence([OUR_AS])),
    ];
    let limit = prefixes_per_update(&enc, &attrs, &via, 128).unwrap();
    let ads = v6_hosts(n);
    let (mut rib, out) = synced(ads.clone(), &ctx);
    let expected = usize::try_from(n).unwrap().div_ceil(limit);
    assert_eq!(out.announcements().count(), expected, "{n} prefixes");
    assert!(out.largest <= MAX_MESSAGE_LEN);
    assert_eq!(out.announced_set(), set(ads.iter().map(prefix)));
    assert_eq!(rib.advertised(V6), ads.len());

    rib.set_advertisements(Vec::new());
    let out = decode(&rib.drain(&ctx), &ctx);
    let wlimit = withdrawals_per_update(&enc, &WithdrawVia::MpUnreach(V6), 128);
    assert_eq!(
        out.withdrawals().count(),
        usize::try_from(n).unwrap().div_ceil(wlimit)
    );
    assert_eq!(out.withdrawn.len(), ads.len());
    assert_eq!(
        set(out.withdrawn.iter().copied()),
        set(ads.iter().map(prefix))
    );
}

#[test]
fn ipv6_packing_1() {
    check_ipv6_packing(1);
}

#[test]
fn ipv6_packing_1000() {
    check_ipv6_packing(1000);
}

#[test]
fn ipv6_packing_10000() {
    check_ipv6_packing(10_000);
}

#[test]
fn extended_message_packs_up_to_65535_bytes() {
    let mut ctx = ebgp();
    ctx.negotiated.extended_message = true;
    let enc = ctx.encode_context();
    let limit = prefixes_per_update(&enc, &ebgp_v4_attrs(&ctx), &AnnounceVia::Classic, 32).unwrap();
    assert!(limit > 13_000, "{limit}");
    let ads = v4_hosts(30_000);
    let (mut rib, out) = synced(ads.clone(), &ctx);
    assert_eq!(out.announcements().count(), 30_000usize.div_ceil(limit));
    assert!(out.largest > MAX_MESSAGE_LEN);
    assert!(out.largest <= MAX_EXTENDED_MESSAGE_LEN);
    assert_eq!(out.announced_set(), set(ads.iter().map(prefix)));

    rib.set_advertisements(Vec::new());
    let out = decode(&rib.drain(&ctx), &ctx);
    let wlimit = withdrawals_per_update(&enc, &WithdrawVia::Classic, 32);
    assert_eq!(out.messages, 30_000usize.div_ceil(wlimit));
    assert!(out.largest > MAX_MESSAGE_LEN);
    assert_eq!(out.withdrawn.len(), 30_000);
}

#[test]
fn groups_with_different_attributes_go_in_separate_updates() {
    let ctx = ebgp();
    let ads: Vec<Advertisement> = (0..1000)
        .map(|i| v4_host(i).with_communities([Community::new(65000, (i % 3) as u16)]))
        .collect();
    let (_, out) = synced(ads.clone(), &ctx);
    // Three groups of 334/333/333: one UPDATE each.
    assert_eq!(out.announcements().count(), 3);
    for u in out.announcements() {
        let Some(PathAttribute::Communities(cs)) = u.attribute(attr_type::COMMUNITIES) else {
            panic!("no communities");
        };
        assert!(u.nlri.iter().all(|p| {
            let i = u32::from(match p.addr() {
                IpAddr::V4(a) => a,
                IpAddr::V6(_) => unreachable!(),
            }) - 0x0a00_0000;
            cs == &vec![Community::new(65000, (i % 3) as u16)]
        }));
    }
    assert_eq!(out.announced_set(), set(ads.iter().map(prefix)));
}

// ---------------------------------------------------------------- attributes

#[test]
fn ebgp_attributes() {
    let ctx = ebgp();
    let (_, out) = synced(vec![v4_host(1).with_local_pref(300)], &ctx);
    let u = out.announcements().next().unwrap();
    assert_eq!(
        u.attributes,
        vec![
            PathAttribute::Origin(Origin::Igp),
            PathAttribute::AsPath(AsPath::sequence([OUR_AS])),
            PathAttribute::NextHop(Ipv4Addr::new(192, 0, 2, 1)),
        ],
        "no LOCAL_PREF towards an eBGP peer"
    );
}

#[test]
fn ibgp_attributes() {
    let ctx = ibgp();
    let large = LargeCommunity {
        global_admin: 65000,
        local_data1: 1,
        local_data2: 2,
    };
    let (_, out) = synced(
        vec![
            v4_host(1)
                .with_local_pref(300)
                .with_communities([Community::new(65000, 7), Community::NO_EXPORT])
                .with_large_communities([large]),
            v4_host(2),
        ],
        &ctx,
    );
    let mut ups = out.announcements();
    // Groups in attribute order: LOCAL_PREF 100 (the default) before 300.
    let plain = ups.next().unwrap();
    assert_eq!(
        plain.attributes,
        vec![
            PathAttribute::Origin(Origin::Igp),
            PathAttribute::AsPath(AsPath::empty()),
            PathAttribute::NextHop(Ipv4Addr::new(192, 0, 2, 1)),
            PathAttribute::LocalPref(DEFAULT_LOCAL_PREF),
        ]
    );
    let full = ups.next().unwrap();
    assert_eq!(
        full.attributes,
        vec![
            PathAttribute::Origin(Origin::Igp),
            PathAttribute::AsPath(AsPath::empty()),
            PathAttribute::NextHop(Ipv4Addr::new(192, 0, 2, 1)),
            PathAttribute::LocalPref(300),
            PathAttribute::Communities(vec![Community::new(65000, 7), Community::NO_EXPORT]),
            PathAttribute::LargeCommunities(vec![large]),
        ]
    );
}

#[test]
fn two_and_four_octet_as_paths() {
    for (four, local_as) in [
        (true, 4_200_000_000),
        (false, 4_200_000_000),
        (false, 65001),
    ] {
        let mut ctx = ebgp();
        ctx.local_as = local_as;
        ctx.negotiated.four_octet_as = four;
        let (_, out) = synced(vec![v4_host(1)], &ctx);
        let u = out.announcements().next().unwrap();
        let as_path = u.attribute(attr_type::AS_PATH).unwrap();
        let as4 = u.attribute(attr_type::AS4_PATH);
        match (four, local_as > 65535) {
            (true, _) => {
                assert_eq!(
                    as_path,
                    &PathAttribute::AsPath(AsPath::sequence([local_as]))
                );
                assert_eq!(as4, None);
            }
            (false, true) => {
                assert_eq!(
                    as_path,
                    &PathAttribute::AsPath(AsPath::sequence([u32::from(AS_TRANS)]))
                );
                assert_eq!(
                    as4,
                    Some(&PathAttribute::As4Path(AsPath::sequence([local_as])))
                );
            }
            (false, false) => {
                assert_eq!(
                    as_path,
                    &PathAttribute::AsPath(AsPath::sequence([local_as]))
                );
                assert_eq!(as4, None);
            }
        }
        assert_eq!(u.effective_as_path(), Some(AsPath::sequence([local_as])));
    }
}

#[test]
fn ipv6_goes_in_mp_reach_with_the_ipv6_next_hop() {
    let mut ctx = ibgp();
    let ll: Ipv6Addr = "fe80::1".parse().unwrap();
    ctx.next_hop_ipv6 = Some(NextHop::V6 {
        global: v6(1),
        link_local: Some(ll),
    });
    let (mut rib, out) = synced(vec![v6_host(1), v4_host(1)], &ctx);
    // IPv4 first, then IPv6.
    assert_eq!(
        out.announced,
        vec![prefix(&v4_host(1)), prefix(&v6_host(1))]
    );
    let u = out
        .announcements()
        .find(|u| u.mp_reach().is_some())
        .unwrap();
    let r = u.mp_reach().unwrap();
    assert_eq!(r.family, V6);
    assert_eq!(
        r.next_hop,
        NextHop::V6 {
            global: v6(1),
            link_local: Some(ll)
        }
    );
    assert!(u.nlri.is_empty());
    assert_eq!(u.attribute(attr_type::NEXT_HOP), None);
    assert_eq!(
        u.attribute(attr_type::LOCAL_PREF),
        Some(&PathAttribute::LocalPref(DEFAULT_LOCAL_PREF))
    );
    assert_eq!(
        rib.family_status(V6),
        FamilyStatus::Enabled {
            next_hop: ctx.next_hop_ipv6.unwrap()
        }
    );

    rib.set_advertisements(vec![v4_host(1)]);
    let out = decode(&rib.drain(&ctx), &ctx);
    let u = out.withdrawals().next().unwrap();
    assert_eq!(u.mp_unreach().unwrap().family, V6);
    assert_eq!(out.withdrawn, vec![prefix(&v6_host(1))]);
}

#[test]
fn ipv6_session_sends_ipv4_in_mp_reach() {
    let mut ctx = SessionContext::new(negotiated(&[V4, V6]), OUR_AS, false, IpAddr::V6(v6(1)));
    assert!(!ctx.ipv4_classic);
    ctx.next_hop_ipv4 = Some(NextHop::V4(Ipv4Addr::new(192, 0, 2, 1)));
    let (mut rib, out) = synced(vec![v4_host(1), v6_host(1)], &ctx);
    let families: Vec<Family> = out
        .announcements()
        .map(|u| {
            assert!(u.nlri.is_empty());
            u.mp_reach().unwrap().family
        })
        .collect();
    assert_eq!(families, vec![V4, V6]);
    let u4 = out.announcements().next().unwrap();
    assert_eq!(
        u4.mp_reach().unwrap().next_hop,
        NextHop::V4(Ipv4Addr::new(192, 0, 2, 1))
    );
    // End-of-RIB for IPv4 is still the empty UPDATE (RFC 4724).
    assert_eq!(out.end_of_rib, vec![V4, V6]);

    rib.set_advertisements(vec![]);
    let out = decode(&rib.drain(&ctx), &ctx);
    assert!(out.updates.iter().all(|u| u.withdrawn.is_empty()));
    let fams: Vec<Family> = out
        .withdrawals()
        .map(|u| u.mp_unreach().unwrap().family)
        .collect();
    assert_eq!(fams, vec![V4, V6]);
}

#[test]
fn ipv4_with_an_ipv6_next_hop_needs_extended_next_hop() {
    use bgp::wire::{Afi, ExtendedNextHop};
    let mut ctx = SessionContext::new(negotiated(&[V4, V6]), OUR_AS, false, IpAddr::V6(v6(1)));
    ctx.next_hop_ipv4 = ctx.next_hop_ipv6;
    let (rib, out) = synced(vec![v4_host(1)], &ctx);
    assert!(out.announced.is_empty());
    assert_eq!(
        rib.family_status(V4),
        FamilyStatus::Disabled(FamilyDisabled::NextHopNotAllowed)
    );
    ctx.negotiated.extended_next_hop = vec![ExtendedNextHop::new(V4, Afi::IPV6)];
    let (_, out) = synced(vec![v4_host(1)], &ctx);
    let r = out.announcements().next().unwrap().mp_reach().unwrap();
    assert_eq!((r.family, r.next_hop), (V4, ctx.next_hop_ipv6.unwrap()));
}

#[test]
fn family_without_next_hop_is_not_announced_and_reported() {
    let mut ctx = ebgp();
    ctx.next_hop_ipv6 = None;
    let (rib, out) = synced(vec![v4_host(1), v6_host(1), v6_host(2)], &ctx);
    assert_eq!(out.announced, vec![prefix(&v4_host(1))]);
    // Still End-of-RIB for both negotiated families.
    assert_eq!(out.end_of_rib, vec![V4, V6]);
    assert_eq!(
        rib.family_status(V6),
        FamilyStatus::Disabled(FamilyDisabled::NoNextHop)
    );
    let state = rib.state();
    let v6s = &state.families[1];
    assert_eq!(v6s.family, "ipv6-unicast");
    assert!(!v6s.enabled);
    assert!(
        v6s.reason.as_deref().unwrap().contains("no next hop"),
        "{v6s:?}"
    );
    assert_eq!((v6s.prefixes_desired, v6s.prefixes_advertised), (2, 0));
    let v4s = &state.families[0];
    assert!(v4s.enabled);
    assert_eq!(v4s.next_hop.as_deref(), Some("192.0.2.1"));
    assert_eq!(v4s.prefixes_advertised, 1);
    assert_eq!(state.pending_prefixes, 0);
    assert!(state.initial_sync_done);
}

#[test]
fn family_not_negotiated_is_not_announced_and_reported() {
    let mut ctx = ebgp();
    ctx.negotiated.families = vec![V4];
    ctx.negotiated.local_only_families = vec![V6];
    let (rib, out) = synced(vec![v4_host(1), v6_host(1)], &ctx);
    assert_eq!(out.announced, vec![prefix(&v4_host(1))]);
    assert_eq!(out.end_of_rib, vec![V4]);
    assert_eq!(
        rib.family_status(V6),
        FamilyStatus::Disabled(FamilyDisabled::NotSupportedByPeer)
    );
    assert!(
        rib.state().families[1]
            .reason
            .as_deref()
            .unwrap()
            .contains("peer did not advertise")
    );
}

#[test]
fn next_hop_appearing_later_announces_the_family() {
    let mut ctx = ebgp();
    ctx.next_hop_ipv6 = None;
    let (mut rib, out) = synced(vec![v6_host(1)], &ctx);
    assert!(out.announced.is_empty());
    ctx.next_hop_ipv6 = Some(NextHop::from(IpAddr::V6(v6(1))));
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(out.announced, vec![prefix(&v6_host(1))]);
    // And disappearing again withdraws it.
    ctx.next_hop_ipv6 = None;
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(out.withdrawn, vec![prefix(&v6_host(1))]);
    assert_eq!(rib.advertised(V6), 0);
}

#[test]
fn more_than_63_communities_use_the_extended_length() {
    let ctx = ebgp();
    let communities: Vec<Community> = (0..100).map(|i| Community::new(65000, i)).collect();
    let mut rib = AdjRibOut::new();
    rib.set_advertisements(vec![v4_host(1).with_communities(communities.clone())]);
    rib.on_session_up();
    let messages = rib.drain(&ctx);
    let out = decode(&messages, &ctx);
    let u = out.announcements().next().unwrap();
    assert_eq!(
        u.attribute(attr_type::COMMUNITIES),
        Some(&PathAttribute::Communities(communities))
    );
    // Optional transitive + Extended Length, type 8, length 400.
    let raw = &messages[0];
    assert!(
        raw.windows(4).any(|w| w == [0xd0, 8, 0x01, 0x90]),
        "no extended-length COMMUNITIES"
    );
}

#[test]
fn attributes_too_large_for_a_message_are_rejected_and_reported() {
    let ctx = ebgp();
    let communities: Vec<Community> = (0..2000).map(|i| Community::new(1, i)).collect();
    let big = v4_host(1).with_communities(communities);
    let (mut rib, out) = synced(vec![big.clone(), v4_host(2)], &ctx);
    assert_eq!(out.announced, vec![prefix(&v4_host(2))]);
    let s = rib.state();
    assert_eq!(s.families[0].prefixes_rejected, 1);
    assert!(s.families[0].rejected_error.is_some());
    assert!(!rib.has_pending());
    // With extended messages it fits.
    let mut ext = ctx.clone();
    ext.negotiated.extended_message = true;
    rib.on_session_up();
    let out = decode(&rib.drain(&ext), &ext);
    assert_eq!(
        out.announced_set(),
        set([prefix(&big), prefix(&v4_host(2))])
    );
    assert_eq!(rib.state().families[0].prefixes_rejected, 0);
}

#[test]
fn a_prefix_whose_attributes_grow_too_large_is_withdrawn() {
    let ctx = ebgp();
    let (mut rib, _) = synced(vec![v4_host(1), v4_host(2)], &ctx);
    let communities: Vec<Community> = (0..2000).map(|i| Community::new(1, i)).collect();
    rib.set_advertisements(vec![v4_host(1).with_communities(communities), v4_host(2)]);
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(out.withdrawn, vec![prefix(&v4_host(1))]);
    assert!(out.announced.is_empty());
    assert!(!rib.is_advertised(&prefix(&v4_host(1))));
    assert_eq!(rib.advertised(V4), 1);
    assert_eq!(rib.state().families[0].prefixes_rejected, 1);
    // Back to a size that fits: announced again, no longer rejected.
    rib.set_advertisements(vec![v4_host(1), v4_host(2)]);
    assert_eq!(rib.pending_prefixes(), 1);
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(out.announced, vec![prefix(&v4_host(1))]);
    assert_eq!(rib.state().families[0].prefixes_rejected, 0);
    assert_eq!(rib.advertised(V4), 2);
}

// ---------------------------------------------------------------- End-of-RIB, reset, refresh

#[test]
fn end_of_rib_once_per_family_after_the_initial_sync_and_again_after_reset() {
    let ctx = ebgp();
    let mut rib = AdjRibOut::new();
    rib.set_advertisements(vec![v4_host(1), v6_host(1)]);
    // Down: nothing is drained; everything is pending.
    assert!(rib.drain(&ctx).is_empty());
    assert_eq!(rib.pending_prefixes(), 2);
    assert_eq!(
        rib.family_status(V4),
        FamilyStatus::Disabled(FamilyDisabled::SessionDown)
    );

    rib.on_session_up();
    assert!(rib.has_pending());
    assert_eq!(rib.family_status(V4), FamilyStatus::Unknown);
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(out.announced.len(), 2);
    assert_eq!(out.end_of_rib, vec![V4, V6]);
    // The markers come last.
    let n = out.updates.len();
    assert_eq!(out.updates[n - 2].end_of_rib_family(), Some(V4));
    assert_eq!(out.updates[n - 1].end_of_rib_family(), Some(V6));
    assert!(rib.initial_sync_done());

    rib.set_advertisements(vec![v4_host(1), v6_host(1), v4_host(2)]);
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(out.announced, vec![prefix(&v4_host(2))]);
    assert!(out.end_of_rib.is_empty());
    assert!(rib.drain(&ctx).is_empty());

    // The session drops and comes back: full resend, End-of-RIB again.
    rib.reset();
    assert_eq!(rib.advertised_total(), 0);
    assert_eq!(rib.pending_prefixes(), 3);
    assert!(rib.drain(&ctx).is_empty());
    rib.on_session_up();
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(out.announced.len(), 3);
    assert!(out.withdrawn.is_empty());
    assert_eq!(out.end_of_rib, vec![V4, V6]);
}

#[test]
fn end_of_rib_is_sent_with_nothing_to_announce() {
    let ctx = ebgp();
    let (_, out) = synced(Vec::new(), &ctx);
    assert_eq!(out.messages, 2);
    assert_eq!(out.end_of_rib, vec![V4, V6]);
}

#[test]
fn route_refresh_resends_the_family() {
    let ctx = ebgp();
    let (mut rib, _) = synced(vec![v4_host(1), v4_host(2), v6_host(1)], &ctx);
    rib.route_refresh(V4);
    assert!(rib.has_pending());
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(
        out.announced,
        vec![prefix(&v4_host(1)), prefix(&v4_host(2))]
    );
    assert!(
        out.refresh.is_empty(),
        "no enhanced route refresh negotiated"
    );
    assert!(out.end_of_rib.is_empty());
    assert!(rib.drain(&ctx).is_empty());

    // A family that was not negotiated is ignored.
    let mut v4_only = ctx.clone();
    v4_only.negotiated.families = vec![V4];
    let (mut rib, _) = synced(vec![v6_host(1)], &v4_only);
    rib.route_refresh(V6);
    assert!(rib.drain(&v4_only).is_empty());
}

#[test]
fn enhanced_route_refresh_wraps_the_resend_in_borr_and_eorr() {
    let mut ctx = ebgp();
    ctx.negotiated.enhanced_route_refresh = true;
    let (mut rib, _) = synced(vec![v6_host(1), v6_host(2), v4_host(1)], &ctx);
    rib.route_refresh(V6);
    let messages = rib.drain(&ctx);
    let out = decode(&messages, &ctx);
    assert_eq!(
        out.refresh,
        vec![
            (V6, RouteRefreshSubtype::BeginningOfRefresh),
            (V6, RouteRefreshSubtype::EndOfRefresh)
        ]
    );
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[0][18], 5, "BoRR first");
    assert_eq!(messages[2][18], 5, "EoRR last");
    assert_eq!(
        out.announced,
        vec![prefix(&v6_host(1)), prefix(&v6_host(2))]
    );
}

// ---------------------------------------------------------------- coalescing, determinism

#[test]
fn flaps_coalesce_before_a_drain() {
    let ctx = ebgp();
    let a = v4_host(1);
    let b = v4_host(2);
    let (mut rib, _) = synced(vec![a.clone()], &ctx);

    // b appears and disappears: the peer never had it, nothing is sent.
    rib.set_advertisements(vec![a.clone(), b.clone()]);
    rib.set_advertisements(vec![a.clone()]);
    assert_eq!(rib.pending_prefixes(), 0);
    assert!(rib.drain(&ctx).is_empty());

    // a disappears and comes back unchanged: nothing.
    rib.set_advertisements(vec![]);
    rib.set_advertisements(vec![a.clone()]);
    assert!(rib.drain(&ctx).is_empty());

    // a flaps through other attributes and goes: one withdrawal.
    for i in 0..10 {
        rib.set_advertisements(vec![v4_host(1).with_communities([Community::new(1, i)])]);
        rib.set_advertisements(vec![]);
    }
    assert_eq!(rib.pending_prefixes(), 1);
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(out.messages, 1);
    assert_eq!(out.withdrawn, vec![prefix(&a)]);
    assert!(out.announced.is_empty());

    // Many flaps ending announced: one announcement with the last attributes.
    for i in 0..10 {
        rib.set_advertisements(vec![v4_host(1).with_communities([Community::new(1, i)])]);
        rib.set_advertisements(vec![]);
    }
    rib.set_advertisements(vec![v4_host(1).with_communities([Community::new(1, 42)])]);
    let out = decode(&rib.drain(&ctx), &ctx);
    assert_eq!(out.messages, 1);
    assert_eq!(out.announced, vec![prefix(&a)]);
    assert_eq!(
        out.updates[0].attribute(attr_type::COMMUNITIES),
        Some(&PathAttribute::Communities(vec![Community::new(1, 42)]))
    );
}

#[test]
fn output_is_deterministic() {
    let ctx = ibgp();
    let ads: Vec<Advertisement> = (0..3000u32)
        .map(|i| {
            let ad = if i % 2 == 0 { v4_host(i) } else { v6_host(i) };
            ad.with_communities([Community::new(1, (i % 5) as u16), Community::new(0, 7)])
                .with_local_pref(100 + i % 3)
        })
        .collect();
    let mut shuffled = ads.clone();
    shuffled.reverse();
    for ad in &mut shuffled {
        ad.communities.reverse();
    }
    shuffled.rotate_left(1234);

    let mut a = AdjRibOut::new();
    a.set_advertisements(ads);
    a.on_session_up();
    let mut b = AdjRibOut::new();
    b.set_advertisements(shuffled);
    b.on_session_up();
    let out_a = a.drain(&ctx);
    let out_b = b.drain(&ctx);
    assert_eq!(out_a, out_b);

    let decoded = decode(&out_a, &ctx);
    assert_eq!(decoded.announced_set().len(), 3000);
    // 15 attribute sets per family, each in one UPDATE, groups in order.
    assert_eq!(decoded.announcements().count(), 30);
    let keys: Vec<(bool, Option<&PathAttribute>, Option<&PathAttribute>)> = decoded
        .announcements()
        .map(|u| {
            (
                u.mp_reach().is_some(),
                u.attribute(attr_type::LOCAL_PREF),
                u.attribute(attr_type::COMMUNITIES),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_by_key(|(v6, lp, _)| {
        (
            *v6,
            match lp {
                Some(PathAttribute::LocalPref(v)) => *v,
                _ => 0,
            },
        )
    });
    assert_eq!(keys, sorted);
    for u in decoded.announcements() {
        let prefixes = match u.mp_reach() {
            Some(r) => &r.nlri,
            None => &u.nlri,
        };
        assert!(prefixes.windows(2).all(|w| w[0] < w[1]));
    }
}

#[test]
fn pending_and_advertised_counts() {
    let ctx = ebgp();
    let mut rib = AdjRibOut::new();
    rib.set_advertisements(v4_hosts(10).into_iter().chain(v6_hosts(5)));
    assert_eq!(rib.pending_prefixes(), 15);
    assert_eq!((rib.desired(V4), rib.desired(V6)), (10, 5));
    rib.on_session_up();
    assert_eq!(rib.pending_prefixes(), 15);
    rib.drain(&ctx);
    assert_eq!(rib.pending_prefixes(), 0);
    assert_eq!((rib.advertised(V4), rib.advertised(V6)), (10, 5));
    rib.set_advertisements(v4_hosts(8).into_iter().chain(v6_hosts(6)));
    assert_eq!(rib.pending_prefixes(), 3);
    assert_eq!(rib.state().pending_prefixes, 3);
    rib.drain(&ctx);
    assert_eq!((rib.advertised(V4), rib.advertised(V6)), (8, 6));
    assert_eq!(rib.state().prefixes_advertised(), 14);
}
