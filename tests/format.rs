//! Golden bytes of the persistent format (docs/format.md): the exact
//! contents of `meta.zr`, `data.zr` and `dict.zr` for known stores.

mod common;

use std::fs;
use std::path::Path;

use loaderx::{dict, Codec, DType, Packed, Records, Schema, Store};

// ------------------------------------------------------------------ helpers

fn meta_bytes(dir: &Path) -> Vec<u8> {
    fs::read(dir.join("meta.zr")).unwrap()
}

fn data_bytes(dir: &Path) -> Vec<u8> {
    fs::read(dir.join("data.zr")).unwrap()
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// The header fields of a meta.zr image, checked for shape on the way.
struct RawHeader {
    length: u64,
    tail_offset: u64,
    schema_length: u32,
    codec: u8,
}

fn header(meta: &[u8]) -> RawHeader {
    assert!(meta.len() >= 4096, "meta.zr is {} bytes", meta.len());
    assert_eq!(&meta[20..31], &[0u8; 11], "reserved header bytes are zero");
    RawHeader {
        length: u64_at(meta, 0),
        tail_offset: u64_at(meta, 8),
        schema_length: u32_at(meta, 16),
        codec: meta[31],
    }
}

/// `(offset, phys_length, logic_length)` of every location in meta.zr.
fn locs(meta: &[u8]) -> Vec<(u64, u32, u32)> {
    let h = header(meta);
    (0..h.length as usize)
        .map(|i| {
            let at = 4096 + 16 * i;
            (
                u64_at(meta, at),
                u32_at(meta, at + 8),
                u32_at(meta, at + 12),
            )
        })
        .collect()
}

/// A 32-byte header image built by hand.
fn header_image(length: u64, tail: u64, schema_len: u32, codec: u8) -> Vec<u8> {
    let mut h = Vec::with_capacity(32);
    h.extend_from_slice(&length.to_le_bytes());
    h.extend_from_slice(&tail.to_le_bytes());
    h.extend_from_slice(&schema_len.to_le_bytes());
    h.extend_from_slice(&[0u8; 11]);
    h.push(codec);
    assert_eq!(h.len(), 32);
    h
}

/// MsgPack of `{"dtype": dtype}`.
fn ragged_schema_image(dtype: &str) -> Vec<u8> {
    let mut s = vec![0x81, 0xa5];
    s.extend_from_slice(b"dtype");
    s.push(0xa0 | dtype.len() as u8);
    s.extend_from_slice(dtype.as_bytes());
    s
}

/// MsgPack of `{"dtype": dtype, "item_shape": shape}` with the shape's
/// array already encoded.
fn dense_schema_image(dtype: &str, shape_msgpack: &[u8]) -> Vec<u8> {
    let mut s = vec![0x82, 0xa5];
    s.extend_from_slice(b"dtype");
    s.push(0xa0 | dtype.len() as u8);
    s.extend_from_slice(dtype.as_bytes());
    s.push(0xaa);
    s.extend_from_slice(b"item_shape");
    s.extend_from_slice(shape_msgpack);
    s
}

/// The static page: header, schema, zeros to 4096.
fn page_image(header: &[u8], schema: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(4096);
    p.extend_from_slice(header);
    p.extend_from_slice(schema);
    p.resize(4096, 0);
    p
}

fn loc_image(offset: u64, phys: u32, logic: u32) -> Vec<u8> {
    let mut l = Vec::with_capacity(16);
    l.extend_from_slice(&offset.to_le_bytes());
    l.extend_from_slice(&phys.to_le_bytes());
    l.extend_from_slice(&logic.to_le_bytes());
    l
}

fn dir_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Structured, compressible training records and a dictionary trained on them.
fn trained_dict() -> Vec<u8> {
    let mut samples = Vec::new();
    let mut sizes = Vec::new();
    for i in 0..400u32 {
        let rec: Vec<u8> = (0..128u32)
            .map(|j| ((i * 13 + j * j) % 37) as u8 + if j % 4 == 0 { 150 } else { 0 })
            .collect();
        sizes.push(rec.len());
        samples.extend_from_slice(&rec);
    }
    dict::train(&samples, &sizes, dict::tier("fast").unwrap()).unwrap()
}

fn f32_record(r: u32) -> Vec<u8> {
    (0..8u32)
        .flat_map(|k| ((r * 8 + k) as f32 * 0.5 - 3.0).to_le_bytes())
        .collect()
}

// -------------------------------------------------------------------- tests

#[test]
fn dense_f4_raw_store_golden_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("golden");
    let schema = Schema::dense(DType::F32, &[2, 4]).unwrap();
    let mut store = Store::create(&dir, schema, Codec::Raw, None).unwrap();
    let recs: Vec<Vec<u8>> = (0..3).map(f32_record).collect();
    assert!(recs.iter().all(|r| r.len() == 32));
    // one batch of one record, then a batch of two
    store.append_dense(&recs[0]).unwrap();
    store
        .append_dense(&[recs[1].clone(), recs[2].clone()].concat())
        .unwrap();
    store.close().unwrap();

    let schema_image = {
        let mut s = vec![0x82, 0xa5];
        s.extend_from_slice(b"dtype");
        s.push(0xa3);
        s.extend_from_slice(b"<f4");
        s.push(0xaa);
        s.extend_from_slice(b"item_shape");
        s.extend_from_slice(&[0x92, 0x02, 0x04]);
        s
    };
    assert_eq!(schema_image.len(), 25);

    let mut expected = Vec::new();
    // header: length 3, tail_offset 96, schema_length 25, reserved, codec 0
    expected.extend_from_slice(&3u64.to_le_bytes());
    expected.extend_from_slice(&96u64.to_le_bytes());
    expected.extend_from_slice(&25u32.to_le_bytes());
    expected.extend_from_slice(&[0u8; 11]);
    expected.push(0);
    expected.extend_from_slice(&schema_image);
    expected.resize(4096, 0);
    for i in 0..3u64 {
        expected.extend_from_slice(&(32 * i).to_le_bytes());
        expected.extend_from_slice(&32u32.to_le_bytes());
        expected.extend_from_slice(&32u32.to_le_bytes());
    }
    assert_eq!(expected.len(), 4096 + 48);
    let meta = meta_bytes(&dir);
    assert_eq!(meta.len(), expected.len());
    assert_eq!(&meta[..32], &expected[..32], "header");
    assert_eq!(&meta[32..57], &expected[32..57], "schema");
    assert_eq!(meta, expected);

    assert_eq!(data_bytes(&dir), recs.concat());
    assert_eq!(dir_entries(&dir), vec!["data.zr", "meta.zr"]);

    // the same bytes read back through the engine
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.len(), 3);
    assert_eq!(store.gather_dense(&[2u64, 0, 1]).unwrap().as_slice(), {
        [recs[2].clone(), recs[0].clone(), recs[1].clone()].concat()
    });
}

#[test]
fn ragged_raw_store_golden_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ragged");
    let mut store = Store::create(&dir, Schema::ragged(DType::I32), Codec::Raw, None).unwrap();
    let shapes: [&[u64]; 4] = [&[2, 3], &[], &[5], &[1, 1, 2]];
    let mut packed = Packed::default();
    let mut expected_data = Vec::new();
    let mut expected_locs = Vec::new();
    let mut value = 0i32;
    for shape in shapes {
        let n: u64 = shape.iter().product();
        let payload: Vec<u8> = (0..n)
            .flat_map(|_| {
                value = value.wrapping_mul(7).wrapping_sub(3);
                value.to_le_bytes()
            })
            .collect();
        packed.push(shape, &payload);
        // the record by hand: [u64 ndim][u64 dim]*ndim[payload]
        let start = expected_data.len() as u64;
        expected_data.extend_from_slice(&(shape.len() as u64).to_le_bytes());
        for &d in shape {
            expected_data.extend_from_slice(&d.to_le_bytes());
        }
        expected_data.extend_from_slice(&payload);
        let len = expected_data.len() as u64 - start;
        expected_locs.push((start, len as u32, len as u32));
    }
    assert_eq!(
        packed.bytes, expected_data,
        "Packed builds the on-disk form"
    );
    store.append_ragged(&packed).unwrap();
    store.close().unwrap();

    let data = data_bytes(&dir);
    assert_eq!(data, expected_data);
    // the 0-d record: ndim 0 then one 4-byte element
    let (off, len, _) = expected_locs[1];
    assert_eq!(len, 12);
    assert_eq!(&data[off as usize..off as usize + 8], &0u64.to_le_bytes());

    let schema = ragged_schema_image("<i4");
    assert_eq!(schema, {
        let mut s = vec![0x81, 0xa5];
        s.extend_from_slice(b"dtype");
        s.push(0xa3);
        s.extend_from_slice(b"<i4");
        s
    });
    let mut expected_meta = page_image(
        &header_image(4, expected_data.len() as u64, schema.len() as u32, 0),
        &schema,
    );
    for &(o, p, l) in &expected_locs {
        expected_meta.extend_from_slice(&loc_image(o, p, l));
    }
    assert_eq!(meta_bytes(&dir), expected_meta);

    let store = Store::open(&dir).unwrap();
    let batch = store.gather_ragged(&[1u64, 3, 0]).unwrap();
    assert_eq!(batch.record(0).shape(), Vec::<u64>::new());
    assert_eq!(batch.record(1).shape(), vec![1, 1, 2]);
    assert_eq!(batch.record(2).shape(), vec![2, 3]);
}

#[test]
fn schema_bytes_for_every_dtype_and_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: Vec<(DType, &str)> = vec![
        (DType::Bool, "|b1"),
        (DType::I8, "|i1"),
        (DType::I16, "<i2"),
        (DType::I32, "<i4"),
        (DType::I64, "<i8"),
        (DType::U8, "|u1"),
        (DType::U16, "<u2"),
        (DType::U32, "<u4"),
        (DType::U64, "<u8"),
        (DType::F16, "<f2"),
        (DType::F32, "<f4"),
        (DType::F64, "<f8"),
    ];
    for (k, &(dtype, s)) in cases.iter().enumerate() {
        let dir = tmp.path().join(format!("r{k}"));
        Store::create(&dir, Schema::ragged(dtype), Codec::Zstd, None)
            .unwrap()
            .close()
            .unwrap();
        let schema = ragged_schema_image(s);
        let expected = page_image(&header_image(0, 0, schema.len() as u32, 1), &schema);
        assert_eq!(meta_bytes(&dir), expected, "ragged {s}");

        let dir = tmp.path().join(format!("d{k}"));
        Store::create(&dir, Schema::dense(dtype, &[3]).unwrap(), Codec::Raw, None)
            .unwrap()
            .close()
            .unwrap();
        let schema = dense_schema_image(s, &[0x91, 0x03]);
        let expected = page_image(&header_image(0, 0, schema.len() as u32, 0), &schema);
        assert_eq!(meta_bytes(&dir), expected, "dense {s}");
    }

    // item_shape (): an empty array; large dims use the smallest MsgPack int
    let shapes: Vec<(Vec<u64>, Vec<u8>)> = vec![
        (vec![], vec![0x90]),
        (vec![127, 128], vec![0x92, 0x7f, 0xcc, 0x80]),
        (
            vec![300, 70000],
            vec![0x92, 0xcd, 0x01, 0x2c, 0xce, 0x00, 0x01, 0x11, 0x70],
        ),
    ];
    for (k, (shape, msgpack)) in shapes.into_iter().enumerate() {
        let dir = tmp.path().join(format!("s{k}"));
        Store::create(
            &dir,
            Schema::dense(DType::U8, &shape).unwrap(),
            Codec::Raw,
            None,
        )
        .unwrap()
        .close()
        .unwrap();
        let schema = dense_schema_image("|u1", &msgpack);
        let expected = page_image(&header_image(0, 0, schema.len() as u32, 0), &schema);
        assert_eq!(meta_bytes(&dir), expected, "item_shape {shape:?}");
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.schema().item_shape(), Some(&shape[..]));
    }
}

#[test]
fn fresh_store_is_one_page_and_empty_data() {
    let tmp = tempfile::tempdir().unwrap();
    let dict = trained_dict();
    for codec in Codec::ALL {
        for dense in [true, false] {
            let dir = tmp.path().join(format!("{codec}-{dense}"));
            let schema = if dense {
                Schema::dense(DType::U16, &[4]).unwrap()
            } else {
                Schema::ragged(DType::U16)
            };
            let schema_image = schema.encode();
            let d = (codec == Codec::ZstdDict).then_some(&dict[..]);
            let store = Store::create(&dir, schema, codec, d).unwrap();
            let expected = page_image(
                &header_image(0, 0, schema_image.len() as u32, codec as u8),
                &schema_image,
            );
            // valid and synced right after create, before close
            assert_eq!(
                meta_bytes(&dir),
                expected,
                "{codec} dense={dense} after create"
            );
            assert_eq!(data_bytes(&dir).len(), 0);
            assert_eq!(store.len(), 0);
            store.close().unwrap();
            assert_eq!(
                meta_bytes(&dir),
                expected,
                "{codec} dense={dense} after close"
            );
            assert_eq!(data_bytes(&dir).len(), 0);
            let mut names = vec!["data.zr", "meta.zr"];
            if codec == Codec::ZstdDict {
                names.insert(1, "dict.zr");
                assert_eq!(fs::read(dir.join("dict.zr")).unwrap(), dict);
            }
            assert_eq!(dir_entries(&dir), names);
            // reopening and closing an empty store changes nothing
            Store::open(&dir).unwrap().close().unwrap();
            assert_eq!(meta_bytes(&dir), expected);
            assert_eq!(data_bytes(&dir).len(), 0);
        }
    }
}

#[test]
fn create_makes_missing_parents() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/b/c/store");
    Store::create(&dir, Schema::ragged(DType::U8), Codec::Raw, None)
        .unwrap()
        .close()
        .unwrap();
    assert_eq!(meta_bytes(&dir).len(), 4096);
    assert_eq!(data_bytes(&dir).len(), 0);
}

/// A fresh store packs records from offset 0 with no gaps, and after close
/// data.zr is exactly tail_offset bytes.
fn assert_packed_and_trimmed(dir: &Path) {
    let meta = meta_bytes(dir);
    let h = header(&meta);
    let mut l = locs(&meta);
    l.sort_by_key(|x| x.0);
    let mut pos = 0u64;
    for &(off, phys, _) in &l {
        assert_eq!(off, pos, "records are packed without gaps");
        pos += phys as u64;
    }
    assert_eq!(h.tail_offset, pos);
    assert_eq!(data_bytes(dir).len() as u64, h.tail_offset);
    assert_eq!(meta.len() as u64, 4096 + 16 * h.length);
}

#[test]
fn data_is_exactly_tail_offset_after_close() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in [Codec::Raw, Codec::Zstd] {
        let dir = tmp.path().join(codec.name());
        let mut store =
            Store::create(&dir, Schema::dense(DType::U32, &[16]).unwrap(), codec, None).unwrap();
        let batch: Vec<u8> = (0..40u32 * 16)
            .flat_map(|v| (v % 97).to_le_bytes())
            .collect();
        store.append_dense(&batch).unwrap();
        store.sync().unwrap();
        store.append_dense(&batch[..64 * 3]).unwrap();
        store.close().unwrap();
        assert_packed_and_trimmed(&dir);
        let h = header(&meta_bytes(&dir));
        assert_eq!(h.length, 43);

        // bytes past tail_offset (what an append interrupted by a crash
        // leaves) are cut off by the next close
        let tail = h.tail_offset;
        let f = fs::OpenOptions::new()
            .append(true)
            .open(dir.join("data.zr"))
            .unwrap();
        std::io::Write::write_all(&mut &f, &[0xAB; 1000]).unwrap();
        drop(f);
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.stats().data_bytes, tail);
        store.close().unwrap();
        assert_eq!(data_bytes(&dir).len() as u64, tail);

        // delete leaves garbage inside tail; close keeps data.zr at tail
        // and trims meta.zr to the shorter table
        let mut store = Store::open(&dir).unwrap();
        store.delete(&[0u64, 5, 42]).unwrap();
        store.close().unwrap();
        let meta = meta_bytes(&dir);
        let h = header(&meta);
        assert_eq!((h.length, h.tail_offset), (40, tail));
        assert_eq!(meta.len(), 4096 + 16 * 40);
        assert_eq!(data_bytes(&dir).len() as u64, tail);

        // compact packs the live records from offset 0 again
        let mut store = Store::open(&dir).unwrap();
        store.compact().unwrap();
        let live = store.stats().live_bytes;
        store.close().unwrap();
        assert_packed_and_trimmed(&dir);
        assert_eq!(header(&meta_bytes(&dir)).tail_offset, live);
    }
}

/// Decodes every record of a closed compressed store straight from the files.
fn decode_frames(dir: &Path, dict: Option<&[u8]>) -> Vec<Vec<u8>> {
    let meta = meta_bytes(dir);
    let data = data_bytes(dir);
    let mut out = Vec::new();
    for (off, phys, logic) in locs(&meta) {
        let frame = &data[off as usize..off as usize + phys as usize];
        // zstd frame magic 0xFD2FB528, little-endian
        assert_eq!(&frame[..4], &[0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(frame).ok(),
            Some(Some(logic as u64)),
            "the frame header records the logical size"
        );
        let decoded = match dict {
            None => zstd::bulk::decompress(frame, logic as usize).unwrap(),
            Some(d) => {
                // A frame of raw blocks names no dictionary; a decoder
                // given one reads it all the same (as earlier releases do).
                if !loaderx::is_raw_frame(frame, logic as usize) {
                    assert_eq!(
                        zstd::zstd_safe::get_dict_id_from_frame(frame),
                        zstd::zstd_safe::get_dict_id_from_dict(d),
                        "the frame names the store's dictionary"
                    );
                }
                assert!(zstd::zstd_safe::get_dict_id_from_dict(d).is_some());
                zstd::bulk::Decompressor::with_dictionary(d)
                    .unwrap()
                    .decompress(frame, logic as usize)
                    .unwrap()
            }
        };
        assert_eq!(decoded.len(), logic as usize);
        out.push(decoded);
    }
    out
}

#[test]
fn zstd_store_holds_valid_frames() {
    let tmp = tempfile::tempdir().unwrap();
    // dense: compressible u16 records
    let dir = tmp.path().join("dense");
    let mut store = Store::create(
        &dir,
        Schema::dense(DType::U16, &[64]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let recs: Vec<Vec<u8>> = (0..25u16)
        .map(|r| {
            (0..64u16)
                .flat_map(|k| (r * 3 + k / 8).to_le_bytes())
                .collect()
        })
        .collect();
    store.append_dense(&recs.concat()).unwrap();
    store.close().unwrap();
    assert_eq!(decode_frames(&dir, None), recs);
    assert_packed_and_trimmed(&dir);
    let meta = meta_bytes(&dir);
    assert_eq!(header(&meta).codec, 1);
    assert!(locs(&meta).iter().all(|&(_, phys, logic)| phys < logic));

    // ragged: the frame covers the shape prefix and the payload
    let dir = tmp.path().join("ragged");
    let mut store = Store::create(&dir, Schema::ragged(DType::F64), Codec::Zstd, None).unwrap();
    let mut packed = Packed::default();
    for r in 0..12u64 {
        let shape: Vec<u64> = match r % 3 {
            0 => vec![],
            1 => vec![r + 1],
            _ => vec![2, r],
        };
        let n: u64 = shape.iter().product();
        let payload: Vec<u8> = (0..n)
            .flat_map(|k| (k as f64 * 0.25).to_le_bytes())
            .collect();
        packed.push(&shape, &payload);
    }
    store.append_ragged(&packed).unwrap();
    store.close().unwrap();
    let expected: Vec<Vec<u8>> = (0..packed.len())
        .map(|i| packed.record(i).to_vec())
        .collect();
    assert_eq!(decode_frames(&dir, None), expected);
    assert_packed_and_trimmed(&dir);
}

#[test]
fn zstd_dict_store_holds_the_dictionary_and_dict_frames() {
    let tmp = tempfile::tempdir().unwrap();
    let dict = trained_dict();
    let dir = tmp.path().join("dict");
    let mut store = Store::create(
        &dir,
        Schema::dense(DType::U8, &[128]).unwrap(),
        Codec::ZstdDict,
        Some(&dict),
    )
    .unwrap();
    assert_eq!(store.dictionary(), Some(&dict[..]));
    let recs: Vec<Vec<u8>> = (0..30u32)
        .map(|i| {
            (0..128u32)
                .map(|j| ((i * 11 + j * j) % 37) as u8 + if j % 4 == 0 { 150 } else { 0 })
                .collect()
        })
        .collect();
    store.append_dense(&recs.concat()).unwrap();
    store.close().unwrap();

    assert_eq!(fs::read(dir.join("dict.zr")).unwrap(), dict);
    let meta = meta_bytes(&dir);
    assert_eq!(header(&meta).codec, 2);
    assert_eq!(decode_frames(&dir, Some(&dict)), recs);
    assert_packed_and_trimmed(&dir);

    // the frames really need the dictionary
    let data = data_bytes(&dir);
    let (off, phys, logic) = locs(&meta)[0];
    let frame = &data[off as usize..(off + phys as u64) as usize];
    assert!(zstd::bulk::decompress(frame, logic as usize).is_err());

    // reopening keeps the dictionary byte for byte
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.dictionary(), Some(&dict[..]));
    store.close().unwrap();
    assert_eq!(fs::read(dir.join("dict.zr")).unwrap(), dict);
}

#[test]
fn record_locations_match_the_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let mut store = Store::create(
        &dir,
        Schema::dense(DType::I64, &[3]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let bytes: Vec<u8> = (0..30i64)
        .flat_map(|v| (v * v - 100).to_le_bytes())
        .collect();
    store.append_dense(&bytes).unwrap();
    store.delete(&[1u64, 4]).unwrap();
    store.sync().unwrap();
    let meta = meta_bytes(&dir);
    let h = header(&meta);
    assert_eq!(h.length, store.len());
    assert_eq!(h.tail_offset, store.stats().data_bytes);
    assert_eq!(h.schema_length as usize, store.schema().encode().len());
    assert_eq!(h.codec, 1);
    for (i, &(off, phys, logic)) in locs(&meta).iter().enumerate() {
        let loc = store.loc(i as u64).unwrap();
        assert_eq!(
            (loc.offset, loc.phys_length, loc.logic_length),
            (off, phys, logic)
        );
        assert_eq!(logic, 24);
    }
    assert!(store.loc(store.len()).is_none());
}

#[test]
fn zstd_store_of_raw_and_compressed_frames_golden_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mixed");
    let schema = Schema::dense(DType::U8, &[40]).unwrap();
    let mut store = Store::create(&dir, schema, Codec::Zstd, None).unwrap();
    // noise, a run of one byte, noise: one record a batch (so in order)
    let recs = [common::noise(1, 40), vec![7u8; 40], common::noise(2, 40)];
    for r in &recs {
        store.append_dense(r).unwrap();
    }
    assert_eq!(store.stats().raw_records, 2);
    store.close().unwrap();

    // A record zstd does not shrink by a sixteenth is a frame of raw
    // blocks: magic, descriptor 0x20 (single segment, no checksum, no
    // dictionary id), a one-byte content size, one last raw block of 40
    // bytes ((40 << 3) | 1 = 0x141), and the bytes as they are.
    let raw = |r: &[u8]| -> Vec<u8> {
        let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, 0x20, 40, 0x41, 0x01, 0x00];
        f.extend_from_slice(r);
        f
    };
    // The compressible one is libzstd's level-3 frame.
    let packed = zstd::bulk::compress(&recs[1], 3).unwrap();
    assert!(packed.len() < 20, "{} bytes", packed.len());
    let data = [raw(&recs[0]), packed.clone(), raw(&recs[2])].concat();
    assert_eq!(data_bytes(&dir), data);

    let schema_image = dense_schema_image("|u1", &[0x91, 40]);
    let mut meta = page_image(
        &header_image(3, data.len() as u64, schema_image.len() as u32, 1),
        &schema_image,
    );
    let p = packed.len() as u32;
    meta.extend(loc_image(0, 49, 40));
    meta.extend(loc_image(49, p, 40));
    meta.extend(loc_image(49 + p as u64, 49, 40));
    assert_eq!(meta_bytes(&dir), meta);

    // Every frame decodes with a plain zstd decoder, and through the engine.
    assert_eq!(decode_frames(&dir, None), recs.to_vec());
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.stats().raw_records, 2);
    assert_eq!(
        store.gather_dense(&[2u64, 1, 0]).unwrap().as_slice(),
        [recs[2].clone(), recs[1].clone(), recs[0].clone()].concat()
    );
}

#[test]
fn raw_frame_of_two_blocks_golden_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("two");
    let n = (128 << 10) + 1;
    let mut store = Store::create(
        &dir,
        Schema::dense(DType::U8, &[n as u64]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let rec = common::noise(3, n);
    store.append_dense(&rec).unwrap();
    store.close().unwrap();
    // Descriptor 0xA0: a four-byte content size; a raw block of 128 KiB
    // (not last: 128 KiB << 3 = 0x100000), then a last one of one byte.
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0xa0];
    frame.extend_from_slice(&(n as u32).to_le_bytes());
    frame.extend_from_slice(&[0x00, 0x00, 0x10]);
    frame.extend_from_slice(&rec[..128 << 10]);
    frame.extend_from_slice(&[0x09, 0x00, 0x00]);
    frame.push(rec[n - 1]);
    assert_eq!(frame.len(), loaderx::raw_frame_len(n));
    assert!(data_bytes(&dir) == frame);
    assert_eq!(
        locs(&meta_bytes(&dir)),
        vec![(0, frame.len() as u32, n as u32)]
    );
    assert_eq!(decode_frames(&dir, None), vec![rec.clone()]);
    assert!(Store::open(&dir).unwrap().read_record(0).unwrap() == rec);
}

#[test]
fn zstd_dict_store_of_raw_and_dict_frames_decodes_with_the_dictionary() {
    let tmp = tempfile::tempdir().unwrap();
    let dict = trained_dict();
    let dir = tmp.path().join("dict");
    let schema = Schema::dense(DType::U8, &[128]).unwrap();
    let mut store = Store::create(&dir, schema, Codec::ZstdDict, Some(&dict)).unwrap();
    let recs: Vec<Vec<u8>> = (0..12u32)
        .map(|i| match i % 3 {
            0 => (0..128u32)
                .map(|j| ((i * 11 + j * j) % 37) as u8 + if j % 4 == 0 { 150 } else { 0 })
                .collect(),
            _ => common::noise(i as u64 + 5, 128),
        })
        .collect();
    store.append_dense(&recs.concat()).unwrap();
    assert_eq!(store.stats().raw_records, 8);
    store.close().unwrap();
    let meta = meta_bytes(&dir);
    let data = data_bytes(&dir);
    for (i, (off, phys, logic)) in locs(&meta).into_iter().enumerate() {
        let frame = &data[off as usize..(off + phys as u64) as usize];
        assert_eq!(loaderx::is_raw_frame(frame, 128), i % 3 != 0, "record {i}");
        assert_eq!(logic, 128);
    }
    assert_eq!(decode_frames(&dir, Some(&dict)), recs);
}
