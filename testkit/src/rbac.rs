//! RBAC manifests as sets of grants, for the tests that check a binary is
//! granted exactly what its code paths use.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// `(apiGroup, resource, resourceName or "*", verb)`.
pub type Grant = (String, String, String, String);

/// Every grant of the ClusterRoles and Roles in the manifest at `path`
/// (wildcards are refused: a panic naming the rule).
pub fn granted(path: &Path) -> BTreeSet<Grant> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    let mut out = BTreeSet::new();
    for doc in docs {
        if doc["kind"] != "ClusterRole" && doc["kind"] != "Role" {
            continue;
        }
        for rule in doc["rules"].as_array().into_iter().flatten() {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str())
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let names = {
                let n = list("resourceNames");
                if n.is_empty() {
                    vec!["*".to_owned()]
                } else {
                    n
                }
            };
            for g in list("apiGroups") {
                for r in list("resources") {
                    for n in &names {
                        for v in list("verbs") {
                            assert!(g != "*" && r != "*" && v != "*", "wildcard in {rule:?}");
                            out.insert((g.clone(), r.clone(), n.clone(), v));
                        }
                    }
                }
            }
        }
    }
    out
}

/// Panics with the differences when `used` (group, resource, name, verb,
/// code path) is not exactly what the manifest at `path` grants.
pub fn assert_exactly_used(path: &Path, used: &[(&str, &str, &str, &str, &str)]) {
    let used: BTreeSet<Grant> = used
        .iter()
        .map(|(g, r, n, v, _)| (g.to_string(), r.to_string(), n.to_string(), v.to_string()))
        .collect();
    let granted = granted(path);
    let extra: Vec<_> = granted.difference(&used).collect();
    let missing: Vec<_> = used.difference(&granted).collect();
    assert!(
        extra.is_empty(),
        "{}: granted but used by no code path: {extra:#?}",
        path.display()
    );
    assert!(
        missing.is_empty(),
        "{}: used but not granted: {missing:#?}",
        path.display()
    );
}
