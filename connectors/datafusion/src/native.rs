//! Filters the core evaluates itself on columnar chunks as they are stored
//! ([`loaderx::columnar::Pred`]): comparisons of a column (as it is, or
//! widened by a cast that keeps every value) with a literal, `BETWEEN`,
//! `IN` lists, `LIKE` patterns with `%` at either end only (a substring,
//! prefix or suffix test), `IS [NOT] NULL` and their `AND`s and `OR`s.
//!
//! The core's evaluation keeps every row the filter keeps and may keep
//! more (a float column's NaN rows): a filter that compares a float is
//! pushed down as inexact, so DataFusion applies it again to the rows the
//! scan returns, which are few when the filter is selective; every other
//! is exact ([`exact`]), and the columns it reads need not leave the scan. Comparisons whose result
//! could differ between the core's total order of floats and the one
//! DataFusion's kernels use (a literal of zero or NaN) are left to
//! DataFusion.

use arrow_schema::{DataType, Schema};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Like, Operator};
use loaderx::columnar::{CmpOp, Lit, Pred, TextOp};

/// `expr` as a predicate the core evaluates on the columns of `schema`;
/// None when it is not one (or not one exactly enough).
pub(crate) fn pred(expr: &Expr, schema: &Schema) -> Option<Pred> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And | Operator::Or => {
                let parts = vec![pred(left, schema)?, pred(right, schema)?];
                Some(if *op == Operator::And {
                    Pred::And(parts)
                } else {
                    Pred::Or(parts)
                })
            }
            _ => {
                let (name, lit, op) = match (column(left, schema), column(right, schema)) {
                    (Some(c), None) => (c, literal(right)?, *op),
                    (None, Some(c)) => (c, literal(left)?, op.swap()?),
                    _ => return None,
                };
                cmp(name, op, lit, schema)
            }
        },
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let name = column(expr, schema)?;
            Some(Pred::And(vec![
                cmp(name, Operator::GtEq, literal(low)?, schema)?,
                cmp(name, Operator::LtEq, literal(high)?, schema)?,
            ]))
        }
        Expr::InList(list) if !list.negated && !list.list.is_empty() => {
            let name = column(&list.expr, schema)?;
            let parts = list
                .list
                .iter()
                .map(|l| cmp(name, Operator::Eq, literal(l)?, schema))
                .collect::<Option<Vec<_>>>()?;
            Some(Pred::Or(parts))
        }
        Expr::Like(Like {
            negated: false,
            expr,
            pattern,
            escape_char,
            case_insensitive: false,
        }) => {
            let name = column(expr, schema)?;
            if !text(schema.field_with_name(name).ok()?.data_type()) {
                return None;
            }
            let Lit::Bytes(p) = literal(pattern)? else {
                return None;
            };
            like(name, &p, *escape_char)
        }
        Expr::IsNull(inner) => Some(Pred::IsNull(column(inner, schema)?.to_owned())),
        Expr::IsNotNull(inner) => Some(Pred::IsNotNull(column(inner, schema)?.to_owned())),
        _ => None,
    }
}

/// Whether the core's evaluation of `p` (a predicate [`pred`] made on
/// `schema`) keeps exactly the rows DataFusion's would: true unless it
/// compares a float (whose NaN rows the core keeps).
pub(crate) fn exact(p: &Pred, schema: &Schema) -> bool {
    match p {
        Pred::And(v) | Pred::Or(v) => v.iter().all(|p| exact(p, schema)),
        Pred::Cmp(name, _, lit) => {
            let Ok(f) = schema.field_with_name(name) else {
                return false;
            };
            match lit {
                Lit::Int(_) => integer(f.data_type()),
                Lit::Bytes(_) => text(f.data_type()),
                Lit::Float(_) => false,
            }
        }
        Pred::Text(..) | Pred::IsNull(_) | Pred::IsNotNull(_) => true,
    }
}

/// The pattern of `name LIKE p` as a test of the core: `%s%` a substring,
/// `s%` a prefix, `%s` a suffix and `s` an equality, where `s` holds no
/// `%`, `_`, backslash or escape character; None for any other pattern.
fn like(name: &str, p: &[u8], escape: Option<char>) -> Option<Pred> {
    let lead = p.iter().take_while(|&&b| b == b'%').count();
    let body = &p[lead..];
    let trail = body.iter().rev().take_while(|&&b| b == b'%').count();
    let body = &body[..body.len() - trail];
    let special = |b: &u8| {
        matches!(b, b'%' | b'_' | b'\\') || escape.is_some_and(|e| e.is_ascii() && *b == e as u8)
    };
    if body.iter().any(special) || escape.is_some_and(|e| !e.is_ascii()) {
        return None;
    }
    let name = name.to_owned();
    let body = body.to_vec();
    Some(match (lead > 0, trail > 0) {
        (true, true) => Pred::Text(name, TextOp::Contains, body),
        (false, true) => Pred::Text(name, TextOp::StartsWith, body),
        (true, false) => Pred::Text(name, TextOp::EndsWith, body),
        (false, false) => Pred::Cmp(name, CmpOp::Eq, Lit::Bytes(body)),
    })
}

/// `name op lit`, when the core compares them as DataFusion does.
fn cmp(name: &str, op: Operator, lit: Lit, schema: &Schema) -> Option<Pred> {
    let op = match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::NotEq,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::LtEq,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::GtEq,
        _ => return None,
    };
    let ty = schema.field_with_name(name).ok()?.data_type();
    let agrees = match &lit {
        // Zero and NaN are where total and IEEE order part.
        Lit::Float(x) => numeric(ty) && *x != 0.0 && !x.is_nan(),
        Lit::Int(_) => integer(ty),
        Lit::Bytes(_) => text(ty),
    };
    agrees.then(|| Pred::Cmp(name.to_owned(), op, lit))
}

fn integer(ty: &DataType) -> bool {
    ty.is_integer()
}

fn numeric(ty: &DataType) -> bool {
    ty.is_integer() || matches!(ty, DataType::Float32 | DataType::Float64)
}

fn text(ty: &DataType) -> bool {
    matches!(
        ty,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
    )
}

/// The column `e` reads: as it is, or through a cast that keeps every
/// value of the column's type (a wider integer or a float for an
/// integer, `Float64` for a float, another text type for text).
fn column<'a>(e: &'a Expr, schema: &Schema) -> Option<&'a str> {
    match e {
        Expr::Column(c) => Some(&c.name),
        Expr::Cast(c) => widened(column(&c.expr, schema)?, c.field.data_type(), schema),
        Expr::TryCast(c) => widened(column(&c.expr, schema)?, c.field.data_type(), schema),
        _ => None,
    }
}

fn widened<'a>(name: &'a str, to: &DataType, schema: &Schema) -> Option<&'a str> {
    let from = schema.field_with_name(name).ok()?.data_type();
    let keeps = match (from, to) {
        _ if from == to => true,
        (f, t) if f.is_integer() && t.is_integer() => {
            // Every value of `f` is one of `t`: signedness and width.
            let (fs, fw) = int_shape(f)?;
            let (ts, tw) = int_shape(t)?;
            (fs == ts && tw >= fw) || (!fs && ts && tw > fw)
        }
        // Compared as the cast does (rounded to the float).
        (f, DataType::Float64 | DataType::Float32) if f.is_integer() => true,
        (DataType::Float32, DataType::Float64) => true,
        (f, t) if text(f) && text(t) => true,
        _ => false,
    };
    keeps.then_some(name)
}

/// (signed, bits) of an integer type.
fn int_shape(t: &DataType) -> Option<(bool, u32)> {
    Some(match t {
        DataType::Int8 => (true, 8),
        DataType::Int16 => (true, 16),
        DataType::Int32 => (true, 32),
        DataType::Int64 => (true, 64),
        DataType::UInt8 => (false, 8),
        DataType::UInt16 => (false, 16),
        DataType::UInt32 => (false, 32),
        DataType::UInt64 => (false, 64),
        _ => return None,
    })
}

/// A literal as the core compares it (a cast of a literal is not taken:
/// the planner folds them).
fn literal(e: &Expr) -> Option<Lit> {
    match e {
        Expr::Literal(v, _) => scalar(v),
        _ => None,
    }
}

/// A scalar as the core compares it (booleans as 0 and 1); None for null
/// and other types.
pub(crate) fn scalar(v: &ScalarValue) -> Option<Lit> {
    Some(match v {
        ScalarValue::Int8(Some(x)) => Lit::Int(*x as i128),
        ScalarValue::Int16(Some(x)) => Lit::Int(*x as i128),
        ScalarValue::Int32(Some(x)) => Lit::Int(*x as i128),
        ScalarValue::Int64(Some(x)) => Lit::Int(*x as i128),
        ScalarValue::UInt8(Some(x)) => Lit::Int(*x as i128),
        ScalarValue::UInt16(Some(x)) => Lit::Int(*x as i128),
        ScalarValue::UInt32(Some(x)) => Lit::Int(*x as i128),
        ScalarValue::UInt64(Some(x)) => Lit::Int(*x as i128),
        ScalarValue::Boolean(Some(x)) => Lit::Int(*x as i128),
        ScalarValue::Float32(Some(x)) => Lit::Float(*x as f64),
        ScalarValue::Float64(Some(x)) => Lit::Float(*x),
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Lit::Bytes(s.as_bytes().to_vec()),
        ScalarValue::Binary(Some(b))
        | ScalarValue::LargeBinary(Some(b))
        | ScalarValue::BinaryView(Some(b)) => Lit::Bytes(b.clone()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::Field;
    use datafusion::logical_expr::{cast, col, lit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("i16", DataType::Int16, true),
            Field::new("u32", DataType::UInt32, true),
            Field::new("f32", DataType::Float32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
        ])
    }

    #[test]
    fn comparisons_the_core_evaluates_as_datafusion_does() {
        let s = schema();
        let got = pred(&col("i16").gt(lit(7i64)), &s);
        assert_eq!(got, Some(Pred::Cmp("i16".into(), CmpOp::Gt, Lit::Int(7))));
        // Literal on the left: the operator turns round.
        let got = pred(&lit(7i64).gt(col("i16")), &s);
        assert_eq!(got, Some(Pred::Cmp("i16".into(), CmpOp::Lt, Lit::Int(7))));
        // Widening casts keep every value.
        for (c, to) in [
            ("i16", DataType::Int64),
            ("u32", DataType::Int64),
            ("u32", DataType::Float64),
            ("f32", DataType::Float64),
            ("s", DataType::Utf8View),
        ] {
            let l = if to == DataType::Utf8View {
                lit("x")
            } else {
                lit(2.5f64)
            };
            assert!(
                pred(&cast(col(c), to.clone()).lt_eq(l), &s).is_some(),
                "{c} {to}"
            );
        }
        let both = col("i16").eq(lit(1i64)).and(col("s").is_not_null());
        assert!(matches!(pred(&both, &s), Some(Pred::And(v)) if v.len() == 2));
    }

    #[test]
    fn like_patterns_with_percent_at_the_ends_are_text_tests() {
        let s = schema();
        let text = |op, v: &str| Some(Pred::Text("s".into(), op, v.as_bytes().to_vec()));
        assert_eq!(
            pred(&col("s").like(lit("%harbor%")), &s),
            text(TextOp::Contains, "harbor")
        );
        assert_eq!(
            pred(&col("s").like(lit("%%a b%%")), &s),
            text(TextOp::Contains, "a b")
        );
        assert_eq!(
            pred(&col("s").like(lit("harbor%")), &s),
            text(TextOp::StartsWith, "harbor")
        );
        assert_eq!(
            pred(&col("s").like(lit("%harbor")), &s),
            text(TextOp::EndsWith, "harbor")
        );
        assert_eq!(
            pred(&col("s").like(lit("harbor")), &s),
            Some(Pred::Cmp(
                "s".into(),
                CmpOp::Eq,
                Lit::Bytes(b"harbor".to_vec())
            ))
        );
        // Wildcards inside, escapes, NOT LIKE, ILIKE: left to DataFusion.
        for e in [
            col("s").like(lit("%har%bor%")),
            col("s").like(lit("%har_or%")),
            col("s").like(lit("%har\\%%")),
            col("s").not_like(lit("%harbor%")),
            col("s").ilike(lit("%harbor%")),
            col("s").like(col("s")),
        ] {
            assert_eq!(pred(&e, &s), None, "{e}");
        }
        let escaped = Expr::Like(Like::new(
            false,
            Box::new(col("s")),
            Box::new(lit("%a#b%")),
            Some('#'),
            false,
        ));
        assert_eq!(pred(&escaped, &s), None);
    }

    #[test]
    fn what_could_differ_is_left_to_datafusion() {
        let s = schema();
        // Casts that lose values, a boolean column, zero and NaN literals
        // on floats, a function of the column, a literal of another kind.
        for e in [
            cast(col("i16"), DataType::Int8).eq(lit(1i64)),
            cast(col("u32"), DataType::Int32).eq(lit(1i64)),
            cast(col("f32"), DataType::Int64).eq(lit(1i64)),
            col("b").eq(lit(true)),
            col("f32").gt(lit(0.0f64)),
            col("f32").gt(lit(-0.0f64)),
            col("f32").lt(lit(f64::NAN)),
            (col("i16") + lit(1i64)).gt(lit(5i64)),
            col("s").eq(lit(3i64)),
            col("i16").eq(lit("x")),
            col("i16").gt(lit(1i64)).or(col("i16").like(lit("1%"))),
        ] {
            assert_eq!(pred(&e, &s), None, "{e}");
        }
    }
}
