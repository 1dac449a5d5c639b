"""DenseStore / RaggedStore behaviour through the public Python API."""

import os
import pathlib
import threading

import numpy as np
import pytest

from loaderx.utils import train_dict
from loaderx.zrecord import DICT_TIERS, DenseStore, RaggedStore

from conftest import DTYPES, random_records

CODECS = ["raw", "zstd", "zstd_dict"]


def dict_for(records):
    return train_dict(records, tier="fast")


def make_dense(path, data, codec):
    kwargs = {"dict_bytes": dict_for(data)} if codec == "zstd_dict" else {}
    ds = DenseStore.create(path, data.dtype, data.shape[1:], codec=codec, **kwargs)
    ds.append(data)
    return ds


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_dense_round_trip_every_dtype(root, codec, dtype):
    rng = np.random.default_rng(1)
    data = random_records(dtype, (300, 3, 5), rng)
    with make_dense(root / "s", data, codec):
        pass
    with DenseStore.open(root / "s") as ds:
        assert len(ds) == 300
        assert ds.dtype == np.dtype(dtype)
        assert ds.item_shape == (3, 5)
        assert ds.codec == codec
        idx = rng.integers(0, 300, 500)
        out = ds[idx]
        assert out.dtype == np.dtype(dtype) and out.shape == (500, 3, 5)
        np.testing.assert_array_equal(out, data[idx])
        np.testing.assert_array_equal(ds[:], data)
        np.testing.assert_array_equal(ds[7], data[7])


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_ragged_round_trip_every_dtype(root, codec, dtype):
    rng = np.random.default_rng(2)
    shapes = [(int(rng.integers(1, 40)),) for _ in range(60)] + [(), (2, 3, 4), (1,)] * 4
    records = [random_records(dtype, s, rng) for s in shapes]
    kwargs = {"dict_bytes": dict_for(records)} if codec == "zstd_dict" else {}
    with RaggedStore.create(root / "r", dtype, codec=codec, **kwargs) as rs:
        rs.append(records)
    with RaggedStore.open(root / "r") as rs:
        assert len(rs) == len(records)
        idx = rng.integers(0, len(records), 200)
        out = rs[idx]
        assert isinstance(out, list) and len(out) == 200
        for i, r in zip(idx, out):
            assert r.dtype == np.dtype(dtype)
            assert r.shape == records[i].shape
            np.testing.assert_array_equal(r, records[i])
        one = rs[len(records) - 1]
        assert isinstance(one, np.ndarray) and one.shape == records[-1].shape


def test_indexing_forms(root):
    data = np.arange(10 * 4, dtype=np.int16).reshape(10, 4)
    with make_dense(root / "d", data, "zstd") as ds:
        np.testing.assert_array_equal(ds[0, 5, 2], data[[0, 5, 2]])
        np.testing.assert_array_equal(ds[(1, 1)], data[[1, 1]])
        np.testing.assert_array_equal(ds[[9, 0]], data[[9, 0]])
        for dt in (np.int8, np.uint8, np.int32, np.uint32, np.uint64, np.int64):
            np.testing.assert_array_equal(ds[np.array([3, 4], dtype=dt)], data[[3, 4]])
        np.testing.assert_array_equal(ds[2:8:3], data[2:8:3])
        np.testing.assert_array_equal(ds[::-1], data[::-1])
        np.testing.assert_array_equal(ds[-3:], data[-3:])
        np.testing.assert_array_equal(ds[8:2:-2], data[8:2:-2])
        mask = data[:, 0] % 8 == 0
        np.testing.assert_array_equal(ds[mask], data[mask])
        np.testing.assert_array_equal(ds[np.int64(4)], data[4])
        np.testing.assert_array_equal(ds[np.array(4)], data[4])
        empty = ds[[]]
        assert empty.shape == (0, 4) and empty.dtype == np.int16
        assert ds[5:5].shape == (0, 4)
        assert ds[np.zeros(10, dtype=bool)].shape == (0, 4)


def test_ragged_indexing_forms_and_empty(root):
    recs = [np.full(i + 1, i, dtype=np.uint8) for i in range(6)]
    with RaggedStore.create(root / "r", np.uint8) as rs:
        rs.append(recs)
        assert rs[[]] == []
        assert rs[3:3] == []
        out = rs[::-2]
        assert [r.tolist() for r in out] == [recs[i].tolist() for i in (5, 3, 1)]
        mask = np.array([True, False] * 3)
        assert [len(r) for r in rs[mask]] == [1, 3, 5]
        assert rs[2].tolist() == [2, 2, 2]


def test_scalar_records_return_numpy_scalars(root):
    labels = np.arange(20, dtype=np.int64) * 3
    with DenseStore.create(root / "l", labels.dtype, labels.shape[1:]) as ds:
        ds.append(labels)
        assert ds.item_shape == ()
        v = ds[4]
        assert isinstance(v, np.int64) and v == 12
        np.testing.assert_array_equal(ds[[1, 2]], labels[[1, 2]])
        assert ds[[1, 2]].shape == (2,)


def test_zero_d_ragged_records_keep_their_shape(root):
    recs = [np.float32(1.5).reshape(()), np.array([1.0, 2.0], dtype=np.float32)]
    with RaggedStore.create(root / "r", np.float32) as rs:
        rs.append(recs)
        a, b = rs[0, 1]
        assert a.shape == () and a == 1.5
        assert b.shape == (2,)


def test_dtype_spellings_and_paths(root):
    for i, spelling in enumerate(["float32", np.float32, "<f4", "f4", np.dtype("=f4")]):
        path = pathlib.Path(root) / "nested" / f"s{i}"
        with DenseStore.create(path, spelling, [2]) as ds:
            assert ds.dtype == np.float32
            assert ds.path == os.fspath(path)
    with DenseStore.create(str(root / "as_str"), "?", ()) as ds:
        assert ds.dtype == np.bool_


def test_fresh_store_layout_and_close_trims(root):
    path = root / "fresh"
    ds = DenseStore.create(path, np.uint8, (4,), codec="raw")
    assert sorted(os.listdir(path)) == ["data.zr", "meta.zr"]
    assert os.path.getsize(path / "meta.zr") == 4096
    assert os.path.getsize(path / "data.zr") == 0
    ds.close()
    with DenseStore.open(path) as ds:
        assert len(ds) == 0
        ds.append(np.ones((3, 4), np.uint8))
    assert os.path.getsize(path / "data.zr") == 12
    assert os.path.getsize(path / "meta.zr") == 4096 + 3 * 16


@pytest.mark.parametrize("codec", CODECS)
def test_delete_compact_stats(root, codec):
    rng = np.random.default_rng(3)
    data = random_records(np.float32, (50, 8), rng)
    model = list(data)
    with make_dense(root / "d", data, codec) as ds:
        st = ds.stats()
        assert set(st) == {"records", "live_bytes", "data_bytes", "reclaimable", "raw_records"}
        assert st["records"] == 50 and st["reclaimable"] == 0
        ds.delete(np.arange(0, 50, 2))
        for i in sorted(range(0, 50, 2), reverse=True):
            model[i] = model[-1]
            model.pop()
        assert len(ds) == 25
        np.testing.assert_array_equal(ds[:], np.array(model))
        ds.delete([3, 3, 3])  # duplicates delete once
        model[3] = model[-1]
        model.pop()
        assert len(ds) == 24
        st = ds.stats()
        assert st["reclaimable"] > 0
        assert st["data_bytes"] == st["live_bytes"] + st["reclaimable"]
        before = ds[:]
        ds.compact()
        np.testing.assert_array_equal(ds[:], before)
        st = ds.stats()
        assert st["reclaimable"] == 0 and st["records"] == 24
    assert os.path.getsize(root / "d" / "data.zr") == st["data_bytes"]
    assert os.path.getsize(root / "d" / "meta.zr") == 4096 + 24 * 16
    with DenseStore.open(root / "d") as ds:
        np.testing.assert_array_equal(ds[:], np.array(model))


def test_ragged_delete_slice_and_mask(root):
    recs = [np.arange(i + 1, dtype=np.int32) for i in range(10)]
    with RaggedStore.create(root / "r", np.int32) as rs:
        rs.append(recs)
        rs.delete(slice(0, 4))  # 0,1,2,3 -> swap-last in descending order
        assert len(rs) == 6
        mask = np.zeros(6, dtype=bool)
        mask[0] = True
        rs.delete(mask)
        assert len(rs) == 5
        lengths = sorted(len(r) for r in rs[:])
        assert lengths == sorted(len(r) for r in rs[list(range(5))])


def test_append_in_batches_and_single_record(root):
    images = np.random.default_rng(0).integers(0, 255, (100, 28, 28), dtype=np.uint8)
    ds = DenseStore.create(root / "mnist" / "x", dtype=np.uint8, item_shape=(28, 28))
    for i in range(0, 100, 32):
        assert ds.append(images[i : i + 32]) is None
    ds.append(images[5][None])
    assert len(ds) == 101
    np.testing.assert_array_equal(ds[100], images[5])
    np.testing.assert_array_equal(ds[:4], images[:4])
    ds.append(np.empty((0, 28, 28), np.uint8))  # empty append is a no-op
    assert len(ds) == 101
    ds.close()


def test_non_contiguous_inputs(root):
    base = np.arange(200, dtype=np.int32).reshape(20, 10)
    with DenseStore.create(root / "d", np.int32, (5,)) as ds:
        ds.append(base[:, ::2])
        np.testing.assert_array_equal(ds[:], base[:, ::2])
    with RaggedStore.create(root / "r", np.int32) as rs:
        rs.append([base[:, 1], base[3, ::3], base.T])
        out = rs[:]
        np.testing.assert_array_equal(out[0], base[:, 1])
        np.testing.assert_array_equal(out[1], base[3, ::3])
        np.testing.assert_array_equal(out[2], base.T)


def test_ragged_accepts_generators_and_2d_arrays(root):
    with RaggedStore.create(root / "r", np.int64) as rs:
        rs.append(np.arange(k, dtype=np.int64) + 1 for k in range(1, 5))
        rs.append(np.ones((3, 7), np.int64))  # rows are records
        assert len(rs) == 7
        assert rs[6].shape == (7,)


def test_ragged_writer_queue_is_drained_before_reads(root):
    rs = RaggedStore.create(root / "r", np.uint16)
    for k in range(20):
        rs.append([np.full((k % 5) + 1, k, np.uint16)] * 10)
    # len and reads drain the queue first
    assert len(rs) == 200
    assert rs[199].tolist() == [19] * 5
    rs.close()


WRITER_FAILS = r"""
import os, resource, signal, sys
import numpy as np
import pytest
from loaderx import RaggedStore

# A real write failure: past RLIMIT_FSIZE, pwrite fails with EFBIG (the
# signal it would also raise is ignored).
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
rs = RaggedStore.create(sys.argv[1], np.uint8, codec="raw")
rs.append([np.ones(3, np.uint8)])
assert len(rs) == 1
big = [np.ones(1 << 20, np.uint8)]
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))
rs.append(big)  # queued; fails in the writer
with pytest.raises(OSError, match="File too large"):
    len(rs)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
assert len(rs) == 1  # the error was reported once; the store still works
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))
rs.append(big)
import time
deadline = time.monotonic() + 30
while time.monotonic() < deadline:  # let the writer take (and fail) the batch
    try:
        rs._native.raise_pending_write()
    except OSError as exc:
        pending = exc
        break
    time.sleep(0.01)
else:
    raise AssertionError("the writer never failed")
assert "File too large" in str(pending)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
rs.append(big)
rs.append(big)  # the second append raised nothing: the error was taken once
assert len(rs) == 3
rs.close()
print("ok")
"""


def test_ragged_writer_error_surfaces_at_next_call(root):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", WRITER_FAILS, str(root / "r")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_ragged_writer_error_surfaces_at_the_next_append(root):
    """The other half: a failed queued batch is raised by the next append
    (not only by a draining call), and that append is not queued."""
    import subprocess
    import sys

    code = r"""
import resource, signal, sys, time
import numpy as np
import pytest
from loaderx import RaggedStore
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
rs = RaggedStore.create(sys.argv[1], np.uint8, codec="raw")
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))
rs.append([np.ones(1 << 20, np.uint8)])
time.sleep(0.5)  # the writer takes and fails it meanwhile, or the next append waits
with pytest.raises(OSError, match="File too large"):
    rs.append([np.ones(2, np.uint8)])
    rs.append([np.ones(2, np.uint8)])  # at the latest, once the slot frees
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
assert len(rs) == 0
rs.close()
print("ok")
"""
    r = subprocess.run(
        [sys.executable, "-c", code, str(root / "r")], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_context_manager_and_idempotent_close(root):
    ds = DenseStore.create(root / "d", np.uint8, (2,))
    with ds as same:
        assert same is ds
    assert ds.closed
    ds.close()
    ds.close()
    assert "closed" in repr(ds)


def test_repr(root):
    with DenseStore.create(root / "d", np.float32, (2, 4), codec="raw") as ds:
        ds.append(np.zeros((3, 2, 4), np.float32))
        r = repr(ds)
        for part in ("DenseStore", "dense", "float32", "(2, 4)", "raw", "len=3", "d'"):
            assert part in r
    with RaggedStore.create(root / "r", np.int32) as rs:
        r = repr(rs)
        for part in ("RaggedStore", "ragged", "int32", "zstd", "len=0"):
            assert part in r


def test_concurrent_gathers_from_threads(root):
    rng = np.random.default_rng(5)
    data = random_records(np.uint8, (400, 64, 64), rng)
    errors = []
    with make_dense(root / "d", data, "zstd") as ds:

        def worker(seed):
            r = np.random.default_rng(seed)
            try:
                for _ in range(20):
                    idx = r.integers(0, 400, 64)
                    np.testing.assert_array_equal(ds[idx], data[idx])
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_gathered_arrays_are_writeable_and_independent(root):
    data = np.arange(24, dtype=np.int32).reshape(6, 4)
    with make_dense(root / "d", data, "raw") as ds:
        a = ds[[0, 1]]
        a[:] = -1
        np.testing.assert_array_equal(ds[[0, 1]], data[:2])


def test_dict_tiers_and_train_dict(root):
    assert list(DICT_TIERS) == ["fast", "balanced", "max"]
    sizes = [t.dict_size for t in DICT_TIERS.values()]
    assert sizes == sorted(sizes)
    rng = np.random.default_rng(7)
    base = rng.integers(0, 50, 256).astype(np.int32)
    recs = np.stack([np.roll(base, i) + (i % 3) for i in range(4000)])
    d = train_dict(recs, tier="balanced")
    assert isinstance(d, bytes) and 0 < len(d) <= DICT_TIERS["balanced"].dict_size
    # a smaller sample trains a proportionally smaller dictionary
    small = train_dict(recs[:40], tier="max")
    assert len(small) <= recs[:40].nbytes // 10
    # iterable and store sources train too
    assert isinstance(train_dict(iter(list(recs[:500])), tier="fast"), bytes)
    with DenseStore.create(root / "s", np.int32, (256,)) as ds:
        ds.append(recs)
        from_store = train_dict(ds, tier="fast")
    assert isinstance(from_store, bytes)
    with DenseStore.create(root / "dict", np.int32, (256,), codec="zstd_dict", dict_bytes=d) as ds:
        ds.append(recs)
        np.testing.assert_array_equal(ds[:], recs)
    assert open(root / "dict" / "dict.zr", "rb").read() == d


def test_train_dict_rejects_tiny_samples_and_bad_tiers():
    with pytest.raises(ValueError, match=r"at least 8 records.*loaderx\.train_dict more"):
        train_dict(np.zeros((3, 10), np.uint8))
    with pytest.raises(ValueError, match="tier must be one of"):
        train_dict(np.zeros((100, 100), np.uint8), tier="huge")
    with pytest.raises(TypeError, match="source must be"):
        train_dict(42)


def test_recode_example_preserves_order(root):
    data = np.random.default_rng(3).integers(0, 9, (500, 32)).astype(np.int16)
    with DenseStore.create(root / "src", data.dtype, data.shape[1:]) as s:
        s.append(data)
    with (
        DenseStore.open(root / "src") as s,
        DenseStore.create(
            root / "dst",
            dtype=s.dtype,
            item_shape=s.item_shape,
            codec="zstd_dict",
            dict_bytes=train_dict(s),
        ) as d,
    ):
        d.append(s[:])
    with DenseStore.open(root / "dst") as d:
        assert d.codec == "zstd_dict"
        np.testing.assert_array_equal(d[:], data)
