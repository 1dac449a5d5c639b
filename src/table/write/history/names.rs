//! Names in a table's history: tags (written once, removed by `untag`),
//! views (named row selections of a version) and the list of versions.

use crate::repr::{py_list, py_str};
use crate::table::files;
use crate::table::versions::{
    self, parse_tag, tag_json, tag_rel, view_rel, VersionRef, View, VIEWS_DIR, VIEW_SETS_DIR,
};
use crate::table::write::root::Root;
use crate::{Error, Location, Result};

use super::{check_name, existing_version, fresh, lock};

/// Tags version `version` (None: the latest) of the sharded table at `at`
/// as `name`. `InvalidValue` for a name the format does not allow, a
/// version the table does not have, or a tag that exists already (naming
/// its version): a tag is written once, `untag` removes it.
pub fn tag(at: &Location, name: &str, version: Option<u64>) -> Result<u64> {
    check_name("tag", name)?;
    let at = fresh(at);
    let root = Root::of(&at)?;
    let _lock = lock(&root)?;
    let v = existing_version(&at, version)?;
    let rel = tag_rel(name);
    let taken = |held: u64| {
        Error::InvalidValue(format!(
            "table {} already has tag {} (version {held}); untag it first",
            at.path().display(),
            py_str(name)
        ))
    };
    let tmp = format!(".{name}.{}", files::random_hex(4));
    if !root.create(&rel, Some(&tmp), tag_json(v))? {
        let file = root.path().join(&rel);
        let held = match root.read(&rel)? {
            Some(raw) => parse_tag(&file, &raw)?,
            None => v,
        };
        return Err(taken(held));
    }
    Ok(v)
}

/// Removes the tag `name` of the sharded table at `at`; `InvalidValue`
/// naming the tags there are when it has no such tag.
pub fn untag(at: &Location, name: &str) -> Result<()> {
    let at = fresh(at);
    let root = Root::of(&at)?;
    let _lock = lock(&root)?;
    let known = versions::tags(at.fs(), at.path())?;
    if !known.iter().any(|(n, _)| n == name) {
        let names: Vec<String> = known.into_iter().map(|(n, _)| n).collect();
        return Err(Error::InvalidValue(format!(
            "table {} has no tag {} (its tags: {})",
            at.path().display(),
            py_str(name),
            py_list(&names)
        )));
    }
    root.delete_files(&[tag_rel(name)])
}

/// The tags of the sharded table at `at`: `(name, version)`, by name.
pub fn tags(at: &Location) -> Result<Vec<(String, u64)>> {
    let at = fresh(at);
    if !crate::table::manifest::is_sharded_in(at.fs(), at.path()) {
        versions::resolve(at.fs(), at.path(), &VersionRef::Latest)?;
    }
    versions::tags(at.fs(), at.path())
}

/// Saves the rows `ids` (record ids of version `version`, None: the
/// latest) of the sharded table at `at` as the view `name`: the row file
/// first, then the view's file, written once. Returns the view.
/// `InvalidValue` for a name the format does not allow or a view that
/// exists already; `InvalidIndex` naming the first id past the version's
/// rows.
pub fn save_view(at: &Location, name: &str, version: Option<u64>, ids: &[u64]) -> Result<View> {
    let views = save_views(at, version, &[(name.to_owned(), ids.to_vec())], false)?;
    Ok(views.into_iter().next().expect("one view saved"))
}

/// Saves `views` (`(name, record ids)` of version `version`, None: the
/// latest) of the sharded table at `at` all at once, as one view set:
/// every row file first, then the set's file (`_views/_sets/<set>.json`),
/// written once, which is the one point where they all appear. A
/// failure or a kill before it leaves none of them (only row files no
/// view names, which a cleanup removes). Errors as [`save_view`]'s,
/// naming every view that exists already; nothing is written then.
pub fn save_view_set(
    at: &Location,
    version: Option<u64>,
    views: &[(String, Vec<u64>)],
) -> Result<Vec<View>> {
    save_views(at, version, views, true)
}

/// [`save_view`] (one view, `as_set` false) and [`save_view_set`].
fn save_views(
    at: &Location,
    version: Option<u64>,
    asked: &[(String, Vec<u64>)],
    as_set: bool,
) -> Result<Vec<View>> {
    for (i, (name, _)) in asked.iter().enumerate() {
        check_name("view", name)?;
        if asked[..i].iter().any(|(n, _)| n == name) {
            return Err(Error::InvalidValue(format!(
                "view {} is named twice",
                py_str(name)
            )));
        }
    }
    let at = fresh(at);
    let root = Root::of(&at)?;
    let _lock = lock(&root)?;
    let m = versions::planned_on(&at, version)?.manifest;
    let existing = versions::views(at.fs(), at.path())?;
    let taken: Vec<&View> = existing
        .iter()
        .filter(|v| asked.iter().any(|(n, _)| *n == v.name))
        .collect();
    if let Some(first) = taken.first() {
        let names: Vec<&str> = taken.iter().map(|v| v.name.as_str()).collect();
        return Err(Error::InvalidValue(format!(
            "table {} already has view{} {} (of version {}); drop {} first",
            at.path().display(),
            if names.len() > 1 { "s" } else { "" },
            if names.len() > 1 {
                py_list(&names)
            } else {
                py_str(names[0])
            },
            first.version,
            if names.len() > 1 { "them" } else { "it" }
        )));
    }
    let set = as_set.then(|| format!("split-{}", files::random_hex(6)));
    let mut rows = Vec::with_capacity(asked.len());
    let mut views = Vec::with_capacity(asked.len());
    for (name, ids) in asked {
        let ids = view_rows(&m, ids)?;
        views.push(View {
            name: name.clone(),
            version: m.version(),
            rows: ids.len() as u64,
            file: format!("{name}-{}.u64", files::random_hex(4)),
            set: set.clone(),
        });
        rows.push(crate::table::manifest::deletion_bytes(&ids));
    }
    // The commit point: the view's file, or the set's.
    let (commit_rel, commit) = match &set {
        Some(set) => (
            format!("{VIEW_SETS_DIR}/{set}.json"),
            versions::view_set_json(&views),
        ),
        None => (view_rel(&views[0].name), views[0].to_json()),
    };
    let row_rels: Vec<String> = views
        .iter()
        .map(|v| format!("{VIEWS_DIR}/{}", v.file))
        .collect();
    root.make_dir(VIEWS_DIR)?;
    for (rel, bytes) in row_rels.iter().zip(rows) {
        root.overwrite(rel, None, bytes)?;
    }
    if !root.create(&commit_rel, None, commit)? {
        let _ = root.delete_files(&row_rels);
        let held = versions::view(at.fresh().fs(), at.path(), &views[0].name)?;
        return Err(Error::InvalidValue(format!(
            "table {} already has view {} (of version {}); drop it first",
            at.path().display(),
            py_str(&held.name),
            held.version
        )));
    }
    Ok(views)
}

/// The views of the sharded table at `at`, by name.
pub fn list_views(at: &Location) -> Result<Vec<View>> {
    let at = fresh(at);
    if !crate::table::manifest::is_sharded_in(at.fs(), at.path()) {
        versions::resolve(at.fs(), at.path(), &VersionRef::Latest)?;
    }
    versions::views(at.fs(), at.path())
}

/// The rows `ids` of a view of version `m`, ascending and unique;
/// `InvalidIndex` naming the first past its rows.
fn view_rows(m: &crate::table::Manifest, ids: &[u64]) -> Result<Vec<u64>> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    if let Some(&bad) = ids.last().filter(|&&i| i >= m.num_rows()) {
        return Err(Error::InvalidIndex(format!(
            "rows of a view must be record ids of version {} (0..{}), got {bad}",
            m.version(),
            m.num_rows()
        )));
    }
    Ok(ids)
}

/// Saves the view `name` again, as the rows `ids` of version `version`
/// (None: the latest) of the sharded table at `at`: its new file replaces
/// the old one at once (a view of a split leaves the split's set after
/// that), then the old row file goes. `InvalidValue` when there is no such
/// view, or when a delete or compaction committed since the view's version
/// changed the record ids of its rows (they would name other rows now).
pub fn replace_view(at: &Location, name: &str, version: Option<u64>, ids: &[u64]) -> Result<View> {
    check_name("view", name)?;
    let at = fresh(at);
    let root = Root::of(&at)?;
    let _lock = lock(&root)?;
    let m = versions::planned_on(&at, version)?.manifest;
    let old = versions::view(at.fs(), at.path(), name)?;
    let was = versions::planned_on(&at, Some(old.version))?.manifest;
    let rows = old.read_rows(at.fs(), at.path())?;
    if let Some(&last) = rows.last() {
        // The ids stay while every shard up to the one holding the last
        // row keeps its place and its deleted rows.
        let mut first = 0u64;
        for (i, shard) in was.shards.iter().enumerate() {
            if first > last {
                break;
            }
            let same = m
                .shards
                .get(i)
                .is_some_and(|s| s.name == shard.name && s.deleted == shard.deleted);
            if !same {
                return Err(Error::InvalidValue(format!(
                    "view {} of table {} selects rows of version {}, but a delete or compaction since (version {}) changed their record ids: save the rows anew under another name, or drop the view first",
                    py_str(name),
                    at.path().display(),
                    old.version,
                    m.version()
                )));
            }
            first += shard.live_rows();
        }
    }
    let ids = view_rows(&m, ids)?;
    let view = View {
        name: name.to_owned(),
        version: m.version(),
        rows: ids.len() as u64,
        file: format!("{name}-{}.u64", files::random_hex(4)),
        set: None,
    };
    let row_bytes = crate::table::manifest::deletion_bytes(&ids);
    root.make_dir(VIEWS_DIR)?;
    root.overwrite(&format!("{VIEWS_DIR}/{}", view.file), None, row_bytes)?;
    root.overwrite(&view_rel(name), None, view.to_json())?;
    // The new view is what opens from here on; the old one's files go.
    let old_rows = format!("{VIEWS_DIR}/{}", old.file);
    match &old.set {
        Some(set) => leave_set(&root, &at, set, name, old_rows)?,
        None => root.delete_files(&[old_rows])?,
    }
    Ok(view)
}

/// Writes the view set `set` without the view `name` (as a new set, once),
/// then removes the old set's file and `also`.
fn leave_set(root: &Root, at: &Location, set: &str, name: &str, also: String) -> Result<()> {
    // A kill in between leaves the other views twice (the same views).
    let others: Vec<View> = versions::views(at.fs(), at.path())?
        .into_iter()
        .filter(|v| v.set.as_deref() == Some(set) && v.name != name)
        .collect();
    if !others.is_empty() {
        let new_set = format!("split-{}", files::random_hex(6));
        let bytes = versions::view_set_json(&others);
        let file = format!("{new_set}.json");
        root.create(
            &format!("{VIEW_SETS_DIR}/{file}"),
            Some(&format!(".{file}.tmp")),
            bytes,
        )?;
    }
    root.delete_files(&[format!("{VIEW_SETS_DIR}/{set}.json"), also])
}

/// Removes the view `name` (its file, then its row file); `InvalidValue`
/// naming the views there are when there is none.
pub fn drop_view(at: &Location, name: &str) -> Result<()> {
    let at = fresh(at);
    let root = Root::of(&at)?;
    let _lock = lock(&root)?;
    let view = versions::view(at.fs(), at.path(), name)?;
    let rows = format!("{VIEWS_DIR}/{}", view.file);
    let Some(set) = &view.set else {
        return root.delete_files(&[view_rel(name), rows]);
    };
    leave_set(&root, &at, set, name, rows)
}

/// Every version the sharded table at `at` can open, oldest first.
pub fn list_versions(at: &Location) -> Result<Vec<crate::table::Manifest>> {
    let at = fresh(at);
    Ok(versions::versions(at.fs(), at.path())?
        .into_iter()
        .map(|r| r.manifest)
        .collect())
}
