//! What a loader hands over: one step's batch, and the provenance of a
//! range of steps.

use crate::read::buffer::Buffer;
use crate::read::ragged::RaggedBatch;

/// The rows of a range of steps, as [`DataLoader::provenance`] lists them:
/// one entry per row, in step order, then rank, then row.
#[derive(Debug, Default)]
pub struct Provenance {
    pub steps: Vec<u64>,
    pub ranks: Vec<u32>,
    pub rows: Vec<u32>,
    pub records: Vec<u64>,
    /// A mixture's: each row's source.
    pub sources: Option<Vec<u16>>,
}

/// One stream of a batch.
#[derive(Debug)]
pub enum BatchColumn {
    /// A dense store's records, back to back (`batch_size` records).
    Dense(Buffer),
    /// A ragged store's records.
    Ragged(RaggedBatch),
    /// The column as Arrow data ([`Output::Arrow`]), with its field.
    #[cfg(feature = "arrow")]
    Arrow(arrow_schema::Field, arrow_array::ArrayRef),
}

/// One step's batch: every stream gathered at the same indices.
#[derive(Debug)]
pub struct Batch {
    pub step: u64,
    /// The records gathered (after the subset mapping and the rank slice).
    pub indices: Vec<u64>,
    /// One column per stream, in stream order.
    pub columns: Vec<BatchColumn>,
    /// Per stream, with array output: the validity of a nullable column at
    /// `indices` (one byte per record, 0 for null), else None. Arrow output
    /// carries nulls in the arrays themselves.
    pub validity: Vec<Option<Buffer>>,
    /// A mixture's batch: each row's source (its position among the
    /// sources); `indices` are then records within each row's source.
    pub sources: Option<Vec<u16>>,
    /// Columns placed after the streams': a decoded column's `<name>_ok`
    /// (one bool byte per row) with [`crate::image::OnError::Zeros`].
    pub extra: Vec<(String, BatchColumn)>,
}
