//! Properties: decoding arbitrary bytes never panics and never yields a
//! message whose encoding is longer than its input; random UPDATEs, OPENs
//! and notifications survive encode -> decode.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bgp::wire::{
    Aggregator, AnnounceVia, AsPath, AsSegment, Bytes, BytesMut, Capability, Community,
    DecodeContext, EncodeContext, Family, GracefulRestart, GracefulRestartFamily, HoldTime,
    LargeCommunity, Message, MpReach, MpUnreach, NextHop, Notification, Open, Origin,
    PathAttribute, Prefix, RawAttribute, SegmentType, UnknownCapability, Update, attr_flags,
    encode_announcements, frame, read_message, validate_update,
};
use proptest::prelude::*;

fn contexts() -> Vec<DecodeContext> {
    let mut v = Vec::new();
    for four_octet_as in [false, true] {
        for extended_message in [false, true] {
            for ibgp in [false, true] {
                v.push(DecodeContext {
                    four_octet_as,
                    extended_message,
                    ibgp,
                    ..DecodeContext::default()
                });
            }
        }
    }
    v
}

fn encode_ctx(d: &DecodeContext) -> EncodeContext {
    EncodeContext {
        four_octet_as: d.four_octet_as,
        extended_message: d.extended_message,
        ..EncodeContext::default()
    }
}

/// Random input: pure noise, or noise behind a valid header so that the
/// body decoders get exercised.
fn wire_input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        (1u8..=5, proptest::collection::vec(any::<u8>(), 0..400))
            .prop_map(|(t, body)| common::message(t, &body)),
        // UPDATE bodies with plausible lengths so attributes get parsed.
        (
            proptest::collection::vec(any::<u8>(), 0..12),
            proptest::collection::vec(any::<u8>(), 0..300),
            proptest::collection::vec(any::<u8>(), 0..40)
        )
            .prop_map(|(w, a, n)| common::message(2, &common::update_body(&w, &a, &n))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decoding_arbitrary_bytes_never_panics_nor_grows(input in wire_input()) {
        // The framer alone consumes nothing when it fails.
        let mut buf = BytesMut::from(&input[..]);
        if frame(&mut buf, 65535).is_err() {
            prop_assert_eq!(buf.len(), input.len());
        }
        for ctx in contexts() {
            let mut buf = BytesMut::from(&input[..]);
            loop {
                let before = buf.len();
                match read_message(&mut buf, &ctx) {
                    Ok(Some(msg)) => {
                        let consumed = before - buf.len();
                        let ectx = encode_ctx(&ctx);
                        let encoded = msg.to_bytes(&ectx);
                        if let Ok(bytes) = encoded {
                            prop_assert!(bytes.len() <= consumed,
                                "{msg:?} encodes to {} bytes from {consumed}", bytes.len());
                        }
                        if let Message::Update(u) = &msg {
                            let _ = validate_update(u, &ctx);
                        }
                        let _ = format!("{msg:?}");
                        if let Message::Notification(n) = &msg {
                            let _ = n.to_string();
                        }
                    }
                    Ok(None) => break,
                    Err(n) => {
                        let _ = n.to_string();
                        break;
                    }
                }
            }
        }
    }

    #[test]
    fn notification_from_wire_keeps_code_subcode_and_data(
        code in any::<u8>(), subcode in any::<u8>(), data in proptest::collection::vec(any::<u8>(), 0..40)
    ) {
        let n = Notification::from_wire(code, subcode, &data);
        prop_assert_eq!(n.code(), code);
        prop_assert_eq!(n.subcode(), subcode);
        prop_assert_eq!(n.data().to_vec(), data);
        prop_assert!(!n.to_string().is_empty());
    }
}

fn asn(four_octet: bool) -> BoxedStrategy<u32> {
    if four_octet {
        (1u32..=u32::MAX).boxed()
    } else {
        (1u32..=65535).boxed()
    }
}

fn as_path(four_octet: bool) -> impl Strategy<Value = AsPath> {
    let kind = prop_oneof![
        Just(SegmentType::AsSequence),
        Just(SegmentType::AsSet),
        Just(SegmentType::ConfedSequence),
        Just(SegmentType::ConfedSet),
    ];
    proptest::collection::vec(
        (kind, proptest::collection::vec(asn(four_octet), 1..6))
            .prop_map(|(kind, asns)| AsSegment { kind, asns }),
        0..4,
    )
    .prop_map(|segments| AsPath { segments })
}

fn v4_prefix() -> impl Strategy<Value = Prefix> {
    (any::<u32>(), 0u8..=32)
        .prop_map(|(a, l)| Prefix::new(IpAddr::V4(Ipv4Addr::from(a)), l).unwrap())
}

fn v6_prefix() -> impl Strategy<Value = Prefix> {
    (any::<u128>(), 0u8..=128)
        .prop_map(|(a, l)| Prefix::new(IpAddr::V6(Ipv6Addr::from(a)), l).unwrap())
}

fn host_v4() -> impl Strategy<Value = Ipv4Addr> {
    (1u32..0xe000_0000).prop_map(Ipv4Addr::from)
}

/// One attribute of each kind, each present or not, in random order.
fn attributes(four_octet: bool) -> impl Strategy<Value = Vec<PathAttribute>> {
    let mp_reach = prop_oneof![
        (
            any::<u128>(),
            proptest::option::of(any::<u128>()),
            proptest::collection::vec(v6_prefix(), 0..20)
        )
            .prop_map(|(g, ll, nlri)| PathAttribute::MpReach(MpReach {
                family: Family::IPV6_UNICAST,
                next_hop: NextHop::V6 {
                    global: Ipv6Addr::from(g),
                    link_local: ll.map(Ipv6Addr::from)
                },
                nlri,
            })),
        (host_v4(), proptest::collection::vec(v4_prefix(), 0..20)).prop_map(|(nh, nlri)| {
            PathAttribute::MpReach(MpReach {
                family: Family::IPV4_UNICAST,
                next_hop: NextHop::V4(nh),
                nlri,
            })
        }),
    ];
    let candidates = (
        (
            proptest::option::of(prop_oneof![
                Just(Origin::Igp),
                Just(Origin::Egp),
                Just(Origin::Incomplete)
            ]),
            proptest::option::of(as_path(four_octet)),
            proptest::option::of(host_v4()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            any::<bool>(),
            proptest::option::of((asn(four_octet), any::<u32>())),
        ),
        (
            proptest::option::of(proptest::collection::vec(any::<u32>(), 1..80)),
            proptest::option::of(proptest::collection::vec(
                (any::<u32>(), any::<u32>(), any::<u32>()),
                1..30,
            )),
            proptest::option::of(mp_reach),
            proptest::option::of(proptest::collection::vec(v6_prefix(), 0..20)),
            proptest::option::of((
                any::<bool>(),
                proptest::collection::vec(any::<u8>(), 0..300),
            )),
            proptest::option::of(as_path(true)),
        ),
    );
    (candidates, any::<u64>()).prop_map(move |((a, b), shuffle)| {
        let (origin, path, nh, med, lp, atomic, agg) = a;
        let (comms, large, mp, unreach, raw, as4) = b;
        let mut attrs = Vec::new();
        attrs.extend(origin.map(PathAttribute::Origin));
        attrs.extend(path.map(PathAttribute::AsPath));
        attrs.extend(nh.map(PathAttribute::NextHop));
        attrs.extend(med.map(PathAttribute::MultiExitDisc));
        attrs.extend(lp.map(PathAttribute::LocalPref));
        if atomic {
            attrs.push(PathAttribute::AtomicAggregate);
        }
        attrs.extend(agg.map(|(asn, a)| {
            PathAttribute::Aggregator(Aggregator {
                asn,
                address: Ipv4Addr::from(a),
            })
        }));
        attrs.extend(
            comms.map(|c| PathAttribute::Communities(c.into_iter().map(Community).collect())),
        );
        attrs.extend(large.map(|l| {
            PathAttribute::LargeCommunities(
                l.into_iter()
                    .map(|(g, a, b)| LargeCommunity {
                        global_admin: g,
                        local_data1: a,
                        local_data2: b,
                    })
                    .collect(),
            )
        }));
        attrs.extend(mp);
        attrs.extend(unreach.map(|w| {
            PathAttribute::MpUnreach(MpUnreach {
                family: Family::IPV6_UNICAST,
                withdrawn: w,
            })
        }));
        attrs.extend(raw.map(|(transitive, value)| {
            let flags = if transitive {
                attr_flags::OPTIONAL | attr_flags::TRANSITIVE | attr_flags::PARTIAL
            } else {
                attr_flags::OPTIONAL
            };
            PathAttribute::Other(RawAttribute {
                flags,
                type_code: 200,
                value: Bytes::from(value),
            })
        }));
        if !four_octet {
            // AS4 attributes only exist between 2-octet speakers.
            attrs.extend(as4.map(|p| {
                PathAttribute::As4Path(AsPath {
                    segments: p
                        .segments
                        .into_iter()
                        .filter(|s| !s.kind.is_confed())
                        .collect(),
                })
            }));
        }
        // Deterministic shuffle.
        let mut s = shuffle;
        for i in (1..attrs.len()).rev() {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            attrs.swap(i, usize::try_from(s >> 33).unwrap() % (i + 1));
        }
        attrs
    })
}

fn update(four_octet: bool) -> impl Strategy<Value = Update> {
    (
        proptest::collection::vec(v4_prefix(), 0..40),
        attributes(four_octet),
        proptest::collection::vec(v4_prefix(), 0..40),
    )
        .prop_map(|(withdrawn, attributes, nlri)| Update {
            withdrawn,
            attributes,
            nlri,
            errors: vec![],
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn generated_updates_round_trip(u in update(true)) {
        let dctx = DecodeContext { four_octet_as: true, extended_message: true, ..DecodeContext::default() };
        let bytes = Message::Update(u.clone()).to_bytes(&encode_ctx(&dctx)).unwrap();
        let mut buf = BytesMut::from(&bytes[..]);
        let back = frame(&mut buf, 65535).unwrap().unwrap().decode(&dctx).unwrap();
        prop_assert_eq!(back, Message::Update(u));
    }

    #[test]
    fn generated_two_octet_updates_round_trip(u in update(false)) {
        let dctx = DecodeContext { four_octet_as: false, extended_message: true, ..DecodeContext::default() };
        let bytes = Message::Update(u.clone()).to_bytes(&encode_ctx(&dctx)).unwrap();
        let mut buf = BytesMut::from(&bytes[..]);
        let back = frame(&mut buf, 65535).unwrap().unwrap().decode(&dctx).unwrap();
        prop_assert_eq!(back, Message::Update(u));
    }

    #[test]
    fn packed_announcements_decode_to_the_same_prefixes(
        prefixes in proptest::collection::vec(v4_prefix(), 0..3000),
        extended in any::<bool>(),
    ) {
        let ectx = EncodeContext { four_octet_as: true, extended_message: extended, ..EncodeContext::default() };
        let attrs = vec![
            PathAttribute::Origin(Origin::Igp),
            PathAttribute::AsPath(AsPath::sequence([65000])),
            PathAttribute::NextHop(Ipv4Addr::new(192, 0, 2, 1)),
        ];
        let mut out = BytesMut::new();
        let n = encode_announcements(&mut out, &ectx, &attrs, &AnnounceVia::Classic, &prefixes).unwrap();
        let dctx = DecodeContext { four_octet_as: true, extended_message: extended, ..DecodeContext::default() };
        let mut got = Vec::new();
        let mut messages = 0;
        while let Some(msg) = read_message(&mut out, &dctx).unwrap() {
            let Message::Update(u) = msg else { panic!("not an UPDATE") };
            got.extend(u.nlri);
            messages += 1;
        }
        prop_assert_eq!(messages, n);
        prop_assert_eq!(got, prefixes);
    }

    #[test]
    fn random_opens_round_trip(
        asn in 1u32..=u32::MAX,
        hold in prop_oneof![Just(0u16), 3u16..=u16::MAX],
        id in 1u32..=u32::MAX,
        restart_time in 0u16..4096,
        flags in 0u8..16,
        unknown in proptest::collection::vec((any::<u8>(), proptest::collection::vec(any::<u8>(), 0..20)), 0..30),
        extended in any::<bool>(),
    ) {
        let mut caps = vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::FourOctetAs(asn),
            Capability::GracefulRestart(GracefulRestart {
                flags,
                restart_time,
                families: vec![GracefulRestartFamily { family: Family::IPV6_UNICAST, flags: 0x80 }],
            }),
        ];
        for (code, value) in unknown {
            // Codes this codec interprets are covered above.
            if [1, 2, 5, 6, 64, 65, 70, 128].contains(&code) {
                continue;
            }
            caps.push(Capability::Unknown(UnknownCapability { code, value: Bytes::from(value) }));
        }
        let mut open = Open::new(asn, HoldTime::new(hold).unwrap(), Ipv4Addr::from(id), caps);
        open.extended_parameters = extended;
        let bytes = Message::Open(open.clone()).to_bytes(&EncodeContext::default()).unwrap();
        let mut buf = BytesMut::from(&bytes[..]);
        let back = frame(&mut buf, 4096).unwrap().unwrap().decode(&DecodeContext::default()).unwrap();
        let Message::Open(back) = back else { panic!("not an OPEN") };
        prop_assert_eq!(back.asn(), asn);
        prop_assert_eq!(back.parameters, open.parameters);
    }
}
