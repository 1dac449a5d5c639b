//! A gather allocates nothing but its result: once a thread's codec context
//! and staging buffer exist, `gather_dense_into` makes no heap allocation and
//! `gather_dense` makes exactly one (the returned buffer).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use loaderx::{Codec, DType, Schema, Store};

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

// One test function only: the counter is process-wide.
#[test]
fn gathers_allocate_only_their_result() {
    let dir = tempfile::tempdir().unwrap();
    let width = 3 * 64 * 64;
    let n = 400usize;
    let data: Vec<u8> = (0..n * width).map(|i| ((i / 7) % 251) as u8).collect();
    let idx: Vec<u64> = (0..256u64).map(|i| (i * 37) % n as u64).collect();
    for codec in [Codec::Raw, Codec::Zstd] {
        let mut s = Store::create(
            dir.path().join(codec.name()),
            Schema::dense(DType::U8, &[3, 64, 64]).unwrap(),
            codec,
            None,
        )
        .unwrap();
        s.append_dense(&data).unwrap();
        let mut dst = vec![0u8; idx.len() * width];
        // Warm-up: worker pool, per-thread codec contexts, staging buffers.
        for _ in 0..4 {
            s.gather_dense_into(&idx, &mut dst).unwrap();
        }
        let (r, allocs) = count(|| s.gather_dense_into(&idx, &mut dst));
        r.unwrap();
        assert_eq!(allocs, 0, "{codec}: gather_dense_into allocated");
        for (k, &i) in idx.iter().enumerate() {
            let i = i as usize;
            assert_eq!(
                &dst[k * width..(k + 1) * width],
                &data[i * width..(i + 1) * width]
            );
        }
        drop(s.gather_dense(&idx).unwrap()); // leave a pooled buffer of this size
        let (buf, allocs) = count(|| s.gather_dense(&idx).unwrap());
        assert!(
            allocs <= 1,
            "{codec}: gather_dense made {allocs} allocations"
        );
        assert_eq!(buf.as_slice(), &dst[..]);
    }
}
