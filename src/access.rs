//! Borrowing records for the length of one call.
//!
//! Readers that outlive the caller's borrow (the [`crate::loader`]'s
//! producer threads, Arrow table and column readers, the SQL and Parquet
//! connectors) hold something that lends [`Records`] on demand rather than
//! the records themselves: a plain `&Store` or `Arc<Store>`, a
//! [`Concat`] (a sharded table's column), or a binding's handle that takes
//! its own lock (and refuses a closed store) around each call.

use std::path::Path;
use std::sync::Arc;

use crate::buffer::Buffer;
use crate::codec::Codec;
use crate::concat::Concat;
use crate::error::{Kind, Result};
use crate::schema::{Logical, Schema};
use crate::store::{RaggedBatch, ReadCounters, Stats, Store};

/// The indices of one gather: unsigned, or signed (negative ones fail with
/// `IndexOutOfRange`, as the bindings pass them).
#[derive(Clone, Copy, Debug)]
pub enum Indices<'a> {
    U64(&'a [u64]),
    I64(&'a [i64]),
}

impl Indices<'_> {
    pub fn len(&self) -> usize {
        match self {
            Indices::U64(v) => v.len(),
            Indices::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a> From<&'a [u64]> for Indices<'a> {
    fn from(v: &'a [u64]) -> Self {
        Indices::U64(v)
    }
}

impl<'a> From<&'a [i64]> for Indices<'a> {
    fn from(v: &'a [i64]) -> Self {
        Indices::I64(v)
    }
}

impl<'a> From<&'a Vec<u64>> for Indices<'a> {
    fn from(v: &'a Vec<u64>) -> Self {
        Indices::U64(v)
    }
}

impl<'a> From<&'a Vec<i64>> for Indices<'a> {
    fn from(v: &'a Vec<i64>) -> Self {
        Indices::I64(v)
    }
}

impl<'a, const N: usize> From<&'a [u64; N]> for Indices<'a> {
    fn from(v: &'a [u64; N]) -> Self {
        Indices::U64(v)
    }
}

impl<'a, const N: usize> From<&'a [i64; N]> for Indices<'a> {
    fn from(v: &'a [i64; N]) -> Self {
        Indices::I64(v)
    }
}

/// Calls `$f` with the indices as a typed slice.
macro_rules! with_indices {
    ($idx:expr, |$v:ident| $body:expr) => {
        match $idx {
            Indices::U64($v) => $body,
            Indices::I64($v) => $body,
        }
    };
}

/// What every reader needs of a sequence of records: a [`Store`] or a
/// [`Concat`] of stores.
pub trait Records: Send + Sync {
    /// What errors and Arrow fields name: a store's directory, or a
    /// sharded column's path.
    fn path(&self) -> &Path;
    fn schema(&self) -> &Schema;
    fn kind(&self) -> Kind {
        self.schema().kind()
    }
    fn codec(&self) -> Codec;
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Logical bytes of record `i`, `None` past the end.
    fn logical_len(&self, i: u64) -> Option<usize>;
    fn stats(&self) -> Stats;
    fn read_counters(&self) -> ReadCounters;
    /// Whether writes are refused ([`Concat`]s always refuse them).
    fn is_readonly(&self) -> bool;
    /// Whether new zstd frames carry a content checksum.
    fn checksum(&self) -> bool;
    /// See [`Store::gather_dense_into`].
    fn gather_dense_into(&self, idx: Indices<'_>, dst: &mut [u8]) -> Result<()>;
    /// See [`Store::gather_dense`].
    fn gather_dense(&self, idx: Indices<'_>) -> Result<Buffer>;
    /// See [`Store::gather_ragged`].
    fn gather_ragged(&self, idx: Indices<'_>) -> Result<RaggedBatch>;
    /// See [`Store::read_record`].
    fn read_record(&self, i: u64) -> Result<Vec<u8>>;
    /// How a table presents the records ([`Logical::Tensor`] for a bare
    /// store; see [`Typed`]).
    fn logical(&self) -> Logical {
        Logical::Tensor
    }
    /// The validity stream of a nullable column (one `bool` per record,
    /// false for null), None for a column without nulls.
    fn validity(&self) -> Option<&dyn Records> {
        None
    }
}

/// Records presented as a table's logical type (text or binary values of a
/// ragged `uint8` store): everything else is the inner records'.
pub struct Typed<'a> {
    records: &'a dyn Records,
    logical: Logical,
    validity: Option<&'a dyn Records>,
}

impl<'a> Typed<'a> {
    /// Fails when `records` cannot hold `logical` (see [`Logical::check`]).
    pub fn new(records: &'a dyn Records, logical: Logical) -> Result<Typed<'a>> {
        logical.check(records.schema())?;
        Ok(Typed {
            records,
            logical,
            validity: None,
        })
    }

    /// With the validity stream `validity`: dense `bool` scalars, one per
    /// record.
    pub fn with_validity(mut self, validity: &'a dyn Records) -> Result<Typed<'a>> {
        check_validity(self.records, validity)?;
        self.validity = Some(validity);
        Ok(self)
    }
}

/// Checks that `validity` is a validity stream for `records`.
pub fn check_validity(records: &dyn Records, validity: &dyn Records) -> Result<()> {
    use crate::error::Error;
    let want = Schema::dense(crate::schema::DType::Bool, &[])?;
    if *validity.schema() != want {
        return Err(Error::corrupted(
            validity.path(),
            format!(
                "a validity stream holds dense bool scalars, found {}",
                validity.schema()
            ),
        ));
    }
    if validity.len() != records.len() {
        return Err(Error::corrupted(
            validity.path(),
            format!(
                "the validity stream has {} rows, but its column {} has {}",
                validity.len(),
                records.path().display(),
                records.len()
            ),
        ));
    }
    Ok(())
}

impl Records for Typed<'_> {
    fn path(&self) -> &Path {
        self.records.path()
    }
    fn schema(&self) -> &Schema {
        self.records.schema()
    }
    fn codec(&self) -> Codec {
        self.records.codec()
    }
    fn len(&self) -> u64 {
        self.records.len()
    }
    fn logical_len(&self, i: u64) -> Option<usize> {
        self.records.logical_len(i)
    }
    fn stats(&self) -> Stats {
        self.records.stats()
    }
    fn read_counters(&self) -> ReadCounters {
        self.records.read_counters()
    }
    fn is_readonly(&self) -> bool {
        self.records.is_readonly()
    }
    fn checksum(&self) -> bool {
        self.records.checksum()
    }
    fn gather_dense_into(&self, idx: Indices<'_>, dst: &mut [u8]) -> Result<()> {
        self.records.gather_dense_into(idx, dst)
    }
    fn gather_dense(&self, idx: Indices<'_>) -> Result<Buffer> {
        self.records.gather_dense(idx)
    }
    fn gather_ragged(&self, idx: Indices<'_>) -> Result<RaggedBatch> {
        self.records.gather_ragged(idx)
    }
    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        self.records.read_record(i)
    }
    fn logical(&self) -> Logical {
        self.logical
    }
    fn validity(&self) -> Option<&dyn Records> {
        self.validity
    }
}

/// A [`StoreAccess`] whose records a table presents as `logical`.
pub struct TypedAccess<S> {
    inner: S,
    logical: Logical,
}

impl<S: StoreAccess> TypedAccess<S> {
    /// Fails when the records cannot hold `logical`.
    pub fn new(inner: S, logical: Logical) -> Result<TypedAccess<S>> {
        inner.with(|r| logical.check(r.schema()))?;
        Ok(TypedAccess { inner, logical })
    }
}

impl<S: StoreAccess> StoreAccess for TypedAccess<S> {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T> {
        let logical = self.logical;
        self.inner.with(|r| {
            f(&Typed {
                records: r,
                logical,
                validity: None,
            })
        })
    }
}

impl Records for Store {
    fn path(&self) -> &Path {
        Store::path(self)
    }
    fn schema(&self) -> &Schema {
        Store::schema(self)
    }
    fn codec(&self) -> Codec {
        Store::codec(self)
    }
    fn len(&self) -> u64 {
        Store::len(self)
    }
    fn logical_len(&self, i: u64) -> Option<usize> {
        Store::logical_len(self, i)
    }
    fn stats(&self) -> Stats {
        Store::stats(self)
    }
    fn read_counters(&self) -> ReadCounters {
        Store::read_counters(self)
    }
    fn is_readonly(&self) -> bool {
        Store::is_readonly(self)
    }
    fn checksum(&self) -> bool {
        Store::checksum(self)
    }
    fn gather_dense_into(&self, idx: Indices<'_>, dst: &mut [u8]) -> Result<()> {
        with_indices!(idx, |v| Store::gather_dense_into(self, v, dst))
    }
    fn gather_dense(&self, idx: Indices<'_>) -> Result<Buffer> {
        with_indices!(idx, |v| Store::gather_dense(self, v))
    }
    fn gather_ragged(&self, idx: Indices<'_>) -> Result<RaggedBatch> {
        with_indices!(idx, |v| Store::gather_ragged(self, v))
    }
    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        Store::read_record(self, i)
    }
}

impl Records for Concat {
    fn path(&self) -> &Path {
        Concat::path(self)
    }
    fn schema(&self) -> &Schema {
        Concat::schema(self)
    }
    fn codec(&self) -> Codec {
        Concat::codec(self)
    }
    fn len(&self) -> u64 {
        Concat::len(self)
    }
    fn logical_len(&self, i: u64) -> Option<usize> {
        Concat::logical_len(self, i)
    }
    fn stats(&self) -> Stats {
        Concat::stats(self)
    }
    fn read_counters(&self) -> ReadCounters {
        Concat::read_counters(self)
    }
    fn is_readonly(&self) -> bool {
        true
    }
    fn checksum(&self) -> bool {
        self.parts().iter().all(Store::checksum)
    }
    fn gather_dense_into(&self, idx: Indices<'_>, dst: &mut [u8]) -> Result<()> {
        with_indices!(idx, |v| Concat::gather_dense_into(self, v, dst))
    }
    fn gather_dense(&self, idx: Indices<'_>) -> Result<Buffer> {
        with_indices!(idx, |v| Concat::gather_dense(self, v))
    }
    fn gather_ragged(&self, idx: Indices<'_>) -> Result<RaggedBatch> {
        with_indices!(idx, |v| Concat::gather_ragged(self, v))
    }
    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        Concat::read_record(self, i)
    }
}

/// Something that lends [`Records`] for a moment: `&Store`, `Arc<Store>`,
/// `&Concat`, `Arc<Concat>`, or a binding's handle. Lets readers outlive the
/// caller's borrow.
pub trait StoreAccess: Send + Sync {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T>;
}

impl StoreAccess for &Store {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T> {
        f(*self)
    }
}

impl StoreAccess for Arc<Store> {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T> {
        f(&**self)
    }
}

impl StoreAccess for &Concat {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T> {
        f(*self)
    }
}

impl StoreAccess for Arc<Concat> {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T> {
        f(&**self)
    }
}

impl<S: StoreAccess> StoreAccess for &S {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T> {
        (*self).with(f)
    }
}
