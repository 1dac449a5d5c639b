//! A version 3 text or bytes column's symbol table: up to 255 symbols of 1
//! to 8 bytes, each coded as one byte, byte 255 escaping the next byte as
//! itself (FSST, Boncz et al., VLDB 2020). Trained and applied by the
//! `fsst-rs` crate when writing; read here, checked, and decoded value by
//! value with every code checked, so that a damaged file gives an error,
//! never a wrong length or a read out of bounds.
//!
//! ```text
//! 0        1      n, the number of symbols (0 to 255)
//! 1        n      each symbol's length (1 to 8)
//! 1 + n    8 n    each symbol's bytes, little-endian, zero past its length
//! ```

use super::format::Broken;

/// The crate's coder, trained on a sample.
pub use ::fsst::Compressor;

/// The escape code: the next byte stands for itself.
const ESCAPE: u8 = 255;

/// Values of a chunk's first this many bytes train the table.
pub const TRAIN_BYTES: usize = 64 << 10;

/// A parsed symbol table.
#[derive(Clone)]
pub struct Symbols {
    /// Each code's length; 0 for a code past the table's (an error).
    lens: [u8; 256],
    syms: [u64; 256],
}

impl std::fmt::Debug for Symbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.lens[..255].iter().filter(|&&l| l > 0).count();
        f.debug_struct("Symbols").field("symbols", &n).finish()
    }
}

impl Symbols {
    /// Parses and checks a table's bytes.
    pub fn parse(b: &[u8]) -> Result<Symbols, Broken> {
        let Some(&n) = b.first() else {
            return Err("its symbol table is empty (it holds at least its count)".into());
        };
        let n = n as usize;
        if b.len() != 1 + 9 * n {
            return Err(format!(
                "its symbol table of {} bytes does not hold the {n} symbols it counts",
                b.len()
            ));
        }
        let mut lens = [0u8; 256];
        let mut syms = [0u64; 256];
        for c in 0..n {
            let len = b[1 + c];
            let at = 1 + n + 8 * c;
            let sym = u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
            if !(1..=8).contains(&len) || (len < 8 && sym >> (8 * len) != 0) {
                return Err(format!(
                    "symbol {c} of its symbol table has length {len} or bytes past it"
                ));
            }
            lens[c] = len;
            syms[c] = sym;
        }
        Ok(Symbols { lens, syms })
    }

    /// Writes the bytes the codes `codes` stand for at the start of `dst`;
    /// returns how many (an error if they do not fit).
    #[inline]
    pub fn decode_slice(&self, codes: &[u8], dst: &mut [u8]) -> Result<usize, Broken> {
        const FULL: &str = "a value decodes to more bytes than its entry gives it";
        let (mut at, mut i) = (0usize, 0usize);
        while i < codes.len() {
            let c = codes[i];
            if c == ESCAPE {
                let Some(&b) = codes.get(i + 1) else {
                    return Err("a value's codes end with an escape".into());
                };
                *dst.get_mut(at).ok_or(FULL)? = b;
                at += 1;
                i += 2;
                continue;
            }
            let len = self.lens[c as usize] as usize;
            if len == 0 {
                return Err(format!(
                    "a value holds code {c}, which its symbol table lacks"
                ));
            }
            let sym = self.syms[c as usize].to_le_bytes();
            match dst.get_mut(at..at + 8) {
                Some(d) => d.copy_from_slice(&sym),
                None => dst
                    .get_mut(at..at + len)
                    .ok_or(FULL)?
                    .copy_from_slice(&sym[..len]),
            }
            at += len;
            i += 1;
        }
        Ok(at)
    }

    /// Appends the bytes the codes `codes` stand for to `out`.
    #[inline]
    pub fn decode_into(&self, codes: &[u8], out: &mut Vec<u8>) -> Result<(), Broken> {
        let at = out.len();
        out.resize(at + 8 * codes.len() + 8, 0);
        let n = self.decode_slice(codes, &mut out[at..]);
        out.truncate(at + *n.as_ref().unwrap_or(&0));
        n.map(|_| ())
    }
}

/// A table trained on `values` when coding them with it saves at least a
/// tenth of their bytes: its bytes and its coder.
pub fn train(values: &[&[u8]]) -> Option<(Vec<u8>, Compressor)> {
    let raw: usize = values.iter().map(|v| v.len()).sum();
    if raw == 0 {
        return None;
    }
    let sample: Vec<&[u8]> = values.to_vec();
    let coder = Compressor::train(&sample);
    let mut buf = Vec::new();
    let coded: usize = values.iter().map(|v| encode(&coder, v, &mut buf)).sum();
    if coded > raw - raw / 10 {
        return None;
    }
    let syms = coder.symbol_table();
    let lens = coder.symbol_lengths();
    let n = syms.len();
    let mut out = Vec::with_capacity(1 + 9 * n);
    out.push(n as u8);
    out.extend_from_slice(lens);
    for (s, &l) in syms.iter().zip(lens) {
        let mut v = s.to_u64();
        if l < 8 {
            v &= (1u64 << (8 * l)) - 1;
        }
        out.extend_from_slice(&v.to_le_bytes());
    }
    Some((out, coder))
}

/// Codes `value` with `coder` into `buf` (cleared first); returns the
/// codes' length.
pub fn encode(coder: &Compressor, value: &[u8], buf: &mut Vec<u8>) -> usize {
    buf.clear();
    if value.is_empty() {
        return 0;
    }
    buf.reserve(2 * value.len() + 16);
    // SAFETY: at most two bytes a byte (every byte escaped), and 16 to
    // spare for the coder's word writes; `set_len` covers what it wrote.
    unsafe {
        let n = coder.compress_into(value, buf.spare_capacity_mut());
        buf.set_len(n);
    }
    buf.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trained_table_round_trips_and_refuses_bad_codes() {
        let words = ["harbor", "the", "boat", "in", "harbor light", "a", "é"];
        let values: Vec<Vec<u8>> = (0..2000)
            .map(|i| format!("{} {}", words[i % 7], words[(i * 3) % 7]).into_bytes())
            .collect();
        let refs: Vec<&[u8]> = values.iter().map(|v| &v[..]).collect();
        let (table, coder) = train(&refs).expect("text this repetitive pays");
        let s = Symbols::parse(&table).unwrap();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for v in &values {
            encode(&coder, v, &mut buf);
            out.clear();
            s.decode_into(&buf, &mut out).unwrap();
            assert_eq!(&out, v);
        }
        assert!(s.decode_into(&[ESCAPE], &mut out).is_err());
        let n = table[0];
        if n < 255 {
            assert!(s.decode_into(&[n], &mut out).is_err());
        }
        let mut bad = table.clone();
        bad[1] = 9;
        assert!(Symbols::parse(&bad).is_err());
        assert!(Symbols::parse(&table[..table.len() - 1]).is_err());
        assert!(Symbols::parse(&[]).is_err());
        // Random bytes do not pay.
        let noise: Vec<Vec<u8>> = (0..500u32)
            .map(|i| {
                (0..16)
                    .map(|j| (i.wrapping_mul(2654435761).rotate_left(j) >> 3) as u8)
                    .collect()
            })
            .collect();
        let refs: Vec<&[u8]> = noise.iter().map(|v| &v[..]).collect();
        assert!(train(&refs).is_none());
    }
}
