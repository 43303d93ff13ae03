//! Vectors written by hand from the RFC 5880 §4 field layout, one test per
//! reception check of §6.8.6, and property tests.

use proptest::prelude::*;

use super::*;

/// FRR's defaults in a Down packet: version 1, no diagnostic, state Down,
/// no flags, Detect Mult 3, length 24, My Discriminator 0x4a3b2c1d, Your
/// Discriminator 0, 300000 µs TX and RX, 50000 µs echo RX.
const FRR_DOWN: [u8; 24] = [
    0x20, // version 1 (001), diag 0 (00000)
    0x40, // state Down (01), P F C A D M = 0
    0x03, // detect mult
    0x18, // length 24
    0x4a, 0x3b, 0x2c, 0x1d, // my discriminator
    0x00, 0x00, 0x00, 0x00, // your discriminator
    0x00, 0x04, 0x93, 0xe0, // desired min TX 300000
    0x00, 0x04, 0x93, 0xe0, // required min RX 300000
    0x00, 0x00, 0xc3, 0x50, // required min echo RX 50000
];

fn frr_down() -> ControlPacket {
    ControlPacket {
        diag: Diagnostic::None,
        state: State::Down,
        poll: false,
        final_: false,
        control_plane_independent: false,
        demand: false,
        multipoint: false,
        detect_mult: 3,
        my_discr: 0x4a3b_2c1d,
        your_discr: 0,
        desired_min_tx_us: 300_000,
        required_min_rx_us: 300_000,
        required_min_echo_rx_us: 50_000,
        auth: None,
    }
}

/// An Up packet with Poll, 50 ms x 5, no echo.
const UP_POLL: [u8; 24] = [
    0x20, // version 1, diag 0
    0xe0, // state Up (11), P (1), F C A D M = 0
    0x05, 0x18, //
    0x00, 0x00, 0x00, 0x07, // my discriminator 7
    0xde, 0xad, 0xbe, 0xef, // your discriminator
    0x00, 0x00, 0xc3, 0x50, // 50000
    0x00, 0x00, 0xc3, 0x50, // 50000
    0x00, 0x00, 0x00, 0x00, //
];

fn up_poll() -> ControlPacket {
    ControlPacket {
        state: State::Up,
        poll: true,
        detect_mult: 5,
        my_discr: 7,
        your_discr: 0xdead_beef,
        desired_min_tx_us: 50_000,
        required_min_rx_us: 50_000,
        required_min_echo_rx_us: 0,
        ..frr_down()
    }
}

/// AdminDown with diagnostic 7 and the C and D bits; the remote known.
const ADMIN_DOWN_C_D: [u8; 24] = [
    0x27, // version 1, diag 7 (00111)
    0x0a, // state AdminDown (00), C (0x08), D (0x02)
    0x01, 0x18, //
    0x00, 0x00, 0x00, 0x01, //
    0x00, 0x00, 0x00, 0x02, //
    0x00, 0x0f, 0x42, 0x40, // 1000000
    0x00, 0x00, 0x00, 0x00, // 0: send me nothing
    0x00, 0x00, 0x00, 0x00,
];

fn admin_down_c_d() -> ControlPacket {
    ControlPacket {
        diag: Diagnostic::AdministrativelyDown,
        state: State::AdminDown,
        control_plane_independent: true,
        demand: true,
        detect_mult: 1,
        my_discr: 1,
        your_discr: 2,
        desired_min_tx_us: 1_000_000,
        required_min_rx_us: 0,
        required_min_echo_rx_us: 0,
        ..frr_down()
    }
}

/// Init with Final and diagnostic 1.
const INIT_FINAL: [u8; 24] = [
    0x21, // version 1, diag 1
    0x90, // state Init (10), F (0x10)
    0xff, 0x18, //
    0xff, 0xff, 0xff, 0xff, //
    0x00, 0x00, 0x00, 0x01, //
    0xff, 0xff, 0xff, 0xff, //
    0x00, 0x00, 0x27, 0x10, // 10000
    0x00, 0x00, 0x27, 0x10,
];

fn init_final() -> ControlPacket {
    ControlPacket {
        diag: Diagnostic::ControlDetectionTimeExpired,
        state: State::Init,
        final_: true,
        detect_mult: 255,
        my_discr: u32::MAX,
        your_discr: 1,
        desired_min_tx_us: u32::MAX,
        required_min_rx_us: 10_000,
        required_min_echo_rx_us: 10_000,
        ..frr_down()
    }
}

fn with(bytes: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = bytes.to_vec();
    f(&mut v);
    v
}

#[test]
fn vectors_decode() {
    assert_eq!(ControlPacket::decode(&FRR_DOWN), Ok(frr_down()));
    assert_eq!(ControlPacket::decode(&UP_POLL), Ok(up_poll()));
    assert_eq!(ControlPacket::decode(&ADMIN_DOWN_C_D), Ok(admin_down_c_d()));
    assert_eq!(ControlPacket::decode(&INIT_FINAL), Ok(init_final()));
}

#[test]
fn vectors_encode() {
    for (bytes, packet) in [
        (FRR_DOWN, frr_down()),
        (UP_POLL, up_poll()),
        (ADMIN_DOWN_C_D, admin_down_c_d()),
        (INIT_FINAL, init_final()),
    ] {
        let mut buf = [0u8; 64];
        assert_eq!(packet.encode(&mut buf), Ok(24));
        assert_eq!(buf[..24], bytes);
        assert_eq!(packet.to_vec(), bytes.to_vec());
        assert_eq!(packet.encoded_len(), 24);
    }
}

#[test]
fn encode_needs_room() {
    let mut buf = [0u8; 23];
    assert_eq!(
        frr_down().encode(&mut buf),
        Err(BufferTooSmall {
            needed: 24,
            available: 23
        })
    );
}

#[test]
fn diagnostic_is_five_bits() {
    // Diag 17 (10001): a 4-bit mask would read 1.
    let bytes = with(&FRR_DOWN, |b| b[0] = 0x20 | 17);
    assert_eq!(
        ControlPacket::decode(&bytes).unwrap().diag,
        Diagnostic::Reserved(17)
    );
    let bytes = with(&FRR_DOWN, |b| b[0] = 0x3f);
    let packet = ControlPacket::decode(&bytes).unwrap();
    assert_eq!(packet.diag, Diagnostic::Reserved(31));
    assert_eq!(packet.to_vec(), bytes);
    for code in 0..32u8 {
        assert_eq!(Diagnostic::from_code(code).code(), code);
    }
    assert_eq!(
        Diagnostic::from_code(8),
        Diagnostic::ReverseConcatenatedPathDown
    );
    assert_eq!(
        Diagnostic::EchoFunctionFailed.to_string(),
        "Echo Function Failed (2)"
    );
}

#[test]
fn state_bits() {
    for state in State::ALL {
        assert_eq!(State::from_bits(state.bits()), state);
    }
    assert_eq!(State::AdminDown.to_string(), "AdminDown");
}

#[test]
fn trailing_bytes_beyond_length_are_ignored() {
    let mut bytes = FRR_DOWN.to_vec();
    bytes.extend_from_slice(&[0xaa; 10]);
    assert_eq!(ControlPacket::decode(&bytes), Ok(frr_down()));
    // A Length above 24 without A is allowed (the RFC sets only a minimum).
    let bytes = with(&bytes, |b| b[3] = 30);
    assert_eq!(ControlPacket::decode(&bytes), Ok(frr_down()));
}

// ---- one test per reception check (RFC 5880 §6.8.6) ----

#[test]
fn check_too_short_to_read() {
    assert_eq!(
        ControlPacket::decode(&[]),
        Err(PacketError::Truncated { len: 0 })
    );
    assert_eq!(
        ControlPacket::decode(&FRR_DOWN[..3]),
        Err(PacketError::Truncated { len: 3 })
    );
}

#[test]
fn check_version_is_1() {
    for version in [0u8, 2, 3, 7] {
        let bytes = with(&FRR_DOWN, |b| b[0] = version << 5);
        assert_eq!(
            ControlPacket::decode(&bytes),
            Err(PacketError::BadVersion(version))
        );
    }
    // Checked first: even a one-byte packet reports its version.
    assert_eq!(
        ControlPacket::decode(&[0x40]),
        Err(PacketError::BadVersion(2))
    );
}

#[test]
fn check_length_minimum_without_auth() {
    for length in [0u8, 1, 23] {
        let bytes = with(&FRR_DOWN, |b| b[3] = length);
        assert_eq!(
            ControlPacket::decode(&bytes),
            Err(PacketError::LengthTooShort { length, min: 24 })
        );
    }
}

#[test]
fn check_length_minimum_with_auth() {
    let mut bytes = with(&FRR_DOWN, |b| {
        b[1] |= 0x04;
        b[3] = 25;
    });
    bytes.extend_from_slice(&[1, 4, 0, b'x']);
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::LengthTooShort {
            length: 25,
            min: 26
        })
    );
}

#[test]
fn check_length_not_beyond_payload() {
    assert_eq!(
        ControlPacket::decode(&FRR_DOWN[..23]),
        Err(PacketError::LengthExceedsPayload {
            length: 24,
            payload: 23
        })
    );
    let bytes = with(&FRR_DOWN, |b| b[3] = 28);
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::LengthExceedsPayload {
            length: 28,
            payload: 24
        })
    );
}

#[test]
fn check_detect_mult_non_zero() {
    let bytes = with(&FRR_DOWN, |b| b[2] = 0);
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::ZeroDetectMult)
    );
}

#[test]
fn check_multipoint_clear() {
    let bytes = with(&FRR_DOWN, |b| b[1] |= 0x01);
    assert_eq!(ControlPacket::decode(&bytes), Err(PacketError::Multipoint));
    // The encoder writes M when asked, so the check is reachable from a struct.
    let packet = ControlPacket {
        multipoint: true,
        ..frr_down()
    };
    assert_eq!(packet.to_vec(), bytes);
    assert_eq!(packet.check(), Err(PacketError::Multipoint));
}

#[test]
fn check_my_discriminator_non_zero() {
    let bytes = with(&FRR_DOWN, |b| b[4..8].fill(0));
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::ZeroMyDiscriminator)
    );
}

#[test]
fn check_your_discriminator_zero_only_in_down_or_admin_down() {
    for (state, ok) in [
        (State::AdminDown, true),
        (State::Down, true),
        (State::Init, false),
        (State::Up, false),
    ] {
        let bytes = with(&FRR_DOWN, |b| b[1] = state.bits() << 6);
        let result = ControlPacket::decode(&bytes);
        if ok {
            assert_eq!(result.map(|p| p.state), Ok(state));
        } else {
            assert_eq!(result, Err(PacketError::ZeroYourDiscriminator { state }));
        }
    }
}

#[test]
fn check_not_both_poll_and_final() {
    let bytes = with(&UP_POLL, |b| b[1] |= 0x10);
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::PollAndFinal)
    );
}

#[test]
fn checks_run_in_rfc_order() {
    // Zero mult, M set, zero discriminators, P+F: the mult is reported.
    let bytes = with(&UP_POLL, |b| {
        b[1] |= 0x11;
        b[2] = 0;
        b[4..12].fill(0);
    });
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::ZeroDetectMult)
    );
    let bytes = with(&bytes, |b| b[2] = 3);
    assert_eq!(ControlPacket::decode(&bytes), Err(PacketError::Multipoint));
    let bytes = with(&bytes, |b| b[1] &= !0x01);
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::ZeroMyDiscriminator)
    );
    let bytes = with(&bytes, |b| b[7] = 1);
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::ZeroYourDiscriminator { state: State::Up })
    );
    let bytes = with(&bytes, |b| b[11] = 1);
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::PollAndFinal)
    );
}

// ---- authentication: parsed structurally, refused by decode ----

fn with_auth(section: &[u8]) -> Vec<u8> {
    let mut bytes = FRR_DOWN.to_vec();
    bytes[1] |= 0x04;
    bytes[3] = (24 + section.len()) as u8;
    bytes.extend_from_slice(section);
    bytes
}

#[test]
fn simple_password_is_parsed_then_refused() {
    // Type 1, len 3 + 6, key ID 9, "secret".
    let bytes = with_auth(b"\x01\x09\x09secret");
    let packet = ControlPacket::parse(&bytes).unwrap();
    let auth = packet.auth.unwrap();
    assert_eq!(auth.auth_type(), AuthType::SimplePassword);
    assert_eq!(auth.len(), 9);
    assert_eq!(auth.key_id(), 9);
    assert_eq!(auth.sequence(), None);
    assert_eq!(auth.data(), b"secret");
    assert!(
        !format!("{auth:?}").contains("secret"),
        "Debug must not print the password"
    );
    assert_eq!(packet.to_vec(), bytes);
    assert_eq!(packet.encoded_len(), 33);
    assert_eq!(
        ControlPacket {
            auth: None,
            ..packet
        },
        frr_down()
    );
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::Authenticated {
            auth_type: AuthType::SimplePassword
        })
    );
    assert_eq!(
        packet.check(),
        Err(PacketError::Authenticated {
            auth_type: AuthType::SimplePassword
        })
    );
}

#[test]
fn keyed_sha1_is_parsed_then_refused() {
    let mut section = vec![4, 28, 2, 0, 0, 0, 1, 0];
    section.extend_from_slice(&[0x5a; 20]);
    let bytes = with_auth(&section);
    assert_eq!(bytes.len(), MAX_PACKET_LEN);
    let packet = ControlPacket::parse(&bytes).unwrap();
    let auth = packet.auth.unwrap();
    assert_eq!(auth.auth_type(), AuthType::KeyedSha1);
    assert_eq!(auth.sequence(), Some(256));
    assert_eq!(auth.data(), &[0x5a; 20]);
    assert_eq!(packet.to_vec(), bytes);
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::Authenticated {
            auth_type: AuthType::KeyedSha1
        })
    );
}

#[test]
fn keyed_md5_is_parsed() {
    for code in [2u8, 3] {
        let mut section = vec![code, 24, 1, 0, 0, 0, 0, 9];
        section.extend_from_slice(&[0x11; 16]);
        let auth = ControlPacket::parse(&with_auth(&section))
            .unwrap()
            .auth
            .unwrap();
        assert_eq!(auth.auth_type().code(), code);
        assert_eq!(auth.sequence(), Some(9));
        assert_eq!(auth.data().len(), 16);
    }
}

#[test]
fn unknown_auth_type_is_malformed() {
    for code in [0u8, 6, 255] {
        let bytes = with_auth(&[code, 4, 0, 0]);
        assert_eq!(
            ControlPacket::decode(&bytes),
            Err(PacketError::UnknownAuthType(code))
        );
    }
}

#[test]
fn bad_auth_length_is_malformed() {
    for (code, len) in [(1u8, 3u8), (1, 20), (2, 28), (3, 20), (4, 24), (5, 29)] {
        let mut section = vec![code, len];
        section.resize(usize::from(len).max(2), 0);
        let auth_type = AuthType::from_code(code).unwrap();
        assert_eq!(
            ControlPacket::decode(&with_auth(&section)),
            Err(PacketError::BadAuthLength {
                auth_type,
                auth_len: len
            })
        );
    }
}

#[test]
fn auth_section_beyond_length_is_malformed() {
    // Auth Len 9 but the packet's Length leaves 4 bytes.
    let mut bytes = with_auth(b"\x01\x09\x09secret");
    bytes[3] = 28;
    assert_eq!(
        ControlPacket::decode(&bytes),
        Err(PacketError::AuthSectionTruncated {
            auth_len: 9,
            available: 4
        })
    );
}

#[test]
fn error_labels_are_distinct() {
    let errors = [
        PacketError::Truncated { len: 0 },
        PacketError::BadVersion(0),
        PacketError::LengthTooShort { length: 0, min: 24 },
        PacketError::LengthExceedsPayload {
            length: 24,
            payload: 0,
        },
        PacketError::ZeroDetectMult,
        PacketError::Multipoint,
        PacketError::ZeroMyDiscriminator,
        PacketError::ZeroYourDiscriminator { state: State::Up },
        PacketError::PollAndFinal,
        PacketError::UnknownAuthType(0),
        PacketError::BadAuthLength {
            auth_type: AuthType::KeyedMd5,
            auth_len: 0,
        },
        PacketError::AuthSectionTruncated {
            auth_len: 0,
            available: 0,
        },
        PacketError::Authenticated {
            auth_type: AuthType::KeyedMd5,
        },
    ];
    let labels: std::collections::BTreeSet<_> = errors.iter().map(PacketError::label).collect();
    assert_eq!(labels.len(), errors.len());
}

// ---- echo ----

const ECHO: [u8; 24] = [
    b'M', b'L', b'B', b'E', 1, 0, 0, 0, //
    0x4a, 0x3b, 0x2c, 0x1d, // discriminator
    0x00, 0x00, 0x01, 0x00, // sequence 256
    0x00, 0x00, 0x00, 0x00, 0x3b, 0x9a, 0xca, 0x00, // 1 s
];

#[test]
fn echo_vector_both_ways() {
    let echo = EchoPacket {
        discriminator: 0x4a3b_2c1d,
        sequence: 256,
        tx_time_ns: 1_000_000_000,
    };
    assert_eq!(echo.to_bytes(), ECHO);
    assert_eq!(EchoPacket::decode(&ECHO), Ok(echo));
    let mut long = ECHO.to_vec();
    long.push(0);
    assert_eq!(EchoPacket::decode(&long), Ok(echo));
    assert_eq!(
        echo.encode(&mut [0u8; 10]),
        Err(BufferTooSmall {
            needed: 24,
            available: 10
        })
    );
}

#[test]
fn echo_errors() {
    assert_eq!(
        EchoPacket::decode(&ECHO[..23]),
        Err(EchoError::Truncated { len: 23 })
    );
    assert_eq!(
        EchoPacket::decode(&with(&ECHO, |b| b[0] = b'X')),
        Err(EchoError::BadMagic)
    );
    assert_eq!(
        EchoPacket::decode(&with(&ECHO, |b| b[4] = 2)),
        Err(EchoError::BadVersion(2))
    );
    assert_eq!(
        EchoPacket::decode(&with(&ECHO, |b| b[8..12].fill(0))),
        Err(EchoError::ZeroDiscriminator)
    );
    // Found by the fuzzer: reserved bytes must be zero, so that what decodes
    // re-encodes byte for byte.
    assert_eq!(
        EchoPacket::decode(&with(&ECHO, |b| b[5] = 0x10)),
        Err(EchoError::ReservedNotZero)
    );
    assert_eq!(
        EchoPacket::decode(&with(&ECHO, |b| b[7] = 0x48)),
        Err(EchoError::ReservedNotZero)
    );
    // A control packet is not an echo packet.
    assert_eq!(EchoPacket::decode(&FRR_DOWN), Err(EchoError::BadMagic));
}

#[test]
fn serde_round_trip() {
    let packet = ControlPacket::parse(&with_auth(b"\x01\x05\x01pw")).unwrap();
    let json = serde_json::to_string(&packet).unwrap();
    assert_eq!(
        serde_json::from_str::<ControlPacket>(&json).unwrap(),
        packet
    );
}

// ---- properties ----

fn valid_packet() -> impl Strategy<Value = ControlPacket> {
    (
        (
            0u8..32,
            0u8..4,
            any::<(bool, bool, bool, bool)>(),
            1u8..=255,
        ),
        (
            1u32..,
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        ),
    )
        .prop_map(
            |((diag, state, (poll, fin, c, d), mult), (my, your, tx, rx, echo))| {
                let state = State::from_bits(state);
                let your = if matches!(state, State::Init | State::Up) {
                    your.max(1)
                } else {
                    your
                };
                ControlPacket {
                    diag: Diagnostic::from_code(diag),
                    state,
                    poll,
                    final_: fin && !poll,
                    control_plane_independent: c,
                    demand: d,
                    multipoint: false,
                    detect_mult: mult,
                    my_discr: my,
                    your_discr: your,
                    desired_min_tx_us: tx,
                    required_min_rx_us: rx,
                    required_min_echo_rx_us: echo,
                    auth: None,
                }
            },
        )
}

fn auth_section() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (any::<u8>(), proptest::collection::vec(any::<u8>(), 1..=16)).prop_map(|(key, pw)| {
            let mut s = vec![1, 3 + pw.len() as u8, key];
            s.extend(pw);
            s
        }),
        (2u8..=3, proptest::collection::vec(any::<u8>(), 22)).prop_map(|(t, rest)| {
            let mut s = vec![t, 24];
            s.extend(rest);
            s
        }),
        (4u8..=5, proptest::collection::vec(any::<u8>(), 26)).prop_map(|(t, rest)| {
            let mut s = vec![t, 28];
            s.extend(rest);
            s
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        // Oracle: what decodes re-encodes to the bytes it was read from
        // (but for a Length that covered bytes beyond the fields).
        if let Ok(packet) = ControlPacket::decode(&bytes) {
            let encoded = packet.to_vec();
            prop_assert_eq!(usize::from(encoded[3]), encoded.len());
            prop_assert_eq!(&encoded[..3], &bytes[..3]);
            prop_assert_eq!(&encoded[4..], &bytes[4..encoded.len()]);
        }
        let _ = ControlPacket::parse(&bytes);
        if let Ok(echo) = EchoPacket::decode(&bytes) {
            let encoded = echo.to_bytes();
            prop_assert_eq!(&encoded[..], &bytes[..encoded.len()]);
        }
    }

    #[test]
    fn decode_never_panics_near_valid(
        mut bytes in proptest::collection::vec(any::<u8>(), 24..60),
        length in 0u8..64,
        flags in any::<u8>(),
    ) {
        // Mostly version 1 with a plausible Length, to reach the deeper checks.
        bytes[0] = 0x20 | (bytes[0] & 0x1f);
        bytes[1] = flags;
        bytes[3] = length;
        if let Ok(packet) = ControlPacket::parse(&bytes) {
            // Whatever parses re-encodes to what it was read from, but for
            // a Length that covered bytes beyond the fields.
            let encoded = packet.to_vec();
            prop_assert!(encoded.len() <= usize::from(length));
            prop_assert_eq!(usize::from(encoded[3]), encoded.len());
            prop_assert_eq!(&encoded[..3], &bytes[..3]);
            prop_assert_eq!(&encoded[4..], &bytes[4..encoded.len()]);
            prop_assert_eq!(ControlPacket::parse(&encoded), Ok(packet));
            prop_assert_eq!(packet.check().is_ok(), ControlPacket::decode(&bytes).is_ok());
        }
    }

    #[test]
    fn valid_packets_round_trip(packet in valid_packet()) {
        let bytes = packet.to_vec();
        prop_assert_eq!(bytes.len(), HEADER_LEN);
        prop_assert_eq!(ControlPacket::decode(&bytes), Ok(packet));
        prop_assert_eq!(packet.check(), Ok(()));
    }

    #[test]
    fn authenticated_packets_round_trip_through_parse(packet in valid_packet(), section in auth_section()) {
        let auth = AuthSection::parse(&section).unwrap();
        let packet = ControlPacket { auth: Some(auth), ..packet };
        let bytes = packet.to_vec();
        prop_assert_eq!(bytes.len(), HEADER_LEN + section.len());
        prop_assert_eq!(&bytes[HEADER_LEN..], &section[..]);
        prop_assert_eq!(ControlPacket::parse(&bytes), Ok(packet));
        let refused = matches!(ControlPacket::decode(&bytes), Err(PacketError::Authenticated { .. }));
        prop_assert!(refused);
    }

    #[test]
    fn echo_round_trip(discriminator in 1u32.., sequence in any::<u32>(), tx_time_ns in any::<u64>()) {
        let echo = EchoPacket { discriminator, sequence, tx_time_ns };
        prop_assert_eq!(EchoPacket::decode(&echo.to_bytes()), Ok(echo));
    }
}
