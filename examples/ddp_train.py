"""Data-parallel training on one host, one process per GPU, fed by loaderx.

Every rank opens the stores read-only (``readonly=True``: a shared lock, so
all ranks hold them at once, where writable handles would make every rank
after the first raise StoreBusy) and builds its loader with ``rank`` and
``world_size``: each step, every rank gathers only its own disjoint slice of
the same global batch. Resume with ``--start-step`` (each rank's
``state_dict()["step"]``).

    torchrun --nproc-per-node=2 examples/ddp_train.py --steps 200
    python examples/ddp_train.py --world-size 2 --steps 20   # launches the ranks itself

Under torchrun, rank 0 builds the toy dataset in ``--data`` and the others
wait for it. Launched with plain ``python``, the script builds the dataset,
then spawns ``--world-size`` rank processes. Without torch installed, each
rank runs the data path only (read-only stores, its slices, resume) and the
launcher checks that the ranks' slices make up every global batch.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import os
import shutil
import tempfile

import numpy as np

from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore

HAS_TORCH = importlib.util.find_spec("torch") is not None
BATCH = 64  # per rank


def build(root: str, n: int = 4096) -> None:
    """A toy dataset: 8x8 images whose label is which quadrant is bright,
    plus each record's id (to show which records a rank read)."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, n).astype(np.int64)
    images = rng.normal(0, 0.3, (n, 1, 8, 8)).astype(np.float32)
    for i, lab in enumerate(labels):
        r, c = divmod(int(lab), 2)
        images[i, 0, r * 4 : r * 4 + 4, c * 4 : c * 4 + 4] += 1.0
    with DenseStore.create(os.path.join(root, "image"), np.float32, (1, 8, 8)) as s:
        s.append(images)
    with DenseStore.create(os.path.join(root, "label"), np.int64, ()) as s:
        s.append(labels)
    with DenseStore.create(os.path.join(root, "id"), np.int64, ()) as s:
        s.append(np.arange(n, dtype=np.int64))


def open_streams(root: str) -> dict:
    return {
        name: DenseStore.open(os.path.join(root, name), readonly=True)
        for name in ("image", "label", "id")
    }


def train_rank(rank: int, world: int, root: str, steps: int, start_step: int) -> list:
    """One rank's loop; returns the record ids it read, step by step."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cuda = torch.cuda.is_available() and torch.cuda.device_count() > local_rank
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4)).to(device)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)

    def to_device(batch):
        return {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in batch.items()}

    streams = open_streams(root)
    loader = DataLoader(
        streams,
        batch_size=BATCH,
        seed=1,
        start_step=start_step,
        transform=to_device,
        rank=rank,
        world_size=world,
    )
    seen = []
    for step in range(start_step, steps):
        batch = next(loader)
        loss = torch.nn.functional.cross_entropy(model(batch["image"]), batch["label"])
        opt.zero_grad()
        loss.backward()  # DDP averages the gradients across ranks
        opt.step()
        seen.append(batch["id"].cpu().numpy())
        if rank == 0 and (step % 50 == 0 or step == steps - 1):
            print(f"step {step:4d}  loss {loss.item():.4f}", flush=True)
    state = loader.state_dict()
    loader.close()
    for s in streams.values():
        s.close()
    dist.barrier()
    if rank == 0:
        print(f"stopped at step {state['step']} on {world} ranks ({device.type})", flush=True)
    return seen


def data_rank(rank: int, world: int, root: str, steps: int, start_step: int) -> list:
    """One rank's data path only (no torch): its slice of every global batch."""
    streams = open_streams(root)
    seen = []
    with DataLoader(
        streams, batch_size=BATCH, seed=1, start_step=start_step, rank=rank, world_size=world
    ) as loader:
        for _ in range(start_step, steps):
            batch = next(loader)
            assert len(batch["image"]) == len(batch["label"]) == BATCH
            seen.append(batch["id"])
    for s in streams.values():
        s.close()
    return seen


def _spawned_rank(rank, world, root, steps, start_step, rendezvous, results):
    try:
        if HAS_TORCH:
            import torch.distributed as dist

            dist.init_process_group(
                "gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world
            )
            seen = train_rank(rank, world, root, steps, start_step)
            dist.destroy_process_group()
        else:
            seen = data_rank(rank, world, root, steps, start_step)
        results.put((rank, seen, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the launcher
        results.put((rank, None, repr(exc)))


def launch(args) -> None:
    """Without torchrun: build the dataset, spawn one process per rank (as
    torchrun does: spawned, not forked) and check what they read."""
    root = args.data or tempfile.mkdtemp(prefix="loaderx-ddp-")
    try:
        _launch(args, root)
    finally:
        if args.data is None:
            shutil.rmtree(root, ignore_errors=True)


def _launch(args, root: str) -> None:
    if not os.path.exists(os.path.join(root, "id", "meta.zr")):
        build(root)
    world = args.world_size
    if not HAS_TORCH:
        print("torch is not installed: the ranks run the data path only")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    rendezvous = os.path.join(root, ".rendezvous")  # gloo's file store
    if os.path.exists(rendezvous):
        os.remove(rendezvous)  # a stale one from a killed run would hang init
    procs = [
        ctx.Process(
            target=_spawned_rank,
            args=(r, world, root, args.steps, args.start_step, rendezvous, results),
        )
        for r in range(world)
    ]
    for p in procs:
        p.start()
    try:
        got = {}
        for _ in procs:
            rank, seen, error = results.get(timeout=600)
            if error is not None:
                raise SystemExit(f"rank {rank} failed: {error}")
            got[rank] = seen
        for p in procs:
            p.join(60)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        if os.path.exists(rendezvous):
            os.remove(rendezvous)
    # Per step, the ranks read disjoint slices that together are one global
    # batch of BATCH * world distinct records (cyclic sampling).
    for k in range(args.steps - args.start_step):
        ids = np.concatenate([got[r][k] for r in range(world)])
        assert len(np.unique(ids)) == BATCH * world, f"step {args.start_step + k}"
    total = sum(len(s) * BATCH for s in got.values())
    print(
        f"{world} ranks read steps {args.start_step}..{args.steps - 1}: "
        f"{total} records, disjoint within every global batch"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--start-step", type=int, default=0)
    ap.add_argument("--world-size", type=int, default=2, help="ranks to launch without torchrun")
    ap.add_argument("--data", default=None, help="dataset directory (built when missing)")
    args = ap.parse_args()
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        launch(args)
        return
    # Under torchrun: one process per GPU, rendezvous from the environment.
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    root = args.data or os.path.join(tempfile.gettempdir(), "loaderx-ddp-data")
    if rank == 0 and not os.path.exists(os.path.join(root, "id", "meta.zr")):
        build(root)
    dist.barrier()  # the dataset exists before any rank opens it
    train_rank(rank, world, root, args.steps, args.start_step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
