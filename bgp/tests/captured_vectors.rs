//! Real BGP messages sent by FRR 8.4, GoBGP 3.10 and BIRD 2.0, captured on
//! the wire in the test kit's namespaces: `tests/vectors/captured/<sender>/`,
//! one file per message, written once by `examples/capture_vectors.rs` (see
//! `bgp/README.md`, "Captured vectors"). No router is needed here.
//!
//! Every file is checked the same way:
//!
//! 1. it decodes, with the context that the two OPENs of its session
//!    negotiate (each file's header records it; checked below);
//! 2. the value is what the router was configured to send ([`expectations`]:
//!    one entry per file, from the scenario's configuration);
//! 3. RFC 7606 accepts every UPDATE as it is: nothing treated as withdrawn,
//!    no attribute discarded;
//! 4. it encodes to the captured bytes, except for the two choices the
//!    routers and our encoder make differently ([`canonical`]): FRR sets
//!    the Extended Length flag on short AS_PATH, MP_REACH_NLRI and
//!    MP_UNREACH_NLRI attributes, BIRD on short MP_REACH_NLRI and
//!    MP_UNREACH_NLRI, where we use the one-octet length; and we set the
//!    Partial bit on the optional transitive attributes we do not interpret
//!    (extended communities and RFC 9234 OTC from FRR), as RFC 4271 5 asks
//!    of a speaker passing them on. GoBGP's messages, and every OPEN,
//!    KEEPALIVE, NOTIFICATION and ROUTE-REFRESH, re-encode byte for byte;
//! 5. the re-encoded message decodes to the same value (with that Partial
//!    bit), and encodes to the same bytes again.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use bgp::wire::{
    Afi, Aggregator, AsPath, AsSegment, Capabilities, Capability, Community, DecodeContext,
    EncodeContext, ExtendedNextHop, Family, GracefulRestart, GracefulRestartFamily, LargeCommunity,
    Message, NextHop, Notification, Open, Origin, PathAttribute, Prefix, RouteRefresh,
    RouteRefreshSubtype, SegmentType, UnknownCapability, Update, UpdateVerdict, attr_flags,
    attr_type, negotiate, validate_update,
};
use common::hex;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/captured");
const SENDERS: [&str; 3] = ["frr", "gobgp", "bird"];

// ------------------------------------------------------------------ files

/// One captured message and what its header says.
#[derive(Debug, Clone)]
struct Vector {
    /// `<sender>/<session>.<what>`, e.g. `frr/to-gobgp-v4.open`.
    name: String,
    sender: &'static str,
    /// `to-<peer>-<v4|v6|ibgp>`.
    session: String,
    /// The `# sender:` line.
    sender_line: String,
    ctx: DecodeContext,
    bytes: Vec<u8>,
}

impl Vector {
    fn message(&self) -> Message {
        common::decode(&self.bytes, &self.ctx)
            .unwrap_or_else(|n| panic!("{} does not decode: {n}", self.name))
    }

    fn encode_context(&self) -> EncodeContext {
        EncodeContext {
            four_octet_as: self.ctx.four_octet_as,
            extended_message: self.ctx.extended_message,
            ..EncodeContext::default()
        }
    }

    fn update(&self) -> Option<Update> {
        match self.message() {
            Message::Update(u) => Some(u),
            _ => None,
        }
    }
}

fn parse_bool(name: &str, text: &str, key: &str) -> bool {
    let value = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{name}: no {key} in the context line"));
    match value {
        "true" => true,
        "false" => false,
        other => panic!("{name}: {key}={other}"),
    }
}

fn parse(sender: &'static str, file: &str, text: &str) -> Vector {
    let stem = file.strip_suffix(".hex").expect("a .hex file");
    let name = format!("{sender}/{stem}");
    let header = |key: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
            .unwrap_or_else(|| panic!("{name}: no `# {key}:` line"))
            .to_string()
    };
    let context = header("context");
    let ctx = DecodeContext {
        four_octet_as: parse_bool(&name, &context, "four_octet_as"),
        extended_message: parse_bool(&name, &context, "extended_message"),
        ibgp: parse_bool(&name, &context, "ibgp"),
        ..DecodeContext::default()
    };
    let session = header("session")
        .split(',')
        .next()
        .expect("a session label")
        .to_string();
    assert!(
        stem.starts_with(&format!("{session}.")),
        "{name}: session {session}"
    );
    let digits: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
        .collect();
    assert!(
        digits.len().is_multiple_of(2),
        "{name}: odd number of hex digits"
    );
    let bytes = (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).expect("hex digits"))
        .collect();
    let sender_line = header("sender");
    Vector {
        name,
        sender,
        session,
        sender_line,
        ctx,
        bytes,
    }
}

/// Every captured message, sorted by name.
fn vectors() -> Vec<Vector> {
    let mut all = Vec::new();
    for sender in SENDERS {
        let dir = format!("{DIR}/{sender}");
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {dir}: {e}"));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let file = path
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            assert!(file.ends_with(".hex"), "unexpected file {}", path.display());
            let text = std::fs::read_to_string(&path).expect("readable");
            all.push(parse(sender, &file, &text));
        }
    }
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all
}

fn vector(name: &str) -> Vector {
    vectors()
        .into_iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no vector {name}"))
}

// ---------------------------------------------------------- expectations

/// A next hop as the tests state it: the link-local address (MAC-derived,
/// different in every lab) only as present or not; see
/// `link_local_next_hops_are_link_local`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Nh {
    V4(Ipv4Addr),
    V6 { global: Ipv6Addr, link_local: bool },
}

impl From<&NextHop> for Nh {
    fn from(n: &NextHop) -> Self {
        match n {
            NextHop::V4(a) => Nh::V4(*a),
            NextHop::V6 { global, link_local } => Nh::V6 {
                global: *global,
                link_local: link_local.is_some(),
            },
        }
    }
}

/// What an UPDATE carries, attribute by attribute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Facts {
    origin: Option<Origin>,
    as_path: Option<AsPath>,
    next_hop: Option<Ipv4Addr>,
    med: Option<u32>,
    local_pref: Option<u32>,
    atomic_aggregate: bool,
    aggregator: Option<Aggregator>,
    communities: Vec<Community>,
    large_communities: Vec<LargeCommunity>,
    /// Attributes the codec keeps without interpreting them: type, flags
    /// as received (Extended Length cleared), value.
    unknown: Vec<(u8, u8, Vec<u8>)>,
    withdrawn: Vec<Prefix>,
    nlri: Vec<Prefix>,
    mp_reach: Option<(Family, Nh, Vec<Prefix>)>,
    mp_unreach: Option<(Family, Vec<Prefix>)>,
}

impl Facts {
    fn of(name: &str, u: &Update) -> Facts {
        assert!(u.errors.is_empty(), "{name}: {:?}", u.errors);
        let mut f = Facts {
            withdrawn: u.withdrawn.clone(),
            nlri: u.nlri.clone(),
            ..Facts::default()
        };
        for a in &u.attributes {
            match a {
                PathAttribute::Origin(o) => f.origin = Some(*o),
                PathAttribute::AsPath(p) => f.as_path = Some(p.clone()),
                PathAttribute::NextHop(n) => f.next_hop = Some(*n),
                PathAttribute::MultiExitDisc(m) => f.med = Some(*m),
                PathAttribute::LocalPref(l) => f.local_pref = Some(*l),
                PathAttribute::AtomicAggregate => f.atomic_aggregate = true,
                PathAttribute::Aggregator(g) => f.aggregator = Some(*g),
                PathAttribute::Communities(c) => f.communities = c.clone(),
                PathAttribute::LargeCommunities(c) => f.large_communities = c.clone(),
                PathAttribute::MpReach(m) => {
                    f.mp_reach = Some((m.family, Nh::from(&m.next_hop), m.nlri.clone()));
                }
                PathAttribute::MpUnreach(m) => f.mp_unreach = Some((m.family, m.withdrawn.clone())),
                PathAttribute::Other(raw) => {
                    f.unknown
                        .push((raw.type_code, raw.flags, raw.value.to_vec()));
                }
                PathAttribute::As4Path(_) | PathAttribute::As4Aggregator(_) => {
                    panic!("{name}: AS4_PATH/AS4_AGGREGATOR between 4-octet speakers: {a:?}")
                }
            }
        }
        f
    }

    /// Classic NLRI with a NEXT_HOP.
    fn classic(mut self, next_hop: Ipv4Addr, nlri: &[&str]) -> Facts {
        self.next_hop = Some(next_hop);
        self.nlri = prefixes(nlri);
        self
    }

    /// MP_REACH_NLRI with an IPv6 next hop.
    fn mp(mut self, family: Family, global: &str, link_local: bool, nlri: &[&str]) -> Facts {
        let global = global.parse().expect("an IPv6 address");
        self.mp_reach = Some((family, Nh::V6 { global, link_local }, prefixes(nlri)));
        self
    }

    fn unknown(mut self, type_code: u8, flags: u8, value: &[u8]) -> Facts {
        self.unknown.push((type_code, flags, value.to_vec()));
        self
    }
}

fn prefixes(list: &[&str]) -> Vec<Prefix> {
    list.iter().map(|p| p.parse().expect("a prefix")).collect()
}

fn path(segments: &[(SegmentType, &[u32])]) -> AsPath {
    AsPath {
        segments: segments
            .iter()
            .map(|(kind, asns)| AsSegment {
                kind: *kind,
                asns: asns.to_vec(),
            })
            .collect(),
    }
}

fn seq(asns: &[u32]) -> AsPath {
    AsPath::sequence(asns.iter().copied())
}

fn comms(list: &[(u16, u16)]) -> Vec<Community> {
    list.iter().map(|(a, v)| Community::new(*a, *v)).collect()
}

fn large(list: &[(u32, u32, u32)]) -> Vec<LargeCommunity> {
    list.iter()
        .map(|(g, a, b)| LargeCommunity {
            global_admin: *g,
            local_data1: *a,
            local_data2: *b,
        })
        .collect()
}

fn withdraw(list: &[&str]) -> Facts {
    Facts {
        withdrawn: prefixes(list),
        ..Facts::default()
    }
}

fn mp_withdraw(family: Family, list: &[&str]) -> Facts {
    Facts {
        mp_unreach: Some((family, prefixes(list))),
        ..Facts::default()
    }
}

const V4: Family = Family::IPV4_UNICAST;
const V6: Family = Family::IPV6_UNICAST;
const FRR_NH4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const FRR_NH6: &str = "2001:db8:0:1::1";
const GOBGP_NH4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const GOBGP_NH6: &str = "2001:db8:0:1::2";
/// GoBGP's IPv6 next hop on an IPv4 session: its IPv4 address, mapped.
const GOBGP_NH6_MAPPED: &str = "::ffff:192.0.2.2";
const IBGP_NH4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);
const BIRD_NH4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 12);
const BIRD_NH6: &str = "2001:db8:0:1::12";
const OPTIONAL_TRANSITIVE: u8 = attr_flags::OPTIONAL | attr_flags::TRANSITIVE;
/// FRR's `set extcommunity rt 64512:7`: EXTENDED COMMUNITIES (16), one
/// two-octet-AS route target.
const EXT_RT_64512_7: [u8; 8] = [0x00, 0x02, 0xfc, 0x00, 0, 0, 0, 7];
/// RFC 9234 Only-to-Customer (35) with FRR's AS, added by FRR (`local-role
/// provider`) towards BIRD (`local role customer`).
const OTC_64512: [u8; 4] = [0, 0, 0xfc, 0x00];
/// The FQDN capability (73) every router sends: the host name ("vm", the
/// machine's: namespaces share the UTS name) and an empty domain.
const FQDN_VM: [u8; 4] = [2, b'v', b'm', 0];

/// FRR's own IPv4 routes to eBGP peers (route-map TO-EBGP seq 10:
/// communities, large communities, MED 50, prepend 64512 64512, route
/// target 64512:7), without the next hop and NLRI.
fn frr_own_v4(otc: bool) -> Facts {
    let f = Facts {
        origin: Some(Origin::Igp),
        as_path: Some(seq(&[64512, 64512, 64512])),
        med: Some(50),
        communities: comms(&[(64512, 100), (64512, 200)]),
        large_communities: large(&[(64512, 1, 2), (64512, 3, 4)]),
        ..Facts::default()
    }
    .unknown(16, OPTIONAL_TRANSITIVE, &EXT_RT_64512_7);
    if otc {
        f.unknown(35, OPTIONAL_TRANSITIVE, &OTC_64512)
    } else {
        f
    }
}

/// FRR's own IPv6 routes (TO-EBGP seq 30: MED 60, 64512:600, 64512:6:6).
fn frr_own_v6(nlri: &[&str], otc: bool) -> Facts {
    let f = Facts {
        origin: Some(Origin::Igp),
        as_path: Some(seq(&[64512])),
        med: Some(60),
        communities: comms(&[(64512, 600)]),
        large_communities: large(&[(64512, 6, 6)]),
        ..Facts::default()
    }
    .mp(V6, FRR_NH6, true, nlri);
    if otc {
        f.unknown(35, OPTIONAL_TRANSITIVE, &OTC_64512)
    } else {
        f
    }
}

/// FRR's `aggregate-address 198.51.100.128/25 as-set summary-only` over
/// the iBGP routes of GoBGP in node-1: their ASes (a set), the community
/// they carry, ORIGIN INCOMPLETE as theirs, AGGREGATOR FRR.
fn frr_as_set_aggregate(as_path: AsPath, otc: bool) -> Facts {
    let f = Facts {
        origin: Some(Origin::Incomplete),
        as_path: Some(as_path),
        med: Some(0),
        aggregator: Some(Aggregator {
            asn: 64512,
            address: FRR_NH4,
        }),
        communities: comms(&[(64512, 192)]),
        ..Facts::default()
    };
    if otc {
        f.unknown(35, OPTIONAL_TRANSITIVE, &OTC_64512)
    } else {
        f
    }
}

/// FRR's `aggregate-address 198.51.100.64/26 summary-only` (no as-set):
/// ATOMIC_AGGREGATE and AGGREGATOR.
fn frr_atomic_aggregate(otc: bool) -> Facts {
    let f = Facts {
        origin: Some(Origin::Igp),
        as_path: Some(seq(&[64512])),
        med: Some(0),
        atomic_aggregate: true,
        aggregator: Some(Aggregator {
            asn: 64512,
            address: FRR_NH4,
        }),
        ..Facts::default()
    };
    if otc {
        f.unknown(35, OPTIONAL_TRANSITIVE, &OTC_64512)
    } else {
        f
    }
}

/// The AS_SET aggregate as first sent (three components) and after GoBGP
/// withdrew 198.51.100.224/27 (one left: a plain sequence).
fn as_set_path() -> AsPath {
    path(&[
        (SegmentType::AsSequence, &[64512]),
        (SegmentType::AsSet, &[64600, 64601, 64602]),
    ])
}

fn one_component_path() -> AsPath {
    seq(&[64512, 64600, 64601])
}

/// GoBGP's `global rib add -a ipv4 198.51.100.32/29 origin egp aspath
/// 64530,64531 med 20 community 64514:10,64514:20,no-export
/// large-community 64514:1:1,64514:2:2 aggregator 64514:192.0.2.2`.
fn gobgp_32() -> Facts {
    Facts {
        origin: Some(Origin::Egp),
        as_path: Some(seq(&[64514, 64530, 64531])),
        med: Some(20),
        aggregator: Some(Aggregator {
            asn: 64514,
            address: GOBGP_NH4,
        }),
        communities: vec![
            Community::new(64514, 10),
            Community::new(64514, 20),
            Community::NO_EXPORT,
        ],
        large_communities: large(&[(64514, 1, 1), (64514, 2, 2)]),
        ..Facts::default()
    }
}

/// A GoBGP route added without attributes: ORIGIN INCOMPLETE (GoBGP's
/// default), its AS alone.
fn gobgp_plain() -> Facts {
    Facts {
        origin: Some(Origin::Incomplete),
        as_path: Some(seq(&[64514])),
        ..Facts::default()
    }
}

/// `-a ipv6 2001:db8:100::40/124 aspath "64530 {64540,64541}" community
/// 64514:60 large-community 64514:6:6`.
fn gobgp_40(next_hop: &str) -> Facts {
    Facts {
        origin: Some(Origin::Incomplete),
        as_path: Some(path(&[
            (SegmentType::AsSequence, &[64514, 64530]),
            (SegmentType::AsSet, &[64540, 64541]),
        ])),
        communities: comms(&[(64514, 60)]),
        large_communities: large(&[(64514, 6, 6)]),
        ..Facts::default()
    }
    .mp(V6, next_hop, false, &["2001:db8:100::40/124"])
}

/// `-a ipv6 2001:db8:100::60/124` with a path of 70 ASes (64600..=64669)
/// and 70 communities (64514:1..=70): both attributes over 255 bytes.
fn gobgp_60(next_hop: &str) -> Facts {
    let mut asns = vec![64514];
    asns.extend(64600..=64669);
    Facts {
        origin: Some(Origin::Incomplete),
        as_path: Some(seq(&asns)),
        communities: (1..=70).map(|n| Community::new(64514, n)).collect(),
        ..Facts::default()
    }
    .mp(V6, next_hop, false, &["2001:db8:100::60/124"])
}

/// BIRD's export filter for 198.51.100.48/29: two communities, a large
/// community, MED 70, `bgp_path.prepend(64530)` (BIRD adds its AS after).
fn bird_48() -> Facts {
    Facts {
        origin: Some(Origin::Igp),
        as_path: Some(seq(&[64516, 64530])),
        med: Some(70),
        communities: comms(&[(64516, 10), (64516, 20)]),
        large_communities: large(&[(64516, 1, 1)]),
        ..Facts::default()
    }
    .classic(BIRD_NH4, &["198.51.100.48/29"])
}

fn bird_plain() -> Facts {
    Facts {
        origin: Some(Origin::Igp),
        as_path: Some(seq(&[64516])),
        ..Facts::default()
    }
}

/// What a captured message must decode to.
// A table of 90 entries built once per test: boxing `Facts` buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Expect {
    Open {
        my_as: u16,
        hold_time: u16,
        bgp_id: Ipv4Addr,
        /// How many optional parameters (FRR: one per capability; GoBGP
        /// and BIRD: all in one).
        parameters: usize,
        capabilities: Vec<Capability>,
    },
    Keepalive,
    Notification(Notification),
    RouteRefresh(RouteRefresh),
    EndOfRib(Family),
    Update(Facts),
}

fn unknown(code: u8, value: &[u8]) -> Capability {
    Capability::Unknown(UnknownCapability {
        code,
        value: value.to_vec().into(),
    })
}

fn graceful_restart(flags: u8, families: &[Family]) -> Capability {
    Capability::GracefulRestart(GracefulRestart {
        flags,
        restart_time: 120,
        families: families
            .iter()
            .map(|f| GracefulRestartFamily {
                family: *f,
                flags: 0,
            })
            .collect(),
    })
}

fn ipv4_over_ipv6() -> Capability {
    Capability::ExtendedNextHop(vec![ExtendedNextHop::new(V4, Afi::IPV6)])
}

/// FRR's capabilities, in its order. ADD-PATH (69) receive for each family
/// is FRR's default; long-lived GR (71, stale time 30 s, F bit) from `bgp
/// long-lived-graceful-restart stale-time 30`; GR (64) with the R bit (it
/// has just started) and the N bit (RFC 8538, FRR's default), restart time
/// 120. `role` is RFC 9234's (9) from `local-role`; `orf_dynamic` adds
/// `capability orf prefix-list both` (3, and Cisco's 130) and `capability
/// dynamic` (67, and the old 66).
fn frr_caps(
    families: &[Family],
    extended_next_hop: bool,
    role: Option<u8>,
    orf_dynamic: bool,
) -> Vec<Capability> {
    let mut caps = Vec::new();
    for f in families {
        caps.push(Capability::Multiprotocol(*f));
        if *f == V4 && extended_next_hop {
            caps.push(ipv4_over_ipv6());
        }
    }
    caps.extend([
        Capability::RouteRefreshOld,
        Capability::RouteRefresh,
        Capability::EnhancedRouteRefresh,
        Capability::FourOctetAs(64512),
        Capability::ExtendedMessage,
    ]);
    if let Some(role) = role {
        caps.push(unknown(9, &[role]));
    }
    let mut add_path = Vec::new();
    let mut llgr = Vec::new();
    for f in families {
        let afi = u8::try_from(f.afi.0).expect("AFI 1 or 2");
        add_path.extend_from_slice(&[0, afi, 1, 1]);
        llgr.extend_from_slice(&[0, afi, 1, 0x80, 0, 0, 30]);
    }
    caps.push(unknown(69, &add_path));
    if orf_dynamic {
        caps.extend([
            unknown(130, &[0, 1, 0, 1, 1, 0x80, 3]),
            unknown(3, &[0, 1, 0, 1, 1, 0x40, 3]),
            unknown(66, &[]),
            unknown(67, &[]),
        ]);
    }
    caps.extend([
        unknown(73, &FQDN_VM),
        graceful_restart(
            GracefulRestart::RESTART_STATE | GracefulRestart::NOTIFICATION,
            families,
        ),
        unknown(71, &llgr),
    ]);
    caps
}

fn expectations() -> BTreeMap<&'static str, Expect> {
    use Expect::*;
    let frr_open = |parameters, capabilities| Open {
        my_as: 64512,
        hold_time: 180,
        bgp_id: FRR_NH4,
        parameters,
        capabilities,
    };
    let rr = |family, subtype| RouteRefresh(bgp::wire::RouteRefresh { family, subtype });
    let shutdown = |m: &str| Notification(bgp::wire::Notification::administrative_shutdown(m));
    let gobgp_open = |my_as, bgp_id, capabilities| Open {
        my_as,
        hold_time: 90,
        bgp_id,
        parameters: 1,
        capabilities,
    };
    let gobgp_llgr_v4 = unknown(71, &[0, 1, 1, 0, 0, 0x01, 0x2c]);
    let v4v6 = [V4, V6];

    let mut e: BTreeMap<&'static str, Expect> = BTreeMap::new();
    let mut add = |name: &'static str, x: Expect| {
        assert!(e.insert(name, x).is_none(), "{name} twice");
    };

    // ---- FRR -> BIRD (eBGP, IPv4 session, IPv4 + IPv6, role provider).
    add(
        "frr/to-bird-v4.open",
        frr_open(12, frr_caps(&v4v6, false, Some(0), false)),
    );
    add("frr/to-bird-v4.keepalive", Keepalive);
    add(
        "frr/to-bird-v4.update-198.51.100.0_28",
        Update(frr_own_v4(true).classic(FRR_NH4, &["198.51.100.0/28", "198.51.100.16/28"])),
    );
    add(
        "frr/to-bird-v4.update-198.51.100.0_28-2",
        Update(frr_own_v4(true).classic(FRR_NH4, &["198.51.100.0/28"])),
    );
    add(
        "frr/to-bird-v4.update-2001_db8_100___124",
        Update(frr_own_v6(
            &["2001:db8:100::/124", "2001:db8:100::10/124"],
            true,
        )),
    );
    add(
        "frr/to-bird-v4.update-2001_db8_100___124-2",
        Update(frr_own_v6(&["2001:db8:100::/124"], true)),
    );
    add("frr/to-bird-v4.eor-ipv4", EndOfRib(V4));
    add("frr/to-bird-v4.eor-ipv6", EndOfRib(V6));
    add(
        "frr/to-bird-v4.update-198.51.100.128_25",
        Update(frr_as_set_aggregate(as_set_path(), true).classic(FRR_NH4, &["198.51.100.128/25"])),
    );
    add(
        "frr/to-bird-v4.update-198.51.100.128_25-2",
        Update(
            frr_as_set_aggregate(one_component_path(), true)
                .classic(FRR_NH4, &["198.51.100.128/25"]),
        ),
    );
    add(
        "frr/to-bird-v4.update-198.51.100.64_26",
        Update(frr_atomic_aggregate(true).classic(FRR_NH4, &["198.51.100.64/26"])),
    );
    add(
        "frr/to-bird-v4.withdraw-198.51.100.16_28",
        Update(withdraw(&["198.51.100.16/28"])),
    );
    add(
        "frr/to-bird-v4.withdraw-2001_db8_100__10_124",
        Update(mp_withdraw(V6, &["2001:db8:100::10/124"])),
    );
    add(
        "frr/to-bird-v4.route-refresh-ipv4-request",
        rr(V4, RouteRefreshSubtype::Request),
    );
    // FRR's answer to BIRD's `reload in` (enhanced route refresh).
    for (name, family, subtype) in [
        (
            "frr/to-bird-v4.route-refresh-ipv4-borr",
            V4,
            RouteRefreshSubtype::BeginningOfRefresh,
        ),
        (
            "frr/to-bird-v4.route-refresh-ipv4-eorr",
            V4,
            RouteRefreshSubtype::EndOfRefresh,
        ),
        (
            "frr/to-bird-v4.route-refresh-ipv6-borr",
            V6,
            RouteRefreshSubtype::BeginningOfRefresh,
        ),
        (
            "frr/to-bird-v4.route-refresh-ipv6-eorr",
            V6,
            RouteRefreshSubtype::EndOfRefresh,
        ),
    ] {
        add(name, rr(family, subtype));
    }

    // ---- FRR -> GoBGP in router2 (eBGP, IPv4 session, IPv4 + IPv6).
    add(
        "frr/to-gobgp-v4.open",
        frr_open(15, frr_caps(&v4v6, false, None, true)),
    );
    add("frr/to-gobgp-v4.keepalive", Keepalive);
    add(
        "frr/to-gobgp-v4.update-198.51.100.0_28",
        Update(frr_own_v4(false).classic(FRR_NH4, &["198.51.100.0/28", "198.51.100.16/28"])),
    );
    add(
        "frr/to-gobgp-v4.update-2001_db8_100___124",
        Update(frr_own_v6(
            &["2001:db8:100::/124", "2001:db8:100::10/124"],
            false,
        )),
    );
    add("frr/to-gobgp-v4.eor-ipv4", EndOfRib(V4));
    add("frr/to-gobgp-v4.eor-ipv6", EndOfRib(V6));
    add(
        "frr/to-gobgp-v4.update-198.51.100.128_25",
        Update(frr_as_set_aggregate(as_set_path(), false).classic(FRR_NH4, &["198.51.100.128/25"])),
    );
    add(
        "frr/to-gobgp-v4.update-198.51.100.128_25-2",
        Update(
            frr_as_set_aggregate(one_component_path(), false)
                .classic(FRR_NH4, &["198.51.100.128/25"]),
        ),
    );
    add(
        "frr/to-gobgp-v4.update-198.51.100.64_26",
        Update(frr_atomic_aggregate(false).classic(FRR_NH4, &["198.51.100.64/26"])),
    );
    add(
        "frr/to-gobgp-v4.withdraw-198.51.100.16_28",
        Update(withdraw(&["198.51.100.16/28"])),
    );
    add(
        "frr/to-gobgp-v4.withdraw-2001_db8_100__10_124",
        Update(mp_withdraw(V6, &["2001:db8:100::10/124"])),
    );
    // `no neighbor 192.0.2.2` with the N bit on both sides: RFC 8538.
    add(
        "frr/to-gobgp-v4.notification-6-9",
        Notification(bgp::wire::Notification::hard_reset(
            bgp::wire::Notification::PeerDeconfigured,
        )),
    );

    // ---- FRR -> GoBGP in router2 (eBGP, IPv6 session, IPv4 + IPv6):
    // IPv4 routes with an IPv6 next hop (RFC 8950).
    add(
        "frr/to-gobgp-v6.open",
        frr_open(12, frr_caps(&v4v6, true, None, false)),
    );
    add("frr/to-gobgp-v6.keepalive", Keepalive);
    add(
        "frr/to-gobgp-v6.update-198.51.100.0_28",
        Update(frr_own_v4(false).mp(V4, FRR_NH6, true, &["198.51.100.0/28", "198.51.100.16/28"])),
    );
    add(
        "frr/to-gobgp-v6.update-2001_db8_100___124",
        Update(frr_own_v6(
            &["2001:db8:100::/124", "2001:db8:100::10/124"],
            false,
        )),
    );
    add("frr/to-gobgp-v6.eor-ipv4", EndOfRib(V4));
    add("frr/to-gobgp-v6.eor-ipv6", EndOfRib(V6));
    add(
        "frr/to-gobgp-v6.update-198.51.100.128_25",
        Update(frr_as_set_aggregate(as_set_path(), false).mp(
            V4,
            FRR_NH6,
            true,
            &["198.51.100.128/25"],
        )),
    );
    add(
        "frr/to-gobgp-v6.update-198.51.100.128_25-2",
        Update(frr_as_set_aggregate(one_component_path(), false).mp(
            V4,
            FRR_NH6,
            true,
            &["198.51.100.128/25"],
        )),
    );
    add(
        "frr/to-gobgp-v6.update-198.51.100.64_26",
        Update(frr_atomic_aggregate(false).mp(V4, FRR_NH6, true, &["198.51.100.64/26"])),
    );
    add(
        "frr/to-gobgp-v6.withdraw-198.51.100.16_28",
        Update(mp_withdraw(V4, &["198.51.100.16/28"])),
    );
    add(
        "frr/to-gobgp-v6.withdraw-2001_db8_100__10_124",
        Update(mp_withdraw(V6, &["2001:db8:100::10/124"])),
    );
    add(
        "frr/to-gobgp-v6.route-refresh-ipv6-request",
        rr(V6, RouteRefreshSubtype::Request),
    );

    // ---- FRR -> GoBGP in node-1 (iBGP; route-map TO-IBGP).
    add(
        "frr/to-gobgp-ibgp.open",
        frr_open(10, frr_caps(&[V4], false, None, false)),
    );
    add("frr/to-gobgp-ibgp.keepalive", Keepalive);
    add(
        "frr/to-gobgp-ibgp.update-198.51.100.0_28",
        Update(
            Facts {
                origin: Some(Origin::Incomplete),
                as_path: Some(AsPath::empty()),
                med: Some(0),
                local_pref: Some(250),
                communities: vec![Community::new(64512, 300), Community::NO_EXPORT],
                ..Facts::default()
            }
            .classic(FRR_NH4, &["198.51.100.0/28", "198.51.100.16/28"]),
        ),
    );
    add(
        "frr/to-gobgp-ibgp.withdraw-198.51.100.16_28",
        Update(withdraw(&["198.51.100.16/28"])),
    );
    // No graceful restart on this session: a plain Cease with RFC 9003's
    // message.
    add(
        "frr/to-gobgp-ibgp.notification-6-2",
        shutdown("frr capture done"),
    );

    // ---- GoBGP in router2 -> FRR, IPv4 session.
    // GoBGP's capabilities, in its order: FQDN (73) early, graceful
    // restart with the N bit (`notification-enabled`) where configured,
    // long-lived GR (71, stale time 300 s) on the IPv4 session, and
    // extended next hop for IPv4 over IPv6 (its default) last.
    let gobgp_caps = |asn: u32, families: &[Family], gr: bool, llgr: bool| {
        let mut caps = vec![Capability::RouteRefresh, unknown(73, &FQDN_VM)];
        caps.extend(families.iter().map(|f| Capability::Multiprotocol(*f)));
        caps.push(Capability::FourOctetAs(asn));
        if gr {
            caps.push(graceful_restart(GracefulRestart::NOTIFICATION, families));
        }
        if llgr {
            caps.push(gobgp_llgr_v4.clone());
        }
        caps.push(ipv4_over_ipv6());
        caps
    };
    add(
        "gobgp/to-frr-v4.open",
        gobgp_open(64514, GOBGP_NH4, gobgp_caps(64514, &v4v6, true, true)),
    );
    add("gobgp/to-frr-v4.keepalive", Keepalive);
    add(
        "gobgp/to-frr-v4.update-198.51.100.32_29",
        Update(gobgp_32().classic(GOBGP_NH4, &["198.51.100.32/29"])),
    );
    add(
        "gobgp/to-frr-v4.update-198.51.100.40_29",
        Update(gobgp_plain().classic(GOBGP_NH4, &["198.51.100.40/29"])),
    );
    add(
        "gobgp/to-frr-v4.update-2001_db8_100__40_124",
        Update(gobgp_40(GOBGP_NH6_MAPPED)),
    );
    add(
        "gobgp/to-frr-v4.update-2001_db8_100__50_124",
        Update(gobgp_plain().mp(V6, GOBGP_NH6_MAPPED, false, &["2001:db8:100::50/124"])),
    );
    add(
        "gobgp/to-frr-v4.update-2001_db8_100__60_124",
        Update(gobgp_60(GOBGP_NH6_MAPPED)),
    );
    add("gobgp/to-frr-v4.eor-ipv4", EndOfRib(V4));
    add("gobgp/to-frr-v4.eor-ipv6", EndOfRib(V6));
    add(
        "gobgp/to-frr-v4.withdraw-198.51.100.40_29",
        Update(withdraw(&["198.51.100.40/29"])),
    );
    add(
        "gobgp/to-frr-v4.withdraw-2001_db8_100__50_124",
        Update(mp_withdraw(V6, &["2001:db8:100::50/124"])),
    );

    // ---- GoBGP in router2 -> FRR, IPv6 session (RFC 8950 for IPv4).
    add(
        "gobgp/to-frr-v6.open",
        gobgp_open(64514, GOBGP_NH4, gobgp_caps(64514, &v4v6, true, false)),
    );
    add("gobgp/to-frr-v6.keepalive", Keepalive);
    add(
        "gobgp/to-frr-v6.update-198.51.100.32_29",
        Update(gobgp_32().mp(V4, GOBGP_NH6, false, &["198.51.100.32/29"])),
    );
    add(
        "gobgp/to-frr-v6.update-198.51.100.40_29",
        Update(gobgp_plain().mp(V4, GOBGP_NH6, false, &["198.51.100.40/29"])),
    );
    add(
        "gobgp/to-frr-v6.update-2001_db8_100__40_124",
        Update(gobgp_40(GOBGP_NH6)),
    );
    add(
        "gobgp/to-frr-v6.update-2001_db8_100__50_124",
        Update(gobgp_plain().mp(V6, GOBGP_NH6, false, &["2001:db8:100::50/124"])),
    );
    add(
        "gobgp/to-frr-v6.update-2001_db8_100__60_124",
        Update(gobgp_60(GOBGP_NH6)),
    );
    add("gobgp/to-frr-v6.eor-ipv4", EndOfRib(V4));
    add("gobgp/to-frr-v6.eor-ipv6", EndOfRib(V6));
    // Announced in MP_REACH_NLRI, withdrawn in the classic field.
    add(
        "gobgp/to-frr-v6.withdraw-198.51.100.40_29",
        Update(withdraw(&["198.51.100.40/29"])),
    );
    add(
        "gobgp/to-frr-v6.withdraw-2001_db8_100__50_124",
        Update(mp_withdraw(V6, &["2001:db8:100::50/124"])),
    );
    // `gobgp neighbor ... shutdown --reason`: no Hard Reset from GoBGP.
    add(
        "gobgp/to-frr-v6.notification-6-2",
        shutdown("gobgp capture done"),
    );

    // ---- GoBGP in node-1 -> FRR (iBGP).
    add(
        "gobgp/to-frr-ibgp.open",
        gobgp_open(64512, IBGP_NH4, gobgp_caps(64512, &[V4], false, false)),
    );
    add("gobgp/to-frr-ibgp.keepalive", Keepalive);
    add(
        "gobgp/to-frr-ibgp.update-198.51.100.192_27",
        Update(
            Facts {
                origin: Some(Origin::Incomplete),
                as_path: Some(seq(&[64600, 64601])),
                local_pref: Some(300),
                communities: comms(&[(64512, 192)]),
                ..Facts::default()
            }
            .classic(IBGP_NH4, &["198.51.100.192/27"]),
        ),
    );
    add(
        "gobgp/to-frr-ibgp.update-198.51.100.224_27",
        Update(
            Facts {
                origin: Some(Origin::Incomplete),
                as_path: Some(seq(&[64602])),
                med: Some(5),
                local_pref: Some(200),
                ..Facts::default()
            }
            .classic(IBGP_NH4, &["198.51.100.224/27"]),
        ),
    );
    add(
        "gobgp/to-frr-ibgp.withdraw-198.51.100.224_27",
        Update(withdraw(&["198.51.100.224/27"])),
    );

    // ---- BIRD -> FRR (eBGP, IPv4 session, IPv4 + IPv6).
    add(
        "bird/to-frr-v4.open",
        Open {
            my_as: 64516,
            hold_time: 240,
            bgp_id: BIRD_NH4,
            parameters: 1,
            capabilities: vec![
                Capability::Multiprotocol(V4),
                Capability::Multiprotocol(V6),
                Capability::RouteRefresh,
                Capability::ExtendedMessage,
                // RFC 9234 role: customer.
                unknown(9, &[3]),
                // `graceful restart on`: no R, no N bit.
                graceful_restart(0, &v4v6),
                Capability::FourOctetAs(64516),
                // `add paths rx` on the IPv4 channel.
                unknown(69, &[0, 1, 1, 1]),
                Capability::EnhancedRouteRefresh,
                // `long lived graceful restart on`: stale time 3600 s.
                unknown(71, &[0, 1, 1, 0, 0, 0x0e, 0x10, 0, 2, 1, 0, 0, 0x0e, 0x10]),
                // `advertise hostname on`.
                unknown(73, &FQDN_VM),
            ],
        },
    );
    add("bird/to-frr-v4.keepalive", Keepalive);
    add("bird/to-frr-v4.update-198.51.100.48_29", Update(bird_48()));
    add(
        "bird/to-frr-v4.update-198.51.100.56_29",
        Update(bird_plain().classic(BIRD_NH4, &["198.51.100.56/29"])),
    );
    add(
        "bird/to-frr-v4.update-2001_db8_100__80_124",
        Update(
            Facts {
                communities: comms(&[(64516, 60)]),
                large_communities: large(&[(64516, 6, 6)]),
                ..bird_plain()
            }
            .mp(V6, BIRD_NH6, true, &["2001:db8:100::80/124"]),
        ),
    );
    add(
        "bird/to-frr-v4.update-2001_db8_100__90_124",
        Update(bird_plain().mp(V6, BIRD_NH6, true, &["2001:db8:100::90/124"])),
    );
    add("bird/to-frr-v4.eor-ipv4", EndOfRib(V4));
    add("bird/to-frr-v4.eor-ipv6", EndOfRib(V6));
    add(
        "bird/to-frr-v4.withdraw-198.51.100.56_29",
        Update(withdraw(&["198.51.100.56/29"])),
    );
    add(
        "bird/to-frr-v4.withdraw-2001_db8_100__90_124",
        Update(mp_withdraw(V6, &["2001:db8:100::90/124"])),
    );
    // `birdc reload in peer0`, and BIRD's answer to FRR's `clear ... in`.
    for (name, family, subtype) in [
        (
            "bird/to-frr-v4.route-refresh-ipv4-request",
            V4,
            RouteRefreshSubtype::Request,
        ),
        (
            "bird/to-frr-v4.route-refresh-ipv6-request",
            V6,
            RouteRefreshSubtype::Request,
        ),
        (
            "bird/to-frr-v4.route-refresh-ipv4-borr",
            V4,
            RouteRefreshSubtype::BeginningOfRefresh,
        ),
        (
            "bird/to-frr-v4.route-refresh-ipv4-eorr",
            V4,
            RouteRefreshSubtype::EndOfRefresh,
        ),
    ] {
        add(name, rr(family, subtype));
    }
    add(
        "bird/to-frr-v4.notification-6-2",
        shutdown("bird capture done"),
    );
    e
}

fn check(v: &Vector, expect: &Expect) {
    let msg = v.message();
    let name = &v.name;
    match (expect, &msg) {
        (
            Expect::Open {
                my_as,
                hold_time,
                bgp_id,
                parameters,
                capabilities,
            },
            Message::Open(o),
        ) => {
            assert_eq!(o.version, 4, "{name}");
            assert_eq!(o.my_as, *my_as, "{name}");
            assert_eq!(o.asn(), u32::from(*my_as), "{name}");
            assert_eq!(o.hold_time.seconds(), *hold_time, "{name}");
            assert_eq!(o.bgp_id, *bgp_id, "{name}");
            assert!(!o.extended_parameters, "{name}");
            assert_eq!(o.parameters.len(), *parameters, "{name}");
            let caps: Vec<Capability> = o.capabilities().cloned().collect();
            assert_eq!(&caps, capabilities, "{name}");
        }
        (Expect::Keepalive, Message::Keepalive) => {}
        (Expect::Notification(n), Message::Notification(got)) => assert_eq!(got, n, "{name}"),
        (Expect::RouteRefresh(rr), Message::RouteRefresh(got)) => assert_eq!(got, rr, "{name}"),
        (Expect::EndOfRib(f), Message::Update(u)) => {
            assert_eq!(u, &Update::end_of_rib(*f), "{name}");
            assert_eq!(u.end_of_rib_family(), Some(*f), "{name}");
        }
        (Expect::Update(facts), Message::Update(u)) => {
            assert_eq!(u.end_of_rib_family(), None, "{name}");
            assert_eq!(&Facts::of(name, u), facts, "{name}");
        }
        (expect, msg) => panic!("{name}: expected {expect:?}, decoded {msg:?}"),
    }
}

// ------------------------------------------------------- canonical bytes

/// Where our encoder writes a captured message differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Change {
    /// The attribute had the Extended Length flag with a value of at most
    /// 255 bytes; we write the one-octet length.
    ShortLength(u8),
    /// An optional transitive attribute we do not interpret: we set the
    /// Partial bit when passing it on.
    Partial(u8),
}

/// The type codes the codec interprets.
const INTERPRETED: [u8; 13] = [1, 2, 3, 4, 5, 6, 7, 8, 14, 15, 17, 18, 32];

/// The captured bytes as our encoder writes them, and what differs.
fn canonical(bytes: &[u8]) -> (Vec<u8>, Vec<Change>) {
    if bytes[18] != 2 {
        return (bytes.to_vec(), Vec::new());
    }
    let body = &bytes[19..];
    let withdrawn_len = usize::from(u16::from_be_bytes([body[0], body[1]]));
    let withdrawn = &body[2..2 + withdrawn_len];
    let at = 2 + withdrawn_len;
    let attr_len = usize::from(u16::from_be_bytes([body[at], body[at + 1]]));
    let mut attrs = &body[at + 2..at + 2 + attr_len];
    let nlri = &body[at + 2 + attr_len..];
    let mut changes = Vec::new();
    let mut out_attrs = Vec::new();
    while !attrs.is_empty() {
        let (mut flags, type_code) = (attrs[0], attrs[1]);
        let (len, header) = if flags & attr_flags::EXTENDED_LENGTH != 0 {
            (usize::from(u16::from_be_bytes([attrs[2], attrs[3]])), 4)
        } else {
            (usize::from(attrs[2]), 3)
        };
        let value = &attrs[header..header + len];
        attrs = &attrs[header + len..];
        if header == 4 && len <= 255 {
            flags &= !attr_flags::EXTENDED_LENGTH;
            changes.push(Change::ShortLength(type_code));
        }
        if flags & OPTIONAL_TRANSITIVE == OPTIONAL_TRANSITIVE
            && flags & attr_flags::PARTIAL == 0
            && !INTERPRETED.contains(&type_code)
        {
            flags |= attr_flags::PARTIAL;
            changes.push(Change::Partial(type_code));
        }
        out_attrs.push(flags);
        out_attrs.push(type_code);
        if flags & attr_flags::EXTENDED_LENGTH != 0 {
            out_attrs.extend_from_slice(&u16::try_from(len).expect("u16").to_be_bytes());
        } else {
            out_attrs.push(u8::try_from(len).expect("short"));
        }
        out_attrs.extend_from_slice(value);
    }
    let mut body = Vec::new();
    body.extend_from_slice(&u16::try_from(withdrawn.len()).expect("u16").to_be_bytes());
    body.extend_from_slice(withdrawn);
    body.extend_from_slice(&u16::try_from(out_attrs.len()).expect("u16").to_be_bytes());
    body.extend_from_slice(&out_attrs);
    body.extend_from_slice(nlri);
    (common::message(2, &body), changes)
}

/// `msg` as we pass it on: the Partial bit set on the optional transitive
/// attributes we do not interpret.
fn passed_on(msg: Message) -> Message {
    let Message::Update(mut u) = msg else {
        return msg;
    };
    for a in &mut u.attributes {
        if let PathAttribute::Other(raw) = a
            && raw.flags & OPTIONAL_TRANSITIVE == OPTIONAL_TRANSITIVE
        {
            raw.flags |= attr_flags::PARTIAL;
        }
    }
    Message::Update(u)
}

// ------------------------------------------------------------------ tests

#[test]
fn what_was_captured() {
    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for v in vectors() {
        let kind = match v.message() {
            Message::Open(_) => "OPEN",
            Message::Update(_) => "UPDATE",
            Message::Notification(_) => "NOTIFICATION",
            Message::Keepalive => "KEEPALIVE",
            Message::RouteRefresh(_) => "ROUTE-REFRESH",
        };
        *counts.entry((v.sender, kind)).or_default() += 1;
    }
    let want: BTreeMap<(&str, &str), usize> = [
        (("bird", "KEEPALIVE"), 1),
        (("bird", "NOTIFICATION"), 1),
        (("bird", "OPEN"), 1),
        (("bird", "ROUTE-REFRESH"), 4),
        (("bird", "UPDATE"), 8),
        (("frr", "KEEPALIVE"), 4),
        (("frr", "NOTIFICATION"), 2),
        (("frr", "OPEN"), 4),
        (("frr", "ROUTE-REFRESH"), 6),
        (("frr", "UPDATE"), 31),
        (("gobgp", "KEEPALIVE"), 3),
        (("gobgp", "NOTIFICATION"), 1),
        (("gobgp", "OPEN"), 3),
        (("gobgp", "UPDATE"), 21),
    ]
    .into_iter()
    .collect();
    assert_eq!(counts, want);
}

#[test]
fn headers_name_the_router_and_its_version() {
    for v in vectors() {
        let prefix = match v.sender {
            "frr" => "FRR 8.4",
            "gobgp" => "GoBGP 3.",
            "bird" => "BIRD 2.0",
            other => panic!("{other}"),
        };
        assert!(
            v.sender_line.starts_with(prefix),
            "{}: {}",
            v.name,
            v.sender_line
        );
    }
}

#[test]
fn every_vector_decodes_to_what_its_router_was_told_to_send() {
    let expectations = expectations();
    let all = vectors();
    let names: BTreeSet<&str> = all.iter().map(|v| v.name.as_str()).collect();
    let expected: BTreeSet<&str> = expectations.keys().copied().collect();
    assert_eq!(
        names.difference(&expected).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "files without an expectation"
    );
    assert_eq!(
        expected.difference(&names).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "expectations without a file"
    );
    for v in &all {
        check(v, &expectations[v.name.as_str()]);
    }
}

#[test]
fn every_vector_re_encodes_to_its_capture_up_to_two_documented_choices() {
    let mut changes: BTreeMap<&str, BTreeSet<Change>> = BTreeMap::new();
    let mut identical = 0;
    let mut changed: BTreeMap<&str, usize> = BTreeMap::new();
    let all = vectors();
    for v in &all {
        let msg = v.message();
        let again = common::encode(&msg, &v.encode_context());
        let (want, diff) = canonical(&v.bytes);
        assert_eq!(hex(&again), hex(&want), "{} re-encoded differently", v.name);
        if diff.is_empty() {
            identical += 1;
            assert_eq!(again, v.bytes, "{}", v.name);
        } else {
            assert!(
                matches!(msg, Message::Update(_)),
                "{}: only UPDATEs differ",
                v.name
            );
            changes.entry(v.sender).or_default().extend(diff);
            *changed.entry(v.sender).or_default() += 1;
        }
        // Decoded again: the same value, but for the Partial bit we set.
        let back = common::decode(&again, &v.ctx).expect("re-encoded decodes");
        assert_eq!(
            back,
            passed_on(msg),
            "{}: decode -> encode -> decode",
            v.name
        );
        // And our encoding is a fixed point.
        assert_eq!(
            common::encode(&back, &v.encode_context()),
            again,
            "{}",
            v.name
        );
    }
    use Change::*;
    let want: BTreeMap<&str, BTreeSet<Change>> = [
        // FRR: AS_PATH always with the Extended Length flag; MP_REACH and
        // MP_UNREACH too (but not an End-of-RIB's empty MP_UNREACH); the
        // extended community and OTC it sends get our Partial bit.
        (
            "frr",
            [
                ShortLength(attr_type::AS_PATH),
                ShortLength(attr_type::MP_REACH_NLRI),
                ShortLength(attr_type::MP_UNREACH_NLRI),
                Partial(16),
                Partial(35),
            ]
            .into_iter()
            .collect(),
        ),
        // BIRD: MP_REACH and MP_UNREACH with the Extended Length flag.
        (
            "bird",
            [
                ShortLength(attr_type::MP_REACH_NLRI),
                ShortLength(attr_type::MP_UNREACH_NLRI),
            ]
            .into_iter()
            .collect(),
        ),
        // GoBGP: nothing; every message is byte for byte ours.
    ]
    .into_iter()
    .collect();
    assert_eq!(changes, want);
    // FRR: 22 of its 31 UPDATEs (not its End-of-RIBs and classic
    // withdrawals); BIRD: its 3 with MP_REACH or MP_UNREACH prefixes.
    assert_eq!(changed, [("bird", 3), ("frr", 22)].into_iter().collect());
    assert_eq!(identical, 90 - 22 - 3, "messages re-encoded byte for byte");
    assert_eq!(all.len(), 90);
}

#[test]
fn rfc7606_accepts_every_update_untouched() {
    for v in vectors() {
        let Some(u) = v.update() else { continue };
        assert!(u.errors.is_empty(), "{}: {:?}", v.name, u.errors);
        let UpdateVerdict::Accept(a) = validate_update(&u, &v.ctx) else {
            panic!("{}: {:?}", v.name, validate_update(&u, &v.ctx));
        };
        assert!(a.discarded.is_empty(), "{}: {:?}", v.name, a.discarded);
        assert_eq!(a.attributes, u.attributes, "{}", v.name);
        let mut announced = u.nlri.clone();
        announced.extend(u.mp_reach().map(|m| m.nlri.clone()).unwrap_or_default());
        let mut withdrawn = u.withdrawn.clone();
        withdrawn.extend(
            u.mp_unreach()
                .map(|m| m.withdrawn.clone())
                .unwrap_or_default(),
        );
        assert_eq!(a.announced, announced, "{}", v.name);
        assert_eq!(a.withdrawn, withdrawn, "{}", v.name);
        assert_eq!(a.end_of_rib, u.end_of_rib_family(), "{}", v.name);
        assert_eq!(
            a.end_of_rib.is_some(),
            v.name.contains(".eor-"),
            "{}",
            v.name
        );
        // And the AS path needs no AS4_PATH merging between 4-octet peers.
        assert_eq!(
            u.effective_as_path(),
            u.attributes.iter().find_map(|a| match a {
                PathAttribute::AsPath(p) => Some(p.clone()),
                _ => None,
            }),
            "{}",
            v.name
        );
    }
}

/// The OPEN each side sent on each session, by (sender, session label).
fn opens() -> BTreeMap<(&'static str, String), Open> {
    vectors()
        .into_iter()
        .filter_map(|v| match v.message() {
            Message::Open(o) => Some(((v.sender, v.session.clone()), o)),
            _ => None,
        })
        .collect()
}

/// The other side of a session: `frr/to-gobgp-v4` <-> `gobgp/to-frr-v4`.
fn peer_of(sender: &str, session: &str) -> (&'static str, String) {
    let rest = session.strip_prefix("to-").expect("to-<peer>-<kind>");
    let (peer, kind) = rest.split_once('-').expect("to-<peer>-<kind>");
    let peer = SENDERS
        .into_iter()
        .find(|s| *s == peer)
        .expect("a known router");
    (peer, format!("to-{sender}-{kind}"))
}

fn negotiated(sender: &'static str, session: &str) -> bgp::wire::Negotiated {
    let opens = opens();
    let mine = &opens[&(sender, session.to_string())];
    let theirs = &opens[&peer_of(sender, session)];
    negotiate(
        &Capabilities::from_capabilities(mine.capabilities()),
        &Capabilities::from_capabilities(theirs.capabilities()),
    )
}

#[test]
fn each_context_is_what_the_two_opens_of_its_session_negotiate() {
    let opens = opens();
    assert_eq!(opens.len(), 8, "four sessions, an OPEN each way");
    for v in vectors() {
        let mine = &opens[&(v.sender, v.session.clone())];
        let theirs = &opens[&peer_of(v.sender, &v.session)];
        let ibgp = mine.asn() == theirs.asn();
        assert_eq!(ibgp, v.session.ends_with("-ibgp"), "{}", v.name);
        let n = negotiated(v.sender, &v.session);
        assert_eq!(n.decode_context(ibgp), v.ctx, "{}", v.name);
    }
}

#[test]
fn negotiation_explains_what_the_routers_sent() {
    // FRR and GoBGP both set the N bit: FRR's Cease became a Hard Reset.
    let frr_gobgp = negotiated("frr", "to-gobgp-v4");
    assert!(frr_gobgp.graceful_restart.as_ref().unwrap().notification);
    assert!(frr_gobgp.four_octet_as && !frr_gobgp.extended_message);
    assert_eq!(frr_gobgp.families, vec![V4, V6]);
    assert!(!frr_gobgp.enhanced_route_refresh, "GoBGP does not send 70");
    // No graceful restart with GoBGP in node-1: a plain Cease.
    assert!(
        negotiated("frr", "to-gobgp-ibgp")
            .graceful_restart
            .is_none()
    );
    // BIRD: graceful restart without the N bit, extended messages and
    // enhanced route refresh (hence BoRR/EoRR both ways).
    let frr_bird = negotiated("frr", "to-bird-v4");
    assert!(!frr_bird.graceful_restart.as_ref().unwrap().notification);
    assert!(frr_bird.extended_message && frr_bird.enhanced_route_refresh);
    assert_eq!(frr_bird.max_message_len(), 65535);
    let mut unknown: Vec<u8> = frr_bird.peer_unknown.iter().map(|u| u.code).collect();
    unknown.sort_unstable();
    assert_eq!(
        unknown,
        vec![9, 69, 71, 73],
        "BIRD's role, ADD-PATH, LLGR, FQDN kept"
    );
    let mut unknown: Vec<u8> = negotiated("bird", "to-frr-v4")
        .peer_unknown
        .iter()
        .map(|u| u.code)
        .collect();
    unknown.sort_unstable();
    assert_eq!(unknown, vec![9, 69, 71, 73]);
    let names: Vec<String> = vectors().into_iter().map(|v| v.name).collect();
    assert!(
        !names
            .iter()
            .any(|n| n.contains("gobgp") && n.contains("borr")),
        "no BoRR where enhanced route refresh is not negotiated"
    );
    // RFC 8950 only on the IPv6 session: IPv4 NLRI with an IPv6 next hop
    // there, in the classic fields on the IPv4 session.
    let v6 = negotiated("frr", "to-gobgp-v6");
    assert!(v6.next_hop_allowed(V4, Afi::IPV6));
    assert!(!frr_gobgp.next_hop_allowed(V4, Afi::IPV6));
    for name in [
        "frr/to-gobgp-v6.update-198.51.100.0_28",
        "gobgp/to-frr-v6.update-198.51.100.32_29",
    ] {
        let u = vector(name).update().unwrap();
        let m = u.mp_reach().unwrap();
        assert_eq!(m.family, V4, "{name}");
        assert!(matches!(m.next_hop, NextHop::V6 { .. }), "{name}");
        assert!(u.nlri.is_empty(), "{name}");
    }
    // FRR's unknown capabilities towards GoBGP: ADD-PATH, ORF (both
    // codes), dynamic capability (both codes), FQDN, long-lived GR.
    let mut unknown: Vec<u8> = negotiated("gobgp", "to-frr-v4")
        .peer_unknown
        .iter()
        .map(|u| u.code)
        .collect();
    unknown.sort_unstable();
    assert_eq!(unknown, vec![3, 66, 67, 69, 71, 73, 130]);
}

#[test]
fn link_local_next_hops_are_link_local_and_one_per_router() {
    let mut seen: BTreeMap<&str, BTreeSet<Ipv6Addr>> = BTreeMap::new();
    for v in vectors() {
        let Some(u) = v.update() else { continue };
        if let Some(NextHop::V6 {
            global,
            link_local: Some(ll),
        }) = u.mp_reach().map(|m| m.next_hop)
        {
            assert_eq!(ll.segments()[0] & 0xffc0, 0xfe80, "{}", v.name);
            assert_eq!(global.segments()[..4], [0x2001, 0xdb8, 0, 1], "{}", v.name);
            seen.entry(v.sender).or_default().insert(ll);
        }
    }
    // GoBGP sends no link-local address; FRR and BIRD one each (their
    // interface's).
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        vec!["bird", "frr"]
    );
    assert!(seen.values().all(|s| s.len() == 1), "{seen:?}");
}

#[test]
fn attribute_order_is_each_routers_and_is_kept() {
    use attr_type::*;
    for (name, order) in [
        // FRR: MP_REACH first, then by type code, EXTENDED COMMUNITIES and
        // OTC after LARGE_COMMUNITIES.
        (
            "frr/to-bird-v4.update-198.51.100.0_28",
            vec![
                ORIGIN,
                AS_PATH,
                NEXT_HOP,
                MULTI_EXIT_DISC,
                COMMUNITIES,
                LARGE_COMMUNITIES,
                16,
                35,
            ],
        ),
        (
            "frr/to-gobgp-v6.update-198.51.100.0_28",
            vec![
                MP_REACH_NLRI,
                ORIGIN,
                AS_PATH,
                MULTI_EXIT_DISC,
                COMMUNITIES,
                LARGE_COMMUNITIES,
                16,
            ],
        ),
        // GoBGP: by type code with NEXT_HOP last; MP_REACH in type order
        // for IPv4, last for IPv6.
        (
            "gobgp/to-frr-v4.update-198.51.100.32_29",
            vec![
                ORIGIN,
                AS_PATH,
                MULTI_EXIT_DISC,
                AGGREGATOR,
                COMMUNITIES,
                LARGE_COMMUNITIES,
                NEXT_HOP,
            ],
        ),
        (
            "gobgp/to-frr-v6.update-198.51.100.32_29",
            vec![
                ORIGIN,
                AS_PATH,
                MULTI_EXIT_DISC,
                AGGREGATOR,
                COMMUNITIES,
                MP_REACH_NLRI,
                LARGE_COMMUNITIES,
            ],
        ),
        (
            "gobgp/to-frr-v4.update-2001_db8_100__40_124",
            vec![
                ORIGIN,
                AS_PATH,
                COMMUNITIES,
                LARGE_COMMUNITIES,
                MP_REACH_NLRI,
            ],
        ),
        // BIRD: MP_REACH first, then by type code.
        (
            "bird/to-frr-v4.update-2001_db8_100__80_124",
            vec![
                MP_REACH_NLRI,
                ORIGIN,
                AS_PATH,
                COMMUNITIES,
                LARGE_COMMUNITIES,
            ],
        ),
    ] {
        let v = vector(name);
        let u = v.update().unwrap();
        let got: Vec<u8> = u.attributes.iter().map(|a| a.type_code()).collect();
        assert_eq!(got, order, "{name}");
        let again = common::encode(&Message::Update(u), &v.encode_context());
        let Ok(Message::Update(back)) = common::decode(&again, &v.ctx) else {
            panic!("{name}");
        };
        let back: Vec<u8> = back.attributes.iter().map(|a| a.type_code()).collect();
        assert_eq!(back, order, "{name}: re-encoded");
    }
}

#[test]
fn attributes_over_255_bytes_keep_the_extended_length() {
    // GoBGP's 71-AS path (2 + 71 * 4 = 286 bytes) and 70 communities
    // (280 bytes): Extended Length set by GoBGP and by us alike.
    for name in [
        "gobgp/to-frr-v4.update-2001_db8_100__60_124",
        "gobgp/to-frr-v6.update-2001_db8_100__60_124",
    ] {
        let v = vector(name);
        let (_, changes) = canonical(&v.bytes);
        assert!(changes.is_empty(), "{name}");
        let hex_bytes = hex(&v.bytes);
        assert!(
            hex_bytes.contains("5002011e02"),
            "{name}: AS_PATH 0x50, 286 bytes"
        );
        assert!(
            hex_bytes.contains("d0080118"),
            "{name}: COMMUNITIES 0xd0, 280 bytes"
        );
        let again = common::encode(&v.message(), &v.encode_context());
        assert_eq!(again, v.bytes, "{name}");
    }
}
