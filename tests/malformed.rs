//! Malformed stores and bad inputs fail with a typed error, never a panic
//! (docs/format.md, "Invariants checked on open and on every read").

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use loaderx::schema::Kind;
use loaderx::Packed;
use loaderx::{Codec, DType, Error, Schema, Store};
use loaderx::{Indices, Records};

// ------------------------------------------------------------------ helpers

const META: &str = "meta.zr";
const DATA: &str = "data.zr";
const DICT: &str = "dict.zr";

/// A gather of signed indices, as the bindings pass them.
fn signed(store: &Store, idx: &[i64]) -> Result<loaderx::Buffer, Error> {
    Indices::from(idx)
        .resolve(store.len())
        .and_then(|idx| store.gather_dense(idx))
}

use common::trained_dict;

fn dense_records(n: usize) -> Vec<u8> {
    (0..n as u32 * 8)
        .flat_map(|v| ((v % 13) as f32 * 1.5).to_le_bytes())
        .collect()
}

/// A closed dense `<f4` [2, 4] store of `n` records.
fn dense_store(dir: &Path, codec: Codec, n: usize) -> PathBuf {
    let d = (codec == Codec::ZstdDict).then(|| trained_dict(0));
    let schema = Schema::dense(DType::F32, &[2, 4]).unwrap();
    let mut store = Store::create(dir, schema, codec, d.as_deref()).unwrap();
    store.append_dense(&dense_records(n)).unwrap();
    store.close().unwrap();
    dir.to_path_buf()
}

fn ragged_packed() -> Packed {
    let mut p = Packed::default();
    for r in 0..6u32 {
        let shape: Vec<u64> = match r % 3 {
            0 => vec![],
            1 => vec![r as u64 + 1],
            _ => vec![2, r as u64],
        };
        let n = shape.iter().product::<u64>() as u32;
        let payload: Vec<u8> = (0..n).flat_map(|k| (k * 3 + r).to_le_bytes()).collect();
        p.push(&shape, &payload);
    }
    p
}

/// A closed ragged `<i4` store of six records (0-d, 1-d and 2-d).
fn ragged_store(dir: &Path, codec: Codec) -> PathBuf {
    let d = (codec == Codec::ZstdDict).then(|| trained_dict(0));
    let mut store = Store::create(dir, Schema::ragged(DType::I32), codec, d.as_deref()).unwrap();
    store.append_ragged(&ragged_packed()).unwrap();
    store.close().unwrap();
    dir.to_path_buf()
}

fn patch(path: &Path, at: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, at).unwrap();
}

fn read_u64(path: &Path, at: usize) -> u64 {
    let b = fs::read(path).unwrap();
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn read_u32(path: &Path, at: usize) -> u32 {
    let b = fs::read(path).unwrap();
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn set_len(path: &Path, len: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Byte position of field `field` (0 offset, 8 phys, 12 logic) of loc `i`.
fn loc_at(i: u64, field: u64) -> u64 {
    4096 + 16 * i + field
}

/// Writes `schema` as the stored schema (updating schema_length and zeroing
/// the rest of the page).
fn write_schema(dir: &Path, schema: &[u8]) {
    let meta = dir.join(META);
    let mut page = vec![0u8; 4096 - 32];
    page[..schema.len()].copy_from_slice(schema);
    patch(&meta, 32, &page);
    patch(&meta, 16, &(schema.len() as u32).to_le_bytes());
}

/// Asserts a `Corrupted` error naming `file` inside `dir`; returns the invariant.
#[track_caller]
fn assert_corrupted<T: std::fmt::Debug>(r: Result<T, Error>, dir: &Path, file: &str) -> String {
    match r {
        Err(Error::Corrupted { file: f, invariant }) => {
            assert!(
                f.ends_with(file),
                "Corrupted names {} but {file} was expected ({invariant})",
                f.display()
            );
            assert_eq!(f.parent().unwrap(), dir, "the full path of the file");
            let msg = Error::Corrupted {
                file: f.clone(),
                invariant: invariant.clone(),
            }
            .to_string();
            assert!(msg.contains(file), "message names the file: {msg}");
            assert!(!invariant.is_empty());
            invariant
        }
        other => panic!("expected Corrupted naming {file}, got {other:?}"),
    }
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

// ------------------------------------------------------------- meta.zr size

#[test]
fn meta_truncated_below_the_page() {
    let tmp = tempfile::tempdir().unwrap();
    for (k, size) in [0u64, 31, 32, 100, 4095].into_iter().enumerate() {
        let dir = dense_store(&tmp.path().join(format!("s{k}")), Codec::Raw, 3);
        set_len(&dir.join(META), size);
        let inv = assert_corrupted(Store::open(&dir), &dir, META);
        assert!(inv.contains("4096") || inv.contains("header"), "{inv}");
    }
}

#[test]
fn meta_table_shorter_than_length() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        for (k, cut) in [1u64, 15, 16, 17, 48].into_iter().enumerate() {
            let dir = dense_store(&tmp.path().join(format!("{codec}-{k}")), codec, 3);
            set_len(&dir.join(META), 4096 + 48 - cut);
            assert_corrupted(Store::open(&dir), &dir, META);
        }
    }
}

#[test]
fn header_length_past_the_table() {
    let tmp = tempfile::tempdir().unwrap();
    for (k, length) in [4u64, 1000, u64::MAX / 16, u64::MAX]
        .into_iter()
        .enumerate()
    {
        let dir = dense_store(&tmp.path().join(format!("s{k}")), Codec::Zstd, 3);
        patch(&dir.join(META), 0, &length.to_le_bytes());
        assert_corrupted(Store::open(&dir), &dir, META);
    }
}

// ------------------------------------------------------------ record locs

#[test]
fn loc_past_tail_offset() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        let base = tmp.path().join(codec.name());
        // offset at the tail
        let dir = dense_store(&base.join("a"), codec, 3);
        let tail = read_u64(&dir.join(META), 8);
        patch(&dir.join(META), loc_at(1, 0), &tail.to_le_bytes());
        assert_corrupted(Store::open(&dir), &dir, META);

        // the physically last record one byte longer than the committed
        // payload (compressed appends place records in completion order, so
        // find the one that ends at tail_offset)
        let dir = dense_store(&base.join("b"), codec, 3);
        let tail = read_u64(&dir.join(META), 8);
        let last = (0..3u64)
            .find(|&i| {
                let off = read_u64(&dir.join(META), loc_at(i, 0) as usize);
                let phys = read_u32(&dir.join(META), loc_at(i, 8) as usize) as u64;
                off + phys == tail
            })
            .expect("one record ends at tail_offset");
        let phys = read_u32(&dir.join(META), loc_at(last, 8) as usize);
        patch(&dir.join(META), loc_at(last, 8), &(phys + 1).to_le_bytes());
        if codec == Codec::Raw {
            patch(&dir.join(META), loc_at(last, 12), &(phys + 1).to_le_bytes());
        }
        assert_corrupted(Store::open(&dir), &dir, META);

        // offset + phys overflows u64
        let dir = dense_store(&base.join("c"), codec, 3);
        patch(&dir.join(META), loc_at(0, 0), &(u64::MAX - 3).to_le_bytes());
        assert_corrupted(Store::open(&dir), &dir, META);

        // tail_offset lowered below the end of the last record
        let dir = dense_store(&base.join("d"), codec, 3);
        patch(&dir.join(META), 8, &(tail - 1).to_le_bytes());
        assert_corrupted(Store::open(&dir), &dir, META);
    }
}

#[test]
fn loc_past_the_end_of_data() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        // a loc beyond data.zr, with tail_offset raised to cover it: the
        // store claims more committed payload than data.zr holds
        let dir = dense_store(&tmp.path().join(codec.name()), codec, 3);
        let data_len = fs::metadata(dir.join(DATA)).unwrap().len();
        patch(
            &dir.join(META),
            loc_at(1, 0),
            &(data_len + 100).to_le_bytes(),
        );
        patch(&dir.join(META), 8, &(data_len + 200).to_le_bytes());
        assert_corrupted(Store::open(&dir), &dir, DATA);
    }
}

#[test]
fn data_shorter_than_tail_offset() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        for (k, cut) in [1u64, 10].into_iter().enumerate() {
            let dir = ragged_store(&tmp.path().join(format!("{codec}-{k}")), codec);
            let len = fs::metadata(dir.join(DATA)).unwrap().len();
            set_len(&dir.join(DATA), len - cut);
            let inv = assert_corrupted(Store::open(&dir), &dir, DATA);
            assert!(inv.contains("tail_offset"), "{inv}");
        }
        // an empty data.zr under a non-zero tail_offset
        let dir = dense_store(&tmp.path().join(format!("{codec}-empty")), codec, 2);
        set_len(&dir.join(DATA), 0);
        assert_corrupted(Store::open(&dir), &dir, DATA);
    }
}

#[test]
fn data_missing() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        let dir = dense_store(&tmp.path().join(codec.name()), codec, 3);
        fs::remove_file(dir.join(DATA)).unwrap();
        assert_corrupted(Store::open(&dir), &dir, DATA);
        // even for an empty store
        let dir = tmp.path().join(format!("{codec}-empty"));
        let d = (codec == Codec::ZstdDict).then(|| trained_dict(0));
        Store::create(&dir, Schema::ragged(DType::U8), codec, d.as_deref())
            .unwrap()
            .close()
            .unwrap();
        fs::remove_file(dir.join(DATA)).unwrap();
        assert_corrupted(Store::open(&dir), &dir, DATA);
    }
}

// ------------------------------------------------------------------ header

#[test]
fn unknown_codec_byte() {
    let tmp = tempfile::tempdir().unwrap();
    for (k, tag) in [3u8, 4, 0x7f, 0xff].into_iter().enumerate() {
        let dir = dense_store(&tmp.path().join(format!("s{k}")), Codec::Raw, 3);
        patch(&dir.join(META), 31, &[tag]);
        let inv = assert_corrupted(Store::open(&dir), &dir, META);
        assert!(inv.contains("codec"), "{inv}");
    }
}

#[test]
fn codec_byte_changed_to_another_known_codec() {
    let tmp = tempfile::tempdir().unwrap();
    // a raw store relabelled zstd_dict has no dict.zr
    let dir = dense_store(&tmp.path().join("a"), Codec::Raw, 3);
    patch(&dir.join(META), 31, &[2]);
    assert_corrupted(Store::open(&dir), &dir, DICT);
    // a raw store relabelled zstd: its records are not zstd frames
    let dir = dense_store(&tmp.path().join("b"), Codec::Raw, 3);
    patch(&dir.join(META), 31, &[1]);
    let store = Store::open(&dir).unwrap();
    assert_corrupted(store.gather_dense(&[0u64]), &dir, DATA);
}

#[test]
fn non_zero_reserved_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    for pos in 20..31u64 {
        let dir = dense_store(&tmp.path().join(format!("s{pos}")), Codec::Zstd, 2);
        patch(&dir.join(META), pos, &[0x01]);
        let inv = assert_corrupted(Store::open(&dir), &dir, META);
        assert!(inv.contains("reserved"), "{inv}");
    }
}

#[test]
fn schema_length_out_of_range() {
    let tmp = tempfile::tempdir().unwrap();
    for (k, len) in [0u32, 4065, 4096, u32::MAX].into_iter().enumerate() {
        let dir = dense_store(&tmp.path().join(format!("s{k}")), Codec::Raw, 2);
        patch(&dir.join(META), 16, &len.to_le_bytes());
        let inv = assert_corrupted(Store::open(&dir), &dir, META);
        assert!(inv.contains("schema_length"), "{inv}");
    }
    // in range but wrong: too long (takes in padding), too short (cuts the map)
    for (k, len) in [26u32, 4064, 24, 1].into_iter().enumerate() {
        let dir = dense_store(&tmp.path().join(format!("w{k}")), Codec::Raw, 2);
        assert_eq!(read_u32(&dir.join(META), 16), 25);
        patch(&dir.join(META), 16, &len.to_le_bytes());
        assert_corrupted(Store::open(&dir), &dir, META);
    }
}

// ------------------------------------------------------------------ schema

fn mp_str(s: &str) -> Vec<u8> {
    assert!(s.len() < 32);
    let mut v = vec![0xa0 | s.len() as u8];
    v.extend_from_slice(s.as_bytes());
    v
}

#[test]
fn malformed_schemas() {
    let dtype = |v: &str| [mp_str("dtype"), mp_str(v)].concat();
    let shape = [mp_str("item_shape"), vec![0x92, 0x02, 0x04]].concat();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "extra key",
            [
                vec![0x83],
                dtype("<f4"),
                shape.clone(),
                mp_str("meta"),
                vec![0x01],
            ]
            .concat(),
        ),
        (
            "extra key (ragged)",
            [vec![0x82], dtype("<f4"), mp_str("order"), mp_str("C")].concat(),
        ),
        ("missing dtype", [vec![0x81], shape.clone()].concat()),
        ("empty map", vec![0x80]),
        (
            "duplicate dtype",
            [vec![0x82], dtype("<f4"), dtype("<f4")].concat(),
        ),
        (
            "dtype is an int",
            [vec![0x82], mp_str("dtype"), vec![0x07], shape.clone()].concat(),
        ),
        (
            "dtype is nil",
            [vec![0x81], mp_str("dtype"), vec![0xc0]].concat(),
        ),
        (
            "dtype is an array",
            [vec![0x81], mp_str("dtype"), vec![0x91], mp_str("<f4")].concat(),
        ),
        (
            "item_shape is a string",
            [
                vec![0x82],
                dtype("<f4"),
                mp_str("item_shape"),
                mp_str("2,4"),
            ]
            .concat(),
        ),
        (
            "item_shape is nil",
            [vec![0x82], dtype("<f4"), mp_str("item_shape"), vec![0xc0]].concat(),
        ),
        (
            "item_shape is a map",
            [vec![0x82], dtype("<f4"), mp_str("item_shape"), vec![0x80]].concat(),
        ),
        (
            "item_shape negative",
            [
                vec![0x82],
                dtype("<f4"),
                mp_str("item_shape"),
                vec![0x92, 0x02, 0xff],
            ]
            .concat(),
        ),
        (
            "item_shape float",
            [
                vec![0x82],
                dtype("<f4"),
                mp_str("item_shape"),
                vec![0x91, 0xca, 0x40, 0, 0, 0],
            ]
            .concat(),
        ),
        (
            "item_shape zero dim",
            [
                vec![0x82],
                dtype("<f4"),
                mp_str("item_shape"),
                vec![0x92, 0x02, 0x00],
            ]
            .concat(),
        ),
        (
            "item_shape over 2 GiB",
            [
                vec![0x82],
                dtype("<f4"),
                mp_str("item_shape"),
                vec![
                    0x92, 0xce, 0x00, 0x01, 0x00, 0x00, 0xce, 0x00, 0x01, 0x00, 0x00,
                ],
            ]
            .concat(),
        ),
        (
            "key is an int",
            [vec![0x82], dtype("<f4"), vec![0x01, 0x02]].concat(),
        ),
        (
            "not a map",
            [vec![0x92], mp_str("<f4"), vec![0x90]].concat(),
        ),
        ("nil", vec![0xc0]),
        ("truncated map", [vec![0x82], dtype("<f4")].concat()),
        (
            "trailing bytes",
            [vec![0x81], dtype("<f4"), vec![0x00]].concat(),
        ),
        ("garbage", vec![0xc1, 0xc1, 0xc1]),
        ("big-endian dtype", [vec![0x81], dtype(">i4")].concat()),
        ("complex dtype", [vec![0x81], dtype("<c8")].concat()),
        ("string dtype", [vec![0x81], dtype("<U4")].concat()),
        ("object dtype", [vec![0x81], dtype("|O")].concat()),
        ("datetime dtype", [vec![0x81], dtype("<M8[ns]")].concat()),
        ("void dtype", [vec![0x81], dtype("|V8")].concat()),
        ("non-canonical bool", [vec![0x81], dtype("<b1")].concat()),
        ("dtype name", [vec![0x81], dtype("float32")].concat()),
        ("empty dtype", [vec![0x81], dtype("")].concat()),
    ];
    let tmp = tempfile::tempdir().unwrap();
    for (k, (what, schema)) in cases.iter().enumerate() {
        let dir = dense_store(&tmp.path().join(format!("s{k}")), Codec::Raw, 2);
        write_schema(&dir, schema);
        match Store::open(&dir) {
            Err(Error::Corrupted { file, invariant }) => {
                assert!(file.ends_with(META), "{what}: names {}", file.display());
                assert!(invariant.contains("schema"), "{what}: {invariant}");
            }
            other => panic!("{what}: expected Corrupted meta.zr, got {other:?}"),
        }
    }
    // the well-formed schema written the same way opens
    let dir = dense_store(&tmp.path().join("ok"), Codec::Raw, 2);
    write_schema(&dir, &[vec![0x82], dtype("<f4"), shape].concat());
    assert_eq!(Store::open(&dir).unwrap().len(), 2);
}

#[test]
fn schema_dtype_changed_to_a_different_width() {
    // <f4 [2, 4] relabelled <f8 [2, 4]: records no longer match the width
    let tmp = tempfile::tempdir().unwrap();
    let dir = dense_store(&tmp.path().join("s"), Codec::Zstd, 2);
    let schema = Schema::dense(DType::F64, &[2, 4]).unwrap().encode();
    write_schema(&dir, &schema);
    let inv = assert_corrupted(Store::open(&dir), &dir, META);
    assert!(inv.contains("logic_length"), "{inv}");
}

// --------------------------------------------------------------- dict.zr

#[test]
fn dict_missing_for_zstd_dict() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = dense_store(&tmp.path().join("a"), Codec::ZstdDict, 3);
    fs::remove_file(dir.join(DICT)).unwrap();
    assert_corrupted(Store::open(&dir), &dir, DICT);
    let dir = ragged_store(&tmp.path().join("b"), Codec::ZstdDict);
    set_len(&dir.join(DICT), 0);
    assert_corrupted(Store::open(&dir), &dir, DICT);
}

#[test]
fn dict_present_for_other_codecs() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in [Codec::Raw, Codec::Zstd] {
        let dir = dense_store(&tmp.path().join(codec.name()), codec, 3);
        fs::write(dir.join(DICT), trained_dict(0)).unwrap();
        assert_corrupted(Store::open(&dir), &dir, DICT);
        // an empty dict.zr is still a dict.zr that should not be there
        fs::write(dir.join(DICT), b"").unwrap();
        assert_corrupted(Store::open(&dir), &dir, DICT);
    }
}

#[test]
fn dict_malformed_fails_without_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let good = trained_dict(0);
    // zstd dictionary magic followed by entropy tables that do not parse
    let mut bad = good.clone();
    for b in bad[8..200].iter_mut() {
        *b = 0xff;
    }
    // magic and dictionary id, then nothing
    let truncated = good[..12].to_vec();
    for (k, dict) in [bad, truncated].into_iter().enumerate() {
        let dir = dense_store(&tmp.path().join(format!("s{k}")), Codec::ZstdDict, 3);
        fs::write(dir.join(DICT), &dict).unwrap();
        let inv = assert_corrupted(Store::open(&dir), &dir, DICT);
        assert!(inv.contains("dictionary"), "{inv}");
        // the same bytes given to create are an invalid value; nothing written
        let fresh = tmp.path().join(format!("fresh{k}"));
        match Store::create(
            &fresh,
            Schema::ragged(DType::U8),
            Codec::ZstdDict,
            Some(&dict),
        ) {
            Err(Error::InvalidValue(msg)) => assert!(msg.contains("dict_bytes"), "{msg}"),
            other => panic!("expected InvalidValue, got {other:?}"),
        }
        assert!(!fresh.exists());
    }
}

#[test]
fn dict_replaced_by_another_dictionary() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = dense_store(&tmp.path().join("s"), Codec::ZstdDict, 4);
    let other = trained_dict(7);
    assert_ne!(other, fs::read(dir.join(DICT)).unwrap());
    fs::write(dir.join(DICT), &other).unwrap();
    let store = Store::open(&dir).unwrap();
    // These records do not pay (the dictionary knows nothing like them):
    // stored as frames of raw blocks, they need no dictionary.
    let data = fs::read(dir.join(DATA)).unwrap();
    for i in 0..4u64 {
        let loc = store.loc(i).unwrap();
        let frame = &data[loc.offset as usize..][..loc.phys_length as usize];
        assert!(loaderx::is_raw_frame(frame, 32), "record {i}");
    }
    assert_eq!(
        store.gather_dense(&[3u64, 0]).unwrap().as_slice(),
        [&dense_records(4)[96..], &dense_records(1)[..]].concat()
    );
    store.close().unwrap();

    // Records like the dictionary's own are dictionary frames, and fail
    // under another dictionary naming data.zr.
    let dir = tmp.path().join("t");
    let dict = trained_dict(0);
    let schema = Schema::dense(DType::U8, &[120]).unwrap();
    let mut store = Store::create(&dir, schema, Codec::ZstdDict, Some(&dict)).unwrap();
    let recs: Vec<u8> = (0..4u32)
        .flat_map(|i| {
            (0..120u32)
                .map(move |j| ((i * 13 + j * j) % 41) as u8 + if j % 5 == 0 { 120 } else { 0 })
        })
        .collect();
    store.append_dense(&recs).unwrap();
    store.close().unwrap();
    fs::write(dir.join(DICT), &other).unwrap();
    let store = Store::open(&dir).unwrap();
    assert!(store.stats().raw_records == 0);
    assert_corrupted(store.gather_dense(&[3u64]), &dir, DATA);
    assert_corrupted(store.read_record(0), &dir, DATA);
}

// ------------------------------------------------------ loc vs. schema/codec

#[test]
fn dense_loc_logic_length_differs_from_width() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        for (k, logic) in [31u32, 33, 0, 64].into_iter().enumerate() {
            let dir = dense_store(&tmp.path().join(format!("{codec}-{k}")), codec, 3);
            patch(&dir.join(META), loc_at(1, 12), &logic.to_le_bytes());
            if codec == Codec::Raw && logic > 0 && logic < 32 {
                // keep phys == logic so only the width is wrong
                patch(&dir.join(META), loc_at(1, 8), &logic.to_le_bytes());
            }
            let inv = assert_corrupted(Store::open(&dir), &dir, META);
            assert!(
                inv.contains("logic_length") || inv.contains("phys_length"),
                "{inv}"
            );
        }
    }
}

#[test]
fn raw_loc_phys_differs_from_logic() {
    let tmp = tempfile::tempdir().unwrap();
    for (k, phys) in [31u32, 1, 0].into_iter().enumerate() {
        let dir = dense_store(&tmp.path().join(format!("d{k}")), Codec::Raw, 3);
        patch(&dir.join(META), loc_at(0, 8), &phys.to_le_bytes());
        let inv = assert_corrupted(Store::open(&dir), &dir, META);
        assert!(inv.contains("phys_length"), "{inv}");
    }
    let dir = ragged_store(&tmp.path().join("r"), Codec::Raw);
    let logic = read_u32(&dir.join(META), loc_at(2, 12) as usize);
    patch(&dir.join(META), loc_at(2, 8), &(logic - 4).to_le_bytes());
    assert_corrupted(Store::open(&dir), &dir, META);
}

#[test]
fn compressed_loc_with_zero_phys_length() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = ragged_store(&tmp.path().join("s"), Codec::Zstd);
    patch(&dir.join(META), loc_at(0, 8), &0u32.to_le_bytes());
    assert_corrupted(Store::open(&dir), &dir, META);
}

#[test]
fn ragged_loc_too_short_for_a_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in [Codec::Raw, Codec::Zstd] {
        let dir = ragged_store(&tmp.path().join(codec.name()), codec);
        patch(&dir.join(META), loc_at(0, 12), &8u32.to_le_bytes());
        if codec == Codec::Raw {
            patch(&dir.join(META), loc_at(0, 8), &8u32.to_le_bytes());
        }
        assert_corrupted(Store::open(&dir), &dir, META);
    }
}

// ----------------------------------------------------- corruption on read

#[test]
fn corrupted_zstd_frame_fails_the_gather() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in [Codec::Zstd, Codec::ZstdDict] {
        // a broken frame magic
        let dir = dense_store(&tmp.path().join(format!("{codec}-magic")), codec, 40);
        let off = read_u64(&dir.join(META), loc_at(7, 0) as usize);
        patch(&dir.join(DATA), off, &[0xde, 0xad, 0xbe, 0xef]);
        let store = Store::open(&dir).unwrap();
        // other records still read
        let ok = store.gather_dense(&[0u64, 6, 8]).unwrap();
        let all = dense_records(40);
        assert_eq!(
            ok.as_slice(),
            [&all[0..32], &all[192..224], &all[256..288]].concat()
        );
        assert_corrupted(store.gather_dense(&[7u64]), &dir, DATA);
        assert_corrupted(store.read_record(7), &dir, DATA);
        let mut dst = vec![0u8; 32 * 3];
        assert_corrupted(store.gather_dense_into(&[1u64, 7, 2], &mut dst), &dir, DATA);
        // a large gather whose lanes include the bad record
        let idx: Vec<u64> = (0..4000).map(|k| k % 40).collect();
        assert_corrupted(store.gather_dense(&idx), &dir, DATA);
        drop(store);

        // the whole frame overwritten with garbage
        let dir = dense_store(&tmp.path().join(format!("{codec}-garbage")), codec, 10);
        let off = read_u64(&dir.join(META), loc_at(3, 0) as usize);
        let phys = read_u32(&dir.join(META), loc_at(3, 8) as usize);
        let garbage: Vec<u8> = (0..phys).map(|k| (k * 37 + 11) as u8).collect();
        patch(&dir.join(DATA), off, &garbage);
        let store = Store::open(&dir).unwrap();
        assert_corrupted(store.gather_dense(&[3u64]), &dir, DATA);
        drop(store);

        // a frame cut short: phys_length one byte less
        let dir = dense_store(&tmp.path().join(format!("{codec}-short")), codec, 10);
        let phys = read_u32(&dir.join(META), loc_at(5, 8) as usize);
        patch(&dir.join(META), loc_at(5, 8), &(phys - 1).to_le_bytes());
        let store = Store::open(&dir).unwrap();
        assert_corrupted(store.gather_dense(&[5u64]), &dir, DATA);
    }
}

#[test]
fn frame_decoding_to_a_different_size() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in [Codec::Zstd, Codec::ZstdDict] {
        for (k, delta) in [8i64, -4, 1].into_iter().enumerate() {
            let dir = ragged_store(&tmp.path().join(format!("{codec}-{k}")), codec);
            let logic = read_u32(&dir.join(META), loc_at(1, 12) as usize);
            let new = (logic as i64 + delta) as u32;
            patch(&dir.join(META), loc_at(1, 12), &new.to_le_bytes());
            let store = Store::open(&dir).unwrap();
            assert_corrupted(store.gather_ragged(&[1u64]), &dir, DATA);
            assert_corrupted(store.read_record(1), &dir, DATA);
            assert_eq!(store.gather_ragged(&[0u64, 2]).unwrap().len(), 2);
        }
    }
}

#[test]
fn ragged_prefix_disagrees_with_length() {
    let tmp = tempfile::tempdir().unwrap();
    // record 1 has shape [2] of <i4: prefix [1][2], 8 payload bytes
    let cases: Vec<(&str, u64, Vec<u8>)> = vec![
        ("ndim too large", 0, 2u64.to_le_bytes().to_vec()),
        ("ndim huge", 0, u64::MAX.to_le_bytes().to_vec()),
        ("ndim 0", 0, 0u64.to_le_bytes().to_vec()),
        ("dim too large", 8, 3u64.to_le_bytes().to_vec()),
        ("dim too small", 8, 1u64.to_le_bytes().to_vec()),
        ("dim zero", 8, 0u64.to_le_bytes().to_vec()),
        ("dim overflows", 8, u64::MAX.to_le_bytes().to_vec()),
    ];
    for (k, (what, at, bytes)) in cases.iter().enumerate() {
        let dir = ragged_store(&tmp.path().join(format!("s{k}")), Codec::Raw);
        let off = read_u64(&dir.join(META), loc_at(1, 0) as usize);
        assert_eq!(read_u64(&dir.join(DATA), off as usize), 1);
        assert_eq!(read_u64(&dir.join(DATA), off as usize + 8), 2);
        patch(&dir.join(DATA), off + at, bytes);
        let store = Store::open(&dir).unwrap();
        let inv = assert_corrupted(store.gather_ragged(&[1u64]), &dir, DATA);
        assert!(inv.contains("record 1"), "{what}: {inv}");
        assert_corrupted(store.read_record(1), &dir, DATA);
        assert_corrupted(store.gather_ragged(&[0u64, 1, 2]), &dir, DATA);
        assert_eq!(
            store.gather_ragged(&[0u64, 2, 3, 4, 5]).unwrap().len(),
            5,
            "{what}"
        );
    }

    // a compressed record whose (valid) frame holds an inconsistent prefix
    for codec in [Codec::Zstd, Codec::ZstdDict] {
        let dir = ragged_store(&tmp.path().join(format!("z-{codec}")), codec);
        let mut bad = Vec::new();
        bad.extend_from_slice(&1u64.to_le_bytes());
        bad.extend_from_slice(&5u64.to_le_bytes());
        bad.extend_from_slice(&[7u8; 12]); // 3 elements, not 5
        let frame = match codec {
            Codec::Zstd => zstd::bulk::compress(&bad, 3).unwrap(),
            _ => zstd::bulk::Compressor::with_dictionary(3, &fs::read(dir.join(DICT)).unwrap())
                .unwrap()
                .compress(&bad)
                .unwrap(),
        };
        let tail = read_u64(&dir.join(META), 8);
        patch(&dir.join(DATA), tail, &frame);
        let new_tail = tail + frame.len() as u64;
        patch(&dir.join(META), 8, &new_tail.to_le_bytes());
        patch(&dir.join(META), loc_at(4, 0), &tail.to_le_bytes());
        patch(
            &dir.join(META),
            loc_at(4, 8),
            &(frame.len() as u32).to_le_bytes(),
        );
        patch(
            &dir.join(META),
            loc_at(4, 12),
            &(bad.len() as u32).to_le_bytes(),
        );
        let store = Store::open(&dir).unwrap();
        assert_corrupted(store.gather_ragged(&[4u64]), &dir, DATA);
        assert_corrupted(store.read_record(4), &dir, DATA);
        assert_eq!(store.gather_ragged(&[5u64, 0]).unwrap().len(), 2);
    }
}

/// Random single-byte corruptions of every file never panic: open either
/// fails with an error or the store reads (or fails to read) cleanly.
#[test]
fn random_corruption_never_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut opened = 0;
    for round in 0..150 {
        let codec = Codec::ALL[round % 3];
        let dense = round % 2 == 0;
        let dir = tmp.path().join(format!("r{round}"));
        if dense {
            dense_store(&dir, codec, 5);
        } else {
            ragged_store(&dir, codec);
        }
        // corrupt 1..=3 bytes of the header, the table or the payload
        for _ in 0..1 + next() % 3 {
            let (file, lo, hi) = match next() % 4 {
                0 => (META, 0, 32),
                1 => (META, 4096, fs::metadata(dir.join(META)).unwrap().len()),
                _ => (DATA, 0, fs::metadata(dir.join(DATA)).unwrap().len()),
            };
            let at = lo + next() % (hi - lo);
            patch(&dir.join(file), at, &[(next() % 256) as u8]);
        }
        if let Ok(store) = Store::open(&dir) {
            opened += 1;
            let idx: Vec<u64> = (0..store.len()).collect();
            if dense {
                let _ = store.gather_dense(&idx);
            } else {
                let _ = store.gather_ragged(&idx);
            }
            for i in idx {
                let _ = store.read_record(i);
            }
        }
    }
    assert!(opened > 0);
}

// ------------------------------------------------------------- bad inputs

#[test]
fn create_on_an_existing_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dict = trained_dict(0);
    for codec in Codec::ALL {
        let dir = dense_store(&tmp.path().join(codec.name()), codec, 3);
        let before = snapshot(&dir);
        for (c2, d2) in [
            (Codec::Raw, None),
            (Codec::Zstd, None),
            (Codec::ZstdDict, Some(&dict[..])),
        ] {
            for schema in [
                Schema::ragged(DType::U8),
                Schema::dense(DType::F32, &[2, 4]).unwrap(),
            ] {
                match Store::create(&dir, schema, c2, d2) {
                    Err(Error::AlreadyExists { path, .. }) => assert_eq!(path, dir),
                    other => panic!("expected AlreadyExists, got {other:?}"),
                }
                assert_eq!(snapshot(&dir), before, "the existing store is unchanged");
            }
        }
        // also while the store is open (and locked)
        let store = Store::open(&dir).unwrap();
        assert!(matches!(
            Store::create(&dir, Schema::ragged(DType::U8), Codec::Raw, None),
            Err(Error::AlreadyExists { .. })
        ));
        drop(store);
        assert_eq!(snapshot(&dir), before);
        assert_eq!(Store::open(&dir).unwrap().len(), 3);
    }
    // a path that is a file
    let file = tmp.path().join("file");
    fs::write(&file, b"hello").unwrap();
    assert!(matches!(
        Store::create(&file, Schema::ragged(DType::U8), Codec::Raw, None),
        Err(Error::AlreadyExists { .. })
    ));
    assert_eq!(fs::read(&file).unwrap(), b"hello");
}

#[test]
fn open_missing_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    match Store::open(&missing) {
        Err(Error::NoStore { path, .. }) => assert_eq!(path, missing),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(!missing.exists(), "open creates nothing");
    assert!(matches!(
        Store::open(tmp.path().join("a/b/c")),
        Err(Error::NoStore { .. })
    ));
    // an empty directory, and one holding only data.zr
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    assert!(matches!(Store::open(&empty), Err(Error::NoStore { .. })));
    assert_eq!(
        fs::read_dir(&empty).unwrap().count(),
        0,
        "open creates nothing"
    );
    fs::write(empty.join(DATA), b"abc").unwrap();
    assert!(matches!(Store::open(&empty), Err(Error::NoStore { .. })));
    assert!(matches!(
        Store::open(&empty).and_then(|s| s.require_kind(Kind::Dense)),
        Err(Error::NoStore { .. })
    ));
    // a store whose meta.zr was removed
    let dir = dense_store(&tmp.path().join("s"), Codec::Raw, 2);
    fs::remove_file(dir.join(META)).unwrap();
    assert!(matches!(Store::open(&dir), Err(Error::NoStore { .. })));
    // a regular file
    let file = tmp.path().join("file");
    fs::write(&file, b"x").unwrap();
    assert!(matches!(Store::open(&file), Err(Error::NoStore { .. })));
}

#[test]
fn require_kind_wrong_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let dense = dense_store(&tmp.path().join("dense"), Codec::Zstd, 2);
    let ragged = ragged_store(&tmp.path().join("ragged"), Codec::Raw);
    match Store::open(&dense).and_then(|s| s.require_kind(Kind::Ragged)) {
        Err(e @ Error::WrongKind { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("dense") && msg.contains("ragged"), "{msg}");
            let Error::WrongKind {
                path,
                expected,
                actual,
            } = e
            else {
                unreachable!()
            };
            assert_eq!(
                (path, expected, actual),
                (dense.clone(), Kind::Ragged, Kind::Dense)
            );
        }
        other => panic!("expected WrongKind, got {other:?}"),
    }
    match Store::open(&ragged).and_then(|s| s.require_kind(Kind::Dense)) {
        Err(Error::WrongKind {
            expected, actual, ..
        }) => {
            assert_eq!((expected, actual), (Kind::Dense, Kind::Ragged))
        }
        other => panic!("expected WrongKind, got {other:?}"),
    }
    // the failed open released its lock
    assert_eq!(
        Store::open(&dense)
            .and_then(|s| s.require_kind(Kind::Dense))
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        Store::open(&ragged)
            .and_then(|s| s.require_kind(Kind::Ragged))
            .unwrap()
            .len(),
        6
    );
}

#[test]
fn zstd_dict_without_dict() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/store");
    for dict in [None, Some(&[][..])] {
        match Store::create(&dir, Schema::ragged(DType::U8), Codec::ZstdDict, dict) {
            Err(Error::InvalidValue(msg)) => assert!(msg.contains("dict_bytes"), "{msg}"),
            other => panic!("expected InvalidValue, got {other:?}"),
        }
        assert!(!dir.join(META).exists());
        assert!(!dir.exists(), "nothing written, not even the directory");
    }
    // into an existing empty directory: it stays empty
    let existing = tmp.path().join("existing");
    fs::create_dir(&existing).unwrap();
    assert!(matches!(
        Store::create(
            &existing,
            Schema::dense(DType::U8, &[4]).unwrap(),
            Codec::ZstdDict,
            None
        ),
        Err(Error::InvalidValue(_))
    ));
    assert_eq!(fs::read_dir(&existing).unwrap().count(), 0);
}

#[test]
fn dict_with_a_non_dict_codec() {
    let tmp = tempfile::tempdir().unwrap();
    let dict = trained_dict(0);
    for codec in [Codec::Raw, Codec::Zstd] {
        let dir = tmp.path().join(codec.name());
        match Store::create(&dir, Schema::ragged(DType::U8), codec, Some(&dict)) {
            Err(Error::InvalidValue(msg)) => assert!(msg.contains("dict"), "{msg}"),
            other => panic!("expected InvalidValue, got {other:?}"),
        }
        assert!(!dir.exists());
    }
}

#[test]
fn invalid_dense_schema() {
    assert!(matches!(
        Schema::dense(DType::U8, &[3, 0]),
        Err(Error::InvalidValue(_))
    ));
    assert!(matches!(
        Schema::dense(DType::U8, &[0]),
        Err(Error::InvalidValue(_))
    ));
    assert!(matches!(
        Schema::dense(DType::F64, &[1 << 20, 1 << 20]),
        Err(Error::InvalidValue(_))
    ));
    assert!(matches!(
        Schema::dense(DType::U64, &[u64::MAX, 2]),
        Err(Error::InvalidValue(_))
    ));
    // the same schemas built by hand are refused by create, nothing written
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let schema = Schema {
        dtype: DType::U8,
        layout: loaderx::Layout::Dense {
            item_shape: vec![2, 0],
        },
    };
    assert!(matches!(
        Store::create(&dir, schema, Codec::Raw, None),
        Err(Error::InvalidValue(_))
    ));
    assert!(!dir.exists());
}

#[test]
fn index_out_of_range() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        let dir = dense_store(&tmp.path().join(format!("d-{codec}")), codec, 5);
        let mut store = Store::open(&dir).unwrap();
        let oor = |r: Result<_, Error>, index: i128| match r {
            Err(Error::IndexOutOfRange { index: i, len }) => {
                assert_eq!((i, len), (index, 5));
            }
            other => panic!(
                "expected IndexOutOfRange({index}), got {:?}",
                other.map(|_| ())
            ),
        };
        oor(store.gather_dense(&[5u64]).map(|_| ()), 5);
        oor(store.gather_dense(&[0u64, 4, 5, 1]).map(|_| ()), 5);
        oor(
            store.gather_dense(&[u64::MAX]).map(|_| ()),
            u64::MAX as i128,
        );
        oor(signed(&store, &[-1i64]).map(|_| ()), -1);
        oor(
            signed(&store, &[2i64, i64::MIN]).map(|_| ()),
            i64::MIN as i128,
        );
        oor(store.gather_dense(&[7u64]).map(|_| ()), 7);
        let mut dst = vec![0u8; 64];
        oor(
            Indices::from(&[0i64, -3])
                .resolve(store.len())
                .and_then(|idx| store.gather_dense_into(idx, &mut dst)),
            -3,
        );
        oor(store.read_record(5).map(|_| ()), 5);
        // a bad index anywhere in a large gather
        let mut idx: Vec<i64> = (0..5000).map(|k| k % 5).collect();
        idx[4321] = -2;
        oor(signed(&store, &idx).map(|_| ()), -2);
        // delete: nothing is deleted
        oor(store.delete(&[0u64, 9]), 9);
        oor(store.delete(&[-1i64]), -1);
        assert_eq!(store.len(), 5);
        store.close().unwrap();
        assert_eq!(Store::open(&dir).unwrap().len(), 5);

        let dir = ragged_store(&tmp.path().join(format!("r-{codec}")), codec);
        let store = Store::open(&dir).unwrap();
        match Indices::from(&[0i64, -1])
            .resolve(store.len())
            .and_then(|idx| store.gather_ragged(idx))
        {
            Err(Error::IndexOutOfRange { index: -1, len: 6 }) => {}
            other => panic!("expected IndexOutOfRange, got {other:?}"),
        }
        assert!(matches!(
            store.gather_ragged(&[6u64]),
            Err(Error::IndexOutOfRange { index: 6, len: 6 })
        ));
    }
    // an empty store has no valid index
    let dir = tmp.path().join("empty");
    let store = Store::create(&dir, Schema::ragged(DType::U8), Codec::Raw, None).unwrap();
    assert!(matches!(
        store.gather_ragged(&[0u64]),
        Err(Error::IndexOutOfRange { index: 0, len: 0 })
    ));
    assert!(matches!(
        store.read_record(0),
        Err(Error::IndexOutOfRange { .. })
    ));
}

#[test]
fn rejected_appends_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        // dense: byte counts that are not a multiple of the 32-byte width
        let dir = dense_store(&tmp.path().join(format!("d-{codec}")), codec, 3);
        let before = snapshot(&dir);
        let mut store = Store::open(&dir).unwrap();
        let stats = store.stats();
        for n in [1usize, 31, 33, 95] {
            match store.append_dense(&vec![1u8; n]) {
                Err(Error::InvalidValue(msg)) => assert!(msg.contains("32"), "{msg}"),
                other => panic!("expected InvalidValue, got {other:?}"),
            }
        }
        // ragged records into a dense store
        assert!(matches!(
            store.append_ragged(&ragged_packed()),
            Err(Error::InvalidValue(_))
        ));
        assert!(matches!(
            store.gather_ragged(&[0u64]),
            Err(Error::InvalidValue(_))
        ));
        let mut short = vec![0u8; 31];
        assert!(matches!(
            store.gather_dense_into(&[0u64], &mut short),
            Err(Error::InvalidValue(_))
        ));
        assert_eq!(store.len(), 3);
        assert_eq!(store.stats(), stats);
        assert_eq!(snapshot(&dir), before);
        store.close().unwrap();
        assert_eq!(
            snapshot(&dir),
            before,
            "nothing half-written became visible"
        );

        // ragged: invalid records, inconsistent bounds, dense bytes
        let dir = ragged_store(&tmp.path().join(format!("r-{codec}")), codec);
        let before = snapshot(&dir);
        let mut store = Store::open(&dir).unwrap();
        let stats = store.stats();
        let mut bad = Vec::new();
        let mut p = Packed::default();
        p.push(&[2], &[0u8; 8]);
        p.push(&[0], &[]); // empty record
        bad.push(p);
        let mut p = Packed::default();
        p.push(&[3], &[0u8; 8]); // payload of 2 elements for shape [3]
        bad.push(p);
        let mut p = Packed::default();
        p.push(&[], &[0u8; 2]); // half an element
        bad.push(p);
        let mut p = Packed::default();
        p.push(&[2], &[0u8; 8]);
        p.bounds[1] += 1; // bounds past the bytes
        bad.push(p);
        let mut p = Packed::default();
        p.push(&[1], &[0u8; 4]);
        p.push(&[1], &[0u8; 4]);
        p.bounds.swap(1, 2); // decreasing bounds
        bad.push(p);
        bad.push(Packed {
            bytes: vec![1, 2, 3],
            bounds: vec![],
        });
        for (k, p) in bad.iter().enumerate() {
            match store.append_ragged(p) {
                Err(Error::InvalidValue(_)) => {}
                other => panic!("bad packed {k}: expected InvalidValue, got {other:?}"),
            }
        }
        assert!(matches!(
            store.append_dense(&[0u8; 16]),
            Err(Error::InvalidValue(_))
        ));
        assert!(matches!(
            store.gather_dense(&[0u64]),
            Err(Error::InvalidValue(_))
        ));
        assert_eq!(store.len(), 6);
        assert_eq!(store.stats(), stats);
        store.close().unwrap();
        assert_eq!(snapshot(&dir), before);
    }
}
