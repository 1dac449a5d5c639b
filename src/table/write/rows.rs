//! Deleting rows without rewriting them (deletion files, one per touched
//! shard per version) and compacting shards (rewriting the live rows of a
//! shard as a new one, same order). Each commits one version through
//! [`publish`].

use std::collections::BTreeSet;
use std::path::Path;

use std::collections::BTreeMap;

use super::commit::publish;
use super::evolve::{base_version, conflict, ColumnsWrite};
use super::root::Root;
use crate::columnar::{write_records, ValueKind};
use crate::io::Fs;
use crate::read::ragged::Packed;
use crate::repr::py_str;
use crate::schema::{Kind, Logical};
use crate::table::files;
use crate::table::manifest::{
    deletion_bytes, in_shard, physical, read_deleted, ColumnGroup, Deleted, Manifest, ShardEntry,
};
use crate::table::open::{shard_columnar, shard_records, Column, Stream};
use crate::table::shard::ColumnSpec;
use crate::table::types::{validity_dir, write_types, ColumnLayout, ColumnType};
use crate::table::versions;
use crate::{Codec, Concat, Error, Location, Records, Result, Store};

/// Writes the small file `rel` (relative to the table) at `root`, replacing
/// it atomically; returns its size.
fn write_file(root: &Root, rel: &str, bytes: Vec<u8>) -> Result<u64> {
    let n = bytes.len() as u64;
    root.overwrite(rel, None, bytes)?;
    Ok(n)
}

/// Times a predicate's delete is planned again when a commit replaced a
/// shard it touched.
const REPLANS: u32 = 5;

/// Deletes the rows a predicate names: `plan(v)` gives them as record ids
/// of version `v` (its evaluation on that version), starting with
/// `version` (None: the latest). When a version committed meanwhile
/// replaced a touched shard (a compaction), the rows are planned again on
/// the latest version and the delete retried, up to 5 plans in all; then
/// the `CommitConflict` is returned. Otherwise as [`delete_rows`].
pub fn delete_where(
    at: &Location,
    version: Option<u64>,
    plan: &mut dyn FnMut(u64) -> Result<Vec<u64>>,
) -> Result<(Manifest, u64)> {
    let mut version = base_version(at, version)?.version();
    let mut plans = 1;
    loop {
        let ids = plan(version)?;
        match delete_rows(at, Some(version), &ids) {
            Err(Error::CommitConflict(_)) if plans < REPLANS => {
                plans += 1;
                version = base_version(at, None)?.version();
            }
            done => return done,
        }
    }
}

/// Deletes the rows `ids` (record ids of version `version`, None: the
/// latest) of the sharded table at `at`: one new version whose touched
/// shards name deletion files holding every row deleted there; no row is
/// rewritten. Returns the version and how many rows it deleted (ids
/// deleted meanwhile by another commit are not counted twice).
/// `InvalidIndex` naming the first id past the rows; `CommitConflict` when
/// a version committed meanwhile replaced a touched shard (a compaction).
pub fn delete_rows(at: &Location, version: Option<u64>, ids: &[u64]) -> Result<(Manifest, u64)> {
    let base = base_version(at, version)?;
    let touched = delete_plan(at, &base, ids)?;
    let root = Root::of(at)?;
    let token = files::random_hex(6);
    let mut deleted = 0u64;
    let manifest = publish(&root, "delete", &mut |root, current| {
        let current = current.expect("a sharded table has a version");
        let (shards, n) = delete_in(root, &base, current, &current.shards, &touched, &token)?;
        deleted = n;
        Ok(Manifest {
            shards,
            ..current.clone()
        })
    })?;
    Ok((manifest, deleted))
}

/// The rows to delete of each shard `ids` (record ids of version `base`)
/// touch: `(shard index in base, physical rows)`. `InvalidIndex` naming the
/// first id past the rows.
pub(super) fn delete_plan(
    at: &Location,
    base: &Manifest,
    ids: &[u64],
) -> Result<Vec<(usize, Vec<u64>)>> {
    let n = base.num_rows();
    let mut ids: Vec<u64> = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    if let Some(&bad) = ids.last().filter(|&&i| i >= n) {
        return Err(Error::InvalidIndex(format!(
            "rows to delete must be record ids of version {} (0..{n}), got {bad}",
            base.version()
        )));
    }
    // Record ids of the base version as physical rows of its shards.
    let fs = at.fresh().fs().clone();
    let mut touched: Vec<(usize, Vec<u64>)> = Vec::new();
    let mut next = ids.iter().peekable();
    let mut first = 0u64;
    for (si, shard) in base.shards.iter().enumerate() {
        let live = shard.live_rows();
        let end = first + live;
        let mine: Vec<u64> = std::iter::from_fn(|| next.next_if(|&&i| i < end).copied()).collect();
        if !mine.is_empty() {
            let gone = read_deleted(&fs, at.path(), shard)
                .map_err(|e| versions::lost_to_cleanup(at, base.version(), e))?;
            touched.push((si, physical(&gone, mine.iter().map(|i| i - first))));
        }
        first = end;
    }
    Ok(touched)
}

/// `shards` (those of the version after `current`, being made) with the
/// rows `touched` (a [`delete_plan`] on `base`) deleted: each touched shard
/// names a new deletion file (written now, `_deleted-<token>-<version>`)
/// of every row deleted there. Returns them and how many rows were not
/// deleted before. `CommitConflict` when a touched shard is gone (a
/// compaction).
pub(super) fn delete_in(
    root: &Root,
    base: &Manifest,
    current: &Manifest,
    shards: &[ShardEntry],
    touched: &[(usize, Vec<u64>)],
    token: &str,
) -> Result<(Vec<ShardEntry>, u64)> {
    let mut shards = shards.to_vec();
    let mut deleted = 0u64;
    for (si, rows) in touched {
        let name = &base.shards[*si].name;
        let Some(entry) = shards.iter_mut().find(|s| &s.name == name) else {
            return Err(conflict(
                root.path(),
                base,
                current,
                format!("no longer holds shard {} (it was compacted)", py_str(name)),
            ));
        };
        let mut all: BTreeSet<u64> = read_deleted(root.at.fs(), root.path(), entry)?
            .into_iter()
            .collect();
        let before = all.len();
        all.extend(rows.iter().copied());
        deleted += (all.len() - before) as u64;
        let all: Vec<u64> = all.into_iter().collect();
        let file = format!("_deleted-{token}-{}.u64", current.version() + 1);
        let size = write_file(root, &in_shard(name, &file), deletion_bytes(&all))?;
        if let Some(objects) = entry.objects.as_mut() {
            objects.insert(file.clone(), size);
        }
        entry.deleted = Some(Deleted {
            file,
            rows: all.len() as u64,
        });
    }
    Ok((shards, deleted))
}

/// Whether a column of `shard` (of version `m`) is held twice in the
/// layout `m` gives it: by two of its column groups, or by a group and the
/// shard's own directory (what an edit leaves: the group's copy is read,
/// the other never again). A compaction's groups (columnar copies of the
/// shard's records columns, or of columnar files of an older format
/// version) are not counted.
fn shadowed(root: &Root, m: &Manifest, shard: &ShardEntry) -> Result<bool> {
    if shard.groups.is_empty() {
        return Ok(false);
    }
    if shard.has_patches() {
        return Ok(true); // rows of a column in two places
    }
    let mut seen = BTreeSet::new();
    for group in &shard.groups {
        for c in &group.columns {
            if !seen.insert(c.as_str()) {
                return Ok(true);
            }
        }
    }
    let own = root.shard_schema(&shard.name)?;
    for (c, spec) in &own.columns {
        if !seen.contains(c.as_str()) || spec.layout != m.layout(c) {
            continue;
        }
        if spec.layout == ColumnLayout::Columnar {
            // A columnar copy in the current format of a file of an older
            // one is a compaction's conversion, not an edit.
            let path = crate::table::manifest::shard_dir(root.path(), &shard.name).join(c);
            let (version, _) = crate::columnar::file_version(root.at.fs(), &path)?;
            if version < crate::columnar::FORMAT_VERSION {
                continue;
            }
        }
        return Ok(true);
    }
    Ok(false)
}

/// Rewrites every shard of the latest version of the sharded table at `at`
/// whose deleted fraction is at least `min_deleted` (and above zero) as a
/// new shard of its live rows, same order, every column in the shard's own
/// directory, and stores every records column of numbers, booleans or text
/// as a columnar column, and every columnar column some shard keeps in an
/// older format version in the current one (a group of columnar copies in
/// each shard kept):
/// one new version, or None when there is nothing to do.
/// `CommitConflict` when a version committed meanwhile deleted rows of a
/// rewritten shard, replaced it, or dropped a column being converted.
pub fn compact(at: &Location, min_deleted: f64) -> Result<Option<Manifest>> {
    if !(0.0..=1.0).contains(&min_deleted) {
        return Err(Error::InvalidValue(format!(
            "min_deleted must be a fraction in [0, 1], got {min_deleted}"
        )));
    }
    let base = base_version(at, None)?;
    let doomed: Vec<usize> = base
        .shards
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            let d = s.deleted.as_ref().map_or(0, |d| d.rows);
            d > 0 && d as f64 >= min_deleted * s.rows as f64
        })
        .map(|(i, _)| i)
        .collect();
    let root = Root::of(at)?;
    // Shards whose edits left column groups over other copies of their
    // columns are rewritten too, whatever their deleted fraction.
    let mut doomed = doomed;
    for (i, shard) in base.shards.iter().enumerate() {
        if !doomed.contains(&i) && shadowed(&root, &base, shard)? {
            doomed.push(i);
        }
    }
    doomed.sort_unstable();
    let fs = at.fresh().fs().clone();
    let convert = convertible(&fs, at.path(), &base)?;
    if doomed.is_empty() && convert.is_empty() {
        return Ok(None);
    }
    let write = super::TableWrite::begin(at, super::WriteMode::Append)?;
    let groups = if convert.is_empty() {
        None
    } else {
        Some(ColumnsWrite::replacing(at, base.clone())?)
    };
    let discard = || {
        let _ = write.discard();
        if let Some(g) = &groups {
            let _ = g.discard();
        }
    };
    let mut rewritten: Vec<(usize, ShardEntry)> = Vec::new();
    let mut converted: Vec<(usize, Option<BTreeMap<String, u64>>)> = Vec::new();
    let done = (|| -> Result<()> {
        for &i in &doomed {
            let old = &base.shards[i];
            // Its files read: gone with a cleanup of the version, a conflict.
            let (shard, ()) = (|| {
                let gone = read_deleted(&fs, at.path(), old)?;
                write.write_shard(|dir| copy_live(&fs, at.path(), &base, old, &gone, dir, &convert))
            })()
            .map_err(|e| versions::lost_to_cleanup(at, base.version(), e))?;
            let (objects, _) = match write.written(&shard.name) {
                Some((schema, known)) => {
                    root.shard_contents(&shard.name, &schema, known.as_ref())?
                }
                None => root.shard_contents(&shard.name, &root.shard_schema(&shard.name)?, None)?,
            };
            rewritten.push((
                i,
                ShardEntry {
                    name: shard.name,
                    rows: shard.rows,
                    objects,
                    groups: Vec::new(),
                    deleted: None,
                },
            ));
        }
        if let Some(g) = &groups {
            for (i, shard) in base.shards.iter().enumerate() {
                if doomed.contains(&i) {
                    continue;
                }
                let dir = g.new_group(i)?;
                convert_into(&fs, at.path(), &base, shard, &convert, &dir)?;
                g.finish_group(i, &dir)?;
                converted.push((i, g.written_group(i)?.1));
            }
        }
        Ok(())
    })();
    if let Err(e) = done {
        discard();
        return Err(e);
    }
    let names: Vec<String> = convert.iter().map(|(c, _)| c.clone()).collect();
    let group_dir = groups.as_ref().map(ColumnsWrite::group_dir);
    let committed = publish(&root, "compact", &mut |root, current| {
        let current = current.expect("a sharded table has a version");
        if let Some(c) = names
            .iter()
            .find(|c| !current.columns.contains(c) || current.layout(c) != base.layout(c))
        {
            return Err(conflict(
                root.path(),
                &base,
                current,
                format!("dropped or changed column {}", py_str(c)),
            ));
        }
        let mut shards = current.shards.clone();
        for (i, new) in &rewritten {
            let old = &base.shards[*i];
            let Some(at) = shards.iter().position(|s| s.name == old.name) else {
                return Err(conflict(
                    root.path(),
                    &base,
                    current,
                    format!("no longer holds shard {}", py_str(&old.name)),
                ));
            };
            if shards[at].deleted != old.deleted || shards[at].groups != old.groups {
                return Err(conflict(
                    root.path(),
                    &base,
                    current,
                    format!(
                        "changed shard {} (rows deleted or columns added)",
                        py_str(&old.name)
                    ),
                ));
            }
            shards[at] = new.clone();
        }
        for (i, objects) in &converted {
            let old = &base.shards[*i];
            let Some(entry) = shards.iter_mut().find(|s| s.name == old.name) else {
                return Err(conflict(
                    root.path(),
                    &base,
                    current,
                    format!("no longer holds shard {}", py_str(&old.name)),
                ));
            };
            let dir = group_dir.clone().expect("groups were written");
            if let (Some(all), Some(mine)) = (entry.objects.as_mut(), objects) {
                all.extend(mine.iter().map(|(k, v)| (k.clone(), *v)));
            }
            entry.groups.push(ColumnGroup::whole(dir, names.clone()));
        }
        let mut columnar = current.columnar.clone();
        columnar.extend(names.iter().cloned());
        columnar.sort();
        columnar.dedup();
        Ok(Manifest {
            shards,
            columnar,
            ..current.clone()
        })
    });
    match committed {
        Ok(m) => Ok(Some(m)),
        Err(e) => {
            discard();
            Err(e)
        }
    }
}

/// The records columns of version `m` that compaction makes columnar
/// (numbers, booleans and text; bytes stay records), with what they hold.
fn convertible(fs: &Fs, table: &Path, m: &Manifest) -> Result<Vec<(String, ValueKind)>> {
    let Some(first) = m.shards.first() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for column in &m.columns {
        if m.layout(column) == ColumnLayout::Columnar {
            // A columnar column any shard keeps in an older format version
            // is written again in the current one.
            let mut kind = None;
            for s in &m.shards {
                let (version, k) =
                    crate::columnar::file_version(fs, &s.column_path(table, column))?;
                if version < crate::columnar::FORMAT_VERSION {
                    kind = Some(k);
                    break;
                }
            }
            out.extend(kind.map(|k| (column.clone(), k)));
            continue;
        }
        if m.logical(column) == Logical::Binary {
            continue;
        }
        let store = Store::open_with(fs, &first.column_path(table, column), true)?;
        let spec = ColumnSpec::records(store.schema().clone(), m.logical(column));
        store.close()?;
        if let Some(kind) = spec.value_kind() {
            out.push((column.clone(), kind));
        }
    }
    Ok(out)
}

/// Column `column` of shard `shard` (of version `m`), as a table reads it
/// (its patches laid over it), and for a columnar one what its files hold.
fn shard_column(
    fs: &Fs,
    table: &Path,
    m: &Manifest,
    shard: &ShardEntry,
    column: &str,
) -> Result<(Column, Option<ValueKind>)> {
    match m.layout(column) {
        ColumnLayout::Columnar => {
            let (c, kind) = shard_columnar(
                fs,
                table,
                shard,
                column,
                m.is_nullable(column),
                m.logical(column),
            )?;
            Ok((c, Some(kind)))
        }
        ColumnLayout::Records => {
            let data = shard_records(fs, table, shard, column, false)?;
            let validity = if m.has_validity(column) {
                match shard_records(fs, table, shard, column, true) {
                    Ok(v) => Some(Stream::Concat(v)),
                    Err(e) => {
                        let _ = data.close();
                        return Err(e);
                    }
                }
            } else {
                None
            };
            let c = Column::new(column, Stream::Concat(data), m.logical(column), validity)?;
            Ok((c, None))
        }
    }
}

/// Writes the columns `convert` of shard `shard` (every row) as columnar
/// columns into the plain table `dir` (a group).
fn convert_into(
    fs: &Fs,
    table: &Path,
    m: &Manifest,
    shard: &ShardEntry,
    convert: &[(String, ValueKind)],
    dir: &Path,
) -> Result<()> {
    let all: Vec<u64> = (0..shard.rows).collect();
    for (column, kind) in convert {
        let (src, _) = shard_column(fs, table, m, shard, column)?;
        let compress = src.codec() != Codec::Raw;
        let written = write_records(&src, *kind, &all, &dir.join(column), compress);
        let closed = src.close();
        written.and(closed)?;
    }
    Ok(())
}

/// Writes the live rows of shard `old` (version `m` of the table `table`
/// on `fs`; `gone` its deleted rows) into the plain table `dir`: every
/// column of the version with its type, nulls and layout (the columns of
/// `convert` made columnar).
fn copy_live(
    fs: &Fs,
    table: &Path,
    m: &Manifest,
    old: &ShardEntry,
    gone: &[u64],
    dir: &Path,
    convert: &[(String, ValueKind)],
) -> Result<()> {
    let mut next = gone.iter().peekable();
    let live: Vec<u64> = (0..old.rows)
        .filter(|r| next.next_if(|&&g| g == *r).is_none())
        .collect();
    let mut types = Vec::new();
    for column in &m.columns {
        let logical = m.logical(column);
        let target = convert.iter().find(|(c, _)| c == column).map(|(_, k)| *k);
        if m.layout(column) == ColumnLayout::Columnar || target.is_some() {
            let (src, held) = shard_column(fs, table, m, old, column)?;
            let kind = match (target, held) {
                (Some(k), _) | (None, Some(k)) => k,
                (None, None) => unreachable!("a columnar layout opens a columnar column"),
            };
            let compress = src.codec() != Codec::Raw;
            let written = write_records(&src, kind, &live, &dir.join(column), compress);
            let closed = src.close();
            written.and(closed)?;
            continue;
        }
        copy_rows(
            shard_records(fs, table, old, column, false)?,
            &live,
            &dir.join(column),
        )?;
        if m.has_validity(column) {
            copy_rows(
                shard_records(fs, table, old, column, true)?,
                &live,
                &validity_dir(dir, column),
            )?;
        }
        if logical != Logical::Tensor || m.is_nullable(column) {
            types.push((
                column.clone(),
                ColumnType {
                    logical,
                    nullable: m.is_nullable(column),
                },
            ));
        }
    }
    if !types.is_empty() {
        write_types(dir, &types)?;
    }
    Ok(())
}

/// Copies the records `rows` of `store` (a shard's column, its patches
/// laid over it) into a new store `dst` of its schema and of its own
/// store's codec and dictionary, in bounded runs.
fn copy_rows(store: Concat, rows: &[u64], dst: &Path) -> Result<()> {
    const RUN: usize = 4096;
    let copied = (|| {
        let own = &store.parts()[0];
        let mut out = Store::create(dst, store.schema().clone(), own.codec(), own.dictionary())?;
        let filled = (|| {
            for run in rows.chunks(RUN) {
                match store.kind() {
                    Kind::Dense => {
                        let buf = store.gather_dense(run)?;
                        out.append_dense(buf.as_slice())?;
                    }
                    Kind::Ragged => {
                        let batch = store.gather_ragged(run)?;
                        let mut packed = Packed::with_capacity(batch.len(), batch.buffer.len());
                        for i in 0..batch.len() {
                            let r = batch.record(i);
                            packed.push(&r.shape(), r.payload);
                        }
                        out.append_ragged(&packed)?;
                    }
                }
            }
            Ok(())
        })();
        let closed = out.close();
        filled.and(closed)
    })();
    let closed = store.close();
    copied.and(closed)
}
