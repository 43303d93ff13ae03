//! The speaker's own Prometheus series (the `bgp` and `bfd` crates register
//! theirs), with MetalLB's names, help and labels.

use std::net::IpAddr;

use prometheus::{GaugeVec, Opts, Registry};

/// `metallb_speaker_announced{service, protocol, node, ip}`: 1 while this
/// node wants to announce the Service's address; the series is deleted on
/// withdrawal.
#[derive(Clone)]
pub struct Announced {
    gauge: GaugeVec,
    node: String,
}

impl Announced {
    /// Registers the family on `registry` for the node `node`.
    pub fn register(registry: &Registry, node: &str) -> prometheus::Result<Self> {
        let gauge = GaugeVec::new(
            Opts::new(
                "metallb_speaker_announced",
                "Services being announced from this node. This is desired state, it does not guarantee that the routing protocols have converged.",
            ),
            &["service", "protocol", "node", "ip"],
        )?;
        registry.register(Box::new(gauge.clone()))?;
        Ok(Self {
            gauge,
            node: node.to_owned(),
        })
    }

    /// Sets (`on`) or deletes the series of `service` (`namespace/name`),
    /// `protocol` (`bgp`, `layer2`) and `ip` (printed as Go prints it).
    pub fn set(&self, service: &str, protocol: &str, ip: IpAddr, on: bool) {
        let ip = config::gofmt::ip(ip);
        let labels = [service, protocol, self.node.as_str(), ip.as_str()];
        if on {
            self.gauge.with_label_values(&labels).set(1.0);
        } else {
            let _ = self.gauge.remove_label_values(&labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Encoder;

    #[test]
    fn exposition_is_metallbs() {
        let r = Registry::new();
        let a = Announced::register(&r, "node-1").unwrap();
        a.set("default/web", "bgp", "198.51.100.7".parse().unwrap(), true);
        a.set(
            "default/old",
            "bgp",
            "::ffff:198.51.100.8".parse().unwrap(),
            true,
        );
        a.set(
            "default/old",
            "bgp",
            "::ffff:198.51.100.8".parse().unwrap(),
            false,
        );
        let mut out = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&r.gather(), &mut out)
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "# HELP metallb_speaker_announced Services being announced from this node. This is desired state, it does not guarantee that the routing protocols have converged.\n\
             # TYPE metallb_speaker_announced gauge\n\
             metallb_speaker_announced{ip=\"198.51.100.7\",node=\"node-1\",protocol=\"bgp\",service=\"default/web\"} 1\n"
        );
    }
}
