//! The allocator's own description of a Service and of an assignment: plain
//! data, no Kubernetes types.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use super::error::FamilyError;
use super::quote_list;

/// One address family (MetalLB's `ipfamily.IPv4` / `ipfamily.IPv6`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpFamily {
    /// IPv4 (the default primary family).
    #[default]
    V4,
    /// IPv6.
    V6,
}

impl IpFamily {
    /// The family of `ip` (`ipfamily.ForAddress`; IPv4-mapped IPv6
    /// addresses count as IPv4, as Go's `To4()` makes them).
    pub fn of(ip: IpAddr) -> IpFamily {
        match ip.to_canonical() {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    /// The other family.
    pub fn other(self) -> IpFamily {
        match self {
            IpFamily::V4 => IpFamily::V6,
            IpFamily::V6 => IpFamily::V4,
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            IpFamily::V4 => 0,
            IpFamily::V6 => 1,
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpFamily::V4 => "ipv4",
            IpFamily::V6 => "ipv6",
        })
    }
}

/// The family of a Service (from its cluster IPs) or of a set of addresses
/// (MetalLB's `ipfamily.Family`: `ipv4`, `ipv6` or `dual`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceFamily {
    /// One IPv4 address.
    #[default]
    Ipv4,
    /// One IPv6 address.
    Ipv6,
    /// One address of each family.
    Dual,
}

impl ServiceFamily {
    /// `ipfamily.ForAddresses`: one address gives its family, two of
    /// different families give `dual`; anything else is an error with
    /// MetalLB's text.
    pub fn for_addresses(ips: &[IpAddr]) -> Result<ServiceFamily, FamilyError> {
        match ips {
            [ip] => Ok(IpFamily::of(*ip).into()),
            [a, b] if IpFamily::of(*a) != IpFamily::of(*b) => Ok(ServiceFamily::Dual),
            [_, _] => Err(FamilyError::SameFamily(quote_list(ips))),
            _ => Err(FamilyError::InvalidLength(ips.len(), quote_list(ips))),
        }
    }

    /// The single family, unless dual.
    pub fn single(self) -> Option<IpFamily> {
        match self {
            ServiceFamily::Ipv4 => Some(IpFamily::V4),
            ServiceFamily::Ipv6 => Some(IpFamily::V6),
            ServiceFamily::Dual => None,
        }
    }
}

impl From<IpFamily> for ServiceFamily {
    fn from(f: IpFamily) -> Self {
        match f {
            IpFamily::V4 => ServiceFamily::Ipv4,
            IpFamily::V6 => ServiceFamily::Ipv6,
        }
    }
}

impl fmt::Display for ServiceFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServiceFamily::Ipv4 => "ipv4",
            ServiceFamily::Ipv6 => "ipv6",
            ServiceFamily::Dual => "dual",
        })
    }
}

/// `spec.ipFamilyPolicy` (unset means `SingleStack`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IpFamilyPolicy {
    /// One address, of the Service's family.
    #[default]
    SingleStack,
    /// Two addresses when a pool offers both families, else one.
    PreferDualStack,
    /// Two addresses or none.
    RequireDualStack,
}

/// One `(protocol, port)` of a Service (`spec.ports[].{protocol,port}`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Port {
    /// `TCP`, `UDP` or `SCTP`, as the API server wrote it.
    pub protocol: String,
    /// The port number.
    pub port: i32,
}

impl Port {
    /// A port.
    pub fn new(protocol: impl Into<String>, port: i32) -> Port {
        Port {
            protocol: protocol.into(),
            port,
        }
    }

    /// A TCP port.
    pub fn tcp(port: i32) -> Port {
        Port::new("TCP", port)
    }

    /// A UDP port.
    pub fn udp(port: i32) -> Port {
        Port::new("UDP", port)
    }
}

impl fmt::Display for Port {
    /// MetalLB's `Port.String()`: `TCP/80`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.protocol, self.port)
    }
}

/// What the allocator needs to know about a LoadBalancer Service, already
/// extracted from the Kubernetes object by the caller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Service {
    /// `metadata.namespace` (pool `namespaces` / `namespaceSelectors`).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels` (pool `serviceSelectors`).
    pub labels: BTreeMap<String, String>,
    /// The family of `spec.clusterIPs` (or `spec.clusterIP`).
    pub family: ServiceFamily,
    /// `spec.ipFamilyPolicy`.
    pub ip_family_policy: IpFamilyPolicy,
    /// `spec.ipFamilies[0]`: the primary family for PreferDualStack
    /// (IPv4 when unset).
    pub primary_family: IpFamily,
    /// The requested addresses, parsed from `metallb.io/loadBalancerIPs` or
    /// `spec.loadBalancerIP` (empty: none requested).
    pub requested_ips: Vec<IpAddr>,
    /// `metallb.io/address-pool` (None or empty: none requested).
    pub address_pool: Option<String>,
    /// `metallb.io/allow-shared-ip` ("" means no sharing).
    pub sharing_key: String,
    /// The backend key: [`backend_key`] of the Service.
    pub backend_key: String,
    /// `spec.ports`.
    pub ports: Vec<Port>,
}

impl Service {
    /// A SingleStack Service with no ports, labels or annotations.
    pub fn new(namespace: &str, name: &str, family: ServiceFamily) -> Service {
        Service {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            family,
            ..Service::default()
        }
    }

    /// `namespace/name`, the key MetalLB uses for a Service.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// MetalLB's `k8salloc.BackendKey`: with `externalTrafficPolicy: Local` the
/// selector rendered as `labels.Set.String()` (the `k=v` pairs sorted as
/// strings, joined by `,`); with `Cluster`, "".
pub fn backend_key(etp_local: bool, selector: &BTreeMap<String, String>) -> String {
    if !etp_local {
        return String::new();
    }
    let mut pairs: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.sort();
    pairs.join(",")
}

/// The addresses a Service holds, and on what terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The pool containing the addresses.
    pub pool: String,
    /// One address, or one of each family (IPv4 first when allocated).
    pub ips: Vec<IpAddr>,
    /// The Service's ports when it was assigned.
    pub ports: Vec<Port>,
    /// Its sharing key.
    pub sharing_key: String,
    /// Its backend key.
    pub backend_key: String,
}
