//! The one commit point of every table ([`publish`]) and the next manifest
//! of a shard commit ([`next_manifest`]).

use std::collections::{BTreeMap, BTreeSet};

use super::root::{Next, Root};
use super::{check_names, plain_table};
use crate::repr::py_str;
use crate::schema::Logical;
use crate::table::manifest::{Manifest, ShardEntry};
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
    let manifest = publish(&root, "append", &mut |root, current| {
        next_manifest(root, current, &new, &BTreeMap::new())
    })?;
    Ok(manifest.num_rows())
}

/// The one commit point of every table: commits what `next` makes of the
/// latest version (None before the first commit) as a new version,
/// atomically. Locally under the commit lock, in a bucket with a
/// conditional write retried (with `next` called again) while other
/// committers win. `operation` names what the version does (a table's
/// first version is always `create`). Returns the manifest written.
#[cfg(feature = "remote")]
pub(crate) fn publish_at(
    at: &Location,
    operation: &str,
    next: &mut dyn FnMut(Option<&Manifest>) -> Result<Manifest>,
) -> Result<Manifest> {
    publish(&Root::of(at)?, operation, &mut |_, current| next(current))
}

/// The one commit point of every table: commits what `next` makes of the
/// latest version (None before the first commit) as a new version,
/// atomically ([`Root::publish`]); `next` is given the root as each
/// attempt sees it.
pub(super) fn publish(root: &Root, operation: &str, next: Next<'_>) -> Result<Manifest> {
    root.publish(operation, next)
}

/// The manifest after appending the shards `new` (names and schemas) to
/// `current`: each checked against the table's first shard and not
/// already committed, every shard given the validity streams that the
/// nullable columns need, a remote shard's objects recorded (those of
/// `known`, by shard, as their writer uploaded them; the others listed).
pub(super) fn next_manifest(
    root: &Root,
    current: Option<&Manifest>,
    new: &[(String, ShardSchema)],
    known: &BTreeMap<String, BTreeMap<String, u64>>,
) -> Result<Manifest> {
    let empty = Manifest::default();
    if current.is_none() && root.holds_stores()? {
        return Err(plain_table(root.path()));
    }
    let current = current.unwrap_or(&empty);
    let mut entries: Vec<ShardEntry> = current.shards.clone();
    let old = entries.len();
    let (ref_name, reference) = match current.shards.first() {
        Some(first) => (
            first.name.clone(),
            root.version_schema(current)?
                .expect("a version with shards has a schema"),
        ),
        None => match new.first() {
            Some((name, schema)) => (name.clone(), schema.clone()),
            None => return Ok(current.clone()),
        },
    };
    let mut nullable: BTreeSet<String> = current.nullable.iter().cloned().collect();
    let columnar: Vec<String> = reference
        .columns
        .iter()
        .filter(|(_, s)| s.layout == crate::table::ColumnLayout::Columnar)
        .map(|(c, _)| c.clone())
        .collect();
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
        let (objects, mut has) = root.shard_contents(name, &reference, known.get(name))?;
        has.extend(schema.nulls.iter().cloned());
        nullable.extend(has.iter().cloned());
        validity.push(has);
        entries.push(ShardEntry {
            name: name.clone(),
            rows: schema.rows,
            objects,
            groups: Vec::new(),
            deleted: None,
        });
    }
    for (i, entry) in entries.iter_mut().enumerate() {
        // Old shards have streams for the old nullable columns.
        let has = if i < old {
            &current.nullable.iter().cloned().collect()
        } else {
            &validity[i]
        };
        // Records columns need a validity stream in every shard; columnar
        // ones keep their nulls in their files.
        let missing: Vec<&String> = nullable
            .iter()
            .filter(|c| !has.contains(*c) && !columnar.contains(*c))
            .collect();
        if !missing.is_empty() {
            root.add_validity(entry, &missing)?;
        }
    }
    // A table keeps its column order (columns added later come last).
    let columns = if current.shards.is_empty() {
        reference.columns.iter().map(|(c, _)| c.clone()).collect()
    } else {
        current.columns.clone()
    };
    Ok(Manifest {
        columns,
        shards: entries,
        types: reference
            .columns
            .iter()
            .filter(|(_, s)| s.logical != Logical::Tensor)
            .map(|(c, s)| (c.clone(), s.logical))
            .collect(),
        nullable: nullable.into_iter().collect(),
        columnar,
        ..Manifest::default()
    })
}
