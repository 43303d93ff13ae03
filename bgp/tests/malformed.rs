//! One test per NOTIFICATION code/subcode the decoder produces, with the
//! exact Data field it carries.

mod common;

use bgp::wire::{
    BytesMut, DecodeContext, ErrorSite, Message, MessageType, Notification, UpdateVerdict, frame,
    validate_update,
};
use common::{
    attr, attr_ext, decode, decode_update, ebgp4, mandatory_attrs4, message, update_body, verdict,
};

fn open_body(version: u8, my_as: u16, hold: u16, id: [u8; 4], params: &[u8]) -> Vec<u8> {
    let mut b = vec![version];
    b.extend_from_slice(&my_as.to_be_bytes());
    b.extend_from_slice(&hold.to_be_bytes());
    b.extend_from_slice(&id);
    b.push(u8::try_from(params.len()).unwrap());
    b.extend_from_slice(params);
    b
}

fn open_error(body: &[u8]) -> Notification {
    decode(&message(1, body), &DecodeContext::default()).unwrap_err()
}

fn assert_notification(n: &Notification, code: u8, subcode: u8, data: &[u8]) {
    assert_eq!((n.code(), n.subcode()), (code, subcode), "{n}");
    assert_eq!(n.data().as_ref(), data, "{n}");
}

/// The single error recorded while decoding an UPDATE body.
fn update_error(body: &[u8], ctx: &DecodeContext) -> (ErrorSite, Notification) {
    let u = decode_update(body, ctx);
    assert_eq!(u.errors.len(), 1, "{:?}", u.errors);
    (u.errors[0].site, u.errors[0].notification.clone())
}

#[test]
fn message_header_1_1_connection_not_synchronized() {
    let mut m = message(4, &[]);
    m[0] = 0;
    let n = frame(&mut BytesMut::from(&m[..]), 4096).unwrap_err();
    assert_eq!(n, Notification::ConnectionNotSynchronized);
    assert_notification(&n, 1, 1, &[]);
}

#[test]
fn message_header_1_2_bad_message_length() {
    let mut m = message(4, &[]);
    m[16..18].copy_from_slice(&5000u16.to_be_bytes());
    let n = frame(&mut BytesMut::from(&m[..]), 4096).unwrap_err();
    assert_notification(&n, 1, 2, &[0x13, 0x88]);
    // A body handed to the decoder directly is checked too.
    let n = Message::decode(MessageType::Keepalive, vec![0u8].into(), &ebgp4()).unwrap_err();
    assert_notification(&n, 1, 2, &[0, 20]);
}

#[test]
fn message_header_1_3_bad_message_type() {
    let n = frame(&mut BytesMut::from(&message(7, &[])[..]), 4096).unwrap_err();
    assert_notification(&n, 1, 3, &[7]);
}

#[test]
fn open_2_0_unspecific_for_malformed_parameters() {
    // Optional parameters length beyond the message.
    let mut body = open_body(4, 65001, 90, [10, 0, 0, 1], &[]);
    body[9] = 10;
    assert_notification(&open_error(&body), 2, 0, &[]);
    // Capability overrunning its parameter.
    let body = open_body(4, 65001, 90, [10, 0, 0, 1], &[2, 4, 1, 4, 0, 1]);
    assert_notification(&open_error(&body), 2, 0, &[]);
    // Multiprotocol capability of the wrong length.
    let body = open_body(4, 65001, 90, [10, 0, 0, 1], &[2, 5, 1, 3, 0, 1, 0]);
    assert_notification(&open_error(&body), 2, 0, &[]);
    // Bytes after the declared parameters.
    let mut body = open_body(4, 65001, 90, [10, 0, 0, 1], &[2, 2, 2, 0]);
    body.push(0);
    assert_notification(&open_error(&body), 2, 0, &[]);
}

#[test]
fn open_2_1_unsupported_version_number() {
    let n = open_error(&open_body(3, 65001, 90, [10, 0, 0, 1], &[]));
    assert_eq!(n, Notification::UnsupportedVersionNumber { version: 4 });
    assert_notification(&n, 2, 1, &[0, 4]);
}

#[test]
fn open_2_2_bad_peer_as() {
    let n = open_error(&open_body(4, 0, 90, [10, 0, 0, 1], &[]));
    assert_notification(&n, 2, 2, &[]);
    // AS 0 in the 4-octet AS capability (RFC 7607).
    let n = open_error(&open_body(
        4,
        23456,
        90,
        [10, 0, 0, 1],
        &[2, 6, 65, 4, 0, 0, 0, 0],
    ));
    assert_notification(&n, 2, 2, &[]);
}

#[test]
fn open_2_3_bad_bgp_identifier() {
    let n = open_error(&open_body(4, 65001, 90, [0, 0, 0, 0], &[]));
    assert_notification(&n, 2, 3, &[]);
}

#[test]
fn open_2_4_unsupported_optional_parameter() {
    // Type 1 (authentication, deprecated).
    let n = open_error(&open_body(4, 65001, 90, [10, 0, 0, 1], &[1, 2, 0, 0]));
    assert_notification(&n, 2, 4, &[]);
}

#[test]
fn open_2_6_unacceptable_hold_time() {
    for hold in [1, 2] {
        let n = open_error(&open_body(4, 65001, hold, [10, 0, 0, 1], &[]));
        assert_notification(&n, 2, 6, &[]);
    }
    for hold in [0, 3, 65535] {
        assert!(
            decode(
                &message(1, &open_body(4, 65001, hold, [10, 0, 0, 1], &[])),
                &DecodeContext::default()
            )
            .is_ok()
        );
    }
}

#[test]
fn update_3_1_malformed_attribute_list() {
    // Withdrawn Routes Length beyond the message: the decoder fails.
    let mut body = update_body(&[], &[], &[]);
    body[0..2].copy_from_slice(&10u16.to_be_bytes());
    let n = decode(&message(2, &body), &ebgp4()).unwrap_err();
    assert_notification(&n, 3, 1, &[]);
    // Total Path Attribute Length beyond the message.
    let mut body = update_body(&[], &[], &[]);
    body[2..4].copy_from_slice(&1u16.to_be_bytes());
    let n = decode(&message(2, &body), &ebgp4()).unwrap_err();
    assert_notification(&n, 3, 1, &[]);
    // A repeated MP_REACH_NLRI: recorded, then a session reset.
    let mp = attr(
        0x80,
        14,
        &[
            0, 2, 1, 16, 0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0,
        ],
    );
    let mut attrs = mp.clone();
    attrs.extend(mp);
    let body = update_body(&[], &attrs, &[]);
    let (site, n) = update_error(&body, &ebgp4());
    assert_eq!(site, ErrorSite::DuplicateAttribute { type_code: 14 });
    assert_notification(&n, 3, 1, &[]);
}

#[test]
fn update_3_2_unrecognized_well_known_attribute() {
    let unknown = attr(0x40, 99, &[1, 2]);
    let body = update_body(&[], &unknown, &[]);
    let (_, n) = update_error(&body, &ebgp4());
    assert_notification(&n, 3, 2, &[0x40, 99, 2, 1, 2]);
    let u = decode_update(&body, &ebgp4());
    assert_eq!(
        validate_update(&u, &ebgp4()),
        UpdateVerdict::SessionReset(n)
    );
}

#[test]
fn update_3_3_missing_well_known_attribute() {
    // NLRI with ORIGIN and NEXT_HOP but no AS_PATH.
    let mut attrs = attr(0x40, 1, &[0]);
    attrs.extend(attr(0x40, 3, &[192, 0, 2, 1]));
    let UpdateVerdict::TreatAsWithdraw { reasons, .. } =
        verdict(&[], &attrs, &[24, 10, 0, 0], &ebgp4())
    else {
        panic!("expected treat-as-withdraw")
    };
    assert_eq!(reasons.len(), 1);
    assert_notification(&reasons[0], 3, 3, &[2]);
}

#[test]
fn update_3_4_attribute_flags_error() {
    // ORIGIN marked optional.
    let bad = attr(0xc0, 1, &[0]);
    let (site, n) = update_error(&update_body(&[], &bad, &[]), &ebgp4());
    assert_eq!(
        site,
        ErrorSite::Attribute {
            type_code: 1,
            flags: 0xc0
        }
    );
    assert_notification(&n, 3, 4, &[0xc0, 1, 1, 0]);
    // With the extended length, the data is the attribute as received.
    let bad = attr_ext(0x40, 4, &[0, 0, 0, 1]);
    let (_, n) = update_error(&update_body(&[], &bad, &[]), &ebgp4());
    assert_notification(&n, 3, 4, &[0x50, 4, 0, 4, 0, 0, 0, 1]);
}

#[test]
fn update_3_5_attribute_length_error() {
    let bad = attr(0x80, 4, &[0, 0, 1]);
    let (_, n) = update_error(&update_body(&[], &bad, &[]), &ebgp4());
    assert_notification(&n, 3, 5, &[0x80, 4, 3, 0, 0, 1]);
}

#[test]
fn update_3_6_invalid_origin_attribute() {
    let bad = attr(0x40, 1, &[3]);
    let (_, n) = update_error(&update_body(&[], &bad, &[]), &ebgp4());
    assert_notification(&n, 3, 6, &[0x40, 1, 1, 3]);
}

#[test]
fn update_3_8_invalid_next_hop_attribute() {
    for addr in [[0, 0, 0, 0], [224, 0, 0, 5], [255, 255, 255, 255]] {
        let bad = attr(0x40, 3, &addr);
        let (_, n) = update_error(&update_body(&[], &bad, &[]), &ebgp4());
        let mut data = vec![0x40, 3, 4];
        data.extend_from_slice(&addr);
        assert_notification(&n, 3, 8, &data);
    }
}

#[test]
fn update_3_9_optional_attribute_error() {
    // MP_REACH_NLRI for IPv6 with a 5-byte next hop.
    let value = [0, 2, 1, 5, 1, 2, 3, 4, 5, 0];
    let bad = attr(0x80, 14, &value);
    let (_, n) = update_error(&update_body(&[], &bad, &[]), &ebgp4());
    let mut data = vec![0x80, 14, 10];
    data.extend_from_slice(&value);
    assert_notification(&n, 3, 9, &data);
    // AGGREGATOR with AS 0 (RFC 7607).
    let bad = attr(0xc0, 7, &[0, 0, 0, 0, 10, 0, 0, 1]);
    let (_, n) = update_error(&update_body(&[], &bad, &[]), &ebgp4());
    assert_notification(&n, 3, 9, &[0xc0, 7, 8, 0, 0, 0, 0, 10, 0, 0, 1]);
}

#[test]
fn update_3_10_invalid_network_field() {
    let attrs = mandatory_attrs4();
    let (site, n) = update_error(&update_body(&[], &attrs, &[33, 10, 0, 0, 0, 0]), &ebgp4());
    assert_eq!(site, ErrorSite::Nlri);
    assert_notification(&n, 3, 10, &[]);
    let (site, n) = update_error(&update_body(&[24, 10, 0], &[], &[]), &ebgp4());
    assert_eq!(site, ErrorSite::WithdrawnRoutes);
    assert_notification(&n, 3, 10, &[]);
}

#[test]
fn update_3_11_malformed_as_path() {
    // Segment type 5 does not exist.
    let bad = attr(0x40, 2, &[5, 1, 0, 0, 0xfd, 0xe9]);
    let (_, n) = update_error(&update_body(&[], &bad, &[]), &ebgp4());
    assert_notification(&n, 3, 11, &[]);
}

#[test]
fn route_refresh_7_1_invalid_message_length() {
    let m = message(5, &[0, 1, 0, 1, 0]);
    let n = decode(&m, &ebgp4()).unwrap_err();
    assert_eq!(
        n.to_string().split(" (").next(),
        Some("ROUTE-REFRESH Message Error/Invalid Message Length")
    );
    assert_notification(&n, 7, 1, &m);
}
