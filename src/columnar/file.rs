//! One columnar column's file, open: its checked footer, its chunks read
//! (from a mapping of a local file, or by range from a remote object) and
//! decoded, and the chunks it keeps decoded within the process's budget.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use super::decode::{decode_chunk, Decoded};
use super::format::{Footer, COLUMN_FILE, MAGIC, TRAILER_LEN};
use crate::error::{Error, Result};
use crate::io::{io_error, Fs, FsFile, Storage, StorageFile};

/// Bytes at the end of a column file read to open it (the footer of up to
/// about 680 chunks, and the trailer): what a remote table's open fetches
/// of each column file.
pub const OPEN_TAIL_BYTES: u64 = 64 << 10;

/// Decoded chunks the process keeps, in bytes, by default (see
/// [`keep_budget`]).
pub const DEFAULT_KEEP_BYTES: u64 = 256 << 20;

/// The environment variable that sets [`keep_budget`].
pub const KEEP_ENV: &str = "LOADERX_COLUMN_CACHE";

/// Bytes of decoded chunks the process keeps for random access:
/// `LOADERX_COLUMN_CACHE` (bytes, or with a `K`, `M` or `G` suffix, powers
/// of 1024; `0` keeps none), else [`DEFAULT_KEEP_BYTES`]. Read once.
pub fn keep_budget() -> u64 {
    static BUDGET: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        std::env::var(KEEP_ENV)
            .ok()
            .and_then(|v| parse_size(&v))
            .unwrap_or(DEFAULT_KEEP_BYTES)
    })
}

/// `123`, `64K`, `256M`, `2G` (also `KiB`, `MiB`, `GiB`, any case).
fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim().to_ascii_uppercase();
    let v = v
        .strip_suffix("IB")
        .or_else(|| v.strip_suffix('B'))
        .unwrap_or(&v);
    let (num, shift) = match v.chars().last()? {
        'K' => (&v[..v.len() - 1], 10),
        'M' => (&v[..v.len() - 1], 20),
        'G' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Bytes of decoded chunks kept now, by every open column of the process.
static KEPT: AtomicU64 = AtomicU64::new(0);

/// Bytes of decoded chunks the process keeps now.
pub fn kept_bytes() -> u64 {
    KEPT.load(Ordering::Relaxed)
}

/// A slot that holds one decoded chunk once it is kept, set at most once
/// (lock-free, so a forked child never waits on its parent's threads).
struct Slot(AtomicPtr<Decoded>);

impl Slot {
    fn new() -> Slot {
        Slot(AtomicPtr::new(std::ptr::null_mut()))
    }

    fn get(&self) -> Option<&Decoded> {
        let p = self.0.load(Ordering::Acquire);
        // SAFETY: a non-null pointer came from Arc::into_raw in `set` and
        // is released only by `drop` (which has the slot to itself), so it
        // stays valid for as long as `&self` does.
        unsafe { p.as_ref() }
    }

    /// The kept chunk as a shared handle of its own.
    fn get_arc(&self) -> Option<Arc<Decoded>> {
        let p = self.0.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` came from Arc::into_raw and the slot keeps that
        // reference until it is dropped (which needs `&mut self`), so the
        // count is at least one here; the new reference is our own.
        unsafe {
            Arc::increment_strong_count(p);
            Some(Arc::from_raw(p))
        }
    }

    /// Keeps `d` here unless another thread kept one first.
    fn set(&self, d: Arc<Decoded>) -> bool {
        let p = Arc::into_raw(d) as *mut Decoded;
        match self
            .0
            .compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(_) => {
                // SAFETY: `p` came from Arc::into_raw above and was not stored.
                drop(unsafe { Arc::from_raw(p) });
                false
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let p = *self.0.get_mut();
        if !p.is_null() {
            // SAFETY: the pointer came from Arc::into_raw in `set`.
            drop(unsafe { Arc::from_raw(p) });
        }
    }
}

/// A decoded chunk: kept by its file (borrowed) or decoded for one read.
pub enum ChunkRef<'a> {
    Kept(&'a Decoded),
    Owned(Arc<Decoded>),
}

impl std::ops::Deref for ChunkRef<'_> {
    type Target = Decoded;
    fn deref(&self) -> &Decoded {
        match self {
            ChunkRef::Kept(d) => d,
            ChunkRef::Owned(d) => d,
        }
    }
}

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
    slots: Vec<Slot>,
    kept: AtomicU64,
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
        KEPT.fetch_sub(*self.kept.get_mut(), Ordering::Relaxed);
    }
}

/// Whether `dir` is a columnar column's directory (holds `column.zc`).
pub(crate) fn is_column_dir(fs: &Fs, dir: &Path) -> bool {
    matches!(
        fs.kind(&dir.join(COLUMN_FILE)),
        Ok(Some(crate::io::EntryKind::File))
    )
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
        let footer = if footer_at >= len - window {
            let from = (footer_at - (len - window)) as usize;
            Footer::decode(&tail[from..from + footer_len], crc, len)
        } else {
            Footer::decode(&read(footer_at, footer_len)?, crc, len)
        }
        .map_err(bad)?;
        if let Some(m) = &map {
            if &m[..MAGIC.len()] != MAGIC {
                return Err(bad("it does not start with the magic \"LXCOLUMN\"".into()));
            }
        }
        drop(tail);
        let mut starts = Vec::with_capacity(footer.entries.len() + 1);
        let mut at = 0u64;
        for e in &footer.entries {
            starts.push(at);
            at += e.rows as u64;
        }
        starts.push(at);
        let slots = footer.entries.iter().map(|_| Slot::new()).collect();
        Ok(ColumnFile {
            dir: dir.to_path_buf(),
            path,
            file,
            map,
            footer,
            starts,
            slots,
            kept: AtomicU64::new(0),
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
        decode_chunk(
            self.footer.kind,
            e,
            &bytes[at..at + e.stored_len() as usize],
        )
        .map_err(|why| Error::corrupted(&self.path, format!("chunk {c}: {why}")))
    }

    /// Chunk `c` decoded: the kept one, else read and decoded now (and
    /// kept when `keep` and the process's budget has room).
    pub fn chunk(&self, c: usize, keep: bool) -> Result<ChunkRef<'_>> {
        if let Some(d) = self.slots[c].get() {
            return Ok(ChunkRef::Kept(d));
        }
        let bytes = self.stored(c, c + 1)?;
        let d = Arc::new(self.decode_from(c, c, &bytes)?);
        Ok(self.offer(c, d, keep))
    }

    /// Chunks `first..last` decoded, as shared handles (kept ones as they
    /// are, the others read in one read and decoded, kept when `keep` and
    /// the budget has room).
    pub fn chunks_arc(&self, first: usize, last: usize, keep: bool) -> Result<Vec<Arc<Decoded>>> {
        let mut out: Vec<Option<Arc<Decoded>>> =
            (first..last).map(|c| self.slots[c].get_arc()).collect();
        let missing: Vec<usize> = (first..last)
            .filter(|&c| out[c - first].is_none())
            .collect();
        if let (Some(&lo), Some(&hi)) = (missing.first(), missing.last()) {
            let bytes = self.stored(lo, hi + 1)?;
            for c in missing {
                let d = Arc::new(self.decode_from(c, lo, &bytes)?);
                if keep {
                    let _ = self.offer(c, Arc::clone(&d), true);
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
        Ok(self
            .chunks_arc(c, c + 1, false)?
            .pop()
            .expect("one chunk asked for"))
    }

    /// Chunk `c` as a shared handle, if it is kept.
    pub fn kept_arc(&self, c: usize) -> Option<Arc<Decoded>> {
        self.slots[c].get_arc()
    }

    /// Chunk `c` if it is kept.
    pub fn kept_chunk(&self, c: usize) -> Option<&Decoded> {
        self.slots[c].get()
    }

    /// Keeps the decoded chunk `c` when `keep` and the budget has room.
    pub(crate) fn offer(&self, c: usize, d: Arc<Decoded>, keep: bool) -> ChunkRef<'_> {
        if keep {
            let bytes = d.memory() as u64;
            let before = KEPT.fetch_add(bytes, Ordering::Relaxed);
            if before + bytes <= keep_budget() && self.slots[c].set(Arc::clone(&d)) {
                self.kept.fetch_add(bytes, Ordering::Relaxed);
                return ChunkRef::Kept(self.slots[c].get().expect("just kept"));
            }
            KEPT.fetch_sub(bytes, Ordering::Relaxed);
        }
        ChunkRef::Owned(d)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("256MiB"), Some(256 << 20));
        assert_eq!(parse_size(" 2G "), Some(2 << 30));
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("lots"), None);
    }
}
