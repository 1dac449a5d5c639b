//! Decoding one chunk from its stored bytes, checking everything its entry
//! promises: the checksum, each stream's size, the null count, UTF-8, and
//! that the values' minimum and maximum are exactly the statistics'.

use std::cell::RefCell;

use super::format::{
    Bound, Broken, Encoding, Entry, ValueKind, FLAG_LENGTHS_ZSTD, FLAG_VALIDITY_ZSTD,
    FLAG_VALUES_ZSTD, GROUP,
};
use super::fsst::Symbols;
use super::num::{self, Num};
use crate::codec::{self, Codec};
use crate::schema::DType;

/// Bytes aligned for every dtype (8 bytes), as Arrow's typed buffers need.
pub struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl Aligned {
    /// `len` zero bytes; None when they cannot be allocated.
    pub(crate) fn zeroed(len: usize) -> Option<Aligned> {
        let n = len.div_ceil(8);
        let mut words = Vec::new();
        words.try_reserve_exact(n).ok()?;
        words.resize(n, 0);
        Some(Aligned { words, len })
    }

    /// The zstd frame `src`, which must decode to exactly `size` bytes,
    /// decoded into new bytes (not zeroed first: the frame fills them).
    fn decompress(src: &[u8], size: usize) -> Result<Aligned, Broken> {
        let n = size.div_ceil(8);
        let mut words: Vec<u64> = Vec::new();
        words
            .try_reserve_exact(n)
            .map_err(|_| format!("cannot allocate {size} bytes to decode it"))?;
        if n > 0 {
            // The last word may be partly past `size`: zero it so that
            // every word is initialised once the frame has filled the rest.
            // SAFETY: `n <= capacity`, so index `n - 1` is inside the
            // allocation.
            unsafe { words.as_mut_ptr().add(n - 1).write(0) };
        }
        let mut out = WordBuf {
            words: &mut words,
            cap: size,
            filled: 0,
        };
        codec::decode_into_buf(src, &mut out, size).map_err(|e| format!("its values: {e}"))?;
        // SAFETY: the frame wrote exactly `size` bytes from the start
        // (checked by decode_into_buf) and the last word was zeroed, so the
        // first `n` words are initialised.
        unsafe { words.set_len(n) };
        Ok(Aligned { words, len: size })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the words are initialised and hold at least `len` bytes;
        // u8 has no alignment or validity requirement.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the slice unique.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// One chunk's rows, decoded.
pub struct Decoded {
    pub rows: usize,
    pub kind: ValueKind,
    /// Numbers: `rows * itemsize` bytes, null rows zero (booleans: bits,
    /// least significant first). Text and bytes: the values, end to end.
    pub values: Aligned,
    /// Text and bytes: `rows + 1` offsets into `values`.
    pub offsets: Vec<i32>,
    /// Validity bits (least significant first), None when no row is null.
    pub validity: Option<Vec<u8>>,
    pub null_count: usize,
}

impl std::fmt::Debug for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoded")
            .field("rows", &self.rows)
            .field("kind", &self.kind)
            .field("null_count", &self.null_count)
            .finish()
    }
}

impl Decoded {
    /// `rows` zero values of `kind` (numbers of one byte, or empty text).
    #[cfg(test)]
    pub fn zeroed(kind: ValueKind, rows: usize) -> Decoded {
        Decoded {
            rows,
            kind,
            values: Aligned::zeroed(rows).expect("a small allocation"),
            offsets: Vec::new(),
            validity: None,
            null_count: 0,
        }
    }

    /// Memory it holds.
    pub fn memory(&self) -> usize {
        self.values.len() + 4 * self.offsets.len() + self.validity.as_ref().map_or(0, Vec::len) + 64
    }

    /// The [`memory`](Self::memory) chunk `e` of `kind` holds once
    /// decoded, from its entry alone: what room keeping it takes.
    pub fn memory_of(kind: ValueKind, e: &Entry) -> usize {
        let rows = e.rows as usize;
        let values = match kind {
            ValueKind::Fixed(DType::Bool) => rows.div_ceil(8),
            ValueKind::Fixed(d) => rows * d.itemsize(),
            // Text: its bytes end to end (a grouped chunk's decoded text).
            _ => e.decoded_size() as usize,
        };
        let offsets = match kind {
            ValueKind::Fixed(_) => 0,
            _ => 4 * (rows + 1),
        };
        let validity = if e.null_count > 0 {
            rows.div_ceil(8)
        } else {
            0
        };
        values + offsets + validity + 64
    }

    #[inline]
    pub fn is_valid(&self, i: usize) -> bool {
        self.validity
            .as_ref()
            .is_none_or(|v| v[i / 8] & (1 << (i % 8)) != 0)
    }

    /// Text or bytes value `i` (empty for a null row).
    #[inline]
    pub fn value(&self, i: usize) -> &[u8] {
        &self.values.as_slice()[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// Number `i`'s bytes (booleans: one byte, 0 or 1, written to `out`).
    #[inline]
    pub fn copy_fixed(&self, i: usize, w: usize, out: &mut [u8]) {
        match self.kind {
            ValueKind::Fixed(DType::Bool) => {
                out[0] = (self.values.as_slice()[i / 8] >> (i % 8)) & 1;
            }
            _ => out.copy_from_slice(&self.values.as_slice()[i * w..(i + 1) * w]),
        }
    }
}

/// The spare capacity of a word vector as zstd's output (bytes `0..cap`).
struct WordBuf<'a> {
    words: &'a mut Vec<u64>,
    cap: usize,
    filled: usize,
}

// SAFETY: `as_slice` covers only bytes zstd reported written; the pointer
// and capacity describe memory of the vector's allocation (at least `cap`
// bytes, since the vector reserved `cap.div_ceil(8)` words).
unsafe impl zstd::zstd_safe::WriteBuf for WordBuf<'_> {
    fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `filled` bytes were written by zstd.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.filled) }
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr().cast::<u8>()
    }
    unsafe fn filled_until(&mut self, n: usize) {
        self.filled = n;
    }
}

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Decodes a stream of `size` bytes stored as `src` (a zstd frame when
/// `zstd`) into `dst`.
fn stream_into(src: &[u8], zstd: bool, dst: &mut [u8], what: &str) -> Result<(), Broken> {
    if zstd {
        codec::decode_slice(Codec::Zstd, None, src, dst).map_err(|e| format!("its {what}: {e}"))
    } else {
        dst.copy_from_slice(src);
        Ok(())
    }
}

/// `f` of a stream of values of `size` bytes stored as `src`: `src` itself,
/// or (a zstd frame when `zstd`) its bytes decoded into the thread's
/// scratch.
fn stored_values<R>(
    src: &[u8],
    zstd: bool,
    size: usize,
    f: impl FnOnce(&[u8]) -> Result<R, Broken>,
) -> Result<R, Broken> {
    if !zstd {
        return f(src);
    }
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < size {
            s.resize(size, 0);
        }
        stream_into(src, true, &mut s[..size], "values")?;
        f(&s[..size])
    })
}

fn alloc(len: usize) -> Result<Aligned, Broken> {
    Aligned::zeroed(len).ok_or_else(|| format!("cannot allocate {len} bytes to decode it"))
}

/// A chunk's stored bytes checked against its entry and split into its
/// validity, values and lengths streams; the validity decoded.
struct Streams<'a> {
    rows: usize,
    values: &'a [u8],
    lengths: &'a [u8],
    validity: Option<Vec<u8>>,
}

impl Streams<'_> {
    fn valid_bools(&self) -> Option<Vec<bool>> {
        self.validity.as_ref().map(|b| {
            (0..self.rows)
                .map(|i| b[i / 8] & (1 << (i % 8)) != 0)
                .collect()
        })
    }
}

fn split<'a>(e: &Entry, stored: &'a [u8]) -> Result<Streams<'a>, Broken> {
    if stored.len() as u64 != e.stored_len() {
        return Err(format!(
            "{} stored bytes, expected {}",
            stored.len(),
            e.stored_len()
        ));
    }
    if crc32fast::hash(stored) != e.crc {
        return Err("its CRC-32 does not match its bytes".into());
    }
    let rows = e.rows as usize;
    let (validity_src, rest) = stored.split_at(e.validity_len as usize);
    let (values, lengths) = rest.split_at(e.values_len as usize);
    let validity = if e.null_count > 0 {
        let mut bits = vec![0u8; rows.div_ceil(8)];
        stream_into(
            validity_src,
            e.flags & FLAG_VALIDITY_ZSTD != 0,
            &mut bits,
            "validity bits",
        )?;
        let valid: u64 = bits.iter().map(|b| b.count_ones() as u64).sum();
        let tail_clear = rows.is_multiple_of(8) || bits[rows / 8] >> (rows % 8) == 0;
        if !tail_clear || valid != (rows - e.null_count as usize) as u64 {
            return Err(format!(
                "its validity bits mark {} null rows, but its entry says {}",
                rows as u64 - valid,
                e.null_count
            ));
        }
        Some(bits)
    } else {
        None
    };
    Ok(Streams {
        rows,
        values,
        lengths,
        validity,
    })
}

/// Bits `i * b .. (i + 1) * b` of `src` (`b` 1 to 32), least significant
/// first; bytes past its end read as zero.
#[inline]
pub(crate) fn bits_at(src: &[u8], i: usize, b: usize) -> u64 {
    let bit = i * b;
    let at = bit / 8;
    let word = match src.get(at..at + 8) {
        Some(w) => u64::from_le_bytes(w.try_into().expect("8 bytes")),
        None => {
            let mut w = [0u8; 8];
            let end = src.len().min(at + 8);
            if at < end {
                w[..end - at].copy_from_slice(&src[at..end]);
            }
            u64::from_le_bytes(w)
        }
    };
    (word >> (bit % 8)) & ((1u64 << b) - 1)
}

/// The group starts of the grouped chunk `e` from its index, checked to
/// begin at 0, never fall, and end at its values' size.
pub(crate) fn group_starts(e: &Entry, index: &[u8]) -> Result<Vec<u32>, Broken> {
    let n = e.groups() + 1;
    let starts: Vec<u32> = index
        .get(..4 * n)
        .ok_or("its index is shorter than its group starts")?
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    if starts[0] != 0 || starts[n - 1] != e.values_size || starts.windows(2).any(|w| w[0] > w[1]) {
        return Err(format!(
            "its group starts do not rise from 0 to its {} bytes of values",
            e.values_size
        ));
    }
    Ok(starts)
}

/// Decodes the grouped text or bytes `st` of chunk `e` into `values`
/// (exactly its decoded bytes) and `offsets` (`rows + 1`, from 0), every
/// length and code checked.
fn decode_grouped_into(
    e: &Entry,
    st: &Streams<'_>,
    symbols: Option<&Symbols>,
    values: &mut [u8],
    offsets: &mut [i32],
) -> Result<(), Broken> {
    let rows = st.rows;
    let b = e.width as usize;
    let starts = group_starts(e, st.lengths)?;
    let valid = |i: usize| {
        st.validity
            .as_ref()
            .is_none_or(|v| v[i / 8] & (1 << (i % 8)) != 0)
    };
    offsets[0] = 0;
    let mut at = 0usize;
    for g in 0..e.groups() {
        let grp = &st.values[starts[g] as usize..starts[g + 1] as usize];
        let r0 = g * GROUP;
        let m = (rows - r0).min(GROUP);
        let head = num::packed_size(m, b);
        if head > grp.len() {
            return Err(format!("its group {g} is shorter than its lengths"));
        }
        let (lens, mut codes) = grp.split_at(head);
        for j in 0..m {
            let n = if b == 0 {
                0
            } else {
                bits_at(lens, j, b) as usize
            };
            if n > codes.len() {
                return Err(format!("its group {g}'s lengths run past its bytes"));
            }
            let (c, rest) = codes.split_at(n);
            codes = rest;
            let row = r0 + j;
            if n > 0 && !valid(row) {
                return Err(format!("its null row {row} holds bytes"));
            }
            at += match symbols {
                Some(s) => s.decode_slice(c, &mut values[at..])?,
                None => {
                    values
                        .get_mut(at..at + n)
                        .ok_or("its values decode to more bytes than its entry says")?
                        .copy_from_slice(c);
                    n
                }
            };
            offsets[row + 1] = at as i32;
        }
        if !codes.is_empty() {
            return Err(format!("its group {g} holds bytes past its rows' lengths"));
        }
    }
    if at != values.len() {
        return Err(format!(
            "its values decode to {at} bytes, but its entry says {}",
            values.len()
        ));
    }
    Ok(())
}

/// Decodes the chunk described by `e` from its stored bytes `stored`
/// (`symbols`: its file's symbol table, if it has one).
pub fn decode_chunk(
    kind: ValueKind,
    e: &Entry,
    stored: &[u8],
    symbols: Option<&Symbols>,
) -> Result<Decoded, Broken> {
    let rows = e.rows as usize;
    match kind {
        ValueKind::Fixed(dtype) => {
            let out_len = if dtype == DType::Bool {
                rows.div_ceil(8)
            } else {
                rows * dtype.itemsize()
            };
            let mut out = alloc(out_len)?;
            let validity = decode_fixed_into(dtype, e, stored, out.as_mut_slice())?;
            Ok(Decoded {
                rows,
                kind,
                values: out,
                offsets: Vec::new(),
                validity,
                null_count: e.null_count as usize,
            })
        }
        ValueKind::Utf8 | ValueKind::Binary if e.encoding() == Encoding::Grouped => {
            let st = split(e, stored)?;
            let mut offsets = vec![0i32; rows + 1];
            let mut values = alloc(e.text_size as usize)?;
            decode_grouped_into(e, &st, symbols, values.as_mut_slice(), &mut offsets)?;
            check_values(kind, e, values.as_slice(), &offsets, st.validity.as_deref())?;
            Ok(Decoded {
                rows,
                kind,
                values,
                offsets,
                validity: st.validity,
                null_count: e.null_count as usize,
            })
        }
        ValueKind::Utf8 | ValueKind::Binary => {
            let st = split(e, stored)?;
            let mut offsets = vec![0i32; rows + 1];
            let values = if e.flags & FLAG_VALUES_ZSTD != 0 {
                Aligned::decompress(st.values, e.values_size as usize)?
            } else {
                let mut v = alloc(e.values_size as usize)?;
                v.as_mut_slice().copy_from_slice(st.values);
                v
            };
            bytes_offsets(e, &st, &mut offsets, 0)?;
            check_values(kind, e, values.as_slice(), &offsets, st.validity.as_deref())?;
            Ok(Decoded {
                rows,
                kind,
                values,
                offsets,
                validity: st.validity,
                null_count: e.null_count as usize,
            })
        }
    }
}

/// Decodes the chunk `e` of numbers of `dtype` from `stored` into `out`
/// (exactly its rows' bytes; booleans: bits), null rows zero, everything
/// its entry promises checked; returns its validity bits (None without
/// nulls).
pub fn decode_fixed_into(
    dtype: DType,
    e: &Entry,
    stored: &[u8],
    out: &mut [u8],
) -> Result<Option<Vec<u8>>, Broken> {
    let st = split(e, stored)?;
    let rows = st.rows;
    let w = dtype.itemsize();
    let size = e.values_size as usize;
    let values_zstd = e.flags & FLAG_VALUES_ZSTD != 0;
    let mut narrowed = None;
    match e.encoding() {
        Encoding::Plain | Encoding::Bits => stream_into(st.values, values_zstd, out, "values")?,
        enc => stored_values(st.values, values_zstd, size, |src| {
            if enc == Encoding::Shuffled {
                num::unshuffle(src, w, rows, out);
            } else if enc == Encoding::Packed {
                let b = packed_bits(e, src, rows)?;
                let lo = Num::from_bytes(dtype, e.min.number_bytes());
                narrowed = Some(num::widen_packed(dtype, src, b, rows, lo, out));
            } else {
                let lo = Num::from_bytes(dtype, e.min.number_bytes());
                narrowed = Some(num::widen(dtype, src, e.width as usize, rows, lo, out));
            }
            Ok(())
        })?,
    }
    let valid_bools = st.valid_bools();
    if let Some(valid) = &valid_bools {
        // Null rows read as zeros whatever was stored.
        if dtype == DType::Bool {
            for (i, _) in valid.iter().enumerate().filter(|(_, v)| !**v) {
                out[i / 8] &= !(1 << (i % 8));
            }
        } else {
            for (i, _) in valid.iter().enumerate().filter(|(_, v)| !**v) {
                out[i * w..(i + 1) * w].fill(0);
            }
        }
    }
    if dtype == DType::Bool && !rows.is_multiple_of(8) && out[rows / 8] >> (rows % 8) != 0 {
        return Err("its value bits past the last row are not zero".into());
    }
    check_numbers(dtype, e, out, rows, valid_bools.as_deref(), narrowed)?;
    Ok(st.validity)
}

/// The bits a value of the packed chunk `e` takes, once its values `src`
/// are checked: exactly their packed size, the bits past the last zero.
fn packed_bits(e: &Entry, src: &[u8], rows: usize) -> Result<usize, Broken> {
    let b = e.width as usize;
    if !(1..=32).contains(&b) || src.len() != num::packed_size(rows, b) {
        return Err(format!(
            "it is packed at {b} bits a value, with {} bytes of values for {rows} rows",
            src.len()
        ));
    }
    let used = rows * b % 8;
    if used != 0 && src[src.len() - 1] >> used != 0 {
        return Err("its packed bits past the last row are not zero".into());
    }
    Ok(b)
}

/// A narrowed chunk's values (each row's value minus the chunk's minimum)
/// as unsigned integers of the chunk's width.
#[cfg(feature = "arrow")]
pub enum Narrow {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
}

/// The smallest and largest of `v`'s rows that are valid (every row when
/// `valid` is None), in a loop of their own (which vectorises without
/// nulls).
#[cfg(feature = "arrow")]
fn span_of<T: Copy + Ord + Into<u64>>(v: &[T], valid: Option<&[bool]>) -> (u64, u64) {
    let (lo, hi) = match valid {
        None => (v.iter().copied().min(), v.iter().copied().max()),
        Some(ok) => {
            let kept = || v.iter().zip(ok).filter(|(_, &o)| o).map(|(&x, _)| x);
            (kept().min(), kept().max())
        }
    };
    match (lo, hi) {
        (Some(a), Some(b)) => (a.into(), b.into()),
        _ => (u64::MAX, 0),
    }
}

/// The narrowed values of the chunk `e` of integers of `dtype` (encoding
/// narrowed: unsigned integers of the entry's width minus its minimum,
/// shuffled), decompressed and put back together but not widened, and its
/// validity bits: everything a read checks (the checksum, the sizes, the
/// null count, and that the values span exactly the recorded bounds).
#[cfg(feature = "arrow")]
pub fn decode_narrowed(
    dtype: DType,
    e: &Entry,
    stored: &[u8],
) -> Result<(Narrow, Option<Vec<u8>>), Broken> {
    let st = split(e, stored)?;
    let size = e.values_size as usize;
    let rows = st.rows;
    let valid = st.valid_bools();
    let valid = valid.as_deref();
    let zstd = e.flags & FLAG_VALUES_ZSTD != 0;
    if e.encoding() == Encoding::Packed {
        let (narrow, span) = stored_values(st.values, zstd, size, |src| {
            let b = packed_bits(e, src, rows)?;
            // Into the narrowest lanes that hold `b` bits.
            macro_rules! lanes {
                ($t:ty, $variant:ident) => {{
                    let mut v = vec![<$t>::default(); rows];
                    num::unpack(src, b, &mut v);
                    let span = span_of(&v, valid);
                    (Narrow::$variant(v), span)
                }};
            }
            Ok(match b {
                1..=8 => lanes!(u8, U8),
                9..=16 => lanes!(u16, U16),
                _ => lanes!(u32, U32),
            })
        })?;
        check_span(dtype, e, span)?;
        return Ok((narrow, st.validity));
    }
    let k = e.width as usize;
    if !matches!(k, 1 | 2 | 4) || size != k * rows {
        return Err(format!(
            "it is narrowed to {k} bytes a value, with {size} bytes of values for {rows} rows"
        ));
    }
    let (narrow, span) = stored_values(st.values, zstd, size, |planes| {
        if planes.len() != size {
            return Err(format!(
                "its values take {} bytes, not {size}",
                planes.len()
            ));
        }
        let plane = |j: usize| &planes[j * rows..(j + 1) * rows];
        Ok(match k {
            1 => {
                let v = planes.to_vec();
                let span = span_of(&v, valid);
                (Narrow::U8(v), span)
            }
            2 => {
                let v: Vec<u16> = plane(0)
                    .iter()
                    .zip(plane(1))
                    .map(|(&a, &b)| a as u16 | (b as u16) << 8)
                    .collect();
                let span = span_of(&v, valid);
                (Narrow::U16(v), span)
            }
            _ => {
                let v: Vec<u32> = plane(0)
                    .iter()
                    .zip(plane(1))
                    .zip(plane(2))
                    .zip(plane(3))
                    .map(|(((&a, &b), &c), &d)| {
                        a as u32 | (b as u32) << 8 | (c as u32) << 16 | (d as u32) << 24
                    })
                    .collect();
                let span = span_of(&v, valid);
                (Narrow::U32(v), span)
            }
        })
    })?;
    check_span(dtype, e, span)?;
    Ok((narrow, st.validity))
}

/// The span `lo..=hi` a narrowed or packed chunk's valid values take
/// above its minimum is the span its statistics record.
#[cfg(feature = "arrow")]
fn check_span(dtype: DType, e: &Entry, (lo, hi): (u64, u64)) -> Result<(), Broken> {
    let (min, max) = (
        Num::from_bytes(dtype, e.min.number_bytes()),
        Num::from_bytes(dtype, e.max.number_bytes()),
    );
    let span = match (min, max) {
        (Num::I(a), Num::I(b)) => (b as i128 - a as i128) as u128,
        (Num::U(a), Num::U(b)) => (b as u128).wrapping_sub(a as u128),
        _ => u128::MAX,
    };
    if lo != 0 || hi as u128 != span {
        return Err(format!(
            "its values span {lo}..={hi} above its minimum, but its statistics say 0..={span}"
        ));
    }
    Ok(())
}

/// Decodes the chunk `e` of text or bytes from `stored`: its values into
/// `values` (exactly its values' bytes) and the end of each row's value,
/// plus `base`, into `ends` (one per row), everything its entry promises
/// checked; returns its validity bits (None without nulls).
#[cfg(feature = "arrow")]
pub fn decode_bytes_into(
    kind: ValueKind,
    e: &Entry,
    stored: &[u8],
    symbols: Option<&Symbols>,
    values: &mut [u8],
    ends: &mut [i32],
    base: i32,
) -> Result<Option<Vec<u8>>, Broken> {
    let st = split(e, stored)?;
    let mut offsets = vec![0i32; st.rows + 1];
    if e.encoding() == Encoding::Grouped {
        decode_grouped_into(e, &st, symbols, values, &mut offsets)?;
    } else {
        stream_into(st.values, e.flags & FLAG_VALUES_ZSTD != 0, values, "values")?;
        bytes_offsets(e, &st, &mut offsets, 0)?;
    }
    check_values(kind, e, values, &offsets, st.validity.as_deref())?;
    for (o, &rel) in ends.iter_mut().zip(&offsets[1..]) {
        *o = base + rel;
    }
    Ok(st.validity)
}

/// A text or bytes chunk's offsets (`rows + 1`, plus `base`) from its
/// lengths stream, checked to add up to its values and to give null rows
/// no bytes.
fn bytes_offsets(
    e: &Entry,
    st: &Streams<'_>,
    offsets: &mut [i32],
    base: i32,
) -> Result<(), Broken> {
    let rows = st.rows;
    let k = e.lengths_width as usize;
    let mut lengths = vec![0u8; rows * k];
    SCRATCH.with(|s| -> Result<(), Broken> {
        let mut s = s.borrow_mut();
        if s.len() < lengths.len() {
            s.resize(lengths.len(), 0);
        }
        let tmp = &mut s[..lengths.len()];
        stream_into(st.lengths, e.flags & FLAG_LENGTHS_ZSTD != 0, tmp, "lengths")?;
        if k > 1 {
            num::unshuffle(tmp, k, rows, &mut lengths);
        } else {
            lengths.copy_from_slice(tmp);
        }
        Ok(())
    })?;
    // A running sum of the lengths (each below 2^32; the sum is checked
    // against the values' size, below 2^31, before it is used).
    let mut at = 0u64;
    offsets[0] = base;
    match k {
        1 => {
            for (o, &n) in offsets[1..].iter_mut().zip(&lengths) {
                at += n as u64;
                *o = base.wrapping_add(at as i32);
            }
        }
        _ => {
            for (o, c) in offsets[1..].iter_mut().zip(lengths.chunks_exact(k)) {
                let mut b = [0u8; 4];
                b[..k].copy_from_slice(c);
                at += u32::from_le_bytes(b) as u64;
                *o = base.wrapping_add(at as i32);
            }
        }
    }
    if at != e.values_size as u64 {
        return Err(format!(
            "its lengths add up to {at} bytes, but its values take {}",
            e.values_size
        ));
    }
    if let Some(valid) = st.valid_bools() {
        if let Some(i) = (0..rows).find(|&i| !valid[i] && offsets[i + 1] != offsets[i]) {
            return Err(format!(
                "its null row {i} has a value of {} bytes",
                offsets[i + 1] - offsets[i]
            ));
        }
    }
    Ok(())
}

/// The checks of a decoded text or bytes chunk: UTF-8 (text), and bounds
/// exactly as its values give them. `offsets` start at 0.
fn check_values(
    kind: ValueKind,
    e: &Entry,
    values: &[u8],
    offsets: &[i32],
    validity: Option<&[u8]>,
) -> Result<(), Broken> {
    if kind == ValueKind::Utf8 {
        check_utf8(values, offsets)?;
    }
    check_bytes(values, offsets, validity, e)
}

/// Every value of a text chunk is UTF-8.
fn check_utf8(all: &[u8], offsets: &[i32]) -> Result<(), Broken> {
    if let Err(err) = std::str::from_utf8(all) {
        let at = err.valid_up_to() as i32;
        let row = offsets.partition_point(|&o| o <= at).saturating_sub(1);
        return Err(format!("its row {row} is not valid UTF-8"));
    }
    for (row, &o) in offsets.iter().enumerate() {
        if all.get(o as usize).is_some_and(|&b| b & 0xC0 == 0x80) {
            return Err(format!("its row {row} starts inside a UTF-8 character"));
        }
    }
    Ok(())
}

fn bound_name(b: Option<&Bound>) -> String {
    match b {
        None => "none".into(),
        Some(b) => format!("{:?}", String::from_utf8_lossy(b.bytes())),
    }
}

/// The first 8 bytes of `v` (zero-padded) as a big-endian integer: when
/// two keys differ they order as the values do.
#[inline]
fn prefix_key(v: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = v.len().min(8);
    b[..n].copy_from_slice(&v[..n]);
    u64::from_be_bytes(b)
}

/// A text or bytes chunk's bounds are the ones its values give.
fn check_bytes(
    values: &[u8],
    offsets: &[i32],
    validity: Option<&[u8]>,
    e: &Entry,
) -> Result<(), Broken> {
    let mut lo: Option<(u64, &[u8])> = None;
    let mut hi: Option<(u64, &[u8])> = None;
    for i in 0..offsets.len() - 1 {
        if validity.is_some_and(|v| v[i / 8] & (1 << (i % 8)) == 0) {
            continue;
        }
        let v = &values[offsets[i] as usize..offsets[i + 1] as usize];
        let k = prefix_key(v);
        match lo {
            Some((lk, lv)) if k > lk || (k == lk && v >= lv) => {}
            _ => lo = Some((k, v)),
        }
        match hi {
            Some((hk, hv)) if k < hk || (k == hk && v <= hv) => {}
            _ => hi = Some((k, v)),
        }
    }
    let want_lo = lo.map(|(_, v)| Bound::lower(v));
    let want_hi = hi.and_then(|(_, v)| Bound::upper(v));
    if want_lo.as_ref() != e.min() || want_hi.as_ref() != e.max() {
        return Err(format!(
            "its values lie in [{}, {}], but its statistics say [{}, {}]",
            bound_name(want_lo.as_ref()),
            bound_name(want_hi.as_ref()),
            bound_name(e.min()),
            bound_name(e.max())
        ));
    }
    Ok(())
}

/// A chunk of numbers' minimum and maximum are its statistics.
fn check_numbers(
    dtype: DType,
    e: &Entry,
    out: &[u8],
    rows: usize,
    valid: Option<&[bool]>,
    narrowed: Option<(u64, u64)>,
) -> Result<(), Broken> {
    let stats = e.min().map(|lo| {
        (
            Num::from_bytes(dtype, lo.number_bytes()),
            Num::from_bytes(dtype, e.max.number_bytes()),
        )
    });
    if let (Some((dmin, dmax)), None, Some((lo, hi))) = (narrowed, valid, stats) {
        // Narrowed without nulls: the span seen is the span recorded.
        let span = match (lo, hi) {
            (Num::I(a), Num::I(b)) => Some((b as i128 - a as i128) as u128),
            (Num::U(a), Num::U(b)) => (b as u128).checked_sub(a as u128),
            _ => None,
        };
        if dmin == 0 && span == Some(dmax as u128) {
            return Ok(());
        }
    }
    let actual = if dtype == DType::Bool {
        let bytes: Vec<u8> = (0..rows).map(|i| (out[i / 8] >> (i % 8)) & 1).collect();
        num::min_max(dtype, &bytes, valid)
    } else {
        num::min_max(dtype, out, valid)
    };
    let same = match (actual, stats) {
        (None, None) => true,
        (Some((a, b)), Some((c, d))) => a.same(&c) && b.same(&d),
        _ => false,
    };
    if !same {
        let show = |v: Option<(Num, Num)>| match v {
            None => "none".to_string(),
            Some((a, b)) => format!("[{a:?}, {b:?}]"),
        };
        return Err(format!(
            "its values lie in {}, but its statistics say {}",
            show(actual),
            show(stats)
        ));
    }
    Ok(())
}
