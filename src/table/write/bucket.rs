//! The remote half of the write path: uploads, listings, deletes and the
//! conditional commit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bytes::Bytes;
use object_store::PutMode;

use super::super::copy::walk;
use super::super::files;
use super::super::manifest::{parse_manifest, Manifest, ShardEntry, MANIFEST_FILE};
use super::super::shard::{ensure_validity, ShardSchema};
use super::super::VALIDITY_DIR;
use super::root::{copy_as_ragged, Contents, Root, RootKind};
use crate::io::io_error;
use crate::io::remote::upload::{transfer, Place, Put, Transfer};
use crate::{Error, Result, Store};

/// Most attempts of a commit that keep losing the race to other
/// committers.
const COMMIT_TRIES: u32 = 50;

fn parts(root: &Root) -> (&std::sync::Arc<crate::io::remote::Remote>, &str) {
    match &root.kind {
        RootKind::Bucket { remote, base } => (remote, base),
        RootKind::Local(_) => unreachable!("a bucket operation on a local root"),
    }
}

pub(super) fn key(base: &str, rel: &str) -> String {
    if base.is_empty() || rel.is_empty() {
        format!("{base}{rel}")
    } else {
        format!("{base}/{rel}")
    }
}

/// Every object below `root` (relative paths and sizes), listed afresh.
pub(super) fn files(root: &Root) -> Result<Vec<(String, u64)>> {
    below(root, "")
}

/// The objects below `rel` of `root`, relative to `rel`.
fn below(root: &Root, rel: &str) -> Result<Vec<(String, u64)>> {
    let (remote, base) = parts(root);
    let prefix = key(base, rel);
    let strip = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    };
    let listed = remote
        .list_objects(&prefix)
        .map_err(|e| io_error(root.path(), e))?;
    Ok(listed
        .into_iter()
        .filter_map(|(k, size)| k.strip_prefix(strip.as_str()).map(|r| (r.to_owned(), size)))
        .collect())
}

/// Uploads every file below the local directory `local` as `rel/...`
/// of `root`; returns the paths written (relative to `rel`).
pub(super) fn upload_dir(root: &Root, local: &Path, rel: &str) -> Result<Vec<String>> {
    let (remote, base) = parts(root);
    let listed = walk(local)?;
    let transfers: Vec<Transfer> = listed
        .iter()
        .map(|(r, size)| Transfer {
            from: Place::Local(local.join(r)),
            to: Place::Remote(remote.clone(), key(base, &format!("{rel}/{r}"))),
            size: *size,
        })
        .collect();
    let at = root.path().join(rel);
    transfer(&transfers, &|_| Ok(())).map_err(|e| io_error(&at, e))?;
    Ok(listed.into_iter().map(|(r, _)| r).collect())
}

fn delete(root: &Root, rels: &[String]) -> Result<()> {
    if rels.is_empty() {
        return Ok(());
    }
    let (remote, base) = parts(root);
    let keys: Vec<String> = rels.iter().map(|r| key(base, r)).collect();
    remote.delete(&keys).map_err(|e| io_error(root.path(), e))
}

pub(super) fn remove_shards(root: &Root, names: &[String]) -> Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    let doomed: Vec<String> = files(root)?
        .into_iter()
        .filter(|(rel, _)| names.iter().any(|n| rel.split('/').next() == Some(n)))
        .map(|(rel, _)| rel)
        .collect();
    delete(root, &doomed)
}

pub(super) fn discard(root: &Root, prefix: &str) -> Result<Vec<String>> {
    let (remote, base) = parts(root);
    let file = root.path().join(MANIFEST_FILE);
    let committed: BTreeSet<String> = match remote
        .get_versioned(&key(base, MANIFEST_FILE))
        .map_err(|e| io_error(&file, e))?
    {
        Some((raw, _)) => match parse_manifest(&file, &raw) {
            Ok(m) => m.shards.into_iter().map(|s| s.name).collect(),
            Err(_) => return Ok(Vec::new()), // not this write's to judge
        },
        None => BTreeSet::new(),
    };
    let mut removed: Vec<String> = Vec::new();
    let mut doomed = Vec::new();
    for (rel, _) in files(root)? {
        let shard = rel.split('/').next().unwrap_or_default();
        if shard.starts_with(prefix) && !committed.contains(shard) {
            if removed.last().map(String::as_str) != Some(shard) {
                removed.push(shard.to_owned());
            }
            doomed.push(rel);
        }
    }
    delete(root, &doomed)?;
    removed.dedup();
    Ok(removed)
}

pub(super) fn shard_contents(root: &Root, name: &str, reference: &ShardSchema) -> Result<Contents> {
    let objects: BTreeMap<String, u64> = below(root, name)?.into_iter().collect();
    if objects.is_empty() {
        return Err(Error::InvalidValue(format!(
            "shard {name:?} is not in {}: upload it before committing it",
            root.path().display()
        )));
    }
    let has = reference
        .columns
        .iter()
        .filter(|(c, _)| objects.contains_key(&format!("{VALIDITY_DIR}/{c}/meta.zr")))
        .map(|(c, _)| c.clone())
        .collect();
    Ok((Some(objects), has))
}

/// Makes all-valid validity streams locally, uploads them into the
/// shard and records their objects.
pub(super) fn add_validity(root: &Root, entry: &mut ShardEntry, columns: &[&String]) -> Result<()> {
    let tmp = std::env::temp_dir().join(format!("loaderx-validity-{}", files::random_hex(6)));
    let made = (|| -> Result<Vec<(String, u64)>> {
        let shard = tmp.join(&entry.name);
        files::create_dir_all(&shard.join(VALIDITY_DIR))?;
        for column in columns {
            ensure_validity(&shard, column, entry.rows)?;
        }
        upload_dir(root, &shard, &entry.name)?;
        walk(&shard)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    let made = made?;
    if let Some(objects) = entry.objects.as_mut() {
        objects.extend(made);
    }
    Ok(())
}

pub(super) fn rewrite_ragged(root: &Root, shard: &str, column: &str) -> Result<()> {
    let rel = format!("{shard}/{column}");
    let tmp = std::env::temp_dir().join(format!("loaderx-ragged-{}", files::random_hex(6)));
    let local = tmp.join(column);
    let done = (|| {
        files::create_dir_all(&tmp)?;
        let dense = Store::open_at(&root.at.join(&rel), true)?;
        let made = copy_as_ragged(&dense, &local);
        let _ = dense.close();
        made?;
        let before: BTreeSet<String> = below(root, &rel)?.into_iter().map(|(r, _)| r).collect();
        let after: BTreeSet<String> = upload_dir(root, &local, &rel)?.into_iter().collect();
        let stale: Vec<String> = before
            .difference(&after)
            .map(|r| format!("{rel}/{r}"))
            .collect();
        delete(root, &stale)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    done
}

/// [`super::publish`] in a bucket: conditional writes of the manifest.
pub(super) fn publish(root: &Root, next: super::commit::Next<'_>) -> Result<Manifest> {
    let file = root.path().join(MANIFEST_FILE);
    for attempt in 0..COMMIT_TRIES {
        // What this attempt learns of the bucket is its own.
        let fresh = Root::of(&root.at.fresh())?;
        let (remote, base) = parts(&fresh);
        let manifest_key = key(base, MANIFEST_FILE);
        let current = remote
            .get_versioned(&manifest_key)
            .map_err(|e| io_error(&file, e))?;
        let (current, mode) = match current {
            Some((bytes, version)) => (
                Some(parse_manifest(&file, &bytes)?),
                PutMode::Update(version),
            ),
            None => (None, PutMode::Create),
        };
        let manifest = next(&fresh, current.as_ref())?;
        match remote
            .put(&manifest_key, Bytes::from(manifest.to_json()), mode)
            .map_err(|e| unsupported_conditional(&file, e))?
        {
            Put::Done => return Ok(manifest),
            Put::Conflict => std::thread::sleep(crate::io::remote::retry::backoff(
                attempt,
                std::time::Duration::from_millis(20),
            )),
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
