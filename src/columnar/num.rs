//! Numbers in a chunk: their statistics (minimum and maximum in the
//! column's order: integers as integers, floats in IEEE total order, which
//! is Arrow's), narrowing integers to their span and widening them back,
//! and undoing the byte shuffle.

use crate::schema::DType;

/// A number as the statistics hold it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    /// Signed integers.
    I(i64),
    /// Unsigned integers and booleans.
    U(u64),
    /// Floats, widened to f64 (exactly).
    F(f64),
}

impl Num {
    /// The 8 bytes a bound holds.
    pub fn to_bytes(self) -> [u8; 8] {
        match self {
            Num::I(v) => v.to_le_bytes(),
            Num::U(v) => v.to_le_bytes(),
            Num::F(v) => v.to_bits().to_le_bytes(),
        }
    }

    /// The number of a column of `dtype` that a bound's 8 bytes hold.
    pub fn from_bytes(dtype: DType, b: [u8; 8]) -> Num {
        match dtype {
            DType::F16 | DType::F32 | DType::F64 => Num::F(f64::from_bits(u64::from_le_bytes(b))),
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => Num::I(i64::from_le_bytes(b)),
            _ => Num::U(u64::from_le_bytes(b)),
        }
    }

    /// Whether the two are the same number (floats: the same bits).
    pub fn same(&self, other: &Num) -> bool {
        self.to_bytes() == other.to_bytes()
    }
}

/// An IEEE half float's bits as an f64 (exact).
pub fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1F) as i32;
    let frac = (h & 0x3FF) as f64;
    match exp {
        0 => sign * frac * 2f64.powi(-24),
        0x1F if frac == 0.0 => sign * f64::INFINITY,
        0x1F => {
            // NaN: keep the sign and the payload's top bits.
            let bits =
                ((h as u64 & 0x8000) << 48) | 0x7FF8_0000_0000_0000 | ((h as u64 & 0x1FF) << 42);
            f64::from_bits(bits)
        }
        _ => sign * (1.0 + frac / 1024.0) * 2f64.powi(exp - 15),
    }
}

/// Value `i` of little-endian `bytes` of `dtype`.
#[inline]
pub fn value(dtype: DType, bytes: &[u8], i: usize) -> Num {
    macro_rules! at {
        ($t:ty) => {{
            const W: usize = std::mem::size_of::<$t>();
            <$t>::from_le_bytes(bytes[i * W..(i + 1) * W].try_into().expect("width"))
        }};
    }
    match dtype {
        DType::Bool => Num::U(u64::from(bytes[i] != 0)),
        DType::I8 => Num::I(at!(i8) as i64),
        DType::I16 => Num::I(at!(i16) as i64),
        DType::I32 => Num::I(at!(i32) as i64),
        DType::I64 => Num::I(at!(i64)),
        DType::U8 => Num::U(at!(u8) as u64),
        DType::U16 => Num::U(at!(u16) as u64),
        DType::U32 => Num::U(at!(u32) as u64),
        DType::U64 => Num::U(at!(u64)),
        DType::F16 => Num::F(f16_to_f64(at!(u16))),
        DType::F32 => Num::F(at!(f32) as f64),
        DType::F64 => Num::F(at!(f64)),
    }
}

/// An f32's bits as an i32 that orders as IEEE total order.
#[inline]
fn key32(bits: u32) -> i32 {
    let x = bits as i32;
    x ^ (((x >> 31) as u32) >> 1) as i32
}

#[inline]
fn unkey32(k: i32) -> u32 {
    (k ^ (((k >> 31) as u32) >> 1) as i32) as u32
}

#[inline]
fn key64(bits: u64) -> i64 {
    let x = bits as i64;
    x ^ (((x >> 63) as u64) >> 1) as i64
}

#[inline]
fn unkey64(k: i64) -> u64 {
    (k ^ (((k >> 63) as u64) >> 1) as i64) as u64
}

#[inline]
fn key16(bits: u16) -> i16 {
    let x = bits as i16;
    x ^ (((x >> 15) as u16) >> 1) as i16
}

#[inline]
fn unkey16(k: i16) -> u16 {
    (k ^ (((k >> 15) as u16) >> 1) as i16) as u16
}

/// The smallest and largest of `keys(i)` for the valid rows (`valid`, or
/// every row), None when none is: a plain loop over every row when all are
/// valid (which vectorises), the valid ones otherwise.
#[inline]
fn fold<K: Ord + Copy>(
    rows: usize,
    valid: Option<&[bool]>,
    key: impl Fn(usize) -> K,
) -> Option<(K, K)> {
    match valid {
        None => {
            if rows == 0 {
                return None;
            }
            let first = key(0);
            let (mut lo, mut hi) = (first, first);
            for i in 1..rows {
                let k = key(i);
                lo = lo.min(k);
                hi = hi.max(k);
            }
            Some((lo, hi))
        }
        Some(valid) => {
            let mut acc: Option<(K, K)> = None;
            for i in (0..rows).filter(|&i| valid[i]) {
                let k = key(i);
                acc = Some(match acc {
                    None => (k, k),
                    Some((lo, hi)) => (lo.min(k), hi.max(k)),
                });
            }
            acc
        }
    }
}

/// The minimum and maximum of the valid values of `bytes` (`rows` values
/// of `dtype`), None when no row is valid.
/// [`fold`] over the words of a slice: without nulls, one pass over the
/// slice itself (no index to check, so it vectorises).
fn fold_words<T: Copy, K: Ord + Copy>(
    words: &[T],
    valid: Option<&[bool]>,
    key: impl Fn(T) -> K,
) -> Option<(K, K)> {
    match valid {
        None => {
            let (&first, rest) = words.split_first()?;
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked just above).
                return Some(unsafe { span_avx2(key(first), rest, &key) });
            }
            Some(span(key(first), rest, &key))
        }
        Some(_) => fold(words.len(), valid, |i| key(words[i])),
    }
}

/// The smallest and largest of `first` and the keys of `rest`.
#[inline(always)]
fn span<T: Copy, K: Ord + Copy>(first: K, rest: &[T], key: &impl Fn(T) -> K) -> (K, K) {
    rest.iter().fold((first, first), |(lo, hi), &w| {
        let k = key(w);
        (lo.min(k), hi.max(k))
    })
}

/// [`span`] compiled for AVX2 (native 32- and 16-bit min and max).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn span_avx2<T: Copy, K: Ord + Copy>(first: K, rest: &[T], key: &impl Fn(T) -> K) -> (K, K) {
    span(first, rest, key)
}

pub fn min_max(dtype: DType, bytes: &[u8], valid: Option<&[bool]>) -> Option<(Num, Num)> {
    let rows = bytes.len() / dtype.itemsize();
    macro_rules! typed {
        ($t:ty, $key:expr, $num:expr) => {{
            const W: usize = std::mem::size_of::<$t>();
            // SAFETY: every bit pattern is a valid value of these integer
            // types; the middle part is aligned for them.
            let (head, mid, tail) = unsafe { bytes.align_to::<$t>() };
            let copied: Vec<$t>;
            let words: &[$t] = if head.is_empty() && tail.is_empty() {
                mid
            } else {
                copied = bytes
                    .chunks_exact(W)
                    .map(|c| <$t>::from_le_bytes(c.try_into().expect("width")))
                    .collect();
                &copied
            };
            fold_words(&words[..rows], valid, |w: $t| $key(<$t>::from_le(w)))
                .map(|(lo, hi)| ($num(lo), $num(hi)))
        }};
    }
    match dtype {
        DType::Bool => fold(rows, valid, |i| u8::from(bytes[i] != 0))
            .map(|(lo, hi)| (Num::U(lo as u64), Num::U(hi as u64))),
        DType::U8 => {
            fold(rows, valid, |i| bytes[i]).map(|(lo, hi)| (Num::U(lo as u64), Num::U(hi as u64)))
        }
        DType::I8 => fold(rows, valid, |i| bytes[i] as i8)
            .map(|(lo, hi)| (Num::I(lo as i64), Num::I(hi as i64))),
        DType::I16 => typed!(i16, |v| v, |k: i16| Num::I(k as i64)),
        DType::I32 => typed!(i32, |v| v, |k: i32| Num::I(k as i64)),
        DType::I64 => typed!(i64, |v| v, Num::I),
        DType::U16 => typed!(u16, |v| v, |k: u16| Num::U(k as u64)),
        DType::U32 => typed!(u32, |v| v, |k: u32| Num::U(k as u64)),
        DType::U64 => typed!(u64, |v| v, Num::U),
        DType::F16 => typed!(u16, key16, |k: i16| Num::F(f16_to_f64(unkey16(k)))),
        DType::F32 => typed!(u32, key32, |k: i32| Num::F(
            f32::from_bits(unkey32(k)) as f64
        )),
        DType::F64 => typed!(u64, key64, |k: i64| Num::F(f64::from_bits(unkey64(k)))),
    }
}

/// The `k` byte streams of `n` shuffled values, as one unsigned integer
/// each, handed to `put(i, value)` in order. One loop per width, each over
/// plain slices, so that it vectorises.
#[inline(always)]
fn gather_streams(src: &[u8], k: usize, n: usize, mut put: impl FnMut(usize, u64)) {
    match k {
        1 => {
            for (i, &b) in src[..n].iter().enumerate() {
                put(i, b as u64);
            }
        }
        2 => {
            let (s0, s1) = (&src[..n], &src[n..2 * n]);
            for i in 0..n {
                put(i, s0[i] as u64 | (s1[i] as u64) << 8);
            }
        }
        4 => {
            let (s0, s1, s2, s3) = (
                &src[..n],
                &src[n..2 * n],
                &src[2 * n..3 * n],
                &src[3 * n..4 * n],
            );
            for i in 0..n {
                put(
                    i,
                    s0[i] as u64
                        | (s1[i] as u64) << 8
                        | (s2[i] as u64) << 16
                        | (s3[i] as u64) << 24,
                );
            }
        }
        _ => {
            let s: [&[u8]; 8] = std::array::from_fn(|b| &src[b * n..(b + 1) * n]);
            for i in 0..n {
                let mut v = 0u64;
                for (b, sb) in s.iter().enumerate() {
                    v |= (sb[i] as u64) << (8 * b);
                }
                put(i, v);
            }
        }
    }
}

/// `out` as values of `T` when it is aligned for them (decode buffers are).
fn as_words<T>(out: &mut [u8]) -> Option<&mut [T]> {
    // SAFETY: only integer types are asked for, for which every bit
    // pattern is valid; the middle part is aligned for `T`.
    let (head, mid, tail) = unsafe { out.align_to_mut::<T>() };
    (head.is_empty() && tail.is_empty()).then_some(mid)
}

/// Undoes [`narrow`]: `n` shuffled unsigned integers of `k` bytes in `src`
/// plus `lo`, written as `dtype` into `out` (`n * width` bytes). Returns the
/// smallest and largest narrowed value (over every row).
pub fn widen(dtype: DType, src: &[u8], k: usize, n: usize, lo: Num, out: &mut [u8]) -> (u64, u64) {
    let w = dtype.itemsize();
    let base = match lo {
        Num::I(v) => v as u64,
        Num::U(v) => v,
        Num::F(_) => 0,
    };
    // The span seen, in a loop of its own (which vectorises).
    let (dmin, dmax) = match k {
        1 => src[..n]
            .iter()
            .fold((u8::MAX, 0u8), |(a, b), &v| (a.min(v), b.max(v))),
        _ => (0, 0),
    };
    let span = match k {
        1 => (dmin as u64, dmax as u64),
        2 => {
            let (s0, s1) = (&src[..n], &src[n..2 * n]);
            let (mut a, mut b) = (u16::MAX, 0u16);
            for (&x0, &x1) in s0.iter().zip(s1) {
                let d = x0 as u16 | (x1 as u16) << 8;
                a = a.min(d);
                b = b.max(d);
            }
            (a as u64, b as u64)
        }
        _ => {
            let (s0, s1) = (&src[..n], &src[n..2 * n]);
            let (s2, s3) = (&src[2 * n..3 * n], &src[3 * n..4 * n]);
            let (mut a, mut b) = (u32::MAX, 0u32);
            for (((&x0, &x1), &x2), &x3) in s0.iter().zip(s1).zip(s2).zip(s3) {
                let d = x0 as u32 | (x1 as u32) << 8 | (x2 as u32) << 16 | (x3 as u32) << 24;
                a = a.min(d);
                b = b.max(d);
            }
            (a as u64, b as u64)
        }
    };
    macro_rules! run {
        ($t:ty) => {{
            let base = base as $t;
            match as_words::<$t>(out) {
                Some(words) => match k {
                    1 => {
                        for (o, &v) in words.iter_mut().zip(&src[..n]) {
                            *o = base.wrapping_add(v as $t).to_le();
                        }
                    }
                    2 => {
                        let (s0, s1) = (&src[..n], &src[n..2 * n]);
                        for ((o, &a), &b) in words.iter_mut().zip(s0).zip(s1) {
                            *o = base.wrapping_add(a as $t | (b as $t) << 8).to_le();
                        }
                    }
                    _ => gather_streams(src, k, n, |i, d| {
                        words[i] = base.wrapping_add(d as $t).to_le()
                    }),
                },
                None => gather_streams(src, k, n, |i, d| {
                    out[i * w..(i + 1) * w]
                        .copy_from_slice(&(base.wrapping_add(d as $t)).to_le_bytes()[..w]);
                }),
            }
        }};
    }
    match w {
        2 => run!(u16),
        4 => run!(u32),
        _ => run!(u64),
    }
    span
}

/// The bits a span of `span` needs (0 for a span of 0).
pub fn bits_for(span: u64) -> usize {
    (u64::BITS - span.leading_zeros()) as usize
}

/// Bytes of `n` values packed at `b` bits each.
pub fn packed_size(n: usize, b: usize) -> usize {
    (n * b).div_ceil(8)
}

/// An unsigned integer a packed value is unpacked into.
pub trait Lane: Copy + Default {
    fn from_u32(v: u32) -> Self;
}

macro_rules! lane {
    ($($t:ty),*) => {$(
        impl Lane for $t {
            #[inline(always)]
            fn from_u32(v: u32) -> Self {
                v as $t
            }
        }
    )*};
}
lane!(u8, u16, u32, u64);

/// Eight values of `B` bits starting at bit 0 of `group` into `out`
/// (`group` holds them and at least 8 bytes past the last one's start).
#[inline(always)]
fn unpack8<const B: usize, T: Lane>(group: &[u8; 40], out: &mut [T; 8]) {
    let mask = (1u64 << B) - 1;
    for (j, o) in out.iter_mut().enumerate() {
        let bit = j * B;
        let at = bit / 8;
        let word = u64::from_le_bytes(group[at..at + 8].try_into().expect("8 bytes"));
        *o = T::from_u32(((word >> (bit % 8)) & mask) as u32);
    }
}

fn unpack_b<const B: usize, T: Lane>(src: &[u8], out: &mut [T]) {
    // Groups of eight values take exactly B bytes; those with 40 bytes of
    // the stream from their start are read in place, the rest (at most
    // the last two groups and a partial one) through a zeroed copy.
    let groups = out.len() / 8;
    let direct = groups.min(src.len().saturating_sub(40) / B + usize::from(src.len() >= 40));
    let (head, tail) = out.split_at_mut(direct * 8);
    for (g, o) in head.chunks_exact_mut(8).enumerate() {
        let at = g * B;
        let group: &[u8; 40] = src[at..at + 40].try_into().expect("40 bytes");
        unpack8::<B, T>(group, o.try_into().expect("8 values"));
    }
    for (g, o) in tail.chunks_mut(8).enumerate() {
        let at = (direct + g) * B;
        let mut buf = [0u8; 40];
        let end = src.len().min(at + 40);
        buf[..end - at].copy_from_slice(&src[at..end]);
        let mut vals = [T::default(); 8];
        unpack8::<B, T>(&buf, &mut vals);
        o.copy_from_slice(&vals[..o.len()]);
    }
}

/// Undoes [`pack`]: the `out.len()` values of `b` bits (1 to 32) in `src`
/// (at least [`packed_size`] bytes) into `out`.
pub fn unpack<T: Lane>(src: &[u8], b: usize, out: &mut [T]) {
    debug_assert!(src.len() >= packed_size(out.len(), b));
    macro_rules! by_width {
        ($($w:literal)*) => {
            match b {
                $($w => unpack_b::<$w, T>(src, out),)*
                _ => unreachable!("packed widths are 1 to 32 bits"),
            }
        };
    }
    by_width!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32)
}

/// The smallest and largest of `v`.
fn span_words<T: Copy + Ord + Into<u64>>(v: &[T]) -> (u64, u64) {
    match (v.iter().copied().min(), v.iter().copied().max()) {
        (Some(a), Some(b)) => (a.into(), b.into()),
        _ => (u64::MAX, 0),
    }
}

/// Undoes [`pack`] for a chunk: `n` values of `b` bits in `src` plus `lo`,
/// written as `dtype` into `out` (`n * width` bytes). Returns the smallest
/// and largest packed value (over every row).
pub fn widen_packed(
    dtype: DType,
    src: &[u8],
    b: usize,
    n: usize,
    lo: Num,
    out: &mut [u8],
) -> (u64, u64) {
    let base = match lo {
        Num::I(v) => v as u64,
        Num::U(v) => v,
        Num::F(_) => 0,
    };
    // Unpacked to the narrowest lanes first, where the span is cheapest
    // to find, then widened.
    macro_rules! lanes {
        ($n:ty) => {{
            let mut v = vec![<$n>::default(); n];
            unpack(src, b, &mut v);
            put_widened(&v, base, dtype.itemsize(), out);
            span_words(&v)
        }};
    }
    match b {
        0..=8 => lanes!(u8),
        9..=16 => lanes!(u16),
        _ => lanes!(u32),
    }
}

/// `v` plus `base` as little-endian integers of `w` bytes (2, 4 or 8) into
/// `out`.
fn put_widened<N: Copy + Into<u64>>(v: &[N], base: u64, w: usize, out: &mut [u8]) {
    macro_rules! run {
        ($t:ty) => {{
            let base = base as $t;
            match as_words::<$t>(&mut out[..v.len() * w]) {
                Some(words) => {
                    for (o, &d) in words.iter_mut().zip(v) {
                        *o = base.wrapping_add(d.into() as $t).to_le();
                    }
                }
                None => {
                    for (i, &d) in v.iter().enumerate() {
                        out[i * w..(i + 1) * w]
                            .copy_from_slice(&base.wrapping_add(d.into() as $t).to_le_bytes());
                    }
                }
            }
        }};
    }
    match w {
        1 => run!(u8),
        2 => run!(u16),
        4 => run!(u32),
        _ => run!(u64),
    }
}

/// Four byte streams put back together as little-endian u32 words.
#[inline(always)]
fn unshuffle4(s: [&[u8]; 4], words: &mut [u32]) {
    let pairs = s[0].iter().zip(s[1]).zip(s[2].iter().zip(s[3]));
    for (o, ((&a, &b), (&c, &d))) in words.iter_mut().zip(pairs) {
        *o = (a as u32 | (b as u32) << 8 | (c as u32) << 16 | (d as u32) << 24).to_le();
    }
}

/// [`unshuffle4`] compiled for AVX2 (twice the lanes of the baseline).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn unshuffle4_avx2(s: [&[u8]; 4], words: &mut [u32]) {
    unshuffle4(s, words)
}

/// Undoes the byte shuffle: `n` values of `w` bytes from `src` into `out`.
pub fn unshuffle(src: &[u8], w: usize, n: usize, out: &mut [u8]) {
    macro_rules! run {
        ($t:ty) => {{
            match as_words::<$t>(out) {
                Some(words) => gather_streams(src, w, n, |i, v| words[i] = (v as $t).to_le()),
                None => gather_streams(src, w, n, |i, v| {
                    out[i * w..(i + 1) * w].copy_from_slice(&v.to_le_bytes()[..w])
                }),
            }
        }};
    }
    match w {
        2 => run!(u16),
        4 => {
            // Four streams into u32 words, without a closure in the loop.
            match as_words::<u32>(out) {
                Some(words) => {
                    let s: [&[u8]; 4] = std::array::from_fn(|j| &src[j * n..(j + 1) * n]);
                    let words = &mut words[..n];
                    #[cfg(target_arch = "x86_64")]
                    if std::arch::is_x86_feature_detected!("avx2") {
                        // SAFETY: the CPU has AVX2 (checked just above).
                        unsafe { unshuffle4_avx2(s, words) };
                        return;
                    }
                    unshuffle4(s, words);
                }
                None => run!(u32),
            }
        }
        8 => run!(u64),
        _ => {
            for i in 0..n {
                for b in 0..w {
                    out[i * w + b] = src[b * n + i];
                }
            }
        }
    }
}

/// Writers of versions 1 and 2 (which this release reads but no longer
/// writes), kept to test their readers.
#[cfg(test)]
mod old {
    use super::*;

    /// Appends `bytes` (integers of `dtype`) minus `lo` as unsigned integers
    /// of `k` bytes, shuffled when `k > 1`; null rows as 0.
    pub fn narrow(
        dtype: DType,
        bytes: &[u8],
        lo: Num,
        k: usize,
        valid: Option<&[bool]>,
        out: &mut Vec<u8>,
    ) {
        let w = dtype.itemsize();
        let n = bytes.len() / w;
        let start = out.len();
        out.resize(start + n * k, 0);
        let dst = &mut out[start..];
        for i in 0..n {
            if valid.is_some_and(|v| !v[i]) {
                continue;
            }
            let d: u64 = match (value(dtype, bytes, i), lo) {
                (Num::I(v), Num::I(l)) => (v as i128 - l as i128) as u64,
                (Num::U(v), Num::U(l)) => v - l,
                _ => unreachable!("only integers narrow"),
            };
            for b in 0..k {
                dst[b * n + i] = (d >> (8 * b)) as u8;
            }
        }
    }

    /// Appends the `n` narrowed values in `src` (shuffled unsigned integers of
    /// `k` bytes, as [`narrow`] writes them) packed at `b` bits each: value
    /// `i` at bits `i * b .. (i + 1) * b` of the stream, least significant bit
    /// first; the bits past the last value zero.
    pub fn pack(src: &[u8], k: usize, n: usize, b: usize, out: &mut Vec<u8>) {
        debug_assert!((1..=32).contains(&b));
        out.reserve(packed_size(n, b));
        let (mut acc, mut have) = (0u64, 0usize);
        gather_streams(src, k, n, |_, d| {
            debug_assert!(d >> b == 0);
            acc |= d << have;
            have += b;
            while have >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                have -= 8;
            }
        });
        if have > 0 {
            out.push(acc as u8);
        }
    }
}
#[cfg(test)]
use old::{narrow, pack};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves() {
        assert_eq!(f16_to_f64(0x3C00), 1.0);
        assert_eq!(f16_to_f64(0xC000), -2.0);
        assert_eq!(f16_to_f64(0x0001), 2f64.powi(-24));
        assert_eq!(f16_to_f64(0x7C00), f64::INFINITY);
        assert!(f16_to_f64(0x7E00).is_nan());
        assert_eq!(f16_to_f64(0x7BFF), 65504.0);
    }

    #[test]
    fn narrow_and_widen_round_trip() {
        let vals: Vec<i64> = vec![-5, 100, 7, -5, 300];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (lo, hi) = min_max(DType::I64, &bytes, None).unwrap();
        assert_eq!((lo, hi), (Num::I(-5), Num::I(300)));
        let mut out = Vec::new();
        narrow(DType::I64, &bytes, lo, 2, None, &mut out);
        let mut back = vec![0u8; bytes.len()];
        let (dmin, dmax) = widen(DType::I64, &out, 2, vals.len(), lo, &mut back);
        assert_eq!(back, bytes);
        assert_eq!((dmin, dmax), (0, 305));
    }

    #[test]
    fn pack_and_unpack_round_trip_at_every_width() {
        // Every width, with row counts around the 8-value groups, against
        // a bit-by-bit model of the layout.
        for b in 1..=32usize {
            for n in [0usize, 1, 7, 8, 9, 63, 64, 65, 1000] {
                let top = if b == 32 {
                    u32::MAX as u64
                } else {
                    (1u64 << b) - 1
                };
                let vals: Vec<u64> = (0..n as u64)
                    .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 17) & top)
                    .collect();
                let k = if b <= 8 {
                    1
                } else if b <= 16 {
                    2
                } else {
                    4
                };
                let mut narrowed = vec![0u8; n * k];
                for (i, v) in vals.iter().enumerate() {
                    for j in 0..k {
                        narrowed[j * n + i] = (v >> (8 * j)) as u8;
                    }
                }
                let mut packed = Vec::new();
                pack(&narrowed, k, n, b, &mut packed);
                assert_eq!(packed.len(), packed_size(n, b), "b={b} n={n}");
                let mut model = vec![0u8; packed_size(n, b)];
                for (i, v) in vals.iter().enumerate() {
                    for j in 0..b {
                        if v >> j & 1 == 1 {
                            model[(i * b + j) / 8] |= 1 << ((i * b + j) % 8);
                        }
                    }
                }
                assert_eq!(packed, model, "b={b} n={n}");
                let mut back = vec![0u32; n];
                unpack(&packed, b, &mut back);
                assert!(
                    back.iter().zip(&vals).all(|(&a, &v)| a as u64 == v),
                    "b={b} n={n}"
                );
                if b <= 16 {
                    let mut back = vec![0u16; n];
                    unpack(&packed, b, &mut back);
                    assert!(back.iter().zip(&vals).all(|(&a, &v)| a as u64 == v));
                }
            }
        }
    }

    #[test]
    fn widen_packed_adds_the_minimum() {
        let vals: Vec<i32> = vec![-70_000, 5, -3, 60_000, 1];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (lo, _) = min_max(DType::I32, &bytes, None).unwrap();
        let mut narrowed = Vec::new();
        narrow(DType::I32, &bytes, lo, 4, None, &mut narrowed);
        let b = bits_for(130_000);
        assert_eq!(b, 17);
        let mut packed = Vec::new();
        pack(&narrowed, 4, vals.len(), b, &mut packed);
        let mut back = vec![0u8; bytes.len()];
        let span = widen_packed(DType::I32, &packed, b, vals.len(), lo, &mut back);
        assert_eq!(back, bytes);
        assert_eq!(span, (0, 130_000));
    }

    #[test]
    fn float_order_is_total() {
        let vals = [1.0f32, f32::NAN, -0.0, 0.0, -3.5];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (lo, hi) = min_max(DType::F32, &bytes, None).unwrap();
        assert_eq!(lo.to_bytes(), Num::F(-3.5).to_bytes());
        assert!(matches!(hi, Num::F(v) if v.is_nan()));
        let valid = [true, false, true, true, false];
        let (lo, hi) = min_max(DType::F32, &bytes, Some(&valid)).unwrap();
        assert_eq!(
            (lo.to_bytes(), hi.to_bytes()),
            (Num::F(-0.0).to_bytes(), Num::F(1.0).to_bytes())
        );
    }
}
