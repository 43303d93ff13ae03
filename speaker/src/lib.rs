//! metallb-rs speaker: decides what its node announces and drives the `bgp`,
//! `bfd` and `arp-ndp` crates.
//!
//! Not built yet: see the speaker issues.
