//! Versions of a sharded table (see `docs/format.md`, "Versions"): which
//! manifest a reader opens.
//!
//! Every commit writes a new, immutable manifest `_versions/<N>.json` (N
//! as 20 digits, so names sort as numbers) and then makes `manifest.json`
//! a copy of it. The version file is the commit point; `manifest.json` is
//! a pointer to the latest version that may lag behind after a commit
//! killed between the two writes, so a reader takes it and then looks for
//! the next version files. A new table's first commit is the exception:
//! its `manifest.json` is written first (the commit point: a version file
//! without one is no table), its `_versions/1` after. A table written
//! before versions has only `manifest.json`, which is its version 1; its
//! next commit writes `_versions/1` before its own version.
//!
//! Tags are `_tags/<name>.json` (`{"version": N}`), written once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::files;
use super::manifest::{check_shards_present, parse_manifest, Manifest, MANIFEST_FILE};
use crate::io::{Fs, Storage};
use crate::repr::{py_list, py_repr, py_str};
use crate::{Error, Result};

/// The directory of a sharded table's version files.
pub const VERSIONS_DIR: &str = "_versions";
/// The directory of a sharded table's tags.
pub const TAGS_DIR: &str = "_tags";
/// The directory of a sharded table's views.
pub const VIEWS_DIR: &str = "_views";
/// The directory of view sets (the views a split saves all at once),
/// below [`VIEWS_DIR`].
pub const VIEW_SETS_DIR: &str = "_views/_sets";
/// The list of files a cleanup removes, written before it removes any
/// (a cleanup killed midway is finished by the next one).
pub(crate) const CLEANUP_FILE: &str = "_cleanup.json";

/// Which version of a table to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionRef {
    /// The latest committed version.
    Latest,
    /// Version N (1, 2, ...).
    Number(u64),
    /// The version a tag names.
    Tag(String),
}

/// One version's manifest: its bytes (what a reader pins) and its checked
/// content.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub bytes: Vec<u8>,
    pub manifest: Manifest,
}

/// The checked manifest of the latest version of the sharded table `dir`
/// (the latest version: `resolve` of [`VersionRef::Latest`]).
///
/// [`Error::Missing`] when `dir` has no manifest; [`Error::Corrupted`]
/// naming `manifest.json` and the broken rule when it is not a manifest of
/// this format, when it names a shard directory that does not exist
/// (naming the shard), or a nullable column a shard has no validity stream
/// for.
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    read_manifest_in(&Fs::Local, dir)
}

/// [`read_manifest`] of a table on `fs`.
pub(crate) fn read_manifest_in(fs: &Fs, dir: &Path) -> Result<Manifest> {
    let latest = resolve(fs, dir, &VersionRef::Latest)?;
    check_shards_present(fs, dir, &latest.manifest)?;
    Ok(latest.manifest)
}

/// `manifest` as the version after `current`: numbered, timed and named.
pub(crate) fn stamp(
    mut manifest: Manifest,
    current: Option<&Resolved>,
    operation: &str,
) -> Manifest {
    manifest.table_version = Some(current.map_or(0, |c| c.manifest.version()) + 1);
    manifest.timestamp_ms = Some(now_ms());
    // The table's metadata goes on, with what this commit sets over it.
    let mut metadata = current
        .map(|c| c.manifest.metadata.clone())
        .unwrap_or_default();
    metadata.extend(std::mem::take(&mut manifest.metadata));
    manifest.metadata = metadata;
    // A table's first commit of shards creates it.
    let first = current.is_none() && operation == "append";
    manifest.operation = Some(if first { "create" } else { operation }.to_owned());
    manifest
}

/// The current version (from `manifest.json`) as the file it misses: a
/// table from before versions (its manifest holds no version: version 1,
/// timed now), or a new table's commit killed between its manifest and
/// its version 1. The next commit writes it before its own.
pub(crate) fn as_first_version(current: &Resolved) -> Manifest {
    let mut m = current.manifest.clone();
    if m.table_version.is_none() {
        m.table_version = Some(1);
        m.timestamp_ms = Some(now_ms());
        m.operation = Some("create".into());
    }
    m
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The file name of version `v` inside [`VERSIONS_DIR`].
pub fn version_file_name(v: u64) -> String {
    format!("{v:020}.json")
}

/// The path of version `v`'s file relative to the table.
pub(crate) fn version_rel(v: u64) -> String {
    format!("{VERSIONS_DIR}/{}", version_file_name(v))
}

/// The version a file name inside [`VERSIONS_DIR`] holds, None for any
/// other name (temporary files, say).
pub(crate) fn parse_version_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".json")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&v| v >= 1)
}

/// The path of tag `name`'s file relative to the table.
pub(crate) fn tag_rel(name: &str) -> String {
    format!("{TAGS_DIR}/{name}.json")
}

/// Whether `name` is a tag name the format allows (the rule of shard
/// names: `[A-Za-z0-9_][A-Za-z0-9._-]{0,254}`) and not a number (which
/// `version=` would take as a version).
pub fn is_tag_name(name: &str) -> bool {
    super::manifest::is_shard_name(name) && !name.bytes().all(|b| b.is_ascii_digit())
}

/// A tag file's bytes.
pub(crate) fn tag_json(version: u64) -> Vec<u8> {
    format!("{{\"version\": {version}}}\n").into_bytes()
}

/// The version a tag file's bytes name: [`Error::Corrupted`] naming `file`
/// otherwise.
pub(crate) fn parse_tag(file: &Path, raw: &[u8]) -> Result<u64> {
    let doc: Value = serde_json::from_slice(raw)
        .map_err(|e| Error::corrupted(file, format!("not valid JSON ({e})")))?;
    let v = doc.get("version").unwrap_or(&Value::Null);
    v.as_u64().filter(|&n| n >= 1).ok_or_else(|| {
        Error::corrupted(
            file,
            format!(
                "a tag must name a version (a positive integer), got {}",
                py_repr(v)
            ),
        )
    })
}

/// Version `v`'s manifest from its bytes read at `file`, checked to be
/// version `v`.
pub(crate) fn parse_version(file: &Path, raw: Vec<u8>, v: u64) -> Result<Resolved> {
    let manifest = parse_manifest(file, &raw)?;
    if manifest.version() != v {
        return Err(Error::corrupted(
            file,
            format!(
                "the file of version {v} holds version {}",
                manifest.version()
            ),
        ));
    }
    Ok(Resolved {
        bytes: raw,
        manifest,
    })
}

/// Reads a file of the table relative to it: None when absent.
pub(crate) type ReadRel<'a> = &'a mut dyn FnMut(&str) -> Result<Option<Vec<u8>>>;

/// The latest version given what `manifest.json` says (`pointer`, None
/// when there is none): the pointer, or the version files after it.
pub(crate) fn forward(
    dir: &Path,
    pointer: Option<Resolved>,
    read: ReadRel<'_>,
) -> Result<Option<Resolved>> {
    // A new table's commit point is its manifest.json: without one there
    // is no table, whatever version file a killed first commit left.
    let Some(mut current) = pointer else {
        return Ok(None);
    };
    loop {
        let next = current.manifest.version() + 1;
        let rel = version_rel(next);
        match read(&rel)? {
            Some(raw) => current = parse_version(&dir.join(&rel), raw, next)?,
            None => return Ok(Some(current)),
        }
    }
}

/// A small file of the table at `dir` on `fs` (one request in a bucket).
fn read_rel(fs: &Fs, dir: &Path, rel: &str) -> Result<Option<Vec<u8>>> {
    files::read_object(fs, &dir.join(rel))
}

/// The latest version of the sharded table `dir` on `fs`, None when it has
/// no manifest.
pub(crate) fn latest(fs: &Fs, dir: &Path) -> Result<Option<Resolved>> {
    let file = dir.join(MANIFEST_FILE);
    let pointer = match read_rel(fs, dir, MANIFEST_FILE)? {
        Some(raw) => Some(Resolved {
            manifest: parse_manifest(&file, &raw)?,
            bytes: raw,
        }),
        None => None,
    };
    forward(dir, pointer, &mut |rel| read_rel(fs, dir, rel))
}

fn not_sharded(dir: &Path) -> Error {
    Error::Missing {
        path: dir.join(MANIFEST_FILE),
        message: format!(
            "{} is not a sharded table: it has no {MANIFEST_FILE}",
            dir.display()
        ),
    }
}

/// The version `want` of the sharded table `dir` on `fs`.
///
/// [`Error::Missing`] when `dir` is not a sharded table; `InvalidValue`
/// naming the version (and the latest) when there is no such version, or
/// naming the tag (and the tags there are) for an unknown tag;
/// [`Error::Corrupted`] naming the file for a version or tag file that
/// breaks the format.
pub(crate) fn resolve(fs: &Fs, dir: &Path, want: &VersionRef) -> Result<Resolved> {
    match want {
        VersionRef::Latest => latest(fs, dir)?.ok_or_else(|| not_sharded(dir)),
        VersionRef::Number(v) => {
            let rel = version_rel(*v);
            if *v >= 1 {
                if let Some(raw) = read_rel(fs, dir, &rel)? {
                    return parse_version(&dir.join(&rel), raw, *v);
                }
            }
            let latest = latest(fs, dir)?.ok_or_else(|| not_sharded(dir))?;
            // A table from before versions is its own version 1.
            if latest.manifest.version() == *v {
                return Ok(latest);
            }
            let why = if *v >= 1 && *v < latest.manifest.version() {
                "it was removed by a cleanup"
            } else {
                "it was never committed"
            };
            Err(Error::InvalidValue(format!(
                "table {} has no version {v} ({why}); its latest version is {}",
                dir.display(),
                latest.manifest.version()
            )))
        }
        VersionRef::Tag(name) => {
            let rel = tag_rel(name);
            let file = dir.join(&rel);
            let raw = if is_tag_name(name) {
                read_rel(fs, dir, &rel)?
            } else {
                None
            };
            let Some(raw) = raw else {
                if !super::manifest::is_sharded_in(fs, dir) {
                    return Err(not_sharded(dir));
                }
                let tags: Vec<String> = tags(fs, dir)?.into_iter().map(|(n, _)| n).collect();
                return Err(Error::InvalidValue(format!(
                    "table {} has no tag {} (its tags: {})",
                    dir.display(),
                    py_str(name),
                    py_list(&tags)
                )));
            };
            let v = parse_tag(&file, &raw)?;
            resolve(fs, dir, &VersionRef::Number(v))
        }
    }
}

/// `resolve` of the table at `at`, read afresh.
/// The table metadata of version `version` (None: the latest) of the
/// table at `at`; empty for a plain table, which has none.
pub fn metadata(
    at: &crate::Location,
    version: Option<u64>,
) -> Result<serde_json::Map<String, Value>> {
    let fresh = at.fresh();
    if !super::manifest::is_sharded_in(fresh.fs(), fresh.path()) {
        return Ok(serde_json::Map::new());
    }
    let want = version.map_or(VersionRef::Latest, VersionRef::Number);
    Ok(resolve(fresh.fs(), fresh.path(), &want)?.manifest.metadata)
}

/// The version `version` (None: the latest) of the sharded table at `at`,
/// read afresh, that a change was planned on (a handle's): as
/// [`resolve_at`], but `CommitConflict` when a cleanup removed it since
/// (a race lost, as to a concurrent commit: open the table again and
/// retry), naming it and the latest.
pub(crate) fn planned_on(at: &crate::Location, version: Option<u64>) -> Result<Resolved> {
    let Some(v) = version else {
        return resolve_at(at, &VersionRef::Latest);
    };
    let at = at.fresh();
    match resolve(at.fs(), at.path(), &VersionRef::Number(v)) {
        Err(Error::InvalidValue(why)) => match latest(at.fs(), at.path())? {
            Some(l) if v >= 1 && v < l.manifest.version() => Err(Error::CommitConflict(format!(
                "table {}: this change was planned on version {v}, which a cleanup removed since; the latest version is {}: open the table again and retry",
                at.path().display(),
                l.manifest.version()
            ))),
            _ => Err(Error::InvalidValue(why)),
        },
        r => r,
    }
}

/// `e`, an error met while reading the files of version `version` of the
/// table at `at` for a change planned on it; `CommitConflict` instead when
/// a cleanup removed that version meanwhile (its files went with it: a
/// race lost, not a damaged table).
pub(crate) fn lost_to_cleanup(at: &crate::Location, version: u64, e: Error) -> Error {
    match planned_on(at, Some(version)) {
        Err(conflict @ Error::CommitConflict(_)) => conflict,
        _ => e,
    }
}

pub fn resolve_at(at: &crate::Location, want: &VersionRef) -> Result<Resolved> {
    let at = at.fresh();
    resolve(at.fs(), at.path(), want)
}

/// The versions whose files the sharded table `dir` holds, ascending (a
/// table from before versions: none).
pub(crate) fn version_numbers(fs: &Fs, dir: &Path) -> Result<Vec<u64>> {
    let vdir = dir.join(VERSIONS_DIR);
    if !files::is_dir(fs, &vdir) {
        return Ok(Vec::new());
    }
    let mut out: Vec<u64> = fs
        .list(&vdir)
        .map_err(|e| crate::io::io_error(&vdir, e))?
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter_map(|n| parse_version_name(&n))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Every version the sharded table `dir` can open, oldest first, each
/// with its manifest (a table from before versions: its one manifest, as
/// version 1). Version files after the latest (a cleanup never leaves
/// those) are not listed.
pub(crate) fn versions(fs: &Fs, dir: &Path) -> Result<Vec<Resolved>> {
    let latest = latest(fs, dir)?.ok_or_else(|| not_sharded(dir))?;
    let top = latest.manifest.version();
    let numbers: Vec<u64> = version_numbers(fs, dir)?
        .into_iter()
        .filter(|&v| v < top)
        .collect();
    let paths: Vec<PathBuf> = numbers.iter().map(|&v| dir.join(version_rel(v))).collect();
    files::prefetch(fs, &paths)?;
    let mut out = Vec::with_capacity(numbers.len() + 1);
    for (v, path) in numbers.into_iter().zip(paths) {
        // A version removed by a concurrent cleanup since the listing is
        // left out.
        if let Some(raw) = files::read_object(fs, &path)? {
            out.push(parse_version(&path, raw, v)?);
        }
    }
    out.push(latest);
    Ok(out)
}

/// The named JSON files (`<name>.json`, names by the tag rule) in the
/// directory `sub` of the table `dir`, fetched at once: `(name, path,
/// bytes)`, by name; none when there is no such directory. A file removed
/// since the listing is left out.
fn named_files(fs: &Fs, dir: &Path, sub: &str) -> Result<Vec<(String, PathBuf, Vec<u8>)>> {
    let sdir = dir.join(sub);
    if !files::is_dir(fs, &sdir) {
        return Ok(Vec::new());
    }
    let mut names: Vec<String> = fs
        .list(&sdir)
        .map_err(|e| crate::io::io_error(&sdir, e))?
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter_map(|n| n.strip_suffix(".json").map(str::to_owned))
        .filter(|n| is_tag_name(n))
        .collect();
    names.sort();
    let paths: Vec<PathBuf> = names
        .iter()
        .map(|n| sdir.join(format!("{n}.json")))
        .collect();
    files::prefetch(fs, &paths)?;
    let mut out = Vec::with_capacity(names.len());
    for (name, path) in names.into_iter().zip(paths) {
        if let Some(raw) = files::read_object(fs, &path)? {
            out.push((name, path, raw));
        }
    }
    Ok(out)
}

/// The tags of the sharded table `dir`: `(name, version)`, by name.
pub(crate) fn tags(fs: &Fs, dir: &Path) -> Result<Vec<(String, u64)>> {
    named_files(fs, dir, TAGS_DIR)?
        .into_iter()
        .map(|(name, path, raw)| Ok((name, parse_tag(&path, &raw)?)))
        .collect()
}

/// The path of view `name`'s file relative to the table.
pub(crate) fn view_rel(name: &str) -> String {
    format!("{VIEWS_DIR}/{name}.json")
}

/// A saved view: a row selection of one version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    pub name: String,
    /// The version it selects rows of.
    pub version: u64,
    /// How many rows it selects.
    pub rows: u64,
    /// Its row file (record ids, little-endian u64, strictly increasing),
    /// relative to [`VIEWS_DIR`].
    pub file: String,
    /// The view set it was saved in (its file's name in
    /// [`VIEW_SETS_DIR`], without `.json`); None for a view saved alone.
    pub set: Option<String>,
}

impl View {
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec(&serde_json::json!({
            "version": self.version,
            "rows": self.rows,
            "file": self.file,
        }))
        .expect("a view serialises");
        out.push(b'\n');
        out
    }

    pub(crate) fn parse(name: &str, file: &Path, raw: &[u8]) -> Result<View> {
        let doc: Value = serde_json::from_slice(raw)
            .map_err(|e| Error::corrupted(file, format!("not valid JSON ({e})")))?;
        View::of_value(name, file, &doc)
    }

    /// The view `name` a view file's (or a set's entry's) JSON describes.
    fn of_value(name: &str, file: &Path, doc: &Value) -> Result<View> {
        let field = |k: &str| doc.get(k).and_then(Value::as_u64);
        match (
            field("version").filter(|&v| v >= 1),
            field("rows"),
            doc.get("file")
                .and_then(Value::as_str)
                .filter(|f| super::manifest::is_shard_name(f)),
        ) {
            (Some(version), Some(rows), Some(f)) => Ok(View {
                name: name.to_owned(),
                version,
                rows,
                file: f.to_owned(),
                set: None,
            }),
            _ => Err(Error::corrupted(
                file,
                "a view must hold 'version' (a positive integer), 'rows' and 'file' (a plain file name)",
            )),
        }
    }

    /// Its record ids, read from its row file on `fs` and checked.
    pub(crate) fn read_rows(&self, fs: &Fs, dir: &Path) -> Result<Vec<u64>> {
        super::manifest::read_row_file(
            fs,
            &dir.join(VIEWS_DIR).join(&self.file),
            self.rows,
            None,
            &|| {
                Error::corrupted(
                    &dir.join(view_rel(&self.name)),
                    format!("its row file {} is missing", py_str(&self.file)),
                )
            },
        )
    }
}

/// A view set's file: `{"views": [{"name", "version", "rows", "file"},
/// ...]}`, the views a split saved at once.
pub(crate) fn view_set_json(views: &[View]) -> Vec<u8> {
    let entries: Vec<Value> = views
        .iter()
        .map(|v| {
            serde_json::json!({
                "name": v.name,
                "version": v.version,
                "rows": v.rows,
                "file": v.file,
            })
        })
        .collect();
    let mut out =
        serde_json::to_vec(&serde_json::json!({ "views": entries })).expect("a set serialises");
    out.push(b'\n');
    out
}

/// The views of the view set `set` (its file `file`, bytes `raw`).
fn parse_view_set(set: &str, file: &Path, raw: &[u8]) -> Result<Vec<View>> {
    let doc: Value = serde_json::from_slice(raw)
        .map_err(|e| Error::corrupted(file, format!("not valid JSON ({e})")))?;
    let bad = || {
        Error::corrupted(
            file,
            "a view set must hold 'views': a list of {'name', 'version', 'rows', 'file'}",
        )
    };
    let entries = doc.get("views").and_then(Value::as_array).ok_or_else(bad)?;
    entries
        .iter()
        .map(|e| {
            let name = e
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| is_tag_name(n))
                .ok_or_else(bad)?;
            let mut view = View::of_value(name, file, e)?;
            view.set = Some(set.to_owned());
            Ok(view)
        })
        .collect()
}

/// The views of the sharded table `dir`, by name: those saved alone
/// (`_views/<name>.json`) and those of view sets (`_views/_sets/`). A
/// name saved twice (a bucket's race of two writers) is the view saved
/// alone, or the first set's by set name.
pub(crate) fn views(fs: &Fs, dir: &Path) -> Result<Vec<View>> {
    let mut out: BTreeMap<String, View> = BTreeMap::new();
    for (name, path, raw) in named_files(fs, dir, VIEWS_DIR)? {
        out.insert(name.clone(), View::parse(&name, &path, &raw)?);
    }
    for (set, path, raw) in named_files(fs, dir, VIEW_SETS_DIR)? {
        for view in parse_view_set(&set, &path, &raw)? {
            out.entry(view.name.clone()).or_insert(view);
        }
    }
    Ok(out.into_values().collect())
}

/// The view `name` of the sharded table `dir`: `InvalidValue` naming the
/// views there are when there is none.
pub(crate) fn view(fs: &Fs, dir: &Path, name: &str) -> Result<View> {
    let path = dir.join(view_rel(name));
    let raw = if is_tag_name(name) {
        files::read_object(fs, &path)?
    } else {
        None
    };
    match raw {
        Some(raw) => View::parse(name, &path, &raw),
        None => {
            if !super::manifest::is_sharded_in(fs, dir) {
                return Err(not_sharded(dir));
            }
            let all = views(fs, dir)?;
            if let Some(v) = all.iter().find(|v| v.name == name) {
                return Ok(v.clone());
            }
            let names: Vec<String> = all.into_iter().map(|v| v.name).collect();
            Err(Error::InvalidValue(format!(
                "table {} has no view {} (its views: {})",
                dir.display(),
                py_str(name),
                py_list(&names)
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_file_names_sort_as_numbers_and_parse_back() {
        assert_eq!(version_file_name(7), "00000000000000000007.json");
        assert!(version_file_name(9) < version_file_name(10));
        assert_eq!(parse_version_name(&version_file_name(123)), Some(123));
        for odd in [
            "7.json",
            "00000000000000000000.json",
            ".00000000000000000001.json.tmp",
            "0000000000000000000a.json",
        ] {
            assert_eq!(parse_version_name(odd), None, "{odd}");
        }
    }

    #[test]
    fn tag_names_follow_the_shard_rule_and_are_not_numbers() {
        assert!(is_tag_name("baseline") && is_tag_name("v1.0-rc_2"));
        for bad in ["", "12", "a/b", ".hidden", "a b"] {
            assert!(!is_tag_name(bad), "{bad:?}");
        }
    }
}
