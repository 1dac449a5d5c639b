//! Rows edited in place (`Table.update`): each edited shard gets a column
//! group of the edited columnar columns' new values (every row of the
//! shard, the rows the edit does not change as they were) and a patch of
//! the edited records columns' new values (the changed rows only, with the
//! shard rows they replace), listed after the groups before them so that
//! they are where those values are read from. Record ids and row order
//! stay; other columns and shards are not touched. One commit makes them
//! visible as one version.

use std::collections::BTreeMap;

use super::commit::publish;
use super::evolve::{base_version, columnar_of, conflict, ColumnsWrite};
use super::root::Root;
use super::rows::{delete_in, delete_plan};
use super::{Finished, TableWrite};
use crate::repr::py_str;
use crate::table::files;
use crate::table::manifest::{physical, read_deleted, ColumnGroup, Manifest, ShardEntry};
use crate::table::types::VALIDITY_DIR;
use crate::{Error, Location, Result};

/// What an edit wrote for one shard: a whole group (the edited columnar
/// columns), a patch (the edited records columns' new values of the
/// edited rows only), or both.
struct Edited {
    whole: Option<Finished>,
    patch: Option<Finished>,
}

impl ColumnsWrite {
    /// Plans an edit of rows of version `version` (None: the latest) of
    /// the sharded table at `at`: groups of new values of columns the
    /// table has, in the shards the edit touches only.
    pub fn editing(at: &Location, version: Option<u64>) -> Result<ColumnsWrite> {
        let _ = base_version(at, version)?;
        let mut write = ColumnsWrite::resume(at, version, &files::random_hex(6))?;
        write.replaces = true;
        write.root.hold_lease(write.token())?;
        Ok(write)
    }

    /// The edit `token` planned on version `version`, begun elsewhere (a
    /// task of a distributed merge writes its shard's groups through it;
    /// the process that began it holds the lease and commits).
    pub fn resume_editing(at: &Location, version: u64, token: &str) -> Result<ColumnsWrite> {
        let mut write = ColumnsWrite::resume(at, Some(version), token)?;
        write.replaces = true;
        Ok(write)
    }

    /// Whether this write edits columns the table has (an edit's).
    pub fn is_edit(&self) -> bool {
        self.replaces
    }

    /// The layout (`"records"` or `"columnar"`) of each column of the
    /// version planned on: an edit writes a column's new values as the
    /// column is stored.
    pub fn layouts(&self) -> Vec<(String, &'static str)> {
        self.base
            .columns
            .iter()
            .map(|c| (c.clone(), self.base.layout(c).name()))
            .collect()
    }

    /// Commits the groups written (each shard's edited columns) as one
    /// version of operation `operation`; `edited` gives, by shard, the
    /// positions among its live rows that the edit changed. A version
    /// committed meanwhile is taken as it is unless it replaced or
    /// compacted an edited shard, dropped or re-laid an edited column,
    /// edited the same column of the same shard, or deleted a row this
    /// edit changed: `CommitConflict`, naming both versions.
    pub fn commit_edit(
        &self,
        edited: &BTreeMap<usize, Vec<u64>>,
        operation: &str,
    ) -> Result<Manifest> {
        if edited.is_empty() {
            return Err(Error::InvalidValue(
                "an edit needs at least one shard's new values before its commit".into(),
            ));
        }
        let groups = self.edit_groups(edited)?;
        let rows = self.edited_rows(&groups, edited)?;
        let done = publish(&self.root, operation, &mut |root, current| {
            let current = current.expect("a sharded table has a version");
            let shards = self.edit_in(root, current, &current.shards, &groups, &rows)?;
            Ok(Manifest {
                shards,
                ..current.clone()
            })
        });
        if done.is_ok() {
            self.root.release_lease();
        }
        done
    }

    /// A merge (`Table.merge_insert`) as one version: the groups written
    /// (rows `edited` by shard, as for [`ColumnsWrite::commit_edit`]), the
    /// rows `delete` (record ids of the version planned on) deleted, and
    /// the shards `insert` of a [`TableWrite`] appended. Each part
    /// conflicts as its own commit would; rows inserted also conflict with
    /// any commit since that added rows (so that no key is left twice) or
    /// changed the columns.
    pub fn commit_merge(
        &self,
        edited: &BTreeMap<usize, Vec<u64>>,
        delete: &[u64],
        insert: Option<(&TableWrite, &[String])>,
    ) -> Result<Manifest> {
        let groups = self.edit_groups(edited)?;
        let rows = self.edited_rows(&groups, edited)?;
        let touched = delete_plan(&self.root.at, &self.base, delete)?;
        let appended = match insert {
            Some((write, names)) if !names.is_empty() => Some((write, write.prepare(names)?)),
            _ => None,
        };
        let token = files::random_hex(6);
        let base = &self.base;
        let done = publish(&self.root, "merge_insert", &mut |root, current| {
            let current = current.expect("a sharded table has a version");
            let mut shards = self.edit_in(root, current, &current.shards, &groups, &rows)?;
            if !touched.is_empty() {
                shards = delete_in(root, base, current, &shards, &touched, &token)?.0;
            }
            let next = Manifest {
                shards,
                ..current.clone()
            };
            let Some((write, (new, known))) = &appended else {
                return Ok(next);
            };
            if let Some(added) = current
                .shards
                .iter()
                .find(|s| !base.shards.iter().any(|b| b.name == s.name))
            {
                return Err(conflict(
                    root.path(),
                    base,
                    current,
                    format!(
                        "added rows (shard {}): the rows this merge inserts could repeat its keys",
                        py_str(&added.name)
                    ),
                ));
            }
            if current.columns != base.columns {
                return Err(conflict(
                    root.path(),
                    base,
                    current,
                    format!(
                        "changed the columns to {}: the rows this merge inserts have {}",
                        crate::repr::py_list(&current.columns),
                        crate::repr::py_list(&base.columns)
                    ),
                ));
            }
            write.next_with(root, Some(&next), new, known)
        });
        if done.is_ok() {
            self.root.release_lease();
            if let Some((write, _)) = insert {
                let _ = write.discard();
            }
        }
        done
    }

    /// The groups of the edited shards (`edited`'s keys): as this process
    /// finished them, or as another one (a task of a distributed merge)
    /// wrote them.
    fn edit_groups(&self, edited: &BTreeMap<usize, Vec<u64>>) -> Result<BTreeMap<usize, Edited>> {
        edited
            .keys()
            .map(|&i| {
                let (whole, patch) = self.written_edit(i)?;
                Ok((i, Edited { whole, patch }))
            })
            .collect()
    }

    /// The physical rows of each edited shard: `edited` (live positions by
    /// shard) past the shard's deleted rows; `InvalidValue` when a group
    /// holds a column in another layout than the table's.
    fn edited_rows(
        &self,
        groups: &BTreeMap<usize, Edited>,
        edited: &BTreeMap<usize, Vec<u64>>,
    ) -> Result<BTreeMap<usize, Vec<u64>>> {
        let mut rows: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for (&i, group) in groups {
            let shard = &self.base.shards[i];
            if let Some((schema, _)) = &group.patch {
                if let Some((c, _)) = schema.columns.iter().find(|(c, _)| {
                    group
                        .whole
                        .as_ref()
                        .is_some_and(|(w, _)| w.columns.iter().any(|(d, _)| d == c))
                }) {
                    return Err(Error::InvalidValue(format!(
                        "column {} of shard {} has new values in a group and in a patch",
                        py_str(c),
                        py_str(&shard.name)
                    )));
                }
            }
            let whole = group.whole.as_ref().map(|(schema, _)| schema);
            for (c, schema) in whole
                .iter()
                .flat_map(|s| s.columns.iter().map(move |c| (c, *s)))
            {
                let (c, _) = c;
                let want = self.base.layout(c);
                let got = if columnar_of(schema).contains(c) {
                    crate::table::ColumnLayout::Columnar
                } else {
                    crate::table::ColumnLayout::Records
                };
                if want != got {
                    return Err(Error::InvalidValue(format!(
                        "column {} of shard {} is stored {}, but its new values were written {}",
                        py_str(c),
                        py_str(&shard.name),
                        want.name(),
                        got.name()
                    )));
                }
            }
            let live = edited.get(&i).cloned().unwrap_or_default();
            let gone = self.deleted(i)?;
            rows.insert(i, physical(&gone, live.into_iter()));
        }
        Ok(rows)
    }

    /// `shards` (of the version after `current`, being made) with each
    /// finished group listed in its shard: `CommitConflict` when `current`
    /// compacted an edited shard, dropped or re-laid an edited column,
    /// edited the same column of the same shard, or deleted a row of `rows`
    /// (physical rows by shard).
    fn edit_in(
        &self,
        root: &Root,
        current: &Manifest,
        shards: &[ShardEntry],
        groups: &BTreeMap<usize, Edited>,
        rows: &BTreeMap<usize, Vec<u64>>,
    ) -> Result<Vec<ShardEntry>> {
        let group = self.group();
        let base = &self.base;
        let mut shards = shards.to_vec();
        for (&i, edit) in groups {
            let old = &base.shards[i];
            let names = |f: &Finished| -> Vec<String> {
                f.0.columns.iter().map(|(c, _)| c.clone()).collect()
            };
            let patched: Vec<String> = edit.patch.as_ref().map_or(Vec::new(), names);
            let columns: Vec<String> = edit.whole.as_ref().map_or(Vec::new(), names);
            let Some(entry) = shards.iter_mut().find(|s| s.name == old.name) else {
                return Err(conflict(
                    root.path(),
                    base,
                    current,
                    format!("no longer holds shard {} (compacted)", py_str(&old.name)),
                ));
            };
            for c in columns.iter().chain(&patched) {
                if !current.columns.contains(c) || current.layout(c) != base.layout(c) {
                    return Err(conflict(
                        root.path(),
                        base,
                        current,
                        format!("dropped or changed column {}", py_str(c)),
                    ));
                }
                if entry.column_home(c) != old.column_home(c)
                    || entry.column_patches(c) != old.column_patches(c)
                {
                    return Err(conflict(
                        root.path(),
                        base,
                        current,
                        format!(
                            "edited column {} of shard {} too",
                            py_str(c),
                            py_str(&old.name)
                        ),
                    ));
                }
            }
            if entry.deleted != old.deleted {
                let gone = read_deleted(root.at.fs(), root.path(), entry)?;
                let mine = &rows[&i];
                if let Some(r) = mine.iter().find(|r| gone.binary_search(r).is_ok()) {
                    return Err(conflict(
                        root.path(),
                        base,
                        current,
                        format!(
                            "deleted row {r} of shard {}, which this edit changes",
                            py_str(&old.name)
                        ),
                    ));
                }
            }
            if let Some((schema, objects)) = &edit.patch {
                entry.groups.push(ColumnGroup {
                    dir: self.patch_group(),
                    columns: patched.clone(),
                    patch: Some(schema.rows),
                });
                if let (Some(all), Some(mine)) = (entry.objects.as_mut(), objects) {
                    all.extend(mine.iter().map(|(k, v)| (k.clone(), *v)));
                }
            }
            let Some((_, objects)) = &edit.whole else {
                continue;
            };
            // The whole group goes below the patch (they hold other
            // columns, so the order only keeps the listing stable).
            let at = entry.groups.len() - usize::from(edit.patch.is_some());
            entry
                .groups
                .insert(at, ColumnGroup::whole(group.clone(), columns.clone()));
            if let (Some(all), Some(mine)) = (entry.objects.as_mut(), objects) {
                all.extend(mine.iter().map(|(k, v)| (k.clone(), *v)));
            }
            // A nullable records column reads its validity beside its
            // store: the group's (all valid where the write made none).
            let written = |c: &String| match objects {
                Some(listed) => listed.contains_key(&format!("{group}/{VALIDITY_DIR}/{c}/meta.zr")),
                None => files::is_store(root.at.fs(), &entry.validity_path(root.path(), c)),
            };
            let missing: Vec<&String> = columns
                .iter()
                .filter(|c| {
                    current.has_validity(c) && !current.columnar.contains(*c) && !written(c)
                })
                .collect();
            if !missing.is_empty() {
                root.add_validity(entry, &missing)?;
            }
        }
        Ok(shards)
    }
}
