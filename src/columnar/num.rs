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

    /// Total order within one kind (floats: IEEE total order).
    pub fn cmp(&self, other: &Num) -> std::cmp::Ordering {
        match (self, other) {
            (Num::I(a), Num::I(b)) => a.cmp(b),
            (Num::U(a), Num::U(b)) => a.cmp(b),
            (Num::F(a), Num::F(b)) => a.total_cmp(b),
            _ => std::cmp::Ordering::Equal,
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
            let bits = ((h as u64 & 0x8000) << 48) | 0x7FF8_0000_0000_0000 | ((h as u64 & 0x1FF) << 42);
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

/// The minimum and maximum of the valid values of `bytes` (`rows` values
/// of `dtype`), None when no row is valid.
pub fn min_max(dtype: DType, bytes: &[u8], valid: Option<&[bool]>) -> Option<(Num, Num)> {
    let rows = bytes.len() / dtype.itemsize();
    macro_rules! ints {
        ($t:ty, $wrap:expr) => {{
            const W: usize = std::mem::size_of::<$t>();
            let get = |i: usize| <$t>::from_le_bytes(bytes[i * W..(i + 1) * W].try_into().unwrap());
            let mut acc: Option<($t, $t)> = None;
            match valid {
                None if rows > 0 => {
                    let (mut lo, mut hi) = (get(0), get(0));
                    for c in bytes.chunks_exact(W) {
                        let v = <$t>::from_le_bytes(c.try_into().unwrap());
                        lo = lo.min(v);
                        hi = hi.max(v);
                    }
                    acc = Some((lo, hi));
                }
                None => {}
                Some(valid) => {
                    for i in (0..rows).filter(|&i| valid[i]) {
                        let v = get(i);
                        acc = Some(match acc {
                            None => (v, v),
                            Some((lo, hi)) => (lo.min(v), hi.max(v)),
                        });
                    }
                }
            }
            acc.map(|(lo, hi)| ($wrap(lo), $wrap(hi)))
        }};
    }
    match dtype {
        DType::Bool => ints!(u8, |v: u8| Num::U(u64::from(v != 0))),
        DType::U8 => ints!(u8, |v: u8| Num::U(v as u64)),
        DType::I8 => ints!(i8, |v: i8| Num::I(v as i64)),
        DType::I16 => ints!(i16, |v: i16| Num::I(v as i64)),
        DType::I32 => ints!(i32, |v: i32| Num::I(v as i64)),
        DType::I64 => ints!(i64, Num::I),
        DType::U16 => ints!(u16, |v: u16| Num::U(v as u64)),
        DType::U32 => ints!(u32, |v: u32| Num::U(v as u64)),
        DType::U64 => ints!(u64, Num::U),
        DType::F16 | DType::F32 | DType::F64 => {
            let mut acc: Option<(f64, f64)> = None;
            for i in (0..rows).filter(|&i| valid.is_none_or(|v| v[i])) {
                let Num::F(v) = value(dtype, bytes, i) else {
                    unreachable!("a float column's values are floats")
                };
                acc = Some(match acc {
                    None => (v, v),
                    Some((lo, hi)) => (
                        if v.total_cmp(&lo).is_lt() { v } else { lo },
                        if v.total_cmp(&hi).is_gt() { v } else { hi },
                    ),
                });
            }
            acc.map(|(lo, hi)| (Num::F(lo), Num::F(hi)))
        }
    }
}

/// Appends `bytes` (integers of `dtype`) minus `lo` as unsigned integers
/// of `k` bytes, shuffled when `k > 1`; null rows as 0.
pub fn narrow(dtype: DType, bytes: &[u8], lo: Num, k: usize, valid: Option<&[bool]>, out: &mut Vec<u8>) {
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
    let (mut dmin, mut dmax) = (u64::MAX, 0u64);
    macro_rules! run {
        ($k:expr, $w:expr) => {{
            let streams: [&[u8]; $k] = std::array::from_fn(|b| &src[b * n..(b + 1) * n]);
            for (i, o) in out.chunks_exact_mut($w).enumerate() {
                let mut d = 0u64;
                for (b, s) in streams.iter().enumerate() {
                    d |= (s[i] as u64) << (8 * b);
                }
                dmin = dmin.min(d);
                dmax = dmax.max(d);
                o.copy_from_slice(&base.wrapping_add(d).to_le_bytes()[..$w]);
            }
        }};
    }
    match (k, w) {
        (1, 2) => run!(1, 2),
        (1, 4) => run!(1, 4),
        (1, 8) => run!(1, 8),
        (2, 4) => run!(2, 4),
        (2, 8) => run!(2, 8),
        (4, 8) => run!(4, 8),
        _ => unreachable!("the footer check allows only narrower widths"),
    }
    (dmin, dmax)
}

/// Undoes the byte shuffle: `n` values of `w` bytes from `src` into `out`.
pub fn unshuffle(src: &[u8], w: usize, n: usize, out: &mut [u8]) {
    macro_rules! run {
        ($w:expr) => {{
            let streams: [&[u8]; $w] = std::array::from_fn(|b| &src[b * n..(b + 1) * n]);
            for (i, o) in out.chunks_exact_mut($w).enumerate() {
                for b in 0..$w {
                    o[b] = streams[b][i];
                }
            }
        }};
    }
    match w {
        2 => run!(2),
        4 => run!(4),
        8 => run!(8),
        _ => {
            for i in 0..n {
                for b in 0..w {
                    out[i * w + b] = src[b * n + i];
                }
            }
        }
    }
}

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
    fn float_order_is_total() {
        let vals = [1.0f32, f32::NAN, -0.0, 0.0, -3.5];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (lo, hi) = min_max(DType::F32, &bytes, None).unwrap();
        assert_eq!(lo.to_bytes(), Num::F(-3.5).to_bytes());
        assert!(matches!(hi, Num::F(v) if v.is_nan()));
        let valid = [true, false, true, true, false];
        let (lo, hi) = min_max(DType::F32, &bytes, Some(&valid)).unwrap();
        assert_eq!((lo.to_bytes(), hi.to_bytes()), (Num::F(-0.0).to_bytes(), Num::F(1.0).to_bytes()));
    }
}
