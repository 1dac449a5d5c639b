//! A sharded table's history, on the write side: its names (tags, views,
//! `names.rs`) and its cleanup (`cleanup.rs`), and what both need (a fresh
//! look at the location, the commit lock, names checked).

mod cleanup;
mod names;

pub use cleanup::{cleanup, cleanup_leaving, Leftovers};
pub use names::{
    drop_view, list_versions, list_views, replace_view, save_view, save_view_set, tag, tags, untag,
};

use super::root::Root;
use crate::repr::py_str;
use crate::table::files;
use crate::table::versions::{self, is_tag_name, VersionRef};
use crate::{Error, Location, Result};

/// The fresh view of the table a history operation reads (nothing
/// remembered from earlier opens).
fn fresh(at: &Location) -> Location {
    at.fresh()
}

/// Holds the commit lock of a local table (nothing in a bucket).
fn lock(root: &Root) -> Result<Option<files::CommitLock>> {
    root.commit_lock()
}

/// `InvalidValue` unless `name` is a name the format allows for a tag or
/// a view (`what`).
fn check_name(what: &str, name: &str) -> Result<()> {
    if is_tag_name(name) {
        return Ok(());
    }
    Err(Error::InvalidValue(format!(
        "a {what} name must match [A-Za-z0-9_][A-Za-z0-9._-]{{0,254}} and not be a number, got {}",
        py_str(name)
    )))
}

/// The version `version` names (None: the latest), checked to exist.
fn existing_version(at: &Location, version: Option<u64>) -> Result<u64> {
    let want = version.map_or(VersionRef::Latest, VersionRef::Number);
    Ok(versions::resolve(at.fs(), at.path(), &want)?
        .manifest
        .version())
}
