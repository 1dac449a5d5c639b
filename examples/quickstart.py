"""A tour of the Python API in one minute: stores, indexing, codecs,
maintenance, the sampler and the DataLoader, with resume.

    python examples/quickstart.py [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

from loaderx.dataloader import DataLoader
from loaderx.utils import train_dict
from loaderx.zrecord import DenseStore, RaggedStore, StoreBusy
from loaderx.zsampler import Sampler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="where to write the stores (default: a temp dir)")
    args = ap.parse_args()
    if args.dir:
        tour(args.dir)
    else:
        with tempfile.TemporaryDirectory(prefix="loaderx-quickstart-") as root:
            tour(root)


def tour(root: str) -> None:
    rng = np.random.default_rng(0)

    # A dense store: every record has one shape. zstd is the default codec.
    images = rng.integers(0, 255, (1000, 3, 32, 32), dtype=np.uint8)
    labels = (np.arange(1000) % 10).astype(np.int64)
    with DenseStore.create(os.path.join(root, "images"), np.uint8, (3, 32, 32)) as ds:
        ds.append(images)
    with DenseStore.create(os.path.join(root, "labels"), np.int64, (), codec="raw") as ds:
        ds.append(labels)

    # A ragged store keeps each record's own shape.
    seqs = [rng.integers(0, 50_000, rng.integers(4, 64), dtype=np.int32) for _ in range(1000)]
    d = train_dict(seqs, tier="fast")
    path = os.path.join(root, "tokens")
    with RaggedStore.create(path, np.int32, codec="zstd_dict", dict_bytes=d) as rs:
        rs.append(seqs)

    ds = DenseStore.open(os.path.join(root, "images"))
    labels_s = DenseStore.open(os.path.join(root, "labels"))
    tokens = RaggedStore.open(path)
    print(ds)
    print(tokens)

    # Every indexing form; a tuple is a record set, never nested indexing.
    assert ds[0, 5, 2].shape == (3, 3, 32, 32)
    assert np.array_equal(ds[7], images[7])
    assert np.array_equal(ds[10:20], images[10:20])
    assert np.array_equal(ds[::-1], images[::-1])
    assert np.array_equal(ds[labels == 3], images[labels == 3])
    assert all(np.array_equal(a, seqs[i]) for a, i in zip(tokens[[4, 4, 1]], [4, 4, 1]))
    print("indexing: int, tuple, list, array, slice and mask all match the source")

    # One handle owns a store.
    try:
        DenseStore.open(os.path.join(root, "images"))
    except StoreBusy as e:
        print(f"a second handle is refused: {type(e).__name__}")

    # The sampler: every batch is a pure function of (n, B, mode, seed, step).
    s = Sampler(len(ds), 64, Sampler.Mode.CYCLIC, seed=7)
    first = s.next()
    assert np.array_equal(first, Sampler(len(ds), 64, Sampler.Mode.CYCLIC, seed=7).at(0))
    print(f"sampler: step 0 starts {first[:4]}, s.at(123)[:4] = {s.at(123)[:4]}")

    # The DataLoader: endless, in step order, resumable.
    streams = {"image": ds, "label": labels_s, "tokens": tokens}

    def collate(batch):
        lengths = np.array([len(t) for t in batch["tokens"]])
        return {
            "image": batch["image"].astype(np.float32) / 255,
            "label": batch["label"],
            "lengths": lengths,
        }

    with DataLoader(streams, batch_size=32, transform=collate, seed=1) as loader:
        for _ in range(10):
            batch = next(loader)
        state = loader.state_dict()
        after = next(loader)
    with DataLoader(
        streams, batch_size=32, transform=collate, seed=1, start_step=state["step"]
    ) as resumed:
        again = next(resumed)
    assert np.array_equal(after["label"], again["label"])
    print(f"loader: {batch['image'].shape} float images; resumed at {state} bit-exactly")

    # Maintenance: delete swaps the last record in, compact reclaims space.
    tokens.delete([0, 1, 2])
    print("after delete:", tokens.stats())
    tokens.compact()
    print("after compact:", tokens.stats())
    for store in (ds, labels_s, tokens):
        store.close()


if __name__ == "__main__":
    main()
