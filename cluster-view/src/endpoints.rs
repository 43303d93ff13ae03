//! EndpointSlices as MetalLB reads them: indexed by the Service named in
//! their `kubernetes.io/service-name` label (every slice with the label
//! counts, hand-written ones too; slices without it are skipped), and an
//! endpoint can serve when `ready` is unset or true, or `serving` is true
//! (`terminating` is never read: a terminating pod that still serves keeps
//! the announcement, as MetalLB does since graceful termination).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};

/// The label naming the Service a slice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

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
pub fn service_key(slice: &EndpointSlice) -> Option<String> {
    let name = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    if name.is_empty() {
        return None;
    }
    let ns = slice.metadata.namespace.as_deref().unwrap_or_default();
    Some(format!("{ns}/{name}"))
}

/// Whether an endpoint can serve traffic: `ready` unset or true, or
/// `serving` true (whatever `terminating` says).
pub fn can_serve(endpoint: &Endpoint) -> bool {
    match &endpoint.conditions {
        None => true,
        Some(c) => c.ready != Some(false) || c.serving == Some(true),
    }
}

fn counts(endpoint: &Endpoint, addresses: Addresses) -> bool {
    can_serve(endpoint) && (addresses == Addresses::NotRequired || !endpoint.addresses.is_empty())
}

fn endpoints<S: Deref<Target = EndpointSlice>>(slices: &[S]) -> impl Iterator<Item = &Endpoint> {
    slices.iter().flat_map(|s| s.endpoints.iter().flatten())
}

/// Whether any endpoint of `slices` (wherever it runs, with or without a
/// node name) can serve.
pub fn has_serving_endpoint<S: Deref<Target = EndpointSlice>>(
    slices: &[S],
    addresses: Addresses,
) -> bool {
    endpoints(slices).any(|e| counts(e, addresses))
}

/// The nodes hosting an endpoint of `slices` that can serve: the candidates
/// of `externalTrafficPolicy: Local`. Endpoints without `nodeName` never
/// count here.
pub fn nodes_with_serving_endpoints<S: Deref<Target = EndpointSlice>>(
    slices: &[S],
    addresses: Addresses,
) -> BTreeSet<String> {
    endpoints(slices)
        .filter(|e| counts(e, addresses))
        .filter_map(|e| e.node_name.clone())
        .collect()
}

/// Whether `node` hosts an endpoint of `slices` that can serve (the BGP
/// check for `externalTrafficPolicy: Local`, with [`Addresses::Required`]).
pub fn has_serving_endpoint_on<S: Deref<Target = EndpointSlice>>(
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

type Map = HashMap<String, BTreeMap<String, Arc<EndpointSlice>>>;

fn slice_name(slice: &EndpointSlice) -> String {
    slice.metadata.name.clone().unwrap_or_default()
}

fn remove_from(map: &mut Map, key: &str, name: &str) {
    if let Some(slices) = map.get_mut(key) {
        slices.remove(name);
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
    pub fn apply(&self, old: Option<&EndpointSlice>, slice: Arc<EndpointSlice>) {
        let name = slice_name(&slice);
        let mut map = self.write();
        if let Some(old_key) = old.and_then(service_key)
            && service_key(&slice).as_deref() != Some(&old_key)
        {
            remove_from(&mut map, &old_key, &name);
        }
        if let Some(key) = service_key(&slice) {
            map.entry(key).or_default().insert(name, slice);
        }
    }

    /// Forgets `slice` (deleted).
    pub fn remove(&self, slice: &EndpointSlice) {
        if let Some(key) = service_key(slice) {
            remove_from(&mut self.write(), &key, &slice_name(slice));
        }
    }

    /// Replaces the whole index (after a list).
    pub fn replace_all(&self, slices: impl IntoIterator<Item = Arc<EndpointSlice>>) {
        let mut map = Map::new();
        for s in slices {
            if let Some(key) = service_key(&s) {
                map.entry(key).or_default().insert(slice_name(&s), s);
            }
        }
        *self.write() = map;
    }

    /// The slices of the Service `key` (`namespace/name`), by slice name.
    pub fn slices(&self, key: &str) -> Vec<Arc<EndpointSlice>> {
        self.read()
            .get(key)
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default()
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

    fn slice(
        ns: &str,
        name: &str,
        service: Option<&str>,
        endpoints: Vec<Endpoint>,
    ) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels: service.map(|s| [(SERVICE_NAME_LABEL.to_string(), s.to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(endpoints),
            ports: None,
        }
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
                can_serve(&ep(Some("n1"), 1, ready, serving, terminating)),
                want,
                "ready={ready:?} serving={serving:?} terminating={terminating:?}"
            );
        }
        let no_conditions = Endpoint {
            addresses: vec!["10.0.0.1".into()],
            conditions: None,
            ..Default::default()
        };
        assert!(can_serve(&no_conditions));
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
        let bare: Vec<&EndpointSlice> = bare.iter().collect();
        assert!(!has_serving_endpoint(&bare, Addresses::Required));
        assert!(has_serving_endpoint(&bare, Addresses::NotRequired));
        // Nothing serving at all.
        let down = [slice(
            "ns",
            "d",
            Some("x"),
            vec![ep(Some("n1"), 1, Some(false), Some(false), None)],
        )];
        let down: Vec<&EndpointSlice> = down.iter().collect();
        assert!(!has_serving_endpoint(&down, Addresses::NotRequired));
        assert!(nodes_with_serving_endpoints(&down, Addresses::NotRequired).is_empty());
        let none: [&EndpointSlice; 0] = [];
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

        idx.replace_all([a, b]);
        assert_eq!(names("ns/web"), ["web-a", "web-b"]);
        assert!(names("ns/api").is_empty());
        assert_eq!(idx.services(), 1);
    }
}
