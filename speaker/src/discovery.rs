//! Finding the other speakers for the membership protocol, as MetalLB does
//! (speaker.md 3.4): the Pod IPs of the speaker Pods selected by
//! `--ml-labels` in the speaker's namespace, listed at start and every
//! 5 minutes (the membership protocol joins those that are not members
//! every minute). Each list has a deadline; a failed one is retried with
//! backoff and jitter, and the last good list stays in force.
//!
//! Also the nodes where a MetalLB speaker runs ([`watch_metallb_speakers`]):
//! a watch of the namespace's Pods without this implementation's label
//! [`OWN_POD_LABEL`], for `--yield-to-metallb` (a migration from MetalLB).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cluster_view::Reflector;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use thiserror::Error;
use tokio::sync::watch;

/// MetalLB lists the speaker Pods this often.
pub const REFRESH: Duration = Duration::from_secs(300);
/// Deadline of one list.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// First wait after a failed list, doubling to [`REFRESH`]: a speaker starting while
/// its API server comes back (connection refused, then 403 while the RBAC loads) finds
/// the others within its join wait (`crate::join`).
pub const FIRST_RETRY: Duration = Duration::from_millis(500);

#[derive(Debug, Error)]
pub enum DiscoveryError {
    #[error("listing the speaker Pods ({selector}) in {namespace}: {source}")]
    List {
        namespace: String,
        selector: String,
        source: kube::Error,
    },
    #[error("listing the speaker Pods ({selector}) in {namespace}: no answer within {timeout:?}")]
    Timeout {
        namespace: String,
        selector: String,
        timeout: Duration,
    },
}

/// The Pod IPs of the speaker Pods (`selector`, e.g.
/// `app=metallb,component=speaker`) in `namespace`; Pods without an IP yet
/// are left out.
pub async fn speaker_pod_ips(
    client: &Client,
    namespace: &str,
    selector: &str,
) -> Result<Vec<IpAddr>, DiscoveryError> {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let list = tokio::time::timeout(
        LIST_TIMEOUT,
        api.list(&ListParams::default().labels(selector)),
    )
    .await
    .map_err(|_| DiscoveryError::Timeout {
        namespace: namespace.to_owned(),
        selector: selector.to_owned(),
        timeout: LIST_TIMEOUT,
    })?
    .map_err(|source| DiscoveryError::List {
        namespace: namespace.to_owned(),
        selector: selector.to_owned(),
        source,
    })?;
    Ok(pod_ips(&list.items))
}

/// The IPs of `pods` (status.podIP; each of status.podIPs too), sorted and
/// without repeats.
pub fn pod_ips(pods: &[Pod]) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = pods
        .iter()
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            s.pod_ip
                .iter()
                .cloned()
                .chain(s.pod_ips.iter().flatten().map(|i| i.ip.clone()))
        })
        .filter_map(|ip| ip.parse().ok())
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

/// The seed addresses: every IP of the family of `bind` (a membership
/// socket speaks one family) at `bind`'s port, except `bind` itself.
pub fn seeds(ips: &[IpAddr], bind: SocketAddr) -> Vec<SocketAddr> {
    ips.iter()
        .filter(|ip| ip.is_ipv4() == bind.is_ipv4() && **ip != bind.ip())
        .map(|ip| SocketAddr::new(*ip, bind.port()))
        .collect()
}

/// Lists the speaker Pods now and every [`REFRESH`], publishing each new
/// seed list on `out`. A failed list is retried after [`FIRST_RETRY`] doubling to 5 min,
/// with up to 20 % jitter; it ends when `out` has no receiver left or when
/// `stop` completes.
pub async fn run(
    client: Client,
    namespace: String,
    selector: String,
    bind: SocketAddr,
    out: watch::Sender<Option<Vec<SocketAddr>>>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut backoff = FIRST_RETRY;
    loop {
        let listed = tokio::select! {
            () = &mut stop => return,
            r = speaker_pod_ips(&client, &namespace, &selector) => r,
        };
        let wait = match listed {
            Ok(ips) => {
                let seeds = seeds(&ips, bind);
                tracing::debug!(?seeds, "speaker Pods found");
                out.send_if_modified(|cur| {
                    let changed = cur.as_ref() != Some(&seeds);
                    *cur = Some(seeds);
                    changed
                });
                backoff = FIRST_RETRY;
                REFRESH
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "membership discovery failed; keeping the last list");
                let w = backoff;
                backoff = (backoff * 2).min(REFRESH);
                w
            }
        };
        tokio::select! {
            _ = out.closed() => return,
            () = &mut stop => return,
            _ = tokio::time::sleep(jitter(wait)) => {}
        }
    }
}

/// The label every Pod of this implementation carries (the chart's and
/// deploy/'s speaker and controller): a speaker Pod without it is another
/// implementation's, MetalLB's during a migration.
pub const OWN_POD_LABEL: &str = "metallb-rs/component";

/// The labels MetalLB gives its speaker Pods: `app.kubernetes.io/component`
/// in its chart, `component` in its manifests (`metallb-native.yaml`).
const SPEAKER_COMPONENT_LABELS: [&str; 2] = ["app.kubernetes.io/component", "component"];

/// Whether `image` is MetalLB's speaker image: its repository ends with
/// `metallb/speaker` (`quay.io/metallb/speaker:v0.15.2`, a mirror's
/// `registry.example/metallb/speaker@sha256:...`). The chart refuses that
/// name for this implementation's images.
pub fn is_metallb_speaker_image(image: &str) -> bool {
    let repo = image.split('@').next().unwrap_or_default();
    let repo = match repo.rfind(':') {
        Some(i) if !repo[i..].contains('/') => &repo[..i],
        _ => repo,
    };
    repo == "metallb/speaker" || repo.ends_with("/metallb/speaker")
}

/// Whether `pod` is a MetalLB speaker (labelled a speaker as MetalLB's chart
/// or manifests label it, without [`OWN_POD_LABEL`], with a container of
/// MetalLB's speaker image: a speaker of ours deployed without the label is
/// not taken for MetalLB's) that counts: on a node,
/// not being deleted, and Ready or with a container running (MetalLB's
/// speaker answers within seconds of its start, its chart's readiness probe
/// says so 10-20 s later). Its node's name, if so.
pub fn metallb_speaker_node(pod: &Pod) -> Option<&str> {
    let labels = pod.metadata.labels.as_ref()?;
    if labels.contains_key(OWN_POD_LABEL)
        || !SPEAKER_COMPONENT_LABELS
            .iter()
            .any(|k| labels.get(*k).is_some_and(|v| v == "speaker"))
        || pod.metadata.deletion_timestamp.is_some()
    {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    if !spec
        .containers
        .iter()
        .any(|c| c.image.as_deref().is_some_and(is_metallb_speaker_image))
    {
        return None;
    }
    let status = pod.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let running = status
        .container_statuses
        .iter()
        .flatten()
        .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
    if !ready && !running {
        return None;
    }
    spec.node_name.as_deref().filter(|n| !n.is_empty())
}

/// The nodes of the MetalLB speakers among `pods` ([`metallb_speaker_node`]).
pub fn metallb_speaker_nodes<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeSet<String> {
    pods.into_iter()
        .filter_map(metallb_speaker_node)
        .map(str::to_owned)
        .collect()
}

/// The namespaces whose MetalLB speakers count (`--yield-to-metallb-namespaces`): the
/// speaker's own and `others`, without blanks and repeats.
pub fn yield_namespaces(own: &str, others: &[String]) -> BTreeSet<String> {
    std::iter::once(own)
        .chain(others.iter().map(String::as_str))
        .map(str::trim)
        .filter(|ns| !ns.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The nodes of MetalLB's speakers per namespace, each namespace's watch writing its
/// own entry; [`MetalLbSpeakers::nodes`] is their union.
#[derive(Debug, Default)]
pub struct MetalLbSpeakers {
    by_namespace: std::collections::BTreeMap<String, BTreeSet<String>>,
}

impl MetalLbSpeakers {
    /// `namespace`'s speakers' nodes are now `nodes`.
    pub fn set(&mut self, namespace: &str, nodes: BTreeSet<String>) {
        if nodes.is_empty() {
            self.by_namespace.remove(namespace);
        } else {
            self.by_namespace.insert(namespace.to_owned(), nodes);
        }
    }

    /// The nodes where a MetalLB speaker of any namespace runs.
    pub fn nodes(&self) -> BTreeSet<String> {
        self.by_namespace.values().flatten().cloned().collect()
    }
}

/// Watches, in each of `namespaces`, the Pods that lack [`OWN_POD_LABEL`] (none once a
/// migration is over: the watch then costs the API server nothing) and publishes the
/// nodes of the MetalLB speakers among them, all namespaces together, on `out` at each
/// change. Each watch retries on its own (`cluster_view` reflector's backoff; a
/// namespace the speaker may not read is retried with it, and the others still count);
/// they end when the returned reflectors are dropped.
pub fn watch_metallb_speakers(
    client: Client,
    namespaces: &BTreeSet<String>,
    out: watch::Sender<BTreeSet<String>>,
) -> Vec<Reflector<Pod>> {
    let shared = std::sync::Arc::new(std::sync::Mutex::new((MetalLbSpeakers::default(), out)));
    namespaces
        .iter()
        .map(|namespace| {
            let api = Api::<Pod>::namespaced(client.clone(), namespace);
            let config =
                kube::runtime::watcher::Config::default().labels(&format!("!{OWN_POD_LABEL}"));
            let shared = shared.clone();
            let namespace = namespace.clone();
            Reflector::with_trim(api, config, trim_pod, move |_, store| {
                let nodes = metallb_speaker_nodes(store.state().iter().map(AsRef::as_ref));
                let mut guard = shared.lock().unwrap_or_else(|p| p.into_inner());
                let (speakers, out) = &mut *guard;
                speakers.set(&namespace, nodes);
                let all = speakers.nodes();
                out.send_if_modified(|cur| {
                    let changed = *cur != all;
                    if changed {
                        *cur = all;
                    }
                    changed
                });
            })
        })
        .collect()
}

/// What the MetalLB speaker watch keeps of a Pod: its labels, deletion
/// timestamp, node, containers' images, conditions and containers' states.
fn trim_pod(pod: &mut Pod) {
    cluster_view::lean::metadata(pod);
    pod.metadata.annotations = None;
    if let Some(spec) = pod.spec.as_mut() {
        *spec = k8s_openapi::api::core::v1::PodSpec {
            node_name: spec.node_name.take(),
            containers: std::mem::take(&mut spec.containers)
                .into_iter()
                .map(|c| k8s_openapi::api::core::v1::Container {
                    name: c.name,
                    image: c.image,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
    }
    if let Some(status) = pod.status.as_mut() {
        *status = k8s_openapi::api::core::v1::PodStatus {
            conditions: status.conditions.take(),
            container_statuses: status.container_statuses.take().map(|v| {
                v.into_iter()
                    .map(|c| k8s_openapi::api::core::v1::ContainerStatus {
                        name: c.name,
                        state: c.state,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        };
    }
}

/// `d` plus up to 20 %, drawn from the clock (no security role).
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    d + d.mul_f64(f64::from(nanos % 1000) / 5000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ip: Option<&str>, ips: &[&str]) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {
                "podIP": ip,
                "podIPs": ips.iter().map(|i| json!({"ip": i})).collect::<Vec<_>>(),
            }
        }))
        .unwrap()
    }

    /// `--yield-to-metallb-namespaces`: its own namespace always, blanks and repeats
    /// dropped.
    #[test]
    fn yield_namespaces_are_its_own_and_the_others_given() {
        let given = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let got = |own, v: &[&str]| {
            yield_namespaces(own, &given(v))
                .into_iter()
                .collect::<Vec<_>>()
        };
        assert_eq!(got("lb", &[]), ["lb"]);
        assert_eq!(
            got("lb", &["metallb-system", " ", "lb", "metallb-system "]),
            ["lb", "metallb-system"]
        );
    }

    /// Each namespace's watch replaces its own entry: a namespace whose speakers
    /// went keeps no node, another's still count.
    #[test]
    fn metallb_speakers_are_the_union_of_the_namespaces() {
        let nodes = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
        let mut m = MetalLbSpeakers::default();
        m.set("metallb-system", nodes(&["node-a", "node-b"]));
        m.set("lb", nodes(&["node-b", "node-c"]));
        assert_eq!(m.nodes(), nodes(&["node-a", "node-b", "node-c"]));
        m.set("metallb-system", nodes(&["node-a"]));
        assert_eq!(m.nodes(), nodes(&["node-a", "node-b", "node-c"]));
        m.set("lb", BTreeSet::new());
        assert_eq!(m.nodes(), nodes(&["node-a"]));
        m.set("metallb-system", BTreeSet::new());
        assert!(m.nodes().is_empty());
    }

    #[test]
    fn pod_ips_are_sorted_unique_and_skip_pods_without_one() {
        let pods = [
            pod(Some("192.0.2.12"), &["192.0.2.12", "2001:db8::12"]),
            pod(None, &[]),
            pod(Some("192.0.2.11"), &[]),
            pod(Some("not-an-ip"), &[]),
        ];
        let ips: Vec<String> = pod_ips(&pods).iter().map(ToString::to_string).collect();
        assert_eq!(ips, ["192.0.2.11", "192.0.2.12", "2001:db8::12"]);
    }

    #[test]
    fn seeds_keep_the_bind_family_and_leave_out_the_own_address() {
        let ips: Vec<IpAddr> = ["192.0.2.11", "192.0.2.12", "2001:db8::12"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let s = seeds(&ips, "192.0.2.11:7946".parse().unwrap());
        assert_eq!(s, ["192.0.2.12:7946".parse::<SocketAddr>().unwrap()]);
        let s = seeds(&ips, "[2001:db8::11]:7000".parse().unwrap());
        assert_eq!(s, ["[2001:db8::12]:7000".parse::<SocketAddr>().unwrap()]);
    }

    fn speaker_pod(labels: serde_json::Value, ready: &str, deleting: bool) -> Pod {
        let mut p = json!({
            "metadata": {"name": "speaker-x", "labels": labels},
            "spec": {"nodeName": "node-2", "containers": [
                {"name": "speaker", "image": "quay.io/metallb/speaker:v0.15.2",
                 "args": ["--port=7472"]},
                {"name": "frr", "image": "quay.io/frrouting/frr:9.1.0"}]},
            "status": {"conditions": [{"type": "Ready", "status": ready}],
                "containerStatuses": [{"name": "speaker", "image": "quay.io/metallb/speaker:v0.15.2",
                    "imageID": "", "ready": ready == "True", "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}}}]},
        });
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-11-29T12:00:00Z");
        }
        serde_json::from_value(p).unwrap()
    }

    #[test]
    fn metallb_speakers_are_ready_speaker_pods_without_our_label() {
        let chart =
            json!({"app.kubernetes.io/name": "metallb", "app.kubernetes.io/component": "speaker"});
        let manifests = json!({"app": "metallb", "component": "speaker"});
        for labels in [&chart, &manifests] {
            let p = speaker_pod(labels.clone(), "True", false);
            assert_eq!(metallb_speaker_node(&p), Some("node-2"), "{labels}");
        }
        // ours (the label our chart and deploy/ give every Pod)
        let mut ours = chart.clone();
        ours[OWN_POD_LABEL] = json!("speaker");
        assert_eq!(
            metallb_speaker_node(&speaker_pod(ours, "True", false)),
            None
        );
        // not Ready, or being deleted: it does not count
        assert_eq!(
            metallb_speaker_node(&speaker_pod(chart.clone(), "False", false)),
            None
        );
        assert_eq!(
            metallb_speaker_node(&speaker_pod(chart.clone(), "True", true)),
            None
        );
        // labelled as MetalLB's, but our image (a speaker of ours deployed without
        // the label) or another one
        for image in [
            "metallb-rs/speaker:0.1.0",
            "bench.invalid/speaker",
            "metallb/speaker-x:1",
        ] {
            let mut p = speaker_pod(chart.clone(), "True", false);
            let spec = p.spec.as_mut().unwrap();
            spec.containers.truncate(1);
            spec.containers[0].image = Some(image.to_owned());
            assert_eq!(metallb_speaker_node(&p), None, "{image}");
        }
        // MetalLB's controller
        let ctl = json!({"app.kubernetes.io/name": "metallb", "app.kubernetes.io/component": "controller"});
        assert_eq!(metallb_speaker_node(&speaker_pod(ctl, "True", false)), None);
        // not scheduled yet
        let mut p = speaker_pod(chart.clone(), "True", false);
        p.spec.as_mut().unwrap().node_name = None;
        assert_eq!(metallb_speaker_node(&p), None);
        // started but not Ready yet (MetalLB's speaker answers before its probe
        // passes): it counts
        let mut p = speaker_pod(chart.clone(), "False", false);
        p.status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state = Some(
            serde_json::from_value(json!({"running": {"startedAt": "2026-11-29T12:00:00Z"}}))
                .unwrap(),
        );
        assert_eq!(metallb_speaker_node(&p), Some("node-2"));
        // trimmed as the watch keeps it: the same answers
        let mut q = p.clone();
        trim_pod(&mut q);
        assert_eq!(metallb_speaker_node(&q), Some("node-2"));
        assert!(q.spec.unwrap().containers[0].args.is_none());
        let mut p = speaker_pod(chart, "True", false);
        trim_pod(&mut p);
        assert_eq!(metallb_speaker_node(&p), Some("node-2"));
        assert_eq!(p.status.unwrap().container_statuses.unwrap()[0].image, "");
    }

    #[test]
    fn metallb_speaker_images_by_repository() {
        for yes in [
            "quay.io/metallb/speaker:v0.15.2",
            "quay.io/metallb/speaker",
            "metallb/speaker:main",
            "registry.example:5000/mirror/metallb/speaker@sha256:0123",
            "registry.example:5000/metallb/speaker:v0.14.9@sha256:0123",
        ] {
            assert!(is_metallb_speaker_image(yes), "{yes}");
        }
        for no in [
            "metallb-rs/speaker:0.1.0",
            "quay.io/metallb/controller:v0.15.2",
            "registry.example:5000/speaker",
            "example/notmetallb/speaker",
            "",
        ] {
            assert!(!is_metallb_speaker_image(no), "{no}");
        }
    }

    #[test]
    fn jitter_adds_at_most_a_fifth() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(10));
            assert!(
                j >= Duration::from_secs(10) && j <= Duration::from_secs(12),
                "{j:?}"
            );
        }
    }
}
