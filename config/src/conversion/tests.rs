use serde_json::{Value, json};

use super::*;

/// A v1beta1 BGPPeer with every field set (two node selectors: one with
/// labels and expressions, one empty: every node).
fn full_v1beta1() -> Value {
    json!({
        "apiVersion": "metallb.io/v1beta1",
        "kind": "BGPPeer",
        "metadata": {
            "name": "peer1",
            "namespace": "metallb-system",
            "uid": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"team": "net"},
            "annotations": {"note": "kept"},
        },
        "spec": {
            "myASN": 64512,
            "peerASN": 64513,
            "peerAddress": "192.0.2.1",
            "sourceAddress": "192.0.2.10",
            "peerPort": 1179,
            "holdTime": "180s",
            "keepaliveTime": "1m0s",
            "routerID": "192.0.2.20",
            "nodeSelectors": [
                {
                    "matchLabels": {"kubernetes.io/hostname": "node-1", "rack": "r1"},
                    "matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["a", "b"]},
                        {"key": "spot", "operator": "DoesNotExist", "values": []},
                    ],
                },
                {},
            ],
            "password": "s3cret",
            "bfdProfile": "fast",
            "ebgpMultiHop": true,
        },
        "status": {},
    })
}

/// The same peer as v1beta2 (MetalLB's `ConvertTo`).
fn full_v1beta2() -> Value {
    let mut v = full_v1beta1();
    v["apiVersion"] = json!("metallb.io/v1beta2");
    v["spec"]["nodeSelectors"][0]["matchExpressions"][1] =
        json!({"key": "spot", "operator": "DoesNotExist"});
    v
}

/// Every v1beta2-only field set, on top of the v1beta1 ones.
fn v1beta2_only_fields() -> Value {
    json!({
        "dynamicASN": "external",
        "localASN": 64600,
        "interface": "eth1",
        "connectTime": "5s",
        "passwordSecret": {"name": "peer-password", "namespace": "metallb-system"},
        "enableGracefulRestart": true,
        "vrf": "red",
        "disableMP": true,
        "dualStackAddressFamily": true,
    })
}

fn convert(obj: &Value, to: &str) -> Value {
    convert_object(obj, to).unwrap_or_else(|e| panic!("converting to {to}: {e}"))
}

#[test]
fn v1beta1_to_v1beta2_copies_every_field() {
    assert_eq!(convert(&full_v1beta1(), V1BETA2), full_v1beta2());
}

#[test]
fn v1beta1_round_trip_is_identity_on_every_field() {
    let back = convert(&convert(&full_v1beta1(), V1BETA2), V1BETA1);
    assert_eq!(back, full_v1beta1());
}

/// Each v1beta1 field alone (the others at their zero value) round-trips:
/// no field depends on another to survive.
#[test]
fn v1beta1_round_trip_is_identity_field_by_field() {
    let full = full_v1beta1();
    for (field, value) in full["spec"].as_object().expect("spec") {
        let mut one = full.clone();
        one["spec"] = json!({"myASN": 64512, "peerASN": 64513, "peerAddress": "192.0.2.1"});
        one["spec"][field] = value.clone();
        let v2 = convert(&one, V1BETA2);
        assert!(
            v2["spec"].get(field.as_str()).is_some(),
            "{field} in v1beta2"
        );
        assert_eq!(convert(&v2, V1BETA1), one, "{field}");
    }
}

#[test]
fn v1beta2_round_trip_keeps_every_field_v1beta1_has_and_loses_the_others() {
    let mut v2 = full_v1beta2();
    for (k, v) in v1beta2_only_fields().as_object().expect("fields") {
        v2["spec"][k] = v.clone();
    }
    let v1 = convert(&v2, V1BETA1);
    // What v1beta1 shows is exactly the v1beta1 peer.
    assert_eq!(v1, full_v1beta1());
    // Back at v1beta2: the v1beta1 fields as they were, the v1beta2-only ones
    // lost (as MetalLB: v1beta1 has no place for them).
    assert_eq!(convert(&v1, V1BETA2), full_v1beta2());
}

#[test]
fn absent_and_zero_timers_are_kept_as_they_are() {
    // MetalLB turns an absent v1beta1 holdTime into an explicit 0s (a hold
    // time of 0); here absent stays absent, and a written 0s stays 0s.
    let mut v1 = full_v1beta1();
    let spec = v1["spec"].as_object_mut().expect("spec");
    spec.remove("holdTime");
    spec.insert("keepaliveTime".into(), json!("0s"));
    let v2 = convert(&v1, V1BETA2);
    assert_eq!(v2["spec"].get("holdTime"), None);
    assert_eq!(v2["spec"]["keepaliveTime"], json!("0s"));
    assert_eq!(convert(&v2, V1BETA1), v1);
}

#[test]
fn minimal_objects_convert_both_ways() {
    let v1 = json!({"apiVersion": "metallb.io/v1beta1", "kind": "BGPPeer",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "192.0.2.1"}});
    let v2 = convert(&v1, V1BETA2);
    assert_eq!(
        v2,
        json!({"apiVersion": "metallb.io/v1beta2", "kind": "BGPPeer",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "192.0.2.1"}})
    );
    assert_eq!(convert(&v2, V1BETA1), v1);
    // A v1beta2 peer with a dynamic ASN: v1beta1 requires peerASN, MetalLB
    // writes 0 (the field is not omitempty in v1beta1).
    let dynamic = json!({"apiVersion": "metallb.io/v1beta2", "kind": "BGPPeer",
        "metadata": {"name": "d"}, "spec": {"myASN": 64512, "dynamicASN": "internal", "interface": "eth0"}});
    assert_eq!(
        convert(&dynamic, V1BETA1)["spec"],
        json!({"myASN": 64512, "peerASN": 0, "peerAddress": ""})
    );
}

#[test]
fn an_object_already_at_the_desired_version_is_unchanged() {
    let v1 = full_v1beta1();
    assert_eq!(convert(&v1, V1BETA1), v1);
    let v2 = full_v1beta2();
    assert_eq!(convert(&v2, V1BETA2), v2);
}

#[test]
fn unknown_kinds_and_versions_are_refused() {
    let pool = json!({"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool", "metadata": {"name": "p"}});
    let e = convert_object(&pool, V1BETA2).expect_err("a pool");
    assert!(matches!(e, ConversionError::UnknownKind { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "cannot convert kind \"IPAddressPool\" (metallb.io/v1beta1): only metallb.io BGPPeer is converted"
    );
    let foreign = json!({"apiVersion": "example.com/v1", "kind": "BGPPeer"});
    assert!(matches!(
        convert_object(&foreign, V1BETA2),
        Err(ConversionError::UnknownKind { .. })
    ));
    let e = convert_object(&full_v1beta1(), "metallb.io/v1").expect_err("v1");
    assert_eq!(
        e.to_string(),
        "cannot convert BGPPeer \"metallb.io/v1beta1\" to \"metallb.io/v1\": the versions are metallb.io/v1beta1 and metallb.io/v1beta2"
    );
    let mut v3 = full_v1beta1();
    v3["apiVersion"] = json!("metallb.io/v1beta3");
    assert!(matches!(
        convert_object(&v3, V1BETA2),
        Err(ConversionError::UnknownVersion { .. })
    ));
    assert_eq!(
        convert_object(&json!("text"), V1BETA2),
        Err(ConversionError::NotAnObject)
    );
    assert_eq!(
        convert_object(&json!({"kind": "BGPPeer"}), V1BETA2),
        Err(ConversionError::NotAnObject)
    );
}

#[test]
fn a_malformed_object_is_refused_without_quoting_its_values() {
    let mut v1 = full_v1beta1();
    v1["spec"]["password"] = json!(["not", "a", "string", "hunter2"]);
    let e = convert_object(&v1, V1BETA2).expect_err("bad password");
    let text = e.to_string();
    assert!(text.contains("spec.password"), "{text}");
    assert!(text.contains("peer1"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    let mut v2 = full_v1beta2();
    v2["spec"]["myASN"] = json!("hunter2");
    let text = convert_object(&v2, V1BETA1)
        .expect_err("bad asn")
        .to_string();
    assert!(text.contains("spec.myASN"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

#[test]
fn the_typed_conversions_match_metallbs_selector_mapping() {
    let v1: v1beta1::BGPPeer = serde_json::from_value(full_v1beta1()).expect("v1beta1");
    let v2 = bgp_peer_to_v1beta2(&v1);
    assert_eq!(v2.spec.node_selectors.len(), 2);
    // An empty legacy selector is an empty label selector (every node).
    assert_eq!(v2.spec.node_selectors[1], LabelSelector::default());
    let e = &v2.spec.node_selectors[0]
        .match_expressions
        .as_ref()
        .expect("exprs")[1];
    assert_eq!((e.key.as_str(), e.values.as_ref()), ("spot", None));
    assert_eq!(bgp_peer_to_v1beta1(&v2), v1);
    // The password is carried, and not shown by Debug.
    assert_eq!(v2.spec.password.expose(), "s3cret");
    assert!(!format!("{v2:?}").contains("s3cret"));
}
