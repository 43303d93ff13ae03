//! The objects `metallbctl explain` needs, read from the API server of the
//! current kubeconfig context: `list` and `get` only, each request with a
//! deadline, nothing a viewer's RBAC (plus `list nodes`) does not allow.
//! Secrets are never read: a BGPPeer's `passwordSecret` is taken to exist
//! (the decisions do not depend on the password; a bad Secret shows in the
//! speakers' ConfigurationState).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use cluster_view::endpoints::LeanSlice;
use config::api::{v1beta1, v1beta2};
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use kube::Client;
use kube::api::{Api, ListParams};
use serde::Serialize;

/// What the speakers report about one Service.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reported {
    /// Node -> the BGPPeers its ServiceBGPStatus names.
    pub bgp: BTreeMap<String, Vec<String>>,
    /// Node -> the interfaces its ServiceL2Status names (empty: every one).
    pub l2: BTreeMap<String, Vec<String>>,
    /// Nodes reporting in summary mode (a NodeBGPStatus): what it says of
    /// this Service.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub summary: BTreeMap<String, Summarised>,
}

/// What a node's NodeBGPStatus says of one Service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Summarised {
    /// Listed as announced (`externalTrafficPolicy: Local`), to these peers.
    Announced(Vec<String>),
    /// Listed as not announced, or the node withholds everything: why.
    Withdrawn(String),
    /// Not listed: announced exactly as the configuration says.
    AsConfigured,
    /// Not listed but the list was cut: unknown.
    Unknown,
}

impl Summarised {
    /// What `status` (the NodeBGPStatus of a node) says of the Service
    /// `ns/name`.
    pub fn of(status: &v1beta1::NodeBGPStatusStatus, ns: &str, name: &str) -> Self {
        if let Some(x) = status
            .exceptions
            .iter()
            .find(|x| x.service_namespace == ns && x.service_name == name)
        {
            return if x.announced {
                Summarised::Announced(x.peers.clone())
            } else {
                Summarised::Withdrawn(x.reason.clone())
            };
        }
        if !status.withheld.is_empty() {
            Summarised::Withdrawn(status.withheld.clone())
        } else if status.exceptions_truncated {
            Summarised::Unknown
        } else {
            Summarised::AsConfigured
        }
    }
}

/// Lists a kind that may not be installed (MetalLB's CRDs lack the
/// metallb-rs kinds): a 404 is an empty list.
pub async fn list_optional<K>(api: Api<K>, what: &str, timeout: Duration) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    deadline(timeout, &format!("listing {what}"), async {
        match api.list(&ListParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
            r => r.map(|l| l.items),
        }
    })
    .await
}

/// The objects read.
pub struct Live {
    pub resources: config::Resources,
    pub service: Option<Service>,
    pub slices: Vec<Arc<LeanSlice>>,
    pub reported: Reported,
}

/// `fut`, or an error naming `what` when it has not answered within
/// `timeout`.
pub async fn deadline<T, E>(
    timeout: Duration,
    what: &str,
    fut: impl Future<Output = Result<T, E>>,
) -> anyhow::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| anyhow::anyhow!("{what}: no answer within {timeout:?}"))?
        .with_context(|| what.to_owned())
}

/// A client for the current kubeconfig context, within `timeout`.
pub async fn client(timeout: Duration) -> anyhow::Result<Client> {
    deadline(
        timeout,
        "connecting to the cluster (kubeconfig)",
        Client::try_default(),
    )
    .await
}

async fn list<K>(
    api: Api<K>,
    what: &str,
    lp: &ListParams,
    timeout: Duration,
) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(deadline(timeout, &format!("listing {what}"), api.list(lp))
        .await?
        .items)
}

/// Reads the configuration of namespace `metallb_ns`, the Nodes, the
/// Namespaces, the Service `ns/name`, its EndpointSlices and the speakers'
/// status objects for it.
pub async fn read(
    metallb_ns: &str,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<Live> {
    let client = client(timeout).await?;
    let all = ListParams::default();
    let c = || client.clone();
    let r = config::Resources {
        pools: arcs(
            list(
                Api::<v1beta1::IPAddressPool>::namespaced(c(), metallb_ns),
                "ipaddresspools",
                &all,
                timeout,
            )
            .await?,
        ),
        peers: arcs(
            list(
                Api::<v1beta2::BGPPeer>::namespaced(c(), metallb_ns),
                "bgppeers",
                &all,
                timeout,
            )
            .await?,
        ),
        bfd_profiles: arcs(
            list(
                Api::<v1beta1::BFDProfile>::namespaced(c(), metallb_ns),
                "bfdprofiles",
                &all,
                timeout,
            )
            .await?,
        ),
        bgp_advertisements: arcs(
            list(
                Api::<v1beta1::BGPAdvertisement>::namespaced(c(), metallb_ns),
                "bgpadvertisements",
                &all,
                timeout,
            )
            .await?,
        ),
        l2_advertisements: arcs(
            list(
                Api::<v1beta1::L2Advertisement>::namespaced(c(), metallb_ns),
                "l2advertisements",
                &all,
                timeout,
            )
            .await?,
        ),
        communities: arcs(
            list(
                Api::<v1beta1::Community>::namespaced(c(), metallb_ns),
                "communities",
                &all,
                timeout,
            )
            .await?,
        ),
        nodes: arcs(list(Api::<Node>::all(c()), "nodes", &all, timeout).await?),
        namespaces: arcs(list(Api::<Namespace>::all(c()), "namespaces", &all, timeout).await?),
        ..config::Resources::default()
    };
    let r = config::overlap::with_placeholder_secrets(r, metallb_ns);
    let service = deadline(
        timeout,
        &format!("getting Service {ns}/{name}"),
        Api::<Service>::namespaced(c(), ns).get_opt(name),
    )
    .await?;
    let slices = arcs(
        list(
            Api::<LeanSlice>::namespaced(c(), ns),
            "endpointslices",
            &ListParams::default().labels(&format!("kubernetes.io/service-name={name}")),
            timeout,
        )
        .await?,
    );
    let mut reported = Reported::default();
    let is_it = |sns: &str, sname: &str| sns == ns && sname == name;
    for s in list(
        Api::<v1beta1::ServiceBGPStatus>::namespaced(c(), metallb_ns),
        "servicebgpstatuses",
        &all,
        timeout,
    )
    .await?
    {
        if let Some(st) = s.status
            && is_it(&st.service_namespace, &st.service_name)
        {
            reported.bgp.insert(st.node, st.peers);
        }
    }
    for s in list(
        Api::<v1beta1::ServiceL2Status>::namespaced(c(), metallb_ns),
        "servicel2statuses",
        &all,
        timeout,
    )
    .await?
    {
        if let Some(st) = s.status
            && is_it(&st.service_namespace, &st.service_name)
        {
            reported
                .l2
                .insert(st.node, st.interfaces.into_iter().map(|i| i.name).collect());
        }
    }
    for s in list_optional(
        Api::<v1beta1::NodeBGPStatus>::namespaced(c(), metallb_ns),
        "nodebgpstatuses",
        timeout,
    )
    .await?
    {
        let Some(st) = s.status else { continue };
        // a node reporting per Service says it there
        if !reported.bgp.contains_key(&st.node) {
            reported
                .summary
                .insert(st.node.clone(), Summarised::of(&st, ns, name));
        }
    }
    Ok(Live {
        resources: r,
        service,
        slices,
        reported,
    })
}

fn arcs<T>(v: Vec<T>) -> Vec<Arc<T>> {
    v.into_iter().map(Arc::new).collect()
}

/// Each speaker's layer-2 membership view, by node: the `layer2Membership` of
/// the speakers' ConfigurationStates in `metallb_ns` (none with membership
/// off, or where MetalLB's own CRD, which lacks the field, is installed).
pub async fn membership_views(
    metallb_ns: &str,
    timeout: Duration,
) -> anyhow::Result<BTreeMap<String, v1beta1::Layer2Membership>> {
    let client = client(timeout).await?;
    let states = list(
        Api::<v1beta1::ConfigurationState>::namespaced(client, metallb_ns),
        "configurationstates",
        &ListParams::default().labels(&format!("{}=speaker", config::api::LABEL_COMPONENT_TYPE)),
        timeout,
    )
    .await?;
    Ok(states
        .into_iter()
        .filter_map(|s| {
            let node = s.metadata.labels?.remove(config::api::LABEL_NODE_NAME)?;
            Some((node, s.status?.layer2_membership?))
        })
        .collect())
}

/// The Nodes whose speaker Pod (`labels` in `metallb_ns`) is Ready: the speakers
/// taking part in layer-2 elections as far as the API server can tell (a speaker
/// joins the membership once it can announce, and its readiness follows).
/// The nodes of the running MetalLB speaker Pods in `metallb_ns`: those without
/// the label `metallb-rs/component` (`speaker::discovery::metallb_speaker_node`).
pub async fn metallb_speaker_nodes(
    metallb_ns: &str,
    timeout: Duration,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let client = client(timeout).await?;
    let pods = list(
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client, metallb_ns),
        "the Pods without the label metallb-rs/component",
        &ListParams::default().labels(&format!("!{}", speaker::discovery::OWN_POD_LABEL)),
        timeout,
    )
    .await?;
    Ok(speaker::discovery::metallb_speaker_nodes(&pods))
}

pub async fn ready_speaker_nodes(
    metallb_ns: &str,
    labels: &str,
    timeout: Duration,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let client = client(timeout).await?;
    let pods = list(
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client, metallb_ns),
        "the speaker Pods",
        &ListParams::default().labels(labels),
        timeout,
    )
    .await?;
    Ok(pods
        .into_iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.spec?.node_name)
        .collect())
}
