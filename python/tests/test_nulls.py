"""Nullable columns: a row may be null (not an element inside a row's
tensor). A column with nulls gets a validity stream (``.validity/<column>``,
one bool per row) beside its store, recorded in the table file; a column
without costs nothing extra. Nulls come back as Arrow nulls through Arrow,
SQL and Parquet; in Python, a dense batch is a ``numpy.ma.MaskedArray``
(whole rows masked), a list batch holds None, one null record is None."""

import io
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import loaderx
import loaderx.arrow
import loaderx.parquet
from loaderx import Corrupted
from loaderx.dataloader import DataLoader

NULL_ROWS = [1, 4]
N = 6


def source():
    valid = np.ones(N, bool)
    valid[NULL_ROWS] = False
    img = np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3)
    storage = pa.FixedSizeListArray.from_arrays(pa.array(img.reshape(-1)), 6, mask=pa.array(~valid))
    tensor = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.float32(), [2, 3]), storage)
    label = [None if i in NULL_ROWS else i * 10 for i in range(N)]
    caption = [None if i in NULL_ROWS else f"row {i}" * (i % 2) for i in range(N)]
    tokens = [None if i in NULL_ROWS else list(range(i + 1)) for i in range(N)]
    table = pa.table(
        {
            "id": pa.array(np.arange(N, dtype=np.int64)),
            "label": pa.array(label, pa.int64()),
            "caption": pa.array(caption, pa.string()),
            "tokens": pa.array(tokens, pa.list_(pa.int32())),
            "img": tensor,
        }
    )
    return table, img, valid


@pytest.fixture
def table_dir(root):
    table, img, valid = source()
    for s in loaderx.arrow.ingest(table, root / "t").values():
        s.close()
    return root / "t", table, img, valid


def test_only_columns_with_nulls_get_a_validity_stream(table_dir):
    t, *_ = table_dir
    assert sorted(os.listdir(t / ".validity")) == ["caption", "img", "label", "tokens"]
    doc = json.loads((t / "table.json").read_text())["columns"]
    assert "id" not in doc
    assert doc["label"] == {"type": "tensor", "nullable": True}
    assert doc["caption"] == {"type": "utf8", "nullable": True}
    with loaderx.open_table(t) as tab:
        assert not tab["id"]._native.nullable and tab["label"]._native.nullable
        assert tab["id"][:].dtype == np.int64 and not isinstance(tab["id"][:], np.ma.MaskedArray)


def test_python_reads_give_masked_arrays_and_none(table_dir):
    t, table, img, valid = table_dir
    with loaderx.open_table(t) as tab:
        label = tab["label"][:]
        assert isinstance(label, np.ma.MaskedArray)
        np.testing.assert_array_equal(label.mask, ~valid)
        assert label.compressed().tolist() == [i * 10 for i in range(N) if valid[i]]
        pic = tab["img"][[0, 1, 2]]
        assert isinstance(pic, np.ma.MaskedArray) and pic.shape == (3, 2, 3)
        assert pic.mask[1].all() and not pic.mask[[0, 2]].any()
        np.testing.assert_array_equal(pic[0], img[0])
        assert tab["label"][1] is None and tab["label"][2] == 20
        assert tab["img"][4] is None
        assert tab["caption"][:] == table["caption"].to_pylist()
        toks = tab["tokens"][:]
        assert toks[1] is None and toks[4] is None
        np.testing.assert_array_equal(toks[3], np.arange(4, dtype=np.int32))


def test_arrow_and_sql_carry_nulls(table_dir):
    t, table, _, valid = table_dir
    with loaderx.open_table(t) as tab:
        got = loaderx.arrow.table(tab, index_column=None).read_all()
        for name in ("label", "caption", "img"):
            assert got.schema.field(name).nullable
            assert got[name].is_null().to_pylist() == (~valid).tolist(), name
        assert not got.schema.field("id").nullable
        assert got["label"].to_pylist() == table["label"].to_pylist()
        assert tab["tokens"].to_arrow([1, 2]).is_null().to_pylist() == [True, False]
        r = loaderx.sql(
            "SELECT count(label) AS n, count(*) AS k, sum(label) AS s FROM t", t=tab
        ).to_pydict()
        assert r == {"n": [N - 2], "k": [N], "s": [sum(i * 10 for i in range(N) if valid[i])]}
        ids = loaderx.sql("SELECT id FROM t WHERE caption IS NULL ORDER BY id", t=tab)["id"]
        assert ids.to_pylist() == NULL_ROWS


def test_parquet_carries_nulls(table_dir, root):
    t, table, _, valid = table_dir
    with loaderx.open_table(t) as tab:
        loaderx.parquet.export(tab, root / "n.parquet")
    back = pq.read_table(root / "n.parquet")
    assert back["label"].to_pylist() == table["label"].to_pylist()
    assert back["caption"].to_pylist() == table["caption"].to_pylist()
    assert back["img"].is_null().to_pylist() == (~valid).tolist()
    stores = loaderx.parquet.ingest(root / "n.parquet", root / "again")
    try:
        assert stores["label"][1] is None and stores["caption"][4] is None
    finally:
        for s in stores.values():
            s.close()


def test_the_loader_masks_dense_columns_and_puts_none_in_lists(table_dir):
    t, table, img, valid = table_dir
    with loaderx.open_table(t) as tab:
        with DataLoader(tab, batch_size=3, mode="sequential") as dl:
            b = next(dl)
            assert isinstance(b["label"], np.ma.MaskedArray)
            assert b["label"].mask.tolist() == [False, True, False]
            assert b["caption"] == ["", None, ""] and b["tokens"][1] is None
            assert isinstance(b["id"], np.ndarray) and not isinstance(b["id"], np.ma.MaskedArray)
        with DataLoader(tab, batch_size=3, mode="sequential", output="arrow") as dl:
            b = next(dl)
            assert b["label"].to_pylist() == [0, None, 20]


@pytest.mark.parametrize("layout", ["records", None])
def test_sharded_tables_keep_nulls_and_fill_missing_validity(root, layout):
    """Records columns keep their nulls in validity streams (every shard
    gets one); columnar columns (the default for label and caption) in
    their column files."""
    table, _, valid = source()
    # Three shards: only some of them hold nulls in each column.
    with loaderx.ingest_sharded(table, root / "s", workers=2, shards=3, layout=layout) as tab:
        assert tab["label"][:].mask.tolist() == (~valid).tolist()
        assert tab["caption"][:] == table["caption"].to_pylist()
        got = loaderx.arrow.table(tab, index_column=None).read_all()
        assert got["label"].to_pylist() == table["label"].to_pylist()
    manifest = json.loads((root / "s" / "manifest.json").read_text())
    assert manifest["nullable"] == ["caption", "img", "label", "tokens"]
    columnar = set(manifest.get("layouts", {}))
    assert columnar == (set() if layout == "records" else {"caption", "id", "label"})
    for shard in manifest["shards"]:
        has = os.path.isdir(root / "s" / shard["name"] / ".validity" / "label")
        assert has == (layout == "records")
    # A later shard without nulls joins the nullable table as all-valid.
    clean = table.slice(0, 1)
    with loaderx.ingest_sharded(clean, root / "s", workers=1, shards=1) as tab:
        assert tab.num_rows == N + 1 and tab["label"][N] == 0
        assert tab["label"][[N]].mask.tolist() == [False]


def test_nullable_columns_refuse_writes_and_bad_nulls_are_refused(table_dir, root):
    t, *_ = table_dir
    with loaderx.open_table(t, readonly=False) as tab:
        with pytest.raises(io.UnsupportedOperation, match=r"nullable.*loaderx\.arrow\.ingest"):
            tab["label"].append(np.array([1], np.int64))
        with pytest.raises(io.UnsupportedOperation, match="nullable"):
            tab["caption"].append(["x"])
        assert len(tab["label"]) == N
    # A null inside a tensor (an element, not the row) is refused, and
    # nothing is left behind.
    storage = pa.FixedSizeListArray.from_arrays(pa.array([1.0, None, 3.0, 4.0]), 2)
    bad = pa.table({"x": storage})
    with pytest.raises(ValueError, match="row 0 holds a null inside its tensor"):
        loaderx.arrow.ingest(bad, root / "bad")
    assert not (root / "bad").exists() or os.listdir(root / "bad") == []


def test_a_validity_stream_of_the_wrong_length_fails_to_open(table_dir, root):
    t, *_ = table_dir
    v = t / ".validity" / "label"
    import shutil

    shutil.rmtree(v)
    with loaderx.DenseStore.create(v, np.bool_, ()) as s:
        s.append(np.ones(N - 1, bool))
    with pytest.raises(Corrupted, match="validity stream has 5 rows.*label has 6"):
        loaderx.open_table(t)
