//! What a chunk's statistics say of a comparison, casts included, and the
//! rows a predicate may select by them.
//!
//! Every number cast a [`Cmp`] may hold keeps order where it succeeds:
//! integers to integers (the same value, or a failure out of range),
//! integers to floats and floats to narrower floats (rounded to nearest),
//! floats to integers (truncated toward zero; NaN and values out of range
//! fail), each as Arrow's cast kernels do. So when both bounds of a chunk
//! survive the casts, every value of the chunk that survives lies between
//! the cast bounds, and the bounds decide; when a bound fails, every value
//! between may too, and nothing is ruled out.

use std::cmp::Ordering;
use std::ops::Range;

use super::{Cmp, CmpOp, FloatOrder, Lit, Pred};
use crate::columnar::column::Columnar;
use crate::columnar::format::{Entry, ValueKind};
use crate::columnar::num::Num;
use crate::schema::DType;

/// What a chunk's statistics say of a comparison over its rows.
pub(super) enum Verdict {
    /// No row satisfies it.
    None,
    /// Every row does.
    All,
    /// Some rows may.
    Some,
}

/// How a comparison's casts relate to its column's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Casts {
    /// Every cast keeps every value and its kind (integer, float): the
    /// values compare as they are.
    Keep,
    /// The casts never fail but may round, or change an integer into a
    /// float: each value is cast, then compared.
    Round,
    /// A cast may fail (a value out of range, NaN to an integer) or
    /// truncate: values that survive are compared, the others kept.
    Fail,
    /// Not a number column, or a cast the core does not know.
    Unknown,
}

/// (signed, bits) of an integer dtype (booleans as unsigned 1-bit).
fn int_shape(d: DType) -> Option<(bool, u32)> {
    Some(match d {
        DType::Bool => (false, 1),
        DType::I8 => (true, 8),
        DType::I16 => (true, 16),
        DType::I32 => (true, 32),
        DType::I64 => (true, 64),
        DType::U8 => (false, 8),
        DType::U16 => (false, 16),
        DType::U32 => (false, 32),
        DType::U64 => (false, 64),
        _ => return None,
    })
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F16 | DType::F32 | DType::F64)
}

/// Mantissa bits of a float dtype (with the implicit bit).
fn mantissa(d: DType) -> u32 {
    match d {
        DType::F16 => 11,
        DType::F32 => 24,
        _ => 53,
    }
}

/// How the cast of a `from` value to `to` behaves.
fn step(from: DType, to: DType) -> Casts {
    if from == to {
        return Casts::Keep;
    }
    match (int_shape(from), int_shape(to)) {
        (Some(_), _) if to == DType::Bool => Casts::Unknown,
        (Some((fs, fw)), Some((ts, tw))) => {
            // Every value of `from` is one of `to`: signedness and width.
            if (fs == ts && tw >= fw) || (!fs && ts && tw > fw) {
                Casts::Keep
            } else {
                Casts::Fail
            }
        }
        (Some(_), None) if matches!(to, DType::F32 | DType::F64) => Casts::Round,
        (None, Some(_)) if is_float(from) && to != DType::Bool => Casts::Fail,
        (None, None) if is_float(from) && matches!(to, DType::F32 | DType::F64) => {
            if mantissa(to) >= mantissa(from) {
                Casts::Keep
            } else {
                Casts::Round
            }
        }
        _ => Casts::Unknown,
    }
}

/// How the casts of `c` behave on a column of `kind`, and the dtype they
/// end at.
pub(super) fn casts(kind: ValueKind, c: &Cmp) -> (Casts, Option<DType>) {
    let ValueKind::Fixed(mut at) = kind else {
        let how = if c.casts.is_empty() {
            Casts::Keep
        } else {
            Casts::Unknown
        };
        return (how, None);
    };
    let mut how = Casts::Keep;
    for &to in &c.casts {
        let s = step(at, to);
        how = match (how, s) {
            (_, Casts::Unknown) | (Casts::Unknown, _) => return (Casts::Unknown, None),
            (Casts::Fail, _) | (_, Casts::Fail) => Casts::Fail,
            (Casts::Round, _) | (_, Casts::Round) => Casts::Round,
            _ => Casts::Keep,
        };
        at = to;
    }
    (how, Some(at))
}

/// `v` (a value of `from`) cast to `to` as Arrow's cast kernels cast it;
/// None where the cast fails (an error for `CAST`, null for `TRY_CAST`).
pub(super) fn cast(v: Num, from: DType, to: DType) -> Option<Num> {
    if from == to {
        return Some(v);
    }
    if let Some((signed, bits)) = int_shape(to) {
        let x: i128 = match v {
            Num::I(x) => x as i128,
            Num::U(x) => x as i128,
            Num::F(f) => {
                let t = f.trunc();
                // NaN fails every comparison here.
                let (lo, hi) = if signed {
                    (-(2f64.powi(bits as i32 - 1)), 2f64.powi(bits as i32 - 1))
                } else {
                    (0.0, 2f64.powi(bits as i32))
                };
                if !(t >= lo && t < hi) {
                    return None;
                }
                t as i128
            }
        };
        let (lo, hi) = if signed {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        };
        if x < lo || x > hi {
            return None;
        }
        return Some(if signed {
            Num::I(x as i64)
        } else {
            Num::U(x as u64)
        });
    }
    let wide = match v {
        Num::I(x) if to == DType::F32 => x as f32 as f64,
        Num::U(x) if to == DType::F32 => x as f32 as f64,
        Num::I(x) => x as f64,
        Num::U(x) => x as f64,
        Num::F(f) if to == DType::F32 => f as f32 as f64,
        Num::F(f) => f,
    };
    Some(Num::F(wide))
}

/// `v`, a value of `from`, through every cast of `c`.
pub(super) fn cast_all(mut v: Num, mut from: DType, c: &Cmp) -> Option<Num> {
    for &to in &c.casts {
        v = cast(v, from, to)?;
        from = to;
    }
    Some(v)
}

/// `x` as it orders in `order`, so that total order then orders it: -0
/// as +0 but in total order itself, and for polars' order every NaN as
/// one (the positive quiet NaN).
#[inline]
pub(super) fn canonical(x: f64, order: FloatOrder) -> f64 {
    match order {
        FloatOrder::Total => x,
        _ if x == 0.0 => 0.0,
        FloatOrder::NanLast if x.is_nan() => f64::NAN,
        _ => x,
    }
}

/// How float `x` compares with float `l` in `order`.
#[inline]
pub(super) fn float_order(x: f64, l: f64, order: FloatOrder) -> Ordering {
    canonical(x, order).total_cmp(&canonical(l, order))
}

/// How a number compares with a literal (None when they do not compare
/// as the same kind: an integer with a float literal, a number with bytes).
pub(super) fn order(v: Num, lit: &Lit, floats: FloatOrder) -> Option<Ordering> {
    match (v, lit) {
        (Num::I(x), Lit::Int(l)) => Some((x as i128).cmp(l)),
        (Num::U(x), Lit::Int(l)) => Some((x as i128).cmp(l)),
        (Num::F(x), Lit::Float(l)) => Some(float_order(x, *l, floats)),
        (Num::F(x), Lit::Int(l)) if l.unsigned_abs() <= 1 << 53 => {
            Some(float_order(x, *l as f64, floats))
        }
        _ => None,
    }
}

/// Whether the core's rows for comparison `c` on a column of `kind` are
/// exactly those where it holds (see [`Pred::exact`]).
pub(super) fn exact_cmp(kind: ValueKind, c: &Cmp) -> bool {
    let (how, end) = casts(kind, c);
    if !matches!(how, Casts::Keep | Casts::Round) {
        return false;
    }
    match (end, &c.lit) {
        (None, Lit::Bytes(_)) => true,
        (Some(d), Lit::Int(_)) => d != DType::Bool && int_shape(d).is_some(),
        (Some(d), Lit::Float(_)) => is_float(d),
        _ => false,
    }
}

/// What chunk `e` of a column of `kind` says of comparison `c`.
pub(super) fn verdict(kind: ValueKind, e: &Entry, c: &Cmp) -> Verdict {
    if e.null_count == e.rows {
        return Verdict::None;
    }
    let (Some(lo), Some(hi)) = (e.min(), e.max()) else {
        return Verdict::Some;
    };
    let (a, b) = match kind {
        ValueKind::Fixed(dtype) => {
            let (how, _) = casts(kind, c);
            if how == Casts::Unknown {
                return Verdict::Some;
            }
            let lo = cast_all(Num::from_bytes(dtype, lo.number_bytes()), dtype, c);
            let hi = cast_all(Num::from_bytes(dtype, hi.number_bytes()), dtype, c);
            let (Some(lo), Some(hi)) = (lo, hi) else {
                return Verdict::Some;
            };
            // Under polars' order a negative NaN (the smallest in total
            // order) is the largest: the bounds no longer bound.
            if c.floats == FloatOrder::NanLast && matches!(lo, Num::F(x) if x.is_nan()) {
                return Verdict::Some;
            }
            match (order(lo, &c.lit, c.floats), order(hi, &c.lit, c.floats)) {
                (Some(a), Some(b)) => (a, b),
                _ => return Verdict::Some,
            }
        }
        ValueKind::Utf8 | ValueKind::Binary => match &c.lit {
            Lit::Bytes(l) if c.casts.is_empty() => {
                (lo.bytes().cmp(l.as_slice()), hi.bytes().cmp(l.as_slice()))
            }
            _ => return Verdict::Some,
        },
    };
    use Ordering::*;
    // Every value lies in [lo, hi]: a, b say how they compare with lit.
    let none = match c.op {
        CmpOp::Eq => a == Greater || b == Less,
        CmpOp::NotEq => a == Equal && b == Equal,
        CmpOp::Lt => a != Less,
        CmpOp::LtEq => a == Greater,
        CmpOp::Gt => b != Greater,
        CmpOp::GtEq => b == Less,
    };
    let all = match c.op {
        CmpOp::Eq => a == Equal && b == Equal,
        CmpOp::NotEq => a == Greater || b == Less,
        CmpOp::Lt => b == Less,
        CmpOp::LtEq => b != Greater,
        CmpOp::Gt => a == Greater,
        CmpOp::GtEq => a != Less,
    };
    if none {
        Verdict::None
    } else if all && e.null_count == 0 && casts(kind, c).0 != Casts::Fail {
        Verdict::All
    } else {
        Verdict::Some
    }
}

/// What chunk `e` says of a comparison or null test: whether a row of it
/// may satisfy it.
fn may_hold(kind: ValueKind, e: &Entry, leaf: &Pred) -> bool {
    match leaf {
        Pred::Cmp(c) => !matches!(verdict(kind, e, c), Verdict::None),
        Pred::Text(..) => e.null_count < e.rows,
        Pred::IsNull(_) => e.null_count > 0,
        Pred::IsNotNull(_) => e.null_count < e.rows,
        _ => true,
    }
}

/// The ranges of both (each ascending and disjoint).
pub fn intersect(a: &[Range<u64>], b: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].start.max(b[j].start);
        let hi = a[i].end.min(b[j].end);
        if lo < hi {
            out.push(lo..hi);
        }
        if a[i].end < b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The ranges of either (each ascending and disjoint), merged.
pub fn union(a: &[Range<u64>], b: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut all: Vec<Range<u64>> = a.iter().chain(b).cloned().collect();
    all.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(all.len());
    for r in all {
        match out.last_mut() {
            Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

impl Columnar {
    /// Whether any of physical rows `lo..hi` may satisfy comparison `c`,
    /// by the chunks' statistics alone (nothing is read).
    pub fn may_match(&self, lo: u64, hi: u64, c: &Cmp) -> bool {
        let kind = self.kind();
        self.pieces(lo, hi).iter().any(|p| {
            let e = &self.parts()[p.part].footer().entries[p.chunk];
            !matches!(verdict(kind, e, c), Verdict::None)
        })
    }

    /// The rows (as presented: record ids of a selection) where the
    /// comparison or null test `leaf` may hold, by the chunks' statistics
    /// alone, as ascending, disjoint ranges.
    pub fn may_rows(&self, leaf: &Pred) -> Vec<Range<u64>> {
        let kind = self.kind();
        let mut physical: Vec<Range<u64>> = Vec::new();
        for (part, start) in self.parts().iter().zip(self.starts()) {
            let cs = part.starts();
            for (i, e) in part.footer().entries.iter().enumerate() {
                if !may_hold(kind, e, leaf) {
                    continue;
                }
                let r = start + cs[i]..start + cs[i + 1];
                match physical.last_mut() {
                    Some(last) if last.end == r.start => last.end = r.end,
                    _ => physical.push(r),
                }
            }
        }
        let Some(sel) = self.selection() else {
            return physical;
        };
        // Positions in the selection of the physical rows kept (the
        // selection ascends).
        let mut out: Vec<Range<u64>> = Vec::new();
        for r in physical {
            let lo = sel.partition_point(|&p| p < r.start) as u64;
            let hi = sel.partition_point(|&p| p < r.end) as u64;
            if lo < hi {
                match out.last_mut() {
                    Some(last) if last.end == lo => last.end = hi,
                    _ => out.push(lo..hi),
                }
            }
        }
        out
    }
}
