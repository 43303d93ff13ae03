//! Allocation errors, with MetalLB's texts (`internal/allocator`,
//! `internal/ipfamily`, `controller/service.go`).

use std::net::IpAddr;

use config::gofmt::quote;

use super::quote_list;
use super::types::{Port, ServiceFamily};

/// Why an allocation or assignment failed. `Display` is MetalLB's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// No pool contains all the addresses (`%q is not allowed in config`).
    #[error("{} is not allowed in config", quote_list(.0))]
    NotAllowed(Vec<IpAddr>),
    /// The pool's serviceAllocation excludes the Service.
    #[error("pool {0} not compatible for ip assignment")]
    PoolNotCompatible(String),
    /// More than two addresses.
    #[error("more than two addresses {}", quote_list(.0))]
    TooManyAddresses(Vec<IpAddr>),
    /// Two addresses of one family.
    #[error("{} {} has the same family", quote(&.0.to_string()), quote(&.1.to_string()))]
    SameFamily(IpAddr, IpAddr),
    /// The address is used by other Services with which this one may not
    /// share it. MetalLB reports only this text; the rule that failed is
    /// [`reason`](AllocError::SharingKeyChange::reason) (also the error's
    /// `source()`).
    #[error(
        "can't change sharing key for {}, address also in use by {}",
        quote(.service),
        .others.join(",")
    )]
    SharingKeyChange {
        /// The Service asking.
        service: String,
        /// The other Services on the address, sorted.
        others: Vec<String>,
        /// The sharing rule that failed.
        #[source]
        reason: SharingError,
    },
    /// Another Service on the address holds one of the ports.
    #[error("port {port} is already in use on {}", quote(&.ip.to_string()))]
    PortInUse {
        /// The port.
        port: Port,
        /// The address.
        ip: IpAddr,
    },
    /// `metallb.io/address-pool` names no pool.
    #[error("unknown pool {}", quote(.0))]
    UnknownPool(String),
    /// The Service's existing addresses are not of its family.
    #[error("IP for wrong family assigned alloc {allocated} service family {service}")]
    WrongFamily {
        /// The family of the assigned addresses.
        allocated: ServiceFamily,
        /// The Service's family.
        service: ServiceFamily,
    },
    /// Automatic allocation found nothing. MetalLB reports only this text;
    /// the last pool-level failure, if any, is the `source()`.
    #[error("no available IPs")]
    NoAvailableIps {
        /// The last failure among the candidate pools.
        #[source]
        reason: Option<Box<AllocError>>,
    },
    /// The pool has no usable address of the family the policy needs.
    #[error("no available IPs in pool {pool} for {family} IPFamily")]
    NoAvailableIpsInPool {
        /// The pool.
        pool: String,
        /// The Service family asked for.
        family: ServiceFamily,
    },
    /// No candidate pool has a usable address of the Service's family.
    #[error("no suitable pool for {0} IPFamily")]
    NoSuitablePool(ServiceFamily),
    /// The requested addresses are not of the Service's family.
    #[error(
        "requested loadBalancer IP(s) {} does not match the ipFamily of the service",
        quote_list(.0)
    )]
    RequestedFamilyMismatch(Vec<IpAddr>),
    /// The requested addresses are not in the requested pool.
    #[error(
        "requested loadBalancer IP(s) {} is not compatible with requested address pool {pool}",
        quote_list(.ips)
    )]
    RequestedPoolMismatch {
        /// The requested addresses.
        ips: Vec<IpAddr>,
        /// The requested pool.
        pool: String,
    },
    /// The requested addresses do not form a family.
    #[error(transparent)]
    Family(#[from] FamilyError),
}

impl AllocError {
    pub(crate) fn no_available(reason: Option<AllocError>) -> AllocError {
        AllocError::NoAvailableIps {
            reason: reason.map(Box::new),
        }
    }
}

/// The sharing rule two Services on one address break (MetalLB's
/// `sharingOK`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SharingError {
    /// The Service already on the address has no sharing key.
    #[error("existing service does not allow sharing")]
    ExistingDoesNotAllow,
    /// The Service asking has no sharing key.
    #[error("new service does not allow sharing")]
    NewDoesNotAllow,
    /// Different sharing keys.
    #[error("sharing key {} does not match existing sharing key {}", quote(.new), quote(.existing))]
    SharingKey {
        /// The asking Service's key.
        new: String,
        /// The key on the address.
        existing: String,
    },
    /// Different backend keys (MetalLB's text says "sharing key" here too).
    #[error("backend key {} does not match existing sharing key {}", quote(.new), quote(.existing))]
    BackendKey {
        /// The asking Service's backend key.
        new: String,
        /// The backend key on the address.
        existing: String,
    },
}

/// A set of addresses that is not one family (`ipfamily.ForAddresses`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FamilyError {
    /// Two addresses of one family (the payload is the `%q` list).
    #[error("IPFamilyForAddresses: same address family {0}")]
    SameFamily(String),
    /// Not one or two addresses (count, `%q` list).
    #[error("IPFamilyForAddresses: invalid ips length {0} {1}")]
    InvalidLength(usize, String),
}
