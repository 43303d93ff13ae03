//! End-to-end test harness of metallb-rs: a real Kubernetes API server (the lab,
//! `lab/cluster up`), reached with the lab's admin kubeconfig or with ServiceAccount tokens
//! bound to the RBAC of `deploy/`.
//!
//! Every test starts with [`Lab::connect`], which fails loudly (never skips) when the lab
//! is not up, and refuses a kubeconfig that is not a metallb-rs lab's. The lab is found
//! through the same variables as `lab/cluster`: `KUBECONFIG` (what `lab/cluster env`
//! prints), else `LAB_STATE_DIR/kubeconfig`, else `lab/.state/kubeconfig`;
//! `LAB_APISERVER_PORT` (checked against the kubeconfig) and `LAB_BIN_DIR` (else
//! `lab/build bindir`) for the lab's `kubectl`.
//!
//! Helpers:
//! - [`wait_until`]: polls and, on timeout, reports what it observed;
//! - [`Lab::create_lb_service`] / [`Lab::set_endpoints`]: LoadBalancer Services with a
//!   selector and real backend Pods (never run; their status patched, Ready or not,
//!   terminating ones held by a finalizer of the harness), whose EndpointSlices the lab's
//!   kube-controller-manager makes; both return once the slices show what was asked;
//! - [`Lab::token`] / [`Lab::client_with_token`] / [`Lab::client_as`]: TokenRequest tokens
//!   and clients that act as a ServiceAccount, so that RBAC is what is tested;
//!   [`Lab::wait_allowed`] waits until just-written RBAC reaches the authorizer;
//!   [`Lab::apply_deploy_rbac`] applies `deploy/namespace.yaml` and `deploy/rbac/`;
//! - [`Audit`]: `lab/audit-count --json` between two marks;
//! - [`Lab::kubectl`]: the lab's own kubectl;
//! - [`Lab::controller_setup`] / [`ControllerSetup::start`]: the controller binary as a
//!   process with the deployed RBAC, isolated from other tests by namespace and
//!   `--lb-class`.
//!
//! - [`Lab::node_network`] / [`NodeNetwork::spawn`]: the node namespaces of the test kit,
//!   each relaying 127.0.0.1:<API port> to the lab's API server, and a process per node
//!   (how the speaker will run, one per node, once it exists).
//! - [`l2bench::L2Lab`]: the layer-2 benchmarks' lab (speakers of either
//!   implementation with membership, Services written without a controller).
//! - [`speakers::SpeakerLab`]: a speaker process per node INSIDE its node namespace (API
//!   relay, the speaker ServiceAccount with the deployed RBAC, a Pod object each), FRR in
//!   `router` peering with every node (optionally BFD, optionally an iBGP FRR in
//!   `router2`), and the assertions at the router (paths, next hops, LOCAL_PREF,
//!   communities, sessions) whose waits report what the router had.
//! - [`apiserver::ApiServer`]: the lab's kube-apiserver killed (SIGKILL) and started
//!   again with its own command line (the API-outage faults of `freeze` and
//!   `bench-bgp-faults`).

pub mod apiserver;
mod audit;
pub mod bench;
pub mod controller;
pub mod l2bench;
mod lab;
pub mod nodes;
pub mod process;
mod services;
pub mod speakers;
mod tokens;
mod wait;

pub use audit::{Audit, AuditCount, AuditFilter, AuditWrite};
pub use controller::{ControllerSetup, RunningController};
pub use lab::{KubectlOutput, Lab, LabEnv, TestNamespace, metallb_resource, unique_suffix};
pub use nodes::NodeNetwork;
pub use services::{
    BACKEND_OF_LABEL, EndpointSpec, HOLD_FINALIZER, LbService, SERVICE_NAME_LABEL, release_backends,
};
pub use tokens::Forbidden;
pub use wait::wait_until;

/// The namespace metallb-rs runs in (and the lab creates).
pub const METALLB_NAMESPACE: &str = "metallb-system";

/// The field manager of the harness's writes.
pub const FIELD_MANAGER: &str = "metallb-rs-e2e";
