//! Columnar columns (`column.zc`, docs/format.md "Columnar columns"): the
//! exact bytes of a small file, reads of every kind of column through
//! gathers and Arrow, and bounded fuzzing of corrupt files: no file,
//! however damaged, panics, aborts or returns rows that are not its own;
//! each fails with `Corrupted` naming `column.zc`, or reads its true rows.

use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::Array;
use loaderx::columnar::{ColumnWriter, Columnar, ValueKind, COLUMN_FILE};
use loaderx::table::{self, ColumnType, Table};
use loaderx::{DType, Error, Logical, Records};
use proptest::prelude::*;

/// The golden file (format version 3): int16 values 1, 2, 256: one chunk,
/// packed at 8 bits a value (minus the minimum 1; the span of 255 needs
/// all 8), the CRC-32 of its one block, its entry with CRC and bounds,
/// then the trailer.
/// The version 3 text column of [`golden_bytes_of_a_version_3_text_column`].
const GOLDEN_TEXT_V3: &str = concat!(
    "4c58434f4c554d4e", // "LXCOLUMN"
    // The chunk: validity (rows 0 and 2 valid), then its one group (the
    // lengths 2, 0, 6 packed at 3 bits: 0x182; then the bytes), then the
    // index (group starts 0 and 10, then the CRC of its 4 KiB block).
    "05",
    "8201616268c3a96c6c6f",
    "000000000a00000004638e32",
    // Footer header: version 3, utf8, |u1, raw, nullable, no symbol
    // table; 3 rows, 1 chunk, chunks end at 31.
    "0301050001000000",
    "0300000000000000",
    "0100000000000000",
    "1f00000000000000",
    // The chunk's entry: at 8, 3 rows, 1 null, its CRC, streams of 1, 10
    // and 12 bytes (decoded 10 and 12), grouped at 3 bits, min and max
    // present, 8 bytes of values; min "ab" and max "h\u{e9}llo", exact.
    "0800000000000000",
    "03000000010000001cdf4421",
    "010000000a0000000c0000000a0000000c000000",
    "0503001808000000",
    "020161620000000000000000000000000000000000000000",
    "060168c3a96c6c6f00000000000000000000000000000000",
    // Footer length 128, CRC of the footer, "LXCOLEND".
    "80000000",
    "32522804",
    "4c58434f4c454e44",
);

const GOLDEN: &str = concat!(
    "4c58434f4c554d4e", // "LXCOLUMN"
    "0001ff",           // chunk 0: values 1, 2, 256 minus 1, 8 bits each
    "de0758cb",         // its index: the CRC-32 of its block 00 01 ff
    // Footer header: version 3, numbers, dtype code 2 (<i2), raw, not
    // nullable, no symbol table, 3 rows, 1 chunk, chunks end at byte 15.
    "0300020000000000",
    "0300000000000000",
    "0100000000000000",
    "0f00000000000000",
    // Entry: offset 8, 3 rows, 0 nulls, CRC-32 of its 7 bytes, no
    // validity, 3 value bytes, 4 index bytes, as stored.
    "0800000000000000",
    "03000000",
    "00000000",
    "1cdf4421",
    "00000000",
    "03000000",
    "04000000",
    "03000000",
    "04000000",
    // Packed (4), width 8 bits, flags: min and max (0x18); no text.
    "04080018",
    "00000000",
    // Min: 8 bytes, exact, 1 as i64; max: 256.
    "0801",
    "0100000000000000",
    "0000000000000000000000000000",
    "0801",
    "0001000000000000",
    "0000000000000000000000000000",
    // Trailer: footer of 128 bytes, its CRC-32, "LXCOLEND".
    "80000000",
    "92e9b259",
    "4c58434f4c454e44",
);

/// A version 1 file (as the first release with columnar columns wrote
/// it): int16 values 1, 2, 256 written raw: one chunk, narrowed
/// to one byte per value (minus the minimum 1; the span of 255 needs all 8
/// bits, so packing gains nothing), its entry with CRC and bounds, then the
/// trailer.
const GOLDEN_V1: &str = concat!(
    "4c58434f4c554d4e", // "LXCOLUMN"
    "0001ff",           // chunk 0: values 1, 2, 256 minus 1, one byte each
    // Footer header: version 1, numbers, dtype code 2 (<i2), raw, not
    // nullable, 3 rows, 1 chunk, chunks end at byte 11.
    "0100020000000000",
    "0300000000000000",
    "0100000000000000",
    "0b00000000000000",
    // Entry: offset 8, 3 rows, 0 nulls, CRC-32 of 00 01 ff, no validity,
    // 3 stored value bytes, no lengths, 3 decoded value bytes.
    "0800000000000000",
    "03000000",
    "00000000",
    "de0758cb",
    "00000000",
    "03000000",
    "00000000",
    "03000000",
    "00000000",
    // Narrowed (2), width 1, no lengths, flags: min and max (0x18).
    "02010018",
    "00000000",
    // Min: 8 bytes, exact, 1 as i64; max: 256.
    "0801",
    "0100000000000000",
    "0000000000000000000000000000",
    "0801",
    "0001000000000000",
    "0000000000000000000000000000",
    // Trailer: footer of 128 bytes, its CRC-32, "LXCOLEND".
    "80000000",
    "a04b2e9a",
    "4c58434f4c454e44",
);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn open(dir: &Path) -> Result<Columnar, Error> {
    Columnar::open_dir(dir)
}

/// Writes three numbers of `dtype` (`values`, little-endian) as a raw
/// column file in `dir`; returns the file's bytes.
fn write_raw(dir: &Path, dtype: DType, values: &[u8]) -> Vec<u8> {
    let mut w = ColumnWriter::create(dir, ValueKind::Fixed(dtype), false).unwrap();
    w.push_fixed(values, None).unwrap();
    assert_eq!(w.finish().unwrap(), 3);
    std::fs::read(dir.join(COLUMN_FILE)).unwrap()
}

#[test]
fn golden_bytes_of_a_small_column() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let values: Vec<u8> = [1i16, 2, 256]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let bytes = write_raw(&dir, DType::I16, &values);
    assert_eq!(hex(&bytes), GOLDEN);
    // Nothing else is left in the column's directory.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [COLUMN_FILE]);
    let c = open(&dir).unwrap();
    assert_eq!(c.gather_dense(&[2, 0]).unwrap().as_slice(), [0, 1, 1, 0]);
}

/// A version 1 file still opens and reads (decoded whole, as it has no
/// index to read in place by).
#[test]
fn a_version_1_file_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    std::fs::create_dir_all(&dir).unwrap();
    let bytes: Vec<u8> = (0..GOLDEN_V1.len() / 2)
        .map(|i| u8::from_str_radix(&GOLDEN_V1[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    std::fs::write(dir.join(COLUMN_FILE), bytes).unwrap();
    let c = open(&dir).unwrap();
    assert_eq!(
        c.gather_dense(&[2, 0, 1]).unwrap().as_slice(),
        [0, 1, 1, 0, 2, 0]
    );
}

/// A packed chunk: int32 values 5, 305, 6 written raw are 0, 300, 1 above
/// the minimum, 9 bits each (27 bits: 4 bytes, the last 5 bits zero);
/// everything else as in the golden file.
#[test]
fn bytes_of_a_packed_chunk() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let values: Vec<u8> = [5i32, 305, 6]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let bytes = write_raw(&dir, DType::I32, &values);
    assert_eq!(bytes.len(), 8 + 4 + 4 + 32 + 96 + 16);
    // 0 | 300 << 9 | 1 << 18 = 0x065800, little-endian.
    assert_eq!(hex(&bytes[..12]), "4c58434f4c554d4e00580600");
    assert_eq!(bytes[12..16], crc32fast::hash(&bytes[8..12]).to_le_bytes());
    // Footer header: version 3, numbers, dtype code 3 (<i4), raw.
    assert_eq!(hex(&bytes[16..20]), "03000300");
    let entry = &bytes[48..144];
    // 4 value bytes, 4 index bytes; packed (4), 9 bits, min and max.
    assert_eq!(hex(&entry[24..32]), "0400000004000000");
    assert_eq!(hex(&entry[32..40]), "0400000004000000");
    assert_eq!(hex(&entry[40..44]), "04090018");
    let c = open(&dir).unwrap();
    assert_eq!(
        c.gather_dense(&[2, 1, 0]).unwrap().as_slice(),
        &values[..]
            .chunks(4)
            .rev()
            .flatten()
            .copied()
            .collect::<Vec<u8>>()[..]
    );
    // The same chunk in a version 1 or 2 file (which have no index) is
    // refused, naming the file; a version this release does not know too.
    for (version, says) in [
        (1u8, "lengths stream"),
        (2, "lengths stream"),
        (4, "format version 4"),
    ] {
        let mut old = bytes.clone();
        old[16] = version;
        let footer = &old[16..144];
        let crc = crc32fast::hash(footer).to_le_bytes();
        old[148..152].copy_from_slice(&crc);
        std::fs::write(dir.join(COLUMN_FILE), &old).unwrap();
        let err = open(&dir).unwrap_err().to_string();
        assert!(err.contains("column.zc") && err.contains(says), "{err}");
    }
}

/// Columns of every kind, compressed and raw, with and without nulls.
fn columns(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let n = 20_000usize;
    for (k, compress) in [(0, true), (1, false)] {
        let valid: Vec<bool> = (0..n).map(|i| i % 9 != 4).collect();
        let ok = |i: usize| valid[i];
        let dir = root.join(format!("i64-{k}"));
        let mut w = ColumnWriter::create(&dir, ValueKind::Fixed(DType::I64), compress).unwrap();
        let v: Vec<u8> = (0..n as i64)
            .flat_map(|i| (i * 7 % 1000).to_le_bytes())
            .collect();
        w.push_fixed(&v, Some(&ok)).unwrap();
        w.finish().unwrap();
        out.push(dir);
        let dir = root.join(format!("f32-{k}"));
        let mut w = ColumnWriter::create(&dir, ValueKind::Fixed(DType::F32), compress).unwrap();
        let v: Vec<u8> = (0..n)
            .flat_map(|i| (i as f32 * 0.37).sin().to_le_bytes())
            .collect();
        w.push_fixed(&v, None).unwrap();
        w.finish().unwrap();
        out.push(dir);
        let dir = root.join(format!("bool-{k}"));
        let mut w = ColumnWriter::create(&dir, ValueKind::Fixed(DType::Bool), compress).unwrap();
        let v: Vec<u8> = (0..n).map(|i| (i % 3 == 0) as u8).collect();
        w.push_fixed(&v, Some(&ok)).unwrap();
        w.finish().unwrap();
        out.push(dir);
        let dir = root.join(format!("text-{k}"));
        let mut w = ColumnWriter::create(&dir, ValueKind::Utf8, compress).unwrap();
        let text: Vec<String> = (0..n)
            .map(|i| "ab".repeat(i % 17) + &i.to_string())
            .collect();
        w.push_bytes(n, &|i| text[i].as_bytes(), Some(&ok)).unwrap();
        w.finish().unwrap();
        out.push(dir);
    }
    out
}

/// Every row of `c`, as Arrow reads it (the check of everything a read
/// promises: decoded, checksummed, bounds as recorded).
fn read_all(c: &Columnar) -> Result<arrow_array::ArrayRef, Error> {
    let all: Vec<u64> = (0..c.len()).collect();
    c.take_array(&all)
}

#[test]
fn every_kind_reads_back_through_gathers_and_arrow() {
    let tmp = tempfile::tempdir().unwrap();
    for dir in columns(tmp.path()) {
        let c = open(&dir).unwrap();
        let all = read_all(&c).unwrap();
        assert_eq!(all.len(), 20_000);
        // Random rows read the same through Arrow and the records API.
        let idx: Vec<u64> = (0..300).map(|i| (i * 7919) % 20_000).collect();
        let some = c.take_array(&idx).unwrap();
        for (pos, &i) in idx.iter().enumerate() {
            let a = some.slice(pos, 1);
            let b = all.slice(i as usize, 1);
            assert_eq!(a.to_data(), b.to_data(), "{} row {i}", dir.display());
        }
        if let ValueKind::Fixed(DType::I64) = c.kind() {
            let got = c.gather_dense(&idx).unwrap();
            let a = all.as_primitive::<Int64Type>();
            for (pos, &i) in idx.iter().enumerate() {
                let v =
                    i64::from_le_bytes(got.as_slice()[pos * 8..pos * 8 + 8].try_into().unwrap());
                let want = if a.is_null(i as usize) {
                    0
                } else {
                    a.value(i as usize)
                };
                assert_eq!(v, want);
            }
        }
    }
}

/// What a damaged column may do: fail naming its file, or read exactly
/// its true rows.
fn check_damaged(dir: &Path, want: &arrow_array::ArrayRef) {
    let named = |e: &Error| {
        let s = e.to_string();
        assert!(
            matches!(e, Error::Corrupted { .. } | Error::Io { .. }) && s.contains(COLUMN_FILE),
            "{s}"
        );
    };
    let c = match open(dir) {
        Ok(c) => c,
        Err(e) => return named(&e),
    };
    match read_all(&c) {
        Ok(got) => assert_eq!(
            got.to_data(),
            want.to_data(),
            "a damaged file read other rows"
        ),
        Err(e) => named(&e),
    }
    // Random reads through the other paths fail the same way or agree.
    let idx: Vec<u64> = (0..c.len()).step_by(97).collect();
    match c.kind() {
        ValueKind::Fixed(_) => {
            if let Err(e) = c.gather_dense(&idx) {
                named(&e);
            }
        }
        _ => {
            if let Err(e) = c.gather_ragged(&idx) {
                named(&e);
            }
        }
    }
    if let Some(v) = c.validity() {
        if let Err(e) = v.gather_dense(&idx) {
            named(&e);
        }
    }
}

#[test]
fn every_flipped_byte_of_a_small_file_is_caught() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let mut w = ColumnWriter::create(&dir, ValueKind::Utf8, true).unwrap();
    let text: Vec<String> = (0..300).map(|i| format!("value {i}")).collect();
    w.push_bytes(300, &|i| text[i].as_bytes(), Some(&|i| i % 5 != 0))
        .unwrap();
    w.finish().unwrap();
    let file = dir.join(COLUMN_FILE);
    let good = std::fs::read(&file).unwrap();
    let want = read_all(&open(&dir).unwrap()).unwrap();
    for at in 0..good.len() {
        for flip in [0x01u8, 0x80, 0xFF] {
            let mut bad = good.clone();
            bad[at] ^= flip;
            std::fs::write(&file, &bad).unwrap();
            check_damaged(&dir, &want);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    /// Random damage (bytes overwritten, the file cut short or grown) to
    /// files of every kind.
    #[test]
    fn damaged_files_fail_cleanly(
        which in 0usize..8,
        edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..6),
        cut in proptest::option::of(any::<proptest::sample::Index>()),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = columns(tmp.path());
        let dir = &dirs[which];
        let want = read_all(&open(dir).unwrap()).unwrap();
        let file = dir.join(COLUMN_FILE);
        let mut bytes = std::fs::read(&file).unwrap();
        for (at, v) in &edits {
            let i = at.index(bytes.len());
            bytes[i] = *v;
        }
        if let Some(c) = cut {
            bytes.truncate(c.index(bytes.len()));
        }
        std::fs::write(&file, &bytes).unwrap();
        check_damaged(dir, &want);
    }
}

#[test]
fn a_plain_table_reads_its_columnar_columns_and_refuses_contradictions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t");
    let mut w =
        ColumnWriter::create(&dir.join("label"), ValueKind::Fixed(DType::I64), true).unwrap();
    let v: Vec<u8> = (0..10i64).flat_map(i64::to_le_bytes).collect();
    w.push_fixed(&v, None).unwrap();
    w.finish().unwrap();
    let mut w = ColumnWriter::create(&dir.join("caption"), ValueKind::Utf8, true).unwrap();
    let text: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    w.push_bytes(10, &|i| text[i].as_bytes(), Some(&|i| i != 3))
        .unwrap();
    w.finish().unwrap();
    // The column files say what they hold: no table file is needed.
    assert!(!dir.join(table::TABLE_FILE).exists());
    let t = Table::open(&dir, true).unwrap();
    let label = t.column("label").unwrap();
    assert!(label.columnar().is_some());
    assert_eq!(
        label.gather_dense(&[9, 3]).unwrap().as_slice()[..8],
        9i64.to_le_bytes()
    );
    let caption = t.column("caption").unwrap();
    assert_eq!(caption.logical(), Logical::Utf8);
    assert!(caption.validity().is_some());
    t.close().unwrap();
    // A table file that contradicts a column file is refused naming it.
    for (logical, nullable) in [(Logical::Binary, false), (Logical::Utf8, true)] {
        let t = ColumnType { logical, nullable };
        table::write_types(&dir, &[("caption".into(), t)]).unwrap();
        let err = Table::open(&dir, true).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        assert!(
            err.to_string().contains("caption") && err.to_string().contains(COLUMN_FILE),
            "{err}"
        );
    }
    // Agreeing with it is fine.
    let t = ColumnType {
        logical: Logical::Utf8,
        nullable: false,
    };
    table::write_types(&dir, &[("caption".into(), t)]).unwrap();
    Table::open(&dir, true).unwrap().close().unwrap();
}

/// Golden bytes of a version 3 text column: "ab", a null, "héllo" — one
/// chunk, `grouped` (one group of 3 rows: lengths packed at 3 bits, then
/// the bytes themselves, as a file this small trains no symbol table),
/// its validity as bits, its index (the group starts 0 and 10, then the
/// chunk's one 4 KiB block CRC).
#[test]
fn golden_bytes_of_a_version_3_text_column() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t");
    let values = ["ab", "", "h\u{e9}llo"];
    let mut w = ColumnWriter::create(&dir, ValueKind::Utf8, false).unwrap();
    w.push_bytes(3, &|i| values[i].as_bytes(), Some(&|i| i != 1))
        .unwrap();
    assert_eq!(w.finish().unwrap(), 3);
    let bytes = std::fs::read(dir.join(COLUMN_FILE)).unwrap();
    assert_eq!(hex(&bytes), GOLDEN_TEXT_V3);
    let c = open(&dir).unwrap();
    let back = c.take_array(&[2, 1, 0]).unwrap();
    let text = back
        .as_any()
        .downcast_ref::<arrow_array::StringArray>()
        .expect("a utf8 column reads as strings");
    assert_eq!(text.value(0), values[2]);
    assert!(text.is_null(1));
    assert_eq!(text.value(2), values[0]);
}
