"""Read-only handles: ``open(path, readonly=True)`` shares the store with any
number of read-only handles and excludes writers; writes are refused with
``io.UnsupportedOperation`` and nothing on disk changes; every reader (Arrow,
SQL, Parquet, the DataLoader, the CLI) accepts read-only stores."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore, StoreBusy
from loaderx.zsampler import Sampler

N = 120


def files_state(path):
    """Bytes, size and modification time (ns) of every file of a store."""
    out = {}
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        with open(full, "rb") as f:
            out[name] = (f.read(), os.stat(full).st_mtime_ns)
    return out


@pytest.fixture
def stores(root):
    """A dense, a scalar and a ragged store of N records where record i encodes i."""
    ids = np.arange(N, dtype=np.int64)
    img = np.broadcast_to(ids[:, None, None].astype(np.float32), (N, 2, 3)).copy()
    toks = [np.full(i % 7 + 1, i, np.int32) for i in range(N)]
    t = root / "train"
    with DenseStore.create(t / "img", np.float32, (2, 3), codec="raw") as s:
        s.append(img)
    with DenseStore.create(t / "id", np.int64, ()) as s:
        s.append(ids)
    with RaggedStore.create(t / "tok", np.int32) as s:
        s.append(toks)
    return t, img, ids, toks


def open_ro(t):
    return {
        "id": DenseStore.open(t / "id", readonly=True),
        "img": DenseStore.open(t / "img", readonly=True),
        "tok": RaggedStore.open(t / "tok", readonly=True),
    }


def close_all(streams):
    for s in streams.values():
        s.close()


def test_readers_share_and_exclude_writers(stores):
    t, img, ids, toks = stores
    for cls, name in [(DenseStore, "img"), (RaggedStore, "tok")]:
        path = t / name
        a = cls.open(path, readonly=True)
        b = cls.open(path, readonly=True)
        assert a.readonly and b.readonly
        assert len(a) == len(b) == N
        with pytest.raises(StoreBusy, match="busy"):
            cls.open(path)
        a.close()
        with pytest.raises(StoreBusy):
            cls.open(path)
        b.close()
        w = cls.open(path)
        assert not w.readonly
        with pytest.raises(StoreBusy, match="busy"):
            cls.open(path, readonly=True)
        w.close()
        with cls.open(path, readonly=True) as r:
            assert len(r) == N
    with pytest.raises(TypeError, match="readonly must be a bool, got str"):
        DenseStore.open(t / "img", readonly="yes")
    with pytest.raises(ValueError, match="ragged"):
        DenseStore.open(t / "tok", readonly=True)
    with pytest.raises(FileNotFoundError):
        DenseStore.open(t / "missing", readonly=True)


def _assert_refused(call, op, path):
    with pytest.raises(io.UnsupportedOperation) as info:
        call()
    assert isinstance(info.value, ValueError) and isinstance(info.value, OSError)
    msg = str(info.value)
    assert f"cannot {op}" in msg and "read-only" in msg and str(path) in msg, msg
    # The binding adds what a Python caller does about it.
    assert "opened with readonly=True" in msg, msg


def test_writes_are_refused_at_the_call_and_change_nothing(stores):
    pa = pytest.importorskip("pyarrow")
    t, img, ids, toks = stores
    before = {name: files_state(t / name) for name in ("img", "tok")}

    d = DenseStore.open(t / "img", readonly=True)
    _assert_refused(lambda: d.append(img[:2]), "append", t / "img")
    # Refused before the input is looked at.
    _assert_refused(lambda: d.append("not an array"), "append", t / "img")
    _assert_refused(
        lambda: d.append(pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(6, np.float32)), 6)),
        "append",
        t / "img",
    )
    _assert_refused(lambda: d.delete([0]), "delete", t / "img")
    _assert_refused(lambda: d.delete([]), "delete", t / "img")
    _assert_refused(d.compact, "compact", t / "img")
    _assert_refused(d.sync, "sync", t / "img")
    np.testing.assert_array_equal(d[:], img)
    d.close()

    r = RaggedStore.open(t / "tok", readonly=True)
    # The ragged append is refused at the call, not at the next drain.
    _assert_refused(lambda: r.append([np.ones(3, np.int32)]), "append", t / "tok")
    _assert_refused(lambda: r.append(pa.array([[1, 2]], pa.list_(pa.int32()))), "append", t / "tok")
    _assert_refused(lambda: r.delete(0), "delete", t / "tok")
    _assert_refused(r.compact, "compact", t / "tok")
    _assert_refused(r.sync, "sync", t / "tok")
    assert len(r) == N
    assert r.stats()["records"] == N
    np.testing.assert_array_equal(r[N - 1], toks[N - 1])
    r.close()

    assert {name: files_state(t / name) for name in ("img", "tok")} == before


def test_close_of_a_readonly_handle_writes_nothing(stores):
    t, img, ids, toks = stores
    # A writer's close after appending would sync and write the header; a
    # reader's close writes nothing at all (same bytes, same mtimes).
    before = files_state(t / "id")
    for _ in range(2):
        s = DenseStore.open(t / "id", readonly=True)
        np.testing.assert_array_equal(s[[3, 1, 4]], ids[[3, 1, 4]])
        s.close()
        s.close()
    s = DenseStore.open(t / "id", readonly=True)
    del s
    assert files_state(t / "id") == before


def test_every_reader_accepts_readonly_stores(stores, root):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import loaderx.arrow
    import loaderx.parquet

    t, img, ids, toks = stores
    streams = open_ro(t)
    try:
        s = streams["img"]
        # Reads.
        np.testing.assert_array_equal(s[[5, 2, 5]], img[[5, 2, 5]])
        np.testing.assert_array_equal(streams["tok"][7], toks[7])
        # Arrow views.
        chunked = pa.chunked_array(streams["id"])
        assert chunked.to_pylist() == ids.tolist()
        assert streams["id"].to_arrow().to_pylist() == ids.tolist()
        assert streams["tok"].to_arrow([3, 4]).to_pylist() == [
            {"data": toks[i].tolist(), "shape": [len(toks[i])]} for i in (3, 4)
        ]
        table = loaderx.arrow.table(streams).read_all()
        assert table.num_rows == N
        assert table.column("record_id").to_pylist() == list(range(N))
        assert table.column("id").to_pylist() == ids.tolist()
        # SQL.
        res = loaderx.sql("SELECT record_id, id FROM t WHERE id % 10 = 3 ORDER BY id", t=streams)
        assert res.column("id").to_pylist() == [i for i in range(N) if i % 10 == 3]
        # Parquet export.
        out = root / "ro.parquet"
        assert loaderx.parquet.export(streams, out) == N
        back = pq.read_table(out)
        assert back.column("id").to_pylist() == ids.tolist()
        assert [r["data"] for r in back.column("tok").to_pylist()] == [x.tolist() for x in toks]
        # The DataLoader: batches match the sampler, every stream aligned.
        with DataLoader(streams, batch_size=8, mode="iid", seed=3, workers=1) as ld:
            sampler = Sampler(N, 8, Sampler.Mode.IID, seed=3)
            for k in range(5):
                batch = next(ld)
                want = sampler.at(k)
                np.testing.assert_array_equal(batch["id"], want)
                np.testing.assert_array_equal(batch["img"], img[want])
                for i, rec in zip(want, batch["tok"]):
                    np.testing.assert_array_equal(rec, toks[i])
    finally:
        close_all(streams)


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "loaderx", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_reads_stores_held_readonly_by_another_process(stores, root):
    pytest.importorskip("pyarrow")
    t, img, ids, toks = stores
    streams = open_ro(t)  # as a training job would hold them
    try:
        before = {name: files_state(t / name) for name in ("img", "id", "tok")}
        r = cli("info", t / "img", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["length"] == N
        r = cli("stats", t / "tok", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["records"] == N
        r = cli("verify", t / "tok", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["records"] == N
        r = cli("sql", "SELECT count(*) AS n, sum(id) AS s FROM t", "--table", f"t={t}", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["rows"] == [{"n": N, "s": int(ids.sum())}]
        out = root / "cli.parquet"
        r = cli("export", "--out", out, "--table", t, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["rows"] == N
        # The held handles still read, and nothing changed on disk.
        np.testing.assert_array_equal(streams["img"][:], img)
        assert {name: files_state(t / name) for name in ("img", "id", "tok")} == before
    finally:
        close_all(streams)

    # A writer, though, keeps the CLI out (one line on stderr, exit 1).
    with DenseStore.open(t / "img"):
        r = cli("info", t / "img")
        assert r.returncode == 1
        assert "busy" in r.stderr and str(t / "img") in r.stderr
    assert cli("info", t / "img").returncode == 0
