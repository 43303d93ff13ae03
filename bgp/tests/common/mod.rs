//! Helpers shared by the integration tests: building raw messages by hand
//! and decoding exactly one message.
#![allow(dead_code)]

use bgp::wire::{
    BytesMut, DecodeContext, EncodeContext, MAX_EXTENDED_MESSAGE_LEN, Message, Notification,
    Update, UpdateVerdict, frame, validate_update,
};

/// A complete message: marker, length, type, body.
pub fn message(msg_type: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![0xff; 16];
    let len = u16::try_from(19 + body.len()).expect("test message too long");
    m.extend_from_slice(&len.to_be_bytes());
    m.push(msg_type);
    m.extend_from_slice(body);
    m
}

/// An UPDATE body from its three fields.
pub fn update_body(withdrawn: &[u8], attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&u16::try_from(withdrawn.len()).unwrap().to_be_bytes());
    b.extend_from_slice(withdrawn);
    b.extend_from_slice(&u16::try_from(attrs.len()).unwrap().to_be_bytes());
    b.extend_from_slice(attrs);
    b.extend_from_slice(nlri);
    b
}

/// One attribute with a 1-byte length.
pub fn attr(flags: u8, type_code: u8, value: &[u8]) -> Vec<u8> {
    let mut a = vec![flags, type_code, u8::try_from(value.len()).unwrap()];
    a.extend_from_slice(value);
    a
}

/// One attribute with the extended (2-byte) length.
pub fn attr_ext(flags: u8, type_code: u8, value: &[u8]) -> Vec<u8> {
    let mut a = vec![flags | 0x10, type_code];
    a.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
    a.extend_from_slice(value);
    a
}

/// ORIGIN IGP, AS_PATH [65001] (4-octet), NEXT_HOP 192.0.2.1.
pub fn mandatory_attrs4() -> Vec<u8> {
    let mut a = attr(0x40, 1, &[0]);
    a.extend(attr(0x40, 2, &[2, 1, 0, 0, 0xfd, 0xe9]));
    a.extend(attr(0x40, 3, &[192, 0, 2, 1]));
    a
}

pub fn ctx(four_octet_as: bool, ibgp: bool) -> DecodeContext {
    DecodeContext {
        four_octet_as,
        ibgp,
        ..DecodeContext::default()
    }
}

pub fn ebgp4() -> DecodeContext {
    ctx(true, false)
}

pub fn enc(four_octet_as: bool) -> EncodeContext {
    EncodeContext {
        four_octet_as,
        ..EncodeContext::default()
    }
}

/// Frames and decodes exactly one complete message from `bytes`.
pub fn decode(bytes: &[u8], ctx: &DecodeContext) -> Result<Message, Notification> {
    let mut buf = BytesMut::from(bytes);
    let max = if ctx.extended_message {
        MAX_EXTENDED_MESSAGE_LEN
    } else {
        4096
    };
    let frame = frame(&mut buf, max)?.expect("incomplete test message");
    assert!(buf.is_empty(), "trailing bytes after the test message");
    frame.decode(ctx)
}

/// Decodes an UPDATE body (wrapped in a header) and expects an UPDATE.
pub fn decode_update(body: &[u8], ctx: &DecodeContext) -> Update {
    match decode(&message(2, body), ctx) {
        Ok(Message::Update(u)) => u,
        other => panic!("expected an UPDATE, got {other:?}"),
    }
}

/// Decodes and validates an UPDATE built from its fields.
pub fn verdict(withdrawn: &[u8], attrs: &[u8], nlri: &[u8], ctx: &DecodeContext) -> UpdateVerdict {
    let update = decode_update(&update_body(withdrawn, attrs, nlri), ctx);
    validate_update(&update, ctx)
}

pub fn encode(msg: &Message, ctx: &EncodeContext) -> Vec<u8> {
    msg.to_bytes(ctx).expect("encode").to_vec()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
