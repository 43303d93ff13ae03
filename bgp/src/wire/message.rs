//! Message framing (RFC 4271 section 4.1 and 6.1) and the message enum.

use bytes::{BufMut, Bytes, BytesMut};

use super::context::{DecodeContext, EncodeContext, HEADER_LEN, MAX_MESSAGE_LEN};
use super::encode::{EncodeError, MARKER, finish_message, start_message};
use super::notification::Notification;
use super::open::Open;
use super::types::{Afi, Family, Safi};
use super::update::Update;

/// Message types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    Open = 1,
    Update = 2,
    Notification = 3,
    Keepalive = 4,
    RouteRefresh = 5,
}

impl MessageType {
    pub fn from_u8(t: u8) -> Option<Self> {
        Some(match t {
            1 => MessageType::Open,
            2 => MessageType::Update,
            3 => MessageType::Notification,
            4 => MessageType::Keepalive,
            5 => MessageType::RouteRefresh,
            _ => return None,
        })
    }

    /// The smallest valid length of a message of this type, header included.
    pub fn min_len(self) -> usize {
        match self {
            MessageType::Open => 29,
            MessageType::Update => 23,
            MessageType::Notification => 21,
            MessageType::Keepalive => HEADER_LEN,
            MessageType::RouteRefresh => 23,
        }
    }

    /// The largest valid length of a message of this type, when the
    /// session allows `max_len`: OPEN and KEEPALIVE never grow with
    /// extended messages (RFC 8654 section 3).
    pub fn max_len(self, max_len: usize) -> usize {
        match self {
            MessageType::Open => max_len.min(MAX_MESSAGE_LEN),
            MessageType::Keepalive => HEADER_LEN,
            _ => max_len,
        }
    }
}

/// ROUTE-REFRESH message subtypes (RFC 7313).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteRefreshSubtype {
    /// 0: a plain route refresh request (RFC 2918).
    Request,
    /// 1: Beginning of Route Refresh.
    BeginningOfRefresh,
    /// 2: End of Route Refresh.
    EndOfRefresh,
    /// 3..=255: RFC 7313 says to ignore the message.
    Reserved(u8),
}

impl RouteRefreshSubtype {
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => RouteRefreshSubtype::Request,
            1 => RouteRefreshSubtype::BeginningOfRefresh,
            2 => RouteRefreshSubtype::EndOfRefresh,
            other => RouteRefreshSubtype::Reserved(other),
        }
    }

    pub fn to_u8(self) -> u8 {
        match self {
            RouteRefreshSubtype::Request => 0,
            RouteRefreshSubtype::BeginningOfRefresh => 1,
            RouteRefreshSubtype::EndOfRefresh => 2,
            RouteRefreshSubtype::Reserved(v) => v,
        }
    }
}

/// A ROUTE-REFRESH message (RFC 2918, RFC 7313).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteRefresh {
    pub family: Family,
    pub subtype: RouteRefreshSubtype,
}

impl RouteRefresh {
    pub fn request(family: Family) -> Self {
        RouteRefresh {
            family,
            subtype: RouteRefreshSubtype::Request,
        }
    }
}

/// A BGP message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Open(Open),
    Update(Update),
    Notification(Notification),
    Keepalive,
    RouteRefresh(RouteRefresh),
}

impl Message {
    pub fn message_type(&self) -> MessageType {
        match self {
            Message::Open(_) => MessageType::Open,
            Message::Update(_) => MessageType::Update,
            Message::Notification(_) => MessageType::Notification,
            Message::Keepalive => MessageType::Keepalive,
            Message::RouteRefresh(_) => MessageType::RouteRefresh,
        }
    }

    /// Decodes the body of a message whose header was validated.
    pub fn decode(
        message_type: MessageType,
        body: Bytes,
        ctx: &DecodeContext,
    ) -> Result<Message, Notification> {
        match message_type {
            MessageType::Open => Open::decode(body).map(Message::Open),
            MessageType::Update => Update::decode(body, ctx).map(Message::Update),
            MessageType::Notification => match body.as_ref() {
                [code, subcode, data @ ..] => Ok(Message::Notification(Notification::from_wire(
                    *code, *subcode, data,
                ))),
                _ => Err(bad_length(HEADER_LEN + body.len())),
            },
            MessageType::Keepalive => {
                if body.is_empty() {
                    Ok(Message::Keepalive)
                } else {
                    Err(bad_length(HEADER_LEN + body.len()))
                }
            }
            MessageType::RouteRefresh => match body.as_ref() {
                &[a0, a1, subtype, safi] => Ok(Message::RouteRefresh(RouteRefresh {
                    family: Family::new(Afi(u16::from_be_bytes([a0, a1])), Safi(safi)),
                    subtype: RouteRefreshSubtype::from_u8(subtype),
                })),
                _ => {
                    // RFC 7313 section 5: the data is the whole message.
                    let mut message = BytesMut::with_capacity(HEADER_LEN + body.len());
                    message.put_slice(&MARKER);
                    message.put_u16(u16::try_from(HEADER_LEN + body.len()).unwrap_or(u16::MAX));
                    message.put_u8(MessageType::RouteRefresh as u8);
                    message.put_slice(&body);
                    Err(Notification::InvalidRouteRefreshLength {
                        message: message.freeze(),
                    })
                }
            },
        }
    }

    /// Appends the whole message to `out`. A NOTIFICATION whose data does
    /// not fit is truncated (never an error); other messages that do not
    /// fit are an error and leave `out` as it was.
    pub fn encode(&self, ctx: &EncodeContext, out: &mut BytesMut) -> Result<(), EncodeError> {
        let max = ctx.max_message_len();
        match self {
            Message::Update(u) => u.encode(ctx, out),
            Message::Open(o) => {
                let start = start_message(out, MessageType::Open as u8);
                if let Err(e) = o.encode_body(out) {
                    out.truncate(start);
                    return Err(e);
                }
                finish_message(out, start, MessageType::Open.max_len(max))
            }
            Message::Notification(n) => {
                let start = start_message(out, MessageType::Notification as u8);
                out.put_u8(n.code());
                out.put_u8(n.subcode());
                n.write_data(out);
                out.truncate(start + max.min(out.len() - start));
                finish_message(out, start, max)
            }
            Message::Keepalive => {
                let start = start_message(out, MessageType::Keepalive as u8);
                finish_message(out, start, max)
            }
            Message::RouteRefresh(rr) => {
                let start = start_message(out, MessageType::RouteRefresh as u8);
                out.put_u16(rr.family.afi.0);
                out.put_u8(rr.subtype.to_u8());
                out.put_u8(rr.family.safi.0);
                finish_message(out, start, max)
            }
        }
    }

    /// The message as one buffer.
    pub fn to_bytes(&self, ctx: &EncodeContext) -> Result<Bytes, EncodeError> {
        let mut out = BytesMut::new();
        self.encode(ctx, &mut out)?;
        Ok(out.freeze())
    }
}

fn bad_length(length: usize) -> Notification {
    Notification::BadMessageLength {
        length: u16::try_from(length).unwrap_or(u16::MAX),
    }
}

/// One complete message cut from the input, header validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    message_type: MessageType,
    bytes: Bytes,
}

impl Frame {
    pub fn message_type(&self) -> MessageType {
        self.message_type
    }

    /// The whole message, header included.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The message after the header.
    pub fn body(&self) -> Bytes {
        self.bytes.slice(HEADER_LEN..)
    }

    pub fn decode(&self, ctx: &DecodeContext) -> Result<Message, Notification> {
        Message::decode(self.message_type, self.body(), ctx)
    }
}

/// Cuts one message off the front of `buf`.
///
/// The header is validated as soon as its 19 bytes are there, so a bad
/// header fails at once instead of waiting for a body that may never come;
/// a wrong marker byte fails even earlier. `Ok(None)` means more input is
/// needed, and nothing was consumed. On error nothing is consumed either.
/// The message is split off without copying or allocating.
pub fn frame(buf: &mut BytesMut, max_len: usize) -> Result<Option<Frame>, Notification> {
    let marker_bytes = buf.len().min(MARKER.len());
    if buf[..marker_bytes].iter().any(|&b| b != 0xff) {
        return Err(Notification::ConnectionNotSynchronized);
    }
    let Some(&[l0, l1, type_byte]) = buf.get(16..HEADER_LEN) else {
        return Ok(None);
    };
    let length = u16::from_be_bytes([l0, l1]);
    let len = usize::from(length);
    if len < HEADER_LEN || len > max_len {
        return Err(Notification::BadMessageLength { length });
    }
    let Some(message_type) = MessageType::from_u8(type_byte) else {
        return Err(Notification::BadMessageType {
            message_type: type_byte,
        });
    };
    if len < message_type.min_len() || len > message_type.max_len(max_len) {
        return Err(Notification::BadMessageLength { length });
    }
    if buf.len() < len {
        return Ok(None);
    }
    Ok(Some(Frame {
        message_type,
        bytes: buf.split_to(len).freeze(),
    }))
}

/// [`frame`] then decode, with the maximum length of `ctx`. A message that
/// frames but does not decode is consumed (the session is over anyway).
pub fn read_message(
    buf: &mut BytesMut,
    ctx: &DecodeContext,
) -> Result<Option<Message>, Notification> {
    match frame(buf, ctx.max_message_len())? {
        Some(f) => f.decode(ctx).map(Some),
        None => Ok(None),
    }
}
