//! loaderx core: the Zrecord persistent record store, its sampler and loader.
//!
//! A store is a directory holding `meta.zr` (a 4096-byte header/schema page
//! followed by a table of 16-byte record locations), `data.zr` (record
//! payloads) and, for the `zstd_dict` codec, `dict.zr`. The byte layout is
//! specified in `docs/format.md` and implemented in [`format`].
//!
//! Training reads stores through the [`sampler`] (each step's indices, a pure
//! function of the step) and the [`loader`] ([`DataLoader`]: every stream
//! gathered at the same indices, prefetched ahead, handed over in step
//! order), over anything that lends [`Records`] ([`StoreAccess`]):
//! a store, or a [`concat::Concat`] of read-only stores end to end (the
//! column of a sharded table).
//!
//! This crate is pure Rust: the Python bindings live in `python/` and the
//! DataFusion and Parquet connectors in `connectors/`.

#[cfg(not(target_endian = "little"))]
compile_error!("loaderx stores are little-endian; big-endian hosts are not supported");

pub mod access;
#[cfg(feature = "arrow")]
pub mod arrow;
pub mod buffer;
pub mod codec;
pub mod concat;
pub mod dict;
pub mod error;
pub mod executor;
pub mod fileio;
pub mod format;
mod gather;
pub mod journal;
pub mod loader;
mod lock;
pub mod prefetch;
pub mod ragged;
pub mod sampler;
pub mod schema;
pub mod store;
pub mod table;

pub use access::{Indices, Records, StoreAccess, Typed};
pub use buffer::Buffer;
pub use codec::Codec;
pub use error::{Error, Result};
pub use format::{Header, RecordLoc};
pub use loader::DataLoader;
pub use schema::{DType, Layout, Schema};
pub use store::{RaggedBatch, ReadCounters, Stats, Store};
