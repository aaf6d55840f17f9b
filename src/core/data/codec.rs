//! A minimal little-endian byte codec for saving and restoring solver state (a streaming BSGD run
//! that is pickled between `partial_fit` calls). Every read is checked: truncated or inconsistent
//! bytes give `SvmError::InvalidInput`, never a panic or an out-of-memory allocation.

use crate::core::common::error::{Result, SvmError};

/// Appends values to a byte buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn usize(&mut self, v: usize) {
        self.u64(v as u64);
    }

    pub fn f64(&mut self, v: f64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn bool(&mut self, v: bool) {
        self.u64(u64::from(v));
    }

    pub fn f64s(&mut self, v: &[f64]) {
        self.usize(v.len());
        for &x in v {
            self.f64(x);
        }
    }

    pub fn u32s(&mut self, v: &[u32]) {
        self.usize(v.len());
        for &x in v {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
    }

    pub fn u64s(&mut self, v: &[u64]) {
        self.usize(v.len());
        for &x in v {
            self.u64(x);
        }
    }

    pub fn str(&mut self, s: &str) {
        self.usize(s.len());
        self.buf.extend_from_slice(s.as_bytes());
    }

    /// A part that may be absent: a flag, then the part written by `write` when present.
    pub fn option<T>(&mut self, value: Option<&T>, write: impl FnOnce(&mut Self, &T)) {
        self.bool(value.is_some());
        if let Some(v) = value {
            write(self, v);
        }
    }
}

/// Reads values back in the order they were written.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn truncated() -> SvmError {
    SvmError::invalid_input("saved solver state is truncated or corrupted")
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or_else(truncated)?;
        let s = self.buf.get(self.pos..end).ok_or_else(truncated)?;
        self.pos = end;
        Ok(s)
    }

    pub fn u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    pub fn usize(&mut self) -> Result<usize> {
        usize::try_from(self.u64()?).map_err(|_| truncated())
    }

    pub fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_bits(self.u64()?))
    }

    pub fn bool(&mut self) -> Result<bool> {
        match self.u64()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(truncated()),
        }
    }

    /// A length that must leave room for `elem` bytes per element in what is left (so a corrupted
    /// length cannot ask for a huge allocation).
    fn len(&mut self, elem: usize) -> Result<usize> {
        let n = self.usize()?;
        let left = self.buf.len() - self.pos;
        if n.checked_mul(elem).is_none_or(|b| b > left) {
            return Err(truncated());
        }
        Ok(n)
    }

    /// A length-prefixed vector of `N`-byte little-endian values.
    fn words<T, const N: usize>(&mut self, from_le: fn([u8; N]) -> T) -> Result<Vec<T>> {
        let n = self.len(N)?;
        let bytes = self.take(n * N)?;
        Ok(bytes
            .chunks_exact(N)
            .map(|c| {
                let mut b = [0u8; N];
                b.copy_from_slice(c);
                from_le(b)
            })
            .collect())
    }

    pub fn f64s(&mut self) -> Result<Vec<f64>> {
        self.words(f64::from_le_bytes)
    }

    /// A vector of f64 that must have exactly `n` entries.
    pub fn f64s_of(&mut self, n: usize) -> Result<Vec<f64>> {
        let v = self.f64s()?;
        if v.len() != n {
            return Err(truncated());
        }
        Ok(v)
    }

    pub fn u32s(&mut self) -> Result<Vec<u32>> {
        self.words(u32::from_le_bytes)
    }

    pub fn u64s(&mut self) -> Result<Vec<u64>> {
        self.words(u64::from_le_bytes)
    }

    pub fn str(&mut self) -> Result<&'a str> {
        let n = self.len(1)?;
        std::str::from_utf8(self.take(n)?).map_err(|_| truncated())
    }

    /// A part written by [`Writer::option`], read by `read` when present.
    pub fn option<T>(&mut self, read: impl FnOnce(&mut Self) -> Result<T>) -> Result<Option<T>> {
        if self.bool()? {
            read(self).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<()> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(truncated())
        }
    }
}

/// FNV-1a, 64 bits: a checksum that tells a damaged state from an intact one (flipped bits,
/// truncated or spliced bytes); not a defence against someone forging a state.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `bytes` with their [`checksum`] appended (8 bytes, little-endian).
pub fn with_checksum(mut bytes: Vec<u8>) -> Vec<u8> {
    let sum = checksum(&bytes);
    bytes.extend_from_slice(&sum.to_le_bytes());
    bytes
}

/// The bytes before a trailing checksum, if it matches them.
pub fn verified(bytes: &[u8]) -> Result<&[u8]> {
    let Some(split) = bytes.len().checked_sub(8) else {
        return Err(truncated());
    };
    let (body, tail) = bytes.split_at(split);
    let stored = u64::from_le_bytes(tail.try_into().map_err(|_| truncated())?);
    if stored == checksum(body) {
        Ok(body)
    } else {
        Err(corrupt("checksum mismatch: the bytes were damaged"))
    }
}

/// Shorthand for a failed consistency check while decoding.
pub fn corrupt(what: &str) -> SvmError {
    SvmError::invalid_input(format!("saved solver state is corrupted ({what})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut w = Writer::new();
        w.u64(7);
        w.f64(-1.5);
        w.bool(true);
        w.f64s(&[1.0, 2.0]);
        w.u32s(&[3, 4, 5]);
        w.str("merge");
        let bytes = w.into_bytes();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.u64().unwrap(), 7);
        assert_eq!(r.f64().unwrap(), -1.5);
        assert!(r.bool().unwrap());
        assert_eq!(r.f64s().unwrap(), vec![1.0, 2.0]);
        assert_eq!(r.u32s().unwrap(), vec![3, 4, 5]);
        assert_eq!(r.str().unwrap(), "merge");
        r.finish().unwrap();
        for cut in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..cut]);
            let ok = r.u64().is_ok()
                && r.f64().is_ok()
                && r.bool().is_ok()
                && r.f64s().is_ok()
                && r.u32s().is_ok()
                && r.str().is_ok();
            assert!(!ok, "cut at {cut} read through");
        }
        // A huge length is rejected before allocating.
        let mut w = Writer::new();
        w.u64(u64::MAX / 2);
        let bytes = w.into_bytes();
        assert!(Reader::new(&bytes).f64s().is_err());
    }

    #[test]
    fn optional_parts_round_trip() {
        let mut w = Writer::new();
        w.option(Some(&2.5), |w, v| w.f64(*v));
        w.option(None::<&f64>, |w, v| w.f64(*v));
        let bytes = w.into_bytes();
        assert_eq!(bytes.len(), 24);
        let mut r = Reader::new(&bytes);
        assert_eq!(r.option(|r| r.f64()).unwrap(), Some(2.5));
        assert_eq!(r.option(|r| r.f64()).unwrap(), None);
        r.finish().unwrap();
    }
}
