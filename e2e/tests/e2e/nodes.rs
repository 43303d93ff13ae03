//! A process in each node namespace reaches the lab's API server through the node's own
//! 127.0.0.1 (the relay of `Lab::node_network`), with the speaker ServiceAccount's
//! token: how the speaker DaemonSet's Pods will run in the lab. Needs root (network
//! namespaces); takes the test kit's serial lock.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::process::Process;
use e2e::{Lab, METALLB_NAMESPACE};
use testkit::LabOptions;

#[tokio::test]
async fn a_process_in_each_node_namespace_reaches_the_api_server_as_the_speaker() -> Result<()> {
    let lab = Lab::connect().await?;
    lab.apply_deploy_rbac().await?;
    let dir = Process::scratch_dir("nodes")?;
    let kubeconfig = lab
        .service_account_kubeconfig(&dir, METALLB_NAMESPACE, "speaker")
        .await?;
    let kubectl = lab.bin_dir.join("kubectl");
    let want = format!("system:serviceaccount:{METALLB_NAMESPACE}:speaker");
    let lab2 = lab.clone();
    // The 300 s bound starts once the network is up: taking the testkit's serial lock
    // waits for every other namespace test (of this run, or of another checkout on the
    // machine; bounded by the lock's own timeout), which is no hang of this test (CI
    // failed once here, waiting for a lock held elsewhere for over 300 s).
    let (up_tx, up_rx) = tokio::sync::oneshot::channel::<()>();
    let checks = tokio::task::spawn_blocking(move || -> Result<()> {
        let net = lab2.node_network(&LabOptions {
            far: false,
            ..LabOptions::default()
        })?;
        let _ = up_tx.send(());
        {
            for n in 1..=net.net.nodes() {
                let ns = net.net.node(n);
                let out = ns
                    .command(&kubectl)
                    .args([
                        "auth",
                        "whoami",
                        "-o",
                        "jsonpath={.status.userInfo.username}",
                    ])
                    .env("KUBECONFIG", &kubeconfig)
                    .env("KUBECACHEDIR", dir.join(format!("cache-{n}")))
                    .output()
                    .with_context(|| format!("running kubectl in {}", ns.name()))?;
                let user = String::from_utf8_lossy(&out.stdout);
                ensure!(
                    out.status.success() && user == want,
                    "kubectl auth whoami in {}: {} {user:?} {}",
                    ns.name(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
                ensure!(
                    net.relayed(n) >= 1,
                    "node-{n}: nothing went through its relay"
                );
            }
            Ok(())
        }
    });
    if up_rx.await.is_err() {
        // The set-up failed: its error.
        return checks.await?;
    }
    tokio::time::timeout(Duration::from_secs(300), checks)
        .await
        .context("the node network test took more than 300 s once its network was up")??
}
