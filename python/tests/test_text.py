"""Text and binary columns: ragged uint8 stores whose records are the values
(an empty value is the 0-d record 0), typed at table level (``table.json``,
the sharded manifest), and coming back as what they were through every
path: gathers, Arrow, SQL, Parquet, polars, the DataLoader and the CLI."""

import io
import json
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
from loaderx.zrecord import RaggedStore

CAPTIONS = ["a cat", "", "dög 🐶", "web page", "x" * 300, "", "naïve"]
SOURCES = ["web", "book", "web", "web", "book", "web", "news"]
BLOBS = [b"\x89PNG\r\n", b"", b"\x00\x01\x02", b"\xff" * 70, b"x", b"", b"\x80"]
N = len(CAPTIONS)


def source_table():
    return pa.table(
        {
            "label": pa.array(np.arange(N) % 3, pa.int64()),
            "caption": pa.array(CAPTIONS, pa.string()),
            "source": pa.array(SOURCES, pa.large_string()),
            "png": pa.array(BLOBS, pa.binary()),
        }
    )


@pytest.fixture
def table_dir(root):
    t = root / "t"
    for s in loaderx.arrow.ingest(source_table(), t).values():
        s.close()
    return t


def test_ingest_records_types_and_gathers_give_str_and_bytes(table_dir):
    doc = json.loads((table_dir / "table.json").read_text())
    assert doc == {
        "format": "loaderx.table",
        "version": 1,
        "columns": {
            "caption": {"type": "utf8"},
            "png": {"type": "binary"},
            "source": {"type": "utf8"},
        },
    }
    with loaderx.open_table(table_dir) as t:
        assert t["caption"].logical == "utf8" and t["png"].logical == "binary"
        assert t["label"].logical == "tensor"
        assert t["caption"][:] == CAPTIONS and t["png"][:] == BLOBS
        assert t["caption"][2] == "dög 🐶" and t["png"][1] == b""
        assert t["source"][[6, 0]] == ["news", "web"]
        assert "logical='utf8'" in repr(t["caption"])
    # The bare store is a plain ragged uint8 store: a value's record is its
    # bytes, an empty value the 0-d record 0.
    with RaggedStore.open(table_dir / "caption", readonly=True) as s:
        assert s.logical == "tensor" and s.dtype == np.uint8
        assert bytes(s[2]) == "dög 🐶".encode()
        assert s[1].shape == () and s[1] == 0


def test_every_arrow_string_and_binary_type_ingests(root):
    values = ["", "b", "ccc"]
    cols = {
        "utf8": pa.array(values, pa.string()),
        "large_utf8": pa.array(values, pa.large_string()),
        "utf8_view": pa.array(values, pa.string_view()),
        "binary": pa.array([v.encode() for v in values], pa.binary()),
        "large_binary": pa.array([v.encode() for v in values], pa.large_binary()),
        "binary_view": pa.array([v.encode() for v in values], pa.binary_view()),
        "fixed": pa.array([b"ab", b"cd", b"ef"], pa.binary(2)),
    }
    stores = loaderx.arrow.ingest(pa.table(cols), root / "all")
    try:
        for name, s in stores.items():
            want = "utf8" if "utf8" in name else "binary"
            assert s.logical == want, name
        assert stores["utf8_view"][:] == values
        assert stores["binary_view"][:] == [v.encode() for v in values]
        assert stores["fixed"][:] == [b"ab", b"cd", b"ef"]
        assert stores["large_utf8"].to_arrow().type == pa.string()
    finally:
        for s in stores.values():
            s.close()


def test_arrow_sql_and_parquet_see_strings(table_dir, root):
    with loaderx.open_table(table_dir) as t:
        arr = t["caption"].to_arrow()
        assert arr.type == pa.string() and arr.to_pylist() == CAPTIONS
        assert t["png"].to_arrow([3, 1]).to_pylist() == [BLOBS[3], b""]
        got = loaderx.arrow.table(t).read_all()
        assert got.schema.field("caption").type == pa.string()
        assert got.schema.field("png").type == pa.binary()
        assert got.drop(["record_id"]).select(source_table().column_names).to_pydict() == {
            **source_table().to_pydict(),
        }
        q = (
            "SELECT record_id, caption, length(caption) AS n FROM t "
            "WHERE source = 'web' AND caption LIKE '%a%' ORDER BY record_id"
        )
        r = loaderx.sql(q, t=t)
        want = [i for i in range(N) if SOURCES[i] == "web" and "a" in CAPTIONS[i]]
        assert r["record_id"].to_pylist() == want
        assert r["n"].to_pylist() == [len(CAPTIONS[i]) for i in want]
        g = loaderx.sql("SELECT source, count(*) AS k FROM t GROUP BY source ORDER BY source", t=t)
        assert g.to_pydict() == {"source": ["book", "news", "web"], "k": [2, 1, 4]}
        out = root / "t.parquet"
        loaderx.parquet.export(t, out)
        back = pq.read_table(out)
        assert back.schema.field("caption").type == pa.string()
        assert back["caption"].to_pylist() == CAPTIONS and back["png"].to_pylist() == BLOBS
    stores = loaderx.parquet.ingest(out, root / "again")
    try:
        assert stores["caption"].logical == "utf8" and stores["caption"][:] == CAPTIONS
        assert stores["png"][:] == BLOBS
    finally:
        for s in stores.values():
            s.close()


def test_duckdb_sees_strings(table_dir, root):
    duckdb = pytest.importorskip("duckdb")
    out = root / "t.parquet"
    with loaderx.open_table(table_dir) as t:
        loaderx.parquet.export(t, out)
    assert duckdb.sql(f"SELECT count(*) FROM '{out}' WHERE source = 'book'").fetchall() == [(2,)]


def test_polars_sees_strings(table_dir):
    pl = pytest.importorskip("polars")
    with loaderx.open_table(table_dir) as t:
        frame = pl.from_arrow(loaderx.arrow.table(t).read_all())
    assert frame["caption"].dtype == pl.String and frame["caption"].to_list() == CAPTIONS


def test_the_loader_yields_str_and_bytes_or_raw_arrays(table_dir):
    with loaderx.open_table(table_dir) as t:
        with DataLoader(t, batch_size=3, mode="sequential") as dl:
            b = next(dl)
            assert b["caption"] == CAPTIONS[:3] and b["png"] == BLOBS[:3]
            np.testing.assert_array_equal(b["label"], [0, 1, 2])
        with DataLoader(t, batch_size=3, mode="sequential", raw=True) as dl:
            b = next(dl)
            assert bytes(b["caption"][0]) == b"a cat" and b["caption"][1].shape == ()
        with DataLoader(t, batch_size=3, mode="sequential", output="arrow") as dl:
            b = next(dl)
            assert b.schema.field("caption").type == pa.string()
            assert b["caption"].to_pylist() == CAPTIONS[:3]
        with DataLoader(
            t, batch_size=2, mode="sequential", transform=lambda b: [len(c) for c in b["caption"]]
        ) as dl:
            assert next(dl) == [5, 0]
        with pytest.raises(TypeError, match="raw must be a bool"):
            DataLoader(t, batch_size=2, raw="yes")


def test_appends_to_text_columns_check_their_values(table_dir):
    with loaderx.open_table(table_dir, readonly=False) as t:
        cap, png = t["caption"], t["png"]
        cap.append(["new", ""])
        png.append([b"\x00", bytearray(b"zz")])
        cap.append(pa.array(["from arrow"]))
        cap.sync()
        assert cap[N:] == ["new", "", "from arrow"] and png[N:] == [b"\x00", b"zz"]
        n = len(cap)
        with pytest.raises(TypeError, match=r"records\[1\] must be a str for a utf8 column"):
            cap.append(["ok", b"bytes"])
        with pytest.raises(TypeError, match="must be bytes for a binary column"):
            png.append(["text"])
        with pytest.raises(ValueError, match="cannot be encoded as UTF-8"):
            cap.append(["\ud800"])
        with pytest.raises(ValueError, match="is utf8, but value 1 is not valid UTF-8"):
            cap.append(pa.array([b"ok", b"\xff\xfe"], pa.binary()))
        assert len(cap) == n


def test_sharded_text_columns(root):
    table = source_table()
    with loaderx.ingest_sharded(table, root / "s", workers=2, shards=3) as t:
        assert t.sharded and t["caption"].logical == "utf8"
        assert t["caption"][:] == CAPTIONS and t["png"][:] == BLOBS
        r = loaderx.sql("SELECT count(*) AS k FROM t WHERE source = 'web'", t=t)
        assert r["k"].to_pylist() == [4]
    manifest = json.loads((root / "s" / "manifest.json").read_text())
    assert manifest["types"] == {"caption": "utf8", "png": "binary", "source": "utf8"}
    # A shard whose caption column is plain uint8 records does not join.
    odd = loaderx.new_shard(root / "s")
    for s in loaderx.arrow.ingest(table.drop(["caption"]), odd).values():
        s.close()
    with RaggedStore.create(os.path.join(odd, "caption"), np.uint8) as s:
        s.append([np.frombuffer(c.encode() or b"\0", np.uint8) for c in CAPTIONS])
    with pytest.raises(ValueError, match=r"column 'caption'.*holds ragged \|u1.*holds utf8 values"):
        loaderx.commit_shards(root / "s", [odd])


def test_a_broken_table_file_fails_naming_it(table_dir):
    (table_dir / "table.json").write_text('{"format": "loaderx.table", "version": 1, "columns": 3}')
    with pytest.raises(Corrupted, match="table.json.*not a table file"):
        loaderx.open_table(table_dir)
    (table_dir / "table.json").write_text(
        '{"format": "loaderx.table", "version": 1, "columns": {"caption": {"type": "text"}}}'
    )
    with pytest.raises(Corrupted, match='column "caption" has type "text"'):
        loaderx.open_table(table_dir)
    (table_dir / "table.json").write_text(
        '{"format": "loaderx.table", "version": 1, "columns": {"label": {"type": "utf8"}}}'
    )
    with pytest.raises(ValueError, match="utf8 column needs a ragged uint8 store"):
        loaderx.open_table(table_dir)


def test_unsupported_types_name_the_column_and_what_is_supported(root):
    bad = pa.table({"when": pa.array([1, 2], pa.date32())})
    with pytest.raises(TypeError, match=r'column "when" of Arrow type Date32.*Utf8.*Binary'):
        loaderx.arrow.ingest(bad, root / "bad")
    assert not (root / "bad").exists() or not os.listdir(root / "bad")


def test_cli_shows_text(table_dir):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "loaderx",
            "sql",
            "SELECT caption, png FROM t WHERE record_id = 2",
            "--table",
            f"t={table_dir}",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert rows[0]["caption"] == "dög 🐶"
    assert io is not None


def invalid_utf8_column(large=False):
    """A utf8 array holding b"\\xff\\xfe" as its second value: built from raw
    buffers, which pyarrow does not validate."""
    data = b"ok" + b"\xff\xfe" + b"fine"
    width = np.int64 if large else np.int32
    offsets = np.array([0, 2, 4, 8], width).tobytes()
    typ = pa.large_utf8() if large else pa.utf8()
    return pa.Array.from_buffers(typ, 3, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


@pytest.mark.parametrize("large", [False, True])
def test_ingest_refuses_invalid_utf8_and_leaves_nothing(root, large):
    bad = pa.table({"n": pa.array([1, 2, 3], pa.int64()), "caption": invalid_utf8_column(large)})
    with pytest.raises(ValueError, match=r'column "caption" is utf8.*not hold valid UTF-8'):
        loaderx.arrow.ingest(bad, root / "t")
    assert not (root / "t").exists()
    # Into an existing directory: nothing of the table is left there either.
    (root / "u").mkdir()
    with pytest.raises(ValueError, match="caption"):
        loaderx.arrow.ingest(bad, root / "u")
    assert os.listdir(root / "u") == []


def test_ingest_sharded_refuses_invalid_utf8(root):
    bad = pa.table({"caption": invalid_utf8_column()})
    with pytest.raises(ValueError, match=r'column "caption" is utf8'):
        loaderx.ingest_sharded(bad, root / "s", workers=1)
    assert not (root / "s").exists()
