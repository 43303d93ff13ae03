//! The CRDs generated from the Rust types: checked in under `deploy/crds`,
//! structural, faithful to MetalLB's schemas, and enforced by
//! `config::crd::check_object` as the API server would.
//!
//! Regenerate `deploy/crds` with `METALLB_UPDATE_CRDS=1 cargo test -p config --test crds`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use config::crd;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

const REGENERATE: &str = "METALLB_UPDATE_CRDS=1 cargo test -p config --test crds";

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds")
}

fn by_kind(kind: &str) -> CustomResourceDefinition {
    crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"))
}

/// The openAPIV3Schema of one version, as JSON.
fn schema(kind: &str, version: &str) -> Value {
    let crd = by_kind(kind);
    let v = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .unwrap_or_else(|| panic!("{kind} has no version {version}"));
    serde_json::to_value(
        v.schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// The schema node at a dotted path of property names (`spec.peerPort`);
/// `[]` steps into array items.
fn node<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut n = schema;
    for step in path.split('.') {
        n = if step == "[]" {
            &n["items"]
        } else {
            &n["properties"][step]
        };
        assert!(!n.is_null(), "no schema node at {path} (step {step})");
    }
    n
}

fn required(n: &Value) -> Vec<&str> {
    n["required"]
        .as_array()
        .map(|r| r.iter().map(|v| v.as_str().unwrap()).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// (a) deploy/crds is what the types generate

#[test]
fn deploy_crds_match_the_types() {
    let dir = crd_dir();
    let want: BTreeMap<String, String> = crd::render_all().into_iter().collect();
    let have = || -> BTreeMap<String, String> {
        std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
                    .map(|p| {
                        let name = p.file_name().unwrap().to_string_lossy().into_owned();
                        (name, std::fs::read_to_string(&p).unwrap())
                    })
                    .collect()
            })
            .unwrap_or_default()
    };

    if std::env::var("METALLB_UPDATE_CRDS").as_deref() == Ok("1") {
        std::fs::create_dir_all(&dir).unwrap();
        for name in have().keys().filter(|n| !want.contains_key(*n)) {
            std::fs::remove_file(dir.join(name)).unwrap();
        }
        for (name, text) in &want {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }

    let have = have();
    let mut problems = Vec::new();
    for name in want.keys().filter(|n| !have.contains_key(*n)) {
        problems.push(format!("missing: {name}"));
    }
    for name in have.keys().filter(|n| !want.contains_key(*n)) {
        problems.push(format!("not generated (stale?): {name}"));
    }
    for (name, text) in &want {
        if let Some(old) = have.get(name)
            && old != text
        {
            let line = old
                .lines()
                .zip(text.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| old.lines().count().min(text.lines().count()));
            problems.push(format!(
                "differs: {name} (first difference at line {})",
                line + 1
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "deploy/crds is out of date with the Rust types in config/src/api:\n  {}\nRegenerate with: {REGENERATE}",
        problems.join("\n  ")
    );
}

#[test]
fn rendering_is_deterministic_and_round_trips() {
    let first = crd::render_all();
    assert_eq!(first, crd::render_all());
    let crds = crd::all();
    assert_eq!(first.len(), crds.len(), "one file per kind");
    for c in &crds {
        let name = crd::file_name(c);
        let (_, text) = first.iter().find(|(n, _)| *n == name).unwrap();
        assert!(
            name.starts_with("metallb.io_") && name.ends_with(".yaml"),
            "{name}"
        );
        assert!(
            text.starts_with(&format!("{}\n", crd::HEADER)),
            "{name}: header"
        );
        assert!(crd::HEADER.contains(REGENERATE));
        let back: CustomResourceDefinition = serde_saphyr::from_str(text)
            .unwrap_or_else(|e| panic!("{name} does not parse back: {e}"));
        assert_eq!(&back, c, "{name} does not round-trip");
    }
}

// ---------------------------------------------------------------------------
// (b) structural schemas

#[test]
fn every_crd_is_structural() {
    for c in crd::all() {
        if let Err(errs) = crd::check_structural(&c) {
            panic!(
                "{} is not structural:\n{}",
                c.spec.names.kind,
                errs.join("\n")
            );
        }
    }
}

#[test]
fn broken_schemas_are_not_structural() {
    let mut crd = serde_json::to_value(by_kind("IPAddressPool")).unwrap();
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    // No type on the array's items.
    spec["properties"]["addresses"]["items"] = json!({ "description": "untyped" });
    // A $ref, as schemars emits without inlining.
    spec["properties"]["autoAssign"] = json!({ "$ref": "#/definitions/Bool" });
    // A junctor that carries a type.
    spec["properties"]["avoidBuggyIPs"]["anyOf"] = json!([{ "type": "string" }]);
    // An array without items.
    spec["properties"]["serviceAllocation"]["properties"]["namespaces"] =
        json!({ "type": "array" });
    let broken: CustomResourceDefinition = serde_json::from_value(crd).unwrap();

    let errs = crd::check_structural(&broken).unwrap_err();
    let joined = errs.join("\n");
    let base = "spec.versions[0].schema.openAPIV3Schema.properties[spec]";
    for want in [
        format!("{base}.properties[addresses].items.type: Required value"),
        format!("{base}.properties[autoAssign].$ref: Forbidden"),
        format!("{base}.properties[autoAssign].type: Required value"),
        format!(
            "{base}.properties[avoidBuggyIPs].anyOf[0].type: Forbidden: must be empty to be structural"
        ),
        format!(
            "{base}.properties[serviceAllocation].properties[namespaces].items: Required value"
        ),
    ] {
        assert!(joined.contains(&want), "missing {want:?} in:\n{joined}");
    }
}

#[test]
fn no_unsigned_formats_and_no_refs() {
    fn walk(n: &Value, path: &str, errs: &mut Vec<String>) {
        match n {
            Value::Object(m) => {
                if let Some(f) = m.get("format").and_then(Value::as_str)
                    && !["int32", "int64", "date-time"].contains(&f)
                {
                    errs.push(format!("{path}: format {f}"));
                }
                for key in ["$ref", "definitions", "$schema", "allOf", "anyOf", "oneOf"] {
                    if m.contains_key(key) {
                        errs.push(format!("{path}: {key}"));
                    }
                }
                for (k, v) in m {
                    walk(v, &format!("{path}.{k}"), errs);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, &format!("{path}[{i}]"), errs);
                }
            }
            _ => {}
        }
    }
    let mut errs = Vec::new();
    for c in crd::all() {
        walk(
            &serde_json::to_value(&c).unwrap(),
            &c.spec.names.kind,
            &mut errs,
        );
    }
    assert!(errs.is_empty(), "{errs:#?}");
}

// ---------------------------------------------------------------------------
// Schema content (MetalLB's)

#[test]
fn schemas_match_metallb() {
    // IPAddressPool
    let s = schema("IPAddressPool", "v1beta1");
    assert_eq!(required(node(&s, "spec")), ["addresses"]);
    assert_eq!(node(&s, "spec.autoAssign")["default"], json!(true));
    assert_eq!(node(&s, "spec.avoidBuggyIPs")["default"], json!(false));
    let status = node(&s, "status");
    assert_eq!(
        required(status),
        [
            "assignedIPv4",
            "assignedIPv6",
            "availableIPv4",
            "availableIPv6"
        ]
    );
    for f in [
        "assignedIPv4",
        "assignedIPv6",
        "availableIPv4",
        "availableIPv6",
    ] {
        let n = &status["properties"][f];
        assert_eq!(n["type"], "integer");
        assert_eq!(n["format"], "int64");
        assert!(n.get("default").is_none(), "{f} has a default");
        let d = n["description"].as_str().unwrap();
        assert!(d.contains("2^63-1") && d.contains("clamped"), "{f}: {d}");
    }
    // LabelSelectors are inlined.
    let sel = node(&s, "spec.serviceAllocation.serviceSelectors.[]");
    assert_eq!(sel["type"], "object");
    assert_eq!(
        node(sel, "matchExpressions.[]")["required"],
        json!(["key", "operator"])
    );

    // L2Advertisement
    let s = schema("L2Advertisement", "v1beta1");
    let pref = node(&s, "spec.preferredNodeSelectors.[]");
    assert_eq!(required(pref), ["preference", "weight"]);
    let weight = node(pref, "weight");
    assert_eq!(
        (weight["minimum"].as_f64(), weight["maximum"].as_f64()),
        (Some(1.0), Some(100.0))
    );
    assert_eq!(weight["format"], "int32");

    // BGPAdvertisement
    let s = schema("BGPAdvertisement", "v1beta1");
    let al = node(&s, "spec.aggregationLength");
    assert_eq!(
        (al["default"].as_i64(), al["minimum"].as_f64()),
        (Some(32), Some(1.0))
    );
    assert_eq!(node(&s, "spec.aggregationLengthV6")["default"], json!(128));
    let rules = &node(&s, "spec")["x-kubernetes-validations"];
    assert_eq!(rules.as_array().unwrap().len(), 1);
    assert!(
        rules[0]["rule"]
            .as_str()
            .unwrap()
            .starts_with("!has(self.serviceSelectors)")
    );

    // BGPPeer v1beta2
    let s = schema("BGPPeer", "v1beta2");
    assert_eq!(required(node(&s, "spec")), ["myASN"]);
    for (f, min) in [("myASN", 0.0), ("peerASN", 0.0), ("localASN", 1.0)] {
        let n = node(&s, &format!("spec.{f}"));
        assert_eq!(n["format"], "int64", "{f}");
        assert_eq!(n["minimum"].as_f64(), Some(min), "{f}");
        assert_eq!(n["maximum"].as_f64(), Some(4294967295.0), "{f}");
        assert!(n.get("default").is_none(), "{f} has a default");
    }
    let port = node(&s, "spec.peerPort");
    assert_eq!(port["default"], json!(179));
    assert_eq!(
        (port["minimum"].as_f64(), port["maximum"].as_f64()),
        (Some(1.0), Some(16384.0))
    );
    assert_eq!(
        node(&s, "spec.dynamicASN")["enum"],
        json!(["internal", "external"])
    );
    assert_eq!(node(&s, "spec.disableMP")["default"], json!(false));
    assert_eq!(
        node(&s, "spec.dualStackAddressFamily")["default"],
        json!(false)
    );
    assert_eq!(
        node(&s, "spec.connectTime")["x-kubernetes-validations"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        node(&s, "spec.enableGracefulRestart")["x-kubernetes-validations"],
        json!([{ "rule": "self == oldSelf", "message": "EnableGracefulRestart cannot be changed after creation" }])
    );
    assert_eq!(node(&s, "spec.holdTime")["type"], "string");

    // BGPPeer v1beta1
    let s = schema("BGPPeer", "v1beta1");
    assert_eq!(
        required(node(&s, "spec")),
        ["myASN", "peerASN", "peerAddress"]
    );
    let port = node(&s, "spec.peerPort");
    assert_eq!(
        (port["minimum"].as_f64(), port["maximum"].as_f64()),
        (Some(0.0), Some(16384.0))
    );
    assert!(port.get("default").is_none());
    let expr = node(&s, "spec.nodeSelectors.[].matchExpressions.[]");
    assert_eq!(required(expr), ["key", "operator", "values"]);
    assert_eq!(node(expr, "values")["minItems"], json!(1));

    // BFDProfile
    let s = schema("BFDProfile", "v1beta1");
    for (f, min, max) in [
        ("receiveInterval", 10.0, 60000.0),
        ("transmitInterval", 10.0, 60000.0),
        ("echoInterval", 10.0, 60000.0),
        ("detectMultiplier", 2.0, 255.0),
        ("minimumTtl", 1.0, 254.0),
    ] {
        let n = node(&s, &format!("spec.{f}"));
        assert_eq!(
            (n["minimum"].as_f64(), n["maximum"].as_f64()),
            (Some(min), Some(max)),
            "{f}"
        );
    }

    // ConfigurationState: status only.
    let s = schema("ConfigurationState", "v1beta1");
    assert!(s["properties"].get("spec").is_none());
    assert_eq!(
        node(&s, "status.result")["enum"],
        json!(["Valid", "Invalid", "Unknown"])
    );
    let conds = node(&s, "status.conditions");
    assert_eq!(conds["x-kubernetes-list-type"], "map");
    assert_eq!(conds["x-kubernetes-list-map-keys"], json!(["type"]));

    // ServiceL2Status / ServiceBGPStatus: immutable identity.
    for kind in ["ServiceL2Status", "ServiceBGPStatus"] {
        let s = schema(kind, "v1beta1");
        assert!(s["properties"].get("spec").is_none(), "{kind}");
        for f in ["node", "serviceName", "serviceNamespace"] {
            assert_eq!(
                node(&s, &format!("status.{f}"))["x-kubernetes-validations"],
                json!([{ "rule": "self == oldSelf", "message": "Value is immutable" }]),
                "{kind} {f}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// (c) check_object

fn sel() -> Value {
    json!({ "matchLabels": { "app": "web" } })
}

/// A valid object of every kind and version.
fn valid_objects() -> Vec<(&'static str, &'static str, Value)> {
    let meta = json!({ "name": "x", "namespace": "metallb-system" });
    vec![
        (
            "metallb.io/v1beta1",
            "IPAddressPool",
            json!({
                "metadata": meta,
                "spec": {
                    "addresses": ["192.168.10.0/24", "fc00::/64", "10.0.0.1-10.0.0.5"],
                    "autoAssign": false,
                    "avoidBuggyIPs": true,
                    "serviceAllocation": {
                        "priority": 10,
                        "namespaces": ["a"],
                        "namespaceSelectors": [sel()],
                        "serviceSelectors": [{ "matchExpressions": [{ "key": "k", "operator": "In", "values": ["v"] }] }],
                    },
                },
                "status": { "assignedIPv4": 1, "assignedIPv6": 0, "availableIPv4": 253, "availableIPv6": i64::MAX },
            }),
        ),
        (
            "metallb.io/v1beta1",
            "L2Advertisement",
            json!({
                "metadata": meta,
                "spec": {
                    "ipAddressPools": ["a"],
                    "ipAddressPoolSelectors": [sel()],
                    "nodeSelectors": [sel()],
                    "interfaces": ["eth0"],
                    "serviceSelectors": [sel()],
                    "preferredNodeSelectors": [{ "weight": 100, "preference": {} }],
                },
            }),
        ),
        (
            "metallb.io/v1beta1",
            "BGPAdvertisement",
            json!({
                "metadata": meta,
                "spec": {
                    "localPref": 4294967295u32,
                    "communities": ["65535:65282", "large:1:2:3"],
                    "ipAddressPools": ["a"],
                    "peers": ["p"],
                    // Allowed: the aggregation lengths default to 32 and 128.
                    "serviceSelectors": [sel()],
                },
            }),
        ),
        (
            "metallb.io/v1beta1",
            "BGPAdvertisement",
            json!({
                "metadata": meta,
                "spec": { "aggregationLength": 24, "aggregationLengthV6": 64 },
            }),
        ),
        (
            "metallb.io/v1beta2",
            "BGPPeer",
            json!({
                "metadata": meta,
                "spec": {
                    "myASN": 4294967295u32,
                    "peerASN": 64512,
                    "localASN": 1,
                    "peerAddress": "10.0.0.1",
                    "sourceAddress": "10.0.0.2",
                    "peerPort": 16384,
                    "holdTime": "90s",
                    "keepaliveTime": "30s",
                    "connectTime": "5s",
                    "routerID": "10.0.0.2",
                    "nodeSelectors": [sel()],
                    "passwordSecret": { "name": "s", "namespace": "metallb-system" },
                    "bfdProfile": "b",
                    "enableGracefulRestart": true,
                    "ebgpMultiHop": true,
                    "vrf": "red",
                    "disableMP": false,
                    "dualStackAddressFamily": true,
                },
            }),
        ),
        (
            "metallb.io/v1beta2",
            "BGPPeer",
            json!({
                "metadata": meta,
                "spec": { "myASN": 64512, "dynamicASN": "external", "interface": "eth1" },
            }),
        ),
        (
            "metallb.io/v1beta1",
            "BGPPeer",
            json!({
                "metadata": meta,
                "spec": {
                    "myASN": 64512,
                    "peerASN": 64513,
                    "peerAddress": "10.0.0.1",
                    "peerPort": 0,
                    "holdTime": "0s",
                    "keepaliveTime": "0s",
                    "nodeSelectors": [{
                        "matchLabels": { "a": "b" },
                        "matchExpressions": [{ "key": "k", "operator": "In", "values": ["v"] }],
                    }],
                    "password": "pw",
                },
            }),
        ),
        (
            "metallb.io/v1beta1",
            "BFDProfile",
            json!({
                "metadata": meta,
                "spec": {
                    "receiveInterval": 10,
                    "transmitInterval": 60000,
                    "detectMultiplier": 3,
                    "echoInterval": 50,
                    "echoMode": true,
                    "passiveMode": false,
                    "minimumTtl": 254,
                },
            }),
        ),
        (
            "metallb.io/v1beta1",
            "Community",
            json!({
                "metadata": meta,
                "spec": { "communities": [{ "name": "no-advertise", "value": "65535:65282" }] },
            }),
        ),
        (
            "metallb.io/v1beta1",
            "ConfigurationState",
            json!({
                "metadata": meta,
                "status": {
                    "result": "Invalid",
                    "lastError": "configuration error: x",
                    "errorSummary": "configuration error: x",
                    "conditions": [{
                        "type": "configReconcilerValid",
                        "status": "False",
                        "reason": "ConfigurationError",
                        "message": "configuration error: x",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }],
                },
            }),
        ),
        (
            "metallb.io/v1beta1",
            "ServiceL2Status",
            json!({
                "metadata": meta,
                "status": { "node": "n", "serviceName": "s", "serviceNamespace": "ns", "interfaces": [{ "name": "eth0" }] },
            }),
        ),
        (
            "metallb.io/v1beta1",
            "ServiceBGPStatus",
            json!({
                "metadata": meta,
                "status": { "node": "n", "serviceName": "s", "serviceNamespace": "ns", "peers": ["p"] },
            }),
        ),
        (
            "metallb.io/v1beta1",
            "BGPSessionStatus",
            json!({
                "metadata": meta,
                "status": {
                    "node": "n", "peer": "p", "vrf": "", "bgpStatus": "Established", "bfdStatus": "N/A",
                    "lastTransitionTime": "2026-01-01T00:00:00Z", "lastError": "",
                },
            }),
        ),
        (
            "metallb.io/v1beta1",
            "NodeBGPStatus",
            json!({
                "metadata": meta,
                "status": {
                    "node": "n", "peers": ["p"], "withheld": "",
                    "localPrefixes": [{ "pool": "pool", "advertisement": "ad", "prefixes": 2 }],
                    "localServices": 1, "withdrawnServices": 1,
                    "exceptions": [
                        { "serviceNamespace": "ns", "serviceName": "local", "announced": true, "peers": ["p"] },
                        { "serviceNamespace": "ns", "serviceName": "s", "reason": "conflictingAdvertisements" },
                    ],
                    "exceptionsTruncated": false,
                },
            }),
        ),
    ]
}

#[test]
fn valid_objects_pass() {
    let objects = valid_objects();
    let kinds: std::collections::BTreeSet<_> = objects.iter().map(|(_, k, _)| *k).collect();
    assert_eq!(
        kinds.len(),
        crd::all().len(),
        "a valid object of every kind"
    );
    for (av, kind, obj) in objects {
        let mut obj = obj;
        obj["apiVersion"] = json!(av);
        obj["kind"] = json!(kind);
        assert_eq!(
            crd::check_object(av, kind, &obj),
            Vec::<String>::new(),
            "{av} {kind}"
        );
    }
}

fn check(av: &str, kind: &str, spec: Value) -> Vec<String> {
    crd::check_object(
        av,
        kind,
        &json!({ "metadata": { "name": "x" }, "spec": spec }),
    )
}

#[test]
fn bounds_are_enforced() {
    assert_eq!(
        check(
            "metallb.io/v1beta2",
            "BGPPeer",
            json!({ "myASN": 1, "peerPort": 20000 })
        ),
        [
            "spec.peerPort: Invalid value: 20000: spec.peerPort in body should be less than or equal to 16384"
        ]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta2",
            "BGPPeer",
            json!({ "myASN": 4294967296u64, "localASN": 0 })
        ),
        [
            "spec.localASN: Invalid value: 0: spec.localASN in body should be greater than or equal to 1",
            "spec.myASN: Invalid value: 4294967296: spec.myASN in body should be less than or equal to 4294967295",
        ]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta1",
            "BFDProfile",
            json!({ "detectMultiplier": 1 })
        ),
        [
            "spec.detectMultiplier: Invalid value: 1: spec.detectMultiplier in body should be greater than or equal to 2"
        ]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta1",
            "L2Advertisement",
            json!({ "preferredNodeSelectors": [{ "weight": 0, "preference": {} }] })
        ),
        [
            "spec.preferredNodeSelectors[0].weight: Invalid value: 0: spec.preferredNodeSelectors[0].weight in body should be greater than or equal to 1"
        ]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta1",
            "BGPPeer",
            json!({ "myASN": 1, "peerASN": 2, "peerAddress": "a",
                    "nodeSelectors": [{ "matchExpressions": [{ "key": "k", "operator": "In", "values": [] }] }] })
        ),
        [
            "spec.nodeSelectors[0].matchExpressions[0].values: Invalid value: 0: spec.nodeSelectors[0].matchExpressions[0].values in body should have at least 1 items"
        ]
    );
    let long = "x".repeat(32769);
    let errs = crd::check_object(
        "metallb.io/v1beta1",
        "ConfigurationState",
        &json!({ "status": { "conditions": [{
            "type": "t", "status": "True", "reason": "R", "message": long,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }] } }),
    );
    assert_eq!(
        errs,
        ["status.conditions[0].message: Too long: may not be more than 32768 bytes"]
    );
}

#[test]
fn required_fields_are_enforced() {
    assert_eq!(
        check("metallb.io/v1beta1", "IPAddressPool", json!({})),
        ["spec.addresses: Required value"]
    );
    assert_eq!(
        crd::check_object(
            "metallb.io/v1beta1",
            "IPAddressPool",
            &json!({ "metadata": {} })
        ),
        ["spec: Required value"]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta2",
            "BGPPeer",
            json!({ "peerAddress": "10.0.0.1" })
        ),
        ["spec.myASN: Required value"]
    );
    assert_eq!(
        check("metallb.io/v1beta1", "BGPPeer", json!({ "myASN": 1 })),
        [
            "spec.peerASN: Required value",
            "spec.peerAddress: Required value"
        ]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta1",
            "L2Advertisement",
            json!({ "preferredNodeSelectors": [{}] })
        ),
        [
            "spec.preferredNodeSelectors[0].preference: Required value",
            "spec.preferredNodeSelectors[0].weight: Required value",
        ]
    );
    // A null on a non-nullable field is pruned, then found missing.
    assert_eq!(
        check(
            "metallb.io/v1beta1",
            "IPAddressPool",
            json!({ "addresses": null })
        ),
        ["spec.addresses: Required value"]
    );
    assert_eq!(
        crd::check_object(
            "metallb.io/v1beta1",
            "IPAddressPool",
            &json!({ "spec": { "addresses": ["10.0.0.0/8"] }, "status": { "assignedIPv4": 1 } })
        ),
        [
            "status.assignedIPv6: Required value",
            "status.availableIPv4: Required value",
            "status.availableIPv6: Required value",
        ]
    );
}

#[test]
fn enums_and_types_are_enforced() {
    assert_eq!(
        check(
            "metallb.io/v1beta2",
            "BGPPeer",
            json!({ "myASN": 1, "dynamicASN": "foo" })
        ),
        [r#"spec.dynamicASN: Unsupported value: "foo": supported values: "internal", "external""#]
    );
    assert_eq!(
        crd::check_object(
            "metallb.io/v1beta1",
            "ConfigurationState",
            &json!({ "status": { "result": "Maybe" } })
        ),
        [
            r#"status.result: Unsupported value: "Maybe": supported values: "Valid", "Invalid", "Unknown""#
        ]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta1",
            "IPAddressPool",
            json!({ "addresses": ["a"], "autoAssign": "yes" })
        ),
        [
            r#"spec.autoAssign: Invalid value: "string": spec.autoAssign in body must be of type boolean: "string""#
        ]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta1",
            "IPAddressPool",
            json!({ "addresses": "10.0.0.0/8" })
        ),
        [
            r#"spec.addresses: Invalid value: "string": spec.addresses in body must be of type array: "string""#
        ]
    );
    assert_eq!(
        check("metallb.io/v1beta2", "BGPPeer", json!({ "myASN": 1.5 })),
        [
            r#"spec.myASN: Invalid value: "number": spec.myASN in body must be of type integer: "number""#
        ]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta1",
            "IPAddressPool",
            json!({ "addresses": ["a"], "autoassign": true })
        ),
        [r#"unknown field "spec.autoassign""#]
    );
}

#[test]
fn cel_rules_are_enforced() {
    let msg = r#"spec: Invalid value: "object": serviceSelectors and aggregationLength are mutually exclusive, can only be used together with default aggregationLength (32) and aggregationLengthV6 (128)"#;
    assert_eq!(
        check(
            "metallb.io/v1beta1",
            "BGPAdvertisement",
            json!({ "serviceSelectors": [sel()], "aggregationLength": 24 })
        ),
        [msg]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta1",
            "BGPAdvertisement",
            json!({ "serviceSelectors": [sel()], "aggregationLengthV6": 64 })
        ),
        [msg]
    );
    assert!(
        check(
            "metallb.io/v1beta1",
            "BGPAdvertisement",
            json!({ "serviceSelectors": [], "aggregationLength": 24 })
        )
        .is_empty()
    );
    assert!(
        check(
            "metallb.io/v1beta1",
            "BGPAdvertisement",
            json!({ "serviceSelectors": [sel()], "aggregationLength": 32, "aggregationLengthV6": 128 })
        )
        .is_empty()
    );
    assert_eq!(
        check(
            "metallb.io/v1beta2",
            "BGPPeer",
            json!({ "myASN": 1, "connectTime": "1500ms" })
        ),
        [
            r#"spec.connectTime: Invalid value: "string": connect time should contain a whole number of seconds"#
        ]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta2",
            "BGPPeer",
            json!({ "myASN": 1, "connectTime": "0s" })
        ),
        [
            r#"spec.connectTime: Invalid value: "string": connect time should be between 1 seconds to 65535"#
        ]
    );
    assert_eq!(
        check(
            "metallb.io/v1beta2",
            "BGPPeer",
            json!({ "myASN": 1, "connectTime": "24h" })
        ),
        [
            r#"spec.connectTime: Invalid value: "string": connect time should be between 1 seconds to 65535"#
        ]
    );
    // Transition rules cannot fail on creation.
    assert!(
        check(
            "metallb.io/v1beta2",
            "BGPPeer",
            json!({ "myASN": 1, "enableGracefulRestart": true })
        )
        .is_empty()
    );
}

#[test]
fn unknown_kinds_are_not_checked() {
    let obj = json!({ "spec": { "anything": 1 } });
    assert!(crd::check_object("metallb.io/v1", "IPAddressPool", &obj).is_empty());
    assert!(crd::check_object("metallb.io/v1beta1", "Pool", &obj).is_empty());
    assert!(crd::check_object("v1", "ConfigMap", &obj).is_empty());
    // v1beta2 has only BGPPeer.
    assert!(crd::check_object("metallb.io/v1beta2", "IPAddressPool", &obj).is_empty());
}

// ---------------------------------------------------------------------------
// (d) names, subresources, versions, printer columns

#[test]
fn names_subresources_and_versions() {
    let crds = crd::all();
    let kinds: Vec<&str> = crds.iter().map(|c| c.spec.names.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "IPAddressPool",
            "L2Advertisement",
            "BGPAdvertisement",
            "BGPPeer",
            "BFDProfile",
            "Community",
            "ConfigurationState",
            "ServiceL2Status",
            "ServiceBGPStatus",
            "BGPSessionStatus",
            "NodeBGPStatus",
        ]
    );
    for c in &crds {
        let kind = &c.spec.names.kind;
        assert_eq!(c.spec.group, "metallb.io", "{kind}");
        assert_eq!(c.spec.scope, "Namespaced", "{kind}");
        assert_eq!(
            c.metadata.name.as_deref(),
            Some(format!("{}.metallb.io", c.spec.names.plural).as_str())
        );
        assert_eq!(
            c.spec.names.categories.as_deref(),
            Some(&["metallb".to_owned()][..]),
            "{kind}"
        );
        assert!(
            c.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty()),
            "{kind} has no short name"
        );
        assert_eq!(
            c.spec.versions.iter().filter(|v| v.storage).count(),
            1,
            "{kind}"
        );
        for v in &c.spec.versions {
            assert!(v.served, "{kind} {}", v.name);
            assert!(
                v.subresources.as_ref().is_some_and(|s| s.status.is_some()),
                "{kind} {} has no status subresource",
                v.name
            );
        }
    }

    let peer = by_kind("BGPPeer");
    let versions: Vec<_> = peer
        .spec
        .versions
        .iter()
        .map(|v| {
            (
                v.name.as_str(),
                v.storage,
                v.deprecated,
                v.deprecation_warning.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        versions,
        [
            (
                "v1beta1",
                false,
                Some(true),
                Some("v1beta1 is deprecated, please use v1beta2")
            ),
            ("v1beta2", true, None, None),
        ]
    );
    // MetalLB's conversion (config/crd/patches/crd-conversion-patch-bgppeers.yaml).
    assert_eq!(
        serde_json::to_value(&peer.spec.conversion).expect("json"),
        json!({
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {"service": {
                    "name": "metallb-webhook-service",
                    "namespace": "metallb-system",
                    "path": "/convert",
                }},
                "conversionReviewVersions": ["v1beta1", "v1beta2"],
            },
        })
    );
}

#[test]
fn printer_columns() {
    type Col = (&'static str, &'static str, &'static str, i32);
    let pools_ads = [
        ("IPAddressPools", "string", ".spec.ipAddressPools", 0),
        (
            "IPAddressPool Selectors",
            "string",
            ".spec.ipAddressPoolSelectors",
            0,
        ),
    ];
    let peer: Vec<Col> = vec![
        ("Address", "string", ".spec.peerAddress", 0),
        ("ASN", "string", ".spec.peerASN", 0),
        ("BFD Profile", "string", ".spec.bfdProfile", 0),
        ("Multi Hops", "string", ".spec.ebgpMultiHop", 0),
    ];
    let age = ("Age", "date", ".metadata.creationTimestamp", 0);
    let want: Vec<(&str, Vec<Col>)> = vec![
        (
            "IPAddressPool",
            vec![
                ("Auto Assign", "boolean", ".spec.autoAssign", 0),
                ("Avoid Buggy IPs", "boolean", ".spec.avoidBuggyIPs", 0),
                ("Addresses", "string", ".spec.addresses", 0),
            ],
        ),
        (
            "L2Advertisement",
            [
                &pools_ads[..],
                &[
                    ("Interfaces", "string", ".spec.interfaces", 0),
                    ("Node Selectors", "string", ".spec.nodeSelectors", 10),
                ],
            ]
            .concat(),
        ),
        (
            "BGPAdvertisement",
            [
                &pools_ads[..],
                &[
                    ("Peers", "string", ".spec.peers", 0),
                    ("Node Selectors", "string", ".spec.nodeSelectors", 10),
                ],
            ]
            .concat(),
        ),
        ("BGPPeer", peer),
        (
            "BFDProfile",
            vec![
                ("Passive Mode", "boolean", ".spec.passiveMode", 0),
                ("Transmit Interval", "integer", ".spec.transmitInterval", 0),
                ("Receive Interval", "integer", ".spec.receiveInterval", 0),
                ("Multiplier", "integer", ".spec.detectMultiplier", 0),
            ],
        ),
        ("Community", vec![]),
        (
            "ConfigurationState",
            vec![
                ("Result", "string", ".status.result", 0),
                ("ErrorSummary", "string", ".status.errorSummary", 0),
                age,
            ],
        ),
        (
            "ServiceL2Status",
            vec![
                ("Allocated Node", "string", ".status.node", 0),
                ("Service Name", "string", ".status.serviceName", 0),
                ("Service Namespace", "string", ".status.serviceNamespace", 0),
            ],
        ),
        (
            "ServiceBGPStatus",
            vec![
                ("Node", "string", ".status.node", 0),
                ("Service Name", "string", ".status.serviceName", 0),
                ("Service Namespace", "string", ".status.serviceNamespace", 0),
            ],
        ),
        (
            "BGPSessionStatus",
            vec![
                ("Node", "string", ".status.node", 0),
                ("Peer", "string", ".status.peer", 0),
                ("BGP", "string", ".status.bgpStatus", 0),
                ("BFD", "string", ".status.bfdStatus", 0),
                age,
            ],
        ),
        (
            "NodeBGPStatus",
            vec![
                ("Node", "string", ".status.node", 0),
                ("Peers", "string", ".status.peers", 0),
                ("Local Services", "integer", ".status.localServices", 0),
                ("Withdrawn", "integer", ".status.withdrawnServices", 0),
                ("Withheld", "string", ".status.withheld", 0),
                age,
            ],
        ),
    ];
    for (kind, cols) in want {
        let c = by_kind(kind);
        for v in &c.spec.versions {
            let have: Vec<(&str, &str, &str, i32)> = v
                .additional_printer_columns
                .iter()
                .flatten()
                .map(|p| {
                    (
                        p.name.as_str(),
                        p.type_.as_str(),
                        p.json_path.as_str(),
                        p.priority.unwrap_or(0),
                    )
                })
                .collect();
            assert_eq!(have, cols, "{kind} {}", v.name);
        }
    }
}

// ---------------------------------------------------------------------------
// Drift from MetalLB's CRDs that a user hits at `kubectl apply`

/// Every served `(apiVersion, kind, schema)`.
fn every_schema() -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for c in crd::all() {
        for v in &c.spec.versions {
            out.push((
                format!("metallb.io/{}", v.name),
                c.spec.names.kind.clone(),
                schema(&c.spec.names.kind, &v.name),
            ));
        }
    }
    out
}

#[test]
fn spec_is_optional_except_on_ipaddresspool() {
    // MetalLB's documentation applies an L2Advertisement without spec.
    for (av, kind, s) in every_schema() {
        let optional = crd::OPTIONAL_SPEC_KINDS.contains(&kind.as_str());
        if s["properties"].get("spec").is_none() {
            continue; // the status kinds
        }
        let errs = crd::check_object(&av, &kind, &json!({ "metadata": { "name": "x" } }));
        if optional {
            assert!(!required(&s).contains(&"spec"), "{av} {kind}");
            assert!(errs.is_empty(), "{av} {kind}: {errs:?}");
        } else {
            assert_eq!(kind, "IPAddressPool");
            assert_eq!(errs, ["spec: Required value"], "{av} {kind}");
        }
    }
    for kind in crd::OPTIONAL_SPEC_KINDS {
        assert!(
            every_schema().iter().any(|(_, k, _)| k == kind),
            "{kind} has no CRD"
        );
    }
}

#[test]
fn objects_without_spec_decode_to_the_default_spec() {
    use config::api::{v1beta1, v1beta2};
    fn obj(av: &str, kind: &str, spec: Option<Value>) -> Value {
        let mut o = json!({ "apiVersion": av, "kind": kind, "metadata": { "name": "example", "namespace": "metallb-system" } });
        if let Some(s) = spec {
            o["spec"] = s;
        }
        o
    }
    for spec in [None, Some(Value::Null)] {
        let l2: v1beta1::L2Advertisement =
            serde_json::from_value(obj("metallb.io/v1beta1", "L2Advertisement", spec.clone()))
                .unwrap();
        assert_eq!(l2.spec, v1beta1::L2AdvertisementSpec::default());
        assert_eq!(l2.metadata.name.as_deref(), Some("example"));
        let bgp: v1beta1::BGPAdvertisement =
            serde_json::from_value(obj("metallb.io/v1beta1", "BGPAdvertisement", spec.clone()))
                .unwrap();
        assert_eq!(bgp.spec, v1beta1::BGPAdvertisementSpec::default());
        let bfd: v1beta1::BFDProfile =
            serde_json::from_value(obj("metallb.io/v1beta1", "BFDProfile", spec.clone())).unwrap();
        assert_eq!(bfd.spec, v1beta1::BFDProfileSpec::default());
        let c: v1beta1::Community =
            serde_json::from_value(obj("metallb.io/v1beta1", "Community", spec.clone())).unwrap();
        assert_eq!(c.spec, v1beta1::CommunitySpec::default());
        let p1: v1beta1::BGPPeer =
            serde_json::from_value(obj("metallb.io/v1beta1", "BGPPeer", spec.clone())).unwrap();
        assert_eq!(p1.spec, v1beta1::BGPPeerSpec::default());
        let p2: v1beta2::BGPPeer =
            serde_json::from_value(obj("metallb.io/v1beta2", "BGPPeer", spec.clone())).unwrap();
        assert_eq!(p2.spec, v1beta2::BGPPeerSpec::default());
    }
    // A spec that is there still decodes field by field, and serialises back
    // as before (the serde code is the derived one).
    let l2: v1beta1::L2Advertisement = serde_json::from_value(obj(
        "metallb.io/v1beta1",
        "L2Advertisement",
        Some(json!({ "ipAddressPools": ["first-pool"], "interfaces": ["eth0"] })),
    ))
    .unwrap();
    assert_eq!(l2.spec.ip_address_pools, ["first-pool"]);
    assert_eq!(
        serde_json::to_value(&l2.spec).unwrap(),
        json!({ "ipAddressPools": ["first-pool"], "interfaces": ["eth0"] })
    );
    // Wrong types are still errors, not silently a default.
    let err = serde_json::from_value::<v1beta1::L2Advertisement>(obj(
        "metallb.io/v1beta1",
        "L2Advertisement",
        Some(json!({ "interfaces": "eth0" })),
    ))
    .unwrap_err();
    assert!(err.to_string().contains("invalid type"), "{err}");
    // IPAddressPool keeps its required spec.
    assert!(
        serde_json::from_value::<v1beta1::IPAddressPool>(obj(
            "metallb.io/v1beta1",
            "IPAddressPool",
            None
        ))
        .is_err()
    );
}

#[test]
fn nulls_are_pruned_and_defaulted_as_metallb() {
    // MetalLB's CRDs declare no `nullable`: the API server drops a `null`
    // and applies the default (`autoAssign: null` is stored as `true`).
    fn walk(n: &Value, path: &str, errs: &mut Vec<String>) {
        match n {
            Value::Object(m) => {
                if m.contains_key("nullable") {
                    errs.push(path.to_owned());
                }
                for (k, v) in m {
                    if k != "default" && k != "enum" {
                        walk(v, &format!("{path}.{k}"), errs);
                    }
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, &format!("{path}[{i}]"), errs);
                }
            }
            _ => {}
        }
    }
    let mut errs = Vec::new();
    for (av, kind, s) in every_schema() {
        walk(&s, &format!("{av} {kind}"), &mut errs);
    }
    assert!(errs.is_empty(), "nullable in: {errs:#?}");
    assert!(
        crd::check_object(
            "metallb.io/v1beta1",
            "IPAddressPool",
            &json!({ "spec": { "addresses": ["198.51.100.0/24"], "autoAssign": null, "serviceAllocation": null } })
        )
        .is_empty()
    );
}

#[test]
fn label_selectors_are_atomic_as_metallb() {
    // (kind, version, path of a metav1.LabelSelector)
    let selectors = [
        (
            "IPAddressPool",
            "v1beta1",
            "spec.serviceAllocation.namespaceSelectors.[]",
        ),
        (
            "IPAddressPool",
            "v1beta1",
            "spec.serviceAllocation.serviceSelectors.[]",
        ),
        (
            "L2Advertisement",
            "v1beta1",
            "spec.ipAddressPoolSelectors.[]",
        ),
        ("L2Advertisement", "v1beta1", "spec.nodeSelectors.[]"),
        ("L2Advertisement", "v1beta1", "spec.serviceSelectors.[]"),
        (
            "L2Advertisement",
            "v1beta1",
            "spec.preferredNodeSelectors.[].preference",
        ),
        (
            "BGPAdvertisement",
            "v1beta1",
            "spec.ipAddressPoolSelectors.[]",
        ),
        ("BGPAdvertisement", "v1beta1", "spec.nodeSelectors.[]"),
        ("BGPAdvertisement", "v1beta1", "spec.serviceSelectors.[]"),
        ("BGPPeer", "v1beta2", "spec.nodeSelectors.[]"),
    ];
    for (kind, version, path) in selectors {
        let s = schema(kind, version);
        let sel = node(&s, path);
        assert_eq!(sel["x-kubernetes-map-type"], "atomic", "{kind} {path}");
        assert_eq!(
            node(sel, "matchExpressions")["x-kubernetes-list-type"],
            "atomic",
            "{kind} {path}"
        );
        assert_eq!(
            node(sel, "matchExpressions.[].values")["x-kubernetes-list-type"],
            "atomic",
            "{kind} {path}"
        );
    }
    // Every selector-shaped schema is in the list above (a new field must be
    // added there), but v1beta1 BGPPeer's legacy NodeSelector, which MetalLB
    // leaves unmarked.
    fn count(n: &Value) -> usize {
        match n {
            Value::Object(m) => {
                let here = usize::from(m.get("x-kubernetes-map-type") == Some(&json!("atomic")));
                here + m.values().map(count).sum::<usize>()
            }
            Value::Array(items) => items.iter().map(count).sum(),
            _ => 0,
        }
    }
    let total: usize = every_schema().iter().map(|(_, _, s)| count(s)).sum();
    // + passwordSecret
    assert_eq!(total, selectors.len() + 1);
    let v1beta1_peer = schema("BGPPeer", "v1beta1");
    let legacy = node(&v1beta1_peer, "spec.nodeSelectors.[]");
    assert!(legacy.get("x-kubernetes-map-type").is_none());
    assert_eq!(
        node(&schema("BGPPeer", "v1beta2"), "spec.passwordSecret")["x-kubernetes-map-type"],
        "atomic"
    );
}

#[test]
fn integer_formats_are_metallb_s() {
    let s = schema("BGPAdvertisement", "v1beta1");
    assert_eq!(node(&s, "spec.localPref")["format"], "int32");
    // The API server refuses to validate an object against bounds outside
    // the declared format ("Maximum boundary value must be of type integer
    // with format int32"): no int32 field has one.
    fn walk(n: &Value, path: &str, errs: &mut Vec<String>) {
        match n {
            Value::Object(m) => {
                if m.get("format") == Some(&json!("int32")) {
                    for b in ["minimum", "maximum"] {
                        if let Some(v) = m.get(b).and_then(Value::as_f64)
                            && !(f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(&v)
                        {
                            errs.push(format!("{path}: {b} {v}"));
                        }
                    }
                }
                for (k, v) in m {
                    if k != "default" && k != "enum" {
                        walk(v, &format!("{path}.{k}"), errs);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, path, errs)),
            _ => {}
        }
    }
    let mut errs = Vec::new();
    for (av, kind, s) in every_schema() {
        walk(&s, &format!("{av} {kind}"), &mut errs);
    }
    assert!(errs.is_empty(), "{errs:?}");
    for v in ["v1beta1", "v1beta2"] {
        assert!(
            node(&schema("BGPPeer", v), "spec.peerPort")
                .get("format")
                .is_none()
        );
    }
    assert!(
        node(
            &schema("IPAddressPool", "v1beta1"),
            "spec.serviceAllocation.priority"
        )
        .get("format")
        .is_none()
    );
}

/// MetalLB's documented configuration examples (config/tests/fixtures/metallb-docs)
/// pass the CRD schemas.
#[test]
fn metallb_documentation_examples_pass_the_schemas() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/metallb-docs");
    let mut files = 0;
    let mut spec_less = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_saphyr::from_multiple::<Value>(&text).unwrap() {
            if doc.is_null() {
                continue;
            }
            let av = doc["apiVersion"].as_str().unwrap();
            let kind = doc["kind"].as_str().unwrap();
            spec_less += usize::from(doc.get("spec").is_none());
            let errs = crd::check_object(av, kind, &doc);
            assert!(errs.is_empty(), "{}: {kind}: {errs:?}", path.display());
        }
    }
    assert!(files >= 8, "{files} fixture files");
    assert!(spec_less >= 4, "{spec_less} objects without spec");
}
