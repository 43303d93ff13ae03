//! Asking the segment whether another host already answers for an IP:
//! one ARP who-has or one Neighbor Solicitation out of an interface, then
//! a short wait for an answer from a MAC other than the interface's own.
//! `metallbctl l2-announce` runs this before taking an IP, so that it does
//! not silently steal a live address.

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use thiserror::Error;

use super::netlink::{InterfaceWatcher, NetlinkError};
use super::socket::{PacketSocket, Protocol};
use crate::interfaces::InterfaceDescription;
use crate::packet::{ArpFrame, ArpOp, MacAddr, NeighborAdvertisement, NeighborSolicitation};

/// Why a probe could not be made.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// rtnetlink failed.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    /// No interface of that name in this network namespace.
    #[error("no interface named {0}")]
    NoInterface(String),
    /// The interface has no Ethernet address.
    #[error("interface {0} has no MAC address")]
    NoMac(String),
    /// IPv6 probes are sent from the link-local address.
    #[error("interface {0} has no IPv6 link-local address")]
    NoLinkLocal(String),
    /// Socket error (typically: not root / no CAP_NET_RAW).
    #[error("interface {interface}: {source}")]
    Socket {
        interface: String,
        #[source]
        source: io::Error,
    },
}

/// The probe frame for `ip` from `d` (MAC `mac`): a broadcast who-has
/// from the interface's first IPv4 address (0.0.0.0 without one, an RFC
/// 5227 probe), or a solicitation from its link-local address to the
/// solicited-node group, with the source link-layer option.
pub fn probe_frame(
    d: &InterfaceDescription,
    mac: MacAddr,
    ip: IpAddr,
) -> Result<Vec<u8>, ProbeError> {
    Ok(match ip {
        IpAddr::V4(v4) => {
            let src = d
                .addresses
                .iter()
                .find_map(|a| match a {
                    IpAddr::V4(a) => Some(*a),
                    IpAddr::V6(_) => None,
                })
                .unwrap_or(Ipv4Addr::UNSPECIFIED);
            ArpFrame::request(mac, src, v4).encode()
        }
        IpAddr::V6(v6) => {
            let ll = d
                .link_local()
                .ok_or_else(|| ProbeError::NoLinkLocal(d.name.clone()))?;
            NeighborSolicitation::resolve_frame(mac, ll, v6)
        }
    })
}

/// Who answers for `ip` in `frame`, if it is an answer about `ip` from
/// another MAC than `ours`: the ARP sender hardware address, or the NA's
/// target link-layer address (else its Ethernet source).
pub fn answer_from(frame: &[u8], ip: IpAddr, ours: MacAddr) -> Option<MacAddr> {
    let mac = match ip {
        IpAddr::V4(v4) => {
            let f = ArpFrame::decode(frame).ok()?;
            (f.arp.op == ArpOp::Reply && f.arp.sender_ip == v4).then_some(f.arp.sender_mac)?
        }
        IpAddr::V6(v6) => {
            let (eth, _, na) = NeighborAdvertisement::decode_frame(frame).ok()?;
            (na.target == v6).then(|| na.target_lla.unwrap_or(eth.src))?
        }
    };
    (mac != ours).then_some(mac)
}

/// Sends one probe for `ip` out of `interface` and waits up to `wait` for
/// an answer from another MAC; returns that MAC, or `None` if nobody
/// answered. Runs in the calling thread's network namespace; needs
/// `CAP_NET_RAW` and a tokio runtime.
pub async fn probe(
    interface: &str,
    ip: IpAddr,
    wait: Duration,
) -> Result<Option<MacAddr>, ProbeError> {
    let watcher = InterfaceWatcher::start().await?;
    let d = watcher
        .table()
        .descriptions()
        .into_iter()
        .find(|d| d.name == interface)
        .ok_or_else(|| ProbeError::NoInterface(interface.to_owned()))?;
    let mac = d
        .mac
        .filter(|m| m.is_unicast())
        .ok_or_else(|| ProbeError::NoMac(interface.to_owned()))?;
    let frame = probe_frame(&d, mac, ip)?;
    let err = |source| ProbeError::Socket {
        interface: interface.to_owned(),
        source,
    };
    let proto = match ip {
        IpAddr::V4(_) => Protocol::ArpReply,
        IpAddr::V6(_) => Protocol::NdpAdvertisement,
    };
    // Open (and filter) before sending, so the answer cannot be missed.
    let sock = PacketSocket::open(d.index, proto).map_err(err)?;
    sock.send(&frame).map_err(err)?;
    let deadline = tokio::time::Instant::now() + wait;
    let mut buf = vec![0u8; 2048];
    loop {
        match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
            Err(_elapsed) => return Ok(None),
            Ok(Err(e)) => return Err(err(e)),
            Ok(Ok(n)) => {
                if let Some(other) = answer_from(&buf[..n], ip, mac) {
                    return Ok(Some(other));
                }
            }
        }
    }
}
