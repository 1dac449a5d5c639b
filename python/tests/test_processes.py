"""Locks across processes and fork safety (torch DataLoader-style workers)."""

import multiprocessing as mp
import os

import numpy as np
import pytest

from loaderx.zrecord import DenseStore, RaggedStore, StoreBusy

from conftest import snapshot

TIMEOUT = 60


def _try_open(path, q):
    try:
        DenseStore.open(path).close()
        q.put("opened")
    except StoreBusy as e:
        q.put(f"busy: {e}")
    except Exception as e:  # noqa: BLE001
        q.put(f"other: {type(e).__name__}: {e}")


def test_store_busy_from_another_process(root):
    path = str(root / "d")
    with DenseStore.create(path, np.uint8, (4,)) as ds:
        ds.append(np.zeros((2, 4), np.uint8))
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=_try_open, args=(path, q))
        p.start()
        result = q.get(timeout=TIMEOUT)
        p.join(TIMEOUT)
        assert result.startswith("busy"), result
    # released after close
    q = ctx.Queue()
    p = ctx.Process(target=_try_open, args=(path, q))
    p.start()
    assert q.get(timeout=TIMEOUT) == "opened"
    p.join(TIMEOUT)


def _read_in_child(dense, ragged, q):
    try:
        idx = np.random.default_rng(os.getpid()).integers(0, len(dense), 300)
        a = dense[idx]
        r = ragged[idx[:50]]
        q.put((idx, a, r))
    except Exception as e:  # noqa: BLE001
        q.put(e)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_store_opened_in_parent_read_in_forked_children(root, codec):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 255, (600, 3, 32, 32), dtype=np.uint8)
    recs = [np.arange(i % 17 + 1, dtype=np.int64) for i in range(600)]
    dense = DenseStore.create(root / "d", np.uint8, (3, 32, 32), codec=codec)
    dense.append(data)
    ragged = RaggedStore.create(root / "r", np.int64, codec=codec)
    ragged.append(recs)
    # warm the worker pool in the parent, so children inherit its bookkeeping
    dense[rng.integers(0, 600, 300)]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_read_in_child, args=(dense, ragged, q)) for _ in range(3)]
    for p in procs:
        p.start()
    for _ in procs:
        got = q.get(timeout=TIMEOUT)
        assert not isinstance(got, Exception), got
        idx, a, r = got
        np.testing.assert_array_equal(a, data[idx])
        for i, rec in zip(idx[:50], r):
            np.testing.assert_array_equal(rec, recs[i])
    for p in procs:
        p.join(TIMEOUT)
        assert p.exitcode == 0
    # the parent's handles still work and still own the lock
    np.testing.assert_array_equal(dense[[1, 2]], data[[1, 2]])
    with pytest.raises(StoreBusy):
        DenseStore.open(root / "d")
    dense.close()
    ragged.close()


def _child_mutates(dense, q):
    try:
        dense.append(np.zeros((1, 4), np.uint8))
        q.put("appended")
    except Exception as e:  # noqa: BLE001
        q.put(f"{type(e).__name__}: {e}")
    dense.close()  # must not sync or truncate the parent's store


def test_forked_child_cannot_write_the_parents_store(root):
    dense = DenseStore.create(root / "d", np.uint8, (4,))
    dense.append(np.ones((3, 4), np.uint8))
    before = snapshot(root / "d")  # the 3 records are not synced yet
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_mutates, args=(dense, q))
    p.start()
    msg = q.get(timeout=TIMEOUT)
    p.join(TIMEOUT)
    assert msg.startswith("ValueError") and "forked child" in msg
    # the child's close wrote nothing and left the parent's lock in place
    assert snapshot(root / "d") == before
    with pytest.raises(StoreBusy):
        DenseStore.open(root / "d")
    dense.append(np.ones((2, 4), np.uint8))
    assert len(dense) == 5
    dense.close()
    with DenseStore.open(root / "d") as ds:
        assert len(ds) == 5


def _open_in_spawned_child(path, q):
    try:
        with DenseStore.open(path) as ds:
            q.put(ds[[0, len(ds) - 1]])
    except Exception as e:  # noqa: BLE001
        q.put(e)


def test_store_opened_inside_a_spawned_child(root):
    data = np.arange(40, dtype=np.int16).reshape(10, 4)
    with DenseStore.create(root / "d", np.int16, (4,)) as ds:
        ds.append(data)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_open_in_spawned_child, args=(str(root / "d"), q))
    p.start()
    got = q.get(timeout=TIMEOUT)
    p.join(TIMEOUT)
    assert not isinstance(got, Exception), got
    np.testing.assert_array_equal(got, data[[0, 9]])


# -- the lock and forked children -------------------------------------------
#
# flock belongs to the open file description, which a forked child shares:
# the parent's close must still release the store while the child lives.


def _read_then_wait(dense, q, release):
    try:
        q.put(dense[[3, 7]])
    except Exception as e:  # noqa: BLE001
        q.put(e)
    release.wait(TIMEOUT)  # stay alive, holding the inherited descriptors


def _stop(p, release=None):
    if release is not None:
        release.set()
    p.join(TIMEOUT)
    if p.is_alive():
        p.terminate()
        p.join(TIMEOUT)


def test_parent_reopens_its_store_while_a_forked_child_lives(root):
    path = str(root / "d")
    data = np.arange(40, dtype=np.int32).reshape(10, 4)
    dense = DenseStore.create(path, np.int32, (4,))
    dense.append(data)
    ctx = mp.get_context("fork")
    q, release = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=_read_then_wait, args=(dense, q, release))
    p.start()
    try:
        got = q.get(timeout=TIMEOUT)
        assert not isinstance(got, Exception), got
        np.testing.assert_array_equal(got, data[[3, 7]])
        dense.close()
        assert p.is_alive()
        with DenseStore.open(path) as again:
            np.testing.assert_array_equal(again[:], data)
            # the new handle owns the store, here and for other processes
            with pytest.raises(StoreBusy):
                DenseStore.open(path)
            spawn = mp.get_context("spawn")
            sq = spawn.Queue()
            other = spawn.Process(target=_try_open, args=(path, sq))
            other.start()
            try:
                assert sq.get(timeout=TIMEOUT).startswith("busy")
            finally:
                _stop(other)
            again.append(data[:1])
        assert p.is_alive()
        with DenseStore.open(path) as again:
            assert len(again) == 11
    finally:
        _stop(p, release)
    assert p.exitcode == 0


def _persistent_worker(store, tasks, results):
    # A torch-style persistent worker: serves index batches until told to stop.
    while (idx := tasks.get(timeout=TIMEOUT)) is not None:
        try:
            results.put(store[idx])
        except Exception as e:  # noqa: BLE001
            results.put(e)


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_persistent_forked_worker_outlives_close_and_reopen(root, kind):
    path = str(root / kind)
    if kind == "dense":
        recs = np.arange(64, dtype=np.int64).reshape(16, 4)
        store = DenseStore.create(path, np.int64, (4,), codec="zstd")
        store.append(recs)
        cls = DenseStore
    else:
        recs = [np.arange(i + 1, dtype=np.int64) for i in range(16)]
        store = RaggedStore.create(path, np.int64, codec="zstd")
        store.append(recs)
        cls = RaggedStore

    def check(got, idx):
        assert not isinstance(got, Exception), got
        expected = [recs[i] for i in idx]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)

    ctx = mp.get_context("fork")
    tasks, results = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_persistent_worker, args=(store, tasks, results))
    p.start()
    try:
        for epoch in range(3):
            idx = [epoch, 15 - epoch, 5]
            tasks.put(idx)
            check(results.get(timeout=TIMEOUT), idx)
            # between epochs the parent closes, reopens and appends
            store.close()
            store = cls.open(path)
            store.append(recs[:1])
            assert len(store) == 17 + epoch
            assert p.is_alive()
        # the worker still reads the records it was forked with
        tasks.put([0, 15])
        check(results.get(timeout=TIMEOUT), [0, 15])
        tasks.put(None)
        p.join(TIMEOUT)
        assert p.exitcode == 0
    finally:
        store.close()
        _stop(p)
    with cls.open(path) as s:
        assert len(s) == 19


def test_fork_waits_for_queued_ragged_writes(root):
    """A fork while ragged batches are queued or being written waits for the
    writer: the child sees every batch appended before the fork, complete,
    and its own appends are refused without touching the parent's queue."""
    rs = RaggedStore.create(root / "r", np.int64, codec="zstd")
    rng = np.random.default_rng(3)
    batches = [
        [rng.integers(0, 1 << 40, size=int(k), dtype=np.int64) for k in rng.integers(1, 4000, 64)]
        for _ in range(12)
    ]
    for b in batches:
        rs.append(b)  # returns once queued: the writer is still busy
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        try:
            n = len(rs._native)  # the native length: no draining, no queue
            ok = all(
                np.array_equal(rs._native.gather(np.array([i * 64 + 63]))[0], b[63])
                for i, b in enumerate(batches)
            )
            try:
                rs.append([np.ones(3, np.int64)])
                refused = "no"
            except ValueError as exc:
                refused = "forked child" in str(exc) and "yes"
            os.write(w, f"{n} {ok} {refused}".encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        msg = f.read()
    os.waitpid(pid, 0)
    assert msg == f"{64 * len(batches)} True yes"
    rs.append([np.ones(3, np.int64)])  # the parent's queue still works
    assert len(rs) == 64 * len(batches) + 1
    rs.close()
