//! Arbitrary bytes through the BGP framer and decoders in every decoding
//! context, then RFC 7606 validation and re-encoding: nothing may panic,
//! and no decoded message may encode to more bytes than it was read from.
#![no_main]

use bgp::wire::{
    BytesMut, DecodeContext, EncodeContext, Message, Notification, frame, read_message, validate_update,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The framer alone consumes nothing when it fails.
    let mut buf = BytesMut::from(data);
    if frame(&mut buf, 65535).is_err() {
        assert_eq!(buf.len(), data.len());
    }

    for four_octet_as in [false, true] {
        for extended_message in [false, true] {
            for ibgp in [false, true] {
                let ctx = DecodeContext {
                    four_octet_as,
                    extended_message,
                    ibgp,
                    ..DecodeContext::default()
                };
                let ectx = EncodeContext {
                    four_octet_as,
                    extended_message,
                    ..EncodeContext::default()
                };
                let mut buf = BytesMut::from(data);
                loop {
                    let before = buf.len();
                    match read_message(&mut buf, &ctx) {
                        Ok(Some(msg)) => {
                            let consumed = before - buf.len();
                            if let Ok(bytes) = msg.to_bytes(&ectx) {
                                assert!(bytes.len() <= consumed, "{msg:?}");
                            }
                            match &msg {
                                Message::Update(u) => {
                                    let _ = validate_update(u, &ctx);
                                    let _ = u.effective_as_path();
                                }
                                Message::Notification(n) => {
                                    let _ = n.to_string();
                                }
                                _ => {}
                            }
                        }
                        Ok(None) => break,
                        Err(n) => {
                            let _ = n.to_string();
                            break;
                        }
                    }
                }
            }
        }
    }

    if let [code, subcode, rest @ ..] = data {
        let n = Notification::from_wire(*code, *subcode, rest);
        assert_eq!((n.code(), n.subcode()), (*code, *subcode));
        assert_eq!(n.data().as_ref(), rest);
        let _ = n.to_string();
    }
});
