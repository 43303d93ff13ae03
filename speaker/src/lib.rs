//! metallb-rs speaker: decides what its node announces and drives the `bgp`, `bfd`
//! and `arp-ndp` crates (BGP: [`bgp_speaker`], [`bgp_edge`]; layer 2:
//! [`decide::l2`], [`l2_speaker`], [`l2_edge`]; both under [`node`]).
//!
//! What exists so far is the configuration half, pure and shared with `metallbctl`
//! later:
//!
//! - [`node_config`]: the configuration as this node sees it (MetalLB's
//!   `filterBGPPeersByNode` / `filterBGPAdvertisementsByNode`: BGPPeers and
//!   BGPAdvertisements whose node selectors do not match the own Node are left out
//!   before parsing; L2Advertisements are kept, every speaker needs all of them);
//! - [`config_state`]: keeps the last good configuration when a new one is invalid,
//!   and says what to report (ConfigurationState, `metallb_k8s_client_config_*`);
//! - [`flags`]: MetalLB's `-flag` spelling next to `--flag`;
//! - [`liveness`] and [`discovery`]: the live speakers, from the `membership`
//!   crate, and the speaker Pods it joins (`--ml-labels`).
//! - [`driver`]: the speaker's loop, with the cluster view, the membership, the
//!   layer-2 responder and the effects behind seams (`tests/driver.rs` runs it
//!   with fakes); the binary is its edge.

pub mod bgp_edge;
pub mod bgp_speaker;
pub mod bgp_status;
pub mod config_state;
pub mod decide;
pub mod discovery;
pub mod driver;
pub mod explain;
pub mod flags;
pub mod join;
pub mod l2_edge;
pub mod l2_speaker;
pub mod liveness;
pub mod metrics;
pub mod node;
pub mod node_config;
pub mod warnings;
