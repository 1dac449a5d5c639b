//! A value of the calling process, made on first use and made again in a
//! `fork()`ed child ([`PerProcess`]): the worker pool, the I/O and SQL
//! runtimes and each bucket client are one each.
//!
//! A child (a torch DataLoader worker, say) inherits the parent's value
//! but none of its threads or connections: the first use in the child sees
//! another process id and makes its own. The parent's value is leaked,
//! never dropped, since dropping it would wait on threads that do not exist
//! in the child.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, Ordering};

struct Slot<T> {
    pid: u32,
    value: T,
}

/// A value per process: see the module documentation.
pub struct PerProcess<T> {
    slot: AtomicPtr<Slot<T>>,
    _owns: PhantomData<Box<Slot<T>>>,
}

// SAFETY: the slot is published once per process through an atomic
// compare-exchange and only read through shared references afterwards, so
// sharing a PerProcess shares `&T` across threads (T: Sync) and may drop a
// T made on another thread (T: Send).
unsafe impl<T: Send + Sync> Sync for PerProcess<T> {}
// SAFETY: as above; moving the PerProcess moves the owned box with it.
unsafe impl<T: Send> Send for PerProcess<T> {}

impl<T> Default for PerProcess<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> PerProcess<T> {
    /// Empty: the first [`get_or_try_init`](Self::get_or_try_init) makes
    /// the value.
    pub const fn new() -> Self {
        PerProcess {
            slot: AtomicPtr::new(std::ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// This process's value, if made.
    pub fn get(&self) -> Option<&T> {
        let current = self.slot.load(Ordering::Acquire);
        // SAFETY: a pointer stored in `slot` comes from Box::into_raw and is
        // freed only by Drop (which has `&mut self`, so no reference of
        // ours is alive); one left by a parent process is leaked. It is
        // null or points to a live Slot for as long as `self` lives.
        let slot = unsafe { current.as_ref() }?;
        (slot.pid == std::process::id()).then_some(&slot.value)
    }

    /// This process's value, made with `make` when it has none yet (or
    /// only its parent's). When threads race, one value is kept and the
    /// others are dropped.
    pub fn get_or_try_init<E>(&self, make: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        if let Some(v) = self.get() {
            return Ok(v);
        }
        let pid = std::process::id();
        let fresh = Box::into_raw(Box::new(Slot {
            pid,
            value: make()?,
        }));
        let mut current = self.slot.load(Ordering::Acquire);
        loop {
            // SAFETY: as in `get`.
            if let Some(won) = unsafe { current.as_ref() }.filter(|s| s.pid == pid) {
                // Another thread of this process made one first.
                // SAFETY: `fresh` was never published: this thread owns it.
                drop(unsafe { Box::from_raw(fresh) });
                return Ok(&won.value);
            }
            match self
                .slot
                .compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // The slot replaced (if any) is a parent's: leaked, never
                // dropped.
                // SAFETY: `fresh` came from Box::into_raw and is now owned
                // by `slot`, freed only by Drop.
                Ok(_) => return Ok(unsafe { &(*fresh).value }),
                Err(now) => current = now,
            }
        }
    }
}

impl<T> Drop for PerProcess<T> {
    fn drop(&mut self) {
        let current = *self.slot.get_mut();
        if current.is_null() {
            return;
        }
        // SAFETY: from Box::into_raw, never freed before (see `get`).
        let owned = unsafe { Box::from_raw(current) };
        if owned.pid != std::process::id() {
            // A parent's value: its threads are not in this process.
            std::mem::forget(owned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PerProcess;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn one_value_per_process_whoever_races_to_make_it() {
        let made = AtomicUsize::new(0);
        let cell: PerProcess<Arc<u64>> = PerProcess::new();
        assert!(cell.get().is_none());
        let seen: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let (cell, made) = (&cell, &made);
                    s.spawn(move || {
                        let v = cell
                            .get_or_try_init(|| {
                                made.fetch_add(1, Ordering::SeqCst);
                                Ok::<_, ()>(Arc::new(i))
                            })
                            .unwrap();
                        Arc::as_ptr(v) as usize
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // Every thread sees the one value kept, whoever made it.
        assert!(seen.iter().all(|&p| p == seen[0]));
        assert!(made.load(Ordering::SeqCst) >= 1);
        let kept = cell.get().unwrap().clone();
        assert_eq!(Arc::as_ptr(&kept) as usize, seen[0]);
        // Dropping the cell drops this process's value (the test holds the
        // only other reference).
        drop(cell);
        assert_eq!(Arc::strong_count(&kept), 1);
    }

    #[test]
    fn a_failed_make_leaves_it_empty_and_is_tried_again() {
        let cell: PerProcess<u32> = PerProcess::new();
        assert_eq!(cell.get_or_try_init(|| Err("no")), Err("no"));
        assert!(cell.get().is_none());
        assert_eq!(cell.get_or_try_init(|| Ok::<_, &str>(7)), Ok(&7));
        assert_eq!(cell.get_or_try_init(|| Ok::<_, &str>(8)), Ok(&7));
    }
}
