"""Data-parallel training on Ray Train, each worker fed by its own loaderx
DataLoader.

Every Ray Train worker opens the table read-only (``readonly=True``: shared
locks, so all workers hold it at once) and builds
``DataLoader(..., rank=r, world_size=W)`` from its world rank and size: each
step, every worker gathers its own disjoint slice of the same global batch.
A run resumed with ``start_step=k`` continues bit-exactly from step ``k``
(the sampler is a pure function of seed and step).

    python examples/ray_train.py --world-size 2 --steps 20 --resume-at 12

The script runs on a local Ray instance: it writes a toy sharded table
through Ray Data (``loaderx.ray.write_table``, one shard per block), trains
``--steps`` steps, then resumes from ``--resume-at`` and checks that the
resumed steps read exactly the same bytes, that every step's slices are
disjoint and that together they are one global batch. The workers run the
data path (the place of the model step is marked); with torch installed,
wrap the model in DDP there as examples/ddp_train.py does.

Ray Train's v2 API needs pydantic; this script uses the v1
``DataParallelTrainer`` (``RAY_TRAIN_V2_ENABLED=0``, set below), and falls
back to one Ray actor per rank when Ray Train cannot be imported.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "0")  # before Ray is imported
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import ray  # noqa: E402

import loaderx  # noqa: E402
import loaderx.ray  # noqa: E402
from loaderx.dataloader import DataLoader  # noqa: E402

BATCH = 16  # per rank
SEED = 1


def build(root: str, n: int = 1000) -> None:
    """A toy sharded table written through Ray Data: 8x8 images whose label
    is which quadrant is bright, plus each record's id (to show which
    records a rank read). Four blocks, so four write tasks, four shards."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, n).astype(np.int64)
    images = rng.normal(0, 0.3, (n, 1, 8, 8)).astype(np.float32)
    for i, lab in enumerate(labels):
        r, c = divmod(int(lab), 2)
        images[i, 0, r * 4 : r * 4 + 4, c * 4 : c * 4 + 4] += 1.0
    ids = np.arange(n, dtype=np.int64)
    cuts = np.linspace(0, n, 5).astype(int)
    blocks = [
        pa.table(
            {
                "image": pa.FixedShapeTensorArray.from_numpy_ndarray(images[a:b]),
                "label": labels[a:b],
                "id": ids[a:b],
            }
        )
        for a, b in zip(cuts, cuts[1:])
    ]
    loaderx.ray.write_table(ray.data.from_arrow(blocks), root)
    with loaderx.open_table(root) as table:
        assert table.sharded and table.num_rows == n
        assert np.array_equal(table["id"][:], ids)


def rank_loop(rank: int, world: int, root: str, start_step: int, steps: int) -> dict:
    """One rank: its loader over the read-only table, steps
    ``start_step..steps``. Returns the record ids it read per step and a
    digest of every batch's bytes."""
    ids, digests = [], []
    with loaderx.open_table(root, readonly=True) as table:
        with DataLoader(
            dict(table),
            batch_size=BATCH,
            seed=SEED,
            start_step=start_step,
            rank=rank,
            world_size=world,
            workers=0,
            prefetch=2,
        ) as loader:
            for _ in range(start_step, steps):
                batch = next(loader)
                # The model step goes here (forward, backward, optimizer).
                ids.append(batch["id"].copy())
                h = hashlib.sha256()
                for name in sorted(batch):
                    h.update(np.ascontiguousarray(batch[name]).tobytes())
                digests.append(h.hexdigest())
            state = loader.state_dict()
    return {"ids": np.stack(ids), "digests": digests, "next_step": state["step"]}


def _train_loop_per_worker(config: dict) -> None:
    """What each Ray Train worker runs: rank and world size come from Ray
    Train's context; the results go to a file per rank."""
    import pickle

    import ray.train

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    out = rank_loop(rank, world, config["root"], config["start_step"], config["steps"])
    with open(os.path.join(config["out"], f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(out, f)
    ray.train.report({"rank": rank, "next_step": out["next_step"]})


def run(root: str, world: int, start_step: int, steps: int, workdir: str) -> list[dict]:
    """Runs ``world`` ranks on Ray (Ray Train when importable, else one actor
    per rank) and returns each rank's results, by rank."""
    import pickle

    out = tempfile.mkdtemp(prefix="results-", dir=workdir)
    config = {"root": root, "start_step": start_step, "steps": steps, "out": out}
    try:
        from ray.train import RunConfig, ScalingConfig
        from ray.train.data_parallel_trainer import DataParallelTrainer
    except ImportError:
        return _run_actors(config, world)
    trainer = DataParallelTrainer(
        _train_loop_per_worker,
        train_loop_config=config,
        # Small CPU shares, so that a two-CPU machine runs every worker.
        scaling_config=ScalingConfig(
            num_workers=world, resources_per_worker={"CPU": 0.5}, trainer_resources={"CPU": 0}
        ),
        run_config=RunConfig(storage_path=os.path.join(workdir, "ray_train"), name="loaderx"),
    )
    result = trainer.fit()
    if result.error is not None:
        raise result.error
    results = []
    for rank in range(world):
        with open(os.path.join(out, f"rank{rank}.pkl"), "rb") as f:
            results.append(pickle.load(f))
    return results


def _run_actors(config: dict, world: int) -> list[dict]:
    @ray.remote(num_cpus=0.5)
    class Rank:
        def run(self, rank, world, config):
            return rank_loop(rank, world, config["root"], config["start_step"], config["steps"])

    ranks = [Rank.remote() for _ in range(world)]
    return ray.get([a.run.remote(r, world, config) for r, a in enumerate(ranks)])


def check(full: list[dict], resumed: list[dict], world: int, resume_at: int) -> None:
    """Per step the ranks' slices are disjoint and together one global batch
    of distinct records; the resumed run read the same bytes from
    ``resume_at`` on."""
    steps = len(full[0]["ids"])
    for k in range(steps):
        ids = np.concatenate([full[r]["ids"][k] for r in range(world)])
        assert len(np.unique(ids)) == BATCH * world, f"step {k}: slices overlap"
    for r in range(world):
        assert resumed[r]["digests"] == full[r]["digests"][resume_at:], f"rank {r} diverged"
        np.testing.assert_array_equal(resumed[r]["ids"], full[r]["ids"][resume_at:])
        assert resumed[r]["next_step"] == full[r]["next_step"] == steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--resume-at", type=int, default=12)
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="loaderx-ray-train-")
    try:
        root = os.path.join(workdir, "table")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        build(root)
        full = run(root, args.world_size, 0, args.steps, workdir)
        resumed = run(root, args.world_size, args.resume_at, args.steps, workdir)
        check(full, resumed, args.world_size, args.resume_at)
        first = [full[r]["ids"][0][:4].tolist() for r in range(args.world_size)]
        print(f"step 0, first ids per rank: {first}")
        print(
            f"{args.world_size} ranks x {args.steps} steps x {BATCH} records: slices disjoint "
            f"within every global batch; resumed at step {args.resume_at}, steps "
            f"{args.resume_at}..{args.steps - 1} bit-exact"
        )
    finally:
        ray.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
