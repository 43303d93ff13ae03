//! What the layer-2 bench binaries (`bench-l2`, `bench-l2-faults`) share: a lab of N
//! node namespaces with one speaker each (ours or MetalLB's, membership on as
//! deployed: `--ml-bindaddr` = the node's address, `--ml-labels` finding the speakers'
//! Pods, whose `status.podIP` is written here, `--ml-secret-key-path`), and LoadBalancer
//! Services in layer 2 whose ingress and EndpointSlices are written here (no controller).
//!
//! [`L2Lab::up`] brings up the network, the Nodes and two namespaces (configuration and
//! Services); [`L2Lab::deploy`] writes the speaker account, Pods, pool, L2Advertisement
//! and Services and starts the speakers; [`L2Lab::down`] removes all of it.
//! [`with_service_cidr`] gives the run's Services cluster IPs from the benchmark range.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use testkit::process::Signal;
use testkit::{LabOptions, NsChild, plan};

use crate::bench::Impl as Kind;
use crate::{Lab, NodeNetwork};

/// The labels of the speaker Pods (MetalLB's manifests'), `--ml-labels`.
pub const ML_LABELS: &str = "app=metallb,component=speaker";

/// Runs `f` with an extra ServiceCIDR `name` (`range`) for the run's Services: the lab's
/// cluster IPs (203.0.113.128/25) hold 126 Services (API objects only: nothing routes
/// cluster IPs in the lab). Removed at the end.
pub async fn with_service_cidr<F, T>(lab: &Lab, name: &str, range: &str, f: F) -> Result<T>
where
    F: AsyncFnOnce() -> Result<T>,
{
    let cidrs = Api::<ServiceCIDR>::all(lab.client.clone());
    if cidrs.get_opt(name).await?.is_none() {
        cidrs
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"cidrs": [range]},
                }))?,
            )
            .await?;
    }
    let result = f().await;
    let _ = cidrs.delete(name, &DeleteParams::default()).await;
    result
}

/// The order in which the election ranks the nodes for `ip` when every node is a
/// candidate and no preference weighs: `sha256(node + "#" + ip)` ascending, for ours
/// and MetalLB alike. The first answers; the second takes over when it goes.
pub fn hash_order(nodes: usize, ip: &str) -> Vec<usize> {
    let mut keyed: Vec<([u8; 32], usize)> = (1..=nodes)
        .map(|n| {
            let mut h = Sha256::new();
            h.update(plan::node_name(n).as_bytes());
            h.update(b"#");
            h.update(ip.as_bytes());
            (h.finalize().into(), n)
        })
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, n)| n).collect()
}

/// A lab of `nodes` node namespaces with a speaker each (see the module).
pub struct L2Lab<'a> {
    pub lab: &'a Lab,
    pub kind: Kind,
    pub nodes: usize,
    pub bin: PathBuf,
    pub net: NodeNetwork,
    pub cfg_ns: String,
    pub svc_ns: String,
    /// Logs, the kubeconfig and the memberlist key.
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub speakers: Vec<Option<NsChild>>,
    /// Each node's MAC on the segment (lower case) -> its number.
    pub macs: BTreeMap<String, usize>,
    pub client_if: String,
    /// Extra arguments of every speaker (`--ml-self-fence`).
    pub speaker_args: Vec<String>,
    /// Nodes this run added to the lab (beyond its usual ones), removed at the end.
    added: Vec<String>,
}

impl<'a> L2Lab<'a> {
    /// Brings up the network (waiting up to 30 min for the test kit's lock), the Nodes
    /// and the namespaces `<name>-<impl>-cfg-<suffix>` and `-svc-`.
    pub async fn up(
        lab: &'a Lab,
        name: &str,
        kind: Kind,
        nodes: usize,
        bin: &Path,
    ) -> Result<L2Lab<'a>> {
        let waiting = Instant::now();
        let net = loop {
            let o = LabOptions { nodes, far: false };
            match tokio::task::block_in_place(|| lab.node_network(&o)) {
                Ok(n) => break n,
                Err(e)
                    if format!("{e:#}").contains("is still held")
                        && waiting.elapsed() < Duration::from_secs(1800) =>
                {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => return Err(e),
            }
        };
        let node_api = Api::<Node>::all(lab.client.clone());
        let mut added = Vec::new();
        for n in 1..=nodes {
            let name = plan::node_name(n);
            if node_api.get_opt(&name).await?.is_none() {
                added.push(name);
            }
        }
        crate::speakers::ensure_nodes(lab, nodes).await?;
        let suffix = crate::unique_suffix();
        let cfg_ns = format!("{name}-{}-cfg-{suffix}", kind.name());
        let svc_ns = format!("{name}-{}-svc-{suffix}", kind.name());
        let dir = std::env::temp_dir().join(format!("{name}-{}-{nodes}-{suffix}", kind.name()));
        std::fs::create_dir_all(dir.join("memberlist"))?;
        eprintln!("{name}: logs in {}", dir.display());
        let nsapi = Api::<Namespace>::all(lab.client.clone());
        for ns in [&cfg_ns, &svc_ns] {
            nsapi
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
                )
                .await?;
        }
        let mut macs = BTreeMap::new();
        for n in 1..=nodes {
            let node = plan::node_name(n);
            let iface = net.net.l2_iface(&node).to_owned();
            macs.insert(net.net.node(n).mac(&iface)?.to_ascii_lowercase(), n);
        }
        let client_if = net.net.l2_iface("client").to_owned();
        Ok(L2Lab {
            lab,
            kind,
            nodes,
            bin: bin.to_path_buf(),
            net,
            cfg_ns,
            svc_ns,
            dir,
            kubeconfig: PathBuf::new(),
            speakers: (0..nodes).map(|_| None).collect(),
            macs,
            client_if,
            speaker_args: Vec::new(),
            added,
        })
    }

    /// Stops the speakers and removes what [`L2Lab::up`] and [`L2Lab::deploy`] made
    /// (waiting up to 4 min for the namespaces, whose Services hold cluster IPs), then
    /// the network.
    pub async fn down(mut self) {
        for s in self.speakers.iter_mut().flatten() {
            let _ = s.stop_with(Signal::KILL, Duration::from_secs(5));
        }
        let lab = self.lab;
        let _ = Api::<ClusterRoleBinding>::all(lab.client.clone())
            .delete(
                &format!("bench:{}:speaker", self.cfg_ns),
                &DeleteParams::default(),
            )
            .await;
        let pods = Api::<Pod>::namespaced(lab.client.clone(), &self.cfg_ns);
        for n in 1..=self.nodes {
            let _ = pods
                .delete(
                    &format!("speaker-{}", plan::node_name(n)),
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..Default::default()
                    },
                )
                .await;
        }
        let nsapi = Api::<Namespace>::all(lab.client.clone());
        for ns in [&self.svc_ns, &self.cfg_ns] {
            let _ = nsapi.delete(ns, &DeleteParams::default()).await;
        }
        let node_api = Api::<Node>::all(lab.client.clone());
        for name in &self.added {
            let _ = node_api.delete(name, &DeleteParams::default()).await;
        }
        let deadline = Instant::now() + Duration::from_secs(240);
        while Instant::now() < deadline {
            let left = matches!(nsapi.get_opt(&self.svc_ns).await, Ok(Some(_)))
                || matches!(nsapi.get_opt(&self.cfg_ns).await, Ok(Some(_)));
            if !left {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let L2Lab { net, .. } = self;
        tokio::task::block_in_place(move || drop(net));
    }

    /// The MAC of node `n` (lower case).
    pub fn mac_of(&self, n: usize) -> Result<String> {
        self.macs
            .iter()
            .find(|(_, v)| **v == n)
            .map(|(m, _)| m.clone())
            .with_context(|| format!("no MAC for node-{n}"))
    }

    pub fn metallb(&self, kind: &str) -> Api<DynamicObject> {
        self.lab.metallb(&self.lab.client, &self.cfg_ns, kind)
    }

    pub async fn create_metallb(&self, kind: &str, name: &str, spec: Value) -> Result<()> {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "metallb.io/v1beta1",
            "kind": kind,
            "metadata": {"name": name, "namespace": self.cfg_ns},
            "spec": spec,
        }))?;
        self.metallb(kind)
            .create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating {kind} {name}"))?;
        Ok(())
    }

    /// The speakers' ServiceAccount, bound to cluster-admin (the same rights for both
    /// implementations), and a kubeconfig with its token.
    pub async fn account(&mut self) -> Result<()> {
        let name = "speaker";
        Api::<ServiceAccount>::namespaced(self.lab.client.clone(), &self.cfg_ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}}))?,
            )
            .await?;
        Api::<ClusterRoleBinding>::all(self.lab.client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": format!("bench:{}:{name}", self.cfg_ns)},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": self.cfg_ns}],
                }))?,
            )
            .await?;
        let user = format!("system:serviceaccount:{}:{name}", self.cfg_ns);
        self.lab.wait_allowed(&user, "list", "pods", None).await?;
        self.kubeconfig = self
            .lab
            .service_account_kubeconfig(&self.dir, &self.cfg_ns, name)
            .await?;
        Ok(())
    }

    /// The account, the memberlist key, a Running Pod per node (its `podIP` the node's
    /// address), the pool (`plan::POOL_V4` and `plan::POOL_V6`), an L2Advertisement,
    /// routes to the pool in the client, one Service per address in `ips` (IPv4 or IPv6,
    /// its endpoint on node `1 + i % N`), then a speaker per node.
    pub async fn deploy(&mut self, ips: &[String]) -> Result<()> {
        self.account().await?;
        // MetalLB's memberlist Secret: 22 base64 characters.
        let mut key = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
        let key: String = key.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(self.dir.join("memberlist/secretkey"), &key[..22])?;
        let pods = Api::<Pod>::namespaced(self.lab.client.clone(), &self.cfg_ns);
        for n in 1..=self.nodes {
            let name = format!("speaker-{}", plan::node_name(n));
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": self.cfg_ns,
                             "labels": {"app": "metallb", "component": "speaker"}},
                "spec": {"nodeName": plan::node_name(n), "hostNetwork": true,
                         "terminationGracePeriodSeconds": 0,
                         "serviceAccountName": "speaker", "automountServiceAccountToken": false,
                         "containers": [{"name": "speaker", "image": "bench.invalid/speaker"}]},
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
            let ip = plan::node_v4(n).to_string();
            pods.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                    "conditions": [{"type": "Ready", "status": "True"}]}}),
                ),
            )
            .await?;
        }
        self.create_metallb(
            "IPAddressPool",
            "pool",
            json!({"addresses": [plan::POOL_V4, plan::POOL_V6]}),
        )
        .await?;
        self.create_metallb("L2Advertisement", "l2", json!({}))
            .await?;
        let client = self.net.net.client();
        client.ip(&["route", "add", plan::POOL_V4, "dev", &self.client_if])?;
        client.ip(&["-6", "route", "add", plan::POOL_V6, "dev", &self.client_if])?;
        for (i, ip) in ips.iter().enumerate() {
            let name = if ip.contains(':') {
                format!("svc6-{i}")
            } else {
                format!("svc-{i}")
            };
            self.create_service(&name, ip, 1 + i % self.nodes).await?;
        }
        for n in 1..=self.nodes {
            self.start_speaker(n)?;
        }
        Ok(())
    }

    /// Starts node `n`'s speaker (its log appended to `speaker-node-N.log`).
    pub fn start_speaker(&mut self, n: usize) -> Result<()> {
        let node = plan::node_name(n);
        let pod = format!("speaker-{node}");
        let ip = plan::node_v4(n).to_string();
        let key_dir = self.dir.join("memberlist");
        let key_dir = key_dir.to_str().context("path")?;
        let kc = self.kubeconfig.to_str().context("path")?;
        let ns = self.net.net.node(n);
        let mut cmd = ns.command(&self.bin);
        let ml = [
            "--ml-bindaddr",
            &ip,
            "--ml-labels",
            ML_LABELS,
            "--ml-secret-key-path",
            key_dir,
        ];
        match self.kind {
            Kind::Ours => {
                cmd.args([
                    "--log-format",
                    "text",
                    "--node-name",
                    &node,
                    "--health-probe-port",
                    "7473",
                    "--port",
                    "7472",
                    "--metrics-bind-address",
                    "127.0.0.1",
                    "--metrics-insecure-http",
                    "--log-level",
                    "info",
                ]);
            }
            Kind::Metallb => {
                cmd.args([
                    "--node-name",
                    &node,
                    "--pod-name",
                    &pod,
                    "--namespace",
                    &self.cfg_ns,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "7472",
                    "--log-level",
                    "info",
                ]);
                cmd.env("METALLB_BGP_TYPE", "native");
            }
        }
        cmd.args(ml)
            .args(&self.speaker_args)
            .env("KUBECONFIG", kc)
            .env("METALLB_NAMESPACE", &self.cfg_ns)
            .env("METALLB_POD_NAME", &pod)
            .env("METALLB_NODE_NAME", &node);
        let log = self.dir.join(format!("speaker-{node}.log"));
        let child =
            NsChild::spawn_logged(cmd, &log).with_context(|| format!("speaker in {node}"))?;
        self.speakers[n - 1] = Some(child);
        Ok(())
    }

    /// The path of node `n`'s speaker log.
    pub fn speaker_log_path(&self, n: usize) -> PathBuf {
        self.dir.join(format!("speaker-{}.log", plan::node_name(n)))
    }

    /// The last 30 lines of node `n`'s speaker log.
    pub fn speaker_log(&self, n: usize) -> String {
        let text = std::fs::read_to_string(self.speaker_log_path(n)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    async fn create_slice(&self, name: &str, node: usize, v6: bool) -> Result<()> {
        let (family, addr) = if v6 {
            ("IPv6", plan::node_v6(node).to_string())
        } else {
            ("IPv4", plan::node_v4(node).to_string())
        };
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"generateName": format!("{name}-"), "namespace": self.svc_ns,
                         "labels": {"kubernetes.io/service-name": name,
                                    "endpointslice.kubernetes.io/managed-by": "bench-l2.metallb-rs.io"}},
            "addressType": family,
            "endpoints": [{"addresses": [addr],
                           "conditions": {"ready": true, "serving": true, "terminating": false},
                           "nodeName": plan::node_name(node)}],
            "ports": [{"name": "tcp-80", "protocol": "TCP", "port": 8080}],
        }))?;
        Api::<EndpointSlice>::namespaced(self.lab.client.clone(), &self.svc_ns)
            .create(&PostParams::default(), &slice)
            .await
            .with_context(|| format!("EndpointSlice for {name}"))?;
        Ok(())
    }

    /// A LoadBalancer Service with `ip` as its ingress (the controller's write, done
    /// here: no controller runs); single-stack IPv6 (a cluster IP from the lab's IPv6
    /// range, an IPv6 EndpointSlice) when `ip` is an IPv6 address.
    pub async fn create_service(&self, name: &str, ip: &str, node: usize) -> Result<()> {
        let v6 = ip.parse::<std::net::IpAddr>()?.is_ipv6();
        let api = Api::<Service>::namespaced(self.lab.client.clone(), &self.svc_ns);
        let mut spec = json!({"type": "LoadBalancer", "selector": {"app": name},
                 "ports": [{"name": "tcp-80", "protocol": "TCP", "port": 80, "targetPort": 8080}]});
        if v6 {
            spec["ipFamilyPolicy"] = json!("SingleStack");
            spec["ipFamilies"] = json!(["IPv6"]);
        }
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.svc_ns},
            "spec": spec,
        }))?;
        api.create(&PostParams::default(), &svc)
            .await
            .with_context(|| format!("Service {name}"))?;
        self.create_slice(name, node, v6).await?;
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})),
        )
        .await
        .with_context(|| format!("ingress of Service {name}"))?;
        Ok(())
    }

    /// The nodes whose MACs answer ARP requests from the client for `ip` within 1 s
    /// (every reply counted, not the first).
    pub fn arp_owners(&self, ip: &str) -> Result<Vec<usize>> {
        let replies = self.net.net.client().arp_replies(
            &self.client_if,
            Some(plan::CLIENT_V4),
            ip.parse()?,
            1,
        )?;
        let mut owners: Vec<usize> = replies
            .iter()
            .filter_map(|mac| self.macs.get(mac).copied())
            .collect();
        owners.sort_unstable();
        owners.dedup();
        Ok(owners)
    }

    /// Waits until exactly one node answers `ip`, the same one in 4 answers in a row
    /// (about 2 s: a speaker that has just (re)joined may still move the address);
    /// returns it.
    pub async fn owner(&self, ip: &str, timeout: Duration) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        let mut streak: Option<(usize, u32)> = None;
        loop {
            let o = tokio::task::block_in_place(|| self.arp_owners(ip))?;
            streak = match (o.as_slice(), streak) {
                ([one], Some((n, k))) if *one == n => Some((n, k + 1)),
                ([one], _) => Some((*one, 1)),
                _ => None,
            };
            if let Some((n, 4)) = streak {
                return Ok(n);
            }
            if Instant::now() > deadline {
                bail!("{ip} is not answered by one stable node after {timeout:?} (last: {o:?})");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The client's neighbour entry for `ip` (lower-case MAC).
    pub fn neighbour(&self, ip: &str) -> Result<Option<String>> {
        let v = self.net.net.client().ip_json(&["neigh", "show", ip])?;
        Ok(v.as_array()
            .and_then(|a| a.first())
            .and_then(|e| e["lladdr"].as_str())
            .map(str::to_ascii_lowercase))
    }

    /// Makes the client resolve `ip` (a datagram) until its entry holds node `n`'s MAC.
    pub async fn resolve(&self, ip: &str, n: usize) -> Result<()> {
        let want = self.mac_of(n)?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // An entry on another MAC may stay until it goes stale: start afresh.
            if self.neighbour(ip)?.is_some_and(|m| m != want) {
                let _ = self
                    .net
                    .net
                    .client()
                    .ip(&["neigh", "del", ip, "dev", &self.client_if]);
            }
            tokio::task::block_in_place(|| {
                let _ = self.net.net.client().output(
                    "bash",
                    &["-c", &format!("echo x > /dev/udp/{ip}/9; sleep 0.1")],
                );
            });
            if self.neighbour(ip)?.as_deref() == Some(want.as_str()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the client does not resolve {ip} to node-{n}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// UDP datagrams sent by node `n`'s namespace so far.
    pub fn udp_out(&self, n: usize) -> Result<u64> {
        let out = self.net.net.node(n).output("cat", &["/proc/net/snmp"])?;
        let lines: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.starts_with("Udp:"))
            .collect();
        ensure!(lines.len() >= 2, "no Udp lines in /proc/net/snmp");
        let names: Vec<&str> = lines[0].split_whitespace().collect();
        let vals: Vec<&str> = lines[1].split_whitespace().collect();
        let i = names
            .iter()
            .position(|n| *n == "OutDatagrams")
            .context("OutDatagrams")?;
        Ok(vals[i].parse()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_order_is_a_permutation_and_depends_on_the_address() {
        let a = hash_order(3, "198.51.100.90");
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [1, 2, 3]);
        // Twenty addresses do not all rank the nodes alike.
        let firsts: std::collections::BTreeSet<usize> = (100..120)
            .map(|i| hash_order(3, &format!("198.51.100.{i}"))[0])
            .collect();
        assert!(firsts.len() > 1, "{firsts:?}");
    }
}
