//! One remote object, pinned at the size and ETag it had when first seen:
//! where it is, what its reads must return, and how its errors read.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path as Key;
use object_store::ObjectStore;

use super::policy::ReadPolicy;
use super::version::{self, Pin, Seen};
use super::{changed, client, BlockCache};

/// One remote object, pinned at its size and ETag.
pub(crate) struct Object {
    pub(super) store: Arc<dyn ObjectStore>,
    /// Its URI, as messages name it.
    pub(super) path: PathBuf,
    pub(super) key: Key,
    /// The version every read must return: its size and entity tag (or
    /// `Last-Modified`) from the listing, or from the first response that
    /// carried them.
    pub(super) pin: Pin,
    /// The whole object, when it was fetched at open (meta.zr, dict.zr).
    pub(super) body: Option<Bytes>,
    /// Its last bytes, when they were fetched at open (a column file's
    /// footer): where they start, and the bytes.
    pub(super) tail: Option<(u64, Bytes)>,
    pub(super) cache: Option<Arc<BlockCache>>,
    pub(super) secrets: client::Secrets,
    /// How its ranges are read (hedging, the timeout).
    pub(super) reads: ReadPolicy,
}

impl Object {
    pub(super) fn error(&self, what: &str, e: object_store::Error) -> io::Error {
        if let object_store::Error::Precondition { .. } = e {
            return changed(format!(
                "{} changed while open (its ETag no longer matches the version this handle pinned)",
                self.path.display()
            ));
        }
        let kind = client::error_kind(&e);
        io::Error::new(
            kind,
            format!(
                "{what} {}: {} ({})",
                self.path.display(),
                client::describe(kind),
                self.secrets.scrub(&e.to_string())
            ),
        )
    }

    /// Checks a response's object against the pinned version (pinning its
    /// entity tag or `Last-Modified` if none was known).
    pub(super) fn check_version(&self, meta: &object_store::ObjectMeta) -> io::Result<()> {
        self.pin
            .check(&Seen::of(meta))
            .map_err(|d| changed(version::describe(&self.path, &d)))
    }
}
