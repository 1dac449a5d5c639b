//! Row sets: the exact row ranges that record_id predicates (comparisons,
//! BETWEEN, IN lists and their conjunctions) select.

use std::ops::Range;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};

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
        let mut out = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < self.0.len() && j < other.0.len() {
            let a = &self.0[i];
            let b = &other.0[j];
            let lo = a.start.max(b.start);
            let hi = a.end.min(b.end);
            if lo < hi {
                out.push(lo..hi);
            }
            if a.end < b.end {
                i += 1;
            } else {
                j += 1;
            }
        }
        Rows(out)
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

pub(crate) fn literal_u64(e: &Expr) -> Option<i128> {
    match e {
        Expr::Literal(v, _) => match v {
            ScalarValue::UInt64(Some(x)) => Some(*x as i128),
            ScalarValue::UInt32(Some(x)) => Some(*x as i128),
            ScalarValue::UInt16(Some(x)) => Some(*x as i128),
            ScalarValue::UInt8(Some(x)) => Some(*x as i128),
            ScalarValue::Int64(Some(x)) => Some(*x as i128),
            ScalarValue::Int32(Some(x)) => Some(*x as i128),
            ScalarValue::Int16(Some(x)) => Some(*x as i128),
            ScalarValue::Int8(Some(x)) => Some(*x as i128),
            _ => None,
        },
        Expr::Cast(c) => literal_u64(&c.expr),
        Expr::TryCast(c) => literal_u64(&c.expr),
        _ => None,
    }
}

pub(crate) fn is_column(e: &Expr, name: &str) -> bool {
    match e {
        Expr::Column(c) => c.name == name,
        Expr::Cast(c) => is_column(&c.expr, name),
        Expr::TryCast(c) => is_column(&c.expr, name),
        _ => false,
    }
}

/// The exact row set a predicate on the index column selects, if it is one
/// of the forms pushed down (comparisons, BETWEEN, IN lists, AND of these).
pub(crate) fn index_rows(expr: &Expr, index: &str, len: u64) -> Option<Rows> {
    let clamp = |lo: i128, hi: i128| -> Rows {
        let lo = lo.clamp(0, len as i128) as u64;
        let hi = hi.clamp(0, len as i128) as u64;
        Rows::span(lo, hi)
    };
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if *op == Operator::And => {
            let a = index_rows(left, index, len)?;
            let b = index_rows(right, index, len)?;
            Some(a.intersect(&b))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (v, op) = if is_column(left, index) {
                (literal_u64(right)?, *op)
            } else if is_column(right, index) {
                (literal_u64(left)?, op.swap()?)
            } else {
                return None;
            };
            Some(match op {
                Operator::Eq => clamp(v, v + 1),
                Operator::Lt => clamp(0, v),
                Operator::LtEq => clamp(0, v + 1),
                Operator::Gt => clamp(v + 1, len as i128),
                Operator::GtEq => clamp(v, len as i128),
                _ => return None,
            })
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if is_column(expr, index) => {
            let lo = literal_u64(low)?;
            let hi = literal_u64(high)?;
            Some(clamp(lo, hi + 1))
        }
        Expr::InList(list) if !list.negated && is_column(&list.expr, index) => {
            let mut ids: Vec<u64> = Vec::with_capacity(list.list.len());
            for e in &list.list {
                let v = literal_u64(e)?;
                if v >= 0 && v < len as i128 {
                    ids.push(v as u64);
                }
            }
            ids.sort_unstable();
            ids.dedup();
            let mut ranges: Vec<Range<u64>> = Vec::new();
            for id in ids {
                match ranges.last_mut() {
                    Some(r) if r.end == id => r.end += 1,
                    _ => ranges.push(id..id + 1),
                }
            }
            Some(Rows(ranges))
        }
        _ => None,
    }
}
