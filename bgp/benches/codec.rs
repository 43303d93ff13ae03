//! Codec and Adj-RIB-Out throughput.
//!
//! - `encode/{ipv4,ipv6}/N`: N host routes with one attribute set packed
//!   into UPDATEs (`encode_announcements`), 4096-byte messages.
//! - `decode/{ipv4,ipv6}/N`: framing and decoding those UPDATEs.
//! - `rib_out/announce/N`: `set_advertisements` of N IPv4 /32 on an
//!   Established, synced session, then `drain` (the UPDATEs ready to write).
//! - `rib_out/announce_v6/N`: the same with IPv6 /128.
//! - `rib_out/withdraw/N`: withdrawing N announced /32 (`set_advertisements`
//!   of the empty set + `drain`).
//!
//! Before measuring, it prints the UPDATE counts of the Adj-RIB-Out against
//! the packing limit (`prefixes_per_update` / `withdrawals_per_update`).
//!
//! Run: `cargo bench -p bgp --bench codec -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bgp::rib_out::{AdjRibOut, Advertisement, SessionContext};
use bgp::wire::{
    AnnounceVia, AsPath, Bytes, BytesMut, Capabilities, DecodeContext, EncodeContext, Family,
    Message, NextHop, Origin, PathAttribute, Prefix, WithdrawVia, encode_announcements, negotiate,
    prefixes_per_update, read_message, withdrawals_per_update,
};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const SIZES: [u32; 3] = [1, 1_000, 10_000];
const OUR_AS: u32 = 65000;

fn v4_host(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

fn v6_host(i: u32) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from((0x2001_0db8_u128 << 96) | u128::from(i)))
}

fn enc() -> EncodeContext {
    EncodeContext {
        four_octet_as: true,
        ..EncodeContext::default()
    }
}

fn dec() -> DecodeContext {
    DecodeContext {
        four_octet_as: true,
        ..DecodeContext::default()
    }
}

fn next_hop_v4() -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 1)
}

fn next_hop_v6() -> NextHop {
    NextHop::from(v6_host(0xffff_ffff))
}

/// Attributes and how the prefixes go, per family, as an eBGP session
/// sends them.
fn wire_setup(v6: bool) -> (Vec<PathAttribute>, AnnounceVia) {
    let mut attrs = vec![
        PathAttribute::Origin(Origin::Igp),
        PathAttribute::AsPath(AsPath::sequence([OUR_AS])),
    ];
    if v6 {
        let via = AnnounceVia::MpReach {
            family: Family::IPV6_UNICAST,
            next_hop: next_hop_v6(),
        };
        (attrs, via)
    } else {
        attrs.push(PathAttribute::NextHop(next_hop_v4()));
        (attrs, AnnounceVia::Classic)
    }
}

fn prefixes(n: u32, v6: bool) -> Vec<Prefix> {
    (0..n)
        .map(|i| Prefix::host(if v6 { v6_host(i) } else { v4_host(i) }))
        .collect()
}

fn session() -> SessionContext {
    let mut caps = Capabilities {
        multiprotocol: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        route_refresh: true,
        four_octet_as: Some(OUR_AS),
        ..Capabilities::default()
    };
    let local = caps.clone();
    caps.four_octet_as = Some(65001);
    let mut ctx = SessionContext::new(
        negotiate(&local, &caps),
        OUR_AS,
        false,
        IpAddr::V4(next_hop_v4()),
    );
    ctx.next_hop_ipv6 = Some(next_hop_v6());
    ctx
}

fn ads(n: u32, v6: bool) -> Vec<Advertisement> {
    (0..n)
        .map(|i| Advertisement::host(if v6 { v6_host(i) } else { v4_host(i) }))
        .collect()
}

/// An Established session whose initial sync (with `initial`) was drained.
fn synced(ctx: &SessionContext, initial: Vec<Advertisement>) -> AdjRibOut {
    let mut rib = AdjRibOut::new();
    rib.set_advertisements(initial);
    rib.on_session_up();
    rib.drain(ctx);
    rib
}

fn label(v6: bool) -> &'static str {
    if v6 { "ipv6" } else { "ipv4" }
}

fn bench_encode_decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("encode");
    for v6 in [false, true] {
        let (attrs, via) = wire_setup(v6);
        for n in SIZES {
            let ps = prefixes(n, v6);
            g.throughput(Throughput::Elements(u64::from(n)));
            g.bench_with_input(BenchmarkId::new(label(v6), n), &ps, |b, ps| {
                b.iter(|| {
                    let mut out = BytesMut::with_capacity(ps.len() * 18 + 4096);
                    encode_announcements(&mut out, &enc(), &attrs, &via, black_box(ps)).unwrap();
                    out
                });
            });
        }
    }
    g.finish();

    let mut g = c.benchmark_group("decode");
    for v6 in [false, true] {
        let (attrs, via) = wire_setup(v6);
        for n in SIZES {
            let mut wire = BytesMut::new();
            encode_announcements(&mut wire, &enc(), &attrs, &via, &prefixes(n, v6)).unwrap();
            let wire = wire.freeze();
            g.throughput(Throughput::Elements(u64::from(n)));
            g.bench_with_input(BenchmarkId::new(label(v6), n), &wire, |b, wire| {
                b.iter(|| {
                    let mut buf = BytesMut::from(&wire[..]);
                    let mut count = 0usize;
                    while let Some(m) = read_message(&mut buf, &dec()).unwrap() {
                        if let Message::Update(u) = m {
                            count += u.nlri.len() + u.mp_reach().map_or(0, |r| r.nlri.len());
                        }
                    }
                    assert_eq!(count, n as usize);
                    count
                });
            });
        }
    }
    g.finish();
}

fn bench_rib_out(c: &mut Criterion) {
    let ctx = session();
    let mut g = c.benchmark_group("rib_out");
    for (name, v6) in [("announce", false), ("announce_v6", true)] {
        for n in SIZES {
            let desired = ads(n, v6);
            g.throughput(Throughput::Elements(u64::from(n)));
            g.bench_with_input(BenchmarkId::new(name, n), &desired, |b, desired| {
                b.iter_batched(
                    || (synced(&ctx, Vec::new()), desired.clone()),
                    |(mut rib, desired)| {
                        rib.set_advertisements(desired);
                        let out = rib.drain(&ctx);
                        // Dropped outside the measurement.
                        (rib, out)
                    },
                    BatchSize::LargeInput,
                );
            });
        }
    }
    for n in [1_000, 10_000] {
        let announced = ads(n, false);
        g.throughput(Throughput::Elements(u64::from(n)));
        g.bench_with_input(
            BenchmarkId::new("withdraw", n),
            &announced,
            |b, announced| {
                b.iter_batched(
                    || synced(&ctx, announced.clone()),
                    |mut rib| {
                        rib.set_advertisements(Vec::new());
                        rib.drain(&ctx)
                    },
                    BatchSize::LargeInput,
                );
            },
        );
    }
    g.finish();
}

/// Prefixes carried by each UPDATE of `messages`.
fn per_update(messages: &[Bytes]) -> Vec<usize> {
    messages
        .iter()
        .map(|m| {
            let mut buf = BytesMut::from(&m[..]);
            match read_message(&mut buf, &dec()) {
                Ok(Some(Message::Update(u))) => {
                    u.nlri.len()
                        + u.withdrawn.len()
                        + u.mp_reach().map_or(0, |r| r.nlri.len())
                        + u.mp_unreach().map_or(0, |r| r.withdrawn.len())
                }
                other => panic!("not an UPDATE: {other:?}"),
            }
        })
        .collect()
}

/// "N UPDATEs (minimum M), P per full UPDATE = X% of the limit".
fn describe(counts: &[usize], n: usize, limit: usize) -> String {
    assert_eq!(counts.iter().sum::<usize>(), n);
    let full = &counts[..counts.len().saturating_sub(1)];
    let fill = if full.is_empty() {
        "no full UPDATE".to_owned()
    } else {
        let avg = full.iter().sum::<usize>() as f64 / full.len() as f64;
        format!(
            "{avg:.0} per full UPDATE = {:.1}% of the limit",
            100.0 * avg / limit as f64
        )
    };
    format!(
        "{:>3} UPDATEs (minimum {:>3}; limit {limit}/UPDATE; {fill})",
        counts.len(),
        n.div_ceil(limit)
    )
}

/// UPDATE counts of the Adj-RIB-Out against the packing limit.
fn report_packing() {
    let ctx = session();
    let enc = ctx.encode_context();
    println!("packing (4096-byte UPDATEs, eBGP, 4-octet AS):");
    for v6 in [false, true] {
        let (attrs, via) = wire_setup(v6);
        let len = if v6 { 128 } else { 32 };
        let limit = prefixes_per_update(&enc, &attrs, &via, len).unwrap_or(1);
        let wvia = if v6 {
            WithdrawVia::MpUnreach(Family::IPV6_UNICAST)
        } else {
            WithdrawVia::Classic
        };
        let wlimit = withdrawals_per_update(&enc, &wvia, len);
        for n in SIZES {
            let mut rib = synced(&ctx, Vec::new());
            rib.set_advertisements(ads(n, v6));
            let adds = per_update(&rib.drain(&ctx));
            rib.set_advertisements(Vec::new());
            let withdrawals = per_update(&rib.drain(&ctx));
            let n = n as usize;
            println!("  {} /{len} x {n}:", label(v6));
            println!("    adds        {}", describe(&adds, n, limit));
            println!("    withdrawals {}", describe(&withdrawals, n, wlimit));
        }
    }
}

fn packing(_: &mut Criterion) {
    report_packing();
}

criterion_group!(benches, packing, bench_encode_decode, bench_rib_out);
criterion_main!(benches);
