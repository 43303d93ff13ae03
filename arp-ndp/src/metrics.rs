//! MetalLB's layer-2 metrics, registered on a registry the caller owns
//! (never the global default registry).
//!
//! | name | type | labels |
//! |---|---|---|
//! | `metallb_layer2_requests_received` | counter | `ip` |
//! | `metallb_layer2_responses_sent` | counter | `ip` |
//! | `metallb_layer2_gratuitous_sent` | counter | `ip` |
//! | `metallb_rs_layer2_group_join_failures_total` | counter | `interface` |
//!
//! MetalLB's names carry no `_total` suffix, exactly as MetalLB exports
//! them. The last counter is ours (MetalLB has none): solicited-node group
//! joins the kernel refused (`ENOMEM` past `net.core.optmem_max`,
//! `ENODEV` in a race with the interface going away...). Each refused
//! attempt counts, also one that then succeeded on another membership
//! socket; a group still not joined is listed by
//! `L2Handle::failed_groups` and retried with backoff.

use std::net::IpAddr;

use prometheus::{IntCounterVec, Opts, Registry};

/// `metallb_layer2_requests_received`
pub const REQUESTS_RECEIVED: &str = "metallb_layer2_requests_received";
/// `metallb_layer2_responses_sent`
pub const RESPONSES_SENT: &str = "metallb_layer2_responses_sent";
/// `metallb_layer2_gratuitous_sent`
pub const GRATUITOUS_SENT: &str = "metallb_layer2_gratuitous_sent";

/// `metallb_rs_layer2_group_join_failures_total`
pub const GROUP_JOIN_FAILURES: &str = "metallb_rs_layer2_group_join_failures_total";

/// The counters.
#[derive(Debug, Clone)]
pub struct Metrics {
    requests_received: IntCounterVec,
    responses_sent: IntCounterVec,
    gratuitous_sent: IntCounterVec,
    group_join_failures: IntCounterVec,
}

fn counter(name: &str, help: &str) -> prometheus::Result<IntCounterVec> {
    IntCounterVec::new(Opts::new(name, help), &["ip"])
}

impl Metrics {
    /// Creates the counters and registers them on `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Metrics> {
        let m = Metrics {
            requests_received: counter(
                REQUESTS_RECEIVED,
                "Number of layer2 requests received for owned IPs",
            )?,
            responses_sent: counter(
                RESPONSES_SENT,
                "Number of layer2 responses sent for owned IPs",
            )?,
            gratuitous_sent: counter(
                GRATUITOUS_SENT,
                "Number of gratuitous layer2 packets sent for owned IPs as a result of failovers",
            )?,
            group_join_failures: IntCounterVec::new(
                Opts::new(
                    GROUP_JOIN_FAILURES,
                    "Solicited-node multicast group joins the kernel refused, by interface",
                ),
                &["interface"],
            )?,
        };
        registry.register(Box::new(m.requests_received.clone()))?;
        registry.register(Box::new(m.responses_sent.clone()))?;
        registry.register(Box::new(m.gratuitous_sent.clone()))?;
        registry.register(Box::new(m.group_join_failures.clone()))?;
        Ok(m)
    }

    /// One request received for `ip`.
    pub fn request_received(&self, ip: IpAddr) {
        self.requests_received
            .with_label_values(&[ip.to_string().as_str()])
            .inc();
    }

    /// One response sent for `ip`.
    pub fn response_sent(&self, ip: IpAddr) {
        self.responses_sent
            .with_label_values(&[ip.to_string().as_str()])
            .inc();
    }

    /// `n` gratuitous packets sent for `ip`.
    pub fn gratuitous_sent(&self, ip: IpAddr, n: u64) {
        self.gratuitous_sent
            .with_label_values(&[ip.to_string().as_str()])
            .inc_by(n);
    }

    /// One solicited-node group join refused on `interface`.
    pub fn group_join_failed(&self, interface: &str) {
        self.group_join_failures
            .with_label_values(&[interface])
            .inc();
    }
}
