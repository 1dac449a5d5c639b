//! Round trips and corruption of column files.

use std::path::Path;

use super::*;
use crate::io::Fs;
use crate::{DType, Records};

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
                let got = col.gather_dense(&idx).unwrap();
                for (pos, &i) in idx.iter().enumerate() {
                    let i = i as usize;
                    let want = if nulls && !valid[i] {
                        vec![0u8; w]
                    } else {
                        bytes[i * w..(i + 1) * w].to_vec()
                    };
                    assert_eq!(
                        &got.as_slice()[pos * w..(pos + 1) * w],
                        &want[..],
                        "{dtype} row {i}"
                    );
                }
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
