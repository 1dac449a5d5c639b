"""loaderx.ray: plain tables read as Ray Data datasets, on a local Ray
instance of two CPUs and on a two-node cluster."""

import numpy as np
import pytest

import loaderx
from loaderx import DenseStore, RaggedStore

ray = pytest.importorskip("ray")
import loaderx.ray as lray  # noqa: E402 - after the importorskip

N = 101


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A plain table: x dense (2, 3) float32, y scalar int64, r ragged int16
    of shapes (k, 3), k in 1..5; plus its arrays."""
    root = tmp_path_factory.mktemp("ray") / "t"
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, 2, 3)).astype(np.float32)
    y = rng.integers(-(2**62), 2**62, size=N, dtype=np.int64)
    r = [rng.integers(-1000, 1000, size=(i % 5 + 1, 3), dtype=np.int16) for i in range(N)]
    with DenseStore.create(root / "x", np.float32, (2, 3)) as s:
        s.append(x)
    with DenseStore.create(root / "y", np.int64, ()) as s:
        s.append(y)
    with RaggedStore.create(root / "r", np.int16) as s:
        s.append(r)
    return str(root), {"x": x, "y": y, "r": r}


def test_values_types_and_order_are_exact(local_ray, table):
    path, data = table
    ds = lray.read_table(path, override_num_blocks=3)
    schema = ds.schema().base_schema
    assert schema.names == ["record_id", "r", "x", "y"]
    assert str(schema.field("record_id").type) == "uint64"
    assert str(schema.field("y").type) == "int64"
    assert str(schema.field("x").type).startswith("extension<arrow.fixed_shape_tensor")
    assert type(schema.field("r").type).__name__ == "ArrowVariableShapedTensorType"

    rows = 0
    rid, xs, ys, rs = [], [], [], []
    for batch in ds.iter_batches(batch_format="numpy", batch_size=None):
        n = len(batch["record_id"])
        rows += n
        assert batch["x"].shape == (n, 2, 3) and batch["x"].dtype == np.float32
        assert batch["r"].dtype == object  # shapes differ within every block
        rid.append(batch["record_id"])
        xs.append(batch["x"])
        ys.append(batch["y"])
        rs.extend(batch["r"])
    assert rows == N
    rid = np.concatenate(rid)
    assert rid.dtype == np.uint64
    np.testing.assert_array_equal(rid, np.arange(N, dtype=np.uint64))  # record order
    assert np.concatenate(xs).tobytes() == data["x"].tobytes()
    assert np.concatenate(ys).tobytes() == data["y"].tobytes()
    assert len(rs) == N
    for got, want in zip(rs, data["r"]):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()


def test_projection_and_no_index_column(local_ray, table):
    path, data = table
    ds = lray.read_table(path, columns=["y", "x"], index_column=None)
    assert ds.schema().names == ["y", "x"]
    got = ds.to_arrow_refs()
    t = ray.get(got)
    assert all(b.column_names == ["y", "x"] for b in t)
    y = np.concatenate([b.column("y").to_numpy() for b in t])
    assert y.tobytes() == data["y"].tobytes()
    # Ray's own projection (select_columns) is pushed into the read as well.
    ds = lray.read_table(path).select_columns(["record_id", "y"])
    assert ds.schema().names == ["record_id", "y"]
    assert ds.take(2) == [{"record_id": 0, "y": data["y"][0]}, {"record_id": 1, "y": data["y"][1]}]


def test_unselected_corrupt_column_is_not_read(local_ray, table, tmp_path):
    import shutil

    path, data = table
    copy = tmp_path / "t"
    shutil.copytree(path, copy)
    with open(copy / "x" / "data.zr", "r+b") as f:  # every zstd frame undecodable
        size = f.seek(0, 2)
        f.seek(0)
        f.write(b"\xff" * size)
    with pytest.raises(loaderx.Corrupted):
        DenseStore.open(copy / "x", readonly=True)[0]
    ds = lray.read_table(copy, columns=["y"])
    assert ds.count() == N
    y = np.concatenate([b["y"] for b in ds.iter_batches(batch_format="numpy", batch_size=None)])
    assert y.tobytes() == data["y"].tobytes()
    pushed = lray.read_table(copy).select_columns(["y"])
    assert sum(len(b["y"]) for b in pushed.iter_batches(batch_format="numpy")) == N
    with pytest.raises(Exception, match="zstd frame does not decode"):
        lray.read_table(copy, columns=["x"]).materialize()


@pytest.mark.parametrize("k", [1, 4, 7])
def test_override_num_blocks(local_ray, table, k):
    path, _ = table
    ds = lray.read_table(path, override_num_blocks=k).materialize()
    assert ds.num_blocks() == k
    assert ds.count() == N


def test_read_datasource_and_metadata(local_ray, table):
    path, data = table
    source = lray.TableDatasource(path, columns=["x"])
    assert source.num_rows == N
    assert source.estimate_inmemory_data_size() == N * (8 + 2 * 3 * 4)
    tasks = source.get_read_tasks(4)
    assert [t.metadata.num_rows for t in tasks] == [25, 25, 25, 26]
    assert [t.metadata.size_bytes for t in tasks] == [n * 32 for n in (25, 25, 25, 26)]
    assert tasks[0].schema.names == ["record_id", "x"]
    ds = ray.data.read_datasource(source, override_num_blocks=2)
    x = np.concatenate([b["x"] for b in ds.iter_batches(batch_format="numpy", batch_size=None)])
    assert x.tobytes() == data["x"].tobytes()


def test_bad_input(table, tmp_path):
    # Raised by read_table itself, on the driver: no Ray task runs.
    path, _ = table
    with pytest.raises(ValueError, match=r"no column 'z'.*\['r', 'x', 'y'\]"):
        lray.read_table(path, columns=["x", "z"])
    with pytest.raises(FileNotFoundError):
        lray.read_table(tmp_path / "missing")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(FileNotFoundError):
        lray.read_table(tmp_path / "file")
    with pytest.raises(ValueError, match="collides"):
        lray.read_table(path, index_column="x")
    with pytest.raises(ValueError, match="override_num_blocks"):
        lray.read_table(path, override_num_blocks=0)
    uneven = tmp_path / "uneven"
    with DenseStore.create(uneven / "a", np.int32, ()) as s:
        s.append(np.arange(3, dtype=np.int32))
    with DenseStore.create(uneven / "b", np.int32, ()) as s:
        s.append(np.arange(4, dtype=np.int32))
    with pytest.raises(ValueError, match="equal lengths"):
        lray.read_table(uneven)


def test_read_tasks_run_on_two_nodes(ray_session, table):
    from ray.cluster_utils import Cluster

    path, data = table
    ray.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes(timeout=60)
        ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
        ray.data.DataContext.get_current().enable_progress_bars = False
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2

        def tag(batch):
            node = ray.get_runtime_context().get_node_id()
            return {**batch, "node": np.array([node] * len(batch["y"]))}

        # The map fuses into the read task, so "node" is where the read ran.
        ds = lray.read_table(path, columns=["y"], override_num_blocks=8).map_batches(tag)
        batches = list(ds.iter_batches(batch_format="numpy", batch_size=None))
        nodes = {n for b in batches for n in b["node"]}
        assert len(nodes) == 2
        rid = np.sort(np.concatenate([b["record_id"] for b in batches]))
        np.testing.assert_array_equal(rid, np.arange(N, dtype=np.uint64))
        y = np.concatenate([b["y"] for b in batches])
        order = np.argsort(np.concatenate([b["record_id"] for b in batches]))
        assert y[order].tobytes() == data["y"].tobytes()
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_read_task_blocks_are_byte_bounded(table, monkeypatch):
    # In process: what a read task runs, with a 320-byte bound (10 rows of
    # record_id + x), yields contiguous blocks of at most 10 rows.
    path, data = table
    monkeypatch.setattr(lray, "BATCH_BYTES", 320)
    blocks = list(lray._ReadTask(path, None, None, ["x"], "record_id", 5, 60)())
    assert [b.num_rows for b in blocks] == [10] * 5 + [5]
    rid = np.concatenate([b.column("record_id").to_numpy() for b in blocks])
    np.testing.assert_array_equal(rid, np.arange(5, 60, dtype=np.uint64))
    x = np.concatenate([b.column("x").combine_chunks().to_numpy_ndarray() for b in blocks])
    assert x.tobytes() == data["x"][5:60].tobytes()


def test_ragged_block_of_mixed_ndim_is_refused(tmp_path):
    with RaggedStore.create(tmp_path / "t" / "r", np.int8) as s:
        s.append([np.zeros(2, np.int8), np.zeros((1, 2), np.int8)])
    with loaderx.open_table(tmp_path / "t") as t:
        with pytest.raises(ValueError, match="column 'r'.*ndim 1 and 2"):
            list(lray._blocks(t, ["r"], None, 0, 2))
        assert [b.num_rows for b in lray._blocks(t, ["r"], None, 1, 2)] == [1]
