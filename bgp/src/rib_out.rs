//! The Adj-RIB-Out of one session: what we want the peer to have, what it
//! has, and the UPDATEs that take it from one to the other. Pure: no I/O,
//! no clocks.
//!
//! - [`AdjRibOut::set_advertisements`] replaces the desired set. It is
//!   diffed against the previous one; every prefix whose desired state
//!   changed is put in a pending set keyed by prefix, so an announce and a
//!   withdraw of the same prefix before a drain coalesce (RustyBGP's
//!   `PendingTx`).
//! - [`AdjRibOut::drain`] resolves each pending prefix against what the
//!   peer has (what was drained before, taken as written), groups the
//!   announcements by their attributes and writes as few UPDATEs as the
//!   negotiated maximum size allows (through [`crate::wire`]'s packing);
//!   withdrawals go in their own UPDATEs. After the first drain of a
//!   session it appends End-of-RIB for every negotiated family.
//! - [`AdjRibOut::reset`] (session lost) and [`AdjRibOut::on_session_up`]
//!   start over: the peer has nothing, everything desired is resent.
//! - [`AdjRibOut::route_refresh`] resends one family, inside RFC 7313
//!   BoRR/EoRR markers when enhanced route refresh was negotiated.
//!
//! Output is deterministic: per family (IPv4 unicast, then IPv6 unicast),
//! BoRR when refreshing, withdrawals in prefix order, announcements grouped
//! by attributes in a fixed order of the attribute sets with prefixes
//! sorted within each group, EoRR; then the End-of-RIB markers.
//!
//! # Driving it (the session task)
//!
//! - One `AdjRibOut` per configured session, kept across reconnects.
//!   [`AdjRibOut::set_advertisements`] whenever the desired set for this
//!   peer changes, whether the session is up or not.
//! - On entering Established: build a [`SessionContext`] from the
//!   negotiation, the AS, iBGP/eBGP and the next hops, call
//!   [`AdjRibOut::on_session_up`], then [`AdjRibOut::drain`] and write every
//!   returned message in order. The first drain ends with End-of-RIB, so
//!   give the desired set before it.
//! - While Established: after `set_advertisements`, or after
//!   [`AdjRibOut::route_refresh`] for a received ROUTE-REFRESH request,
//!   drain when [`AdjRibOut::has_pending`] says so (changes made between
//!   two drains coalesce, so draining late costs nothing) and write the
//!   messages. What a drain returns is taken as written: if writing fails,
//!   the session goes down anyway.
//! - On leaving Established for any reason: [`AdjRibOut::reset`].
//! - Publish [`AdjRibOut::state`] in the session's
//!   [`crate::state::SessionState::rib_out`].

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use ipnet::IpNet;

use crate::state::{FamilyDisabled, FamilyState, RibOutState, next_hop_text};
use crate::wire::{
    Afi, AnnounceVia, AsPath, Community, EncodeContext, Family, LargeCommunity, Message,
    Negotiated, NextHop, Origin, PathAttribute, Prefix, RouteRefresh, RouteRefreshSubtype,
    WithdrawVia, encode_announcements, encode_end_of_rib, encode_withdrawals, frame,
};

/// LOCAL_PREF sent to iBGP peers for an advertisement that sets none
/// (MetalLB's `localPref: 0`, "unset"). RFC 4271 requires the attribute on
/// iBGP; 100 is the value FRR, BIRD and GoBGP use by default.
pub const DEFAULT_LOCAL_PREF: u32 = 100;

/// The families an Adj-RIB-Out announces, in output order.
pub const FAMILIES: [Family; 2] = [Family::IPV4_UNICAST, Family::IPV6_UNICAST];

/// One prefix we want the peer to have, with its attributes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Advertisement {
    pub prefix: IpNet,
    /// LOCAL_PREF, sent to iBGP peers only; `None` sends
    /// [`DEFAULT_LOCAL_PREF`] there.
    pub local_pref: Option<u32>,
    /// Standard communities, in any order (sent sorted, without
    /// duplicates; more than 63 use the extended length).
    pub communities: Vec<Community>,
    pub large_communities: Vec<LargeCommunity>,
}

impl Advertisement {
    pub fn new(prefix: IpNet) -> Self {
        Self {
            prefix,
            local_pref: None,
            communities: Vec::new(),
            large_communities: Vec::new(),
        }
    }

    /// The host route (/32 or /128) of `addr`.
    pub fn host(addr: IpAddr) -> Self {
        Self::new(IpNet::from(addr))
    }

    pub fn with_local_pref(mut self, local_pref: u32) -> Self {
        self.local_pref = Some(local_pref);
        self
    }

    pub fn with_communities(mut self, communities: impl IntoIterator<Item = Community>) -> Self {
        self.communities.extend(communities);
        self
    }

    pub fn with_large_communities(
        mut self,
        communities: impl IntoIterator<Item = LargeCommunity>,
    ) -> Self {
        self.large_communities.extend(communities);
        self
    }
}

/// What the Adj-RIB-Out must know about the Established session to write
/// UPDATEs for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionContext {
    /// Capability negotiation: families, AS size, message size, enhanced
    /// route refresh, extended next hop.
    pub negotiated: Negotiated,
    /// The AS in AS_PATH towards eBGP peers (`localASN` when set, else
    /// `myASN`).
    pub local_as: u32,
    /// The peer is in our AS: empty AS_PATH and LOCAL_PREF.
    pub ibgp: bool,
    /// IPv4 unicast goes in the classic NLRI / Withdrawn Routes fields
    /// with a NEXT_HOP attribute (an IPv4 session, or a peer without
    /// multiprotocol capabilities); otherwise in MP_REACH / MP_UNREACH.
    pub ipv4_classic: bool,
    /// Next hop for IPv4 unicast NLRI (IPv6 only with RFC 8950 negotiated).
    pub next_hop_ipv4: Option<NextHop>,
    /// Next hop for IPv6 unicast NLRI (global, optionally link-local).
    pub next_hop_ipv6: Option<NextHop>,
}

impl SessionContext {
    /// A context whose only next hop is `local_addr`, the session's local
    /// address: IPv4 sessions use the classic fields for IPv4. Set the
    /// other family's next hop with the field.
    pub fn new(negotiated: Negotiated, local_as: u32, ibgp: bool, local_addr: IpAddr) -> Self {
        let (next_hop_ipv4, next_hop_ipv6) = match local_addr {
            IpAddr::V4(_) => (Some(NextHop::from(local_addr)), None),
            IpAddr::V6(_) => (None, Some(NextHop::from(local_addr))),
        };
        Self {
            negotiated,
            local_as,
            ibgp,
            ipv4_classic: local_addr.is_ipv4(),
            next_hop_ipv4,
            next_hop_ipv6,
        }
    }

    /// The next hop configured for `family`.
    pub fn next_hop(&self, family: Family) -> Option<NextHop> {
        match family {
            Family::IPV4_UNICAST => self.next_hop_ipv4,
            Family::IPV6_UNICAST => self.next_hop_ipv6,
            _ => None,
        }
    }

    /// How `family` is announced on this session, or why it is not.
    pub fn announce_via(&self, family: Family) -> Result<AnnounceVia, FamilyDisabled> {
        if !self.negotiated.has_family(family) {
            return Err(if self.negotiated.local_only_families.contains(&family) {
                FamilyDisabled::NotSupportedByPeer
            } else {
                FamilyDisabled::NotOffered
            });
        }
        let next_hop = self.next_hop(family).ok_or(FamilyDisabled::NoNextHop)?;
        let next_hop_afi = match next_hop {
            NextHop::V4(_) => Afi::IPV4,
            NextHop::V6 { .. } => Afi::IPV6,
        };
        if !self.negotiated.next_hop_allowed(family, next_hop_afi) {
            return Err(FamilyDisabled::NextHopNotAllowed);
        }
        if family == Family::IPV4_UNICAST && self.ipv4_classic && next_hop_afi == Afi::IPV4 {
            Ok(AnnounceVia::Classic)
        } else {
            Ok(AnnounceVia::MpReach { family, next_hop })
        }
    }

    /// How withdrawals of `family` are written.
    pub fn withdraw_via(&self, family: Family) -> WithdrawVia {
        if family == Family::IPV4_UNICAST && self.ipv4_classic {
            WithdrawVia::Classic
        } else {
            WithdrawVia::MpUnreach(family)
        }
    }

    pub fn encode_context(&self) -> EncodeContext {
        self.negotiated.encode_context()
    }
}

/// A family's status on the session, as of the last drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyStatus {
    /// Established but not drained yet: the context is not known.
    Unknown,
    Enabled {
        next_hop: NextHop,
    },
    Disabled(FamilyDisabled),
}

/// The attributes that vary per prefix. Shared slices keep equal lists in
/// one allocation; comparison is by value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Attrs {
    local_pref: Option<u32>,
    communities: Arc<[Community]>,
    large: Arc<[LargeCommunity]>,
}

impl Attrs {
    /// What goes on the wire: LOCAL_PREF (defaulted) on iBGP only.
    fn effective(&self, ibgp: bool) -> Attrs {
        Attrs {
            local_pref: ibgp.then(|| self.local_pref.unwrap_or(DEFAULT_LOCAL_PREF)),
            communities: Arc::clone(&self.communities),
            large: Arc::clone(&self.large),
        }
    }
}

/// Shares equal community lists within one `set_advertisements` call.
#[derive(Default)]
struct Interner {
    communities: HashSet<Arc<[Community]>>,
    large: HashSet<Arc<[LargeCommunity]>>,
}

fn intern<T: Eq + std::hash::Hash + Clone>(set: &mut HashSet<Arc<[T]>>, v: &[T]) -> Arc<[T]> {
    if let Some(a) = set.get(v) {
        return Arc::clone(a);
    }
    let a: Arc<[T]> = Arc::from(v);
    set.insert(Arc::clone(&a));
    a
}

impl Interner {
    fn attrs(&mut self, adv: &mut Advertisement) -> Attrs {
        adv.communities.sort_unstable();
        adv.communities.dedup();
        adv.large_communities.sort_unstable();
        adv.large_communities.dedup();
        Attrs {
            local_pref: adv.local_pref,
            communities: intern(&mut self.communities, &adv.communities),
            large: intern(&mut self.large, &adv.large_communities),
        }
    }
}

/// How a family is handled with the context of the last drain. A change
/// resends the whole family.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Plan {
    Announce {
        via: AnnounceVia,
        next_hop: NextHop,
        ibgp: bool,
        local_as: u32,
    },
    Disabled(FamilyDisabled),
}

impl Plan {
    fn new(ctx: &SessionContext, family: Family) -> Plan {
        match (ctx.announce_via(family), ctx.next_hop(family)) {
            (Ok(via), Some(next_hop)) => Plan::Announce {
                via,
                next_hop,
                ibgp: ctx.ibgp,
                local_as: ctx.local_as,
            },
            (Ok(_), None) => Plan::Disabled(FamilyDisabled::NoNextHop),
            (Err(reason), _) => Plan::Disabled(reason),
        }
    }
}

fn family_index(p: &Prefix) -> usize {
    usize::from(!p.is_ipv4())
}

/// The smallest IPv6 prefix (`::/0`): every IPv4 prefix sorts before it.
fn first_ipv6() -> Prefix {
    let any = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
    Prefix::new(any, 0).unwrap_or(Prefix::host(any))
}

/// One prefix: what we want the peer to have and what it has.
#[derive(Debug, Clone, Default)]
struct Entry {
    /// Desired attributes, as configured; `None`: not desired.
    desired: Option<Attrs>,
    /// What the peer has from us, as written on the wire.
    sent: Option<Attrs>,
    /// To resolve at the next drain (only meaningful while up).
    pending: bool,
    /// The last attempt to encode it failed (attributes too large).
    rejected: bool,
}

/// The Adj-RIB-Out of one session. See the module documentation.
///
/// One ordered map holds every prefix that is desired or at the peer, with
/// both states and a pending flag: `set_advertisements` merges the new set
/// into it in one ordered pass and `drain` resolves the pending entries in
/// another, so neither searches the map per prefix.
#[derive(Debug, Clone, Default)]
pub struct AdjRibOut {
    rib: BTreeMap<Prefix, Entry>,
    /// Entries with `pending` set.
    pending: usize,
    /// Families asked for by ROUTE-REFRESH since the last drain.
    refresh: BTreeSet<Family>,
    rejected_error: [Option<String>; 2],
    up: bool,
    /// End-of-RIB not sent yet on this session.
    initial_sync: bool,
    plans: [Option<Plan>; 2],
    desired_count: [usize; 2],
    advertised: [usize; 2],
    rejected: [usize; 2],
}

/// What the peer should have for a desired state under `plan`; `None`
/// when the plan is not known yet.
fn wanted(plan: &Option<Plan>, desired: &Option<Attrs>) -> Option<Option<Attrs>> {
    match plan {
        None => None,
        Some(Plan::Announce { ibgp, .. }) => Some(desired.as_ref().map(|a| a.effective(*ibgp))),
        Some(Plan::Disabled(_)) => Some(None),
    }
}

fn family_slot(family: Family) -> Option<usize> {
    FAMILIES.iter().position(|f| *f == family)
}

impl AdjRibOut {
    /// An empty Adj-RIB-Out for a session that is not up.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the desired set. A prefix given twice is merged: the union
    /// of the communities and the higher LOCAL_PREF (MetalLB merges
    /// duplicates the same way). Prefixes are taken with host bits
    /// cleared.
    pub fn set_advertisements(&mut self, desired: impl IntoIterator<Item = Advertisement>) {
        let mut items: Vec<(Prefix, Advertisement)> = desired
            .into_iter()
            .filter_map(|a| {
                let p = Prefix::new(a.prefix.addr(), a.prefix.prefix_len()).ok()?;
                Some((p, a))
            })
            .collect();
        // Merging duplicates is order-independent, so unstable is fine.
        items.sort_unstable_by_key(|(p, _)| *p);
        let mut interner = Interner::default();
        let mut new = Vec::with_capacity(items.len());
        let mut iter = items.into_iter().peekable();
        while let Some((p, mut adv)) = iter.next() {
            while let Some((_, dup)) = iter.next_if(|(q, _)| *q == p) {
                adv.local_pref = adv.local_pref.max(dup.local_pref);
                adv.communities.extend(dup.communities);
                adv.large_communities.extend(dup.large_communities);
            }
            new.push((p, interner.attrs(&mut adv)));
        }

        // Merge the new set into the map in one ordered pass, recounting.
        let old = std::mem::take(&mut self.rib);
        let mut merged: Vec<(Prefix, Entry)> = Vec::with_capacity(new.len().max(old.len()));
        self.pending = 0;
        self.desired_count = [0, 0];
        self.rejected = [0, 0];
        let mut a = old.into_iter().peekable();
        let mut b = new.into_iter().peekable();
        loop {
            use std::cmp::Ordering;
            let order = match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((pa, _)), Some((pb, _))) => pa.cmp(pb),
            };
            let (p, mut entry, attrs) = match order {
                Ordering::Less => {
                    let Some((p, e)) = a.next() else { break };
                    (p, e, None)
                }
                Ordering::Greater => {
                    let Some((p, attrs)) = b.next() else { break };
                    (p, Entry::default(), Some(attrs))
                }
                Ordering::Equal => {
                    let (Some((p, e)), Some((_, attrs))) = (a.next(), b.next()) else {
                        break;
                    };
                    (p, e, Some(attrs))
                }
            };
            let i = family_index(&p);
            if entry.desired != attrs {
                entry.desired = attrs;
                if self.up {
                    entry.pending = if std::mem::take(&mut entry.rejected) {
                        true
                    } else {
                        match wanted(&self.plans[i], &entry.desired) {
                            None => true,
                            Some(want) => want != entry.sent,
                        }
                    };
                }
                if entry.desired.is_none() && entry.sent.is_none() {
                    continue;
                }
            }
            self.pending += usize::from(entry.pending);
            self.desired_count[i] += usize::from(entry.desired.is_some());
            self.rejected[i] += usize::from(entry.rejected);
            merged.push((p, entry));
        }
        self.rib = merged.into_iter().collect();
    }

    /// The session was lost: the peer has nothing from us any more, and
    /// nothing is drained until [`AdjRibOut::on_session_up`].
    pub fn reset(&mut self) {
        self.up = false;
        self.initial_sync = false;
        self.rib.retain(|_, e| {
            e.sent = None;
            e.pending = false;
            e.rejected = false;
            e.desired.is_some()
        });
        self.pending = 0;
        self.refresh.clear();
        self.rejected_error = [None, None];
        self.rejected = [0, 0];
        self.plans = [None, None];
        self.advertised = [0, 0];
    }

    /// The session reached Established: the next drain sends everything
    /// desired, then End-of-RIB for each negotiated family. Implies
    /// [`AdjRibOut::reset`].
    pub fn on_session_up(&mut self) {
        self.reset();
        self.up = true;
        self.initial_sync = true;
        for e in self.rib.values_mut() {
            e.pending = true;
        }
        self.pending = self.rib.len();
    }

    pub fn is_up(&self) -> bool {
        self.up
    }

    /// The peer asked for `family` again (ROUTE-REFRESH, or BoRR/request
    /// under RFC 7313): the next drain resends all of it, between BoRR and
    /// EoRR when enhanced route refresh was negotiated. Ignored while the
    /// session is down, during the initial sync (which sends everything
    /// anyway), and at drain time for a family that was not negotiated or
    /// that this speaker does not announce.
    pub fn route_refresh(&mut self, family: Family) {
        if self.up && !self.initial_sync && FAMILIES.contains(&family) {
            self.refresh.insert(family);
        }
    }

    /// Whether [`AdjRibOut::drain`] has anything to write.
    pub fn has_pending(&self) -> bool {
        self.up && (self.initial_sync || self.pending > 0 || !self.refresh.is_empty())
    }

    /// Prefixes to be announced or withdrawn: the pending ones while up
    /// (an upper bound until a drain has seen the context), every desired
    /// prefix while down.
    pub fn pending_prefixes(&self) -> usize {
        if self.up {
            self.pending
        } else {
            self.desired_count.iter().sum()
        }
    }

    /// Prefixes the peer has from us in `family`.
    pub fn advertised(&self, family: Family) -> usize {
        family_slot(family).map_or(0, |i| self.advertised[i])
    }

    /// Prefixes the peer has from us, all families.
    pub fn advertised_total(&self) -> usize {
        self.advertised.iter().sum()
    }

    /// Desired prefixes in `family`.
    pub fn desired(&self, family: Family) -> usize {
        family_slot(family).map_or(0, |i| self.desired_count[i])
    }

    /// Whether `prefix` is at the peer (as drained).
    pub fn is_advertised(&self, prefix: &Prefix) -> bool {
        self.rib.get(prefix).is_some_and(|e| e.sent.is_some())
    }

    /// Whether End-of-RIB was written on this session.
    pub fn initial_sync_done(&self) -> bool {
        self.up && !self.initial_sync
    }

    /// How `family` is handled, as of the last drain.
    pub fn family_status(&self, family: Family) -> FamilyStatus {
        if !self.up {
            return FamilyStatus::Disabled(FamilyDisabled::SessionDown);
        }
        let Some(i) = family_slot(family) else {
            return FamilyStatus::Disabled(FamilyDisabled::NotOffered);
        };
        match &self.plans[i] {
            None => FamilyStatus::Unknown,
            Some(Plan::Announce { next_hop, .. }) => FamilyStatus::Enabled {
                next_hop: *next_hop,
            },
            Some(Plan::Disabled(reason)) => FamilyStatus::Disabled(*reason),
        }
    }

    /// The snapshot for [`crate::state::SessionState::rib_out`].
    pub fn state(&self) -> RibOutState {
        let families = FAMILIES
            .iter()
            .enumerate()
            .map(|(i, &family)| {
                let mut s = FamilyState::new(family);
                match self.family_status(family) {
                    FamilyStatus::Unknown => {
                        s.reason = Some("waiting for the first UPDATE round".to_owned());
                    }
                    FamilyStatus::Enabled { next_hop } => {
                        s.enabled = true;
                        s.next_hop = Some(next_hop_text(&next_hop));
                    }
                    FamilyStatus::Disabled(reason) => s.reason = Some(reason.to_string()),
                }
                s.prefixes_desired = self.desired_count[i];
                s.prefixes_advertised = self.advertised[i];
                s.prefixes_rejected = self.rejected[i];
                s.rejected_error = self.rejected_error[i].clone();
                s
            })
            .collect();
        RibOutState {
            families,
            pending_prefixes: self.pending_prefixes(),
            initial_sync_done: self.initial_sync_done(),
        }
    }

    /// Writes the UPDATEs (and RFC 7313 ROUTE-REFRESH markers) that bring
    /// the peer to the desired state, one message per `Bytes`, in sending
    /// order; the peer is then taken to have them. Nothing while the
    /// session is down.
    ///
    /// Prefixes whose attributes cannot fit in one message are not sent
    /// (withdrawn if the peer had them) and are reported by
    /// [`AdjRibOut::state`].
    pub fn drain(&mut self, ctx: &SessionContext) -> Vec<Bytes> {
        if !self.up {
            return Vec::new();
        }
        let enc = ctx.encode_context();
        for (i, &family) in FAMILIES.iter().enumerate() {
            let plan = Plan::new(ctx, family);
            if self.plans[i].as_ref() != Some(&plan) {
                if self.plans[i].is_some() {
                    // Next hop, AS or session type changed: resolve the
                    // whole family again.
                    self.mark_family(i);
                }
                self.plans[i] = Some(plan);
            }
        }
        let mut forced = [false; 2];
        for family in std::mem::take(&mut self.refresh) {
            if let Some(i) = family_slot(family)
                && ctx.negotiated.has_family(family)
            {
                forced[i] = true;
                self.mark_family(i);
            }
        }
        if self.pending == 0 && !self.initial_sync && !forced.contains(&true) {
            return Vec::new();
        }

        // Resolve every pending entry in one ordered pass. Announcements
        // are taken as sent here and undone below if they do not encode.
        let mut withdraw: [Vec<Prefix>; 2] = [Vec::new(), Vec::new()];
        let mut groups: [BTreeMap<Attrs, Group>; 2] = [BTreeMap::new(), BTreeMap::new()];
        if self.pending > 0 {
            let plans = &self.plans;
            let advertised = &mut self.advertised;
            let rejected = &mut self.rejected;
            self.rib.retain(|p, e| {
                if !std::mem::take(&mut e.pending) {
                    return true;
                }
                let i = family_index(p);
                if std::mem::take(&mut e.rejected) {
                    rejected[i] -= 1;
                }
                let want = wanted(&plans[i], &e.desired).flatten();
                match (want, &e.sent) {
                    (Some(w), Some(h)) if w == *h && !forced[i] => {}
                    (Some(w), had) => {
                        let g = groups[i].entry(w.clone()).or_default();
                        g.prefixes.push(*p);
                        if had.is_some() {
                            g.had.push(*p);
                        } else {
                            advertised[i] += 1;
                        }
                        e.sent = Some(w);
                    }
                    (None, Some(_)) => {
                        withdraw[i].push(*p);
                        e.sent = None;
                        advertised[i] -= 1;
                    }
                    (None, None) => {}
                }
                e.desired.is_some() || e.sent.is_some()
            });
            self.pending = 0;
        }

        let mut out = BytesMut::new();
        for (i, &family) in FAMILIES.iter().enumerate() {
            let enhanced = forced[i] && ctx.negotiated.enhanced_route_refresh;
            if enhanced {
                self.write_route_refresh(&mut out, &enc, family, true);
            }
            let mut announcements = BytesMut::new();
            if let Some(Plan::Announce { via, next_hop, .. }) = &self.plans[i] {
                let (via, next_hop) = (*via, *next_hop);
                for (attrs, group) in std::mem::take(&mut groups[i]) {
                    let list = path_attributes(ctx, &attrs, &via, next_hop);
                    let result = encode_announcements(
                        &mut announcements,
                        &enc,
                        &list,
                        &via,
                        &group.prefixes,
                    );
                    if let Err(e) = result {
                        self.rejected_error[i] = Some(e.to_string());
                        self.reject(i, &group, &mut withdraw[i]);
                    }
                }
            }
            let gone = &mut withdraw[i];
            // A family that was never negotiated has nothing at the peer
            // to withdraw with messages of that family.
            if !gone.is_empty() && ctx.negotiated.has_family(family) {
                gone.sort_unstable();
                let via = ctx.withdraw_via(family);
                if let Err(e) = encode_withdrawals(&mut out, &enc, &via, gone) {
                    // Only a prefix of the wrong family fails, which the
                    // family split rules out; report it all the same.
                    self.rejected_error[i] = Some(e.to_string());
                }
            }
            out.unsplit(announcements);
            if enhanced {
                self.write_route_refresh(&mut out, &enc, family, false);
            }
        }
        if self.initial_sync {
            for &family in &ctx.negotiated.families {
                if let Err(e) = encode_end_of_rib(&mut out, &enc, family)
                    && let Some(i) = family_slot(family)
                {
                    // An empty UPDATE always fits; keep the error visible.
                    self.rejected_error[i] = Some(e.to_string());
                }
            }
            self.initial_sync = false;
        }
        split_messages(out, enc.max_message_len())
    }

    /// Undoes a group that did not encode: its prefixes are not at the
    /// peer, and those it had before are withdrawn.
    fn reject(&mut self, i: usize, group: &Group, withdraw: &mut Vec<Prefix>) {
        for p in &group.prefixes {
            if let Some(e) = self.rib.get_mut(p) {
                e.sent = None;
                e.rejected = true;
                self.rejected[i] += 1;
                self.advertised[i] -= 1;
            }
        }
        withdraw.extend_from_slice(&group.had);
    }

    /// Sets every entry of family slot `i` pending.
    fn mark_family(&mut self, i: usize) {
        let split = first_ipv6();
        let entries: Box<dyn Iterator<Item = &mut Entry>> = if i == 0 {
            Box::new(self.rib.range_mut(..split).map(|(_, e)| e))
        } else {
            Box::new(self.rib.range_mut(split..).map(|(_, e)| e))
        };
        for e in entries {
            if !std::mem::replace(&mut e.pending, true) {
                self.pending += 1;
            }
        }
    }

    fn write_route_refresh(
        &mut self,
        out: &mut BytesMut,
        enc: &EncodeContext,
        family: Family,
        begin: bool,
    ) {
        let subtype = if begin {
            RouteRefreshSubtype::BeginningOfRefresh
        } else {
            RouteRefreshSubtype::EndOfRefresh
        };
        let msg = Message::RouteRefresh(RouteRefresh { family, subtype });
        if let Err(e) = msg.encode(enc, out)
            && let Some(i) = family_slot(family)
        {
            self.rejected_error[i] = Some(e.to_string());
        }
    }
}

/// Prefixes announced with one attribute set in a drain.
#[derive(Debug, Default)]
struct Group {
    /// In prefix order.
    prefixes: Vec<Prefix>,
    /// Those the peer had before (with other attributes, or refreshed).
    had: Vec<Prefix>,
}

/// ORIGIN IGP; AS_PATH empty (iBGP) or our AS (eBGP); NEXT_HOP in the
/// classic encoding; LOCAL_PREF (iBGP: already in the effective
/// attributes); COMMUNITIES; LARGE_COMMUNITIES. Type code order.
fn path_attributes(
    ctx: &SessionContext,
    attrs: &Attrs,
    via: &AnnounceVia,
    next_hop: NextHop,
) -> Vec<PathAttribute> {
    let mut list = Vec::with_capacity(6);
    list.push(PathAttribute::Origin(Origin::Igp));
    list.push(PathAttribute::AsPath(if ctx.ibgp {
        AsPath::empty()
    } else {
        AsPath::sequence([ctx.local_as])
    }));
    if let (AnnounceVia::Classic, NextHop::V4(addr)) = (via, next_hop) {
        list.push(PathAttribute::NextHop(addr));
    }
    if let Some(lp) = attrs.local_pref {
        list.push(PathAttribute::LocalPref(lp));
    }
    if !attrs.communities.is_empty() {
        list.push(PathAttribute::Communities(attrs.communities.to_vec()));
    }
    if !attrs.large.is_empty() {
        list.push(PathAttribute::LargeCommunities(attrs.large.to_vec()));
    }
    list
}

/// Cuts the concatenated messages into one `Bytes` each (no copy).
fn split_messages(mut buf: BytesMut, max: usize) -> Vec<Bytes> {
    let mut messages = Vec::new();
    while let Ok(Some(f)) = frame(&mut buf, max) {
        messages.push(f.bytes().clone());
    }
    debug_assert!(buf.is_empty(), "the encoder wrote a partial message");
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_prefixes_sort_before_the_first_ipv6_prefix() {
        let split = first_ipv6();
        let v4: Prefix = "255.255.255.255/32".parse().unwrap();
        let v6: Prefix = "::/0".parse().unwrap();
        assert!(v4 < split);
        assert!(split <= v6);
        assert_eq!(split, v6);
    }

    #[test]
    fn effective_attributes_default_local_pref_on_ibgp_only() {
        let a = Attrs {
            local_pref: None,
            communities: Arc::from(&[][..]),
            large: Arc::from(&[][..]),
        };
        assert_eq!(a.effective(true).local_pref, Some(DEFAULT_LOCAL_PREF));
        assert_eq!(a.effective(false).local_pref, None);
        let b = Attrs {
            local_pref: Some(50),
            ..a
        };
        assert_eq!(b.effective(true).local_pref, Some(50));
        assert_eq!(b.effective(false).local_pref, None);
    }
}
