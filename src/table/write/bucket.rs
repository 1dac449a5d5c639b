//! The remote half of the write path: uploads, listings, deletes and the
//! conditional commit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bytes::Bytes;
use object_store::{PutMode, UpdateVersion};

use super::super::files;
use super::super::manifest::{parse_manifest, Manifest, ShardEntry, MANIFEST_FILE};
use super::super::shard::{copy_as_ragged, ensure_validity, Contents, ShardSchema};
use super::super::versions::{self, version_rel, Resolved};
use super::super::VALIDITY_DIR;
use crate::io::io_error;
use crate::io::remote::upload::{transfer, Place, Put, Transfer};
use crate::{Error, Location, Result, Store};

/// Most attempts of a commit that keep losing the race to other
/// committers.
const COMMIT_TRIES: u32 = 50;

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

/// A shard's path relative to the table ("" for the table itself).
pub(super) fn shard_rel(name: &str) -> &str {
    if name == crate::table::manifest::SELF_SHARD {
        ""
    } else {
        name
    }
}

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

/// The latest version in the bucket, read afresh: `manifest.json` (its
/// bytes' entity tag kept for the conditional update of the pointer), then
/// the version files after it.
pub(super) fn latest(root: &Bucket) -> Result<(Option<Resolved>, Option<UpdateVersion>)> {
    let (remote, base) = parts(root);
    let file = root.path().join(MANIFEST_FILE);
    let (pointer, tag) = match remote
        .get_versioned(&key(base, MANIFEST_FILE))
        .map_err(|e| io_error(&file, e))?
    {
        Some((bytes, tag)) => (
            Some(Resolved {
                manifest: parse_manifest(&file, &bytes)?,
                bytes: bytes.to_vec(),
            }),
            Some(tag),
        ),
        None => (None, None),
    };
    let latest = versions::forward(root.path(), pointer, &mut |rel| {
        Ok(remote
            .get_versioned(&key(base, rel))
            .map_err(|e| io_error(&root.path().join(rel), e))?
            .map(|(b, _)| b.to_vec()))
    })?;
    Ok((latest, tag))
}

/// The latest version as `manifest.json` names it, with that object's
/// entity tag: what a write planned in a bucket remembers, so that its
/// commit reads nothing again when no other commit came between
/// ([`publish_planned`]).
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    pub(super) current: Resolved,
    tag: UpdateVersion,
    /// Whether version 1's file is known to be there (only version 1 can
    /// lack its file; a commit on it writes the file first otherwise).
    first_file: bool,
    /// When `manifest.json` was read or written so.
    learnt: std::time::Instant,
}

/// How long what a handle learnt of `manifest.json` is planned on without
/// reading it again: a commit on an older basis reads the latest first,
/// so that a cleanup that removed versions meanwhile is seen (see
/// docs/format.md on cleanups in a bucket).
pub(crate) const BASIS_TTL: std::time::Duration = std::time::Duration::from_secs(10);

impl Planned {
    /// The version planned on.
    pub(crate) fn manifest(&self) -> &Manifest {
        &self.current.manifest
    }

    /// Whether it was learnt within [`BASIS_TTL`].
    pub(crate) fn recent(&self) -> bool {
        self.learnt.elapsed() < BASIS_TTL
    }

    /// What opening the table at `at` learnt of it, when that open fetched
    /// `manifest.json` whole with the version the server named and it is
    /// version `version` (not behind the version files): a commit planned
    /// on the open then reads nothing first. None for a local table, an
    /// http(s) one, a pinned version or a server that names no version.
    pub(crate) fn opened(at: &Location, version: u64) -> Option<Planned> {
        let crate::io::Fs::Remote(r) = at.fs() else {
            return None;
        };
        if !r.writable() {
            return None;
        }
        let base = r.key_of(at.path()).ok()?;
        let (bytes, tag) = r.versioned_body(&key(&base, MANIFEST_FILE))?;
        let manifest = parse_manifest(&at.path().join(MANIFEST_FILE), &bytes).ok()?;
        if manifest.version() != version {
            return None;
        }
        // The open listed the version files of a table at version 1.
        let first_file = version > 1 || r.knows(&key(&base, &version_rel(1)));
        Some(Planned {
            current: Resolved {
                manifest,
                bytes: bytes.to_vec(),
            },
            tag,
            first_file,
            learnt: std::time::Instant::now(),
        })
    }

    /// The version a commit made, with the version `manifest.json` became
    /// by its write (as the server named it).
    fn committed(manifest: &Manifest, tag: UpdateVersion) -> Planned {
        Planned {
            current: Resolved {
                manifest: manifest.clone(),
                bytes: manifest.to_json(),
            },
            tag,
            first_file: true,
            learnt: std::time::Instant::now(),
        }
    }
}

/// `manifest.json` alone, read afresh (one request), with its tag; None
/// when there is none. Version files after it are not looked for: a
/// commit from it finds them when it creates the next version's file.
pub(super) fn pointer(root: &Bucket) -> Result<Option<Planned>> {
    let (remote, base) = parts(root);
    let file = root.path().join(MANIFEST_FILE);
    Ok(
        match remote
            .get_versioned(&key(base, MANIFEST_FILE))
            .map_err(|e| io_error(&file, e))?
        {
            Some((bytes, tag)) => Some(Planned {
                current: Resolved {
                    manifest: parse_manifest(&file, &bytes)?,
                    bytes: bytes.to_vec(),
                },
                tag,
                first_file: false,
                learnt: std::time::Instant::now(),
            }),
            None => None,
        },
    )
}

/// [`publish`] of a write planned on `planned`: when no other commit came
/// between, the commit is the next version's file (created only if
/// absent) and the conditional move of `manifest.json`, with nothing read
/// again; the writes are those of [`publish`], in its order (version 1's
/// file is not written again when the plan knows it is there). When the
/// next version's file exists already (another commit won, or
/// `manifest.json` lagged behind the latest), [`publish`] takes over: it
/// reads the latest and calls `next` on it again. Returns the version made
/// and, when this commit moved `manifest.json` and the server named the
/// version it became, the plan of a next commit on it.
pub(super) fn publish_planned(
    root: &Bucket,
    operation: &str,
    planned: &Planned,
    next: Next<'_>,
) -> Result<(Manifest, Option<Planned>)> {
    let current = &planned.current;
    let manifest = versions::stamp(
        next(root, Some(&current.manifest))?,
        Some(current),
        operation,
    );
    match commit_on(
        root,
        current,
        Some(planned.tag.clone()),
        planned.first_file,
        &manifest,
    )? {
        Commit::Made(tag) => {
            let after = tag.map(|tag| Planned::committed(&manifest, tag));
            Ok((manifest, after))
        }
        Commit::Lost => publish(root, operation, next).map(|m| (m, None)),
    }
}

/// [`super::publish`] in a bucket: the new version's file is created only
/// if absent (the commit point: a committer that loses the race reads the
/// winner's version and tries again), then `manifest.json` is moved to it
/// only if it is still what this commit read (so it never moves back; when
/// a later commit moved it first, it is already past this version).
pub(super) fn publish(root: &Bucket, operation: &str, next: Next<'_>) -> Result<Manifest> {
    let file = root.path().join(MANIFEST_FILE);
    for attempt in 0..COMMIT_TRIES {
        // What this attempt learns of the bucket is its own.
        let fresh = root.fresh()?;
        let (remote, base) = parts(&fresh);
        let (current, tag) = latest(&fresh)?;
        let manifest = versions::stamp(
            next(&fresh, current.as_ref().map(|c| &c.manifest))?,
            current.as_ref(),
            operation,
        );
        let bytes = Bytes::from(manifest.to_json());
        let Some(current) = current else {
            // A new table's commit point is its manifest.json, created only
            // if absent; its version 1 follows.
            match remote
                .put(&key(base, MANIFEST_FILE), bytes.clone(), PutMode::Create)
                .map_err(|e| unsupported_conditional(&file, e))?
            {
                Put::Done(_) => {
                    remote
                        .put(&key(base, &version_rel(1)), bytes, PutMode::Create)
                        .map_err(|e| unsupported_conditional(&file, e))?;
                    return Ok(manifest);
                }
                Put::Conflict => {
                    lost(attempt);
                    continue;
                }
            }
        };
        match commit_on(&fresh, &current, tag, false, &manifest)? {
            Commit::Made(_) => return Ok(manifest),
            Commit::Lost => lost(attempt),
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

/// The commit of `manifest`, the version after `current`, whose
/// `manifest.json` had entity tag `tag`: version 1's file first when
/// `current` is version 1 and `first_file` does not say it is there (only it can lack its file: a table from before
/// versions, or a first commit killed before writing it; whoever writes it
/// writes the same version), then the new version's file, created only if
/// absent (the commit point: Conflict when another commit took the
/// version), then `manifest.json` moved to it only if it is still `tag`
/// (lost only to a later commit, which moved the pointer past this version
/// already).
fn commit_on(
    root: &Bucket,
    current: &Resolved,
    tag: Option<UpdateVersion>,
    first_file: bool,
    manifest: &Manifest,
) -> Result<Commit> {
    let (remote, base) = parts(root);
    let file = root.path().join(MANIFEST_FILE);
    if current.manifest.version() == 1 && !first_file {
        let first = versions::as_first_version(current);
        remote
            .put(
                &key(base, &version_rel(1)),
                Bytes::from(first.to_json()),
                PutMode::Create,
            )
            .map_err(|e| unsupported_conditional(&file, e))?;
    }
    let bytes = Bytes::from(manifest.to_json());
    let vkey = key(base, &version_rel(manifest.version()));
    if let Put::Conflict = remote
        .put(&vkey, bytes.clone(), PutMode::Create)
        .map_err(|e| unsupported_conditional(&file, e))?
    {
        return Ok(Commit::Lost);
    }
    let mode = match tag {
        Some(tag) => PutMode::Update(tag),
        None => PutMode::Create,
    };
    Ok(
        match remote
            .put(&key(base, MANIFEST_FILE), bytes, mode)
            .map_err(|e| unsupported_conditional(&file, e))?
        {
            Put::Done(tag) => Commit::Made(Some(tag)),
            // A later commit moved it past this version already.
            Put::Conflict => Commit::Made(None),
        },
    )
}

/// What [`commit_on`] did.
enum Commit {
    /// Another commit took the version first.
    Lost,
    /// The version is committed; with the version `manifest.json` became
    /// when this commit moved it.
    Made(Option<UpdateVersion>),
}

/// Waits before attempt `attempt + 1` of a commit that lost a race.
fn lost(attempt: u32) {
    std::thread::sleep(crate::io::remote::retry::backoff(
        attempt,
        std::time::Duration::from_millis(20),
    ));
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

/// How often a writer to a bucket rewrites its lease object.
pub(super) const LEASE_BEAT: std::time::Duration = std::time::Duration::from_secs(60);

/// The lease object of write `token`, relative to the table.
pub(super) fn lease_rel(token: &str) -> String {
    format!("{}/{token}.json", files::LEASES_DIR)
}

/// A write's lease in a bucket: the object `_leases/<token>.json`,
/// written by a thread of the writing process [`LEASE_BEAT`] after the
/// write began and rewritten every beat until the lease is dropped (then
/// removed). A write shorter than a beat makes no request for it: what a
/// writer killed before its first beat left is younger than a beat too,
/// and a cleanup leaves nothing younger than an hour. A writer that dies
/// stops rewriting it, so an object not rewritten for
/// [`LEASE_TTL_MS`](super::history::LEASE_TTL_MS) is
/// a dead writer's (buckets have no locks a dead process gives back).
///
/// The object also lists the write's open multipart uploads (`uploads`:
/// each object's key and upload id, written before the upload's first
/// part), which a cleanup aborts when the lease is a dead writer's.
pub(super) struct BucketLease {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    object: std::sync::Arc<LeaseObject>,
    beat: Option<std::thread::JoinHandle<()>>,
    root: Bucket,
    pid: u32,
}

/// A lease object and what it says: written whole, under its lock (a
/// beat never writes an older list of uploads over a newer one).
#[derive(Debug)]
pub(super) struct LeaseObject {
    rel: String,
    /// The open uploads (key, id), under the lock every write holds.
    uploads: std::sync::Mutex<Vec<(String, String)>>,
    written: std::sync::atomic::AtomicBool,
}

/// What a lease object holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct LeaseBody {
    pid: u32,
    beat_ms: u64,
    #[serde(default)]
    uploads: Vec<Upload>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Upload {
    key: String,
    id: String,
}

impl LeaseObject {
    fn body(uploads: &[(String, String)]) -> Vec<u8> {
        let body = LeaseBody {
            pid: std::process::id(),
            beat_ms: versions::now_ms(),
            uploads: uploads
                .iter()
                .map(|(key, id)| Upload {
                    key: key.clone(),
                    id: id.clone(),
                })
                .collect(),
        };
        let mut out = serde_json::to_vec(&body).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Writes the object afresh.
    fn write(&self, root: &Bucket) -> Result<()> {
        let uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        overwrite(root, &self.rel, Self::body(&uploads))?;
        self.written
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Records the upload `id` of the object `key` as open (written to the
    /// object before this returns) or as closed (left for the next beat:
    /// aborting a completed upload changes nothing).
    fn record(&self, root: &Bucket, key: &str, id: &str, open: bool) -> std::io::Result<()> {
        let mut uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        if !open {
            uploads.retain(|(k, i)| !(k == key && i == id));
            return Ok(());
        }
        uploads.push((key.to_owned(), id.to_owned()));
        match overwrite(root, &self.rel, Self::body(&uploads)) {
            Ok(()) => {
                self.written
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                uploads.pop();
                Err(std::io::Error::other(e.to_string()))
            }
        }
    }
}

/// Aborts the multipart uploads the dead writers' lease objects `rels`
/// list (an object that does not parse lists none).
pub(super) fn abort_uploads(root: &Bucket, rels: &[String]) -> Result<()> {
    for rel in rels {
        let Some(raw) = read(root, rel)? else {
            continue;
        };
        let Ok(body) = serde_json::from_slice::<LeaseBody>(&raw) else {
            continue;
        };
        for u in body.uploads {
            root.remote
                .abort_upload(&u.key, &u.id)
                .map_err(|e| io_error(&root.path().join(rel), e))?;
        }
    }
    Ok(())
}

/// Aborts the multipart uploads open below `root` that the service says
/// were created at least `min_age` ago, that no lease object of the `live`
/// writes (tokens) lists, and whose key (relative to `root`) `spared` does
/// not keep: uploads of writers killed before they recorded them, or
/// whose lease objects are gone. Of a table at the root of its bucket,
/// only those below its shards and groups. Nothing where the service's
/// uploads cannot be listed (see `Remote::open_uploads`; the documented
/// bucket lifecycle rule covers them). Returns how many were aborted.
pub(super) fn abort_unheld_uploads(
    root: &Bucket,
    live: &BTreeSet<String>,
    spared: &dyn Fn(&str) -> bool,
    min_age: std::time::Duration,
) -> Result<usize> {
    let (remote, base) = parts(root);
    let prefix = if base.is_empty() {
        String::new()
    } else {
        format!("{base}/")
    };
    let Some(open) = remote
        .open_uploads(&prefix, min_age)
        .map_err(|e| io_error(root.path(), e))?
    else {
        return Ok(0);
    };
    if open.is_empty() {
        return Ok(0);
    }
    let mut held = BTreeSet::new();
    for token in live {
        let Some(raw) = read(root, &lease_rel(token))? else {
            continue;
        };
        if let Ok(body) = serde_json::from_slice::<LeaseBody>(&raw) {
            held.extend(body.uploads.into_iter().map(|u| u.id));
        }
    }
    let mut aborted = 0;
    let unheld = open.iter().filter(|(key, id)| {
        let rel = key.strip_prefix(prefix.as_str()).unwrap_or(key);
        // A table at the root of its bucket owns only its shards and
        // groups there, not every upload of the bucket.
        let ours = !base.is_empty() || rel.starts_with("shard-") || rel.starts_with("_g-");
        ours && !held.contains(id) && !spared(rel)
    });
    for (key, id) in unheld {
        remote
            .abort_upload(key, id)
            .map_err(|e| io_error(root.path(), e))?;
        aborted += 1;
    }
    Ok(aborted)
}

impl BucketLease {
    /// Takes the lease of write `token` in `root`: starts the thread that
    /// writes its object every beat, and records the write's uploads in it.
    pub(super) fn take(root: &Bucket, token: &str) -> Result<BucketLease> {
        let object = std::sync::Arc::new(LeaseObject {
            rel: lease_rel(token),
            uploads: Default::default(),
            written: Default::default(),
        });
        let stop = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let (flag, bucket, beating) = (stop.clone(), root.clone(), object.clone());
        let beat = std::thread::Builder::new()
            .name("loaderx-lease".into())
            .spawn(move || {
                let (lock, cv) = &*flag;
                let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let (s, _) = cv
                        .wait_timeout(stopped, LEASE_BEAT)
                        .unwrap_or_else(|e| e.into_inner());
                    stopped = s;
                    if *stopped {
                        return;
                    }
                    // A failed beat is retried at the next one.
                    let _ = beating.write(&bucket);
                }
            })
            .map_err(|e| Error::io(root.path(), e))?;
        *root.lease.lock().unwrap_or_else(|e| e.into_inner()) = Some(object.clone());
        Ok(BucketLease {
            stop,
            object,
            beat: Some(beat),
            root: root.clone(),
            pid: std::process::id(),
        })
    }
}

impl Drop for BucketLease {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            // A fork()ed child: the beating thread is the parent's.
            if let Some(beat) = self.beat.take() {
                std::mem::forget(beat);
            }
            return;
        }
        *self.stop.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.stop.1.notify_all();
        if let Some(beat) = self.beat.take() {
            let _ = beat.join();
        }
        *self.root.lease.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if self
            .object
            .written
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            let _ = delete_rels(&self.root, std::slice::from_ref(&self.object.rel));
        }
    }
}
