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

use std::fs::{File, TryLockError};
use std::ops::Deref;

/// An open `meta.zr` holding the store's lock; derefs to the [`File`].
pub(crate) struct LockedMeta {
    file: File,
    /// Process that took the lock; only it releases the lock.
    owner_pid: u32,
}

impl LockedMeta {
    /// Takes a non-blocking exclusive lock on `file` (a writer).
    pub(crate) fn try_exclusive(file: File) -> Result<LockedMeta, TryLockError> {
        file.try_lock()?;
        Ok(LockedMeta::owned(file))
    }

    /// Takes a non-blocking shared lock on `file` (a read-only handle).
    pub(crate) fn try_shared(file: File) -> Result<LockedMeta, TryLockError> {
        file.try_lock_shared()?;
        Ok(LockedMeta::owned(file))
    }

    fn owned(file: File) -> LockedMeta {
        LockedMeta {
            file,
            owner_pid: std::process::id(),
        }
    }
}

impl Deref for LockedMeta {
    type Target = File;

    fn deref(&self) -> &File {
        &self.file
    }
}

impl Drop for LockedMeta {
    fn drop(&mut self) {
        if std::process::id() == self.owner_pid {
            // Best effort: closing the descriptor below releases the lock
            // too, unless a forked child still shares it.
            let _ = self.file.unlock();
        }
    }
}
