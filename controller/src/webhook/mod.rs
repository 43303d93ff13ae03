//! MetalLB's validating admission webhooks, served by the controller.
//!
//! - [`admission`]: the reviews, pure (request and the controller's view of
//!   the configuration in, decision out).
//! - [`certs`]: the CA and serving certificate, pure (what to renew, new
//!   material with rcgen).
//! - [`rotator`]: the Secret `--webhook-secret` and the `caBundle`s, against
//!   the API.
//! - [`server`]: HTTPS on `--webhook-port`, with deadlines and bounds.
//!
//! Not here (yet): the BGPPeer conversion webhook (`/convert`), and a webhook
//! for Secrets (MetalLB has none: a BGPPeer's password Secret is not checked
//! at admission, only by the parser afterwards).

pub mod admission;
pub mod certs;
pub mod rotator;
pub mod server;
