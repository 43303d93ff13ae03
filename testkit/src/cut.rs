//! Silent link cuts with nftables drop rules inside a namespace.
//!
//! A cut must look like a pulled cable or a dead switch port to every
//! process: no link event (so not `ip link set down`, which routers notice),
//! and no error to local senders. That rules out `inet` output rules: a drop
//! on the `output` hook makes the sender's `sendto()` fail with EPERM (BFD
//! and other UDP senders see it at once). The kit therefore drops at the
//! device with `netdev` ingress/egress hooks (an egress drop looks like a
//! qdisc drop: UDP senders see success, TCP retransmits), or, for a cut of
//! a switch port, with a `bridge` table in the switch namespace, which the
//! endpoints cannot see at all. To lose only some of what a router
//! forwards (BFD echo packets it loops back), [`drop_forwarded_udp`] uses an
//! `inet` table on the `forward` hook, which no local sender goes through.
//!
//! Every rule the kit adds carries the comment `testkit cut <n>`;
//! [`Cut::restore`] deletes exactly the rules (by handle) that the cut added.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, ensure};

use crate::Result;
use crate::netns::Netns;

/// The nftables table the kit uses in each namespace (family `netdev` in
/// lab namespaces, `bridge` in the switch namespace).
pub const TABLE: &str = "testkit";
/// Priority of the kit's base chains: before everything else.
const PRIORITY: i32 = -500;

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// An active cut: the drop rules it added. [`Cut::restore`] (or dropping
/// the handle) deletes exactly those rules.
#[derive(Debug)]
pub struct Cut {
    ns: Netns,
    family: &'static str,
    rules: Vec<(String, u64)>,
    what: String,
    active: bool,
}

impl Cut {
    /// What was cut, for messages: `interface mlb1-eth0 in mlb1-node-1`.
    pub fn describe(&self) -> &str {
        &self.what
    }

    /// `(chain, handle)` of each rule the cut added.
    pub fn rules(&self) -> &[(String, u64)] {
        &self.rules
    }

    /// Removes the cut's rules, and only those.
    pub fn restore(mut self) -> Result<()> {
        self.remove()
    }

    fn remove(&mut self) -> Result<()> {
        if !self.active {
            return Ok(());
        }
        self.active = false;
        if !self.ns.exists() {
            return Ok(());
        }
        for (chain, handle) in &self.rules {
            let h = handle.to_string();
            self.ns
                .run(
                    "nft",
                    &["delete", "rule", self.family, TABLE, chain, "handle", &h],
                )
                .with_context(|| format!("restoring {}", self.what))?;
        }
        Ok(())
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("testkit: could not restore a cut: {e:#}");
        }
    }
}

fn chain_name(dir: &str, ifname: &str) -> String {
    let safe: String = ifname
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{dir}_{safe}")
}

/// Creates (idempotently) the netdev table and an ingress or egress base
/// chain bound to `ifname`; returns the chain name.
fn netdev_chain(ns: &Netns, hook: &str, ifname: &str) -> Result<String> {
    let chain = chain_name(if hook == "ingress" { "in" } else { "out" }, ifname);
    ns.run("nft", &[format!("add table netdev {TABLE}")])?;
    ns.run(
        "nft",
        &[format!(
            "add chain netdev {TABLE} {chain} {{ type filter hook {hook} device \"{ifname}\" priority {PRIORITY}; policy accept; }}"
        )],
    )?;
    Ok(chain)
}

/// Adds `rule` to `chain` and returns its handle (`nft -e -a` echoes it).
fn add_rule(ns: &Netns, family: &str, chain: &str, rule: &str, id: u32) -> Result<u64> {
    let out = ns.run(
        "nft",
        &[
            "-e".to_string(),
            "-a".to_string(),
            format!("add rule {family} {TABLE} {chain} {rule} comment \"testkit cut {id}\""),
        ],
    )?;
    parse_handle(&out).with_context(|| format!("no handle in nft's echo: {out}"))
}

fn parse_handle(echo: &str) -> Option<u64> {
    echo.lines()
        .find_map(|l| l.rsplit_once("# handle ").map(|(_, h)| h.trim()))
        .and_then(|h| h.split_whitespace().next()?.parse().ok())
}

fn new_cut(ns: &Netns, family: &'static str, what: String) -> Cut {
    Cut {
        ns: ns.clone(),
        family,
        rules: Vec::new(),
        what,
        active: true,
    }
}

pub(crate) fn cut_interface(ns: &Netns, ifname: &str) -> Result<Cut> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut cut = new_cut(ns, "netdev", format!("interface {ifname} in {}", ns.name()));
    for hook in ["ingress", "egress"] {
        let chain = netdev_chain(ns, hook, ifname)?;
        let h = add_rule(ns, "netdev", &chain, "drop", id)?;
        cut.rules.push((chain, h));
    }
    Ok(cut)
}

pub(crate) fn cut_address(ns: &Netns, addr: IpAddr) -> Result<Cut> {
    ensure!(
        crate::plan::is_allowed_addr(addr),
        "cut address {addr} is outside the lab's ranges"
    );
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut cut = new_cut(ns, "netdev", format!("address {addr} in {}", ns.name()));
    let fam = if addr.is_ipv4() { "ip" } else { "ip6" };
    let ifaces: Vec<String> = ns.link_names()?.into_iter().filter(|n| n != "lo").collect();
    ensure!(
        !ifaces.is_empty(),
        "namespace {} has no interface to cut {addr} on",
        ns.name()
    );
    for ifname in &ifaces {
        let chain = netdev_chain(ns, "ingress", ifname)?;
        let h = add_rule(
            ns,
            "netdev",
            &chain,
            &format!("{fam} saddr {addr} drop"),
            id,
        )?;
        cut.rules.push((chain, h));
        let chain = netdev_chain(ns, "egress", ifname)?;
        let h = add_rule(
            ns,
            "netdev",
            &chain,
            &format!("{fam} daddr {addr} drop"),
            id,
        )?;
        cut.rules.push((chain, h));
    }
    Ok(cut)
}

/// Cuts bridge port `port` in the switch namespace `sw`: frames from and to
/// that port are dropped by the bridge (prerouting, postrouting and output
/// hooks of a `bridge` table), invisibly to both ends.
pub(crate) fn cut_bridge_port(sw: &Netns, port: &str) -> Result<Cut> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut cut = new_cut(sw, "bridge", format!("switch port {port} in {}", sw.name()));
    sw.run("nft", &[format!("add table bridge {TABLE}")])?;
    for (chain, hook, rule) in [
        ("pre", "prerouting", format!("iifname \"{port}\" drop")),
        ("post", "postrouting", format!("oifname \"{port}\" drop")),
        ("out", "output", format!("oifname \"{port}\" drop")),
    ] {
        sw.run(
            "nft",
            &[format!(
                "add chain bridge {TABLE} {chain} {{ type filter hook {hook} priority {PRIORITY}; policy accept; }}"
            )],
        )?;
        let h = add_rule(sw, "bridge", chain, &rule, id)?;
        cut.rules.push((chain.to_string(), h));
    }
    Ok(cut)
}

/// Silently drops the UDP datagrams to `port` that `ns` (a router
/// namespace) forwards: an `inet` table with a `forward` hook, so what the
/// namespace itself receives or sends is untouched. For BFD echo (port
/// 3785): the echo packets the router loops back are lost while its BFD
/// control packets (to and from its own address) still flow. Neither end
/// sees a link event or a send error.
pub fn drop_forwarded_udp(ns: &Netns, port: u16) -> Result<Cut> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut cut = new_cut(
        ns,
        "inet",
        format!("forwarded UDP to port {port} in {}", ns.name()),
    );
    let chain = "forward";
    ns.run("nft", &[format!("add table inet {TABLE}")])?;
    ns.run(
        "nft",
        &[format!(
            "add chain inet {TABLE} {chain} {{ type filter hook forward priority {PRIORITY}; policy accept; }}"
        )],
    )?;
    let h = add_rule(ns, "inet", chain, &format!("udp dport {port} drop"), id)?;
    cut.rules.push((chain.to_string(), h));
    Ok(cut)
}

/// Silently drops every UDP datagram to or from `port` that `ns` itself
/// receives or sends (an `inet` table with `input` and `output` hooks): for
/// the membership protocol (7946), a node cut from the other speakers while
/// its clients, the router and the API server still reach it.
pub fn drop_local_udp(ns: &Netns, port: u16) -> Result<Cut> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut cut = new_cut(ns, "inet", format!("UDP port {port} in {}", ns.name()));
    ns.run("nft", &[format!("add table inet {TABLE}")])?;
    for (chain, hook) in [("local_in", "input"), ("local_out", "output")] {
        ns.run(
            "nft",
            &[format!(
                "add chain inet {TABLE} {chain} {{ type filter hook {hook} priority {PRIORITY}; policy accept; }}"
            )],
        )?;
        for rule in [
            format!("udp dport {port} drop"),
            format!("udp sport {port} drop"),
        ] {
            let h = add_rule(ns, "inet", chain, &rule, id)?;
            cut.rules.push((chain.to_string(), h));
        }
    }
    Ok(cut)
}

/// Drops `percent` % of the UDP datagrams to `port` that leave `ns` through
/// `ifname`, at random (`numgen random`), silently (a `netdev` egress hook,
/// as a cut: the sender sees success). Put on both ends of a pair, each
/// direction loses `percent` %. For a lossy membership protocol (7946).
pub fn lose_udp(ns: &Netns, ifname: &str, port: u16, percent: u8) -> Result<Cut> {
    ensure!(
        (1..=100).contains(&percent),
        "a loss of {percent} %: 1 to 100"
    );
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut cut = new_cut(
        ns,
        "netdev",
        format!(
            "{percent} % of UDP to port {port} out of {ifname} in {}",
            ns.name()
        ),
    );
    let chain = netdev_chain(ns, "egress", ifname)?;
    // Counted: all of them, then the dropped ones ([`loss_counters`]).
    for rule in [
        format!("meta l4proto udp udp dport {port} counter"),
        format!("meta l4proto udp udp dport {port} numgen random mod 100 < {percent} counter drop"),
    ] {
        let h = add_rule(ns, "netdev", &chain, &rule, id)?;
        cut.rules.push((chain.clone(), h));
    }
    Ok(cut)
}

/// (seen, dropped) packets of a [`lose_udp`] cut so far, from its rules' counters.
pub fn loss_counters(cut: &Cut) -> Result<(u64, u64)> {
    ensure!(cut.rules.len() == 2, "not a lose_udp cut: {}", cut.what);
    let chain = &cut.rules[0].0;
    let out = cut
        .ns
        .run("nft", &["-a", "list", "chain", "netdev", TABLE, chain])?;
    let count = |handle: u64| -> Result<u64> {
        let line = out
            .lines()
            .find(|l| l.trim_end().ends_with(&format!("# handle {handle}")))
            .with_context(|| format!("no rule with handle {handle} in: {out}"))?;
        line.split_once("counter packets ")
            .and_then(|(_, r)| r.split_whitespace().next()?.parse().ok())
            .with_context(|| format!("no counter in: {line}"))
    };
    Ok((count(cut.rules[0].1)?, count(cut.rules[1].1)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_is_parsed_from_the_echo() {
        let echo = "add rule netdev testkit in_x drop comment \"testkit cut 1\" # handle 7\n# new generation 5 by process 1 (nft)\n";
        assert_eq!(parse_handle(echo), Some(7));
        assert_eq!(parse_handle("nothing"), None);
    }

    #[test]
    fn chain_names_are_identifiers() {
        assert_eq!(chain_name("in", "mlb12-eth0"), "in_mlb12_eth0");
    }
}
