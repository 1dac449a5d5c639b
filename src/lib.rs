//! loaderx core: the Zrecord record store, tables of stores and columnar
//! columns (local or in a bucket, versioned), its sampler and loader.
//!
//! A store is a directory holding `meta.zr` (a 4096-byte header/schema page
//! followed by a table of 16-byte record locations), `data.zr` (record
//! payloads) and, for the `zstd_dict` codec, `dict.zr`. A table's scalar and
//! text columns may instead be [`columnar`]: one `column.zc` of chunks of
//! many values. The byte layouts are specified in `docs/format.md`.
//!
//! Training reads stores through the [`sampler`] (each step's indices, a pure
//! function of the step) and the [`loader`] ([`DataLoader`]: every stream
//! gathered at the same indices, prefetched ahead, handed over in step
//! order), over anything that lends [`Records`] ([`StoreAccess`]): a
//! [`Store`], or a [`Concat`] of read-only stores end to end (the column of
//! a sharded table).
//!
//! The crate is built in layers, each a private module: `format` (the
//! on-disk layout of meta.zr and its journal), `io` (the storage seam:
//! local files, locks, fault injection, and object stores under the
//! `remote` feature), `codec` (record codecs and dictionaries), `store` (the
//! engine: open and recovery, append, the gather kernel, delete, compact,
//! commit), `read` (the [`Records`] trait, buffers, ragged records, the
//! concatenation of stores). The public API
//! is re-exported here, plus the [`arrow`], [`sampler`], [`loader`],
//! [`dict`], [`executor`], [`error`], [`schema`] and [`table`] namespaces.
//!
//! A table or store may live on an object store too ([`Location`]: `s3://`,
//! `gs://`, `az://`, `http(s)://`, with the `remote` feature and one
//! feature per cloud): it opens read-only, and gathers plan their own
//! range requests (with an optional local block cache).
//!
//! What a Rust user needs, by task:
//!
//! - **open** a store ([`Store::open`], [`Store::open_readonly`],
//!   [`Store::open_at`] for a [`Location`]; [`Store::require_kind`] where
//!   it must be dense or ragged) or a table
//!   ([`table::Table::open`], [`table::Table::open_at`]);
//! - **gather** records at any indices in one call ([`Records`]: dense into
//!   one [`Buffer`], ragged into a [`RaggedBatch`]);
//! - **scan** a table or stores as Arrow record batches ([`arrow::Scan`],
//!   with the `arrow` feature);
//! - **load** batches by step ([`sampler`], [`DataLoader`]) and **resume** a
//!   run from its saved state ([`loader::LoaderState`]: `DataLoader::state`,
//!   `load_state`, `from_state`);
//! - **write** stores ([`Store::create`], `append_dense`, `append_ragged`)
//!   and tables: Arrow into a plain table ([`arrow::ingest`]), shards into a
//!   sharded table, locally or in a bucket, through the one write path
//!   ([`table::TableWrite`]: begin, write shards, commit) or by hand
//!   ([`table::new_shard`], [`table::commit_shards`]), and whole tables
//!   between locations (`table::copy_table`, with the `remote` feature).
//!
//! This crate is pure Rust: the Python bindings live in `python/` and the
//! DataFusion and Parquet connectors in `connectors/`.

#[cfg(not(target_endian = "little"))]
compile_error!("loaderx stores are little-endian; big-endian hosts are not supported");

#[cfg(feature = "arrow")]
pub mod arrow;
mod codec;
pub mod columnar;
pub mod error;
pub mod executor;
mod flag;
mod format;
mod hash;
#[cfg(feature = "image")]
pub mod image;
mod io;
mod kind;
pub mod loader;
pub mod pack;
mod per_process;
mod read;
mod repr;
pub mod sampler;
pub mod schema;
mod store;
pub mod table;

pub use codec::{dict, is_raw_frame, raw_frame, raw_frame_len, Codec};
pub use error::{Error, Result};
pub use format::MAX_RECORD_BYTES;
// A record's 16-byte entry in meta.zr: `Store::loc` hands it to the
// format tests and fuzzers, which read meta.zr by hand; not product API.
#[doc(hidden)]
pub use format::RecordLoc;
#[cfg(feature = "fault-injection")]
pub use io::fault;
#[cfg(feature = "remote")]
pub use io::remote::{remote_stats, RemoteStats};
#[cfg(feature = "remote")]
pub use io::CACHE_BLOCK;
pub use io::{CacheOptions, Location};
pub use loader::DataLoader;
pub use read::{
    check_validity, Buffer, Concat, Indices, Packed, RaggedBatch, RaggedRecord, ReadCounters,
    Records, Stats, StoreAccess, Typed,
};
// The sample a dictionary is trained on, drawn from a store: what the
// binding's `train_dict` calls; not product API.
#[doc(hidden)]
pub use read::sample_store;
pub use schema::{DType, Kind, Layout, Logical, Schema};
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub use store::set_compact_steps_for_tests;
pub use store::{RecordIndex, Store};
// Whole-store reads in bounded chunks, for the DataFusion and Parquet
// connectors (crates of their own); not product API.
#[doc(hidden)]
pub use store::streaming;
