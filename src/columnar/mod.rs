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
//! within a per-process budget (`file::keep_budget`).
//!
//! - `format`: the bytes (footer, entries, bounds);
//! - [`ColumnWriter`]: writes one column file;
//! - `file::ColumnFile`: one open file (its chunks decoded and kept);
//! - [`Columnar`]: a table's column (files of every shard end to end, a
//!   selection of rows), read through [`crate::Records`].

#[cfg(feature = "arrow")]
mod arrow;
mod column;
mod decode;
mod encode;
mod file;
mod format;
mod num;
#[cfg(feature = "arrow")]
mod pred;
mod writer;

// The product: columns, their writer, their kinds, predicates over them.
// The engine (chunks, footers, bounds, numbers, the budget of kept chunks)
// stays inside the crate.
pub use column::{logical_of, schema_of, Columnar, ValidityView};
pub use file::kept_bytes;
pub use format::{ValueKind, COLUMN_FILE};
#[cfg(feature = "arrow")]
pub use pred::{intersect, union, Cmp, CmpOp, FloatOrder, Lit, Pred, RowRanges, TextOp};
pub use writer::ColumnWriter;

#[cfg(feature = "remote")]
pub(crate) use file::OPEN_TAIL_BYTES;
pub(crate) use file::{is_column_dir, ColumnFile};
#[cfg(feature = "arrow")]
pub(crate) use pred::compare_array;
pub(crate) use writer::write_records;

#[cfg(test)]
mod tests;
