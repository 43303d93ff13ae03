//! Typical MetalLB configurations, written as users write them, decode into
//! the typed objects and encode back to the same JSON: no field added
//! (no `null`s, no defaults), none lost. Each one is also a valid
//! configuration.

mod common;

use common::{accept, docs, typed};
use config::api::{v1beta1, v1beta2};
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use serde_json::Value;

/// Decodes `doc` as `T` and encodes it again.
fn reencode<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> Value {
    let obj: T = typed(doc);
    serde_json::to_value(&obj).expect("objects serialise")
}

/// Every document of `yaml` survives decoding into its type and encoding
/// back, unchanged.
fn assert_roundtrip(yaml: &str) {
    let docs = docs(yaml);
    assert!(!docs.is_empty());
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap();
        let version = doc["apiVersion"].as_str().unwrap();
        let back = match (version, kind) {
            ("metallb.io/v1beta1", "IPAddressPool") => reencode::<v1beta1::IPAddressPool>(doc),
            ("metallb.io/v1beta1", "L2Advertisement") => reencode::<v1beta1::L2Advertisement>(doc),
            ("metallb.io/v1beta1", "BGPAdvertisement") => {
                reencode::<v1beta1::BGPAdvertisement>(doc)
            }
            ("metallb.io/v1beta1", "BFDProfile") => reencode::<v1beta1::BFDProfile>(doc),
            ("metallb.io/v1beta1", "Community") => reencode::<v1beta1::Community>(doc),
            ("metallb.io/v1beta1", "BGPPeer") => reencode::<v1beta1::BGPPeer>(doc),
            ("metallb.io/v1beta2", "BGPPeer") => reencode::<v1beta2::BGPPeer>(doc),
            ("v1", "Secret") => reencode::<Secret>(doc),
            ("v1", "Node") => reencode::<Node>(doc),
            ("v1", "Namespace") => reencode::<Namespace>(doc),
            other => panic!("unexpected object {other:?}"),
        };
        assert_eq!(
            &back,
            doc,
            "{kind} changed on the way through:\n{}\nbecame\n{}",
            serde_json::to_string_pretty(doc).unwrap(),
            serde_json::to_string_pretty(&back).unwrap()
        );
    }
}

#[test]
fn l2_only() {
    let yaml = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: first-pool
  namespace: metallb-system
spec:
  addresses:
  - 192.0.2.10-192.0.2.99
  - 198.51.100.0/26
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  name: example
  namespace: metallb-system
spec:
  ipAddressPools:
  - first-pool
  interfaces:
  - eth0
  - eth1
  nodeSelectors:
  - matchLabels:
      kubernetes.io/hostname: node-a
  - matchExpressions:
    - key: node-role.kubernetes.io/edge
      operator: Exists
  preferredNodeSelectors:
  - weight: 50
    preference:
      matchLabels:
        topology.kubernetes.io/zone: zone-a
"#;
    assert_roundtrip(yaml);
    let cfg = accept(yaml);
    assert_eq!(cfg.l2_advertisements[0].pools, ["first-pool"]);
    assert_eq!(cfg.l2_advertisements[0].interfaces, ["eth0", "eth1"]);
}

#[test]
fn bgp_with_bfd_and_password_secret() {
    let yaml = r#"
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata:
  name: fast
  namespace: metallb-system
spec:
  receiveInterval: 100
  transmitInterval: 100
  detectMultiplier: 5
  echoInterval: 50
  echoMode: false
  passiveMode: true
  minimumTtl: 250
---
apiVersion: v1
kind: Secret
metadata:
  name: router-auth
  namespace: metallb-system
type: kubernetes.io/basic-auth
stringData:
  password: not-a-real-password
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: tor-a
  namespace: metallb-system
spec:
  myASN: 64512
  peerASN: 64513
  peerAddress: 192.0.2.1
  sourceAddress: 192.0.2.100
  peerPort: 1179
  holdTime: 1m30s
  keepaliveTime: 30s
  connectTime: 5s
  routerID: 192.0.2.100
  ebgpMultiHop: true
  bfdProfile: fast
  enableGracefulRestart: true
  passwordSecret:
    name: router-auth
    namespace: metallb-system
  nodeSelectors:
  - matchLabels:
      rack: r1
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: tor-b
  namespace: metallb-system
spec:
  myASN: 64512
  dynamicASN: internal
  peerAddress: 2001:db8::1
  vrf: red
  dualStackAddressFamily: true
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: bgp-pool
  namespace: metallb-system
  labels:
    announce: bgp
spec:
  addresses:
  - 203.0.113.0/24
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata:
  name: aggregated
  namespace: metallb-system
spec:
  ipAddressPoolSelectors:
  - matchLabels:
      announce: bgp
  aggregationLength: 24
  localPref: 150
  communities:
  - "65535:65282"
  - large:64512:1:2
  peers:
  - tor-a
  nodeSelectors:
  - matchExpressions:
    - key: rack
      operator: In
      values:
      - r1
      - r2
"#;
    assert_roundtrip(yaml);
    let cfg = accept(yaml);
    assert_eq!(cfg.peers.len(), 2);
    assert_eq!(cfg.bgp_advertisements[0].pools, ["bgp-pool"]);
    assert_eq!(cfg.bfd_profiles["fast"].minimum_ttl, 250);
}

#[test]
fn dual_stack_pools() {
    let yaml = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: dual
  namespace: metallb-system
spec:
  addresses:
  - 198.51.100.0/24
  - 2001:db8:1::/64
  autoAssign: false
  avoidBuggyIPs: true
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: v6-range
  namespace: metallb-system
spec:
  addresses:
  - 2001:db8:2::10-2001:db8:2::ff
  autoAssign: true
"#;
    assert_roundtrip(yaml);
    let cfg = accept(yaml);
    assert!(cfg.pools["dual"].has_ipv4() && cfg.pools["dual"].has_ipv6());
    assert!(!cfg.pools["dual"].auto_assign);
    assert!(cfg.pools["dual"].avoid_buggy_ips);
}

#[test]
fn service_allocation() {
    let yaml = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: team-a
  namespace: metallb-system
spec:
  addresses:
  - 198.51.100.0/28
  serviceAllocation:
    priority: 50
    namespaces:
    - team-a
    - team-a-staging
    namespaceSelectors:
    - matchLabels:
        team: a
    serviceSelectors:
    - matchExpressions:
      - key: tier
        operator: NotIn
        values:
        - internal
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: priority-only
  namespace: metallb-system
spec:
  addresses:
  - 198.51.100.16/28
  serviceAllocation:
    priority: 10
---
apiVersion: v1
kind: Namespace
metadata:
  name: web
  labels:
    team: a
"#;
    assert_roundtrip(yaml);
    let cfg = accept(yaml);
    let sa = cfg.pools["team-a"].service_allocation.as_ref().unwrap();
    assert_eq!(sa.priority, 50);
    assert_eq!(
        sa.namespaces.iter().collect::<Vec<_>>(),
        ["team-a", "team-a-staging", "web"]
    );
}

#[test]
fn community_aliases() {
    let yaml = r#"
apiVersion: metallb.io/v1beta1
kind: Community
metadata:
  name: communities
  namespace: metallb-system
spec:
  communities:
  - name: no-advertise
    value: "65535:65282"
  - name: customer
    value: large:64512:100:200
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: pool
  namespace: metallb-system
spec:
  addresses:
  - 192.0.2.0/24
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata:
  name: with-aliases
  namespace: metallb-system
spec:
  communities:
  - no-advertise
  - customer
  - "64512:7"
"#;
    assert_roundtrip(yaml);
    let cfg = accept(yaml);
    assert_eq!(
        cfg.bgp_advertisements[0]
            .communities
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>(),
        ["64512:7", "65535:65282", "large:64512:100:200"]
    );
}

#[test]
fn v1beta1_bgp_peer() {
    let yaml = r#"
apiVersion: metallb.io/v1beta1
kind: BGPPeer
metadata:
  name: legacy
  namespace: metallb-system
spec:
  myASN: 64512
  peerASN: 64600
  peerAddress: 198.51.100.1
  sourceAddress: 198.51.100.100
  peerPort: 180
  holdTime: 9s
  routerID: 198.51.100.100
  password: not-a-real-password
  ebgpMultiHop: true
  nodeSelectors:
  - matchLabels:
      rack: r1
    matchExpressions:
    - key: kubernetes.io/hostname
      operator: In
      values:
      - node-a
      - node-b
"#;
    assert_roundtrip(yaml);
    let cfg = accept(yaml);
    let peer = &cfg.peers[0];
    assert_eq!(peer.port, 180);
    assert_eq!(peer.hold_time, std::time::Duration::from_secs(9));
    assert_eq!(peer.keepalive_time, std::time::Duration::from_secs(3));
    assert_eq!(
        peer.node_selectors[0].to_string(),
        "kubernetes.io/hostname in (node-a,node-b),rack=r1"
    );
}
