"""Tables that evolve: a plain table made versioned in place, appends,
columns added without rewriting anything and dropped, locally and in a
bucket (the S3-compatible server on 127.0.0.1); conflicts typed; random
histories checked against an in-memory model (pyarrow tables), version by
version."""

import datetime
import io
import json
import os
import shutil
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loaderx
from loaderx import _native

pa = pytest.importorskip("pyarrow")


def rows(lo, hi):
    return pa.table(
        {
            "id": np.arange(lo, hi, dtype=np.int64),
            "img": pa.FixedShapeTensorArray.from_numpy_ndarray(
                np.arange(lo, hi, dtype=np.uint8)[:, None, None] * np.ones((1, 2, 3), np.uint8)
            ),
            "caption": [f"caption {i}" for i in range(lo, hi)],
        }
    )


def uri(s3, name="t"):
    return f"s3://{s3.bucket}/{s3.prefix}/{name}"


def files_of(path):
    """Every file below ``path`` with its bytes' identity (inode, size,
    mtime): what must not change when columns are added."""
    out = {}
    for d, _, names in os.walk(path):
        for n in names:
            p = os.path.join(d, n)
            st_ = os.stat(p)
            out[os.path.relpath(p, path)] = (st_.st_ino, st_.st_size, st_.st_mtime_ns)
    return out


def column(t, name):
    return t[name][np.arange(t.num_rows)]


def test_a_plain_table_becomes_versioned_in_place_without_copying(tmp_path):
    path = str(tmp_path / "plain")
    for s in loaderx.arrow.ingest(rows(0, 6), path).values():
        s.close()
    before = files_of(path)
    with loaderx.open_table(path, readonly=False) as t:
        assert t.version is None and not t.readonly
        t.add_columns({"score": np.linspace(0, 1, 6)})
        assert t.version == 2 and t.sharded and list(t) == ["caption", "id", "img", "score"]
        np.testing.assert_allclose(column(t, "score"), np.linspace(0, 1, 6))
        assert column(t, "caption") == [f"caption {i}" for i in range(6)]
        assert [(v["version"], v["operation"]) for v in t.versions()] == [
            (1, "create"),
            (2, "add_columns"),
        ]
    after = files_of(path)
    # Every file of the plain table is where it was, untouched.
    assert {k: v for k, v in after.items() if k in before} == before
    with loaderx.open_table(path, version=1) as v1:
        assert list(v1) == ["caption", "id", "img"] and v1.num_rows == 6


@pytest.fixture(params=["local", "s3"])
def table(request, tmp_path):
    """A sharded table of two shards (rows 0..5 and 5..8), at a new
    location on disk or in the bucket, with its storage options."""
    if request.param == "local":
        path, kw = str(tmp_path / "t"), {}
    else:
        s3 = request.getfixturevalue("s3")
        path, kw = uri(s3), {"storage_options": s3.options()}
    loaderx.ingest_sharded(rows(0, 8), path, workers=1, shards=2, **kw).close()
    return path, kw


def test_append_add_and_drop_columns(table):
    path, kw = table
    with loaderx.open_table(path, readonly=False, **kw) as t:
        assert t.append(rows(8, 10)) == 10
        assert (
            t.append(
                {
                    "id": np.array([10]),
                    "img": np.full((1, 2, 3), 10, np.uint8),
                    "caption": ["caption 10"],
                }
            )
            == 11
        )
        assert t.version == 3
        t.add_columns(
            {
                "emb": np.arange(11 * 4, dtype=np.float32).reshape(11, 4),
                "title": [f"t{i}" for i in range(11)],
                "raw": [bytes([i]) * i for i in range(11)],
                "maybe": pa.array([None if i % 3 == 0 else i for i in range(11)], pa.int64()),
            }
        )
        assert t.version == 4
        np.testing.assert_array_equal(
            column(t, "emb"), np.arange(44, dtype=np.float32).reshape(11, 4)
        )
        assert column(t, "title") == [f"t{i}" for i in range(11)]
        assert column(t, "raw") == [bytes([i]) * i for i in range(11)]
        got = pa.chunked_array(t["maybe"]).to_pylist()
        assert got == [None if i % 3 == 0 else i for i in range(11)]
        # A function over existing columns, in row order.
        t.add_columns(lambda b: {"id2": b["id"] * 2}, read_columns=["id"])
        np.testing.assert_array_equal(column(t, "id2"), np.arange(11) * 2)
        t.drop_columns(["raw", "img"])
        assert "raw" not in t and "img" not in t and t.version == 6
        # A dropped name can be added again, with new values.
        t.add_columns({"raw": np.arange(11)})
        np.testing.assert_array_equal(column(t, "raw"), np.arange(11))
        # Appends after added columns carry every column.
        t.append(
            {
                "id": np.array([11]),
                "caption": ["caption 11"],
                "emb": np.zeros((1, 4), np.float32),
                "title": ["t11"],
                "maybe": pa.array([None], pa.int64()),
                "id2": np.array([22]),
                "raw": np.array([99]),
            }
        )
        assert t.num_rows == 12 and column(t, "raw")[-1] == 99
    with loaderx.open_table(path, version=5, **kw) as v5:
        assert column(v5, "raw") == [bytes([i]) * i for i in range(11)]
        assert v5["img"][[3]].shape == (1, 2, 3)
    sql = loaderx.sql(
        "SELECT count(*) AS n, sum(id2) AS s FROM t", t=loaderx.open_table(path, **kw)
    )
    assert sql.to_pylist() == [{"n": 12, "s": int((np.arange(11) * 2).sum()) + 22}]


def test_added_columns_rewrite_nothing_that_was_there(tmp_path):
    path = str(tmp_path / "t")
    loaderx.ingest_sharded(rows(0, 40), path, workers=1, shards=3).close()
    before = files_of(path)
    with loaderx.open_table(path, readonly=False) as t:
        t.add_columns({"label": np.arange(40) % 7})
    after = files_of(path)
    assert {k: after[k] for k in before if k != "manifest.json"} == {
        k: v for k, v in before.items() if k != "manifest.json"
    }
    new = sorted(set(after) - set(before))
    assert all(k.startswith("_versions/") or "/_g-" in k for k in new), new


def test_bad_evolution_changes_nothing(tmp_path):
    path = str(tmp_path / "t")
    loaderx.ingest_sharded(rows(0, 8), path, workers=1, shards=2).close()
    before = files_of(path)
    with loaderx.open_table(path) as t:
        with pytest.raises(io.UnsupportedOperation, match="readonly=False"):
            t.add_columns({"x": np.arange(8)})
        with pytest.raises(io.UnsupportedOperation):
            t.append(rows(8, 9))
        with pytest.raises(io.UnsupportedOperation):
            t.drop_columns("id")
    with loaderx.open_table(path, readonly=False) as t:
        with pytest.raises(ValueError, match="'x' has 7 rows, but the table has 8"):
            t.add_columns({"x": np.arange(7)})
        # A stream is cut at the shards' boundaries in the core: its rows
        # must be the table's.
        for n, msg in (
            (9, r"more rows than the table \(8\)"),
            (7, "have 7 rows, but the table has 8"),
        ):
            stream = pa.RecordBatchReader.from_batches(
                pa.schema([("x", pa.int64())]),
                pa.table({"x": np.arange(n)}).to_batches(max_chunksize=3),
            )
            with pytest.raises(ValueError, match=msg):
                t.add_columns(stream)
        with pytest.raises(ValueError, match="'id' is in table"):
            t.add_columns({"id": np.arange(8)})
        with pytest.raises(ValueError, match="no column 'nope'"):
            t.drop_columns(["nope"])
        with pytest.raises(ValueError, match="without columns"):
            t.drop_columns(["id", "img", "caption"])
        with pytest.raises(ValueError, match="read_columns names 'nope'"):
            t.add_columns(lambda b: {"y": b["nope"]}, read_columns=["nope"])
        with pytest.raises(ValueError):
            t.append({"id": np.arange(2)})  # missing columns
        assert t.version == 1
    assert files_of(path) == before


def test_an_append_overtaken_by_a_change_of_columns_is_a_commit_conflict(table):
    """Rows made for the columns a handle shows, appended after another
    writer added or dropped columns, raise CommitConflict naming both
    versions (not the ValueError of mismatched shards), and commit nothing."""
    path, kw = table
    a = loaderx.open_table(path, readonly=False, **kw)
    b = loaderx.open_table(path, readonly=False, **kw)
    try:
        b.add_columns({"extra": np.arange(8)})
        with pytest.raises(
            loaderx.CommitConflict, match=r"version 1 \(columns .*\), but version 2 .*'extra'"
        ):
            a.append(rows(8, 10))
        assert a.version == 2 and a.num_rows == 8  # it shows the latest
        b.drop_columns(["extra"])  # version 3, and a holds version 2
        with pytest.raises(loaderx.CommitConflict, match="version 2 .* version 3"):
            a.append(rows(8, 10).append_column("extra", pa.array([8, 9])))
        with loaderx.open_table(path, **kw) as latest:
            assert latest.version == 3 and latest.num_rows == 8
        # Planned on the latest, the same rows go in.
        b.append(rows(8, 10))
        assert b.num_rows == 10
    finally:
        a.close()
        b.close()
    if not kw:
        shards = [d for d in os.listdir(path) if d.startswith("shard")]
        manifest = open(os.path.join(path, "manifest.json")).read()
        assert all(d in manifest for d in shards), "a refused append left no shard"


def test_a_change_planned_on_a_version_a_cleanup_removed_is_a_commit_conflict(table):
    """Handles on a version that a cleanup removed since: a change planned
    on it (append, add_columns, drop_columns, delete, save_view, split)
    raises CommitConflict naming that version and the latest, and commits
    nothing; tagging that version (named, not planned on) is refused with
    the ValueError its docs give. (In a bucket, once the handle's plan is
    older than the 10 seconds a cleanup with an ``older_than`` of 0 may
    race; see docs/format.md.)"""
    path, kw = table
    changes = [
        lambda a: a.append(rows(12, 13)),
        lambda a: a.add_columns({"x": np.arange(8)}),
        lambda a: a.drop_columns("caption"),
        lambda a: a.delete("id < 2"),
        lambda a: a.save_view("v", np.array([0, 1])),
        lambda a: a.split({"train": 0.5, "val": 0.5}),
        lambda a: a.tag("first"),
    ]
    handles = [loaderx.open_table(path, readonly=False, **kw) for _ in changes]
    try:
        with loaderx.open_table(path, readonly=False, **kw) as b:
            b.append(rows(8, 10))
            b.append(rows(10, 12))
            b.cleanup(older_than=datetime.timedelta(0), keep_last=1)
            assert [v["version"] for v in b.versions()] == [3]
        if kw:
            # In a bucket a handle's add_columns plans on the manifest.json
            # its open read, without reading it again, for 10 seconds.
            time.sleep(10.5)
        gone = "planned on version 1, which a cleanup removed since; the latest version is 3"
        for a, change in zip(handles[:-1], changes[:-1]):
            assert a.version == 1
            with pytest.raises(loaderx.CommitConflict, match=gone):
                change(a)
        with pytest.raises(ValueError, match="no version 1 .*removed by a cleanup"):
            changes[-1](handles[-1])
    finally:
        for a in handles:
            a.close()
    with loaderx.open_table(path, **kw) as t:
        assert t.version == 3 and t.num_rows == 12 and set(t) == {"id", "img", "caption"}
        assert t.views() == {} and t.tags() == {}


def test_a_commit_planned_on_an_older_version_conflicts_or_is_retried(table):
    path, kw = table
    a = loaderx.open_table(path, readonly=False, **kw)
    b = loaderx.open_table(path, readonly=False, **kw)
    try:
        # Columns added beside other columns: both kept.
        a.add_columns({"x": np.arange(8)})
        b.add_columns({"y": np.arange(8) + 1})
        assert {"x", "y"} <= set(b)
        # Rows appended meanwhile have no values in the new column.
        b.append(rows(8, 9).append_column("x", pa.array([8])).append_column("y", pa.array([9])))
        with pytest.raises(loaderx.CommitConflict, match="planned on version 2.*version 4"):
            a.add_columns({"z": np.arange(8)})
        assert isinstance(loaderx.CommitConflict("x"), RuntimeError)
        assert "z" not in a and a.version == 4  # it shows the latest
        if kw:
            return
        # The failed write left no group behind.
        manifest = open(os.path.join(path, "manifest.json")).read()
        groups = [
            g
            for d in os.listdir(path)
            if d.startswith("shard")
            for g in os.listdir(os.path.join(path, d))
            if g.startswith("_g-")
        ]
        assert groups and all(g in manifest for g in groups)
    finally:
        a.close()
        b.close()


def test_a_commit_overtaken_while_its_columns_were_written_takes_the_latest(table):
    path, kw = table
    a = loaderx.open_table(path, readonly=False, **kw)
    b = loaderx.open_table(path, readonly=False, **kw)
    try:

        def beside(batch):
            # Another commit lands after this write was planned (on
            # version 1): a column added beside it, taken as it is.
            if "y" not in b:
                b.add_columns({"y": np.arange(8) + 1})
            return {"x": np.asarray(batch["id"]) * 2}

        a.add_columns(beside, read_columns=["id"])
        assert a.version == 3 and {"x", "y"} <= set(a)
        assert column(a, "x").tolist() == list(range(0, 16, 2))
        assert column(a, "y").tolist() == list(range(1, 9))

        def appending(batch):
            # Rows appended after this write was planned (on version 3).
            if b.num_rows == 8:
                extra = (
                    rows(8, 9).append_column("y", pa.array([9])).append_column("x", pa.array([16]))
                )
                b.append(extra)
            return {"z": np.asarray(batch["id"])}

        with pytest.raises(loaderx.CommitConflict, match="planned on version 3.*version 4"):
            a.add_columns(appending, read_columns=["id"])
        assert "z" not in a and a.version == 4
    finally:
        a.close()
        b.close()


def test_columns_added_in_a_bucket_commit_without_reading_it_again(s3):
    """A write planned on the version the open saw reads nothing first: the
    open kept manifest.json with its tag (and, at version 1, listed the
    version files, so version 1's file is not written again); a write on
    the version a commit made uses the tag that commit's write returned.
    Each commit is the shards' new files, the next version's file and the
    conditional move of manifest.json."""
    from remote_servers import FaultProxy

    path = uri(s3, "counted")
    loaderx.ingest_sharded(
        rows(0, 8), path, workers=1, shards=2, **{"storage_options": s3.options()}
    ).close()
    proxy = FaultProxy(s3.endpoint)

    def requests():
        # A listing's path is the bucket's, with the prefix in its query.
        return [(r.method, r.path.split("/counted/", 1)[-1]) for r in proxy.requests]

    def assert_commit(seen, column, version):
        groups = sorted(seen[:-2])
        assert len(groups) == 2 and all(
            m == "PUT" and k.startswith("shard-") and k.endswith(f"/{column}/column.zc")
            for m, k in groups
        ), seen
        assert seen[-2:] == [
            ("PUT", f"_versions/{version:020}.json"),
            ("PUT", "manifest.json"),
        ], seen

    try:
        opts = s3.options(endpoint=proxy.url)
        with loaderx.open_table(path, readonly=False, storage_options=opts) as t:
            assert ("GET", "_versions/00000000000000000002.json") not in requests()
            proxy.reset_counts()
            t.add_columns({"w": np.arange(8)})
            assert_commit(requests(), "w", 2)
            assert t.version == 2  # the table opened again at it
            proxy.reset_counts()
            t.add_columns({"x": np.arange(8)})
            assert_commit(requests(), "x", 3)
    finally:
        proxy.stop()
    with loaderx.open_table(path, storage_options=s3.options()) as t:
        assert t.version == 3 and column(t, "x").tolist() == list(range(8))
        assert [v["version"] for v in t.versions()] == [1, 2, 3]
    with loaderx.open_table(path, storage_options=s3.options(), version=1) as t:
        assert sorted(t) == ["caption", "id", "img"]


def test_a_write_planned_on_what_an_old_open_saw_commits_after_the_latest(s3):
    """Two handles open the same version; one adds a column. The other's
    write, planned on what its open saw, finds the version it would make
    taken, reads the latest and commits after it: both columns are there."""
    path = uri(s3, "stale")
    opts = s3.options()
    loaderx.ingest_sharded(rows(0, 8), path, workers=1, shards=2, storage_options=opts).close()
    with (
        loaderx.open_table(path, readonly=False, storage_options=opts) as a,
        loaderx.open_table(path, readonly=False, storage_options=opts) as b,
    ):
        b.add_columns({"y": np.arange(8) * 2})
        a.add_columns({"z": np.arange(8) * 3})
        assert a.version == 3
        assert column(a, "y").tolist() == [2 * i for i in range(8)]
        assert column(a, "z").tolist() == [3 * i for i in range(8)]
        # b's basis (from its commit) is behind now: its next write too.
        b.add_columns({"v": np.arange(8) * 5})
        assert b.version == 4 and sorted(b) == ["caption", "id", "img", "v", "y", "z"]
    with loaderx.open_table(path, storage_options=opts, version=2) as t:
        assert sorted(t) == ["caption", "id", "img", "y"]


# -- random histories against a model --------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("add"), st.integers(0, 3)),
        st.tuples(st.just("drop"), st.integers(0, 3)),
        st.tuples(st.just("delete"), st.integers(0, 50)),
        st.tuples(st.just("compact"), st.integers(0, 1)),
        st.tuples(st.just("view"), st.integers(1, 3)),
        st.tuples(st.just("tag"), st.integers(0, 9)),
        st.tuples(st.just("cleanup"), st.integers(1, 3)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops)
def test_every_version_reads_as_the_model_says(tmp_path_factory, history):
    path = str(tmp_path_factory.mktemp("model") / "t")
    model = {"id": list(range(3))}
    loaderx.ingest_sharded(pa.table({"id": np.arange(3, dtype=np.int64)}), path, workers=1).close()
    snapshots = {1: {k: list(v) for k, v in model.items()}}
    views = {}  # name -> (version, expected columns)
    tags = set()  # tagged versions
    kept = {1}  # versions not removed by a cleanup
    added = 0
    with loaderx.open_table(path, readonly=False) as t:
        for op, n in history:
            rows_now = len(model["id"])
            if op == "append":
                new = {
                    c: [rows_now + i if c == "id" else 1000 + i for i in range(n)] for c in model
                }
                t.append({c: np.array(v, dtype=np.int64) for c, v in new.items()})
                for c in model:
                    model[c] += new[c]
            elif op == "add":
                name = f"c{added}"
                added += 1
                vals = [i * 10 + n for i in range(rows_now)]
                t.add_columns({name: np.array(vals, dtype=np.int64)})
                model[name] = vals
            elif op == "drop":
                droppable = [c for c in model if c != "id"]
                if not droppable:
                    continue
                name = droppable[n % len(droppable)]
                t.drop_columns(name)
                del model[name]
            elif op == "delete":
                if rows_now <= 1:
                    continue
                gone = n % rows_now
                assert t.delete([gone]) == 1
                for c in model:
                    del model[c][gone]
            elif op == "compact":
                t.compact(min_deleted=0.0 if n else 0.5)  # same rows either way
            elif op == "tag":
                version = sorted(kept)[n % len(kept)]
                t.tag(f"tag{len(t.tags())}", version)
                tags.add(version)
                continue
            elif op == "cleanup":
                t.cleanup(older_than=datetime.timedelta(0), keep_last=n)
                top = t.version
                keep = {v for v in kept if v > top - n} | tags | {v for v, _ in views.values()}
                kept &= keep
                continue
            else:
                name = f"v{len(views)}"
                keep = [i for i in range(rows_now) if i % n == 0]
                t.save_view(name, np.array(keep))
                views[name] = (t.version, {c: [v[i] for i in keep] for c, v in model.items()})
                continue
            snapshots[t.version] = {k: list(v) for k, v in model.items()}
            kept.add(t.version)
    with loaderx.open_table(path) as t:
        latest = t.version
        assert [v["version"] for v in t.versions()] == sorted(kept)
    for version, want in snapshots.items():
        if version > latest:
            continue  # a compaction that found nothing made no version
        if version not in kept:
            with pytest.raises(ValueError, match="removed by a cleanup"):
                loaderx.open_table(path, version=version)
            continue
        with loaderx.open_table(path, version=version) as t:
            assert sorted(t) == sorted(want), version
            for c, values in want.items():
                assert column(t, c).tolist() == values, (version, c)
    for name, (version, want) in views.items():
        with loaderx.open_table(path, view=name) as v:
            assert v.version == version
            for c, values in want.items():
                assert column(v, c).tolist() == values, (name, c)
    # Nothing lingers that no version left names: the column groups,
    # deletion files and the column stores in shards' own directories on
    # disk are exactly the ones the version files list.
    listed_groups, listed_deletions, listed_own = set(), set(), set()
    versions_dir = os.path.join(path, "_versions")
    for name in os.listdir(versions_dir):
        with open(os.path.join(versions_dir, name)) as f:
            manifest = json.load(f)
        for shard in manifest["shards"]:
            base = "" if shard["name"] == "." else shard["name"] + "/"
            listed_groups |= {base + g["dir"] for g in shard.get("groups", [])}
            if shard.get("deleted"):
                listed_deletions.add(base + shard["deleted"]["file"])
            grouped = {c for g in shard.get("groups", []) for c in g["columns"]}
            listed_own |= {base + c for c in manifest["columns"] if c not in grouped}
    own = {
        f"{shard}/{x}"
        for shard in os.listdir(path)
        if shard.startswith("shard-")
        for x in os.listdir(os.path.join(path, shard))
        if os.path.isfile(os.path.join(path, shard, x, "meta.zr"))
        or os.path.isfile(os.path.join(path, shard, x, "column.zc"))
    }
    assert own == listed_own
    groups, deletions = set(), set()
    for d, dirs, names in os.walk(path):
        rel = os.path.relpath(d, path)
        prefix = "" if rel == "." else rel + "/"
        groups |= {prefix + x for x in dirs if x.startswith("_g-")}
        deletions |= {prefix + x for x in names if x.startswith("_deleted-")}
    assert groups == listed_groups
    assert deletions == listed_deletions


def test_delete_by_predicate_ids_and_mask_then_compact(table):
    path, kw = table
    with loaderx.open_table(path, readonly=False, **kw) as t:
        t.add_columns({"score": np.arange(8) / 10})
        assert t.delete("score >= 0.6") == 2  # ids 6, 7
        assert t.num_rows == 6 and column(t, "id").tolist() == [0, 1, 2, 3, 4, 5]
        assert t.delete(np.array([0, 2])) == 2  # record ids of this version
        assert column(t, "id").tolist() == [1, 3, 4, 5]
        mask = np.zeros(4, bool)
        mask[1] = True
        assert t.delete(mask) == 1
        assert column(t, "id").tolist() == [1, 4, 5]
        assert column(t, "caption") == ["caption 1", "caption 4", "caption 5"]
        np.testing.assert_allclose(column(t, "score"), [0.1, 0.4, 0.5])
        assert t["img"][[2]][0, 0, 0] == 5
        # Every read path skips deleted rows: SQL, Arrow, the loader.
        got = loaderx.sql("SELECT record_id, id FROM t ORDER BY record_id", t=t).to_pylist()
        assert got == [
            {"record_id": 0, "id": 1},
            {"record_id": 1, "id": 4},
            {"record_id": 2, "id": 5},
        ]
        assert loaderx.arrow.table(t).read_all()["id"].to_pylist() == [1, 4, 5]
        from loaderx.dataloader import DataLoader

        with DataLoader({"id": t["id"]}, batch_size=3) as loader:
            assert sorted(next(loader)["id"].tolist()) == [1, 4, 5]
        before = t.version
        assert t.compact(min_deleted=0.5) == before + 1
        assert column(t, "id").tolist() == [1, 4, 5]
        assert column(t, "caption") == ["caption 1", "caption 4", "caption 5"]
        np.testing.assert_allclose(column(t, "score"), [0.1, 0.4, 0.5])
        assert t.compact(min_deleted=0.5) is None  # nothing left to compact
    with loaderx.open_table(path, version=1, **kw) as v1:
        assert column(v1, "id").tolist() == list(range(8))
    with loaderx.open_table(path, readonly=False, **kw) as t:
        with pytest.raises(ValueError, match="record ids must be in 0..3, got 3"):
            t.delete([3])
        with pytest.raises(ValueError, match="bool mask must have shape"):
            t.delete(np.ones(2, bool))
        with pytest.raises(ValueError, match="predicate 'nope > 1' failed"):
            t.delete("nope > 1")
        assert t.delete([]) == 0


def test_views_and_splits_are_tables_everywhere(table):
    path, kw = table
    with loaderx.open_table(path, readonly=False, **kw) as t:
        t.add_columns({"doc": [f"d{i // 3}" for i in range(8)]})
        assert t.save_view("odd", t["id"][np.arange(8)] % 2 == 1) == 4
        assert t.save_view("small", "id < 3") == 3
        with pytest.raises(ValueError, match="already has view 'odd'"):
            t.save_view("odd", [1])
        sizes = t.split({"train": 0.75, "test": 0.25}, seed=7)
        assert sizes == {"train": 6, "test": 2}
        again = [set(column_of_view(path, kw, n, "id")) for n in ("train", "test")]
        assert again[0].isdisjoint(again[1]) and again[0] | again[1] == set(range(8))
        by = t.split({"a": 0.5, "b": 0.5}, seed=1, by="doc")
        assert sum(by.values()) == 8
        docs = [set(column_of_view(path, kw, n, "doc")) for n in ("a", "b")]
        assert docs[0].isdisjoint(docs[1])
        views = t.views()
        assert views["odd"] == {"version": 2, "num_rows": 4} and set(views) == {
            "odd",
            "small",
            "train",
            "test",
            "a",
            "b",
        }
        # Later versions leave a view on its own version.
        t.delete("id = 1")
        t.append(rows(8, 9).append_column("doc", pa.array(["d9"])))
    with loaderx.open_table(path, view="odd", **kw) as v:
        assert v.version == 2 and column(v, "id").tolist() == [1, 3, 5, 7]
        assert loaderx.sql("SELECT sum(id) AS s FROM v", v=v).to_pylist() == [{"s": 16}]
        assert loaderx.arrow.table(v).read_all()["caption"].to_pylist()[0] == "caption 1"
    # The same split again with the same seed selects the same rows.
    with loaderx.open_table(path, readonly=False, **kw) as t:
        t.drop_view("train")
        t.drop_view("test")
        with loaderx.open_table(path, version=2, **kw) as v2:
            v2._evolvable = True
            v2.split({"train": 0.75, "test": 0.25}, seed=7)
        with pytest.raises(ValueError, match="no view 'gone'"):
            loaderx.open_table(path, view="gone", **kw)
    assert set(column_of_view(path, kw, "train", "id")) == again[0]
    with loaderx.open_table(path, **kw) as t:
        # Cleanup keeps the versions views select from.
        t.cleanup(older_than=__import__("datetime").timedelta(0))
        assert 2 in [v["version"] for v in t.versions()]
    with loaderx.open_table(path, view="small", **kw) as v:
        assert column(v, "id").tolist() == [0, 1, 2]


def test_a_predicate_is_evaluated_again_after_a_compaction_ids_conflict(table):
    """A compaction committed after a delete was planned replaces the shards
    it touched: a predicate is evaluated again on the latest version (the
    core retries the commit); record ids or a mask name rows of the old
    version only and raise CommitConflict naming both versions."""
    path, kw = table
    a = loaderx.open_table(path, readonly=False, **kw)
    b = loaderx.open_table(path, readonly=False, **kw)
    try:
        b.delete(np.array([0]))  # ids 1..7 left
        a._reopen()
        assert a.version == 2  # shown (opened) now
        b.compact(min_deleted=0.0)  # every shard replaced (version 3)
        assert a.version == 2 and b.version == 3
        with pytest.raises(loaderx.CommitConflict, match="planned on version 2.*version 3"):
            a.delete(np.array([0]))
        assert a.version == 3  # it shows the latest
        b.delete(np.array([6]))  # id 7 gone: version 4
        a._reopen(4)
        assert a.version == 4
        b.compact(min_deleted=0.0)  # version 5 replaces version 4's shards
        assert a.delete("id % 2 = 1") == 3  # ids 1, 3, 5 (7 was deleted)
        assert a.version == 6
        assert column(a, "id").tolist() == [2, 4, 6]
        assert column(a, "caption") == ["caption 2", "caption 4", "caption 6"]
    finally:
        a.close()
        b.close()


def column_of_view(path, kw, name, col):
    with loaderx.open_table(path, view=name, **kw) as v:
        got = v[col][np.arange(v.num_rows)]
        return got.tolist() if isinstance(got, np.ndarray) else list(got)


# -- several processes at once -----------------------------------------------------


def _committer(path, opts, k, rounds, queue):
    """Appends rows ``k*1000 + j`` and deletes every third one it appended,
    committing each change; reports what should be left, or the error."""
    try:
        kept, conflicts = [], 0
        with loaderx.open_table(path, readonly=False, storage_options=opts) as t:
            for j in range(rounds):
                ids = [k * 1000 + j * 10 + i for i in range(3)]
                t.append({"id": np.array(ids, np.int64)})
                t.delete(f"id = {ids[0]}")
                kept += ids[1:]
                if k == 0 and j % 2:
                    try:
                        t.compact(min_deleted=0.0)
                    except loaderx.CommitConflict:
                        conflicts += 1
        queue.put(("ok", kept, conflicts))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put(("error", f"{type(exc).__name__}: {exc}", 0))


@pytest.mark.parametrize("procs", [2, 4])
@pytest.mark.parametrize("where_", ["local", "s3"])
def test_processes_appending_and_deleting_at_once_lose_nothing(tmp_path, request, procs, where_):
    import multiprocessing as mp

    if where_ == "local":
        path, opts = str(tmp_path / "t"), None
    else:
        s3 = request.getfixturevalue("s3")
        path, opts = uri(s3), s3.options()
    loaderx.ingest_sharded(
        pa.table({"id": np.array([-1], np.int64)}), path, workers=1, storage_options=opts
    ).close()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    rounds = 3
    workers = [
        ctx.Process(target=_committer, args=(path, opts, k, rounds, queue)) for k in range(procs)
    ]
    for w in workers:
        w.start()
    results = [queue.get(timeout=300) for _ in workers]
    for w in workers:
        w.join(60)
    errors = [r[1] for r in results if r[0] != "ok"]
    assert not errors, errors
    want = sorted([-1] + [i for r in results for i in r[1]])
    with loaderx.open_table(path, storage_options=opts) as t:
        assert sorted(column(t, "id").tolist()) == want
        # One version per commit: appends and deletes of every process,
        # each compaction that went through.
        ops = [v["operation"] for v in t.versions()]
        assert ops.count("append") == procs * rounds and ops.count("delete") == procs * rounds


def test_a_view_with_deletions_is_a_table_for_polars_parquet_and_mix(tmp_path):
    pytest.importorskip("polars")
    import pyarrow.parquet as pq

    from loaderx.dataloader import DataLoader

    path = str(tmp_path / "t")
    loaderx.ingest_sharded(rows(0, 30), path, workers=1, shards=3).close()
    with loaderx.open_table(path, readonly=False) as t:
        t.delete("id % 5 = 0")  # 0, 5, ..., 25
        t.save_view("even", "id % 2 = 0")
    want = [i for i in range(30) if i % 5 and i % 2 == 0]
    with loaderx.open_table(path, view="even") as v:
        got = loaderx.polars.scan_table(v).select("id").collect()["id"].to_list()
        assert got == want
        out = str(tmp_path / "even.parquet")
        loaderx.parquet.export(v, out)
        assert pq.read_table(out)["id"].to_pylist() == want
        mix = loaderx.Mix({"a": dict(v), "b": dict(v)}, weights={"a": 0.5, "b": 0.5})
        with DataLoader(mix, batch_size=8, seed=1) as loader:
            batch = next(loader)
        assert set(batch["id"].tolist()) <= set(want)


def test_a_plain_table_in_a_bucket_becomes_versioned_there(s3, tmp_path):
    local = str(tmp_path / "plain")
    for s in loaderx.arrow.ingest(rows(0, 6), local).values():
        s.close()
    target = uri(s3, "plain")
    opts = s3.options()
    loaderx.copy_table(local, target, storage_options=opts)
    before = {k: None for k in s3.keys(f"{s3.prefix}/plain/")}
    with loaderx.open_table(target, readonly=False, storage_options=opts) as t:
        assert t.version is None and not t.readonly
        t.add_columns({"score": np.arange(6) * 0.5})
        t.append(rows(6, 8).append_column("score", pa.array([3.0, 3.5])))
        assert t.version == 3 and column(t, "score").tolist() == [i * 0.5 for i in range(8)]
    assert set(before) <= set(s3.keys(f"{s3.prefix}/plain/"))
    with loaderx.open_table(target, version=1, storage_options=opts) as v1:
        assert v1.num_rows == 6 and "score" not in v1


def listing(path, kw, request):
    """Every file or object below the table, relative to it."""
    if not kw:
        return [os.path.relpath(os.path.join(d, n), path) for d, _, ns in os.walk(path) for n in ns]
    s3 = request.getfixturevalue("s3")
    prefix = path[len(f"s3://{s3.bucket}/") :] + "/"
    return [k[len(prefix) :] for k in s3.keys(prefix)]


def test_cleanup_removes_the_groups_and_deletion_files_only_removed_versions_name(table, request):
    path, kw = table
    with loaderx.open_table(path, readonly=False, **kw) as t:
        t.add_columns({"a": np.arange(t.num_rows)})
        t.add_columns({"b": np.arange(t.num_rows) * 2})
        t.delete([1])
        t.delete([2])
        t.drop_columns("a")
        t.tag("kept", t.version)  # its deletion file stays
        t.delete([3])
        before = set(listing(path, kw, request))
        t.cleanup(older_than=datetime.timedelta(0), keep_last=1)
        after = set(listing(path, kw, request))
        want = t["b"][np.arange(t.num_rows)].tolist()
    gone = before - after
    # Every shard's group of column a (dropped) goes; b's stays.
    assert any("_g-" in g for g in gone)
    # The first deletion files go; the tagged version's and the latest's stay.
    deleted_gone = {g for g in gone if "_deleted-" in g}
    deleted_left = {g for g in after if "_deleted-" in g}
    assert deleted_gone and deleted_left
    # No JSON file goes but version files and those inside removed groups
    # (a columnar group's table.json).
    assert not any(g.endswith(".json") and "_versions" not in g and "/_g-" not in g for g in gone)
    with loaderx.open_table(path, **kw) as t:
        assert t["b"][np.arange(t.num_rows)].tolist() == want
        assert sorted(t) == ["b", "caption", "id", "img"]
    with loaderx.open_table(path, version="kept", **kw) as t:
        assert sorted(t) == ["b", "caption", "id", "img"]
        assert column(t, "b").tolist() == [
            2 * i for i in range(8) if i not in (1, 3)
        ]  # ids are dense
    groups = {p for g in after for p in g.split("/") if p.startswith("_g-")}
    assert len(groups) == 1  # b's group only


def test_cleanup_frees_a_dropped_columns_stores_once_no_kept_version_has_it(table, request):
    """A column written with the shards (its stores in each shard's own
    directory): dropping it keeps its bytes while a kept version reads it;
    once none does, cleanup removes its stores and nothing else."""
    path, kw = table
    with loaderx.open_table(path, readonly=False, **kw) as t:
        t.drop_columns("img")
        t.tag("with-img", 1)
        t.cleanup(older_than=datetime.timedelta(0))
        kept = set(listing(path, kw, request))
        assert any(f.split("/")[-2] == "img" for f in kept if "/" in f)
        with loaderx.open_table(path, version="with-img", **kw) as old:
            assert column(old, "img").shape == (8, 2, 3)
        t.untag("with-img")
        freed = t.cleanup(older_than=datetime.timedelta(0))
        after = set(listing(path, kw, request))
        want = column(t, "caption")
    gone = kept - after
    # The stores of img, version 1 and the tag (removed by untag).
    assert all(f.split("/")[-2] == "img" or f.split("/")[0] in ("_versions", "_tags") for f in gone)
    assert sum(f.endswith("img/data.zr") for f in gone) == 2  # both shards
    assert not any(f.split("/")[-2] == "img" for f in after if "/" in f)
    assert freed >= sum(1 for f in gone if f.endswith("data.zr"))
    with loaderx.open_table(path, **kw) as t:
        assert sorted(t) == ["caption", "id"]
        assert column(t, "caption") == want
        assert column(t, "id").tolist() == list(range(8))
    if kw:
        # The bucket table still copies whole: its version lists no
        # object that is gone.
        local = request.getfixturevalue("tmp_path") / "copy"
        loaderx.copy_table(path, str(local), **kw)
        with loaderx.open_table(str(local)) as t:
            assert column(t, "id").tolist() == list(range(8))


def test_cleanup_frees_a_dropped_column_of_a_plain_table_made_versioned(tmp_path):
    path = str(tmp_path / "plain")
    for s in loaderx.arrow.ingest(rows(0, 6), path).values():
        s.close()
    with loaderx.open_table(path, readonly=False) as t:
        t.drop_columns(["img"])
        assert os.path.isdir(os.path.join(path, "img"))
        t.cleanup(older_than=datetime.timedelta(0))
        assert not os.path.exists(os.path.join(path, "img"))
        assert sorted(t) == ["caption", "id"]
    with loaderx.open_table(path) as t:
        assert column(t, "id").tolist() == list(range(6))


# -- what killed writers leave -------------------------------------------------------

_STALLED_WRITER = """
import sys, time
import numpy as np, pyarrow as pa
from loaderx import _native

path, what = sys.argv[1], sys.argv[2]
if what == "append":
    # A shard written, not committed yet (what a long write does).
    w = _native.TableWrite(path, None, False)
    w.write_streams([pa.table({"id": np.arange(8, 12), "caption": ["x"] * 4})], "zstd")
else:
    # A column group written into the first shard, not committed yet.
    g = _native.ColumnsWrite(path, None, None)
    rows = g.shards()[0][1]
    g.write_group(0, [pa.table({"z": np.arange(rows)})], "zstd", None)
print("writing", flush=True)
time.sleep(600)
"""


def entries_of(path):
    """Every file and directory below ``path`` (relative paths)."""
    out = set()
    for d, dirs, names in os.walk(path):
        out.update(os.path.relpath(os.path.join(d, n), path) for n in dirs + names)
    return out


def _age(path, seconds):
    """Makes every directory and file below ``path`` look ``seconds`` old."""
    then = time.time() - seconds
    for d, dirs, names in os.walk(path):
        for n in dirs + names:
            os.utime(os.path.join(d, n), (then, then))
        os.utime(d, (then, then))


@pytest.mark.parametrize("what", ["append", "add_columns"])
def test_cleanup_reclaims_what_a_killed_writer_left_never_a_live_ones(tmp_path, what):
    """A writer killed mid-write leaves its shard or column-group
    directories, named by no version: cleanup keeps them while the writer
    lives (its lease is held, however old they look) and removes them once
    it is dead and they are older than an hour; younger ones stay."""
    import signal
    import subprocess
    import sys

    path = str(tmp_path / "t")
    loaderx.ingest_sharded(rows(0, 8).select(["id", "caption"]), path, workers=1).close()
    before = entries_of(path)
    child = subprocess.Popen(
        [sys.executable, "-c", _STALLED_WRITER, path, what],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "writing"
        deadline = time.time() + 30
        while not os.path.isdir(os.path.join(path, "_leases")) and time.time() < deadline:
            time.sleep(0.05)
        made = sorted(entries_of(path) - before)
        assert any(f.startswith("_leases/") for f in made), made
        _age(path, 7200)
        with loaderx.open_table(path, readonly=False) as t:
            t.cleanup(older_than=datetime.timedelta(0))
        assert entries_of(path) >= set(made) - {f for f in made if f.startswith("_leases/")}
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    left = sorted(entries_of(path) - before)
    assert any(not f.startswith("_leases/") for f in left), left
    # Dead now, but younger than an hour: kept.
    _age(path, 60)
    with loaderx.open_table(path, readonly=False) as t:
        assert t.cleanup(older_than=datetime.timedelta(0)) == 0
    assert entries_of(path) - before == set(left)
    _age(path, 7200)
    with loaderx.open_table(path, readonly=False) as t:
        assert t.cleanup(older_than=datetime.timedelta(0)) > 0
        assert column(t, "id").tolist() == list(range(8))
    assert entries_of(path) - before == set(), sorted(entries_of(path) - before)


_KILLED_BUCKET_WRITER = """
import json, os, sys
import numpy as np, pyarrow as pa
from loaderx import _native

path, what, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if what == "append":
    w = _native.TableWrite(path, opts, False)
    w.write_streams([pa.table({"id": np.arange(8, 12), "caption": ["x"] * 4})], "zstd")
else:
    g = _native.ColumnsWrite(path, opts, None)
    rows = g.shards()[0][1]
    g.write_group(0, [pa.table({"z": np.arange(rows)})], "zstd", None)
os._exit(0)  # as if killed: nothing committed, discarded or given back
"""


@pytest.mark.parametrize("what", ["append", "add_columns"])
def test_cleanup_reclaims_what_a_killed_writer_left_in_a_bucket(s3, what, tmp_path, monkeypatch):
    """Objects a writer to a bucket left when it died (a shard, or a column
    group in a shard), named by no version: a cleanup keeps them while they
    are younger than an hour or a lease object of their write was rewritten
    lately (a live writer's), and removes them otherwise, with the dead
    writers' lease objects; the table reads as before."""
    import json
    import subprocess
    import sys

    # Staging directories of this test's own (a cleanup also reclaims the
    # machine's dead ones, which other runs may have left).
    monkeypatch.setenv("TMPDIR", str(tmp_path))

    path, opts = uri(s3, "killed"), s3.options()
    loaderx.ingest_sharded(
        rows(0, 8).select(["id", "caption"]), path, workers=1, storage_options=opts
    ).close()
    prefix = f"{s3.prefix}/killed/"
    before = set(s3.keys(prefix))
    subprocess.run(
        [sys.executable, "-c", _KILLED_BUCKET_WRITER, path, what, json.dumps(opts)], check=True
    )
    left = sorted(set(s3.keys(prefix)) - before)
    assert left, "the killed write left objects"
    kind = "shard-" if what == "append" else "_g-"
    names = {k[len(prefix) :].split("/")[0 if what == "append" else 1] for k in left}
    assert all(n.startswith(kind) for n in names), names
    token = next(iter(names)).split("-")[1]
    # Younger than an hour: kept.
    assert _native.table_cleanup(path, 0, 1, opts) == 0
    assert set(s3.keys(prefix)) - before == set(left)
    # A lease object rewritten lately: a live writer's, kept.
    lease = f"{prefix}_leases/{token}.json"
    s3.client().put_object(Bucket=s3.bucket, Key=lease, Body=b'{"pid": 1, "beat_ms": 0}')
    assert _native.table_cleanup(path, 0, 1, opts, _leftover_min_age_ms=0) == 0
    assert set(s3.keys(prefix)) - before == set(left) | {lease}
    # Dead (no lease), and old enough: removed.
    s3.client().delete_object(Bucket=s3.bucket, Key=lease)
    assert _native.table_cleanup(path, 0, 1, opts, _leftover_min_age_ms=0) > 0
    assert set(s3.keys(prefix)) == before
    with loaderx.open_table(path, storage_options=opts) as t:
        assert column(t, "id").tolist() == list(range(8))


_KILLED_LARGE_WRITER = """
import json, sys
import numpy as np, pyarrow as pa
from loaderx import _native

path, opts = sys.argv[1], json.loads(sys.argv[2])
# 40 MiB that do not compress: a column file uploaded in parts.
blob = np.random.default_rng(0).integers(0, 256, (40, 1 << 20), dtype=np.uint8)
x = pa.FixedSizeListArray.from_arrays(pa.array(blob.reshape(-1)), 1 << 20)
w = _native.TableWrite(path, opts, False)
w.write_streams([pa.table({"id": np.arange(8, 48), "x": x})], "zstd")
"""


def _open_uploads(s3, prefix):
    """The multipart uploads open below ``prefix``: (key, upload id)."""
    got = s3.client().list_multipart_uploads(Bucket=s3.bucket, Prefix=prefix)
    return [(u["Key"], u["UploadId"]) for u in got.get("Uploads", [])]


def _killed_when(s3, fires, script, *args):
    """Runs ``script`` with ``args`` and the S3 server's options through a
    proxy (the last argument, as JSON) in a child process, SIGKILLed when
    a request arrives for which ``fires(request)`` is true (that request
    is stalled, never served)."""
    import signal
    import subprocess
    import sys

    from remote_servers import FaultProxy

    holder = {}

    def rule(n, r):
        if fires(r):
            os.kill(holder["pid"], signal.SIGKILL)
            return "stall"
        return None

    proxy = FaultProxy(s3.endpoint, rule)
    proxy.stall_seconds = 0.2
    try:
        options = json.dumps(s3.options(endpoint=proxy.url))
        child = subprocess.Popen([sys.executable, "-c", script, *args, options])
        holder["pid"] = child.pid
        assert child.wait(120) == -signal.SIGKILL
    finally:
        proxy.stop()


def _killed_at_second_part(s3, script, *args):
    """:func:`_killed_when` the second part of a multipart upload arrives."""
    _killed_when(
        s3,
        lambda r: r.method == "PUT" and "partNumber=2" in r.path and "uploadId=" in r.path,
        script,
        *args,
    )


def _killed_before_recording(s3, script, *args):
    """:func:`_killed_when` a lease object is written after a multipart
    upload was created: killed between creating the upload and recording
    it, the one request a writer's lease object cannot cover."""
    created = []

    def fires(r):
        if r.method == "POST" and "uploads" in r.path:
            created.append(r.path)
        return bool(created) and r.method == "PUT" and "/_leases/" in r.path

    _killed_when(s3, fires, script, *args)


def _table_of_large_rows(s3, name):
    """A table of 8 rows of 1 MiB in the bucket: its path, storage options,
    key prefix and keys."""
    path, opts = uri(s3, name), s3.options()
    x0 = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(8 << 20, np.uint8)), 1 << 20)
    loaderx.ingest_sharded(
        pa.table({"id": np.arange(8), "x": x0}), path, workers=1, storage_options=opts
    ).close()
    prefix = f"{s3.prefix}/{name}/"
    return path, opts, prefix, set(s3.keys(prefix))


def test_cleanup_aborts_the_multipart_uploads_a_killed_bucket_writer_left(
    s3, tmp_path, monkeypatch
):
    """A writer to a bucket records each multipart upload in its lease
    object before the upload's first part: killed mid-upload (SIGKILL when
    its second part arrives), it leaves the upload open, which a cleanup
    keeps while the lease may be a live writer's and aborts once it is a
    dead one's, with the lease object and the shard; the table reads as
    before."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # staging of this test's own
    path, opts, prefix, before = _table_of_large_rows(s3, "parts")
    client = s3.client()
    _killed_at_second_part(s3, _KILLED_LARGE_WRITER, path)
    uploads = _open_uploads(s3, prefix)
    assert len(uploads) == 1, uploads
    key, upload = uploads[0]
    assert key.startswith(prefix + "shard-"), key
    leases = [k for k in s3.keys(prefix) if k.startswith(prefix + "_leases/")]
    assert len(leases) == 1, leases
    body = json.loads(client.get_object(Bucket=s3.bucket, Key=leases[0])["Body"].read())
    assert body["uploads"] == [{"key": key, "id": upload}]
    # The lease object is fresh: maybe a live writer's, its upload, shard
    # and lease object kept (its local staging, whose lock no process
    # holds, is reclaimed).
    left = set(s3.keys(prefix))
    _native.table_cleanup(path, 0, 1, opts, _leftover_min_age_ms=0)
    assert _open_uploads(s3, prefix) == [(key, upload)]
    assert set(s3.keys(prefix)) == left
    # A dead writer's: its upload aborted, its lease object and shard gone.
    assert _native.table_cleanup(path, 0, 1, opts, _leftover_min_age_ms=0, _lease_ttl_ms=0) > 0
    assert _open_uploads(s3, prefix) == []
    assert set(s3.keys(prefix)) == before
    with loaderx.open_table(path, storage_options=opts) as t:
        assert column(t, "id").tolist() == list(range(8))


def test_cleanup_aborts_an_upload_its_killed_writer_never_recorded(s3, tmp_path, monkeypatch):
    """A writer killed between creating a multipart upload and recording
    it in its lease object leaves an upload no lease object names: a
    cleanup lists the bucket's open uploads and aborts those below the
    table that no live writer holds (listed in a fresh lease object, or
    below a shard of a write whose lease object is fresh) and that are old
    enough (an hour by default, by the server's creation time); uploads
    below another table stay."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # staging of this test's own
    path, opts, prefix, before = _table_of_large_rows(s3, "unrecorded")
    client = s3.client()
    # Another table's upload (its name starts as this one's does) and one
    # of a live writer, listed in its fresh lease object: neither is ours
    # to abort.
    other_key = f"{s3.prefix}/unrecorded2/x"
    other = client.create_multipart_upload(Bucket=s3.bucket, Key=other_key)["UploadId"]
    held_key = f"{prefix}shard-held-0/x.zr"
    held = client.create_multipart_upload(Bucket=s3.bucket, Key=held_key)["UploadId"]
    lease = f"{prefix}_leases/held.json"
    body = {"pid": 1, "beat_ms": 0, "uploads": [{"key": held_key, "id": held}]}
    client.put_object(Bucket=s3.bucket, Key=lease, Body=json.dumps(body).encode())
    _killed_before_recording(s3, _KILLED_LARGE_WRITER, path)
    uploads = dict((k, u) for k, u in _open_uploads(s3, prefix) if u != held)
    assert len(uploads) == 1, uploads
    ((key, upload),) = uploads.items()
    assert key.startswith(prefix + "shard-"), key
    token = key[len(prefix) :].split("-")[1]
    killed = f"{prefix}_leases/{token}.json"
    for k in s3.keys(prefix + "_leases/"):  # none but the live one lists it
        got = json.loads(client.get_object(Bucket=s3.bucket, Key=k)["Body"].read())
        assert upload not in [u["id"] for u in got.get("uploads", [])], got
    both = sorted([(key, upload), (held_key, held)])
    # Old enough (this server dates every upload in 2010, so the hour's
    # rule is a unit test of the listing), but the killed writer's lease
    # object fresh, as a live writer's that has not recorded the upload
    # yet: kept, by its shard's write token.
    client.put_object(Bucket=s3.bucket, Key=killed, Body=b'{"pid": 1, "beat_ms": 0}')
    _native.table_cleanup(path, 0, 1, opts, _leftover_min_age_ms=0)
    assert sorted(_open_uploads(s3, prefix)) == both
    # Its lease object gone: held by no live writer, aborted; the live
    # writer's upload kept, as is the other table's.
    client.delete_object(Bucket=s3.bucket, Key=killed)
    _native.table_cleanup(path, 0, 1, opts, _leftover_min_age_ms=0)
    assert _open_uploads(s3, prefix) == [(held_key, held)]
    assert _open_uploads(s3, f"{s3.prefix}/unrecorded2/") == [(other_key, other)]
    # The live writer's lease gone stale: its upload aborted too, and
    # what the killed writer left removed.
    _native.table_cleanup(path, 0, 1, opts, _leftover_min_age_ms=0, _lease_ttl_ms=0)
    assert _open_uploads(s3, prefix) == []
    assert set(s3.keys(prefix)) == before
    client.abort_multipart_upload(Bucket=s3.bucket, Key=other_key, UploadId=other)
    with loaderx.open_table(path, storage_options=opts) as t:
        assert column(t, "id").tolist() == list(range(8))


def test_cleanup_of_a_table_at_a_bucket_root_aborts_only_its_own_uploads(s3):
    """A table at the root of its bucket: a cleanup aborts the open uploads
    below its shards and groups that no live writer holds, and leaves the
    bucket's other uploads alone."""
    bucket = "loaderx-root-" + s3.prefix[-8:].lower()
    client = s3.client()
    client.create_bucket(Bucket=bucket)
    path, opts = f"s3://{bucket}", s3.options()
    loaderx.ingest_sharded(rows(0, 4), path, workers=1, storage_options=opts).close()
    dead = client.create_multipart_upload(Bucket=bucket, Key="shard-dead-0/x/data.zr")
    group = client.create_multipart_upload(Bucket=bucket, Key="_g-dead/x/data.zr")
    other = client.create_multipart_upload(Bucket=bucket, Key="backups/x.tar")
    _native.table_cleanup(path, 0, 1, opts, _leftover_min_age_ms=0, _lease_ttl_ms=0)
    got = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert [(u["Key"], u["UploadId"]) for u in got] == [("backups/x.tar", other["UploadId"])]
    assert dead["UploadId"] != group["UploadId"]
    client.abort_multipart_upload(Bucket=bucket, Key="backups/x.tar", UploadId=other["UploadId"])
    with loaderx.open_table(path, storage_options=opts) as t:
        assert column(t, "id").tolist() == list(range(4))


_KILLED_COPY = """
import json, sys
import loaderx

src, dst, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
loaderx.copy_table(src, dst, storage_options=opts)
"""


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_copy_of_an_evolved_table_reads_as_its_source(request, tmp_path, where):
    """A copy takes every file the latest version reads: the shards' own
    columns, the column groups that add_columns wrote into them, their
    deletion files, and the table directory's own columns when a plain
    table became its first shard; a dropped column's files stay behind."""
    src = str(tmp_path / "src")
    for store in loaderx.arrow.ingest(rows(0, 6), src).values():
        store.close()
    with loaderx.open_table(src, readonly=False) as t:
        t.append(rows(6, 10))  # the plain table is now its first shard, "."
        t.add_columns({"score": np.arange(10) * 0.5, "tmp": np.arange(10)})
        t.delete(np.array([2, 7]))
        t.drop_columns("tmp")
        t.append(rows(10, 12).append_column("score", pa.array([5.0, 5.5])))
        want = {c: column(t, c) for c in t}
    if where == "local":
        dst, opts = str(tmp_path / "dst"), None
    else:
        s3 = request.getfixturevalue("s3")
        dst, opts = uri(s3, "evolved-copy"), s3.options()
    loaderx.copy_table(src, dst, storage_options=opts)
    with loaderx.open_table(dst, storage_options=opts) as t:
        assert sorted(t) == sorted(want)
        for c, v in want.items():
            got = column(t, c)
            assert got == v if isinstance(v, list) else np.array_equal(got, v), c
    assert want["id"].tolist() == [0, 1, 3, 4, 5, 6, 8, 9, 10, 11]
    if where == "local":
        assert not [f for _, _, fs in os.walk(dst) for f in fs if "tmp" in f]
        assert not [d for d, _, _ in os.walk(dst) if d.endswith("/tmp")]


@pytest.mark.parametrize("recorded", [True, False])
def test_a_copy_rerun_aborts_the_multipart_uploads_a_killed_copy_left(s3, tmp_path, recorded):
    """A copy into a bucket holds a lease, as a write does, and records
    each multipart upload in its lease object before the upload's first
    part. Killed mid-upload, it leaves the upload listed there; killed
    between creating the upload and recording it, listed nowhere. Either
    way the copy run again (which finishes an interrupted copy, its alone)
    aborts it (listing the uploads open below the destination for the
    second) and removes the lease objects; the copy reads as its source."""
    src = str(tmp_path / "src")
    # 40 MiB that do not compress, in one shard: a file uploaded in parts.
    blob = np.random.default_rng(0).integers(0, 256, (40, 1 << 20), dtype=np.uint8)
    x = pa.FixedSizeListArray.from_arrays(pa.array(blob.reshape(-1)), 1 << 20)
    loaderx.ingest_sharded(
        pa.table({"id": np.arange(40), "x": x}), src, workers=1, shards=1
    ).close()
    dst, opts = uri(s3, "copied"), s3.options()
    prefix = f"{s3.prefix}/copied/"
    client = s3.client()
    killed = _killed_at_second_part if recorded else _killed_before_recording
    killed(s3, _KILLED_COPY, src, dst)
    uploads = _open_uploads(s3, prefix)
    assert len(uploads) == 1, uploads
    key, upload = uploads[0]
    leases = [k for k in s3.keys(prefix) if k.startswith(prefix + "_leases/")]
    assert len(leases) == (1 if recorded else 0), leases
    for lease in leases:
        body = json.loads(client.get_object(Bucket=s3.bucket, Key=lease)["Body"].read())
        assert body["uploads"] == [{"key": key, "id": upload}]
    assert loaderx.copy_table(src, dst, storage_options=opts) > 40 << 20
    assert _open_uploads(s3, prefix) == []
    assert not [k for k in s3.keys(prefix) if "/_leases/" in k[len(prefix) - 1 :]]
    with loaderx.open_table(dst, storage_options=opts) as t:
        assert column(t, "id").tolist() == list(range(40))
        assert np.array_equal(np.asarray(t["x"][[0, 39]]).reshape(2, -1), blob[[0, 39]])


def test_cleanup_removes_staging_directories_of_dead_bucket_writers(tmp_path, monkeypatch):
    """Local staging directories a writer to a bucket makes in the
    temporary directory: removed by a cleanup once no live process holds
    their lease and they are older than an hour; a live one is kept."""
    import fcntl

    # A temporary directory of this test's own (the core reads TMPDIR at
    # each call): a cleanup run by another process at the same time would
    # reclaim the dead directory first.
    tmp = str(tmp_path / "tmp")
    os.makedirs(tmp)
    monkeypatch.setenv("TMPDIR", tmp)
    dead = os.path.join(tmp, "loaderx-shard-" + os.urandom(6).hex())
    live = os.path.join(tmp, "loaderx-group-" + os.urandom(6).hex())
    young = os.path.join(tmp, "loaderx-ragged-" + os.urandom(6).hex())
    for d in (dead, live, young):
        os.makedirs(os.path.join(d, "shard-x", "label"))
        with open(os.path.join(d, "shard-x", "label", "data.zr"), "wb") as f:
            f.write(b"\0" * 1000)
        open(os.path.join(d, ".loaderx-lease"), "wb").close()
    held = open(os.path.join(live, ".loaderx-lease"), "rb")
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        _age(dead, 7200)
        _age(live, 7200)
        path = str(tmp_path / "t")
        loaderx.ingest_sharded(rows(0, 4), path, workers=1).close()
        with loaderx.open_table(path, readonly=False) as t:
            assert t.cleanup(older_than=datetime.timedelta(0)) >= 1000
        assert not os.path.exists(dead)
        assert os.path.isdir(live) and os.path.isdir(young)
    finally:
        held.close()
        shutil.rmtree(live, ignore_errors=True)
        shutil.rmtree(young, ignore_errors=True)


def test_a_failed_bucket_write_leaves_no_staging_directory(s3, tmp_path, monkeypatch):
    """An append and an add_columns to a bucket whose source fails part way
    (an error, not a kill): the local staging directories of the shards and
    groups they were filling go with the error, not an hour later."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    path = uri(s3, "failed")
    opts = {"storage_options": s3.options()}
    loaderx.ingest_sharded(rows(0, 8), path, workers=1, shards=2, **opts).close()

    def broken():
        yield from rows(8, 12).to_batches()
        raise RuntimeError("the source broke")

    with loaderx.open_table(path, readonly=False, **opts) as t:
        reader = pa.RecordBatchReader.from_batches(rows(8, 12).schema, broken())
        # The source's own error, as it raised it (no stream text, no
        # traceback in the message).
        with pytest.raises(RuntimeError, match="^the source broke$"):
            t.append(reader)
        assert t.version == 1

        def fails(batch):
            if batch["id"][0] >= 4:
                raise RuntimeError("the function broke")
            return {"twice": batch["id"] * 2}

        with pytest.raises(RuntimeError, match="the function broke"):
            t.add_columns(fails, read_columns=["id"])
        assert t.version == 1 and "twice" not in t
    assert [n for n in os.listdir(tmp) if n.startswith("loaderx-")] == []


def test_a_refused_group_leaves_no_staging_directory(s3, tmp_path, monkeypatch):
    """A column group refused at its check (a name the table has) in a
    bucket: its local staging directory goes with the refusal."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    path = uri(s3, "refused")
    opts = {"storage_options": s3.options()}
    loaderx.ingest_sharded(rows(0, 8), path, workers=1, shards=2, **opts).close()
    with loaderx.open_table(path, readonly=False, **opts) as t:
        with pytest.raises(ValueError, match="'id' is in table"):
            t.add_columns({"id": np.arange(8)})
        assert t.version == 1
    assert [n for n in os.listdir(tmp) if n.startswith("loaderx-")] == []
