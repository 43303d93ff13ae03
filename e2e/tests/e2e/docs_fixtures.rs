//! MetalLB's documented configuration examples (config/tests/fixtures/metallb-docs: spec-less
//! advertisements, an L2 and a BGP setup, BFD, communities, pools) apply unchanged to the
//! real API server with the CRDs of deploy/crds, and read back as MetalLB's CRDs store them
//! and as the daemons decode them.

use anyhow::{Context, Result, ensure};
use config::api::{v1beta1, v1beta2};
use kube::api::{Api, ListParams};
use std::path::PathBuf;

use e2e::Lab;

fn fixtures(lab: &Lab) -> Result<Vec<(String, String)>> {
    let dir = lab.repo().join("config/tests/fixtures/metallb-docs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"));
    files.sort();
    ensure!(files.len() >= 8, "too few fixtures in {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            Ok((name, std::fs::read_to_string(&p)?))
        })
        .collect()
}

#[tokio::test]
async fn metallb_documentation_examples_apply_unchanged() -> Result<()> {
    let lab = Lab::connect().await?;
    for (file, text) in fixtures(&lab)? {
        // Each file in a namespace of its own (the examples reuse names).
        let ns = lab.test_namespace("docs").await?;
        let text = text.replace(
            "namespace: metallb-system",
            &format!("namespace: {}", ns.name),
        );
        let out = lab
            .kubectl(&["apply", "--validate=strict", "-f", "-"], Some(&text))
            .await?;
        ensure!(
            out.status.success() && out.stderr.trim().is_empty(),
            "{file}: kubectl apply refused or warned:\nstdout: {}\nstderr: {}",
            out.stdout,
            out.stderr
        );
        // Read back as the controller and the speaker decode them.
        let client = lab.client.clone();
        let l2: Vec<v1beta1::L2Advertisement> = Api::namespaced(client.clone(), &ns.name)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("{file}: listing L2Advertisements as typed objects"))?
            .items;
        let bgp: Vec<v1beta1::BGPAdvertisement> = Api::namespaced(client.clone(), &ns.name)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("{file}: listing BGPAdvertisements as typed objects"))?
            .items;
        let bfd: Vec<v1beta1::BFDProfile> = Api::namespaced(client.clone(), &ns.name)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("{file}: listing BFDProfiles as typed objects"))?
            .items;
        let comm: Vec<v1beta1::Community> = Api::namespaced(client.clone(), &ns.name)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("{file}: listing Communities as typed objects"))?
            .items;
        let pools: Vec<v1beta1::IPAddressPool> = Api::namespaced(client.clone(), &ns.name)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("{file}: listing IPAddressPools as typed objects"))?
            .items;
        let peers: Vec<v1beta2::BGPPeer> = Api::namespaced(client.clone(), &ns.name)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("{file}: listing BGPPeers as typed objects"))?
            .items;
        let listed = l2.len() + bgp.len() + bfd.len() + comm.len() + pools.len() + peers.len();
        let documents =
            text.matches("\napiVersion:").count() + usize::from(text.starts_with("apiVersion:"));
        ensure!(
            listed == documents,
            "{file}: {documents} objects applied, {listed} read back"
        );
        match file.as_str() {
            "l2-spec-less.yaml" => {
                let [ad] = l2.as_slice() else {
                    anyhow::bail!("{file}: {l2:?}")
                };
                ensure!(
                    ad.spec == v1beta1::L2AdvertisementSpec::default(),
                    "{file}: {ad:?}"
                );
            }
            "bgp-spec-less.yaml" => {
                let [ad] = bgp.as_slice() else {
                    anyhow::bail!("{file}: {bgp:?}")
                };
                // No spec, so no defaults inside it either: all pools, all peers, /32.
                ensure!(
                    ad.spec == v1beta1::BGPAdvertisementSpec::default(),
                    "{file}: {ad:?}"
                );
            }
            "bfd.yaml" => {
                ensure!(
                    bfd.len() == 2 && comm.len() == 1,
                    "{file}: {bfd:?} {comm:?}"
                );
            }
            "pool-advanced.yaml" => {
                // `autoAssign: null` is pruned and defaulted as MetalLB's CRD does.
                let auto = lab
                    .kubectl_ok(
                        &[
                            "get",
                            "ipaddresspool",
                            "cheap",
                            "-n",
                            &ns.name,
                            "-o",
                            "jsonpath={.spec.autoAssign}",
                        ],
                        None,
                    )
                    .await?;
                ensure!(
                    auto == "true",
                    "{file}: autoAssign of `cheap` is {auto:?}, want true"
                );
            }
            _ => {}
        }
        ns.delete().await?;
    }
    Ok(())
}
