//! RFC 7606: one test per error case and attribute, checking the approach
//! (treat-as-withdraw, attribute discard, session reset) and what it yields.

mod common;

use bgp::wire::{
    AcceptedUpdate, DecodeContext, DiscardReason, Discarded, Family, Notification, PathAttribute,
    Prefix, UpdateVerdict, attr_type,
};
use common::{attr, ctx, ebgp4, verdict};

const NLRI: [u8; 5] = [32, 203, 0, 113, 1];

fn p(s: &str) -> Prefix {
    s.parse().unwrap()
}

fn origin() -> Vec<u8> {
    attr(0x40, 1, &[0])
}

fn as_path4() -> Vec<u8> {
    attr(0x40, 2, &[2, 1, 0, 0, 0xfd, 0xe9])
}

fn next_hop() -> Vec<u8> {
    attr(0x40, 3, &[192, 0, 2, 1])
}

/// The mandatory attributes with the one of `type_code` replaced by `bad`
/// (or `bad` appended when `type_code` is not mandatory).
fn with(type_code: u8, bad: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut placed = false;
    for (t, a) in [(1u8, origin()), (2, as_path4()), (3, next_hop())] {
        if t == type_code {
            out.extend(&bad);
            placed = true;
        } else {
            out.extend(a);
        }
    }
    if !placed {
        out.extend(bad);
    }
    out
}

/// The mandatory attributes for a 2-octet AS session, plus `extra`.
fn two_octet_with(extra: Vec<u8>) -> Vec<u8> {
    let mut out = origin();
    out.extend(attr(0x40, 2, &[2, 1, 0xfd, 0xe9]));
    out.extend(next_hop());
    out.extend(extra);
    out
}

fn accepted(v: UpdateVerdict) -> AcceptedUpdate {
    match v {
        UpdateVerdict::Accept(a) => a,
        other => panic!("expected Accept, got {other:?}"),
    }
}

fn withdrawn(v: UpdateVerdict) -> (Vec<Prefix>, Vec<Notification>) {
    match v {
        UpdateVerdict::TreatAsWithdraw { withdrawn, reasons } => (withdrawn, reasons),
        other => panic!("expected TreatAsWithdraw, got {other:?}"),
    }
}

fn reset(v: UpdateVerdict) -> Notification {
    match v {
        UpdateVerdict::SessionReset(n) => n,
        other => panic!("expected SessionReset, got {other:?}"),
    }
}

/// Treat-as-withdraw of the one NLRI prefix, for the given reason subcode.
fn assert_withdraws(attrs: &[u8], ctx: &DecodeContext, subcode: u8) {
    let (prefixes, reasons) = withdrawn(verdict(&[], attrs, &NLRI, ctx));
    assert_eq!(prefixes, vec![p("203.0.113.1/32")]);
    assert!(
        reasons
            .iter()
            .any(|r| r.code() == 3 && r.subcode() == subcode),
        "{reasons:?}"
    );
}

/// Accepted, with the attribute of `type_code` discarded.
fn assert_discards(attrs: &[u8], ctx: &DecodeContext, type_code: u8) -> AcceptedUpdate {
    let a = accepted(verdict(&[], attrs, &NLRI, ctx));
    assert_eq!(a.announced, vec![p("203.0.113.1/32")]);
    assert!(
        a.discarded.iter().any(|d| d.type_code == type_code),
        "{:?}",
        a.discarded
    );
    assert!(a.attributes.iter().all(|x| x.type_code() != type_code));
    a
}

#[test]
fn a_clean_update_is_accepted() {
    let a = accepted(verdict(
        &[24, 198, 51, 100],
        &with(0, vec![]),
        &NLRI,
        &ebgp4(),
    ));
    assert_eq!(a.announced, vec![p("203.0.113.1/32")]);
    assert_eq!(a.withdrawn, vec![p("198.51.100.0/24")]);
    assert_eq!(a.attributes.len(), 3);
    assert!(a.discarded.is_empty());
    assert_eq!(a.end_of_rib, None);
}

#[test]
fn origin_malformed_is_treat_as_withdraw() {
    assert_withdraws(&with(1, attr(0x40, 1, &[0, 0])), &ebgp4(), 5);
    assert_withdraws(&with(1, attr(0x40, 1, &[])), &ebgp4(), 5);
    assert_withdraws(&with(1, attr(0x40, 1, &[3])), &ebgp4(), 6);
    assert_withdraws(&with(1, attr(0x80, 1, &[0])), &ebgp4(), 4);
}

#[test]
fn as_path_malformed_is_treat_as_withdraw() {
    for bad in [
        vec![5, 1, 0, 0, 0, 1],    // unknown segment type
        vec![2, 0],                // zero segment length
        vec![2, 2, 0, 0, 0, 1],    // overrun
        vec![2, 1, 0, 0, 0, 1, 2], // a lone trailing octet
        vec![2, 1, 0, 0, 0, 0],    // AS 0 (RFC 7607)
    ] {
        assert_withdraws(&with(2, attr(0x40, 2, &bad)), &ebgp4(), 11);
    }
    // 2-octet session: 4-octet-sized AS numbers do not parse.
    assert_withdraws(
        &with(2, attr(0x40, 2, &[2, 1, 0, 0, 0xfd, 0xe9])),
        &ctx(false, false),
        11,
    );
    assert_withdraws(
        &with(2, attr(0xc0, 2, &[2, 1, 0, 0, 0xfd, 0xe9])),
        &ebgp4(),
        4,
    );
}

#[test]
fn as_path_with_confederation_segments_from_an_ebgp_peer_is_treat_as_withdraw() {
    let confed = attr(0x40, 2, &[3, 1, 0, 0, 0xfc, 0, 2, 1, 0, 0, 0xfd, 0xe9]);
    assert_withdraws(&with(2, confed.clone()), &ebgp4(), 11);
    accepted(verdict(&[], &with(2, confed), &NLRI, &ctx(true, true)));
}

#[test]
fn empty_as_path_is_valid() {
    accepted(verdict(
        &[],
        &with(2, attr(0x40, 2, &[])),
        &NLRI,
        &ctx(true, true),
    ));
}

#[test]
fn next_hop_malformed_is_treat_as_withdraw() {
    assert_withdraws(&with(3, attr(0x40, 3, &[192, 0, 2])), &ebgp4(), 5);
    assert_withdraws(&with(3, attr(0x40, 3, &[0, 0, 0, 0])), &ebgp4(), 8);
    assert_withdraws(&with(3, attr(0x40, 3, &[239, 1, 1, 1])), &ebgp4(), 8);
    assert_withdraws(&with(3, attr(0xc0, 3, &[192, 0, 2, 1])), &ebgp4(), 4);
}

#[test]
fn next_hop_malformed_without_classic_nlri_is_ignored() {
    // RFC 4760: NEXT_HOP means nothing when only MP_REACH_NLRI carries NLRI.
    let mp = attr(
        0x80,
        14,
        &mp_reach_v6_value(&[64, 0x20, 1, 0xd, 0xb8, 0, 0, 0, 0]),
    );
    let mut attrs = origin();
    attrs.extend(as_path4());
    attrs.extend(attr(0x40, 3, &[0, 0, 0, 0]));
    attrs.extend(mp);
    let a = accepted(verdict(&[], &attrs, &[], &ebgp4()));
    assert_eq!(a.announced, vec![p("2001:db8::/64")]);
    assert_eq!(a.discarded.len(), 1);
    assert_eq!(a.discarded[0].type_code, attr_type::NEXT_HOP);
}

#[test]
fn med_malformed_is_treat_as_withdraw() {
    assert_withdraws(&with(4, attr(0x80, 4, &[0, 0, 1])), &ebgp4(), 5);
    assert_withdraws(&with(4, attr(0x40, 4, &[0, 0, 0, 1])), &ebgp4(), 4);
    let a = accepted(verdict(
        &[],
        &with(4, attr(0x80, 4, &[0, 0, 0, 7])),
        &NLRI,
        &ebgp4(),
    ));
    assert!(a.attributes.contains(&PathAttribute::MultiExitDisc(7)));
}

#[test]
fn local_pref_malformed_is_treat_as_withdraw() {
    assert_withdraws(&with(5, attr(0x40, 5, &[0, 100])), &ctx(true, true), 5);
}

#[test]
fn local_pref_from_an_ebgp_peer_is_discarded() {
    let a = assert_discards(&with(5, attr(0x40, 5, &[0, 0, 0, 100])), &ebgp4(), 5);
    assert_eq!(
        a.discarded[0].reason,
        DiscardReason::LocalPrefFromExternalPeer
    );
    let ibgp = accepted(verdict(
        &[],
        &with(5, attr(0x40, 5, &[0, 0, 0, 100])),
        &NLRI,
        &ctx(true, true),
    ));
    assert!(ibgp.attributes.contains(&PathAttribute::LocalPref(100)));
}

#[test]
fn atomic_aggregate_malformed_is_discarded() {
    let a = assert_discards(&with(6, attr(0x40, 6, &[1])), &ebgp4(), 6);
    assert!(matches!(
        a.discarded[0].reason,
        DiscardReason::Malformed(Notification::AttributeLengthError { .. })
    ));
}

#[test]
fn aggregator_malformed_is_discarded() {
    // 4-octet session expects 8 bytes.
    assert_discards(
        &with(7, attr(0xc0, 7, &[0xfd, 0xe9, 10, 0, 0, 1])),
        &ebgp4(),
        7,
    );
    // 2-octet session expects 6 bytes.
    assert_discards(
        &two_octet_with(attr(0xc0, 7, &[0, 0, 0xfd, 0xe9, 10, 0, 0, 1])),
        &ctx(false, false),
        7,
    );
    // AS 0.
    assert_discards(
        &with(7, attr(0xc0, 7, &[0, 0, 0, 0, 10, 0, 0, 1])),
        &ebgp4(),
        7,
    );
}

#[test]
fn aggregator_with_wrong_flags_is_treat_as_withdraw() {
    // RFC 7606 3.c: flag errors are treat-as-withdraw.
    assert_withdraws(
        &with(7, attr(0x40, 7, &[0, 0, 0xfd, 0xe9, 10, 0, 0, 1])),
        &ebgp4(),
        4,
    );
}

#[test]
fn communities_malformed_is_treat_as_withdraw() {
    assert_withdraws(&with(8, attr(0xc0, 8, &[])), &ebgp4(), 5);
    assert_withdraws(&with(8, attr(0xc0, 8, &[0, 0, 0, 1, 0])), &ebgp4(), 5);
}

#[test]
fn large_communities_malformed_is_treat_as_withdraw() {
    assert_withdraws(&with(32, attr(0xc0, 32, &[])), &ebgp4(), 5);
    assert_withdraws(&with(32, attr(0xc0, 32, &[0; 13])), &ebgp4(), 5);
    let a = accepted(verdict(
        &[],
        &with(32, attr(0xc0, 32, &[0; 24])),
        &NLRI,
        &ebgp4(),
    ));
    assert!(matches!(a.attributes[3], PathAttribute::LargeCommunities(ref l) if l.len() == 2));
}

#[test]
fn as4_path_malformed_is_discarded() {
    let two = ctx(false, false);
    let base = two_octet_with(vec![]);
    for bad in [
        vec![2, 2, 0, 0, 0, 1],    // overrun
        vec![3, 1, 0, 0, 0xfc, 0], // confederation segment
        vec![2, 1, 0, 0, 0, 0],    // AS 0
    ] {
        let mut attrs = base.clone();
        attrs.extend(attr(0xc0, 17, &bad));
        assert_discards(&attrs, &two, 17);
    }
}

#[test]
fn as4_aggregator_malformed_is_discarded() {
    let attrs = two_octet_with(attr(0xc0, 18, &[0, 0, 0xfd, 0xe9, 10, 0, 0]));
    assert_discards(&attrs, &ctx(false, false), 18);
    let attrs = two_octet_with(attr(0xc0, 18, &[0, 0, 0, 0, 10, 0, 0, 1]));
    assert_discards(&attrs, &ctx(false, false), 18);
}

#[test]
fn as4_attributes_from_a_four_octet_peer_are_discarded() {
    let mut attrs = with(0, vec![]);
    attrs.extend(attr(0xc0, 17, &[2, 1, 0, 0, 0xfd, 0xe9]));
    attrs.extend(attr(0xc0, 18, &[0, 0, 0xfd, 0xe9, 10, 0, 0, 1]));
    let a = accepted(verdict(&[], &attrs, &NLRI, &ebgp4()));
    assert_eq!(
        a.discarded,
        vec![
            Discarded {
                type_code: 17,
                reason: DiscardReason::As4FromFourOctetPeer
            },
            Discarded {
                type_code: 18,
                reason: DiscardReason::As4FromFourOctetPeer
            },
        ]
    );
}

fn mp_reach_v6_value(nlri: &[u8]) -> Vec<u8> {
    let mut v = vec![
        0, 2, 1, 16, 0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0,
    ];
    v.extend_from_slice(nlri);
    v
}

#[test]
fn mp_reach_malformed_is_a_session_reset() {
    let mut base = origin();
    base.extend(as_path4());
    let cases: Vec<(Vec<u8>, u8)> = vec![
        (attr(0x80, 14, &[0, 2, 1, 3, 1, 2, 3, 0]), 9), // 3-byte next hop
        (attr(0x80, 14, &mp_reach_v6_value(&[129])), 9), // prefix too long
        (attr(0x80, 14, &mp_reach_v6_value(&[64, 1])), 9), // prefix overrun
        (attr(0x80, 14, &[0, 2]), 5),                   // too short for AFI/SAFI
        (attr(0xc0, 14, &mp_reach_v6_value(&[])), 4),   // transitive flag
        (attr(0x80, 14, &[0, 2, 1, 4, 10, 0, 0, 1, 0]), 9), // IPv4 next hop for IPv6
    ];
    for (mp, subcode) in cases {
        let mut attrs = base.clone();
        attrs.extend(mp.clone());
        let n = reset(verdict(&[], &attrs, &[], &ebgp4()));
        assert_eq!((n.code(), n.subcode()), (3, subcode), "{n}");
        if subcode != 5 {
            assert_eq!(n.data().as_ref(), &mp[..]);
        }
    }
}

#[test]
fn mp_unreach_malformed_is_a_session_reset() {
    let n = reset(verdict(
        &[],
        &attr(0x80, 15, &[0, 1, 1, 33, 1, 2, 3, 4, 5]),
        &[],
        &ebgp4(),
    ));
    assert_eq!((n.code(), n.subcode()), (3, 9));
    let n = reset(verdict(&[], &attr(0x80, 15, &[0, 1]), &[], &ebgp4()));
    assert_eq!((n.code(), n.subcode()), (3, 5));
}

#[test]
fn repeated_mp_attributes_are_a_session_reset() {
    for code in [14u8, 15] {
        let value = if code == 14 {
            mp_reach_v6_value(&[])
        } else {
            vec![0, 2, 1]
        };
        let mut attrs = with(0, vec![]);
        attrs.extend(attr(0x80, code, &value));
        attrs.extend(attr(0x80, code, &value));
        assert_eq!(
            reset(verdict(&[], &attrs, &[], &ebgp4())),
            Notification::MalformedAttributeList
        );
    }
}

#[test]
fn other_repeated_attributes_keep_the_first() {
    let mut attrs = with(0, vec![]);
    attrs.extend(attr(0x80, 4, &[0, 0, 0, 10]));
    attrs.extend(attr(0x80, 4, &[0, 0, 0, 20]));
    // A malformed later instance is discarded too, not judged.
    attrs.extend(attr(0x80, 4, &[1]));
    let a = accepted(verdict(&[], &attrs, &NLRI, &ebgp4()));
    assert!(a.attributes.contains(&PathAttribute::MultiExitDisc(10)));
    assert!(!a.attributes.contains(&PathAttribute::MultiExitDisc(20)));
    assert_eq!(
        a.discarded,
        vec![
            Discarded {
                type_code: 4,
                reason: DiscardReason::Duplicate
            };
            2
        ]
    );
}

#[test]
fn missing_well_known_attributes_are_treat_as_withdraw() {
    for missing in [1u8, 2, 3] {
        let mut attrs = Vec::new();
        for (t, a) in [(1u8, origin()), (2, as_path4()), (3, next_hop())] {
            if t != missing {
                attrs.extend(a);
            }
        }
        let (_, reasons) = withdrawn(verdict(&[], &attrs, &NLRI, &ebgp4()));
        assert_eq!(
            reasons,
            vec![Notification::MissingWellKnownAttribute { type_code: missing }]
        );
    }
}

#[test]
fn missing_attributes_do_not_matter_without_nlri() {
    let a = accepted(verdict(&[24, 198, 51, 100], &[], &[], &ebgp4()));
    assert_eq!(a.withdrawn, vec![p("198.51.100.0/24")]);
    // MP_REACH alone needs ORIGIN and AS_PATH but no NEXT_HOP.
    let mut attrs = attr(
        0x80,
        14,
        &mp_reach_v6_value(&[48, 0x20, 1, 0xd, 0xb8, 0, 1]),
    );
    attrs.extend(origin());
    attrs.extend(as_path4());
    let a = accepted(verdict(&[], &attrs, &[], &ebgp4()));
    assert_eq!(a.announced, vec![p("2001:db8:1::/48")]);
}

#[test]
fn attribute_list_that_cannot_be_walked_is_treat_as_withdraw() {
    // An attribute overrunning the Total Path Attribute Length.
    let mut attrs = with(0, vec![]);
    attrs.extend([0xc0, 8, 8, 0, 0, 0, 1]);
    assert_withdraws(&attrs, &ebgp4(), 1);
    // Fewer than three octets left for an attribute header.
    let mut attrs = with(0, vec![]);
    attrs.extend([0xc0, 8]);
    assert_withdraws(&attrs, &ebgp4(), 1);
    // Extended length flag with only three octets.
    let mut attrs = with(0, vec![]);
    attrs.extend([0xd0, 8, 0]);
    assert_withdraws(&attrs, &ebgp4(), 1);
}

#[test]
fn nlri_syntax_errors_are_a_session_reset() {
    let attrs = with(0, vec![]);
    assert_eq!(
        reset(verdict(&[], &attrs, &[33, 1, 2, 3, 4, 5], &ebgp4())),
        Notification::InvalidNetworkField
    );
    assert_eq!(
        reset(verdict(&[], &attrs, &[32, 1, 2, 3], &ebgp4())),
        Notification::InvalidNetworkField
    );
    assert_eq!(
        reset(verdict(&[40, 1, 2, 3, 4, 5], &[], &[], &ebgp4())),
        Notification::InvalidNetworkField
    );
}

#[test]
fn unrecognized_well_known_attribute_is_a_session_reset() {
    let mut attrs = with(0, vec![]);
    attrs.extend(attr(0x40, 200, &[]));
    let n = reset(verdict(&[], &attrs, &NLRI, &ebgp4()));
    assert_eq!((n.code(), n.subcode()), (3, 2));
}

#[test]
fn unknown_optional_attributes_are_kept() {
    let mut attrs = with(0, vec![]);
    attrs.extend(attr(0xc0, 200, &[1, 2, 3]));
    attrs.extend(attr(0x80, 201, &[]));
    let a = accepted(verdict(&[], &attrs, &NLRI, &ebgp4()));
    assert_eq!(a.attributes.len(), 5);
    assert!(a.discarded.is_empty());
}

#[test]
fn mp_reach_of_an_unsupported_family_is_set_aside() {
    let mut attrs = with(0, vec![]);
    attrs.extend(attr(0x80, 14, &[0, 1, 128, 4, 10, 0, 0, 1, 0]));
    let a = accepted(verdict(&[], &attrs, &NLRI, &ebgp4()));
    assert_eq!(
        a.discarded,
        vec![Discarded {
            type_code: 14,
            reason: DiscardReason::UnsupportedFamily(Some(Family::new(
                bgp::wire::Afi::IPV4,
                bgp::wire::Safi(128)
            )))
        }]
    );
}

#[test]
fn treat_as_withdraw_covers_every_prefix_of_the_update() {
    let mut attrs = attr(
        0x80,
        14,
        &mp_reach_v6_value(&[64, 0x20, 1, 0xd, 0xb8, 0, 0, 0, 9]),
    );
    attrs.extend(attr(0x80, 15, &[0, 2, 1, 48, 0x20, 1, 0xd, 0xb8, 0, 7]));
    attrs.extend(attr(0x40, 1, &[9])); // invalid ORIGIN
    attrs.extend(as_path4());
    attrs.extend(next_hop());
    let (prefixes, reasons) = withdrawn(verdict(&[24, 198, 51, 100], &attrs, &NLRI, &ebgp4()));
    assert_eq!(reasons.len(), 1);
    assert_eq!(
        prefixes,
        vec![
            p("198.51.100.0/24"),
            p("2001:db8:7::/48"),
            p("203.0.113.1/32"),
            p("2001:db8:0:9::/64"),
        ]
    );
}

#[test]
fn end_of_rib_is_recognised() {
    assert_eq!(
        accepted(verdict(&[], &[], &[], &ebgp4())).end_of_rib,
        Some(Family::IPV4_UNICAST)
    );
    assert_eq!(
        accepted(verdict(&[], &attr(0x80, 15, &[0, 2, 1]), &[], &ebgp4())).end_of_rib,
        Some(Family::IPV6_UNICAST)
    );
}
