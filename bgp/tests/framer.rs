//! Framing: partial input, several messages per read, and every header
//! error, detected as soon as the header is there.

mod common;

use bgp::wire::{BytesMut, Message, MessageType, Notification, frame, read_message};
use common::{ebgp4, message};

const MAX: usize = 4096;

fn keepalive() -> Vec<u8> {
    message(4, &[])
}

#[test]
fn empty_input_needs_more() {
    let mut buf = BytesMut::new();
    assert_eq!(frame(&mut buf, MAX), Ok(None));
}

#[test]
fn partial_header_needs_more_and_consumes_nothing() {
    let full = keepalive();
    for cut in 1..19 {
        let mut buf = BytesMut::from(&full[..cut]);
        assert_eq!(frame(&mut buf, MAX), Ok(None), "cut at {cut}");
        assert_eq!(buf.len(), cut);
    }
}

#[test]
fn partial_body_needs_more_and_consumes_nothing() {
    let full = message(3, &[6, 2, 3, b'b', b'y', b'e']);
    for cut in 19..full.len() {
        let mut buf = BytesMut::from(&full[..cut]);
        assert_eq!(frame(&mut buf, MAX), Ok(None), "cut at {cut}");
        assert_eq!(buf.len(), cut);
    }
    // Then the rest arrives.
    let mut buf = BytesMut::from(&full[..20]);
    buf.extend_from_slice(&full[20..]);
    let f = frame(&mut buf, MAX).unwrap().unwrap();
    assert_eq!(f.message_type(), MessageType::Notification);
    assert_eq!(f.bytes().as_ref(), &full[..]);
    assert_eq!(f.body().as_ref(), &full[19..]);
    assert!(buf.is_empty());
}

#[test]
fn two_messages_in_one_buffer_and_a_partial_third() {
    let mut input = keepalive();
    input.extend(message(5, &[0, 1, 0, 1]));
    input.extend(&keepalive()[..7]);
    let mut buf = BytesMut::from(&input[..]);
    assert_eq!(
        read_message(&mut buf, &ebgp4()),
        Ok(Some(Message::Keepalive))
    );
    assert!(matches!(
        read_message(&mut buf, &ebgp4()),
        Ok(Some(Message::RouteRefresh(_)))
    ));
    assert_eq!(read_message(&mut buf, &ebgp4()), Ok(None));
    assert_eq!(buf.len(), 7);
}

fn header(length: u16, msg_type: u8) -> Vec<u8> {
    let mut h = vec![0xff; 16];
    h.extend_from_slice(&length.to_be_bytes());
    h.push(msg_type);
    h
}

#[test]
fn over_length_fails_on_the_header_alone() {
    let mut buf = BytesMut::from(&header(4097, 2)[..]);
    let err = frame(&mut buf, MAX).unwrap_err();
    assert_eq!(err, Notification::BadMessageLength { length: 4097 });
    assert_eq!(err.data().as_ref(), &[0x10, 0x01]);
    assert_eq!(buf.len(), 19, "nothing consumed on error");
    // Allowed once extended messages are negotiated: wait for the body.
    assert_eq!(frame(&mut buf, 65535), Ok(None));
}

#[test]
fn under_length() {
    for length in [0u16, 1, 18] {
        let mut buf = BytesMut::from(&header(length, 4)[..]);
        let err = frame(&mut buf, MAX).unwrap_err();
        assert_eq!(err, Notification::BadMessageLength { length });
        assert_eq!(err.data().as_ref(), &length.to_be_bytes());
    }
}

#[test]
fn bad_marker() {
    let mut m = keepalive();
    m[5] = 0xfe;
    let err = frame(&mut BytesMut::from(&m[..]), MAX).unwrap_err();
    assert_eq!(err, Notification::ConnectionNotSynchronized);
    assert!(err.data().is_empty());
    // Detected before the header is complete.
    assert_eq!(
        frame(&mut BytesMut::from(&m[..6]), MAX),
        Err(Notification::ConnectionNotSynchronized)
    );
    assert_eq!(frame(&mut BytesMut::from(&m[..5]), MAX), Ok(None));
}

#[test]
fn bad_type() {
    for t in [0u8, 6, 255] {
        let err = frame(&mut BytesMut::from(&header(19, t)[..]), MAX).unwrap_err();
        assert_eq!(err, Notification::BadMessageType { message_type: t });
        assert_eq!(err.data().as_ref(), &[t]);
    }
}

#[test]
fn per_type_minimum_lengths() {
    for (t, min) in [(1u8, 29u16), (2, 23), (3, 21), (5, 23)] {
        let err = frame(&mut BytesMut::from(&header(min - 1, t)[..]), MAX).unwrap_err();
        assert_eq!(
            err,
            Notification::BadMessageLength { length: min - 1 },
            "type {t}"
        );
        assert_eq!(
            frame(&mut BytesMut::from(&header(min, t)[..]), MAX),
            Ok(None),
            "type {t}"
        );
    }
}

#[test]
fn keepalive_must_be_exactly_19() {
    let err = frame(&mut BytesMut::from(&header(20, 4)[..]), MAX).unwrap_err();
    assert_eq!(err, Notification::BadMessageLength { length: 20 });
}

#[test]
fn open_never_exceeds_4096_even_with_extended_messages() {
    let err = frame(&mut BytesMut::from(&header(4097, 1)[..]), 65535).unwrap_err();
    assert_eq!(err, Notification::BadMessageLength { length: 4097 });
}

#[test]
fn framing_does_not_copy() {
    let input = keepalive();
    let mut buf = BytesMut::with_capacity(1024);
    buf.extend_from_slice(&input);
    let before = buf.as_ptr();
    let f = frame(&mut buf, MAX).unwrap().unwrap();
    assert_eq!(
        f.bytes().as_ptr(),
        before,
        "the frame shares the read buffer"
    );
}
