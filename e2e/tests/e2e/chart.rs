//! charts/metallb: deploy/ is the chart rendered (one source for the manifests), and what
//! the chart renders, with its defaults and with a MetalLB user's values file, is accepted
//! by the lab's API server (`kubectl apply --dry-run=server`).
//!
//! Helm is the one `lab/build-helm` builds (`scripts/setup` does), or `$HELM`.
//! Regenerate deploy/ after changing the chart:
//! `METALLB_UPDATE_DEPLOY=1 cargo test --manifest-path e2e/Cargo.toml --test e2e chart::`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use e2e::Lab;

const REGENERATE: &str =
    "METALLB_UPDATE_DEPLOY=1 cargo test --manifest-path e2e/Cargo.toml --test e2e chart::";

/// The chart's templates whose output deploy/ holds, at the same path under deploy/.
const DEPLOY_TEMPLATES: &[&str] = &[
    "controller.yaml",
    "speaker.yaml",
    "webhook.yaml",
    "rbac/controller.yaml",
    "rbac/speaker.yaml",
    "rbac/metrics-reader.yaml",
    "rbac/serviceaccounts.yaml",
];

/// Templates rendered with the defaults that deploy/ leaves out, and why.
const NOT_IN_DEPLOY: &[(&str, &str)] = &[(
    "crds.yaml",
    "the CRDs are deploy/crds/ itself (generated from the Rust types)",
)];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

/// Helm: `$HELM`, else what `lab/build-helm` built. `None` (with a message) when missing
/// and METALLB_TEST_ALLOW_SKIP=1; an error otherwise.
fn helm() -> Result<Option<PathBuf>> {
    let path = match std::env::var_os("HELM").filter(|v| !v.is_empty()) {
        Some(h) => PathBuf::from(h),
        None => {
            let out = std::process::Command::new(repo().join("lab/build-helm"))
                .arg("path")
                .output()
                .context("running lab/build-helm path")?;
            ensure!(out.status.success(), "lab/build-helm path failed");
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    if path.is_file() {
        return Ok(Some(path));
    }
    let msg = format!(
        "no helm at {}: build it with lab/build-helm (scripts/setup does), or set HELM",
        path.display()
    );
    if std::env::var("METALLB_TEST_ALLOW_SKIP").as_deref() == Ok("1") {
        eprintln!("skipped (METALLB_TEST_ALLOW_SKIP=1): {msg}");
        return Ok(None);
    }
    bail!("{msg}")
}

/// `helm template` of charts/metallb (stdout; Helm's note about the CRD link on stderr is
/// dropped, anything else there fails).
fn render(helm: &Path, release: &str, args: &[&str]) -> Result<String> {
    let out = std::process::Command::new(helm)
        .current_dir(repo())
        .args([
            "template",
            release,
            "charts/metallb",
            "--namespace",
            "metallb-system",
        ])
        .args(args)
        .output()
        .context("running helm template")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success(),
        "helm template {args:?} failed: {stderr}"
    );
    let unexpected: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("found symbolic link in path"))
        .collect();
    ensure!(
        unexpected.is_empty(),
        "helm template {args:?} warned:\n{}",
        unexpected.join("\n")
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// The rendered documents grouped by template (path under templates/), in order.
fn by_template(rendered: &str) -> Result<BTreeMap<String, Vec<String>>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for doc in rendered.split("\n---\n") {
        let doc = doc.strip_prefix("---\n").unwrap_or(doc);
        if doc.trim().is_empty() {
            continue;
        }
        let (first, rest) = doc.split_once('\n').unwrap_or((doc, ""));
        let Some(source) = first.strip_prefix("# Source: metallb/templates/") else {
            bail!("a rendered document without its `# Source:` line: {first}");
        };
        out.entry(source.to_string())
            .or_default()
            .push(rest.trim_end().to_string());
    }
    Ok(out)
}

/// What deploy/<template> holds: a header, then the template's documents.
fn deploy_file(template: &str, docs: &[String]) -> String {
    format!(
        "# GENERATED from charts/metallb/templates/{template} by `helm template` with\n\
         # charts/deploy-values.yaml: edit the chart, then run\n# {REGENERATE}\n{}\n",
        docs.join("\n---\n")
    )
}

#[test]
fn deploy_is_the_chart_rendered() -> Result<()> {
    let Some(helm) = helm()? else { return Ok(()) };
    let rendered = render(&helm, "metallb-rs", &["-f", "charts/deploy-values.yaml"])?;
    let templates = by_template(&rendered)?;
    let unexpected: Vec<&String> = templates
        .keys()
        .filter(|t| {
            !DEPLOY_TEMPLATES.contains(&t.as_str()) && !NOT_IN_DEPLOY.iter().any(|(n, _)| n == t)
        })
        .collect();
    ensure!(
        unexpected.is_empty(),
        "the chart renders {unexpected:?}, which neither go to deploy/ nor are left out with a \
         reason: add them to DEPLOY_TEMPLATES or NOT_IN_DEPLOY"
    );
    let update = std::env::var("METALLB_UPDATE_DEPLOY").as_deref() == Ok("1");
    let mut stale = Vec::new();
    for t in DEPLOY_TEMPLATES {
        let docs = templates
            .get(*t)
            .with_context(|| format!("the chart renders nothing from templates/{t}"))?;
        let want = deploy_file(t, docs);
        let path = repo().join("deploy").join(t);
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            if update {
                std::fs::write(&path, &want)
                    .with_context(|| format!("writing {}", path.display()))?;
                println!("rewrote deploy/{t}");
            } else {
                stale.push(format!("deploy/{t}"));
            }
        }
    }
    ensure!(
        stale.is_empty(),
        "deploy/ is not the chart rendered: {stale:?} differ from charts/metallb's output.\n\
         Regenerate with: {REGENERATE}"
    );
    // The CRDs the chart installs are deploy/crds/, every file.
    let crds = templates.get("crds.yaml").context("no CRDs rendered")?;
    let files = std::fs::read_dir(repo().join("deploy/crds"))?.count();
    ensure!(
        crds.len() == files,
        "the chart renders {} CRDs, deploy/crds/ holds {files}",
        crds.len()
    );
    Ok(())
}

/// The chart's appVersion: the images' default tag.
pub fn app_version() -> Result<String> {
    let text = std::fs::read_to_string(repo().join("charts/metallb/Chart.yaml"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .context("charts/metallb/Chart.yaml has no appVersion")
}

/// The images scripts/images builds are tagged with the workspace version: the chart's
/// appVersion (their default tag) and version must be that version.
#[test]
fn chart_version_is_the_workspace_version() -> Result<()> {
    let cargo = std::fs::read_to_string(repo().join("Cargo.toml"))?;
    let workspace = cargo
        .split("[workspace.package]")
        .nth(1)
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("version = ")))
        .map(|v| v.trim().trim_matches('"').to_string())
        .context("Cargo.toml has no [workspace.package] version")?;
    let chart = std::fs::read_to_string(repo().join("charts/metallb/Chart.yaml"))?;
    let version = chart
        .lines()
        .find_map(|l| l.strip_prefix("version:"))
        .map(|v| v.trim().to_string())
        .context("charts/metallb/Chart.yaml has no version")?;
    ensure!(
        app_version()? == workspace && version == workspace,
        "charts/metallb/Chart.yaml: version {version} and appVersion {} must be the workspace \
         version {workspace} (the images' tag)",
        app_version()?
    );
    Ok(())
}

/// `kubectl apply --dry-run=server` of a render: every object accepted, no warning but the
/// one about objects the lab created without kubectl apply.
async fn server_dry_run(lab: &Lab, what: &str, rendered: &str) -> Result<usize> {
    let out = lab
        .kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(rendered))
        .await?;
    let ok = out.status.success();
    let stdout = out.stdout.clone();
    let stderr = out.stderr.clone();
    ensure!(
        ok,
        "{what}: kubectl apply --dry-run=server failed:\n{stdout}{stderr}"
    );
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            !l.trim().is_empty()
                && !l.contains("is missing the kubectl.kubernetes.io/last-applied-configuration")
        })
        .collect();
    ensure!(
        warnings.is_empty(),
        "{what}: the server dry run warned:\n{}",
        warnings.join("\n")
    );
    let n = stdout
        .lines()
        .filter(|l| l.ends_with("(server dry run)"))
        .count();
    let docs = rendered
        .split("\n---\n")
        .filter(|d| d.lines().any(|l| l.starts_with("kind:")))
        .count();
    ensure!(
        n == docs,
        "{what}: {docs} objects rendered, the server dry run reported {n}:\n{stdout}"
    );
    Ok(n)
}

#[tokio::test]
async fn chart_passes_kubectl_apply_dry_run_server() -> Result<()> {
    let lab = Lab::connect().await?;
    let Some(helm) = helm()? else { return Ok(()) };
    let defaults = render(&helm, "metallb", &[])?;
    let n = server_dry_run(&lab, "the chart's defaults", &defaults).await?;
    println!("defaults: {n} objects accepted");
    ensure!(n >= 20, "the defaults render only {n} objects");

    // A MetalLB user's values file. The lab has no Prometheus Operator (no ServiceMonitor
    // or PrometheusRule CRD), so the ServiceMonitors and the rules are off here
    // (scripts/test lints them on).
    let upstream = render(
        &helm,
        "metallb",
        &[
            "-f",
            "charts/metallb/tests/upstream-values.yaml",
            "--set",
            "prometheus.serviceMonitor.enabled=false",
            "--set",
            "prometheus.prometheusRule.enabled=false",
        ],
    )?;
    for want in [
        "image: registry.example/metallb-rs/controller:0.1.0",
        "- --lb-class=metallb",
        "- --ignore-exclude-lb",
        "failurePolicy: Ignore",
        "secretName: metallb-memberlist-key",
        "name: metallb-speaker-sa",
        "value: \"7947\"",
        "priorityClassName: \"system-node-critical\"",
        // networkpolicies.enabled and defaultDeny: validated by the dry run below
        "kind: NetworkPolicy",
        "name: default-deny",
    ] {
        ensure!(
            upstream.contains(want),
            "the upstream values file's render lacks `{want}`"
        );
    }
    let n = server_dry_run(&lab, "a MetalLB user's values file", &upstream).await?;
    println!("upstream values: {n} objects accepted");

    // With the ServiceMonitor and the rules on (lint only: no CRD here), they render.
    let with_sm = render(
        &helm,
        "metallb",
        &["-f", "charts/metallb/tests/upstream-values.yaml"],
    )?;
    for want in [
        "kind: ServiceMonitor",
        "kind: PrometheusRule",
        "alert: MetalLBAddressPoolUsage75Percent",
        "name: metallb-controller-monitor-service",
        "name: metallb:metrics-reader",
    ] {
        ensure!(
            with_sm.contains(want),
            "with prometheus.serviceMonitor.enabled the render lacks `{want}`"
        );
    }
    Ok(())
}

#[test]
fn chart_fails_where_metallbs_chart_fails() -> Result<()> {
    let Some(helm) = helm()? else { return Ok(()) };
    for (set, want) in [
        (
            "configInline.foo=bar",
            "configInline is no longer supported",
        ),
        (
            "speaker.memberlist.enabled=false,speaker.nodeSelector.a=b",
            "nodeSelector must be empty when memberlist is disabled",
        ),
        (
            "prometheus.serviceMonitor.enabled=true,prometheus.serviceAccount=p,prometheus.namespace=m,prometheus.podMonitor.enabled=true",
            "cannot both be set",
        ),
        (
            "prometheus.serviceMonitor.enabled=true",
            ".Values.prometheus.serviceAccount must be defined",
        ),
        (
            "crds.validationFailurePolicy=Sometimes",
            "must be Fail or Ignore",
        ),
    ] {
        let out = std::process::Command::new(&helm)
            .current_dir(repo())
            .args(["template", "metallb", "charts/metallb", "--set", set])
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && stderr.contains(want),
            "helm template --set {set}: expected a failure with `{want}`, got {}: {stderr}",
            out.status
        );
    }
    Ok(())
}

/// `helm install --dry-run=client` against the lab (Helm asks the API server its version)
/// and its NOTES. The CRDs are off (the lab's exist outside any release) and so are the
/// Prometheus Operator's kinds (no CRD in the lab).
fn install_notes(helm: &Path, kubeconfig: &Path, values: &[&str]) -> Result<String> {
    let out = std::process::Command::new(helm)
        .current_dir(repo())
        .env("KUBECONFIG", kubeconfig)
        .args([
            "install",
            "metallb",
            "charts/metallb",
            "--namespace",
            "lb",
            "--dry-run=client",
            "--set",
            "crds.enabled=false",
        ])
        .args(values)
        .args([
            "--set",
            "prometheus.serviceMonitor.enabled=false",
            "--set",
            "prometheus.prometheusRule.enabled=false",
        ])
        .output()
        .context("running helm install --dry-run=client")?;
    ensure!(
        out.status.success(),
        "helm install --dry-run=client {values:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout)?;
    let (_, notes) = stdout
        .split_once("\nNOTES:\n")
        .context("helm install --dry-run=client printed no NOTES")?;
    Ok(notes.to_string())
}

/// The NOTES name every key of MetalLB's chart that a values file sets and metallb-rs
/// ignores (scripts/test checks the same list in `helm template`'s comments), and the
/// defaults warn of nothing.
#[tokio::test]
async fn install_notes_name_the_ignored_values() -> Result<()> {
    let _lab = Lab::connect().await?;
    let env = e2e::LabEnv::from_env()?;
    let Some(helm) = helm()? else { return Ok(()) };
    let notes = install_notes(
        &helm,
        &env.kubeconfig,
        &["-f", "charts/metallb/tests/upstream-values.yaml"],
    )?;
    ensure!(
        notes.contains("WARNING: these values of MetalLB's chart are set but have no effect"),
        "the NOTES of a MetalLB values file carry no warning:\n{notes}"
    );
    for key in [
        "prometheus.rbacProxy:",
        "prometheus.secureMetricsPort:",
        "tls.cipherSuites:",
        "tls.curvePreferences:",
        "speaker.frr.*:",
    ] {
        ensure!(
            notes.contains(&format!("\n- {key}")),
            "the NOTES do not name `{key}`:\n{notes}"
        );
    }
    ensure!(
        !notes.contains("\n- networkpolicies"),
        "the NOTES warn about networkpolicies, which the chart honours:\n{notes}"
    );
    let defaults = install_notes(&helm, &env.kubeconfig, &[])?;
    ensure!(
        !defaults.contains("WARNING") && !defaults.contains("\n- "),
        "the defaults' NOTES warn:\n{defaults}"
    );
    Ok(())
}
