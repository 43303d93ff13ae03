//! UPDATE packing for the Adj-RIB-Out: the packing limit, splitting across
//! messages, withdrawals and End-of-RIB.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bgp::wire::{
    AnnounceVia, AsPath, BytesMut, Community, DecodeContext, EncodeContext, EncodeError, Family,
    Message, NextHop, Origin, PathAttribute, Prefix, Update, WithdrawVia, encode_announcements,
    encode_end_of_rib, encode_withdrawals, prefixes_per_update, read_message,
    withdrawals_per_update,
};

fn ebgp_attrs() -> Vec<PathAttribute> {
    vec![
        PathAttribute::Origin(Origin::Igp),
        PathAttribute::AsPath(AsPath::sequence([65000])),
        PathAttribute::NextHop(Ipv4Addr::new(192, 0, 2, 1)),
    ]
}

fn v4_hosts(n: u32) -> Vec<Prefix> {
    (0..n)
        .map(|i| Prefix::host(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))))
        .collect()
}

fn v6_hosts(n: u32) -> Vec<Prefix> {
    (0..n)
        .map(|i| {
            Prefix::host(IpAddr::V6(Ipv6Addr::from(
                0x2001_0db8_u128 << 96 | u128::from(i),
            )))
        })
        .collect()
}

fn ctx4() -> EncodeContext {
    EncodeContext {
        four_octet_as: true,
        ..EncodeContext::default()
    }
}

/// Decodes every message of `buf`, checking each against `max`.
fn decode_all(bytes: &[u8], ctx: &DecodeContext) -> Vec<Update> {
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    loop {
        let before = buf.len();
        match read_message(&mut buf, ctx).expect("valid message") {
            Some(Message::Update(u)) => {
                assert!(before - buf.len() <= ctx.max_message_len());
                assert!(u.errors.is_empty());
                out.push(u);
            }
            Some(other) => panic!("unexpected {other:?}"),
            None => break,
        }
    }
    assert!(buf.is_empty());
    out
}

fn dctx(extended_message: bool) -> DecodeContext {
    DecodeContext {
        four_octet_as: true,
        extended_message,
        ..DecodeContext::default()
    }
}

#[test]
fn packing_limit_for_ipv4_host_routes_is_810() {
    // 4096 - 19 (header) - 4 (two lengths) - 20 (ORIGIN 4, AS_PATH 9,
    // NEXT_HOP 7) = 4053 bytes of NLRI; a /32 takes 5: 810.
    let n = prefixes_per_update(&ctx4(), &ebgp_attrs(), &AnnounceVia::Classic, 32).unwrap();
    assert_eq!(n, 810);
    let mut out = BytesMut::new();
    assert_eq!(
        encode_announcements(
            &mut out,
            &ctx4(),
            &ebgp_attrs(),
            &AnnounceVia::Classic,
            &v4_hosts(810)
        ),
        Ok(1)
    );
    assert_eq!(out.len(), 4093);
    let mut out = BytesMut::new();
    assert_eq!(
        encode_announcements(
            &mut out,
            &ctx4(),
            &ebgp_attrs(),
            &AnnounceVia::Classic,
            &v4_hosts(811)
        ),
        Ok(2)
    );
    // With a MED as well, 809 (the figure quoted in the issue).
    let mut attrs = ebgp_attrs();
    attrs.push(PathAttribute::MultiExitDisc(0));
    assert_eq!(
        prefixes_per_update(&ctx4(), &attrs, &AnnounceVia::Classic, 32),
        Ok(809)
    );
    // Extended messages: (65535 - 43) / 5.
    let ext = EncodeContext {
        extended_message: true,
        ..ctx4()
    };
    assert_eq!(
        prefixes_per_update(&ext, &ebgp_attrs(), &AnnounceVia::Classic, 32),
        Ok(13098)
    );
}

#[test]
fn ten_thousand_ipv4_host_routes_split_at_the_limit() {
    let prefixes = v4_hosts(10_000);
    let mut out = BytesMut::new();
    let n = encode_announcements(
        &mut out,
        &ctx4(),
        &ebgp_attrs(),
        &AnnounceVia::Classic,
        &prefixes,
    )
    .unwrap();
    assert_eq!(n, 13); // ceil(10000 / 810)
    let updates = decode_all(&out, &dctx(false));
    assert_eq!(updates.len(), 13);
    assert!(updates[..12].iter().all(|u| u.nlri.len() == 810));
    let all: Vec<Prefix> = updates.iter().flat_map(|u| u.nlri.clone()).collect();
    assert_eq!(all, prefixes);
    assert!(updates.iter().all(|u| u.attributes == ebgp_attrs()));
}

#[test]
fn ipv6_host_routes_in_mp_reach() {
    let via = AnnounceVia::MpReach {
        family: Family::IPV6_UNICAST,
        next_hop: NextHop::V6 {
            global: "2001:db8::1".parse().unwrap(),
            link_local: Some("fe80::1".parse().unwrap()),
        },
    };
    let attrs = vec![
        PathAttribute::Origin(Origin::Igp),
        PathAttribute::AsPath(AsPath::sequence([65000])),
    ];
    // 4096 - 23 - 13 (ORIGIN, AS_PATH) - 4 (MP_REACH header, extended
    // length) - 37 (AFI, SAFI, length, 32-byte next hop, reserved) = 4019;
    // a /128 takes 17: 236.
    let per = prefixes_per_update(&ctx4(), &attrs, &via, 128).unwrap();
    assert_eq!(per, 236);
    let prefixes = v6_hosts(1000);
    let mut out = BytesMut::new();
    let n = encode_announcements(&mut out, &ctx4(), &attrs, &via, &prefixes).unwrap();
    assert_eq!(n, 5);
    let updates = decode_all(&out, &dctx(false));
    let all: Vec<Prefix> = updates
        .iter()
        .flat_map(|u| u.mp_reach().unwrap().nlri.clone())
        .collect();
    assert_eq!(all, prefixes);
    for u in &updates {
        // MP_REACH_NLRI comes first (RFC 7606 5.1).
        assert!(matches!(u.attributes[0], PathAttribute::MpReach(_)));
        assert_eq!(&u.attributes[1..], &attrs[..]);
    }
}

#[test]
fn small_mp_reach_uses_the_short_length() {
    let via = AnnounceVia::MpReach {
        family: Family::IPV6_UNICAST,
        next_hop: NextHop::V6 {
            global: "2001:db8::1".parse().unwrap(),
            link_local: None,
        },
    };
    let attrs = vec![
        PathAttribute::Origin(Origin::Igp),
        PathAttribute::AsPath(AsPath::empty()),
    ];
    let mut out = BytesMut::new();
    encode_announcements(&mut out, &ctx4(), &attrs, &via, &v6_hosts(1)).unwrap();
    assert_eq!(
        out[23], 0x80,
        "no extended length for a short MP_REACH_NLRI"
    );
    assert_eq!(out[25], 3 + 1 + 16 + 1 + 17);
}

#[test]
fn withdrawals_split_at_the_limit() {
    assert_eq!(
        withdrawals_per_update(&ctx4(), &WithdrawVia::Classic, 32),
        814
    );
    let prefixes = v4_hosts(1000);
    let mut out = BytesMut::new();
    assert_eq!(
        encode_withdrawals(&mut out, &ctx4(), &WithdrawVia::Classic, &prefixes),
        Ok(2)
    );
    let updates = decode_all(&out, &dctx(false));
    assert_eq!(updates[0].withdrawn.len(), 814);
    let all: Vec<Prefix> = updates.iter().flat_map(|u| u.withdrawn.clone()).collect();
    assert_eq!(all, prefixes);
    assert!(
        updates
            .iter()
            .all(|u| u.attributes.is_empty() && u.nlri.is_empty())
    );

    let via = WithdrawVia::MpUnreach(Family::IPV6_UNICAST);
    // 4096 - 23 - 4 - 3 = 4066; 17 each: 239.
    assert_eq!(withdrawals_per_update(&ctx4(), &via, 128), 239);
    let prefixes = v6_hosts(1000);
    let mut out = BytesMut::new();
    assert_eq!(
        encode_withdrawals(&mut out, &ctx4(), &via, &prefixes),
        Ok(5)
    );
    let updates = decode_all(&out, &dctx(false));
    let all: Vec<Prefix> = updates
        .iter()
        .flat_map(|u| u.mp_unreach().unwrap().withdrawn.clone())
        .collect();
    assert_eq!(all, prefixes);
}

#[test]
fn extended_messages_pack_more() {
    let ext = EncodeContext {
        extended_message: true,
        ..ctx4()
    };
    let mut out = BytesMut::new();
    let n = encode_announcements(
        &mut out,
        &ext,
        &ebgp_attrs(),
        &AnnounceVia::Classic,
        &v4_hosts(20_000),
    )
    .unwrap();
    assert_eq!(n, 2);
    let updates = decode_all(&out, &dctx(true));
    assert_eq!(updates[0].nlri.len(), 13098);
    let mut out = BytesMut::new();
    assert_eq!(
        encode_withdrawals(&mut out, &ext, &WithdrawVia::Classic, &v4_hosts(20_000)),
        Ok(2)
    );
}

#[test]
fn no_prefixes_no_messages() {
    let mut out = BytesMut::new();
    assert_eq!(
        encode_announcements(&mut out, &ctx4(), &ebgp_attrs(), &AnnounceVia::Classic, &[]),
        Ok(0)
    );
    assert_eq!(
        encode_withdrawals(&mut out, &ctx4(), &WithdrawVia::Classic, &[]),
        Ok(0)
    );
    assert!(out.is_empty());
}

#[test]
fn end_of_rib_per_family() {
    let mut out = BytesMut::new();
    encode_end_of_rib(&mut out, &ctx4(), Family::IPV4_UNICAST).unwrap();
    encode_end_of_rib(&mut out, &ctx4(), Family::IPV6_UNICAST).unwrap();
    let updates = decode_all(&out, &dctx(false));
    assert_eq!(updates[0].end_of_rib_family(), Some(Family::IPV4_UNICAST));
    assert_eq!(updates[1].end_of_rib_family(), Some(Family::IPV6_UNICAST));
}

#[test]
fn announcement_errors_leave_the_buffer_alone() {
    let mut out = BytesMut::from(&b"kept"[..]);
    let no_next_hop = &ebgp_attrs()[..2];
    assert_eq!(
        encode_announcements(
            &mut out,
            &ctx4(),
            no_next_hop,
            &AnnounceVia::Classic,
            &v4_hosts(1)
        ),
        Err(EncodeError::MissingAttribute(3))
    );
    assert_eq!(
        encode_announcements(
            &mut out,
            &ctx4(),
            &ebgp_attrs(),
            &AnnounceVia::Classic,
            &v6_hosts(1)
        ),
        Err(EncodeError::FamilyMismatch {
            prefix: "2001:db8::/128".into(),
            expected: bgp::wire::Afi::IPV4
        })
    );
    let via = AnnounceVia::MpReach {
        family: Family::IPV6_UNICAST,
        next_hop: NextHop::V6 {
            global: "2001:db8::1".parse().unwrap(),
            link_local: None,
        },
    };
    assert_eq!(
        encode_announcements(&mut out, &ctx4(), &ebgp_attrs(), &via, &v6_hosts(1)),
        Err(EncodeError::UnexpectedAttribute(3))
    );
    let mut huge = ebgp_attrs();
    huge.push(PathAttribute::Communities(
        (0..1020).map(Community).collect(),
    ));
    assert_eq!(
        encode_announcements(
            &mut out,
            &ctx4(),
            &huge,
            &AnnounceVia::Classic,
            &v4_hosts(2)
        ),
        Err(EncodeError::AttributesTooLarge { max: 4096 })
    );
    assert_eq!(
        encode_withdrawals(&mut out, &ctx4(), &WithdrawVia::Classic, &v6_hosts(1)),
        Err(EncodeError::FamilyMismatch {
            prefix: "2001:db8::/128".into(),
            expected: bgp::wire::Afi::IPV4
        })
    );
    assert_eq!(&out[..], b"kept");
}

#[test]
fn two_octet_session_packing_adds_as4_path_once_per_message() {
    let enc2 = EncodeContext::default();
    let attrs = vec![
        PathAttribute::Origin(Origin::Igp),
        PathAttribute::AsPath(AsPath::sequence([4_200_000_000])),
        PathAttribute::NextHop(Ipv4Addr::new(192, 0, 2, 1)),
    ];
    // AS_PATH 7 + AS4_PATH 9 instead of AS_PATH 9.
    assert_eq!(
        prefixes_per_update(&enc2, &attrs, &AnnounceVia::Classic, 32),
        Ok(809)
    );
    let mut out = BytesMut::new();
    encode_announcements(
        &mut out,
        &enc2,
        &attrs,
        &AnnounceVia::Classic,
        &v4_hosts(1000),
    )
    .unwrap();
    let updates = decode_all(
        &out,
        &DecodeContext {
            four_octet_as: false,
            ..DecodeContext::default()
        },
    );
    for u in updates {
        assert_eq!(
            u.effective_as_path(),
            Some(AsPath::sequence([4_200_000_000]))
        );
    }
}
