//! metallb-rs configuration: the `metallb.io` API types, the generator of
//! their CRDs, and `parse`, which turns MetalLB objects into one validated
//! [`Config`] with MetalLB's own error messages.

pub mod api;
pub mod cidr;
pub mod community;
pub mod conversion;
pub mod crd;
pub mod gofmt;
pub mod load;
pub mod names;
pub mod overlap;
pub mod resources;
pub mod selector;

pub use resources::{Resources, convert_bgp_peer};

mod error;
mod model;
mod parse;

pub use community::Community;
pub use error::{ConfigError, ObjectRef, Warning};
pub use model::*;
pub use parse::{compatible_local_pref_on_node, parse};
