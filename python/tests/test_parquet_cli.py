"""Parquet export/ingest and the loaderx command line."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import loaderx.parquet as lpq
from loaderx.zrecord import DenseStore, RaggedStore

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture
def table_dir(root):
    rng = np.random.default_rng(1)
    n = 150
    img = rng.integers(0, 255, (n, 3, 4, 4), dtype=np.uint8)
    label = (np.arange(n) % 5).astype(np.int64)
    toks = [np.arange(i % 4 + 1, dtype=np.int32) * i for i in range(n)]
    t = root / "train"
    with DenseStore.create(t / "image", np.uint8, (3, 4, 4)) as s:
        s.append(img)
    with DenseStore.create(t / "label", np.int64, ()) as s:
        s.append(label)
    with RaggedStore.create(t / "tokens", np.int32) as s:
        s.append(toks)
    return t, img, label, toks


def open_table(t):
    return {
        "image": DenseStore.open(t / "image"),
        "label": DenseStore.open(t / "label"),
        "tokens": RaggedStore.open(t / "tokens"),
    }


@pytest.fixture
def exported(table_dir, root):
    """The table exported to Parquet with small row groups."""
    t, img, label, toks = table_dir
    streams = open_table(t)
    out = root / "train.parquet"
    rows = lpq.export(streams, out, row_group_bytes=2048)
    assert rows == len(label)
    with_index = root / "indexed.parquet"
    lpq.export(streams, with_index, index_column="record_id")
    for s in streams.values():
        s.close()
    return out, with_index, img, label, toks


def test_export_read_back_by_pyarrow(exported):
    out, with_index, img, label, toks = exported
    f = pq.ParquetFile(out)
    assert f.metadata.num_row_groups > 1  # row groups bounded in bytes
    assert f.metadata.row_group(0).column(0).compression == "ZSTD"
    tbl = pq.read_table(out)
    assert tbl.column_names == ["image", "label", "tokens"]  # no index column by default
    assert isinstance(tbl.schema.field("image").type, pa.FixedShapeTensorType)
    np.testing.assert_array_equal(tbl["image"].combine_chunks().to_numpy_ndarray(), img)
    np.testing.assert_array_equal(tbl["label"].to_numpy(), label)
    assert [r["data"] for r in tbl["tokens"].to_pylist()] == [x.tolist() for x in toks]
    assert pq.read_table(with_index).column_names[0] == "record_id"


def test_export_read_back_by_polars(exported):
    pl = pytest.importorskip("polars")
    out, _, _, label, _ = exported
    df = pl.read_parquet(out)
    assert df["label"].to_list() == label.tolist()
    assert "arrow.fixed_shape_tensor" in str(df.schema["image"])


def test_export_read_back_by_duckdb(exported):
    duckdb = pytest.importorskip("duckdb")
    out, _, img, label, _ = exported
    con = duckdb.connect()
    counts = con.execute(
        f"SELECT label, count(*) FROM read_parquet('{out}') GROUP BY label ORDER BY label"
    ).fetchall()
    assert counts == [(v, int((label == v).sum())) for v in range(5)]
    first = con.execute(f"SELECT image FROM read_parquet('{out}') LIMIT 1").fetchone()[0]
    assert list(first) == img[0].ravel().tolist()


def test_ingest_round_trip(table_dir, root):
    t, img, label, toks = table_dir
    streams = open_table(t)
    out = root / "t.parquet"
    lpq.export(streams, out)
    for s in streams.values():
        s.close()
    back = lpq.ingest(out, root / "back", codec="raw")
    assert isinstance(back["image"], DenseStore) and back["image"].item_shape == (3, 4, 4)
    np.testing.assert_array_equal(back["image"][:], img)
    np.testing.assert_array_equal(back["label"][:], label)
    assert all(np.array_equal(a, b) for a, b in zip(back["tokens"][:], toks))
    for s in back.values():
        s.close()


def test_ingest_and_import_arrow_ipc(table_dir, root):
    import pyarrow.ipc as ipc

    import loaderx.arrow as lxa

    t, img, label, toks = table_dir
    streams = open_table(t)
    table = pa.table(lxa.table(streams, index_column=None))
    for s in streams.values():
        s.close()
    with ipc.new_file(root / "t.arrow", table.schema) as w:
        w.write_table(table, max_chunksize=40)
    with ipc.new_stream(root / "t.arrows", table.schema) as w:
        w.write_table(table)
    for name in ("t.arrow", "t.arrows"):
        back = lpq.ingest(root / name, root / f"back-{name}", codec="zstd")
        np.testing.assert_array_equal(back["image"][:], img)
        np.testing.assert_array_equal(back["label"][:], label)
        assert all(np.array_equal(a, b) for a, b in zip(back["tokens"][:], toks))
        for s in back.values():
            s.close()
    r = cli("import", root / "t.arrow", root / "cli-back", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stores"]["image"] == {"kind": "dense", "length": len(img)}
    (root / "notes.txt").write_text("not a table\n")
    r = cli("import", root / "notes.txt", root / "txt-back")
    assert r.returncode != 0 and "expected a Parquet file" in r.stderr
    assert not (root / "txt-back").exists()


def test_ingest_bad_parquet_writes_nothing(root):
    p = root / "nulls.parquet"
    bad = pa.FixedSizeListArray.from_arrays(pa.array([1.0, None, 3.0, 4.0]), 2)
    pq.write_table(pa.table({"a": pa.array([1, 2]), "b": bad}), p)
    with pytest.raises(ValueError, match='column "b".*null inside its tensor'):
        lpq.ingest(p, root / "x")
    assert not (root / "x").exists()
    p2 = root / "dates.parquet"
    pq.write_table(pa.table({"s": pa.array([1, 2], pa.date32())}), p2)
    with pytest.raises(TypeError, match="no store mapping"):
        lpq.ingest(p2, root / "y")
    assert not (root / "y").exists()
    p3 = root / "null-text.parquet"
    pq.write_table(pa.table({"a": [1, 2], "s": pa.array([[1, None], [2]])}), p3)
    with pytest.raises(ValueError, match='column "s".*null'):
        lpq.ingest(p3, root / "w")
    assert not (root / "w").exists()
    with pytest.raises(FileNotFoundError):
        lpq.ingest(root / "missing.parquet", root / "z")


def test_export_of_unequal_streams_writes_nothing(table_dir, root):
    t, *_ = table_dir
    with DenseStore.create(root / "short", np.int64, ()) as s:
        s.append(np.arange(3))
    streams = {"label": DenseStore.open(t / "label"), "short": DenseStore.open(root / "short")}
    with pytest.raises(ValueError, match="same length"):
        lpq.export(streams, root / "bad.parquet")
    assert not (root / "bad.parquet").exists()
    assert not [f for f in os.listdir(root) if f.endswith(".partial")]
    for s in streams.values():
        s.close()


def cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "loaderx", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_cli_on_good_stores(table_dir, root):
    t, img, label, toks = table_dir
    r = cli("info", t / "image", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "kind": "dense",
        "length": len(label),
        "dtype": "uint8",
        "item_shape": [3, 4, 4],
        "codec": "zstd",
    }
    r = cli("info", t / "tokens")
    assert r.returncode == 0 and "kind: ragged" in r.stdout and "item_shape: None" in r.stdout
    r = cli("stats", t / "label", "--json")
    assert set(json.loads(r.stdout)) == {
        "records",
        "live_bytes",
        "data_bytes",
        "reclaimable",
        "raw_records",
    }
    r = cli("verify", t / "tokens", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["records"] == len(label)
    r = cli(
        "sql",
        "SELECT label, count(*) AS n FROM t GROUP BY label ORDER BY label",
        "--table",
        f"t={t}",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert [row["n"] for row in rows] == [int((label == v).sum()) for v in range(5)]
    out = root / "cli.parquet"
    r = cli("export", "--out", out, "--table", t, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows"] == len(label)
    r = cli("import", out, root / "imported", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stores"]["tokens"] == {"kind": "ragged", "length": len(label)}
    r = cli("bench", "--records", "64", "--seconds", "0.1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["raw"]["gather_gib_s"] > 0


def test_cli_on_bad_input_and_corrupt_stores(table_dir, root):
    t, *_ = table_dir
    r = cli("info", root / "missing")
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "missing" in r.stderr
    data = t / "image" / "data.zr"
    raw = bytearray(data.read_bytes())
    raw[: len(raw) // 2] = b"\0" * (len(raw) // 2)
    data.write_bytes(bytes(raw))
    r = cli("verify", t / "image")
    assert r.returncode != 0
    assert "data.zr" in r.stderr and r.stderr.count("\n") == 1
    meta = t / "label" / "meta.zr"
    m = bytearray(meta.read_bytes())
    m[31] = 9
    meta.write_bytes(bytes(m))
    r = cli("info", t / "label", "--json")
    assert r.returncode != 0 and "meta.zr" in r.stderr and "codec" in r.stderr
    r = cli("sql", "SELECT 1", "--table", "oops")
    assert r.returncode != 0 and "NAME=DIR" in r.stderr
    r = cli("frobnicate")
    assert r.returncode == 2
