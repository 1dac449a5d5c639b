"""Rows edited in place (DESIGN §16): ``Table.update`` sets new values in
the rows a predicate, record ids or a mask match, for every kind of column,
as one version; rows keep their record ids and order; older versions and
the views pinned to them keep their values; bad input commits nothing;
concurrent commits land or raise CommitConflict as §16 says."""

import datetime
import io
import os

import numpy as np
import pytest

import loaderx

pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.compute")

N = 40


def source(lo=0, hi=N):
    ids = np.arange(lo, hi, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "label": pa.array(ids % 5, pa.int64()),
            "score": pa.array(ids / 10, pa.float32()),
            "caption": [f"caption {i}" for i in ids],
            "note": pa.array([None if i % 3 == 0 else f"n{i}" for i in ids], pa.string()),
            "emb": pa.FixedShapeTensorArray.from_numpy_ndarray(
                np.repeat(ids.astype(np.float32)[:, None], 3, axis=1)
            ),
        }
    )


def uri(s3, name="t"):
    return f"s3://{s3.bucket}/{s3.prefix}/{name}"


@pytest.fixture(params=["local", "s3"])
def table(request, tmp_path):
    """A sharded table of three shards, on disk or in the bucket."""
    if request.param == "local":
        path, kw = str(tmp_path / "t"), {}
    else:
        s3 = request.getfixturevalue("s3")
        path, kw = uri(s3), {"storage_options": s3.options()}
    loaderx.ingest_sharded(source(), path, workers=1, shards=3, **kw).close()
    return path, kw


@pytest.fixture
def local(tmp_path):
    path = str(tmp_path / "t")
    loaderx.ingest_sharded(source(), path, workers=1, shards=3).close()
    return path


def col(t, name):
    return t[name][np.arange(t.num_rows)]


def model(t):
    """Every column of ``t`` as Python values, row by row."""
    out = {}
    for c in t:
        v = col(t, c)
        out[c] = [np.asarray(x).tolist() for x in v] if isinstance(v, list) else v.tolist()
    return out


def files_of(path):
    out = {}
    for d, _, names in os.walk(path):
        for n in names:
            p = os.path.join(d, n)
            s = os.stat(p)
            out[os.path.relpath(p, path)] = (s.st_ino, s.st_size, s.st_mtime_ns)
    return out


def test_update_by_a_predicate_sets_scalars_in_place_as_one_version(table):
    path, kw = table
    with loaderx.open_table(path, readonly=False, **kw) as t:
        before = model(t)
        assert t.update("label = 3", {"label": 30, "caption": "fixed", "score": 0.5}) == 8
        assert t.version == 2
        assert [v["operation"] for v in t.versions()][-1] == "update"
        got = model(t)
    want = {c: list(v) for c, v in before.items()}
    for r in range(N):
        if r % 5 == 3:
            want["label"][r], want["caption"][r], want["score"][r] = 30, "fixed", 0.5
    assert got == want  # record ids, order and every other value kept
    with loaderx.open_table(path, **kw) as t:
        assert model(t) == want
        assert loaderx.sql("SELECT count(*) AS n FROM t WHERE label = 30", t=t)["n"][0].as_py() == 8
        assert loaderx.sql("SELECT count(*) AS n FROM t WHERE label = 3", t=t)["n"][0].as_py() == 0
        pinned = loaderx.open_table(path, version=1, **kw)
        try:
            assert model(pinned) == before
        finally:
            pinned.close()


def test_values_follow_the_record_ids_in_the_order_given(local):
    with loaderx.open_table(local, readonly=False) as t:
        assert t.update([30, 2, 17], {"label": [300, 20, 170], "caption": ["c", "a", "b"]}) == 3
        labels, captions = col(t, "label"), col(t, "caption")
    assert labels[[2, 17, 30]].tolist() == [20, 170, 300]
    assert [captions[i] for i in (2, 17, 30)] == ["a", "b", "c"]
    assert labels[[0, 1, 3]].tolist() == [0, 1, 3]


def test_with_a_mask_or_a_predicate_values_follow_ascending_record_id(local):
    mask = np.zeros(N, bool)
    mask[[35, 4, 12]] = True
    with loaderx.open_table(local, readonly=False) as t:
        assert t.update(mask, {"label": np.array([1, 2, 3])}) == 3
        assert col(t, "label")[[4, 12, 35]].tolist() == [1, 2, 3]
        assert t.update("id >= 37", {"score": [7.0, 8.0, 9.0]}) == 3
        assert col(t, "score")[37:].tolist() == [7.0, 8.0, 9.0]


def test_a_function_updates_batches_of_the_matched_rows(local):
    seen = []

    def fn(batch):
        seen.append(batch["id"].tolist())
        return {"label": batch["id"] * 2, "caption": [f"x{i}" for i in batch["id"]]}

    with loaderx.open_table(local, readonly=False) as t:
        assert t.update("id % 4 = 1", fn, read_columns=["id"]) == 10
        labels, captions = col(t, "label"), col(t, "caption")
        with pytest.raises(ValueError, match="read_columns"):
            t.update("id = 1", fn)
        assert t.version == 2
    assert sum(seen, []) == list(range(1, N, 4))  # ascending record id
    for r in range(N):
        if r % 4 == 1:
            assert labels[r] == 2 * r and captions[r] == f"x{r}"
        else:
            assert labels[r] == r % 5 and captions[r] == f"caption {r}"


def test_tensor_columns_take_one_value_for_all_rows_or_one_per_row(tmp_path):
    path = str(tmp_path / "t")
    n = 12
    src = {
        "id": np.arange(n),
        "img": np.arange(n * 6, dtype=np.uint8).reshape(n, 2, 3),
        "tokens": [np.arange(i % 4 + 1, dtype=np.int32) for i in range(n)],
    }
    loaderx.ingest_sharded(
        pa.table(
            {
                "id": src["id"],
                "img": pa.FixedShapeTensorArray.from_numpy_ndarray(src["img"]),
                "tokens": pa.array([t.tolist() for t in src["tokens"]], pa.list_(pa.int32())),
            }
        ),
        path,
        shards=2,
    ).close()
    with loaderx.open_table(path, readonly=False) as t:
        assert t.update([3, 7], {"img": np.full((2, 3), 9, np.uint8)}) == 2
        assert t.update([5, 1], {"img": np.stack([np.full((2, 3), 5), np.full((2, 3), 1)])}) == 2
        ragged = [np.arange(7, dtype=np.int32), np.array([-4], np.int32)]
        assert t.update([10, 0], {"tokens": ragged}) == 2
        imgs = t["img"][np.arange(n)]
        tokens = t["tokens"][np.arange(n)]
        with pytest.raises(ValueError, match=r"'img'.*shape"):
            t.update([0], {"img": np.zeros((3, 2), np.uint8)})
        with pytest.raises(ValueError, match=r"'tokens'.*nonempty"):
            t.update([0], {"tokens": [np.array([], np.int32)]})
        with pytest.raises(ValueError, match=r"'img'.*uint8"):
            t.update([0], {"img": np.full((2, 3), 300)})
        assert t.version == 4
    for r in range(n):
        want = {3: 9, 7: 9, 5: 5, 1: 1}.get(r)
        if want is None:
            np.testing.assert_array_equal(imgs[r], src["img"][r])
        else:
            assert (imgs[r] == want).all()
    np.testing.assert_array_equal(tokens[10], ragged[0])
    np.testing.assert_array_equal(tokens[0], ragged[1])
    for r in set(range(n)) - {0, 10}:
        np.testing.assert_array_equal(tokens[r], src["tokens"][r])


def test_nulls_where_the_column_holds_them_and_refused_where_it_does_not(local):
    with loaderx.open_table(local, readonly=False) as t:
        assert t.update([1, 3], {"note": [None, "three"]}) == 2
        notes = col(t, "note")
        assert notes[1] is None and notes[3] == "three" and notes[0] is None
        with pytest.raises(ValueError, match="'label'.*null"):
            t.update([1], {"label": [None]})
        assert t.version == 2


@pytest.mark.parametrize(
    "where,values,error,match",
    [
        ("id = 1", {"nope": 1}, ValueError, "'nope'"),
        ("id < 3", {"label": [1, 2]}, ValueError, "expected 3 values"),
        ("id = 1", {"label": "seven"}, ValueError, "'label'"),
        ("id = 1", {"label": 1.5}, ValueError, "'label'"),
        ("id = 1", {"caption": 5}, ValueError, "'caption'"),
        ("id = 1", {"emb": np.zeros(4)}, ValueError, "'emb'.*shape"),
        ("id = = 1", {"label": 1}, ValueError, "predicate"),
        ([N], {"label": 1}, ValueError, str(N)),
        ([1, 1], {"label": [1, 2]}, ValueError, "record id 1"),
        ("id = 1", {}, ValueError, "at least one column"),
        ("id = 1", 5, TypeError, "values"),
    ],
)
def test_bad_input_raises_and_commits_nothing(local, where, values, error, match):
    before = files_of(local)
    with loaderx.open_table(local, readonly=False) as t:
        with pytest.raises(error, match=match):
            t.update(where, values)
        assert t.version == 1
    assert files_of(local) == before


def test_read_only_tables_and_views_refuse_and_nothing_matched_commits_nothing(local):
    with loaderx.open_table(local) as t:
        with pytest.raises(io.UnsupportedOperation, match="readonly=False"):
            t.update("id = 1", {"label": 2})
    with loaderx.open_table(local, readonly=False) as t:
        t.save_view("some", "id < 10")
        assert t.update("id > 1000", {"label": 2}) == 0
        assert t.version == 1
    with loaderx.open_table(local, view="some") as v:
        with pytest.raises(io.UnsupportedOperation):
            v.update("id = 1", {"label": 2})


def test_a_view_saved_before_an_update_keeps_its_values(local):
    with loaderx.open_table(local, readonly=False) as t:
        t.save_view("low", "id < 10")
        t.update("id < 5", {"label": 99})
    with loaderx.open_table(local, view="low") as v:
        assert col(v, "label").tolist() == [i % 5 for i in range(10)]
    with loaderx.open_table(local) as t:
        assert col(t, "label")[:10].tolist() == [99] * 5 + [0, 1, 2, 3, 4]


def test_only_the_edited_columns_of_the_touched_shards_are_written(local):
    before = files_of(local)
    with loaderx.open_table(local, readonly=False) as t:
        t.update([0, 1], {"label": [7, 8]})
    after = files_of(local)
    kept = {k: v for k, v in after.items() if k in before and k != "manifest.json"}
    assert kept == {k: v for k, v in before.items() if k != "manifest.json"}  # nothing rewritten
    new = [k for k in after if k not in before and not k.startswith("_versions")]
    # One shard, one new column group, of the edited column only.
    groups = {k.split("/")[0] + "/" + k.split("/")[1] for k in new}
    assert len(groups) == 1, new
    assert all("label" in k or k.endswith(("meta.zr", "schema.json", "group.json")) for k in new)
    assert not any(c in k for k in new for c in ("caption", "emb", "score", "note"))


def manifest_groups(path):
    import json

    with open(os.path.join(path, "manifest.json")) as f:
        doc = json.load(f)
    return doc["version"], [s.get("groups", []) for s in doc["shards"]]


def test_an_update_of_records_rows_writes_a_patch_of_those_rows_only(local):
    """A records column's new values are a patch per touched shard: the
    edited rows' records and their row numbers, nothing else."""
    before = files_of(local)
    with loaderx.open_table(local, readonly=False) as t:
        old = col(t, "emb").copy()
        shard_rows = [s["rows"] if isinstance(s, dict) else s[1] for s in t.shards]
        n = t.update([0, 2, 39], {"emb": np.full((3, 3), 9.0, np.float32)})
        assert n == 3
        got = col(t, "emb")
    want = old.copy()
    want[[0, 2, 39]] = 9.0
    np.testing.assert_array_equal(got, want)
    after = files_of(local)
    assert {k: v for k, v in after.items() if k in before and k != "manifest.json"} == {
        k: v for k, v in before.items() if k != "manifest.json"
    }
    new = [k for k in after if k not in before and not k.startswith("_versions")]
    assert new and all("_g-" in k.split("/")[1] and k.split("/")[1].endswith("-p") for k in new)
    assert {k.split("/", 2)[2].split("/")[0] for k in new} == {"emb", "rows.u64"}
    version, groups = manifest_groups(local)
    assert version == 4  # releases before patches refuse the manifest
    patches = [g for gs in groups for g in gs]
    assert sorted(g["patch"] for g in patches) == [1, 2]  # shard 0: ids 0, 2; the last: 39
    assert all(g["columns"] == ["emb"] for g in patches)
    rows_files = sorted(after[k][1] for k in new if k.endswith("rows.u64"))
    assert rows_files == [8, 16]
    assert sum(shard_rows) == N
    # The version before reads as it was.
    with loaderx.open_table(local, version=1) as v1:
        np.testing.assert_array_equal(col(v1, "emb"), old)


@pytest.mark.parametrize("layout", ["records", "columnar"])
def test_patches_with_nulls_read_everywhere(table, tmp_path, layout, monkeypatch):
    """Scalars, nullable text and tensors, of either layout, edited twice
    (the second patch over the first), read by gathers, Arrow, SQL (its
    predicates on the new values too: no chunk is pruned by what its
    statistics said before), pandas, the DataLoader and copies; compact
    folds the patches. ``merge_insert`` patches columnar columns and
    ``update`` rewrites them whole; the columnar case here makes ``update``
    patch them too, through the edit's own switch."""
    import functools

    import loaderx._edit as edit_module

    if layout == "columnar":
        patching = functools.partial(edit_module.edit_groups, patch_columnar=True)
        monkeypatch.setattr(edit_module, "edit_groups", patching)
    path, kw = table
    dst = str(tmp_path / layout)
    if "storage_options" in kw:
        dst = f"{path}-{layout}"
    loaderx.ingest_sharded(source(), dst, workers=1, shards=3, layout=layout, **kw).close()
    stored = {c: "records" if c == "emb" else layout for c in source().column_names}

    def edit(t, ids, values):
        if len(ids) == 1:
            return t.update(ids, values)
        src = {"id": np.asarray(ids, np.int64), **values}
        got = t.merge_insert(src, "id", when_not_matched="skip")
        assert got == {"updated": len(ids), "inserted": 0, "deleted": 0}

    with loaderx.open_table(dst, readonly=False, **kw) as t:
        assert {c: t[c].layout for c in t} == stored
        edit(t, [1, 5, 20], {"label": [10, 50, 200], "note": [None, "five", None]})
        edit(t, [5, 6], {"label": [55, 66], "emb": np.full((2, 3), -1.0, np.float32)})
        edit(t, [20], {"note": ["back"]})  # a patch of a nullable column without nulls
        edit(t, [20], {"note": pa.array([None], pa.string())})
        want = model(t)
        assert want["label"][:8] == [0, 10, 2, 3, 4, 55, 66, 2]
        assert want["note"][1] is None and want["note"][5] == "five" and want["note"][20] is None
        assert want["emb"][6] == [-1.0, -1.0, -1.0] and want["emb"][5] == [-1.0, -1.0, -1.0]
        arrow = t["note"].to_arrow(np.array([1, 5, 20, 2]))
        assert arrow.to_pylist() == [None, "five", None, "n2"]
        sql = loaderx.sql("SELECT count(*) AS n FROM t WHERE note IS NULL", t=t)
        nulls = sum(v is None for v in want["note"])
        assert sql.column("n").to_pylist() == [nulls]
        # Values no chunk held before the edits: found, not pruned away.
        sql = loaderx.sql("SELECT id FROM t WHERE label >= 10 OR note = 'five' ORDER BY id", t=t)
        assert sql.column("id").to_pylist() == [1, 5, 6, 20]
        assert {c: t[c].layout for c in t} == stored  # patched, still stored so
        df = t.to_pandas()
        assert df["label"].tolist() == want["label"]
        from loaderx.dataloader import DataLoader

        with DataLoader(t, batch_size=t.num_rows, mode="cyclic", seed=0) as dl:
            batch = next(dl)
        order = np.asarray(batch["id"]).tolist()
        assert np.asarray(batch["label"]).tolist() == [want["label"][i] for i in order]
        assert np.asarray(batch["emb"]).tolist() == [want["emb"][i] for i in order]
    if "storage_options" not in kw:
        patches = [g for gs in manifest_groups(dst)[1] for g in gs if g.get("patch")]
        assert {c for g in patches for c in g["columns"]} == {"label", "note", "emb"}
    with loaderx.open_table(dst, version=2, **kw) as v2:
        assert col(v2, "label").tolist()[5] == 50
    if "storage_options" not in kw:
        copy = str(tmp_path / "copy")
        loaderx.copy_table(dst, copy)
        with loaderx.open_table(copy) as c:
            assert model(c) == want
    with loaderx.open_table(dst, readonly=False, **kw) as t:
        assert t.compact(min_deleted=0.9) is not None
        assert model(t) == want
    if "storage_options" not in kw:
        assert not any(g.get("patch") for gs in manifest_groups(dst)[1] for g in gs)
        with loaderx.open_table(dst) as t:
            assert model(t) == want
            assert all(t[c].layout == "columnar" for c in t if c != "emb")  # compact converts


@pytest.mark.parametrize("budget", ["0", "64M"])
def test_patched_columns_are_kept_under_the_one_column_cache_budget(local, budget):
    """A patched columnar column's decoded patches are kept under
    ``LOADERX_COLUMN_CACHE``, beside the chunks, and forgotten with the
    table: with ``0`` nothing is kept (every read takes the values from
    the patch stores), and either way the column reads the same."""
    import json
    import subprocess
    import sys

    with loaderx.open_table(local, readonly=False) as t:
        ids = np.array([1, 5, 20, 33], np.int64)
        got = t.merge_insert(
            {"id": ids, "label": [10, 50, 200, 330], "note": ["a", None, "c", "d"]},
            "id",
            when_not_matched="skip",
        )
        assert got["updated"] == 4
        assert t["label"].layout == "columnar"
        want = model(t)
    code = f"""
import json, numpy as np, loaderx, loaderx.arrow
from loaderx import _native
t = loaderx.open_table({local!r})
t["label"][np.array([2])]  # unpatched (a number read in place: nothing kept)
chunk = _native.columnar_kept_bytes()
t["label"][np.array([1])]  # patched, in the same chunk: the patch's values kept too
patch = _native.columnar_kept_bytes() - chunk
gather = t["label"][np.array([33, 1, 2, 20, 5])].tolist()
scan = loaderx.arrow.table({{c: t[c] for c in ("label", "note")}}).read_all()
sql = loaderx.sql("SELECT id FROM t WHERE label >= 10 ORDER BY id", t=t)
t.close()
print(json.dumps({{
    "label": scan["label"].to_pylist(),
    "note": scan["note"].to_pylist(),
    "sql": sql.column("id").to_pylist(),
    "gather": gather,
    "chunk": chunk,
    "patch": patch,
    "closed": _native.columnar_kept_bytes(),
}}))
"""
    env = dict(os.environ, LOADERX_COLUMN_CACHE=budget)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout)
    assert got["label"] == want["label"] and got["note"] == want["note"]
    assert got["sql"] == [i for i, v in enumerate(want["label"]) if v >= 10]
    assert got["gather"] == [want["label"][i] for i in (33, 1, 2, 20, 5)]
    if budget == "0":
        assert got["chunk"] == 0 and got["patch"] == 0
    else:
        assert got["patch"] > 0  # the patch's values, kept beside any chunk
    assert got["closed"] == 0  # forgotten with the table


def test_two_patches_of_other_rows_of_the_same_shard_both_land(local):
    """Three handles planned on one version: patches of other rows of the
    same shard land one over the other; an edit of a row a patch changed
    meanwhile is a CommitConflict."""
    a, b, c = (loaderx.open_table(local, readonly=False) for _ in range(3))
    try:
        a.update([1], {"emb": np.full((1, 3), 1.5)})
        b.update([2], {"emb": np.full((1, 3), 2.5)})
        with pytest.raises(loaderx.CommitConflict, match="changed rows of shard"):
            c.update([1], {"emb": np.full((1, 3), 9.0)})
    finally:
        for t in (a, b, c):
            t.close()
    with loaderx.open_table(local) as t:
        assert t.version == 3
        emb = col(t, "emb")
        assert emb[1].tolist() == [1.5] * 3 and emb[2].tolist() == [2.5] * 3
        assert emb[3].tolist() == [3.0] * 3
    _, groups = manifest_groups(local)
    assert [g["patch"] for g in groups[0]] == [1, 1]


def test_a_broken_patch_fails_to_open_naming_its_file(local):
    with loaderx.open_table(local, readonly=False) as t:
        t.update([0], {"emb": np.zeros((1, 3))})
    _, groups = manifest_groups(local)
    patch = next(g for gs in groups for g in gs)
    rows = [
        os.path.join(d, "rows.u64")
        for d, _, names in os.walk(local)
        if os.path.basename(d) == patch["dir"] and "rows.u64" in names
    ][0]
    with open(rows, "r+b") as f:
        f.truncate(4)
    with pytest.raises(loaderx.Corrupted, match="rows.u64"):
        loaderx.open_table(local)


def test_updates_after_deletes_compact_and_cleanup(local):
    with loaderx.open_table(local, readonly=False) as t:
        t.delete("id % 10 = 0")
        assert t.update("id % 10 = 1", {"label": -1, "emb": np.full(3, -1.0)}) == 4
        want = model(t)
        assert all(v == -1 for i, v in zip(want["id"], want["label"]) if i % 10 == 1)
        t.compact(min_deleted=0.0)
        assert model(t) == want
        t.cleanup()
        assert model(t) == want
        t.cleanup(older_than=datetime.timedelta(0))
        assert model(t) == want
    # The patches went with the versions that read them.
    leftover = [d for d, _, _ in os.walk(local) if os.path.basename(d).startswith("_g-")]
    assert leftover == []


# Concurrent commits: two handles, each planning on the version it holds.


def test_an_update_lands_beside_an_append_and_a_delete_of_other_rows(local):
    a = loaderx.open_table(local, readonly=False)
    b = loaderx.open_table(local, readonly=False)
    c = loaderx.open_table(local, readonly=False)
    try:
        b.append(source(N, N + 4))
        c.delete([0, 39])
        assert a.update([5, 20], {"label": [55, 200]}) == 2
    finally:
        for h in (a, b, c):
            h.close()
    with loaderx.open_table(local) as t:
        ids, labels = col(t, "id").tolist(), col(t, "label").tolist()
    assert ids == list(range(1, 39)) + list(range(N, N + 4))
    assert labels[ids.index(5)] == 55 and labels[ids.index(20)] == 200
    assert [labels[ids.index(i)] for i in ids if i not in (5, 20)] == [
        i % 5 for i in ids if i not in (5, 20)
    ]


@pytest.mark.parametrize("other", ["delete", "drop_columns", "compact", "update"])
def test_an_update_overtaken_by_a_commit_it_cannot_join_is_a_commit_conflict(local, other):
    a = loaderx.open_table(local, readonly=False)
    b = loaderx.open_table(local, readonly=False)
    try:
        if other == "delete":
            b.delete([5])
        elif other == "drop_columns":
            b.drop_columns("label")
        elif other == "compact":
            b.delete([4])  # in the shard the update edits
            a._reopen()
            assert a.num_rows == N - 1  # a plans on the version of the delete
            b.compact(min_deleted=0.0)
        else:
            b.update([5, 6], {"label": [1, 1]})
        latest = b.version
        with pytest.raises(loaderx.CommitConflict, match=f"version {latest}"):
            a.update([5], {"label": [123]})
    finally:
        a.close()
        b.close()
    with loaderx.open_table(local) as t:
        assert t.version == latest
        if other != "drop_columns":
            assert 123 not in col(t, "label").tolist()


def test_two_updates_of_other_rows_of_the_same_shards_both_land(local):
    """The second is planned again on the first's version (its rows
    unchanged there) and keeps the first's values."""
    a = loaderx.open_table(local, readonly=False)
    b = loaderx.open_table(local, readonly=False)
    try:
        b.update([6, 30], {"label": [60, 300], "caption": ["six", "thirty"]})
        assert a.update([5, 31], {"label": [50, 310]}) == 2
        assert a.version == 3
    finally:
        a.close()
        b.close()
    with loaderx.open_table(local) as t:
        labels, captions = col(t, "label").tolist(), col(t, "caption")
    want = [i % 5 for i in range(N)]
    want[5], want[6], want[30], want[31] = 50, 60, 300, 310
    assert labels == want
    assert captions[6] == "six" and captions[30] == "thirty" and captions[5] == "caption 5"


def test_concurrent_updates_in_two_processes(local):
    """Each concurrency rule of §16 in two processes: disjoint rows land,
    the same rows raise CommitConflict in one of them."""
    import subprocess
    import sys

    script = (
        "import sys, loaderx\n"
        "t = loaderx.open_table(sys.argv[1], readonly=False)\n"
        "rows = [int(x) for x in sys.argv[2].split(',')]\n"
        "try:\n"
        "    t.update(rows, {'label': [int(sys.argv[3])] * len(rows)})\n"
        "    print('ok')\n"
        "except loaderx.CommitConflict as e:\n"
        "    print('conflict', e)\n"
    )

    def run(pairs):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, local, rows, value],
                stdout=subprocess.PIPE,
                text=True,
            )
            for rows, value in pairs
        ]
        return [p.communicate(timeout=120)[0].strip() for p in procs]

    assert run([("1,2,3", "100"), ("20,21,22", "200")]) == ["ok", "ok"]
    with loaderx.open_table(local) as t:
        labels = col(t, "label")
    assert labels[[1, 2, 3]].tolist() == [100] * 3 and labels[[20, 21, 22]].tolist() == [200] * 3
    out = run([("7,8", "700"), ("8,9", "800")])
    assert sorted(o.split()[0] for o in out) == ["conflict", "ok"] or out == ["ok", "ok"], out
    with loaderx.open_table(local) as t:
        labels = col(t, "label")
    if out == ["ok", "ok"]:
        # One ran wholly after the other (not concurrent): the later wins.
        assert labels[8] in (700, 800)
    else:
        winner = 700 if out[0] == "ok" else 800
        assert labels[8] == winner


def test_the_cli_sets_sql_literals_in_the_rows_a_predicate_matches(local, capsys):
    from loaderx import cli

    assert (
        cli.main(
            [
                "update",
                local,
                "--where",
                "id < 3",
                "--set",
                "caption='it''s'",
                "--set",
                "label=7",
                "--set",
                "note=NULL",
                "--json",
            ]
        )
        == 0
    )
    import json

    out = json.loads(capsys.readouterr().out)
    assert out == {"matched": 3, "version": 2, "previous_version": 1}
    with loaderx.open_table(local) as t:
        assert col(t, "caption")[:4] == ["it's", "it's", "it's", "caption 3"]
        assert col(t, "label")[:4].tolist() == [7, 7, 7, 3]
        assert col(t, "note")[:3] == [None, None, None]
    before = files_of(local)
    for argv, message in [
        (["--set", "label='x'"], "'label'"),
        (["--set", "label=abc"], "SQL literals"),
        (["--set", "nope=1"], "'nope'"),
        (["--set", "label"], "COLUMN=VALUE"),
        (["--set", "label=NULL"], "null"),
    ]:
        assert cli.main(["update", local, "--where", "id < 3", *argv]) == cli.BAD_INPUT
        assert message in capsys.readouterr().err
    assert cli.main(["update", local, "--where", "id > 999", "--set", "label=1"]) == 0
    assert "nothing committed" in capsys.readouterr().out
    assert files_of(local) == before


# add_columns(..., on=): new columns joined by key.


def test_add_columns_by_key_in_any_order_with_gaps(table):
    path, kw = table
    rng = np.random.default_rng(3)
    keys = rng.permutation(N)[: N - 5]  # 5 rows get no value
    keys = np.concatenate([keys, [1000, 1001]])  # keys the table lacks: ignored
    src = pa.table(
        {
            "quality": pa.array(keys * 0.5, pa.float64()),
            "id": keys,
            "tag": [f"t{k}" for k in keys],
        }
    )
    with loaderx.open_table(path, readonly=False, **kw) as t:
        before = model(t)
        t.add_columns(src, on="id")
        assert t.version == 2 and list(t)[-2:] == ["quality", "tag"]
        got = model(t)
    given = set(keys.tolist())
    assert got["quality"] == [i * 0.5 if i in given else None for i in range(N)]
    assert got["tag"] == [f"t{i}" if i in given else None for i in range(N)]
    assert {c: got[c] for c in before} == before


def test_add_columns_by_a_composite_key_from_polars_and_a_dict(local):
    pl = pytest.importorskip("polars")
    with loaderx.open_table(local, readonly=False) as t:
        t.add_columns(
            pl.DataFrame({"label": [1, 2], "id": [6, 7], "w": [60.0, 70.0]}), on=["id", "label"]
        )
        t.add_columns({"id": np.array([3, 0]), "v": np.array([30, 0])}, on="id")
        got = model(t)
    assert got["w"][6] == 60.0 and got["w"][7] == 70.0 and got["w"][0] is None
    assert got["v"][3] == 30 and got["v"][0] == 0 and got["v"][1] is None


@pytest.mark.parametrize(
    "columns,on,error,match",
    [
        ({"id": [1, 1], "x": [1, 2]}, "id", ValueError, "key 1"),
        ({"id": [1], "label": [2]}, "id", ValueError, "merge_insert"),
        ({"key": [1], "x": [2]}, "id", ValueError, "'id'"),
        ({"id": [1], "x": [2]}, "nope", ValueError, "'nope'"),
        ({"id": [1]}, "id", ValueError, "no column to add"),
        ({"id": ["a"], "x": [2]}, "id", ValueError, "'id'"),
        ({"id": [1], "x": [2]}, 5, TypeError, "on"),
    ],
)
def test_add_columns_by_key_refuses_bad_sources(local, columns, on, error, match):
    before = files_of(local)
    with loaderx.open_table(local, readonly=False) as t:
        with pytest.raises(error, match=match):
            t.add_columns(columns, on=on)
        assert t.version == 1
    assert files_of(local) == before


def test_a_dense_tensor_by_key_needs_every_key(local):
    with loaderx.open_table(local, readonly=False) as t:
        with pytest.raises(ValueError, match="'vec' cannot hold null"):
            t.add_columns({"id": np.arange(N - 1), "vec": np.zeros((N - 1, 2))}, on="id")
        t.add_columns({"id": np.arange(N)[::-1], "vec": np.arange(N * 2).reshape(N, 2)}, on="id")
        np.testing.assert_array_equal(col(t, "vec"), np.arange(N * 2).reshape(N, 2)[::-1])


# merge_insert: upserts by key, one version.


def test_merge_insert_updates_in_place_and_appends_in_source_order(table):
    path, kw = table
    src = pa.table(
        {
            "id": [45, 3, 41, 17],
            "label": pa.array([1, 30, 2, 170], pa.int64()),
            "caption": ["new 45", "three", "new 41", "seventeen"],
            "emb": pa.FixedShapeTensorArray.from_numpy_ndarray(np.full((4, 3), 7, np.float32)),
        }
    )
    with loaderx.open_table(path, readonly=False, **kw) as t:
        before = model(t)
        assert t.merge_insert(src, "id") == {"updated": 2, "inserted": 2, "deleted": 0}
        assert t.version == 2 and t.num_rows == N + 2
        assert [v["operation"] for v in t.versions()] == ["create", "merge_insert"]
        got = model(t)
    want = {c: list(v) for c, v in before.items()}
    for r, label, cap in ((3, 30, "three"), (17, 170, "seventeen")):
        want["label"][r], want["caption"][r], want["emb"][r] = label, cap, [7.0] * 3
    for k, label, cap in ((45, 1, "new 45"), (41, 2, "new 41")):
        want["id"].append(k)
        want["label"].append(label)
        want["caption"].append(cap)
        want["emb"].append([7.0] * 3)
        want["score"].append(None)  # columns the source lacks: null
        want["note"].append(None)
    assert got == want


def test_merge_insert_keep_skip_and_delete_by_source(local):
    src = {"id": np.array([1, 2, 100]), "label": np.array([10, 20, 1000])}
    with loaderx.open_table(local, readonly=False) as t:
        counts = t.merge_insert(src, "id", when_matched="keep", when_not_matched="skip")
        assert counts == {"updated": 0, "inserted": 0, "deleted": 0} and t.version == 1
        counts = t.merge_insert(
            src, "id", when_not_matched="skip", when_not_matched_by_source="delete"
        )
        assert counts == {"updated": 2, "inserted": 0, "deleted": N - 2}
        assert t.version == 2  # one version for both parts
        assert col(t, "id").tolist() == [1, 2] and col(t, "label").tolist() == [10, 20]
        counts = t.merge_insert({**src, "emb": np.ones((3, 3), np.float32)}, "id")
        assert counts == {"updated": 2, "inserted": 1, "deleted": 0}
        assert col(t, "id").tolist() == [1, 2, 100]
        assert col(t, "note")[2] is None and col(t, "emb")[2].tolist() == [1.0] * 3
    with loaderx.open_table(local, version=1) as old:
        assert old.num_rows == N and col(old, "label").tolist() == [i % 5 for i in range(N)]


@pytest.mark.parametrize(
    "source,on,kw,error,match",
    [
        ({"id": [1, 1], "label": [1, 2]}, "id", {}, ValueError, "key 1"),
        ({"id": [1], "nope": [2]}, "id", {}, ValueError, "'nope'"),
        ({"key": [1], "label": [2]}, "key", {}, ValueError, "'key'"),
        ({"id": [1], "label": ["x"]}, "id", {}, ValueError, "'label'"),
        ({"id": [1000], "label": [1]}, "id", {}, ValueError, "'emb'"),  # a tensor column lacked
        ({"id": [1], "label": [2]}, "id", {"when_matched": "replace"}, ValueError, "when_matched"),
        (
            {"id": [1], "label": [2]},
            "id",
            {"when_not_matched": "x"},
            ValueError,
            "when_not_matched",
        ),
        (
            {"id": [1], "label": [2]},
            "id",
            {"when_not_matched_by_source": "x"},
            ValueError,
            "by_source",
        ),
        ({"id": [1], "label": [2]}, ["id", "id"], {}, ValueError, "twice"),
    ],
)
def test_merge_insert_refuses_bad_input_and_commits_nothing(local, source, on, kw, error, match):
    before = files_of(local)
    with loaderx.open_table(local, readonly=False) as t:
        with pytest.raises(error, match=match):
            t.merge_insert(source, on, **kw)
        assert t.version == 1
    assert files_of(local) == before


@pytest.mark.parametrize(
    "typ,keys",
    [
        ("int64", [7, -3, 2**40, 0, 5]),
        ("int32", [7, -3, 11, 0, 5]),
        ("uint64", [7, 2**63 + 1, 11, 0, 5]),  # past int64: matched by a hash join
        ("string", ["g", "c", "x", "", "e"]),
        ("int64-null", [7, None, 11, 0, 5]),  # a null key matches nothing
    ],
)
def test_merge_insert_matches_keys_of_every_kind(tmp_path, typ, keys):
    """Integer keys int64 holds go through the native lookup, others
    through a hash join: both match, insert and refuse a repeated key
    alike."""
    arrow_type = pa.int64() if typ == "int64-null" else pa.type_for_alias(typ)
    path = str(tmp_path / "t")
    first = pa.table({"k": pa.array(keys, arrow_type), "v": pa.array([0, 1, 2, 3, 4], pa.int64())})
    loaderx.ingest_sharded(first, path, workers=1, shards=2).close()
    src_keys = pa.array([keys[4], keys[2], keys[0] if typ != "string" else "new"], arrow_type)
    if typ != "string":
        src_keys = pa.array([keys[4], keys[2], 99], arrow_type)
    with loaderx.open_table(path, readonly=False) as t:
        got = t.merge_insert({"k": src_keys, "v": pa.array([40, 20, 99], pa.int64())}, "k")
        assert got == {"updated": 2, "inserted": 1, "deleted": 0}
        assert col(t, "v").tolist() == [0, 1, 20, 3, 40, 99]
        assert t["k"].to_arrow(np.arange(t.num_rows)).to_pylist() == keys + [src_keys[2].as_py()]
        twice = pa.array([keys[3], keys[2], keys[3]], arrow_type)
        with pytest.raises(ValueError, match=f"key {keys[3]!r}"):
            t.merge_insert({"k": twice, "v": pa.array([1, 2, 3], pa.int64())}, "k")
        assert t.version == 2


def test_a_merge_that_inserts_conflicts_with_rows_added_meanwhile(local):
    a = loaderx.open_table(local, readonly=False)
    b = loaderx.open_table(local, readonly=False)
    try:
        b.append(source(N, N + 2))  # keys N and N + 1
        src = source(N, N + 3)
        with pytest.raises(loaderx.CommitConflict, match="added rows"):
            a.merge_insert(src, "id")
        assert a.merge_insert(src, "id") == {"updated": 2, "inserted": 1, "deleted": 0}
    finally:
        a.close()
        b.close()
    with loaderx.open_table(local) as t:
        assert col(t, "id").tolist() == list(range(N + 3))  # no key twice


def test_a_merge_that_only_updates_lands_beside_an_append(local):
    a = loaderx.open_table(local, readonly=False)
    b = loaderx.open_table(local, readonly=False)
    try:
        b.append(source(N, N + 2))
        assert a.merge_insert({"id": [4], "label": [44]}, "id") == {
            "updated": 1,
            "inserted": 0,
            "deleted": 0,
        }
    finally:
        a.close()
        b.close()
    with loaderx.open_table(local) as t:
        assert t.num_rows == N + 2 and col(t, "label")[4] == 44


# Random histories of edits against an in-memory model.


@pytest.mark.parametrize("layout", ["columnar", "records", "columnar-patched"])
def test_random_edits_match_a_pyarrow_model_with_views_and_pinned_versions(
    tmp_path, layout, monkeypatch
):
    """With ``layout="records"`` the edits of label and text are patches
    (new values of the edited rows only), stacked, deleted around,
    compacted and read at every version; with ``"columnar-patched"`` the
    edits patch the columnar columns (read by whole arrays with the
    patches laid over them). Each version is read by gathers, by a scan
    and by SQL predicates."""
    if layout == "columnar-patched":
        import functools

        import loaderx._edit as edit_module

        patching = functools.partial(edit_module.edit_groups, patch_columnar=True)
        monkeypatch.setattr(edit_module, "edit_groups", patching)
        layout = "columnar"
    rng = np.random.default_rng(11)
    path = str(tmp_path / "t")
    n0 = 30
    first = pa.table(
        {
            "id": np.arange(n0, dtype=np.int64),
            "label": pa.array(np.arange(n0) % 7, pa.int64()),
            "text": pa.array([f"r{i}" for i in range(n0)], pa.string()),
        }
    )
    kw = {"layout": "records"} if layout == "records" else {}
    loaderx.ingest_sharded(first, path, workers=1, shards=3, **kw).close()
    models = {1: first}  # version -> the rows it holds
    views = {}  # name -> (version, record ids)
    next_key = n0
    done = set()
    t = loaderx.open_table(path, readonly=False)
    for step in range(40):
        now = models[t.version]
        n = now.num_rows
        op = rng.choice(["update", "merge", "add_on", "delete", "append", "compact", "view"])
        ids = now["id"].to_numpy()
        if op == "update" and n:
            rows = np.sort(rng.choice(n, size=min(n, rng.integers(1, 6)), replace=False))
            labels = rng.integers(100, 200, rows.size)
            t.update(rows, {"label": labels, "text": [f"u{step}"] * rows.size})
            lab = now["label"].to_numpy().copy()
            lab[rows] = labels
            txt = now["text"].to_pylist()
            for r in rows:
                txt[r] = f"u{step}"
            new = now.set_column(1, "label", pa.array(lab, pa.int64()))
            new = new.set_column(2, "text", pa.array(txt, pa.string()))
        elif op == "merge":
            old_keys = rng.choice(ids, size=min(n, 3), replace=False) if n else np.array([], int)
            new_keys = np.arange(next_key, next_key + rng.integers(0, 3))
            next_key += new_keys.size
            keys = rng.permutation(np.concatenate([old_keys, new_keys]).astype(np.int64))
            if not keys.size:
                continue
            labels = rng.integers(500, 600, keys.size)
            drop = bool(rng.integers(0, 4) == 0)
            counts = t.merge_insert(
                {"id": keys, "label": labels},
                "id",
                when_not_matched_by_source="delete" if drop else "keep",
            )
            lab = now["label"].to_numpy().copy()
            by_key = dict(zip(keys.tolist(), labels.tolist()))
            for r, k in enumerate(ids.tolist()):
                if k in by_key:
                    lab[r] = by_key[k]
            new = now.set_column(1, "label", pa.array(lab, pa.int64()))
            if drop:
                new = new.filter(pa.array(np.isin(ids, keys)))
            fresh = [k for k in keys.tolist() if k not in set(ids.tolist())]
            extra = pa.table(
                {
                    "id": pa.array(fresh, pa.int64()),
                    "label": pa.array([by_key[k] for k in fresh], pa.int64()),
                    "text": pa.nulls(len(fresh), pa.string()),
                }
            )
            new = pa.concat_tables([new.select(["id", "label", "text"]), extra])
            for c in now.column_names[3:]:
                keep = new.num_rows - len(fresh)
                base = now[c] if not drop else now[c].filter(pa.array(np.isin(ids, keys)))
                new = new.append_column(
                    c,
                    pa.concat_arrays(
                        [base.combine_chunks()[:keep], pa.nulls(len(fresh), pa.float64())]
                    ),
                )
            assert counts["inserted"] == len(fresh)
        elif op == "add_on" and n:
            name = f"s{step}"
            keys = rng.choice(ids, size=max(1, n // 2), replace=False)
            vals = rng.random(keys.size)
            t.add_columns({"id": keys, name: vals}, on="id")
            by_key = dict(zip(keys.tolist(), vals.tolist()))
            new = now.append_column(
                name, pa.array([by_key.get(k) for k in ids.tolist()], pa.float64())
            )
        elif op == "delete" and n:
            rows = np.sort(rng.choice(n, size=min(n, rng.integers(1, 4)), replace=False))
            t.delete(rows)
            keep = np.ones(n, bool)
            keep[rows] = False
            new = now.filter(pa.array(keep))
        elif op == "append":
            k = int(rng.integers(1, 4))
            keys = np.arange(next_key, next_key + k, dtype=np.int64)
            next_key += k
            add = {"id": keys, "label": keys % 7, "text": [f"a{x}" for x in keys]}
            for c in now.column_names[3:]:
                add[c] = np.full(k, 0.5)
            t.append(add)
            new = pa.concat_tables([now, pa.table(add, schema=now.schema)])
        elif op == "compact":
            if t.compact(min_deleted=0.0) is None:
                continue
            new = now
        elif op == "view" and n:
            rows = np.sort(rng.choice(n, size=max(1, n // 3), replace=False))
            name = f"v{step}"
            t.save_view(name, rows)
            views[name] = (t.version, rows)
            done.add(op)
            continue
        else:
            continue
        models[t.version] = new
        done.add(op)
        # Every version and view so far reads as its model.
        for version, want in models.items():
            with loaderx.open_table(path, version=version) as old:
                for c in want.column_names:
                    got = old[c][np.arange(old.num_rows)]
                    got = got.tolist() if hasattr(got, "tolist") else got
                    assert got == want[c].to_pylist(), (step, op, version, c)
                scanned = loaderx.arrow.table(old).read_all()
                for c in want.column_names:
                    assert scanned[c].to_pylist() == want[c].to_pylist(), (step, op, version, c)
                for pred, mask in [
                    ("label >= 100", pc.greater_equal(want["label"], 100)),
                    (
                        "text = 'r3' OR text LIKE 'u%'",
                        pc.or_kleene(
                            pc.equal(want["text"], "r3"), pc.starts_with(want["text"], "u")
                        ),
                    ),
                ]:
                    got = loaderx.sql(f"SELECT id FROM t WHERE {pred} ORDER BY id", t=old)
                    expect = sorted(want.filter(mask)["id"].to_pylist())
                    assert got.column("id").to_pylist() == expect, (step, op, version, pred)
        for name, (version, rows) in views.items():
            with loaderx.open_table(path, view=name) as v:
                want = models[version].take(pa.array(rows))
                assert v["label"][np.arange(v.num_rows)].tolist() == want["label"].to_pylist()
    t.close()
    assert done == {"update", "merge", "add_on", "delete", "append", "compact", "view"}


def test_compact_folds_what_edits_left_whatever_min_deleted(local):
    shards = {d for d in os.listdir(local) if d.startswith("shard")}
    with loaderx.open_table(local, readonly=False) as t:
        t.update([1, 30], {"label": [10, 300], "emb": np.zeros((2, 3))})
        t.add_columns({"extra": np.arange(N)})
        t.update([2], {"extra": [-2]})
        want = model(t)
        version = t.compact(min_deleted=0.9)  # no row deleted anywhere
        assert version == t.version == 5
        assert model(t) == want
        assert t.compact(min_deleted=0.9) is None  # nothing left to fold
        import datetime

        t.cleanup(older_than=datetime.timedelta(0), keep_last=1)
        assert model(t) == want
    after = {d for d in os.listdir(local) if d.startswith("shard")}
    assert len(after) == 3 and len(after - shards) == 2  # the two edited shards rewritten
    groups = [d for _, dirs, _ in os.walk(local) for d in dirs if d.startswith("_g-")]
    assert len(groups) == 1  # the shard without edits keeps its added column's group
    with loaderx.open_table(local) as t:
        assert model(t) == want


def test_a_copy_of_an_edited_table_reads_as_its_source(local, tmp_path):
    with loaderx.open_table(local, readonly=False) as t:
        t.update("id < 4", {"caption": "copied"})
        t.merge_insert({"id": [2, 77], "label": [222, 777], "emb": np.ones((2, 3))}, "id")
        want = model(t)
    dst = str(tmp_path / "copy")
    loaderx.copy_table(local, dst)
    with loaderx.open_table(dst) as c:
        assert model(c) == want


# save_view(..., replace=True): a view saved again on the latest version.


def test_a_view_replaced_after_an_update_shows_the_new_values(table):
    path, kw = table
    with loaderx.open_table(path, readonly=False, **kw) as t:
        t.save_view("train", "id < 10")
        t.split({"a": 0.5, "b": 0.5}, seed=1)
        t.update("id < 3", {"label": 9})
        with pytest.raises(ValueError, match="already has view"):
            t.save_view("train", "id < 10")
        assert t.save_view("train", "id < 10", replace=True) == 10
        a_rows = loaderx.open_table(path, view="a", **kw)
        try:
            a_ids = col(a_rows, "id").tolist()
        finally:
            a_rows.close()
        assert t.save_view("a", np.array(a_ids), replace=True) == len(a_ids)
        with pytest.raises(ValueError, match="no view 'nope'"):
            t.save_view("nope", "id < 3", replace=True)
        views = t.views()
    assert views["train"]["version"] == 2 and views["a"]["version"] == 2
    assert views["b"]["version"] == 1  # the rest of the split stays
    with loaderx.open_table(path, view="train", **kw) as v:
        assert col(v, "label").tolist() == [9, 9, 9, 3, 4, 0, 1, 2, 3, 4]
    with loaderx.open_table(path, view="a", **kw) as v:
        assert col(v, "id").tolist() == a_ids
    with loaderx.open_table(path, readonly=False, **kw) as t:
        t.drop_view("a")  # dropped for good: the split's old entry does not come back
        assert set(t.views()) == {"train", "b"}


def test_replacing_a_view_whose_ids_a_delete_changed_is_refused(local):
    with loaderx.open_table(local, readonly=False) as t:
        t.save_view("late", "id >= 30")
        t.save_view("early", "id < 5")
        t.delete([20])  # shifts the ids of rows 21.. (in the last shard)
        with pytest.raises(ValueError, match="changed their record ids"):
            t.save_view("late", "id >= 30", replace=True)
        assert t.save_view("early", "id < 5", replace=True) == 5  # its rows kept their ids
        assert t.views()["late"]["version"] == 1 and t.views()["early"]["version"] == 2


def test_every_reader_sees_the_edits(local, tmp_path):
    """polars, pandas, Parquet export, Arrow and the DataLoader read what an
    update and a merge_insert committed."""
    pl = pytest.importorskip("polars")
    import pyarrow.parquet as pq

    import loaderx.parquet
    import loaderx.polars
    from loaderx.dataloader import DataLoader

    with loaderx.open_table(local, readonly=False) as t:
        t.update("id < 5", {"label": 99, "caption": "edited"})
        t.merge_insert({"id": [7, 500], "label": [77, 5], "emb": np.ones((2, 3))}, "id")
        want = model(t)
    with loaderx.open_table(local) as t:
        lf = loaderx.polars.scan_table(t)
        got = lf.select("id", "label").collect()
        assert got["label"].to_list() == want["label"] and got["id"].to_list() == want["id"]
        assert lf.filter(pl.col("label") == 99).select(pl.len()).collect().item() == 5
        df = t.to_pandas()
        captions = [None if isinstance(c, float) else c for c in df["caption"]]  # NaN: null
        assert df["label"].tolist() == want["label"] and captions == want["caption"]
        out = str(tmp_path / "t.parquet")
        loaderx.parquet.export(t, out)
        back = pq.read_table(out)
        assert back["label"].to_pylist() == want["label"]
        with DataLoader(t, batch_size=t.num_rows, mode="cyclic", seed=0) as dl:
            batch = next(dl)
        order = np.asarray(batch["id"]).tolist()
        labels = dict(zip(want["id"], want["label"]))
        assert [labels[i] for i in order] == np.asarray(batch["label"]).tolist()


def test_a_plain_table_becomes_versioned_by_its_first_edit(tmp_path):
    path = str(tmp_path / "plain")
    for s in loaderx.arrow.ingest(
        pa.table({"x": np.arange(10), "t": list("abcdefghij")}), path
    ).values():
        s.close()
    with loaderx.open_table(path, readonly=False) as t:
        assert t.version is None
        assert t.update([1, 2], {"x": [10, 20], "t": ["B", "C"]}) == 2
        assert t.version == 2
        assert t.merge_insert({"x": [10, 99], "t": ["BB", "new"]}, "x") == {
            "updated": 1,
            "inserted": 1,
            "deleted": 0,
        }
        assert col(t, "x").tolist() == [0, 10, 20, 3, 4, 5, 6, 7, 8, 9, 99]
        assert col(t, "t") == ["a", "BB", "C", *"defghij", "new"]
    with loaderx.open_table(path, version=1) as old:
        assert col(old, "x").tolist() == list(range(10))


def test_a_predicate_is_evaluated_again_after_a_compaction_meanwhile(local):
    a = loaderx.open_table(local, readonly=False)
    b = loaderx.open_table(local, readonly=False)
    try:
        b.delete([4])
        a._reopen()
        assert a.num_rows == N - 1  # a plans on the delete's version
        b.compact(min_deleted=0.0)  # rewrites the shard the update edits
        assert a.update("id = 5", {"label": 55}) == 1
        with pytest.raises(loaderx.CommitConflict, match="compacted"):
            c = loaderx.open_table(local, readonly=False)
            try:
                b.delete([0])
                b.compact(min_deleted=0.0)
                c.update([5], {"label": 56})  # record ids are not evaluated again
            finally:
                c.close()
    finally:
        a.close()
        b.close()
    with loaderx.open_table(local) as t:
        ids, labels = col(t, "id").tolist(), col(t, "label").tolist()
    assert labels[ids.index(5)] == 55
