"""Data-parallel training on one host, the way torchrun runs it: W spawned
processes, each opening the stores read-only and running
``DataLoader(..., rank=r, world_size=W)`` at the same time."""

import multiprocessing as mp
import traceback

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore, StoreBusy

TIMEOUT = 120
N = 150
B = 4
STEPS = 6
RESUME_AT = 3


@pytest.fixture
def table(root):
    """Three streams where record i encodes i."""
    ids = np.arange(N, dtype=np.int64)
    with DenseStore.create(root / "id", np.int64, ()) as s:
        s.append(ids)
    with DenseStore.create(root / "img", np.float32, (2, 3), codec="raw") as s:
        s.append(np.broadcast_to(ids[:, None, None].astype(np.float32), (N, 2, 3)).copy())
    with RaggedStore.create(root / "tok", np.int32) as s:
        s.append(np.full(i % 5 + 1, i, np.int32) for i in range(N))
    return {"id": str(root / "id"), "img": str(root / "img"), "tok": str(root / "tok")}


def open_streams(paths):
    kinds = {"id": DenseStore, "img": DenseStore, "tok": RaggedStore}
    return {name: kinds[name].open(path, readonly=True) for name, path in paths.items()}


def _rank(paths, rank, world, mode, start_step, steps, opened, go, results):
    """One rank: open read-only, say so, wait until told, then load."""
    try:
        try:
            streams = open_streams(paths)
        except BaseException:  # noqa: BLE001 - reported to the parent
            opened.put((rank, traceback.format_exc()))
            return
        opened.put((rank, None))
        if not go.wait(TIMEOUT):
            raise TimeoutError("never told to start")
        loader = DataLoader(
            streams,
            batch_size=B,
            mode=mode,
            seed=7,
            start_step=start_step,
            workers=1,
            prefetch=2,
            rank=rank,
            world_size=world,
        )
        batches = [next(loader) for _ in range(steps)]
        state = loader.state_dict()
        loader.close()
        for s in streams.values():
            s.close()
        results.put(("ok", rank, batches, state))
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put(("error", rank, traceback.format_exc(), None))


def run_ranks(paths, world, mode, start_step, steps, check_while_held):
    """Runs `world` spawned ranks; calls `check_while_held()` once every rank
    holds its read-only handles. Returns `{rank: (batches, state)}`."""
    ctx = mp.get_context("spawn")
    opened, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(
            target=_rank,
            args=(paths, r, world, mode, start_step, steps, opened, go, results),
            daemon=True,
        )
        for r in range(world)
    ]
    try:
        for p in procs:
            p.start()
        held = sorted(opened.get(timeout=TIMEOUT) for _ in procs)
        for rank, error in held:
            assert error is None, f"rank {rank} could not open the stores:\n{error}"
        assert [rank for rank, _ in held] == list(range(world))
        check_while_held()
        go.set()
        out = {}
        for _ in procs:
            status, rank, payload, state = results.get(timeout=TIMEOUT)
            assert status == "ok", f"rank {rank} failed:\n{payload}"
            out[rank] = (payload, state)
        for p in procs:
            p.join(TIMEOUT)
            assert p.exitcode == 0
        return out
    finally:
        go.set()
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(10)


@pytest.mark.parametrize(("world", "mode"), [(2, "cyclic"), (3, "iid"), (2, "sequential")])
def test_ranks_in_spawned_processes_share_readonly_stores(table, world, mode):
    # The single-process reference: one loader of the global batch.
    reference = open_streams(table)
    with DataLoader(reference, batch_size=B * world, mode=mode, seed=7, workers=1) as ld:
        want = [next(ld) for _ in range(STEPS)]

    def while_held():
        # Every rank holds the stores read-only (and so does this process):
        # no writer gets in, another reader does.
        with pytest.raises(StoreBusy):
            DenseStore.open(table["id"])
        with pytest.raises(StoreBusy):
            RaggedStore.open(table["tok"])
        with DenseStore.open(table["img"], readonly=True) as s:
            assert len(s) == N

    ranks = run_ranks(table, world, mode, 0, STEPS, while_held)
    for k in range(STEPS):
        parts = [ranks[r][0][k] for r in range(world)]
        ids = [p["id"] for p in parts]
        assert all(len(i) == B for i in ids)
        # The ranks' slices are disjoint positions of one global batch, and
        # together they are exactly the reference's batch, in rank order.
        np.testing.assert_array_equal(np.concatenate(ids), want[k]["id"])
        if mode != "iid":  # without replacement: disjoint records too
            assert len(np.unique(np.concatenate(ids))) == B * world
        for r, part in enumerate(parts):
            rows = slice(r * B, (r + 1) * B)
            np.testing.assert_array_equal(part["img"], want[k]["img"][rows])
            assert len(part["tok"]) == B
            for got, exp, i in zip(part["tok"], want[k]["tok"][rows], part["id"]):
                np.testing.assert_array_equal(got, exp)
                np.testing.assert_array_equal(got, np.full(i % 5 + 1, i, np.int32))
    for r in range(world):
        assert ranks[r][1]["step"] == STEPS

    # Resume: every rank restarted at step RESUME_AT (new processes) yields
    # exactly the batches of the uninterrupted run from there on.
    resumed = run_ranks(table, world, mode, RESUME_AT, STEPS - RESUME_AT, lambda: None)
    for r in range(world):
        batches, state = resumed[r]
        assert state["step"] == STEPS
        for j, got in enumerate(batches):
            full = ranks[r][0][RESUME_AT + j]
            np.testing.assert_array_equal(got["id"], full["id"])
            np.testing.assert_array_equal(got["img"], full["img"])
            for a, b in zip(got["tok"], full["tok"]):
                np.testing.assert_array_equal(a, b)

    for s in reference.values():
        s.close()
    # Once every reader is gone, a writer opens the store again.
    with DenseStore.open(table["id"]) as w:
        w.append(np.array([N], np.int64))
        assert len(w) == N + 1
