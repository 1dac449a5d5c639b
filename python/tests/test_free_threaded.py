"""Many Python threads on one store, sampler or SQL session.

On a free-threaded interpreter (3.13t or 3.14t,
scripts/test_free_threaded.sh) these threads really run at once; on a GIL
build they interleave at the GIL's switch points, so the tests run there
too. Each checks the data, not just the absence of a crash: every gathered
record is compared with what was written, and after ``close`` every call
raises the store's closed error (ValueError, as on a single thread).
"""

import os
import subprocess
import sys
import sysconfig
import threading

import numpy as np
import pytest

import loaderx
from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore
from loaderx.zsampler import Sampler

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
THREADS = 8


def run_threads(target, n=THREADS, args=()):
    """Runs ``target(i, *args)`` on ``n`` threads started together; re-raises
    the first exception a thread raised."""
    barrier = threading.Barrier(n)
    errors = []

    def body(i):
        try:
            barrier.wait()
            target(i, *args)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def ragged_record(i: int) -> np.ndarray:
    """Record ``i`` of the ragged stores below: its length and values say ``i``."""
    return np.full(i % 7 + 1, i, dtype=np.int64)


# -- the free-threaded build itself ------------------------------------------------


@pytest.mark.skipif(not FREE_THREADED, reason="only a free-threaded interpreter has no GIL")
def test_the_gil_stays_disabled_after_importing_every_module():
    # A fresh interpreter without PYTHON_GIL: an extension that does not
    # declare gil_used=false would turn the GIL back on at import.
    code = """
import importlib, pkgutil, sys
import loaderx
assert not sys._is_gil_enabled(), "import loaderx enabled the GIL"
imported = []
for m in pkgutil.walk_packages(loaderx.__path__, "loaderx."):
    if m.name == "loaderx.__main__":
        continue
    importlib.import_module(m.name)
    imported.append(m.name)
    assert not sys._is_gil_enabled(), f"import {m.name} enabled the GIL"
print(" ".join(imported))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    imported = set(r.stdout.split())
    for name in ["loaderx._native", "loaderx.zrecord", "loaderx.dataloader", "loaderx.arrow"]:
        assert name in imported
    assert "loaderx.ray" in imported and "loaderx.polars" in imported
    # And in this process, after the whole test session's imports so far.
    assert not sys._is_gil_enabled()


# -- gathers ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_many_threads_gather_one_dense_store(root, codec):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 1 << 30, size=(2000, 3, 5), dtype=np.int32)
    with DenseStore.create(root / "d", np.int32, (3, 5), codec=codec) as s:
        s.append(data)
    store = DenseStore.open(root / "d")

    def gather(i):
        r = np.random.default_rng(100 + i)
        for _ in range(150):
            idx = r.integers(0, len(data), size=int(r.integers(1, 64)))
            np.testing.assert_array_equal(store[idx], data[idx])
            j = int(r.integers(0, len(data)))
            np.testing.assert_array_equal(store[j], data[j])
            lo = int(r.integers(0, len(data) - 10))
            np.testing.assert_array_equal(store[lo : lo + 10], data[lo : lo + 10])

    run_threads(gather)
    store.close()


def test_many_threads_gather_one_ragged_store(root):
    n = 1500
    with RaggedStore.create(root / "r", np.int64) as s:
        s.append([ragged_record(i) for i in range(n)])
    store = RaggedStore.open(root / "r")

    def gather(i):
        r = np.random.default_rng(200 + i)
        for _ in range(150):
            idx = r.integers(0, n, size=int(r.integers(1, 48)))
            got = store[idx]
            assert len(got) == len(idx)
            for k, rec in zip(idx, got):
                np.testing.assert_array_equal(rec, ragged_record(int(k)))

    run_threads(gather)
    store.close()


def test_many_threads_share_one_sampler():
    # Every next() takes its own step, and its batch is that step's.
    sampler = Sampler(10_000, 32, "iid", seed=7)
    per_thread = 200
    got = [[] for _ in range(THREADS)]

    def draw(i):
        for _ in range(per_thread):
            got[i].append(sampler.next())

    run_threads(draw)
    assert sampler.step == THREADS * per_thread
    batches = [b for g in got for b in g]
    # Each batch equals exactly one step's batch, and every step was drawn once.
    by_step = {sampler.at(k).tobytes(): k for k in range(THREADS * per_thread)}
    steps = sorted(by_step[b.tobytes()] for b in batches)
    assert steps == list(range(THREADS * per_thread))


def test_many_threads_run_sql_on_one_table(root):
    pytest.importorskip("pyarrow")
    label = np.arange(3000, dtype=np.int64) % 11
    value = np.arange(3000, dtype=np.float64)
    with DenseStore.create(root / "label", np.int64, ()) as s:
        s.append(label)
    with DenseStore.create(root / "value", np.float64, ()) as s:
        s.append(value)
    table = {"label": DenseStore.open(root / "label"), "value": DenseStore.open(root / "value")}

    def query(i):
        for k in range(5):
            want = (i + k) % 11
            r = loaderx.sql(
                f"SELECT sum(value) AS s, count(*) AS n FROM t WHERE label = {want}", t=table
            )
            assert r["n"].to_pylist() == [int((label == want).sum())]
            assert r["s"].to_pylist() == [float(value[label == want].sum())]

    run_threads(query, n=4)
    for s in table.values():
        s.close()


# -- appends while others read ------------------------------------------------------


def test_appending_to_a_ragged_store_while_others_read(root):
    total, batch = 3000, 50
    store = RaggedStore.create(root / "r", np.int64)
    store.append([ragged_record(i) for i in range(batch)])
    done = threading.Event()

    def work(i):
        if i == 0:
            try:
                for lo in range(batch, total, batch):
                    store.append([ragged_record(k) for k in range(lo, lo + batch)])
            finally:
                done.set()
            return
        r = np.random.default_rng(300 + i)
        reads = 0
        while not done.is_set() or reads < 20:
            n = len(store)
            assert n % batch == 0 and batch <= n <= total
            idx = r.integers(0, n, size=16)
            for k, rec in zip(idx, store[idx]):
                np.testing.assert_array_equal(rec, ragged_record(int(k)))
            reads += 1

    run_threads(work)
    assert len(store) == total
    for k, rec in enumerate(store[:]):
        np.testing.assert_array_equal(rec, ragged_record(k))
    store.close()


def test_many_threads_append_to_one_ragged_store_in_order(root):
    # One writer thread serves every appending thread, so each thread's
    # batches land in the order it appended them.
    per_thread, batch = 30, 4
    store = RaggedStore.create(root / "r", np.int64)

    def append(i):
        for b in range(per_thread):
            store.append([np.array([i, b * batch + k], dtype=np.int64) for k in range(batch)])

    run_threads(append)
    records = store[:]
    assert len(records) == THREADS * per_thread * batch
    for i in range(THREADS):
        seq = [int(r[1]) for r in records if int(r[0]) == i]
        assert seq == list(range(per_thread * batch))
    store.close()


def test_appending_to_a_dense_store_while_others_read(root):
    total, batch = 4000, 40
    store = DenseStore.create(root / "d", np.int64, (2,))
    rows = np.stack([np.arange(total), -np.arange(total)], axis=1)
    store.append(rows[:batch])
    done = threading.Event()

    def work(i):
        if i == 0:
            try:
                for lo in range(batch, total, batch):
                    store.append(rows[lo : lo + batch])
            finally:
                done.set()
            return
        r = np.random.default_rng(400 + i)
        while not done.is_set():
            n = len(store)
            idx = r.integers(0, n, size=32)
            np.testing.assert_array_equal(store[idx], rows[idx])

    run_threads(work, n=4)
    np.testing.assert_array_equal(store[:], rows)
    store.close()


# -- close while others work ------------------------------------------------------


def _closed(exc: BaseException) -> bool:
    return isinstance(exc, ValueError) and "closed" in str(exc)


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_closing_while_others_gather(root, kind):
    n = 2000
    if kind == "dense":
        data = np.arange(n * 4, dtype=np.int32).reshape(n, 4)
        with DenseStore.create(root / "s", np.int32, (4,), codec="zstd") as s:
            s.append(data)
        store = DenseStore.open(root / "s")

        def check(idx, got):
            np.testing.assert_array_equal(got, data[idx])
    else:
        with RaggedStore.create(root / "s", np.int64) as s:
            s.append([ragged_record(i) for i in range(n)])
        store = RaggedStore.open(root / "s")

        def check(idx, got):
            for k, rec in zip(idx, got):
                np.testing.assert_array_equal(rec, ragged_record(int(k)))

    gathered = [0] * THREADS
    closed_seen = [False] * THREADS
    started = threading.Barrier(THREADS)  # the closer waits for the first gathers

    def work(i):
        if i == 0:
            started.wait()
            store.close()
            return
        r = np.random.default_rng(500 + i)
        first = True
        while True:
            idx = r.integers(0, n, size=32)
            try:
                got = store[idx]
            except Exception as exc:  # noqa: BLE001 - must be the closed error
                assert _closed(exc), repr(exc)
                closed_seen[i] = True
                break
            check(idx, got)
            gathered[i] += 1
            if first:
                first = False
                started.wait()
        # After close every call raises the closed error.
        for call in (lambda: store[0], lambda: store[idx], lambda: len(store)):
            with pytest.raises(ValueError, match="closed"):
                call()

    run_threads(work)
    assert all(closed_seen[1:]) and all(g > 0 for g in gathered[1:])
    assert store.closed


def _append_until_closed(store, batch_of):
    """Thread 0 closes ``store`` once every other thread has appended once;
    the others append ``batch_of(i, b)`` for b = 0, 1, ... until the closed
    error. Returns each thread's acknowledged batch numbers."""
    acked = [[] for _ in range(THREADS)]
    started = threading.Barrier(THREADS)

    def work(i):
        if i == 0:
            started.wait()
            store.close()
            return
        b = 0
        while True:
            try:
                store.append(batch_of(i, b))
            except Exception as exc:  # noqa: BLE001 - must be the closed error
                assert _closed(exc), repr(exc)
                break
            acked[i].append(b)
            if b == 0:
                started.wait()
            b += 1

    run_threads(work)
    return acked


def test_closing_a_ragged_store_while_others_append_keeps_every_acknowledged_append(root):
    store = RaggedStore.create(root / "r", np.int64)
    acked = _append_until_closed(store, lambda i, b: [np.array([i, b], dtype=np.int64)] * 3)
    with RaggedStore.open(root / "r") as again:
        records = again[:]
    # Exactly the appends that returned are in the store, each whole, in order.
    for i in range(1, THREADS):
        seq = [int(r[1]) for r in records if int(r[0]) == i]
        assert seq == [b for b in acked[i] for _ in range(3)]
    assert len(records) == 3 * sum(len(a) for a in acked)


def test_closing_a_dense_store_while_others_append_keeps_every_acknowledged_append(root):
    store = DenseStore.create(root / "d", np.int64, (2,))
    acked = _append_until_closed(store, lambda i, b: np.array([[i, b]], dtype=np.int64))
    with DenseStore.open(root / "d") as again:
        rows = again[:]
    for i in range(1, THREADS):
        assert [int(r[1]) for r in rows if int(r[0]) == i] == acked[i]
    assert len(rows) == sum(len(a) for a in acked)


def test_a_loader_closing_while_threads_iterate_it(root):
    data = np.arange(5000, dtype=np.int64)
    with DenseStore.create(root / "x", np.int64, ()) as s:
        s.append(data)
    store = DenseStore.open(root / "x")
    loader = DataLoader({"x": store}, batch_size=16, mode="sequential")
    stop = threading.Event()

    def work(i):
        if i == 0:
            stop.wait(0.2)
            loader.close()
            return
        while True:
            try:
                batch = next(loader)
            except Exception as exc:  # noqa: BLE001 - the closed loader's error
                assert _closed(exc), repr(exc)
                break
            x = batch["x"]
            # A sequential batch is 16 consecutive records (mod n).
            assert len(x) == 16 and np.all(np.diff(x) % len(data) == 1)
        stop.set()

    run_threads(work, n=4)
    store.close()
