//! Round trips and corruption of column files.

use std::path::Path;

use super::format::{Encoding, FLAG_VALUES_ZSTD};
use super::writer::CHUNK_ROWS;
use super::*;
use crate::io::Fs;
use crate::{DType, Records};

/// Every value of a slice of numbers as little-endian bytes, end to end.
macro_rules! le_bytes {
    ($v:expr) => {
        $v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()
    };
}

fn write_fixed(dir: &Path, dtype: DType, bytes: &[u8], valid: Option<&[bool]>, compress: bool) {
    let mut w = ColumnWriter::create(dir, ValueKind::Fixed(dtype), compress).unwrap();
    // In two pushes, to cross a push boundary.
    let wd = dtype.itemsize();
    let n = bytes.len() / wd;
    let half = n / 3;
    let v0 = valid.map(|v| move |i: usize| v[i]);
    w.push_fixed(
        &bytes[..half * wd],
        v0.as_ref().map(|f| f as &dyn Fn(usize) -> bool),
    )
    .unwrap();
    let v1 = valid.map(|v| move |i: usize| v[half + i]);
    w.push_fixed(
        &bytes[half * wd..],
        v1.as_ref().map(|f| f as &dyn Fn(usize) -> bool),
    )
    .unwrap();
    assert_eq!(w.finish().unwrap(), n as u64);
}

fn open(dir: &Path) -> Columnar {
    Columnar::open(&Fs::Local, dir, std::iter::once(dir.to_path_buf()), None).unwrap()
}

/// A gather of rows `idx` gives each row's `w` bytes of `bytes`, zeros
/// for a row that `valid` says is null.
fn assert_gathered(col: &Columnar, idx: &[u64], bytes: &[u8], w: usize, valid: Option<&[bool]>) {
    let got = col.gather_dense(idx).unwrap();
    for (pos, &i) in idx.iter().enumerate() {
        let i = i as usize;
        let want = if valid.is_some_and(|v| !v[i]) {
            vec![0u8; w]
        } else {
            bytes[i * w..(i + 1) * w].to_vec()
        };
        assert_eq!(
            &got.as_slice()[pos * w..(pos + 1) * w],
            &want[..],
            "{} row {i}",
            col.logical()
        );
    }
}

fn lcg(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed;
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s >> 17
    }
}

#[test]
fn numbers_round_trip_with_nulls() {
    let tmp = tempfile::tempdir().unwrap();
    let mut r = lcg(7);
    for (k, dtype) in DType::ALL.into_iter().enumerate() {
        for compress in [false, true] {
            let n = 40_000 + k * 10;
            let w = dtype.itemsize();
            let mut bytes: Vec<u8> = (0..n * w).map(|_| r() as u8).collect();
            if dtype == DType::Bool {
                bytes.iter_mut().for_each(|b| *b &= 1);
            }
            if dtype == DType::I64 {
                // Small span: narrowed.
                for (i, c) in bytes.chunks_exact_mut(8).enumerate() {
                    c.copy_from_slice(&(1000 + (i as i64 % 300) - 150).to_le_bytes());
                }
            }
            let valid: Vec<bool> = (0..n).map(|i| i % 7 != 3 || i > 30_000).collect();
            for nulls in [false, true] {
                let dir = tmp.path().join(format!("{dtype}-{compress}-{nulls}"));
                let v = nulls.then_some(&valid[..]);
                write_fixed(&dir, dtype, &bytes, v, compress);
                let col = open(&dir);
                assert_eq!(col.len(), n as u64);
                assert_eq!(col.validity().is_some(), nulls);
                let idx: Vec<u64> = (0..500)
                    .map(|_| r() % n as u64)
                    .chain([0, n as u64 - 1])
                    .collect();
                assert_gathered(&col, &idx, &bytes, w, nulls.then_some(&valid[..]));
                if nulls {
                    let bits = col.validity().unwrap().gather_dense(&idx).unwrap();
                    for (pos, &i) in idx.iter().enumerate() {
                        assert_eq!(bits.as_slice()[pos] != 0, valid[i as usize]);
                    }
                }
                // Every row, in order.
                let all: Vec<u64> = (0..n as u64).collect();
                let got = col.gather_dense(&all).unwrap();
                if !nulls {
                    assert_eq!(got.as_slice(), &bytes[..], "{dtype} compress={compress}");
                }
            }
        }
    }
}

#[test]
fn text_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let mut r = lcg(3);
    let n = 30_000;
    let values: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let len = if i % 11 == 0 {
                0
            } else {
                (r() % 40) as usize + if i % 997 == 0 { 300 } else { 0 }
            };
            (0..len).map(|_| b'a' + (r() % 26) as u8).collect()
        })
        .collect();
    let valid: Vec<bool> = (0..n).map(|i| i % 13 != 5).collect();
    for (kind, compress) in [(ValueKind::Utf8, true), (ValueKind::Binary, false)] {
        let dir = tmp.path().join(format!("{kind:?}"));
        let mut w = ColumnWriter::create(&dir, kind, compress).unwrap();
        let value = |i: usize| &values[i][..];
        let ok = |i: usize| valid[i];
        w.push_bytes(n, &value, Some(&ok)).unwrap();
        w.finish().unwrap();
        let col = open(&dir);
        assert_eq!(col.logical(), logical_of(kind));
        let idx: Vec<u64> = (0..n as u64).step_by(7).chain([3, 3, 0]).collect();
        let got = col.gather_ragged(&idx).unwrap();
        for (pos, &i) in idx.iter().enumerate() {
            let rec = got.record(pos);
            let i = i as usize;
            let want: &[u8] = if valid[i] { &values[i] } else { &[] };
            if want.is_empty() {
                assert_eq!((rec.ndim(), rec.payload), (0, &[0u8][..]));
            } else {
                assert_eq!(rec.payload, want);
            }
        }
        // Read in place (a few rows of each chunk, keep off): the same.
        let sparse: Vec<u64> = (0..n as u64).step_by(61).chain([n as u64 - 1, 5]).collect();
        let (got, offsets) = col.inner().gather_values(&sparse, false).unwrap();
        for (pos, &i) in sparse.iter().enumerate() {
            let i = i as usize;
            let want: &[u8] = if valid[i] { &values[i] } else { &[] };
            assert_eq!(
                &got[offsets[pos]..offsets[pos + 1]],
                want,
                "row {i} in place"
            );
        }
        let e = &col.parts()[0].footer().entries[0];
        assert_eq!(e.encoding(), Encoding::Grouped);
        // Coded with a symbol table only where that pays (compress set).
        assert_eq!(col.parts()[0].symbols().is_some(), compress);
    }
}

/// Each chunk's encoding, width and rows.
fn encodings(col: &Columnar) -> Vec<(Encoding, u8, u32)> {
    col.parts()
        .iter()
        .flat_map(|f| {
            f.footer()
                .entries
                .iter()
                .map(|e| (e.encoding(), e.width, e.rows))
        })
        .collect()
}

/// Version 3 numbers are stored raw so that a random read finds each in
/// place: integers packed at their chunk's span's bits (a constant chunk
/// at one bit), integers of one byte and floats plain; every stream raw;
/// they read back exactly, whole and at random.
#[test]
fn numbers_are_stored_raw_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let mut r = lcg(5);
    let n = 3 * CHUNK_ROWS + 100;
    let labels: Vec<i64> = (0..n)
        .map(|_| (r() % 1000) as i64 * (r() % 2) as i64)
        .collect();
    let full: Vec<i32> = (0..n)
        .map(|i| {
            if i % 3 == 0 {
                25_535
            } else {
                (r() % 65_535) as i32 - 40_000
            }
        })
        .collect();
    let years: Vec<i16> = (0..n).map(|_| 1950 + (r() % 76) as i16).collect();
    let constant: Vec<i16> = vec![1984; n];
    let wide: Vec<i64> = (0..n).map(|_| r() as i64).collect();
    let small: Vec<i8> = (0..n).map(|_| r() as i8).collect();
    let scores: Vec<f32> = (0..n)
        .map(|_| (r() >> 23) as f32 / (1u32 << 24) as f32)
        .collect();
    let valid: Vec<bool> = (0..n).map(|i| i % 5 != 1).collect();
    type Case = (&'static str, DType, Vec<u8>, (Encoding, u8));
    let cases: [Case; 7] = [
        ("years", DType::I16, le_bytes!(years), (Encoding::Packed, 7)),
        (
            "labels",
            DType::I64,
            le_bytes!(labels),
            (Encoding::Packed, 10),
        ),
        ("full", DType::I32, le_bytes!(full), (Encoding::Packed, 16)),
        (
            "constant",
            DType::I16,
            le_bytes!(constant),
            (Encoding::Packed, 1),
        ),
        ("wide", DType::I64, le_bytes!(wide), (Encoding::Plain, 8)),
        ("small", DType::I8, le_bytes!(small), (Encoding::Plain, 1)),
        (
            "scores",
            DType::F32,
            le_bytes!(scores),
            (Encoding::Plain, 4),
        ),
    ];
    for (name, dtype, bytes, want) in &cases {
        for nulls in [false, true] {
            let dir = tmp.path().join(format!("{name}-{nulls}"));
            write_fixed(&dir, *dtype, bytes, nulls.then_some(&valid[..]), true);
            let col = open(&dir);
            assert_eq!(col.parts()[0].footer().version, 3);
            let (enc, width, rows) = encodings(&col)[0];
            assert!(rows >= 8192, "{rows}");
            assert_eq!((enc, width), *want, "{name} nulls={nulls}");
            for e in &col.parts()[0].footer().entries {
                assert_eq!(
                    e.flags & (FLAG_VALUES_ZSTD | 1 | 4),
                    0,
                    "{name}: raw streams"
                );
            }
            let valid = nulls.then_some(&valid[..]);
            let all: Vec<u64> = (0..n as u64).collect();
            assert_gathered(&col, &all, bytes, dtype.itemsize(), valid);
            // A few rows of each chunk: read in place once the budget is
            // spent or with keep off (the arrow path asks with keep off).
            let few: Vec<u64> = (0..n as u64).step_by(997).collect();
            assert_gathered(&col, &few, bytes, dtype.itemsize(), valid);
            let w = dtype.itemsize();
            let r = col.inner().resolve(&few, false).unwrap();
            for (pos, &i) in few.iter().enumerate() {
                let i = i as usize;
                let mut got = vec![0u8; w];
                r.copy_fixed(pos, w, &mut got).unwrap();
                let ok = valid.is_none_or(|v| v[i]);
                assert_eq!(r.is_valid(pos).unwrap(), ok);
                let want = if ok {
                    &bytes[i * w..(i + 1) * w]
                } else {
                    &[0u8; 8][..w]
                };
                assert_eq!(&got[..], want, "{name} row {i} in place");
            }
        }
    }
}

#[test]
fn corruption_is_detected() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let bytes: Vec<u8> = (0..20_000i64).flat_map(|i| (i * 3).to_le_bytes()).collect();
    write_fixed(&dir, DType::I64, &bytes, None, true);
    let file = dir.join(COLUMN_FILE);
    let good = std::fs::read(&file).unwrap();
    let all: Vec<u64> = (0..20_000).collect();
    // Every flipped byte either fails to open or fails to read: never wrong rows.
    for at in (0..good.len())
        .step_by(97)
        .chain([0, good.len() - 1, good.len() - 20])
    {
        let mut bad = good.clone();
        bad[at] ^= 0x5A;
        std::fs::write(&file, &bad).unwrap();
        match Columnar::open(&Fs::Local, &dir, std::iter::once(dir.clone()), None) {
            Err(e) => assert!(e.to_string().contains("column.zc"), "{e}"),
            Ok(col) => {
                let err = col.gather_dense(&all).unwrap_err().to_string();
                assert!(err.contains("column.zc") && err.contains("chunk"), "{err}");
                // A filter reads only the chunks it cannot rule out: it fails
                // naming the file, or gives exactly the right rows.
                #[cfg(feature = "arrow")]
                for (op, l) in [(CmpOp::Eq, 300i64), (CmpOp::NotEq, 1), (CmpOp::Lt, 40_000)] {
                    let leaf = super::Pred::cmp("x", op, Lit::Int(l as i128));
                    match col.filter_range(0, 20_000, &leaf) {
                        Err(e) => assert!(e.to_string().contains("column.zc"), "{e}"),
                        Ok((bits, kept)) => {
                            let want: Vec<i64> = (0..20_000i64)
                                .map(|i| i * 3)
                                .filter(|&v| match op {
                                    CmpOp::Eq => v == l,
                                    CmpOp::NotEq => v != l,
                                    _ => v < l,
                                })
                                .collect();
                            assert_eq!(bits.count_set_bits(), want.len());
                            let got = kept
                                .as_any()
                                .downcast_ref::<arrow_array::Int64Array>()
                                .unwrap();
                            assert_eq!(got.values().to_vec(), want, "byte {at}");
                        }
                    }
                }
            }
        }
    }
    // Truncated.
    for keep in [0, 10, good.len() / 2, good.len() - 1] {
        std::fs::write(&file, &good[..keep]).unwrap();
        let err = Columnar::open(&Fs::Local, &dir, std::iter::once(dir.clone()), None).unwrap_err();
        assert!(matches!(err, crate::Error::Corrupted { .. }), "{err}");
    }
}

/// The predicate evaluated on stored chunks agrees with the values, for
/// integers, floats (in Arrow's order) and text.
#[cfg(feature = "arrow")]
#[test]
fn predicates_on_stored_chunks_agree_with_the_values() {
    use super::{CmpOp, Lit, Pred};
    let tmp = tempfile::tempdir().unwrap();
    let mut r = lcg(11);
    let n = 50_000usize;
    let valid: Vec<bool> = (0..n).map(|i| i % 17 != 5).collect();
    // int64 narrowed (a span of 0..2000, shifted), int32 full range, f32
    // with NaN, text.
    let ints: Vec<i64> = (0..n)
        .map(|i| 1_000_000 + (r() % 2000) as i64 - if i < 9000 { 0 } else { 7 })
        .collect();
    let wide: Vec<i32> = (0..n).map(|_| r() as i32).collect();
    let floats: Vec<f32> = (0..n)
        .map(|i| {
            if i % 101 == 0 {
                f32::NAN
            } else if i % 103 == 0 {
                -0.0
            } else if i % 109 == 0 {
                -f32::NAN
            } else {
                (r() % 1000) as f32 / 10.0 - 20.0
            }
        })
        .collect();
    let text: Vec<String> = (0..n).map(|i| format!("k{:03}", (i * 7) % 500)).collect();
    let dirs = ["ints", "wide", "floats", "text"].map(|d| tmp.path().join(d));
    let ok = |i: usize| valid[i];
    let bytes = le_bytes!(ints);
    write_fixed(&dirs[0], DType::I64, &bytes, Some(&valid), true);
    let bytes = le_bytes!(wide);
    write_fixed(&dirs[1], DType::I32, &bytes, None, true);
    let bytes = le_bytes!(floats);
    write_fixed(&dirs[2], DType::F32, &bytes, None, false);
    let mut w = ColumnWriter::create(&dirs[3], ValueKind::Utf8, true).unwrap();
    w.push_bytes(n, &|i| text[i].as_bytes(), Some(&ok)).unwrap();
    w.finish().unwrap();
    let cols: Vec<Columnar> = dirs.iter().map(|d| open(d)).collect();
    let ops = [
        CmpOp::Eq,
        CmpOp::NotEq,
        CmpOp::Lt,
        CmpOp::LtEq,
        CmpOp::Gt,
        CmpOp::GtEq,
    ];
    let holds = |op: CmpOp, o: std::cmp::Ordering| {
        use std::cmp::Ordering::*;
        match op {
            CmpOp::Eq => o == Equal,
            CmpOp::NotEq => o != Equal,
            CmpOp::Lt => o == Less,
            CmpOp::LtEq => o != Greater,
            CmpOp::Gt => o == Greater,
            CmpOp::GtEq => o != Less,
        }
    };
    for &op in &ops {
        for (lo, hi) in [(0u64, n as u64), (123, 40_001)] {
            let check = |c: usize, lit: Lit, truth: &dyn Fn(usize) -> bool, exact: bool| {
                let pred = Pred::cmp("x", op, lit.clone());
                let got = pred.eval(&|_| Some(&cols[c]), lo, hi).unwrap();
                for (j, i) in (lo as usize..hi as usize).enumerate() {
                    let want = truth(i);
                    if exact {
                        assert_eq!(got.value(j), want, "col {c} {op:?} {lit:?} row {i}");
                    } else if want {
                        assert!(got.value(j), "col {c} {op:?} {lit:?} row {i}");
                    }
                }
                // The rows kept and their values in one pass: the same bits,
                // and the values a read of the range filtered by them gives.
                let (bits, kept) = cols[c].filter_range(lo, hi, &pred).unwrap();
                assert_eq!(bits, got, "col {c} {op:?} {lit:?}");
                let all = cols[c].read_range(lo, hi).unwrap();
                let mask = arrow_array::BooleanArray::new(bits, None);
                let want = arrow_select::filter::filter(all.as_ref(), &mask).unwrap();
                assert_eq!(kept.null_count(), 0);
                assert_eq!(&kept, &want, "col {c} {op:?} {lit:?}");
            };
            for l in [999_999i128, 1_000_500, 1_002_100, 5] {
                check(
                    0,
                    Lit::Int(l),
                    &|i| valid[i] && holds(op, (ints[i] as i128).cmp(&l)),
                    true,
                );
            }
            let l = wide[77] as i128;
            check(
                1,
                Lit::Int(l),
                &|i| holds(op, (wide[i] as i128).cmp(&l)),
                true,
            );
            // Floats as Arrow's kernels compare them: total order, -0 = +0.
            let zero = |x: f64| if x == 0.0 { 0.0 } else { x };
            for l in [50.0f64, -1.0, 1e9, 0.0, -0.0, f64::NAN, -f64::NAN, 0.1] {
                check(
                    2,
                    Lit::Float(l),
                    &|i| holds(op, zero(floats[i] as f64).total_cmp(&zero(l))),
                    true,
                );
            }
            let l = b"k250".to_vec();
            check(
                3,
                Lit::Bytes(l.clone()),
                &|i| valid[i] && holds(op, text[i].as_bytes().cmp(&l)),
                true,
            );
        }
    }
    // Null tests and their combinations.
    let p =
        Pred::from_json(r#"{"or": [{"is_null": "x"}, {"cmp": ["x", "eq", {"int": 1000000}]}]}"#)
            .unwrap();
    let got = p.eval(&|_| Some(&cols[0]), 0, n as u64).unwrap();
    for i in 0..n {
        assert_eq!(got.value(i), !valid[i] || ints[i] == 1_000_000, "row {i}");
    }
    assert!(Pred::from_json(r#"{"cmp": ["x", "like", {"int": 1}]}"#).is_err());
}

/// A comparison through casts prunes only chunks whose cast bounds rule
/// it out (a float chunk of 5.1..5.9 cast to an integer holds 5), keeps
/// exactly the rows where a cast that cannot fail holds, and keeps the rows
/// whose cast fails beside those where it holds (inexact): never fewer.
#[cfg(feature = "arrow")]
#[test]
fn comparisons_through_casts_prune_by_their_cast_bounds() {
    use super::{Cmp, CmpOp, Lit, Pred};
    let tmp = tempfile::tempdir().unwrap();
    let mut r = lcg(5);
    let n = 60_000usize;
    // 7.0, but for a run of 5.1..5.9, a run of large values, NaN and -0.5.
    let vals: Vec<f64> = (0..n)
        .map(|i| match i {
            10_000..30_000 => 5.1 + (r() % 9) as f64 / 10.0,
            40_000..41_000 => 3e9 + (r() % 1000) as f64,
            50_000 => f64::NAN,
            50_001..50_100 => -0.5,
            _ => 7.0,
        })
        .collect();
    let dir = tmp.path().join("f");
    write_fixed(&dir, DType::F64, &le_bytes!(vals), None, true);
    let col = open(&dir);
    let kind = col.kind();
    // The casts as Arrow casts: None where it fails.
    let to_int = |v: f64, bits: i32| -> Option<i128> {
        let t = v.trunc();
        (t >= -(2f64.powi(bits - 1)) && t < 2f64.powi(bits - 1)).then_some(t as i128)
    };
    let holds = |op: CmpOp, o: std::cmp::Ordering| match op {
        CmpOp::Eq => o.is_eq(),
        CmpOp::NotEq => o.is_ne(),
        CmpOp::Lt => o.is_lt(),
        CmpOp::LtEq => o.is_le(),
        CmpOp::Gt => o.is_gt(),
        CmpOp::GtEq => o.is_ge(),
    };
    let ops = [CmpOp::Eq, CmpOp::NotEq, CmpOp::Lt, CmpOp::GtEq];
    for (to, bits) in [(DType::I64, 64), (DType::I32, 32), (DType::I8, 8)] {
        for &op in &ops {
            for l in [5i128, 7, 0, -3, 3_000_000_500] {
                let c = Cmp::new("x", op, Lit::Int(l)).cast(to);
                let pred = Pred::Cmp(c.clone());
                assert!(!pred.exact(&|_| Some(kind)), "{c:?}");
                let got = pred.eval(&|_| Some(&col), 0, n as u64).unwrap();
                let may = col.may_rows(&pred);
                let in_may = |i: u64| may.iter().any(|r| r.contains(&i));
                for (i, &x) in vals.iter().enumerate() {
                    match to_int(x, bits) {
                        Some(v) => {
                            let want = holds(op, v.cmp(&l));
                            assert_eq!(got.value(i), want, "{c:?} row {i}");
                            assert!(!want || in_may(i as u64), "{c:?} pruned row {i}");
                        }
                        // Failing casts are kept, for the caller.
                        None => assert!(got.value(i) && in_may(i as u64), "{c:?} row {i}"),
                    }
                }
            }
        }
    }
    // The issue's query: CAST(f AS BIGINT) = 5 keeps the 5.x run's chunks
    // (and only chunks that hold it or could).
    let five = Pred::Cmp(Cmp::new("x", CmpOp::Eq, Lit::Int(5)).cast(DType::I64));
    let may = col.may_rows(&five);
    let has = |i: u64| may.iter().any(|r| r.contains(&i));
    assert!(has(10_000) && has(29_999) && has(50_000), "{may:?}");
    assert!(!has(0) && !has(35_000) && !has(59_999), "{may:?}");
    let got = five.eval(&|_| Some(&col), 0, n as u64).unwrap();
    assert_eq!(got.count_set_bits(), 20_000 + 1, "the run and the NaN row");
    // Rounding casts never fail: exact.
    for &op in &ops {
        for l in [5.5f64, 7.0, 3e9 + 10.0, -0.0] {
            let c = Cmp::new("x", op, Lit::Float(l)).cast(DType::F32);
            let pred = Pred::Cmp(c.clone());
            assert!(pred.exact(&|_| Some(kind)), "{c:?}");
            let got = pred.eval(&|_| Some(&col), 0, n as u64).unwrap();
            let may = col.may_rows(&pred);
            for (i, &x) in vals.iter().enumerate() {
                let zero = |x: f64| if x == 0.0 { 0.0 } else { x };
                let v = x as f32 as f64;
                let want = holds(op, zero(v).total_cmp(&zero(l)));
                assert_eq!(got.value(i), want, "{c:?} row {i}");
                assert!(!want || may.iter().any(|r| r.contains(&(i as u64))));
            }
        }
    }
}

/// polars' float order (every NaN largest and equal, -0 equal to +0) is
/// evaluated exactly, and pruning under it keeps every matching chunk.
#[cfg(feature = "arrow")]
#[test]
fn floats_compare_in_polars_order_on_request() {
    use super::{Cmp, CmpOp, FloatOrder, Lit, Pred};
    let tmp = tempfile::tempdir().unwrap();
    let n = 40_000usize;
    let vals: Vec<f32> = (0..n)
        .map(|i| match i % 7 {
            0 => -0.0,
            1 => 0.0,
            2 if i > 20_000 => f32::NAN,
            3 if i < 5_000 => -f32::NAN,
            _ => (i % 50) as f32 - 25.0,
        })
        .collect();
    let dir = tmp.path().join("g");
    write_fixed(&dir, DType::F32, &le_bytes!(vals), None, false);
    let col = open(&dir);
    let polars = |x: f64, l: f64| -> std::cmp::Ordering {
        match (x.is_nan(), l.is_nan()) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            _ => x.partial_cmp(&l).unwrap(),
        }
    };
    for op in [
        CmpOp::Eq,
        CmpOp::NotEq,
        CmpOp::Lt,
        CmpOp::LtEq,
        CmpOp::Gt,
        CmpOp::GtEq,
    ] {
        for l in [0.0f64, -0.0, 3.0, f64::NAN, -100.0, 100.0] {
            let c = Cmp::new("x", op, Lit::Float(l)).floats(FloatOrder::NanLast);
            let pred = Pred::Cmp(c.clone());
            assert!(pred.exact(&|_| Some(col.kind())));
            let got = pred.eval(&|_| Some(&col), 0, n as u64).unwrap();
            let may = col.may_rows(&pred);
            for (i, &x) in vals.iter().enumerate() {
                let o = polars(x as f64, l);
                let want = match op {
                    CmpOp::Eq => o.is_eq(),
                    CmpOp::NotEq => o.is_ne(),
                    CmpOp::Lt => o.is_lt(),
                    CmpOp::LtEq => o.is_le(),
                    CmpOp::Gt => o.is_gt(),
                    CmpOp::GtEq => o.is_ge(),
                };
                assert_eq!(got.value(i), want, "{c:?} row {i}");
                assert!(
                    !want || may.iter().any(|r| r.contains(&(i as u64))),
                    "{c:?} {i}"
                );
            }
        }
    }
}

/// Substring, prefix and suffix tests on stored text chunks (and on the
/// arrays a read gives) agree with testing each value; hits that run past
/// a row's end, empty values and null rows included.
#[cfg(feature = "arrow")]
#[test]
fn text_tests_on_stored_chunks_agree_with_the_values() {
    use super::{Pred, TextOp};
    let tmp = tempfile::tempdir().unwrap();
    let mut r = lcg(23);
    let n = 70_000usize;
    let valid: Vec<bool> = (0..n).map(|_| !r().is_multiple_of(9)).collect();
    // A two-letter alphabet and short values: many hits cross row ends.
    let text: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            if !valid[i] {
                return Vec::new();
            }
            let len = (r() % 7) as usize;
            (0..len)
                .map(|_| if r().is_multiple_of(3) { b'b' } else { b'a' })
                .collect()
        })
        .collect();
    let ok = |i: usize| valid[i];
    let dirs = ["utf8", "binary"].map(|d| tmp.path().join(d));
    for (dir, kind) in dirs.iter().zip([ValueKind::Utf8, ValueKind::Binary]) {
        let mut w = ColumnWriter::create(dir, kind, true).unwrap();
        w.push_bytes(n, &|i| text[i].as_slice(), Some(&ok)).unwrap();
        w.finish().unwrap();
    }
    let cols: Vec<Columnar> = dirs.iter().map(|d| open(d)).collect();
    for needle in ["", "a", "b", "ab", "bab", "aaaa", "bbbbb", "c"] {
        for op in [TextOp::Contains, TextOp::StartsWith, TextOp::EndsWith] {
            let s = needle.as_bytes();
            let truth = |i: usize| {
                let v = text[i].as_slice();
                valid[i]
                    && match op {
                        TextOp::Contains => s.is_empty() || v.windows(s.len()).any(|w| w == s),
                        TextOp::StartsWith => v.starts_with(s),
                        TextOp::EndsWith => v.ends_with(s),
                    }
            };
            for (c, col) in cols.iter().enumerate() {
                for (lo, hi) in [(0u64, n as u64), (123, 40_001), (65_530, 65_540)] {
                    let pred = Pred::Text("x".into(), op, s.to_vec());
                    let got = pred.eval(&|_| Some(col), lo, hi).unwrap();
                    let array = col.read_range(lo, hi).unwrap();
                    let on_array = super::compare_array(array.as_ref(), &pred).unwrap();
                    assert_eq!(got, on_array, "col {c} {op:?} {needle:?} {lo}..{hi}");
                    // The rows kept and their values, chunk by chunk.
                    let (bits, kept) = col.filter_range(lo, hi, &pred).unwrap();
                    assert_eq!(bits, got, "col {c} {op:?} {needle:?} {lo}..{hi}");
                    let mask = arrow_array::BooleanArray::new(bits, None);
                    let want = arrow_select::filter::filter(array.as_ref(), &mask).unwrap();
                    assert_eq!(&kept, &want, "col {c} {op:?} {needle:?} {lo}..{hi}");
                    for (j, i) in (lo as usize..hi as usize).enumerate() {
                        assert_eq!(got.value(j), truth(i), "col {c} {op:?} {needle:?} row {i}");
                    }
                }
            }
        }
    }
    let p = Pred::from_json(r#"{"and": [{"contains": ["x", "ab"]}, {"ends_with": ["x", "b"]}]}"#)
        .unwrap();
    let got = p.eval(&|_| Some(&cols[0]), 0, n as u64).unwrap();
    for (i, v) in text.iter().enumerate() {
        let want = valid[i] && v.windows(2).any(|w| w == b"ab") && v.ends_with(b"b");
        assert_eq!(got.value(i), want, "row {i}");
    }
    assert!(Pred::from_json(r#"{"contains": ["x"]}"#).is_err());
    assert!(Pred::from_json(r#"{"contains": ["x", 3]}"#).is_err());
}
