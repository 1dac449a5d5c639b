//! Chunk pruning: the rows a predicate may select, from the statistics of
//! columnar columns' chunks (minimum, maximum, null count). Comparisons of
//! a column with a literal, `BETWEEN`, `IN` lists, `IS [NOT] NULL` and
//! their `AND`s and `OR`s are understood; anything else keeps every row.
//! The predicate itself is still evaluated on the rows kept: pruning only
//! skips chunks where no row can match.

use std::cmp::Ordering;
use std::ops::Range;

use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use loaderx::arrow::StoreAccess;
use loaderx::columnar::{Bound, Columnar, Entry, Lit, Num, ValueKind};
use loaderx::{DType, Records};

use crate::rows::Rows;

/// A literal, in the form chunk bounds compare with (through casts of it).
fn literal(e: &Expr) -> Option<Lit> {
    match e {
        Expr::Literal(v, _) => crate::native::scalar(v),
        Expr::Cast(c) => literal(&c.expr),
        Expr::TryCast(c) => literal(&c.expr),
        _ => None,
    }
}

/// The column an expression reads as it is (or widened by a cast, which
/// keeps its order).
fn column(e: &Expr) -> Option<&str> {
    match e {
        Expr::Column(c) => Some(&c.name),
        Expr::Cast(c) => column(&c.expr),
        Expr::TryCast(c) => column(&c.expr),
        _ => None,
    }
}

/// How a chunk's value `v` (one of its bounds) compares with `lit`; None
/// when they do not compare.
fn compare(kind: ValueKind, b: &Bound, lit: &Lit) -> Option<Ordering> {
    match (kind, lit) {
        (ValueKind::Fixed(d), lit) => {
            let n = Num::from_bytes(d, b.number_bytes());
            match (n, lit) {
                (Num::I(v), Lit::Int(l)) => Some((v as i128).cmp(l)),
                (Num::U(v), Lit::Int(l)) => Some((v as i128).cmp(l)),
                (Num::F(v), Lit::Float(l)) => Some(v.total_cmp(l)),
                (Num::F(v), Lit::Int(l)) if l.unsigned_abs() < 1 << 53 => {
                    Some(v.total_cmp(&(*l as f64)))
                }
                (Num::I(v), Lit::Float(l))
                    if !l.is_nan() && (v as i128).unsigned_abs() < 1 << 53 =>
                {
                    (v as f64).partial_cmp(l)
                }
                (Num::U(v), Lit::Float(l)) if !l.is_nan() && v < 1 << 53 => {
                    (v as f64).partial_cmp(l)
                }
                _ => None,
            }
            .filter(|_| d != DType::F16 || matches!(lit, Lit::Float(_) | Lit::Int(_)))
        }
        (ValueKind::Utf8 | ValueKind::Binary, Lit::Bytes(l)) => Some(b.bytes().cmp(l.as_slice())),
        _ => None,
    }
}

/// Whether chunk `e` of a column of `kind` may hold a row where `col op
/// lit` is true.
fn may(kind: ValueKind, e: &Entry, op: Operator, lit: &Lit) -> bool {
    if e.null_count == e.rows {
        return false; // a comparison with null is never true
    }
    let lo = e.min().and_then(|b| compare(kind, b, lit));
    let hi = e.max().and_then(|b| compare(kind, b, lit));
    use Ordering::*;
    match op {
        // lower bound <= min and max <= upper bound.
        Operator::Eq => lo != Some(Greater) && hi != Some(Less),
        Operator::Lt => lo.is_none_or(|o| o == Less),
        Operator::LtEq => lo != Some(Greater),
        Operator::Gt => hi.is_none_or(|o| o == Greater),
        Operator::GtEq => hi != Some(Less),
        Operator::NotEq => {
            // Only a chunk whose every value is the literal is ruled out.
            let exact = e.min().is_some_and(|b| b.exact) && e.max().is_some_and(|b| b.exact);
            !(exact && lo == Some(Equal) && hi == Some(Equal) && e.null_count == 0)
        }
        _ => true,
    }
}

/// What a predicate asks of one column's chunks: for each chunk, whether
/// it may hold a matching row.
enum Test {
    Keep,
    Chunks(ChunkTest),
}

/// Whether a chunk (of a column of the kind) may hold a matching row.
type ChunkTest = Box<dyn Fn(ValueKind, &Entry) -> bool>;

/// Per chunk of `col`, whether a row of it may satisfy `expr` (a predicate
/// on that one column); None when `expr` is not one understood.
fn test(expr: &Expr) -> Option<(String, Test)> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (name, lit, op) = match (column(left), column(right)) {
                (Some(c), None) => (c, literal(right)?, *op),
                (None, Some(c)) => (c, literal(left)?, op.swap()?),
                _ => return None,
            };
            if !matches!(
                op,
                Operator::Eq
                    | Operator::NotEq
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq
            ) {
                return None;
            }
            Some((
                name.to_owned(),
                Test::Chunks(Box::new(move |k, e| may(k, e, op, &lit))),
            ))
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let name = column(expr)?;
            let (lo, hi) = (literal(low)?, literal(high)?);
            Some((
                name.to_owned(),
                Test::Chunks(Box::new(move |k, e| {
                    may(k, e, Operator::GtEq, &lo) && may(k, e, Operator::LtEq, &hi)
                })),
            ))
        }
        Expr::InList(list) if !list.negated => {
            let name = column(&list.expr)?;
            let lits: Vec<Lit> = list.list.iter().map(literal).collect::<Option<_>>()?;
            Some((
                name.to_owned(),
                Test::Chunks(Box::new(move |k, e| {
                    lits.iter().any(|l| may(k, e, Operator::Eq, l))
                })),
            ))
        }
        Expr::IsNull(inner) => {
            let name = column(inner)?;
            Some((
                name.to_owned(),
                Test::Chunks(Box::new(|_, e| e.null_count > 0)),
            ))
        }
        Expr::IsNotNull(inner) => {
            let name = column(inner)?;
            Some((
                name.to_owned(),
                Test::Chunks(Box::new(|_, e| e.null_count < e.rows)),
            ))
        }
        _ => None,
    }
    .or(Some((String::new(), Test::Keep)))
    .filter(|(n, _)| !n.is_empty())
}

/// The rows of `c` (record ids, `0..c.len()`) in chunks `keep` accepts.
fn chunk_rows(c: &Columnar, keep: &dyn Fn(ValueKind, &Entry) -> bool) -> Rows {
    let kind = c.kind();
    let mut physical: Vec<Range<u64>> = Vec::new();
    for (part, start) in c.parts().iter().zip(c.starts()) {
        let cs = part.starts();
        for (i, e) in part.footer().entries.iter().enumerate() {
            if !keep(kind, e) {
                continue;
            }
            let r = start + cs[i]..start + cs[i + 1];
            match physical.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ => physical.push(r),
            }
        }
    }
    match c.selection() {
        None => Rows(physical),
        Some(sel) => {
            // Record ids of the selected physical rows (ascending).
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
            Rows(out)
        }
    }
}

fn union(a: &Rows, b: &Rows) -> Rows {
    let mut all: Vec<Range<u64>> = a.0.iter().chain(&b.0).cloned().collect();
    all.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(all.len());
    for r in all {
        match out.last_mut() {
            Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    Rows(out)
}

/// The rows `expr` may select among `len`, from the chunk statistics of the
/// columnar columns of `streams`; None when it cannot tell.
pub(crate) fn rows<S: StoreAccess>(
    expr: &Expr,
    streams: &[(String, S)],
    len: u64,
) -> loaderx::Result<Option<Rows>> {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            let a = rows(left, streams, len)?;
            let b = rows(right, streams, len)?;
            return Ok(match (a, b) {
                (Some(a), Some(b)) => Some(a.intersect(&b)),
                (a, b) => a.or(b),
            });
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => {
            let a = rows(left, streams, len)?;
            let b = rows(right, streams, len)?;
            return Ok(match (a, b) {
                (Some(a), Some(b)) => Some(union(&a, &b)),
                _ => None,
            });
        }
        _ => {}
    }
    let Some((name, Test::Chunks(keep))) = test(expr) else {
        return Ok(None);
    };
    let Some((_, s)) = streams.iter().find(|(n, _)| *n == name) else {
        return Ok(None);
    };
    s.with(|r| {
        Ok(r.columnar()
            .filter(|c| c.len() == len)
            .map(|c| chunk_rows(c, keep.as_ref())))
    })
}
