"""Plain tables: ``loaderx.open_table`` over a directory of equal-length
stores, a read-only Mapping whose streams work wherever a store does."""

import io
from collections.abc import Mapping

import numpy as np
import pytest

import loaderx
from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore, StoreBusy
from loaderx.zsampler import Sampler

N = 90


@pytest.fixture
def table_dir(root):
    ids = np.arange(N, dtype=np.int64)
    img = np.broadcast_to(ids[:, None].astype(np.float32), (N, 3)).copy()
    toks = [np.full(i % 4 + 1, i, np.int16) for i in range(N)]
    t = root / "train"
    with DenseStore.create(t / "id", np.int64, ()) as s:
        s.append(ids)
    with DenseStore.create(t / "img", np.float32, (3,)) as s:
        s.append(img)
    with RaggedStore.create(t / "tok", np.int16) as s:
        s.append(toks)
    (t / "notes").mkdir()  # a subdirectory without meta.zr is no column
    (t / "README").write_text("not a column")
    return t, ids, img, toks


def test_open_table_is_a_readonly_mapping_of_its_stores(table_dir):
    t, ids, img, toks = table_dir
    with loaderx.open_table(t) as table:
        assert isinstance(table, loaderx.Table) and isinstance(table, Mapping)
        assert list(table) == ["id", "img", "tok"] and len(table) == 3
        assert table.num_rows == N and table.readonly and table.path == str(t)
        assert isinstance(table["img"], DenseStore) and isinstance(table["tok"], RaggedStore)
        assert "id" in table and "notes" not in table
        np.testing.assert_array_equal(table["img"][[4, 0, 4]], img[[4, 0, 4]])
        np.testing.assert_array_equal(table["tok"][9], toks[9])
        with pytest.raises(KeyError, match="no column 'nope'"):
            table["nope"]
        with pytest.raises(TypeError):
            table["x"] = table["id"]  # a Mapping, not a dict
        with pytest.raises(io.UnsupportedOperation, match="read-only"):
            table["id"].append(np.array([1], np.int64))
        # Read-only: another table and another reader share the stores, a
        # writer does not get in.
        with loaderx.open_table(t) as again:
            assert again.num_rows == N
        with pytest.raises(StoreBusy):
            DenseStore.open(t / "id")
        assert "num_rows=90" in repr(table)
    assert table.closed and "closed" in repr(table)
    with pytest.raises(ValueError, match="closed"):
        _ = table.num_rows
    with pytest.raises(ValueError, match="closed"):
        table["id"]
    table.close()  # idempotent
    # Closing the table closed its columns: a writer opens them now.
    with DenseStore.open(t / "id") as w:
        assert len(w) == N


def test_writable_table(table_dir):
    t, ids, img, toks = table_dir
    table = loaderx.open_table(t, readonly=False)
    assert not table.readonly
    table["id"].sync()
    with pytest.raises(StoreBusy):
        loaderx.open_table(t)
    table.close()
    with pytest.raises(TypeError, match="readonly must be a bool"):
        loaderx.open_table(t, readonly=1)


def test_bad_tables(table_dir, root):
    t, ids, img, toks = table_dir
    with pytest.raises(FileNotFoundError, match="does not exist"):
        loaderx.open_table(root / "missing")
    (root / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no columns"):
        loaderx.open_table(root / "empty")
    with RaggedStore.open(t / "tok") as s:
        s.append([np.ones(2, np.int16)] * 3)
    with pytest.raises(ValueError) as info:
        loaderx.open_table(t)
    msg = str(info.value)
    assert "'id' has 90 rows" in msg and "'tok' has 93" in msg, msg
    # The failed open left nothing open.
    with DenseStore.open(t / "id"), RaggedStore.open(t / "tok"):
        pass


def test_table_streams_work_wherever_a_store_does(table_dir, root):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import loaderx.arrow
    import loaderx.parquet

    t, ids, img, toks = table_dir
    with loaderx.open_table(t) as table:
        assert pa.chunked_array(table["id"]).to_pylist() == ids.tolist()
        arrow = loaderx.arrow.table(table).read_all()
        assert arrow.column_names == ["record_id", "id", "img", "tok"]
        assert arrow.column("id").to_pylist() == ids.tolist()
        res = loaderx.sql("SELECT id FROM t WHERE id >= 85 ORDER BY id", t=table)
        assert res.column("id").to_pylist() == [85, 86, 87, 88, 89]
        assert loaderx.parquet.export(table, root / "t.parquet") == N
        assert pq.read_table(root / "t.parquet").column("id").to_pylist() == ids.tolist()
        with DataLoader(table, batch_size=6, mode="cyclic", seed=2, workers=0) as ld:
            sampler = Sampler(N, 6, Sampler.Mode.CYCLIC, seed=2)
            for k in range(4):
                batch = next(ld)
                want = sampler.at(k)
                np.testing.assert_array_equal(batch["id"], want)
                np.testing.assert_array_equal(batch["img"], img[want])
                for i, rec in zip(want, batch["tok"]):
                    np.testing.assert_array_equal(rec, toks[i])


def test_a_column_keeps_its_table_open(tmp_path):
    """``open_table(p)["x"][:3]`` (the h5py and zarr idiom): the column holds
    its table, which is closed once both are collected; ``close()`` still
    closes every column at once."""
    import gc

    pa = pytest.importorskip("pyarrow")
    path = str(tmp_path / "t")
    loaderx.ingest_sharded(pa.table({"x": np.arange(10)}), path, workers=1).close()
    assert loaderx.open_table(path)["x"][:3].tolist() == [0, 1, 2]
    column = loaderx.open_table(path)["x"]
    gc.collect()
    assert column[[9]].tolist() == [9]
    del column
    gc.collect()
    t = loaderx.open_table(path)
    column = t["x"]
    t.close()
    with pytest.raises(ValueError, match="closed"):
        column[:1]
