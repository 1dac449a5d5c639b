//! Reading records: the [`Records`] trait every reader implements, the
//! buffers gathers fill, ragged records, and the concatenation of stores.
//! The store engine sits between `records` (which it implements) and
//! `concat` (which joins stores); the batch gather kernel is the store's
//! own (`store::gather`).

pub(crate) mod buffer;
pub(crate) mod concat;
pub(crate) mod overlay;
mod patch;
pub(crate) mod ragged;
pub(crate) mod records;
mod sample;

pub use buffer::Buffer;
pub use concat::Concat;
pub use overlay::Overlay;
pub use ragged::{Packed, RaggedBatch, RaggedRecord};
pub use records::{check_validity, Indices, ReadCounters, Records, Stats, StoreAccess, Typed};
pub use sample::sample_store;
