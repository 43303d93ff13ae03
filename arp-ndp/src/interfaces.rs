//! Which interfaces we answer and announce on: MetalLB's eligibility rules
//! as pure functions over an [`InterfaceDescription`] (filled from
//! rtnetlink by the Linux edge, or by hand in tests), and the exclusion
//! regex list with its `excludel2.yaml` loader.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

use regex::Regex;
use serde::Deserialize;
use thiserror::Error;

use crate::packet::MacAddr;

/// `IFF_UP`: administratively up.
pub const IFF_UP: u32 = 0x1;
/// `IFF_BROADCAST`: the link has a broadcast address.
pub const IFF_BROADCAST: u32 = 0x2;
/// `IFF_LOOPBACK`.
pub const IFF_LOOPBACK: u32 = 0x8;
/// `IFF_NOARP`: no ARP (and, in Linux, no neighbour discovery either).
pub const IFF_NOARP: u32 = 0x80;

/// MetalLB's default `announcedInterfacesToExclude` (chart value and
/// `excludel2.yaml` default).
pub const DEFAULT_EXCLUDE: &[&str] = &[
    "^docker.*",
    "^cbr.*",
    "^dummy.*",
    "^virbr.*",
    "^lxcbr.*",
    "^veth.*",
    "^lo$",
    "^cali.*",
    "^tunl.*",
    "^flannel.*",
    "^kube-ipvs.*",
    "^cni.*",
    "^nodelocaldns.*",
    "^lxc.*",
];

/// Where MetalLB's speaker reads the exclusion list.
pub const DEFAULT_EXCLUDE_PATH: &str = "/etc/metallb/excludel2.yaml";

/// Errors loading the exclusion list.
#[derive(Debug, Error)]
pub enum ExcludeError {
    /// A pattern does not compile.
    #[error("invalid interface exclusion regex {pattern:?}: {source}")]
    Regex {
        pattern: String,
        #[source]
        source: Box<regex::Error>,
    },
    /// The file is not valid YAML of the expected shape.
    #[error("{path}: invalid excludel2 YAML: {message}")]
    Yaml { path: String, message: String },
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The interface exclusion list: the patterns compiled as one alternation
/// `(r1)|(r2)|...`, exactly as MetalLB does. The patterns carry their own
/// anchors (`^veth.*`), so an unanchored one matches anywhere in the name.
#[derive(Clone)]
pub struct ExcludeList {
    patterns: Vec<String>,
    regex: Option<Regex>,
}

impl fmt::Debug for ExcludeList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExcludeList")
            .field("patterns", &self.patterns)
            .finish()
    }
}

impl Default for ExcludeList {
    fn default() -> Self {
        Self::from_patterns(DEFAULT_EXCLUDE).expect("the default exclusion patterns compile")
    }
}

#[derive(Deserialize)]
struct ExcludeFile {
    #[serde(rename = "announcedInterfacesToExclude", default)]
    announced_interfaces_to_exclude: Vec<String>,
}

impl ExcludeList {
    /// Nothing excluded.
    pub fn none() -> Self {
        ExcludeList {
            patterns: Vec::new(),
            regex: None,
        }
    }

    /// Compiles `patterns` as `(p1)|(p2)|...`. Each pattern is first
    /// compiled alone so that an error names the culprit.
    pub fn from_patterns<S: AsRef<str>>(patterns: &[S]) -> Result<Self, ExcludeError> {
        let patterns: Vec<String> = patterns.iter().map(|p| p.as_ref().to_owned()).collect();
        for p in &patterns {
            Regex::new(p).map_err(|e| ExcludeError::Regex {
                pattern: p.clone(),
                source: Box::new(e),
            })?;
        }
        if patterns.is_empty() {
            return Ok(Self::none());
        }
        let joined = patterns
            .iter()
            .map(|p| format!("({p})"))
            .collect::<Vec<_>>()
            .join("|");
        let regex = Regex::new(&joined).map_err(|e| ExcludeError::Regex {
            pattern: joined.clone(),
            source: Box::new(e),
        })?;
        Ok(ExcludeList {
            patterns,
            regex: Some(regex),
        })
    }

    /// Parses the `excludel2.yaml` format:
    /// `announcedInterfacesToExclude: [regex, ...]`. Other keys are ignored
    /// (MetalLB unmarshals leniently); a missing key or an empty list
    /// excludes nothing. `origin` names the source in errors.
    pub fn from_yaml(yaml: &str, origin: &str) -> Result<Self, ExcludeError> {
        let file: ExcludeFile = if yaml.trim().is_empty() {
            ExcludeFile {
                announced_interfaces_to_exclude: Vec::new(),
            }
        } else {
            serde_saphyr::from_str(yaml).map_err(|e| ExcludeError::Yaml {
                path: origin.to_owned(),
                message: e.to_string(),
            })?
        };
        Self::from_patterns(&file.announced_interfaces_to_exclude)
    }

    /// Reads `path`; if it does not exist, returns the defaults (the chart
    /// always mounts the file, with the defaults in it, so the file's list
    /// replaces the defaults rather than adding to them).
    pub fn load_or_default(path: &Path) -> Result<Self, ExcludeError> {
        match std::fs::read_to_string(path) {
            Ok(s) => Self::from_yaml(&s, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(ExcludeError::Io {
                path: path.display().to_string(),
                source: e,
            }),
        }
    }

    /// The patterns as given.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether interface `name` is excluded.
    pub fn is_excluded(&self, name: &str) -> bool {
        self.regex.as_ref().is_some_and(|r| r.is_match(name))
    }
}

/// What the kernel tells us about an interface (rtnetlink `RTM_NEWLINK` and
/// `RTM_NEWADDR`), reduced to what eligibility needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceDescription {
    pub index: u32,
    pub name: String,
    /// `IFLA_ADDRESS` when it is six bytes long (Ethernet-like).
    pub mac: Option<MacAddr>,
    /// `ifi_flags` (`IFF_*`).
    pub flags: u32,
    /// `IFLA_MASTER`: the bridge or bond this interface is enslaved to.
    pub master: Option<u32>,
    /// Addresses configured on the interface.
    pub addresses: Vec<IpAddr>,
}

impl InterfaceDescription {
    /// The first IPv6 link-local (fe80::/10) address, if any.
    pub fn link_local(&self) -> Option<Ipv6Addr> {
        self.addresses.iter().find_map(|a| match a {
            IpAddr::V6(v6) if v6.is_unicast_link_local() => Some(*v6),
            _ => None,
        })
    }
}

/// Why an interface gets no responder for a protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ineligible {
    /// Its name matches the exclusion list.
    Excluded,
    /// Not `IFF_UP`.
    Down,
    /// Enslaved to a bridge or bond (has a master); the master answers.
    Enslaved,
    /// `IFF_NOARP`. MetalLB checks this before either protocol, and Linux
    /// does no neighbour discovery on such links, so it rules out NDP too.
    NoArp,
    /// No six-byte hardware address.
    NoMac,
    /// ARP only: no `IFF_BROADCAST`.
    NoBroadcast,
    /// NDP only: no IPv6 link-local address.
    NoLinkLocal,
}

impl Ineligible {
    /// Short text for logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Ineligible::Excluded => "excluded by name",
            Ineligible::Down => "down",
            Ineligible::Enslaved => "enslaved to a master",
            Ineligible::NoArp => "IFF_NOARP",
            Ineligible::NoMac => "no MAC address",
            Ineligible::NoBroadcast => "no IFF_BROADCAST",
            Ineligible::NoLinkLocal => "no IPv6 link-local address",
        }
    }
}

impl fmt::Display for Ineligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn common_checks(d: &InterfaceDescription, exclude: &ExcludeList) -> Result<MacAddr, Ineligible> {
    if exclude.is_excluded(&d.name) {
        return Err(Ineligible::Excluded);
    }
    if d.flags & IFF_UP == 0 {
        return Err(Ineligible::Down);
    }
    if d.master.is_some() {
        return Err(Ineligible::Enslaved);
    }
    if d.flags & IFF_NOARP != 0 {
        return Err(Ineligible::NoArp);
    }
    match d.mac {
        Some(m) if m.is_unicast() => Ok(m),
        _ => Err(Ineligible::NoMac),
    }
}

/// Whether an ARP responder runs on `d`: not excluded, up, not enslaved,
/// no `IFF_NOARP`, a MAC, and `IFF_BROADCAST`.
pub fn arp_eligibility(d: &InterfaceDescription, exclude: &ExcludeList) -> Result<(), Ineligible> {
    common_checks(d, exclude)?;
    if d.flags & IFF_BROADCAST == 0 {
        return Err(Ineligible::NoBroadcast);
    }
    Ok(())
}

/// Whether an NDP responder runs on `d`: not excluded, up, not enslaved,
/// no `IFF_NOARP`, a MAC, and an IPv6 link-local address.
pub fn ndp_eligibility(d: &InterfaceDescription, exclude: &ExcludeList) -> Result<(), Ineligible> {
    common_checks(d, exclude)?;
    if d.link_local().is_none() {
        return Err(Ineligible::NoLinkLocal);
    }
    Ok(())
}

/// An interface as the responder and announcer see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub index: u32,
    pub name: String,
    pub mac: MacAddr,
    /// The interface's IPv6 link-local address (what makes it
    /// NDP-eligible; our NAs are sent from the target address itself).
    pub link_local: Option<Ipv6Addr>,
    /// An ARP responder runs here.
    pub arp: bool,
    /// An NDP responder runs here.
    pub ndp: bool,
}

impl Interface {
    /// Applies the eligibility rules. `Err` when neither protocol is
    /// eligible (with the ARP reason, which is the more general one).
    pub fn from_description(
        d: &InterfaceDescription,
        exclude: &ExcludeList,
    ) -> Result<Interface, Ineligible> {
        let mac = common_checks(d, exclude)?;
        let arp = arp_eligibility(d, exclude);
        let ndp = ndp_eligibility(d, exclude);
        if let (Err(e), Err(_)) = (arp, ndp) {
            return Err(e);
        }
        Ok(Interface {
            index: d.index,
            name: d.name.clone(),
            mac,
            link_local: d.link_local(),
            arp: arp.is_ok(),
            ndp: ndp.is_ok(),
        })
    }

    /// Whether this interface answers for `ip`'s family.
    pub fn serves(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(_) => self.arp,
            IpAddr::V6(_) => self.ndp,
        }
    }
}

/// Per-IP allow-list of interface names (L2Advertisement `interfaces`):
/// empty means every eligible interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedInterfaces(pub BTreeSet<String>);

impl AllowedInterfaces {
    /// Every interface.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only these.
    pub fn only<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        AllowedInterfaces(names.into_iter().map(Into::into).collect())
    }

    /// Whether `name` is allowed.
    pub fn allows(&self, name: &str) -> bool {
        self.0.is_empty() || self.0.contains(name)
    }
}
