"""DataLoader: alignment, order, resume, subsets, sharding, lifecycle."""

import multiprocessing as mp
import os
import threading
import time

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore
from loaderx.zsampler import Sampler

N = 500


def native_threads():
    return len(os.listdir("/proc/self/task"))


def native_threads_settle(expected, timeout=5.0):
    """The native thread count once it reaches ``expected`` (or the timeout):
    a joined thread can stay listed in /proc/self/task for an instant after
    join returns."""
    deadline = time.monotonic() + timeout
    while (n := native_threads()) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return n


@pytest.fixture
def streams(root):
    """Three streams where record i encodes i."""
    ids = np.arange(N, dtype=np.int64)
    img = np.broadcast_to(ids[:, None, None].astype(np.float32), (N, 4, 4)).copy()
    with DenseStore.create(root / "id", np.int64, ()) as s:
        s.append(ids)
    with DenseStore.create(root / "img", np.float32, (4, 4), codec="raw") as s:
        s.append(img)
    with RaggedStore.create(root / "tok", np.int32) as s:
        s.append(np.full(i % 13 + 1, i, np.int32) for i in range(N))
    out = {
        "id": DenseStore.open(root / "id"),
        "img": DenseStore.open(root / "img"),
        "tok": RaggedStore.open(root / "tok"),
    }
    yield out
    for s in out.values():
        s.close()


def check_aligned(batch):
    ids = batch["id"]
    assert (batch["img"] == ids[:, None, None]).all()
    for i, t in zip(ids, batch["tok"]):
        assert t.shape == (i % 13 + 1,) and (t == i).all()


@pytest.mark.parametrize("mode", ["sequential", "iid", "cyclic", Sampler.Mode.CYCLIC])
def test_streams_aligned_and_batches_follow_the_sampler(streams, mode):
    with DataLoader(streams, batch_size=32, mode=mode, seed=4) as loader:
        m = Sampler.Mode(mode) if isinstance(mode, str) else mode
        s = Sampler(N, 32, m, seed=4)
        for k in range(30):
            batch = next(loader)
            assert list(batch) == ["id", "img", "tok"]
            check_aligned(batch)
            np.testing.assert_array_equal(batch["id"], s.at(k))
        assert loader.state_dict() == {"step": 30, "seed": 4, "mode": m.value, "batch_size": 32}


def test_unequal_lengths_raise(streams, root):
    with DenseStore.create(root / "short", np.int64, ()) as s:
        s.append(np.arange(10))
    short = DenseStore.open(root / "short")
    with pytest.raises(ValueError, match=r"id=500.*short=10"):
        DataLoader({"id": streams["id"], "short": short})
    short.close()


def test_resume_is_bit_exact_after_1000_steps(streams):
    with DataLoader(
        streams, batch_size=16, mode="cyclic", seed=9, workers=2, transform=lambda b: b
    ) as a:
        for _ in range(1000):
            next(a)
        state = a.state_dict()
        expect = [next(a) for _ in range(5)]
    assert state["step"] == 1000
    with DataLoader(
        streams, batch_size=16, mode=state["mode"], seed=state["seed"], start_step=state["step"]
    ) as b:
        for e in expect:
            got = next(b)
            np.testing.assert_array_equal(got["id"], e["id"])
            np.testing.assert_array_equal(got["img"], e["img"])
            assert all(np.array_equal(x, y) for x, y in zip(got["tok"], e["tok"]))


def slow_identity(batch):
    # uneven work so transform threads finish out of order
    time.sleep(0.001 * (int(batch["id"][0]) % 5))
    return batch["id"].copy()


def test_order_identical_for_1_and_4_workers(streams):
    runs = []
    for workers in (1, 4):
        with DataLoader(
            streams,
            batch_size=8,
            mode="iid",
            seed=2,
            transform=slow_identity,
            workers=workers,
            prefetch=3,
        ) as loader:
            runs.append([next(loader) for _ in range(60)])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_threads_back_to_baseline_after_close(streams):
    # warm the store worker pool so it is part of the baseline
    streams["img"][np.arange(200)]
    py_before, native_before = threading.active_count(), native_threads()
    loader = DataLoader(streams, batch_size=8, transform=lambda b: b, workers=3)
    next(loader)
    assert threading.active_count() > py_before
    assert native_threads() > native_before
    loader.close()
    loader.close()  # idempotent
    assert threading.active_count() == py_before
    assert native_threads_settle(native_before) == native_before
    with pytest.raises(ValueError, match="closed"):
        next(loader)
    assert loader.state_dict()["step"] == 1
    assert "closed" in repr(loader)


def test_subset_sampling(streams):
    subset = np.array([3, 30, 300, 499, 7, 77], dtype=np.uint64)
    with DataLoader(streams, batch_size=3, mode="cyclic", indices=subset) as loader:
        seen = np.concatenate([next(loader)["id"] for _ in range(2)])
    assert sorted(seen.tolist()) == sorted(subset.tolist())
    with DataLoader(streams, batch_size=4, mode="iid", indices=[5, 6]) as loader:
        assert set(next(loader)["id"].tolist()) <= {5, 6}
    with pytest.raises(ValueError, match="empty"):
        DataLoader(streams, indices=[])
    with pytest.raises(IndexError, match="out of range"):
        DataLoader(streams, indices=[0, N])
    with pytest.raises(TypeError, match="integers"):
        DataLoader(streams, indices=[0.5, 1.5])
    with pytest.raises(ValueError, match="exceeds"):
        DataLoader(streams, batch_size=10, indices=[1, 2, 3])


@pytest.mark.parametrize("mode", ["cyclic", "iid", "sequential"])
def test_rank_sharding_union_is_the_global_batch(streams, mode):
    world, B = 4, 8
    loaders = [
        DataLoader(streams, batch_size=B, mode=mode, seed=1, rank=r, world_size=world)
        for r in range(world)
    ]
    glob = Sampler(N, B * world, Sampler.Mode(mode), seed=1)
    for k in range(10):
        parts = [next(ld)["id"] for ld in loaders]
        assert all(len(p) == B for p in parts)
        np.testing.assert_array_equal(np.concatenate(parts), glob.at(k))
        if mode == "cyclic":
            assert len(np.unique(np.concatenate(parts))) == B * world  # disjoint
    for ld in loaders:
        ld.close()
    with pytest.raises(ValueError, match="rank"):
        DataLoader(streams, rank=2, world_size=2)


def test_transform_error_surfaces_at_the_failing_step(streams):
    def transform(batch):
        if batch["id"][0] == 5 * 10:  # sequential, batch 10: step 5
            raise KeyError("bad record")
        return batch["id"]

    with DataLoader(
        streams, batch_size=10, mode="sequential", transform=transform, workers=3
    ) as loader:
        for k in range(5):
            assert next(loader)[0] == k * 10
        with pytest.raises(KeyError, match="bad record") as info:
            next(loader)
        assert any(fr.name == "transform" for fr in info.traceback)
        assert next(loader)[0] == 60  # the loader goes on
        assert loader.state_dict()["step"] == 7


def test_inline_transform_with_zero_workers(streams):
    with DataLoader(
        streams, batch_size=5, mode="sequential", workers=0, transform=lambda b: int(b["id"].sum())
    ) as loader:
        assert next(loader) == sum(range(5))
        assert next(loader) == sum(range(5, 10))


def test_bad_arguments(streams):
    with pytest.raises(ValueError, match="'sequential', 'iid' or 'cyclic'"):
        DataLoader(streams, mode="shuffle")
    with pytest.raises(TypeError, match="streams"):
        DataLoader([streams["id"]])
    with pytest.raises(TypeError, match="DenseStore or RaggedStore"):
        DataLoader({"x": np.zeros(3)})
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(streams, batch_size=0)
    with pytest.raises(ValueError, match="output"):
        DataLoader(streams, output="torch")
    with pytest.raises(ValueError, match="exceeds"):
        DataLoader(streams, batch_size=N + 1, mode="cyclic")
    with pytest.raises(TypeError, match="transform"):
        DataLoader(streams, transform=3)


def test_closed_stream_surfaces_at_next(streams, root):
    loader = DataLoader(streams, batch_size=4, prefetch=1)
    next(loader)
    streams["img"].close()
    with pytest.raises(ValueError, match="closed"):
        for _ in range(5):
            next(loader)
    loader.close()


def _child_uses_loader(loader, streams, q):
    try:
        out = []
        # a loader inherited from the parent
        for _ in range(3):
            out.append(next(loader)["id"])
        # and one created inside the child
        with DataLoader(
            streams, batch_size=8, mode="sequential", workers=2, transform=lambda b: b
        ) as mine:
            b = next(mine)
            check_aligned(b)
            out.append(b["id"])
        q.put(out)
    except Exception as e:  # noqa: BLE001
        q.put(e)


def test_loader_in_a_forked_worker_neither_hangs_nor_corrupts(streams):
    loader = DataLoader(
        streams, batch_size=8, mode="cyclic", seed=3, workers=2, transform=lambda b: b, prefetch=4
    )
    first = next(loader)  # parent threads running and prefetching
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_child_uses_loader, args=(loader, streams, q)) for _ in range(2)]
    for p in procs:
        p.start()
    expect = Sampler(N, 8, Sampler.Mode.CYCLIC, seed=3)
    for _ in procs:
        got = q.get(timeout=60)
        assert not isinstance(got, Exception), got
        for k, ids in enumerate(got[:3]):
            np.testing.assert_array_equal(ids, expect.at(1 + k))
        np.testing.assert_array_equal(got[3], np.arange(8))
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    # the parent goes on where it was
    np.testing.assert_array_equal(first["id"], expect.at(0))
    np.testing.assert_array_equal(next(loader)["id"], expect.at(1))
    loader.close()


def _mapped_kib(path):
    """Resident KiB of this process's mappings of ``path`` (from smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                inside = line.rstrip().endswith(str(path))
            elif inside and head == "Rss:":
                total += int(line.split()[1])
    return total


def test_loader_leaves_large_records_unmapped(root):
    # 96 KiB records: direct gathers copy them out of the mapping of
    # data.zr, the endless loader with positional reads, so a long run
    # does not map the whole store into the process.
    n, width = 64, 96 << 10
    recs = (np.arange(n, dtype=np.uint64)[:, None] * 7 + np.arange(width)) % 251
    recs = recs.astype(np.uint8)
    with DenseStore.create(root / "big", np.uint8, (width,), codec="raw") as s:
        s.append(recs)
    data = (root / "big" / "data.zr").resolve()
    with DenseStore.open(root / "big") as s:
        with DataLoader({"x": s}, batch_size=16, mode="iid", seed=3) as dl:
            for _ in range(8):
                batch = next(dl)
                assert batch["x"].shape == (16, width)
            assert _mapped_kib(data) == 0
        idx = np.arange(n)[::-1]
        assert np.array_equal(s[idx], recs[idx])
        assert _mapped_kib(data) >= n * 96


def test_blocked_loader_follows_the_sampler_across_ranks_subsets_and_resume(streams):
    world, B, S = 2, 8, 25
    glob = Sampler(N, B * world, "blocked", seed=3, block_size=S)
    loaders = [
        DataLoader(
            streams, batch_size=B, mode="blocked", block_size=S, seed=3, rank=r, world_size=world
        )
        for r in range(world)
    ]
    for k in range(40):
        parts = [next(ld) for ld in loaders]
        for p in parts:
            check_aligned(p)
        np.testing.assert_array_equal(np.concatenate([p["id"] for p in parts]), glob.at(k))
    state = loaders[0].state_dict()
    assert state == {"step": 40, "seed": 3, "mode": "blocked", "batch_size": B, "block_size": S}
    for ld in loaders:
        ld.close()
    with DataLoader(
        streams, batch_size=B, mode="blocked", block_size=S, seed=3, start_step=40, world_size=2
    ) as resumed:
        np.testing.assert_array_equal(next(resumed)["id"], glob.at(40)[:B])
    # Over a subset, blocks are runs of the subset's positions.
    subset = np.arange(100, 300, dtype=np.uint64)
    sub = Sampler(len(subset), 10, "blocked", seed=1, block_size=20)
    with DataLoader(
        streams, batch_size=10, mode="blocked", block_size=20, seed=1, indices=subset
    ) as loader:
        for k in range(20):
            np.testing.assert_array_equal(next(loader)["id"], subset[sub.at(k)])
    with pytest.raises(ValueError, match="block_size must be given"):
        DataLoader(streams, mode="blocked")
    with pytest.raises(ValueError, match="block_size applies only"):
        DataLoader(streams, mode="iid", block_size=4)
    with pytest.raises(ValueError, match="blocked sampling draws without replacement"):
        DataLoader(streams, batch_size=N + 1, mode="blocked", block_size=4)


def _augment(batch, info):
    """A random augmentation from both generators, and what it was given."""
    noise = info.rng.standard_normal(len(batch["id"]))
    per_record = np.array([np.random.default_rng(s).random() for s in info.record_seeds])
    return {
        "id": batch["id"],
        "noise": noise,
        "per_record": per_record,
        "info": (info.step, info.rank, info.indices.copy()),
    }


@pytest.mark.parametrize("workers", [0, 1, 2, 4])
def test_two_parameter_transforms_get_info_and_are_exact_on_any_worker_count(streams, workers):
    def run(start, steps, **kw):
        with DataLoader(
            streams, batch_size=16, transform=_augment, seed=5, workers=workers, **kw
        ) as loader:
            if start:
                loader.load_state_dict({"step": start, "seed": 5, "mode": "cyclic"})
            return [next(loader) for _ in range(steps)]

    full = run(0, 12)
    for k, out in enumerate(full):
        step, rank, idx = out["info"]
        assert (step, rank) == (k, 0)
        np.testing.assert_array_equal(idx, out["id"])  # the rows' record indices
    # Resumed mid-run: the same augmentations, bit for bit.
    for a, b in zip(full[7:], run(7, 5)):
        for key in ("id", "noise", "per_record"):
            assert a[key].tobytes() == b[key].tobytes(), key
    # The generators differ from step to step, and per record.
    assert not np.array_equal(full[0]["noise"], full[1]["noise"])
    assert len(np.unique(full[0]["per_record"])) == 16


def test_record_seeds_are_a_pure_function_of_seed_step_and_record():
    from loaderx.dataloader import record_seeds

    a = record_seeds(1, 2, [5, 6, 7])
    assert a.dtype == np.uint64 and len(np.unique(a)) == 3
    np.testing.assert_array_equal(a[1:], record_seeds(1, 2, [6, 7]))
    assert not np.array_equal(a, record_seeds(1, 3, [5, 6, 7]))
    assert not np.array_equal(a, record_seeds(2, 2, [5, 6, 7]))


def test_record_seeds_keep_their_values():
    # The values transforms have always received (a pure-Python SplitMix64
    # computed them before the core did): changing one breaks reproducible
    # augmentation of old runs.
    from loaderx._transform import _row_record_seeds, record_seeds

    top = (1 << 64) - 1
    cases = [
        ((0, 0, 0), 7227316853636931228),
        ((42, 7, 12345), 12846225030386664958),
        ((top, top, top), 12325762695725110160),
        ((7, 1 << 40, (1 << 63) - 1), 8596869941854348508),
    ]
    for (seed, step, index), want in cases:
        assert record_seeds(seed, step, [index]).tolist() == [want]
    # A step wraps modulo 2^64; a seed per row (a mixture's sources).
    assert record_seeds(top, -1, [top]).tolist() == [12325762695725110160]
    seeds = np.array([0, 42], dtype=np.uint64)
    got = _row_record_seeds(seeds, 7, np.array([12345, 12345], dtype=np.uint64))
    assert got.tolist() == [record_seeds(0, 7, [12345])[0], 12846225030386664958]
    with pytest.raises(ValueError, match="seed"):
        record_seeds(-1, 0, [1])


def test_info_carries_each_ranks_rows(streams):
    seen = []
    loaders = [
        DataLoader(
            streams,
            batch_size=4,
            seed=2,
            rank=r,
            world_size=2,
            workers=0,
            transform=lambda b, info: (info.rank, info.indices.copy(), b["id"]),
        )
        for r in range(2)
    ]
    for ld in loaders:
        rank, idx, ids = next(ld)
        np.testing.assert_array_equal(idx, ids)
        seen.append((rank, idx))
        ld.close()
    assert [r for r, _ in seen] == [0, 1]
    glob = Sampler(N, 8, "cyclic", seed=2).at(0)
    np.testing.assert_array_equal(np.concatenate([i for _, i in seen]), glob)


def test_load_state_dict_resumes_exactly_and_refuses_another_loaders_state(streams):
    with DataLoader(streams, batch_size=8, seed=3) as loader:
        for _ in range(5):
            next(loader)
        state = loader.state_dict()
        want = [next(loader)["id"] for _ in range(3)]
        loader.load_state_dict(state)
        assert loader.step == 5
        for w in want:
            np.testing.assert_array_equal(next(loader)["id"], w)
        with pytest.raises(ValueError, match=r"state\['seed'\] is 4, but this loader's seed is 3"):
            loader.load_state_dict({**state, "seed": 4})
        with pytest.raises(ValueError, match=r"state\['mode'\] is 'iid'"):
            loader.load_state_dict({**state, "mode": "iid"})
        with pytest.raises(ValueError, match="state has no 'step'"):
            loader.load_state_dict({"seed": 3, "mode": "cyclic"})
        with pytest.raises(TypeError, match="mapping"):
            loader.load_state_dict([("step", 1)])
        assert loader.step == 8  # nothing changed by the refusals
    with pytest.raises(ValueError, match="closed"):
        loader.load_state_dict(state)


@pytest.mark.parametrize(
    "mode, extra",
    [
        ("cyclic", {}),
        ("iid", {}),
        ("blocked", {"block_size": 16}),
        ("weighted", {"weights": (np.arange(N) % 4).astype(float)}),
    ],
)
@pytest.mark.parametrize("after", [2, 3])
def test_elastic_resume_keeps_the_global_batch(streams, mode, extra, after):
    """Saved at step k on 4 ranks of 6, resumed on `after` ranks with the same
    global batch of 24 (2 ranks of 12, 3 of 8): every later step's union of the
    ranks' rows is the global batch the 4 ranks would have drawn."""
    glob = Sampler(N, 24, mode, seed=8, **extra)
    before = [
        DataLoader(streams, batch_size=6, mode=mode, seed=8, rank=r, world_size=4, **extra)
        for r in range(4)
    ]
    for _ in range(7):
        for ld in before:
            next(ld)
    state = before[0].state_dict()
    for ld in before:
        ld.close()
    resumed = []
    for r in range(after):
        ld = DataLoader(
            streams, batch_size=24 // after, mode=mode, seed=8, rank=r, world_size=after, **extra
        )
        ld.load_state_dict(state)
        resumed.append(ld)
    for k in range(7, 12):
        union = np.concatenate([next(ld)["id"] for ld in resumed])
        np.testing.assert_array_equal(union, glob.at(k))
    for ld in resumed:
        ld.close()


def test_weighted_loader_follows_the_sampler_with_ranks_subsets_and_a_column(streams, root):
    w = (np.arange(N) % 5).astype(np.float64)  # every fifth record has weight 0
    glob = Sampler(N, 16, "weighted", seed=6, weights=w)
    loaders = [
        DataLoader(streams, batch_size=8, mode="weighted", weights=w, seed=6, rank=r, world_size=2)
        for r in range(2)
    ]
    for k in range(20):
        parts = [next(ld)["id"] for ld in loaders]
        np.testing.assert_array_equal(np.concatenate(parts), glob.at(k))
        assert (np.concatenate(parts) % 5 != 0).all()
    for ld in loaders:
        ld.close()
    # The weights from a column (a dense store of scalars), over a subset.
    with DenseStore.create(root / "w", np.float32, ()) as col:
        col.append(w.astype(np.float32))
    subset = np.arange(0, 50, dtype=np.int64)
    with (
        DenseStore.open(root / "w") as col,
        DataLoader(
            streams, batch_size=32, mode="weighted", weights=col, seed=1, indices=subset
        ) as loader,
    ):
        sub = Sampler(50, 32, "weighted", seed=1, weights=w[:50])
        for k in range(5):
            np.testing.assert_array_equal(next(loader)["id"], subset[sub.at(k)])
    with pytest.raises(ValueError, match=rf"one weight per record of the streams \({N}\), got 3"):
        DataLoader(streams, mode="weighted", weights=[1, 2, 3])
    with pytest.raises(ValueError, match="weights must be given"):
        DataLoader(streams, mode="weighted")
    with pytest.raises(ValueError, match="weights apply only"):
        DataLoader(streams, weights=w)


def test_a_loader_keeps_a_table_opened_in_its_call_open(root):
    """DataLoader(open_table(path)): nothing else holds the table, and
    collecting a table closes its columns, so the loader keeps it."""
    import gc

    from loaderx import open_table

    with DenseStore.create(root / "t" / "id", np.int64, ()) as s:
        s.append(np.arange(N, dtype=np.int64))
    with DataLoader(open_table(root / "t"), batch_size=50, mode="sequential") as loader:
        gc.collect()
        got = np.concatenate([next(loader)["id"] for _ in range(N // 50)])
    assert (got == np.arange(N)).all()
