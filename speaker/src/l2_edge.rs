//! The daemon's [`L2Ops`]: the `arp-ndp` Linux driver ([`arp_ndp::linux`]),
//! started when the first L2Advertisement appears (it needs `CAP_NET_RAW`).
//! Until it runs, [`L2Ops::running`] says so and nothing is claimed (the
//! daemon decides every Service again once it runs).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use arp_ndp::announce::AnnounceConfig;
use arp_ndp::interfaces::AllowedInterfaces;
use arp_ndp::linux::L2Handle;

use crate::l2_speaker::L2Ops;

/// The gratuitous timing: MetalLB's burst, then one round every
/// `periodic` (`--gratuitous-arp-interval`; `None` = never).
pub fn announce_config(periodic: Option<Duration>) -> AnnounceConfig {
    AnnounceConfig {
        periodic,
        ..AnnounceConfig::default()
    }
}

/// `--gratuitous-arp-interval` / `METALLB_GRATUITOUS_ARP_INTERVAL`: whole
/// seconds (upstream's form) or a Go duration (`30s`, `1m`); `0` = off.
pub fn parse_gratuitous_interval(s: &str) -> Result<Option<Duration>, String> {
    let s = s.trim();
    let d = match s.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => daemon::flags::parse_duration(s).map_err(|e| {
            format!("invalid gratuitous ARP interval {s:?}: seconds or a duration ({e})")
        })?,
    };
    Ok((!d.is_zero()).then_some(d))
}

/// The responder of the daemon.
#[derive(Debug, Default)]
pub struct EdgeL2 {
    handle: Option<L2Handle>,
}

impl EdgeL2 {
    /// No driver yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the driver runs.
    pub fn started(&self) -> bool {
        self.handle.is_some()
    }

    /// The driver runs.
    pub fn set_handle(&mut self, handle: L2Handle) {
        self.handle = Some(handle);
    }
}

impl L2Ops for EdgeL2 {
    fn running(&self) -> bool {
        self.handle.is_some()
    }

    fn interfaces(&self) -> BTreeSet<String> {
        self.handle
            .as_ref()
            .map(|h| h.interfaces().into_iter().map(|i| i.name).collect())
            .unwrap_or_default()
    }

    fn claim(&mut self, owner: &str, ip: IpAddr, allowed: AllowedInterfaces) {
        if let Some(h) = &self.handle
            && h.claim(owner, ip, allowed).is_err()
        {
            tracing::error!(service = owner, %ip, "the layer-2 driver stopped: not answering");
        }
    }

    fn release(&mut self, owner: &str, ip: IpAddr) {
        if let Some(h) = &self.handle
            && h.release(owner, ip).is_err()
        {
            tracing::error!(service = owner, %ip, "the layer-2 driver stopped");
        }
    }

    fn reannounce(&mut self) {
        if let Some(h) = &self.handle
            && h.reannounce().is_err()
        {
            tracing::error!("the layer-2 driver stopped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gratuitous_interval_forms() {
        assert_eq!(parse_gratuitous_interval("0"), Ok(None));
        assert_eq!(
            parse_gratuitous_interval("30"),
            Ok(Some(Duration::from_secs(30)))
        );
        assert_eq!(
            parse_gratuitous_interval("1m30s"),
            Ok(Some(Duration::from_secs(90)))
        );
        assert_eq!(parse_gratuitous_interval("0s"), Ok(None));
        assert!(parse_gratuitous_interval("often").is_err());
        assert_eq!(
            announce_config(Some(Duration::from_secs(30))).periodic,
            Some(Duration::from_secs(30))
        );
        assert_eq!(announce_config(None).interval, Duration::from_millis(1100));
    }
}
