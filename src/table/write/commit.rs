//! The one commit point of every table ([`publish`]) and the next manifest
//! of a shard commit ([`next_manifest`]).

use std::collections::BTreeSet;

#[cfg(feature = "remote")]
use super::bucket;
use super::root::{Root, RootKind};
use super::{check_names, plain_table};
use crate::io::Fs;
use crate::schema::Logical;
use crate::table::files;
use crate::table::manifest::{parse_manifest, Manifest, ShardEntry, MANIFEST_FILE, MANIFEST_LOCK};
use crate::table::repr::py_str;
use crate::table::shard::{check_shard_agrees, ShardSchema};
use crate::{Error, Location, Result};

/// Commits the shard directories `names` (inside `at`, written by any
/// writer) to the sharded table there, in order, through the one commit
/// point; returns the table's rows after the commit.
pub(crate) fn commit_names(at: &Location, names: &[String]) -> Result<u64> {
    check_names(names, false)?;
    let root = Root::of(at)?;
    if !root.exists() {
        return Err(Error::Missing {
            path: root.path().to_path_buf(),
            message: format!("table directory {} does not exist", root.path().display()),
        });
    }
    let mut new = Vec::with_capacity(names.len());
    for name in names {
        new.push((name.clone(), root.shard_schema(name)?));
    }
    let manifest = publish(&root, &mut |root, current| {
        next_manifest(root, current, &new)
    })?;
    Ok(manifest.num_rows())
}

/// The one commit point of every table: replaces the manifest of `at` with
/// what `next` makes of the current one (None before the first commit),
/// atomically. Locally under the commit lock, in a bucket with a
/// conditional write retried (with `next` called again) while other
/// committers win. Returns the manifest written.
#[cfg(feature = "remote")]
pub(crate) fn publish_at(
    at: &Location,
    next: &mut dyn FnMut(Option<&Manifest>) -> Result<Manifest>,
) -> Result<Manifest> {
    publish(&Root::of(at)?, &mut |_, current| next(current))
}

/// What a commit makes of the current manifest (None before the first
/// commit), given the root as this attempt sees it.
pub(super) type Next<'a> = &'a mut dyn FnMut(&Root, Option<&Manifest>) -> Result<Manifest>;

pub(super) fn publish(root: &Root, next: Next<'_>) -> Result<Manifest> {
    match &root.kind {
        RootKind::Local(dir) => {
            files::create_dir_all(dir)?;
            let _lock = files::CommitLock::acquire(dir, MANIFEST_LOCK)?;
            let file = dir.join(MANIFEST_FILE);
            let current = match files::read_whole(&Fs::Local, &file)? {
                Some(raw) => Some(parse_manifest(&file, &raw)?),
                None => None,
            };
            let manifest = next(root, current.as_ref())?;
            let tmp = format!(
                ".{MANIFEST_FILE}.{}.{}",
                std::process::id(),
                files::random_hex(4)
            );
            files::write_atomically(dir, MANIFEST_FILE, &tmp, &manifest.to_json())?;
            Ok(manifest)
        }
        #[cfg(feature = "remote")]
        RootKind::Bucket { .. } => bucket::publish(root, next),
    }
}

/// The manifest after appending the shards `new` (names and schemas) to
/// `current`: each checked against the table's first shard and not
/// already committed, every shard given the validity streams that the
/// nullable columns need, a remote shard's objects recorded.
pub(super) fn next_manifest(
    root: &Root,
    current: Option<&Manifest>,
    new: &[(String, ShardSchema)],
) -> Result<Manifest> {
    let empty = Manifest::default();
    if current.is_none() && root.holds_stores()? {
        return Err(plain_table(root.path()));
    }
    let current = current.unwrap_or(&empty);
    let mut entries: Vec<ShardEntry> = current.shards.clone();
    let old = entries.len();
    let (ref_name, reference) = match current.shards.first() {
        Some(first) => (first.name.clone(), root.shard_schema(&first.name)?),
        None => match new.first() {
            Some((name, schema)) => (name.clone(), schema.clone()),
            None => return Ok(current.clone()),
        },
    };
    let mut nullable: BTreeSet<String> = current.nullable.iter().cloned().collect();
    let mut validity: Vec<BTreeSet<String>> = vec![BTreeSet::new(); old];
    for (name, schema) in new {
        if current.shards.iter().any(|s| &s.name == name) {
            return Err(Error::InvalidValue(format!(
                "shard {} is already committed to {}",
                py_str(name),
                root.path().display()
            )));
        }
        check_shard_agrees(name, schema, &ref_name, &reference)?;
        let (objects, has) = root.shard_contents(name, &reference)?;
        nullable.extend(has.iter().cloned());
        validity.push(has);
        entries.push(ShardEntry {
            name: name.clone(),
            rows: schema.rows,
            objects,
        });
    }
    for (i, entry) in entries.iter_mut().enumerate() {
        // Old shards have streams for the old nullable columns.
        let has = if i < old {
            &current.nullable.iter().cloned().collect()
        } else {
            &validity[i]
        };
        let missing: Vec<&String> = nullable.iter().filter(|c| !has.contains(*c)).collect();
        if !missing.is_empty() {
            root.add_validity(entry, &missing)?;
        }
    }
    Ok(Manifest {
        columns: reference.columns.iter().map(|(c, _)| c.clone()).collect(),
        shards: entries,
        types: reference
            .columns
            .iter()
            .filter(|(_, s)| s.logical != Logical::Tensor)
            .map(|(c, s)| (c.clone(), s.logical))
            .collect(),
        nullable: nullable.into_iter().collect(),
    })
}
