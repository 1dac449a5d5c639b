//! The local block cache of remote `data.zr` objects.
//!
//! With a cache, a remote object is read in aligned blocks of [`BLOCK`]
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
//! `<object>` is a 128-bit hash of the object's URI, size and ETag, so a
//! new version of an object never meets the blocks of an old one. A block
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
    /// every block they touch is a hit or is to be fetched (one request per
    /// missing block, all of them concurrently).
    pub(crate) fn plan(&self, file: &RemoteFile, ranges: &[Range<u64>]) -> io::Result<Pending> {
        let size = file.size();
        let blocks: BTreeSet<u64> = ranges
            .iter()
            .filter(|r| r.end > r.start)
            .flat_map(|r| r.start / BLOCK..=(r.end - 1) / BLOCK)
            .collect();
        let dir = self.object_dir(file)?;
        let mut have: Vec<(u64, Bytes)> = Vec::with_capacity(blocks.len());
        let mut missing: Vec<u64> = Vec::new();
        for &b in &blocks {
            let r = block_range(b, size);
            match self.hit(&block_path(&dir, b), r.end - r.start) {
                Some(bytes) => have.push((r.start, bytes)),
                None => missing.push(b),
            }
        }
        let stats = fetch::stats();
        stats
            .cache_hits
            .fetch_add(have.len() as u64, Ordering::Relaxed);
        stats
            .cache_misses
            .fetch_add(missing.len() as u64, Ordering::Relaxed);
        // One request per block: a block is large enough to amortise a
        // request, and separate requests use separate connections.
        let per = 1usize;
        let mut runs: Vec<Vec<u64>> = Vec::new();
        for &b in &missing {
            match runs.last_mut() {
                Some(run) if run.last().is_some_and(|&l| l + 1 == b) && run.len() < per => {
                    run.push(b)
                }
                _ => runs.push(vec![b]),
            }
        }
        let requests = runs
            .iter()
            .map(|run| {
                let first = block_range(run[0], size).start;
                let last = block_range(run[run.len() - 1], size).end;
                first..last
            })
            .collect();
        Ok(Pending {
            dir,
            size,
            have,
            runs,
            requests,
            ranges: ranges.to_vec(),
        })
    }

    /// Keeps the blocks fetched for `pending` (in the order of its
    /// requests) and returns the bytes of every range asked for.
    pub(crate) fn finish(&self, pending: Pending, fetched: Vec<Bytes>) -> Runs {
        let Pending {
            dir,
            size,
            mut have,
            runs,
            ranges,
            ..
        } = pending;
        let inserted = !runs.is_empty();
        for (run, bytes) in runs.iter().zip(fetched) {
            let base = block_range(run[0], size).start;
            for &b in run {
                let r = block_range(b, size);
                let block = bytes.slice((r.start - base) as usize..(r.end - base) as usize);
                // A cache that cannot be written still serves this read.
                let _ = self.insert(&dir, &block_path(&dir, b), &block);
                have.push((r.start, block));
            }
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
        Runs::new(have)
    }
}

/// A read through the cache, between [`BlockCache::plan`] and
/// [`BlockCache::finish`]: the blocks it already has and the requests for
/// the rest.
pub(crate) struct Pending {
    dir: PathBuf,
    size: u64,
    have: Vec<(u64, Bytes)>,
    /// The missing blocks, one run per request.
    runs: Vec<Vec<u64>>,
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
