//! Predicates evaluated on columnar chunks as they are stored: comparisons
//! of a column with a literal, substring, prefix and suffix tests of text
//! and bytes, `IS [NOT] NULL`, and their `AND`s and `OR`s.
//!
//! A chunk whose statistics rule a comparison out is not decoded at all; a
//! narrowed or packed chunk of integers is compared as its narrowed values (minus
//! the chunk's minimum), and a scan that also returns the column widens
//! only the rows kept ([`Columnar::filter_range`]); any other chunk is
//! decoded and compared value by value. Every chunk read is checked as a read checks
//! it. Null rows never satisfy a comparison. Floats are compared in IEEE
//! total order, and a NaN row is always kept: a caller that applies the
//! full predicate afterwards (polars) may see rows the predicate then
//! rejects, never lose one it accepts. A substring test searches a
//! chunk's values end to end (one search, not one per row), and a hit is
//! a row's when it lies within that row's bytes.

use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder};
use serde_json::Value;

use super::arrow::chunk_array;
use super::column::Columnar;
use super::decode::{decode_narrowed, Narrow};
use super::format::{Encoding, Entry, ValueKind};
use super::num::Num;
use crate::error::{Error, Result};

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl CmpOp {
    fn from_name(s: &str) -> Option<CmpOp> {
        Some(match s {
            "eq" => CmpOp::Eq,
            "ne" => CmpOp::NotEq,
            "lt" => CmpOp::Lt,
            "le" => CmpOp::LtEq,
            "gt" => CmpOp::Gt,
            "ge" => CmpOp::GtEq,
            _ => return None,
        })
    }

    #[inline]
    fn test(self, o: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CmpOp::Eq => o == Equal,
            CmpOp::NotEq => o != Equal,
            CmpOp::Lt => o == Less,
            CmpOp::LtEq => o != Greater,
            CmpOp::Gt => o == Greater,
            CmpOp::GtEq => o != Less,
        }
    }
}

/// How a text or bytes value is tested against a byte string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextOp {
    /// The value contains it (SQL `LIKE '%s%'`).
    Contains,
    /// The value starts with it (`LIKE 's%'`).
    StartsWith,
    /// The value ends with it (`LIKE '%s'`).
    EndsWith,
}

impl TextOp {
    fn from_name(s: &str) -> Option<TextOp> {
        Some(match s {
            "contains" => TextOp::Contains,
            "starts_with" => TextOp::StartsWith,
            "ends_with" => TextOp::EndsWith,
            _ => return None,
        })
    }
}

/// A literal a column is compared with.
#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    Int(i128),
    Float(f64),
    Bytes(Vec<u8>),
}

/// A predicate over named columns (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub enum Pred {
    Cmp(String, CmpOp, Lit),
    /// A text or bytes column's value tested against a byte string (a
    /// column of another type keeps every row).
    Text(String, TextOp, Vec<u8>),
    IsNull(String),
    IsNotNull(String),
    And(Vec<Pred>),
    Or(Vec<Pred>),
}

impl Pred {
    /// The predicate in its JSON form: `{"cmp": [column, op, literal]}`
    /// (`op` one of `eq ne lt le gt ge`; the literal `{"int": n}`,
    /// `{"float": x}` or `{"str": s}`), `{"contains": [column, s]}`,
    /// `{"starts_with": [column, s]}`, `{"ends_with": [column, s]}`,
    /// `{"is_null": column}`, `{"is_not_null": column}`, `{"and": [...]}`,
    /// `{"or": [...]}`.
    pub fn from_json(text: &str) -> Result<Pred> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error::InvalidValue(format!("a predicate must be JSON: {e}")))?;
        Pred::from_value(&v).ok_or_else(|| {
            Error::InvalidValue(format!(
                "predicate {text} is not one of cmp, contains, starts_with, ends_with, \
                 is_null, is_not_null, and, or"
            ))
        })
    }

    fn from_value(v: &Value) -> Option<Pred> {
        let o = v.as_object()?;
        if o.len() != 1 {
            return None;
        }
        let (k, v) = o.iter().next()?;
        Some(match k.as_str() {
            "cmp" => {
                let a = v.as_array()?;
                let [c, op, lit] = a.as_slice() else {
                    return None;
                };
                let lit = lit.as_object()?;
                let lit = match (lit.get("int"), lit.get("float"), lit.get("str")) {
                    (Some(n), None, None) => Lit::Int(
                        n.as_i64()
                            .map(i128::from)
                            .or_else(|| n.as_u64().map(i128::from))?,
                    ),
                    (None, Some(x), None) => Lit::Float(x.as_f64()?),
                    (None, None, Some(s)) => Lit::Bytes(s.as_str()?.as_bytes().to_vec()),
                    _ => return None,
                };
                Pred::Cmp(c.as_str()?.to_owned(), CmpOp::from_name(op.as_str()?)?, lit)
            }
            "contains" | "starts_with" | "ends_with" => {
                let [c, s] = v.as_array()?.as_slice() else {
                    return None;
                };
                Pred::Text(
                    c.as_str()?.to_owned(),
                    TextOp::from_name(k)?,
                    s.as_str()?.as_bytes().to_vec(),
                )
            }
            "is_null" => Pred::IsNull(v.as_str()?.to_owned()),
            "is_not_null" => Pred::IsNotNull(v.as_str()?.to_owned()),
            "and" | "or" => {
                let parts = v
                    .as_array()?
                    .iter()
                    .map(Pred::from_value)
                    .collect::<Option<Vec<_>>>()?;
                if parts.is_empty() {
                    return None;
                }
                if k == "and" {
                    Pred::And(parts)
                } else {
                    Pred::Or(parts)
                }
            }
            _ => return None,
        })
    }

    /// The columns it reads.
    pub fn columns(&self) -> Vec<&str> {
        match self {
            Pred::Cmp(c, _, _) | Pred::Text(c, _, _) | Pred::IsNull(c) | Pred::IsNotNull(c) => {
                vec![c.as_str()]
            }
            Pred::And(v) | Pred::Or(v) => v.iter().flat_map(Pred::columns).collect(),
        }
    }

    /// Combines what `leaf` says of each comparison and null test over `n`
    /// rows (a bit per row) as the `AND`s and `OR`s say.
    pub fn eval_with(
        &self,
        n: usize,
        leaf: &mut dyn FnMut(&Pred) -> Result<BooleanBuffer>,
    ) -> Result<BooleanBuffer> {
        Ok(match self {
            Pred::And(v) => {
                let mut acc = BooleanBuffer::new_set(n);
                for p in v {
                    acc = &acc & &p.eval_with(n, leaf)?;
                    if acc.count_set_bits() == 0 {
                        break;
                    }
                }
                acc
            }
            Pred::Or(v) => {
                let mut acc = BooleanBuffer::new_unset(n);
                for p in v {
                    acc = &acc | &p.eval_with(n, leaf)?;
                }
                acc
            }
            leaf_pred => leaf(leaf_pred)?,
        })
    }

    /// What this comparison or null test says of physical rows `lo..hi` of
    /// the columnar column `c` (the column it names).
    pub fn eval_leaf(&self, c: &Columnar, lo: u64, hi: u64) -> Result<BooleanBuffer> {
        match self {
            Pred::Cmp(_, op, lit) => c.compare(lo, hi, *op, lit),
            Pred::Text(_, op, s) => c.match_text(lo, hi, *op, s),
            Pred::IsNull(_) => Ok(!&c.valid_bits(lo, hi)?),
            Pred::IsNotNull(_) => c.valid_bits(lo, hi),
            Pred::And(_) | Pred::Or(_) => Err(Error::InvalidValue(
                "eval_leaf takes a comparison or a null test".into(),
            )),
        }
    }

    /// Which of the physical rows `lo..hi` satisfy it, given the columnar
    /// columns it reads by name (`column(name)`).
    pub fn eval<'a>(
        &self,
        column: &dyn Fn(&str) -> Option<&'a Columnar>,
        lo: u64,
        hi: u64,
    ) -> Result<BooleanBuffer> {
        self.eval_with((hi - lo) as usize, &mut |leaf| {
            let name = leaf.columns()[0];
            let c = column(name).ok_or_else(|| {
                Error::InvalidValue(format!(
                    "a predicate reads {name:?}, which is not a columnar column"
                ))
            })?;
            leaf.eval_leaf(c, lo, hi)
        })
    }
}

/// `f(v[i])` for every `i`, 64 rows to a word.
fn bits_of<T: Copy>(v: &[T], f: impl Fn(T) -> bool) -> BooleanBuffer {
    // A byte per row (a loop that vectorises into compares), then eight
    // bytes of 0 or 1 to eight bits by one multiplication: byte i lands on
    // bit 56 + i, and no other product reaches those bits.
    #[inline(always)]
    fn word<T: Copy>(rows: &[T], f: &impl Fn(T) -> bool) -> u64 {
        let mut bytes = [0u8; 64];
        for (b, &x) in bytes.iter_mut().zip(rows) {
            *b = f(x) as u8;
        }
        let mut w = 0u64;
        for (k, eight) in bytes.chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes(eight.try_into().expect("eight bytes"));
            w |= (v.wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * k);
        }
        w
    }
    let mut words: Vec<u64> = Vec::with_capacity(v.len().div_ceil(64));
    let whole = v.chunks_exact(64);
    let rest = whole.remainder();
    words.extend(whole.map(|c| word(c, &f)));
    if !rest.is_empty() {
        words.push(word(rest, &f));
    }
    BooleanBuffer::new(arrow_buffer::Buffer::from_vec(words), 0, v.len())
}

/// `v[i] op l` for every `i`, one loop per operator.
fn cmp_slice<T: Copy + PartialOrd>(v: &[T], op: CmpOp, l: T) -> BooleanBuffer {
    match op {
        CmpOp::Eq => bits_of(v, |x| x == l),
        CmpOp::NotEq => bits_of(v, |x| x != l),
        CmpOp::Lt => bits_of(v, |x| x < l),
        CmpOp::LtEq => bits_of(v, |x| x <= l),
        CmpOp::Gt => bits_of(v, |x| x > l),
        CmpOp::GtEq => bits_of(v, |x| x >= l),
    }
}

/// The bits of `op` against a literal outside a type's range: below its
/// smallest value (`below`) or above its largest.
fn out_of_range(n: usize, op: CmpOp, below: bool) -> BooleanBuffer {
    let all = match op {
        CmpOp::Eq => false,
        CmpOp::NotEq => true,
        CmpOp::Lt | CmpOp::LtEq => !below,
        CmpOp::Gt | CmpOp::GtEq => below,
    };
    if all {
        BooleanBuffer::new_set(n)
    } else {
        BooleanBuffer::new_unset(n)
    }
}

/// Which rows of the Arrow array `a` (a column's values as read) satisfy
/// the comparison or null test `leaf` (null rows never satisfy a
/// comparison; NaN rows always do, and a float row equal to the literal
/// under IEEE or total order always passes a strict comparison: a superset
/// of what either order keeps).
pub fn compare_array(a: &dyn arrow_array::Array, leaf: &Pred) -> Result<BooleanBuffer> {
    let n = a.len();
    let (op, lit) = match leaf {
        Pred::Cmp(_, op, lit) => (*op, lit),
        Pred::IsNull(_) => {
            return Ok(match a.logical_nulls() {
                Some(nb) => !nb.inner(),
                None => BooleanBuffer::new_unset(n),
            })
        }
        Pred::IsNotNull(_) => {
            return Ok(match a.logical_nulls() {
                Some(nb) => nb.inner().clone(),
                None => BooleanBuffer::new_set(n),
            })
        }
        Pred::Text(_, op, s) => return Ok(text_values(a, *op, s)),
        Pred::And(_) | Pred::Or(_) => {
            return Err(Error::InvalidValue(
                "compare_array takes a comparison or a null test".into(),
            ))
        }
    };
    Ok(compare_values(a, op, lit))
}

/// Which rows of the Arrow array `a` pass the text test `op` against
/// `s` (null rows never do); every row of an array that is not text or
/// bytes with 32-bit offsets.
fn text_values(a: &dyn arrow_array::Array, op: TextOp, s: &[u8]) -> BooleanBuffer {
    use arrow_array::cast::AsArray;
    use arrow_schema::DataType;
    let (offsets, values) = match a.data_type() {
        DataType::Utf8 => {
            let t = a.as_string::<i32>();
            (t.value_offsets(), t.value_data())
        }
        DataType::Binary => {
            let t = a.as_binary::<i32>();
            (t.value_offsets(), t.value_data())
        }
        _ => return BooleanBuffer::new_set(a.len()),
    };
    let bits = text_bits(offsets, values, op, s);
    match a.logical_nulls() {
        Some(nb) => &bits & nb.inner(),
        None => bits,
    }
}

/// Which of the values `values[offsets[i]..offsets[i + 1]]` pass `op`
/// against `s` (offsets ascending, within `values`).
fn text_bits(offsets: &[i32], values: &[u8], op: TextOp, s: &[u8]) -> BooleanBuffer {
    let n = offsets.len().saturating_sub(1);
    let at = |i: usize| offsets[i] as usize;
    match op {
        TextOp::StartsWith => {
            BooleanBuffer::collect_bool(n, |i| values[at(i)..at(i + 1)].starts_with(s))
        }
        TextOp::EndsWith => {
            BooleanBuffer::collect_bool(n, |i| values[at(i)..at(i + 1)].ends_with(s))
        }
        TextOp::Contains if s.is_empty() => BooleanBuffer::new_set(n),
        TextOp::Contains => {
            // One search over the rows' bytes end to end; a hit that runs
            // past its row's end is not the row's, and the search goes on
            // from the next byte.
            let mut out = BooleanBufferBuilder::new(n);
            out.append_n(n, false);
            if n == 0 {
                return out.finish();
            }
            let (base, end) = (at(0), at(n));
            let hay = &values[base..end];
            let finder = memchr::memmem::Finder::new(s);
            let (mut pos, mut row) = (0usize, 0usize);
            while row < n {
                let Some(h) = finder.find(&hay[pos..]) else {
                    break;
                };
                let hit = pos + h;
                // The row holding byte `hit`: the last whose start is at or
                // before it (rows from `row` on start at or after `pos`);
                // a few rows on when hits are dense, so stepped to first.
                let mut step = 0;
                while step < 8 && at(row + 1) - base <= hit {
                    row += 1;
                    step += 1;
                }
                if step == 8 {
                    row += offsets[row + 1..=n].partition_point(|&o| o as usize - base <= hit);
                }
                let row_end = at(row + 1) - base;
                if hit + s.len() <= row_end {
                    out.set_bit(row, true);
                    pos = row_end;
                    row += 1;
                } else {
                    pos = hit + 1;
                }
            }
            out.finish()
        }
    }
}

/// Which rows of the Arrow array `a` satisfy `value op lit`, as
/// [`compare_array`] says; one vectorised loop for numbers.
fn compare_values(a: &dyn arrow_array::Array, op: CmpOp, lit: &Lit) -> BooleanBuffer {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    use arrow_schema::DataType;
    let n = a.len();
    macro_rules! ints {
        ($t:ty, $native:ty) => {{
            let v: &[$native] = a.as_primitive::<$t>().values();
            match lit {
                Lit::Int(l) => match <$native>::try_from(*l) {
                    Ok(l) => cmp_slice(v, op, l),
                    Err(_) => out_of_range(n, op, *l < 0),
                },
                // Integers against a float: compared as f64.
                Lit::Float(l) => {
                    let l = *l;
                    BooleanBuffer::collect_bool(n, |i| {
                        (v[i] as f64).partial_cmp(&l).is_none_or(|o| op.test(o))
                    })
                }
                Lit::Bytes(_) => BooleanBuffer::new_set(n),
            }
        }};
    }
    macro_rules! floats {
        ($t:ty, $native:ty) => {{
            let v: &[$native] = a.as_primitive::<$t>().values();
            let l = match lit {
                Lit::Float(l) => *l,
                Lit::Int(l) => *l as f64,
                Lit::Bytes(_) => return BooleanBuffer::new_set(n),
            };
            if l.is_nan() || op == CmpOp::NotEq {
                BooleanBuffer::new_set(n)
            } else {
                // The rows that satisfy `op`, those equal to the literal
                // (rounded to the column's type) and NaN, in one pass: a
                // NaN fails every IEEE comparison, so it passes the negated
                // opposite one.
                let l = l as $native;
                #[allow(clippy::neg_cmp_op_on_partial_ord)] // NaN passes, on purpose
                let kept = match op {
                    CmpOp::Lt | CmpOp::LtEq => bits_of(v, |x| !(x > l)),
                    CmpOp::Gt | CmpOp::GtEq => bits_of(v, |x| !(x < l)),
                    _ => bits_of(v, |x| x == l || x.is_nan()),
                };
                kept
            }
        }};
    }
    let bits = match a.data_type() {
        DataType::Int8 => ints!(Int8Type, i8),
        DataType::Int16 => ints!(Int16Type, i16),
        DataType::Int32 => ints!(Int32Type, i32),
        DataType::Int64 => ints!(Int64Type, i64),
        DataType::UInt8 => ints!(UInt8Type, u8),
        DataType::UInt16 => ints!(UInt16Type, u16),
        DataType::UInt32 => ints!(UInt32Type, u32),
        DataType::UInt64 => ints!(UInt64Type, u64),
        DataType::Float32 => floats!(Float32Type, f32),
        DataType::Float64 => floats!(Float64Type, f64),
        DataType::Boolean => {
            let b = a.as_boolean();
            BooleanBuffer::collect_bool(n, |i| {
                order(Num::U(b.value(i) as u64), lit).is_none_or(|o| op.test(o))
            })
        }
        DataType::Utf8 | DataType::Binary => match lit {
            Lit::Bytes(l) => {
                let value = |i: usize| -> &[u8] {
                    match a.data_type() {
                        DataType::Utf8 => a.as_string::<i32>().value(i).as_bytes(),
                        _ => a.as_binary::<i32>().value(i),
                    }
                };
                BooleanBuffer::collect_bool(n, |i| op.test(value(i).cmp(l.as_slice())))
            }
            _ => BooleanBuffer::new_set(n),
        },
        // Nothing else is columnar (f16 included): keep every row (the
        // caller filters).
        _ => BooleanBuffer::new_set(n),
    };
    match a.logical_nulls() {
        Some(nb) => &bits & nb.inner(),
        None => bits,
    }
}

/// Pieces of a range from which its chunks are compared in parallel.
const PARALLEL_PIECES: usize = 16;

/// What a chunk's statistics say of `value op lit` over its rows.
enum Verdict {
    None,
    All,
    Some,
}

fn verdict(kind: ValueKind, e: &Entry, op: CmpOp, lit: &Lit) -> Verdict {
    if e.null_count == e.rows {
        return Verdict::None;
    }
    let ValueKind::Fixed(dtype) = kind else {
        return Verdict::Some;
    };
    let (Some(lo), Some(hi)) = (e.min(), e.max()) else {
        return Verdict::Some;
    };
    let (lo, hi) = (
        Num::from_bytes(dtype, lo.number_bytes()),
        Num::from_bytes(dtype, hi.number_bytes()),
    );
    let (Some(a), Some(b)) = (order(lo, lit), order(hi, lit)) else {
        return Verdict::Some;
    };
    use std::cmp::Ordering::*;
    // Every value lies in [lo, hi]: a, b say how they compare with lit.
    let none = match op {
        CmpOp::Eq => a == Greater || b == Less,
        CmpOp::NotEq => a == Equal && b == Equal,
        CmpOp::Lt => a != Less,
        CmpOp::LtEq => a == Greater,
        CmpOp::Gt => b != Greater,
        CmpOp::GtEq => b == Less,
    };
    let all = match op {
        CmpOp::Eq => a == Equal && b == Equal,
        CmpOp::NotEq => a == Greater || b == Less,
        CmpOp::Lt => b == Less,
        CmpOp::LtEq => b != Greater,
        CmpOp::Gt => a == Greater,
        CmpOp::GtEq => a != Less,
    };
    // A float chunk may hold NaN (kept by comparisons): never "none".
    let float = matches!(lo, Num::F(_));
    if none && !float {
        Verdict::None
    } else if all && e.null_count == 0 {
        Verdict::All
    } else {
        Verdict::Some
    }
}

/// How a number compares with a literal (None when they do not compare).
fn order(v: Num, lit: &Lit) -> Option<std::cmp::Ordering> {
    match (v, lit) {
        (Num::I(x), Lit::Int(l)) => Some((x as i128).cmp(l)),
        (Num::U(x), Lit::Int(l)) => Some((x as i128).cmp(l)),
        (Num::F(x), Lit::Float(l)) => Some(x.total_cmp(l)),
        (Num::F(x), Lit::Int(l)) if l.unsigned_abs() < 1 << 53 => Some(x.total_cmp(&(*l as f64))),
        (Num::I(x), Lit::Float(l)) if !l.is_nan() => (x as f64).partial_cmp(l),
        (Num::U(x), Lit::Float(l)) if !l.is_nan() => (x as f64).partial_cmp(l),
        _ => None,
    }
}

impl Columnar {
    /// Whether each of physical rows `lo..hi` is not null.
    pub fn valid_bits(&self, lo: u64, hi: u64) -> Result<BooleanBuffer> {
        let mut out = BooleanBufferBuilder::new((hi - lo) as usize);
        for p in self.pieces(lo, hi) {
            let file = &self.parts()[p.part];
            let e = &file.footer().entries[p.chunk];
            if e.null_count == 0 {
                out.append_n(p.b - p.a, true);
                continue;
            }
            if e.null_count == e.rows {
                out.append_n(p.b - p.a, false);
                continue;
            }
            let d = file.chunk_arc(p.chunk)?;
            for i in p.a..p.b {
                out.append(d.is_valid(i));
            }
        }
        Ok(out.finish())
    }

    /// Whether each of physical rows `lo..hi` satisfies `value op lit`
    /// (see the module documentation); the chunks are compared in
    /// parallel on the executor's threads when they are many.
    pub fn compare(&self, lo: u64, hi: u64, op: CmpOp, lit: &Lit) -> Result<BooleanBuffer> {
        self.bits_by_piece(lo, hi, &|p| self.compare_piece(p, op, lit))
    }

    /// Whether each of physical rows `lo..hi` passes the text test `op`
    /// against `s` (null rows never do; every row of a column that is not
    /// text or bytes does), the chunks tested as [`Columnar::compare`]
    /// compares them.
    pub fn match_text(&self, lo: u64, hi: u64, op: TextOp, s: &[u8]) -> Result<BooleanBuffer> {
        self.bits_by_piece(lo, hi, &|p| {
            let n = p.b - p.a;
            let file = &self.parts()[p.part];
            let e = &file.footer().entries[p.chunk];
            if e.null_count == e.rows {
                return Ok(BooleanBuffer::new_unset(n));
            }
            if matches!(self.kind(), ValueKind::Fixed(_)) {
                return Ok(BooleanBuffer::new_set(n));
            }
            let d = file.chunk_arc(p.chunk)?;
            Ok(text_values(chunk_array(&d, p.a, p.b).as_ref(), op, s))
        })
    }

    /// The bits `one` gives for each piece of physical rows `lo..hi`, end
    /// to end; the pieces run in parallel on the executor's threads when
    /// they are many.
    fn bits_by_piece(
        &self,
        lo: u64,
        hi: u64,
        one: &(dyn Fn(&super::arrow::Piece) -> Result<BooleanBuffer> + Sync),
    ) -> Result<BooleanBuffer> {
        use rayon::prelude::*;
        let pieces = self.pieces(lo, hi);
        let parts: Vec<Result<BooleanBuffer>> = if pieces.len() >= PARALLEL_PIECES {
            crate::executor::pool().install(|| pieces.par_iter().map(one).collect())
        } else {
            pieces.iter().map(one).collect()
        };
        let mut out = BooleanBufferBuilder::new((hi - lo) as usize);
        for part in parts {
            out.append_buffer(&part?);
        }
        Ok(out.finish())
    }

    /// Whether any of physical rows `lo..hi` may satisfy `value op lit`,
    /// by the chunks' statistics alone (nothing is read).
    pub fn may_match(&self, lo: u64, hi: u64, op: CmpOp, lit: &Lit) -> bool {
        let kind = self.kind();
        self.pieces(lo, hi).iter().any(|p| {
            let e = &self.parts()[p.part].footer().entries[p.chunk];
            !matches!(verdict(kind, e, op, lit), Verdict::None)
        })
    }

    fn compare_piece(
        &self,
        p: &super::arrow::Piece,
        op: CmpOp,
        lit: &Lit,
    ) -> Result<BooleanBuffer> {
        let kind = self.kind();
        let n = p.b - p.a;
        let file = &self.parts()[p.part];
        let e = &file.footer().entries[p.chunk];
        match verdict(kind, e, op, lit) {
            Verdict::None => return Ok(BooleanBuffer::new_unset(n)),
            Verdict::All => return Ok(BooleanBuffer::new_set(n)),
            Verdict::Some => {}
        }
        if let Some(d) = file.kept_arc(p.chunk) {
            return Ok(compare_values(&chunk_array(&d, p.a, p.b), op, lit));
        }
        if let Some(narrow) = self.narrowed_piece(p, lit)? {
            return Ok(narrow.bits(op));
        }
        let d = file.chunk_arc(p.chunk)?;
        Ok(compare_values(&chunk_array(&d, p.a, p.b), op, lit))
    }

    /// The narrowed values of piece `p` and the literal `lit` in their
    /// terms, when its chunk is narrowed integers and `lit` an integer;
    /// None otherwise.
    fn narrowed_piece(&self, p: &super::arrow::Piece, lit: &Lit) -> Result<Option<NarrowPiece>> {
        let file = &self.parts()[p.part];
        let e = &file.footer().entries[p.chunk];
        let (ValueKind::Fixed(dtype), Encoding::Narrowed | Encoding::Packed, Lit::Int(l)) =
            (self.kind(), e.encoding(), lit)
        else {
            return Ok(None);
        };
        if file.kept_arc(p.chunk).is_some() {
            return Ok(None);
        }
        let bytes = file.stored(p.chunk, p.chunk + 1)?;
        let at = if p.chunk == 0 {
            super::format::MAGIC.len()
        } else {
            0
        };
        let (values, validity) = decode_narrowed(dtype, e, &bytes[at..])
            .map_err(|why| Error::corrupted(file.path(), format!("chunk {}: {why}", p.chunk)))?;
        let min = match Num::from_bytes(dtype, e.min.number_bytes()) {
            Num::I(v) => v as i128,
            Num::U(v) => v as i128,
            Num::F(_) => 0,
        };
        Ok(Some(NarrowPiece {
            dtype,
            values,
            validity,
            min,
            target: l - min,
            a: p.a,
            b: p.b,
        }))
    }

    /// The rows of physical rows `lo..hi` that satisfy the comparison or
    /// text test `leaf` (the bits [`Pred::eval_leaf`] gives) and their
    /// values, as one array of the column's type without nulls (a null row
    /// never satisfies either), chunk by chunk: each chunk is tested and
    /// filtered while it is decoded. A narrowed chunk of integers is
    /// compared as its narrowed values, and only the rows kept are widened.
    pub fn filter_range(
        &self,
        lo: u64,
        hi: u64,
        leaf: &Pred,
    ) -> Result<(BooleanBuffer, arrow_array::ArrayRef)> {
        use rayon::prelude::*;
        if !matches!(leaf, Pred::Cmp(..) | Pred::Text(..)) {
            return Err(Error::InvalidValue(
                "filter_range takes a comparison or a text test".into(),
            ));
        }
        let pieces = self.pieces(lo, hi);
        let one = |p: &super::arrow::Piece| self.filter_piece(p, leaf);
        let parts: Vec<Result<(BooleanBuffer, arrow_array::ArrayRef)>> =
            if pieces.len() >= PARALLEL_PIECES {
                crate::executor::pool().install(|| pieces.par_iter().map(one).collect())
            } else {
                pieces.iter().map(one).collect()
            };
        let mut bits = BooleanBufferBuilder::new((hi - lo) as usize);
        let mut arrays = Vec::with_capacity(parts.len());
        for part in parts {
            let (b, a) = part?;
            bits.append_buffer(&b);
            arrays.push(a);
        }
        let values = match arrays.len() {
            0 => arrow_array::new_empty_array(&super::arrow::value_type(self.kind())),
            _ => super::arrow::concat(&arrays)?,
        };
        Ok((bits.finish(), values))
    }

    fn filter_piece(
        &self,
        p: &super::arrow::Piece,
        leaf: &Pred,
    ) -> Result<(BooleanBuffer, arrow_array::ArrayRef)> {
        let n = p.b - p.a;
        let file = &self.parts()[p.part];
        let e = &file.footer().entries[p.chunk];
        let empty = || arrow_array::new_empty_array(&super::arrow::value_type(self.kind()));
        if e.null_count == e.rows {
            return Ok((BooleanBuffer::new_unset(n), empty()));
        }
        if let Pred::Cmp(_, op, lit) = leaf {
            if let Verdict::None = verdict(self.kind(), e, *op, lit) {
                return Ok((BooleanBuffer::new_unset(n), empty()));
            }
            if let Some(narrow) = self.narrowed_piece(p, lit)? {
                let bits = narrow.bits(*op);
                // Few rows kept: widen just those.
                if bits.count_set_bits() <= n / 4 {
                    let kept = narrow.widen_kept(&bits);
                    return Ok((bits, kept));
                }
            }
        }
        let d = file.chunk_arc(p.chunk)?;
        let a = chunk_array(&d, p.a, p.b);
        let bits = compare_array(a.as_ref(), leaf)?;
        let mask = arrow_array::BooleanArray::new(bits.clone(), None);
        let kept = arrow_select::filter::filter(a.as_ref(), &mask)
            .map_err(|e| Error::InvalidValue(format!("arrow: {e}")))?;
        Ok((bits, kept))
    }
}

/// A piece of a narrowed chunk: its rows' narrowed values and validity,
/// the chunk's minimum, and a literal minus that minimum.
struct NarrowPiece {
    dtype: crate::schema::DType,
    values: Narrow,
    validity: Option<Vec<u8>>,
    min: i128,
    target: i128,
    a: usize,
    b: usize,
}

impl NarrowPiece {
    /// Which of its rows satisfy `value op lit` (null rows never do).
    fn bits(&self, op: CmpOp) -> BooleanBuffer {
        let (a, b, n, target) = (self.a, self.b, self.b - self.a, self.target);
        macro_rules! cmp {
            ($v:expr, $t:ty) => {
                match <$t>::try_from(target) {
                    Ok(t) => cmp_slice(&$v[a..b], op, t),
                    Err(_) => out_of_range(n, op, target < 0),
                }
            };
        }
        let bits = match &self.values {
            Narrow::U8(v) => cmp!(v, u8),
            Narrow::U16(v) => cmp!(v, u16),
            Narrow::U32(v) => cmp!(v, u32),
        };
        match &self.validity {
            Some(v) => &bits & &BooleanBuffer::new(arrow_buffer::Buffer::from(v.clone()), a, n),
            None => bits,
        }
    }

    /// The values of the rows `bits` keeps, widened to the column's type.
    fn widen_kept(&self, bits: &BooleanBuffer) -> arrow_array::ArrayRef {
        let w = self.dtype.itemsize();
        let mut out = arrow_buffer::MutableBuffer::new(bits.count_set_bits() * w);
        macro_rules! take {
            ($v:expr) => {
                for i in bits.set_indices() {
                    let x = self.min + $v[self.a + i] as i128;
                    out.extend_from_slice(&x.to_le_bytes()[..w]);
                }
            };
        }
        match &self.values {
            Narrow::U8(v) => take!(v),
            Narrow::U16(v) => take!(v),
            Narrow::U32(v) => take!(v),
        }
        super::arrow::fixed_array(self.dtype, out)
    }
}
