//! Predicates over columnar columns: the one place that decides, for a
//! filter from SQL (DataFusion), polars or the Python API, which chunks
//! may hold a matching row, which rows match, and whether that answer is
//! exact.
//!
//! A predicate is a tree of `AND`s and `OR`s over leaves: a comparison of
//! a column, through a chain of number casts, with a literal ([`Cmp`]); a
//! substring, prefix or suffix test of text and bytes; `IS [NOT] NULL`;
//! and [`Pred::Unknown`], a part a caller could not translate, which may
//! hold on any row.
//!
//! - **Pruning** ([`bounds`]): a chunk is ruled out only when its
//!   statistics (minimum, maximum, null count) show no row can match. A
//!   cast is applied to the bounds themselves: every number cast the core
//!   knows (widening, rounding to a float, truncating a float to an
//!   integer, narrowing an integer) keeps order, so the cast bounds bound
//!   the cast values; where a bound does not survive the cast (out of the
//!   target's range, NaN to an integer) nothing is ruled out.
//! - **Rows** ([`kernels`], [`scan`]): a leaf keeps the rows where it holds.
//!   Null rows never satisfy a comparison. Floats compare in the leaf's
//!   [`FloatOrder`]. A leaf whose casts may fail keeps the rows whose cast
//!   fails too, and an unknown leaf keeps every row: the answer is then a
//!   superset, which the caller filters again.
//! - **Exactness** ([`Pred::exact`]): whether the rows kept are exactly the
//!   rows where the predicate holds: no unknown part, no cast that may
//!   fail, and a literal of the kind of the value it is compared with.
//!
//! See `docs/format.md`, "Predicates", for the float semantics.

mod bounds;
mod kernels;
mod scan;

use std::ops::Range;

use arrow_buffer::BooleanBuffer;
use serde_json::Value;

use super::column::Columnar;
use super::format::ValueKind;
use crate::error::{Error, Result};
use crate::schema::DType;

pub use bounds::{intersect, union};

/// Ascending, disjoint ranges of rows.
pub type RowRanges = Vec<Range<u64>>;
pub use kernels::compare_array;

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

    /// The operator with its sides swapped (`a < b` is `b > a`).
    pub fn swap(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::LtEq => CmpOp::GtEq,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::GtEq => CmpOp::LtEq,
            same => same,
        }
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

/// How floats compare (with each other and with a float literal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FloatOrder {
    /// As Arrow's comparison kernels (and so DataFusion) compare: IEEE
    /// 754 totalOrder (-NaN < -inf < ... < +inf < +NaN, a NaN equal only
    /// to itself) but with -0 equal to +0.
    #[default]
    Arrow,
    /// IEEE 754 totalOrder itself, -0 below +0: as DataFusion's `IN`
    /// lists of many values compare (by their bits).
    Total,
    /// polars' order: every NaN above every number and equal to every
    /// NaN, and -0 equal to +0.
    NanLast,
}

/// A comparison of a column's values, cast to the number types of
/// `casts` in turn (SQL `CAST` and `TRY_CAST`), with a literal.
#[derive(Clone, Debug, PartialEq)]
pub struct Cmp {
    pub column: String,
    /// Number types the values are cast to, in order, before comparing
    /// (booleans and half floats are not cast targets).
    pub casts: Vec<DType>,
    pub op: CmpOp,
    pub lit: Lit,
    pub floats: FloatOrder,
}

impl Cmp {
    /// `column op lit`, floats in Arrow's order.
    pub fn new(column: impl Into<String>, op: CmpOp, lit: Lit) -> Cmp {
        Cmp {
            column: column.into(),
            casts: Vec::new(),
            op,
            lit,
            floats: FloatOrder::Arrow,
        }
    }

    /// The same comparison of the values cast to `to` first (after the
    /// casts it has).
    pub fn cast(mut self, to: DType) -> Cmp {
        self.casts.push(to);
        self
    }

    /// The same comparison with floats in `order`.
    pub fn floats(mut self, order: FloatOrder) -> Cmp {
        self.floats = order;
        self
    }
}

/// A predicate over named columns (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub enum Pred {
    Cmp(Cmp),
    /// A text or bytes column's value tested against a byte string (a
    /// column of another type keeps every row).
    Text(String, TextOp, Vec<u8>),
    IsNull(String),
    IsNotNull(String),
    And(Vec<Pred>),
    Or(Vec<Pred>),
    /// A part not understood: it may hold on any row.
    Unknown,
}

impl Pred {
    /// `column op lit`, floats in Arrow's order.
    pub fn cmp(column: impl Into<String>, op: CmpOp, lit: Lit) -> Pred {
        Pred::Cmp(Cmp::new(column, op, lit))
    }

    /// The `AND` of `parts` (nested `AND`s flattened; one part is itself):
    /// an unknown part rules nothing out, but stays, so that the whole is
    /// not exact.
    pub fn and(parts: Vec<Pred>) -> Pred {
        let mut parts: Vec<Pred> = parts
            .into_iter()
            .flat_map(|p| match p {
                Pred::And(v) => v,
                p => vec![p],
            })
            .collect();
        match parts.len() {
            0 => Pred::Unknown,
            1 => parts.remove(0),
            _ => Pred::And(parts),
        }
    }

    /// The `OR` of `parts`: unknown when any part is.
    pub fn or(parts: Vec<Pred>) -> Pred {
        if parts.is_empty() || parts.contains(&Pred::Unknown) {
            return Pred::Unknown;
        }
        let mut parts: Vec<Pred> = parts
            .into_iter()
            .flat_map(|p| match p {
                Pred::Or(v) => v,
                p => vec![p],
            })
            .collect();
        match parts.len() {
            1 => parts.remove(0),
            _ => Pred::Or(parts),
        }
    }

    /// The predicate in its JSON form: `{"cmp": [column, op, literal]}`
    /// (`op` one of `eq ne lt le gt ge`; the literal `{"int": n}`,
    /// `{"float": x}` or `{"str": s}`; with `"floats"` beside `"cmp"`,
    /// one of `"arrow"` (the default), `"total"` and `"nan_last"`, for the
    /// [`FloatOrder`]), `{"contains": [column, s]}`,
    /// `{"starts_with": [column, s]}`, `{"ends_with": [column, s]}`,
    /// `{"is_null": column}`, `{"is_not_null": column}`, `{"and": [...]}`,
    /// `{"or": [...]}`, `{"unknown": true}`.
    pub fn from_json(text: &str) -> Result<Pred> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error::InvalidValue(format!("a predicate must be JSON: {e}")))?;
        Pred::from_value(&v).ok_or_else(|| {
            Error::InvalidValue(format!(
                "predicate {text} is not one of cmp, contains, starts_with, ends_with, \
                 is_null, is_not_null, and, or, unknown"
            ))
        })
    }

    fn from_value(v: &Value) -> Option<Pred> {
        let o = v.as_object()?;
        let floats = match o.get("floats").map(|f| f.as_str()) {
            None => FloatOrder::Arrow,
            Some(Some("arrow")) => FloatOrder::Arrow,
            Some(Some("total")) => FloatOrder::Total,
            Some(Some("nan_last")) => FloatOrder::NanLast,
            Some(_) => return None,
        };
        let extra = usize::from(o.contains_key("floats"));
        if o.len() != 1 + extra {
            return None;
        }
        let (k, v) = o.iter().find(|(k, _)| *k != "floats")?;
        if extra == 1 && k != "cmp" {
            return None;
        }
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
                let op = CmpOp::from_name(op.as_str()?)?;
                Pred::Cmp(Cmp::new(c.as_str()?, op, lit).floats(floats))
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
            "unknown" => Pred::Unknown,
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
            Pred::Cmp(c) => vec![c.column.as_str()],
            Pred::Text(c, _, _) | Pred::IsNull(c) | Pred::IsNotNull(c) => vec![c.as_str()],
            Pred::And(v) | Pred::Or(v) => v.iter().flat_map(Pred::columns).collect(),
            Pred::Unknown => Vec::new(),
        }
    }

    /// Whether it holds an unknown part.
    pub fn has_unknown(&self) -> bool {
        match self {
            Pred::Unknown => true,
            Pred::And(v) | Pred::Or(v) => v.iter().any(Pred::has_unknown),
            _ => false,
        }
    }

    /// Whether the rows the core keeps for it are exactly the rows where
    /// it holds, given the kind of each column it reads (None: not a
    /// columnar column): no unknown part, no comparison through a cast that
    /// may fail or truncate, and every literal of the kind of the value it
    /// is compared with (an integer with integers, a float with floats, a
    /// string with text or bytes; booleans are never exact).
    pub fn exact(&self, kind: &dyn Fn(&str) -> Option<ValueKind>) -> bool {
        match self {
            Pred::Unknown => false,
            Pred::And(v) | Pred::Or(v) => v.iter().all(|p| p.exact(kind)),
            Pred::Cmp(c) => kind(&c.column).is_some_and(|k| bounds::exact_cmp(k, c)),
            Pred::Text(c, ..) => kind(c).is_some_and(|k| !matches!(k, ValueKind::Fixed(_))),
            Pred::IsNull(c) | Pred::IsNotNull(c) => kind(c).is_some(),
        }
    }

    /// Combines what `leaf` says of each comparison and null test over `n`
    /// rows (a bit per row) as the `AND`s and `OR`s say; an unknown part
    /// keeps every row.
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
            Pred::Unknown => BooleanBuffer::new_set(n),
            leaf_pred => leaf(leaf_pred)?,
        })
    }

    /// What this comparison or null test says of physical rows `lo..hi` of
    /// the columnar column `c` (the column it names).
    pub fn eval_leaf(&self, c: &Columnar, lo: u64, hi: u64) -> Result<BooleanBuffer> {
        match self {
            Pred::Cmp(cmp) => c.compare(lo, hi, cmp),
            Pred::Text(_, op, s) => c.match_text(lo, hi, *op, s),
            Pred::IsNull(_) => Ok(!&c.valid_bits(lo, hi)?),
            Pred::IsNotNull(_) => c.valid_bits(lo, hi),
            Pred::Unknown => Ok(BooleanBuffer::new_set((hi - lo) as usize)),
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

    /// The rows where it may hold, as ascending, disjoint ranges, from what
    /// `leaf` says of each comparison and null test (None: anywhere); an
    /// unknown part may hold anywhere.
    pub fn may_rows_with(
        &self,
        leaf: &mut dyn FnMut(&Pred) -> Result<Option<RowRanges>>,
    ) -> Result<Option<RowRanges>> {
        Ok(match self {
            Pred::And(v) => {
                let mut acc: Option<RowRanges> = None;
                for p in v {
                    if let Some(r) = p.may_rows_with(leaf)? {
                        acc = Some(match acc {
                            None => r,
                            Some(a) => intersect(&a, &r),
                        });
                    }
                }
                acc
            }
            Pred::Or(v) => {
                let mut acc: RowRanges = Vec::new();
                for p in v {
                    match p.may_rows_with(leaf)? {
                        None => return Ok(None),
                        Some(r) => acc = union(&acc, &r),
                    }
                }
                Some(acc)
            }
            Pred::Unknown => None,
            leaf_pred => leaf(leaf_pred)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A float literal keeps its bits through the JSON form, which polars'
    /// predicates take: serde_json's default float parser may land one
    /// unit in the last place away, so that `f64 == x` missed the row
    /// holding `x` (found by the long differential run).
    #[test]
    fn float_literals_keep_their_bits_through_json() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits(x);
            if !v.is_finite() {
                continue;
            }
            let v = (v % 1e6) * 1.000_000_1; // values of ordinary magnitude too
            for v in [v, f64::from_bits(x)].into_iter().filter(|v| v.is_finite()) {
                let text = serde_json::json!({"cmp": ["f", "eq", {"float": v}]}).to_string();
                let Pred::Cmp(c) = Pred::from_json(&text).unwrap() else {
                    panic!("a comparison");
                };
                assert!(
                    matches!(c.lit, Lit::Float(got) if got.to_bits() == v.to_bits()),
                    "{text}"
                );
            }
        }
        for v in [3.7226338613744203, 18.351464649819054, 3.8780032158864772] {
            let text = format!("{{\"cmp\": [\"f\", \"le\", {{\"float\": {v:?}}}]}}");
            let Pred::Cmp(c) = Pred::from_json(&text).unwrap() else {
                panic!("a comparison");
            };
            assert!(matches!(c.lit, Lit::Float(got) if got == v), "{text}");
        }
    }
}
