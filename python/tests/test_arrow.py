"""Arrow interop: types, zero-copy, hand-off to pyarrow/polars/pandas/DuckDB,
round trips and bad input."""

import os
import sys

import numpy as np
import pytest

import loaderx.arrow as la
from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore

from conftest import DTYPES, random_records, snapshot

pa = pytest.importorskip("pyarrow")

ARROW_TYPES = {
    np.bool_: pa.bool_(),
    np.int8: pa.int8(),
    np.int16: pa.int16(),
    np.int32: pa.int32(),
    np.int64: pa.int64(),
    np.uint8: pa.uint8(),
    np.uint16: pa.uint16(),
    np.uint32: pa.uint32(),
    np.uint64: pa.uint64(),
    np.float16: pa.float16(),
    np.float32: pa.float32(),
    np.float64: pa.float64(),
}


@pytest.fixture
def table_streams(root):
    rng = np.random.default_rng(0)
    n = 300
    img = rng.integers(0, 255, (n, 3, 8, 8), dtype=np.uint8)
    label = (np.arange(n) % 10).astype(np.int64)
    toks = [np.arange(i % 7 + 1, dtype=np.int32) + i for i in range(n)]
    with DenseStore.create(root / "image", np.uint8, (3, 8, 8)) as s:
        s.append(img)
    with DenseStore.create(root / "label", np.int64, ()) as s:
        s.append(label)
    with RaggedStore.create(root / "tokens", np.int32) as s:
        s.append(toks)
    streams = {
        "image": DenseStore.open(root / "image"),
        "label": DenseStore.open(root / "label"),
        "tokens": RaggedStore.open(root / "tokens"),
    }
    yield streams, img, label, toks
    for s in streams.values():
        s.close()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_types_and_round_trip_every_dtype(root, dtype):
    rng = np.random.default_rng(1)
    dense = random_records(dtype, (40, 2, 3), rng)
    scalars = random_records(dtype, (40,), rng)
    ragged = [random_records(dtype, (int(rng.integers(1, 5)), 2), rng) for _ in range(40)]
    with (
        DenseStore.create(root / "d", dtype, (2, 3)) as d,
        DenseStore.create(root / "s", dtype, ()) as s,
        RaggedStore.create(root / "r", dtype) as r,
    ):
        d.append(dense)
        s.append(scalars)
        r.append(ragged)
        t = ARROW_TYPES[dtype]
        dc = d.to_arrow()
        assert isinstance(dc, pa.ChunkedArray)
        assert isinstance(dc.type, pa.FixedShapeTensorType)
        assert dc.type.value_type == t and list(dc.type.shape) == [2, 3]
        flat = dc.combine_chunks().storage.flatten()
        values = flat.to_numpy(zero_copy_only=False).reshape(dense.shape)
        np.testing.assert_array_equal(values, dense)  # (pyarrow has no bool tensors)
        sc = s.to_arrow()
        assert sc.type == t
        np.testing.assert_array_equal(sc.to_numpy(), scalars)
        rc = r.to_arrow()
        assert rc.type == pa.struct(
            [
                pa.field("data", pa.list_(pa.field("item", t)), nullable=False),
                pa.field("shape", pa.list_(pa.field("item", pa.int32())), nullable=False),
            ]
        )
        for rec, row in zip(ragged, rc.to_pylist()):
            assert tuple(row["shape"]) == rec.shape
            np.testing.assert_array_equal(
                np.array(row["data"], dtype=dtype).reshape(rec.shape), rec
            )
        # store -> Arrow -> store
        with (
            DenseStore.create(root / "d2", dtype, (2, 3)) as d2,
            DenseStore.create(root / "s2", dtype, ()) as s2,
            RaggedStore.create(root / "r2", dtype) as r2,
        ):
            d2.append(dc)
            s2.append(sc)
            r2.append(rc)
            np.testing.assert_array_equal(d2[:], dense)
            np.testing.assert_array_equal(s2[:], scalars)
            for a, b in zip(r2[:], ragged):
                assert a.shape == b.shape and np.array_equal(a, b)


def test_key_forms_and_field_name(table_streams):
    streams, img, label, toks = table_streams
    one = streams["image"].to_arrow(5)
    assert isinstance(one, pa.Array) and len(one) == 1
    np.testing.assert_array_equal(one.to_numpy_ndarray()[0], img[5])
    sl = streams["label"].to_arrow(slice(10, 20))
    np.testing.assert_array_equal(sl.to_numpy(), label[10:20])
    assert pa.field(streams["label"]).name == "label"  # named after the directory


def test_variable_shape_tensor_on_request(root):
    with RaggedStore.create(root / "r", np.float32) as r:
        r.append([np.ones((2, i + 1), np.float32) for i in range(4)])
        t = r.to_arrow([0, 3], variable_shape_tensor=True)
        assert t.type.extension_name == "arrow.variable_shape_tensor"
        assert t.storage.field("shape").to_pylist() == [[2, 1], [2, 4]]
        r.append([np.ones(3, np.float32)])
        with pytest.raises(ValueError, match="one ndim"):
            r.to_arrow([0, 4], variable_shape_tensor=True)


def test_zero_copy_to_arrow_and_loader(table_streams):
    streams, img, label, _ = table_streams
    before = pa.total_allocated_bytes()
    arr = streams["image"].to_arrow(np.arange(64))
    assert pa.total_allocated_bytes() == before  # pyarrow allocated nothing
    values = arr.storage.values
    view = arr.to_numpy_ndarray()
    assert view.ctypes.data == values.buffers()[1].address  # same memory
    np.testing.assert_array_equal(view, img[:64])
    scalars = streams["label"].to_arrow(np.arange(10))
    assert scalars.to_numpy(zero_copy_only=True).ctypes.data == scalars.buffers()[1].address
    with DataLoader(streams, batch_size=16, output="arrow", mode="sequential") as loader:
        batch = next(loader)
        assert isinstance(batch, pa.RecordBatch)
        assert batch.schema.names == ["image", "label", "tokens"]  # exactly the streams, in order
        col = batch.column("image")
        assert col.to_numpy_ndarray().ctypes.data == col.storage.values.buffers()[1].address
        np.testing.assert_array_equal(col.to_numpy_ndarray(), img[:16])
        np.testing.assert_array_equal(batch.column("label").to_numpy(), label[:16])


def test_arrow_loader_transform_receives_the_batch(table_streams):
    streams, _, label, _ = table_streams
    with DataLoader(
        {"label": streams["label"]},
        batch_size=8,
        mode="sequential",
        output="arrow",
        transform=lambda b: b.num_rows,
        workers=2,
    ) as loader:
        assert next(loader) == 8


def test_hand_off_pyarrow_pandas(table_streams):
    streams, img, label, toks = table_streams
    ca = pa.chunked_array(streams["image"])
    np.testing.assert_array_equal(ca.combine_chunks().to_numpy_ndarray(), img)
    tbl = pa.table(la.table(streams))
    assert tbl.column_names == ["record_id", "image", "label", "tokens"]
    assert tbl.column("record_id").to_pylist() == list(range(len(label)))
    np.testing.assert_array_equal(tbl.column("label").to_numpy(), label)
    pdf = tbl.to_pandas()
    assert list(pdf["label"]) == label.tolist()
    np.testing.assert_array_equal(np.asarray(pdf["image"][7]), img[7].ravel())
    no_index = pa.table(la.table({"label": streams["label"]}, index_column=None))
    assert no_index.column_names == ["label"]


def test_hand_off_polars(table_streams):
    pl = pytest.importorskip("polars")
    streams, _, label, toks = table_streams
    s = pl.Series(streams["label"])
    np.testing.assert_array_equal(s.to_numpy(), label)
    df = pl.DataFrame(la.table({"label": streams["label"], "tokens": streams["tokens"]}))
    assert df.columns == ["record_id", "label", "tokens"]
    assert df["tokens"].struct.field("data").to_list()[3] == toks[3].tolist()


def test_duckdb_sql_over_the_reader(table_streams):
    duckdb = pytest.importorskip("duckdb")
    streams, _, label, _ = table_streams
    reader = la.table({"label": streams["label"], "image": streams["image"]})
    con = duckdb.connect()
    con.register("t", reader)
    rows = con.execute(
        "SELECT record_id, label FROM t WHERE label = 3 ORDER BY record_id"
    ).fetchall()
    assert [r[0] for r in rows] == np.flatnonzero(label == 3).tolist()
    reader = la.table({"label": streams["label"]})
    con.register("t2", reader)
    assert con.execute("SELECT count(*) FROM t2").fetchone()[0] == len(label)


def test_ingest_pyarrow_table(root):
    tensor_type = pa.fixed_shape_tensor(pa.float32(), (2, 2))
    storage = pa.array([[1, 2, 3, 4], [5, 6, 7, 8]], pa.list_(pa.float32(), 4))
    src = pa.table(
        {
            "img": pa.ExtensionArray.from_storage(tensor_type, storage),
            "plain": storage,
            "tok": pa.array([[1, 2], [3]], pa.list_(pa.int32())),
            "y": pa.array([True, False]),
        }
    )
    stores = la.ingest(src, root / "ing", codec="raw")
    assert isinstance(stores["img"], DenseStore) and stores["img"].item_shape == (2, 2)
    assert stores["plain"].item_shape == (4,)
    assert isinstance(stores["tok"], RaggedStore)
    np.testing.assert_array_equal(stores["img"][1], [[5, 6], [7, 8]])
    assert [r.tolist() for r in stores["tok"][:]] == [[1, 2], [3]]
    assert stores["y"][:].tolist() == [True, False]
    for s in stores.values():
        s.close()


def test_ingest_polars_large_list(root):
    pl = pytest.importorskip("polars")
    df = pl.DataFrame({"a": [[1, 2, 3], [4], [5, 6]], "b": [1.0, 2.0, 3.0]})
    stores = la.ingest(df, root / "pl")
    assert [r.tolist() for r in stores["a"][:]] == [[1, 2, 3], [4], [5, 6]]
    np.testing.assert_array_equal(stores["b"][:], [1.0, 2.0, 3.0])
    for s in stores.values():
        s.close()


def test_ingest_streams_a_reader(root):
    # a multi-batch reader streams batch by batch
    batches = [pa.record_batch({"v": pa.array(np.arange(i * 10, i * 10 + 10))}) for i in range(5)]
    reader = pa.RecordBatchReader.from_batches(batches[0].schema, batches)
    stores = la.ingest(reader, root / "stream")
    np.testing.assert_array_equal(stores["v"][:], np.arange(50))
    stores["v"].close()


def test_ingest_failure_removes_what_it_created(root):
    bad = pa.FixedSizeListArray.from_arrays(pa.array([1, None, 3, 4, 5, 6]), 2)
    src = pa.table({"ok": pa.array([1, 2, 3]), "bad": bad})
    with pytest.raises(ValueError, match='column "bad".*null inside its tensor'):
        la.ingest(src, root / "x")
    assert not (root / "x").exists()
    with pytest.raises(TypeError, match="no store mapping"):
        la.ingest(pa.table({"s": pa.array([1, 2], pa.date32())}), root / "y")
    with pytest.raises(TypeError, match="PyCapsule"):
        la.ingest([1, 2], root / "z")


def test_bad_arrow_input_leaves_the_store_unchanged(root):
    d = DenseStore.create(root / "d", np.float32, (4,))
    d.append(np.zeros((2, 4), np.float32))
    r = RaggedStore.create(root / "r", np.int32)
    r.append([np.ones(2, np.int32)])

    def unchanged(store, fn, exc, match):
        store.sync()
        before = snapshot(store._path)
        with pytest.raises(exc, match=match):
            fn()
        store.sync()
        assert snapshot(store._path) == before

    wrong = pa.array([[1, 2, 3, 4]], pa.list_(pa.float64(), 4))
    unchanged(d, lambda: d.append(wrong), TypeError, "float")
    unchanged(d, lambda: d.append(pa.array(["a"])), TypeError, "FixedSizeList")
    nulls = pa.array([[1, 2, 3, 4], None], pa.list_(pa.float32(), 4))
    unchanged(d, lambda: d.append(nulls), ValueError, "null")
    wrong_size = pa.array([[1, 2, 3]], pa.list_(pa.float32(), 3))
    unchanged(d, lambda: d.append(wrong_size), ValueError, "item_shape")
    other_shape = pa.ExtensionArray.from_storage(
        pa.fixed_shape_tensor(pa.float32(), (2, 2)),
        pa.array([[1, 2, 3, 4]], pa.list_(pa.float32(), 4)),
    )
    unchanged(d, lambda: d.append(other_shape), ValueError, "shape")
    chunked = pa.chunked_array([pa.array([[1, 2, 3, 4]], pa.list_(pa.float32(), 4)), nulls])
    unchanged(d, lambda: d.append(chunked), ValueError, "null")
    unchanged(r, lambda: r.append(pa.array([[1.5]], pa.list_(pa.float64()))), TypeError, "Float64")
    unchanged(r, lambda: r.append(pa.array([[1], None], pa.list_(pa.int32()))), ValueError, "null")
    unchanged(r, lambda: r.append(pa.array([[1], []], pa.list_(pa.int32()))), ValueError, "empty")
    bad_struct = pa.StructArray.from_arrays(
        [pa.array([[1, 2, 3]], pa.list_(pa.int32())), pa.array([[2, 2]], pa.list_(pa.int32()))],
        names=["data", "shape"],
    )
    unchanged(r, lambda: r.append(bad_struct), ValueError, "shape")
    d.close()
    r.close()


def test_missing_pyarrow_raises_import_error_naming_the_extra(table_streams, monkeypatch):
    streams, _, _, _ = table_streams
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"loaderx\[arrow\]"):
        streams["label"].to_arrow()
    with pytest.raises(ImportError, match=r"loaderx\[arrow\]"):
        la.table(streams)
    with pytest.raises(ImportError, match=r"loaderx\[arrow\]"):
        DataLoader(streams, output="arrow")


def corrupt_payloads(path):
    """Overwrites data.zr with bytes that are no zstd frame (same size)."""
    data = os.path.join(path, "data.zr")
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.write(b"\x00" * size)


def test_a_corrupted_store_read_through_arrow_keeps_its_class(root):
    from loaderx import Corrupted

    path = root / "x"
    with DenseStore.create(path, np.int64, (4,), codec="zstd") as s:
        s.append(np.arange(400, dtype=np.int64).reshape(100, 4))
    corrupt_payloads(path)
    with DenseStore.open(path, readonly=True) as s:
        with pytest.raises(Corrupted, match="data.zr"):
            la.table({"x": s}).read_all()
        with pytest.raises(Corrupted, match="data.zr"):
            list(la.table({"x": s}, index_column=None))
        with pytest.raises(Corrupted, match="data.zr"):
            la.table({"x": s}).read_next_batch()
        with pytest.raises(Corrupted, match="data.zr"):
            s.to_arrow()
        # Through the C stream interface (what pa.table() and
        # pa.chunked_array() of a PyCapsule object use) a consumer sees an
        # OSError: the interface carries an errno and a message, no class.
        with pytest.raises(OSError, match="data.zr"):
            pa.table(la.table({"x": s}))
        with pytest.raises(OSError, match="data.zr"):
            pa.chunked_array(s)


def test_table_scan_filter_and_its_errors(tmp_path):
    # The core's scan, as the polars, pandas and Ray readers call it: the
    # filter sees its columns only, the rest is read for the rows it keeps,
    # and what it raises reaches the caller as raised.
    import pyarrow.compute as pc

    from loaderx._streams import scan

    with (
        DenseStore.create(tmp_path / "x", np.int64, ()) as x,
        DenseStore.create(tmp_path / "img", np.uint8, (2, 2)) as img,
    ):
        x.append(np.arange(100))
        img.append(np.arange(400, dtype=np.uint8).reshape(100, 2, 2))
        streams = {"x": x, "img": img}
        seen = []

        def keep(batch):
            seen.append(batch.schema.names)
            return pc.equal(pc.bit_wise_and(batch.column(0), 3), 0)

        schema, batches = scan(
            pa,
            streams,
            "record_id",
            columns=["record_id", "img"],
            start=10,
            end=90,
            max_rows=7,
            filter=keep,
            filter_columns=["x"],
        )
        assert schema.names == ["record_id", "img"]
        got = list(batches)
        assert all(b.num_rows <= 7 for b in got) and set(map(tuple, seen)) == {("x",)}
        ids = np.concatenate([b.column(0).to_numpy() for b in got])
        np.testing.assert_array_equal(ids, np.arange(12, 90, 4))
        imgs = np.concatenate([b.column(1).to_numpy_ndarray() for b in got])
        np.testing.assert_array_equal(imgs, np.asarray(img[ids.astype(np.int64)]))

        class Boom(Exception):
            pass

        def boom(batch):
            raise Boom("from the filter")

        _, batches = scan(pa, streams, None, filter=boom, filter_columns=["x"])
        with pytest.raises(Boom, match="from the filter"):
            next(batches)
        _, batches = scan(pa, streams, None, filter=lambda b: b.column(0), filter_columns=["x"])
        with pytest.raises(TypeError, match="boolean Arrow array, got one of type Int64"):
            next(batches)
        with pytest.raises(ValueError, match='no column "nope"'):
            scan(pa, streams, None, columns=["nope"])
        with pytest.raises(ValueError, match="rows 5..200 are not within the table's 100 rows"):
            scan(pa, streams, None, start=5, end=200)
