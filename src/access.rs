//! Borrowing a store for the length of one call.
//!
//! Readers that outlive the caller's borrow (the [`crate::loader`]'s
//! producer threads, Arrow table and column readers, the SQL and Parquet
//! connectors) hold something that lends a [`Store`] on demand rather than
//! the store itself: a plain `&Store` or `Arc<Store>`, or a binding's handle
//! that takes its own lock (and refuses a closed store) around each call.

use std::sync::Arc;

use crate::error::Result;
use crate::store::Store;

/// Something that lends a [`Store`] for a moment: `&Store`, `Arc<Store>`, or
/// a binding's handle. Lets readers outlive the caller's borrow.
pub trait StoreAccess: Send + Sync {
    fn with<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T>;
}

impl StoreAccess for &Store {
    fn with<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        f(self)
    }
}

impl StoreAccess for Arc<Store> {
    fn with<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        f(self)
    }
}

impl<S: StoreAccess> StoreAccess for &S {
    fn with<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        (*self).with(f)
    }
}
