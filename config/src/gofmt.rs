//! Go's formatting verbs as MetalLB's messages use them (`%q` of strings and
//! of integers), so that our error texts are byte-for-byte MetalLB's.

use std::fmt::Write;

/// Go's `strconv.Quote` (what `%q` prints for a string).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        push_escaped(&mut out, c, '"');
    }
    out.push('"');
    out
}

/// Go's `strconv.QuoteRune` (what `%q` prints for an integer: a character
/// literal, e.g. `'!'` for 33). MetalLB prints some numbers with `%q`.
pub fn quote_rune(v: i64) -> String {
    let c = u32::try_from(v)
        .ok()
        .and_then(char::from_u32)
        .unwrap_or('\u{fffd}');
    let mut out = String::from("'");
    push_escaped(&mut out, c, '\'');
    out.push('\'');
    out
}

fn push_escaped(out: &mut String, c: char, quote: char) {
    match c {
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{b}' => out.push_str("\\v"),
        '\\' => out.push_str("\\\\"),
        c if c == quote => {
            out.push('\\');
            out.push(c);
        }
        c if is_go_printable(c) => out.push(c),
        c if (c as u32) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if (c as u32) < 0x10000 => {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\U{:08x}", c as u32);
        }
    }
}

/// Approximation of Go's `strconv.IsPrint`: letters, marks, numbers,
/// punctuation, symbols and the ASCII space.
fn is_go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    // Unassigned, private-use and format characters are escaped by Go.
    !matches!(c as u32, 0xad | 0x600..=0x605 | 0x200b..=0x200f | 0x2028..=0x202e | 0x2060..=0x206f | 0xfeff | 0xfff9..=0xfffb | 0xe000..=0xf8ff | 0xfffe | 0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_like_go() {
        assert_eq!(quote("a"), "\"a\"");
        assert_eq!(quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
        assert_eq!(quote("\u{1}"), "\"\\x01\"");
        assert_eq!(quote("é"), "\"é\"");
    }

    #[test]
    fn quotes_runes_like_go() {
        assert_eq!(quote_rune(33), "'!'");
        assert_eq!(quote_rune(39), "'\\''");
        assert_eq!(quote_rune(129), "'\\u0081'");
        assert_eq!(quote_rune(200), "'È'");
    }
}

/// Go's `net.IP.String()`: dotted quad for IPv4 and for IPv4-mapped IPv6
/// addresses, RFC 5952 text for the rest (Rust prints a mapped address as
/// `::ffff:a.b.c.d`).
pub fn ip(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6.to_string(),
        },
        std::net::IpAddr::V4(v4) => v4.to_string(),
    }
}

#[cfg(test)]
mod ip_tests {
    #[test]
    fn ips_print_as_go_prints_them() {
        let p = |s: &str| super::ip(s.parse().unwrap());
        assert_eq!(p("192.0.2.1"), "192.0.2.1");
        assert_eq!(p("::ffff:192.0.2.1"), "192.0.2.1");
        assert_eq!(p("2001:db8::1"), "2001:db8::1");
    }
}
