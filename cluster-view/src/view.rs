//! The bundle: the reflectors a daemon chose, their change signals, the
//! EndpointSlice index, and the configuration inputs built from the caches.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use config::Resources;
use config::api::{v1beta1, v1beta2};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret, Service};
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::changes::{Changes, DEFAULT_KEY_BOUND};
use crate::endpoints::{self, LeanSlice, SliceIndex};
use crate::lean;
use crate::nodes;
use crate::reflector::{Change, Health, Reflector, Stopped};

/// The name of the ConfigMap of raw FRR configuration that MetalLB reads
/// (`config::parse` warns that it is ignored).
pub const BGP_EXTRAS: &str = "bgpextras";

/// A kind the view can watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `IPAddressPool`s of the MetalLB namespace.
    IPAddressPool,
    /// `BGPPeer`s (v1beta2) of the MetalLB namespace.
    BGPPeer,
    /// `BFDProfile`s of the MetalLB namespace.
    BFDProfile,
    /// `BGPAdvertisement`s of the MetalLB namespace.
    BGPAdvertisement,
    /// `L2Advertisement`s of the MetalLB namespace.
    L2Advertisement,
    /// `Community`s of the MetalLB namespace.
    Community,
    /// Secrets of the MetalLB namespace (BGP passwords).
    Secret,
    /// ConfigMaps of the MetalLB namespace (`bgpextras`).
    ConfigMap,
    /// The cluster's Nodes.
    Node,
    /// The cluster's Namespaces.
    Namespace,
    /// Services, in every namespace.
    Service,
    /// EndpointSlices, in every namespace.
    EndpointSlice,
}

impl Kind {
    /// What the controller watches: the pool configuration and the Services.
    pub const CONTROLLER: &[Kind] = &[
        Kind::IPAddressPool,
        Kind::Community,
        Kind::Namespace,
        Kind::Service,
    ];
    /// What the speaker watches: everything.
    pub const SPEAKER: &[Kind] = &[
        Kind::IPAddressPool,
        Kind::BGPPeer,
        Kind::BFDProfile,
        Kind::BGPAdvertisement,
        Kind::L2Advertisement,
        Kind::Community,
        Kind::Secret,
        Kind::ConfigMap,
        Kind::Node,
        Kind::Namespace,
        Kind::Service,
        Kind::EndpointSlice,
    ];
}

/// Chooses what a [`ClusterView`] watches.
#[derive(Clone)]
pub struct Builder {
    client: Client,
    namespace: String,
    kinds: BTreeSet<Kind>,
    key_bound: usize,
    load_balancers_only: bool,
}

/// The field selector of the Services a speaker reads.
pub const LOAD_BALANCER_SERVICES: &str = "spec.type=LoadBalancer";

impl Builder {
    /// Watches `kind` too.
    pub fn watch(mut self, kind: Kind) -> Self {
        self.kinds.insert(kind);
        self
    }

    /// Watches these kinds too (e.g. [`Kind::CONTROLLER`]).
    pub fn kinds(mut self, kinds: &[Kind]) -> Self {
        self.kinds.extend(kinds.iter().copied());
        self
    }

    /// Watches only `type: LoadBalancer` Services (the field selector
    /// [`LOAD_BALANCER_SERVICES`]), when the API server supports it
    /// (Kubernetes 1.37 does; one that refuses it gets every Service
    /// watched, as without this). A Service whose type changes away from
    /// LoadBalancer leaves the cache as a deletion (the watch says so), and
    /// one that becomes a LoadBalancer enters it. For the speaker, whose
    /// decisions withdraw every other type alike; not for the controller,
    /// which clears the address and annotations of a Service that stops
    /// being a LoadBalancer and so must see it.
    pub fn load_balancer_services_only(mut self) -> Self {
        self.load_balancers_only = true;
        self
    }

    /// The bound of the Service change queue (default
    /// [`DEFAULT_KEY_BOUND`]): past it, pending keys collapse into one
    /// full pass.
    pub fn key_bound(mut self, bound: usize) -> Self {
        self.key_bound = bound;
        self
    }

    /// Starts the watches (on the current Tokio runtime). They stop when
    /// the view is dropped.
    pub fn start(self) -> ClusterView {
        let config_changes = Changes::new(1);
        let service_changes = Changes::new(self.key_bound);
        let slices = SliceIndex::new();
        let has = |k| self.kinds.contains(&k);
        let ns = self.namespace.as_str();
        let c = &self.client;
        let wc = watcher::Config::default;

        // Config kinds: a change of the spec or the labels is a change of the
        // configuration (a write of their status alone, e.g. a pool's counts,
        // is not: it would make a daemon settle for nothing).
        fn config_kind<K>(api: Api<K>, changes: &Changes) -> Reflector<K>
        where
            K: kube::Resource<DynamicType = ()>
                + serde::de::DeserializeOwned
                + Clone
                + std::fmt::Debug
                + Send
                + Sync
                + 'static,
        {
            let changes = changes.clone();
            Reflector::new(api, watcher::Config::default(), move |change, _| {
                if config_object_signal(&change) {
                    changes.all();
                }
            })
        }

        let pools = has(Kind::IPAddressPool)
            .then(|| config_kind(Api::namespaced(c.clone(), ns), &config_changes));
        let peers = has(Kind::BGPPeer)
            .then(|| config_kind(Api::namespaced(c.clone(), ns), &config_changes));
        let bfd_profiles = has(Kind::BFDProfile)
            .then(|| config_kind(Api::namespaced(c.clone(), ns), &config_changes));
        let bgp_advertisements = has(Kind::BGPAdvertisement)
            .then(|| config_kind(Api::namespaced(c.clone(), ns), &config_changes));
        let l2_advertisements = has(Kind::L2Advertisement)
            .then(|| config_kind(Api::namespaced(c.clone(), ns), &config_changes));
        let communities = has(Kind::Community)
            .then(|| config_kind(Api::namespaced(c.clone(), ns), &config_changes));
        let secrets =
            has(Kind::Secret).then(|| config_kind(Api::namespaced(c.clone(), ns), &config_changes));
        let config_maps = has(Kind::ConfigMap).then(|| {
            let changes = config_changes.clone();
            Reflector::with_trim(
                Api::<ConfigMap>::namespaced(c.clone(), ns),
                wc(),
                lean::config_map,
                move |change, _| {
                    if config_map_signal(&change) {
                        changes.all();
                    }
                },
            )
        });
        let node_reflector = has(Kind::Node).then(|| {
            let config = config_changes.clone();
            let services = service_changes.clone();
            Reflector::with_trim(
                Api::<Node>::all(c.clone()),
                wc(),
                lean::node,
                move |change, _| {
                    let (config_changed, availability_changed) = node_signal(&change);
                    if config_changed {
                        config.all();
                    }
                    if availability_changed {
                        services.all();
                    }
                },
            )
        });
        let namespaces = has(Kind::Namespace).then(|| {
            let changes = config_changes.clone();
            Reflector::new(Api::<Namespace>::all(c.clone()), wc(), move |change, _| {
                if namespace_signal(&change) {
                    changes.all();
                }
            })
        });
        let services = has(Kind::Service).then(|| {
            let changes = service_changes.clone();
            let (config, fallback) = if self.load_balancers_only {
                (wc().fields(LOAD_BALANCER_SERVICES), Some(wc()))
            } else {
                (wc(), None)
            };
            Reflector::with_fallback(
                Api::<Service>::all(c.clone()),
                config,
                fallback,
                lean::service,
                move |change, _| match change {
                    Change::Applied { new: s, .. } | Change::Deleted(s) => {
                        changes.key(service_key(s))
                    }
                    Change::Listed => changes.all(),
                },
            )
        });
        let endpoint_slices = has(Kind::EndpointSlice).then(|| {
            let changes = service_changes.clone();
            let index = slices.clone();
            // Decoded as `LeanSlice`s: already what is kept.
            Reflector::with_trim(
                Api::<LeanSlice>::all(c.clone()),
                wc(),
                |_: &mut LeanSlice| {},
                move |change, store: &Store<LeanSlice>| match change {
                    Change::Applied { old, new } => {
                        if let Some(cached) = store.get(&ObjectRef::from_obj(new)) {
                            index.apply(old, cached);
                        }
                        let key = endpoints::service_key(new);
                        let old_key = old.and_then(endpoints::service_key);
                        if let Some(k) = &old_key
                            && old_key != key
                        {
                            changes.key(k.clone());
                        }
                        if let Some(k) = key {
                            changes.key(k);
                        }
                    }
                    Change::Deleted(s) => {
                        index.remove(s);
                        if let Some(k) = endpoints::service_key(s) {
                            changes.key(k);
                        }
                    }
                    Change::Listed => {
                        index.replace_all(store.state());
                        changes.all();
                    }
                },
            )
        });
        ClusterView {
            namespace: self.namespace,
            pools,
            peers,
            bfd_profiles,
            bgp_advertisements,
            l2_advertisements,
            communities,
            secrets,
            config_maps,
            nodes: node_reflector,
            namespaces,
            services,
            endpoint_slices,
            config_changes,
            service_changes,
            slices,
        }
    }
}

/// The key of a Service: `namespace/name`.
pub fn service_key(svc: &Service) -> String {
    format!(
        "{}/{}",
        svc.metadata.namespace.as_deref().unwrap_or_default(),
        svc.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether a Node change is worth a configuration signal (first) and a
/// full Service pass (second). Creations, deletions and lists always change
/// the configuration; an update only when [`nodes::node_changed`]. A list
/// or an availability flip of a known node ([`nodes::availability_changed`])
/// asks for a full Service pass, as MetalLB's reprocess-all.
pub fn node_signal(change: &Change<'_, Node>) -> (bool, bool) {
    match change {
        Change::Applied {
            old: Some(old),
            new,
        } => (
            nodes::node_changed(old, new),
            nodes::availability_changed(old, new),
        ),
        Change::Applied { old: None, .. } | Change::Deleted(_) => (true, false),
        Change::Listed => (true, true),
    }
}

/// Whether a change of a configuration object (metallb.io kinds, Secrets) is
/// worth a configuration signal: creations, deletions and lists always; an
/// update when its `metadata.generation` (the spec of a kind with a status
/// subresource), its labels or its annotations changed, or, for kinds
/// without a generation (Secrets), always.
pub fn config_object_signal<K: kube::Resource>(change: &Change<'_, K>) -> bool {
    match change {
        Change::Applied {
            old: Some(old),
            new,
        } => {
            let (o, n) = (old.meta(), new.meta());
            n.generation.is_none()
                || o.generation != n.generation
                || o.labels != n.labels
                || o.annotations != n.annotations
        }
        _ => true,
    }
}

/// Whether a Namespace change is worth a configuration signal: always,
/// except for updates that change no label.
pub fn namespace_signal(change: &Change<'_, Namespace>) -> bool {
    match change {
        Change::Applied {
            old: Some(old),
            new,
        } => nodes::namespace_changed(old, new),
        _ => true,
    }
}

/// Whether a ConfigMap change is worth a configuration signal: only
/// [`BGP_EXTRAS`] is read, so only its changes (and lists) count.
pub fn config_map_signal(change: &Change<'_, ConfigMap>) -> bool {
    match change {
        Change::Applied { new: cm, .. } | Change::Deleted(cm) => cm.name_any() == BGP_EXTRAS,
        Change::Listed => true,
    }
}

/// The shared watches of a daemon; see the crate documentation.
pub struct ClusterView {
    namespace: String,
    pools: Option<Reflector<v1beta1::IPAddressPool>>,
    peers: Option<Reflector<v1beta2::BGPPeer>>,
    bfd_profiles: Option<Reflector<v1beta1::BFDProfile>>,
    bgp_advertisements: Option<Reflector<v1beta1::BGPAdvertisement>>,
    l2_advertisements: Option<Reflector<v1beta1::L2Advertisement>>,
    communities: Option<Reflector<v1beta1::Community>>,
    secrets: Option<Reflector<Secret>>,
    config_maps: Option<Reflector<ConfigMap>>,
    nodes: Option<Reflector<Node>>,
    namespaces: Option<Reflector<Namespace>>,
    services: Option<Reflector<Service>>,
    endpoint_slices: Option<Reflector<LeanSlice>>,
    config_changes: Changes,
    service_changes: Changes,
    slices: SliceIndex,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<(), Stopped>> + Send>>;

/// What the view does with every reflector, whatever its kind.
trait AnyReflector {
    fn health(&self) -> Health;
    fn ready(&self) -> BoxFuture;
    fn relist(&self) -> BoxFuture;
}

impl<K> AnyReflector for Reflector<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    fn health(&self) -> Health {
        Reflector::health(self)
    }
    fn ready(&self) -> BoxFuture {
        Box::pin(Reflector::ready(self))
    }
    fn relist(&self) -> BoxFuture {
        Box::pin(Reflector::relist(self))
    }
}

fn state<K: kube::Resource<DynamicType = ()> + Clone + 'static>(
    r: &Option<Reflector<K>>,
) -> Vec<Arc<K>> {
    r.as_ref().map(|r| r.store().state()).unwrap_or_default()
}

impl ClusterView {
    /// A builder watching nothing yet in `namespace` (MetalLB's).
    pub fn builder(client: Client, namespace: &str) -> Builder {
        Builder {
            client,
            namespace: namespace.to_owned(),
            kinds: BTreeSet::new(),
            key_bound: DEFAULT_KEY_BOUND,
            load_balancers_only: false,
        }
    }

    fn all(&self) -> Vec<&dyn AnyReflector> {
        let mut v: Vec<&dyn AnyReflector> = vec![];
        macro_rules! push {
            ($($f:ident),*) => { $( if let Some(r) = &self.$f { v.push(r); } )* };
        }
        push!(
            pools,
            peers,
            bfd_profiles,
            bgp_advertisements,
            l2_advertisements,
            communities,
            secrets,
            config_maps,
            nodes,
            namespaces,
            services,
            endpoint_slices
        );
        v
    }

    /// Waits until every watched kind has completed its first list.
    pub async fn ready(&self) -> Result<(), Stopped> {
        let waiters: Vec<BoxFuture> = self.all().iter().map(|r| r.ready()).collect();
        for w in waiters {
            w.await?;
        }
        Ok(())
    }

    /// Whether every watched kind has completed its first list.
    pub fn is_ready(&self) -> bool {
        self.all().iter().all(|r| r.health().ready)
    }

    /// Re-lists every watched kind now ([`Reflector::relist`]): the future
    /// completes when each cache holds a list started after this call. Put
    /// a deadline on it.
    pub fn relist(&self) -> impl Future<Output = Result<(), Stopped>> + Send + 'static {
        let waiters: Vec<BoxFuture> = self.all().iter().map(|r| r.relist()).collect();
        async move {
            for w in waiters {
                w.await?;
            }
            Ok(())
        }
    }

    /// The health of every watched kind.
    pub fn health(&self) -> Vec<Health> {
        self.all().iter().map(|r| r.health()).collect()
    }

    /// Whether any watch is failing (retrying with backoff).
    pub fn failing(&self) -> bool {
        self.all().iter().any(|r| r.health().failing)
    }

    /// Signals that the configuration may have changed: any change of the
    /// metallb.io kinds and Secrets, of the `bgpextras` ConfigMap, Node
    /// and Namespace creations, deletions and label changes (and Node
    /// `NetworkUnavailable` flips), and every list. Always [`crate::Batch::All`].
    pub fn config_changes(&self) -> &Changes {
        &self.config_changes
    }

    /// Signals Services to process, by key (`namespace/name`): a changed
    /// Service (one leaving a [`Builder::load_balancer_services_only`]
    /// selection is a deletion), a changed EndpointSlice of the Service;
    /// everything after a list of Services, EndpointSlices or Nodes, when a
    /// Node's availability flips, and when the keys pass the bound.
    pub fn service_changes(&self) -> &Changes {
        &self.service_changes
    }

    /// The MetalLB namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The configuration inputs, from the caches: every object shared with
    /// the cache (an `Arc` each), none copied. Kinds not watched are empty.
    pub fn resources(&self) -> Resources {
        Resources {
            pools: state(&self.pools),
            peers: state(&self.peers),
            bfd_profiles: state(&self.bfd_profiles),
            bgp_advertisements: state(&self.bgp_advertisements),
            l2_advertisements: state(&self.l2_advertisements),
            communities: state(&self.communities),
            secrets: state(&self.secrets),
            nodes: state(&self.nodes),
            namespaces: state(&self.namespaces),
            bgp_extras: self.config_maps.as_ref().and_then(|r| {
                r.store()
                    .get(&ObjectRef::new(BGP_EXTRAS).within(&self.namespace))
            }),
        }
    }

    /// The EndpointSlices of the Service `key` (`namespace/name`), from the
    /// index (empty when EndpointSlices are not watched).
    pub fn endpoint_slices_of(&self, key: &str) -> Vec<Arc<LeanSlice>> {
        self.slices.slices(key)
    }

    /// The EndpointSlice index.
    pub fn slice_index(&self) -> &SliceIndex {
        &self.slices
    }

    /// The `IPAddressPool` reflector, if watched.
    pub fn pools(&self) -> Option<&Reflector<v1beta1::IPAddressPool>> {
        self.pools.as_ref()
    }
    /// The `BGPPeer` reflector, if watched.
    pub fn peers(&self) -> Option<&Reflector<v1beta2::BGPPeer>> {
        self.peers.as_ref()
    }
    /// The `BFDProfile` reflector, if watched.
    pub fn bfd_profiles(&self) -> Option<&Reflector<v1beta1::BFDProfile>> {
        self.bfd_profiles.as_ref()
    }
    /// The `BGPAdvertisement` reflector, if watched.
    pub fn bgp_advertisements(&self) -> Option<&Reflector<v1beta1::BGPAdvertisement>> {
        self.bgp_advertisements.as_ref()
    }
    /// The `L2Advertisement` reflector, if watched.
    pub fn l2_advertisements(&self) -> Option<&Reflector<v1beta1::L2Advertisement>> {
        self.l2_advertisements.as_ref()
    }
    /// The `Community` reflector, if watched.
    pub fn communities(&self) -> Option<&Reflector<v1beta1::Community>> {
        self.communities.as_ref()
    }
    /// The Secret reflector, if watched.
    pub fn secrets(&self) -> Option<&Reflector<Secret>> {
        self.secrets.as_ref()
    }
    /// The ConfigMap reflector, if watched.
    pub fn config_maps(&self) -> Option<&Reflector<ConfigMap>> {
        self.config_maps.as_ref()
    }
    /// The Node reflector, if watched.
    pub fn nodes(&self) -> Option<&Reflector<Node>> {
        self.nodes.as_ref()
    }
    /// The Namespace reflector, if watched.
    pub fn namespaces(&self) -> Option<&Reflector<Namespace>> {
        self.namespaces.as_ref()
    }
    /// The Service reflector, if watched.
    pub fn services(&self) -> Option<&Reflector<Service>> {
        self.services.as_ref()
    }
    /// The EndpointSlice reflector, if watched.
    pub fn endpoint_slices(&self) -> Option<&Reflector<LeanSlice>> {
        self.endpoint_slices.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use kube::api::ObjectMeta;

    fn node(labels: &[(&str, &str)], unavailable: bool) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: nodes::NETWORK_UNAVAILABLE.into(),
                    status: if unavailable { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn config_objects_signal_on_spec_and_label_changes_only() {
        use config::api::v1beta1::{IPAddressPool, IPAddressPoolStatus};
        let pool = |generation: i64, label: &str, assigned: i64| IPAddressPool {
            metadata: ObjectMeta {
                name: Some("a".into()),
                generation: Some(generation),
                labels: Some([("k".to_owned(), label.to_owned())].into()),
                ..Default::default()
            },
            spec: Default::default(),
            status: Some(IPAddressPoolStatus {
                assigned_ipv4: assigned,
                ..Default::default()
            }),
        };
        let sig = |old: &IPAddressPool, new: &IPAddressPool| {
            config_object_signal(&Change::Applied {
                old: Some(old),
                new,
            })
        };
        let a = pool(1, "x", 0);
        assert!(!sig(&a, &pool(1, "x", 5)), "a status write alone");
        assert!(sig(&a, &pool(2, "x", 0)), "a spec change");
        assert!(sig(&a, &pool(1, "y", 0)), "a label change");
        assert!(config_object_signal(&Change::Applied {
            old: None,
            new: &a
        }));
        assert!(config_object_signal(&Change::Deleted(&a)));
        assert!(config_object_signal::<IPAddressPool>(&Change::Listed));
        // Secrets have no generation: every update counts.
        let secret = Secret::default();
        assert!(config_object_signal(&Change::Applied {
            old: Some(&secret),
            new: &secret,
        }));
    }

    #[test]
    fn node_signals() {
        let up = node(&[("zone", "a")], false);
        let relabelled = node(&[("zone", "b")], false);
        let excluded = node(&[("zone", "a"), (nodes::EXCLUDE_LB_LABEL, "")], false);
        let down = node(&[("zone", "a")], true);
        let mut heartbeat = up.clone();
        heartbeat.metadata.resource_version = Some("7".into());
        fn applied(old: Option<&Node>, new: &Node) -> (bool, bool) {
            node_signal(&Change::Applied { old, new })
        }
        assert_eq!(applied(Some(&up), &heartbeat), (false, false));
        assert_eq!(applied(Some(&up), &relabelled), (true, false));
        assert_eq!(applied(Some(&up), &excluded), (true, true));
        assert_eq!(applied(Some(&up), &down), (true, true));
        // A node seen for the first time changes the configuration only.
        assert_eq!(applied(None, &down), (true, false));
        assert_eq!(node_signal(&Change::Deleted(&up)), (true, false));
        assert_eq!(node_signal(&Change::Listed), (true, true));
    }

    #[test]
    fn namespace_and_config_map_signals() {
        let ns = |team: &str| Namespace {
            metadata: ObjectMeta {
                name: Some("x".into()),
                labels: Some([("team".to_string(), team.to_string())].into()),
                annotations: Some([("note".to_string(), team.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut annotated = ns("a");
        annotated.metadata.annotations = None;
        fn applied(old: Option<&Namespace>, new: &Namespace) -> bool {
            namespace_signal(&Change::Applied { old, new })
        }
        assert!(!applied(Some(&ns("a")), &annotated));
        assert!(applied(Some(&ns("a")), &ns("b")));
        assert!(applied(None, &ns("a")));
        assert!(namespace_signal(&Change::Deleted(&ns("a"))));
        assert!(namespace_signal(&Change::Listed));

        let cm = |name: &str| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let extras = cm(BGP_EXTRAS);
        let other = cm("kube-root-ca.crt");
        assert!(config_map_signal(&Change::Applied {
            old: None,
            new: &extras
        }));
        assert!(config_map_signal(&Change::Deleted(&extras)));
        assert!(!config_map_signal(&Change::Applied {
            old: Some(&other),
            new: &other
        }));
        assert!(!config_map_signal(&Change::Deleted(&other)));
        assert!(config_map_signal(&Change::Listed));
    }
}
