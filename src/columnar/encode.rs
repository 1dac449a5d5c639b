//! Encoding one chunk (format version 3): statistics, the values stream's
//! layout (plain, packed or bits; text and bytes grouped, coded with the
//! file's symbol table), and the index a random read checks it by.

use super::format::{block_crcs, Bound, Encoding, Entry, ValueKind, FLAG_MAX, FLAG_MIN, GROUP};
use super::fsst;
use super::num::{self, Num};
use crate::error::{Error, Result};
use crate::schema::DType;

/// The values of a chunk as the writer hands them over.
pub(crate) enum Values<'a> {
    /// `rows * width` bytes, little-endian (bool: one byte each, 0 or 1).
    Fixed(&'a [u8]),
    /// Each row's value: `data[offsets[i]..offsets[i + 1]]`.
    Bytes { offsets: &'a [u64], data: &'a [u8] },
}

/// Null rows of a chunk: one bool per row (true: valid), or None when
/// every row is valid.
pub(crate) type Validity<'a> = Option<&'a [bool]>;

/// Packs `rows` bools (one byte each, nonzero true) into bits, least
/// significant first.
pub(crate) fn pack_bits(rows: usize, bit: impl Fn(usize) -> bool) -> Vec<u8> {
    let mut out = vec![0u8; rows.div_ceil(8)];
    for i in 0..rows {
        if bit(i) {
            out[i / 8] |= 1 << (i % 8);
        }
    }
    out
}

/// Appends `v` (each below `1 << b`) packed at `b` bits (1 to 32) each,
/// least significant bit first, the bits past the last value zero.
pub(crate) fn pack_bits_of(v: impl Iterator<Item = u64>, b: usize, out: &mut Vec<u8>) {
    let (mut acc, mut have) = (0u64, 0usize);
    for d in v {
        debug_assert!(b == 64 || d >> b == 0);
        acc |= d << have;
        have += b;
        while have >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            have -= 8;
        }
    }
    if have > 0 {
        out.push(acc as u8);
    }
}

fn len32(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| {
        Error::InvalidValue(format!(
            "a columnar chunk's stream of {n} bytes exceeds 4 GiB"
        ))
    })
}

/// Encodes one chunk of `rows` rows of `kind` in format version 3: appends
/// its stored bytes to `out` and returns its entry (`offset` left for the
/// caller; `at` is where it will lie in the file). Null rows' values are ignored (stored as zeros, or as empty
/// values). Every stream is raw, so that a random read finds a value in
/// place: numbers plain, packed (integers minus the chunk's minimum) or
/// bits; text and bytes in groups of [`GROUP`] rows, coded with `coder`
/// (the file's symbol table) when given. The index that follows holds a
/// text chunk's group starts and the CRC-32 of each block of the file (4 KiB,
/// aligned) the bytes before them overlap.
pub(crate) fn encode_chunk(
    kind: ValueKind,
    rows: usize,
    values: Values<'_>,
    valid: Validity<'_>,
    coder: Option<&fsst::Compressor>,
    at: u64,
    out: &mut Vec<u8>,
) -> Result<Entry> {
    debug_assert!(rows > 0 && rows <= u32::MAX as usize);
    let null_count = valid.map_or(0, |v| v.iter().filter(|&&x| !x).count());
    let is_valid = |i: usize| valid.is_none_or(|v| v[i]);
    let start = out.len();
    let mut e = Entry {
        rows: rows as u32,
        null_count: null_count as u32,
        ..Entry::default()
    };
    if null_count > 0 {
        let bits = pack_bits(rows, is_valid);
        e.validity_len = len32(bits.len())?;
        out.extend_from_slice(&bits);
    }
    let values_at = out.len();
    let mut starts: Vec<u32> = Vec::new();
    match (kind, values) {
        (ValueKind::Fixed(dtype), Values::Fixed(bytes)) => {
            let w = dtype.itemsize();
            debug_assert_eq!(bytes.len(), rows * w);
            let stats = num::min_max(dtype, bytes, valid);
            if let Some((lo, hi)) = stats {
                e.min = Bound::number(lo.to_bytes());
                e.max = Bound::number(hi.to_bytes());
                e.flags |= FLAG_MIN | FLAG_MAX;
            }
            let span = stats.and_then(|(lo, hi)| integer_span(dtype, lo, hi));
            let bits = span.map(|s| num::bits_for(s).max(1));
            match (dtype, bits, stats) {
                (DType::Bool, _, _) => {
                    out.extend(pack_bits(rows, |i| is_valid(i) && bytes[i] != 0));
                    e.encoding = Encoding::Bits as u8;
                }
                (_, Some(b), Some((lo, _))) if w > 1 && b <= 32 && b < 8 * w => {
                    let base = |i: usize| -> u64 {
                        if !is_valid(i) {
                            return 0;
                        }
                        match (num::value(dtype, bytes, i), lo) {
                            (Num::I(v), Num::I(l)) => (v as i128 - l as i128) as u64,
                            (Num::U(v), Num::U(l)) => v - l,
                            _ => unreachable!("only integers pack"),
                        }
                    };
                    pack_bits_of((0..rows).map(base), b, out);
                    e.encoding = Encoding::Packed as u8;
                    e.width = b as u8;
                }
                _ => {
                    let at = out.len();
                    out.extend_from_slice(bytes);
                    // Null rows hold zeros.
                    for i in (0..rows).filter(|&i| !is_valid(i)) {
                        out[at + i * w..at + (i + 1) * w].fill(0);
                    }
                    e.encoding = Encoding::Plain as u8;
                    e.width = w as u8;
                }
            }
        }
        (ValueKind::Utf8 | ValueKind::Binary, Values::Bytes { offsets, data }) => {
            debug_assert_eq!(offsets.len(), rows + 1);
            let value = |i: usize| &data[offsets[i] as usize..offsets[i + 1] as usize];
            let mut lo: Option<&[u8]> = None;
            let mut hi: Option<&[u8]> = None;
            for i in (0..rows).filter(|&i| is_valid(i)) {
                let v = value(i);
                if lo.is_none_or(|m| v < m) {
                    lo = Some(v);
                }
                if hi.is_none_or(|m| v > m) {
                    hi = Some(v);
                }
            }
            if let Some(lo) = lo {
                e.min = Bound::lower(lo);
                e.flags |= FLAG_MIN;
            }
            if let Some(b) = hi.and_then(Bound::upper) {
                e.max = b;
                e.flags |= FLAG_MAX;
            }
            // Every row's codes end to end, and their lengths.
            let mut scratch: Vec<u8> = Vec::new();
            let mut ends: Vec<usize> = Vec::with_capacity(rows);
            let mut buf = Vec::new();
            for i in 0..rows {
                if is_valid(i) {
                    match coder {
                        Some(c) => {
                            fsst::encode(c, value(i), &mut buf);
                            scratch.extend_from_slice(&buf);
                        }
                        None => scratch.extend_from_slice(value(i)),
                    }
                }
                ends.push(scratch.len());
            }
            let len_of = |i: usize| (ends[i] - if i == 0 { 0 } else { ends[i - 1] }) as u64;
            let longest = (0..rows).map(len_of).max().unwrap_or(0);
            if longest > u32::MAX as u64 {
                return Err(Error::InvalidValue(format!(
                    "a columnar value of {longest} bytes exceeds 4 GiB"
                )));
            }
            let b = num::bits_for(longest);
            let text: usize = (0..rows)
                .filter(|&i| is_valid(i))
                .map(|i| value(i).len())
                .sum();
            if text > i32::MAX as usize {
                return Err(Error::InvalidValue(format!(
                    "a columnar chunk's values take {text} bytes, more than 2 GiB"
                )));
            }
            e.text_size = text as u32;
            e.width = b as u8;
            e.encoding = Encoding::Grouped as u8;
            for g in (0..rows).step_by(GROUP) {
                let end = (g + GROUP).min(rows);
                starts.push(len32(out.len() - values_at)?);
                if b > 0 {
                    pack_bits_of((g..end).map(len_of), b, out);
                }
                let from = if g == 0 { 0 } else { ends[g - 1] };
                out.extend_from_slice(&scratch[from..ends[end - 1]]);
            }
            starts.push(len32(out.len() - values_at)?);
        }
        _ => {
            return Err(Error::InvalidValue(
                "a columnar chunk's values do not match its column's kind".into(),
            ))
        }
    }
    e.values_len = len32(out.len() - values_at)?;
    e.values_size = e.values_len;
    if e.values_size > i32::MAX as u32 {
        return Err(Error::InvalidValue(format!(
            "a columnar chunk's values take {} bytes, more than 2 GiB",
            e.values_size
        )));
    }
    let index_at = out.len();
    for s in &starts {
        out.extend_from_slice(&s.to_le_bytes());
    }
    let checked = out.len();
    let crcs: Vec<u32> = block_crcs(at, &out[start..checked]).collect();
    for crc in crcs {
        out.extend_from_slice(&crc.to_le_bytes());
    }
    e.lengths_len = len32(out.len() - index_at)?;
    e.lengths_size = e.lengths_len;
    e.crc = crc32fast::hash(&out[start..]);
    Ok(e)
}

/// `hi - lo` of a chunk of integers; None for other dtypes.
fn integer_span(dtype: DType, lo: Num, hi: Num) -> Option<u64> {
    if !super::format::is_integer(dtype) {
        return None;
    }
    match (lo, hi) {
        (Num::I(a), Num::I(b)) => Some((b as i128 - a as i128) as u64),
        (Num::U(a), Num::U(b)) => Some(b - a),
        _ => None,
    }
}
