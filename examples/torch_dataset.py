"""A loaderx table in PyTorch two ways: as a map-style dataset read by
torch's own DataLoader (batched reads, worker processes), and a loaderx
DataLoader handed to a training loop that checkpoints it with torch.save
the way Lightning's Trainer does, then resumes it exactly.

    python examples/torch_dataset.py [--records N] [--workers W]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import torch

import loaderx
from loaderx.dataloader import DataLoader
from loaderx.torch import Dataset, as_tensors


def make_table(root: str, n: int) -> None:
    """Points in 8 dimensions with a label: which side of a plane they lie on."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    with loaderx.DenseStore.create(os.path.join(root, "x"), np.float32, (8,)) as s:
        s.append(x)
    with loaderx.DenseStore.create(os.path.join(root, "y"), np.int64, ()) as s:
        s.append((x @ np.arange(1, 9, dtype=np.float32) > 0).astype(np.int64))


def train_step(model, opt, batch) -> float:
    loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="loaderx-torch-") as root:
        make_table(root, args.records)
        with loaderx.open_table(root) as table:
            # 1. torch's DataLoader over the table: one gather per column and
            # batch (__getitems__), in worker processes.
            ds = Dataset(table)
            loader = torch.utils.data.DataLoader(
                ds, batch_size=64, shuffle=True, num_workers=args.workers
            )
            model = torch.nn.Linear(8, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.5)
            losses = [train_step(model, opt, batch) for batch in loader]
            print(
                f"one epoch of {len(ds)} records in {len(losses)} batches "
                f"({args.workers} workers): loss {losses[0]:.3f} -> {losses[-1]:.3f}"
            )

            # 2. A loaderx DataLoader in a step-based loop that checkpoints it
            # (Lightning saves state_dict() of a loader that has one).
            kw = dict(batch_size=64, seed=1, transform=as_tensors)
            ckpt = os.path.join(root, "last.ckpt")
            with DataLoader(table, **kw) as data:
                for _ in range(10):
                    train_step(model, opt, next(data))
                torch.save({"model": model.state_dict(), "loader": data.state_dict()}, ckpt)
                expected = [next(data)["y"] for _ in range(3)]
            state = torch.load(ckpt, weights_only=True)
            with DataLoader(table, **kw) as data:
                data.load_state_dict(state["loader"])
                for want in expected:
                    assert torch.equal(next(data)["y"], want)
            print(f"checkpointed at step {state['loader']['step']} and resumed exactly")


if __name__ == "__main__":
    main()
