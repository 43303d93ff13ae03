//! RFC 7606 applied to a decoded UPDATE, as a separate pure step.
//!
//! The decoder records what is wrong ([`UpdateError`]); this module decides
//! what that means (sections 3 to 7 of RFC 7606, with RFC 4760, 6793, 7607
//! and 8092 where they say more):
//!
//! | problem | approach |
//! |---|---|
//! | Withdrawn Routes or NLRI field syntax (5.3) | session reset |
//! | MP_REACH_NLRI / MP_UNREACH_NLRI malformed or repeated (3.g, 7.11) | session reset |
//! | unrecognized well-known attribute (RFC 4271 6.3) | session reset |
//! | attribute list cannot be walked (4) | treat-as-withdraw |
//! | ORIGIN, AS_PATH, NEXT_HOP, MED, LOCAL_PREF, COMMUNITIES, LARGE_COMMUNITIES malformed (7.1-7.5, 7.8, RFC 8092) | treat-as-withdraw |
//! | wrong Optional/Transitive flags (3.c) | treat-as-withdraw |
//! | AS_PATH with confederation segments from an eBGP peer (RFC 5065 5, 7.2) | treat-as-withdraw |
//! | well-known mandatory attribute missing while NLRI are present (3.d) | treat-as-withdraw |
//! | ATOMIC_AGGREGATE, AGGREGATOR malformed (7.6, 7.7) | attribute discard |
//! | AS4_PATH, AS4_AGGREGATOR malformed (RFC 6793 6), or sent by a 4-octet peer (RFC 6793 4.1) | attribute discard |
//! | any other attribute repeated (3.g) | later instances discarded |
//! | LOCAL_PREF from an eBGP peer (7.5) | attribute discard |
//! | NEXT_HOP malformed in an UPDATE without classic NLRI (RFC 4760 3) | attribute discard |
//!
//! An MP_REACH_NLRI or MP_UNREACH_NLRI of a family this codec does not
//! decode is set aside (reported as discarded): we never negotiate such a
//! family, so nothing of it is ever used.

use super::attribute::{PathAttribute, attr_type};
use super::context::DecodeContext;
use super::notification::Notification;
use super::types::{Afi, Family, Prefix, Safi};
use super::update::{ErrorSite, Update, UpdateError};

/// The RFC 7606 approaches (section 2) this codec applies. AFI/SAFI
/// disable is not used: every MP_REACH/MP_UNREACH error resets the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorAction {
    AttributeDiscard,
    TreatAsWithdraw,
    SessionReset,
}

/// Why an attribute was left out of an accepted UPDATE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscardReason {
    /// Malformed, with the error RFC 4271 would have sent.
    Malformed(Notification),
    /// A later instance of an attribute already seen.
    Duplicate,
    /// LOCAL_PREF from an external peer.
    LocalPrefFromExternalPeer,
    /// AS4_PATH or AS4_AGGREGATOR from a 4-octet AS speaker.
    As4FromFourOctetPeer,
    /// MP_REACH_NLRI or MP_UNREACH_NLRI of a family we do not decode.
    UnsupportedFamily(Option<Family>),
}

/// One attribute left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discarded {
    pub type_code: u8,
    pub reason: DiscardReason,
}

/// A valid UPDATE: what it announces and withdraws.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AcceptedUpdate {
    /// Classic NLRI and MP_REACH_NLRI prefixes.
    pub announced: Vec<Prefix>,
    /// Classic withdrawn routes and MP_UNREACH_NLRI prefixes.
    pub withdrawn: Vec<Prefix>,
    /// The attributes that remain after discards.
    pub attributes: Vec<PathAttribute>,
    pub discarded: Vec<Discarded>,
    /// Set when the UPDATE is an End-of-RIB marker.
    pub end_of_rib: Option<Family>,
}

/// What to do with a received UPDATE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateVerdict {
    Accept(AcceptedUpdate),
    /// Every prefix the UPDATE announces or withdraws is to be treated as
    /// withdrawn; `reasons` says why (for the log and counters).
    TreatAsWithdraw {
        withdrawn: Vec<Prefix>,
        reasons: Vec<Notification>,
    },
    /// Send this NOTIFICATION and close the session.
    SessionReset(Notification),
}

/// The approach for one decoding error. `classic_nlri` tells whether the
/// UPDATE has prefixes in its NLRI field (NEXT_HOP only matters then).
pub fn error_action(error: &UpdateError, classic_nlri: bool) -> ErrorAction {
    use attr_type::*;
    match error.site {
        ErrorSite::WithdrawnRoutes | ErrorSite::Nlri => ErrorAction::SessionReset,
        ErrorSite::AttributeList => ErrorAction::TreatAsWithdraw,
        ErrorSite::DuplicateAttribute { type_code } => match type_code {
            MP_REACH_NLRI | MP_UNREACH_NLRI => ErrorAction::SessionReset,
            _ => ErrorAction::AttributeDiscard,
        },
        ErrorSite::Attribute { type_code, .. } => {
            let flags_error =
                matches!(error.notification, Notification::AttributeFlagsError { .. });
            match type_code {
                _ if matches!(
                    error.notification,
                    Notification::UnrecognizedWellKnownAttribute { .. }
                ) =>
                {
                    ErrorAction::SessionReset
                }
                MP_REACH_NLRI | MP_UNREACH_NLRI => ErrorAction::SessionReset,
                AS4_PATH | AS4_AGGREGATOR => ErrorAction::AttributeDiscard,
                ATOMIC_AGGREGATE | AGGREGATOR if !flags_error => ErrorAction::AttributeDiscard,
                NEXT_HOP if !classic_nlri => ErrorAction::AttributeDiscard,
                _ => ErrorAction::TreatAsWithdraw,
            }
        }
    }
}

/// Applies RFC 7606 to a decoded UPDATE from a peer described by `ctx`.
pub fn validate_update(update: &Update, ctx: &DecodeContext) -> UpdateVerdict {
    use attr_type::*;
    let classic_nlri = !update.nlri.is_empty();
    let mut reasons = Vec::new();
    let mut discarded = Vec::new();
    let mut erroneous = [false; 256];

    for error in &update.errors {
        match error_action(error, classic_nlri) {
            ErrorAction::SessionReset => {
                return UpdateVerdict::SessionReset(error.notification.clone());
            }
            ErrorAction::TreatAsWithdraw => reasons.push(error.notification.clone()),
            ErrorAction::AttributeDiscard => {
                let (type_code, reason) = match error.site {
                    ErrorSite::DuplicateAttribute { type_code } => {
                        (type_code, DiscardReason::Duplicate)
                    }
                    ErrorSite::Attribute { type_code, .. } => (
                        type_code,
                        DiscardReason::Malformed(error.notification.clone()),
                    ),
                    // error_action discards attributes only.
                    ErrorSite::WithdrawnRoutes | ErrorSite::AttributeList | ErrorSite::Nlri => {
                        continue;
                    }
                };
                discarded.push(Discarded { type_code, reason });
            }
        }
        if let ErrorSite::Attribute { type_code, .. } = error.site {
            erroneous[usize::from(type_code)] = true;
        }
    }

    let mut attributes = Vec::with_capacity(update.attributes.len());
    for attr in &update.attributes {
        let type_code = attr.type_code();
        let reason = match attr {
            PathAttribute::LocalPref(_) if !ctx.ibgp => {
                Some(DiscardReason::LocalPrefFromExternalPeer)
            }
            PathAttribute::As4Path(_) | PathAttribute::As4Aggregator(_) if ctx.four_octet_as => {
                Some(DiscardReason::As4FromFourOctetPeer)
            }
            PathAttribute::Other(raw)
                if matches!(raw.type_code, MP_REACH_NLRI | MP_UNREACH_NLRI) =>
            {
                let family = match raw.value.get(..3) {
                    Some(&[a0, a1, s]) => {
                        Some(Family::new(Afi(u16::from_be_bytes([a0, a1])), Safi(s)))
                    }
                    _ => None,
                };
                Some(DiscardReason::UnsupportedFamily(family))
            }
            PathAttribute::AsPath(path) if !ctx.ibgp && path.has_confed() => {
                reasons.push(Notification::MalformedAsPath);
                None
            }
            _ => None,
        };
        match reason {
            Some(reason) => discarded.push(Discarded { type_code, reason }),
            None => attributes.push(attr.clone()),
        }
    }

    let mp_reach = update.mp_reach();
    let mp_unreach = update.mp_unreach();
    let announces = classic_nlri || mp_reach.is_some_and(|m| !m.nlri.is_empty());
    if announces {
        let mut mandatory = vec![ORIGIN, AS_PATH];
        if classic_nlri {
            mandatory.push(NEXT_HOP);
        }
        for type_code in mandatory {
            if update.attribute(type_code).is_none() && !erroneous[usize::from(type_code)] {
                reasons.push(Notification::MissingWellKnownAttribute { type_code });
            }
        }
    }

    let mut announced = update.nlri.clone();
    if let Some(m) = mp_reach {
        announced.extend_from_slice(&m.nlri);
    }
    let mut withdrawn = update.withdrawn.clone();
    if let Some(m) = mp_unreach {
        withdrawn.extend_from_slice(&m.withdrawn);
    }

    if !reasons.is_empty() {
        withdrawn.extend(announced);
        return UpdateVerdict::TreatAsWithdraw { withdrawn, reasons };
    }
    UpdateVerdict::Accept(AcceptedUpdate {
        announced,
        withdrawn,
        attributes,
        discarded,
        end_of_rib: update.end_of_rib_family(),
    })
}
