//! Node and Namespace semantics as MetalLB reads them: the
//! `NetworkUnavailable` condition, the exclude-from-load-balancers label,
//! and which updates are worth a signal.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Node};

/// A node carrying this label (whatever its value) announces nothing, unless
/// the speaker runs with `--ignore-exclude-lb` (the caller's decision).
pub const EXCLUDE_LB_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// The node condition that makes a node announce nothing when `True`.
pub const NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";

/// Whether the node's `NetworkUnavailable` condition is `True` (missing,
/// `False` or `Unknown` all mean available).
pub fn network_unavailable(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == NETWORK_UNAVAILABLE && c.status == "True")
}

/// Whether the node carries [`EXCLUDE_LB_LABEL`] (any value, even empty).
pub fn excluded_from_lb(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(EXCLUDE_LB_LABEL))
}

/// Whether `old` and `new` differ in a way that can change what a node may
/// announce: `network_unavailable` or `excluded_from_lb` flipped. MetalLB
/// reprocesses every Service then (even with `--ignore-exclude-lb`).
pub fn availability_changed(old: &Node, new: &Node) -> bool {
    network_unavailable(old) != network_unavailable(new)
        || excluded_from_lb(old) != excluded_from_lb(new)
}

fn same_labels(a: Option<&BTreeMap<String, String>>, b: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    a.unwrap_or(&empty) == b.unwrap_or(&empty)
}

/// Whether a Node update is worth a signal: its labels changed (node
/// selectors of peers and advertisements, the exclude label) or its
/// `NetworkUnavailable` condition flipped. Heartbeats, other conditions,
/// images, addresses and the like are not (MetalLB's node predicate).
pub fn node_changed(old: &Node, new: &Node) -> bool {
    !same_labels(old.metadata.labels.as_ref(), new.metadata.labels.as_ref())
        || network_unavailable(old) != network_unavailable(new)
}

/// Whether a Namespace update is worth a signal: its labels changed (the
/// namespace selectors of pools); anything else is not.
pub fn namespace_changed(old: &Namespace, new: &Namespace) -> bool {
    !same_labels(old.metadata.labels.as_ref(), new.metadata.labels.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn node(labels: &[(&str, &str)], conditions: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: (!labels.is_empty()).then(|| {
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect()
                }),
                ..Default::default()
            },
            status: Some(NodeStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| NodeCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn network_unavailable_only_when_true() {
        for (conditions, want) in [
            (vec![], false),
            (vec![("Ready", "True")], false),
            (vec![(NETWORK_UNAVAILABLE, "False")], false),
            (vec![(NETWORK_UNAVAILABLE, "Unknown")], false),
            (vec![(NETWORK_UNAVAILABLE, "True")], true),
            (
                vec![("Ready", "False"), (NETWORK_UNAVAILABLE, "True")],
                true,
            ),
        ] {
            assert_eq!(
                network_unavailable(&node(&[], &conditions)),
                want,
                "{conditions:?}"
            );
        }
        assert!(!network_unavailable(&Node::default()));
    }

    #[test]
    fn the_exclude_label_counts_whatever_its_value() {
        for (labels, want) in [
            (vec![], false),
            (vec![("kubernetes.io/hostname", "n1")], false),
            (vec![(EXCLUDE_LB_LABEL, "")], true),
            (vec![(EXCLUDE_LB_LABEL, "true")], true),
            (vec![(EXCLUDE_LB_LABEL, "false")], true),
        ] {
            assert_eq!(excluded_from_lb(&node(&labels, &[])), want, "{labels:?}");
        }
    }

    #[test]
    fn node_updates_are_signalled_for_labels_and_network_unavailable_only() {
        let base = node(&[("zone", "a")], &[("Ready", "True")]);
        let mut heartbeat = base.clone();
        heartbeat.metadata.resource_version = Some("2".into());
        heartbeat.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        heartbeat
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()[0]
            .last_heartbeat_time = Some(Time(Default::default()));
        let cases = [
            ("same object", base.clone(), false),
            ("heartbeat, annotation, resourceVersion", heartbeat, false),
            (
                "Ready flips",
                node(&[("zone", "a")], &[("Ready", "False")]),
                false,
            ),
            (
                "NetworkUnavailable False appears",
                node(
                    &[("zone", "a")],
                    &[("Ready", "True"), (NETWORK_UNAVAILABLE, "False")],
                ),
                false,
            ),
            (
                "NetworkUnavailable True",
                node(
                    &[("zone", "a")],
                    &[("Ready", "True"), (NETWORK_UNAVAILABLE, "True")],
                ),
                true,
            ),
            (
                "label value",
                node(&[("zone", "b")], &[("Ready", "True")]),
                true,
            ),
            (
                "label added",
                node(
                    &[("zone", "a"), (EXCLUDE_LB_LABEL, "")],
                    &[("Ready", "True")],
                ),
                true,
            ),
            ("labels removed", node(&[], &[("Ready", "True")]), true),
        ];
        for (what, new, want) in cases {
            assert_eq!(node_changed(&base, &new), want, "{what}");
        }
        // No labels and an empty label map are the same labels.
        let mut empty = node(&[], &[]);
        empty.metadata.labels = Some(BTreeMap::new());
        assert!(!node_changed(&node(&[], &[]), &empty));
    }

    #[test]
    fn availability_flips() {
        let up = node(&[("zone", "a")], &[]);
        assert!(!availability_changed(&up, &node(&[("zone", "b")], &[])));
        assert!(availability_changed(
            &up,
            &node(&[("zone", "a"), (EXCLUDE_LB_LABEL, "")], &[])
        ));
        assert!(availability_changed(
            &up,
            &node(&[("zone", "a")], &[(NETWORK_UNAVAILABLE, "True")])
        ));
        assert!(!availability_changed(
            &up,
            &node(&[("zone", "a")], &[(NETWORK_UNAVAILABLE, "Unknown")])
        ));
    }

    #[test]
    fn namespace_updates_are_signalled_for_labels_only() {
        let ns = |labels: &[(&str, &str)], phase: &str| Namespace {
            metadata: ObjectMeta {
                name: Some("team-a".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            status: Some(k8s_openapi::api::core::v1::NamespaceStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let base = ns(&[("team", "a")], "Active");
        assert!(!namespace_changed(&base, &base.clone()));
        assert!(!namespace_changed(
            &base,
            &ns(&[("team", "a")], "Terminating")
        ));
        assert!(namespace_changed(&base, &ns(&[("team", "b")], "Active")));
        assert!(namespace_changed(
            &base,
            &ns(&[("team", "a"), ("x", "y")], "Active")
        ));
        assert!(namespace_changed(&base, &ns(&[], "Active")));
    }
}
