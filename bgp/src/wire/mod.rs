//! The BGP-4 wire format, pure (no I/O, no clocks).
//!
//! - Framing: [`frame`] cuts one message off a [`BytesMut`] after checking
//!   the whole header (marker, length 19..=max, per-type length, type);
//!   [`read_message`] frames and decodes.
//! - Messages: [`Message`] with [`Open`], [`Update`], [`Notification`],
//!   KEEPALIVE and [`RouteRefresh`] (RFC 2918 with the RFC 7313 subtypes),
//!   each decoded and encoded both ways.
//! - Capabilities: [`Capability`] (multiprotocol, route refresh and its old
//!   code, enhanced route refresh, 4-octet AS, graceful restart with the
//!   N bit, extended message, extended next hop, unknown ones kept), the
//!   [`Capabilities`] summary and the pure [`negotiate`].
//! - Path attributes: [`PathAttribute`], including AS4_PATH/AS4_AGGREGATOR
//!   handling for 2-octet sessions and MP_REACH/MP_UNREACH for IPv4/IPv6.
//! - Errors: one [`Notification`] enum, one variant per code/subcode, which
//!   every decoder returns; [`EncodeError`] for encoders.
//! - RFC 7606: [`Update::decode`] records problems in [`Update::errors`];
//!   [`validate_update`] turns them into an [`UpdateVerdict`].
//! - Packing: [`encode_announcements`], [`encode_withdrawals`],
//!   [`encode_end_of_rib`] and the packing limit [`prefixes_per_update`].

mod attribute;
mod capability;
mod context;
mod encode;
mod message;
mod notification;
mod open;
mod pack;
mod reader;
mod types;
mod update;
mod validate;

pub use bytes::{Bytes, BytesMut};

pub use attribute::{
    Aggregator, AsPath, AsSegment, Community, LargeCommunity, MpReach, MpUnreach, Origin,
    PathAttribute, RawAttribute, SegmentType, attr_flags, attr_type, reconstruct_as_path,
    type_name,
};
pub use capability::{
    AS_TRANS, Capabilities, Capability, ExtendedNextHop, GracefulRestart, GracefulRestartFamily,
    Negotiated, NegotiatedGracefulRestart, UnknownCapability, capability_code, negotiate,
};
pub use context::{
    AddPath, DecodeContext, EncodeContext, HEADER_LEN, MAX_EXTENDED_MESSAGE_LEN, MAX_MESSAGE_LEN,
};
pub use encode::EncodeError;
pub use message::{
    Frame, Message, MessageType, RouteRefresh, RouteRefreshSubtype, frame, read_message,
};
pub use notification::{MAX_SHUTDOWN_COMMUNICATION, Notification, PrefixLimit, error_code};
pub use open::{BGP_VERSION, HoldTime, Open, OptionalParameter};
pub use pack::{
    AnnounceVia, WithdrawVia, encode_announcements, encode_end_of_rib, encode_withdrawals,
    prefixes_per_update, withdrawals_per_update,
};
pub use types::{Afi, Family, NextHop, Prefix, PrefixError, Safi};
pub use update::{ErrorSite, Update, UpdateError};
pub use validate::{
    AcceptedUpdate, DiscardReason, Discarded, ErrorAction, UpdateVerdict, error_action,
    validate_update,
};
