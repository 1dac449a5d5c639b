//! Columnar columns: a table's scalar and text columns stored as chunks of
//! many values (see `docs/format.md`, "Columnar columns").
//!
//! A records-layout column is a store: one zstd frame and one 16-byte
//! location per row, right for tensors that are read one by one and wrong
//! for a label or a caption of a few bytes. A columnar column is one file,
//! `column.zc`, in the column's directory: chunks of about 64 KiB of
//! decoded values (numbers byte-shuffled or narrowed to their span, text
//! as lengths and bytes), each compressed with zstd, checksummed, and
//! described in the footer by its rows, null count, and minimum and
//! maximum. Readers prune chunks by those statistics, decode whole chunks
//! into Arrow arrays, and gather rows at random from chunks kept decoded
//! within a per-process budget ([`keep_budget`]).
//!
//! - [`format`](mod@format): the bytes (footer, entries, bounds);
//! - [`ColumnWriter`]: writes one column file;
//! - [`ColumnFile`]: one open file (its chunks decoded and kept);
//! - [`Columnar`]: a table's column (files of every shard end to end, a
//!   selection of rows), read through [`crate::Records`].

#[cfg(feature = "arrow")]
mod arrow;
mod column;
mod decode;
mod encode;
mod file;
pub mod format;
mod num;
#[cfg(feature = "arrow")]
mod pred;
mod writer;

#[cfg(feature = "arrow")]
pub use arrow::{chunk_array, concat as concat_arrays};
pub use column::{logical_of, schema_of, Columnar, ValidityView};
pub use decode::Decoded;
pub(crate) use file::is_column_dir;
pub use file::{
    keep_budget, kept_bytes, ChunkRef, ColumnFile, DEFAULT_KEEP_BYTES, KEEP_ENV, OPEN_TAIL_BYTES,
};
pub use format::{Bound, Entry, Footer, ValueKind, COLUMN_FILE};
pub use num::Num;
#[cfg(feature = "arrow")]
pub use pred::{
    compare_array, intersect, union, Cmp, CmpOp, FloatOrder, Lit, Pred, RowRanges, TextOp,
};
pub(crate) use writer::write_records;
pub use writer::{ColumnWriter, CHUNK_BYTES, CHUNK_ROWS};

#[cfg(test)]
mod tests;
