//! Round trips for every message type and every attribute, with the wire
//! bytes checked where the encoding itself is the point.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use bgp::wire::{
    AS_TRANS, Afi, Aggregator, AsPath, AsSegment, Bytes, Capabilities, Capability, Community,
    DecodeContext, EncodeContext, ExtendedNextHop, Family, GracefulRestart, GracefulRestartFamily,
    HoldTime, LargeCommunity, Message, MpReach, MpUnreach, NextHop, Notification, Open, Origin,
    PathAttribute, Prefix, PrefixLimit, RawAttribute, RouteRefresh, RouteRefreshSubtype,
    SegmentType, UnknownCapability, Update, attr_flags, attr_type,
};
use common::{decode, enc, encode, hex};

fn p(s: &str) -> Prefix {
    s.parse().unwrap()
}

/// Encodes with `ectx`, decodes with the matching decode context, and
/// checks the result equals `msg`; returns the bytes.
fn roundtrip(msg: &Message, ectx: &EncodeContext) -> Vec<u8> {
    let bytes = encode(msg, ectx);
    let dctx = DecodeContext {
        four_octet_as: ectx.four_octet_as,
        extended_message: ectx.extended_message,
        ..DecodeContext::default()
    };
    let back = decode(&bytes, &dctx).unwrap_or_else(|n| panic!("decode failed: {n}"));
    assert_eq!(&back, msg);
    // And encoding again gives the same bytes.
    assert_eq!(hex(&encode(&back, ectx)), hex(&bytes));
    bytes
}

#[test]
fn keepalive() {
    let bytes = roundtrip(&Message::Keepalive, &enc(true));
    assert_eq!(bytes.len(), 19);
    assert_eq!(bytes[18], 4);
}

#[test]
fn route_refresh_with_every_subtype() {
    for subtype in [
        RouteRefreshSubtype::Request,
        RouteRefreshSubtype::BeginningOfRefresh,
        RouteRefreshSubtype::EndOfRefresh,
        RouteRefreshSubtype::Reserved(7),
    ] {
        let msg = Message::RouteRefresh(RouteRefresh {
            family: Family::IPV6_UNICAST,
            subtype,
        });
        let bytes = roundtrip(&msg, &enc(true));
        assert_eq!(&bytes[16..], &[0, 23, 5, 0, 2, subtype.to_u8(), 1]);
    }
    assert_eq!(
        RouteRefresh::request(Family::IPV4_UNICAST).subtype,
        RouteRefreshSubtype::Request
    );
}

fn every_notification() -> Vec<Notification> {
    use Notification::*;
    let data = Bytes::from_static(&[0x40, 1, 1, 9]);
    vec![
        MessageHeaderUnspecific,
        ConnectionNotSynchronized,
        BadMessageLength { length: 4097 },
        BadMessageType { message_type: 9 },
        OpenUnspecific,
        UnsupportedVersionNumber { version: 4 },
        BadPeerAs,
        BadBgpIdentifier,
        UnsupportedOptionalParameter,
        UnacceptableHoldTime,
        UnsupportedCapability {
            capabilities: Bytes::from_static(&[69, 4, 0, 1, 1, 1]),
        },
        UpdateUnspecific,
        MalformedAttributeList,
        UnrecognizedWellKnownAttribute {
            attribute: data.clone(),
        },
        MissingWellKnownAttribute { type_code: 3 },
        AttributeFlagsError {
            attribute: data.clone(),
        },
        AttributeLengthError {
            attribute: data.clone(),
        },
        InvalidOriginAttribute {
            attribute: data.clone(),
        },
        InvalidNextHopAttribute {
            attribute: data.clone(),
        },
        OptionalAttributeError {
            attribute: data.clone(),
        },
        InvalidNetworkField,
        MalformedAsPath,
        HoldTimerExpired,
        FsmUnspecified,
        FsmUnexpectedInOpenSent { message_type: 2 },
        FsmUnexpectedInOpenConfirm { message_type: 2 },
        FsmUnexpectedInEstablished { message_type: 1 },
        CeaseUnspecific,
        MaximumPrefixesReached { limit: None },
        MaximumPrefixesReached {
            limit: Some(PrefixLimit {
                family: Family::IPV4_UNICAST,
                limit: 1000,
            }),
        },
        AdministrativeShutdown { message: None },
        Notification::administrative_shutdown("maintenance window, back at 10:00"),
        PeerDeconfigured,
        AdministrativeReset { message: None },
        Notification::administrative_reset("résumé ✓"),
        ConnectionRejected,
        OtherConfigurationChange,
        ConnectionCollisionResolution,
        OutOfResources,
        Notification::hard_reset(HoldTimerExpired),
        Notification::hard_reset(Notification::administrative_shutdown("gone")),
        BfdDown,
        InvalidRouteRefreshLength {
            message: Bytes::from(common::message(5, &[0, 1, 0, 1, 0])),
        },
        SendHoldTimerExpired,
        Other {
            code: 6,
            subcode: 42,
            data: Bytes::from_static(b"x"),
        },
        Other {
            code: 1,
            subcode: 1,
            data: Bytes::from_static(b"unexpected data"),
        },
    ]
}

#[test]
fn every_notification_round_trips_as_a_message() {
    for n in every_notification() {
        let bytes = roundtrip(&Message::Notification(n.clone()), &enc(true));
        assert_eq!(bytes[19], n.code(), "{n}");
        assert_eq!(bytes[20], n.subcode(), "{n}");
        assert_eq!(&bytes[21..], n.data().as_ref(), "{n}");
        assert_eq!(Notification::from_wire(n.code(), n.subcode(), &n.data()), n);
    }
}

#[test]
fn shutdown_communication_wire_format() {
    let n = Notification::administrative_shutdown("maintenance");
    let bytes = encode(&Message::Notification(n.clone()), &enc(true));
    assert_eq!(&bytes[19..22], &[6, 2, 11]);
    assert_eq!(&bytes[22..], b"maintenance");
    assert_eq!(n.shutdown_message(), Some("maintenance"));
    assert_eq!(
        n.to_string(),
        "Cease/Administrative Shutdown: \"maintenance\""
    );
}

#[test]
fn long_notification_data_is_truncated_to_the_message_size() {
    let n = Notification::OptionalAttributeError {
        attribute: Bytes::from(vec![0xab; 5000]),
    };
    let bytes = encode(&Message::Notification(n.clone()), &enc(true));
    assert_eq!(bytes.len(), 4096);
    let ext = EncodeContext {
        extended_message: true,
        ..enc(true)
    };
    assert_eq!(encode(&Message::Notification(n), &ext).len(), 21 + 5000);
}

fn full_capabilities(asn: u32) -> Capabilities {
    Capabilities {
        multiprotocol: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        route_refresh: true,
        route_refresh_old: false,
        enhanced_route_refresh: true,
        four_octet_as: Some(asn),
        graceful_restart: Some(GracefulRestart {
            flags: GracefulRestart::RESTART_STATE | GracefulRestart::NOTIFICATION,
            restart_time: 120,
            families: vec![
                GracefulRestartFamily {
                    family: Family::IPV4_UNICAST,
                    flags: GracefulRestartFamily::FORWARDING_STATE,
                },
                GracefulRestartFamily {
                    family: Family::IPV6_UNICAST,
                    flags: 0,
                },
            ],
        }),
        extended_message: true,
        extended_next_hop: vec![ExtendedNextHop::new(Family::IPV4_UNICAST, Afi::IPV6)],
        unknown: vec![UnknownCapability {
            code: 73,
            value: Bytes::from_static(b"\x05node1\x00"),
        }],
    }
}

#[test]
fn open_with_every_capability() {
    let caps = full_capabilities(65001);
    let open = Open::new(
        65001,
        HoldTime::DEFAULT,
        Ipv4Addr::new(192, 0, 2, 1),
        caps.to_capabilities(),
    );
    let bytes = roundtrip(&Message::Open(open.clone()), &enc(true));
    assert_eq!(
        &bytes[19..29],
        &[
            4,
            0xfd,
            0xe9,
            0,
            90,
            192,
            0,
            2,
            1,
            usize::from(bytes[28]) as u8
        ]
    );
    assert_eq!(usize::from(bytes[28]), bytes.len() - 29);
    assert_eq!(Capabilities::from_capabilities(open.capabilities()), caps);
}

#[test]
fn open_with_a_four_octet_as_sends_as_trans() {
    let asn = 4_200_000_001;
    let open = Open::new(
        asn,
        HoldTime::new(3).unwrap(),
        Ipv4Addr::new(10, 0, 0, 1),
        vec![Capability::FourOctetAs(asn)],
    );
    assert_eq!(open.my_as, AS_TRANS);
    let bytes = roundtrip(&Message::Open(open.clone()), &enc(false));
    assert_eq!(&bytes[20..22], &23456u16.to_be_bytes());
    assert_eq!(open.asn(), asn);
}

#[test]
fn open_extended_optional_parameters_rfc9072() {
    // Forced on small parameters.
    let mut open = Open::new(
        65001,
        HoldTime::DEFAULT,
        Ipv4Addr::new(10, 0, 0, 1),
        vec![Capability::RouteRefresh],
    );
    open.extended_parameters = true;
    let bytes = roundtrip(&Message::Open(open), &enc(true));
    // Non-Ext OP Len 255, Non-Ext OP Type 255, Extended Opt. Parm. Length 5,
    // then type 2 with a 2-byte length 2, and the capability.
    assert_eq!(&bytes[28..], &[255, 255, 0, 5, 2, 0, 2, 2, 0]);

    // Chosen automatically when the parameters exceed 255 bytes.
    let caps: Vec<Capability> = (0..40)
        .map(|i| {
            Capability::Unknown(UnknownCapability {
                code: 200,
                value: Bytes::from(vec![i; 8]),
            })
        })
        .collect();
    let open = Open::new(65001, HoldTime::DEFAULT, Ipv4Addr::new(10, 0, 0, 1), caps);
    let bytes = encode(&Message::Open(open.clone()), &enc(true));
    assert_eq!(&bytes[28..30], &[255, 255]);
    let Message::Open(back) = decode(&bytes, &DecodeContext::default()).unwrap() else {
        panic!("not an OPEN")
    };
    assert!(back.extended_parameters);
    assert_eq!(back.capabilities().count(), 40);
    assert_eq!(back.parameters, open.parameters);
}

fn every_attribute() -> Vec<PathAttribute> {
    vec![
        PathAttribute::MpReach(MpReach {
            family: Family::IPV6_UNICAST,
            next_hop: NextHop::V6 {
                global: "2001:db8::1".parse().unwrap(),
                link_local: Some("fe80::1".parse().unwrap()),
            },
            nlri: vec![p("2001:db8:1::/48"), p("2001:db8:2::1/128")],
        }),
        PathAttribute::MpUnreach(MpUnreach {
            family: Family::IPV6_UNICAST,
            withdrawn: vec![p("2001:db8:3::/64")],
        }),
        PathAttribute::Origin(Origin::Incomplete),
        PathAttribute::AsPath(AsPath {
            segments: vec![
                AsSegment {
                    kind: SegmentType::ConfedSequence,
                    asns: vec![64512],
                },
                AsSegment {
                    kind: SegmentType::ConfedSet,
                    asns: vec![64513, 64514],
                },
                AsSegment {
                    kind: SegmentType::AsSequence,
                    asns: vec![65001, 4_200_000_000],
                },
                AsSegment {
                    kind: SegmentType::AsSet,
                    asns: vec![1, 2, 3],
                },
            ],
        }),
        PathAttribute::NextHop(Ipv4Addr::new(192, 0, 2, 1)),
        PathAttribute::MultiExitDisc(100),
        PathAttribute::LocalPref(200),
        PathAttribute::AtomicAggregate,
        PathAttribute::Aggregator(Aggregator {
            asn: 4_200_000_000,
            address: Ipv4Addr::new(192, 0, 2, 9),
        }),
        PathAttribute::Communities(vec![Community::new(65000, 1), Community::NO_EXPORT]),
        PathAttribute::LargeCommunities(vec![LargeCommunity {
            global_admin: 4_200_000_000,
            local_data1: 1,
            local_data2: 2,
        }]),
        PathAttribute::Other(RawAttribute {
            flags: attr_flags::OPTIONAL | attr_flags::TRANSITIVE | attr_flags::PARTIAL,
            type_code: 99,
            value: Bytes::from_static(b"opaque"),
        }),
        PathAttribute::Other(RawAttribute {
            flags: attr_flags::OPTIONAL,
            type_code: 98,
            value: Bytes::new(),
        }),
    ]
}

#[test]
fn update_with_every_attribute_four_octet_session() {
    let update = Update {
        withdrawn: vec![p("198.51.100.0/24"), p("0.0.0.0/0")],
        attributes: every_attribute(),
        nlri: vec![p("203.0.113.1/32"), p("203.0.113.128/25"), p("10.0.0.0/8")],
        errors: vec![],
    };
    roundtrip(&Message::Update(update), &enc(true));
}

#[test]
fn update_with_every_attribute_over_extended_messages() {
    let update = Update {
        attributes: every_attribute(),
        ..Update::default()
    };
    let ectx = EncodeContext {
        extended_message: true,
        ..enc(true)
    };
    roundtrip(&Message::Update(update), &ectx);
}

#[test]
fn mp_reach_ipv6_with_link_local_next_hop_is_32_bytes() {
    let update = Update {
        attributes: vec![
            PathAttribute::MpReach(MpReach {
                family: Family::IPV6_UNICAST,
                next_hop: NextHop::V6 {
                    global: "2001:db8::1".parse().unwrap(),
                    link_local: Some("fe80::abcd".parse().unwrap()),
                },
                nlri: vec![p("2001:db8:ffff::1/128")],
            }),
            PathAttribute::Origin(Origin::Igp),
            PathAttribute::AsPath(AsPath::empty()),
        ],
        ..Update::default()
    };
    let bytes = roundtrip(&Message::Update(update), &enc(true));
    // Header, withdrawn length 0, attribute length, then MP_REACH_NLRI:
    // flags 0x80, type 14, length 3+1+32+1+17 = 54, AFI 2, SAFI 1, NH len 32.
    assert_eq!(&bytes[23..30], &[0x80, 14, 54, 0, 2, 1, 32]);
    let nh: [u8; 16] = bytes[30..46].try_into().unwrap();
    let ll: [u8; 16] = bytes[46..62].try_into().unwrap();
    assert_eq!(
        Ipv6Addr::from(nh),
        "2001:db8::1".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(
        Ipv6Addr::from(ll),
        "fe80::abcd".parse::<Ipv6Addr>().unwrap()
    );
}

#[test]
fn ipv4_nlri_with_ipv6_next_hop_rfc8950() {
    let update = Update {
        attributes: vec![
            PathAttribute::MpReach(MpReach {
                family: Family::IPV4_UNICAST,
                next_hop: NextHop::V6 {
                    global: "2001:db8::1".parse().unwrap(),
                    link_local: None,
                },
                nlri: vec![p("192.0.2.10/32")],
            }),
            PathAttribute::Origin(Origin::Igp),
            PathAttribute::AsPath(AsPath::sequence([65001])),
        ],
        ..Update::default()
    };
    let bytes = roundtrip(&Message::Update(update), &enc(true));
    assert_eq!(
        &bytes[26..30],
        &[0, 1, 1, 16],
        "AFI 1, SAFI 1, 16-byte next hop"
    );
}

#[test]
fn four_octet_as_over_a_two_octet_session_uses_as_trans_and_as4_path() {
    let real_path = AsPath::sequence([65001, 4_200_000_000, 65002]);
    let aggregator = Aggregator {
        asn: 4_200_000_000,
        address: Ipv4Addr::new(192, 0, 2, 9),
    };
    let update = Update {
        attributes: vec![
            PathAttribute::Origin(Origin::Igp),
            PathAttribute::AsPath(real_path.clone()),
            PathAttribute::NextHop(Ipv4Addr::new(192, 0, 2, 1)),
            PathAttribute::Aggregator(aggregator),
        ],
        nlri: vec![p("203.0.113.0/24")],
        ..Update::default()
    };
    let bytes = encode(&Message::Update(update), &enc(false));
    let attrs = &bytes[23..];
    // ORIGIN, then AS_PATH with 2-octet ASes and AS_TRANS.
    assert_eq!(&attrs[..4], &[0x40, 1, 1, 0]);
    assert_eq!(&attrs[4..7], &[0x40, 2, 8]);
    assert_eq!(&attrs[7..15], &[2, 3, 0xfd, 0xe9, 0x5b, 0xa0, 0xfd, 0xea]);
    // AS4_PATH right after, with the real 4-octet path.
    assert_eq!(&attrs[15..18], &[0xc0, 17, 14]);
    assert_eq!(&attrs[18..20], &[2, 3]);
    assert_eq!(&attrs[24..28], &4_200_000_000u32.to_be_bytes());

    let Message::Update(back) = decode(&bytes, &common::ctx(false, false)).unwrap() else {
        panic!("not an UPDATE")
    };
    assert!(back.errors.is_empty());
    assert_eq!(
        back.attribute(attr_type::AS_PATH),
        Some(&PathAttribute::AsPath(AsPath::sequence([
            65001, 23456, 65002
        ])))
    );
    assert_eq!(
        back.attribute(attr_type::AGGREGATOR),
        Some(&PathAttribute::Aggregator(Aggregator {
            asn: 23456,
            address: aggregator.address
        }))
    );
    assert_eq!(
        back.attribute(attr_type::AS4_AGGREGATOR),
        Some(&PathAttribute::As4Aggregator(aggregator))
    );
    assert_eq!(back.effective_as_path(), Some(real_path.clone()));

    // Decoding then re-encoding over the same session gives the same bytes.
    assert_eq!(
        hex(&encode(&Message::Update(back.clone()), &enc(false))),
        hex(&bytes)
    );

    // Between 4-octet speakers AS4_PATH is never sent.
    let four = encode(&Message::Update(back), &enc(true));
    let Message::Update(again) = decode(&four, &common::ebgp4()).unwrap() else {
        panic!("not an UPDATE")
    };
    assert!(again.attribute(attr_type::AS4_PATH).is_none());
    assert!(again.attribute(attr_type::AS4_AGGREGATOR).is_none());
}

#[test]
fn more_than_63_communities_use_the_extended_length() {
    let communities: Vec<Community> = (0..100).map(|i| Community::new(65000, i)).collect();
    let update = Update {
        attributes: vec![
            PathAttribute::Origin(Origin::Igp),
            PathAttribute::AsPath(AsPath::sequence([65001])),
            PathAttribute::NextHop(Ipv4Addr::new(192, 0, 2, 1)),
            PathAttribute::Communities(communities),
        ],
        nlri: vec![p("203.0.113.7/32")],
        ..Update::default()
    };
    let bytes = roundtrip(&Message::Update(update), &enc(true));
    // ORIGIN (4) + AS_PATH (9) + NEXT_HOP (7) precede COMMUNITIES.
    let c = 23 + 4 + 9 + 7;
    assert_eq!(
        bytes[c],
        attr_flags::OPTIONAL | attr_flags::TRANSITIVE | attr_flags::EXTENDED_LENGTH
    );
    assert_eq!(bytes[c + 1], 8);
    assert_eq!(&bytes[c + 2..c + 4], &400u16.to_be_bytes());
}

#[test]
fn large_communities_round_trip_with_and_without_extended_length() {
    for n in [1u32, 21, 22, 300] {
        let lcs: Vec<LargeCommunity> = (0..n)
            .map(|i| LargeCommunity {
                global_admin: 4_200_000_000 + i,
                local_data1: i,
                local_data2: u32::MAX - i,
            })
            .collect();
        let update = Update {
            attributes: vec![
                PathAttribute::Origin(Origin::Igp),
                PathAttribute::AsPath(AsPath::empty()),
                PathAttribute::NextHop(Ipv4Addr::new(192, 0, 2, 1)),
                PathAttribute::LargeCommunities(lcs),
            ],
            nlri: vec![p("203.0.113.7/32")],
            ..Update::default()
        };
        let bytes = roundtrip(&Message::Update(update), &enc(true));
        let c = 23 + 4 + 3 + 7;
        let extended = bytes[c] & attr_flags::EXTENDED_LENGTH != 0;
        assert_eq!(extended, n * 12 > 255, "{n} large communities");
    }
}

#[test]
fn unknown_optional_transitive_attribute_is_passed_on_with_the_partial_bit() {
    let update = Update {
        attributes: vec![
            PathAttribute::Other(RawAttribute {
                flags: attr_flags::OPTIONAL | attr_flags::TRANSITIVE,
                type_code: 99,
                value: Bytes::from_static(b"x"),
            }),
            PathAttribute::Other(RawAttribute {
                flags: attr_flags::OPTIONAL,
                type_code: 98,
                value: Bytes::from_static(b"y"),
            }),
        ],
        ..Update::default()
    };
    let bytes = encode(&Message::Update(update), &enc(true));
    assert_eq!(&bytes[23..], &[0xe0, 99, 1, b'x', 0x80, 98, 1, b'y']);
}

#[test]
fn end_of_rib_markers() {
    let v4 = encode(
        &Message::Update(Update::end_of_rib(Family::IPV4_UNICAST)),
        &enc(true),
    );
    assert_eq!(v4.len(), 23);
    assert_eq!(&v4[19..], &[0, 0, 0, 0]);
    let v6 = encode(
        &Message::Update(Update::end_of_rib(Family::IPV6_UNICAST)),
        &enc(true),
    );
    assert_eq!(&v6[19..], &[0, 0, 0, 6, 0x80, 15, 3, 0, 2, 1]);
    for (bytes, family) in [(v4, Family::IPV4_UNICAST), (v6, Family::IPV6_UNICAST)] {
        let Message::Update(u) = decode(&bytes, &common::ebgp4()).unwrap() else {
            panic!("not an UPDATE")
        };
        assert_eq!(u.end_of_rib_family(), Some(family));
    }
    let not_eor = Update {
        nlri: vec![p("10.0.0.0/8")],
        ..Update::default()
    };
    assert_eq!(not_eor.end_of_rib_family(), None);
}

#[test]
fn unsupported_family_mp_reach_is_kept_raw() {
    // AFI 1 / SAFI 128 (VPNv4): we do not decode its NLRI.
    let value = [0, 1, 128, 12, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 2, 1, 0];
    let body = common::update_body(&[], &common::attr(0x80, 14, &value), &[]);
    let u = common::decode_update(&body, &common::ebgp4());
    assert_eq!(
        u.attributes,
        vec![PathAttribute::Other(RawAttribute {
            flags: 0x80,
            type_code: 14,
            value: Bytes::copy_from_slice(&value),
        })]
    );
}

#[test]
fn update_too_long_for_the_session_is_an_error() {
    let update = Update {
        attributes: vec![PathAttribute::Communities(
            (0..2000).map(Community).collect(),
        )],
        ..Update::default()
    };
    let err = Message::Update(update).to_bytes(&enc(true)).unwrap_err();
    assert_eq!(
        err,
        bgp::wire::EncodeError::MessageTooLong {
            length: 23 + 4 + 8000,
            max: 4096
        }
    );
}
