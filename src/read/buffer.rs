//! Gather destinations: 16-byte aligned byte buffers with a small recycling
//! pool for large sizes.
//!
//! A batch of a few tens of MiB is larger than glibc's mmap threshold, so a
//! fresh allocation is a fresh mapping and every page of it faults (and is
//! zeroed) on first touch: measured here, that costs a third of the copy
//! bandwidth. Returning large buffers to a bounded pool when their last user
//! drops them lets the next batch of the same size land in memory that is
//! already mapped.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::Mutex;

/// Enough for every dtype (and what the C allocator gives for free: with a
/// larger alignment a zeroed allocation is a malloc plus a memset that
/// touches every page up front, instead of lazily zeroed fresh pages).
const ALIGN: usize = 16;
/// Buffers at least this large are recycled.
const POOL_MIN_BYTES: usize = 64 << 10;
/// At most this many bytes and buffers are kept idle: enough for a loader's
/// batches to cycle through warm memory, little enough not to matter.
const POOL_MAX_BYTES: usize = 192 << 20;
const POOL_MAX_BUFFERS: usize = 2;

struct Idle {
    ptr: NonNull<u8>,
    cap: usize,
}

// SAFETY: an idle buffer is plain owned memory.
unsafe impl Send for Idle {}

static POOL: Mutex<Vec<Idle>> = Mutex::new(Vec::new());

/// An owned, 16-byte aligned, initialised byte buffer.
pub struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: Buffer uniquely owns its allocation; moving it to another thread
// moves that ownership.
unsafe impl Send for Buffer {}
// SAFETY: shared references only read the bytes (`as_slice`); writing needs
// `&mut Buffer`.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// A buffer of `len` bytes. Its contents are initialised but unspecified
    /// (zero when fresh, an earlier batch when recycled): callers overwrite it.
    /// Aborts when the allocation fails, as `Vec` does; sizes that come
    /// from a file use [`Buffer::try_new`].
    pub fn new(len: usize) -> Buffer {
        Buffer::try_new(len).unwrap_or_else(|| {
            let layout = Layout::from_size_align(len.max(1), ALIGN).expect("buffer size overflows");
            alloc::handle_alloc_error(layout)
        })
    }

    /// [`Buffer::new`], or `None` when `len` bytes cannot be allocated.
    pub fn try_new(len: usize) -> Option<Buffer> {
        if len >= POOL_MIN_BYTES {
            if let Some(b) = Buffer::from_pool(len) {
                return Some(b);
            }
        }
        let cap = len.max(1);
        let layout = Layout::from_size_align(cap, ALIGN).ok()?;
        // alloc_zeroed: large sizes come straight from fresh zero pages, so
        // this costs no more than an uninitialised allocation.
        // SAFETY: `layout` has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc::alloc_zeroed(layout) })?;
        advise_huge_pages(ptr.as_ptr(), cap);
        Some(Buffer { ptr, len, cap })
    }

    fn from_pool(len: usize) -> Option<Buffer> {
        // try_lock: a pool lock held by another thread at fork() time must
        // not hang the child.
        let mut pool = POOL.try_lock().ok()?;
        let best = pool
            .iter()
            .enumerate()
            .filter(|(_, b)| b.cap >= len && b.cap <= len.saturating_mul(2))
            .min_by_key(|(_, b)| b.cap)
            .map(|(i, _)| i)?;
        let idle = pool.swap_remove(best);
        Some(Buffer {
            ptr: idle.ptr,
            len,
            cap: idle.cap,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of `cap >= len` initialised
        // bytes (zeroed at allocation, or an earlier batch), owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the slice unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Shrinks the visible length (the allocation is kept).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

/// Asks the kernel to back the page-aligned interior of a large fresh
/// allocation with transparent huge pages: a first touch then costs one fault
/// per 2 MiB instead of one per 4 KiB.
pub fn advise_huge_pages(ptr: *mut u8, len: usize) {
    const HUGE_MIN: usize = 4 << 20;
    if len < HUGE_MIN {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let page = 4096usize;
        let start = (ptr as usize).next_multiple_of(page);
        let end = (ptr as usize + len) / page * page;
        if end > start {
            // SAFETY: advisory only, on memory this process owns.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.cap >= POOL_MIN_BYTES {
            if let Ok(mut pool) = POOL.try_lock() {
                // Idle buffers smaller than this one make room for it: the
                // large ones are those whose fresh pages cost the most.
                let fits = |pool: &Vec<Idle>| {
                    let held: usize = pool.iter().map(|b| b.cap).sum();
                    pool.len() < POOL_MAX_BUFFERS && held + self.cap <= POOL_MAX_BYTES
                };
                while !fits(&pool) {
                    let smallest = pool
                        .iter()
                        .enumerate()
                        .filter(|(_, b)| b.cap < self.cap)
                        .min_by_key(|(_, b)| b.cap)
                        .map(|(i, _)| i);
                    let Some(i) = smallest else { break };
                    let idle = pool.swap_remove(i);
                    let layout = Layout::from_size_align(idle.cap, ALIGN).unwrap();
                    // SAFETY: an idle buffer was allocated with this layout
                    // and the pool was its only owner.
                    unsafe { alloc::dealloc(idle.ptr.as_ptr(), layout) };
                }
                if fits(&pool) {
                    pool.push(Idle {
                        ptr: self.ptr,
                        cap: self.cap,
                    });
                    return;
                }
            }
        }
        let layout = Layout::from_size_align(self.cap, ALIGN).unwrap();
        // SAFETY: `ptr` was allocated (and possibly recycled through the
        // pool) with exactly this layout, and this drop is its only owner.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_recycled() {
        // An odd size no other unit test asks for.
        let len = (37 << 20) + 123;
        assert!(len <= POOL_MAX_BYTES);
        // Other tests of this binary drop large buffers too, and may fill
        // the pool's slots at the moment this one drops its buffer: the
        // reuse must be seen at least once in a few tries.
        let reused = (0..50).any(|_| {
            let mut a = Buffer::new(len);
            assert_eq!(a.as_ptr() as usize % ALIGN, 0);
            a.as_mut_slice()[5] = 42;
            let p = a.as_ptr();
            drop(a);
            let b = Buffer::new(len);
            let same = b.as_ptr() == p && b.as_slice()[5] == 42;
            if !same {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            same
        });
        assert!(reused, "a dropped large buffer is reused");
        let small = Buffer::new(10);
        assert_eq!(small.as_slice(), &[0u8; 10]);
        assert!(Buffer::new(0).is_empty());
    }

    #[test]
    fn impossible_sizes_fail_without_aborting() {
        assert!(Buffer::try_new(usize::MAX - 3).is_none());
        assert!(Buffer::try_new(isize::MAX as usize).is_none());
    }
}
