"""Sharded tables: plain tables (shards) joined by a manifest that one rename
commits. ``open_table`` presents them as one table whose streams work
wherever a store does, reading bit-exactly like one plain table of the same
rows; commits are validated, atomic and serialised; ``ingest_sharded``
writes shards in parallel."""

import io
import json
import multiprocessing as mp
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import loaderx
import loaderx.arrow
import loaderx.parquet
from loaderx import Corrupted
from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore

SPLITS = [0, 40, 40, 97, 130]  # four shards, one of them empty
N = SPLITS[-1]


def data():
    ids = np.arange(N, dtype=np.int64)
    img = (ids[:, None, None] * np.arange(6).reshape(1, 2, 3)).astype(np.float32)
    toks = [np.full((i % 3 + 1, i % 2 + 1), i, np.int16) for i in range(N)]
    return ids, img, toks


def write_plain(t, ids, img, toks, codec="zstd"):
    with DenseStore.create(os.path.join(t, "id"), np.int64, (), codec=codec) as s:
        s.append(ids)
    with DenseStore.create(os.path.join(t, "img"), img.dtype, (2, 3), codec=codec) as s:
        s.append(img)
    with RaggedStore.create(os.path.join(t, "tok"), np.int16, codec=codec) as s:
        s.append(toks)


@pytest.fixture
def tables(root):
    """The same rows as a plain table and as a sharded one."""
    ids, img, toks = data()
    plain = str(root / "plain")
    write_plain(plain, ids, img, toks)
    sharded = str(root / "sharded")
    shards = []
    for k, (a, b) in enumerate(zip(SPLITS, SPLITS[1:])):
        shard = loaderx.new_shard(sharded)
        write_plain(shard, ids[a:b], img[a:b], toks[a:b], codec=["raw", "zstd"][k % 2])
        shards.append(shard)
    assert loaderx.commit_shards(sharded, shards) == N
    return plain, sharded, (ids, img, toks), shards


def test_sharded_table_reads_like_the_plain_one(tables):
    plain, sharded, (ids, img, toks), shards = tables
    with loaderx.open_table(plain) as p, loaderx.open_table(sharded) as s:
        assert list(s) == ["id", "img", "tok"] and s.num_rows == N and s.sharded
        assert [os.path.basename(d) for d, _ in s.shards] == [os.path.basename(x) for x in shards]
        assert [n for _, n in s.shards] == [b - a for a, b in zip(SPLITS, SPLITS[1:])]
        assert s.readonly and not p.sharded and "shards=4" in repr(s)
        assert isinstance(s["img"], DenseStore) and isinstance(s["tok"], RaggedStore)
        assert len(s["img"]) == N and s["img"].item_shape == (2, 3)
        idx = np.random.default_rng(1).integers(0, N, 300)
        np.testing.assert_array_equal(s["img"][idx], img[idx])
        np.testing.assert_array_equal(s["id"][39:42], ids[39:42])
        for got, i in zip(s["tok"][idx], idx):
            np.testing.assert_array_equal(got, toks[i])
        assert s["id"][N - 1] == N - 1
        with pytest.raises(IndexError):
            s["id"][N]
        # Arrow, SQL and Parquet give what the plain table gives.
        assert s["tok"].to_arrow().equals(p["tok"].to_arrow())
        assert s["img"].to_arrow([97, 0, 39, 40]).equals(p["img"].to_arrow([97, 0, 39, 40]))
        a = loaderx.arrow.table(p).read_all()
        b = loaderx.arrow.table(s).read_all()
        assert a.equals(b)
        q = "SELECT id % 5 AS k, count(*) AS n, sum(img[2]) AS v FROM t GROUP BY k ORDER BY k"
        assert loaderx.sql(q, t=p).equals(loaderx.sql(q, t=s))
        q = "SELECT record_id, id FROM t WHERE id BETWEEN 38 AND 98 ORDER BY record_id"
        assert loaderx.sql(q, t=s)["id"].to_pylist() == list(range(38, 99))
        loaderx.parquet.export(p, os.path.join(plain, "..", "p.parquet"))
        loaderx.parquet.export(s, os.path.join(plain, "..", "s.parquet"))
        pa_p = pq.read_table(os.path.join(plain, "..", "p.parquet"))
        assert pa_p.equals(pq.read_table(os.path.join(plain, "..", "s.parquet")))


def test_datafusion_python_reads_a_sharded_table(tables):
    # datafusion-python sees the same table through the FFI provider.
    datafusion = pytest.importorskip("datafusion")
    from loaderx.datafusion import TableProvider

    _, sharded, (ids, img, _), _ = tables
    with loaderx.open_table(sharded) as s:
        ctx = datafusion.SessionContext()
        ctx.register_table("t", TableProvider(s))
        q = "SELECT record_id, img FROM t WHERE id % 7 = 3 ORDER BY record_id"
        got = ctx.sql(q).to_arrow_table()
        want = np.flatnonzero(ids % 7 == 3)
        assert got["record_id"].to_pylist() == want.tolist()
        np.testing.assert_array_equal(got["img"].combine_chunks().to_numpy_ndarray(), img[want])


@pytest.mark.parametrize("mode", ["sequential", "iid", "cyclic"])
def test_loader_over_shards_matches_plain_with_ranks_subsets_and_resume(tables, mode):
    plain, sharded, _, _ = tables
    subset = np.arange(0, N, 3)
    with loaderx.open_table(plain) as p, loaderx.open_table(sharded) as s:
        for kw in [{}, {"rank": 1, "world_size": 2}, {"indices": subset}]:
            args = dict(batch_size=8, mode=mode, seed=3, start_step=5, workers=2, **kw)
            a, b = DataLoader(dict(p), **args), DataLoader(dict(s), **args)
            for _ in range(10):
                x, y = next(a), next(b)
                np.testing.assert_array_equal(x["img"], y["img"])
                np.testing.assert_array_equal(x["id"], y["id"])
                assert all(np.array_equal(u, v) for u, v in zip(x["tok"], y["tok"]))
            a.close()
            b.close()


def test_sharded_streams_refuse_writes_even_in_an_evolvable_handle(tables):
    _, sharded, (ids, _, toks), _ = tables
    with loaderx.open_table(sharded, readonly=False) as t:
        # The handle may evolve the table; its columns stay read-only.
        assert not t.readonly and all(c.readonly for c in t.values())
        with pytest.raises(io.UnsupportedOperation):
            t["id"].append(ids[:1])
    with loaderx.open_table(sharded) as s:
        for call in (
            lambda: s["id"].append(ids[:1]),
            lambda: s["tok"].append(toks[:1]),
            lambda: s["id"].delete([0]),
            lambda: s["id"].sync(),
            lambda: s["tok"].compact(),
        ):
            with pytest.raises(
                io.UnsupportedOperation,
                match=r"sharded table.*loaderx\.new_shard, then loaderx\.commit_shards",
            ):
                call()
        assert s.num_rows == N
        # Any number of read-only opens at once.
        with loaderx.open_table(sharded) as again:
            assert again.num_rows == N


def test_uncommitted_shards_are_invisible_and_commits_append(tables, root):
    _, sharded, (ids, img, toks), _ = tables
    extra = loaderx.new_shard(sharded)
    write_plain(extra, ids[:5] + 1000, img[:5], toks[:5])
    with loaderx.open_table(sharded) as s:
        assert s.num_rows == N
    assert loaderx.commit_shards(sharded, [extra]) == N + 5
    with loaderx.open_table(sharded) as s:
        assert s.num_rows == N + 5
        np.testing.assert_array_equal(s["id"][N:], ids[:5] + 1000)
    manifest = json.loads(open(os.path.join(sharded, "manifest.json")).read())
    assert manifest["format"] == "loaderx.sharded_table" and manifest["version"] == 1
    assert manifest["columns"] == ["id", "img", "tok"]
    assert manifest["shards"][-1] == {"name": os.path.basename(extra), "rows": 5}


def manifest_bytes(path):
    with open(os.path.join(path, "manifest.json"), "rb") as f:
        return f.read()


def test_bad_commits_change_nothing(tables, root):
    _, sharded, (ids, img, toks), shards = tables
    before = manifest_bytes(sharded)

    def shard(**replace):
        d = loaderx.new_shard(sharded)
        cols = {"id": ids[:3], "img": img[:3], "tok": toks[:3], **replace}
        if cols["id"] is not None:
            with DenseStore.create(os.path.join(d, "id"), cols["id"].dtype, ()) as s:
                s.append(cols["id"])
        with DenseStore.create(
            os.path.join(d, "img"), cols["img"].dtype, cols["img"].shape[1:]
        ) as s:
            s.append(cols["img"])
        with RaggedStore.create(os.path.join(d, "tok"), np.int16) as s:
            s.append(cols["tok"])
        return d

    cases = [
        ([shard(img=img[:3].astype(np.float64))], ValueError, "column 'img'.*float64|<f8"),
        ([shard(img=np.zeros((3, 3, 2), np.float32))], ValueError, r"item_shape \(3, 2\)"),
        ([shard(id=None)], ValueError, "has columns \\['img', 'tok'\\]"),
        ([shard(id=ids[:2])], ValueError, "equal lengths"),
        ([shards[0]], ValueError, "already committed"),
        ([str(root / "elsewhere")], ValueError, "directly inside the table"),
        ([os.path.join(sharded, "missing")], FileNotFoundError, "missing"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            loaderx.commit_shards(sharded, args)
        assert manifest_bytes(sharded) == before
    good = shard()
    with pytest.raises(ValueError, match="twice"):
        loaderx.commit_shards(sharded, [good, good])
    with pytest.raises(TypeError, match="list of shard directories"):
        loaderx.commit_shards(sharded, good)
    assert manifest_bytes(sharded) == before
    with pytest.raises(ValueError, match="plain table"):
        loaderx.commit_shards(root / "plain", [])


def test_broken_manifests_fail_to_open_naming_what_broke(tables):
    _, sharded, _, shards = tables
    path = os.path.join(sharded, "manifest.json")
    good = manifest_bytes(sharded)
    doc = json.loads(good)

    def put(obj):
        with open(path, "wb") as f:
            f.write(obj if isinstance(obj, bytes) else json.dumps(obj).encode())

    missing = os.path.basename(shards[2])
    os.rename(shards[2], shards[2] + ".moved")
    with pytest.raises(Corrupted, match=f"manifest.json.*shard '{missing}'.*missing"):
        loaderx.open_table(sharded)
    os.rename(shards[2] + ".moved", shards[2])
    bad_rows = json.loads(good)
    bad_rows["shards"][0]["rows"] += 1
    cases = [
        (b"{not json", "not valid JSON"),
        ({**doc, "format": "other"}, "'format'"),
        ({**doc, "version": 5}, "version must be 1, 2, 3 or 4"),
        ({**doc, "columns": "id"}, "'columns'"),
        ({**doc, "shards": [{"name": "../x", "rows": 1}]}, "plain directory 'name'"),
        ({**doc, "shards": [doc["shards"][0]] * 2}, "listed twice"),
        ({**doc, "shards": [{"name": doc["shards"][0]["name"], "rows": -1}]}, "'rows'"),
        ({**doc, "columns": [*doc["columns"], "nope"]}, "holds columns"),
        (bad_rows, f"shard '{doc['shards'][0]['name']}' has 41 rows"),
    ]
    for content, match in cases:
        put(content)
        with pytest.raises(Corrupted, match=match):
            loaderx.open_table(sharded)
    put(good)
    with loaderx.open_table(sharded) as s:
        assert s.num_rows == N
    # A shard listed by hand (not through commit_shards) whose dtype differs.
    ids, img, toks = data()
    odd = loaderx.new_shard(sharded)
    write_plain(odd, ids[:2], img[:2].astype(np.float64), toks[:2])
    put({**doc, "shards": doc["shards"] + [{"name": os.path.basename(odd), "rows": 2}]})
    with pytest.raises(ValueError, match="dense float64 item_shape.*share one schema"):
        loaderx.open_table(sharded)
    put({**doc, "shards": []})
    with pytest.raises(ValueError, match="no committed shards"):
        loaderx.open_table(sharded)


def test_cli_reads_sharded_tables(tables, root):
    plain, sharded, (ids, _, _), _ = tables

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "loaderx", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=300,
        )

    r = cli("sql", "SELECT count(*) AS n, sum(id) AS s FROM t", "--table", f"t={sharded}", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows"] == [{"n": N, "s": int(ids.sum())}]
    out = root / "cli.parquet"
    r = cli("export", "--out", out, "--table", sharded, "--json")
    assert r.returncode == 0, r.stderr
    assert pq.read_table(out)["id"].to_pylist() == ids.tolist()


def _commit_one(path, k, queue):
    ids = np.arange(10, dtype=np.int64) + 100 * k
    shard = loaderx.new_shard(path)
    with DenseStore.create(os.path.join(shard, "id"), np.int64, ()) as s:
        s.append(ids)
    queue.put(loaderx.commit_shards(path, [shard]))


def test_commits_from_many_processes_all_land(root):
    path = str(root / "t")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_commit_one, args=(path, k, queue)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    totals = sorted(queue.get(timeout=10) for _ in procs)
    assert totals == [10, 20, 30, 40]  # each saw the commits before it
    with loaderx.open_table(path) as t:
        got = t["id"][:]
    assert sorted(got.tolist()) == sorted(i + 100 * k for k in range(4) for i in range(10))


# The crash-point sweep of a shard commit (SIGKILL at each of its file
# operations) is tests/table_commit_crash.rs: the commit runs in the core.


def test_ingest_sharded_from_table_parquet_and_stream(root):
    n = 5000
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, (n, 3, 4, 4), dtype=np.uint8)
    label = rng.integers(0, 10, n).astype(np.int64)
    tensor = pa.fixed_shape_tensor(pa.uint8(), [3, 4, 4])
    storage = pa.FixedSizeListArray.from_arrays(pa.array(img.reshape(-1)), 48)
    table = pa.table({"image": pa.ExtensionArray.from_storage(tensor, storage), "label": label})
    pq.write_table(table, root / "src.parquet", row_group_size=700)
    for name, src, kw in [
        ("t", table, {"workers": 3, "shards": 5}),
        ("p", str(root / "src.parquet"), {"workers": 2}),
        ("s", table.to_reader(max_chunksize=300), {"workers": 2}),
    ]:
        with loaderx.ingest_sharded(src, root / name, codec="raw", **kw) as t:
            assert t.sharded and t.num_rows == n
            if name == "t":
                assert len(t.shards) == 5
            np.testing.assert_array_equal(t["image"][:], img)
            np.testing.assert_array_equal(t["label"][:], label)
    # Appending to an existing sharded table.
    with loaderx.ingest_sharded(table.slice(0, 10), root / "t", workers=1) as t:
        assert t.num_rows == n + 10
        np.testing.assert_array_equal(t["label"][n:], label[:10])


def test_ingest_sharded_bad_input_leaves_nothing(root):
    y = pa.FixedSizeListArray.from_arrays(pa.array([1] * 199 + [None]), 2)
    nulls = pa.table({"x": pa.array(np.arange(100)), "y": y})
    with pytest.raises(ValueError, match='column "y".*null inside its tensor'):
        loaderx.ingest_sharded(nulls, root / "bad", workers=2, shards=4)
    assert not (root / "bad").exists()
    with pytest.raises(TypeError, match="Parquet file path or support the Arrow"):
        loaderx.ingest_sharded([1, 2], root / "bad")
    with pytest.raises(ValueError, match="workers must be a positive int"):
        loaderx.ingest_sharded(nulls, root / "bad", workers=0)
    with pytest.raises(FileNotFoundError):
        loaderx.ingest_sharded(root / "nope.parquet", root / "bad")
    ids, img, toks = data()
    write_plain(str(root / "plain"), ids, img, toks)
    with pytest.raises(ValueError, match="plain table"):
        loaderx.ingest_sharded(nulls, root / "plain")
    # Appending shards whose columns differ from the table's changes nothing.
    good = pa.table({"x": pa.array(np.arange(10))})
    loaderx.ingest_sharded(good, root / "t", workers=1)
    before = manifest_bytes(root / "t"), sorted(os.listdir(root / "t"))
    with pytest.raises(ValueError, match="every shard must have the same columns"):
        loaderx.ingest_sharded(pa.table({"z": pa.array([1.0])}), root / "t")
    assert (manifest_bytes(root / "t"), sorted(os.listdir(root / "t"))) == before


def test_an_append_whose_source_raises_raises_that_error_and_commits_nothing(tmp_path):
    """A pyarrow reader fed by a generator that raises: ``append`` and
    ``ingest_sharded`` raise that exception as it was raised (not a
    ValueError quoting the stream's text and a traceback), and nothing is
    committed or left behind."""
    path = str(tmp_path / "t")
    loaderx.ingest_sharded(pa.table({"x": np.arange(10)}), path, shards=2).close()
    before = sorted(os.listdir(path))
    schema = pa.schema([("x", pa.int64())])

    def broken():
        yield pa.record_batch({"x": np.arange(3)})
        raise KeyError("row 3 has no x")

    with loaderx.open_table(path, readonly=False) as t:
        with pytest.raises(KeyError) as e:
            t.append(pa.RecordBatchReader.from_batches(schema, broken()))
        assert e.value.args == ("row 3 has no x",)
        assert t.version == 1 and t.num_rows == 10
    assert sorted(os.listdir(path)) == before
    with pytest.raises(KeyError, match="row 3 has no x"):
        loaderx.ingest_sharded(
            pa.RecordBatchReader.from_batches(schema, broken()), str(tmp_path / "new")
        )
    assert not os.path.exists(tmp_path / "new" / "manifest.json")


def test_a_new_table_keeps_its_sources_column_order(tmp_path):
    """A table made from a pyarrow Table, a RecordBatchReader or a Parquet
    file lists its columns in the source's order (not by name), everywhere
    they are listed; columns added later come last, and an append whose
    source orders them otherwise changes nothing of the order."""
    src = pa.table({"z": np.arange(4), "a": ["p", "q", "r", "s"], "m": np.ones(4, np.float32)})
    pq.write_table(src, tmp_path / "f.parquet")
    sources = {
        "table": src,
        "reader": pa.RecordBatchReader.from_batches(src.schema, src.to_batches()),
        "parquet": str(tmp_path / "f.parquet"),
    }
    for name, source in sources.items():
        path = str(tmp_path / name)
        loaderx.ingest_sharded(source, path, shards=2).close()
        with loaderx.open_table(path) as t:
            assert list(t) == ["z", "a", "m"], name
            assert list(t.to_pandas().columns) == ["z", "a", "m"], name
            assert loaderx.sql("SELECT * FROM t", t=t).column_names == ["record_id", "z", "a", "m"]
    with loaderx.open_table(str(tmp_path / "table"), readonly=False) as t:
        t.add_columns({"b": np.arange(4)})
        t.append(
            pa.table({"b": [9], "m": [2.0], "a": ["t"], "z": [4]}).cast(
                pa.schema(
                    [("b", pa.int64()), ("m", pa.float32()), ("a", pa.string()), ("z", pa.int64())]
                )
            )
        )
        assert list(t) == ["z", "a", "m", "b"] and t.num_rows == 5
    with loaderx.open_table(str(tmp_path / "table")) as t:
        assert list(t) == ["z", "a", "m", "b"]
        assert t["a"][np.array([4])] == ["t"]
