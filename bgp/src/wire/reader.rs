//! A bounds-checked cursor over received bytes. Every read returns `None`
//! instead of panicking when the input is short; slices share the received
//! buffer (no copy, no allocation).

use bytes::{Buf, Bytes};

#[derive(Debug, Clone)]
pub(crate) struct Reader {
    buf: Bytes,
}

impl Reader {
    pub(crate) fn new(buf: Bytes) -> Self {
        Self { buf }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The unread bytes, without consuming them.
    pub(crate) fn peek(&self) -> &[u8] {
        &self.buf
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        let [b] = self.array::<1>()?;
        Some(b)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array::<2>().map(u16::from_be_bytes)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array::<4>().map(u32::from_be_bytes)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let bytes: [u8; N] = self.buf.get(..N)?.try_into().ok()?;
        self.buf.advance(N);
        Some(bytes)
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<Bytes> {
        if self.buf.len() < n {
            return None;
        }
        Some(self.buf.split_to(n))
    }

    /// Everything that is left.
    pub(crate) fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_return_none_and_consume_nothing() {
        let mut r = Reader::new(Bytes::from_static(&[1, 2, 3]));
        assert_eq!(r.u32(), None);
        assert_eq!(r.remaining(), 3);
        assert_eq!(r.u16(), Some(0x0102));
        assert_eq!(r.take(2), None);
        assert_eq!(r.u8(), Some(3));
        assert!(r.is_empty());
        assert_eq!(r.u8(), None);
    }
}
