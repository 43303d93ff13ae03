//! Processes in the lab's node namespaces, as a hostNetwork DaemonSet runs one Pod per
//! node: [`Lab::node_network`] brings up the test kit's network (node-1..node-N on the
//! L2 segment with the router and the client; [`testkit::Lab`]) and, in every node
//! namespace, a relay from 127.0.0.1:<API port> to the lab's API server
//! ([`testkit::apiproxy::ApiProxy`]), so a process in a node namespace uses the same
//! kubeconfig URL as one in the root namespace. [`NodeNetwork::spawn`] starts a binary
//! in a node (the speaker, once it exists, runs this way with the `speaker`
//! ServiceAccount's kubeconfig).
//!
//! Holding a [`NodeNetwork`] holds the test kit's serial lock: network tests run one at
//! a time.

use std::path::Path;

use anyhow::{Context, Result};
use testkit::apiproxy::ApiProxy;
use testkit::{LabOptions, NsChild, SerialGuard};

use crate::lab::Lab;

/// The node namespaces with their API relays. Dropping it stops the relays and removes
/// the namespaces (and every process started in them).
pub struct NodeNetwork {
    proxies: Vec<ApiProxy>,
    /// The network (namespaces, router, client).
    pub net: testkit::Lab,
    _serial: SerialGuard,
}

impl Lab {
    /// The port of the lab's API server (from its URL).
    pub fn api_port(&self) -> Result<u16> {
        self.server
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .with_context(|| format!("no port in the API server URL {}", self.server))
    }

    /// Brings up the node namespaces (blocking: call it from `spawn_blocking` in async
    /// tests) with an API relay in each.
    pub fn node_network(&self, opts: &LabOptions) -> Result<NodeNetwork> {
        let port = self.api_port()?;
        let serial = testkit::serial()?;
        testkit::preflight()?;
        let net = testkit::Lab::up(opts)?;
        let proxies = (1..=net.nodes())
            .map(|n| ApiProxy::start(net.node(n), port, port))
            .collect::<Result<Vec<_>>>()?;
        Ok(NodeNetwork {
            proxies,
            net,
            _serial: serial,
        })
    }
}

impl NodeNetwork {
    /// Starts `bin` with `args` and `env` in node `n` (1-based); its output goes to the
    /// node's log directory. The process is killed when the handle is dropped.
    pub fn spawn(
        &self,
        n: usize,
        bin: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<NsChild> {
        let ns = self.net.node(n);
        let mut cmd = ns.command(bin);
        cmd.args(args).envs(env.iter().copied());
        ns.spawn_command(cmd)
            .with_context(|| format!("starting {} in {}", bin.display(), ns.name()))
    }

    /// Connections relayed to the API server from node `n` so far.
    pub fn relayed(&self, n: usize) -> u64 {
        self.proxies.get(n - 1).map_or(0, ApiProxy::relayed)
    }
}
