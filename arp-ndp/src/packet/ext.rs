//! IPv6 extension headers in front of a neighbour discovery message
//! (RFC 8200 section 4).
//!
//! We read solicitations off `AF_PACKET` sockets, so nothing has walked
//! the IPv6 extension headers for us (an `IPPROTO_ICMPV6` raw socket would
//! have the kernel do it). ND messages rarely carry any, but nothing
//! forbids a Hop-by-Hop or Destination Options header in front of one, and
//! the Linux kernel answers such a solicitation; so do we. The walk is
//! bounded and allocation-free:
//!
//! - Hop-by-Hop Options (0), only directly after the fixed header (RFC
//!   8200 4.1; Linux drops it anywhere else too);
//! - Destination Options (60);
//! - Routing (43) only with Segments Left 0: this node is then the final
//!   destination, and the fixed header's destination is the one the ICMPv6
//!   pseudo-header uses (RFC 8200 8.1). With segments left the packet is
//!   not for us yet;
//! - Fragment (44): dropped. RFC 6980 section 5: a node must silently
//!   ignore any ND message carrying a Fragment header (we do not
//!   reassemble either);
//! - at most [`MAX_EXTENSION_HEADERS`] headers, the most RFC 8200 4.1's
//!   order allows without a Fragment header (Hop-by-Hop, Destination
//!   Options, Routing, Destination Options);
//! - options in Hop-by-Hop and Destination Options headers are walked
//!   TLV by TLV and must fill the header exactly; an option we do not
//!   know whose type says "discard if unrecognised" (its two high bits not
//!   `00`, RFC 8200 4.2) drops the packet, as the kernel would.
//!
//! Anything else (ESP, AH, No Next Header, an upper-layer protocol) ends
//! the walk: the caller gets its protocol number and bytes, and for ND
//! anything but ICMPv6 is simply not a neighbour discovery message.

use super::DecodeError;

/// Hop-by-Hop Options header.
pub const IPPROTO_HOPOPTS: u8 = 0;
/// Routing header.
pub const IPPROTO_ROUTING: u8 = 43;
/// Fragment header.
pub const IPPROTO_FRAGMENT: u8 = 44;
/// Destination Options header.
pub const IPPROTO_DSTOPTS: u8 = 60;
/// Most extension headers walked in front of an ND message; one more is
/// [`DecodeError::TooManyExtensionHeaders`]. The socket filter of the
/// Linux edge unrolls its walk to the same depth.
pub const MAX_EXTENSION_HEADERS: usize = 4;

/// Pad1 option (a single zero byte, no length).
const OPT_PAD1: u8 = 0;
/// PadN option.
const OPT_PADN: u8 = 1;
/// The two high bits of an option type: what to do if unrecognised
/// (`00`: skip it; anything else: discard the packet).
const OPT_ACTION_MASK: u8 = 0xc0;

/// Whether `next_header` names an extension header we walk (the Fragment
/// header is recognised but never walked).
pub const fn is_walked_extension_header(next_header: u8) -> bool {
    matches!(
        next_header,
        IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS
    )
}

/// Walks the extension headers at the start of `payload` (the IPv6
/// payload, already trimmed to the payload length), starting from the
/// fixed header's `next_header`. Returns the upper-layer protocol number
/// and its bytes. Never panics, never allocates.
pub fn upper_layer(next_header: u8, payload: &[u8]) -> Result<(u8, &[u8]), DecodeError> {
    let mut next = next_header;
    let mut rest = payload;
    let mut walked = 0usize;
    loop {
        match next {
            IPPROTO_FRAGMENT => return Err(DecodeError::Fragmented),
            IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS => {}
            upper => return Ok((upper, rest)),
        }
        if walked == MAX_EXTENSION_HEADERS {
            return Err(DecodeError::TooManyExtensionHeaders(MAX_EXTENSION_HEADERS));
        }
        if next == IPPROTO_HOPOPTS && walked > 0 {
            return Err(DecodeError::HopByHopNotFirst);
        }
        // Every one of the three starts with next header and a length in
        // 8-octet units not counting the first 8 (RFC 8200 4.3, 4.4, 4.6).
        let Some(&units) = rest.get(1) else {
            return Err(DecodeError::Truncated {
                what: "IPv6 extension header",
                need: 8,
                got: rest.len(),
            });
        };
        let len = (usize::from(units) + 1) * 8;
        if rest.len() < len {
            return Err(DecodeError::Truncated {
                what: "IPv6 extension header",
                need: len,
                got: rest.len(),
            });
        }
        let (header, tail) = rest.split_at(len);
        match next {
            IPPROTO_ROUTING => {
                let segments_left = header[3];
                if segments_left != 0 {
                    return Err(DecodeError::RoutingSegmentsLeft(segments_left));
                }
            }
            _ => check_options(next, &header[2..])?,
        }
        next = header[0];
        rest = tail;
        walked += 1;
    }
}

/// Walks the TLV options of a Hop-by-Hop or Destination Options header
/// (`header` is its number, for errors): every option must fit, and an
/// unknown one must be of the skippable kind. We know only the padding
/// options; the others with action `00` (Router Alert, for one) are
/// skipped, as RFC 8200 4.2 says.
fn check_options(header: u8, mut opts: &[u8]) -> Result<(), DecodeError> {
    while let Some(&kind) = opts.first() {
        if kind == OPT_PAD1 {
            opts = &opts[1..];
            continue;
        }
        let Some(&data_len) = opts.get(1) else {
            return Err(DecodeError::Truncated {
                what: "IPv6 option",
                need: 2,
                got: opts.len(),
            });
        };
        let len = 2 + usize::from(data_len);
        if opts.len() < len {
            return Err(DecodeError::Truncated {
                what: "IPv6 option",
                need: len,
                got: opts.len(),
            });
        }
        if kind != OPT_PADN && kind & OPT_ACTION_MASK != 0 {
            return Err(DecodeError::UnrecognizedOption {
                header,
                option: kind,
            });
        }
        opts = &opts[len..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ICMP: &[u8] = &[135, 0, 0, 0];

    fn chain(headers: &[(u8, Vec<u8>)], upper: u8) -> (u8, Vec<u8>) {
        // headers: (type, body after the next-header byte); each one's
        // next header is the following one's type.
        let mut out = Vec::new();
        for (i, (_, body)) in headers.iter().enumerate() {
            let next = headers.get(i + 1).map_or(upper, |h| h.0);
            out.push(next);
            out.extend_from_slice(body);
        }
        out.extend_from_slice(ICMP);
        (headers.first().map_or(upper, |h| h.0), out)
    }

    /// Hdr Ext Len 0 (8 bytes) with a PadN filling the options.
    fn padn8() -> Vec<u8> {
        vec![0, 1, 4, 0, 0, 0, 0]
    }

    #[test]
    fn no_extension_headers() {
        assert_eq!(upper_layer(58, ICMP), Ok((58, ICMP)));
    }

    #[test]
    fn the_walk_follows_every_kind() {
        let routing = vec![0, 0, 0, 0, 0, 0, 0]; // type 0, segments left 0
        let (first, b) = chain(
            &[(0, padn8()), (60, padn8()), (43, routing), (60, padn8())],
            58,
        );
        assert_eq!(upper_layer(first, &b), Ok((58, ICMP)));
    }

    #[test]
    fn pad1_and_skippable_unknown_options() {
        // Next header, length 0, Pad1, Pad1, Router Alert (type 5, two
        // bytes of data): 2 + 1 + 1 + 4 = 8 bytes.
        let (first, b) = chain(&[(0, vec![0, 0, 0, 5, 2, 0, 0])], 58);
        assert_eq!(upper_layer(first, &b), Ok((58, ICMP)));
    }

    #[test]
    fn discard_kind_unknown_option() {
        // Type 0xc2 (jumbo payload) with 4 bytes of data.
        let (first, b) = chain(&[(0, vec![0, 0xc2, 4, 0, 0, 0, 0])], 58);
        assert_eq!(
            upper_layer(first, &b),
            Err(DecodeError::UnrecognizedOption {
                header: 0,
                option: 0xc2
            })
        );
        let (first, b) = chain(&[(60, vec![0, 0x40, 4, 0, 0, 0, 0])], 58);
        assert_eq!(
            upper_layer(first, &b),
            Err(DecodeError::UnrecognizedOption {
                header: 60,
                option: 0x40
            })
        );
    }

    #[test]
    fn option_overrunning_the_header() {
        let (first, b) = chain(&[(0, vec![0, 1, 5, 0, 0, 0, 0])], 58);
        assert!(matches!(
            upper_layer(first, &b),
            Err(DecodeError::Truncated {
                what: "IPv6 option",
                ..
            })
        ));
        // A lone option type byte at the end of the header.
        let (first, b) = chain(&[(0, vec![0, 1, 3, 0, 0, 0, 7])], 58);
        assert!(matches!(
            upper_layer(first, &b),
            Err(DecodeError::Truncated {
                what: "IPv6 option",
                need: 2,
                got: 1
            })
        ));
    }

    #[test]
    fn fragment_is_dropped_wherever_it_is() {
        let frag = vec![0, 0, 0, 0, 0, 0, 0];
        let (first, b) = chain(&[(44, frag.clone())], 58);
        assert_eq!(upper_layer(first, &b), Err(DecodeError::Fragmented));
        let (first, b) = chain(&[(0, padn8()), (44, frag)], 58);
        assert_eq!(upper_layer(first, &b), Err(DecodeError::Fragmented));
    }

    #[test]
    fn routing_with_segments_left() {
        let (first, b) = chain(&[(43, vec![0, 0, 2, 0, 0, 0, 0])], 58);
        assert_eq!(
            upper_layer(first, &b),
            Err(DecodeError::RoutingSegmentsLeft(2))
        );
    }

    #[test]
    fn hop_by_hop_only_first() {
        let (first, b) = chain(&[(60, padn8()), (0, padn8())], 58);
        assert_eq!(upper_layer(first, &b), Err(DecodeError::HopByHopNotFirst));
    }

    #[test]
    fn at_most_four_headers() {
        let four: Vec<(u8, Vec<u8>)> = (0..4).map(|_| (60, padn8())).collect();
        let (first, b) = chain(&four, 58);
        assert_eq!(upper_layer(first, &b), Ok((58, ICMP)));
        let five: Vec<(u8, Vec<u8>)> = (0..5).map(|_| (60, padn8())).collect();
        let (first, b) = chain(&five, 58);
        assert_eq!(
            upper_layer(first, &b),
            Err(DecodeError::TooManyExtensionHeaders(4))
        );
    }

    #[test]
    fn truncated_headers() {
        let (first, b) = chain(&[(0, padn8())], 58);
        for n in 0..8 {
            assert!(
                matches!(
                    upper_layer(first, &b[..n]),
                    Err(DecodeError::Truncated { .. })
                ),
                "length {n}"
            );
        }
        // Hdr Ext Len 1 (16 bytes) but only 12 present.
        let mut long = vec![58, 1, 1, 12];
        long.extend_from_slice(&[0; 8]);
        assert_eq!(
            upper_layer(0, &long),
            Err(DecodeError::Truncated {
                what: "IPv6 extension header",
                need: 16,
                got: 12
            })
        );
    }

    #[test]
    fn other_protocols_end_the_walk() {
        let (first, b) = chain(&[(0, padn8())], 17);
        assert_eq!(upper_layer(first, &b), Ok((17, ICMP)));
        // No Next Header, ESP: not walked.
        assert_eq!(upper_layer(59, ICMP), Ok((59, ICMP)));
        assert_eq!(upper_layer(50, ICMP), Ok((50, ICMP)));
    }
}
