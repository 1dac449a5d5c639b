"""loaderx.ray over sharded tables: read_table across shards, write_table /
TableDatasink (one shard per write task, committed by the driver, nothing
visible on failure), on a local Ray instance of two CPUs."""

import json
import os
import sys

import numpy as np
import pytest

import loaderx
from loaderx import DenseStore, RaggedStore
from loaderx.dataloader import DataLoader
from loaderx.table import commit_shards, new_shard, read_manifest

ray = pytest.importorskip("ray")
import loaderx.ray as lray  # noqa: E402 - after the importorskip

# Ray workers cannot import this test module: pickle its functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SHARD_ROWS = [7, 0, 13, 30]  # one empty shard in the middle
N = sum(SHARD_ROWS)


def _records(i):
    """Record i of every column: everything derived from i."""
    return {
        "x": np.full((2, 3), i, np.float32) + np.arange(6, dtype=np.float32).reshape(2, 3),
        "y": np.int64(i * 1_000_003 - 2**40),
        "r": np.full((i % 4 + 1, 3), i, np.int16),
        "b": np.array([i % 2 == 0, i % 3 == 0]),
    }


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """A sharded table of shards of SHARD_ROWS rows (x dense float32 (2, 3),
    y int64, r ragged int16 of shapes (k, 3)), committed in order."""
    root = str(tmp_path_factory.mktemp("sharded") / "t")
    shards, i = [], 0
    for rows in SHARD_ROWS:
        shard = new_shard(root)
        recs = [_records(j) for j in range(i, i + rows)]
        with DenseStore.create(os.path.join(shard, "x"), np.float32, (2, 3)) as s:
            if recs:
                s.append(np.stack([r["x"] for r in recs]))
        with DenseStore.create(os.path.join(shard, "y"), np.int64, ()) as s:
            if recs:
                s.append(np.array([r["y"] for r in recs]))
        with RaggedStore.create(os.path.join(shard, "r"), np.int16) as s:
            if recs:
                s.append([r["r"] for r in recs])
        shards.append(shard)
        i += rows
    assert commit_shards(root, shards) == N
    return root


def _batches(ds):
    return list(ds.iter_batches(batch_format="numpy", batch_size=None))


# ------------------------------------------------------------------ reading


@pytest.mark.parametrize("k", [1, 3, 8])
def test_read_sharded_table_in_record_order(local_ray, sharded, k):
    ds = lray.read_table(sharded, override_num_blocks=k)
    assert ds.schema().names == ["record_id", "r", "x", "y"]
    batches = _batches(ds)
    rid = np.concatenate([b["record_id"] for b in batches])
    np.testing.assert_array_equal(rid, np.arange(N, dtype=np.uint64))  # global ids, in order
    x = np.concatenate([b["x"] for b in batches])
    y = np.concatenate([b["y"] for b in batches])
    r = [rec for b in batches for rec in b["r"]]
    for i in range(N):
        want = _records(i)
        assert x[i].tobytes() == want["x"].tobytes()
        assert y[i] == want["y"]
        assert r[i].dtype == np.int16 and r[i].shape == want["r"].shape
        assert r[i].tobytes() == want["r"].tobytes()


def test_read_tasks_cover_contiguous_ranges_across_shards(sharded):
    source = lray.TableDatasource(sharded, columns=["y"])
    assert source.num_rows == N
    assert source.estimate_inmemory_data_size() == N * (8 + 8)
    tasks = source.get_read_tasks(4)
    assert [t.metadata.num_rows for t in tasks] == [12, 13, 12, 13]
    assert tasks[0].schema.names == ["record_id", "y"]
    # What the tasks run, in process: the core's scan reads a task's range
    # over the joined shards (shard 0: records 0..7, shard 1 empty, shard 2:
    # 7..20), so a small range is one block even where it spans shards.
    got = []
    for t in tasks:
        got.append([block.num_rows for block in t()])
    assert got == [[12], [13], [12], [13]]
    got = [block for t in tasks for block in t()]
    rid = np.concatenate([b.column("record_id").to_numpy() for b in got])
    np.testing.assert_array_equal(rid, np.arange(N, dtype=np.uint64))
    y = np.concatenate([b.column("y").to_numpy() for b in got])
    np.testing.assert_array_equal(y, [_records(i)["y"] for i in range(N)])


def test_read_sharded_projection(local_ray, sharded):
    ds = lray.read_table(sharded, columns=["y"], index_column="row")
    assert ds.schema().names == ["row", "y"]
    rows = ds.take_all()
    assert [row["row"] for row in rows] == list(range(N))
    assert [row["y"] for row in rows] == [_records(i)["y"] for i in range(N)]
    # Ray's select_columns is pushed into the read as well.
    ds = lray.read_table(sharded).select_columns(["record_id", "x"])
    assert ds.schema().names == ["record_id", "x"]
    b = _batches(ds)
    assert all(set(batch) == {"record_id", "x"} for batch in b)
    assert sum(len(batch["x"]) for batch in b) == N


def test_read_sharded_bad_input(sharded, tmp_path):
    import shutil

    with pytest.raises(ValueError, match=r"no column 'z'.*\['r', 'x', 'y'\]"):
        lray.read_table(sharded, columns=["z"])
    with pytest.raises(ValueError, match="at least one column"):
        lray.read_table(sharded, columns=[])
    copy = tmp_path / "t"
    shutil.copytree(sharded, copy)
    names = [s["name"] for s in read_manifest(copy)["shards"]]
    # A shard whose rows differ from the manifest's count.
    doc = json.loads((copy / "manifest.json").read_text())
    doc["shards"][0]["rows"] += 1
    (copy / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(loaderx.Corrupted, match=rf"shard '{names[0]}' column 'r' has 7 rows"):
        lray.read_table(copy)
    doc["shards"][0]["rows"] -= 1
    (copy / "manifest.json").write_text(json.dumps(doc))
    lray.TableDatasource(copy)  # intact again
    # A shard the manifest names is missing: the manifest's own error.
    os.rename(copy / names[2], copy / "gone")
    with pytest.raises(loaderx.Corrupted, match=rf"names shard '{names[2]}'.*missing"):
        lray.read_table(copy)


def test_table_handles(local_ray, sharded, tmp_path):
    with DenseStore.create(tmp_path / "p" / "a", np.int32, ()) as s:
        s.append(np.arange(5, dtype=np.int32))
    with loaderx.open_table(tmp_path / "p", readonly=False) as t:
        with pytest.raises(ValueError, match="readonly=False"):
            lray.read_table(t)
    with loaderx.open_table(tmp_path / "p", readonly=True) as t:
        ds = lray.read_table(t)
        assert [row["a"] for row in ds.take_all()] == [0, 1, 2, 3, 4]
    with loaderx.open_table(tmp_path / "p", readonly=False) as t:
        with pytest.raises(ValueError, match="readonly=False"):
            lray.write_table(ray.data.range(3), t)


def test_a_version_or_a_view_reads_as_its_handle_shows(local_ray, tmp_path):
    import pyarrow as pa

    path = str(tmp_path / "t")
    loaderx.ingest_sharded(pa.table({"v": np.arange(20)}), path, workers=1, shards=2).close()
    with loaderx.open_table(path, readonly=False) as t:
        t.delete("v % 4 = 0")
        t.save_view("odd", "v % 2 = 1")
        lray.write_table(ray.data.from_items([{"v": 100}]), path, mode="append")
        version = lray.add_columns(path, lambda b: {"w": b["v"] * 10}, read_columns="v")
    with loaderx.open_table(path) as t:
        assert t.version == version == 4
        assert lray.read_table(t, index_column=None).to_pandas()["w"].tolist() == [
            v * 10 for v in range(20) if v % 4
        ] + [1000]
    with loaderx.open_table(path, version=1) as v1:
        assert [r["v"] for r in lray.read_table(v1).take_all()] == list(range(20))
    with loaderx.open_table(path, view="odd") as odd:
        assert "view='odd'" in repr(odd)
        assert [r["v"] for r in lray.read_table(odd).take_all()] == list(range(1, 20, 2))


# ------------------------------------------------------------------ writing


def _make(batch):
    ids = batch["id"]
    recs = [_records(int(i)) for i in ids]
    r = np.empty(len(recs), dtype=object)
    r[:] = [rec["r"] for rec in recs]
    return {
        "id": ids,
        "x": np.stack([rec["x"] for rec in recs]),
        "y": np.array([rec["y"] for rec in recs]),
        "r": r,
        "b": np.stack([rec["b"] for rec in recs]),
    }


def _kinds(path):
    """``{column: (kind, dtype, item_shape)}`` per shard, from the stores."""
    out = []
    for s in read_manifest(path)["shards"]:
        shard = {}
        for name, store in loaderx.table.open_columns(os.path.join(path, s["name"])).items():
            shard[name] = (store._kind, store.dtype, getattr(store, "item_shape", None))
            store.close()
        out.append(shard)
    return out


def test_write_table_round_trip(local_ray, tmp_path):
    n, blocks = 50, 4
    ds = ray.data.range(n, override_num_blocks=blocks).map_batches(_make).materialize()
    sizes = [len(b["id"]) for b in _batches(ds)]  # one batch per block
    assert len(sizes) >= blocks
    path = lray.write_table(ds, tmp_path / "out")
    assert path == str(tmp_path / "out")
    manifest = read_manifest(path)
    assert manifest["columns"] == ["id", "x", "y", "r", "b"]  # the dataset's order
    assert [s["rows"] for s in manifest["shards"]] == sizes  # one shard per block, in order
    for shard in _kinds(path):
        assert shard["x"] == ("dense", np.float32, (2, 3))
        assert shard["y"] == ("dense", np.int64, ())
        assert shard["id"] == ("dense", np.int64, ())
        assert shard["b"] == ("dense", np.bool_, (2,))
        assert shard["r"][:2] == ("ragged", np.int16)
    got = lray.read_table(path, override_num_blocks=3)
    batches = _batches(got)
    rid = np.concatenate([b["record_id"] for b in batches])
    np.testing.assert_array_equal(rid, np.arange(n, dtype=np.uint64))
    np.testing.assert_array_equal(np.concatenate([b["id"] for b in batches]), np.arange(n))
    r = [rec for b in batches for rec in b["r"]]
    for name in ("x", "y", "b"):
        col = np.concatenate([b[name] for b in batches])
        want = np.stack([_records(i)[name] for i in range(n)])
        assert col.dtype == want.dtype and col.tobytes() == want.tobytes(), name
    for i in range(n):
        assert r[i].shape == _records(i)["r"].shape
        assert r[i].tobytes() == _records(i)["r"].tobytes()


def test_shapes_differing_only_across_blocks_make_a_ragged_column(local_ray, tmp_path):
    # Block k holds rows of shape (k + 1,): each block alone is one dense
    # tensor; over the dataset the column must be ragged in every shard.
    def make(batch):
        k = int(batch["id"][0]) // 4
        return {
            "v": np.stack([np.full(k + 1, i, np.uint16) for i in batch["id"]]),
            "w": np.stack([np.full(3, i, np.float64) for i in batch["id"]]),
        }

    ds = ray.data.range(12, override_num_blocks=3).map_batches(make)
    path = lray.write_table(ds, tmp_path / "out", codec="raw")
    kinds = _kinds(path)
    assert len(kinds) == 3
    assert all(shard["v"][:2] == ("ragged", np.uint16) for shard in kinds)
    assert all(shard["w"] == ("dense", np.float64, (3,)) for shard in kinds)
    assert sorted(os.listdir(path)) == sorted(
        [s["name"] for s in read_manifest(path)["shards"]]
        + ["manifest.json", ".manifest.lock", "_versions"]
    )
    rows = lray.read_table(path).take_all()
    for i, row in enumerate(rows):
        assert row["record_id"] == i
        np.testing.assert_array_equal(row["v"], np.full(i // 4 + 1, i, np.uint16))
        assert row["v"].dtype == np.uint16
        np.testing.assert_array_equal(row["w"], np.full(3, i, np.float64))


def test_shapes_differing_across_blocks_in_a_bucket(local_ray, s3):
    # The same, written to the S3 server: the shards that came out dense
    # are rewritten ragged in the bucket before the commit, and nothing of
    # the dense stores is left behind.
    def make(batch):
        k = int(batch["id"][0]) // 4
        return {"v": np.stack([np.full(k + 1, i, np.uint16) for i in batch["id"]])}

    uri = f"s3://{s3.bucket}/{s3.prefix}/mixed"
    ds = ray.data.range(12, override_num_blocks=3).map_batches(make)
    assert lray.write_table(ds, uri, codec="raw", storage_options=s3.options()) == uri
    with loaderx.open_table(uri, storage_options=s3.options()) as t:
        assert t["v"]._kind == "ragged" and t.num_rows == 12
        for i in range(12):
            np.testing.assert_array_equal(t["v"][i], np.full(i // 4 + 1, i, np.uint16))
    manifest = read_manifest_remote(uri, s3)
    listed = {k.split("/mixed/", 1)[1] for k in s3.keys(f"{s3.prefix}/mixed/")}
    recorded = {f"{s['name']}/{o}" for s in manifest["shards"] for o in s["objects"]}
    assert listed == recorded | {"manifest.json", "_versions/00000000000000000001.json"}


def read_manifest_remote(uri, s3) -> dict:
    from loaderx import _native

    return json.loads(_native.read_table_file(uri, "manifest.json", s3.options()))


def test_table_datasink_with_write_datasink(local_ray, tmp_path):
    sink = lray.TableDatasink(tmp_path / "out", codec="zstd")
    ray.data.range(10, override_num_blocks=2).write_datasink(sink)
    assert sink.num_rows == 10
    assert [r["id"] for r in lray.read_table(sink.path).take_all()] == list(range(10))


def _assert_nothing_visible(path, existed):
    if existed:
        assert os.listdir(path) == []
    else:
        assert not os.path.exists(path)


@pytest.mark.parametrize("existed", [False, True])
def test_a_row_of_the_wrong_type_leaves_nothing(local_ray, tmp_path, existed):
    import pyarrow as pa

    path = tmp_path / "out"
    if existed:
        path.mkdir()
    good = pa.table({"y": pa.array(np.arange(5, dtype=np.int64))})
    bad = pa.table({"y": pa.array(["a", "b"])})
    ds = ray.data.from_arrow([good, good, bad])
    with pytest.raises(TypeError, match=r"column .y.: expected int64 tensors.*found utf8 values"):
        lray.write_table(ds, path)
    _assert_nothing_visible(path, existed)
    # A later block of another dtype: found on the driver, before the commit.
    other = pa.table({"y": pa.array(np.arange(3, dtype=np.float64))})
    ds = ray.data.from_arrow([good, other])
    with pytest.raises(TypeError, match=r"column .y.: expected dtype int64.*found float64"):
        lray.write_table(ds, path)
    _assert_nothing_visible(path, existed)
    # Null rows of a list column have no store mapping through Ray.
    lists = pa.table({"y": pa.array([[1, 2], [3]], pa.list_(pa.int64()))})
    nulls = pa.table({"y": pa.array([[1], None], pa.list_(pa.int64()))})
    with pytest.raises(ValueError, match=r"column .y.: expected no nulls.*found 1"):
        lray.write_table(ray.data.from_arrow([lists, nulls]), path)
    _assert_nothing_visible(path, existed)


def test_a_column_without_a_store_mapping_is_refused_naming_it(local_ray, tmp_path):
    import pyarrow as pa

    path = tmp_path / "out"
    when = pa.table({"id": pa.array([1, 2]), "when": pa.array([1, 2], pa.date32())})
    with pytest.raises(TypeError, match=r'column "when" of Arrow type Date32 has no store'):
        lray.write_table(ray.data.from_arrow([when]), path)
    _assert_nothing_visible(path, False)


def test_write_text_binary_and_null_scalars(local_ray, tmp_path):
    import pyarrow as pa

    import loaderx

    blocks = [
        pa.table(
            {
                "caption": pa.array(["a cat", "", None]),
                "png": pa.array([b"\x89PNG", b"", b"x"], pa.binary()),
                "label": pa.array([1, None, 3], pa.int64()),
            }
        ),
        pa.table(
            {
                "caption": pa.array(["dög"], pa.large_string()),
                "png": pa.array([b"yy"], pa.large_binary()),
                "label": pa.array([4], pa.int64()),
            }
        ),
    ]
    path = lray.write_table(ray.data.from_arrow(blocks), tmp_path / "text")
    with loaderx.open_table(path) as t:
        assert t.sharded and t["caption"].logical == "utf8" and t["png"].logical == "binary"
        assert t["caption"][:] == ["a cat", "", None, "dög"]
        assert t["png"][:] == [b"\x89PNG", b"", b"x", b"yy"]
        assert t["label"][:].mask.tolist() == [False, True, False, False]
    rows = lray.read_table(path).take_all()
    assert [r["caption"] for r in rows] == ["a cat", "", None, "dög"]
    assert [r["label"] for r in rows][:2][0] == 1


def test_write_bad_input(local_ray, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "something").write_text("")
    with pytest.raises(FileExistsError, match="not empty"):
        lray.write_table(ray.data.range(3), tmp_path / "full")
    with pytest.raises(FileExistsError):
        lray.TableDatasink(tmp_path / "full")
    with pytest.raises(TypeError, match="ray.data.Dataset"):
        lray.write_table([1, 2, 3], tmp_path / "x")
    with pytest.raises(ValueError, match="codec"):
        lray.write_table(ray.data.range(3), tmp_path / "x", codec="lz4")
    with pytest.raises(ValueError, match="no rows"):
        lray.write_table(ray.data.range(3).filter(lambda row: False), tmp_path / "empty")
    assert not os.path.exists(tmp_path / "empty")
    # An existing table is not appended to.
    path = lray.write_table(ray.data.range(3), tmp_path / "t")
    with pytest.raises(FileExistsError):
        lray.write_table(ray.data.range(3), path)
    assert sum(s["rows"] for s in read_manifest(path)["shards"]) == 3


# ---------------------------------------------------------------- training


def _example():
    import importlib.util

    path = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(loaderx.__file__)))),
        "examples",
        "ray_train.py",
    )
    spec = importlib.util.spec_from_file_location("loaderx_example_ray_train", path)
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # cloudpickle wants it imported
        spec.loader.exec_module(module)
    # Ray's workers cannot import it: its functions travel by value.
    ray.cloudpickle.register_pickle_by_value(module)
    return module


def test_ray_train_ranks_and_bit_exact_resume(local_ray, tmp_path):
    # Ray Train's v1 trainer must be importable here (no torch, no pydantic
    # needed); the example's actor fallback is not what this test checks.
    from ray.train.data_parallel_trainer import DataParallelTrainer  # noqa: F401

    ex = _example()
    root = str(tmp_path / "table")
    ex.build(root, n=300)
    world, steps, resume_at = 2, 10, 6
    full = ex.run(root, world, 0, steps, str(tmp_path))
    resumed = ex.run(root, world, resume_at, steps, str(tmp_path))
    assert [len(r["ids"]) for r in full] == [steps] * world
    assert [len(r["ids"]) for r in resumed] == [steps - resume_at] * world
    # The global batches: one loader of world * BATCH records per step.
    with loaderx.open_table(root, readonly=True) as table:
        with DataLoader(
            dict(table), batch_size=ex.BATCH * world, seed=ex.SEED, workers=0
        ) as loader:
            global_ids = [next(loader)["id"] for _ in range(steps)]
    for k in range(steps):
        parts = [full[r]["ids"][k] for r in range(world)]
        assert all(len(p) == ex.BATCH for p in parts)
        assert len(np.intersect1d(parts[0], parts[1])) == 0  # disjoint
        np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.sort(global_ids[k]))
    for r in range(world):
        # Bit-exact: the same bytes of every column, step by step.
        assert resumed[r]["digests"] == full[r]["digests"][resume_at:]
        np.testing.assert_array_equal(resumed[r]["ids"], full[r]["ids"][resume_at:])
        assert resumed[r]["next_step"] == full[r]["next_step"] == steps
    ex.check(full, resumed, world, resume_at)


def test_merge_insert_of_a_dataset_one_task_per_shard_one_version(local_ray, tmp_path):
    """loaderx.ray.merge_insert: matched rows edited in place in their
    shards, new keys appended, rows the source lacks deleted on request,
    all as one version; a repeated key refuses and commits nothing."""
    import pyarrow as pa

    path = str(tmp_path / "t")
    n = 60
    ids = np.arange(n, dtype=np.int64)
    loaderx.ingest_sharded(
        pa.table(
            {
                "id": ids,
                "label": ids % 7,
                "caption": [f"c{i}" for i in ids],
                "emb": pa.FixedShapeTensorArray.from_numpy_ndarray(
                    np.repeat(ids.astype(np.float32)[:, None], 2, axis=1)
                ),
            }
        ),
        path,
        shards=3,
    ).close()
    keys = np.array([3, 59, 25, 100, 101, 40], dtype=np.int64)
    src = pa.table(
        {
            "id": keys,
            "label": keys * 10,
            "emb": pa.FixedShapeTensorArray.from_numpy_ndarray(np.full((6, 2), -1, np.float32)),
        }
    )
    ds = ray.data.from_arrow(src).repartition(3)
    counts = lray.merge_insert(path, ds, "id")
    assert counts == {"updated": 4, "inserted": 2, "deleted": 0}
    with loaderx.open_table(path) as t:
        assert t.version == 2 and [v["operation"] for v in t.versions()][-1] == "merge_insert"
        got_ids = t["id"][np.arange(t.num_rows)].tolist()
        labels = t["label"][np.arange(t.num_rows)].tolist()
        captions = t["caption"][np.arange(t.num_rows)]
        emb = t["emb"][np.arange(t.num_rows)]
    assert got_ids[:n] == list(range(n)) and sorted(got_ids[n:]) == [100, 101]
    for r, k in enumerate(got_ids):
        if k in keys:
            assert labels[r] == k * 10 and (emb[r] == -1).all()
        else:
            assert labels[r] == k % 7 and (emb[r] == k).all()
    assert captions[3] == "c3" and captions[n] is None  # columns the source lacks: null
    # The tasks wrote the columns' new values as patches (the matched rows
    # only, the columnar label as the records emb), which the committing
    # driver found.
    with open(os.path.join(path, "manifest.json")) as f:
        groups = [g for s in json.load(f)["shards"] for g in s.get("groups", [])]
    patched = [g for g in groups if g.get("patch")]
    assert sum(g["patch"] for g in patched) == 4
    assert all(sorted(g["columns"]) == ["emb", "label"] for g in patched)
    # A repeated key: refused, nothing committed.
    bad = ray.data.from_arrow(pa.table({"id": np.array([5, 5]), "label": np.array([1, 2])}))
    with pytest.raises(ValueError, match="key 5"):
        lray.merge_insert(path, bad, "id")
    # Keep only the source's keys: the other rows are deleted.
    keep = ray.data.from_arrow(pa.table({"id": np.array([1, 2, 100])}))
    counts = lray.merge_insert(
        path, keep, "id", when_not_matched="skip", when_not_matched_by_source="delete"
    )
    assert counts == {"updated": 0, "inserted": 0, "deleted": n + 2 - 3}
    with loaderx.open_table(path) as t:
        assert t.version == 3 and t["id"][np.arange(t.num_rows)].tolist() == [1, 2, 100]
