//! EndpointSlices as MetalLB reads them: indexed by the Service named in
//! their `kubernetes.io/service-name` label (every slice with the label
//! counts, hand-written ones too; slices without it are skipped), and an
//! endpoint can serve when `ready` is unset or true, or `serving` is true
//! (`terminating` is never read: a terminating pod that still serves keeps
//! the announcement, as MetalLB does since graceful termination).
//!
//! The caches hold [`LeanSlice`]s, not `EndpointSlice`s: what is read of a
//! slice, decoded straight from the API's JSON (issue 25: 30,000 trimmed
//! `EndpointSlice`s of 5 endpoints held 109 MB, 3.6 KB each, most of it the
//! inline size of fields never read).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;
use std::sync::{Arc, RwLock};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};

/// The label naming the Service a slice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// An EndpointSlice as the daemons read it: its name, namespace and
/// `resourceVersion` (the cache's key and the watch's position), the
/// Service it belongs to, and per endpoint whether it has an address, its
/// `ready` and `serving` conditions and its node. Nothing else of the object
/// is decoded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeanSlice {
    /// `name`, `namespace` and `resourceVersion` alone.
    pub metadata: ObjectMeta,
    /// The value of the [`SERVICE_NAME_LABEL`] label, when set and not empty.
    pub service: Option<Box<str>>,
    /// The endpoints, in the slice's order.
    pub endpoints: Box<[LeanEndpoint]>,
}

/// One endpoint of a [`LeanSlice`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeanEndpoint {
    /// `nodeName`.
    pub node_name: Option<Box<str>>,
    /// Whether `addresses` has at least one entry.
    pub has_address: bool,
    /// `conditions.ready` (unset: `None`, also when `conditions` is unset).
    pub ready: Option<bool>,
    /// `conditions.serving`.
    pub serving: Option<bool>,
}

fn lean_meta(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        resource_version: meta.resource_version.clone(),
        ..ObjectMeta::default()
    }
}

fn service_label(labels: Option<&BTreeMap<String, String>>) -> Option<Box<str>> {
    labels?
        .get(SERVICE_NAME_LABEL)
        .filter(|s| !s.is_empty())
        .map(|s| s.as_str().into())
}

impl From<&Endpoint> for LeanEndpoint {
    fn from(e: &Endpoint) -> Self {
        LeanEndpoint {
            node_name: e.node_name.as_deref().map(Into::into),
            has_address: !e.addresses.is_empty(),
            ready: e.conditions.as_ref().and_then(|c| c.ready),
            serving: e.conditions.as_ref().and_then(|c| c.serving),
        }
    }
}

impl From<&EndpointSlice> for LeanSlice {
    fn from(slice: &EndpointSlice) -> Self {
        LeanSlice {
            metadata: lean_meta(&slice.metadata),
            service: service_label(slice.metadata.labels.as_ref()),
            endpoints: slice.endpoints.iter().flatten().map(Into::into).collect(),
        }
    }
}

impl From<EndpointSlice> for LeanSlice {
    fn from(slice: EndpointSlice) -> Self {
        LeanSlice::from(&slice)
    }
}

impl<'de> Deserialize<'de> for LeanSlice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The fields read; serde skips the others without keeping them.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            #[serde(default)]
            name: Option<String>,
            #[serde(default)]
            namespace: Option<String>,
            #[serde(default)]
            resource_version: Option<String>,
            #[serde(default)]
            labels: Option<BTreeMap<String, String>>,
        }
        #[derive(Deserialize)]
        struct Conditions {
            #[serde(default)]
            ready: Option<bool>,
            #[serde(default)]
            serving: Option<bool>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct WireEndpoint {
            #[serde(default)]
            addresses: Vec<IgnoredAny>,
            #[serde(default)]
            conditions: Option<Conditions>,
            #[serde(default)]
            node_name: Option<String>,
        }
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Option<Meta>,
            #[serde(default)]
            endpoints: Option<Vec<WireEndpoint>>,
        }
        let w = Wire::deserialize(d)?;
        let meta = w.metadata.unwrap_or(Meta {
            name: None,
            namespace: None,
            resource_version: None,
            labels: None,
        });
        Ok(LeanSlice {
            service: service_label(meta.labels.as_ref()),
            metadata: ObjectMeta {
                name: meta.name,
                namespace: meta.namespace,
                resource_version: meta.resource_version,
                ..ObjectMeta::default()
            },
            endpoints: w
                .endpoints
                .into_iter()
                .flatten()
                .map(|e| LeanEndpoint {
                    node_name: e.node_name.map(String::into_boxed_str),
                    has_address: !e.addresses.is_empty(),
                    ready: e.conditions.as_ref().and_then(|c| c.ready),
                    serving: e.conditions.as_ref().and_then(|c| c.serving),
                })
                .collect(),
        })
    }
}

impl kube::Resource for LeanSlice {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "EndpointSlice".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        "discovery.k8s.io".into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        "discovery.k8s.io/v1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "endpointslices".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Whether the endpoints counted must have addresses: MetalLB's BGP mode
/// requires at least one, its layer 2 mode does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addresses {
    /// Only endpoints with at least one address count (BGP).
    Required,
    /// Endpoints count with or without addresses (layer 2).
    NotRequired,
}

/// The key (`namespace/name`, as the controller keys Services) of the
/// Service `slice` belongs to, or `None` when it has no (or an empty)
/// `kubernetes.io/service-name` label.
pub fn service_key(slice: &LeanSlice) -> Option<String> {
    let name = slice.service.as_deref()?;
    let ns = slice.metadata.namespace.as_deref().unwrap_or_default();
    Some(format!("{ns}/{name}"))
}

/// Whether an endpoint can serve traffic: `ready` unset or true, or
/// `serving` true (whatever `terminating` says).
pub fn can_serve(endpoint: &LeanEndpoint) -> bool {
    endpoint.ready != Some(false) || endpoint.serving == Some(true)
}

fn counts(endpoint: &LeanEndpoint, addresses: Addresses) -> bool {
    can_serve(endpoint) && (addresses == Addresses::NotRequired || endpoint.has_address)
}

fn endpoints<S: Deref<Target = LeanSlice>>(slices: &[S]) -> impl Iterator<Item = &LeanEndpoint> {
    slices.iter().flat_map(|s| s.endpoints.iter())
}

/// Whether any endpoint of `slices` (wherever it runs, with or without a
/// node name) can serve.
pub fn has_serving_endpoint<S: Deref<Target = LeanSlice>>(
    slices: &[S],
    addresses: Addresses,
) -> bool {
    endpoints(slices).any(|e| counts(e, addresses))
}

/// The nodes hosting an endpoint of `slices` that can serve: the candidates
/// of `externalTrafficPolicy: Local`. Endpoints without `nodeName` never
/// count here.
pub fn nodes_with_serving_endpoints<S: Deref<Target = LeanSlice>>(
    slices: &[S],
    addresses: Addresses,
) -> BTreeSet<String> {
    endpoints(slices)
        .filter(|e| counts(e, addresses))
        .filter_map(|e| e.node_name.as_deref().map(String::from))
        .collect()
}

/// Whether `node` hosts an endpoint of `slices` that can serve (the BGP
/// check for `externalTrafficPolicy: Local`, with [`Addresses::Required`]).
pub fn has_serving_endpoint_on<S: Deref<Target = LeanSlice>>(
    slices: &[S],
    node: &str,
    addresses: Addresses,
) -> bool {
    endpoints(slices).any(|e| e.node_name.as_deref() == Some(node) && counts(e, addresses))
}

/// EndpointSlices by the Service they belong to, holding the very objects
/// of the watch cache (`Arc`s, no copies). Clones share one index.
///
/// Costs: a lookup is one hash probe plus the service's slices; an update
/// is O(log slices of that service); [`SliceIndex::replace_all`] (after a
/// re-list) is O(all slices).
#[derive(Clone, Debug, Default)]
pub struct SliceIndex {
    map: Arc<RwLock<Map>>,
}

/// Per Service key, its slices sorted by name (a Service has a few: a sorted
/// `Vec` holds them in a fraction of a `BTreeMap`'s nodes).
type Map = HashMap<String, Vec<Arc<LeanSlice>>>;

fn slice_name(slice: &LeanSlice) -> &str {
    slice.metadata.name.as_deref().unwrap_or_default()
}

/// Inserts `slice` into the sorted `slices`, replacing the one of its name.
fn insert_sorted(slices: &mut Vec<Arc<LeanSlice>>, slice: Arc<LeanSlice>) {
    match slices.binary_search_by(|s| slice_name(s).cmp(slice_name(&slice))) {
        Ok(i) => slices[i] = slice,
        Err(i) => slices.insert(i, slice),
    }
}

fn remove_from(map: &mut Map, key: &str, name: &str) {
    if let Some(slices) = map.get_mut(key) {
        if let Ok(i) = slices.binary_search_by(|s| slice_name(s).cmp(name)) {
            slices.remove(i);
        }
        if slices.is_empty() {
            map.remove(key);
        }
    }
}

impl SliceIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Map> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Map> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `slice` (added or modified); `old` is its previous version,
    /// when known, so a slice whose label moved leaves its old Service.
    pub fn apply(&self, old: Option<&LeanSlice>, slice: Arc<LeanSlice>) {
        let mut map = self.write();
        if let Some(old_key) = old.and_then(service_key)
            && service_key(&slice).as_deref() != Some(&old_key)
        {
            remove_from(&mut map, &old_key, slice_name(&slice));
        }
        if let Some(key) = service_key(&slice) {
            insert_sorted(map.entry(key).or_default(), slice);
        }
    }

    /// Forgets `slice` (deleted).
    pub fn remove(&self, slice: &LeanSlice) {
        if let Some(key) = service_key(slice) {
            remove_from(&mut self.write(), &key, slice_name(slice));
        }
    }

    /// Replaces the whole index (after a list).
    pub fn replace_all(&self, slices: impl IntoIterator<Item = Arc<LeanSlice>>) {
        let mut map = Map::new();
        for s in slices {
            if let Some(key) = service_key(&s) {
                insert_sorted(map.entry(key).or_default(), s);
            }
        }
        map.values_mut().for_each(Vec::shrink_to_fit);
        *self.write() = map;
    }

    /// The slices of the Service `key` (`namespace/name`), by slice name.
    pub fn slices(&self, key: &str) -> Vec<Arc<LeanSlice>> {
        self.read().get(key).cloned().unwrap_or_default()
    }

    /// The number of Services with at least one slice.
    pub fn services(&self) -> usize {
        self.read().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::EndpointConditions;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ep(
        node: Option<&str>,
        addresses: usize,
        ready: Option<bool>,
        serving: Option<bool>,
        terminating: Option<bool>,
    ) -> Endpoint {
        Endpoint {
            addresses: (0..addresses).map(|i| format!("10.0.0.{i}")).collect(),
            node_name: node.map(Into::into),
            conditions: Some(EndpointConditions {
                ready,
                serving,
                terminating,
            }),
            ..Default::default()
        }
    }

    fn slice(ns: &str, name: &str, service: Option<&str>, endpoints: Vec<Endpoint>) -> LeanSlice {
        LeanSlice::from(EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels: service.map(|s| [(SERVICE_NAME_LABEL.to_string(), s.to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(endpoints),
            ports: None,
        })
    }

    #[test]
    fn decoded_from_json_as_converted_and_nothing_else_kept() {
        let json = serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "web-abcde", "namespace": "demo", "resourceVersion": "45",
                "uid": "0b4e5d1c-0000-4000-8000-000000000009",
                "labels": {"kubernetes.io/service-name": "web", "app": "web"},
                "annotations": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Update"}],
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["192.0.2.1", "192.0.2.2"], "nodeName": "n1",
                 "conditions": {"ready": false, "serving": true, "terminating": true},
                 "targetRef": {"kind": "Pod", "name": "web-0"}, "zone": "a",
                 "hints": {"forZones": [{"name": "a"}]}},
                {"addresses": [], "conditions": {}},
                {"addresses": ["192.0.2.3"]},
            ],
            "ports": [{"port": 80}],
        });
        let full: EndpointSlice = serde_json::from_value(json.clone()).unwrap();
        let lean: LeanSlice = serde_json::from_value(json).unwrap();
        assert_eq!(lean, LeanSlice::from(&full));
        assert_eq!(
            lean.metadata,
            ObjectMeta {
                name: Some("web-abcde".into()),
                namespace: Some("demo".into()),
                resource_version: Some("45".into()),
                ..Default::default()
            }
        );
        assert_eq!(lean.service.as_deref(), Some("web"));
        assert_eq!(
            *lean.endpoints,
            [
                LeanEndpoint {
                    node_name: Some("n1".into()),
                    has_address: true,
                    ready: Some(false),
                    serving: Some(true),
                },
                LeanEndpoint::default(),
                LeanEndpoint {
                    has_address: true,
                    ..Default::default()
                },
            ]
        );
        // No endpoints at all, an empty label, no metadata: still a slice.
        let bare: LeanSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x", "labels": {"kubernetes.io/service-name": ""}},
            "endpoints": null,
        }))
        .unwrap();
        assert_eq!(bare.service, None);
        assert!(bare.endpoints.is_empty());
        let _: LeanSlice = serde_json::from_value(serde_json::json!({})).unwrap();
        // Wrong types are errors, not panics.
        assert!(
            serde_json::from_value::<LeanSlice>(
                serde_json::json!({"endpoints": [{"addresses": 1}]})
            )
            .is_err()
        );
    }

    #[test]
    fn can_serve_table() {
        let t = Some(true);
        let f = Some(false);
        // (ready, serving, terminating) -> can serve
        let table = [
            ((None, None, None), true),
            ((t, None, None), true),
            ((f, None, None), false),
            ((f, f, None), false),
            ((f, t, None), true),
            ((f, t, t), true),
            ((f, f, t), false),
            ((t, f, t), true),
            ((None, f, t), true),
        ];
        for ((ready, serving, terminating), want) in table {
            assert_eq!(
                can_serve(&(&ep(Some("n1"), 1, ready, serving, terminating)).into()),
                want,
                "ready={ready:?} serving={serving:?} terminating={terminating:?}"
            );
        }
        let no_conditions = Endpoint {
            addresses: vec!["10.0.0.1".into()],
            conditions: None,
            ..Default::default()
        };
        assert!(can_serve(&(&no_conditions).into()));
    }

    #[test]
    fn service_keys_come_from_the_label_and_the_namespace() {
        assert_eq!(
            service_key(&slice("ns", "web-abc", Some("web"), vec![])).as_deref(),
            Some("ns/web")
        );
        assert_eq!(service_key(&slice("ns", "orphan", None, vec![])), None);
        assert_eq!(service_key(&slice("ns", "empty", Some(""), vec![])), None);
    }

    #[test]
    fn serving_endpoints_per_protocol_and_node() {
        let slices = vec![
            Arc::new(slice(
                "ns",
                "a",
                Some("web"),
                vec![
                    ep(Some("n1"), 1, Some(false), None, None), // not ready
                    ep(Some("n2"), 0, Some(true), None, None),  // no address
                    ep(Some("n3"), 1, Some(false), Some(true), Some(true)), // terminating, serving
                ],
            )),
            Arc::new(slice(
                "ns",
                "b",
                Some("web"),
                vec![ep(None, 1, None, None, None)], // no node name
            )),
        ];
        assert!(has_serving_endpoint(&slices, Addresses::Required));
        assert_eq!(
            nodes_with_serving_endpoints(&slices, Addresses::Required),
            BTreeSet::from(["n3".to_string()])
        );
        assert_eq!(
            nodes_with_serving_endpoints(&slices, Addresses::NotRequired),
            BTreeSet::from(["n2".to_string(), "n3".to_string()])
        );
        assert!(!has_serving_endpoint_on(&slices, "n1", Addresses::Required));
        assert!(!has_serving_endpoint_on(&slices, "n2", Addresses::Required));
        assert!(has_serving_endpoint_on(
            &slices,
            "n2",
            Addresses::NotRequired
        ));
        assert!(has_serving_endpoint_on(&slices, "n3", Addresses::Required));

        // Only an address-less endpoint: L2 serves, BGP does not.
        let bare = [slice(
            "ns",
            "c",
            Some("x"),
            vec![ep(Some("n1"), 0, None, None, None)],
        )];
        let bare: Vec<&LeanSlice> = bare.iter().collect();
        assert!(!has_serving_endpoint(&bare, Addresses::Required));
        assert!(has_serving_endpoint(&bare, Addresses::NotRequired));
        // Nothing serving at all.
        let down = [slice(
            "ns",
            "d",
            Some("x"),
            vec![ep(Some("n1"), 1, Some(false), Some(false), None)],
        )];
        let down: Vec<&LeanSlice> = down.iter().collect();
        assert!(!has_serving_endpoint(&down, Addresses::NotRequired));
        assert!(nodes_with_serving_endpoints(&down, Addresses::NotRequired).is_empty());
        let none: [&LeanSlice; 0] = [];
        assert!(!has_serving_endpoint(&none, Addresses::NotRequired));
    }

    #[test]
    fn the_index_follows_adds_moves_deletes_and_relists() {
        let idx = SliceIndex::new();
        let a = Arc::new(slice("ns", "web-a", Some("web"), vec![]));
        let b = Arc::new(slice("ns", "web-b", Some("web"), vec![]));
        let other_ns = Arc::new(slice("other", "web-a", Some("web"), vec![]));
        let orphan = Arc::new(slice("ns", "orphan", None, vec![]));
        idx.apply(None, a.clone());
        idx.apply(None, b.clone());
        idx.apply(None, other_ns.clone());
        idx.apply(None, orphan.clone());
        let names = |key: &str| -> Vec<String> {
            idx.slices(key)
                .iter()
                .map(|s| s.metadata.name.clone().unwrap())
                .collect()
        };
        assert_eq!(names("ns/web"), ["web-a", "web-b"]);
        assert_eq!(names("other/web"), ["web-a"]);
        assert_eq!(idx.services(), 2);
        // The index holds the cache's objects, not copies.
        assert!(Arc::ptr_eq(&idx.slices("ns/web")[0], &a));

        // A modified slice replaces its old version.
        let a2 = Arc::new(slice(
            "ns",
            "web-a",
            Some("web"),
            vec![ep(Some("n1"), 1, None, None, None)],
        ));
        idx.apply(Some(&a), a2.clone());
        assert!(Arc::ptr_eq(&idx.slices("ns/web")[0], &a2));
        // A slice whose label moves leaves its old Service.
        let moved = Arc::new(slice("ns", "web-b", Some("api"), vec![]));
        idx.apply(Some(&b), moved);
        assert_eq!(names("ns/web"), ["web-a"]);
        assert_eq!(names("ns/api"), ["web-b"]);
        // A slice losing its label leaves the index.
        idx.apply(Some(&a2), Arc::new(slice("ns", "web-a", None, vec![])));
        assert!(names("ns/web").is_empty());
        idx.remove(&other_ns);
        assert!(names("other/web").is_empty());
        assert_eq!(idx.services(), 1);

        idx.replace_all([b.clone(), a.clone()]);
        assert_eq!(names("ns/web"), ["web-a", "web-b"]);
        // Kept in name order whatever the order of arrival.
        idx.apply(None, Arc::new(slice("ns", "web-0", Some("web"), vec![])));
        assert_eq!(names("ns/web"), ["web-0", "web-a", "web-b"]);
        idx.replace_all([a, b]);
        assert_eq!(names("ns/web"), ["web-a", "web-b"]);
        assert!(names("ns/api").is_empty());
        assert_eq!(idx.services(), 1);
    }
}
