//! Storage: where the engine's bytes live.
//!
//! [`local`] holds every system call the engine makes on local files (each
//! positional write, fsync, truncation, creation and rename, each a fault
//! point under the `fault-injection` feature, see [`fault`]); [`lock`] the
//! store lock on `meta.zr`.

#[cfg(feature = "fault-injection")]
pub mod fault;
pub(crate) mod local;
pub(crate) mod lock;
