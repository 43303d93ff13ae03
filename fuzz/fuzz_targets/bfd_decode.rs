//! Arbitrary bytes through the BFD control and echo packet decoders: neither
//! may panic, and whatever decodes must re-encode to the bytes it was read
//! from (the Length field aside) and decode again to the same value.
#![no_main]

use bfd::packet::{ControlPacket, EchoPacket, MAX_PACKET_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // `parse` keeps an authentication section; `decode` refuses it.
    if let Ok(packet) = ControlPacket::parse(data) {
        let mut buf = [0u8; MAX_PACKET_LEN];
        let len = packet.encode(&mut buf).expect("a parsed packet fits");
        assert_eq!(usize::from(buf[3]), len);
        assert!(len <= usize::from(data[3]));
        assert_eq!(buf[..3], data[..3]);
        assert_eq!(buf[4..len], data[4..len]);
        assert_eq!(ControlPacket::parse(&buf[..len]), Ok(packet));
        assert_eq!(ControlPacket::decode(data).is_ok(), packet.auth.is_none());
        assert_eq!(packet.check().is_ok(), packet.auth.is_none());
    } else {
        assert!(ControlPacket::decode(data).is_err());
    }
    if let Ok(echo) = EchoPacket::decode(data) {
        assert_eq!(echo.to_bytes()[..], data[..EchoPacket::LEN]);
    }
});
