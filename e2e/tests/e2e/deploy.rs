//! deploy/: accepted by the lab API server (`kubectl apply --dry-run=server`), complete
//! (kustomization), and as specified (two controllers, RollingUpdate, a PDB, hostNetwork, downward API, capabilities,
//! security contexts, least-privilege RBAC).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use e2e::Lab;
use serde_json::Value;

const ALLOWED_WARNING: &str =
    "is missing the kubectl.kubernetes.io/last-applied-configuration annotation";

/// Every manifest under deploy/ (relative to deploy/), but the kustomization itself.
fn manifests(dir: &Path, rel: &str, out: &mut BTreeSet<String>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let rel_name = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if e.file_type()?.is_dir() {
            manifests(&e.path(), &rel_name, out)?;
        } else if (name.ends_with(".yaml") || name.ends_with(".yml"))
            && name != "kustomization.yaml"
        {
            out.insert(rel_name);
        }
    }
    Ok(())
}

/// The `resources:` of deploy/kustomization.yaml (a plain list; no YAML parser needed).
fn kustomization_resources(repo: &Path) -> Result<BTreeSet<String>> {
    let text = std::fs::read_to_string(repo.join("deploy/kustomization.yaml"))?;
    let mut in_resources = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("resources:") {
            in_resources = true;
        } else if in_resources {
            if let Some(r) = line.strip_prefix("- ") {
                out.insert(r.trim().to_string());
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                in_resources = false;
            }
        }
    }
    Ok(out)
}

#[test]
fn kustomization_lists_every_manifest() -> Result<()> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("repo")?;
    let mut files = BTreeSet::new();
    manifests(&repo.join("deploy"), "", &mut files)?;
    let listed = kustomization_resources(repo)?;
    let missing: Vec<_> = files.difference(&listed).collect();
    let extra: Vec<_> = listed.difference(&files).collect();
    ensure!(
        missing.is_empty() && extra.is_empty(),
        "deploy/kustomization.yaml is out of date: add {missing:?}, remove {extra:?}"
    );
    Ok(())
}

#[tokio::test]
async fn deploy_passes_kubectl_apply_dry_run_server() -> Result<()> {
    // Applies the BGPPeer CRD and the webhook configuration (dry run): not while another
    // test has changed them.
    let _exclusive = crate::harness::WEBHOOK_OBJECTS.write().await;
    let lab = Lab::connect().await?;
    // What the manifests hold (kind.group/name), as kubectl reads them.
    let want: BTreeSet<String> = lab
        .kubectl_ok(
            &[
                "create",
                "--dry-run=client",
                "--validate=false",
                "-o",
                "name",
                "-k",
                "deploy/",
            ],
            None,
        )
        .await?
        .lines()
        .map(str::to_string)
        .collect();
    ensure!(
        want.len() >= 20,
        "kubectl reads only {} objects from deploy/: {want:?}",
        want.len()
    );

    let out = lab
        .kubectl(&["apply", "--dry-run=server", "-k", "deploy/"], None)
        .await?
        .ok()?;
    println!("{}{}", out.stdout, out.stderr);
    let mut got = BTreeSet::new();
    for line in out.stdout.lines() {
        let Some(obj) = line.strip_suffix(" (server dry run)") else {
            bail!("kubectl apply --dry-run=server printed an unexpected line: {line}");
        };
        got.insert(
            obj.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string(),
        );
    }
    ensure!(
        got == want,
        "the server dry run reported {got:?}, deploy/ holds {want:?}"
    );
    // Warnings (deprecations, PodSecurity, unknown fields) are failures; the only one
    // allowed is about objects the lab created with server-side apply.
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains(ALLOWED_WARNING))
        .collect();
    ensure!(
        warnings.is_empty(),
        "kubectl apply --dry-run=server -k deploy/ warned:\n{}",
        warnings.join("\n")
    );

    // And server-side apply, the way a GitOps tool would apply it. Forcing conflicts: the
    // lab installed the BGPPeer CRD with conversion strategy None (lab/cluster), which
    // deploy/ sets to Webhook (a dry run: nothing changes).
    let ssa = lab
        .kubectl(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--dry-run=server",
                "--field-manager=metallb-rs-e2e",
                "-k",
                "deploy/",
            ],
            None,
        )
        .await?
        .ok()?;
    ensure!(
        ssa.stderr.trim().is_empty(),
        "server-side apply dry run warned:\n{}",
        ssa.stderr
    );
    ensure!(
        ssa.stdout.lines().count() == want.len(),
        "server-side apply dry run:\n{}",
        ssa.stdout
    );
    Ok(())
}

fn find<'a>(items: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    items
        .iter()
        .find(|i| i["kind"] == kind && i["metadata"]["name"] == name)
        .with_context(|| format!("deploy/ has no {kind} {name}"))
}

fn env_field(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["valueFrom"]["fieldRef"]["fieldPath"].as_str())
        .map(str::to_string)
}

/// Whether an RBAC rule is exactly `create` on TokenReviews or SubjectAccessReviews: what
/// the metrics server (kube-metrics) needs to authenticate and authorise a scrape. Such
/// reviews are answered, never stored.
fn is_metrics_review(r: &Value) -> bool {
    let one = |f: &str| {
        let s = strings(&r[f]);
        if s.len() == 1 {
            s.into_iter().next()
        } else {
            None
        }
    };
    one("verbs").as_deref() == Some("create")
        && matches!(
            (one("apiGroups").as_deref(), one("resources").as_deref()),
            (Some("authentication.k8s.io"), Some("tokenreviews"))
                | (Some("authorization.k8s.io"), Some("subjectaccessreviews"))
        )
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The probe's path and port, the port resolved through the container's named ports.
fn probe(container: &Value, which: &str) -> (String, i64) {
    let get = &container[which]["httpGet"];
    let port = match &get["port"] {
        Value::Number(n) => n.as_i64().unwrap_or_default(),
        Value::String(name) => container["ports"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name.as_str()))
            .and_then(|p| p["containerPort"].as_i64())
            .unwrap_or_default(),
        _ => 0,
    };
    (get["path"].as_str().unwrap_or_default().to_string(), port)
}

#[tokio::test]
async fn deploy_objects_are_as_specified() -> Result<()> {
    // As deploy_passes_kubectl_apply_dry_run_server.
    let _exclusive = crate::harness::WEBHOOK_OBJECTS.write().await;
    let lab = Lab::connect().await?;
    // The objects as the server would store them (defaults applied; conflicts forced, see
    // deploy_passes_kubectl_apply_dry_run_server).
    let out = lab
        .kubectl_ok(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--dry-run=server",
                "--field-manager=metallb-rs-e2e",
                "-k",
                "deploy/",
                "-o",
                "json",
            ],
            None,
        )
        .await?;
    let list: Value = serde_json::from_str(&out)?;
    let items = list["items"].as_array().context("a List")?.clone();
    let mut problems = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            problems.push(what);
        }
    };

    let ns = find(&items, "Namespace", "metallb-system")?;
    check(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged",
        "namespace metallb-system: Pod Security `privileged` (the speaker needs hostNetwork, NET_RAW)".into(),
    );

    // The controller.
    let d = find(&items, "Deployment", "metallb-rs-controller")?;
    check(
        d["metadata"]["namespace"] == "metallb-system",
        "controller in metallb-system".into(),
    );
    // Two controllers (a fenced Lease decides which allocates; both serve the webhooks),
    // rolled one at a time with a new one Ready first, and kept up through drains.
    check(
        d["spec"]["replicas"] == 2,
        format!("controller replicas 2, got {}", d["spec"]["replicas"]),
    );
    check(
        d["spec"]["strategy"]["type"] == "RollingUpdate"
            && d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0,
        format!(
            "controller strategy RollingUpdate with maxUnavailable 0, got {}",
            d["spec"]["strategy"]
        ),
    );
    let pdb = find(&items, "PodDisruptionBudget", "metallb-rs-controller")?;
    check(
        pdb["spec"]["minAvailable"] == 1
            && pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
                == "controller",
        format!(
            "controller PodDisruptionBudget minAvailable 1, got {}",
            pdb["spec"]
        ),
    );
    let pod = &d["spec"]["template"]["spec"];
    check(
        pod["serviceAccountName"] == "controller",
        "controller runs as ServiceAccount controller".into(),
    );
    let c = &pod["containers"][0];
    check(
        c["image"] == format!("metallb-rs/controller:{}", crate::chart::app_version()?),
        format!("controller image, got {}", c["image"]),
    );
    check(
        env_field(c, "METALLB_NAMESPACE").as_deref() == Some("metadata.namespace"),
        "controller env METALLB_NAMESPACE from metadata.namespace".into(),
    );
    check(
        env_field(c, "METALLB_POD_NAME").as_deref() == Some("metadata.name"),
        "controller env METALLB_POD_NAME from metadata.name".into(),
    );
    check(
        probe(c, "livenessProbe") == ("/healthz".into(), 17472),
        format!(
            "controller liveness /healthz:17472, got {:?}",
            probe(c, "livenessProbe")
        ),
    );
    check(
        probe(c, "readinessProbe") == ("/readyz".into(), 17472),
        format!(
            "controller readiness /readyz:17472, got {:?}",
            probe(c, "readinessProbe")
        ),
    );
    let sc = &c["securityContext"];
    check(
        pod["securityContext"]["runAsNonRoot"] == true || sc["runAsNonRoot"] == true,
        "controller runAsNonRoot".into(),
    );
    check(
        sc["readOnlyRootFilesystem"] == true,
        "controller readOnlyRootFilesystem".into(),
    );
    check(
        sc["allowPrivilegeEscalation"] == false,
        "controller allowPrivilegeEscalation false".into(),
    );
    check(
        strings(&sc["capabilities"]["drop"]) == BTreeSet::from(["ALL".to_string()]),
        "controller drops ALL capabilities".into(),
    );
    check(
        sc["capabilities"]["add"].is_null(),
        format!(
            "controller adds no capability, got {}",
            sc["capabilities"]["add"]
        ),
    );

    // The speaker.
    let ds = find(&items, "DaemonSet", "metallb-rs-speaker")?;
    check(
        ds["metadata"]["namespace"] == "metallb-system",
        "speaker in metallb-system".into(),
    );
    let pod = &ds["spec"]["template"]["spec"];
    check(pod["hostNetwork"] == true, "speaker hostNetwork".into());
    check(
        pod["dnsPolicy"] == "ClusterFirstWithHostNet",
        format!(
            "speaker dnsPolicy ClusterFirstWithHostNet, got {}",
            pod["dnsPolicy"]
        ),
    );
    check(
        pod["serviceAccountName"] == "speaker",
        "speaker runs as ServiceAccount speaker".into(),
    );
    let tolerates_cp = pod["tolerations"].as_array().is_some_and(|ts| {
        ts.iter().any(|t| {
            t["key"] == "node-role.kubernetes.io/control-plane" && t["operator"] == "Exists"
        })
    });
    check(tolerates_cp, "speaker tolerates control-plane nodes".into());
    let c = &pod["containers"][0];
    check(
        c["image"] == format!("metallb-rs/speaker:{}", crate::chart::app_version()?),
        format!("speaker image, got {}", c["image"]),
    );
    check(
        env_field(c, "METALLB_NODE_NAME").as_deref() == Some("spec.nodeName"),
        "speaker env METALLB_NODE_NAME from spec.nodeName".into(),
    );
    check(
        env_field(c, "METALLB_POD_NAME").as_deref() == Some("metadata.name"),
        "speaker env METALLB_POD_NAME from metadata.name".into(),
    );
    check(
        env_field(c, "METALLB_NAMESPACE").as_deref() == Some("metadata.namespace"),
        "speaker env METALLB_NAMESPACE from metadata.namespace".into(),
    );
    let sc = &c["securityContext"];
    check(
        strings(&sc["capabilities"]["add"])
            == BTreeSet::from(["NET_RAW".to_string(), "NET_BIND_SERVICE".to_string()]),
        format!(
            "speaker adds exactly NET_RAW and NET_BIND_SERVICE, got {}",
            sc["capabilities"]["add"]
        ),
    );
    check(
        strings(&sc["capabilities"]["drop"]) == BTreeSet::from(["ALL".to_string()]),
        "speaker drops ALL capabilities".into(),
    );
    check(sc["privileged"] != true, "speaker not privileged".into());
    check(
        pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
            || sc["seccompProfile"]["type"] == "RuntimeDefault",
        "speaker seccompProfile RuntimeDefault".into(),
    );
    check(
        sc["readOnlyRootFilesystem"] == true,
        "speaker readOnlyRootFilesystem".into(),
    );
    check(
        sc["allowPrivilegeEscalation"] == false,
        "speaker allowPrivilegeEscalation false".into(),
    );

    // RBAC: no wildcards; the speaker writes nothing cluster-wide but Events (and the
    // TokenReviews/SubjectAccessReviews of metrics scrapes, which are not stored).
    for i in items
        .iter()
        .filter(|i| i["kind"] == "ClusterRole" || i["kind"] == "Role")
    {
        let who = format!(
            "{} {}",
            i["kind"].as_str().unwrap_or_default(),
            i["metadata"]["name"].as_str().unwrap_or_default()
        );
        for r in i["rules"].as_array().into_iter().flatten() {
            for f in ["verbs", "resources", "apiGroups"] {
                check(
                    !strings(&r[f]).contains("*"),
                    format!("{who}: a wildcard in {f}: {r}"),
                );
            }
        }
    }
    let speaker_cr = find(&items, "ClusterRole", "metallb-rs:speaker")?;
    for r in speaker_cr["rules"].as_array().into_iter().flatten() {
        let writes = strings(&r["verbs"])
            .into_iter()
            .any(|v| !["get", "list", "watch"].contains(&v.as_str()));
        check(
            !writes
                || strings(&r["resources"]) == BTreeSet::from(["events".to_string()])
                || is_metrics_review(r),
            format!("ClusterRole metallb-rs:speaker writes cluster-wide: {r}"),
        );
    }
    // Both serve their metrics behind TokenReview + SubjectAccessReview.
    for name in ["metallb-rs:controller", "metallb-rs:speaker"] {
        let cr = find(&items, "ClusterRole", name)?;
        let reviews: BTreeSet<String> = cr["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| is_metrics_review(r))
            .flat_map(|r| strings(&r["resources"]))
            .collect();
        check(
            reviews
                == BTreeSet::from([
                    "subjectaccessreviews".to_string(),
                    "tokenreviews".to_string(),
                ]),
            format!(
                "ClusterRole {name} must allow create on tokenreviews and subjectaccessreviews (metrics authentication), has it on {reviews:?}"
            ),
        );
    }
    for (kind, name) in [
        ("ServiceAccount", "controller"),
        ("ServiceAccount", "speaker"),
        ("ClusterRoleBinding", "metallb-rs:controller"),
        ("ClusterRoleBinding", "metallb-rs:speaker"),
        ("RoleBinding", "metallb-rs:controller"),
        ("RoleBinding", "metallb-rs:speaker"),
    ] {
        find(&items, kind, name)?;
    }

    ensure!(
        problems.is_empty(),
        "deploy/ is not as specified:\n  {}",
        problems.join("\n  ")
    );
    Ok(())
}

#[tokio::test]
async fn controller_meets_the_restricted_pod_security_standard() -> Result<()> {
    let lab = Lab::connect().await?;
    let ns = lab.test_namespace("pss").await?;
    lab.kubectl_ok(
        &[
            "label",
            "namespace",
            &ns.name,
            "pod-security.kubernetes.io/warn=restricted",
            "pod-security.kubernetes.io/warn-version=latest",
        ],
        None,
    )
    .await?;
    for (file, want_violation) in [
        ("deploy/controller.yaml", false),
        ("deploy/speaker.yaml", true),
    ] {
        let json = lab
            .kubectl_ok(
                &[
                    "create",
                    "--dry-run=client",
                    "--validate=false",
                    "-o",
                    "json",
                    "-f",
                    file,
                ],
                None,
            )
            .await?;
        // The workload of the file (controller.yaml also holds the controller's Lease).
        let mut obj: Value = serde_json::Deserializer::from_str(&json)
            .into_iter::<Value>()
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .find(|o| matches!(o["kind"].as_str(), Some("Deployment" | "DaemonSet")))
            .with_context(|| format!("no Deployment or DaemonSet in {file}"))?;
        obj["metadata"]["namespace"] = Value::String(ns.name.clone());
        let out = lab
            .kubectl(
                &["create", "--dry-run=server", "-f", "-"],
                Some(&obj.to_string()),
            )
            .await?
            .ok()?;
        let violation = out
            .stderr
            .contains("would violate PodSecurity \"restricted:latest\"");
        if want_violation {
            // The speaker cannot be `restricted` (hostNetwork, NET_RAW): this shows that
            // the check above really warns.
            ensure!(
                violation && out.stderr.contains("hostNetwork"),
                "{file} in a `restricted` namespace: expected a PodSecurity warning about hostNetwork, got: {}",
                out.stderr
            );
        } else {
            ensure!(
                !violation && out.stderr.trim().is_empty(),
                "{file} violates the restricted Pod Security Standard:\n{}",
                out.stderr
            );
        }
    }
    ns.delete().await?;
    Ok(())
}

/// Socket operations the speaker needs, run by python3 (already a lab requirement) under
/// setpriv with a bounding set of exactly the given capabilities (as root in a container
/// with `drop: [ALL]` and `add:` those).
const SOCKET_OPS: &str = r#"
import errno, socket, struct
def run(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        # In use means the privilege check passed.
        print(name, "ok" if e.errno == errno.EADDRINUSE else errno.errorcode.get(e.errno, str(e.errno)))
def md5():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    addr = struct.pack("=HH4s", socket.AF_INET, 0, socket.inet_aton("192.0.2.1")) + bytes(120)
    key = b"lab-password"
    s.setsockopt(socket.IPPROTO_TCP, 14, addr + struct.pack("=BBHi", 0, 0, len(key), 0) + key.ljust(80, b"\0"))
def bind_dev():
    socket.socket().setsockopt(socket.SOL_SOCKET, 25, b"lo\0")
def rebind_dev():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, 25, b"lo\0"); s.setsockopt(socket.SOL_SOCKET, 25, b"\0")
def bgp_port():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 179))
def arp():
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
def ndp():
    socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x86DD))
def icmp6_raw():
    socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
def ttl():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255); s.setsockopt(socket.IPPROTO_IP, 21, 254)
def bfd_port():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind(("127.0.0.1", 3784))
for name, f in [("TCP_MD5SIG", md5), ("SO_BINDTODEVICE", bind_dev), ("SO_BINDTODEVICE-change", rebind_dev),
                ("bind-tcp-179", bgp_port), ("AF_PACKET-arp", arp), ("AF_PACKET-ipv6", ndp), ("raw-icmpv6", icmp6_raw),
                ("IP_TTL-IP_MINTTL", ttl), ("bind-udp-3784", bfd_port)]:
    run(name, f)
"#;

async fn socket_ops(caps: &[String]) -> Result<Vec<(String, String)>> {
    let mut bounding = String::from("-all");
    for c in caps {
        bounding.push_str(&format!(",+{}", c.to_lowercase()));
    }
    let out = tokio::process::Command::new("setpriv")
        .args([
            "--bounding-set",
            &bounding,
            "--",
            "python3",
            "-c",
            SOCKET_OPS,
        ])
        .output()
        .await
        .context("running setpriv (util-linux) and python3")?;
    ensure!(
        out.status.success(),
        "setpriv --bounding-set {bounding} python3 failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
        })
        .collect())
}

#[tokio::test]
async fn speaker_capabilities_cover_its_socket_options() -> Result<()> {
    let lab = Lab::connect().await?;
    ensure!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self")?) == 0,
        "this test needs root: it drops capabilities with setpriv (the lab needs root anyway)"
    );
    let json = lab
        .kubectl_ok(
            &[
                "create",
                "--dry-run=client",
                "--validate=false",
                "-o",
                "json",
                "-f",
                "deploy/speaker.yaml",
            ],
            None,
        )
        .await?;
    let ds: Value = serde_json::from_str(&json)?;
    let caps: Vec<String> = strings(
        &ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"],
    )
    .into_iter()
    .collect();
    let with = socket_ops(&caps).await?;
    println!("with {caps:?}: {with:?}");
    ensure!(
        with.len() >= 9,
        "the socket checks did not all run: {with:?}"
    );
    let denied: Vec<_> = with.iter().filter(|(_, r)| r != "ok").collect();
    ensure!(
        denied.is_empty(),
        "with the speaker's capabilities {caps:?} these are refused: {denied:?}"
    );

    // The control: without them, what needs them is refused (so the drop is real).
    let without = socket_ops(&[]).await?;
    println!("without capabilities: {without:?}");
    for need in [
        "SO_BINDTODEVICE-change",
        "bind-tcp-179",
        "AF_PACKET-arp",
        "AF_PACKET-ipv6",
        "raw-icmpv6",
    ] {
        let r = without
            .iter()
            .find(|(n, _)| n == need)
            .map(|(_, r)| r.as_str());
        if r == Some("ok") {
            bail!(
                "{need} succeeded with no capability at all: the check proves nothing ({without:?})"
            );
        }
    }
    Ok(())
}
