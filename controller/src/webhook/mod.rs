//! MetalLB's validating admission webhooks and the BGPPeer conversion
//! webhook, served by the controller.
//!
//! - [`admission`]: the reviews, pure (request and the controller's view of
//!   the configuration in, decision out).
//! - [`conversion`]: the BGPPeer conversion reviews (`/convert`), pure.
//! - [`certs`]: the CA and serving certificate, pure (what to renew, new
//!   material with rcgen).
//! - [`rotator`]: the Secret `--webhook-secret` and the `caBundle`s, against
//!   the API.
//! - [`server`]: HTTPS on `--webhook-port`, with deadlines and bounds.
//!
//! Not here: a webhook for Secrets (MetalLB has none: a BGPPeer's password
//! Secret is not checked at admission, only by the parser afterwards).

pub mod admission;
pub mod certs;
pub mod conversion;
pub mod rotator;
pub mod server;
