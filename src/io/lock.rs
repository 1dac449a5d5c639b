//! The store lock: a `flock` on `meta.zr` that a `fork()`ed child does not
//! keep.
//!
//! `flock` locks belong to the open file description, which a forked child
//! shares with its parent through the inherited descriptor. Merely closing
//! the parent's descriptor therefore leaves the lock held for as long as any
//! child (a persistent torch DataLoader worker, say) still has its copy, and
//! the parent's own reopen fails with `StoreBusy`. So the process that took
//! the lock releases it explicitly (`LOCK_UN`) when its handle goes: that
//! unlocks the shared description for every holder at once. A child's copy
//! of the handle never unlocks (that would release its parent's lock) and
//! only closes its descriptor.
//!
//! Writers take the lock exclusively, read-only handles shared: any number
//! of readers, in any number of processes, or one writer. A shared lock is
//! released the same way (by its owner, explicitly), and only ever releases
//! the open file description it was taken on: other readers keep theirs.

use std::fs::TryLockError;
use std::ops::Deref;

use super::StorageFile;

/// An open `meta.zr` holding the store's lock; derefs to the file.
pub(crate) struct LockedMeta<F: StorageFile> {
    file: F,
    /// Process that took the lock; only it releases the lock.
    owner_pid: u32,
}

impl<F: StorageFile> LockedMeta<F> {
    /// Takes a non-blocking lock on `file`: shared for a read-only handle,
    /// else exclusive (a writer).
    pub(crate) fn try_lock(file: F, shared: bool) -> Result<LockedMeta<F>, TryLockError> {
        file.try_lock(shared)?;
        Ok(LockedMeta {
            file,
            owner_pid: std::process::id(),
        })
    }
}

impl<F: StorageFile> Deref for LockedMeta<F> {
    type Target = F;

    fn deref(&self) -> &F {
        &self.file
    }
}

impl<F: StorageFile> Drop for LockedMeta<F> {
    fn drop(&mut self) {
        if std::process::id() == self.owner_pid {
            // Best effort: closing the descriptor below releases the lock
            // too, unless a forked child still shares it.
            let _ = self.file.unlock();
        }
    }
}
