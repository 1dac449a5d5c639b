//! Reading records: the [`Records`] trait every reader implements, the
//! batch gathers, the concatenation of stores, and the buffers gathers
//! fill.

pub(crate) mod buffer;
pub(crate) mod concat;
pub(crate) mod gather;
pub(crate) mod ragged;
pub(crate) mod records;
mod sample;

pub use buffer::Buffer;
pub use concat::Concat;
pub use ragged::{Packed, RaggedRecord};
pub use records::{check_validity, Indices, Records, StoreAccess, Typed};
pub use sample::sample_store;
