//! DataFusion filters as the core's predicates ([`loaderx::columnar::Pred`]):
//! the one translation of a filter, made once per scan. The core then
//! decides which chunks may match (pruning), which rows match (when every
//! column the filter reads is columnar) and whether that is exact.
//!
//! Understood: comparisons of a column, as it is or through `CAST` and
//! `TRY_CAST` to number types (or between text types), with a literal;
//! `BETWEEN` and `IN` lists (negated too); `LIKE` patterns with `%` at
//! either end only (a substring, prefix or suffix test); `IS [NOT] NULL`;
//! and their `AND`s and `OR`s. Anything else (arithmetic, functions,
//! `NOT`, `ILIKE`, a comparison of two columns, a null literal) is
//! [`Pred::Unknown`]: it prunes nothing and keeps every row, for
//! DataFusion to decide.

use arrow_schema::{DataType, Schema};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Like, Operator};
use loaderx::columnar::{Cmp, CmpOp, FloatOrder, Lit, Pred, TextOp};
use loaderx::DType;

/// `expr` as the core's predicate over the columns of `schema`.
pub(crate) fn pred(expr: &Expr, schema: &Schema) -> Pred {
    translate(expr, schema).unwrap_or(Pred::Unknown)
}

fn translate(expr: &Expr, schema: &Schema) -> Option<Pred> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => Some(Pred::and(vec![pred(left, schema), pred(right, schema)])),
            Operator::Or => Some(Pred::or(vec![pred(left, schema), pred(right, schema)])),
            _ => {
                let op = cmp_op(*op)?;
                match (operand(left, schema), operand(right, schema)) {
                    (Some(c), None) => Some(cmp(c, op, literal(right)?)),
                    (None, Some(c)) => Some(cmp(c, op.swap(), literal(left)?)),
                    _ => None,
                }
            }
        },
        Expr::Between(Between {
            expr,
            negated,
            low,
            high,
        }) => {
            let c = operand(expr, schema)?;
            let (lo, hi) = (literal(low)?, literal(high)?);
            Some(if *negated {
                Pred::or(vec![cmp(c.clone(), CmpOp::Lt, lo), cmp(c, CmpOp::Gt, hi)])
            } else {
                Pred::and(vec![
                    cmp(c.clone(), CmpOp::GtEq, lo),
                    cmp(c, CmpOp::LtEq, hi),
                ])
            })
        }
        Expr::InList(list) if !list.list.is_empty() => {
            let c = operand(&list.expr, schema)?;
            let op = if list.negated {
                CmpOp::NotEq
            } else {
                CmpOp::Eq
            };
            // A list DataFusion keeps as a list (it turns short ones into
            // `=`s) compares floats by their bits: -0 is not +0.
            let parts = list
                .list
                .iter()
                .map(|l| {
                    literal(l).map_or(Pred::Unknown, |l| match cmp(c.clone(), op, l) {
                        Pred::Cmp(k) => Pred::Cmp(k.floats(FloatOrder::Total)),
                        other => other,
                    })
                })
                .collect();
            Some(if list.negated {
                Pred::and(parts)
            } else {
                Pred::or(parts)
            })
        }
        Expr::Like(Like {
            negated: false,
            expr,
            pattern,
            escape_char,
            case_insensitive: false,
        }) => {
            let c = operand(expr, schema)?;
            if !c.casts.is_empty() || !text(schema.field_with_name(&c.column).ok()?.data_type()) {
                return None;
            }
            let Lit::Bytes(p) = literal(pattern)? else {
                return None;
            };
            like(c.column, &p, *escape_char)
        }
        Expr::IsNull(inner) => Some(Pred::IsNull(plain(inner)?.to_owned())),
        Expr::IsNotNull(inner) => Some(Pred::IsNotNull(plain(inner)?.to_owned())),
        _ => None,
    }
}

fn cmp_op(op: Operator) -> Option<CmpOp> {
    Some(match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::NotEq,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::LtEq,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::GtEq,
        _ => return None,
    })
}

/// The comparison of operand `c` (its column and casts) with `lit`.
fn cmp(c: Operand, op: CmpOp, lit: Lit) -> Pred {
    Pred::Cmp(
        c.casts
            .into_iter()
            .fold(Cmp::new(c.column, op, lit), Cmp::cast),
    )
}

/// A column and the number casts applied to it, innermost first.
#[derive(Clone)]
struct Operand {
    column: String,
    casts: Vec<DType>,
}

/// The column `e` reads as it is, or through casts to number types (or,
/// for text, to other text types, which keep every value); None for
/// anything else.
fn operand(e: &Expr, schema: &Schema) -> Option<Operand> {
    match e {
        Expr::Column(c) => {
            schema.field_with_name(&c.name).ok()?;
            Some(Operand {
                column: c.name.clone(),
                casts: Vec::new(),
            })
        }
        Expr::Cast(c) => cast(operand(&c.expr, schema)?, c.field.data_type(), schema),
        Expr::TryCast(c) => cast(operand(&c.expr, schema)?, c.field.data_type(), schema),
        _ => None,
    }
}

fn cast(mut o: Operand, to: &DataType, schema: &Schema) -> Option<Operand> {
    let from = schema.field_with_name(&o.column).ok()?.data_type();
    if text(from) {
        // Text to text (UTF-8 is valid bytes); bytes to text may fail.
        let keeps = o.casts.is_empty() && (text(to) && (utf8(from) || !utf8(to)));
        return keeps.then_some(o);
    }
    o.casts.push(number(to)?);
    Some(o)
}

/// The column `e` reads as it is.
fn plain(e: &Expr) -> Option<&str> {
    match e {
        Expr::Column(c) => Some(&c.name),
        _ => None,
    }
}

/// The core's dtype of a number cast target (booleans, half floats and
/// everything else are not cast targets of the core).
fn number(t: &DataType) -> Option<DType> {
    loaderx::arrow::dtype_of(t).filter(|d| !matches!(d, DType::Bool | DType::F16))
}

fn text(ty: &DataType) -> bool {
    utf8(ty)
        || matches!(
            ty,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView
        )
}

fn utf8(ty: &DataType) -> bool {
    matches!(
        ty,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

/// The pattern of `name LIKE p` as a test of the core: `%s%` a substring,
/// `s%` a prefix, `%s` a suffix and `s` an equality, where `s` holds no
/// `%`, `_`, backslash or escape character; None for any other pattern.
fn like(name: String, p: &[u8], escape: Option<char>) -> Option<Pred> {
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
    let body = body.to_vec();
    Some(match (lead > 0, trail > 0) {
        (true, true) => Pred::Text(name, TextOp::Contains, body),
        (false, true) => Pred::Text(name, TextOp::StartsWith, body),
        (true, false) => Pred::Text(name, TextOp::EndsWith, body),
        (false, false) => Pred::cmp(name, CmpOp::Eq, Lit::Bytes(body)),
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
fn scalar(v: &ScalarValue) -> Option<Lit> {
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
    use datafusion::logical_expr::{cast, col, lit, try_cast};
    use loaderx::columnar::ValueKind;

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("i16", DataType::Int16, true),
            Field::new("u32", DataType::UInt32, true),
            Field::new("f32", DataType::Float32, true),
            Field::new("f64", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
        ])
    }

    fn kind(name: &str) -> Option<ValueKind> {
        Some(match name {
            "i16" => ValueKind::Fixed(DType::I16),
            "u32" => ValueKind::Fixed(DType::U32),
            "f32" => ValueKind::Fixed(DType::F32),
            "f64" => ValueKind::Fixed(DType::F64),
            "s" => ValueKind::Utf8,
            "b" => ValueKind::Fixed(DType::Bool),
            _ => return None,
        })
    }

    fn c(name: &str, op: CmpOp, l: Lit) -> Cmp {
        Cmp::new(name, op, l)
    }

    #[test]
    fn comparisons_and_their_casts_are_translated_once() {
        let s = schema();
        assert_eq!(
            pred(&col("i16").gt(lit(7i64)), &s),
            Pred::Cmp(c("i16", CmpOp::Gt, Lit::Int(7)))
        );
        // Literal on the left: the operator turns round.
        assert_eq!(
            pred(&lit(7i64).gt(col("i16")), &s),
            Pred::Cmp(c("i16", CmpOp::Lt, Lit::Int(7)))
        );
        // Casts are kept, innermost first, whatever they do to the values:
        // the core decides what they allow.
        assert_eq!(
            pred(&cast(col("f64"), DataType::Int64).eq(lit(5i64)), &s),
            Pred::Cmp(c("f64", CmpOp::Eq, Lit::Int(5)).cast(DType::I64))
        );
        let twice = try_cast(cast(col("u32"), DataType::Float32), DataType::Int8);
        assert_eq!(
            pred(&twice.lt_eq(lit(3i64)), &s),
            Pred::Cmp(
                c("u32", CmpOp::LtEq, Lit::Int(3))
                    .cast(DType::F32)
                    .cast(DType::I8)
            )
        );
        // Text to text keeps every value: no cast.
        assert_eq!(
            pred(&cast(col("s"), DataType::Utf8View).lt(lit("x")), &s),
            Pred::Cmp(c("s", CmpOp::Lt, Lit::Bytes(b"x".to_vec())))
        );
        let both = col("i16").eq(lit(1i64)).and(col("s").is_not_null());
        assert!(matches!(pred(&both, &s), Pred::And(v) if v.len() == 2));
        // BETWEEN and IN lists, negated too.
        let between = col("i16").between(lit(1i64), lit(4i64));
        assert_eq!(
            pred(&between, &s),
            Pred::And(vec![
                Pred::Cmp(c("i16", CmpOp::GtEq, Lit::Int(1))),
                Pred::Cmp(c("i16", CmpOp::LtEq, Lit::Int(4))),
            ])
        );
        let not_in = col("i16").in_list(vec![lit(1i64), lit(2i64)], true);
        assert_eq!(
            pred(&not_in, &s),
            Pred::And(vec![
                Pred::Cmp(c("i16", CmpOp::NotEq, Lit::Int(1)).floats(FloatOrder::Total)),
                Pred::Cmp(c("i16", CmpOp::NotEq, Lit::Int(2)).floats(FloatOrder::Total)),
            ])
        );
    }

    #[test]
    fn like_patterns_with_percent_at_the_ends_are_text_tests() {
        let s = schema();
        let text = |op, v: &str| Pred::Text("s".into(), op, v.as_bytes().to_vec());
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
            Pred::cmp("s", CmpOp::Eq, Lit::Bytes(b"harbor".to_vec()))
        );
        // Wildcards inside, escapes, NOT LIKE, ILIKE: unknown to the core.
        for e in [
            col("s").like(lit("%har%bor%")),
            col("s").like(lit("%har_or%")),
            col("s").like(lit("%har\\%%")),
            col("s").not_like(lit("%harbor%")),
            col("s").ilike(lit("%harbor%")),
            col("s").like(col("s")),
        ] {
            assert_eq!(pred(&e, &s), Pred::Unknown, "{e}");
        }
        let escaped = Expr::Like(Like::new(
            false,
            Box::new(col("s")),
            Box::new(lit("%a#b%")),
            Some('#'),
            false,
        ));
        assert_eq!(pred(&escaped, &s), Pred::Unknown);
    }

    #[test]
    fn what_is_not_understood_is_unknown_and_never_exact() {
        let s = schema();
        for e in [
            (col("i16") + lit(1i64)).gt(lit(5i64)),
            col("i16").eq(col("u32")),
            !col("i16").eq(lit(1i64)),
            cast(col("i16"), DataType::Utf8).eq(lit("1")),
            cast(col("i16"), DataType::Boolean).eq(lit(true)),
            col("i16").gt(lit(1i64)).or(col("s").like(lit("1%2"))),
        ] {
            let p = pred(&e, &s);
            assert_eq!(p, Pred::Unknown, "{e}");
            assert!(!p.exact(&kind), "{e}");
        }
        // An AND keeps what it understands (it prunes by it), and is no
        // longer exact.
        let half = col("i16")
            .gt(lit(1i64))
            .and((col("i16") + lit(1i64)).gt(lit(5i64)));
        let p = pred(&half, &s);
        let known = Pred::Cmp(c("i16", CmpOp::Gt, Lit::Int(1)));
        assert_eq!(p, Pred::And(vec![known, Pred::Unknown]));
        assert!(!p.exact(&kind));
    }

    #[test]
    fn the_core_says_which_translations_are_exact() {
        let s = schema();
        let exact = |e: Expr| pred(&e, &s).exact(&kind);
        // Values compared as they are, or through casts that never fail.
        assert!(exact(col("i16").gt(lit(7i64))));
        assert!(exact(cast(col("i16"), DataType::Int64).lt(lit(-3i64))));
        assert!(exact(cast(col("u32"), DataType::Float64).lt(lit(2.5f64))));
        assert!(exact(cast(col("f32"), DataType::Float64).eq(lit(0.0f64))));
        assert!(exact(col("f64").gt(lit(f64::NAN))));
        assert!(exact(col("s").like(lit("%a%"))));
        assert!(exact(col("s").is_null()));
        // Casts that may fail or truncate, booleans, literals of another
        // kind: inexact (DataFusion applies them again).
        assert!(!exact(cast(col("f64"), DataType::Int64).eq(lit(5i64))));
        assert!(!exact(cast(col("i16"), DataType::Int8).eq(lit(1i64))));
        assert!(!exact(cast(col("u32"), DataType::Int32).eq(lit(1i64))));
        assert!(!exact(col("b").eq(lit(true))));
        assert!(!exact(col("s").eq(lit(3i64))));
        assert!(!exact(col("i16").eq(lit("x"))));
    }
}
