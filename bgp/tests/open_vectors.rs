//! The shared OPEN vectors (`../shared/vectors/bgp/open-*`, from MetalLB's
//! test data): decode, check what the bytes say, re-encode byte for byte.

mod common;

use std::net::Ipv4Addr;

use bgp::wire::{
    Afi, Capabilities, Capability, DecodeContext, EncodeContext, Family, GracefulRestart, HoldTime,
    Message, Open, OptionalParameter, Safi, UnknownCapability, negotiate,
};
use common::{decode, encode, hex};

fn vector(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../shared/vectors/bgp/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn decode_open(name: &str) -> (Vec<u8>, Open) {
    let bytes = vector(name);
    match decode(&bytes, &DecodeContext::default()) {
        Ok(Message::Open(open)) => (bytes, open),
        other => panic!("{name}: expected an OPEN, got {other:?}"),
    }
}

fn assert_reencodes(name: &str, bytes: &[u8], open: &Open) {
    let again = encode(&Message::Open(open.clone()), &EncodeContext::default());
    assert_eq!(hex(&again), hex(bytes), "{name} re-encoded differently");
}

fn caps(open: &Open) -> Vec<Capability> {
    open.capabilities().cloned().collect()
}

#[test]
fn open_1_asn_1_with_add_path_kept_as_unknown() {
    let (bytes, open) = decode_open("open-1");
    assert_eq!(bytes.len(), 65);
    assert_eq!(open.version, 4);
    assert_eq!(open.my_as, 1);
    assert_eq!(open.asn(), 1);
    assert_eq!(open.hold_time, HoldTime::new(180).unwrap());
    assert_eq!(open.bgp_id, Ipv4Addr::new(10, 1, 1, 1));
    assert!(!open.extended_parameters);
    assert_eq!(
        open.parameters.len(),
        1,
        "all capabilities in one parameter"
    );
    assert_eq!(
        caps(&open),
        vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            // AFI 1 / SAFI 4: labeled unicast, kept as a family we do not use.
            Capability::Multiprotocol(Family::new(Afi::IPV4, Safi(4))),
            Capability::RouteRefresh,
            Capability::GracefulRestart(GracefulRestart {
                flags: 0,
                restart_time: 300,
                families: vec![],
            }),
            Capability::FourOctetAs(1),
            // ADD-PATH (69): IPv4 unicast and IPv4 labeled unicast, receive.
            Capability::Unknown(UnknownCapability {
                code: 69,
                value: vec![0, 1, 1, 1, 0, 1, 4, 1].into(),
            }),
        ]
    );
    assert_reencodes("open-1", &bytes, &open);
}

#[test]
fn open_2_only_four_octet_as() {
    let (bytes, open) = decode_open("open-2");
    assert_eq!(open.my_as, 64543);
    assert_eq!(open.asn(), 64543);
    assert_eq!(open.hold_time.seconds(), 40);
    assert_eq!(open.bgp_id, Ipv4Addr::new(192, 168, 18, 65));
    assert_eq!(caps(&open), vec![Capability::FourOctetAs(64543)]);
    // No multiprotocol capability: IPv4 unicast is implied.
    let summary = Capabilities::from_capabilities(open.capabilities());
    assert_eq!(summary.families(), vec![Family::IPV4_UNICAST]);
    assert!(!summary.any_route_refresh());
    assert_reencodes("open-2", &bytes, &open);
}

#[test]
fn open_3_graceful_restart_and_enhanced_route_refresh() {
    let (bytes, open) = decode_open("open-3");
    assert_eq!(open.my_as, 64543);
    assert_eq!(open.hold_time.seconds(), 40);
    assert_eq!(open.bgp_id, Ipv4Addr::new(192, 168, 16, 69));
    assert_eq!(
        caps(&open),
        vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::RouteRefresh,
            Capability::GracefulRestart(GracefulRestart::default()),
            Capability::FourOctetAs(64543),
            Capability::EnhancedRouteRefresh,
        ]
    );
    assert_reencodes("open-3", &bytes, &open);
}

#[test]
fn open_4_one_capability_per_parameter_with_old_route_refresh() {
    let (bytes, open) = decode_open("open-4");
    assert_eq!(open.my_as, 64543);
    assert_eq!(open.hold_time.seconds(), 180);
    assert_eq!(open.bgp_id, Ipv4Addr::new(192, 168, 16, 1));
    assert_eq!(
        open.parameters,
        vec![
            OptionalParameter::Capabilities(vec![Capability::Multiprotocol(Family::IPV4_UNICAST)]),
            OptionalParameter::Capabilities(vec![Capability::RouteRefreshOld]),
            OptionalParameter::Capabilities(vec![Capability::RouteRefresh]),
            OptionalParameter::Capabilities(vec![Capability::FourOctetAs(64543)]),
        ]
    );
    assert_reencodes("open-4", &bytes, &open);
}

#[test]
fn negotiating_with_the_vectors() {
    let local = Capabilities {
        multiprotocol: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        route_refresh: true,
        enhanced_route_refresh: true,
        four_octet_as: Some(65000),
        graceful_restart: Some(GracefulRestart {
            flags: GracefulRestart::NOTIFICATION,
            restart_time: 120,
            families: vec![],
        }),
        ..Capabilities::default()
    };
    let (_, open3) = decode_open("open-3");
    let n = negotiate(
        &local,
        &Capabilities::from_capabilities(open3.capabilities()),
    );
    assert_eq!(n.families, vec![Family::IPV4_UNICAST]);
    assert_eq!(n.local_only_families, vec![Family::IPV6_UNICAST]);
    assert!(n.four_octet_as && n.route_refresh && n.enhanced_route_refresh);
    let gr = n.graceful_restart.expect("both advertised GR");
    assert_eq!(gr.peer_restart_time, 0);
    assert!(!gr.notification, "open-3 has no N bit");

    let (_, open4) = decode_open("open-4");
    let n = negotiate(
        &local,
        &Capabilities::from_capabilities(open4.capabilities()),
    );
    assert!(n.route_refresh, "either route refresh code counts");
    assert!(!n.enhanced_route_refresh);
    assert!(n.graceful_restart.is_none());

    let (_, open1) = decode_open("open-1");
    let n = negotiate(
        &local,
        &Capabilities::from_capabilities(open1.capabilities()),
    );
    assert_eq!(n.peer_unknown.len(), 1);
    assert_eq!(n.peer_unknown[0].code, 69);
}
