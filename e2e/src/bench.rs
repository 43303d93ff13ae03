//! What the bench binaries (`bench-bgp`, `bench-l2`, `bench-scale`) share: which
//! implementation a run measures, and where each one's binaries are.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};

/// The implementation a run measures: ours, or MetalLB v0.15.2 (`lab/build-metallb`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    Ours,
    Metallb,
}

impl Impl {
    /// The name in figures, files and `--impl`.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Ours => "ours",
            Impl::Metallb => "metallb",
        }
    }

    /// The value of `--impl`: `ours`, `metallb`, `both`, and `none` where `allow_none`
    /// (a run that only generates objects).
    pub fn parse_list(value: &str, allow_none: bool) -> anyhow::Result<Vec<Impl>> {
        Ok(match value {
            "ours" => vec![Impl::Ours],
            "metallb" => vec![Impl::Metallb],
            "both" => vec![Impl::Ours, Impl::Metallb],
            "none" if allow_none => vec![],
            v if allow_none => bail!("--impl {v}: ours, metallb, both or none"),
            v => bail!("--impl {v}: ours, metallb or both"),
        })
    }

    /// The controller's arguments in the benches (out of cluster, MetalLB's
    /// configuration in `cfg_ns`): ours with its health probe on loopback and no
    /// metrics port; MetalLB's without its webhook and certificate rotation.
    pub fn controller_args(self, cfg_ns: &str) -> Vec<String> {
        let args: &[&str] = match self {
            Impl::Ours => &[
                "--log-format",
                "text",
                "--health-probe-port",
                "7473",
                "--health-probe-bind-address",
                "127.0.0.1",
                "--port",
                "0",
            ],
            Impl::Metallb => &[
                "--namespace",
                cfg_ns,
                "--webhook-mode",
                "disabled",
                "--disable-cert-rotation",
                "--port",
                "7472",
                "--log-level",
                "info",
            ],
        };
        args.iter().map(|a| (*a).to_owned()).collect()
    }
}

/// Our binaries: `--ours-bin` when given, else the release directory of
/// `CARGO_TARGET_DIR` (else the repository's `target/`).
pub fn ours_bin_dir(repo: &Path, given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t).join("release"),
        None => repo.join("target/release"),
    })
}

/// MetalLB's binaries: `--metallb-bin` when given, else `lab/build-metallb bindir`
/// (which fails, saying why, when they are not built).
pub fn metallb_bin_dir(repo: &Path, given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = given {
        return Ok(dir);
    }
    let script = repo.join("lab/build-metallb");
    let out = std::process::Command::new(&script)
        .arg("bindir")
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    ensure!(
        out.status.success(),
        "{} bindir: {}: {}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let dir = String::from_utf8(out.stdout)?;
    let dir = dir.lines().last().unwrap_or_default().trim();
    ensure!(
        !dir.is_empty(),
        "{} bindir printed nothing",
        script.display()
    );
    Ok(PathBuf::from(dir))
}

/// A ServiceAccount `name` in `ns` bound to cluster-admin (the same rights for both
/// implementations a bench compares) and a kubeconfig with its token in `dir`; returns
/// (kubeconfig, audit user) once the API server allows it to patch Service status.
pub async fn admin_account(
    lab: &crate::Lab,
    ns: &str,
    dir: &Path,
    name: &str,
) -> anyhow::Result<(PathBuf, String)> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kube::api::{Api, PostParams};
    Api::<ServiceAccount>::namespaced(lab.client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?,
        )
        .await?;
    Api::<ClusterRoleBinding>::all(lab.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("bench:{ns}:{name}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
            }))?,
        )
        .await?;
    let user = format!("system:serviceaccount:{ns}:{name}");
    lab.wait_allowed(&user, "patch", "services/status", None)
        .await?;
    let kc = lab.service_account_kubeconfig(dir, ns, name).await?;
    Ok((kc, user))
}

/// Creates the metallb.io object `kind`/`name` in `ns` with `spec` (BGPPeer at v1beta2,
/// the others at v1beta1).
pub async fn create_metallb(
    lab: &crate::Lab,
    ns: &str,
    kind: &str,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<()> {
    use kube::api::{DynamicObject, PostParams};
    let version = if kind == "BGPPeer" {
        "v1beta2"
    } else {
        "v1beta1"
    };
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": format!("metallb.io/{version}"),
        "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))?;
    lab.metallb(&lab.client, ns, kind)
        .create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("creating {kind} {name}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impl_lists() {
        assert_eq!(
            Impl::parse_list("both", false).unwrap(),
            [Impl::Ours, Impl::Metallb]
        );
        assert_eq!(Impl::parse_list("metallb", false).unwrap(), [Impl::Metallb]);
        assert!(Impl::parse_list("none", true).unwrap().is_empty());
        let e = Impl::parse_list("none", false).unwrap_err().to_string();
        assert_eq!(e, "--impl none: ours, metallb or both");
        assert!(Impl::parse_list("frr", true).is_err());
    }

    #[test]
    fn ours_given_wins() {
        let given = PathBuf::from("/opt/x");
        assert_eq!(ours_bin_dir(Path::new("/repo"), Some(given.clone())), given);
    }
}
