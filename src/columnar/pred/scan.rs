//! Predicates on a column's stored chunks: each chunk that its statistics
//! cannot decide is read (a narrowed chunk of integers compared as
//! stored) and compared, in parallel on the executor's threads when the
//! chunks are many.

use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder};

use super::bounds::{casts, verdict, Casts, Verdict};
use super::kernels::{cmp_slice, compare_array, compare_values, out_of_range, text_values};
use super::{Cmp, CmpOp, Lit, Pred, TextOp};
use crate::columnar::arrow::{chunk_array, Piece};
use crate::columnar::column::Columnar;
use crate::columnar::decode::{decode_narrowed, Narrow};
use crate::columnar::format::{Encoding, ValueKind};
use crate::columnar::num::Num;
use crate::error::{Error, Result};

/// Pieces of a range from which its chunks are compared in parallel.
const PARALLEL_PIECES: usize = 16;

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

    /// Whether each of physical rows `lo..hi` satisfies comparison `c`
    /// (see the module documentation of `columnar::pred`); the chunks are
    /// compared in parallel on the executor's threads when they are many.
    pub fn compare(&self, lo: u64, hi: u64, c: &Cmp) -> Result<BooleanBuffer> {
        self.bits_by_piece(lo, hi, &|p| self.compare_piece(p, c))
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
        one: &(dyn Fn(&Piece) -> Result<BooleanBuffer> + Sync),
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

    fn compare_piece(&self, p: &Piece, c: &Cmp) -> Result<BooleanBuffer> {
        let kind = self.kind();
        let n = p.b - p.a;
        let file = &self.parts()[p.part];
        let e = &file.footer().entries[p.chunk];
        match verdict(kind, e, c) {
            Verdict::None => return Ok(BooleanBuffer::new_unset(n)),
            Verdict::All => return Ok(BooleanBuffer::new_set(n)),
            Verdict::Some => {}
        }
        if let Some(d) = file.kept_arc(p.chunk) {
            return Ok(compare_values(&chunk_array(&d, p.a, p.b), c));
        }
        if let Some(narrow) = self.narrowed_piece(p, c)? {
            return Ok(narrow.bits(c.op));
        }
        let d = file.chunk_arc(p.chunk)?;
        Ok(compare_values(&chunk_array(&d, p.a, p.b), c))
    }

    /// The narrowed values of piece `p` and the literal of `c` in their
    /// terms, when its chunk is narrowed integers compared as they are
    /// with an integer; None otherwise.
    fn narrowed_piece(&self, p: &Piece, c: &Cmp) -> Result<Option<NarrowPiece>> {
        let file = &self.parts()[p.part];
        let e = &file.footer().entries[p.chunk];
        let (ValueKind::Fixed(dtype), Encoding::Narrowed | Encoding::Packed, Lit::Int(l)) =
            (self.kind(), e.encoding(), &c.lit)
        else {
            return Ok(None);
        };
        if casts(self.kind(), c).0 != Casts::Keep {
            return Ok(None);
        }
        if file.kept_arc(p.chunk).is_some() {
            return Ok(None);
        }
        let bytes = file.stored(p.chunk, p.chunk + 1)?;
        let at = if p.chunk == 0 {
            crate::columnar::format::MAGIC.len()
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
        let one = |p: &Piece| self.filter_piece(p, leaf);
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
            0 => arrow_array::new_empty_array(&crate::columnar::arrow::value_type(self.kind())),
            _ => crate::columnar::arrow::concat(&arrays)?,
        };
        Ok((bits.finish(), values))
    }

    fn filter_piece(
        &self,
        p: &Piece,
        leaf: &Pred,
    ) -> Result<(BooleanBuffer, arrow_array::ArrayRef)> {
        let n = p.b - p.a;
        let file = &self.parts()[p.part];
        let e = &file.footer().entries[p.chunk];
        let empty =
            || arrow_array::new_empty_array(&crate::columnar::arrow::value_type(self.kind()));
        if e.null_count == e.rows {
            return Ok((BooleanBuffer::new_unset(n), empty()));
        }
        if let Pred::Cmp(c) = leaf {
            if let Verdict::None = verdict(self.kind(), e, c) {
                return Ok((BooleanBuffer::new_unset(n), empty()));
            }
            if let Some(narrow) = self.narrowed_piece(p, c)? {
                let bits = narrow.bits(c.op);
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
        crate::columnar::arrow::fixed_array(self.dtype, out)
    }
}
