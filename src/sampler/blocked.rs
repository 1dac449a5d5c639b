//! The `"blocked"` mode: cycles like [`Mode::Cyclic`](super::Mode), but
//! each batch draws its records from a few blocks of `S` consecutive
//! records, so a reader whose cache holds a few blocks fetches each block
//! once per cycle (Mosaic's py1e and LitData's chunk shuffle do the same
//! for shards).
//!
//! # Definition
//!
//! Let `B` be the batch size, `S` the block size, `F = n / S` the number of
//! full blocks and `T = n mod S` the records of the tail block (block `F`,
//! when `T > 0`): `K = F + (T > 0)` blocks, each aligned to a multiple of
//! `S`. Cycle `c` (batches `c * P .. (c + 1) * P`, `P = n / B`, as in
//! cyclic mode) lays the blocks out and reads them a window at a time:
//!
//! 1. **Block order.** Slot `s` of the cycle holds block `perm_c(s)`, with
//!    `perm_c` a keyed permutation of `0..K` (the cyclic mode's Feistel
//!    network with cycle walking, keyed by `(seed, c)`).
//! 2. **Windows.** Window `w` is slots `w * W .. (w + 1) * W` (the last
//!    one fewer), `W = max(2, ceil(B / S))`, so a window holds at least one
//!    batch. Its records are its blocks' records, `S` per block except the
//!    tail's `T`; the windows follow each other in the cycle's positions.
//! 3. **Within a window.** Offset `o` of window `w` (of `m_w` records) is
//!    record `perm_{c,w}(o)` of the window's blocks laid end to end, with
//!    `perm_{c,w}` a keyed permutation of `0..m_w` (keyed by `(seed, c, w)`).
//!
//! Position `p = b * B + j` of batch `b` of the cycle is found in its
//! window without a table: every window before the tail's holds `W * S`
//! records, the tail's `W * S - (S - T)`, the ones after `W * S` again.
//! Every step is a bijection, so each cycle visits `n - n mod B` distinct
//! records (the last `n mod B` positions are dropped, as in cyclic mode),
//! and a batch is a pure function of `(n, B, S, seed, step)`. A batch lies
//! in at most two windows, so it draws from at most `2 * W` blocks, and a
//! cache of a few windows' blocks fetches each block once per cycle.
//!
//! When `S` divides `n`, the record at any position of a cycle is uniform
//! over `0..n` (over seeds). With a tail, every record is still visited
//! once per cycle, but the tail's records sit at a given position with
//! probability `T / S` of a full block's.

use super::{mix64, stream_key, FeistelDomain, GOLDEN_GAMMA};

/// Domain separation for the block order of a cycle.
const DOMAIN_BLOCKS: u64 = 0x626C_6F63_6B73_5F63; // "blocks_c"
/// Domain separation for the permutation within one window.
const DOMAIN_WINDOW: u64 = 0x7769_6E64_6F77_5F77; // "window_w"

/// Blocks per window for batches of `batch` records and blocks of `block`.
pub(super) fn window_blocks(batch: u64, block: u64) -> u64 {
    batch.div_ceil(block).max(2)
}

/// A keyed permutation of `0..n` (the cyclic mode's Feistel network with
/// cycle walking), for any `n >= 1`.
struct Perm {
    n: u64,
    domain: FeistelDomain,
    keys: [u64; 24],
}

impl Perm {
    fn new(n: u64, key: u64) -> Perm {
        let domain = FeistelDomain::new(n);
        let mut keys = [0u64; 24];
        let mut s = key;
        for k in keys.iter_mut().take(domain.rounds) {
            s = s.wrapping_add(GOLDEN_GAMMA);
            *k = mix64(s);
        }
        Perm { n, domain, keys }
    }

    fn apply(&self, x: u64) -> u64 {
        let keys = &self.keys[..self.domain.rounds];
        let mut y = self.domain.encrypt(keys, x);
        while y >= self.n {
            y = self.domain.encrypt(keys, y);
        }
        y
    }

    /// The inverse of [`Perm::apply`]: walks the same cycle backwards.
    fn invert(&self, y: u64) -> u64 {
        let keys = &self.keys[..self.domain.rounds];
        let mut x = self.domain.decrypt(keys, y);
        while x >= self.n {
            x = self.domain.decrypt(keys, x);
        }
        x
    }
}

/// One cycle's plan: its block order and where the tail sits.
pub(super) struct Cycle {
    block: u64,
    /// Records of the tail block (`n mod block`).
    tail: u64,
    /// Blocks, the tail included.
    slots: u64,
    /// Blocks per window.
    per_window: u64,
    /// Records of a window of full blocks.
    window: u64,
    /// The block order (None when there is one block).
    blocks: Option<Perm>,
    /// The tail's slot (`slots` when there is no tail).
    tail_slot: u64,
    window_seed: u64,
}

impl Cycle {
    pub(super) fn new(n: u64, batch: u64, block: u64, seed: u64, cycle: u64) -> Cycle {
        let full = n / block;
        let tail = n % block;
        let slots = full + u64::from(tail > 0);
        // At least one batch per window, and never more blocks than exist.
        let per_window = window_blocks(batch, block).min(slots);
        let blocks = (slots > 1).then(|| Perm::new(slots, stream_key(DOMAIN_BLOCKS, seed, cycle)));
        let tail_slot = match (&blocks, tail > 0) {
            (_, false) => slots,
            (Some(p), true) => p.invert(full),
            (None, true) => 0,
        };
        Cycle {
            block,
            tail,
            slots,
            per_window,
            // per_window <= slots, so this is at most n + block - 1.
            window: per_window * block,
            blocks,
            tail_slot,
            window_seed: stream_key(DOMAIN_WINDOW, seed, cycle),
        }
    }

    /// Records of window `w`: its blocks', the tail's counting `tail`.
    fn window_len(&self, w: u64) -> u64 {
        let first = w * self.per_window;
        let slots = self.per_window.min(self.slots - first);
        let short = if (first..first + slots).contains(&self.tail_slot) {
            self.block - self.tail
        } else {
            0
        };
        slots * self.block - short
    }

    /// The window holding position `p` of the cycle, and `p`'s offset in it.
    fn locate(&self, p: u64) -> (u64, u64) {
        let tail_window = self.tail_slot / self.per_window;
        let before = tail_window * self.window; // records before the tail's window
        if p < before {
            return (p / self.window, p % self.window);
        }
        let q = p - before;
        let at_tail = self.window_len(tail_window);
        if q < at_tail {
            return (tail_window, q);
        }
        let q = q - at_tail;
        (tail_window + 1 + q / self.window, q % self.window)
    }

    /// The permutation within window `w`.
    fn window_perm(&self, w: u64) -> Perm {
        Perm::new(
            self.window_len(w),
            mix64(self.window_seed.wrapping_add(w.wrapping_mul(GOLDEN_GAMMA))),
        )
    }

    fn block_of(&self, slot: u64) -> u64 {
        self.blocks.as_ref().map_or(slot, |p| p.apply(slot))
    }

    /// Record `o` of window `w`'s blocks laid end to end.
    fn record(&self, w: u64, o: u64) -> u64 {
        let s = self.block;
        let first = w * self.per_window;
        let tail_here = (first..first + self.per_window).contains(&self.tail_slot);
        let (slot, r) = match tail_here.then(|| (self.tail_slot - first) * s) {
            Some(at) if o >= at && o - at < self.tail => (self.tail_slot, o - at),
            Some(at) if o >= at => {
                let b = o - self.tail;
                (first + b / s + 1, b % s)
            }
            _ => (first + o / s, o % s),
        };
        self.block_of(slot) * s + r
    }

    /// Writes the records of positions `base .. base + out.len()` (all
    /// `< n`) of this cycle into `out`.
    pub(super) fn fill(&self, base: u64, out: &mut [u64]) {
        for (slot, p) in out.iter_mut().zip(base..) {
            *slot = p;
        }
        self.map_positions(out);
    }

    /// Replaces each position of this cycle in `out` (all `< n`, ascending
    /// for speed: a window's permutation is built once per run of its
    /// positions) by its record.
    pub(super) fn map_positions(&self, out: &mut [u64]) {
        let mut current: Option<(u64, Perm)> = None;
        for slot in out.iter_mut() {
            let (w, o) = self.locate(*slot);
            if current.as_ref().map(|(cw, _)| *cw) != Some(w) {
                current = Some((w, self.window_perm(w)));
            }
            let perm = &current.as_ref().expect("set above").1;
            *slot = self.record(w, perm.apply(o));
        }
    }

    /// The position of `record` (`< n`) in this cycle: the inverse of
    /// [`Cycle::map_positions`].
    pub(super) fn position_of(&self, record: u64) -> u64 {
        let s = self.block;
        let (block, r) = (record / s, record % s);
        let slot = self.blocks.as_ref().map_or(block, |p| p.invert(block));
        let w = slot / self.per_window;
        let first = w * self.per_window;
        let tail_here = (first..first + self.per_window).contains(&self.tail_slot);
        let o = if tail_here && slot == self.tail_slot {
            (slot - first) * s + r
        } else if tail_here && slot > self.tail_slot {
            (slot - first - 1) * s + r + self.tail
        } else {
            (slot - first) * s + r
        };
        let o = self.window_perm(w).invert(o);
        self.window_start(w) + o
    }

    /// The cycle position of window `w`'s first record.
    fn window_start(&self, w: u64) -> u64 {
        let tail_window = self.tail_slot / self.per_window;
        if w <= tail_window {
            return w * self.window;
        }
        tail_window * self.window
            + self.window_len(tail_window)
            + (w - tail_window - 1) * self.window
    }
}
