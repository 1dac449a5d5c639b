//! Rows edited in place (`Table.update`): each edited shard gets a column
//! group of the edited columns' new values (every row of the shard, the
//! rows the edit does not change as they were), listed after the groups
//! before it so that it is where those columns are read from. Record ids
//! and row order stay; other columns and shards are not touched. One
//! commit makes the groups visible as one version.

use std::collections::BTreeMap;

use super::commit::publish;
use super::evolve::{base_version, columnar_of, conflict, ColumnsWrite};
use super::root::Root;
use crate::repr::py_str;
use crate::table::files;
use crate::table::manifest::{read_deleted, ColumnGroup, Manifest};
use crate::table::types::VALIDITY_DIR;
use crate::{Error, Location, Result};

/// The physical rows (of a shard of `rows` rows whose deleted rows are
/// `deleted`, ascending) of its live rows `live` (ascending positions
/// among the live rows).
fn physical(live: &[u64], deleted: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(live.len());
    let mut gone = deleted.iter().peekable();
    let mut skipped = 0u64;
    for &j in live {
        // Physical row p = j + (deleted rows at or before p).
        while let Some(&&d) = gone.peek() {
            if d <= j + skipped {
                skipped += 1;
                gone.next();
            } else {
                break;
            }
        }
        out.push(j + skipped);
    }
    out
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
        let finished = self.finished().clone();
        if finished.is_empty() {
            return Err(Error::InvalidValue(
                "an edit needs at least one shard's new values before its commit".into(),
            ));
        }
        let mut rows: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for (&i, (schema, _)) in &finished {
            let shard = &self.base.shards[i];
            for (c, _) in &schema.columns {
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
            rows.insert(i, physical(&live, &self.deleted(i)?));
        }
        let group = self.group();
        let base = &self.base;
        let mut next = |root: &Root, current: Option<&Manifest>| {
            let current = current.expect("a sharded table has a version");
            let mut shards = current.shards.clone();
            for (&i, (schema, objects)) in &finished {
                let old = &base.shards[i];
                let columns: Vec<String> = schema.columns.iter().map(|(c, _)| c.clone()).collect();
                let Some(entry) = shards.iter_mut().find(|s| s.name == old.name) else {
                    return Err(conflict(
                        root.path(),
                        base,
                        current,
                        format!("no longer holds shard {} (compacted)", py_str(&old.name)),
                    ));
                };
                for c in &columns {
                    if !current.columns.contains(c) || current.layout(c) != base.layout(c) {
                        return Err(conflict(
                            root.path(),
                            base,
                            current,
                            format!("dropped or changed column {}", py_str(c)),
                        ));
                    }
                    if entry.column_home(c) != old.column_home(c) {
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
                entry.groups.push(ColumnGroup {
                    dir: group.clone(),
                    columns: columns.clone(),
                });
                if let (Some(all), Some(mine)) = (entry.objects.as_mut(), objects) {
                    all.extend(mine.iter().map(|(k, v)| (k.clone(), *v)));
                }
                // A nullable records column reads its validity beside its
                // store: the group's (all valid where the write made none).
                let written = |c: &String| match objects {
                    Some(listed) => {
                        listed.contains_key(&format!("{group}/{VALIDITY_DIR}/{c}/meta.zr"))
                    }
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
            Ok(Manifest {
                shards,
                ..current.clone()
            })
        };
        let done = publish(&self.root, operation, &mut next);
        if done.is_ok() {
            self.root.release_lease();
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::physical;

    #[test]
    fn live_positions_map_past_the_deleted_rows() {
        // Rows 0..8 with 1, 2 and 5 deleted: live rows are 0, 3, 4, 6, 7.
        assert_eq!(physical(&[0, 1, 2, 3, 4], &[1, 2, 5]), [0, 3, 4, 6, 7]);
        assert_eq!(physical(&[1, 3], &[0]), [2, 4]);
        assert_eq!(physical(&[0, 2], &[]), [0, 2]);
    }
}
