//! Committing shards to a remote sharded table.
//!
//! Writers upload their shards first, each under its unique name
//! ([`upload_dir`]; no reader sees a shard until a manifest names it).
//! [`commit_uploaded`] then replaces `manifest.json` with a conditional
//! write: `If-Match` the version it read (`If-None-Match: *` for the first
//! commit). A committer that got there first makes the write fail; the
//! commit then reads the new manifest, checks its shards against it again
//! and retries, so concurrent committers on any hosts never lose each
//! other's shards. A store without conditional writes is refused rather
//! than risk it.
//!
//! Every shard carries a validity stream for every nullable column: where
//! one lacks it (an old shard when a new one brings nulls to a column, or a
//! new one without nulls), an all-valid stream is written locally and
//! uploaded before the manifest names the shard. The manifest records each
//! shard's objects and sizes, so readers open the table without listing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bytes::Bytes;
use object_store::PutMode;

use super::copy::{files_of, join_key, remote_of, walk};
use super::files;
use super::manifest::{parse_manifest, Manifest, ShardEntry, MANIFEST_FILE};
use super::shard::{
    check_shard_agrees, ensure_validity, shard_schema, shard_schema_in, ShardSchema,
};
use super::VALIDITY_DIR;
use crate::io::io_error;
use crate::io::remote::upload::{transfer, Place, Put, Transfer};
use crate::schema::Logical;
use crate::{Error, Location, Result};

/// Most attempts of a commit that keep losing the race to other committers.
const COMMIT_TRIES: u32 = 50;

fn remote_dst(dst: &Location) -> Result<(std::sync::Arc<crate::io::remote::Remote>, String)> {
    let Some((remote, base)) = remote_of(dst)? else {
        return Err(Error::InvalidValue(format!(
            "{} is a local path: commit local shards with commit_shards",
            dst.path().display()
        )));
    };
    if !remote.writable() {
        return Err(Error::InvalidValue(format!(
            "{} is an http(s) location, which is read-only",
            dst.path().display()
        )));
    }
    Ok((remote, base))
}

/// Uploads every file below the local directory `local` to the remote
/// location `dst` (same relative paths; existing objects are replaced).
/// Returns the keys written.
pub fn upload_dir(local: &Path, dst: &Location) -> Result<Vec<String>> {
    let (remote, base) = remote_dst(dst)?;
    let files = walk(local)?;
    let keys: Vec<String> = files.iter().map(|(rel, _)| join_key(&base, rel)).collect();
    let transfers: Vec<Transfer> = files
        .iter()
        .zip(&keys)
        .map(|((rel, size), key)| Transfer {
            from: Place::Local(local.join(rel)),
            to: Place::Remote(remote.clone(), key.clone()),
            size: *size,
        })
        .collect();
    transfer(&transfers, &|_| Ok(())).map_err(|e| io_error(dst.path(), e))?;
    Ok(keys)
}

/// Uploads the local file `local` as the object `dst` (one request, or a
/// multipart upload for a large file; the object appears whole).
pub fn upload_file(local: &Path, dst: &Location) -> Result<()> {
    let (remote, key) = remote_dst(dst)?;
    let size = std::fs::metadata(local)
        .map_err(|e| Error::io(local, e))?
        .len();
    let t = Transfer {
        from: Place::Local(local.to_path_buf()),
        to: Place::Remote(remote, key),
        size,
    };
    transfer(std::slice::from_ref(&t), &|_| Ok(())).map_err(|e| io_error(dst.path(), e))
}

/// The objects below the remote location `at`: paths relative to it and
/// sizes, sorted (listed afresh).
pub fn list_objects(at: &Location) -> Result<Vec<(String, u64)>> {
    remote_of(at)?.ok_or_else(|| {
        Error::InvalidValue(format!("{} is not a remote location", at.path().display()))
    })?;
    files_of(at)
}

/// Deletes the objects `keys` of `dst`'s store (missing ones are fine).
pub fn delete_objects(dst: &Location, keys: &[String]) -> Result<()> {
    let (remote, _) = remote_dst(dst)?;
    remote.delete(keys).map_err(|e| io_error(dst.path(), e))
}

/// Uploads the shards `shards` of the local table directory `staging` to
/// the remote sharded table `dst` (made by the first commit) and commits
/// them (see [`commit_uploaded`]). Returns the table's row count after the
/// commit. On failure the uploaded shards are removed and the table is as
/// it was.
pub fn commit_shards_at(dst: &Location, staging: &Path, shards: &[String]) -> Result<u64> {
    remote_dst(dst)?;
    check_names(shards)?;
    // The new shards agree with each other before anything is written.
    let mut first: Option<ShardSchema> = None;
    for name in shards {
        let schema = shard_schema(&staging.join(name))?;
        match &first {
            Some(want) => check_shard_agrees(name, &schema, &shards[0], want)?,
            None => first = Some(schema),
        }
    }
    let mut uploaded = Vec::new();
    let result = (|| {
        for name in shards {
            uploaded.extend(upload_dir(&staging.join(name), &dst.join(name))?);
        }
        commit_uploaded(dst, shards)
    })();
    if result.is_err() {
        let _ = delete_objects(dst, &uploaded);
    }
    result
}

fn check_names(shards: &[String]) -> Result<()> {
    if shards.is_empty() {
        return Err(Error::InvalidValue(
            "shards must name at least one shard".into(),
        ));
    }
    for name in shards {
        if !super::manifest::is_shard_name(name) {
            return Err(Error::InvalidValue(format!(
                "shard name {name:?} must be a plain directory name"
            )));
        }
    }
    let unique: BTreeSet<&String> = shards.iter().collect();
    if unique.len() != shards.len() {
        return Err(Error::InvalidValue(format!(
            "shards names a shard twice: {shards:?}"
        )));
    }
    Ok(())
}

/// Commits the shards `shards`, already uploaded below the remote sharded
/// table `dst`, in order, with one conditional write of its manifest
/// (retried against the newer manifest when another committer won).
/// Returns the table's row count after the commit.
pub fn commit_uploaded(dst: &Location, shards: &[String]) -> Result<u64> {
    let (remote, base) = remote_dst(dst)?;
    check_names(shards)?;
    let manifest_key = join_key(&base, MANIFEST_FILE);
    let file = dst.path().join(MANIFEST_FILE);
    for attempt in 0..COMMIT_TRIES {
        // What this attempt learns of the bucket is its own.
        let at = dst.fresh();
        let current = remote
            .get_versioned(&manifest_key)
            .map_err(|e| io_error(&file, e))?;
        let (current, mode) = match current {
            Some((bytes, version)) => (parse_manifest(&file, &bytes)?, PutMode::Update(version)),
            None => {
                let held = files_of(&at)?;
                if held
                    .iter()
                    .any(|(rel, _)| rel.split('/').nth(1) == Some("meta.zr"))
                {
                    return Err(Error::InvalidValue(format!(
                        "{} is a plain table (it holds stores directly); shards go into a sharded table",
                        dst.path().display()
                    )));
                }
                (Manifest::default(), PutMode::Create)
            }
        };
        let next = next_manifest(&at, &current, shards)?;
        match remote
            .put(&manifest_key, Bytes::from(next.to_json()), mode)
            .map_err(|e| unsupported_conditional(&file, e))?
        {
            Put::Done => return Ok(next.num_rows()),
            Put::Conflict => {
                let wait = 20u64 << attempt.min(6);
                let jitter = (u64::from(std::process::id()).wrapping_mul(2_654_435_761) >> 7)
                    .wrapping_add(u64::from(attempt) * 7919)
                    % wait;
                std::thread::sleep(std::time::Duration::from_millis(wait + jitter));
            }
        }
    }
    Err(Error::io(
        &file,
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{COMMIT_TRIES} commits lost the race to other committers"),
        ),
    ))
}

/// A store without conditional writes cannot take a commit safely.
fn unsupported_conditional(file: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::Unsupported {
        return Error::InvalidValue(format!(
            "{}: this object store does not support conditional writes (If-Match / If-None-Match), so a commit could silently drop another committer's shards; loaderx refuses to commit there",
            file.display()
        ));
    }
    io_error(file, e)
}

/// The manifest after appending the uploaded `shards` to `current`: each
/// checked against the table's first shard, every shard given the validity
/// streams the nullable columns need.
fn next_manifest(at: &Location, current: &Manifest, shards: &[String]) -> Result<Manifest> {
    let (remote, base) = remote_dst(at)?;
    let mut new_entries: Vec<(ShardEntry, ShardSchema)> = Vec::with_capacity(shards.len());
    for name in shards {
        if current.shards.iter().any(|s| &s.name == name) {
            return Err(Error::InvalidValue(format!(
                "shard {name:?} is already committed to {}",
                at.path().display()
            )));
        }
        let objects: BTreeMap<String, u64> = remote
            .list_objects(&join_key(&base, name))
            .map_err(|e| io_error(at.path(), e))?
            .into_iter()
            .filter_map(|(k, size)| {
                k.strip_prefix(&format!("{}/", join_key(&base, name)))
                    .map(|r| (r.to_owned(), size))
            })
            .collect();
        if objects.is_empty() {
            return Err(Error::InvalidValue(format!(
                "shard {name:?} is not in {}: upload it before committing it",
                at.path().display()
            )));
        }
        let schema = shard_schema_in(at.fs(), &at.path().join(name))?;
        new_entries.push((
            ShardEntry {
                name: name.clone(),
                rows: schema.rows,
                objects: Some(objects),
            },
            schema,
        ));
    }
    let (ref_name, reference) = match current.shards.first() {
        Some(first) => (
            first.name.clone(),
            shard_schema_in(at.fs(), &at.path().join(&first.name))?,
        ),
        None => (shards[0].clone(), new_entries[0].1.clone()),
    };
    for (entry, schema) in &new_entries {
        check_shard_agrees(&entry.name, schema, &ref_name, &reference)?;
    }
    let validity_of = |col: &str| format!("{VALIDITY_DIR}/{col}/meta.zr");
    let mut nullable: BTreeSet<String> = current.nullable.iter().cloned().collect();
    for (entry, _) in &new_entries {
        let objects = entry.objects.as_ref().expect("set above");
        for (col, _) in &reference.columns {
            if objects.contains_key(&validity_of(col)) {
                nullable.insert(col.clone());
            }
        }
    }
    // Old shards have streams for the old nullable columns; the rest of
    // what each shard lacks is made here.
    let mut entries: Vec<ShardEntry> = current.shards.clone();
    let old = entries.len();
    entries.extend(new_entries.into_iter().map(|(e, _)| e));
    let mut missing: Vec<(usize, &String)> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        for col in &nullable {
            let has = if i < old {
                current.nullable.contains(col)
            } else {
                entry
                    .objects
                    .as_ref()
                    .is_some_and(|o| o.contains_key(&validity_of(col)))
            };
            if !has {
                missing.push((i, col));
            }
        }
    }
    if !missing.is_empty() {
        let tmp = std::env::temp_dir().join(format!("loaderx-validity-{}", files::random_hex(6)));
        let made = (|| -> Result<Vec<(usize, BTreeMap<String, u64>)>> {
            let mut added: Vec<(usize, BTreeMap<String, u64>)> = Vec::new();
            for (i, col) in &missing {
                let entry = &entries[*i];
                let shard = tmp.join(&entry.name);
                files::create_dir_all(&shard.join(VALIDITY_DIR))?;
                ensure_validity(&shard, col, entry.rows)?;
            }
            for (i, _) in &missing {
                if added.iter().any(|(j, _)| j == i) {
                    continue;
                }
                let name = &entries[*i].name;
                let shard = tmp.join(name);
                upload_dir(&shard, &at.join(name))?;
                added.push((*i, walk(&shard)?.into_iter().collect()));
            }
            Ok(added)
        })();
        let _ = std::fs::remove_dir_all(&tmp);
        for (i, objects) in made? {
            if let Some(o) = entries[i].objects.as_mut() {
                o.extend(objects);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_are_checked_before_any_request() {
        assert!(check_names(&[]).is_err());
        assert!(check_names(&["../x".into()]).is_err());
        assert!(check_names(&["a".into(), "a".into()]).is_err());
        assert!(check_names(&["shard-1".into(), "shard-2".into()]).is_ok());
    }
}
