//! Columnar columns: a table's scalar and text columns stored as chunks of
//! many values (see `docs/format.md`, "Columnar columns").
//!
//! A records-layout column is a store: one zstd frame and one 16-byte
//! location per row, right for tensors that are read one by one and wrong
//! for a label or a caption of a few bytes. A columnar column is one file,
//! `column.zc`, in the column's directory: chunks of about 64 KiB of
//! decoded values, checksummed and described in the footer by their rows,
//! null count, and minimum and maximum. Version 3 (what this release
//! writes) stores every stream raw: integers packed, floats plain, text in
//! groups of 64 values coded with the file's symbol table, and an index of
//! group starts and block checksums, so that a random row is read in place
//! at the cost of its own bytes. Readers prune chunks by their statistics,
//! decode whole chunks into Arrow arrays for scans, and keep decoded chunks
//! within one budget for the process that evicts by recency.
//!
//! - `format`: the bytes (footer, entries, bounds);
//! - `encode` / `decode`: one chunk; `fsst`: the symbol table;
//! - [`ColumnWriter`]: writes one column file;
//! - `file::ColumnFile`: one open file (its chunks decoded, or read in
//!   place); `kept`: the chunks the process keeps decoded;
//! - [`Columnar`]: a table's column (files of every shard end to end, a
//!   selection of rows), read through [`crate::Records`].

#[cfg(feature = "arrow")]
mod arrow;
mod column;
mod decode;
mod encode;
mod file;
mod format;
mod fsst;
mod kept;
mod num;
#[cfg(feature = "arrow")]
mod pred;
mod writer;

// The product: columns, their writer, their kinds, predicates over them.
// The engine (chunks, footers, bounds, numbers, the budget of kept chunks)
// stays inside the crate.
pub use column::{logical_of, schema_of, Columnar, ValidityView};
pub use format::{ValueKind, COLUMN_FILE};
pub use kept::kept_bytes;
#[cfg(feature = "arrow")]
pub use pred::{intersect, union, Cmp, CmpOp, FloatOrder, Lit, Pred, RowRanges, TextOp};
pub use writer::ColumnWriter;

pub(crate) use decode::{Aligned, Decoded as KeptDecoded};
#[cfg(feature = "remote")]
pub(crate) use file::OPEN_TAIL_BYTES;
pub(crate) use file::{file_version, is_column_dir, ColumnFile};
pub(crate) use format::VERSION as FORMAT_VERSION;
pub(crate) use kept::{aligned, KeptValues};
#[cfg(feature = "arrow")]
pub(crate) use pred::compare_array;
pub(crate) use writer::write_records;

#[cfg(test)]
mod tests;
