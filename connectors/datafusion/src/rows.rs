//! Row sets: the exact row ranges that record_id predicates (comparisons,
//! BETWEEN, IN lists and their `AND`s and `OR`s) select.

use std::ops::Range;

use loaderx::columnar::{CmpOp, Lit, Pred};
use loaderx::DType;

/// Sorted, disjoint ranges of rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rows(pub(crate) Vec<Range<u64>>);

impl Rows {
    /// `lo..hi`, or nothing when empty.
    pub(crate) fn span(lo: u64, hi: u64) -> Rows {
        let mut v = Vec::with_capacity(1);
        if lo < hi {
            v.push(lo..hi);
        }
        Rows(v)
    }

    pub(crate) fn all(len: u64) -> Rows {
        Rows::span(0, len)
    }

    pub(crate) fn intersect(&self, other: &Rows) -> Rows {
        Rows(loaderx::columnar::intersect(&self.0, &other.0))
    }

    pub(crate) fn count(&self) -> u64 {
        self.0.iter().map(|r| r.end - r.start).sum()
    }

    /// Splits into at most `parts` pieces of about equal row counts.
    pub(crate) fn split(&self, parts: usize) -> Vec<Rows> {
        let total = self.count();
        let parts = (parts.max(1) as u64).min(total.max(1));
        let per = total.div_ceil(parts).max(1);
        let mut out = vec![Rows(vec![])];
        let mut room = per;
        for r in &self.0 {
            let mut start = r.start;
            while start < r.end {
                let take = (r.end - start).min(room);
                out.last_mut().unwrap().0.push(start..start + take);
                start += take;
                room -= take;
                if room == 0 {
                    out.push(Rows(vec![]));
                    room = per;
                }
            }
        }
        out.retain(|r| !r.0.is_empty());
        out
    }
}

/// The exact rows of `0..len` that `p` selects when it is a predicate on
/// the index column `index` alone (comparisons with integers, through
/// casts that keep every row number; `BETWEEN`, `IN` lists, and their
/// `AND`s and `OR`s); None otherwise.
pub(crate) fn index_rows(p: &Pred, index: &str, len: u64) -> Option<Rows> {
    match p {
        Pred::And(v) => {
            let mut acc = Rows::all(len);
            for p in v {
                acc = acc.intersect(&index_rows(p, index, len)?);
            }
            Some(acc)
        }
        Pred::Or(v) => {
            let mut acc = Rows(Vec::new());
            for p in v {
                acc = Rows(loaderx::columnar::union(
                    &acc.0,
                    &index_rows(p, index, len)?.0,
                ));
            }
            Some(acc)
        }
        Pred::Cmp(c) if c.column == index => {
            // Every cast holds each row number as it is.
            let keeps = c.casts.iter().all(|d| match d {
                DType::I8 | DType::U8 => len <= 1 << 7,
                DType::I16 | DType::U16 => len <= 1 << 15,
                DType::I32 | DType::U32 => len <= 1 << 31,
                DType::I64 | DType::U64 => true,
                _ => false,
            });
            let Lit::Int(v) = c.lit else {
                return None;
            };
            if !keeps {
                return None;
            }
            let clamp = |lo: i128, hi: i128| -> Rows {
                let lo = lo.clamp(0, len as i128) as u64;
                let hi = hi.clamp(0, len as i128) as u64;
                Rows::span(lo, hi)
            };
            Some(match c.op {
                CmpOp::Eq => clamp(v, v + 1),
                CmpOp::Lt => clamp(0, v),
                CmpOp::LtEq => clamp(0, v + 1),
                CmpOp::Gt => clamp(v + 1, len as i128),
                CmpOp::GtEq => clamp(v, len as i128),
                CmpOp::NotEq => Rows(loaderx::columnar::union(
                    &clamp(0, v).0,
                    &clamp(v + 1, len as i128).0,
                )),
            })
        }
        _ => None,
    }
}
