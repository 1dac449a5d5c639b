//! Bounded, deterministic fuzzing of corrupt stores (the format and its
//! invariants: docs/format.md): no store, however malformed, may abort,
//! panic, hang or read out of bounds; it fails with an error naming a file.
//!
//! Small valid stores of every flavour are built once; each case writes a
//! mutated copy of their `meta.zr` / `data.zr` / `dict.zr` and drives it
//! through open, every gather API (mapped and streaming reads, a long random
//! index list with duplicates), the Arrow views, stats, compact and a reopen.
//! Every error must be `Corrupted` (or `Io`) naming a file of the store.
//!
//! Crashes are made visible rather than silent:
//! * the proptest cases run in a forked child with a per-case timeout, so an
//!   abort or a hang fails the test and names the (shrunk) case;
//! * the test process grants no single allocation over [`ALLOC_CAP`], so an
//!   allocation sized by a corrupt length aborts here on every machine instead
//!   of depending on the host's memory and overcommit policy;
//! * regression tests that could abort run in a child process ([`in_child`]).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use arrow_schema::ArrowError;
use loaderx::arrow::{self as lx_arrow, ColumnReader, TableReader};
use loaderx::schema::Kind;
use loaderx::{Codec, DType, Error, Packed, Records as _, Schema, Store};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngAlgorithm, RngSeed, TestCaseError};

// ---------------------------------------------------------------- allocator

/// The largest single allocation this test process grants. Legitimate
/// requests here stay far below it: stores are at most a few hundred KiB, a
/// zstd frame decodes to at most 32768 times its size, and the test itself
/// caps the logical bytes of each request it makes (see [`affordable`]).
const ALLOC_CAP: usize = 1 << 30;

struct Capped;

// SAFETY: every method forwards to the system allocator with the caller's
// arguments, or fails (returns null) as an allocator may.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller upholds GlobalAlloc::alloc's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller upholds GlobalAlloc::alloc_zeroed's contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from System.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        if new > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` came from this allocator, i.e. from System.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Capped = Capped;

// ------------------------------------------------------------------ stores

const META: &str = "meta.zr";
const DATA: &str = "data.zr";
const DICT: &str = "dict.zr";
/// The densest a zstd frame can be: content bytes per frame byte.
const ZSTD_MAX_RATIO: u64 = 32768;
/// Logical bytes the test lets one gather (or read) ask for when the store's
/// locations say they are legitimately that large.
const REQUEST_BUDGET: u64 = 256 << 20;
/// Logical bytes of the long random index list.
const LIST_BUDGET: u64 = 32 << 20;

fn trained_dict() -> Vec<u8> {
    common::trained_dict(0)
}

/// `n` ragged records of `dtype`: 0-d, 1-d and 2-d shapes.
fn small_ragged(dtype: DType, n: u32) -> Packed {
    let mut p = Packed::default();
    for r in 0..n {
        let shape: Vec<u64> = match r % 3 {
            0 => vec![],
            1 => vec![r as u64 % 7 + 1],
            _ => vec![2, r as u64 % 5 + 1],
        };
        let elems = shape.iter().product::<u64>() as usize;
        let payload: Vec<u8> = (0..elems * dtype.itemsize())
            .map(|k| (k as u32 * 7 + r) as u8 % 61)
            .collect();
        p.push(&shape, &payload);
    }
    p
}

#[derive(Clone, Copy, Debug)]
enum Records {
    /// `n` dense records of the schema's width.
    Dense(usize),
    /// `n` small ragged records.
    Ragged(u32),
    /// A few small ragged records and one of 70,000 incompressible bytes
    /// (stored in 64 KiB or more: streaming gathers read it with `pread`).
    RaggedBig,
    /// `n` dense records, then records 1 and 4 deleted (synced, not
    /// closed: stale entries remain past `length`).
    DenseDeleted(usize),
    /// `n` small ragged records, then records 1 and 4 deleted.
    RaggedDeleted(u32),
    /// `n` dense records, two in three noise: in a zstd store, frames of
    /// raw blocks beside compressed frames.
    DenseMixed(usize),
    /// A few small ragged records and one of 140,000 noise bytes: in a
    /// zstd store, a frame of two raw blocks.
    RaggedTwoBlocks,
}

#[derive(Clone, Copy, Debug)]
struct Flavour {
    name: &'static str,
    dtype: DType,
    /// `None`: ragged.
    item_shape: Option<&'static [u64]>,
    codec: Codec,
    records: Records,
}

const FLAVOURS: &[Flavour] = &[
    Flavour {
        name: "dense raw",
        dtype: DType::F32,
        item_shape: Some(&[2, 4]),
        codec: Codec::Raw,
        records: Records::Dense(6),
    },
    Flavour {
        name: "dense zstd",
        dtype: DType::F32,
        item_shape: Some(&[2, 4]),
        codec: Codec::Zstd,
        records: Records::Dense(6),
    },
    Flavour {
        name: "dense zstd_dict",
        dtype: DType::I16,
        item_shape: Some(&[3, 5]),
        codec: Codec::ZstdDict,
        records: Records::Dense(6),
    },
    Flavour {
        name: "ragged raw",
        dtype: DType::I32,
        item_shape: None,
        codec: Codec::Raw,
        records: Records::Ragged(40),
    },
    Flavour {
        name: "ragged zstd",
        dtype: DType::U16,
        item_shape: None,
        codec: Codec::Zstd,
        records: Records::Ragged(40),
    },
    Flavour {
        name: "ragged zstd_dict",
        dtype: DType::F64,
        item_shape: None,
        codec: Codec::ZstdDict,
        records: Records::Ragged(40),
    },
    Flavour {
        name: "scalar raw",
        dtype: DType::F64,
        item_shape: Some(&[]),
        codec: Codec::Raw,
        records: Records::Dense(9),
    },
    Flavour {
        name: "scalar zstd",
        dtype: DType::Bool,
        item_shape: Some(&[]),
        codec: Codec::Zstd,
        records: Records::Dense(9),
    },
    Flavour {
        name: "dense raw big",
        dtype: DType::U8,
        item_shape: Some(&[300, 240]),
        codec: Codec::Raw,
        records: Records::Dense(2),
    },
    Flavour {
        name: "ragged raw big",
        dtype: DType::U8,
        item_shape: None,
        codec: Codec::Raw,
        records: Records::RaggedBig,
    },
    Flavour {
        name: "ragged zstd big",
        dtype: DType::U8,
        item_shape: None,
        codec: Codec::Zstd,
        records: Records::RaggedBig,
    },
    Flavour {
        name: "dense zstd raw frames",
        dtype: DType::U16,
        item_shape: Some(&[40]),
        codec: Codec::Zstd,
        records: Records::DenseMixed(9),
    },
    Flavour {
        name: "dense zstd_dict raw frames",
        dtype: DType::U8,
        item_shape: Some(&[120]),
        codec: Codec::ZstdDict,
        records: Records::DenseMixed(9),
    },
    Flavour {
        name: "ragged zstd two raw blocks",
        dtype: DType::U8,
        item_shape: None,
        codec: Codec::Zstd,
        records: Records::RaggedTwoBlocks,
    },
    Flavour {
        name: "dense raw after delete",
        dtype: DType::F32,
        item_shape: Some(&[2, 4]),
        codec: Codec::Raw,
        records: Records::DenseDeleted(8),
    },
    Flavour {
        name: "ragged zstd after delete",
        dtype: DType::I32,
        item_shape: None,
        codec: Codec::Zstd,
        records: Records::RaggedDeleted(12),
    },
];

/// The files of one valid, closed store.
#[derive(Clone, Debug)]
struct Files {
    meta: Vec<u8>,
    data: Vec<u8>,
    dict: Option<Vec<u8>>,
}

fn schema_of(f: &Flavour) -> Schema {
    match f.item_shape {
        Some(shape) => Schema::dense(f.dtype, shape).unwrap(),
        None => Schema::ragged(f.dtype),
    }
}

fn read_files(dir: &Path) -> Files {
    Files {
        meta: fs::read(dir.join(META)).unwrap(),
        data: fs::read(dir.join(DATA)).unwrap(),
        dict: fs::read(dir.join(DICT)).ok(),
    }
}

fn build(dir: &Path, f: &Flavour, dict_bytes: &[u8]) -> Files {
    let d = (f.codec == Codec::ZstdDict).then_some(dict_bytes);
    let schema = schema_of(f);
    let mut s = Store::create(dir, schema.clone(), f.codec, d).unwrap();
    match f.records {
        Records::Dense(n) | Records::DenseDeleted(n) => {
            let width = schema.record_width().unwrap() as usize;
            let bytes: Vec<u8> = (0..n * width).map(|i| (i % 7) as u8 * 3).collect();
            s.append_dense(&bytes).unwrap();
        }
        Records::Ragged(n) | Records::RaggedDeleted(n) => {
            s.append_ragged(&small_ragged(f.dtype, n)).unwrap()
        }
        Records::RaggedBig => {
            let mut p = small_ragged(f.dtype, 3);
            p.push(&[70_000], &common::noise(7, 70_000));
            p.push(&[5], &[1, 2, 3, 4, 5]);
            s.append_ragged(&p).unwrap();
        }
        Records::DenseMixed(n) => {
            let width = schema.record_width().unwrap() as usize;
            let bytes: Vec<u8> = (0..n)
                .flat_map(|i| match i % 3 {
                    0 => (0..width).map(|k| (k % 7) as u8 * 3).collect(),
                    _ => common::noise(i as u64 + 11, width),
                })
                .collect();
            s.append_dense(&bytes).unwrap();
            let raw = s.stats().raw_records;
            assert!(raw > 0 && raw < n as u64, "{}: {raw} raw of {n}", f.name);
        }
        Records::RaggedTwoBlocks => {
            let mut p = small_ragged(f.dtype, 3);
            p.push(&[140_000], &common::noise(9, 140_000));
            p.push(&[5], &[1, 2, 3, 4, 5]);
            s.append_ragged(&p).unwrap();
            assert!(s.stats().raw_records >= 1, "{}", f.name);
        }
    }
    if let Records::DenseDeleted(_) | Records::RaggedDeleted(_) = f.records {
        // Synced but not closed: the table keeps its two stale entries
        // (duplicates of the two moved into the holes) past `length`.
        s.sync().unwrap();
        s.delete(&[1u64, 4]).unwrap();
        s.sync().unwrap();
        let files = read_files(dir);
        drop(s);
        return files;
    }
    s.close().unwrap();
    read_files(dir)
}

/// Where case stores live: in memory when the host offers it (compact and
/// close fsync; the cases must not wait for a disk).
fn scratch_root() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(t) = tempfile::tempdir_in(shm) {
            return t;
        }
    }
    tempfile::tempdir().unwrap()
}

/// Every flavour's files, built once per process.
fn templates() -> &'static [Files] {
    static T: OnceLock<Vec<Files>> = OnceLock::new();
    T.get_or_init(|| {
        let tmp = scratch_root();
        let dict_bytes = trained_dict();
        FLAVOURS
            .iter()
            .enumerate()
            .map(|(i, f)| build(&tmp.path().join(i.to_string()), f, &dict_bytes))
            .collect()
    })
}

fn write_files(dir: &Path, files: &Files) {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(META), &files.meta).unwrap();
    fs::write(dir.join(DATA), &files.data).unwrap();
    if let Some(d) = &files.dict {
        fs::write(dir.join(DICT), d).unwrap();
    }
}

// --------------------------------------------------------------- mutations

#[derive(Clone, Copy, Debug)]
enum Value {
    Zero,
    One,
    /// 2^31 - 1
    I31Max,
    /// 2^31, one past the largest record
    Pow31,
    /// 2^32 - 1
    U32Max,
    U64Max,
    /// The field's current value plus a small delta.
    Near(i16),
    /// The length of data.zr.
    DataLen,
    Any(u64),
}

impl Value {
    fn resolve(self, current: u64, data_len: u64) -> u64 {
        match self {
            Value::Zero => 0,
            Value::One => 1,
            Value::I31Max => (1 << 31) - 1,
            Value::Pow31 => 1 << 31,
            Value::U32Max => u32::MAX as u64,
            Value::U64Max => u64::MAX,
            Value::Near(d) => current.wrapping_add(d as i64 as u64),
            Value::DataLen => data_len,
            Value::Any(v) => v,
        }
    }
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Zero),
        1 => Just(Value::One),
        1 => Just(Value::I31Max),
        1 => Just(Value::Pow31),
        1 => Just(Value::U32Max),
        1 => Just(Value::U64Max),
        3 => prop_oneof![-3i16..=3, -64i16..64].prop_map(Value::Near),
        1 => Just(Value::DataLen),
        1 => any::<u64>().prop_map(Value::Any),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Region {
    Header,
    Schema,
    Table,
    Data,
    Dict,
}

#[derive(Clone, Copy, Debug)]
enum FileId {
    Meta,
    Data,
    Dict,
}

#[derive(Clone, Copy, Debug)]
enum HeaderField {
    Length,
    TailOffset,
    SchemaLength,
    /// The codec byte (31) set to this tag.
    Codec(u8),
    /// A reserved byte (20..31) set non-zero.
    Reserved(u8, u8),
}

#[derive(Clone, Copy, Debug)]
enum LocField {
    Offset,
    Phys,
    Logic,
}

#[derive(Clone, Copy, Debug)]
enum Size {
    /// Cut to a length below the current one.
    Truncate(Index),
    /// Grow by this many bytes of `fill`.
    Extend(u32, u8),
    Empty,
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(Region, Index, u8),
    Header(HeaderField, Value),
    Loc(Index, LocField, Value),
    /// The field of every `step`-th entry, from `first`.
    Locs(u8, u8, LocField, Value),
    /// logic_length 2^31 - `below` on every `step`-th entry: each within the
    /// record cap, together far beyond any allocation.
    HugeLogic(u16, u8),
    Resize(FileId, Size),
    Remove(FileId),
    SwapLocs(Index, Index),
    DupLoc(Index, Index),
    /// Entry `a` moved onto entry `b`'s bytes, shifted by a few bytes.
    Overlap(Index, Index, i8),
    /// Another flavour's schema.
    Schema(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let region = prop_oneof![
        Just(Region::Header),
        Just(Region::Schema),
        Just(Region::Table),
        Just(Region::Data),
        Just(Region::Dict),
    ];
    let file = prop_oneof![Just(FileId::Meta), Just(FileId::Data), Just(FileId::Dict)];
    let header_field = prop_oneof![
        Just(HeaderField::Length),
        Just(HeaderField::TailOffset),
        Just(HeaderField::SchemaLength),
        (0u8..4).prop_map(HeaderField::Codec),
        (20u8..31, 1u8..=255).prop_map(|(b, v)| HeaderField::Reserved(b, v)),
    ];
    let loc_field = prop_oneof![
        Just(LocField::Offset),
        Just(LocField::Phys),
        Just(LocField::Logic),
    ];
    let size = prop_oneof![
        any::<Index>().prop_map(Size::Truncate),
        (prop_oneof![1u32..64, 64u32..9000], any::<u8>()).prop_map(|(n, b)| Size::Extend(n, b)),
        Just(Size::Empty),
    ];
    prop_oneof![
        4 => (region, any::<Index>(), 1u8..=255).prop_map(|(r, i, x)| Mutation::Flip(r, i, x)),
        3 => (header_field, value()).prop_map(|(f, v)| Mutation::Header(f, v)),
        4 => (any::<Index>(), loc_field.clone(), value()).prop_map(|(i, f, v)| Mutation::Loc(i, f, v)),
        2 => (0u8..3, 1u8..=3, loc_field, value()).prop_map(|(a, s, f, v)| Mutation::Locs(a, s, f, v)),
        2 => (0u16..1024, 1u8..=2).prop_map(|(b, s)| Mutation::HugeLogic(b, s)),
        2 => (file.clone(), size).prop_map(|(f, s)| Mutation::Resize(f, s)),
        1 => file.prop_map(Mutation::Remove),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::SwapLocs(a, b)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::DupLoc(a, b)),
        2 => (any::<Index>(), any::<Index>(), -8i8..8).prop_map(|(a, b, s)| Mutation::Overlap(a, b, s)),
        1 => (0..FLAVOURS.len()).prop_map(Mutation::Schema),
    ]
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Entries of the location table that `meta` holds whole.
fn entries(meta: &[u8]) -> usize {
    meta.len().saturating_sub(4096) / 16
}

fn loc_field_at(entry: usize, field: LocField) -> (usize, usize) {
    let base = 4096 + 16 * entry;
    match field {
        LocField::Offset => (base, 8),
        LocField::Phys => (base + 8, 4),
        LocField::Logic => (base + 12, 4),
    }
}

fn set_loc_field(files: &mut Files, entry: usize, field: LocField, v: Value) {
    let (at, width) = loc_field_at(entry, field);
    let data_len = files.data.len() as u64;
    let m = &mut files.meta;
    if width == 8 {
        let cur = get_u64(m, at);
        m[at..at + 8].copy_from_slice(&v.resolve(cur, data_len).to_le_bytes());
    } else {
        let cur = get_u32(m, at) as u64;
        m[at..at + 4].copy_from_slice(&(v.resolve(cur, data_len) as u32).to_le_bytes());
    }
}

fn apply(files: &mut Files, m: &Mutation) {
    let data_len = files.data.len() as u64;
    let n = entries(&files.meta);
    match *m {
        Mutation::Flip(region, at, xor) => {
            if files.meta.len() < 32 {
                return;
            }
            let schema_len = (get_u32(&files.meta, 16) as usize).clamp(1, 4064);
            let (meta_len, data_len) = (files.meta.len(), files.data.len());
            let (buf, lo, hi) = match region {
                Region::Header => (&mut files.meta, 0, 32),
                Region::Schema => (&mut files.meta, 32, 32 + schema_len),
                Region::Table => (&mut files.meta, 4096, meta_len),
                Region::Data => (&mut files.data, 0, data_len),
                Region::Dict => match &mut files.dict {
                    Some(d) => {
                        let len = d.len();
                        (d, 0, len)
                    }
                    None => return,
                },
            };
            if hi > lo && hi <= buf.len() {
                buf[lo + at.index(hi - lo)] ^= xor;
            }
        }
        Mutation::Header(_, _) if files.meta.len() < 32 => {}
        Mutation::Header(field, v) => {
            let meta = &mut files.meta;
            match field {
                HeaderField::Length => {
                    let cur = get_u64(meta, 0);
                    meta[0..8].copy_from_slice(&v.resolve(cur, data_len).to_le_bytes());
                }
                HeaderField::TailOffset => {
                    let cur = get_u64(meta, 8);
                    meta[8..16].copy_from_slice(&v.resolve(cur, data_len).to_le_bytes());
                }
                HeaderField::SchemaLength => {
                    let cur = get_u32(meta, 16) as u64;
                    meta[16..20].copy_from_slice(&(v.resolve(cur, data_len) as u32).to_le_bytes());
                }
                HeaderField::Codec(tag) => meta[31] = tag,
                HeaderField::Reserved(b, x) => meta[b as usize] = x,
            }
        }
        Mutation::Loc(i, field, v) if n > 0 => set_loc_field(files, i.index(n), field, v),
        Mutation::Locs(first, step, field, v) => {
            for e in (first as usize..n).step_by(step as usize) {
                set_loc_field(files, e, field, v);
            }
        }
        Mutation::HugeLogic(below, step) => {
            let logic = ((1u64 << 31) - below as u64) as u32;
            for e in (0..n).step_by(step as usize) {
                let (at, _) = loc_field_at(e, LocField::Logic);
                files.meta[at..at + 4].copy_from_slice(&logic.to_le_bytes());
            }
        }
        Mutation::Resize(file, size) => {
            let buf = match file {
                FileId::Meta => &mut files.meta,
                FileId::Data => &mut files.data,
                FileId::Dict => match &mut files.dict {
                    Some(d) => d,
                    None => return,
                },
            };
            match size {
                Size::Truncate(at) if !buf.is_empty() => {
                    let len = at.index(buf.len());
                    buf.truncate(len);
                }
                Size::Extend(by, fill) => buf.resize(buf.len() + by as usize, fill),
                Size::Empty => buf.clear(),
                _ => {}
            }
        }
        Mutation::Remove(file) => match file {
            // A missing meta.zr is "no store here", not a corrupt one.
            FileId::Meta => {}
            FileId::Data => files.data = Vec::new(),
            FileId::Dict => files.dict = None,
        },
        Mutation::SwapLocs(a, b) if n > 0 => {
            let (a, b) = (4096 + 16 * a.index(n), 4096 + 16 * b.index(n));
            let ea: [u8; 16] = files.meta[a..a + 16].try_into().unwrap();
            let eb: [u8; 16] = files.meta[b..b + 16].try_into().unwrap();
            files.meta[a..a + 16].copy_from_slice(&eb);
            files.meta[b..b + 16].copy_from_slice(&ea);
        }
        Mutation::DupLoc(from, to) if n > 0 => {
            let (f, t) = (4096 + 16 * from.index(n), 4096 + 16 * to.index(n));
            let e: [u8; 16] = files.meta[f..f + 16].try_into().unwrap();
            files.meta[t..t + 16].copy_from_slice(&e);
        }
        Mutation::Overlap(a, b, shift) if n > 0 => {
            let (a, b) = (4096 + 16 * a.index(n), 4096 + 16 * b.index(n));
            let target = get_u64(&files.meta, b).wrapping_add(shift as i64 as u64);
            files.meta[a..a + 8].copy_from_slice(&target.to_le_bytes());
        }
        Mutation::Schema(k) => {
            let schema = schema_of(&FLAVOURS[k]).encode();
            let mut page = vec![0u8; 4064];
            page[..schema.len()].copy_from_slice(&schema);
            let end = files.meta.len().min(4096);
            if end > 32 {
                files.meta[32..end].copy_from_slice(&page[..end - 32]);
            }
            if files.meta.len() >= 20 {
                files.meta[16..20].copy_from_slice(&(schema.len() as u32).to_le_bytes());
            }
        }
        _ => {}
    }
}

/// Writes a store with its files in `files`; a missing data.zr is removed.
fn materialise(dir: &Path, files: &Files, data_removed: bool) {
    write_files(dir, files);
    if data_removed {
        fs::remove_file(dir.join(DATA)).unwrap();
    }
}

// ------------------------------------------------------------------ checks

/// Every failure on a corrupt store is `Corrupted` (or `Io`) naming one of
/// the store's files.
fn allowed(e: &Error, dir: &Path, op: &str) -> Result<(), TestCaseError> {
    let (file, what) = match e {
        Error::Corrupted { file, invariant } => {
            prop_assert!(!invariant.is_empty(), "{op}: empty invariant");
            (file, "Corrupted")
        }
        Error::Io { path, .. } => (path, "Io"),
        other => {
            return Err(TestCaseError::fail(format!(
                "{op}: expected Corrupted or Io, got {other:?}"
            )))
        }
    };
    prop_assert!(
        file.parent() == Some(dir)
            && [META, DATA, DICT]
                .iter()
                .any(|n| file.file_name() == Some(n.as_ref())),
        "{op}: {what} names {} instead of a file of {}: {e}",
        file.display(),
        dir.display()
    );
    Ok(())
}

/// Errors the Arrow mapping raises for records it cannot represent (a valid
/// store may hold them too).
fn allowed_arrow(e: &Error, dir: &Path, op: &str) -> Result<(), TestCaseError> {
    if let Error::InvalidValue(msg) = e {
        if msg.contains("32-bit offsets") || msg.contains("one ndim per batch") {
            return Ok(());
        }
    }
    allowed(e, dir, op)
}

fn arrow_error(e: ArrowError, dir: &Path, op: &str) -> TestCaseResult {
    match e {
        ArrowError::ExternalError(inner) => match inner.downcast::<Error>() {
            Ok(e) => allowed_arrow(&e, dir, op),
            Err(other) => Err(TestCaseError::fail(format!("{op}: {other}"))),
        },
        other => Err(TestCaseError::fail(format!("{op}: {other}"))),
    }
}

type TestCaseResult = Result<(), TestCaseError>;

fn check_stats(store: &Store) -> TestCaseResult {
    let st = store.stats();
    let live: u64 = (0..store.len())
        .map(|i| store.loc(i).unwrap().phys_length as u64)
        .sum();
    prop_assert_eq!(st.records, store.len());
    prop_assert_eq!(st.live_bytes, live, "live_bytes is the sum of phys_length");
    prop_assert!(
        st.live_bytes <= st.data_bytes,
        "live_bytes {} > data_bytes {}",
        st.live_bytes,
        st.data_bytes
    );
    prop_assert_eq!(st.reclaimable, st.data_bytes - st.live_bytes);
    Ok(())
}

/// Whether record `i`'s location can hold its logical length: raw records
/// store it verbatim, a zstd frame decodes to at most 32768 times its size.
fn dense_enough(store: &Store, i: u64) -> bool {
    let loc = store.loc(i).unwrap();
    let (phys, logic) = (loc.phys_length as u64, loc.logic_length as u64);
    match store.codec() {
        Codec::Raw => phys == logic,
        _ => logic <= ZSTD_MAX_RATIO * phys,
    }
}

/// Whether the test may make a request for records `idx`: when it asks for
/// at most [`REQUEST_BUDGET`] logical bytes, or when some record cannot hold
/// its logical length (then the engine must refuse the request without
/// allocating for it). Records that legitimately decode to more are real
/// work the test skips to keep its own memory bounded.
fn affordable(store: &Store, idx: &[u64]) -> bool {
    let total: u64 = idx
        .iter()
        .map(|&i| store.logical_len(i).unwrap() as u64)
        .sum();
    total <= REQUEST_BUDGET || idx.iter().any(|&i| !dense_enough(store, i))
}

/// A long index list with duplicates, cut to [`LIST_BUDGET`] logical bytes.
fn random_list(store: &Store, seed: u64) -> Vec<u64> {
    let n = store.len();
    if n == 0 {
        return Vec::new();
    }
    let mut s = seed | 1;
    let mut bytes = 0u64;
    let mut out = Vec::new();
    for _ in 0..500 + seed % 2500 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let i = s % n;
        bytes += store.logical_len(i).unwrap() as u64;
        if bytes > LIST_BUDGET && !out.is_empty() {
            break;
        }
        out.push(i);
    }
    out
}

/// The logical bytes of every record (`None`: the read failed).
type Reads = Vec<Option<Vec<u8>>>;

fn read_all(store: &Store, dir: &Path, op: &str) -> Result<Reads, TestCaseError> {
    let mut out = Vec::new();
    for i in 0..store.len() {
        if !affordable(store, &[i]) {
            out.push(None);
            continue;
        }
        match store.read_record(i) {
            Ok(r) => {
                prop_assert_eq!(
                    r.len(),
                    store.logical_len(i).unwrap(),
                    "{}: record {}",
                    op,
                    i
                );
                out.push(Some(r));
            }
            Err(e) => {
                allowed(&e, dir, op)?;
                out.push(None);
            }
        }
    }
    Ok(out)
}

/// Gathers `idx` through the store's API; a successful gather returns every
/// record at its logical size, equal to what `read_record` returned.
fn gather(store: &Store, dir: &Path, idx: &[u64], records: &Reads, op: &str) -> TestCaseResult {
    if !affordable(store, idx) {
        return Ok(());
    }
    let all_read = idx.iter().all(|&i| records[i as usize].is_some());
    match store.kind() {
        Kind::Dense => {
            let width = store.schema().record_width().unwrap() as usize;
            match store.gather_dense(idx) {
                Ok(buf) => {
                    prop_assert_eq!(buf.len(), idx.len() * width, "{}", op);
                    for (j, &i) in idx.iter().enumerate() {
                        if let Some(r) = &records[i as usize] {
                            prop_assert!(
                                buf.as_slice()[j * width..(j + 1) * width] == r[..],
                                "{op}: record {i} differs from read_record"
                            );
                        }
                    }
                }
                Err(e) => {
                    allowed(&e, dir, op)?;
                    prop_assert!(
                        !all_read,
                        "{op}: gather failed ({e}) but every read_record succeeded"
                    );
                }
            }
        }
        Kind::Ragged => match store.gather_ragged(idx) {
            Ok(batch) => {
                prop_assert_eq!(batch.len(), idx.len(), "{}", op);
                for (j, &i) in idx.iter().enumerate() {
                    let (start, len) = batch.spans[j];
                    prop_assert_eq!(len, store.logical_len(i).unwrap(), "{}", op);
                    prop_assert!(start % 8 == 0 && start + len <= batch.buffer.len());
                    let rec = batch.record(j);
                    prop_assert_eq!(rec.payload_offset() + rec.payload.len(), len);
                    if let Some(r) = &records[i as usize] {
                        prop_assert!(
                            batch.buffer.as_slice()[start..start + len] == r[..],
                            "{op}: record {i} differs from read_record"
                        );
                    }
                }
            }
            Err(e) => {
                allowed(&e, dir, op)?;
                prop_assert!(
                    !all_read,
                    "{op}: gather failed ({e}) but every read_record succeeded"
                );
            }
        },
    }
    Ok(())
}

/// The Arrow views of the store (what the DataLoader and Arrow export use).
fn arrow_views(store: &Store, dir: &Path, idx: &[u64]) -> TestCaseResult {
    if !affordable(store, idx) {
        return Ok(());
    }
    match lx_arrow::gather_array(store, idx) {
        Ok(a) => prop_assert_eq!(a.len(), idx.len()),
        Err(e) => allowed_arrow(&e, dir, "arrow gather_array")?,
    }
    if store.kind() == Kind::Ragged {
        match lx_arrow::gather_variable_shape_tensor(store, idx, "x") {
            Ok((a, _)) => prop_assert_eq!(a.len(), idx.len()),
            Err(e) => allowed_arrow(&e, dir, "arrow variable_shape_tensor")?,
        }
    }
    let mut rows = 0usize;
    match TableReader::new(vec![("x".to_string(), store)], Some("i".into()), 4096) {
        Ok(reader) => {
            for batch in reader {
                match batch {
                    Ok(b) => rows += b.num_rows(),
                    Err(e) => {
                        arrow_error(e, dir, "arrow TableReader")?;
                        break;
                    }
                }
            }
        }
        Err(e) => allowed(&e, dir, "arrow TableReader::new")?,
    }
    prop_assert!(rows as u64 <= store.len());
    match ColumnReader::new(store, "x", 1 << 20) {
        Ok(reader) => {
            for array in reader {
                if let Err(e) = array {
                    arrow_error(e, dir, "arrow ColumnReader")?;
                    break;
                }
            }
        }
        Err(e) => allowed(&e, dir, "arrow ColumnReader::new")?,
    }
    Ok(())
}

/// Drives a (possibly corrupt) store at `dir` through every read path,
/// stats, compact and a reopen.
fn exercise(dir: &Path, seed: u64) -> TestCaseResult {
    let store = match Store::open(dir) {
        Ok(s) => s,
        Err(e) => return allowed(&e, dir, "open"),
    };
    check_stats(&store)?;
    let all: Vec<u64> = (0..store.len()).collect();
    let records = read_all(&store, dir, "read_record")?;
    gather(&store, dir, &all, &records, "gather of every index")?;
    loaderx::streaming(|| gather(&store, dir, &all, &records, "streaming gather"))?;
    let list = random_list(&store, seed);
    gather(&store, dir, &list, &records, "gather of a random list")?;
    loaderx::streaming(|| arrow_views(&store, dir, &all))?;
    check_stats(&store)?;

    let mut store = store;
    let mut records = records;
    if seed.is_multiple_of(4) && !store.is_empty() {
        // A delete first: compact then also closes the hole it leaves.
        let i = (seed >> 8) % store.len();
        if let Err(e) = store.delete(&[i]) {
            return Err(TestCaseError::fail(format!("delete of record {i}: {e}")));
        }
        records.swap_remove(i as usize);
        check_stats(&store)?;
    }
    let all: Vec<u64> = (0..store.len()).collect();
    if let Err(e) = store.compact() {
        return allowed(&e, dir, "compact");
    }
    check_stats(&store)?;
    let st = store.stats();
    prop_assert_eq!(st.reclaimable, 0, "compact leaves nothing to reclaim");
    let after = read_all(&store, dir, "read_record after compact")?;
    prop_assert!(after == records, "compact changed the records' bytes");
    if let Err(e) = store.close() {
        return Err(TestCaseError::fail(format!("close after compact: {e}")));
    }
    let store = match Store::open(dir) {
        Ok(s) => s,
        Err(e) => return Err(TestCaseError::fail(format!("reopen after compact: {e}"))),
    };
    check_stats(&store)?;
    let again = read_all(&store, dir, "read_record after reopen")?;
    prop_assert!(again == records, "reopen after compact changed the records");
    gather(&store, dir, &all, &again, "gather after reopen")?;
    Ok(())
}

/// The same files read through the remote reader (served over HTTP by
/// `common::http`): a store opens remotely exactly when it opens locally
/// read-only, reads the same records, and fails only with `Corrupted` or
/// `Io` naming one of its objects.
#[cfg(feature = "http")]
fn exercise_remote(dir: &Path, seed: u64) -> TestCaseResult {
    static SERVER: OnceLock<common::http::HttpServer> = OnceLock::new();
    let root = dir.parent().unwrap().to_path_buf();
    let server = SERVER.get_or_init(|| common::http::HttpServer::start(&root));
    let name = dir.file_name().unwrap().to_string_lossy();
    let url = format!("{}/{name}", server.url);
    let at = loaderx::Location::parse(&url, &[]).unwrap();
    let url_dir = PathBuf::from(&url);
    let local = Store::open_readonly(dir);
    let remote = Store::open_at(&at, true);
    match (local, remote) {
        (Err(l), Err(r)) => {
            prop_assert_eq!(
                std::mem::discriminant(&l),
                std::mem::discriminant(&r),
                "local open: {}; remote open: {}",
                l,
                r
            );
            if matches!(l, Error::Corrupted { .. } | Error::Io { .. }) {
                allowed(&r, &url_dir, "remote open")?;
            }
        }
        (Ok(_), Err(r)) => {
            return Err(TestCaseError::fail(format!(
                "the store opens locally but not remotely: {r}"
            )))
        }
        (Err(l), Ok(_)) => {
            return Err(TestCaseError::fail(format!(
                "the store opens remotely but not locally: {l}"
            )))
        }
        (Ok(local), Ok(remote)) => {
            prop_assert_eq!(local.len(), remote.len());
            let want = read_all(&local, dir, "local read_record")?;
            let got = read_all(&remote, &url_dir, "remote read_record")?;
            prop_assert!(want == got, "remote records differ from the local ones");
            let all: Vec<u64> = (0..remote.len()).collect();
            gather(
                &remote,
                &url_dir,
                &all,
                &got,
                "remote gather of every index",
            )?;
            let list = random_list(&remote, seed);
            gather(
                &remote,
                &url_dir,
                &list,
                &got,
                "remote gather of a random list",
            )?;
            arrow_views(&remote, &url_dir, &all)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- proptest

/// Cases per fuzz test; `LOADERX_FUZZ_CASES` overrides it (for longer runs).
fn cases(default: u32) -> u32 {
    std::env::var("LOADERX_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(default_cases: u32, seed: u64) -> Config {
    Config {
        cases: cases(default_cases),
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(
            std::env::var("LOADERX_FUZZ_SEED")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(seed),
        ),
        failure_persistence: None,
        // Cases run in a forked child: an abort or a hang (over the timeout)
        // fails the test with its case instead of killing the test binary.
        fork: true,
        timeout: 60_000,
        max_shrink_iters: 200,
        max_shrink_time: 20_000,
        ..Config::default()
    }
}

/// A working directory for this process's cases.
fn case_dir() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(scratch_root).path().join("store")
}

fn run_case(flavour: usize, mutations: &[Mutation], seed: u64) -> TestCaseResult {
    let mut files = templates()[flavour].clone();
    let mut data_removed = false;
    for m in mutations {
        if let Mutation::Remove(FileId::Data) = m {
            data_removed = true;
        }
        apply(&mut files, m);
    }
    let dir = case_dir();
    materialise(&dir, &files, data_removed);
    exercise(&dir, seed)
}

proptest! {
    #![proptest_config(config(12000, 0x05ee_d001))]

    /// Byte flips, extreme field values, resized and missing files, swapped,
    /// duplicated and overlapping locations and huge logical lengths, on
    /// every flavour of store.
    #[test]
    fn fuzz_corrupt_stores(
        flavour in 0..FLAVOURS.len(),
        mutations in prop::collection::vec(mutation(), 1..=4),
        seed in any::<u64>(),
    ) {
        run_case(flavour, &mutations, seed)?;
    }
}

#[cfg(feature = "http")]
proptest! {
    #![proptest_config(config(800, 0x05ee_d003))]

    /// The corpus of `fuzz_corrupt_stores` through the remote reader:
    /// malformed stores get the same errors remotely as locally.
    #[test]
    fn fuzz_corrupt_stores_remote(
        flavour in 0..FLAVOURS.len(),
        mutations in prop::collection::vec(mutation(), 1..=4),
        seed in any::<u64>(),
    ) {
        let mut files = templates()[flavour].clone();
        let mut data_removed = false;
        for m in &mutations {
            if let Mutation::Remove(FileId::Data) = m {
                data_removed = true;
            }
            apply(&mut files, m);
        }
        let dir = case_dir();
        materialise(&dir, &files, data_removed);
        exercise_remote(&dir, seed)?;
    }
}

proptest! {
    #![proptest_config(config(12000, 0x05ee_d002))]

    /// Fuzzed headers: random bytes, random bytes with the reserved bytes
    /// zero and a known codec, or some fields of the valid header replaced
    /// by extreme values.
    #[test]
    fn fuzz_headers(
        flavour in 0..FLAVOURS.len(),
        header in prop_oneof![
            prop::collection::vec(any::<u8>(), 32).prop_map(HeaderCase::Bytes),
            (prop::collection::vec(any::<u8>(), 20), 0u8..3).prop_map(|(b, c)| HeaderCase::Fields(b, c)),
            (
                prop::option::weighted(0.3, value()),
                prop::option::weighted(0.3, value()),
                prop::option::weighted(0.3, value()),
                prop::option::weighted(0.3, 0u8..4),
            )
                .prop_map(|(l, t, s, c)| HeaderCase::Extremes(l, t, s, c)),
        ],
        seed in any::<u64>(),
    ) {
        let mut files = templates()[flavour].clone();
        match header {
            HeaderCase::Bytes(bytes) => files.meta[..32].copy_from_slice(&bytes),
            HeaderCase::Fields(bytes, codec) => {
                files.meta[..20].copy_from_slice(&bytes);
                files.meta[20..31].fill(0);
                files.meta[31] = codec;
            }
            HeaderCase::Extremes(length, tail, schema_length, codec) => {
                let fields = [
                    length.map(|v| Mutation::Header(HeaderField::Length, v)),
                    tail.map(|v| Mutation::Header(HeaderField::TailOffset, v)),
                    schema_length.map(|v| Mutation::Header(HeaderField::SchemaLength, v)),
                    codec.map(|c| Mutation::Header(HeaderField::Codec(c), Value::Zero)),
                ];
                for m in fields.iter().flatten() {
                    apply(&mut files, m);
                }
            }
        }
        let dir = case_dir();
        materialise(&dir, &files, false);
        exercise(&dir, seed)?;
    }
}

#[derive(Clone, Debug)]
enum HeaderCase {
    /// 32 random bytes.
    Bytes(Vec<u8>),
    /// Random length, tail_offset and schema_length; reserved bytes zero.
    Fields(Vec<u8>, u8),
    /// The valid header with some of length, tail_offset, schema_length and
    /// the codec tag replaced.
    Extremes(Option<Value>, Option<Value>, Option<Value>, Option<u8>),
}

// ------------------------------------------------------- regression tests

/// Runs `body` in a child process (this test binary, filtered to `name`):
/// an abort, a failed allocation or a hang there fails this test with the
/// child's output instead of taking the whole test binary down.
fn in_child(name: &str, body: impl FnOnce()) {
    const ENV: &str = "LOADERX_FUZZ_CHILD";
    if std::env::var(ENV).as_deref() == Ok(name) {
        body();
        return;
    }
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = common::rerun(name)
        .env(ENV, name)
        .stdin(Stdio::null())
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = fs::read_to_string(log.path()).unwrap_or_default();
    match status {
        Some(s) if s.success() && output.contains("1 passed") => {}
        Some(s) => panic!("{name} failed in its child process ({s}):\n{output}"),
        None => panic!("{name} hung: killed after 60 s:\n{output}"),
    }
}

fn fresh(name: &str, flavour: &str) -> (tempfile::TempDir, PathBuf) {
    let k = FLAVOURS.iter().position(|f| f.name == flavour).unwrap();
    let tmp = scratch_root();
    let dir = tmp.path().join(name);
    write_files(&dir, &templates()[k]);
    (tmp, dir)
}

fn patch(path: &Path, at: u64, bytes: &[u8]) {
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, at).unwrap();
}

fn set_logic(dir: &Path, i: u64, logic: u32) {
    patch(&dir.join(META), 4096 + 16 * i + 12, &logic.to_le_bytes());
}

fn set_offset(dir: &Path, i: u64, offset: u64) {
    patch(&dir.join(META), 4096 + 16 * i, &offset.to_le_bytes());
}

fn header_length(dir: &Path) -> u64 {
    get_u64(&fs::read(dir.join(META)).unwrap(), 0)
}

#[track_caller]
fn assert_corrupted<T: std::fmt::Debug>(r: Result<T, Error>, dir: &Path, file: &str) -> String {
    match r {
        Err(Error::Corrupted { file: f, invariant }) => {
            assert_eq!(f, dir.join(file), "Corrupted names the file ({invariant})");
            assert!(!invariant.is_empty());
            invariant
        }
        other => panic!("expected Corrupted naming {file}, got {other:?}"),
    }
}

/// Asserts that a store either fails to open with `Corrupted`, or opens and
/// fails every gather of all its records with `Corrupted`.
#[track_caller]
fn assert_rejected(dir: &Path) {
    let store = match Store::open(dir) {
        Err(e) => {
            let file = match &e {
                Error::Corrupted { file, .. } => file.file_name().unwrap().to_owned(),
                other => panic!("expected Corrupted, got {other:?}"),
            };
            assert_corrupted(Err::<(), _>(e), dir, file.to_str().unwrap());
            return;
        }
        Ok(s) => s,
    };
    let all: Vec<u64> = (0..store.len()).collect();
    match store.kind() {
        Kind::Dense => {
            let r = store.gather_dense(&all).map(|b| b.len());
            assert!(
                matches!(r, Err(Error::Corrupted { .. })),
                "gather_dense: {r:?}"
            );
        }
        Kind::Ragged => {
            let r = store.gather_ragged(&all).map(|b| b.len());
            assert!(
                matches!(r, Err(Error::Corrupted { .. })),
                "gather_ragged: {r:?}"
            );
        }
    }
}

/// Fault campaign finding: logic_length near 2^31 (each within the 2 GiB
/// record cap) on every entry of a zstd ragged table made a gather sum them
/// into one allocation of about 80 GiB, and the process aborted.
#[test]
fn huge_logic_lengths_on_a_ragged_table_do_not_abort() {
    in_child("huge_logic_lengths_on_a_ragged_table_do_not_abort", || {
        for flavour in ["ragged zstd", "ragged zstd_dict"] {
            let (_tmp, dir) = fresh("s", flavour);
            for i in 0..header_length(&dir) {
                set_logic(&dir, i, (1 << 31) - 8);
            }
            assert_rejected(&dir);
        }
    });
}

/// The same through the dense gather: a schema whose records are 2 GiB and
/// zstd locations claiming 2 GiB each (frames of a few bytes cannot hold
/// that).
#[test]
fn huge_dense_records_behind_tiny_frames_do_not_abort() {
    in_child("huge_dense_records_behind_tiny_frames_do_not_abort", || {
        let (_tmp, dir) = fresh("s", "dense zstd");
        let schema = Schema::dense(DType::U8, &[1 << 31]).unwrap().encode();
        let mut page = vec![0u8; 4064];
        page[..schema.len()].copy_from_slice(&schema);
        patch(&dir.join(META), 32, &page);
        patch(&dir.join(META), 16, &(schema.len() as u32).to_le_bytes());
        for i in 0..header_length(&dir) {
            set_logic(&dir, i, 1 << 31);
        }
        assert_rejected(&dir);
    });
}

/// A zstd location whose logic_length a frame of its phys_length cannot
/// decode to (over 32768 bytes per frame byte) is corrupt.
#[test]
fn logic_length_denser_than_zstd_is_corrupted() {
    let (_tmp, dir) = fresh("s", "ragged zstd");
    let phys = Store::open(&dir).unwrap().loc(3).unwrap().phys_length;
    set_logic(&dir, 3, phys * 32768 + 1);
    let r = Store::open(&dir).and_then(|s| s.read_record(3));
    assert_corrupted(r, &dir, META);
}

/// Overlapping locations whose stored bytes add up to more than
/// tail_offset: stats() computed `tail_offset - live_bytes` and wrapped
/// ("reclaimable" ~1.8e19; a debug build panics).
#[test]
fn overlapping_entries_keep_stats_consistent() {
    for flavour in ["dense raw", "ragged zstd", "scalar raw", "dense zstd_dict"] {
        let (_tmp, dir) = fresh("s", flavour);
        // Every entry is a copy of entry 0, and tail_offset ends right after
        // record 0: each location lies within tail_offset, but together they
        // claim `length` times record 0's bytes.
        let meta = fs::read(dir.join(META)).unwrap();
        let entry0 = &meta[4096..4096 + 16];
        for i in 1..header_length(&dir) {
            patch(&dir.join(META), 4096 + 16 * i, entry0);
        }
        let end0 = get_u64(entry0, 0) + get_u32(entry0, 8) as u64;
        patch(&dir.join(META), 8, &end0.to_le_bytes());
        match Store::open(&dir) {
            Err(e) => {
                assert_corrupted(Err::<(), _>(e), &dir, META);
            }
            Ok(store) => {
                let st = store.stats();
                assert!(st.live_bytes <= st.data_bytes, "{flavour}: {st:?}");
                assert_eq!(st.reclaimable, st.data_bytes - st.live_bytes);
            }
        }
    }
}

/// A header whose length was raised by 2 over a table with stale entries
/// (a store synced after a delete, before close trimmed meta.zr): the stale
/// entries duplicate the two records moved into the holes, so the live bytes
/// exceed tail_offset and stats() wrapped (found by `fuzz_headers`).
#[test]
fn stale_entries_past_length_keep_stats_consistent() {
    let (_tmp, dir) = fresh("s", "ragged zstd after delete");
    let length = header_length(&dir);
    patch(&dir.join(META), 0, &(length + 2).to_le_bytes());
    let mut store = match Store::open(&dir) {
        Err(e) => {
            assert_corrupted(Err::<(), _>(e), &dir, META);
            return;
        }
        Ok(s) => s,
    };
    let st = store.stats();
    assert!(st.live_bytes <= st.data_bytes, "{st:?}");
    assert_eq!(st.reclaimable, st.data_bytes - st.live_bytes);
    // The duplicates overlap their originals: compact must refuse.
    assert_corrupted(store.compact(), &dir, META);
}

/// Two entries sharing bytes: compact must not move one over the other
/// (debug builds panicked, release builds wrapped the offsets).
#[test]
fn compact_rejects_overlapping_entries() {
    for flavour in ["dense raw", "ragged raw", "dense zstd", "ragged zstd_dict"] {
        let (_tmp, dir) = fresh("s", flavour);
        // Entry 2 duplicates entry 1, so live bytes stay under tail_offset.
        let meta = fs::read(dir.join(META)).unwrap();
        let e1: Vec<u8> = meta[4096 + 16..4096 + 32].to_vec();
        patch(&dir.join(META), 4096 + 32, &e1);
        let mut store = match Store::open(&dir) {
            Ok(s) => s,
            Err(e) => {
                assert_corrupted(Err::<(), _>(e), &dir, META);
                continue;
            }
        };
        let before: Vec<Vec<u8>> = (0..store.len())
            .map(|i| store.read_record(i).unwrap())
            .collect();
        match store.compact() {
            Err(e) => {
                assert_corrupted(Err::<(), _>(e), &dir, META);
            }
            Ok(()) => {
                // Accounted for: every record keeps its bytes.
                let st = store.stats();
                assert_eq!(st.reclaimable, st.data_bytes - st.live_bytes);
                for (i, b) in before.iter().enumerate() {
                    assert_eq!(&store.read_record(i as u64).unwrap(), b, "{flavour}");
                }
            }
        }
    }
}

/// Overlapping entries shifted by a few bytes (not duplicates): compact must
/// not wrap.
#[test]
fn compact_rejects_partly_overlapping_entries() {
    let (_tmp, dir) = fresh("s", "ragged raw");
    let meta = fs::read(dir.join(META)).unwrap();
    let off1 = get_u64(&meta, 4096 + 16);
    let phys1 = get_u32(&meta, 4096 + 16 + 8) as u64;
    // Entry 2 starts inside entry 1 (so it overlaps it), keeping its length.
    set_offset(&dir, 2, off1 + phys1 / 2);
    let mut store = match Store::open(&dir) {
        Ok(s) => s,
        Err(e) => {
            assert_corrupted(Err::<(), _>(e), &dir, META);
            return;
        }
    };
    let r = store.compact();
    assert_corrupted(r, &dir, META);
}

/// A sparse meta.zr of 64 GiB whose header claims a full table: open
/// reserved the whole table up front (64 GiB) and aborted, or, with the
/// memory, read 64 GiB of zeros before finding entry 0 broken.
#[test]
fn sparse_meta_table_fails_fast() {
    in_child("sparse_meta_table_fails_fast", || {
        let (_tmp, dir) = fresh("s", "ragged zstd");
        let size: u64 = 64 << 30;
        let meta = fs::OpenOptions::new()
            .write(true)
            .open(dir.join(META))
            .unwrap();
        meta.set_len(size).unwrap();
        drop(meta);
        patch(&dir.join(META), 0, &((size - 4096) / 16).to_le_bytes());
        let t0 = Instant::now();
        let r = Store::open(&dir).map(|s| s.len());
        assert_corrupted(r, &dir, META);
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "open took {:?}",
            t0.elapsed()
        );
    });
}

/// A sparse dict.zr of 64 GiB: open must refuse it without reading it into
/// memory.
#[test]
fn sparse_dictionary_fails_fast() {
    in_child("sparse_dictionary_fails_fast", || {
        let (_tmp, dir) = fresh("s", "ragged zstd_dict");
        let dict = fs::OpenOptions::new()
            .write(true)
            .open(dir.join(DICT))
            .unwrap();
        dict.set_len(64 << 30).unwrap();
        drop(dict);
        let t0 = Instant::now();
        match Store::open(&dir).map(|s| s.len()) {
            Err(Error::Corrupted { file, .. }) | Err(Error::Io { path: file, .. }) => {
                assert_eq!(file, dir.join(DICT))
            }
            other => panic!("expected Corrupted naming dict.zr, got {other:?}"),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "open took {:?}",
            t0.elapsed()
        );
    });
}

/// A sparse data.zr of 64 GiB (tail_offset unchanged) is only mapped, never read.
#[test]
fn sparse_data_file_opens() {
    let (_tmp, dir) = fresh("s", "dense raw");
    let data = fs::OpenOptions::new()
        .write(true)
        .open(dir.join(DATA))
        .unwrap();
    data.set_len(64 << 30).unwrap();
    drop(data);
    let store = Store::open(&dir).unwrap();
    let all: Vec<u64> = (0..store.len()).collect();
    assert_eq!(store.gather_dense(&all).unwrap().len(), all.len() * 32);
}

/// A zstd location whose phys_length (4 GiB - 1, inside a sparse data.zr)
/// is far more than any frame of its logic_length: a streaming read (the
/// DataLoader's, Parquet export's) staged the whole 4 GiB before decoding.
/// zstd's single-shot output never exceeds compressBound(logic_length).
#[test]
fn oversized_frame_is_not_staged_whole() {
    in_child("oversized_frame_is_not_staged_whole", || {
        let (_tmp, dir) = fresh("s", "ragged zstd");
        let size: u64 = 5 << 30;
        let data = fs::OpenOptions::new()
            .write(true)
            .open(dir.join(DATA))
            .unwrap();
        data.set_len(size).unwrap();
        drop(data);
        patch(&dir.join(META), 8, &size.to_le_bytes());
        patch(&dir.join(META), 4096 + 8, &u32::MAX.to_le_bytes());
        let t0 = Instant::now();
        let r = Store::open(&dir).and_then(|s| loaderx::streaming(|| s.read_record(0)));
        match r {
            Err(Error::Corrupted { file, .. }) => {
                assert!(file == dir.join(META) || file == dir.join(DATA), "{file:?}")
            }
            other => panic!("expected Corrupted, got {other:?}"),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "took {:?}",
            t0.elapsed()
        );
    });
}

// ------------------------------------------- enumerated corruptions, tallied

/// How a corrupted store ended: opened and read (the damage was harmless or
/// caught by a read), or refused at open, by class and file.
fn outcome_class(dir: &Path) -> String {
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    match Store::open(dir) {
        Ok(store) => {
            let failed = (0..store.len()).find_map(|i| store.read_record(i).err());
            match failed {
                None => "opens, every record reads".into(),
                Some(Error::Corrupted { file, .. }) => {
                    format!("opens, a read raises Corrupted naming {}", name(&file))
                }
                Some(e) => format!("unexpected read error: {e}"),
            }
        }
        Err(Error::Corrupted { file, .. }) => {
            format!("open raises Corrupted naming {}", name(&file))
        }
        Err(Error::Io { path, .. }) => format!("open raises OSError naming {}", name(&path)),
        Err(other) => format!("unexpected: {other}"),
    }
}

/// Every header bit, each location field of the first, middle and last
/// entries set to each extreme value, every file truncated at eight
/// lengths, and 64 payload bytes flipped, on every flavour: each store then goes through
/// open, gathers, Arrow views, stats, delete, compact and reopen
/// ([`exercise`]), and no case ends in anything but a typed error.
#[test]
fn enumerated_corruptions_by_class() {
    let values = [
        Value::Zero,
        Value::One,
        Value::I31Max,
        Value::Pow31,
        Value::U32Max,
        Value::U64Max,
    ];
    let dir = scratch_root();
    let dir = dir.path().join("store");
    let mut tally: std::collections::BTreeMap<String, u64> = Default::default();
    let mut cases = 0u64;
    let mut run = |files: &Files, seed: u64| {
        write_files(&dir, files);
        if let Err(e) = exercise(&dir, seed) {
            panic!("case {cases}: {e}");
        }
        write_files(&dir, files);
        *tally.entry(outcome_class(&dir)).or_default() += 1;
        cases += 1;
    };
    for (f, template) in templates().iter().enumerate() {
        let seed = f as u64;
        for bit in 0..32 * 8 {
            let mut files = template.clone();
            files.meta[bit / 8] ^= 1 << (bit % 8);
            run(&files, seed);
        }
        let n = entries(&template.meta);
        let sampled = [0, n / 2, n.saturating_sub(1)];
        for entry in sampled.into_iter().filter(|&e| e < n) {
            for field in [LocField::Offset, LocField::Phys, LocField::Logic] {
                for v in values {
                    let mut files = template.clone();
                    set_loc_field(&mut files, entry, field, v);
                    run(&files, seed + entry as u64);
                }
            }
        }
        for eighth in 0..8 {
            for which in 0..3 {
                let mut files = template.clone();
                let bytes = match which {
                    0 => &mut files.meta,
                    1 => &mut files.data,
                    _ => match files.dict.as_mut() {
                        Some(d) => d,
                        None => continue,
                    },
                };
                bytes.truncate(bytes.len() * eighth / 8);
                run(&files, seed);
            }
        }
        let step = template.data.len().div_ceil(64).max(1);
        for at in (0..template.data.len()).step_by(step) {
            let mut files = template.clone();
            files.data[at] ^= 0xFF;
            run(&files, seed + at as u64);
        }
    }
    for (class, n) in &tally {
        eprintln!("{n:>6}  {class}");
    }
    eprintln!("{cases} corrupted stores, no abort, panic or untyped error");
    assert!(
        !tally.keys().any(|k| k.starts_with("unexpected")),
        "{tally:?}"
    );
}
