//! A gather allocates nothing per record: once a thread's codec context and
//! staging buffer exist, a gather that stays on the calling thread makes no
//! heap allocation besides its result, and one that fans out makes a fixed
//! few (its chunk table, its shared claim counter and one job per pool
//! worker it wakes), however many records it gathers.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use loaderx::{Codec, DType, Records, Schema, Store};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to the system allocator with the caller's
// arguments unchanged; counting touches only atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller upholds GlobalAlloc::alloc's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller upholds GlobalAlloc::alloc_zeroed's contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from System.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: `ptr` came from this allocator, i.e. from System.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn count<T>(f: impl FnOnce() -> T) -> (T, usize) {
    ALLOCATIONS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let out = f();
    COUNTING.store(false, Ordering::SeqCst);
    (out, ALLOCATIONS.load(Ordering::SeqCst))
}

/// Allocations a fanned-out gather may make besides its result: the chunk
/// table, the shared state, and a job for each pool worker asked to join.
fn fan_out_allowance() -> usize {
    2 + loaderx::executor::budget().saturating_sub(1)
}

// One test function only: the counter is process-wide.
#[test]
fn gathers_allocate_nothing_per_record() {
    let dir = tempfile::tempdir().unwrap();
    let width = 3 * 64 * 64;
    let n = 400usize;
    let data: Vec<u8> = (0..n * width).map(|i| ((i / 7) % 251) as u8).collect();
    let allowance = fan_out_allowance();
    for codec in [Codec::Raw, Codec::Zstd] {
        let mut s = Store::create(
            dir.path().join(codec.name()),
            Schema::dense(DType::U8, &[3, 64, 64]).unwrap(),
            codec,
            None,
        )
        .unwrap();
        s.append_dense(&data).unwrap();
        // One record stays on the calling thread: no allocation at all.
        // 256 and 2048 records fan out: the same few allocations.
        for (batch, most) in [(1usize, 0usize), (256, allowance), (2048, allowance)] {
            let idx: Vec<u64> = (0..batch as u64).map(|i| (i * 37) % n as u64).collect();
            let mut dst = vec![0u8; idx.len() * width];
            // Warm-up: worker pool, per-thread codec contexts, staging buffers.
            for _ in 0..4 {
                s.gather_dense_into(&idx, &mut dst).unwrap();
            }
            // The fewest of a few counted gathers: a pool worker that got no
            // chunk during the warm-up (the machine was busy) makes its
            // thread's first, one-time allocations in the first counted
            // one. Allocations per record would show in every one.
            let mut allocs = usize::MAX;
            for _ in 0..5 {
                let (r, a) = count(|| s.gather_dense_into(&idx, &mut dst));
                r.unwrap();
                allocs = allocs.min(a);
            }
            assert!(
                allocs <= most,
                "{codec}: gather_dense_into of {batch} made {allocs} allocations (at most {most})"
            );
            for (k, &i) in idx.iter().enumerate() {
                let i = i as usize;
                assert_eq!(
                    &dst[k * width..(k + 1) * width],
                    &data[i * width..(i + 1) * width]
                );
            }
            drop(s.gather_dense(&idx).unwrap()); // leave a pooled buffer of this size
            let (mut buf, mut allocs) = count(|| s.gather_dense(&idx).unwrap());
            for _ in 0..4 {
                drop(buf);
                let (b, a) = count(|| s.gather_dense(&idx).unwrap());
                (buf, allocs) = (b, allocs.min(a));
            }
            assert!(
                allocs <= most + 1,
                "{codec}: gather_dense of {batch} made {allocs} allocations (at most {})",
                most + 1
            );
            assert_eq!(buf.as_slice(), &dst[..]);
        }
    }
}
