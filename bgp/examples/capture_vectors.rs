//! Generates `bgp/tests/vectors/captured/`: real BGP messages sent by FRR,
//! GoBGP and BIRD, captured in the test kit's namespaces, one file per
//! message. The tests (`tests/captured_vectors.rs`) only read the files;
//! run this again only to regenerate them (then update the tests'
//! expectations: link-local next hops, TCP ports and, with other router
//! versions, capabilities change).
//!
//! ```text
//! sudo cargo run -p bgp --example capture_vectors               # lab, capture, write
//! sudo cargo run -p bgp --example capture_vectors -- --pcap F   # ... and keep the pcap
//! cargo run -p bgp --example capture_vectors -- --from-pcap F   # rewrite from a kept pcap
//! cargo run -p bgp --example capture_vectors -- --fuzz-corpus D # stored vectors -> raw seeds in D
//! ```
//!
//! It needs root and the lab tools (`testkit::preflight`), takes the test
//! kit's lock, and uses the lab plan's addresses and private ASNs only,
//! inside the namespaces the kit creates. FRR in `router` (AS 64512)
//! connects to four passive peers, so each session is one TCP connection:
//!
//! | peer | where | session | what the peer originates |
//! |---|---|---|---|
//! | GoBGP 3 | `router2`, AS 64514 | eBGP over IPv4, IPv4 + IPv6 unicast, GR with the N bit, long-lived GR | `global rib add` with ORIGIN, AS paths (one with an AS_SET, one of 71 ASes), MED, communities (70 on one route), large communities, AGGREGATOR |
//! | GoBGP 3 | `router2`, AS 64514 | eBGP over IPv6, IPv4 + IPv6 (IPv4 with an IPv6 next hop, RFC 8950) | the same routes |
//! | GoBGP 3 | `node-1`, AS 64512 | iBGP over IPv4 | LOCAL_PREF, MED, AS paths: the components of FRR's AS_SET aggregate |
//! | BIRD 2 | `node-2`, AS 64516 | eBGP over IPv4, IPv4 + IPv6, extended messages, role customer | static routes exported with communities, large communities, MED, a prepended AS |
//!
//! FRR sends its `network` routes through route-maps that set communities,
//! large communities, MED, an AS-path prepend and an extended community
//! (an attribute our codec keeps uninterpreted; towards BIRD, FRR as
//! `local-role provider` adds RFC 9234's OTC, another), LOCAL_PREF, ORIGIN
//! and NO_EXPORT towards the iBGP peer, and two aggregates (`as-set`, and
//! one with ATOMIC_AGGREGATE). Then every router withdraws a route per
//! family (GoBGP in node-1 one of the aggregate's components, so FRR
//! re-sends the aggregate), route refreshes are asked (FRR to BIRD and
//! GoBGP, BIRD to FRR; RFC 7313 BoRR/EoRR where negotiated; GoBGP sends
//! none: its `softresetin` re-applies policy to its own Adj-RIB-In), and
//! the sessions close: FRR with Cease/Administrative Shutdown and an RFC
//! 9003 message (iBGP) and, de-configuring GoBGP where both sides set the
//! N bit, a Hard Reset (RFC 8538) around Peer De-configured; GoBGP and
//! BIRD with Administrative Shutdown and a message.
//!
//! `tcpdump` in `router` captures every segment of port 179; the TCP
//! streams are reassembled here (a gap is an error), cut into messages with
//! the codec's framer and written as `<sender>/<session>.<what>.hex`: a
//! comment header (sender and receiver with their versions, TCP endpoints,
//! the decode context negotiated from the two OPENs of that connection, a
//! summary decoded by this codec) and the message in hex. The first
//! KEEPALIVE per direction is kept; a message whose name and bytes repeat
//! an earlier one (a resend after a route refresh) is skipped. A message
//! the codec cannot decode is still written (`undecodable-*`), so that the
//! tests show it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bgp::wire::{
    BytesMut, Capabilities, DecodeContext, Message, MessageType, Negotiated, PathAttribute, Prefix,
    RouteRefreshSubtype, Update, frame, negotiate,
};

const FRR_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const FRR_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 1);
const GOBGP_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const GOBGP_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 2);
const IBGP_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);
const BIRD_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 12);
const FRR_AS: u32 = 64512;
const GOBGP_AS: u32 = 64514;
const BIRD_AS: u32 = 64516;

/// The AS path GoBGP is given for 2001:db8:100::60/124.
const LONG_PATH: [u32; 70] = {
    let mut p = [0; 70];
    let mut i = 0;
    while i < 70 {
        p[i] = 64600 + i as u32;
        i += 1;
    }
    p
};

const TIMEOUT: Duration = Duration::from_secs(90);

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| -> Option<PathBuf> {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(PathBuf::from)
    };
    let out_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/captured");
    if let Some(corpus) = value("--fuzz-corpus") {
        let n = write_fuzz_corpus(&out_dir, &corpus)?;
        eprintln!("{n} seeds in {}", corpus.display());
        return Ok(());
    }
    let versions = Versions::probe()?;
    let pcap = match value("--from-pcap") {
        Some(p) => std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?,
        None => {
            let bytes = run_lab()?;
            if let Some(p) = value("--pcap") {
                std::fs::write(&p, &bytes).with_context(|| format!("writing {}", p.display()))?;
                eprintln!("capture kept in {}", p.display());
            }
            bytes
        }
    };
    let streams = reassemble(&pcap)?;
    let written = write_vectors(&streams, &versions, &out_dir)?;
    eprintln!("{written} files in {}", out_dir.display());
    Ok(())
}

/// Writes every stored vector, as raw bytes, into a fuzz corpus directory
/// (`fuzz/corpus/bgp_decode` is the one `cargo fuzz run bgp_decode` reads;
/// it is not in the repository). Returns how many.
fn write_fuzz_corpus(vectors: &Path, corpus: &Path) -> Result<usize> {
    std::fs::create_dir_all(corpus)?;
    let mut n = 0;
    for sender in ["frr", "gobgp", "bird"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(vectors.join(sender))?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?;
        files.sort();
        for path in files {
            let Some(stem) = path
                .file_name()
                .and_then(|f| f.to_str())
                .and_then(|f| f.strip_suffix(".hex"))
            else {
                continue;
            };
            let text = std::fs::read_to_string(&path)?;
            let digits: String = text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
                .collect();
            let bytes = (0..digits.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(digits.get(i..i + 2).unwrap_or("x"), 16))
                .collect::<std::result::Result<Vec<u8>, _>>()
                .with_context(|| format!("{}: not hex", path.display()))?;
            std::fs::write(corpus.join(format!("captured-{sender}-{stem}")), bytes)?;
            n += 1;
        }
    }
    Ok(n)
}

// ------------------------------------------------------------------ routers

struct Versions {
    frr: String,
    gobgp: String,
    bird: String,
}

impl Versions {
    fn probe() -> Result<Versions> {
        let run = |prog: &str, arg: &str| -> Result<String> {
            let out = std::process::Command::new(prog)
                .arg(arg)
                .output()
                .with_context(|| format!("running {prog} {arg}"))?;
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            Ok(text)
        };
        let word_after = |text: &str, key: &str| -> Result<String> {
            text.split_whitespace()
                .skip_while(|w| *w != key)
                .nth(1)
                .map(str::to_string)
                .with_context(|| format!("no version in {text:?}"))
        };
        Ok(Versions {
            frr: format!(
                "FRR {} (bgpd)",
                word_after(&run("/usr/lib/frr/bgpd", "--version")?, "version")?
            ),
            gobgp: format!(
                "GoBGP {} (gobgpd)",
                word_after(&run("gobgpd", "--version")?, "version")?
            ),
            bird: format!(
                "BIRD {}",
                word_after(&run("bird", "--version")?, "version")?
            ),
        })
    }
}

fn frr_config() -> String {
    format!(
        "frr defaults traditional
hostname capture-frr
!
ip prefix-list FRR-OWN4 seq 5 permit 198.51.100.0/28
ip prefix-list FRR-OWN4 seq 10 permit 198.51.100.16/28
ip prefix-list FRR-AGG4 seq 5 permit 198.51.100.128/25
ip prefix-list FRR-AGG4 seq 10 permit 198.51.100.64/26
ipv6 prefix-list FRR-OWN6 seq 5 permit 2001:db8:100::/124
ipv6 prefix-list FRR-OWN6 seq 10 permit 2001:db8:100::10/124
!
route-map TO-EBGP permit 10
 match ip address prefix-list FRR-OWN4
 set community 64512:100 64512:200
 set large-community 64512:1:2 64512:3:4
 set metric 50
 set as-path prepend 64512 64512
 set extcommunity rt 64512:7
exit
route-map TO-EBGP permit 20
 match ip address prefix-list FRR-AGG4
exit
route-map TO-EBGP permit 30
 match ipv6 address prefix-list FRR-OWN6
 set community 64512:600
 set large-community 64512:6:6
 set metric 60
exit
route-map TO-EBGP deny 100
exit
route-map TO-IBGP permit 10
 match ip address prefix-list FRR-OWN4
 set local-preference 250
 set community 64512:300 no-export
 set origin incomplete
exit
route-map TO-IBGP deny 100
exit
!
router bgp {FRR_AS}
 bgp router-id {FRR_V4}
 bgp log-neighbor-changes
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 no bgp network import-check
 bgp graceful-restart
 bgp long-lived-graceful-restart stale-time 30
 neighbor {GOBGP_V4} remote-as {GOBGP_AS}
 neighbor {GOBGP_V4} timers connect 5
 neighbor {GOBGP_V4} advertisement-interval 0
 neighbor {GOBGP_V4} capability dynamic
 neighbor {GOBGP_V6} remote-as {GOBGP_AS}
 neighbor {GOBGP_V6} timers connect 5
 neighbor {GOBGP_V6} advertisement-interval 0
 neighbor {GOBGP_V6} capability extended-nexthop
 neighbor {IBGP_V4} remote-as {FRR_AS}
 neighbor {IBGP_V4} timers connect 5
 neighbor {IBGP_V4} advertisement-interval 0
 neighbor {BIRD_V4} remote-as {BIRD_AS}
 neighbor {BIRD_V4} timers connect 5
 neighbor {BIRD_V4} advertisement-interval 0
 neighbor {BIRD_V4} local-role provider
 !
 address-family ipv4 unicast
  network 198.51.100.0/28
  network 198.51.100.16/28
  network 198.51.100.96/28
  neighbor {GOBGP_V4} activate
  neighbor {GOBGP_V4} route-map TO-EBGP out
  neighbor {GOBGP_V4} capability orf prefix-list both
  neighbor {GOBGP_V6} activate
  neighbor {GOBGP_V6} route-map TO-EBGP out
  neighbor {IBGP_V4} activate
  neighbor {IBGP_V4} route-map TO-IBGP out
  neighbor {BIRD_V4} activate
  neighbor {BIRD_V4} route-map TO-EBGP out
 exit-address-family
 !
 address-family ipv6 unicast
  network 2001:db8:100::/124
  network 2001:db8:100::10/124
  neighbor {GOBGP_V4} activate
  neighbor {GOBGP_V4} route-map TO-EBGP out
  neighbor {GOBGP_V6} activate
  neighbor {GOBGP_V6} route-map TO-EBGP out
  neighbor {BIRD_V4} activate
  neighbor {BIRD_V4} route-map TO-EBGP out
 exit-address-family
exit
!
"
    )
}

/// GoBGP in `router2`: passive, graceful restart with the N bit (and
/// long-lived GR on the IPv4 session), exporting only its own routes.
fn gobgp_router2_config() -> String {
    let gr = |llgr: bool| {
        let mut s = String::from(
            "  [neighbors.graceful-restart.config]\n    enabled = true\n    notification-enabled = true\n    restart-time = 120\n",
        );
        if llgr {
            s.push_str("    long-lived-enabled = true\n");
        }
        s
    };
    let family = |name: &str, llgr: bool| {
        let mut s = format!(
            "  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = \"{name}\"\n    [neighbors.afi-safis.mp-graceful-restart.config]\n      enabled = true\n"
        );
        if llgr {
            s.push_str("    [neighbors.afi-safis.long-lived-graceful-restart.config]\n      enabled = true\n      restart-time = 300\n");
        }
        s
    };
    let neighbor = |addr: IpAddr, body: String| {
        format!(
            "\n[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{addr}\"\n    peer-as = {FRR_AS}\n  [neighbors.timers.config]\n    connect-retry = 5\n  [neighbors.transport.config]\n    passive-mode = true\n{body}"
        )
    };
    let mut s = format!(
        "[global.config]
  as = {GOBGP_AS}
  router-id = \"{GOBGP_V4}\"

[[policy-definitions]]
  name = \"local-only\"
  [[policy-definitions.statements]]
    name = \"local\"
    [policy-definitions.statements.conditions.bgp-conditions]
      route-type = \"local\"
    [policy-definitions.statements.actions]
      route-disposition = \"accept-route\"

[global.apply-policy.config]
  export-policy-list = [\"local-only\"]
  default-export-policy = \"reject-route\"
"
    );
    s.push_str(&neighbor(
        FRR_V4.into(),
        gr(true) + &family("ipv4-unicast", true) + &family("ipv6-unicast", false),
    ));
    s.push_str(&neighbor(
        FRR_V6.into(),
        gr(false) + &family("ipv4-unicast", false) + &family("ipv6-unicast", false),
    ));
    s
}

/// GoBGP in `node-1`: FRR's iBGP peer.
fn gobgp_ibgp_config() -> String {
    format!(
        "[global.config]
  as = {FRR_AS}
  router-id = \"{IBGP_V4}\"

[[policy-definitions]]
  name = \"local-only\"
  [[policy-definitions.statements]]
    name = \"local\"
    [policy-definitions.statements.conditions.bgp-conditions]
      route-type = \"local\"
    [policy-definitions.statements.actions]
      route-disposition = \"accept-route\"

[global.apply-policy.config]
  export-policy-list = [\"local-only\"]
  default-export-policy = \"reject-route\"

[[neighbors]]
  [neighbors.config]
    neighbor-address = \"{FRR_V4}\"
    peer-as = {FRR_AS}
  [neighbors.timers.config]
    connect-retry = 5
  [neighbors.transport.config]
    passive-mode = true
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = \"ipv4-unicast\"
"
    )
}

/// BIRD in `node-2`; `withdrawn` leaves out the routes withdrawn later.
fn bird_config(log: &Path, withdrawn: bool) -> String {
    let extra4 = if withdrawn {
        ""
    } else {
        "  route 198.51.100.56/29 blackhole;\n"
    };
    let extra6 = if withdrawn {
        ""
    } else {
        "  route 2001:db8:100::90/124 blackhole;\n"
    };
    format!(
        "log \"{log}\" all;
router id {BIRD_V4};
timeformat protocol iso long;
protocol device {{ }}
protocol static static4 {{
  ipv4;
  route 198.51.100.48/29 blackhole;
{extra4}}}
protocol static static6 {{
  ipv6;
  route 2001:db8:100::80/124 blackhole;
{extra6}}}
protocol bgp peer0 {{
  local {BIRD_V4} as {BIRD_AS};
  neighbor {FRR_V4} as {FRR_AS};
  direct;
  passive on;
  graceful restart on;
  long lived graceful restart on;
  enable extended messages on;
  advertise hostname on;
  local role customer;
  connect retry time 5;
  ipv4 {{
    import all;
    add paths rx;
    export filter {{
      if proto != \"static4\" then reject;
      if net = 198.51.100.48/29 then {{
        bgp_community.add(({BIRD_AS},10));
        bgp_community.add(({BIRD_AS},20));
        bgp_large_community.add(({BIRD_AS},1,1));
        bgp_med = 70;
        bgp_path.prepend(64530);
      }}
      accept;
    }};
  }};
  ipv6 {{
    import all;
    next hop address 2001:db8:0:1::12;
    export filter {{
      if proto != \"static6\" then reject;
      if net = 2001:db8:100::80/124 then {{
        bgp_community.add(({BIRD_AS},60));
        bgp_large_community.add(({BIRD_AS},6,6));
      }}
      accept;
    }};
  }};
}}
",
        log = log.display()
    )
}

/// Every address, ASN and prefix the scenario configures, against the plan.
fn check_plan() -> Result<()> {
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    testkit::plan::check_router(
        FRR_AS,
        [
            (GOBGP_V4.into(), GOBGP_AS),
            (GOBGP_V6.into(), GOBGP_AS),
            (IBGP_V4.into(), FRR_AS),
            (BIRD_V4.into(), BIRD_AS),
        ],
        &own(&[
            "198.51.100.0/28",
            "198.51.100.16/28",
            "198.51.100.96/28",
            "198.51.100.64/26",
            "198.51.100.128/25",
            "2001:db8:100::/124",
            "2001:db8:100::10/124",
        ]),
    )?;
    testkit::plan::check_router(
        GOBGP_AS,
        [(FRR_V4.into(), FRR_AS), (FRR_V6.into(), FRR_AS)],
        &own(&[
            "198.51.100.32/29",
            "198.51.100.40/29",
            "2001:db8:100::40/124",
            "2001:db8:100::50/124",
            "2001:db8:100::60/124",
        ]),
    )?;
    testkit::plan::check_router(
        FRR_AS,
        [(FRR_V4.into(), FRR_AS)],
        &own(&["198.51.100.192/27", "198.51.100.224/27"]),
    )?;
    testkit::plan::check_router(
        BIRD_AS,
        [(FRR_V4.into(), FRR_AS)],
        &own(&[
            "198.51.100.48/29",
            "198.51.100.56/29",
            "2001:db8:100::80/124",
            "2001:db8:100::90/124",
        ]),
    )?;
    // The next hops and ASes in the routes' attributes.
    for asn in [64530, 64531, 64540, 64541].into_iter().chain(LONG_PATH) {
        ensure!(testkit::plan::is_allowed_asn(asn), "AS {asn}");
    }
    Ok(())
}

fn wait<T>(what: &str, f: impl FnMut() -> std::result::Result<T, String>) -> Result<T> {
    testkit::wait_until(TIMEOUT, Duration::from_millis(250), f)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("waiting for {what}"))
}

/// Waits until `have()` lists every prefix of `want` (or, with `absent`,
/// none of them).
fn wait_prefixes(
    what: &str,
    want: &[&str],
    absent: bool,
    mut have: impl FnMut() -> Result<Vec<String>>,
) -> Result<()> {
    wait(what, || {
        let have = have().map_err(|e| format!("{e:#}"))?;
        let missing: Vec<&&str> = want
            .iter()
            .filter(|p| have.iter().any(|h| h == *p) == absent)
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("{missing:?} (has {have:?})"))
        }
    })
}

/// Runs the scenario in a fresh lab and returns the pcap.
fn run_lab() -> Result<Vec<u8>> {
    use testkit::{Bird, Capture, Frr, Gobgp, Lab, LabOptions};

    check_plan()?;
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions {
        nodes: 2,
        far: false,
    })?;
    let pcap = lab.topo.state_dir().join("bgp-capture.pcap");
    let capture = Capture::start(
        lab.router(),
        lab.l2_iface("router"),
        &pcap,
        &["tcp", "port", "179"],
    )?;

    // The passive peers first, their routes in place.
    let gobgp = Gobgp::start_raw(lab.router2(), &gobgp_router2_config())?;
    for args in [
        &[
            "global",
            "rib",
            "add",
            "-a",
            "ipv4",
            "198.51.100.32/29",
            "origin",
            "egp",
            "aspath",
            "64530,64531",
            "med",
            "20",
            "community",
            "64514:10,64514:20,no-export",
            "large-community",
            "64514:1:1,64514:2:2",
            "aggregator",
            "64514:192.0.2.2",
        ][..],
        &["global", "rib", "add", "-a", "ipv4", "198.51.100.40/29"],
        &[
            "global",
            "rib",
            "add",
            "-a",
            "ipv6",
            "2001:db8:100::40/124",
            "aspath",
            "64530 {64540,64541}",
            "community",
            "64514:60",
            "large-community",
            "64514:6:6",
        ],
        &["global", "rib", "add", "-a", "ipv6", "2001:db8:100::50/124"],
    ] {
        gobgp.cli(args)?;
    }
    // A path of 71 ASes and 70 communities: both attributes longer than
    // 255 bytes, so written with the extended length.
    let long_path = LONG_PATH.map(|a| a.to_string()).join(",");
    let many_communities = (1..=70)
        .map(|n| format!("{GOBGP_AS}:{n}"))
        .collect::<Vec<_>>()
        .join(",");
    gobgp.cli(&[
        "global",
        "rib",
        "add",
        "-a",
        "ipv6",
        "2001:db8:100::60/124",
        "aspath",
        &long_path,
        "community",
        &many_communities,
    ])?;
    let ibgp = Gobgp::start_raw(lab.node(1), &gobgp_ibgp_config())?;
    for args in [
        &[
            "global",
            "rib",
            "add",
            "-a",
            "ipv4",
            "198.51.100.192/27",
            "aspath",
            "64600,64601",
            "local-pref",
            "300",
            "community",
            "64512:192",
        ][..],
        &[
            "global",
            "rib",
            "add",
            "-a",
            "ipv4",
            "198.51.100.224/27",
            "aspath",
            "64602",
            "local-pref",
            "200",
            "med",
            "5",
        ],
    ] {
        ibgp.cli(args)?;
    }
    let bird_log = lab.node(2).state_dir().join("bird").join("bird.log");
    let bird = Bird::start_raw(lab.node(2), &bird_config(&bird_log, false))?;

    let frr = Frr::start_raw(
        lab.router(),
        &frr_config(),
        &[testkit::FrrDaemon::Zebra, testkit::FrrDaemon::Bgpd],
    )?;
    for addr in [
        IpAddr::from(GOBGP_V4),
        GOBGP_V6.into(),
        IBGP_V4.into(),
        BIRD_V4.into(),
    ] {
        frr.wait_established(addr, TIMEOUT)
            .with_context(|| format!("FRR log:\n{}", frr.logs(40)))?;
    }

    let frr_prefixes = |v6: bool| -> Result<Vec<String>> {
        let routes = if v6 {
            frr.routes_v6()?
        } else {
            frr.routes_v4()?
        };
        Ok(routes
            .into_iter()
            .filter(|r| r.peer.is_some())
            .map(|r| r.prefix)
            .collect())
    };
    let gobgp_prefixes = |g: &Gobgp, v6: bool| -> Result<Vec<String>> {
        let routes = if v6 { g.rib_v6()? } else { g.rib_v4()? };
        Ok(routes
            .into_iter()
            .filter(|r| r.neighbor.is_some())
            .map(|r| r.prefix)
            .collect())
    };
    let bird_prefixes = || -> Result<Vec<String>> {
        Ok(bird
            .routes()?
            .into_iter()
            .filter(|r| r.protocol == "peer0")
            .map(|r| r.prefix)
            .collect())
    };

    // Initial sync.
    wait_prefixes(
        "FRR to learn every peer's IPv4 routes",
        &[
            "198.51.100.32/29",
            "198.51.100.40/29",
            "198.51.100.48/29",
            "198.51.100.56/29",
            "198.51.100.192/27",
            "198.51.100.224/27",
        ],
        false,
        || frr_prefixes(false),
    )?;
    wait_prefixes(
        "FRR to learn every peer's IPv6 routes",
        &[
            "2001:db8:100::40/124",
            "2001:db8:100::50/124",
            "2001:db8:100::60/124",
            "2001:db8:100::80/124",
            "2001:db8:100::90/124",
        ],
        false,
        || frr_prefixes(true),
    )?;
    let frr_v4 = ["198.51.100.0/28", "198.51.100.16/28"];
    let frr_v6 = ["2001:db8:100::/124", "2001:db8:100::10/124"];
    wait_prefixes(
        "GoBGP (router2) to learn FRR's IPv4 routes",
        &frr_v4,
        false,
        || gobgp_prefixes(&gobgp, false),
    )?;
    wait_prefixes(
        "GoBGP (router2) to learn FRR's IPv6 routes",
        &frr_v6,
        false,
        || gobgp_prefixes(&gobgp, true),
    )?;
    wait_prefixes(
        "GoBGP (node-1) to learn FRR's routes",
        &frr_v4,
        false,
        || gobgp_prefixes(&ibgp, false),
    )?;
    let mut bird_all = frr_v4.to_vec();
    bird_all.extend(frr_v6);
    wait_prefixes(
        "BIRD to learn FRR's routes",
        &bird_all,
        false,
        bird_prefixes,
    )?;

    // Aggregates, once their components are there.
    frr.configure(&[
        &format!("router bgp {FRR_AS}"),
        "address-family ipv4 unicast",
        "aggregate-address 198.51.100.128/25 as-set summary-only",
        "aggregate-address 198.51.100.64/26 summary-only",
    ])?;
    let aggregates = ["198.51.100.64/26", "198.51.100.128/25"];
    wait_prefixes(
        "GoBGP (router2) to learn the aggregates",
        &aggregates,
        false,
        || gobgp_prefixes(&gobgp, false),
    )?;
    wait_prefixes(
        "BIRD to learn the aggregates",
        &aggregates,
        false,
        bird_prefixes,
    )?;

    // One withdrawal per router and family.
    frr.configure(&[
        &format!("router bgp {FRR_AS}"),
        "address-family ipv4 unicast",
        "no network 198.51.100.16/28",
        "exit-address-family",
        "address-family ipv6 unicast",
        "no network 2001:db8:100::10/124",
    ])?;
    gobgp.cli(&["global", "rib", "del", "-a", "ipv4", "198.51.100.40/29"])?;
    gobgp.cli(&["global", "rib", "del", "-a", "ipv6", "2001:db8:100::50/124"])?;
    ibgp.cli(&["global", "rib", "del", "-a", "ipv4", "198.51.100.224/27"])?;
    std::fs::write(bird.dir().join("bird.conf"), bird_config(&bird_log, true))?;
    let out = bird.birdc("configure")?;
    ensure!(out.contains("Reconfigured"), "birdc configure: {out}");
    wait_prefixes(
        "FRR to see the withdrawals",
        &[
            "198.51.100.40/29",
            "198.51.100.56/29",
            "198.51.100.224/27",
            "2001:db8:100::50/124",
            "2001:db8:100::90/124",
        ],
        true,
        || {
            let mut all = frr_prefixes(false)?;
            all.extend(frr_prefixes(true)?);
            Ok(all)
        },
    )?;
    wait_prefixes(
        "GoBGP (router2) to see FRR's withdrawals",
        &["198.51.100.16/28", "2001:db8:100::10/124"],
        true,
        || {
            let mut all = gobgp_prefixes(&gobgp, false)?;
            all.extend(gobgp_prefixes(&gobgp, true)?);
            Ok(all)
        },
    )?;
    wait_prefixes(
        "BIRD to see FRR's withdrawals",
        &["198.51.100.16/28", "2001:db8:100::10/124"],
        true,
        bird_prefixes,
    )?;

    // Route refresh, both ways.
    frr.vtysh(&[&format!("clear bgp ipv4 unicast {BIRD_V4} in")])?;
    frr.vtysh(&[&format!("clear bgp ipv6 unicast {GOBGP_V6} in")])?;
    bird.birdc("reload in peer0")?;
    // GoBGP keeps an Adj-RIB-In: its `softresetin` re-applies policy
    // locally and sends no ROUTE-REFRESH, so GoBGP has none to capture.
    // The answers (UPDATEs again, BoRR/EoRR) follow within FRR's 1 s
    // coalescing; give them ample time.
    std::thread::sleep(Duration::from_secs(5));

    // NOTIFICATIONs.
    // FRR: Administrative Shutdown with a message (RFC 9003) on the iBGP
    // session; de-configuring the GoBGP IPv4 neighbor, where both sides set
    // the graceful restart N bit, gives a Hard Reset (RFC 8538) around
    // Peer De-configured. GoBGP's `shutdown` (unlike `disable`) sends its
    // `--reason`; BIRD's `disable` sends its message.
    frr.configure(&[
        &format!("router bgp {FRR_AS}"),
        &format!("neighbor {IBGP_V4} shutdown message frr capture done"),
        &format!("no neighbor {GOBGP_V4}"),
    ])?;
    gobgp.cli(&[
        "neighbor",
        &FRR_V6.to_string(),
        "shutdown",
        "--reason",
        "gobgp capture done",
    ])?;
    bird.birdc("disable peer0 \"bird capture done\"")?;
    for addr in [IpAddr::from(IBGP_V4), GOBGP_V6.into(), BIRD_V4.into()] {
        wait(
            &format!("FRR's session with {addr} to go down"),
            || match frr.bgp_neighbor_state(addr) {
                Ok(Some(s)) if s == "Established" => Err(format!("{addr} still {s}")),
                Ok(_) => Ok(()),
                Err(e) => Err(format!("{e:#}")),
            },
        )?;
    }
    std::thread::sleep(Duration::from_secs(1));
    capture.stop()?;
    let bytes = std::fs::read(&pcap)?;
    frr.stop()?;
    bird.stop()?;
    gobgp.stop()?;
    ibgp.stop()?;
    lab.destroy()?;
    Ok(bytes)
}

// --------------------------------------------------------------- pcap, TCP

/// One direction of one TCP connection, reassembled.
#[derive(Debug)]
struct Stream {
    src: SocketAddr,
    dst: SocketAddr,
    /// Index of the connection among all connections of the capture.
    connection: usize,
    data: Vec<u8>,
}

#[derive(Default)]
struct Segments {
    isn: Option<u32>,
    segs: Vec<(u32, Vec<u8>)>,
}

/// Reads a pcap (Ethernet, IPv4/IPv6, TCP) and returns every direction of
/// every connection that carried data, in order of the connection's first
/// packet. A hole in a stream is an error.
fn reassemble(pcap: &[u8]) -> Result<Vec<Stream>> {
    let records = testkit::pcap::parse(pcap)?;
    let mut order: Vec<(SocketAddr, SocketAddr)> = Vec::new();
    let mut flows: BTreeMap<(SocketAddr, SocketAddr), Segments> = BTreeMap::new();
    for record in &records {
        ensure!(
            record.is_complete(),
            "a packet was truncated by the capture"
        );
        let Some((src, dst, seq, syn, payload)) = parse_tcp(&record.data)? else {
            continue;
        };
        let key = (src, dst);
        if !flows.contains_key(&key) && !flows.contains_key(&(dst, src)) {
            order.push(key);
        }
        let f = flows.entry(key).or_default();
        if syn {
            f.isn = Some(seq);
        }
        if !payload.is_empty() {
            f.segs.push((seq, payload.to_vec()));
        }
    }
    let mut streams = Vec::new();
    for (connection, (a, b)) in order.into_iter().enumerate() {
        for key in [(a, b), (b, a)] {
            let Some(f) = flows.remove(&key) else {
                continue;
            };
            if f.segs.is_empty() {
                continue;
            }
            let isn = f
                .isn
                .with_context(|| format!("no SYN seen for {} -> {}", key.0, key.1))?;
            let mut segs: Vec<(usize, Vec<u8>)> = f
                .segs
                .into_iter()
                .map(|(seq, d)| (seq.wrapping_sub(isn.wrapping_add(1)) as usize, d))
                .collect();
            segs.sort_by_key(|(off, _)| *off);
            let mut data: Vec<u8> = Vec::new();
            for (off, d) in segs {
                ensure!(
                    off <= data.len(),
                    "{} -> {}: {} bytes missing at offset {}",
                    key.0,
                    key.1,
                    off - data.len(),
                    data.len()
                );
                let end = off + d.len();
                if end > data.len() {
                    // A retransmission may overlap what we have: it must agree.
                    ensure!(
                        data[off..] == d[..data.len() - off],
                        "{} -> {}: retransmitted bytes differ",
                        key.0,
                        key.1
                    );
                    data.extend_from_slice(&d[data.len() - off..]);
                }
            }
            streams.push(Stream {
                src: key.0,
                dst: key.1,
                connection,
                data,
            });
        }
    }
    Ok(streams)
}

type TcpPacket<'a> = (SocketAddr, SocketAddr, u32, bool, &'a [u8]);

fn parse_tcp(frame: &[u8]) -> Result<Option<TcpPacket<'_>>> {
    let Some(ip) = testkit::pcap::ip_in_ethernet(frame).filter(|ip| ip.protocol == 6) else {
        return Ok(None);
    };
    let (src, dst, tcp) = (ip.src, ip.dst, ip.payload);
    ensure!(tcp.len() >= 20, "short TCP header");
    let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
    let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    let off = usize::from(tcp[12] >> 4) * 4;
    let syn = tcp[13] & 0x02 != 0;
    Ok(Some((
        SocketAddr::new(src, sport),
        SocketAddr::new(dst, dport),
        seq,
        syn,
        tcp.get(off..).context("short TCP header")?,
    )))
}

// ------------------------------------------------------------------ vectors

/// Who is at an address of the scenario: (directory, display name with
/// version and AS, short name for session labels).
fn who(addr: IpAddr, v: &Versions) -> Result<(&'static str, String, &'static str)> {
    Ok(match addr {
        a if a == IpAddr::from(FRR_V4) || a == IpAddr::from(FRR_V6) => {
            ("frr", format!("{}, AS {FRR_AS}, {a}", v.frr), "frr")
        }
        a if a == IpAddr::from(GOBGP_V4) || a == IpAddr::from(GOBGP_V6) => (
            "gobgp",
            format!("{} in router2, AS {GOBGP_AS}, {a}", v.gobgp),
            "gobgp",
        ),
        a if a == IpAddr::from(IBGP_V4) => (
            "gobgp",
            format!("{} in node-1, AS {FRR_AS} (iBGP), {a}", v.gobgp),
            "gobgp",
        ),
        a if a == IpAddr::from(BIRD_V4) => {
            ("bird", format!("{}, AS {BIRD_AS}, {a}", v.bird), "bird")
        }
        a => bail!("unexpected address {a} in the capture"),
    })
}

/// The session label, from the sender's side: `to-<peer>-<v4|v6|ibgp>`.
fn session_label(src: IpAddr, dst: IpAddr, peer: &str) -> String {
    let kind = if src == IpAddr::from(IBGP_V4) || dst == IpAddr::from(IBGP_V4) {
        "ibgp"
    } else if src.is_ipv6() {
        "v6"
    } else {
        "v4"
    };
    format!("to-{peer}-{kind}")
}

fn prefix_name(p: &Prefix) -> String {
    p.to_string().replace([':', '/'], "_")
}

fn family_name(f: bgp::wire::Family) -> String {
    f.to_string().trim_end_matches("-unicast").to_string()
}

/// The file name part after the session, from the decoded message.
fn message_name(msg: &Message) -> String {
    match msg {
        Message::Open(_) => "open".into(),
        Message::Keepalive => "keepalive".into(),
        Message::Notification(n) => format!("notification-{}-{}", n.code(), n.subcode()),
        Message::RouteRefresh(rr) => {
            let sub = match rr.subtype {
                RouteRefreshSubtype::Request => "request".to_string(),
                RouteRefreshSubtype::BeginningOfRefresh => "borr".into(),
                RouteRefreshSubtype::EndOfRefresh => "eorr".into(),
                RouteRefreshSubtype::Reserved(v) => format!("subtype{v}"),
            };
            format!("route-refresh-{}-{sub}", family_name(rr.family))
        }
        Message::Update(u) => {
            if let Some(f) = u.end_of_rib_family() {
                return format!("eor-{}", family_name(f));
            }
            let announced = u
                .nlri
                .first()
                .or_else(|| u.mp_reach().and_then(|m| m.nlri.first()));
            let withdrawn = u
                .withdrawn
                .first()
                .or_else(|| u.mp_unreach().and_then(|m| m.withdrawn.first()));
            match (announced, withdrawn) {
                (Some(p), _) => format!("update-{}", prefix_name(p)),
                (None, Some(p)) => format!("withdraw-{}", prefix_name(p)),
                (None, None) => "update-empty".into(),
            }
        }
    }
}

fn summary(msg: &Message) -> Vec<String> {
    match msg {
        Message::Open(o) => {
            let mut lines = vec![format!(
                "OPEN: my AS {}, hold time {}, BGP id {}, {} optional parameter(s)",
                o.my_as,
                o.hold_time.seconds(),
                o.bgp_id,
                o.parameters.len()
            )];
            for c in o.capabilities() {
                lines.push(format!("  capability {}: {c:?}", c.code()));
            }
            lines
        }
        Message::Keepalive => vec!["KEEPALIVE".into()],
        Message::Notification(n) => vec![format!("NOTIFICATION: {n}")],
        Message::RouteRefresh(rr) => vec![format!("ROUTE-REFRESH: {} {:?}", rr.family, rr.subtype)],
        Message::Update(u) => update_summary(u),
    }
}

fn update_summary(u: &Update) -> Vec<String> {
    let list = |ps: &[Prefix]| {
        ps.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut lines = vec![match u.end_of_rib_family() {
        Some(f) => format!("UPDATE: End-of-RIB {f}"),
        None => "UPDATE".to_string(),
    }];
    if !u.withdrawn.is_empty() {
        lines.push(format!("  withdrawn: {}", list(&u.withdrawn)));
    }
    for a in &u.attributes {
        let text = match a {
            PathAttribute::Origin(o) => format!("ORIGIN {o:?}"),
            PathAttribute::AsPath(p) => format!("AS_PATH {p}"),
            PathAttribute::NextHop(n) => format!("NEXT_HOP {n}"),
            PathAttribute::MultiExitDisc(m) => format!("MULTI_EXIT_DISC {m}"),
            PathAttribute::LocalPref(l) => format!("LOCAL_PREF {l}"),
            PathAttribute::AtomicAggregate => "ATOMIC_AGGREGATE".into(),
            PathAttribute::Aggregator(g) => format!("AGGREGATOR {} {}", g.asn, g.address),
            PathAttribute::Communities(cs) => format!(
                "COMMUNITIES {}",
                cs.iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            PathAttribute::LargeCommunities(cs) => format!(
                "LARGE_COMMUNITIES {}",
                cs.iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            PathAttribute::As4Path(p) => format!("AS4_PATH {p}"),
            PathAttribute::As4Aggregator(g) => format!("AS4_AGGREGATOR {} {}", g.asn, g.address),
            PathAttribute::MpReach(m) => format!(
                "MP_REACH_NLRI {} next hop {:?}: {}",
                m.family,
                m.next_hop,
                list(&m.nlri)
            ),
            PathAttribute::MpUnreach(m) => {
                format!("MP_UNREACH_NLRI {}: {}", m.family, list(&m.withdrawn))
            }
            PathAttribute::Other(raw) => format!(
                "attribute {} (flags {:#04x}, not interpreted): {}",
                raw.type_code,
                raw.flags,
                hex(&raw.value)
            ),
        };
        lines.push(format!("  {text}"));
    }
    if !u.nlri.is_empty() {
        lines.push(format!("  NLRI: {}", list(&u.nlri)));
    }
    for e in &u.errors {
        lines.push(format!("  DECODE ERROR {:?}: {}", e.site, e.notification));
    }
    lines
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Cuts a stream into messages with the codec's framer (any length up to
/// the extended maximum: the context is not known before the OPENs).
fn messages(stream: &Stream) -> Result<Vec<Vec<u8>>> {
    let mut buf = BytesMut::from(&stream.data[..]);
    let mut out = Vec::new();
    loop {
        if buf.is_empty() {
            break;
        }
        // A message type the codec does not know (e.g. CAPABILITY, 6)
        // fails the framer: cut it by its length and report it.
        if buf.len() >= 19 && MessageType::from_u8(buf[18]).is_none() {
            let len = usize::from(u16::from_be_bytes([buf[16], buf[17]]));
            eprintln!(
                "{} -> {}: skipping a message of type {} ({len} bytes)",
                stream.src, stream.dst, buf[18]
            );
            let _ = buf.split_to(len.min(buf.len()));
            continue;
        }
        match frame(&mut buf, bgp::wire::MAX_EXTENDED_MESSAGE_LEN) {
            Ok(Some(f)) => out.push(f.bytes().to_vec()),
            Ok(None) => bail!(
                "{} -> {}: {} bytes of an incomplete message at the end",
                stream.src,
                stream.dst,
                buf.len()
            ),
            Err(n) => bail!("{} -> {}: framing: {n}", stream.src, stream.dst),
        }
    }
    Ok(out)
}

fn open_caps(bytes: &[u8]) -> Option<Capabilities> {
    let mut buf = BytesMut::from(bytes);
    match bgp::wire::read_message(&mut buf, &DecodeContext::default()) {
        Ok(Some(Message::Open(o))) => Some(Capabilities::from_capabilities(o.capabilities())),
        _ => None,
    }
}

fn write_vectors(streams: &[Stream], v: &Versions, out_dir: &Path) -> Result<usize> {
    for sub in ["frr", "gobgp", "bird"] {
        let dir = out_dir.join(sub);
        if dir.exists() {
            for e in std::fs::read_dir(&dir)? {
                let p = e?.path();
                if p.extension().is_some_and(|x| x == "hex") {
                    std::fs::remove_file(&p)?;
                }
            }
        }
        std::fs::create_dir_all(&dir)?;
    }
    // The OPEN each side sent on each connection.
    let mut opens: BTreeMap<(usize, SocketAddr), Capabilities> = BTreeMap::new();
    let mut cut: Vec<(&Stream, Vec<Vec<u8>>)> = Vec::new();
    for s in streams {
        let msgs = messages(s)?;
        if let Some(caps) = msgs.first().and_then(|m| open_caps(m)) {
            opens.insert((s.connection, s.src), caps);
        }
        cut.push((s, msgs));
    }
    let mut written: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    for (s, msgs) in cut {
        let (dir, sender, _) = who(s.src.ip(), v)?;
        let (_, receiver, peer) = who(s.dst.ip(), v)?;
        // A later connection between the same two addresses shares the
        // label: what it repeats byte for byte is skipped below.
        let label = session_label(s.src.ip(), s.dst.ip(), peer);
        let ibgp = label.contains("ibgp");
        let negotiated: Option<Negotiated> = match (
            opens.get(&(s.connection, s.src)),
            opens.get(&(s.connection, s.dst)),
        ) {
            (Some(mine), Some(theirs)) => Some(negotiate(mine, theirs)),
            _ => None,
        };
        let ctx = negotiated
            .as_ref()
            .map(|n| n.decode_context(ibgp))
            .unwrap_or(DecodeContext {
                ibgp,
                ..DecodeContext::default()
            });
        let mut keepalive_done = false;
        for (i, bytes) in msgs.iter().enumerate() {
            let mut buf = BytesMut::from(&bytes[..]);
            let decoded = bgp::wire::read_message(&mut buf, &ctx);
            let (name, lines) = match &decoded {
                Ok(Some(m)) => (message_name(m), summary(m)),
                Ok(None) => unreachable!("a framed message is complete"),
                Err(n) => {
                    eprintln!(
                        "{} -> {} message {}: does not decode: {n}",
                        s.src,
                        s.dst,
                        i + 1
                    );
                    (
                        format!("undecodable-{}", bytes[18]),
                        vec![format!("DOES NOT DECODE: {n}")],
                    )
                }
            };
            if name == "keepalive" {
                if keepalive_done {
                    continue;
                }
                keepalive_done = true;
            }
            let base = format!("{label}.{name}");
            let mut path = out_dir.join(dir).join(format!("{base}.hex"));
            let mut n = 1;
            let mut duplicate = false;
            while let Some(prev) = written.get(&path) {
                if prev == bytes {
                    duplicate = true;
                    break;
                }
                n += 1;
                path = out_dir.join(dir).join(format!("{base}-{n}.hex"));
            }
            if duplicate {
                continue;
            }
            let mut text = String::new();
            let _ = writeln!(
                text,
                "# One BGP message captured on the wire by bgp/examples/capture_vectors.rs"
            );
            let _ = writeln!(text, "# (see bgp/README.md, \"Captured vectors\").");
            let _ = writeln!(text, "# sender: {sender}");
            let _ = writeln!(text, "# receiver: {receiver}");
            let _ = writeln!(
                text,
                "# session: {label}, TCP {} -> {}, message {} of this direction",
                s.src,
                s.dst,
                i + 1
            );
            let _ = writeln!(
                text,
                "# context: four_octet_as={} extended_message={} ibgp={}",
                ctx.four_octet_as, ctx.extended_message, ctx.ibgp
            );
            for l in lines {
                let _ = writeln!(text, "# {l}");
            }
            for chunk in bytes.chunks(32) {
                let _ = writeln!(text, "{}", hex(chunk));
            }
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            written.insert(path, bytes.clone());
        }
    }
    // What a capture must hold, or the scenario went wrong.
    let names: Vec<String> = written
        .keys()
        .filter_map(|p| {
            let dir = p.parent()?.file_name()?.to_string_lossy().into_owned();
            Some(format!("{dir}/{}", p.file_name()?.to_string_lossy()))
        })
        .collect();
    for want in [
        "frr/to-gobgp-v4.open",
        "gobgp/to-frr-v4.open",
        "bird/to-frr-v4.open",
        "frr/to-bird-v4.eor-ipv4",
        "frr/to-gobgp-v4.update-198.51.100.0_28",
        "frr/to-gobgp-ibgp.update-198.51.100.0_28",
        "frr/to-gobgp-v4.update-198.51.100.128_25",
        "gobgp/to-frr-v4.update-198.51.100.32_29",
        "gobgp/to-frr-ibgp.update-198.51.100.192_27",
        "bird/to-frr-v4.update-198.51.100.48_29",
        "frr/to-gobgp-ibgp.notification-6-2",
        "frr/to-gobgp-v4.notification-6-9",
        "gobgp/to-frr-v6.notification-6-",
        "bird/to-frr-v4.notification-6-2",
        "frr/to-bird-v4.route-refresh-ipv4-borr",
        "bird/to-frr-v4.route-refresh-ipv4-request",
    ] {
        ensure!(
            names.iter().any(|n| n.starts_with(want)),
            "the capture has no {want}*: {names:#?}"
        );
    }
    Ok(written.len())
}
