"""Locks across processes and fork safety (torch DataLoader-style workers)."""

import multiprocessing as mp
import os

import numpy as np
import pytest

from loaderx.zrecord import DenseStore, RaggedStore, StoreBusy

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
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_mutates, args=(dense, q))
    p.start()
    msg = q.get(timeout=TIMEOUT)
    p.join(TIMEOUT)
    assert msg.startswith("ValueError") and "forked child" in msg
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
