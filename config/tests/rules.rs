//! One test per validation rule of MetalLB's configuration parser
//! (`internal/config`, reference section 4.2, plus the FRR-mode duplicate
//! peer check): the exact message, the object blamed, whether the error is
//! transient, and the nearest valid configuration ("twin"), which must parse.
//!
//! Rules not tested, and why:
//! - `missing bfd profile name`: MetalLB objects always have a name; an
//!   unnamed BFDProfile is not an object one can apply (the API server
//!   rejects it), so the rule is not reachable through a named object.
//! - `invalid IP range %q` (without detail): `strings.SplitN(s, "-", 2)` on a
//!   string containing `-` always yields two parts, so it is unreachable.
//! - `peer %s already exists` (DeepEqual of parsed peers including their
//!   names): dead code in MetalLB (two peers never have the same name).

mod common;

use common::{accept, assert_rejected, node, peer, pool, reject};
use std::time::Duration;

/// apimachinery's detail for a label key that is not a qualified name.
const BAD_KEY_DETAIL: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

fn cat(parts: &[&str]) -> String {
    parts.concat()
}

fn bfd(name: &str, spec: &str) -> String {
    format!(
        "---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata:
  name: {name}
spec: {spec}
"
    )
}

fn bgp_ad(name: &str, spec: &str) -> String {
    format!(
        "---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata:
  name: {name}
spec: {spec}
"
    )
}

fn l2_ad(name: &str, spec: &str) -> String {
    format!(
        "---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  name: {name}
spec: {spec}
"
    )
}

/// A BGPPeer named `name` whose spec is `spec` (a YAML flow mapping).
fn peer_spec(name: &str, spec: &str) -> String {
    format!(
        "---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: {name}
spec: {spec}
"
    )
}

fn pool_spec(name: &str, spec: &str) -> String {
    format!(
        "---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: {name}
spec: {spec}
"
    )
}

fn community_cr(name: &str, aliases: &[(&str, &str)]) -> String {
    let mut out = format!(
        "---
apiVersion: metallb.io/v1beta1
kind: Community
metadata:
  name: {name}
spec:
  communities:
"
    );
    for (alias, value) in aliases {
        out.push_str(&format!("  - name: {alias:?}\n    value: {value:?}\n"));
    }
    out
}

fn basic_auth_secret(name: &str, password: &str) -> String {
    format!(
        "---
apiVersion: v1
kind: Secret
metadata:
  name: {name}
type: kubernetes.io/basic-auth
stringData:
  password: {password:?}
"
    )
}

// ===========================================================================
// BFD profiles

/// `invalid value %d, must be in %d-%d range` + the field's message, wrapped
/// in `parsing bfd profile #<index after sorting by name>: `. The bad
/// profile is listed first but sorts second.
fn check_bfd_range(field: &str, what: &str, min: u32, max: u32) {
    for bad in [min - 1, max + 1] {
        let yaml = cat(&[
            &bfd("zz-bad", &format!("{{{field}: {bad}}}")),
            &bfd("aa-good", "{}"),
        ]);
        assert_rejected(
            &yaml,
            "BFDProfile",
            "zz-bad",
            &format!(
                "parsing bfd profile #2: invalid value {bad}, must be in {min}-{max} range\n{what}"
            ),
            false,
        );
    }
    for good in [min, max] {
        let cfg = accept(&cat(&[
            &bfd("zz-bad", &format!("{{{field}: {good}}}")),
            &bfd("aa-good", "{}"),
        ]));
        assert_eq!(cfg.bfd_profiles.len(), 2);
    }
}

#[test]
fn bfd_detect_multiplier_range() {
    check_bfd_range(
        "detectMultiplier",
        "invalid detect multiplier value",
        2,
        255,
    );
}

#[test]
fn bfd_receive_interval_range() {
    check_bfd_range(
        "receiveInterval",
        "invalid receive interval value",
        10,
        60000,
    );
}

#[test]
fn bfd_transmit_interval_range() {
    check_bfd_range(
        "transmitInterval",
        "invalid transmit interval value",
        10,
        60000,
    );
}

#[test]
fn bfd_minimum_ttl_range() {
    check_bfd_range("minimumTtl", "invalid minimum ttl value", 1, 254);
}

#[test]
fn bfd_echo_interval_range() {
    check_bfd_range("echoInterval", "invalid echo interval value", 10, 60000);
}

#[test]
fn bfd_duplicate_name() {
    // Only possible with two objects of the same name (e.g. read from files).
    assert_rejected(
        &cat(&[
            &bfd("fast", "{detectMultiplier: 3}"),
            &bfd("fast", "{detectMultiplier: 5}"),
        ]),
        "BFDProfile",
        "fast",
        "found duplicate bfd profile name fast",
        false,
    );
    let cfg = accept(&cat(&[
        &bfd("fast", "{detectMultiplier: 3}"),
        &bfd("slow", "{detectMultiplier: 5}"),
    ]));
    assert_eq!(cfg.bfd_profiles["fast"].detect_multiplier, 3);
    assert_eq!(cfg.bfd_profiles["slow"].detect_multiplier, 5);
}

// ===========================================================================
// Peers

#[test]
fn peer_missing_local_asn() {
    assert_rejected(
        &peer_spec("p1", "{peerASN: 64513, peerAddress: 192.0.2.1}"),
        "BGPPeer",
        "p1",
        "parsing peer p1 missing local ASN",
        false,
    );
    accept(&peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1}",
    ));
}

#[test]
fn peer_missing_peer_asn_and_dynamic_asn() {
    assert_rejected(
        &peer_spec("p1", "{myASN: 64512, peerAddress: 192.0.2.1}"),
        "BGPPeer",
        "p1",
        "parsing peer p1 missing peer ASN and dynamicASN",
        false,
    );
    accept(&peer_spec(
        "p1",
        "{myASN: 64512, dynamicASN: external, peerAddress: 192.0.2.1}",
    ));
}

#[test]
fn peer_both_peer_asn_and_dynamic_asn() {
    assert_rejected(
        &peer_spec(
            "p1",
            "{myASN: 64512, peerASN: 64513, dynamicASN: external, peerAddress: 192.0.2.1}",
        ),
        "BGPPeer",
        "p1",
        "parsing peer p1 both peer ASN and dynamicASN specified",
        false,
    );
    accept(&peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1}",
    ));
}

#[test]
fn peer_invalid_dynamic_asn() {
    assert_rejected(
        &peer_spec(
            "p1",
            "{myASN: 64512, dynamicASN: sideways, peerAddress: 192.0.2.1}",
        ),
        "BGPPeer",
        "p1",
        "parsing peer p1 invalid dynamicASN sideways",
        false,
    );
    for mode in ["internal", "external"] {
        accept(&peer_spec(
            "p1",
            &format!("{{myASN: 64512, dynamicASN: {mode}, peerAddress: 192.0.2.1}}"),
        ));
    }
}

#[test]
fn peer_ebgp_multihop_on_ibgp() {
    assert_rejected(
        &peer_spec(
            "p1",
            "{myASN: 64512, peerASN: 64512, ebgpMultiHop: true, peerAddress: 192.0.2.1}",
        ),
        "BGPPeer",
        "p1",
        "parsing peer p1 invalid ebgp-multihop parameter set for an ibgp peer",
        false,
    );
    let cfg = accept(&peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, ebgpMultiHop: true, peerAddress: 192.0.2.1}",
    ));
    assert!(cfg.peers[0].ebgp_multihop);
}

#[test]
fn peer_without_address_or_interface() {
    assert_rejected(
        &peer_spec("p1", "{myASN: 64512, peerASN: 64513}"),
        "BGPPeer",
        "p1",
        "parsing peer p1 peer has no Address or Interface specified",
        false,
    );
    accept(&peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, peerAddress: 2001:db8::1}",
    ));
}

#[test]
fn peer_with_address_and_interface() {
    assert_rejected(
        &peer_spec(
            "p1",
            "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, interface: eth1}",
        ),
        "BGPPeer",
        "p1",
        "parsing peer p1 peer has both Address and Interface specified",
        false,
    );
    let cfg = accept(&peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, interface: eth1}",
    ));
    assert_eq!(cfg.peers[0].interface.as_deref(), Some("eth1"));
}

fn timer_peer(timers: &str) -> String {
    peer_spec(
        "p1",
        &format!("{{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, {timers}}}"),
    )
}

#[test]
fn peer_hold_time_below_three_seconds() {
    assert_rejected(
        &timer_peer("holdTime: 2s"),
        "BGPPeer",
        "p1",
        r#"parsing peer p1 invalid BGPPeer timers: invalid hold time "2s": must be 0 or >=3s"#,
        false,
    );
    // The message prints Go's Duration.String(), not the text as written.
    assert_rejected(
        &timer_peer("holdTime: 2000ms"),
        "BGPPeer",
        "p1",
        r#"parsing peer p1 invalid BGPPeer timers: invalid hold time "2s": must be 0 or >=3s"#,
        false,
    );
    let cfg = accept(&timer_peer("holdTime: 0s"));
    assert_eq!(cfg.peers[0].hold_time, Duration::ZERO);
    assert_eq!(cfg.peers[0].keepalive_time, Duration::ZERO);
    let cfg = accept(&timer_peer("holdTime: 3s"));
    assert_eq!(cfg.peers[0].hold_time, Duration::from_secs(3));
}

#[test]
fn peer_hold_time_is_truncated_to_whole_seconds_like_metallb() {
    // MetalLB: `rounded := time.Duration(int(holdTime.Seconds())) * time.Second`
    // -- int() of a float truncates, so 2.5s counts as 2s and is rejected.
    assert_rejected(
        &timer_peer("holdTime: 2500ms"),
        "BGPPeer",
        "p1",
        r#"parsing peer p1 invalid BGPPeer timers: invalid hold time "2.5s": must be 0 or >=3s"#,
        false,
    );
    accept(&timer_peer("holdTime: 3500ms"));
}

#[test]
fn peer_keepalive_above_hold_time() {
    assert_rejected(
        &timer_peer("holdTime: 9s, keepaliveTime: 10s"),
        "BGPPeer",
        "p1",
        r#"parsing peer p1 invalid BGPPeer timers: invalid keepaliveTime "10s", must be lower than holdTime "9s""#,
        false,
    );
    assert_rejected(
        &timer_peer("holdTime: 90s, keepaliveTime: 100s"),
        "BGPPeer",
        "p1",
        r#"parsing peer p1 invalid BGPPeer timers: invalid keepaliveTime "1m40s", must be lower than holdTime "1m30s""#,
        false,
    );
    // Equal is accepted ("lower" is `>` in MetalLB).
    let cfg = accept(&timer_peer("holdTime: 10s, keepaliveTime: 10s"));
    assert_eq!(cfg.peers[0].keepalive_time, Duration::from_secs(10));
    let cfg = accept(&timer_peer("holdTime: 1m30s, keepaliveTime: 20s"));
    assert_eq!(cfg.peers[0].hold_time, Duration::from_secs(90));
    assert_eq!(cfg.peers[0].keepalive_time, Duration::from_secs(20));
}

#[test]
fn peer_derived_timers() {
    let cfg = accept(&timer_peer("holdTime: 9s"));
    assert_eq!(cfg.peers[0].hold_time, Duration::from_secs(9));
    assert_eq!(cfg.peers[0].keepalive_time, Duration::from_secs(3));

    let cfg = accept(&timer_peer("keepaliveTime: 10s"));
    assert_eq!(cfg.peers[0].hold_time, Duration::from_secs(30));
    assert_eq!(cfg.peers[0].keepalive_time, Duration::from_secs(10));

    let cfg = accept(&peer("p1", "192.0.2.1"));
    assert_eq!(cfg.peers[0].hold_time, Duration::from_secs(90));
    assert_eq!(cfg.peers[0].keepalive_time, Duration::from_secs(30));
    assert_eq!(cfg.peers[0].port, 179);
}

#[test]
fn peer_invalid_address() {
    assert_rejected(
        &peer("p1", "198.51.100.256"),
        "BGPPeer",
        "p1",
        r#"parsing peer p1 invalid BGPPeer address "198.51.100.256""#,
        false,
    );
    let cfg = accept(&peer("p1", "198.51.100.255"));
    assert_eq!(
        cfg.peers[0].address,
        Some("198.51.100.255".parse().unwrap())
    );
}

#[test]
fn peer_invalid_router_id() {
    assert_rejected(
        &peer_spec(
            "p1",
            "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, routerID: router-1}",
        ),
        "BGPPeer",
        "p1",
        r#"parsing peer p1 invalid router ID "router-1""#,
        false,
    );
    let cfg = accept(&peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, routerID: 192.0.2.254}",
    ));
    assert_eq!(cfg.peers[0].router_id, Some("192.0.2.254".parse().unwrap()));
}

#[test]
fn peer_invalid_source_address() {
    assert_rejected(
        &peer_spec(
            "p1",
            "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, sourceAddress: 203.0.113.x}",
        ),
        "BGPPeer",
        "p1",
        r#"parsing peer p1 invalid source IP "203.0.113.x""#,
        false,
    );
    let cfg = accept(&peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, sourceAddress: 203.0.113.7}",
    ));
    assert_eq!(
        cfg.peers[0].source_address,
        Some("203.0.113.7".parse().unwrap())
    );
}

fn selector_peer(selectors: &str) -> String {
    peer_spec(
        "p1",
        &format!(
            "{{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, nodeSelectors: {selectors}}}"
        ),
    )
}

#[test]
fn peer_duplicate_node_selectors() {
    assert_rejected(
        &selector_peer(
            "[{matchLabels: {kubernetes.io/hostname: node-a}}, {matchLabels: {kubernetes.io/hostname: node-a}}]",
        ),
        "BGPPeer",
        "p1",
        r#"parsing peer p1 duplicate definition of nodeSelectors {map["kubernetes.io/hostname":"node-a"] []}"#,
        false,
    );
    assert_rejected(
        &selector_peer(
            "[{matchExpressions: [{key: rack, operator: In, values: [r1]}, {key: rack, operator: In, values: [r1]}]}]",
        ),
        "BGPPeer",
        "p1",
        r#"parsing peer p1 duplicate definition of match expressions {"rack" "In" ["r1"]}"#,
        false,
    );
    assert_rejected(
        &selector_peer("[{matchExpressions: [{key: rack, operator: In, values: [r2, r1, r2]}]}]"),
        "BGPPeer",
        "p1",
        r#"parsing peer p1 duplicate definition of match expression value in label selector "r2""#,
        false,
    );
    let cfg = accept(&selector_peer(
        "[{matchLabels: {kubernetes.io/hostname: node-a}}, {matchLabels: {kubernetes.io/hostname: node-b}}, {matchExpressions: [{key: rack, operator: In, values: [r1, r2]}, {key: rack, operator: NotIn, values: [r1]}]}]",
    ));
    assert_eq!(cfg.peers[0].node_selectors.len(), 3);
}

#[test]
fn peer_invalid_node_selector() {
    assert_rejected(
        &selector_peer(r#"[{matchLabels: {"bad key": x}}]"#),
        "BGPPeer",
        "p1",
        &format!(
            "parsing peer p1 key: Invalid value: \"bad key\": {BAD_KEY_DETAIL}\nfailed to convert peer p1 node selector"
        ),
        false,
    );
    accept(&selector_peer(r#"[{matchLabels: {"good-key": x}}]"#));
}

#[test]
fn peer_password_and_password_secret() {
    let both = cat(&[
        &peer_spec(
            "p1",
            "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, password: hunter2, passwordSecret: {name: bgp-auth, namespace: metallb-system}}",
        ),
        &basic_auth_secret("bgp-auth", "hunter2"),
    ]);
    assert_rejected(
        &both,
        "BGPPeer",
        "p1",
        r#"parsing peer p1 can not have both password and secret ref set in peer config "metallb-system"/"p1""#,
        false,
    );
    let cfg = accept(&peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, password: hunter2}",
    ));
    assert_eq!(cfg.peers[0].password.as_ref().unwrap().expose(), "hunter2");
    let cfg = accept(&cat(&[
        &peer_spec(
            "p1",
            "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, passwordSecret: {name: bgp-auth, namespace: metallb-system}}",
        ),
        &basic_auth_secret("bgp-auth", "hunter2"),
    ]));
    assert_eq!(cfg.peers[0].password.as_ref().unwrap().expose(), "hunter2");
}

fn secret_peer() -> String {
    peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, passwordSecret: {name: bgp-auth, namespace: metallb-system}}",
    )
}

#[test]
fn peer_password_secret_missing_is_transient() {
    // MetalLB names the *peer* (its namespace and name) in this message,
    // not the Secret: `fmt.Sprintf("secret ref not found for peer config
    // %q/%q", p.Namespace, p.Name)` in passwordFromSecretForPeer.
    assert_rejected(
        &secret_peer(),
        "BGPPeer",
        "p1",
        "parsing peer p1 secret ref not found for peer config \"metallb-system\"/\"p1\"\nfailed to parse peer p1 password secret",
        true,
    );
    accept(&cat(&[
        &secret_peer(),
        &basic_auth_secret("bgp-auth", "pw"),
    ]));
}

#[test]
fn peer_password_secret_wrong_type() {
    // Note the trailing space after "expected" in MetalLB's message.
    let opaque = "---
apiVersion: v1
kind: Secret
metadata:
  name: bgp-auth
type: Opaque
stringData:
  password: pw
";
    assert_rejected(
        &cat(&[&secret_peer(), opaque]),
        "BGPPeer",
        "p1",
        "parsing peer p1 secret type mismatch on \"metallb-system\"/\"bgp-auth\", type \"kubernetes.io/basic-auth\" is expected \nfailed to parse peer p1 password secret",
        false,
    );
    accept(&cat(&[
        &secret_peer(),
        &basic_auth_secret("bgp-auth", "pw"),
    ]));
}

#[test]
fn peer_password_secret_without_password_key() {
    let no_password = "---
apiVersion: v1
kind: Secret
metadata:
  name: bgp-auth
type: kubernetes.io/basic-auth
data:
  username: YWRtaW4=
";
    assert_rejected(
        &cat(&[&secret_peer(), no_password]),
        "BGPPeer",
        "p1",
        "parsing peer p1 password not specified in the secret \"metallb-system\"/\"bgp-auth\"\nfailed to parse peer p1 password secret",
        false,
    );
    let with_data = "---
apiVersion: v1
kind: Secret
metadata:
  name: bgp-auth
type: kubernetes.io/basic-auth
data:
  username: YWRtaW4=
  password: czNjcjN0
";
    let cfg = accept(&cat(&[&secret_peer(), with_data]));
    assert_eq!(cfg.peers[0].password.as_ref().unwrap().expose(), "s3cr3t");
}

#[test]
fn peer_password_secret_with_string_data() {
    let cfg = accept(&cat(&[
        &secret_peer(),
        &basic_auth_secret("bgp-auth", "s3cr3t"),
    ]));
    assert_eq!(cfg.peers[0].password.as_ref().unwrap().expose(), "s3cr3t");
    assert_eq!(
        cfg.peers[0].password_source,
        Some(config::PasswordSource::Secret("bgp-auth".into()))
    );
}

#[test]
fn peer_missing_bfd_profile_is_transient() {
    let bfd_peer = peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, bfdProfile: fast}",
    );
    assert_rejected(
        &cat(&[&bfd_peer, &bfd("slow", "{}")]),
        "BGPPeer",
        "p1",
        "peer p1 referencing non existing bfd profile fast",
        true,
    );
    let cfg = accept(&cat(&[&bfd_peer, &bfd("fast", "{}")]));
    assert_eq!(cfg.peers[0].bfd_profile.as_deref(), Some("fast"));
}

#[test]
fn duplicate_peers_selecting_the_same_node() {
    // No Nodes in the input: every pair is checked. The later peer (by name)
    // is blamed.
    assert_rejected(
        &cat(&[&peer("p2", "198.51.100.1"), &peer("p1", "198.51.100.1")]),
        "BGPPeer",
        "p2",
        "peer 198.51.100.1 already exists, FRR mode doesn't support duplicate BGPPeers selecting the same node",
        false,
    );
    let vrf_peer = |name: &str, vrf: &str| {
        peer_spec(
            name,
            &format!("{{myASN: 64512, peerASN: 64513, peerAddress: 198.51.100.1, vrf: {vrf}}}"),
        )
    };
    assert_rejected(
        &cat(&[&vrf_peer("p1", "red"), &vrf_peer("p2", "red")]),
        "BGPPeer",
        "p2",
        "peer 198.51.100.1-red already exists, FRR mode doesn't support duplicate BGPPeers selecting the same node",
        false,
    );
    // Same address with Nodes known, both selecting node-a.
    let on_node = |name: &str, host: &str| {
        peer_spec(
            name,
            &format!(
                "{{myASN: 64512, peerASN: 64513, peerAddress: 198.51.100.1, nodeSelectors: [{{matchLabels: {{kubernetes.io/hostname: {host}}}}}]}}"
            ),
        )
    };
    let nodes = cat(&[&node("node-a", &[]), &node("node-b", &[])]);
    assert_rejected(
        &cat(&[
            &nodes,
            &on_node("p1", "node-a"),
            &peer("p2", "198.51.100.1"),
        ]),
        "BGPPeer",
        "p2",
        "peer 198.51.100.1 already exists, FRR mode doesn't support duplicate BGPPeers selecting the same node",
        false,
    );

    // Twins: other address; other VRF; disjoint nodes.
    accept(&cat(&[
        &peer("p1", "198.51.100.1"),
        &peer("p2", "198.51.100.2"),
    ]));
    accept(&cat(&[&peer("p1", "198.51.100.1"), &vrf_peer("p2", "red")]));
    accept(&cat(&[&vrf_peer("p1", "blue"), &vrf_peer("p2", "red")]));
    accept(&cat(&[
        &nodes,
        &on_node("p1", "node-a"),
        &on_node("p2", "node-b"),
    ]));
}

// ===========================================================================
// Communities

#[test]
fn community_cr_invalid_values() {
    let cases = [
        (
            "abc:1",
            r#"parsing community "gold": invalid community value: invalid section "abc" of community "abc:1", err: "strconv.ParseUint: parsing \"abc\": invalid syntax""#,
        ),
        (
            "1:70000",
            r#"parsing community "gold": invalid community value: invalid section "70000" of community "1:70000", err: "strconv.ParseUint: parsing \"70000\": value out of range""#,
        ),
        (
            "big:1:2:3",
            r#"parsing community "gold": invalid community value: invalid marker for large community, expected community to be of format large:<uint32>:<uint32>:<uint32> but got "big:1:2:3" instead"#,
        ),
        (
            "large:1:2:4294967296",
            r#"parsing community "gold": invalid community value: invalid section "4294967296" of community "large:1:2:4294967296", err: "strconv.ParseUint: parsing \"4294967296\": value out of range""#,
        ),
        // Not transient in a Community CR: only advertisements may refer to
        // aliases.
        (
            "no-export",
            r#"parsing community "gold": invalid community format: no-export"#,
        ),
    ];
    for (value, message) in cases {
        assert_rejected(
            &community_cr("aliases", &[("silver", "65000:2"), ("gold", value)]),
            "Community",
            "aliases",
            message,
            false,
        );
    }
    let cfg = accept(&community_cr(
        "aliases",
        &[("silver", "65000:2"), ("gold", "large:64512:1:4294967295")],
    ));
    assert_eq!(
        cfg.communities["gold"],
        config::Community::Large(64512, 1, 4_294_967_295)
    );
    assert_eq!(
        cfg.communities["silver"],
        config::Community::Standard(65000, 2)
    );
}

#[test]
fn community_duplicate_alias_across_crs() {
    assert_rejected(
        &cat(&[
            &community_cr("zz-second", &[("gold", "65000:2")]),
            &community_cr("aa-first", &[("gold", "65000:1")]),
        ]),
        "Community",
        "zz-second",
        r#"duplicate definition of community "gold""#,
        false,
    );
    accept(&cat(&[
        &community_cr("zz-second", &[("silver", "65000:2")]),
        &community_cr("aa-first", &[("gold", "65000:1")]),
    ]));
}

fn community_ad(communities: &str) -> String {
    cat(&[
        &pool("pool1", &["198.51.100.0/24"]),
        &bgp_ad("adv", &format!("{{communities: {communities}}}")),
    ])
}

#[test]
fn bgp_ad_invalid_community_value() {
    let cases = [
        (
            r#"["65000:1", "1:70000"]"#,
            "invalid community value: invalid section \"70000\" of community \"1:70000\", err: \"strconv.ParseUint: parsing \\\"70000\\\": value out of range\"\ninvalid community \"1:70000\" in BGP advertisement",
        ),
        (
            r#"["large:1:x:3"]"#,
            "invalid community value: invalid section \"x\" of community \"large:1:x:3\", err: \"strconv.ParseUint: parsing \\\"x\\\": invalid syntax\"\ninvalid community \"large:1:x:3\" in BGP advertisement",
        ),
        (
            r#"["big:1:2:3"]"#,
            "invalid community value: invalid marker for large community, expected community to be of format large:<uint32>:<uint32>:<uint32> but got \"big:1:2:3\" instead\ninvalid community \"big:1:2:3\" in BGP advertisement",
        ),
    ];
    for (communities, message) in cases {
        assert_rejected(
            &community_ad(communities),
            "BGPAdvertisement",
            "adv",
            message,
            false,
        );
    }
    let cfg = accept(&community_ad(r#"["65000:1", "large:64512:2:3"]"#));
    assert_eq!(
        cfg.bgp_advertisements[0].communities,
        vec![
            config::Community::Standard(65000, 1),
            config::Community::Large(64512, 2, 3)
        ]
    );
}

#[test]
fn bgp_ad_unknown_community_alias_is_transient() {
    assert_rejected(
        &community_ad(r#"["silver"]"#),
        "BGPAdvertisement",
        "adv",
        "invalid community format: silver\ninvalid community \"silver\" in BGP advertisement",
        true,
    );
    let cfg = accept(&cat(&[
        &community_ad(r#"["silver"]"#),
        &community_cr("aliases", &[("silver", "65000:300")]),
    ]));
    assert_eq!(
        cfg.bgp_advertisements[0].communities,
        vec![config::Community::Standard(65000, 300)]
    );
}

// ===========================================================================
// Pools

#[test]
fn pool_without_addresses() {
    assert_rejected(
        &pool_spec("pool1", "{addresses: []}"),
        "IPAddressPool",
        "pool1",
        "parsing address pool pool1: pool has no prefixes defined",
        false,
    );
    accept(&pool_spec("pool1", "{addresses: [198.51.100.0/24]}"));
}

#[test]
fn pool_without_name() {
    // Not applicable through the API server, but reachable from files.
    let unnamed = "---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {}
spec:
  addresses: [198.51.100.0/24]
";
    assert_rejected(
        unnamed,
        "IPAddressPool",
        "",
        "parsing address pool : missing pool name",
        false,
    );
    accept(&pool("pool1", &["198.51.100.0/24"]));
}

#[test]
fn pool_invalid_cidr() {
    for bad in ["198.51.100.1", "198.51.100.0/33", "2001:db8::/129", "pool"] {
        assert_rejected(
            &cat(&[
                &pool("zz-bad", &["203.0.113.0/24", bad]),
                &pool("aa-good", &["198.51.100.0/24"]),
            ]),
            "IPAddressPool",
            "zz-bad",
            &format!(
                "parsing address pool zz-bad: invalid CIDR \"{bad}\" in pool \"zz-bad\": invalid CIDR \"{bad}\""
            ),
            false,
        );
    }
    let cfg = accept(&pool("pool1", &["198.51.100.7/24", "2001:db8::/64"]));
    assert_eq!(
        cfg.pools["pool1"].cidrs,
        vec![
            "198.51.100.0/24".parse().unwrap(),
            "2001:db8::/64".parse().unwrap()
        ]
    );
}

#[test]
fn pool_invalid_range() {
    let cases = [
        (
            "x - 198.51.100.9",
            r#"invalid IP range "x - 198.51.100.9": invalid start IP "x ""#,
        ),
        (
            "198.51.100.1-198.51.100.y",
            r#"invalid IP range "198.51.100.1-198.51.100.y": invalid end IP "198.51.100.y""#,
        ),
        (
            "198.51.100.9 - 198.51.100.1",
            r#"invalid IP range "198.51.100.9 - 198.51.100.1": start IP "198.51.100.9" is after the end IP "198.51.100.1""#,
        ),
        (
            "2001:db8::9-2001:db8::1",
            r#"invalid IP range "2001:db8::9-2001:db8::1": start IP "2001:db8::9" is after the end IP "2001:db8::1""#,
        ),
    ];
    for (range, detail) in cases {
        assert_rejected(
            &pool("pool1", &[range]),
            "IPAddressPool",
            "pool1",
            &format!(
                "parsing address pool pool1: invalid CIDR {} in pool \"pool1\": {detail}",
                config::gofmt::quote(range)
            ),
            false,
        );
    }
    let cfg = accept(&pool(
        "pool1",
        &["198.51.100.1 - 198.51.100.9", "2001:db8::1-2001:db8::9"],
    ));
    assert_eq!(cfg.pools["pool1"].addresses.len(), 2);
}

#[test]
fn pool_duplicate_name() {
    // Only possible with two objects of the same name.
    assert_rejected(
        &cat(&[
            &pool("pool1", &["198.51.100.0/24"]),
            &pool("pool1", &["203.0.113.0/24"]),
        ]),
        "IPAddressPool",
        "pool1",
        r#"duplicate definition of pool "pool1""#,
        false,
    );
    let cfg = accept(&cat(&[
        &pool("pool1", &["198.51.100.0/24"]),
        &pool("pool2", &["203.0.113.0/24"]),
    ]));
    assert_eq!(cfg.pools.len(), 2);
}

#[test]
fn pool_overlap_across_pools() {
    // Input order b, a: a is parsed first, the overlap is b's.
    assert_rejected(
        &cat(&[
            &pool("b", &["198.51.100.128/25"]),
            &pool("a", &["198.51.100.0/24"]),
        ]),
        "IPAddressPool",
        "b",
        r#"CIDR "198.51.100.128/25" in pool "b" overlaps with already defined CIDR "198.51.100.0/24""#,
        false,
    );
    assert_rejected(
        &cat(&[
            &pool("b", &["2001:db8::/64"]),
            &pool("a", &["2001:db8::ff-2001:db8::1ff"]),
        ]),
        "IPAddressPool",
        "b",
        r#"CIDR "2001:db8::/64" in pool "b" overlaps with already defined CIDR "2001:db8::ff/128""#,
        false,
    );
    accept(&cat(&[
        &pool("b", &["198.51.100.128/25"]),
        &pool("a", &["198.51.100.0/25"]),
    ]));
}

#[test]
fn pool_overlap_within_one_pool() {
    assert_rejected(
        &pool("a", &["198.51.100.0/24", "198.51.100.10-198.51.100.20"]),
        "IPAddressPool",
        "a",
        r#"CIDR "198.51.100.10/31" in pool "a" overlaps with already defined CIDR "198.51.100.0/24""#,
        false,
    );
    assert_rejected(
        &pool("a", &["198.51.100.0/24", "198.51.100.0/24"]),
        "IPAddressPool",
        "a",
        r#"CIDR "198.51.100.0/24" in pool "a" overlaps with already defined CIDR "198.51.100.0/24""#,
        false,
    );
    accept(&pool(
        "a",
        &["198.51.100.0/28", "198.51.100.16-198.51.100.20"],
    ));
}

#[test]
fn pool_duplicate_namespaces() {
    assert_rejected(
        &pool_spec(
            "pool1",
            "{addresses: [198.51.100.0/24], serviceAllocation: {namespaces: [web, db, web]}}",
        ),
        "IPAddressPool",
        "pool1",
        "parsing address pool pool1: duplicate definition in namespaces field",
        false,
    );
    let cfg = accept(&pool_spec(
        "pool1",
        "{addresses: [198.51.100.0/24], serviceAllocation: {namespaces: [web, db]}}",
    ));
    let sa = cfg.pools["pool1"].service_allocation.as_ref().unwrap();
    assert_eq!(sa.namespaces.len(), 2);
}

#[test]
fn pool_duplicate_selectors() {
    for field in ["namespaceSelectors", "serviceSelectors"] {
        assert_rejected(
            &pool_spec(
                "pool1",
                &format!(
                    "{{addresses: [198.51.100.0/24], serviceAllocation: {{{field}: [{{matchLabels: {{team: a}}}}, {{matchLabels: {{team: a}}}}]}}}}"
                ),
            ),
            "IPAddressPool",
            "pool1",
            &format!(
                r#"parsing address pool pool1: duplicate definition of {field} {{map["team":"a"] []}}"#
            ),
            false,
        );
        accept(&pool_spec(
            "pool1",
            &format!(
                "{{addresses: [198.51.100.0/24], serviceAllocation: {{{field}: [{{matchLabels: {{team: a}}}}, {{matchLabels: {{team: b}}}}]}}}}"
            ),
        ));
    }
}

#[test]
fn pool_invalid_namespace_selector() {
    // MetalLB passes a *pointer* to the selector (`&p.Spec.AllocateTo.
    // NamespaceSelectors[i]`), so %v prints its protobuf String().
    assert_rejected(
        &pool_spec(
            "pool1",
            "{addresses: [198.51.100.0/24], serviceAllocation: {namespaceSelectors: [{matchExpressions: [{key: team, operator: Foo, values: [a]}]}]}}",
        ),
        "IPAddressPool",
        "pool1",
        "parsing address pool pool1: \"Foo\" is not a valid label selector operator\ninvalid namespace label selector &LabelSelector{MatchLabels:map[string]string{},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:team,Operator:Foo,Values:[a],},},} in ip pool pool1",
        false,
    );
    let cfg = accept(&cat(&[
        &pool_spec(
            "pool1",
            "{addresses: [198.51.100.0/24], serviceAllocation: {namespaceSelectors: [{matchExpressions: [{key: team, operator: In, values: [a]}]}]}}",
        ),
        "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: web, labels: {team: a}}\n",
        "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: db, labels: {team: b}}\n",
    ]));
    let sa = cfg.pools["pool1"].service_allocation.as_ref().unwrap();
    assert_eq!(sa.namespaces.iter().collect::<Vec<_>>(), ["web"]);
}

#[test]
fn pool_invalid_service_selector() {
    assert_rejected(
        &pool_spec(
            "pool1",
            "{addresses: [198.51.100.0/24], serviceAllocation: {serviceSelectors: [{matchExpressions: [{key: app, operator: In, values: []}]}]}}",
        ),
        "IPAddressPool",
        "pool1",
        "parsing address pool pool1: values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty\ninvalid service label selector {map[] [{app In []}]} in ip pool pool1",
        false,
    );
    accept(&pool_spec(
        "pool1",
        "{addresses: [198.51.100.0/24], serviceAllocation: {priority: 10, serviceSelectors: [{matchExpressions: [{key: app, operator: In, values: [web]}]}]}}",
    ));
}

// ===========================================================================
// L2 advertisements

fn l2_case(spec: &str) -> String {
    cat(&[
        &pool_spec("pool1", "{addresses: [198.51.100.0/24]}"),
        &pool("pool2", &["203.0.113.0/24"]),
        &l2_ad("l2", spec),
    ])
}

#[test]
fn l2_duplicate_ip_address_pools() {
    assert_rejected(
        &l2_case("{ipAddressPools: [pool1, pool2, pool1]}"),
        "L2Advertisement",
        "l2",
        r#"duplicate definition of ipAddressPools "pool1""#,
        false,
    );
    let cfg = accept(&l2_case("{ipAddressPools: [pool1, pool2]}"));
    assert_eq!(cfg.l2_advertisements[0].pools, ["pool1", "pool2"]);
}

fn check_l2_duplicate_selector(field: &str) {
    assert_rejected(
        &l2_case(&format!(
            "{{{field}: [{{matchLabels: {{team: a}}}}, {{matchLabels: {{team: a}}}}]}}"
        )),
        "L2Advertisement",
        "l2",
        &format!(r#"duplicate definition of {field} {{map["team":"a"] []}}"#),
        false,
    );
    accept(&l2_case(&format!(
        "{{{field}: [{{matchLabels: {{team: a}}}}, {{matchLabels: {{team: b}}}}]}}"
    )));
}

#[test]
fn l2_duplicate_ip_address_pool_selectors() {
    check_l2_duplicate_selector("ipAddressPoolSelectors");
}

#[test]
fn l2_duplicate_node_selectors() {
    check_l2_duplicate_selector("nodeSelectors");
}

#[test]
fn l2_duplicate_service_selectors() {
    check_l2_duplicate_selector("serviceSelectors");
}

#[test]
fn l2_invalid_node_selector() {
    assert_rejected(
        &l2_case(
            "{nodeSelectors: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: []}]}]}",
        ),
        "L2Advertisement",
        "l2",
        "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty\ninvalid label selector {map[] [{kubernetes.io/hostname In []}]}\nfailed to parse node selector for l2",
        false,
    );
    let cfg = accept(&cat(&[
        &l2_case(
            "{nodeSelectors: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [node-a]}]}]}",
        ),
        &node("node-a", &[]),
        &node("node-b", &[]),
    ]));
    assert_eq!(
        cfg.l2_advertisements[0].nodes.iter().collect::<Vec<_>>(),
        ["node-a"]
    );
}

#[test]
fn l2_invalid_service_selector() {
    assert_rejected(
        &l2_case(
            "{serviceSelectors: [{matchExpressions: [{key: app, operator: Foo, values: [web]}]}]}",
        ),
        "L2Advertisement",
        "l2",
        "invalid service selector {map[] [{app Foo [web]}]}: \"Foo\" is not a valid label selector operator\nfailed to parse service selector for l2",
        false,
    );
    accept(&l2_case(
        "{serviceSelectors: [{matchExpressions: [{key: app, operator: NotIn, values: [web]}]}]}",
    ));
}

#[test]
fn l2_invalid_preferred_node_selector() {
    assert_rejected(
        &l2_case(
            r#"{preferredNodeSelectors: [{weight: 10, preference: {matchLabels: {"bad key": x}}}]}"#,
        ),
        "L2Advertisement",
        "l2",
        &format!(
            "key: Invalid value: \"bad key\": {BAD_KEY_DETAIL}\ninvalid preferred node selector {{map[bad key:x] []}}\nfailed to parse preferred node selectors for l2"
        ),
        false,
    );
    accept(&l2_case(
        "{preferredNodeSelectors: [{weight: 10, preference: {matchLabels: {zone: a}}}]}",
    ));
}

#[test]
fn l2_invalid_pool_selector() {
    assert_rejected(
        &l2_case(
            "{ipAddressPoolSelectors: [{matchExpressions: [{key: team, operator: Exists, values: [a]}]}]}",
        ),
        "L2Advertisement",
        "l2",
        "values: Invalid value: [\"a\"]: values set must be empty for exists and does not exist\ninvalid label selector {map[] [{team Exists [a]}]}",
        false,
    );
    accept(&l2_case(
        "{ipAddressPoolSelectors: [{matchExpressions: [{key: team, operator: Exists}]}]}",
    ));
}

// ===========================================================================
// BGP advertisements

fn bgp_case(ads: &[(&str, &str)]) -> String {
    let mut out = cat(&[
        &pool("pool1", &["198.51.100.0/24"]),
        &pool("pool2", &["203.0.113.0/24"]),
        &peer("peer1", "192.0.2.1"),
        &peer("peer2", "192.0.2.2"),
        &node("node-a", &[]),
        &node("node-b", &[]),
    ]);
    for (name, spec) in ads {
        out.push_str(&bgp_ad(name, spec));
    }
    out
}

#[test]
fn bgp_ad_identical_advertisements() {
    // Only possible with two objects of the same name (DeepEqual of the
    // whole objects); indices are 1-based, after sorting by name.
    assert_rejected(
        &bgp_case(&[
            ("b", "{ipAddressPools: [pool1]}"),
            ("a", "{}"),
            ("b", "{ipAddressPools: [pool1]}"),
        ]),
        "BGPAdvertisement",
        "b",
        "duplicate definition of bgpadvertisements. advertisement 2 and 3 are equal",
        false,
    );
    assert_rejected(
        &bgp_case(&[("a", "{}"), ("a", "{}")]),
        "BGPAdvertisement",
        "a",
        "duplicate definition of bgpadvertisements. advertisement 1 and 2 are equal",
        false,
    );
    // Same spec, different names.
    let cfg = accept(&bgp_case(&[
        ("a", "{ipAddressPools: [pool1]}"),
        ("b", "{ipAddressPools: [pool1]}"),
    ]));
    assert_eq!(cfg.bgp_advertisements.len(), 2);
}

#[test]
fn bgp_ad_duplicate_ip_address_pools() {
    assert_rejected(
        &bgp_case(&[("adv", "{ipAddressPools: [pool1, pool2, pool2]}")]),
        "BGPAdvertisement",
        "adv",
        r#"duplicate definition of ipAddressPools "pool2""#,
        false,
    );
    accept(&bgp_case(&[("adv", "{ipAddressPools: [pool1, pool2]}")]));
}

#[test]
fn bgp_ad_duplicate_communities() {
    assert_rejected(
        &bgp_case(&[("adv", r#"{communities: ["65000:1", "65000:1"]}"#)]),
        "BGPAdvertisement",
        "adv",
        r#"duplicate definition of community "65000:1""#,
        false,
    );
    accept(&bgp_case(&[(
        "adv",
        r#"{communities: ["65000:1", "65000:2"]}"#,
    )]));
}

#[test]
fn bgp_ad_duplicate_peers() {
    assert_rejected(
        &bgp_case(&[("adv", "{peers: [peer1, peer1]}")]),
        "BGPAdvertisement",
        "adv",
        r#"duplicate definition of peers "peer1""#,
        false,
    );
    let cfg = accept(&bgp_case(&[("adv", "{peers: [peer1, peer2]}")]));
    assert_eq!(cfg.bgp_advertisements[0].peers, ["peer1", "peer2"]);
}

fn check_bgp_duplicate_selector(field: &str) {
    assert_rejected(
        &bgp_case(&[(
            "adv",
            &format!("{{{field}: [{{matchLabels: {{team: a}}}}, {{matchLabels: {{team: a}}}}]}}"),
        )]),
        "BGPAdvertisement",
        "adv",
        &format!(r#"duplicate definition of {field} {{map["team":"a"] []}}"#),
        false,
    );
    accept(&bgp_case(&[(
        "adv",
        &format!("{{{field}: [{{matchLabels: {{team: a}}}}, {{matchLabels: {{team: b}}}}]}}"),
    )]));
}

#[test]
fn bgp_ad_duplicate_ip_address_pool_selectors() {
    check_bgp_duplicate_selector("ipAddressPoolSelectors");
}

#[test]
fn bgp_ad_duplicate_node_selectors() {
    check_bgp_duplicate_selector("nodeSelectors");
}

#[test]
fn bgp_ad_duplicate_service_selectors() {
    check_bgp_duplicate_selector("serviceSelectors");
}

#[test]
fn bgp_ad_service_selectors_and_aggregation_length() {
    assert_rejected(
        &bgp_case(&[(
            "adv",
            "{aggregationLength: 24, serviceSelectors: [{matchLabels: {app: web}}]}",
        )]),
        "BGPAdvertisement",
        "adv",
        "serviceSelectors and aggregationLength are mutually exclusive, both cannot be set in adv",
        false,
    );
    accept(&bgp_case(&[(
        "adv",
        "{aggregationLength: 32, serviceSelectors: [{matchLabels: {app: web}}]}",
    )]));
    accept(&bgp_case(&[("adv", "{aggregationLength: 24}")]));
}

#[test]
fn bgp_ad_service_selectors_and_aggregation_length_v6() {
    assert_rejected(
        &bgp_case(&[(
            "adv",
            "{aggregationLengthV6: 64, serviceSelectors: [{matchLabels: {app: web}}]}",
        )]),
        "BGPAdvertisement",
        "adv",
        "serviceSelectors and aggregationLengthV6 are mutually exclusive, both cannot be set in adv",
        false,
    );
    accept(&bgp_case(&[(
        "adv",
        "{aggregationLengthV6: 128, serviceSelectors: [{matchLabels: {app: web}}]}",
    )]));
}

#[test]
fn bgp_ad_aggregation_length_above_32() {
    // Go's %q of an int is a character literal: 33 is '!'.
    assert_rejected(
        &bgp_case(&[("adv", "{aggregationLength: 33}")]),
        "BGPAdvertisement",
        "adv",
        "invalid aggregation length '!' for IPv4",
        false,
    );
    let cfg = accept(&bgp_case(&[("adv", "{aggregationLength: 32}")]));
    assert_eq!(cfg.bgp_advertisements[0].aggregation_length, 32);
}

#[test]
fn bgp_ad_aggregation_length_v6_above_128() {
    assert_rejected(
        &bgp_case(&[("adv", "{aggregationLengthV6: 129}")]),
        "BGPAdvertisement",
        "adv",
        r"invalid aggregation length '\u0081' for IPv6",
        false,
    );
    let cfg = accept(&bgp_case(&[("adv", "{aggregationLengthV6: 128}")]));
    assert_eq!(cfg.bgp_advertisements[0].aggregation_length_v6, 128);
}

#[test]
fn bgp_ad_aggregation_length_shorter_than_pool_prefix() {
    let yaml = |agg: u8| {
        cat(&[
            &pool("pool1", &["198.51.100.0/25"]),
            &bgp_ad("adv", &format!("{{aggregationLength: {agg}}}")),
        ])
    };
    assert_rejected(
        &yaml(24),
        "BGPAdvertisement",
        "adv",
        "invalid aggregation length 24: prefix 25 in this pool is more specific than the aggregation length for addresses 198.51.100.0/25",
        false,
    );
    accept(&yaml(25));
    // A range counts with its shortest summarised prefix (/30 here).
    let range = |agg: u8| {
        cat(&[
            &pool("pool1", &["198.51.100.10-198.51.100.20"]),
            &bgp_ad("adv", &format!("{{aggregationLength: {agg}}}")),
        ])
    };
    assert_rejected(
        &range(29),
        "BGPAdvertisement",
        "adv",
        "invalid aggregation length 29: prefix 30 in this pool is more specific than the aggregation length for addresses 198.51.100.10-198.51.100.20",
        false,
    );
    accept(&range(30));
}

#[test]
fn bgp_ad_aggregation_length_v6_shorter_than_pool_prefix() {
    // MetalLB prints adv.AggregationLength (the IPv4 one, 32 by default) in
    // this message even when the offending entry is IPv6.
    let yaml = |agg: u8| {
        cat(&[
            &pool("pool6", &["2001:db8::/64"]),
            &bgp_ad("adv", &format!("{{aggregationLengthV6: {agg}}}")),
        ])
    };
    assert_rejected(
        &yaml(48),
        "BGPAdvertisement",
        "adv",
        "invalid aggregation length 32: prefix 64 in this pool is more specific than the aggregation length for addresses 2001:db8::/64",
        false,
    );
    accept(&yaml(64));
}

#[test]
fn bgp_ad_local_pref_conflict() {
    let two = |a1: &str, a2: &str| bgp_case(&[("a1", a1), ("a2", a2)]);
    let message = "invalid local preference 200: local preferernce 100 was already set for the same type of BGP update. Check existing BGP advertisements with common pools and aggregation lengths";
    assert_rejected(
        &two(
            "{ipAddressPools: [pool1], localPref: 100}",
            "{ipAddressPools: [pool1], localPref: 200}",
        ),
        "BGPAdvertisement",
        "a2",
        message,
        false,
    );
    // Overlapping peer lists still conflict.
    assert_rejected(
        &two(
            "{ipAddressPools: [pool1], localPref: 100, peers: [peer1]}",
            "{ipAddressPools: [pool1], localPref: 200, peers: [peer2, peer1]}",
        ),
        "BGPAdvertisement",
        "a2",
        message,
        false,
    );
    // Same LOCAL_PREF.
    accept(&two(
        "{ipAddressPools: [pool1], localPref: 100}",
        "{ipAddressPools: [pool1], localPref: 100}",
    ));
    // Different pools.
    accept(&two(
        "{ipAddressPools: [pool1], localPref: 100}",
        "{ipAddressPools: [pool2], localPref: 200}",
    ));
    // Different peers.
    accept(&two(
        "{ipAddressPools: [pool1], localPref: 100, peers: [peer1]}",
        "{ipAddressPools: [pool1], localPref: 200, peers: [peer2]}",
    ));
    // Different aggregation length (IPv4-only pool).
    accept(&two(
        "{ipAddressPools: [pool1], localPref: 100}",
        "{ipAddressPools: [pool1], localPref: 200, aggregationLength: 24}",
    ));
    // Service selectors: not checked at config time.
    accept(&two(
        "{ipAddressPools: [pool1], localPref: 100}",
        "{ipAddressPools: [pool1], localPref: 200, serviceSelectors: [{matchLabels: {app: web}}]}",
    ));
    // Disjoint nodes.
    accept(&two(
        "{ipAddressPools: [pool1], localPref: 100, nodeSelectors: [{matchLabels: {kubernetes.io/hostname: node-a}}]}",
        "{ipAddressPools: [pool1], localPref: 200, nodeSelectors: [{matchLabels: {kubernetes.io/hostname: node-b}}]}",
    ));
}

#[test]
fn bgp_ad_local_pref_conflict_dual_stack_pool() {
    // For a pool with both families, both aggregation lengths must differ.
    let yaml = |a2: &str| {
        cat(&[
            &pool("dual", &["198.51.100.0/24", "2001:db8::/64"]),
            &node("node-a", &[]),
            &bgp_ad("a1", "{localPref: 100}"),
            &bgp_ad("a2", a2),
        ])
    };
    assert_rejected(
        &yaml("{localPref: 200, aggregationLength: 24}"),
        "BGPAdvertisement",
        "a2",
        "invalid local preference 200: local preferernce 100 was already set for the same type of BGP update. Check existing BGP advertisements with common pools and aggregation lengths",
        false,
    );
    accept(&yaml(
        "{localPref: 200, aggregationLength: 24, aggregationLengthV6: 64}",
    ));
}

#[test]
fn bgp_ad_invalid_node_selector() {
    assert_rejected(
        &bgp_case(&[("adv", r#"{nodeSelectors: [{matchLabels: {"bad key": x}}]}"#)]),
        "BGPAdvertisement",
        "adv",
        &format!(
            "key: Invalid value: \"bad key\": {BAD_KEY_DETAIL}\ninvalid label selector {{map[bad key:x] []}}\nfailed to parse node selector for adv"
        ),
        false,
    );
    let cfg = accept(&bgp_case(&[(
        "adv",
        "{nodeSelectors: [{matchLabels: {kubernetes.io/hostname: node-b}}]}",
    )]));
    assert_eq!(
        cfg.bgp_advertisements[0].nodes.iter().collect::<Vec<_>>(),
        ["node-b"]
    );
}

#[test]
fn bgp_ad_invalid_service_selector() {
    assert_rejected(
        &bgp_case(&[(
            "adv",
            "{serviceSelectors: [{matchExpressions: [{key: app, operator: Foo}]}]}",
        )]),
        "BGPAdvertisement",
        "adv",
        "invalid service selector {map[] [{app Foo []}]}: \"Foo\" is not a valid label selector operator\nfailed to parse service selector for adv",
        false,
    );
    accept(&bgp_case(&[(
        "adv",
        "{serviceSelectors: [{matchExpressions: [{key: app, operator: DoesNotExist}]}]}",
    )]));
}

#[test]
fn bgp_ad_invalid_pool_selector() {
    assert_rejected(
        &bgp_case(&[(
            "adv",
            "{ipAddressPoolSelectors: [{matchExpressions: [{key: team, operator: NotIn}]}]}",
        )]),
        "BGPAdvertisement",
        "adv",
        "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty\ninvalid label selector {map[] [{team NotIn []}]}",
        false,
    );
    accept(&bgp_case(&[(
        "adv",
        "{ipAddressPoolSelectors: [{matchExpressions: [{key: team, operator: NotIn, values: [a]}]}]}",
    )]));
}

// ===========================================================================
// Cross checks

#[test]
fn bfd_echo_with_ipv6_pool() {
    let yaml = |addresses: &[&str], echo: bool, peers: &str| {
        cat(&[
            &bfd("echo", &format!("{{echoMode: {echo}}}")),
            &peer_spec(
                "peer1",
                "{myASN: 64512, peerASN: 64513, peerAddress: 2001:db8::1, bfdProfile: echo}",
            ),
            &peer("peer2", "2001:db8::2"),
            &pool("pool6", addresses),
            &bgp_ad(
                "adv",
                &format!("{{ipAddressPools: [pool6], peers: {peers}}}"),
            ),
        ])
    };
    let message = "pool pool6 has bgpadvertisement adv which references peer peer1 which has bfd echo enabled, which is not possible";
    assert_rejected(
        &yaml(&["2001:db8:1::/64"], true, "[]"),
        "IPAddressPool",
        "pool6",
        message,
        false,
    );
    assert_rejected(
        &yaml(&["198.51.100.0/24", "2001:db8:1::/64"], true, "[peer1]"),
        "IPAddressPool",
        "pool6",
        message,
        false,
    );
    // IPv4 only; echo off; advertised to another peer.
    accept(&yaml(&["198.51.100.0/24"], true, "[]"));
    accept(&yaml(&["2001:db8:1::/64"], false, "[]"));
    accept(&yaml(&["2001:db8:1::/64"], true, "[peer2]"));
}

// ===========================================================================
// Pipeline order: with two errors, the one MetalLB reaches first wins.

#[test]
fn order_duplicate_peers_before_bfd_profiles() {
    let err = reject(&cat(&[
        &peer("p1", "198.51.100.1"),
        &peer("p2", "198.51.100.1"),
        &bfd("bad", "{detectMultiplier: 1}"),
    ]));
    assert_eq!(
        err.message,
        "peer 198.51.100.1 already exists, FRR mode doesn't support duplicate BGPPeers selecting the same node"
    );
}

#[test]
fn order_bfd_profiles_before_peers() {
    let err = reject(&cat(&[
        &peer("p1", "198.51.100.300"),
        &bfd("bad", "{detectMultiplier: 1}"),
    ]));
    assert_eq!(
        err.message,
        "parsing bfd profile #1: invalid value 1, must be in 2-255 range\ninvalid detect multiplier value"
    );
}

#[test]
fn order_peers_before_communities_and_pools() {
    let err = reject(&cat(&[
        &pool("pool1", &["198.51.100.0/33"]),
        &community_cr("aliases", &[("gold", "x:y")]),
        &peer("p1", "198.51.100.300"),
    ]));
    assert_eq!(
        err.message,
        r#"parsing peer p1 invalid BGPPeer address "198.51.100.300""#
    );
}

#[test]
fn order_communities_before_pools() {
    let err = reject(&cat(&[
        &pool("pool1", &["198.51.100.0/33"]),
        &community_cr("aliases", &[("gold", "no-export")]),
    ]));
    assert_eq!(
        err.message,
        r#"parsing community "gold": invalid community format: no-export"#
    );
}

#[test]
fn order_pools_before_l2_advertisements() {
    let err = reject(&cat(&[
        &pool("pool1", &["198.51.100.0/24", "198.51.100.0/24"]),
        &l2_ad("l2", "{ipAddressPools: [pool1, pool1]}"),
    ]));
    assert_eq!(
        err.message,
        r#"CIDR "198.51.100.0/24" in pool "pool1" overlaps with already defined CIDR "198.51.100.0/24""#
    );
}

#[test]
fn order_l2_before_bgp_advertisements() {
    let err = reject(&cat(&[
        &pool("pool1", &["198.51.100.0/24"]),
        &bgp_ad("adv", "{aggregationLength: 33}"),
        &l2_ad("l2", "{ipAddressPools: [pool1, pool1]}"),
    ]));
    assert_eq!(
        err.message,
        r#"duplicate definition of ipAddressPools "pool1""#
    );
}

#[test]
fn order_identical_bgp_advertisements_before_their_contents() {
    let err = reject(&cat(&[
        &pool("pool1", &["198.51.100.0/24"]),
        &bgp_ad("0-bad", "{aggregationLength: 33}"),
        &bgp_ad("a", "{}"),
        &bgp_ad("a", "{}"),
    ]));
    assert_eq!(
        err.message,
        "duplicate definition of bgpadvertisements. advertisement 2 and 3 are equal"
    );
}

#[test]
fn order_bgp_advertisements_before_cross_checks() {
    let err = reject(&cat(&[
        &bfd("echo", "{echoMode: true}"),
        &peer_spec(
            "peer1",
            "{myASN: 64512, peerASN: 64513, peerAddress: 2001:db8::1, bfdProfile: echo}",
        ),
        &pool("pool6", &["2001:db8:1::/64"]),
        &bgp_ad("adv", "{ipAddressPools: [pool6]}"),
        &bgp_ad("bad", "{aggregationLength: 33, ipAddressPools: [pool6]}"),
    ]));
    assert_eq!(err.message, "invalid aggregation length '!' for IPv4");
}

#[test]
fn order_hold_time_checked_before_keepalive() {
    // parseTimers checks the hold time first, then keepalive <= hold.
    let err = reject(&timer_peer("holdTime: 2s, keepaliveTime: 5s"));
    assert_eq!(
        err.message,
        r#"parsing peer p1 invalid BGPPeer timers: invalid hold time "2s": must be 0 or >=3s"#
    );
}

#[test]
fn order_within_a_peer() {
    // Address before router ID before source IP before node selectors
    // before the password.
    let err = reject(&peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, peerAddress: addr-x, routerID: rid-y, sourceAddress: src-z}",
    ));
    assert_eq!(
        err.message,
        r#"parsing peer p1 invalid BGPPeer address "addr-x""#
    );
    let err = reject(&peer_spec(
        "p1",
        "{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, routerID: rid-y, sourceAddress: src-z}",
    ));
    assert_eq!(err.message, r#"parsing peer p1 invalid router ID "rid-y""#);
    let err = reject(&peer_spec(
        "p1",
        r#"{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, password: pw, passwordSecret: {name: s}, nodeSelectors: [{matchLabels: {"bad key": x}}]}"#,
    ));
    assert!(
        err.message
            .ends_with("failed to convert peer p1 node selector"),
        "{}",
        err.message
    );
}

#[test]
fn order_within_a_bgp_advertisement() {
    // bgpAdvertisementFromCR: ipAddressPools, community, peers, then the
    // selector lists (ipAddressPoolSelectors, nodeSelectors, serviceSelectors).
    let err = reject(&bgp_case(&[(
        "adv",
        "{peers: [peer1, peer1], nodeSelectors: [{matchLabels: {a: b}}, {matchLabels: {a: b}}]}",
    )]));
    assert_eq!(err.message, r#"duplicate definition of peers "peer1""#);
    let err = reject(&bgp_case(&[(
        "adv",
        r#"{communities: ["65000:1", "65000:1"], peers: [peer1, peer1]}"#,
    )]));
    assert_eq!(
        err.message,
        r#"duplicate definition of community "65000:1""#
    );
}

// ===========================================================================
// Input sorting: errors blame the first object by name, not by input order.

#[test]
fn sorting_pools_by_name() {
    assert_rejected(
        &cat(&[
            &pool("zz", &["198.51.100.0/33"]),
            &pool("aa", &["203.0.113.0/33"]),
        ]),
        "IPAddressPool",
        "aa",
        r#"parsing address pool aa: invalid CIDR "203.0.113.0/33" in pool "aa": invalid CIDR "203.0.113.0/33""#,
        false,
    );
}

#[test]
fn sorting_peers_by_name() {
    assert_rejected(
        &cat(&[&peer("zz", "addr-zz"), &peer("aa", "addr-aa")]),
        "BGPPeer",
        "aa",
        r#"parsing peer aa invalid BGPPeer address "addr-aa""#,
        false,
    );
}

#[test]
fn sorting_bfd_profiles_by_name() {
    assert_rejected(
        &cat(&[
            &bfd("zz", "{receiveInterval: 5}"),
            &bfd("mm", "{}"),
            &bfd("aa", "{transmitInterval: 5}"),
        ]),
        "BFDProfile",
        "aa",
        "parsing bfd profile #1: invalid value 5, must be in 10-60000 range\ninvalid transmit interval value",
        false,
    );
}

#[test]
fn sorting_advertisements_by_name() {
    let pools = pool("pool1", &["198.51.100.0/24"]);
    assert_rejected(
        &cat(&[
            &pools,
            &l2_ad("zz", "{ipAddressPools: [pool-x, pool-x]}"),
            &l2_ad("aa", "{ipAddressPools: [pool-y, pool-y]}"),
        ]),
        "L2Advertisement",
        "aa",
        r#"duplicate definition of ipAddressPools "pool-y""#,
        false,
    );
    assert_rejected(
        &cat(&[
            &pools,
            &bgp_ad("zz", "{aggregationLength: 33}"),
            &bgp_ad("aa", "{aggregationLength: 34}"),
        ]),
        "BGPAdvertisement",
        "aa",
        "invalid aggregation length '\"' for IPv4",
        false,
    );
    let err = reject(&cat(&[
        &community_cr("zz", &[("gold", "1")]),
        &community_cr("aa", &[("silver", "2")]),
    ]));
    assert_eq!(
        err.message,
        r#"parsing community "silver": invalid community format: 2"#
    );
}
