//! The local block cache of remote objects: with a cache, every ranged
//! read of a location's objects (a store's `data.zr`, a columnar column's
//! `column.zc`) goes through it.
//!
//! A remote object is read in aligned blocks of [`BLOCK`]
//! bytes, so that many small records share one request, and each block is
//! kept as a file under `cache_dir` for later reads, by this process and by
//! every other on the host (ranks, torch workers, later runs):
//!
//! ```text
//! cache_dir/loaderx-blocks-v1/
//!     .lock                      eviction lock (flock)
//!     <object>/<block>.blk       block bytes, then their CRC-32 (4 bytes, LE)
//! ```
//!
//! `<object>` is a 128-bit hash of the object's URI, size and version (its
//! ETag, else its Last-Modified), so a new version of an object never meets
//! the blocks of an old one. A block
//! file is written beside its name and renamed in (readers see all of it or
//! none), read through a mapping, and checked against its CRC once per
//! process before use: a torn or damaged file is a miss, never wrong bytes.
//! A hit updates the file's modification time; eviction removes the least
//! recently used blocks when the files under the cache exceed `cache_bytes`
//! (a soft bound: each process checks after its own inserts, and rescans
//! the directory after inserting an eighth of the budget). Unlinking a
//! block that another process has mapped is harmless.

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;

use super::fetch::{self, Runs};
use super::RemoteFile;
use crate::{Error, Result};

/// Bytes per cached block: large enough that a request amortises over many
/// small records, small enough that a batch of "blocked" draws touches few.
pub const BLOCK: u64 = 4 << 20;
const DIR: &str = "loaderx-blocks-v1";
const LOCK: &str = ".lock";

/// A block cache directory shared by the processes of a host.
#[derive(Debug)]
pub(crate) struct BlockCache {
    root: PathBuf,
    budget: u64,
    /// This process's estimate of the bytes under `root`.
    used: AtomicU64,
    /// Bytes inserted since the last scan of the directory.
    since_scan: AtomicU64,
    /// Block files whose CRC this process has checked.
    verified: Mutex<HashSet<PathBuf>>,
}

/// FNV-1a over `bytes` from `seed`.
fn fnv(bytes: &[u8], seed: u64) -> u64 {
    let mut h = seed;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

impl BlockCache {
    /// The cache in `dir` (made if missing) holding at most about `budget`
    /// bytes. `InvalidValue` naming `cache_bytes` when it cannot hold one
    /// block.
    pub(crate) fn open(dir: &Path, budget: u64) -> Result<Arc<BlockCache>> {
        if budget < BLOCK + 4 {
            return Err(Error::InvalidValue(format!(
                "cache_bytes must hold at least one cache block ({} bytes, 4 MiB), got {budget}",
                BLOCK + 4
            )));
        }
        let root = dir.join(DIR);
        fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
        let cache = BlockCache {
            root,
            budget,
            used: AtomicU64::new(0),
            since_scan: AtomicU64::new(0),
            verified: Mutex::new(HashSet::new()),
        };
        let used = cache
            .scan()
            .map_err(|e| Error::io(&cache.root, e))?
            .iter()
            .map(|b| b.1)
            .sum();
        cache.used.store(used, Ordering::Relaxed);
        Ok(Arc::new(cache))
    }

    fn object_dir(&self, file: &RemoteFile) -> io::Result<PathBuf> {
        let key = file.cache_key()?;
        let name = format!(
            "{:016x}{:016x}",
            fnv(key.as_bytes(), 0xcbf29ce484222325),
            fnv(key.as_bytes(), 0x84222325cbf29ce4)
        );
        Ok(self.root.join(name))
    }

    /// Reads the block file `path` of `len` bytes, or None when it is
    /// missing, short, or fails its CRC (then it is removed).
    fn hit(&self, path: &Path, len: u64) -> Option<Bytes> {
        let file = File::open(path).ok()?;
        let size = file.metadata().ok()?.len();
        if size != len + 4 {
            let _ = fs::remove_file(path);
            return None;
        }
        // SAFETY: block files are written beside their name and renamed in,
        // never written in place, so the mapped bytes never change (an
        // evicting process only unlinks the name).
        let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let fresh = !self
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(path);
        if fresh {
            let (data, tail) = map.split_at(len as usize);
            let want = u32::from_le_bytes(tail.try_into().ok()?);
            if crc32fast::hash(data) != want {
                drop(map);
                let _ = fs::remove_file(path);
                return None;
            }
            self.verified
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(path.to_path_buf());
        }
        let _ = file.set_modified(SystemTime::now());
        Some(Bytes::from_owner(map).slice(..len as usize))
    }

    /// Writes a block file (beside its name, then renamed in).
    fn insert(&self, dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
        fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(
            ".{}.{}.{:x}.tmp",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("block"),
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let write = || -> io::Result<()> {
            let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(bytes)?;
            f.write_all(&crc32fast::hash(bytes).to_le_bytes())?;
            drop(f);
            fs::rename(&tmp, path)
        };
        write().inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })?;
        self.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_path_buf());
        let n = bytes.len() as u64 + 4;
        self.used.fetch_add(n, Ordering::Relaxed);
        self.since_scan.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Every block file under the cache: (path, size, modified).
    fn scan(&self) -> io::Result<Vec<(PathBuf, u64, SystemTime)>> {
        let mut out = Vec::new();
        for obj in fs::read_dir(&self.root)? {
            let obj = obj?;
            if !obj.file_type()?.is_dir() {
                continue;
            }
            let Ok(entries) = fs::read_dir(obj.path()) else {
                continue; // removed meanwhile
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.extension().and_then(|x| x.to_str()) != Some("blk") {
                    continue;
                }
                if let Ok(m) = e.metadata() {
                    out.push((p, m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
                }
            }
        }
        Ok(out)
    }

    /// Evicts least recently used blocks when the cache is over budget, or
    /// rescans the directory when this process has inserted an eighth of
    /// the budget since the last scan (other processes insert too).
    fn maybe_evict(&self) -> io::Result<()> {
        let over = self.used.load(Ordering::Relaxed) > self.budget;
        let stale = self.since_scan.load(Ordering::Relaxed) > self.budget / 8;
        if !over && !stale {
            return Ok(());
        }
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.root.join(LOCK))?;
        lock.lock()?;
        let mut blocks = self.scan()?;
        let mut total: u64 = blocks.iter().map(|b| b.1).sum();
        if total > self.budget {
            blocks.sort_by_key(|b| b.2);
            let target = self.budget - self.budget / 10;
            for (path, size, _) in blocks {
                if total <= target {
                    break;
                }
                match fs::remove_file(&path) {
                    Ok(()) => total = total.saturating_sub(size),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        total = total.saturating_sub(size)
                    }
                    Err(e) => return Err(e),
                }
                self.verified
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&path);
            }
        }
        self.used.store(total, Ordering::Relaxed);
        self.since_scan.store(0, Ordering::Relaxed);
        let _ = lock.unlock();
        Ok(())
    }

    /// Plans reading the byte ranges `ranges` of `file` through the cache:
    /// every block they touch is a hit, or a miss this process fetches
    /// (holding the block's fetch lock, so that the other processes of the
    /// host wait for it instead of fetching it too), or a miss another
    /// process is fetching right now (waited for in [`BlockCache::finish`]).
    pub(crate) fn plan(&self, file: &RemoteFile, ranges: &[Range<u64>]) -> io::Result<Pending> {
        let size = file.size();
        let blocks: BTreeSet<u64> = ranges
            .iter()
            .filter(|r| r.end > r.start)
            .flat_map(|r| r.start / BLOCK..=(r.end - 1) / BLOCK)
            .collect();
        let dir = self.object_dir(file)?;
        let mut have: Vec<(u64, Bytes)> = Vec::with_capacity(blocks.len());
        let mut ours: Vec<(u64, Option<File>)> = Vec::new();
        let mut theirs: Vec<u64> = Vec::new();
        for &b in &blocks {
            let r = block_range(b, size);
            if let Some(bytes) = self.hit(&block_path(&dir, b), r.end - r.start) {
                have.push((r.start, bytes));
                continue;
            }
            match try_fetch_lock(&dir, b) {
                FetchLock::Ours(lock) => {
                    // Fetched meanwhile by the process that held the lock?
                    match self.hit(&block_path(&dir, b), r.end - r.start) {
                        Some(bytes) => have.push((r.start, bytes)),
                        None => ours.push((b, lock)),
                    }
                }
                FetchLock::Theirs => theirs.push(b),
            }
        }
        let stats = fetch::stats();
        stats
            .cache_hits
            .fetch_add(have.len() as u64, Ordering::Relaxed);
        stats
            .cache_misses
            .fetch_add((ours.len() + theirs.len()) as u64, Ordering::Relaxed);
        // One request per block: a block is large enough to amortise a
        // request, and separate requests use separate connections.
        let requests = ours.iter().map(|(b, _)| block_range(*b, size)).collect();
        Ok(Pending {
            dir,
            size,
            have,
            ours,
            theirs,
            requests,
            ranges: ranges.to_vec(),
        })
    }

    /// Keeps the blocks fetched for `pending` (in the order of its
    /// requests) and releases their locks; then waits for the blocks other
    /// processes were fetching (a hit once their lock is free; fetched here
    /// with `fetch_one` if that process failed or died). Returns the bytes
    /// of every range asked for.
    pub(crate) fn finish(
        &self,
        pending: Pending,
        fetched: Vec<Bytes>,
        fetch_one: impl Fn(Range<u64>) -> io::Result<Bytes>,
    ) -> io::Result<Runs> {
        let Pending {
            dir,
            size,
            mut have,
            ours,
            theirs,
            ranges,
            ..
        } = pending;
        let mut inserted = !ours.is_empty();
        for ((b, lock), block) in ours.into_iter().zip(fetched) {
            // A cache that cannot be written still serves this read.
            let _ = self.insert(&dir, &block_path(&dir, b), &block);
            drop(lock); // the waiting processes find the block now
            have.push((block_range(b, size).start, block));
        }
        for b in theirs {
            let r = block_range(b, size);
            let lock = wait_fetch_lock(&dir, b);
            match self.hit(&block_path(&dir, b), r.end - r.start) {
                Some(bytes) => have.push((r.start, bytes)),
                None => {
                    let block = fetch_one(r.clone())?;
                    let _ = self.insert(&dir, &block_path(&dir, b), &block);
                    inserted = true;
                    have.push((r.start, block));
                }
            }
            drop(lock);
        }
        if inserted {
            let _ = self.maybe_evict();
        }
        // A record that crosses a block boundary gets a run of its own.
        have.sort_by_key(|(s, _)| *s);
        let mut extra = Vec::new();
        for r in ranges.iter().filter(|r| r.end > r.start) {
            if r.start / BLOCK == (r.end - 1) / BLOCK {
                continue;
            }
            let mut out = Vec::with_capacity((r.end - r.start) as usize);
            for (start, bytes) in &have {
                let end = start + bytes.len() as u64;
                if end <= r.start || *start >= r.end {
                    continue;
                }
                let from = r.start.max(*start) - start;
                let to = r.end.min(end) - start;
                out.extend_from_slice(&bytes[from as usize..to as usize]);
            }
            extra.push((r.start, Bytes::from(out)));
        }
        have.extend(extra);
        Ok(Runs::new(have))
    }
}

/// Fetch locks are `flock`s on a fixed set of stripe files per object
/// (block `b` takes stripe `b % LOCK_STRIPES`), so no lock file is ever
/// removed while someone may hold it.
const LOCK_STRIPES: u64 = 256;

enum FetchLock {
    /// This process may fetch the block (the open lock file, held until
    /// dropped; None when the lock file cannot be made: fetch unlocked).
    Ours(Option<File>),
    /// Another process holds the block's lock: it is fetching the block.
    Theirs,
}

fn lock_file(dir: &Path, b: u64) -> io::Result<File> {
    fs::create_dir_all(dir)?;
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(format!(".fetch-{:03}.lock", b % LOCK_STRIPES)))
}

fn try_fetch_lock(dir: &Path, b: u64) -> FetchLock {
    let Ok(file) = lock_file(dir, b) else {
        return FetchLock::Ours(None);
    };
    match file.try_lock() {
        Ok(()) => FetchLock::Ours(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => FetchLock::Theirs,
        Err(std::fs::TryLockError::Error(_)) => FetchLock::Ours(None),
    }
}

/// Waits for block `b`'s lock (held by a process fetching it; released when
/// it is done, or dies). Holds nothing else meanwhile, so no two processes
/// wait on each other.
fn wait_fetch_lock(dir: &Path, b: u64) -> Option<File> {
    let file = lock_file(dir, b).ok()?;
    file.lock().ok()?;
    Some(file)
}

/// A read through the cache, between [`BlockCache::plan`] and
/// [`BlockCache::finish`]: the blocks it already has, the ones it fetches
/// (with their locks) and the ones another process is fetching.
pub(crate) struct Pending {
    dir: PathBuf,
    size: u64,
    have: Vec<(u64, Bytes)>,
    ours: Vec<(u64, Option<File>)>,
    theirs: Vec<u64>,
    pub(crate) requests: Vec<Range<u64>>,
    ranges: Vec<Range<u64>>,
}

/// The bytes of block `b` of an object of `size` bytes.
fn block_range(b: u64, size: u64) -> Range<u64> {
    b * BLOCK..((b + 1) * BLOCK).min(size)
}

fn block_path(dir: &Path, b: u64) -> PathBuf {
    dir.join(format!("{b:010}.blk"))
}
