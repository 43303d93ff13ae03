//! MetalLB's validating admission webhooks, served by the controller.
//!
//! - [`admission`]: the reviews, pure (request and the controller's view of
//!   the configuration in, decision out).

pub mod admission;
pub mod certs;
pub mod rotator;
pub mod server;
