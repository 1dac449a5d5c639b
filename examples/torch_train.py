"""A torch training loop fed by loaderx.

The transform is the collate step and the device hand-off: it turns the
NumPy batch into tensors and moves them to the device, so the copy overlaps
the next batch's gather. Runs on CUDA when available, else on the CPU.

    pip install torch
    python examples/torch_train.py [--steps 200]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import torch

from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore


def build(root: str, n: int = 4096) -> None:
    """A toy dataset: 8x8 images whose label is which quadrant is bright."""
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    root = tempfile.mkdtemp(prefix="loaderx-torch-")
    build(root)

    def to_device(batch):
        # pin only when a GPU will take the copy asynchronously
        def move(v):
            t = torch.from_numpy(v)
            if device != "cpu":
                t = t.pin_memory()
            return t.to(device, non_blocking=True)

        return {k: move(v) for k, v in batch.items()}

    streams = {
        "image": DenseStore.open(os.path.join(root, "image")),
        "label": DenseStore.open(os.path.join(root, "label")),
    }
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = DataLoader(streams, batch_size=128, transform=to_device, seed=1)
    for step, batch in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(batch["image"]), batch["label"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}")
        if step + 1 >= args.steps:
            break
    state = loader.state_dict()  # resume later with DataLoader(..., start_step=state["step"])
    loader.close()
    for s in streams.values():
        s.close()
    print(f"stopped at step {state['step']} on {device}")


if __name__ == "__main__":
    main()
