//! The comparison kernels: which rows of an Arrow array (a column's
//! values as read) satisfy a comparison, a text test or a null test.

use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder};

use super::bounds::{canonical, cast_all, casts, order, Casts};
use super::{Cmp, CmpOp, FloatOrder, Lit, Pred, TextOp};
use crate::columnar::num::Num;
use crate::error::{Error, Result};
use crate::schema::DType;

/// `f(v[i])` for every `i`, 64 rows to a word.
pub(super) fn bits_of<T: Copy>(v: &[T], f: impl Fn(T) -> bool) -> BooleanBuffer {
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
pub(super) fn cmp_slice<T: Copy + PartialOrd>(v: &[T], op: CmpOp, l: T) -> BooleanBuffer {
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
pub(super) fn out_of_range(n: usize, op: CmpOp, below: bool) -> BooleanBuffer {
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
/// the comparison, text or null test `leaf`, as the module documentation
/// of [`super`] says (null rows never satisfy a comparison; a comparison
/// through a cast that may fail keeps the rows whose cast fails).
pub fn compare_array(a: &dyn arrow_array::Array, leaf: &Pred) -> Result<BooleanBuffer> {
    let n = a.len();
    let c = match leaf {
        Pred::Cmp(c) => c,
        Pred::Unknown => return Ok(BooleanBuffer::new_set(n)),
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
    Ok(compare_values(a, c))
}

/// Which rows of the Arrow array `a` pass the text test `op` against
/// `s` (null rows never do); every row of an array that is not text or
/// bytes with 32-bit offsets.
pub(super) fn text_values(a: &dyn arrow_array::Array, op: TextOp, s: &[u8]) -> BooleanBuffer {
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

/// An f64's bits as an i64 that orders as IEEE total order.
#[inline(always)]
fn total_key(x: f64) -> i64 {
    let b = x.to_bits() as i64;
    b ^ (((b >> 63) as u64) >> 1) as i64
}

/// `key(v[i]) op lk` for every `i`, one loop per operator.
#[inline(always)]
fn keyed<T: Copy>(v: &[T], key: impl Fn(T) -> i64, op: CmpOp, lk: i64) -> BooleanBuffer {
    match op {
        CmpOp::Eq => bits_of(v, |x| key(x) == lk),
        CmpOp::NotEq => bits_of(v, |x| key(x) != lk),
        CmpOp::Lt => bits_of(v, |x| key(x) < lk),
        CmpOp::LtEq => bits_of(v, |x| key(x) <= lk),
        CmpOp::Gt => bits_of(v, |x| key(x) > lk),
        CmpOp::GtEq => bits_of(v, |x| key(x) >= lk),
    }
}

/// `v[i] op l` for every `i` of a float slice (widened to f64 exactly),
/// in `order`: one vectorised loop over total-order keys.
fn float_bits<T: Copy>(
    v: &[T],
    wide: impl Fn(T) -> f64 + Copy,
    op: CmpOp,
    l: f64,
    order: FloatOrder,
) -> BooleanBuffer {
    let lk = total_key(canonical(l, order));
    match order {
        FloatOrder::Total => keyed(v, move |x| total_key(wide(x)), op, lk),
        FloatOrder::Arrow => keyed(
            v,
            move |x| {
                let w = wide(x);
                // -0 as +0.
                total_key(if w == 0.0 { 0.0 } else { w })
            },
            op,
            lk,
        ),
        FloatOrder::NanLast => keyed(
            v,
            move |x| {
                let w = wide(x);
                // Every NaN as the positive quiet one, -0 as +0.
                let w = if w.is_nan() {
                    f64::NAN
                } else if w == 0.0 {
                    0.0
                } else {
                    w
                };
                total_key(w)
            },
            op,
            lk,
        ),
    }
}

/// Value `i` of a fixed column's array `a` (of `dtype`) as a number.
fn num_at(a: &dyn arrow_array::Array, dtype: DType, i: usize) -> Num {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    match dtype {
        DType::Bool => Num::U(a.as_boolean().value(i) as u64),
        DType::I8 => Num::I(a.as_primitive::<Int8Type>().value(i) as i64),
        DType::I16 => Num::I(a.as_primitive::<Int16Type>().value(i) as i64),
        DType::I32 => Num::I(a.as_primitive::<Int32Type>().value(i) as i64),
        DType::I64 => Num::I(a.as_primitive::<Int64Type>().value(i)),
        DType::U8 => Num::U(a.as_primitive::<UInt8Type>().value(i) as u64),
        DType::U16 => Num::U(a.as_primitive::<UInt16Type>().value(i) as u64),
        DType::U32 => Num::U(a.as_primitive::<UInt32Type>().value(i) as u64),
        DType::U64 => Num::U(a.as_primitive::<UInt64Type>().value(i)),
        DType::F16 => Num::F(a.as_primitive::<Float16Type>().value(i).to_f64()),
        DType::F32 => Num::F(a.as_primitive::<Float32Type>().value(i) as f64),
        DType::F64 => Num::F(a.as_primitive::<Float64Type>().value(i)),
    }
}

/// Which rows of the Arrow array `a` (a column's values as read) satisfy
/// comparison `c`, as [`compare_array`] says: one vectorised loop for
/// numbers compared as they are, a cast and a comparison per value
/// through casts that round or may fail.
pub(super) fn compare_values(a: &dyn arrow_array::Array, c: &Cmp) -> BooleanBuffer {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    use arrow_schema::DataType;
    let n = a.len();
    let (op, lit) = (c.op, &c.lit);
    let dtype = crate::arrow::dtype_of(a.data_type());
    let kind = match (dtype, a.data_type()) {
        (Some(d), _) => crate::columnar::format::ValueKind::Fixed(d),
        (None, DataType::Utf8) => crate::columnar::format::ValueKind::Utf8,
        (None, DataType::Binary) => crate::columnar::format::ValueKind::Binary,
        // Nothing else is columnar: keep every row (the caller filters).
        _ => return BooleanBuffer::new_set(n),
    };
    let how = casts(kind, c).0;
    macro_rules! ints {
        ($t:ty, $native:ty) => {{
            let v: &[$native] = a.as_primitive::<$t>().values();
            match lit {
                Lit::Int(l) => match <$native>::try_from(*l) {
                    Ok(l) => cmp_slice(v, op, l),
                    Err(_) => out_of_range(n, op, *l < 0),
                },
                // Not of one kind: kept (the caller filters).
                _ => BooleanBuffer::new_set(n),
            }
        }};
    }
    macro_rules! floats {
        ($t:ty, $native:ty) => {{
            let v: &[$native] = a.as_primitive::<$t>().values();
            match lit {
                Lit::Float(l) => float_bits(v, |x| x as f64, op, *l, c.floats),
                Lit::Int(l) if l.unsigned_abs() <= 1 << 53 => {
                    float_bits(v, |x| x as f64, op, *l as f64, c.floats)
                }
                _ => BooleanBuffer::new_set(n),
            }
        }};
    }
    let bits = match (how, a.data_type()) {
        (Casts::Unknown, _) => BooleanBuffer::new_set(n),
        (Casts::Round | Casts::Fail, _) | (Casts::Keep, DataType::Boolean | DataType::Float16) => {
            let dtype = dtype.expect("casts of a number column");
            BooleanBuffer::collect_bool(n, |i| {
                match cast_all(num_at(a, dtype, i), dtype, c) {
                    Some(v) => order(v, lit, c.floats).is_none_or(|o| op.test(o)),
                    // The cast fails: an error or null, for the caller.
                    None => true,
                }
            })
        }
        (Casts::Keep, DataType::Int8) => ints!(Int8Type, i8),
        (Casts::Keep, DataType::Int16) => ints!(Int16Type, i16),
        (Casts::Keep, DataType::Int32) => ints!(Int32Type, i32),
        (Casts::Keep, DataType::Int64) => ints!(Int64Type, i64),
        (Casts::Keep, DataType::UInt8) => ints!(UInt8Type, u8),
        (Casts::Keep, DataType::UInt16) => ints!(UInt16Type, u16),
        (Casts::Keep, DataType::UInt32) => ints!(UInt32Type, u32),
        (Casts::Keep, DataType::UInt64) => ints!(UInt64Type, u64),
        (Casts::Keep, DataType::Float32) => floats!(Float32Type, f32),
        (Casts::Keep, DataType::Float64) => floats!(Float64Type, f64),
        (Casts::Keep, DataType::Utf8 | DataType::Binary) => match lit {
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
        _ => BooleanBuffer::new_set(n),
    };
    match a.logical_nulls() {
        Some(nb) => &bits & nb.inner(),
        None => bits,
    }
}
