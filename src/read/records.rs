//! Readable records: the one trait every reader of records implements.
//!
//! [`Records`] is what gathers, Arrow views, the loader, dictionary
//! training and the connectors read: a [`Store`](crate::Store), a
//! [`Concat`](crate::Concat) of read-only stores (a sharded table's column)
//! or a [`Typed`] view of either (text, binary, nullable columns). Each
//! implements it once.
//!
//! Readers that outlive the caller's borrow (the loader's producer threads,
//! Arrow table and column readers, the SQL and Parquet connectors) hold a
//! [`StoreAccess`]: something that lends [`Records`] for the length of one
//! call (a plain `&Store` or `Arc<Store>`, or a binding's handle that takes
//! its own lock, and refuses a closed store, around each call).

use std::path::Path;
use std::sync::Arc;

use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::read::buffer::Buffer;
use crate::read::ragged::RaggedBatch;
use crate::schema::Kind;
use crate::schema::{DType, Logical, Schema};

/// The indices of one gather as a caller holds them: unsigned, or signed
/// (as the bindings pass them; a negative one is out of range).
#[derive(Clone, Copy, Debug)]
pub enum Indices<'a> {
    U64(&'a [u64]),
    I64(&'a [i64]),
}

impl<'a> Indices<'a> {
    pub fn len(&self) -> usize {
        match self {
            Indices::U64(v) => v.len(),
            Indices::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The indices as the `u64`s a gather takes, without a copy. Signed
    /// indices are checked here: the first one outside `0..len` (a
    /// negative one included) fails with [`Error::IndexOutOfRange`].
    /// Unsigned ones pass as they are; the gather checks them.
    pub fn resolve(self, len: u64) -> Result<&'a [u64]> {
        match self {
            Indices::U64(v) => Ok(v),
            Indices::I64(v) => {
                if let Some(&bad) = v.iter().find(|&&i| i < 0 || i as u64 >= len) {
                    return Err(Error::IndexOutOfRange {
                        index: bad as i128,
                        len,
                    });
                }
                // SAFETY: i64 and u64 have the same size and alignment and
                // every bit pattern is valid for both; every value is
                // non-negative (checked above), so it reads as the same
                // number. The slice keeps `v`'s lifetime.
                Ok(unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u64>(), v.len()) })
            }
        }
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

/// Space accounting reported by [`Records::stats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    pub records: u64,
    /// Stored bytes of live records.
    pub live_bytes: u64,
    /// Committed payload extent of `data.zr`.
    pub data_bytes: u64,
    /// `data_bytes - live_bytes`: what [`Store::compact`](crate::Store::compact) would free.
    pub reclaimable: u64,
    /// Live records stored uncompressed: every record of a `raw` store;
    /// in a zstd store, the records stored as frames of raw blocks (those
    /// zstd did not shrink by a sixteenth), which read as copies.
    pub raw_records: u64,
}

impl Stats {
    /// `records` records that take no stored bytes of their own (a view
    /// over values held elsewhere).
    pub fn of_records(records: u64) -> Stats {
        Stats {
            records,
            live_bytes: 0,
            data_bytes: 0,
            reclaimable: 0,
            raw_records: 0,
        }
    }
}

/// `InvalidValue` unless `dst` holds `n` records of `width` bytes: the
/// check of every dense gather into a caller's buffer.
pub(crate) fn check_dense_dst(n: usize, width: usize, dst: usize) -> Result<()> {
    if dst != n * width {
        return Err(Error::InvalidValue(format!(
            "a gather of {n} records of {width} bytes needs {} bytes, got {dst}",
            n * width
        )));
    }
    Ok(())
}

/// How much a handle has read (for tests and tooling: proves what a query
/// touched, without timing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCounters {
    /// Records gathered.
    pub records: u64,
    /// Logical bytes gathered.
    pub bytes: u64,
}

/// A sequence of records that can be read: a [`Store`](crate::Store), a [`Concat`](crate::Concat) of
/// stores, or a [`Typed`] view of either.
///
/// Gathers take any indices in `0..len`, in any order, duplicates allowed;
/// the first index outside fails with [`Error::IndexOutOfRange`] (signed
/// indices go through [`Indices::resolve`] first).
pub trait Records: Send + Sync {
    /// What errors and Arrow fields name: a store's directory, or a
    /// sharded column's path.
    fn path(&self) -> &Path;
    fn schema(&self) -> &Schema;
    fn kind(&self) -> Kind {
        self.schema().kind()
    }
    /// The codec (of a concatenation: its first part's; each part decodes
    /// its own).
    fn codec(&self) -> Codec;
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Logical bytes of record `i` (dense: the record; ragged: prefix and
    /// payload), `None` past the end.
    fn logical_len(&self, i: u64) -> Option<usize>;
    /// Space accounting (summed over a concatenation's parts).
    fn stats(&self) -> Stats;
    /// Records and logical bytes gathered through this reader so far.
    fn read_counters(&self) -> ReadCounters;
    /// Whether writes are refused ([`Concat`](crate::Concat)(crate::Concat)s always refuse them).
    fn is_readonly(&self) -> bool;
    /// Whether new zstd frames carry a content checksum.
    fn checksum(&self) -> bool;
    /// Gathers dense records `idx` into `dst`, which must hold exactly
    /// `idx.len()` records; each decodes straight into its place.
    fn gather_dense_into(&self, idx: &[u64], dst: &mut [u8]) -> Result<()>;
    /// Gathers dense records into a new buffer.
    fn gather_dense(&self, idx: &[u64]) -> Result<Buffer> {
        let width = dense_width(self.path(), self.schema())?;
        let mut buf = idx
            .len()
            .checked_mul(width)
            .and_then(Buffer::try_new)
            .ok_or_else(|| Error::OutOfMemory {
                bytes: (idx.len() as u64).saturating_mul(width as u64),
                what: format!("a gather of {} records", idx.len()),
            })?;
        self.gather_dense_into(idx, buf.as_mut_slice())?;
        Ok(buf)
    }
    /// Gathers ragged records `idx` into one buffer of 8-byte aligned
    /// records.
    fn gather_ragged(&self, idx: &[u64]) -> Result<RaggedBatch>;
    /// The logical bytes of one record.
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
    /// The column itself when it is a columnar column (chunks of many
    /// values), for readers with a faster path for those.
    fn columnar(&self) -> Option<&crate::columnar::Columnar> {
        None
    }
    /// The column itself when it is one with patches laid over it
    /// ([`crate::read::Overlay`]), for readers that read those by
    /// whole arrays.
    fn overlay(&self) -> Option<&crate::read::Overlay> {
        None
    }
    /// Whether the records are stored as a columnar column: one read as
    /// such ([`Records::columnar`]), or one with patches laid over it,
    /// which reads as records until a compaction folds them.
    fn stored_columnar(&self) -> bool {
        self.columnar().is_some()
    }
}

/// Records presented as a table's logical type (text or binary values of a
/// ragged `uint8` store), optionally with a validity stream: everything
/// else is the inner records'.
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
    let want = Schema::dense(DType::Bool, &[])?;
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
    fn gather_dense_into(&self, idx: &[u64], dst: &mut [u8]) -> Result<()> {
        self.records.gather_dense_into(idx, dst)
    }
    fn gather_dense(&self, idx: &[u64]) -> Result<Buffer> {
        self.records.gather_dense(idx)
    }
    fn gather_ragged(&self, idx: &[u64]) -> Result<RaggedBatch> {
        self.records.gather_ragged(idx)
    }
    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        self.records.read_record(i)
    }
    fn logical(&self) -> Logical {
        self.logical
    }
    fn validity(&self) -> Option<&dyn Records> {
        self.validity.or_else(|| self.records.validity())
    }
    fn columnar(&self) -> Option<&crate::columnar::Columnar> {
        self.records.columnar()
    }
    fn stored_columnar(&self) -> bool {
        self.records.stored_columnar()
    }
    fn overlay(&self) -> Option<&crate::read::Overlay> {
        self.records.overlay()
    }
}

/// Something that lends [`Records`] for the length of one call: `&Store`,
/// `&Concat` (implemented beside them), an `Arc` of any records, or a
/// binding's handle (which takes
/// its lock around the call). Lets readers outlive the caller's borrow.
pub trait StoreAccess: Send + Sync {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T>;
}

impl<R: Records> StoreAccess for Arc<R> {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T> {
        f(&**self)
    }
}

impl<S: StoreAccess> StoreAccess for &S {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T> {
        (*self).with(f)
    }
}

/// Bytes per record of dense records at `path`; fails for ragged ones.
pub(crate) fn dense_width(path: &Path, schema: &Schema) -> Result<usize> {
    schema.record_width().map(|w| w as usize).ok_or_else(|| {
        Error::InvalidValue(format!(
            "{} is a ragged store, not a dense store",
            path.display()
        ))
    })
}
