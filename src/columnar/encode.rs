//! Encoding one chunk: statistics, the values stream's layout (plain,
//! shuffled, narrowed or bits), the lengths of text and bytes, and each
//! stream compressed with zstd where that makes it smaller.

use super::format::{
    Bound, Encoding, Entry, ValueKind, FLAG_LENGTHS_ZSTD, FLAG_MAX, FLAG_MIN, FLAG_VALIDITY_ZSTD,
    FLAG_VALUES_ZSTD,
};
use super::num::{self, Num};
use crate::codec::{self, Codec};
use crate::error::{Error, Result};
use crate::schema::DType;

/// The bytes `b` of every value of width `w`, stream by stream: byte 0 of
/// each value, then byte 1, ...
pub(crate) fn shuffle(src: &[u8], w: usize, out: &mut Vec<u8>) {
    let n = src.len() / w;
    let start = out.len();
    out.resize(start + src.len(), 0);
    let dst = &mut out[start..];
    for (i, v) in src.chunks_exact(w).enumerate() {
        for (b, &x) in v.iter().enumerate() {
            dst[b * n + i] = x;
        }
    }
}

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

/// Appends `bytes` to `out`, compressed when `compress` and zstd makes it
/// smaller; returns (stored length, whether compressed).
fn put_stream(out: &mut Vec<u8>, bytes: &[u8], compress: bool) -> Result<(u32, bool)> {
    let len32 = |n: usize| {
        u32::try_from(n).map_err(|_| {
            Error::InvalidValue(format!(
                "a columnar chunk's stream of {n} bytes exceeds 4 GiB"
            ))
        })
    };
    if compress && !bytes.is_empty() {
        let done = codec::compress_with(Codec::Zstd, None, false, bytes, |frame| {
            if frame.len() < bytes.len() {
                out.extend_from_slice(frame);
                Some(frame.len())
            } else {
                None
            }
        })
        .map_err(|e| Error::InvalidValue(format!("compressing a columnar chunk: {e}")))?;
        if let Some(n) = done {
            return Ok((len32(n)?, true));
        }
    }
    out.extend_from_slice(bytes);
    Ok((len32(bytes.len())?, false))
}

/// Appends the values stream of a chunk of integers narrowed to `k` bytes
/// (`narrowed`, shuffled) whose span needs only `b < 8 * k` bits: packed at
/// `b` bits when that is smaller, or, compressed, when its stored size is
/// at most an eighth larger than the narrowed one's (zstd decodes packed
/// values about twice as fast, fewer bytes coming out, and unpacking raw
/// ones is several times faster than decoding zstd's coded literals);
/// narrowed otherwise.
fn put_narrowed(
    e: &mut Entry,
    out: &mut Vec<u8>,
    narrowed: &[u8],
    rows: usize,
    k: usize,
    b: usize,
    compress: bool,
) -> Result<()> {
    let mut packed = Vec::new();
    num::pack(narrowed, k, rows, b, &mut packed);
    let (stream, frame) = if compress {
        let n = squeeze_planes(narrowed, k)?;
        let p = squeeze_packed(&packed)?;
        let size = |raw: &[u8], f: &Option<Vec<u8>>| f.as_ref().map_or(raw.len(), Vec::len);
        let (sn, sp) = (size(narrowed, &n), size(&packed, &p));
        if sp <= sn + sn / 8 {
            (Some(&packed[..]), p)
        } else {
            (None, n)
        }
    } else {
        (Some(&packed[..]), None)
    };
    let raw = match stream {
        Some(p) => {
            e.encoding = Encoding::Packed as u8;
            e.width = b as u8;
            p
        }
        None => {
            e.encoding = Encoding::Narrowed as u8;
            e.width = k as u8;
            narrowed
        }
    };
    e.values_size = raw.len() as u32;
    let stored = match &frame {
        Some(f) => {
            e.flags |= FLAG_VALUES_ZSTD;
            f
        }
        None => raw,
    };
    e.values_len = u32::try_from(stored.len()).map_err(|_| {
        Error::InvalidValue(format!(
            "a columnar chunk's stream of {} bytes exceeds 4 GiB",
            stored.len()
        ))
    })?;
    out.extend_from_slice(stored);
    Ok(())
}

/// A stream of `planes` byte planes of equal length (shuffled or narrowed
/// values) as zstd frames, one a plane: compressed when that saves at
/// least a sixteenth of the plane, a raw frame otherwise. A near-random
/// plane (the low bytes of floats) gains a few percent from zstd's coded
/// literals and decodes several times slower than the copy a raw frame
/// is. None when no plane is compressed.
fn squeeze_planes(bytes: &[u8], planes: usize) -> Result<Option<Vec<u8>>> {
    if bytes.is_empty() {
        return Ok(None);
    }
    debug_assert_eq!(bytes.len() % planes, 0);
    let mut out = Vec::with_capacity(bytes.len() + 16 * planes);
    let mut any = false;
    for plane in bytes.chunks(bytes.len() / planes) {
        let kept = codec::compress_with(Codec::Zstd, None, false, plane, |frame| {
            let worth = frame.len() <= plane.len() - plane.len() / 16;
            if worth {
                out.extend_from_slice(frame);
            }
            worth
        })
        .map_err(|e| Error::InvalidValue(format!("compressing a columnar chunk: {e}")))?;
        if !kept {
            codec::raw_frame(plane, &mut out);
        }
        any |= kept;
    }
    Ok((any && out.len() < bytes.len()).then_some(out))
}

/// Packed values as one zstd frame of matches of at least 7 bytes, when
/// that saves at least a sixteenth: about as small as zstd's default for
/// them (the short matches it finds in packed bits gain little) and
/// decoded about a third faster. Packed bits of near-uniform values gain
/// a percent or two, not worth decoding coded literals for.
fn squeeze_packed(bytes: &[u8]) -> Result<Option<Vec<u8>>> {
    if bytes.is_empty() {
        return Ok(None);
    }
    codec::compress_min_match(bytes, 7, |frame| {
        (frame.len() <= bytes.len() - bytes.len() / 16).then(|| frame.to_vec())
    })
    .map_err(|e| Error::InvalidValue(format!("compressing a columnar chunk: {e}")))
}

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

/// Encodes one chunk of `rows` rows of `kind`: appends its stored bytes to
/// `out` and returns its entry (`offset` left for the caller). Null rows'
/// values are ignored (stored as zeros, or as empty values).
pub(crate) fn encode_chunk(
    kind: ValueKind,
    rows: usize,
    values: Values<'_>,
    valid: Validity<'_>,
    compress: bool,
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
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
        let (n, z) = put_stream(out, &bits, compress)?;
        e.validity_len = n;
        if z {
            e.flags |= FLAG_VALIDITY_ZSTD;
        }
    }
    scratch.clear();
    match (kind, values) {
        (ValueKind::Fixed(dtype), Values::Fixed(bytes)) => {
            let w = dtype.itemsize();
            debug_assert_eq!(bytes.len(), rows * w);
            // Null rows hold zeros.
            let owned;
            let bytes = if null_count > 0 {
                let mut b = bytes.to_vec();
                for i in (0..rows).filter(|&i| !is_valid(i)) {
                    b[i * w..(i + 1) * w].fill(0);
                }
                owned = b;
                &owned[..]
            } else {
                bytes
            };
            let stats = num::min_max(dtype, bytes, valid);
            if let Some((lo, hi)) = stats {
                e.min = Bound::number(lo.to_bytes());
                e.max = Bound::number(hi.to_bytes());
                e.flags |= FLAG_MIN | FLAG_MAX;
            }
            let span = stats.and_then(|(lo, hi)| integer_span(dtype, lo, hi));
            let (encoding, width) = match dtype {
                DType::Bool => {
                    scratch.extend(pack_bits(rows, |i| bytes[i] != 0));
                    (Encoding::Bits, 0)
                }
                _ if w == 1 => {
                    scratch.extend_from_slice(bytes);
                    (Encoding::Plain, 1)
                }
                _ => match span.map(narrow_width) {
                    Some(k) if k < w => {
                        let (lo, _) = stats.expect("narrowing needs the minimum");
                        num::narrow(dtype, bytes, lo, k, valid, scratch);
                        (Encoding::Narrowed, k)
                    }
                    _ => {
                        shuffle(bytes, w, scratch);
                        (Encoding::Shuffled, w)
                    }
                },
            };
            let b = span.map_or(0, num::bits_for);
            if encoding == Encoding::Narrowed && (1..8 * width).contains(&b) {
                put_narrowed(&mut e, out, scratch, rows, width, b, compress)?;
            } else {
                e.encoding = encoding as u8;
                e.width = width as u8;
                e.values_size = scratch.len() as u32;
                // Byte planes (shuffled or narrowed values that do not
                // pack) are framed one by one, as `put_narrowed` frames them.
                let planar = matches!(encoding, Encoding::Shuffled | Encoding::Narrowed);
                let planes = match planar && compress {
                    true => squeeze_planes(scratch, width)?,
                    false => None,
                };
                let (n, z) = match planes {
                    Some(frames) => {
                        out.extend_from_slice(&frames);
                        (frames.len() as u32, true)
                    }
                    None => put_stream(out, scratch, compress && !planar)?,
                };
                e.values_len = n;
                if z {
                    e.flags |= FLAG_VALUES_ZSTD;
                }
            }
        }
        (ValueKind::Utf8 | ValueKind::Binary, Values::Bytes { offsets, data }) => {
            debug_assert_eq!(offsets.len(), rows + 1);
            let value = |i: usize| &data[offsets[i] as usize..offsets[i + 1] as usize];
            let mut lo: Option<&[u8]> = None;
            let mut hi: Option<&[u8]> = None;
            let mut total = 0usize;
            let mut longest = 0usize;
            for i in (0..rows).filter(|&i| is_valid(i)) {
                let v = value(i);
                total += v.len();
                longest = longest.max(v.len());
                if lo.is_none_or(|m| v < m) {
                    lo = Some(v);
                }
                if hi.is_none_or(|m| v > m) {
                    hi = Some(v);
                }
            }
            if total > i32::MAX as usize {
                return Err(Error::InvalidValue(format!(
                    "a columnar chunk's values take {total} bytes, more than 2 GiB"
                )));
            }
            if let Some(lo) = lo {
                e.min = Bound::lower(lo);
                e.flags |= FLAG_MIN;
            }
            if let Some(b) = hi.and_then(Bound::upper) {
                e.max = b;
                e.flags |= FLAG_MAX;
            }
            let k = match longest {
                0..=0xFF => 1,
                0x100..=0xFFFF => 2,
                _ => 4,
            };
            let mut lengths = Vec::with_capacity(rows * k);
            for i in 0..rows {
                let n = if is_valid(i) { value(i).len() } else { 0 } as u32;
                lengths.extend_from_slice(&n.to_le_bytes()[..k]);
            }
            if k > 1 {
                shuffle(&lengths, k, scratch);
                std::mem::swap(&mut lengths, scratch);
                scratch.clear();
            }
            for i in (0..rows).filter(|&i| is_valid(i)) {
                scratch.extend_from_slice(value(i));
            }
            e.encoding = Encoding::Plain as u8;
            e.values_size = scratch.len() as u32;
            let (n, z) = put_stream(out, scratch, compress)?;
            e.values_len = n;
            if z {
                e.flags |= FLAG_VALUES_ZSTD;
            }
            e.lengths_width = k as u8;
            e.lengths_size = lengths.len() as u32;
            let (n, z) = put_stream(out, &lengths, compress)?;
            e.lengths_len = n;
            if z {
                e.flags |= FLAG_LENGTHS_ZSTD;
            }
        }
        _ => {
            return Err(Error::InvalidValue(
                "a columnar chunk's values do not match its column's kind".into(),
            ))
        }
    }
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

/// The fewest bytes (1, 2 or 4) that hold every value of a chunk of
/// integers minus its minimum, `span` being its largest; None past 4.
fn narrow_width(span: u64) -> usize {
    [1usize, 2, 4]
        .into_iter()
        .find(|&k| span < 1u64 << (8 * k))
        .unwrap_or(8)
}
