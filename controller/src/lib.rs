//! metallb-rs controller: LoadBalancer IP allocation, Service status, IPAddressPool
//! status and the controller's `ConfigurationState`.
//!
//! Not built yet: see the controller issue.
