//! Eligibility rules and the exclusion list.

mod common;

use std::net::IpAddr;

use arp_ndp::interfaces::*;
use arp_ndp::packet::MacAddr;
use common::*;

fn desc(name: &str) -> InterfaceDescription {
    InterfaceDescription {
        index: 2,
        name: name.to_owned(),
        mac: Some(OUR_MAC),
        flags: IFF_UP | IFF_BROADCAST,
        master: None,
        addresses: vec![ip("192.0.2.5"), IpAddr::V6(v6(5)), IpAddr::V6(ll(0xaa))],
    }
}

#[test]
fn default_list_is_metallbs() {
    let l = ExcludeList::default();
    assert_eq!(l.patterns().len(), 14);
    for excluded in [
        "docker0",
        "cbr0",
        "dummy0",
        "virbr0",
        "lxcbr0",
        "veth1234",
        "lo",
        "cali123",
        "tunl0",
        "flannel.1",
        "kube-ipvs0",
        "cni0",
        "nodelocaldns",
        "lxc12ab",
    ] {
        assert!(l.is_excluded(excluded), "{excluded}");
    }
    for kept in [
        "eth0",
        "ens3",
        "bond0",
        "br0",
        "eth0.100",
        "lo0",
        "mydocker",
        "enp0s31f6",
    ] {
        assert!(!l.is_excluded(kept), "{kept}");
    }
}

#[test]
fn file_overrides_defaults() {
    let yaml = "announcedInterfacesToExclude:\n  - ^eth1$\n  - ^wg.*\n";
    let l = ExcludeList::from_yaml(yaml, "test").unwrap();
    assert!(l.is_excluded("eth1"));
    assert!(l.is_excluded("wg0"));
    assert!(!l.is_excluded("eth10"));
    assert!(!l.is_excluded("docker0"), "the file replaces the defaults");
}

#[test]
fn file_with_empty_list_or_no_key_excludes_nothing() {
    for yaml in ["announcedInterfacesToExclude: []\n", "other: 1\n", ""] {
        let l = ExcludeList::from_yaml(yaml, "test").unwrap();
        assert!(!l.is_excluded("docker0"), "{yaml:?}");
        assert!(!l.is_excluded("lo"), "{yaml:?}");
    }
}

#[test]
fn bad_regex_is_named() {
    let e =
        ExcludeList::from_yaml("announcedInterfacesToExclude: ['^eth(']\n", "x.yaml").unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("^eth("), "{msg}");
}

#[test]
fn bad_yaml_is_an_error() {
    let e = ExcludeList::from_yaml("announcedInterfacesToExclude: 7\n", "x.yaml").unwrap_err();
    assert!(matches!(e, ExcludeError::Yaml { .. }), "{e}");
}

#[test]
fn load_file_and_missing_file() {
    let dir = std::env::temp_dir().join(format!("arp-ndp-exclude-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("excludel2.yaml");
    std::fs::write(&path, "announcedInterfacesToExclude:\n- ^eth9$\n").unwrap();
    let l = ExcludeList::load_or_default(&path).unwrap();
    assert_eq!(l.patterns(), ["^eth9$"]);
    let missing = ExcludeList::load_or_default(&dir.join("absent.yaml")).unwrap();
    assert_eq!(missing.patterns().len(), DEFAULT_EXCLUDE.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn eligible_for_both() {
    let i = Interface::from_description(&desc("eth0"), &ExcludeList::default()).unwrap();
    assert!(i.arp && i.ndp);
    assert_eq!(i.link_local, Some(ll(0xaa)));
    assert_eq!(i.mac, OUR_MAC);
    assert_eq!(i.index, 2);
}

#[test]
fn excluded_by_name() {
    let d = desc("veth0");
    let ex = ExcludeList::default();
    assert_eq!(arp_eligibility(&d, &ex), Err(Ineligible::Excluded));
    assert_eq!(
        Interface::from_description(&d, &ex),
        Err(Ineligible::Excluded)
    );
    assert!(Interface::from_description(&d, &ExcludeList::none()).is_ok());
}

#[test]
fn down() {
    let mut d = desc("eth0");
    d.flags &= !IFF_UP;
    let ex = ExcludeList::none();
    assert_eq!(arp_eligibility(&d, &ex), Err(Ineligible::Down));
    assert_eq!(ndp_eligibility(&d, &ex), Err(Ineligible::Down));
}

#[test]
fn enslaved() {
    let mut d = desc("eth0");
    d.master = Some(7);
    let ex = ExcludeList::none();
    assert_eq!(arp_eligibility(&d, &ex), Err(Ineligible::Enslaved));
    assert_eq!(ndp_eligibility(&d, &ex), Err(Ineligible::Enslaved));
}

#[test]
fn noarp_rules_out_both() {
    let mut d = desc("eth0");
    d.flags |= IFF_NOARP;
    let ex = ExcludeList::none();
    assert_eq!(arp_eligibility(&d, &ex), Err(Ineligible::NoArp));
    assert_eq!(ndp_eligibility(&d, &ex), Err(Ineligible::NoArp));
}

#[test]
fn no_broadcast_rules_out_arp_only() {
    let mut d = desc("eth0");
    d.flags &= !IFF_BROADCAST;
    let i = Interface::from_description(&d, &ExcludeList::none()).unwrap();
    assert!(!i.arp && i.ndp);
    assert_eq!(
        arp_eligibility(&d, &ExcludeList::none()),
        Err(Ineligible::NoBroadcast)
    );
}

#[test]
fn no_link_local_rules_out_ndp_only() {
    let mut d = desc("eth0");
    d.addresses
        .retain(|a| !matches!(a, IpAddr::V6(v) if v.is_unicast_link_local()));
    let i = Interface::from_description(&d, &ExcludeList::none()).unwrap();
    assert!(i.arp && !i.ndp);
    assert_eq!(i.link_local, None);
    assert_eq!(
        ndp_eligibility(&d, &ExcludeList::none()),
        Err(Ineligible::NoLinkLocal)
    );
}

#[test]
fn neither_protocol() {
    let mut d = desc("eth0");
    d.flags &= !IFF_BROADCAST;
    d.addresses.clear();
    assert_eq!(
        Interface::from_description(&d, &ExcludeList::none()),
        Err(Ineligible::NoBroadcast)
    );
}

#[test]
fn no_mac() {
    let mut d = desc("wg0");
    d.mac = None;
    assert_eq!(
        arp_eligibility(&d, &ExcludeList::none()),
        Err(Ineligible::NoMac)
    );
    d.mac = Some(MacAddr::ZERO);
    assert_eq!(
        arp_eligibility(&d, &ExcludeList::none()),
        Err(Ineligible::NoMac)
    );
}

#[test]
fn allow_lists() {
    assert!(AllowedInterfaces::all().allows("anything"));
    let only = AllowedInterfaces::only(["eth0", "eth1"]);
    assert!(only.allows("eth1"));
    assert!(!only.allows("eth2"));
}
