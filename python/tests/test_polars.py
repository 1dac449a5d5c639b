"""``loaderx.polars.scan_table``: a polars LazyFrame over a table with
projection, predicate and head pushdown; and ``loaderx.pandas.to_pandas``."""

import os

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import loaderx
import loaderx.pandas
import loaderx.polars
from loaderx.zrecord import DenseStore, RaggedStore

N = 300
SPLITS = [0, 100, 100, 220, N]  # three shards and an empty one


def data():
    rng = np.random.default_rng(7)
    img = rng.integers(0, 256, size=(N, 3, 4, 5), dtype=np.uint8)
    label = (np.arange(N) * 7 % 10).astype(np.int64)
    weight = rng.standard_normal(N).astype(np.float32)
    vec = rng.standard_normal((N, 6)).astype(np.float64)
    toks = [np.arange(i % 9 + 1, dtype=np.int32) + i for i in range(N)]
    grids = [np.full((i % 3 + 1, i % 4 + 1), i, np.float32) for i in range(N)]
    grids[5] = np.float32(5).reshape(())  # a 0-d record
    return {"img": img, "label": label, "weight": weight, "vec": vec, "toks": toks, "grid": grids}


def write_table(path, d, lo=0, hi=N, codec="zstd"):
    with DenseStore.create(os.path.join(path, "img"), np.uint8, (3, 4, 5), codec=codec) as s:
        s.append(d["img"][lo:hi])
    for name in ("label", "weight"):
        with DenseStore.create(os.path.join(path, name), d[name].dtype, (), codec=codec) as s:
            s.append(d[name][lo:hi])
    with DenseStore.create(os.path.join(path, "vec"), np.float64, (6,), codec=codec) as s:
        s.append(d["vec"][lo:hi])
    with RaggedStore.create(os.path.join(path, "toks"), np.int32, codec=codec) as s:
        s.append(d["toks"][lo:hi])
    with RaggedStore.create(os.path.join(path, "grid"), np.float32, codec=codec) as s:
        s.append(d["grid"][lo:hi])


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables")
    d = data()
    plain = str(root / "plain")
    write_table(plain, d)
    sharded = str(root / "sharded")
    shards = []
    for k, (a, b) in enumerate(zip(SPLITS, SPLITS[1:])):
        shard = loaderx.new_shard(sharded)
        write_table(shard, d, a, b, codec=["raw", "zstd"][k % 2])
        shards.append(shard)
    assert loaderx.commit_shards(sharded, shards) == N
    return {"plain": plain, "sharded": sharded}, d


@pytest.fixture(params=["plain", "sharded"])
def table(request, tables):
    paths, d = tables
    with loaderx.open_table(paths[request.param]) as t:
        yield t, d


def reads(store):
    return store._native.read_counters()[0]


def check_rows(df, d, ids):
    """Every column of ``df`` equals the source rows ``ids`` bit-exactly."""
    ids = np.asarray(ids, dtype=np.int64)
    assert df.height == len(ids)
    for name in df.columns:
        col = df[name]
        if name == "record_id":
            assert col.dtype == pl.UInt64
            np.testing.assert_array_equal(col.to_numpy(), ids)
        elif name in ("img", "vec", "label", "weight"):
            got = col.to_numpy()
            want = d[name][ids]
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes()
        elif name in ("toks", "grid"):
            for i, rec in zip(ids, col.to_list()):
                want = d[name][i].ravel()
                got = np.asarray(rec, dtype=want.dtype)
                assert got.tobytes() == want.tobytes()
        else:
            raise AssertionError(name)


def test_schema_types(tables):
    paths, _ = tables
    lf = loaderx.polars.scan_table(paths["plain"])
    assert isinstance(lf, pl.LazyFrame)
    assert lf.collect_schema() == pl.Schema(
        {
            "record_id": pl.UInt64,
            "grid": pl.List(pl.Float32),
            "img": pl.Array(pl.UInt8, (3, 4, 5)),
            "label": pl.Int64,
            "toks": pl.List(pl.Int32),
            "vec": pl.Array(pl.Float64, 6),
            "weight": pl.Float32,
        }
    )
    lf = loaderx.polars.scan_table(paths["plain"], index_column=None, ragged="struct")
    schema = lf.collect_schema()
    assert "record_id" not in schema
    assert schema["grid"] == pl.Struct({"data": pl.List(pl.Float32), "shape": pl.List(pl.Int32)})


def test_schema_reads_no_record(table):
    t, _ = table
    before = {k: reads(s) for k, s in t.items()}
    lf = loaderx.polars.scan_table(t)
    lf.collect_schema()
    assert {k: reads(s) for k, s in t.items()} == before


def test_collect_equals_the_stores(table):
    t, d = table
    df = loaderx.polars.scan_table(t).collect()
    assert df.columns == ["record_id", "grid", "img", "label", "toks", "vec", "weight"]
    assert df.schema["img"] == pl.Array(pl.UInt8, (3, 4, 5))
    check_rows(df, d, np.arange(N))
    # Small batches produce the same frame.
    small = loaderx.polars.scan_table(t, batch_rows=7).collect()
    assert small.equals(df)


def test_ragged_struct_keeps_exact_shapes(table):
    t, d = table
    df = loaderx.polars.scan_table(t, ragged="struct").select("grid").collect()
    for i, row in enumerate(df["grid"].to_list()):
        rec = np.asarray(row["data"], np.float32).reshape(row["shape"])
        assert rec.shape == d["grid"][i].shape
        np.testing.assert_array_equal(rec, d["grid"][i])


def test_projection_gathers_only_selected_columns(table):
    t, d = table
    before = {k: reads(s) for k, s in t.items()}
    df = loaderx.polars.scan_table(t).select("label", "vec").collect()
    assert df.columns == ["label", "vec"]
    check_rows(df, d, np.arange(N))
    delta = {k: reads(s) - before[k] for k, s in t.items()}
    assert delta == {"grid": 0, "img": 0, "label": N, "toks": 0, "vec": N, "weight": 0}


def test_predicate_gathers_heavy_columns_for_survivors_only(table):
    t, d = table
    before = {k: reads(s) for k, s in t.items()}
    df = loaderx.polars.scan_table(t).filter(pl.col("label") == 3).select("img", "toks").collect()
    ids = np.flatnonzero(d["label"] == 3)
    check_rows(df, d, ids)
    delta = {k: reads(s) - before[k] for k, s in t.items()}
    assert delta == {
        "grid": 0,
        "img": len(ids),
        "label": N,
        "toks": len(ids),
        "vec": 0,
        "weight": 0,
    }


def test_pushdown_off_reads_everything_and_agrees(table):
    t, d = table
    before = {k: reads(s) for k, s in t.items()}
    q = lambda lf: lf.filter(pl.col("label") == 3).select("record_id", "img")  # noqa: E731
    off = q(loaderx.polars.scan_table(t, pushdown=False)).collect()
    delta = {k: reads(s) - before[k] for k, s in t.items()}
    assert all(v == N for v in delta.values())
    on = q(loaderx.polars.scan_table(t)).collect()
    assert on.equals(off)
    assert loaderx.polars.scan_table(t, pushdown=False).head(5).collect().height == 5


@pytest.mark.parametrize(
    "pred",
    [
        pl.col("label").is_in([1, 4]) & (pl.col("weight") > 0),
        (pl.col("record_id") >= 17) & (pl.col("record_id") < 123),
        pl.col("weight").is_between(-0.5, 0.5) | (pl.col("label") == 0),
        pl.col("toks").list.len() > 5,  # a heavy column in the predicate
        pl.col("vec").arr.first() > 0,
        pl.lit(False),
        pl.lit(True),
    ],
    ids=["in-and", "record_id-range", "or", "ragged-len", "array-first", "none", "all"],
)
def test_predicates_agree_with_eager_filtering(table, pred):
    t, d = table
    lazy = loaderx.polars.scan_table(t).filter(pred).collect()
    eager = loaderx.polars.scan_table(t).collect().filter(pred)
    assert lazy.equals(eager)
    check_rows(lazy, d, lazy["record_id"].to_numpy())


def test_head_limit_and_slice(table):
    t, d = table
    lf = loaderx.polars.scan_table(t, batch_rows=16)
    before = reads(t["img"])
    df = lf.head(5).collect()
    check_rows(df, d, np.arange(5))
    assert reads(t["img"]) - before == 5  # the scan stopped
    check_rows(lf.limit(0).collect(), d, [])
    check_rows(lf.slice(250, 30).collect(), d, np.arange(250, 280))
    check_rows(lf.tail(3).collect(), d, np.arange(N - 3, N))
    check_rows(lf.head(10**6).collect(), d, np.arange(N))
    # head after a filter: the first matches. polars passes no n_rows with a
    # predicate, so the scan gathers heavy columns for survivors only, a
    # batch at a time, until polars stops pulling.
    before = reads(t["img"])
    df = lf.filter(pl.col("label") == 2).select("record_id", "img").head(4).collect()
    check_rows(df, d, np.flatnonzero(d["label"] == 2)[:4])
    assert 4 <= reads(t["img"]) - before <= (d["label"] == 2).sum()


def test_aggregates_and_len(table):
    t, d = table
    lf = loaderx.polars.scan_table(t)
    before = reads(t["img"])
    assert lf.select(pl.len()).collect().item() == N
    counts = lf.group_by("label").len().sort("label").collect()
    np.testing.assert_array_equal(counts["len"].to_numpy(), np.bincount(d["label"]))
    assert reads(t["img"]) == before


def test_path_and_open_table_and_dict(tables):
    paths, d = tables
    for path in paths.values():
        lf = loaderx.polars.scan_table(path)
        check_rows(lf.filter(pl.col("label") == 1).collect(), d, np.flatnonzero(d["label"] == 1))
        check_rows(lf.select("vec").collect(), d, np.arange(N))  # collects twice
        # The scan closed its table: a writer can open the plain table.
    with loaderx.open_table(paths["plain"], readonly=False) as t:
        assert not t.readonly
    with loaderx.open_table(paths["plain"]) as t:
        streams = {"label": t["label"], "img": t["img"]}
        df = loaderx.polars.scan_table(streams).collect()
        assert df.columns == ["record_id", "label", "img"]
        check_rows(df, d, np.arange(N))
        assert not t.closed  # a given table stays open


def test_bad_input(tables, tmp_path):
    paths, _ = tables
    with pytest.raises(FileNotFoundError):
        loaderx.polars.scan_table(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):
        loaderx.polars.scan_table(os.path.join(paths["plain"], "label", "meta.zr"))
    with pytest.raises(ValueError, match="no columns"):
        loaderx.polars.scan_table(tmp_path)
    lf = loaderx.polars.scan_table(paths["plain"])
    with pytest.raises(pl.exceptions.ColumnNotFoundError, match="nope"):
        lf.select("nope").collect()
    with pytest.raises(ValueError, match="ragged"):
        loaderx.polars.scan_table(paths["plain"], ragged="nested")
    with pytest.raises(ValueError, match="batch_rows"):
        loaderx.polars.scan_table(paths["plain"], batch_rows=0)
    with pytest.raises(ValueError, match="collides"):
        loaderx.polars.scan_table(paths["plain"], index_column="label")
    with pytest.raises(TypeError):
        loaderx.polars.scan_table(42)
    with loaderx.open_table(paths["plain"]) as t:
        lf = loaderx.polars.scan_table(t)
    with pytest.raises(Exception, match="closed"):
        lf.collect()


def test_pl_series_of_a_store_still_works(table):
    t, d = table
    s = pl.Series(t["label"])
    np.testing.assert_array_equal(s.to_numpy(), d["label"])


# -- pandas ----------------------------------------------------------------


def test_to_pandas(table):
    t, d = table
    df = loaderx.pandas.to_pandas(t)
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == ["grid", "img", "label", "toks", "vec", "weight"]
    assert df.index.name == "record_id" and list(df.index) == list(range(N))
    assert df["label"].dtype == np.int64 and df["weight"].dtype == np.float32
    np.testing.assert_array_equal(df["label"].to_numpy(), d["label"])
    for name in ("img", "vec", "toks", "grid"):
        assert df[name].dtype == object
        for i in range(N):
            cell = df[name].iloc[i]
            want = d[name][i]
            assert isinstance(cell, np.ndarray)
            assert cell.shape == want.shape and cell.dtype == want.dtype
            assert cell.tobytes() == want.tobytes()


def test_to_pandas_columns_and_bad_input(tables):
    paths, d = tables
    for path in paths.values():
        with loaderx.open_table(path) as t:
            df = loaderx.pandas.to_pandas(t, columns=["label", "img"], index_column=None)
            assert list(df.columns) == ["label", "img"] and df.index.name is None
            assert df["img"].iloc[17].shape == (3, 4, 5)
            np.testing.assert_array_equal(np.stack(df["img"].to_list()), d["img"])
            with pytest.raises(KeyError, match="nope"):
                loaderx.pandas.to_pandas(t, columns=["nope"])
    with pytest.raises(TypeError, match="open_table"):
        loaderx.pandas.to_pandas(paths["plain"])


@pytest.mark.parametrize("type", [pa.string(), pa.large_string(), pa.binary()])
def test_text_columns_are_cheap_and_filterable(table, type, tmp_path):
    t, d = table
    words = [f"w{int(x)}" for x in d["label"]]
    values = pa.array([w.encode() for w in words] if type == pa.binary() else words, type)
    text = loaderx.arrow.ingest(pa.table({"caption": values}), tmp_path / "text")["caption"]
    streams = {"caption": text, "img": t["img"]}
    lf = loaderx.polars.scan_table(streams)
    want = pl.String if type != pa.binary() else pl.Binary
    assert lf.collect_schema()["caption"] == want
    assert reads(text) == 0
    key = "w3" if type != pa.binary() else b"w3"
    pred = pl.col("caption") == key if type != pa.binary() else pl.col("caption") == pl.lit(key)
    before = reads(t["img"])
    df = lf.filter(pred).select("record_id", "img").collect()
    ids = np.flatnonzero(d["label"] == 3)
    check_rows(df, d, ids)
    assert reads(t["img"]) - before == len(ids)  # images for survivors only
    assert reads(text) == N  # the text column read once, to filter
    if type == pa.string():
        got = loaderx.pandas.to_pandas({"caption": text})["caption"]
        assert got.tolist() == words


def test_empty_table(tmp_path):
    path = tmp_path / "empty"
    with DenseStore.create(path / "img", np.uint8, (2, 2)):
        pass
    with DenseStore.create(path / "label", np.int64, ()):
        pass
    lf = loaderx.polars.scan_table(path)
    df = lf.collect()
    assert df.shape == (0, 3) and df.schema["img"] == pl.Array(pl.UInt8, (2, 2))
    assert lf.filter(pl.col("label") == 1).collect().height == 0
    assert lf.head(3).collect().height == 0
    with loaderx.open_table(path) as t:
        assert loaderx.pandas.to_pandas(t).shape == (0, 2)
