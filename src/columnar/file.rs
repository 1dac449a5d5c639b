//! One columnar column's file, open: its checked footer, its chunks read
//! (from a mapping of a local file, or by range from a remote object) and
//! decoded, and the chunks it keeps decoded within the process's budget.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::decode::{bits_at, decode_chunk, Decoded};
use super::format::{Encoding, Footer, ValueKind, BLOCK, COLUMN_FILE, GROUP, MAGIC, TRAILER_LEN};
use super::fsst::Symbols;
use super::num;
use crate::error::{Error, Result};
use crate::io::{io_error, Fs, FsFile, Storage, StorageFile};

/// Bytes at the end of a column file read to open it (the footer of up to
/// about 680 chunks, and the trailer): what a remote table's open fetches
/// of each column file.
pub const OPEN_TAIL_BYTES: u64 = 64 << 10;

use super::kept::{file_number, kept, kept_bits, KeptBits};

/// One open `column.zc`.
pub struct ColumnFile {
    /// The column's directory.
    dir: PathBuf,
    /// The file (what errors name).
    path: PathBuf,
    file: FsFile,
    map: Option<memmap2::Mmap>,
    footer: Footer,
    /// Row of each chunk's first row, then the total.
    starts: Vec<u64>,
    /// Its number in the process: the key of its kept chunks.
    id: u64,
    /// A bit a chunk, set while the process keeps it.
    kept_bits: KeptBits,
    /// Bytes of its chunks decoded (about what keeping them all takes).
    decoded_bytes: u64,
    /// Version 3 text and bytes: the file's symbol table.
    symbols: Option<Symbols>,
    /// Version 3: each chunk's first block's number in the file, then the
    /// total, and one bit a block once its checksum has matched.
    block_base: Vec<u64>,
    checked: Vec<AtomicU64>,
}

impl std::fmt::Debug for ColumnFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColumnFile")
            .field("path", &self.path)
            .field("rows", &self.footer.rows)
            .field("chunks", &self.footer.entries.len())
            .finish()
    }
}

impl Drop for ColumnFile {
    fn drop(&mut self) {
        kept().forget_file(self.id);
    }
}

/// Whether `dir` is a columnar column's directory (holds `column.zc`).
pub(crate) fn is_column_dir(fs: &Fs, dir: &Path) -> bool {
    matches!(
        fs.kind(&dir.join(COLUMN_FILE)),
        Ok(Some(crate::io::EntryKind::File))
    )
}

/// The format version and kind of the column file in `dir` on `fs` (its
/// footer read and checked).
pub(crate) fn file_version(fs: &Fs, dir: &Path) -> Result<(u8, ValueKind)> {
    let f = ColumnFile::open(fs, dir)?;
    Ok((f.footer.version, f.footer.kind))
}

impl ColumnFile {
    /// Opens the column in the directory `dir` on `fs` and checks its
    /// footer: `NoStore` when it holds no `column.zc`, `Corrupted` naming
    /// the file and the rule it breaks.
    pub(crate) fn open(fs: &Fs, dir: &Path) -> Result<ColumnFile> {
        let path = dir.join(COLUMN_FILE);
        let file = match fs.open(&path, false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NoStore {
                    path: dir.to_path_buf(),
                    reason: format!("no {COLUMN_FILE} there"),
                })
            }
            Err(e) => return Err(io_error(&path, e)),
        };
        let len = file.len().map_err(|e| io_error(&path, e))?;
        let bad = |why: String| Error::corrupted(&path, why);
        if len < (MAGIC.len() + TRAILER_LEN) as u64 {
            return Err(bad(format!(
                "a column file has at least {} bytes, this one {len}",
                MAGIC.len() + TRAILER_LEN
            )));
        }
        // SAFETY: committed column files are immutable (written whole and
        // renamed in, never rewritten), so the mapped bytes never change.
        let map = unsafe { file.map(len as usize) };
        let read = |at: u64, n: usize| -> Result<Cow<'_, [u8]>> {
            if let Some(m) = &map {
                return Ok(Cow::Borrowed(&m[at as usize..at as usize + n]));
            }
            let mut buf = vec![0u8; n];
            file.read_exact_at(&mut buf, at)
                .map_err(|e| io_error(&path, e))?;
            Ok(Cow::Owned(buf))
        };
        // The footer and trailer in one read (a remote table's open has
        // fetched these bytes already); the leading magic is checked when
        // the first chunk is read.
        let window = len.min(OPEN_TAIL_BYTES);
        let tail = read(len - window, window as usize)?;
        let trailer = &tail[tail.len() - TRAILER_LEN..];
        let (footer_len, crc) = Footer::footer_len(trailer).map_err(bad)?;
        if (footer_len + TRAILER_LEN + MAGIC.len()) as u64 > len {
            return Err(bad(format!(
                "its trailer records a footer of {footer_len} bytes in a file of {len}"
            )));
        }
        let footer_at = len - (TRAILER_LEN + footer_len) as u64;
        let in_tail = |at: u64, n: usize| -> Result<Cow<'_, [u8]>> {
            if at >= len - window {
                let from = (at - (len - window)) as usize;
                return Ok(Cow::Borrowed(&tail[from..from + n]));
            }
            read(at, n)
        };
        let footer_bytes = in_tail(footer_at, footer_len)?;
        // Version 3 text: the symbol table just before the footer, which
        // the footer's CRC-32 covers with it.
        let symbols_len = u16::from_le_bytes([footer_bytes[5], footer_bytes[6]]) as usize;
        if (footer_len + symbols_len + TRAILER_LEN + MAGIC.len()) as u64 > len {
            return Err(bad(format!(
                "its footer records a symbol table of {symbols_len} bytes, more than the file holds before it"
            )));
        }
        let table = in_tail(footer_at - symbols_len as u64, symbols_len)?;
        let footer = Footer::decode(&footer_bytes, crc, len, &table).map_err(bad)?;
        if let Some(m) = &map {
            if &m[..MAGIC.len()] != MAGIC {
                return Err(bad("it does not start with the magic \"LXCOLUMN\"".into()));
            }
        }
        let symbols = match symbols_len {
            0 => None,
            _ => Some(
                Symbols::parse(&table).map_err(|why| bad(format!("its symbol table: {why}")))?,
            ),
        };
        drop(table);
        drop(footer_bytes);
        drop(tail);
        let mut block_base = Vec::new();
        if let (Some(m), true) = (&map, footer.version >= 3) {
            // Read in place at random: no readahead around each value
            // (scans ask for their ranges, `stored`). Advice only.
            let _ = m.advise(memmap2::Advice::Random);
        }
        if footer.version >= 3 {
            let mut b = 0u64;
            for e in &footer.entries {
                block_base.push(b);
                b += e.checked_len(footer.kind).1;
            }
            block_base.push(b);
        }
        let checked = (0..block_base.last().map_or(0, |b| b.div_ceil(64)))
            .map(|_| AtomicU64::new(0))
            .collect();
        let chunks = footer.entries.len();
        let decoded_bytes = footer
            .entries
            .iter()
            .map(|e| Decoded::memory_of(footer.kind, e) as u64)
            .sum();
        let mut starts = Vec::with_capacity(chunks + 1);
        let mut at = 0u64;
        for e in &footer.entries {
            starts.push(at);
            at += e.rows as u64;
        }
        starts.push(at);
        Ok(ColumnFile {
            dir: dir.to_path_buf(),
            path,
            file,
            map,
            footer,
            starts,
            id: file_number(),
            kept_bits: kept_bits(chunks),
            decoded_bytes,
            symbols,
            block_base,
            checked,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file, as errors name it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn footer(&self) -> &Footer {
        &self.footer
    }

    pub fn rows(&self) -> u64 {
        self.footer.rows
    }

    /// Row of each chunk's first row, then the total.
    pub fn starts(&self) -> &[u64] {
        &self.starts
    }

    /// Bytes of the chunks as stored.
    pub fn data_bytes(&self) -> u64 {
        self.footer.entries.iter().map(|e| e.stored_len()).sum()
    }

    /// The chunk holding row `row` (< rows) and the row's place in it.
    #[inline]
    pub fn locate(&self, row: u64) -> (usize, usize) {
        let c = self.starts.partition_point(|&s| s <= row) - 1;
        (c, (row - self.starts[c]) as usize)
    }

    /// The stored bytes of chunks `first..last`, in one read (from the
    /// file's start, whose magic is checked, when `first` is 0).
    pub(crate) fn stored(&self, first: usize, last: usize) -> Result<Cow<'_, [u8]>> {
        let entries = &self.footer.entries;
        let lo = if first == 0 { 0 } else { entries[first].offset };
        let hi = entries[last - 1].offset + entries[last - 1].stored_len();
        let n = (hi - lo) as usize;
        if let Some(m) = &self.map {
            if self.footer.version >= 3 {
                // The mapping reads no ahead (see `open`): ask for the
                // whole range at once. Advice only.
                let _ = m.advise_range(memmap2::Advice::WillNeed, lo as usize, n);
            }
            return Ok(Cow::Borrowed(&m[lo as usize..hi as usize]));
        }
        let mut buf = Vec::new();
        buf.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
            bytes: n as u64,
            what: format!("chunks of {}", self.path.display()),
        })?;
        buf.resize(n, 0);
        self.file
            .read_exact_at(&mut buf, lo)
            .map_err(|e| io_error(&self.path, e))?;
        if first == 0 && &buf[..MAGIC.len()] != MAGIC {
            return Err(Error::corrupted(
                &self.path,
                "it does not start with the magic \"LXCOLUMN\"",
            ));
        }
        Ok(Cow::Owned(buf))
    }

    /// Decodes chunk `c` from `bytes`, the stored bytes of chunks starting
    /// at chunk `first`.
    pub(crate) fn decode_from(&self, c: usize, first: usize, bytes: &[u8]) -> Result<Decoded> {
        let entries = &self.footer.entries;
        let base = if first == 0 { 0 } else { entries[first].offset };
        let e = &entries[c];
        let at = (e.offset - base) as usize;
        let d = decode_chunk(
            self.footer.kind,
            e,
            &bytes[at..at + e.stored_len() as usize],
            self.symbols.as_ref(),
        )
        .map_err(|why| Error::corrupted(&self.path, format!("chunk {c}: {why}")))?;
        debug_assert_eq!(d.memory(), Decoded::memory_of(self.footer.kind, e));
        Ok(d)
    }

    /// Chunk `c`'s key among the kept chunks.
    pub(crate) fn key(&self, c: usize) -> (u64, u32) {
        (self.id, c as u32)
    }

    /// Chunk `c` decoded: the kept one, else read and decoded now (and
    /// kept when `keep`, evicting chunks read less recently).
    pub fn chunk(&self, c: usize, keep: bool) -> Result<Arc<Decoded>> {
        if let Some(d) = self.kept_arc(c) {
            return Ok(d);
        }
        let bytes = self.stored(c, c + 1)?;
        let d = Arc::new(self.decode_from(c, c, &bytes)?);
        if keep {
            kept().put(self.key(c), Arc::clone(&d), &self.kept_bits);
        }
        Ok(d)
    }

    /// Chunk `c` decoded: the kept one, else read and decoded now and kept
    /// only where that evicts no other (a random read's few rows: room the
    /// budget had, never a kept chunk's place).
    pub(crate) fn chunk_into_room(&self, c: usize) -> Result<Arc<Decoded>> {
        if let Some(d) = self.kept_arc(c) {
            return Ok(d);
        }
        let bytes = self.stored(c, c + 1)?;
        let d = Arc::new(self.decode_from(c, c, &bytes)?);
        kept().put_into_room(self.key(c), Arc::clone(&d), &self.kept_bits);
        Ok(d)
    }

    /// Chunks `first..last` decoded, as shared handles (kept ones as they
    /// are, the others read in one read and decoded, kept when `keep`).
    pub fn chunks_arc(&self, first: usize, last: usize, keep: bool) -> Result<Vec<Arc<Decoded>>> {
        let mut out: Vec<Option<Arc<Decoded>>> = (first..last).map(|c| self.kept_arc(c)).collect();
        let missing: Vec<usize> = (first..last)
            .filter(|&c| out[c - first].is_none())
            .collect();
        if let (Some(&lo), Some(&hi)) = (missing.first(), missing.last()) {
            let bytes = self.stored(lo, hi + 1)?;
            for c in missing {
                let d = Arc::new(self.decode_from(c, lo, &bytes)?);
                if keep {
                    kept().put(self.key(c), Arc::clone(&d), &self.kept_bits);
                }
                out[c - first] = Some(d);
            }
        }
        Ok(out
            .into_iter()
            .map(|d| d.expect("every chunk decoded"))
            .collect())
    }

    /// Chunk `c` as a shared handle: the kept one, else read and decoded
    /// now (not kept).
    pub fn chunk_arc(&self, c: usize) -> Result<Arc<Decoded>> {
        self.chunk(c, false)
    }

    /// Chunk `c` as a shared handle, if it is kept (marked as read).
    pub fn kept_arc(&self, c: usize) -> Option<Arc<Decoded>> {
        self.kept_in(kept(), c)
    }

    /// [`kept_arc`](Self::kept_arc) in `k`, the process's kept chunks; no
    /// lock is taken for a chunk not kept.
    #[inline]
    pub(crate) fn kept_in(&self, k: &super::kept::Kept, c: usize) -> Option<Arc<Decoded>> {
        if !super::kept::bit(&self.kept_bits, c as u32) {
            return None;
        }
        k.get(self.key(c))
    }

    /// Whether chunk `c` is kept.
    pub fn is_kept(&self, c: usize) -> bool {
        kept().has(self.key(c))
    }

    /// Whether random reads of few rows a chunk should decode and keep
    /// this file's chunks: when all of them take at most half the budget
    /// of `k`. A larger file is read in place: a row read in place costs
    /// about what a row of a kept chunk does (a cache miss or two), while
    /// decoding a chunk for it costs thousands, and a budget it cannot fit
    /// would be churned.
    pub(crate) fn keeps_for_random(&self, k: &super::kept::Kept) -> bool {
        self.decoded_bytes <= k.budget() / 2
    }

    /// Whether decoding chunk `c` now would keep it in `k` without
    /// evicting another.
    pub(crate) fn has_room(&self, k: &super::kept::Kept, c: usize) -> bool {
        let e = &self.footer.entries[c];
        k.has_room(self.key(c), Decoded::memory_of(self.footer.kind, e) as u64)
    }
}

/// Asks the CPU to load the cache line of `map` at `at` (nothing past its
/// end, or where the CPU has no such hint).
#[inline(always)]
fn prefetch(map: &[u8], at: usize) {
    if let Some(b) = map.get(at) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint that never faults nor changes
        // memory; the address lies inside the mapping anyway.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                (b as *const u8).cast::<i8>(),
            )
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = b;
    }
}

/// Random reads in place (format version 3, a mapped file): a value
/// costs its own bytes, the blocks they lie in checked once per process.
impl ColumnFile {
    /// The file's symbol table, if it has one.
    #[cfg(any(feature = "arrow", test))]
    pub(crate) fn symbols(&self) -> Option<&Symbols> {
        self.symbols.as_ref()
    }

    /// Whether rows are read in place (version 3, mapped).
    #[inline]
    pub(crate) fn direct(&self) -> bool {
        self.footer.version >= 3 && self.map.is_some()
    }

    fn bad_chunk(&self, c: usize, why: impl std::fmt::Display) -> Error {
        Error::corrupted(&self.path, format!("chunk {c}: {why}"))
    }

    /// Bytes `lo..hi` of chunk `c`'s stored bytes (before its checksums),
    /// each block they touch checked against its CRC-32 once.
    fn checked(&self, c: usize, lo: usize, hi: usize) -> Result<&[u8]> {
        let e = &self.footer.entries[c];
        let map = self.map.as_ref().expect("direct reads are of mapped files");
        let at = e.offset as usize;
        let (len, blocks) = e.checked_len(self.footer.kind);
        let (len, blocks) = (len as usize, blocks as usize);
        if lo > hi || hi > len {
            return Err(self.bad_chunk(c, format!("a read of bytes {lo}..{hi} of its {len}")));
        }
        if lo == hi {
            return Ok(&map[at + lo..at + lo]);
        }
        let crcs = &map[at + len..at + len + 4 * blocks];
        // Blocks are the file's 4 KiB-aligned blocks, numbered from the one
        // holding the chunk's first byte.
        let first = at / BLOCK;
        for b in (at + lo) / BLOCK - first..=(at + hi - 1) / BLOCK - first {
            let id = self.block_base[c] + b as u64;
            let (word, bit) = ((id / 64) as usize, 1u64 << (id % 64));
            if self.checked[word].load(Ordering::Relaxed) & bit != 0 {
                continue;
            }
            let from = at.max((first + b) * BLOCK);
            let to = (at + len).min((first + b + 1) * BLOCK);
            let block = &map[from..to];
            let want = u32::from_le_bytes(crcs[4 * b..4 * b + 4].try_into().expect("4 bytes"));
            if crc32fast::hash(block) != want {
                return Err(self.bad_chunk(
                    c,
                    format!("the CRC-32 of its block {b} does not match its bytes"),
                ));
            }
            self.checked[word].fetch_or(bit, Ordering::Relaxed);
        }
        Ok(&map[at + lo..at + hi])
    }

    /// Asks the CPU to load, ahead of a read of row `i` of chunk `c`,
    /// the bytes that read starts from (a number; a text row's group start
    /// in the index): a batch's rows each miss the cache, and loaded ahead
    /// they miss together rather than one after another.
    #[inline]
    pub(crate) fn prefetch_row(&self, c: usize, i: usize) {
        let Some(map) = &self.map else { return };
        let e = &self.footer.entries[c];
        let v0 = e.offset as usize + e.validity_len as usize;
        let at = match self.footer.kind {
            ValueKind::Fixed(d) => match e.encoding() {
                Encoding::Packed => v0 + i * e.width as usize / 8,
                Encoding::Bits => v0 + i / 8,
                _ => v0 + i * d.itemsize(),
            },
            _ => v0 + e.values_len as usize + 4 * (i / GROUP),
        };
        prefetch(map, at);
    }

    /// Second step for text row `i` of chunk `c` (after
    /// [`prefetch_row`](Self::prefetch_row)): loads ahead its group's
    /// lengths and where its codes likely lie (in proportion to its place
    /// in the group).
    #[inline]
    pub(crate) fn prefetch_group(&self, c: usize, i: usize) {
        let Some(map) = &self.map else { return };
        let e = &self.footer.entries[c];
        let v0 = e.offset as usize + e.validity_len as usize;
        let g = i / GROUP;
        let st = v0 + e.values_len as usize + 4 * g;
        let (Some(a), Some(z)) = (map.get(st..st + 4), map.get(st + 4..st + 8)) else {
            return;
        };
        let a = u32::from_le_bytes(a.try_into().expect("4 bytes")) as usize;
        let z = u32::from_le_bytes(z.try_into().expect("4 bytes")) as usize;
        if a > z {
            return;
        }
        let m = (e.rows as usize - g * GROUP).min(GROUP);
        prefetch(map, v0 + a);
        prefetch(map, v0 + a + (z - a) * (i % GROUP) / m);
    }

    /// Whether row `i` of chunk `c` holds a value.
    #[inline]
    pub(crate) fn direct_valid(&self, c: usize, i: usize) -> Result<bool> {
        if self.footer.entries[c].null_count == 0 {
            return Ok(true);
        }
        let b = self.checked(c, i / 8, i / 8 + 1)?;
        Ok(b[0] & (1 << (i % 8)) != 0)
    }

    /// Number `i` of chunk `c` (`w` bytes; booleans one byte, 0 or 1) into
    /// `out`; zeros for a null row.
    pub(crate) fn direct_fixed(&self, c: usize, i: usize, w: usize, out: &mut [u8]) -> Result<()> {
        if !self.direct_valid(c, i)? {
            out.fill(0);
            return Ok(());
        }
        let e = &self.footer.entries[c];
        let v0 = e.validity_len as usize;
        match e.encoding() {
            Encoding::Bits => {
                let b = self.checked(c, v0 + i / 8, v0 + i / 8 + 1)?;
                out[0] = (b[0] >> (i % 8)) & 1;
            }
            Encoding::Packed => {
                let bits = e.width as usize;
                let lo = v0 + i * bits / 8;
                let hi = v0 + (i * bits + bits).div_ceil(8);
                let src = self.checked(c, lo, hi)?;
                let mut word = [0u8; 8];
                word[..src.len()].copy_from_slice(src);
                let d = (u64::from_le_bytes(word) >> (i * bits % 8)) & ((1u64 << bits) - 1);
                let ValueKind::Fixed(dtype) = self.footer.kind else {
                    unreachable!("packed chunks are of numbers")
                };
                let min = num::Num::from_bytes(dtype, e.min.number_bytes());
                let max = num::Num::from_bytes(dtype, e.max.number_bytes());
                let (v, over) = match (min, max) {
                    (num::Num::I(a), num::Num::I(z)) => {
                        let v = a as i128 + d as i128;
                        (v as u64, v > z as i128)
                    }
                    (num::Num::U(a), num::Num::U(z)) => {
                        let v = a as u128 + d as u128;
                        (v as u64, v > z as u128)
                    }
                    _ => unreachable!("packed chunks are of integers"),
                };
                if over {
                    return Err(self.bad_chunk(
                        c,
                        format!("its row {i} holds a value above the chunk's maximum"),
                    ));
                }
                out.copy_from_slice(&v.to_le_bytes()[..w]);
            }
            _ => out.copy_from_slice(self.checked(c, v0 + i * w, v0 + (i + 1) * w)?),
        }
        Ok(())
    }

    /// Appends text or bytes value `i` of chunk `c` to `out` (nothing for
    /// a null row).
    pub(crate) fn direct_bytes(&self, c: usize, i: usize, out: &mut Vec<u8>) -> Result<()> {
        if !self.direct_valid(c, i)? {
            return Ok(());
        }
        let e = &self.footer.entries[c];
        let v0 = e.validity_len as usize;
        let s0 = v0 + e.values_len as usize;
        let g = i / GROUP;
        let st = self.checked(c, s0 + 4 * g, s0 + 4 * g + 8)?;
        let a = u32::from_le_bytes(st[..4].try_into().expect("4 bytes")) as usize;
        let z = u32::from_le_bytes(st[4..].try_into().expect("4 bytes")) as usize;
        if a > z || z > e.values_len as usize {
            return Err(self.bad_chunk(c, format!("its group {g} has bytes {a}..{z}")));
        }
        let grp = self.checked(c, v0 + a, v0 + z)?;
        let m = (e.rows as usize - g * GROUP).min(GROUP);
        let b = e.width as usize;
        let j = i % GROUP;
        let head = num::packed_size(m, b);
        let short = || self.bad_chunk(c, format!("its group {g}'s lengths run past its bytes"));
        let lens = grp.get(..head).ok_or_else(short)?;
        let (mut from, mut n) = (head, 0usize);
        if b > 0 {
            for k in 0..j {
                from += bits_at(lens, k, b) as usize;
            }
            n = bits_at(lens, j, b) as usize;
        }
        let codes = grp.get(from..from + n).ok_or_else(short)?;
        let start = out.len();
        match &self.symbols {
            Some(s) => s
                .decode_into(codes, out)
                .map_err(|why| self.bad_chunk(c, format!("its row {i}: {why}")))?,
            None => out.extend_from_slice(codes),
        }
        if self.footer.kind == ValueKind::Utf8 && std::str::from_utf8(&out[start..]).is_err() {
            out.truncate(start);
            return Err(self.bad_chunk(c, format!("its row {i} is not valid UTF-8")));
        }
        Ok(())
    }
}
