//! Tables: named columns of one length, plain or sharded (see
//! `docs/format.md`, "Tables").
//!
//! A *plain* table is a directory whose store subdirectories are its
//! columns, typed by `table.json` ([`types`]): text, binary and nullable
//! columns. A *sharded* table is a directory of plain tables (its shards)
//! plus `manifest.json` ([`manifest`]) naming the committed shards in
//! order. Every write goes through [`TableWrite`] (`write/`): it names,
//! fills, checks and (for a bucket) uploads shards, then makes a set of
//! them visible at once with one commit of the manifest; a user filling
//! shards by hand uses [`new_shard`] and [`commit_shards`], the same
//! commit.
//!
//! [`Table::open`] opens either with one call. Its [`Column`]s read as the
//! table presents them (logical type and validity applied): they are
//! [`Records`](crate::Records) and
//! [`StoreAccess`](crate::StoreAccess), so they gather, convert to
//! Arrow (`crate::arrow`) and feed the [`DataLoader`](crate::DataLoader).
//!
//! ```no_run
//! use loaderx::table::Table;
//! let table = Table::open("data/train", true)?;
//! let label = table.column("label").unwrap();
//! # Ok::<(), loaderx::Error>(())
//! ```

#[cfg(feature = "remote")]
mod copy;
mod files;
mod keys;
// The on-disk documents of a table (manifest.json, table.json, the
// version files) and their constants: the binding, the connectors and the
// format tests read them; the product API is `Table` and the writes below.
#[doc(hidden)]
pub mod manifest;
mod open;
mod shard;
#[doc(hidden)]
pub mod types;
#[doc(hidden)]
pub mod versions;
mod warm;
mod write;

#[cfg(feature = "remote")]
pub use copy::{copy_table, Progress};
// The names of the format's files and directories (docs/format.md): for
// the format tests and the binding, not product API.
#[doc(hidden)]
pub use files::{INCOMPLETE, LEASES_DIR};
#[doc(hidden)]
pub use manifest::{
    is_shard_name, shard_dir, ColumnGroup, ShardEntry, MANIFEST_FILE, MANIFEST_FORMAT,
    MANIFEST_LOCK, SELF_SHARD,
};
pub use manifest::{is_sharded, Manifest};
// The key lookup of the edits by key, for the binding: not product API.
#[doc(hidden)]
pub use keys::key_index;
pub use open::{open_columns, Column, Shard, Stream, Table};
pub use shard::{column_names, shard_schema, ColumnSpec, ShardSchema};
pub use types::{read_types, write_types, ColumnLayout, ColumnType, Layouts};
#[doc(hidden)]
pub use types::{validity_dir, TABLE_FILE, VALIDITY_DIR};
pub use versions::{metadata, read_manifest, VersionRef, View};
#[doc(hidden)]
pub use versions::{TAGS_DIR, VERSIONS_DIR, VIEWS_DIR};
#[cfg(feature = "remote")]
pub(crate) use write::publish_at;
pub use write::{
    cleanup, compact, delete_rows, delete_where, drop_columns, drop_view, list_versions,
    list_views, make_versioned, replace_view, save_view, save_view_set, split, tag, tags, untag,
    Basis, ColumnsWrite, TableWrite, WriteMode, WrittenShard,
};
pub use write::{commit_shards, new_shard};
// The reclaim of dead writers' leftovers with another age floor than an
// hour, for the tests of it (a bucket's objects cannot be made to look
// old); not product API.
#[doc(hidden)]
pub use write::{cleanup_leaving, Leftovers};
