//! Status writers for metallb-rs: `ConfigurationState`, `BGPSessionStatus`,
//! `ServiceBGPStatus` and `ServiceL2Status`, written from the daemons' memory.
//!
//! Not built yet: see the controller and speaker issues.
