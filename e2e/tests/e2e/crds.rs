//! The CRDs of deploy/crds/ on the lab API server: installed, Established, the same as
//! the files, and `kubectl get` shows each kind's printer columns with their values.

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use e2e::Lab;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

use crate::samples::{create_sample, resource};
use crate::table::{expected_cell, get_table, is_age, json_path, parse_text_table, rendered};

/// The CRDs of deploy/crds/*.yaml, parsed by kubectl (no YAML parser here).
pub async fn crd_files(lab: &Lab) -> Result<Vec<CustomResourceDefinition>> {
    let out = lab
        .kubectl_ok(
            &[
                "create",
                "--dry-run=client",
                "--validate=false",
                "-o",
                "json",
                "-f",
                "deploy/crds/",
            ],
            None,
        )
        .await?;
    // One JSON document per file.
    let crds = serde_json::Deserializer::from_str(&out)
        .into_iter::<CustomResourceDefinition>()
        .collect::<Result<Vec<_>, _>>()
        .context("parsing the CRDs of deploy/crds/ (kubectl create --dry-run=client -o json)")?;
    ensure!(!crds.is_empty(), "deploy/crds/ holds no CRD");
    Ok(crds)
}

fn printer_columns(crd: &CustomResourceDefinition, version: &str) -> Vec<Value> {
    crd.spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .and_then(|v| v.additional_printer_columns.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name, "type": c.type_, "jsonPath": c.json_path,
                "priority": c.priority.unwrap_or(0), "format": c.format.unwrap_or_default(),
            })
        })
        .collect()
}

#[tokio::test]
async fn every_crd_is_installed_and_kubectl_get_shows_its_printer_columns() -> Result<()> {
    // Reads BGPPeers at v1beta1: not while conversion.rs points the CRD at its controller.
    let _shared = crate::harness::WEBHOOK_OBJECTS.read().await;
    let started = Instant::now();
    let lab = Lab::connect().await?;
    let files = crd_files(&lab).await?;
    let crds = Api::<CustomResourceDefinition>::all(lab.client.clone());

    // Installed, Established, and the same as the files (the lab applied deploy/crds/ at
    // `up`: a regenerated CRD needs another `lab/cluster up`).
    let mut problems = Vec::new();
    for file in &files {
        let name = file.metadata.name.clone().context("a CRD without a name")?;
        let Some(server) = crds.get_opt(&name).await? else {
            problems.push(format!("{name}: not installed on the lab API server"));
            continue;
        };
        let conds = server
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        for want in ["Established", "NamesAccepted"] {
            let st = conds
                .iter()
                .find(|c| c.type_ == want)
                .map(|c| c.status.as_str());
            if st != Some("True") {
                problems.push(format!(
                    "{name}: condition {want} is {st:?}, not True: {conds:?}"
                ));
            }
        }
        let versions = |c: &CustomResourceDefinition| -> Vec<(String, bool, bool)> {
            c.spec
                .versions
                .iter()
                .map(|v| (v.name.clone(), v.served, v.storage))
                .collect()
        };
        if versions(file) != versions(&server) {
            problems.push(format!(
                "{name}: versions (name, served, storage) {:?} on the server, {:?} in deploy/crds/ \
                 (re-run lab/cluster up after regenerating the CRDs)",
                versions(&server),
                versions(file)
            ));
        }
        for v in &file.spec.versions {
            if printer_columns(file, &v.name) != printer_columns(&server, &v.name) {
                problems.push(format!(
                    "{name} {}: the server's printer columns differ from deploy/crds/ \
                     (re-run lab/cluster up): server {:?}, file {:?}",
                    v.name,
                    printer_columns(&server, &v.name),
                    printer_columns(file, &v.name)
                ));
            }
        }
        let cats = file.spec.names.categories.clone().unwrap_or_default();
        if !cats.iter().any(|c| c == "metallb") {
            problems.push(format!("{name}: not in the category `metallb` ({cats:?})"));
        }
    }
    let file_names: BTreeSet<String> = files
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    for c in crds.list(&Default::default()).await? {
        let n = c.metadata.name.unwrap_or_default();
        if c.spec.group == "metallb.io" && !file_names.contains(&n) {
            problems.push(format!("{n}: on the server but not in deploy/crds/"));
        }
    }
    if !problems.is_empty() {
        bail!("CRD problems:\n  {}", problems.join("\n  "));
    }

    // One object of each kind, read back at every served version: through the server's
    // Table (what kubectl asks for) and through kubectl's own output.
    let ns = lab.test_namespace("crds").await?;
    let mut checked = Vec::new();
    for crd in &files {
        let kind = &crd.spec.names.kind;
        let plural = &crd.spec.names.plural;
        let group = &crd.spec.group;
        let name = format!("sample-{}", kind.to_lowercase());
        create_sample(&lab.client, &ns.name, kind, plural, &name).await?;
        for v in crd.spec.versions.iter().filter(|v| v.served) {
            let columns = v.additional_printer_columns.clone().unwrap_or_default();
            let ar = resource(&format!("{group}/{}", v.name), kind, plural);
            let obj = Api::<DynamicObject>::namespaced_with(lab.client.clone(), &ns.name, &ar)
                .get(&name)
                .await?;
            let obj = serde_json::to_value(&obj)?;
            let what = format!("{kind} {}/{name} at {}", ns.name, v.name);

            let path = format!(
                "/apis/{group}/{}/namespaces/{}/{plural}/{name}",
                v.name, ns.name
            );
            let table = get_table(&lab.client, &path).await?;
            let mut want_names = vec!["Name".to_string()];
            if columns.is_empty() {
                want_names.push("Age".into());
            } else {
                want_names.extend(columns.iter().map(|c| c.name.clone()));
            }
            let got_names: Vec<String> = table.columns.iter().map(|c| c.name.clone()).collect();
            ensure!(
                got_names == want_names,
                "{what}: the server's table has columns {got_names:?}, want {want_names:?}"
            );
            ensure!(
                table.rows.len() == 1,
                "{what}: {} table rows",
                table.rows.len()
            );
            let cells = &table.rows[0].cells;
            ensure!(
                cells[0] == Value::String(name.clone()),
                "{what}: NAME cell {:?}",
                cells[0]
            );
            for (i, c) in columns.iter().enumerate() {
                let cell = &cells[i + 1];
                if c.type_ == "date" {
                    ensure!(
                        cell.as_str().is_some_and(is_age),
                        "{what}: column {:?} ({}) shows {cell:?}, not an age",
                        c.name,
                        c.json_path
                    );
                    continue;
                }
                let value = json_path(&obj, &c.json_path)?.with_context(|| {
                    format!(
                        "{what}: the sample leaves printer column {:?} ({}) empty: give it a \
                         value in e2e/tests/e2e/samples.rs",
                        c.name, c.json_path
                    )
                })?;
                let want = expected_cell(value, &c.type_);
                ensure!(
                    *cell == want,
                    "{what}: column {:?} ({}) is {cell:?} in the server's table, want {want:?}",
                    c.name,
                    c.json_path
                );
            }

            // kubectl, the lab's, both default and wide: headers (upper case), then the
            // cells; priority > 0 only with -o wide.
            let res = format!("{plural}.{}.{group}", v.name);
            for wide in [false, true] {
                let mut args = vec!["get", res.as_str(), "-n", ns.name.as_str(), name.as_str()];
                if wide {
                    args.extend(["-o", "wide"]);
                }
                let out = lab.kubectl_ok(&args, None).await?;
                let (headers, rows) = parse_text_table(&out)?;
                let shown: Vec<usize> = (0..table.columns.len())
                    .filter(|&i| wide || table.columns[i].priority == 0)
                    .collect();
                let want_headers: Vec<String> = shown
                    .iter()
                    .map(|&i| table.columns[i].name.to_uppercase())
                    .collect();
                ensure!(
                    headers == want_headers,
                    "kubectl get {} (wide: {wide}): headers {headers:?}, want {want_headers:?}:\n{out}",
                    res
                );
                ensure!(
                    rows.len() == 1,
                    "kubectl get {res}: {} rows:\n{out}",
                    rows.len()
                );
                for (k, &i) in shown.iter().enumerate() {
                    let got = &rows[0][k];
                    let ok = if table.columns[i].type_ == "date" {
                        is_age(got)
                    } else {
                        *got == rendered(&cells[i])
                    };
                    ensure!(
                        ok,
                        "kubectl get {res} (wide: {wide}): column {} shows {got:?}, the server's \
                         cell is {:?}:\n{out}",
                        want_headers[k],
                        cells[i]
                    );
                }
                if wide {
                    println!("kubectl get {res} -o wide:\n{out}");
                }
            }
            checked.push(format!("{kind} {} ({} columns)", v.name, columns.len()));
        }
    }
    ns.delete().await?;
    println!(
        "checked {} kinds/versions in {:.1} s: {}",
        checked.len(),
        started.elapsed().as_secs_f64(),
        checked.join(", ")
    );
    Ok(())
}

#[tokio::test]
async fn kubectl_get_metallb_lists_objects_of_every_kind() -> Result<()> {
    let lab = Lab::connect().await?;
    let files = crd_files(&lab).await?;
    let ns = lab.test_namespace("category").await?;
    let mut want = BTreeSet::new();
    for crd in &files {
        let kind = crd.spec.names.kind.clone();
        let name = format!("cat-{}", kind.to_lowercase());
        create_sample(&lab.client, &ns.name, &kind, &crd.spec.names.plural, &name).await?;
        want.insert((kind, name));
    }

    // What a user types; every kind's table is printed, with this namespace's rows.
    let human = lab.kubectl_ok(&["get", "metallb", "-A"], None).await?;
    println!("kubectl get metallb -A:\n{human}");
    for crd in &files {
        let row = format!(
            "{}.{}/cat-{}",
            crd.spec.names.kind.to_lowercase(),
            crd.spec.group,
            crd.spec.names.kind.to_lowercase()
        );
        ensure!(
            human
                .lines()
                .any(|l| l.starts_with(&ns.name) && l.split_whitespace().nth(1) == Some(&row)),
            "kubectl get metallb -A shows no row `{} {row}`:\n{human}",
            ns.name
        );
    }
    // The same through machine-readable columns: exactly one object of every kind here.
    let out = lab
        .kubectl_ok(
            &[
                "get",
                "metallb",
                "-A",
                "--no-headers",
                "-o",
                "custom-columns=KIND:.kind,NAMESPACE:.metadata.namespace,NAME:.metadata.name",
            ],
            None,
        )
        .await?;
    let got: BTreeSet<(String, String)> = out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == ns.name).then(|| (f[0].to_string(), f[2].to_string()))
        })
        .collect();
    ensure!(
        got == want,
        "kubectl get metallb -A lists {got:?} in {}, want {want:?}",
        ns.name
    );
    ns.delete().await?;
    Ok(())
}
