//! Table tests: existing objects, a request, the expected decision.

use std::sync::Arc;

use config::Resources;
use config::api::{v1beta1, v1beta2};
use serde_json::{Value, json};

use super::*;

const NS: &str = "metallb-system";

fn meta(name: &str) -> Value {
    json!({"name": name, "namespace": NS})
}

fn pool(name: &str, addresses: &[&str]) -> Value {
    json!({"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
           "metadata": meta(name), "spec": {"addresses": addresses}})
}

fn peer(name: &str, addr: &str, extra: Value) -> Value {
    let mut spec = json!({"myASN": 64512, "peerASN": 64513, "peerAddress": addr});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"apiVersion": "metallb.io/v1beta2", "kind": "BGPPeer", "metadata": meta(name), "spec": spec})
}

fn bfd(name: &str) -> Value {
    json!({"apiVersion": "metallb.io/v1beta1", "kind": "BFDProfile", "metadata": meta(name), "spec": {}})
}

fn bgp_ad(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "metallb.io/v1beta1", "kind": "BGPAdvertisement", "metadata": meta(name), "spec": spec})
}

fn l2_ad(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement", "metadata": meta(name), "spec": spec})
}

fn community(name: &str, aliases: &[(&str, &str)]) -> Value {
    let c: Vec<Value> = aliases
        .iter()
        .map(|(n, v)| json!({"name": n, "value": v}))
        .collect();
    json!({"apiVersion": "metallb.io/v1beta1", "kind": "Community", "metadata": meta(name), "spec": {"communities": c}})
}

fn arc<K: serde::de::DeserializeOwned>(v: Value) -> Arc<K> {
    Arc::new(serde_json::from_value(v).expect("test object"))
}

/// The existing configuration of every case: one pool, one peer using a BFD
/// profile, the profile, one community.
fn existing() -> Resources {
    Resources {
        pools: vec![arc::<v1beta1::IPAddressPool>(pool(
            "first",
            &["192.0.2.0/28"],
        ))],
        peers: vec![arc::<v1beta2::BGPPeer>(peer(
            "router",
            "198.51.100.1",
            json!({"bfdProfile": "fast"}),
        ))],
        bfd_profiles: vec![arc::<v1beta1::BFDProfile>(bfd("fast"))],
        communities: vec![arc::<v1beta1::Community>(community(
            "aliases",
            &[("no-export", "65535:65281")],
        ))],
        ..Default::default()
    }
}

fn request(op: &str, object: Option<Value>, old: Option<Value>) -> AdmissionRequest {
    AdmissionRequest {
        uid: "u-1".into(),
        operation: op.into(),
        name: String::new(),
        namespace: NS.into(),
        object,
        old_object: old,
        dry_run: None,
    }
}

fn allowed() -> Decision {
    Decision::Allowed(vec![])
}

fn denied(m: &str) -> Decision {
    Decision::Denied(m.into())
}

#[test]
fn decisions() {
    use Endpoint::*;
    let cases: Vec<(&str, Endpoint, AdmissionRequest, Decision)> = vec![
        (
            "a pool that overlaps is refused with the parser's message",
            IPAddressPool,
            request("CREATE", Some(pool("second", &["192.0.2.8/29"])), None),
            denied(
                "CIDR \"192.0.2.8/29\" in pool \"second\" overlaps with already defined CIDR \"192.0.2.0/28\"",
            ),
        ),
        (
            "a pool that does not overlap passes",
            IPAddressPool,
            request("CREATE", Some(pool("second", &["192.0.2.16/28"])), None),
            allowed(),
        ),
        (
            "an update replaces the object of the same name (no overlap with itself)",
            IPAddressPool,
            request(
                "UPDATE",
                Some(pool("first", &["192.0.2.0/27"])),
                Some(pool("first", &["192.0.2.0/28"])),
            ),
            allowed(),
        ),
        (
            "a bad address range is refused",
            IPAddressPool,
            request("CREATE", Some(pool("bad", &["192.0.2.300/28"])), None),
            denied(
                "parsing address pool bad: invalid CIDR \"192.0.2.300/28\" in pool \"bad\": invalid CIDR \"192.0.2.300/28\"",
            ),
        ),
        (
            "a create in another namespace is refused",
            IPAddressPool,
            request(
                "CREATE",
                Some(
                    json!({"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
                    "metadata": {"name": "x", "namespace": "default"},
                    "spec": {"addresses": ["203.0.113.0/28"]}}),
                ),
                None,
            ),
            denied("resource must be created in metallb-system namespace"),
        ),
        (
            "deleting a pool is always allowed",
            IPAddressPool,
            request("DELETE", None, Some(pool("first", &["192.0.2.0/28"]))),
            allowed(),
        ),
        (
            "a duplicate peer is refused",
            BGPPeer,
            request(
                "CREATE",
                Some(peer("again", "198.51.100.1", json!({}))),
                None,
            ),
            denied(
                "peer 198.51.100.1 already exists, FRR mode doesn't support duplicate BGPPeers selecting the same node",
            ),
        ),
        (
            "a peer whose BFD profile does not exist yet passes (transient, as MetalLB)",
            BGPPeer,
            request(
                "CREATE",
                Some(peer(
                    "other",
                    "198.51.100.2",
                    json!({"bfdProfile": "missing"}),
                )),
                None,
            ),
            allowed(),
        ),
        (
            "a peer with a bad ASN setting is refused",
            BGPPeer,
            request(
                "CREATE",
                Some(peer(
                    "other",
                    "198.51.100.2",
                    json!({"dynamicASN": "external"}),
                )),
                None,
            ),
            denied("parsing peer other both peer ASN and dynamicASN specified"),
        ),
        (
            "a peer created with disableMP passes with the deprecation warning, unchecked",
            BGPPeer,
            request(
                "CREATE",
                Some(peer("again", "198.51.100.1", json!({"disableMP": true}))),
                None,
            ),
            Decision::Allowed(vec![DISABLE_MP_WARNING.into()]),
        ),
        (
            "a v1beta1 peer is converted and checked",
            BGPPeer,
            request(
                "CREATE",
                Some(
                    json!({"apiVersion": "metallb.io/v1beta1", "kind": "BGPPeer", "metadata": meta("old"),
                    "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "198.51.100.1"}}),
                ),
                None,
            ),
            denied(
                "peer 198.51.100.1 already exists, FRR mode doesn't support duplicate BGPPeers selecting the same node",
            ),
        ),
        (
            "a BGP advertisement of a pool with a too short aggregation length is refused",
            BGPAdvertisement,
            request(
                "CREATE",
                Some(bgp_ad(
                    "ad",
                    json!({"aggregationLength": 24, "ipAddressPools": ["first"]}),
                )),
                None,
            ),
            denied(
                "invalid aggregation length 24: prefix 28 in this pool is more specific than the aggregation length for addresses 192.0.2.0/28",
            ),
        ),
        (
            "a BGP advertisement with an alias not defined yet passes (transient)",
            BGPAdvertisement,
            request(
                "CREATE",
                Some(bgp_ad("ad", json!({"communities": ["later"]}))),
                None,
            ),
            allowed(),
        ),
        (
            "a BGP advertisement with a bad community value is refused",
            BGPAdvertisement,
            request(
                "CREATE",
                Some(bgp_ad("ad", json!({"communities": ["1:2:3:4"]}))),
                None,
            ),
            denied(
                "invalid community value: invalid marker for large community, expected community to be of format large:<uint32>:<uint32>:<uint32> but got \"1:2:3:4\" instead\ninvalid community \"1:2:3:4\" in BGP advertisement",
            ),
        ),
        (
            "an L2 advertisement naming a pool twice is refused",
            L2Advertisement,
            request(
                "CREATE",
                Some(l2_ad("l2", json!({"ipAddressPools": ["first", "first"]}))),
                None,
            ),
            denied("duplicate definition of ipAddressPools \"first\""),
        ),
        (
            "a fine L2 advertisement passes",
            L2Advertisement,
            request(
                "CREATE",
                Some(l2_ad("l2", json!({"ipAddressPools": ["first"]}))),
                None,
            ),
            allowed(),
        ),
        (
            "an alias defined in two Communities is refused",
            Community,
            request(
                "CREATE",
                Some(community("more", &[("no-export", "65535:65281")])),
                None,
            ),
            denied("duplicate definition of community \"no-export\""),
        ),
        (
            "a BFD profile in use cannot be deleted",
            BFDProfile,
            request("DELETE", None, Some(bfd("fast"))),
            denied("failed to delete BFDProfile fast, used by BGPPeer router"),
        ),
        (
            "a BFD profile not in use can be deleted",
            BFDProfile,
            request("DELETE", None, Some(bfd("slow"))),
            allowed(),
        ),
        (
            "a BFD profile create is checked for its namespace only",
            BFDProfile,
            request("CREATE", Some(bfd("slow")), None),
            allowed(),
        ),
        (
            "an object that is not one is an error (400)",
            IPAddressPool,
            request("CREATE", Some(json!({"spec": {"addresses": 7}})), None),
            Decision::Errored(400, String::new()),
        ),
        (
            "a request without its object is an error (400)",
            BGPPeer,
            request("CREATE", None, None),
            Decision::Errored(400, "there is no content to decode".into()),
        ),
    ];
    let existing = existing();
    let mut failures = Vec::new();
    for (what, endpoint, req, want) in cases {
        let got = decide(endpoint, &req, &existing, NS);
        let same = match (&got, &want) {
            // The decoder's own text is not MetalLB's: only the code matters.
            (Decision::Errored(a, _), Decision::Errored(b, m)) if m.is_empty() => a == b,
            _ => got == want,
        };
        if !same {
            failures.push(format!("{what}:\n  got  {got:?}\n  want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn review_round_trip_echoes_the_uid_and_denies_with_403() {
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "metallb.io", "version": "v1beta1", "kind": "IPAddressPool"},
            "resource": {"group": "metallb.io", "version": "v1beta1", "resource": "ipaddresspools"},
            "name": "second", "namespace": NS, "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": pool("second", &["192.0.2.0/30"]),
            "oldObject": null,
            "dryRun": true
        }
    });
    let out = review(
        Endpoint::IPAddressPool,
        &serde_json::to_vec(&body).expect("json"),
        &existing(),
        NS,
    )
    .expect("a review");
    let out: Value = serde_json::from_slice(&out).expect("json out");
    assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(out["kind"], "AdmissionReview");
    assert_eq!(
        out["response"]["uid"],
        "705ab4f5-6393-11e8-b7cc-42010a800002"
    );
    assert_eq!(out["response"]["allowed"], false);
    assert_eq!(out["response"]["status"]["code"], 403);
    assert_eq!(out["response"]["status"]["reason"], "Forbidden");
    assert!(
        out["response"]["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("overlaps with already defined CIDR")),
        "{out}"
    );
    assert!(out.get("request").is_none());
}

#[test]
fn garbage_is_no_review() {
    for body in [&b"not json"[..], b"{}", b"{\"request\": 5}", b"[]"] {
        assert!(
            review(Endpoint::Community, body, &Resources::default(), NS).is_err(),
            "{body:?}"
        );
    }
}

#[test]
fn paths_are_metallbs() {
    for e in Endpoint::ALL {
        assert_eq!(Endpoint::from_path(e.path()), Some(e));
    }
    assert_eq!(Endpoint::from_path("/convert"), None);
}
