//! The decoded chunks the process keeps: one budget for every open column
//! of every table (`LOADERX_COLUMN_CACHE`), evicting by recency (CLOCK),
//! so that a second table, a `Mix` source or a val table read beside a
//! train table gets its share instead of finding the budget spent.
//!
//! - Readers get shared handles (`Arc<Decoded>`), never references into a
//!   slot: evicting a chunk drops the cache's handle, and its memory goes
//!   when the last reader's does.
//! - Fork-safe: the cache is a [`PerProcess`] value, so a forked child (a
//!   DataLoader worker) makes its own on first use and never takes a lock
//!   its parent's threads held. What each process keeps counts against its
//!   own budget.
//! - Sixteen shards by key, each a sixteenth of the budget, each its own
//!   lock and clock hand: a read locks one shard for a lookup.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::decode::{Aligned, Decoded};
use super::format::ValueKind;
use crate::error::{Error, Result};
use crate::hash::CheapMap;
use crate::per_process::PerProcess;
use crate::schema::DType;

/// Decoded chunks the process keeps, in bytes, by default.
pub const DEFAULT_KEEP_BYTES: u64 = 256 << 20;

/// The environment variable that sets [`keep_budget`].
pub const KEEP_ENV: &str = "LOADERX_COLUMN_CACHE";

const SHARDS: usize = 16;

/// A kept chunk's key: its file's number in the process and its index.
pub(crate) type Key = (u64, u32);

/// Bytes of decoded chunks the process keeps: `LOADERX_COLUMN_CACHE`
/// (bytes, or with a `K`, `M` or `G` suffix, powers of 1024; `0` keeps
/// none), else [`DEFAULT_KEEP_BYTES`]. Read once.
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

/// One bit a chunk of a file, set while the chunk is kept: a reader asks
/// the cache (and takes its lock) only for chunks whose bit is set.
pub(crate) type KeptBits = Arc<[AtomicU64]>;

/// Bits for a file of `chunks` chunks, none set.
pub(crate) fn kept_bits(chunks: usize) -> KeptBits {
    (0..chunks.div_ceil(64))
        .map(|_| AtomicU64::new(0))
        .collect()
}

/// Whether chunk `c`'s bit is set in `bits`.
#[inline]
pub(crate) fn bit(bits: &KeptBits, c: u32) -> bool {
    bits[c as usize / 64].load(Ordering::Relaxed) & (1 << (c % 64)) != 0
}

fn set_bit(bits: &KeptBits, c: u32, on: bool) {
    let m = 1u64 << (c % 64);
    match on {
        true => bits[c as usize / 64].fetch_or(m, Ordering::Relaxed),
        false => bits[c as usize / 64].fetch_and(!m, Ordering::Relaxed),
    };
}

struct Slot {
    key: Key,
    chunk: Arc<Decoded>,
    /// Its file's bits, cleared when it goes.
    bits: KeptBits,
    bytes: u64,
    /// Read since the hand last passed.
    used: bool,
}

/// A lookup is on every random read's path: the cheap hasher.
type KeyMap = CheapMap<Key, usize>;

#[derive(Default)]
struct Shard {
    at: KeyMap,
    slots: Vec<Slot>,
    hand: usize,
    bytes: u64,
}

impl Shard {
    /// Removes slot `i` (the last slot takes its place).
    fn remove(&mut self, i: usize) -> Slot {
        let s = self.slots.swap_remove(i);
        set_bit(&s.bits, s.key.1, false);
        self.at.remove(&s.key);
        if let Some(moved) = self.slots.get(i) {
            self.at.insert(moved.key, i);
        }
        self.bytes -= s.bytes;
        s
    }
}

/// The process's kept chunks (see the module documentation).
pub(crate) struct Kept {
    shards: [Mutex<Shard>; SHARDS],
    /// Each shard's bytes, as its lock's holder last left them (read
    /// without the lock).
    shard_bytes: [AtomicU64; SHARDS],
    bytes: AtomicU64,
    shard_budget: u64,
}

static KEPT: PerProcess<Kept> = PerProcess::new();
/// Numbers for open files, unique in the process.
static NEXT_FILE: AtomicU64 = AtomicU64::new(1);

/// A number for a newly opened file.
pub(crate) fn file_number() -> u64 {
    NEXT_FILE.fetch_add(1, Ordering::Relaxed)
}

/// The process's kept chunks.
pub(crate) fn kept() -> &'static Kept {
    KEPT.get_or_try_init(|| Ok::<_, std::convert::Infallible>(Kept::new(keep_budget())))
        .unwrap_or_else(|never| match never {})
}

/// Bytes of decoded chunks the process keeps now.
pub fn kept_bytes() -> u64 {
    kept().bytes.load(Ordering::Relaxed)
}

fn shard_of(key: Key) -> usize {
    let h = key.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (key.1 as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (h >> 59) as usize % SHARDS
}

impl Kept {
    fn new(budget: u64) -> Kept {
        Kept {
            shards: std::array::from_fn(|_| Mutex::new(Shard::default())),
            shard_bytes: std::array::from_fn(|_| AtomicU64::new(0)),
            bytes: AtomicU64::new(0),
            shard_budget: budget / SHARDS as u64,
        }
    }

    fn shard(&self, key: Key) -> std::sync::MutexGuard<'_, Shard> {
        // A reader that panicked holding the lock left the shard whole
        // (every change is made before or after, never across, a call
        // that can panic).
        self.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The chunk kept under `key`, marked as read.
    pub(crate) fn get(&self, key: Key) -> Option<Arc<Decoded>> {
        if self.shard_budget == 0 {
            return None;
        }
        let mut s = self.shard(key);
        let i = *s.at.get(&key)?;
        s.slots[i].used = true;
        Some(Arc::clone(&s.slots[i].chunk))
    }

    /// Whether a chunk is kept under `key` (not marking it read).
    pub(crate) fn has(&self, key: Key) -> bool {
        self.shard_budget > 0 && self.shard(key).at.contains_key(&key)
    }

    /// The process's budget, in bytes.
    pub(crate) fn budget(&self) -> u64 {
        self.shard_budget * SHARDS as u64
    }

    /// Whether a chunk of `bytes` would be kept under `key` without
    /// evicting another (read without a lock: an estimate).
    pub(crate) fn has_room(&self, key: Key, bytes: u64) -> bool {
        self.shard_budget > 0
            && self.shard_bytes[shard_of(key)].load(Ordering::Relaxed) + bytes <= self.shard_budget
    }

    /// Keeps `chunk` under `key`, evicting the chunks of its shard read
    /// least recently until it fits; false when it cannot (larger than a
    /// shard's budget). Evicted chunks are dropped after the lock is let go.
    pub(crate) fn put(&self, key: Key, chunk: Arc<Decoded>, bits: &KeptBits) -> bool {
        self.put_evicting(key, chunk, bits, true)
    }

    /// Keeps `chunk` under `key` only if its shard has room for it beside
    /// the chunks kept: a random read of a table larger than the budget
    /// would otherwise evict a chunk for every chunk it decodes, each
    /// decoded for a row or two.
    pub(crate) fn put_into_room(&self, key: Key, chunk: Arc<Decoded>, bits: &KeptBits) -> bool {
        self.put_evicting(key, chunk, bits, false)
    }

    fn put_evicting(&self, key: Key, chunk: Arc<Decoded>, bits: &KeptBits, evict: bool) -> bool {
        let bytes = chunk.memory() as u64;
        if bytes > self.shard_budget {
            return false;
        }
        let mut gone = Vec::new();
        let mut s = self.shard(key);
        if s.at.contains_key(&key) {
            return true;
        }
        if !evict && s.bytes + bytes > self.shard_budget {
            return false;
        }
        let slot = Slot {
            key,
            chunk,
            bits: Arc::clone(bits),
            bytes,
            used: false,
        };
        // The hand clears the marks of chunks read since it last passed
        // and takes the first unmarked one; the new chunk takes its place,
        // behind the hand, so it has a whole turn before it can go.
        let mut slot = Some(slot);
        let mut placed = None;
        while s.bytes + bytes > self.shard_budget {
            let h = s.hand % s.slots.len();
            if s.slots[h].used {
                s.slots[h].used = false;
                s.hand = h + 1;
            } else if s.bytes - s.slots[h].bytes + bytes <= self.shard_budget {
                let old = s.slots[h].key;
                set_bit(&s.slots[h].bits, old.1, false);
                s.at.remove(&old);
                s.bytes -= s.slots[h].bytes;
                let new = slot.take().expect("placed once");
                let out = std::mem::replace(&mut s.slots[h], new);
                self.bytes.fetch_sub(out.bytes, Ordering::Relaxed);
                gone.push(out);
                s.hand = h + 1;
                placed = Some(h);
                break;
            } else {
                let out = s.remove(h);
                self.bytes.fetch_sub(out.bytes, Ordering::Relaxed);
                gone.push(out);
                s.hand = h;
            }
        }
        let i = match placed {
            Some(h) => h,
            None => {
                s.slots.push(slot.take().expect("placed once"));
                s.slots.len() - 1
            }
        };
        s.at.insert(key, i);
        s.bytes += bytes;
        self.shard_bytes[shard_of(key)].store(s.bytes, Ordering::Relaxed);
        set_bit(bits, key.1, true);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        drop(s);
        drop(gone);
        true
    }

    /// Drops every chunk kept for file `file` (closed).
    pub(crate) fn forget_file(&self, file: u64) {
        if self.shard_budget == 0 {
            return;
        }
        let mut gone = Vec::new();
        for (n, shard) in self.shards.iter().enumerate() {
            let mut s = shard.lock().unwrap_or_else(|p| p.into_inner());
            let mut i = 0;
            while i < s.slots.len() {
                if s.slots[i].key.0 == file {
                    let out = s.remove(i);
                    self.bytes.fetch_sub(out.bytes, Ordering::Relaxed);
                    gone.push(out);
                } else {
                    i += 1;
                }
            }
            self.shard_bytes[n].store(s.bytes, Ordering::Relaxed);
        }
        drop(gone);
    }
}

/// Values decoded from something other than a column file (the patches
/// of a column's parts), kept under the process's one budget beside the
/// chunks, each part under its own key, evicted as they are.
pub(crate) struct KeptValues {
    file: u64,
    bits: KeptBits,
    /// Parts whose values never fit a shard of the budget: not decoded
    /// again for nothing.
    too_big: Vec<AtomicBool>,
}

impl KeptValues {
    pub(crate) fn new(parts: usize) -> KeptValues {
        KeptValues {
            file: file_number(),
            bits: kept_bits(parts),
            too_big: (0..parts).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Values that are never kept (as if each part were larger than the
    /// budget): readers then take the other way every time.
    #[cfg(test)]
    pub(crate) fn none(parts: usize) -> KeptValues {
        let v = KeptValues::new(parts);
        for f in &v.too_big {
            f.store(true, Ordering::Relaxed);
        }
        v
    }

    /// Part `part`'s values: as kept, or made by `make` and kept when they
    /// fit; None when the budget keeps nothing or they never fit (the
    /// caller reads them some other way). `make` gives `rows` values end
    /// to end and, when they differ in size, their `rows + 1` offsets
    /// (None: they cannot be kept).
    pub(crate) fn get_or_make(
        &self,
        part: u32,
        make: impl FnOnce() -> Result<Option<(Aligned, Vec<i32>, usize)>>,
    ) -> Result<Option<Arc<Decoded>>> {
        let key = (self.file, part);
        let cache = kept();
        if let Some(d) = cache.get(key) {
            return Ok(Some(d));
        }
        let flag = &self.too_big[part as usize];
        if cache.budget() == 0 || flag.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let Some((values, offsets, rows)) = make()? else {
            flag.store(true, Ordering::Relaxed);
            return Ok(None);
        };
        let kind = if offsets.is_empty() {
            ValueKind::Fixed(DType::U8)
        } else {
            ValueKind::Binary
        };
        let d = Arc::new(Decoded {
            rows,
            kind,
            values,
            offsets,
            validity: None,
            null_count: 0,
        });
        if !cache.put(key, Arc::clone(&d), &self.bits) {
            flag.store(true, Ordering::Relaxed);
            return Ok(None);
        }
        Ok(Some(d))
    }
}

impl Drop for KeptValues {
    fn drop(&mut self) {
        kept().forget_file(self.file);
    }
}

/// `len` bytes to fill, for [`KeptValues::get_or_make`]; `OutOfMemory`
/// naming `what` when they cannot be had.
pub(crate) fn aligned(len: usize, what: &str) -> Result<Aligned> {
    Aligned::zeroed(len).ok_or_else(|| Error::OutOfMemory {
        bytes: len as u64,
        what: what.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columnar::ValueKind;
    use crate::DType;

    fn chunk(bytes: usize) -> Arc<Decoded> {
        let d = Decoded::zeroed(ValueKind::Fixed(DType::U8), bytes);
        Arc::new(d)
    }

    /// The budget holds: chunks past it evict those read least recently
    /// (a chunk read since the hand passed survives one more turn), and a
    /// reader's handle outlives its chunk's eviction.
    #[test]
    fn chunks_evict_by_recency_within_the_budget() {
        let k = Kept::new(16 * 10_000);
        let bits = kept_bits(10_000);
        let size = chunk(4000).memory() as u64;
        // Keys of one shard.
        let keys: Vec<Key> = (0..10_000u32)
            .map(|c| (7, c))
            .filter(|&key| shard_of(key) == shard_of((7, 0)))
            .take(8)
            .collect();
        let held = chunk(4000);
        assert!(k.put(keys[0], chunk(4000), &bits) && k.put(keys[1], Arc::clone(&held), &bits));
        assert!(bit(&bits, keys[0].1) && bit(&bits, keys[1].1));
        // Its shard is full; another shard has room.
        assert!(!k.has_room(keys[2], size));
        // Into room only: the full shard keeps what it holds.
        assert!(!k.put_into_room(keys[2], chunk(4000), &bits));
        assert!(k.has(keys[0]) && k.has(keys[1]) && !k.has(keys[2]));
        assert!(!bit(&bits, keys[2].1));
        let other = (0..100u32)
            .map(|c| (9, c))
            .find(|&key| shard_of(key) != shard_of(keys[0]));
        assert!(k.has_room(other.unwrap(), size));
        // keys[0], read before every new chunk, stays; each new one takes
        // the place of the one not read since (2 fit: 3 * 4064 > 10,000).
        for (n, &key) in keys[2..].iter().enumerate() {
            assert!(k.get(keys[0]).is_some(), "the chunk read is kept");
            assert!(k.put(key, chunk(4000), &bits));
            assert!(k.has(key) && !k.has(keys[1 + n]), "the unread one went");
            assert!(bit(&bits, key.1) && !bit(&bits, keys[1 + n].1));
            assert_eq!(k.bytes.load(Ordering::Relaxed), 2 * size);
        }
        // A reader's handle outlives its chunk's eviction.
        assert_eq!(held.rows, 4000);
        // Too large for a shard: not kept.
        assert!(!k.put((8, 0), chunk(20_000), &bits));
        k.forget_file(7);
        assert!(keys.iter().all(|key| !bit(&bits, key.1)));
        assert_eq!(k.bytes.load(Ordering::Relaxed), 0);
        assert!(Kept::new(0).get(keys[0]).is_none());
    }

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
