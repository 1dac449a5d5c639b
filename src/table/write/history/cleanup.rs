//! The cleanup of a table's history: old versions and the shards, groups
//! and deletion files only they named, and what dead writers left (leases,
//! staging directories, uploads). Locally under the commit lock; in a
//! bucket with create-only writes.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{json, Value};

use crate::io::Fs;
use crate::table::files;
use crate::table::manifest::{in_shard, MANIFEST_FILE, SELF_SHARD};
use crate::table::types::VALIDITY_DIR;
use crate::table::versions::now_ms;
use crate::table::versions::{
    self, version_rel, Resolved, VersionRef, View, CLEANUP_FILE, TAGS_DIR, VERSIONS_DIR, VIEWS_DIR,
    VIEW_SETS_DIR,
};
use crate::table::write::root::{Root, RootKind};
use crate::{Error, Location, Result};

#[cfg(feature = "remote")]
use crate::table::write::bucket;

use super::{fresh, lock};

/// What a cleanup removes: version files and whole shards.
#[derive(Default)]
struct Doomed {
    files: Vec<String>,
    shards: Vec<String>,
    /// `[shard, column]`: a column's store (and validity stream) in a
    /// shard's own directory (`"."`: the table's own).
    columns: Vec<(String, String)>,
}

/// Whether a cleanup may remove column `column`'s store from shard
/// `shard`'s own directory: a name that can only be a column's (never a
/// group, a deletion file, a table file, the versions).
fn removable_column(shard: &str, column: &str) -> bool {
    (shard == SELF_SHARD || (crate::table::is_shard_name(shard) && !shard.starts_with('_')))
        && !column.is_empty()
        && !column.starts_with('_')
        && !column.starts_with('.')
        && !column.contains('/')
        && !column.contains('\0')
        && !column.ends_with(".json")
}

impl Doomed {
    fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec(
            &json!({"files": self.files, "shards": self.shards, "columns": self.columns}),
        )
        .expect("a list of strings serialises");
        out.push(b'\n');
        out
    }

    fn parse(file: &Path, raw: &[u8]) -> Result<Doomed> {
        let doc: Value = serde_json::from_slice(raw)
            .map_err(|e| Error::corrupted(file, format!("not valid JSON ({e})")))?;
        let list = |k: &str| -> Result<Vec<String>> {
            doc.get(k)
                .and_then(Value::as_array)
                .and_then(|a| {
                    a.iter()
                        .map(|v| v.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| Error::corrupted(file, format!("'{k}' must be a list of paths")))
        };
        let columns = match doc.get("columns") {
            // Written by a cleanup that removed no columns' stores.
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .map(|p| match p.as_array().map(Vec::as_slice) {
                            Some([Value::String(s), Value::String(c)]) => {
                                Some((s.clone(), c.clone()))
                            }
                            _ => None,
                        })
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| {
                    Error::corrupted(file, "'columns' must be a list of [shard, column] pairs")
                })?,
        };
        let doomed = Doomed {
            files: list("files")?,
            shards: list("shards")?,
            columns,
        };
        // Only what a cleanup removes: version files, deletion files, shard
        // names and column groups.
        let in_shard = |p: &str, ok: &dyn Fn(&str) -> bool| match p.split_once('/') {
            None => ok(p),
            Some((shard, rest)) => {
                crate::table::is_shard_name(shard) && !shard.starts_with('_') && ok(rest)
            }
        };
        let deletion =
            |n: &str| n.starts_with("_deleted-") && n.ends_with(".u64") && !n.contains('/');
        let group = |n: &str| n.starts_with("_g-") && !n.contains('/') && !n.contains("..");
        let plain = doomed.files.iter().all(|f| {
            f.strip_prefix(&format!("{VERSIONS_DIR}/"))
                .and_then(versions::parse_version_name)
                .is_some()
                || in_shard(f, &deletion)
        }) && doomed.shards.iter().all(|s| {
            (crate::table::is_shard_name(s) && !s.starts_with('_')) || in_shard(s, &group)
        }) && doomed.columns.iter().all(|(s, c)| removable_column(s, c));
        if !plain {
            return Err(Error::corrupted(
                file,
                "it may only list version files, deletion files, shard names, column groups and columns of shards",
            ));
        }
        Ok(doomed)
    }
}

/// Removes the versions of the sharded table at `at` committed more than
/// `older_than_ms` milliseconds ago, except the last `keep_last` (at least
/// 1: the latest is always kept) and tagged ones, and then every shard,
/// column group and deletion file that only removed versions named, and
/// the stores of columns dropped from a shard's own directory that no kept
/// version reads or lists. Returns the bytes freed.
///
/// It also removes what killed writers left, older than `older_than_ms`
/// and at least an hour: the shard and column-group directories (in a
/// bucket, prefixes) no version names whose write no live process holds a
/// lease of (`_leases/`: a locked file, or in a bucket an object rewritten
/// in the last 15 minutes), and dead writers' lease objects; on this
/// machine, the local staging directories (`loaderx-<kind>-*` in the
/// temporary directory) of writers to buckets that died. A live writer's
/// are never removed. See docs/format.md.
///
/// Version files go first, then the shards: a cleanup killed midway
/// leaves no version naming a missing shard, and its list of what it
/// removes (`_cleanup.json`, written before anything is removed) is
/// finished by the next cleanup.
pub fn cleanup(at: &Location, older_than_ms: u64, keep_last: u64) -> Result<u64> {
    cleanup_leaving(at, older_than_ms, keep_last, Leftovers::default())
}

/// How [`cleanup_leaving`] tells a dead writer's leftovers from a live
/// one's.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct Leftovers {
    /// What dead writers left is kept at least this long (an hour).
    pub min_age: std::time::Duration,
    /// A bucket's lease object not rewritten for this long is a dead
    /// writer's (15 minutes).
    pub lease_ttl: std::time::Duration,
}

impl Default for Leftovers {
    fn default() -> Leftovers {
        Leftovers {
            min_age: files::LEFTOVER_MIN_AGE,
            lease_ttl: std::time::Duration::from_millis(LEASE_TTL_MS),
        }
    }
}

/// How long after its last rewrite a bucket's lease object still shows a
/// live writer: many beats, and room for clocks that disagree by minutes.
pub(crate) const LEASE_TTL_MS: u64 = 15 * 60 * 1000;

/// [`cleanup`] with other floors than an hour for the age of what dead
/// writers left and 15 minutes for the age of their lease objects: what
/// the tests of that reclaim call (a bucket's objects cannot be made to
/// look old). Not for use on tables that live writers may be writing.
#[doc(hidden)]
pub fn cleanup_leaving(
    at: &Location,
    older_than_ms: u64,
    keep_last: u64,
    leftover: Leftovers,
) -> Result<u64> {
    let leftover_min_age = leftover.min_age;
    if keep_last == 0 {
        return Err(Error::InvalidValue(
            "keep_last must be at least 1 (the latest version is always kept), got 0".into(),
        ));
    }
    let at = fresh(at);
    let root = Root::of(&at)?;
    let _lock = lock(&root)?;
    // This machine's staging directories of dead writers to buckets.
    let min_age = std::time::Duration::from_millis(older_than_ms).max(leftover_min_age);
    let mut freed = files::reclaim_staging(min_age);
    let pending_file = root.path().join(CLEANUP_FILE);
    if let Some(raw) = root.read(CLEANUP_FILE)? {
        freed += remove(&root, &Doomed::parse(&pending_file, &raw)?)?;
    }
    // What the cleanup finished may have been read already: read afresh.
    let at = fresh(&at);
    let root = Root::of(&at)?;
    let latest = versions::resolve(at.fs(), at.path(), &VersionRef::Latest)?;
    let top = latest.manifest.version();
    // Tagged versions and the versions views select rows of are kept.
    let views = versions::views(at.fs(), at.path())?;
    let tagged: BTreeSet<u64> = versions::tags(at.fs(), at.path())?
        .into_iter()
        .map(|(_, v)| v)
        .chain(views.iter().map(|v| v.version))
        .collect();
    let now = now_ms();
    let mut kept: Vec<Resolved> = vec![latest];
    let mut removed: Vec<Resolved> = Vec::new();
    for r in versions::versions(at.fs(), at.path())? {
        let v = r.manifest.version();
        if v >= top {
            continue; // the latest, kept above
        }
        let recent = r
            .manifest
            .timestamp_ms
            .is_some_and(|t| now.saturating_sub(t) < older_than_ms);
        if v + keep_last > top || tagged.contains(&v) || recent {
            kept.push(r);
        } else {
            removed.push(r);
        }
    }
    let needed: BTreeSet<&str> = kept
        .iter()
        .flat_map(|r| r.manifest.shards.iter().map(|s| s.name.as_str()))
        .collect();
    let mut shards: BTreeSet<String> = BTreeSet::new();
    for r in &removed {
        for s in &r.manifest.shards {
            // A plain table turned sharded in place is the table's own
            // directory: never removed.
            if !needed.contains(s.name.as_str()) && s.name != SELF_SHARD {
                shards.insert(s.name.clone());
            }
        }
    }
    // In the shards that stay: the column groups and deletion files that
    // only removed versions list.
    let listed = |rs: &[Resolved]| -> (BTreeSet<String>, BTreeSet<String>) {
        let mut groups = BTreeSet::new();
        let mut deletions = BTreeSet::new();
        for r in rs {
            for s in &r.manifest.shards {
                groups.extend(s.groups.iter().map(|g| in_shard(&s.name, &g.dir)));
                deletions.extend(s.deleted.iter().map(|d| in_shard(&s.name, &d.file)));
            }
        }
        (groups, deletions)
    };
    let (kept_groups, kept_deletions) = listed(&kept);
    let in_doomed_shard = |p: &String| shards.iter().any(|s| p.starts_with(&format!("{s}/")));
    let (old_groups, old_deletions) = listed(&removed);
    let groups = old_groups
        .into_iter()
        .filter(|g| !kept_groups.contains(g) && !in_doomed_shard(g));
    let deletions = old_deletions
        .into_iter()
        .filter(|d| !kept_deletions.contains(d) && !in_doomed_shard(d));
    // In the shards that stay: the stores of columns dropped from a
    // shard's own directory that no kept version reads or lists.
    let at_home = |rs: &[Resolved]| -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for r in rs {
            for s in &r.manifest.shards {
                for c in &r.manifest.columns {
                    if s.column_home(c).is_empty() {
                        out.insert((s.name.clone(), c.clone()));
                    }
                }
            }
        }
        out
    };
    let mut needed_columns = at_home(&kept);
    for r in &kept {
        for s in &r.manifest.shards {
            // What a version's objects name stays too, whatever it reads.
            for k in s.objects.iter().flat_map(|o| o.keys()) {
                let k = k.strip_prefix(&format!("{VALIDITY_DIR}/")).unwrap_or(k);
                if let Some((c, _)) = k.split_once('/') {
                    needed_columns.insert((s.name.clone(), c.to_owned()));
                }
            }
        }
    }
    let shard_names: BTreeSet<&str> = kept
        .iter()
        .chain(&removed)
        .flat_map(|r| r.manifest.shards.iter().map(|s| s.name.as_str()))
        .collect();
    let columns: Vec<(String, String)> = at_home(&removed)
        .into_iter()
        .filter(|(s, c)| {
            // The table's own directory also holds the other shards.
            let a_shard = s == SELF_SHARD && shard_names.contains(c.as_str());
            // Needed, or gone with its whole shard.
            let skip = needed_columns.contains(&(s.clone(), c.clone())) || shards.contains(s);
            !skip && !a_shard && removable_column(s, c)
        })
        .collect();
    // What dead writers left: shard and group directories no version
    // names, old enough, of writes no live process holds a lease of.
    let every: Vec<&Resolved> = kept.iter().chain(&removed).collect();
    // The one branch of the cleanup on where the table is: what dead
    // writers leave, how it is found dead and how it goes differ. A local
    // table's are directories judged by their age and the locks of their
    // writes' lease files, and temporary files left by killed commits; a
    // bucket's are objects judged by their dates and their writes' lease
    // objects, and open multipart uploads. Each side reclaims what is not
    // in `doomed` (lease files, temporary files; lease objects, uploads)
    // here, before `doomed` is written.
    let leftovers = match &root.kind {
        RootKind::Local(dir) => {
            let dirs = leftovers(dir, &every, min_age)?;
            // What killed commits and view saves left (under the table's
            // lock, nothing is being committed now).
            for path in stray_files(dir, &views)? {
                freed += files::file_len(&path).unwrap_or(0);
                files::remove_file_synced(&path, path.parent().unwrap_or(dir))?;
            }
            dirs
        }
        #[cfg(feature = "remote")]
        RootKind::Bucket(b) => {
            let (dirs, leases) = bucket_leftovers(b, &every, min_age, leftover.lease_ttl)?;
            // Dead writers' lease objects: nothing names them. The multipart
            // uploads they left open, which they list, are aborted first; then
            // any other upload old enough that no live writer holds (one a
            // writer was killed before recording), where the service lists them.
            bucket::abort_uploads(b, &leases.stale)?;
            bucket::delete_rels(b, &leases.stale)?;
            // A live writer's uploads are spared by the token in their keys'
            // shard or group too (it may not have recorded the newest yet), so
            // that no clock but the lease's decides for them.
            let live_write = |rel: &str| {
                rel.split('/')
                    .take(2)
                    .any(|name| write_token(name).is_some_and(|t| leases.live.contains(t)))
            };
            bucket::abort_unheld_uploads(b, &leases.live, &live_write, min_age)?;
            dirs
        }
    };
    let doomed = Doomed {
        files: removed
            .iter()
            .map(|r| version_rel(r.manifest.version()))
            .chain(deletions)
            .collect(),
        shards: shards
            .iter()
            .cloned()
            .chain(groups)
            .chain(leftovers)
            .collect(),
        columns,
    };
    if doomed.files.is_empty() && doomed.shards.is_empty() && doomed.columns.is_empty() {
        return Ok(freed);
    }
    root.overwrite(CLEANUP_FILE, None, doomed.to_json())?;
    freed += remove(&root, &doomed)?;
    Ok(freed)
}

/// The files of the local table `dir` that killed writes left and nothing
/// reads: in the views' directories, row files no view of `views` names and
/// temporary files; in the versions' and tags' directories, temporary
/// files; beside the manifest, its and the pending cleanup's temporary
/// files. Every write that makes them holds the commit lock, as the cleanup
/// does, so none of them is a write in progress.
fn stray_files(dir: &Path, views: &[View]) -> Result<Vec<std::path::PathBuf>> {
    let named: BTreeSet<&str> = views.iter().map(|v| v.file.as_str()).collect();
    let mut out = Vec::new();
    for sub in [VIEWS_DIR, VIEW_SETS_DIR, VERSIONS_DIR, TAGS_DIR] {
        let d = dir.join(sub);
        if !d.is_dir() {
            continue;
        }
        for name in files::list(&d)? {
            let stray = name.starts_with('.')
                || (sub == VIEWS_DIR && name.ends_with(".u64") && !named.contains(name.as_str()));
            if stray && d.join(&name).is_file() {
                out.push(d.join(name));
            }
        }
    }
    let temps = [format!(".{MANIFEST_FILE}."), format!(".{CLEANUP_FILE}.")];
    for name in files::list(dir)? {
        if temps.iter().any(|t| name.starts_with(t.as_str())) && dir.join(&name).is_file() {
            out.push(dir.join(name));
        }
    }
    Ok(out)
}

/// The write token in a shard directory's name `shard-<token>-<random>`
/// (a `TableWrite`'s; a shard made by hand has none), or in a group's
/// `_g-<token>` (an edit's patch: `_g-<token>-p`).
fn write_token(name: &str) -> Option<&str> {
    if let Some(token) = name.strip_prefix("_g-") {
        // An edit's patch group is `_g-<token>-p`.
        return Some(token.strip_suffix("-p").unwrap_or(token));
    }
    let (token, random) = name.strip_prefix("shard-")?.split_once('-')?;
    (!token.is_empty() && !random.is_empty()).then_some(token)
}

/// The shards the versions `every` name, and the column groups (paths
/// below the table) they list.
fn named_and_listed<'a>(every: &[&'a Resolved]) -> (BTreeSet<&'a str>, BTreeSet<String>) {
    let named = every
        .iter()
        .flat_map(|r| r.manifest.shards.iter().map(|s| s.name.as_str()))
        .collect();
    let listed = every
        .iter()
        .flat_map(|r| {
            r.manifest
                .shards
                .iter()
                .flat_map(|s| s.groups.iter().map(|g| in_shard(&s.name, &g.dir)))
        })
        .collect();
    (named, listed)
}

/// What dead writers left in the bucket `b`: the shard prefixes no
/// version of `every` names and the group prefixes in named shards that
/// none lists, whose newest object is older than `min_age` and whose write
/// has no live lease object (one rewritten within `lease_ttl`); and the
/// lease objects of dead writers older than `min_age` too.
#[cfg(feature = "remote")]
fn bucket_leftovers(
    b: &bucket::Bucket,
    every: &[&Resolved],
    min_age: std::time::Duration,
    lease_ttl: std::time::Duration,
) -> Result<(Vec<String>, BucketLeases)> {
    let lease_ttl = i64::try_from(lease_ttl.as_millis()).unwrap_or(i64::MAX);
    let (named, listed) = named_and_listed(every);
    let objects = bucket::dated_files(b)?;
    let now = now_ms() as i64;
    let min_age = i64::try_from(min_age.as_millis()).unwrap_or(i64::MAX);
    let leases = format!("{}/", files::LEASES_DIR);
    let mut live = BTreeSet::new();
    let mut stale = Vec::new();
    // The newest object below each shard or group a leftover may be.
    let mut newest: std::collections::BTreeMap<String, i64> = Default::default();
    for (rel, _, at) in &objects {
        if let Some(token) = rel
            .strip_prefix(&leases)
            .and_then(|t| t.strip_suffix(".json"))
        {
            if now - at < lease_ttl {
                live.insert(token.to_owned());
            } else if now - at >= min_age {
                stale.push(rel.clone());
            }
            continue;
        }
        let mut parts = rel.split('/');
        let first = parts.next().unwrap_or_default();
        let candidate = if first.starts_with("shard-") && !named.contains(first) {
            Some(first.to_owned())
        } else {
            let (shard, group) = if first.starts_with("_g-") {
                (SELF_SHARD, first)
            } else {
                (first, parts.next().unwrap_or_default())
            };
            let prefix = in_shard(shard, group);
            (named.contains(shard)
                && group.starts_with("_g-")
                && rel.len() > prefix.len()
                && !listed.contains(&prefix))
            .then_some(prefix)
        };
        if let Some(c) =
            candidate.filter(|c| crate::table::is_shard_name(c.rsplit('/').next().unwrap_or(c)))
        {
            let e = newest.entry(c).or_insert(i64::MIN);
            *e = (*e).max(*at);
        }
    }
    let dirs = newest
        .into_iter()
        .filter(|(rel, at)| {
            let name = rel.rsplit('/').next().unwrap_or(rel);
            now - at >= min_age && !write_token(name).is_some_and(|t| live.contains(t))
        })
        .map(|(rel, _)| rel)
        .collect();
    Ok((dirs, BucketLeases { live, stale }))
}

/// The lease objects of a table in a bucket: the tokens of the writes
/// whose objects were rewritten within the lease's time to live, and the
/// objects (relative paths) of dead writers, old enough to remove.
#[cfg(feature = "remote")]
#[derive(Default)]
struct BucketLeases {
    live: BTreeSet<String>,
    stale: Vec<String>,
}

/// The shard directories of the local table `dir` that no version of
/// `every` names, and the group directories in its shards that none lists,
/// whose write no live process holds a lease of and that are older than
/// `older_than_ms` and [`files::LEFTOVER_MIN_AGE`]: what killed writers
/// left (shards by hand, without a lease, by age alone).
fn leftovers(dir: &Path, every: &[&Resolved], min_age: std::time::Duration) -> Result<Vec<String>> {
    let dead = |rel: &str, name: &str| {
        files::age(&dir.join(rel)) >= min_age
            && !write_token(name).is_some_and(|t| files::write_live(dir, t))
    };
    let (named, listed) = named_and_listed(every);
    let mut out = Vec::new();
    for name in files::list(dir)? {
        let is_shard = name.starts_with("shard-")
            && crate::table::is_shard_name(&name)
            && files::is_dir(&Fs::Local, &dir.join(&name));
        if is_shard && !named.contains(name.as_str()) && dead(&name, &name) {
            out.push(name);
        }
    }
    for shard in &named {
        let home = if *shard == SELF_SHARD {
            dir.to_path_buf()
        } else {
            dir.join(shard)
        };
        for name in files::list(&home).unwrap_or_default() {
            let rel = in_shard(shard, &name);
            if name.starts_with("_g-")
                && !listed.contains(&rel)
                && files::is_dir(&Fs::Local, &home.join(&name))
                && dead(&rel, &name)
            {
                out.push(rel);
            }
        }
    }
    files::reclaim_leases(dir, min_age);
    Ok(out)
}

/// Removes what `doomed` lists (what is gone already is skipped), then
/// the list itself; returns the bytes freed.
fn remove(root: &Root, doomed: &Doomed) -> Result<u64> {
    let mut freed = root.file_sizes(&doomed.files)?;
    root.delete_files(&doomed.files)?;
    for shard in &doomed.shards {
        freed += root.remove_tree(shard)?;
    }
    for (shard, column) in &doomed.columns {
        freed += root.remove_tree(&in_shard(shard, column))?;
        let validity = format!("{VALIDITY_DIR}/{column}");
        freed += root.remove_tree(&in_shard(shard, &validity))?;
    }
    root.delete_files(&[CLEANUP_FILE.to_owned()])?;
    Ok(freed)
}
