//! The remote half of the write path: a write's place in a bucket and the
//! operations on its objects (uploads, listings, reads, deletes); the
//! conditional commit (`commit.rs`) and the writer's lease (`lease.rs`).

mod commit;
mod lease;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bytes::Bytes;
use object_store::PutMode;

use super::super::files;
use super::super::manifest::{Manifest, ShardEntry};
use super::super::shard::{copy_as_ragged, ensure_validity, Contents, ShardSchema};
use super::super::VALIDITY_DIR;
use crate::io::io_error;
use crate::io::remote::upload::{transfer, Place, Put, Transfer};
use crate::{Error, Location, Result, Store};

use commit::unsupported_conditional;
pub(crate) use commit::Planned;
pub(super) use commit::{latest, pointer, publish, publish_planned};
pub(super) use lease::{abort_unheld_uploads, abort_uploads, BucketLease, LeaseObject};

/// Most attempts of a commit that keep losing the race to other
/// committers.
pub(crate) const COMMIT_TRIES: u32 = 50;

fn parts(root: &Bucket) -> (&std::sync::Arc<crate::io::remote::Remote>, &str) {
    (&root.remote, &root.base)
}

/// A write's place in a bucket: its location, the bucket, and the key
/// prefix of the table's objects.
#[derive(Clone, Debug)]
pub(super) struct Bucket {
    pub(super) at: Location,
    remote: std::sync::Arc<crate::io::remote::Remote>,
    base: String,
    /// The lease of the write in progress, while this process holds one
    /// (shared by the clones of a write's bucket): its uploads are
    /// recorded in its object.
    lease: std::sync::Arc<std::sync::Mutex<Option<std::sync::Arc<LeaseObject>>>>,
}

impl Bucket {
    /// The bucket place of `at`, a location in a writable object store:
    /// InvalidValue for an http(s) location, which is read-only, or a
    /// local one.
    pub(super) fn of(at: &Location) -> Result<Bucket> {
        let crate::io::Fs::Remote(remote) = at.fs() else {
            return Err(Error::InvalidValue(format!(
                "{} is a local path, not a location in a bucket",
                at.path().display()
            )));
        };
        if !remote.writable() {
            return Err(Error::InvalidValue(format!(
                "{} is an http(s) location, which is read-only",
                at.path().display()
            )));
        }
        let base = remote
            .key_of(at.path())
            .map_err(|e| io_error(at.path(), e))?;
        Ok(Bucket {
            at: at.clone(),
            remote: remote.clone(),
            base,
            lease: Default::default(),
        })
    }

    /// [`Bucket::of`] the same location, with nothing it has learnt of
    /// the bucket (a fresh view: what a commit's attempt reads is its own),
    /// the same write's.
    pub(super) fn fresh(&self) -> Result<Bucket> {
        let mut b = Bucket::of(&self.at.fresh())?;
        b.lease = self.lease.clone();
        Ok(b)
    }

    fn held_lease(&self) -> Option<std::sync::Arc<LeaseObject>> {
        self.lease.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) fn path(&self) -> &Path {
        self.at.path()
    }
}

/// What a bucket commit makes of the current manifest (None before the
/// first commit), given the bucket as this attempt sees it.
pub(super) type Next<'a> = &'a mut dyn FnMut(&Bucket, Option<&Manifest>) -> Result<Manifest>;

pub(super) use crate::io::remote::join_key as key;

/// Every object below `root` (relative paths and sizes), listed afresh.
pub(super) fn files(root: &Bucket) -> Result<Vec<(String, u64)>> {
    below(root, "")
}

/// The objects below `rel` of `root`, relative to `rel`.
fn below(root: &Bucket, rel: &str) -> Result<Vec<(String, u64)>> {
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

pub(super) use super::super::manifest::shard_rel;

/// Uploads every file below the local directory `local` as `rel/...`
/// of `root` (`rel` empty: the root itself); returns the paths written
/// (relative to `rel`) and their sizes.
pub(super) fn upload_dir(root: &Bucket, local: &Path, rel: &str) -> Result<Vec<(String, u64)>> {
    let (remote, base) = parts(root);
    let listed = files::walk(local)?;
    let transfers: Vec<Transfer> = listed
        .iter()
        .map(|(r, size)| Transfer {
            from: Place::Local(local.join(r)),
            to: Place::Remote(remote.clone(), key(base, &key(rel, r))),
            size: *size,
        })
        .collect();
    let at = root.path().join(rel);
    leased(root, &transfers, &|_| Ok(())).map_err(|e| io_error(&at, e))?;
    Ok(listed)
}

/// [`transfer`] into `root`, whose large files go up as multipart uploads
/// the write's lease (if one is held) records while they are open: a
/// cleanup aborts those a killed writer left.
fn leased(
    root: &Bucket,
    transfers: &[Transfer],
    progress: &(dyn Fn(u64) -> std::io::Result<()> + Sync),
) -> std::io::Result<()> {
    let lease = root.held_lease();
    let journal = |key: &str, id: &str, open: bool| match &lease {
        Some(l) => l.record(root, key, id, open),
        None => Ok(()),
    };
    let journal: Option<&crate::io::remote::upload::Journal<'_>> =
        lease.is_some().then_some(&journal);
    transfer(transfers, progress, journal)
}

/// Copies `transfers` into the bucket of `at` (a copy of a table) under a
/// lease of its own, as a write holds one, so that the multipart uploads a
/// killed copy left open are listed in a lease object. When `at` holds an
/// `interrupted` copy, first aborts the uploads that the lease objects
/// `dead` (relative to `at`: those it left, which the caller then removes)
/// list, and then, where the service lists them, every other upload open
/// below `at` (one a copy killed before recording it left: an interrupted
/// copy is its rerun's alone). The outer error is the lease's, the inner
/// one the transfer's.
pub(crate) fn copy_leased(
    at: &Location,
    interrupted: bool,
    dead: &[String],
    transfers: &[Transfer],
    progress: &(dyn Fn(u64) -> std::io::Result<()> + Sync),
) -> Result<std::io::Result<()>> {
    let root = Bucket::of(at)?;
    if interrupted {
        abort_uploads(&root, dead)?;
        abort_unheld_uploads(
            &root,
            &BTreeSet::new(),
            &|_| false,
            std::time::Duration::ZERO,
        )?;
    }
    let _lease = BucketLease::take(&root, &format!("copy{}", files::random_hex(6)))?;
    Ok(leased(&root, transfers, progress))
}

/// The objects below `rel` of `root` (relative to it) and their sizes.
pub(super) fn sizes_below(root: &Bucket, rel: &str) -> Result<Vec<(String, u64)>> {
    below(root, rel)
}

/// The object `rel` of `root`, read afresh; None when absent.
pub(super) fn read(root: &Bucket, rel: &str) -> Result<Option<Vec<u8>>> {
    let (remote, base) = parts(root);
    Ok(remote
        .get_versioned(&key(base, rel))
        .map_err(|e| io_error(&root.path().join(rel), e))?
        .map(|(b, _)| b.to_vec()))
}

/// Creates the object `rel` of `root` only if absent: false when it was
/// there already.
pub(super) fn create(root: &Bucket, rel: &str, bytes: Vec<u8>) -> Result<bool> {
    let (remote, base) = parts(root);
    let done = remote
        .put(&key(base, rel), Bytes::from(bytes), PutMode::Create)
        .map_err(|e| unsupported_conditional(&root.path().join(rel), e))?;
    Ok(matches!(done, Put::Done(_)))
}

/// Writes the object `rel` of `root`, whatever was there.
pub(super) fn overwrite(root: &Bucket, rel: &str, bytes: Vec<u8>) -> Result<()> {
    let (remote, base) = parts(root);
    remote
        .put(&key(base, rel), Bytes::from(bytes), PutMode::Overwrite)
        .map_err(|e| io_error(&root.path().join(rel), e))?;
    Ok(())
}

pub(super) fn delete_rels(root: &Bucket, rels: &[String]) -> Result<()> {
    delete(root, rels)
}

fn delete(root: &Bucket, rels: &[String]) -> Result<()> {
    if rels.is_empty() {
        return Ok(());
    }
    let (remote, base) = parts(root);
    let keys: Vec<String> = rels.iter().map(|r| key(base, r)).collect();
    remote.delete(&keys).map_err(|e| io_error(root.path(), e))
}

pub(super) fn remove_shards(root: &Bucket, names: &[String]) -> Result<()> {
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

pub(super) fn discard(root: &Bucket, prefix: &str) -> Result<Vec<String>> {
    let committed: BTreeSet<String> = match latest(root) {
        Ok((Some(m), _)) => m.manifest.shards.into_iter().map(|s| s.name).collect(),
        Ok((None, _)) => BTreeSet::new(),
        Err(_) => return Ok(Vec::new()), // not this write's to judge
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

pub(super) fn shard_contents(
    root: &Bucket,
    name: &str,
    reference: &ShardSchema,
    known: Option<&BTreeMap<String, u64>>,
) -> Result<Contents> {
    let objects: BTreeMap<String, u64> = match known {
        Some(objects) => objects.clone(),
        None => below(root, name)?.into_iter().collect(),
    };
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
pub(super) fn add_validity(
    root: &Bucket,
    entry: &mut ShardEntry,
    columns: &[&String],
) -> Result<()> {
    let tmp = files::staging_dir("validity")?;
    let made = (|| -> Result<Vec<(String, u64)>> {
        let shard = tmp.join("shard");
        for column in columns {
            // Beside the column's store: in its group, if any.
            let home = shard.join(entry.column_home(column));
            files::create_dir_all(&home.join(VALIDITY_DIR))?;
            ensure_validity(&home, column, entry.rows)?;
        }
        upload_dir(root, &shard, shard_rel(&entry.name))?;
        files::walk(&shard)
    })();
    files::remove_staging(&tmp);
    let made = made?;
    if let Some(objects) = entry.objects.as_mut() {
        objects.extend(made);
    }
    Ok(())
}

pub(super) fn rewrite_ragged(root: &Bucket, shard: &str, column: &str) -> Result<()> {
    let rel = format!("{shard}/{column}");
    let tmp = files::staging_dir("ragged")?;
    let local = tmp.join(column);
    let done = (|| {
        let dense = Store::open_at(&root.at.join(&rel), true)?;
        let made = copy_as_ragged(&dense, &local);
        let _ = dense.close();
        made?;
        let before: BTreeSet<String> = below(root, &rel)?.into_iter().map(|(r, _)| r).collect();
        let after: BTreeSet<String> = upload_dir(root, &local, &rel)?
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        let stale: Vec<String> = before
            .difference(&after)
            .map(|r| format!("{rel}/{r}"))
            .collect();
        delete(root, &stale)
    })();
    files::remove_staging(&tmp);
    done
}

/// The schema of a plain table uploaded to a bucket (`rel`, at `dir`: a
/// shard, or a shard's column group),
/// from its listing (`objects`: paths below it and sizes) and each store's
/// `meta.zr` (one request apiece): the header and schema decoded, the
/// location table and `data.zr` checked against their listed sizes, the
/// dictionary present exactly when the codec needs one. What opening every
/// store again would check before the commit, without its dozen requests
/// per store (a HEAD per file, the location table read in ranges).
pub(super) fn listed_schema(
    root: &Bucket,
    rel: &str,
    dir: &Path,
    objects: &[(String, u64)],
) -> Result<ShardSchema> {
    use crate::format::{meta_size_for, Header, HEADER_SIZE, PAGE_SIZE};
    use crate::repr::py_str;
    use crate::table::shard::ColumnSpec;
    use crate::{Codec, Logical, Schema};
    let size = |name: &str| objects.iter().find(|(n, _)| n == name).map(|(_, s)| *s);
    let top = |suffix: &str| -> Vec<&str> {
        objects
            .iter()
            .filter_map(|(n, _)| n.strip_suffix(suffix))
            .filter(|n| !n.contains('/') && !n.starts_with('.'))
            .collect()
    };
    let mut names: Vec<&str> = top("/meta.zr");
    let columnar: Vec<&str> = top(&format!("/{}", crate::columnar::COLUMN_FILE));
    names.extend(columnar.iter().copied());
    names.sort_unstable();
    if names.is_empty() {
        return Err(Error::InvalidValue(format!(
            "shard {} holds no columns (no subdirectory with meta.zr or column.zc)",
            dir.display()
        )));
    }
    let types = if size(crate::table::types::TABLE_FILE).is_some() {
        crate::table::types::read_types_in(root.at.fs(), dir)?
    } else {
        Default::default()
    };
    let mut columns = Vec::with_capacity(names.len());
    let mut rows = None;
    let mut nulls = std::collections::BTreeSet::new();
    let mut check_rows = |name: &str, n: u64| -> Result<()> {
        match rows {
            None => rows = Some(n),
            Some(r) if r != n => {
                return Err(Error::InvalidValue(format!(
                    "shard {}: columns must have equal lengths, but column {} has {n} rows \
                     where another has {r}",
                    dir.display(),
                    py_str(name),
                )))
            }
            Some(_) => {}
        }
        Ok(())
    };
    for name in names {
        let t = types.get(name).copied().unwrap_or_default();
        if columnar.contains(&name) {
            let (spec, n, has_nulls) = crate::table::shard::column_spec_in(
                root.at.fs(),
                dir,
                name,
                t,
                Some(crate::table::ColumnLayout::Columnar),
                crate::table::shard::Open::Full,
            )?;
            check_rows(name, n)?;
            if has_nulls {
                nulls.insert(name.to_owned());
            }
            columns.push((name.to_owned(), spec));
            continue;
        }
        let meta_path = dir.join(name).join("meta.zr");
        let corrupt = |msg: String| Error::corrupted(&meta_path, msg);
        let meta = read(root, &key(rel, &format!("{name}/meta.zr")))?
            .ok_or_else(|| corrupt("file is missing".into()))?;
        if (meta.len() as u64) < PAGE_SIZE {
            return Err(corrupt(format!(
                "file is {} bytes, shorter than the {PAGE_SIZE}-byte header page",
                meta.len()
            )));
        }
        let header = Header::decode(meta[..HEADER_SIZE].try_into().expect("a page"))
            .map_err(|e| corrupt(format!("header: {e}")))?;
        let schema =
            Schema::decode(&meta[HEADER_SIZE..HEADER_SIZE + header.schema_length as usize])
                .map_err(corrupt)?;
        if meta_size_for(header.length).is_none_or(|end| end > meta.len() as u64) {
            return Err(corrupt(format!(
                "header length {} needs a {}-entry record table but the file is {} bytes",
                header.length,
                header.length,
                meta.len()
            )));
        }
        let data = size(&format!("{name}/data.zr")).unwrap_or(0);
        if data < header.tail_offset || size(&format!("{name}/data.zr")).is_none() {
            return Err(Error::corrupted(
                &dir.join(name).join("data.zr"),
                format!(
                    "file is missing or shorter ({data} bytes) than the committed tail_offset {}",
                    header.tail_offset
                ),
            ));
        }
        if size(&format!("{name}/dict.zr")).is_some() != (header.codec == Codec::ZstdDict) {
            return Err(corrupt(
                "dict.zr must be present exactly when the codec is zstd_dict".into(),
            ));
        }
        let logical = types.get(name).map_or(Logical::Tensor, |t| t.logical);
        logical
            .check(&schema)
            .map_err(|e| Error::InvalidValue(format!("{}: {e}", dir.join(name).display())))?;
        check_rows(name, header.length)?;
        columns.push((name.to_owned(), ColumnSpec::records(schema, logical)));
    }
    Ok(ShardSchema {
        columns,
        rows: rows.unwrap_or(0),
        nulls,
    })
}

/// Every object below `root` (relative paths, sizes and last
/// modifications in milliseconds since the epoch), listed afresh.
pub(super) fn dated_files(root: &Bucket) -> Result<Vec<(String, u64, i64)>> {
    let (remote, base) = parts(root);
    let strip = if base.is_empty() {
        String::new()
    } else {
        format!("{base}/")
    };
    let listed = remote
        .list_dated(base)
        .map_err(|e| io_error(root.path(), e))?;
    Ok(listed
        .into_iter()
        .filter_map(|(k, size, at)| {
            k.strip_prefix(strip.as_str())
                .map(|r| (r.to_owned(), size, at))
        })
        .collect())
}
