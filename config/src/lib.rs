//! metallb-rs configuration: the `metallb.io` API types, the generator of
//! their CRDs, and `parse`, which turns MetalLB objects into one validated
//! [`Config`] with MetalLB's own error messages.

pub mod api;
pub mod gofmt;
pub mod resources;

pub use resources::{Resources, convert_bgp_peer};
