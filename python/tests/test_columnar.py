"""Columnar columns: numbers, booleans, text and bytes stored as chunks of
many values (``layout=``), read by every path exactly as a pyarrow model
says, through appends, deletes and views; what ``layout=`` accepts and
refuses; tables written before columnar columns existed (committed test
data) open, read and convert with ``compact``; damaged chunks fail naming
their file; buckets (the S3-compatible server and the GCS emulator) read
the layout and fetch only the chunks a scan needs."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loaderx
import loaderx.arrow
import loaderx.polars
from loaderx import _native

pa = pytest.importorskip("pyarrow")

DATA = os.path.join(os.path.dirname(__file__), "data", "records_table")

#: One column of every kind a columnar column holds.
TYPES = {
    "b": pa.bool_(),
    "i8": pa.int8(),
    "i16": pa.int16(),
    "i32": pa.int32(),
    "i64": pa.int64(),
    "u8": pa.uint8(),
    "u16": pa.uint16(),
    "u32": pa.uint32(),
    "u64": pa.uint64(),
    "f16": pa.float16(),
    "f32": pa.float32(),
    "f64": pa.float64(),
    "s": pa.string(),
    "bin": pa.binary(),
}


def batch(lo, hi, seed):
    """Rows ``lo..hi`` of every type, some null (``seed`` picks which)."""
    rng = np.random.default_rng(seed)
    n = hi - lo
    null = rng.random(n) < 0.2
    cols = {}
    for name, t in TYPES.items():
        if t == pa.bool_():
            v = rng.random(n) < 0.5
        elif pa.types.is_integer(t):
            dt = t.to_pandas_dtype()
            info = np.iinfo(dt)
            # Small spans (narrowed) and the type's extremes.
            v = rng.integers(max(info.min, -50), min(info.max, 300), n, endpoint=True).astype(dt)
            v[: n // 7] = info.max
        elif pa.types.is_floating(t):
            v = (rng.standard_normal(n) * 100).astype(t.to_pandas_dtype())
        elif t == pa.string():
            v = [f"v{lo + i}" * int(rng.integers(0, 4)) + "é" * (i % 2) for i in range(n)]
        else:
            v = [
                bytes(rng.integers(0, 256, int(rng.integers(0, 9)), dtype=np.uint8))
                for _ in range(n)
            ]
        arr = pa.array(v, t) if not isinstance(v, np.ndarray) else pa.array(v, type=t)
        cols[name] = pa.array([None if m else x for m, x in zip(null, arr.to_pylist())], t)
    cols["rid"] = pa.array(np.arange(lo, hi, dtype=np.int64))
    return pa.table(cols)


def layout_all(path):
    with open(os.path.join(path, "manifest.json")) as f:
        return json.load(f).get("layouts", {})


def same(a, b) -> bool:
    """The same columns holding the same values (nullability of the fields
    aside: a column reads as nullable only when it holds a null)."""
    return a.column_names == b.column_names and all(
        a.column(c).combine_chunks().equals(b.column(c).combine_chunks()) for c in a.column_names
    )


def read_every_way(t, model, reader):
    """Every read path of ``reader`` ("core": Arrow, SQL, pandas, gathers,
    a pushed-down predicate; "polars": the polars scan) gives the model's
    rows (in record id order)."""
    n = model.num_rows
    assert t.num_rows == n
    names = list(model.column_names)
    if reader == "polars":
        df = loaderx.polars.scan_table(t).select(names).collect()
        assert same(df.to_arrow().cast(model.schema), model), "polars"
        return
    # Arrow.
    got = loaderx.arrow.table(t, index_column=None).read_all().select(names)
    assert same(got, model), "arrow"
    # SQL.
    q = "SELECT " + ", ".join(f'"{c}"' for c in names) + " FROM t ORDER BY record_id"
    assert same(loaderx.sql(q, t=t).select(names), model), "sql"
    # pandas.
    pd_ = t.to_pandas(index_column=None)[names]
    want = model.to_pandas()
    for c in names:
        a, b = pd_[c].tolist(), want[c].tolist()
        assert [None if x != x else x for x in a] == [None if x != x else x for x in b], c
    # Gathers at random rows (twice: the second from kept chunks).
    rng = np.random.default_rng(n)
    idx = rng.integers(0, n, min(n, 50)) if n else np.zeros(0, np.int64)
    for _ in range(2):
        for c in names:
            got = t[c].to_arrow(idx)
            assert got.equals(model.column(c).take(pa.array(idx)).combine_chunks()), c
    # A predicate pushed down (chunk pruning) agrees with the model.
    if n:
        q = "SELECT rid FROM t WHERE i64 >= 100 AND s IS NOT NULL ORDER BY rid"
        want = [
            r
            for r, v, s in zip(
                model["rid"].to_pylist(), model["i64"].to_pylist(), model["s"].to_pylist()
            )
            if v is not None and v >= 100 and s is not None
        ]
        assert loaderx.sql(q, t=t)["rid"].to_pylist() == want


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 400)),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 10**6), min_size=1, max_size=40)),
        st.tuples(st.just("view"), st.integers(0, 10**6)),
        st.tuples(st.just("compact"), st.integers(0, 1)),
    ),
    min_size=1,
    max_size=5,
)


@pytest.mark.parametrize("reader", ["core", "polars"])
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first=st.integers(1, 5000), history=ops)
def test_random_histories_read_as_the_model_says(tmp_path_factory, reader, first, history):
    if reader == "polars":
        pytest.importorskip("polars")
    path = str(tmp_path_factory.mktemp("m") / "t")
    model = batch(0, first, 0)
    loaderx.ingest_sharded(model, path, workers=2, shards=3, layout="columnar").close()
    assert set(layout_all(path)) == set(TYPES) | {"rid"}
    nxt = first
    views = {}
    for k, (op, arg) in enumerate(history):
        with loaderx.open_table(path, readonly=False) as t:
            if op == "append":
                add = batch(nxt, nxt + arg, k + 1)
                t.append(add)
                model = pa.concat_tables([model, add])
                nxt += arg
            elif op == "delete" and model.num_rows:
                ids = sorted({i % model.num_rows for i in arg})
                t.delete(np.array(ids))
                keep = np.ones(model.num_rows, bool)
                keep[ids] = False
                model = model.filter(pa.array(keep))
            elif op == "view" and model.num_rows:
                ids = np.arange(model.num_rows)[arg % 3 :: 3]
                name = f"v{k}"
                t.save_view(name, ids)
                views[name] = model.take(pa.array(ids))
            elif op == "compact":
                t.compact(min_deleted=0.0 if arg else 0.5)
    with loaderx.open_table(path) as t:
        read_every_way(t, model, reader)
    for name, want in views.items():
        with loaderx.open_table(path, view=name) as v:
            read_every_way(v, want, reader)


def test_layout_chooses_and_refuses(tmp_path):
    data = pa.table(
        {
            "label": np.arange(10),
            "caption": [f"c{i}" for i in range(10)],
            "png": [b"\x89PNG" * i for i in range(10)],
            "img": pa.FixedShapeTensorArray.from_numpy_ndarray(np.zeros((10, 2, 2), np.uint8)),
        }
    )
    # None: numbers and text columnar, bytes and tensors records.
    loaderx.ingest_sharded(data, str(tmp_path / "a"), workers=1).close()
    assert layout_all(tmp_path / "a") == {"label": "columnar", "caption": "columnar"}
    with loaderx.open_table(str(tmp_path / "a")) as t:
        assert t["label"].layout == "columnar" and t["png"].layout == "records"
        assert t["label"][[3, 1]].tolist() == [3, 1] and t["caption"][2] == "c2"
    # "columnar": every column that can be (bytes too), tensors stay records.
    loaderx.ingest_sharded(data, str(tmp_path / "b"), workers=1, layout="columnar").close()
    assert set(layout_all(tmp_path / "b")) == {"label", "caption", "png"}
    # "records": as before columnar columns existed (a version 1 manifest).
    loaderx.ingest_sharded(data, str(tmp_path / "c"), workers=1, layout="records").close()
    with open(tmp_path / "c" / "manifest.json") as f:
        assert json.load(f)["version"] == 1
    # A dict: by column, the others as for None.
    loaderx.ingest_sharded(
        data, str(tmp_path / "d"), workers=1, layout={"label": "records", "png": "columnar"}
    ).close()
    assert layout_all(tmp_path / "d") == {"caption": "columnar", "png": "columnar"}
    bad = [
        ({"nope": "columnar"}, ValueError, "'nope', which the data does not have"),
        ({"img": "columnar"}, ValueError, "'img' to be columnar, but it holds tensors"),
        ("rows", ValueError, "layout must be None, 'columnar', 'records'"),
        ({"label": "fast"}, ValueError, "layout must be"),
        ({1: "records"}, TypeError, "layout's keys must be column names"),
    ]
    for layout, exc, match in bad:
        with pytest.raises(exc, match=match):
            loaderx.ingest_sharded(data, str(tmp_path / "e"), workers=1, layout=layout)
        assert not os.path.exists(tmp_path / "e") or os.listdir(tmp_path / "e") == []
    # An existing column keeps its layout: appends follow it, and asking
    # for another is refused naming the column.
    with loaderx.open_table(str(tmp_path / "c"), readonly=False) as t:
        t.append(data.slice(0, 2))
        assert "layouts" not in json.loads(open(tmp_path / "c" / "manifest.json").read())
        with pytest.raises(
            ValueError, match="column 'label' is stored as records in the table"
        ) as e:
            t.append(data.slice(0, 2), layout={"label": "columnar"})
        # The remedy in Python's terms, from the binding, not the core.
        assert str(e.value).endswith("(Table.compact() converts records columns to columnar)")
        assert t.num_rows == 12
        # New columns take the default layout.
        t.add_columns({"score": np.linspace(0, 1, 12)})
        assert layout_all(tmp_path / "c") == {"score": "columnar"}
        t.add_columns({"rank": np.arange(12)}, layout="records")
        assert layout_all(tmp_path / "c") == {"score": "columnar"}
        assert t["rank"][[11]].tolist() == [11] and t["score"][[0]].tolist() == [0.0]


def test_tables_written_before_columnar_columns_open_and_convert(tmp_path):
    """Committed test data: a sharded table of stores (records layout,
    version 1 manifest, nulls in validity streams, a deleted row), as this
    release's predecessor wrote it."""
    path = str(tmp_path / "t")
    shutil.copytree(DATA, path)
    want_label = [None if i % 5 == 3 else i * 7 for i in range(12) if i != 1]
    want_caption = [None if i == 4 else f"caption {i}" for i in range(12) if i != 1]
    with loaderx.open_table(path) as t:
        assert t.version == 2 and t.num_rows == 11
        assert all(t[c].layout == "records" for c in t)
        before = loaderx.arrow.table(t).read_all()
    assert before["label"].to_pylist() == want_label
    assert before["caption"].to_pylist() == want_caption
    # compact converts every records scalar and text column, whatever
    # min_deleted is (no shard qualifies at 1.0); tensors stay records.
    with loaderx.open_table(path, readonly=False) as t:
        assert t.compact(min_deleted=1.0) == 3
        assert {c: t[c].layout for c in t} == {
            "caption": "columnar",
            "img": "records",
            "label": "columnar",
            "score": "columnar",
        }
        after = loaderx.arrow.table(t).read_all()
        assert same(after, before)
        assert t.compact(min_deleted=1.0) is None  # nothing left to do
    with open(os.path.join(path, "manifest.json")) as f:
        m = json.load(f)
    assert m["version"] == 3 and set(m["layouts"]) == {"caption", "label", "score"}
    assert m["nullable"] == ["caption", "label"]
    # The version before still reads its stores.
    with loaderx.open_table(path, version=2) as old:
        assert same(loaderx.arrow.table(old).read_all(), before)
    # A cleanup then removes the converted columns' stores (and their
    # validity streams) from the shards, and the table still reads.
    import datetime

    with loaderx.open_table(path, readonly=False) as t:
        assert t.cleanup(older_than=datetime.timedelta(0)) > 0
        assert same(loaderx.arrow.table(t).read_all(), before)
    left = {
        os.path.relpath(os.path.join(d, f), path)
        for d, _, fs in os.walk(path)
        for f in fs
        if f == "meta.zr"
    }
    assert all("/img/" in x for x in left), left


def test_the_cli_compacts_and_inspects_a_columnar_column(tmp_path):
    path = str(tmp_path / "t")
    shutil.copytree(DATA, path)
    run = [sys.executable, "-m", "loaderx"]
    out = subprocess.run(run + ["compact", path, "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["version"] == 3 and data["layouts"]["label"] == "columnar"
    # The untouched shard's columnar copy of label (in a column group).
    col = next(
        d for d, _, fs in os.walk(path) if "column.zc" in fs and d.endswith("label") and "_g-" in d
    )
    info = json.loads(subprocess.check_output(run + ["info", col, "--json"], text=True))
    assert info["layout"] == "columnar" and info["kind"] == "dense" and info["length"] == 6
    verify = json.loads(subprocess.check_output(run + ["verify", col, "--json"], text=True))
    assert verify["ok"] and verify["records"] == 6
    # A damaged chunk fails verification naming the file.
    f = os.path.join(col, "column.zc")
    b = bytearray(open(f, "rb").read())
    b[9] ^= 0xFF
    open(f, "wb").write(bytes(b))
    out = subprocess.run(run + ["verify", col], capture_output=True, text=True)
    assert out.returncode != 0 and "column.zc" in out.stderr and "CRC" in out.stderr


def damaged(tmp_path):
    """A table whose column ``x`` has a flipped bit in its first chunk."""
    path = str(tmp_path / "t")
    data = pa.table({"x": np.arange(50_000), "s": [f"s{i}" for i in range(50_000)]})
    loaderx.ingest_sharded(data, path, workers=1, shards=1).close()
    shard = next(s for s in os.listdir(path) if s.startswith("shard-"))
    f = os.path.join(path, shard, "x", "column.zc")
    b = bytearray(open(f, "rb").read())
    b[200] ^= 0x10
    open(f, "wb").write(bytes(b))
    return path


def test_a_damaged_chunk_fails_every_read_naming_its_file(tmp_path):
    with loaderx.open_table(damaged(tmp_path)) as t:
        for read in (
            lambda: t["x"][np.arange(50_000)],
            lambda: loaderx.sql("SELECT sum(x) FROM t", t=t),
            lambda: t.to_pandas(),
        ):
            with pytest.raises(loaderx.Corrupted, match="column.zc.*chunk 0"):
                read()
        # The other column reads.
        assert t["s"][[49_999]] == ["s49999"]


def test_a_damaged_chunk_fails_a_polars_scan_naming_its_file(tmp_path):
    pytest.importorskip("polars")
    with loaderx.open_table(damaged(tmp_path)) as t:
        with pytest.raises(loaderx.Corrupted, match="column.zc.*chunk 0"):
            loaderx.polars.scan_table(t).select("x").collect()
        assert loaderx.polars.scan_table(t).select("s").collect()["s"][-1] == "s49999"


def test_random_gathers_beyond_the_keep_budget(tmp_path):
    """With ``LOADERX_COLUMN_CACHE=0`` nothing is kept: every gather reads
    the rows it touches (in place, or its chunks decoded once per call) and
    reads the same rows; with a budget, random reads keep text chunks."""
    path = str(tmp_path / "t")
    x = np.arange(100_000)
    table = pa.table({"x": x * 3, "s": pa.array([f"v{i}" for i in x])})
    loaderx.ingest_sharded(table, path, workers=1).close()
    code = (
        "import numpy as np, loaderx\n"
        f"t = loaderx.open_table({path!r})\n"
        "idx = np.random.default_rng(1).integers(0, 100_000, 5000)\n"
        "for _ in range(2):\n"
        "    assert (t['x'][idx] == idx * 3).all()\n"
        "    assert t['s'][idx] == [f'v{i}' for i in idx]\n"
        "print(loaderx._native.columnar_kept_bytes())\n"
    )
    for budget, kept in (("0", False), ("64M", True)):
        env = dict(os.environ, LOADERX_COLUMN_CACHE=budget)
        out = subprocess.check_output([sys.executable, "-c", code], env=env, text=True)
        assert (int(out) > 0) == kept, (budget, out)


def test_a_columnar_table_in_the_s3_server(s3, tmp_path):
    from remote_servers import FaultProxy

    n = 400_000
    data = pa.table(
        {
            "label": np.arange(n) % 997,
            "score": np.linspace(0, 1, n),
            "c": [f"c{i % 50}" for i in range(n)],
        }
    )
    local = str(tmp_path / "t")
    loaderx.ingest_sharded(data, local, workers=2, shards=2).close()
    target = f"s3://{s3.bucket}/{s3.prefix}/t"
    loaderx.copy_table(local, target, storage_options=s3.options())
    label_bytes = sum(
        os.path.getsize(os.path.join(local, s, "label", "column.zc"))
        for s in os.listdir(local)
        if s.startswith("shard-")
    )
    proxy = FaultProxy(s3.endpoint)
    try:
        opts = s3.options(endpoint=proxy.url)
        with (
            loaderx.open_table(target, storage_options=opts) as rt,
            loaderx.open_table(local) as lt,
        ):
            q = (
                "SELECT label, count(*) AS n, avg(score) AS s FROM t WHERE label < 10 "
                "GROUP BY label ORDER BY label"
            )
            assert loaderx.sql(q, t=rt).equals(loaderx.sql(q, t=lt))
            idx = np.random.default_rng(0).integers(0, n, 300)
            assert (rt["label"][idx] == lt["label"][idx]).all()
            assert rt["c"][idx] == lt["c"][idx]
            # A scan of one column fetches little more than its chunks.
            before = _native.remote_stats()["bytes"]
            got = loaderx.sql("SELECT sum(label) AS s FROM t", t=rt)
            fetched = _native.remote_stats()["bytes"] - before
            assert got["s"][0].as_py() == int(data["label"].to_numpy().sum())
            assert fetched <= 1.2 * label_bytes, (fetched, label_bytes)
    finally:
        proxy.stop()


def test_a_columnar_table_on_gcs(gcs, tmp_path):
    local = str(tmp_path / "t")
    data = pa.table({"x": np.arange(30_000), "s": [f"v{i}" for i in range(30_000)]})
    loaderx.ingest_sharded(data, local, workers=1, shards=3).close()
    assert set(layout_all(local)) == {"x", "s"}
    target = gcs.upload_dir(local, f"{gcs.prefix}/t")
    with loaderx.open_table(target, storage_options=gcs.options()) as t:
        assert t["x"].layout == "columnar"
        got = loaderx.sql("SELECT count(*) AS n FROM t WHERE s LIKE 'v29%' AND x > 100", t=t)
        assert got["n"][0].as_py() == 1110  # v29, v290.. and v2900.. but x = 29
        assert t["s"][[29_999, 0]] == ["v29999", "v0"]


def test_sql_filters_evaluated_on_stored_chunks(tmp_path):
    """loaderx.sql's filters on columnar columns, evaluated by the core on
    the stored chunks and again by DataFusion on the rows kept, select the
    rows DataFusion selects from the same data in memory: NaN, -0.0 and
    nulls in the floats, casts, BETWEEN and IN, every operator."""
    from datafusion import SessionContext

    path = str(tmp_path / "t")
    data = pa.concat_tables([batch(0, 30_000, 1), batch(30_000, 60_000, 2)])
    col = data["f32"].combine_chunks()
    null = col.is_null().to_numpy(zero_copy_only=False)
    f32 = col.fill_null(1.0).to_numpy(zero_copy_only=False).copy()
    f32[::97] = np.nan
    f32[5::89] = -0.0
    f32[7::83] = 0.0
    data = data.set_column(
        data.schema.get_field_index("f32"), "f32", pa.array(f32, pa.float32(), mask=null)
    )
    loaderx.ingest_sharded(data, path, workers=2, shards=3, layout="columnar").close()
    ctx = SessionContext()
    ctx.register_record_batches("m", [data.to_batches()])
    wheres = [
        "i64 = 7",
        "i64 <> 7",
        "i64 > 150 AND u8 <= 30",
        "i16 >= 100 OR i8 IS NULL",
        "u64 < 20",
        "f32 > 12.5",
        "f32 <= -3.25",
        "f32 < 0.0",
        "f32 >= -0.0",
        "f32 = 0.0",
        "f32 > 1e30",
        "f64 BETWEEN -40 AND 40.5",
        "i32 IN (1, 2, 250)",
        "i64 > 2.5",
        "u8 <= 3.5 AND f64 > -10",
        "s = 'v7'",
        "s > 'v5' AND i32 < 0",
        "s IS NULL",
        "u32 IS NOT NULL AND u16 < 100",
        "rid < 40000 AND i64 = 300",
        "s LIKE '%77%'",
        "s LIKE '%3v1%' AND i16 > 0",
        "s LIKE 'v12%'",
        "s LIKE '%9é'",
        "s LIKE '%é%' OR s IS NULL",
        "s LIKE 'v1234'",
        "s LIKE '%%'",
        "s LIKE '%v_1%'",
        "s NOT LIKE '%7%'",
        "s ILIKE '%V7%'",
    ]
    with loaderx.open_table(path) as t:
        for w in wheres:
            got = loaderx.sql(f"SELECT rid FROM t WHERE {w} ORDER BY rid", t=t)
            exp = ctx.sql(f"SELECT rid FROM m WHERE {w} ORDER BY rid").to_arrow_table()
            assert got["rid"].to_pylist() == exp["rid"].to_pylist(), w
            n = loaderx.sql(f"SELECT count(*) AS n FROM t WHERE {w}", t=t)["n"][0].as_py()
            assert n == exp.num_rows, w


def test_polars_predicates_evaluated_on_stored_chunks(tmp_path):
    """What the core evaluates of a polars predicate on the stored chunks
    (comparisons, null tests, and/or) never loses a row polars keeps."""
    import polars as pl

    path = str(tmp_path / "t")
    data = pa.concat_tables([batch(0, 30_000, 1), batch(30_000, 60_000, 2)])
    loaderx.ingest_sharded(data, path, workers=2, shards=3, layout="columnar").close()
    want = pl.from_arrow(data)
    c = pl.col
    preds = [
        c("i64") == 7,
        c("i64") != 7,
        (c("i16") >= 100) & (c("u8") < 30),
        (c("u64") > 250) | c("i8").is_null(),
        c("f32") > 12.5,
        (c("f64") <= -3.0) & c("s").is_not_null(),
        c("s") == "v7",
        (c("s") > "v5") & (c("i32") < 0),
        c("b") == True,  # noqa: E712 - polars' comparison, not Python's
        c("u32").is_null(),
        (c("i64") == 2**40) | (c("rid") == 5),
        c("s").str.contains("77"),
        c("s").str.contains("3v1", literal=True) & (c("i16") > 0),
        c("s").str.starts_with("v12"),
        c("s").str.ends_with("9é"),
        c("s").str.contains("é") | c("s").is_null(),
        c("s").str.contains("v.1"),  # a pattern: polars alone
        c("i64") + 1 > 5,  # nothing the core takes: polars alone
    ]
    names = dict(pl.from_arrow(data).schema)
    with loaderx.open_table(path) as t:
        for p in preds:
            got = loaderx.polars.scan_table(t).filter(p).select("rid").collect()
            exp = want.filter(p).select("rid")
            assert sorted(got["rid"].to_list()) == sorted(exp["rid"].to_list()), str(p)
            alone = "+" in str(p) or "v.1" in str(p)
            native = loaderx.polars.native_predicate(p, names)
            assert (native is None) == alone, str(p)
            # The core says its answer is exact: everything translated and
            # nothing boolean compared (floats compare in polars' order).
            got = None
            if native is not None:
                got = loaderx._streams.scan(
                    pa, t, None, columns=["rid"], predicate=native, predicate_exact=True
                )
            assert (got is not None) == (not alone and '"b"' not in str(p)), str(p)
