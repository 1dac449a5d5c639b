//! The one commit point of every table ([`publish`]) and the next manifest
//! of a shard commit ([`next_manifest`]).

use std::collections::{BTreeMap, BTreeSet};

#[cfg(feature = "remote")]
use super::bucket;
use super::root::{Root, RootKind};
use super::{check_names, plain_table};
use crate::io::Fs;
use crate::repr::py_str;
use crate::schema::Logical;
use crate::table::files;
use crate::table::manifest::{Manifest, ShardEntry, MANIFEST_FILE, MANIFEST_LOCK};
use crate::table::shard::{check_shard_agrees, ShardSchema};
use crate::table::versions::{self, as_first_version, stamp, version_file_name, VERSIONS_DIR};
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

/// What a commit makes of the current manifest (None before the first
/// commit), given the root as this attempt sees it.
pub(super) type Next<'a> = &'a mut dyn FnMut(&Root, Option<&Manifest>) -> Result<Manifest>;

pub(super) fn publish(root: &Root, operation: &str, next: Next<'_>) -> Result<Manifest> {
    match &root.kind {
        RootKind::Local(dir) => {
            files::create_dir_all(dir)?;
            let _lock = files::CommitLock::acquire(dir, MANIFEST_LOCK)?;
            let current = versions::latest(&Fs::Local, dir)?;
            let manifest = stamp(
                next(root, current.as_ref().map(|c| &c.manifest))?,
                current.as_ref(),
                operation,
            );
            let tmp =
                |name: &str| format!(".{name}.{}.{}", std::process::id(), files::random_hex(4));
            let bytes = manifest.to_json();
            let vdir = dir.join(VERSIONS_DIR);
            let write_version = |m: &Manifest, bytes: &[u8]| {
                files::create_dir_all(&vdir)?;
                let name = version_file_name(m.version());
                files::write_atomically(&vdir, &name, &tmp(&name), bytes)
            };
            match &current {
                None => {
                    // A new table's commit point is its manifest.json (a
                    // version file alone is no table); its version 1
                    // follows.
                    files::write_atomically(dir, MANIFEST_FILE, &tmp(MANIFEST_FILE), &bytes)?;
                    write_version(&manifest, &bytes)?;
                }
                Some(current) => {
                    let own = vdir.join(version_file_name(current.manifest.version()));
                    if !files::exists(&Fs::Local, &own) {
                        let first = as_first_version(current);
                        write_version(&first, &first.to_json())?;
                    }
                    // The commit point: the new version's file.
                    write_version(&manifest, &bytes)?;
                    files::write_atomically(dir, MANIFEST_FILE, &tmp(MANIFEST_FILE), &bytes)?;
                }
            }
            Ok(manifest)
        }
        #[cfg(feature = "remote")]
        RootKind::Bucket(b) => bucket::publish(b, operation, &mut |b, current| {
            next(&Root::in_bucket(b.clone()), current)
        }),
    }
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
