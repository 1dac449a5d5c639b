"""End-to-end demo on generated data.

1. Generates CHW images with labels and variable-length token sequences.
2. Writes them into dense and ragged stores in every codec, gathers random
   batches and prints sizes, ratios and throughput.
3. Summarises the data with SQL (``loaderx.sql``): records per label.
4. Trains (a stand-in step) from a SQL-selected subset with the DataLoader.
5. Exports the table to Parquet and reads it back with pyarrow.

    python examples/demo.py [--images 1000] [--sequences 50000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

import loaderx
import loaderx.parquet
from loaderx.dataloader import DataLoader
from loaderx.utils import train_dict
from loaderx.zrecord import DenseStore, RaggedStore

CODECS = ("raw", "zstd", "zstd_dict")


def make_images(n: int, rng: np.random.Generator) -> np.ndarray:
    """Smooth CHW uint8 images: a few low-frequency waves, quantised."""
    yy, xx = np.mgrid[0:224, 0:224].astype(np.float32) / 224.0
    out = np.empty((n, 3, 224, 224), np.uint8)
    for i in range(n):
        f = rng.uniform(0.5, 4.0, size=(3, 2))
        phase = rng.uniform(0, 2 * np.pi, size=3)
        for c in range(3):
            wave = np.sin(2 * np.pi * (f[c, 0] * xx + f[c, 1] * yy) + phase[c])
            out[i, c] = (np.round((128 + 100 * wave) / 4) * 4).astype(np.uint8)
    return out


def make_sequences(n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Token sequences of 16..512 int32 IDs with a Zipf-like vocabulary."""
    lengths = np.clip(rng.lognormal(np.log(129), 0.6, n), 16, 512).astype(int)
    vocab = np.minimum(rng.zipf(1.2, lengths.sum()), 50257).astype(np.int32)
    return np.split(vocab, np.cumsum(lengths)[:-1])


def disk_bytes(path: str) -> int:
    return sum(os.stat(os.path.join(path, f)).st_blocks * 512 for f in os.listdir(path))


def gather_rate(store, n: int, batch: int, rng, seconds: float = 1.0):
    """Random-batch gather: (GiB/s of logical payload, krecords/s)."""
    plans = [rng.integers(0, n, batch) for _ in range(20)]
    store[plans[0]]  # warm
    done = nbytes = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for idx in plans:
            out = store[idx]
            done += len(idx)
            nbytes += out.nbytes if isinstance(out, np.ndarray) else sum(r.nbytes for r in out)
    dt = time.perf_counter() - t0
    return nbytes / dt / 2**30, done / dt / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--sequences", type=int, default=50_000)
    ap.add_argument("--dir", default=None, help="where to write stores (default: a temp dir)")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    root = args.dir or tempfile.mkdtemp(prefix="loaderx-demo-")
    os.makedirs(root, exist_ok=True)
    print(f"stores under {root}")

    t0 = time.perf_counter()
    images = make_images(args.images, rng)
    labels = rng.integers(0, 10, args.images).astype(np.int64)
    seqs = make_sequences(args.sequences, rng)
    print(
        f"generated {len(images)} images ({images.nbytes / 2**20:.1f} MiB) and "
        f"{len(seqs)} sequences ({sum(s.nbytes for s in seqs) / 2**20:.1f} MiB) "
        f"in {time.perf_counter() - t0:.1f}s\n"
    )

    image_dict = train_dict(images, tier="balanced")
    token_dict = train_dict(seqs, tier="balanced")

    print(f"{'store':<26}{'disk MiB':>10}{'ratio':>8}{'write s':>9}{'GiB/s':>8}{'krec/s':>9}")
    for codec in CODECS:
        for name, data, cls in (("images", images, DenseStore), ("tokens", seqs, RaggedStore)):
            path = os.path.join(root, f"{name}-{codec}")
            d = {"dict_bytes": image_dict if name == "images" else token_dict}
            kwargs = d if codec == "zstd_dict" else {}
            t0 = time.perf_counter()
            if cls is DenseStore:
                store = DenseStore.create(path, data.dtype, data.shape[1:], codec=codec, **kwargs)
            else:
                store = RaggedStore.create(path, np.int32, codec=codec, **kwargs)
            store.append(data)
            store.sync()
            write = time.perf_counter() - t0
            store.close()

            store = cls.open(path)
            logical = data.nbytes if isinstance(data, np.ndarray) else sum(s.nbytes for s in data)
            check = rng.integers(0, len(store), 64)
            got = store[check]
            if cls is DenseStore:
                assert np.array_equal(got, data[check])
            else:
                assert all(np.array_equal(a, data[i]) for a, i in zip(got, check))
            gib, krec = gather_rate(store, len(store), 256, rng)
            disk = disk_bytes(path)
            print(
                f"{name + '-' + codec:<26}{disk / 2**20:>10.1f}{logical / disk:>7.2f}x"
                f"{write:>9.2f}{gib:>8.2f}{krec:>9.1f}"
            )
            store.close()

    with DenseStore.create(os.path.join(root, "labels"), labels.dtype, labels.shape[1:]) as ds:
        ds.append(labels)
    print("\nevery gathered batch matched its source")

    streams = {
        "image": DenseStore.open(os.path.join(root, "images-zstd")),
        "label": DenseStore.open(os.path.join(root, "labels")),
    }
    tokens = RaggedStore.open(os.path.join(root, "tokens-zstd"))

    # SQL: a summary, then a subset for training.
    summary = loaderx.sql(
        "SELECT label, count(*) AS records FROM train GROUP BY label ORDER BY label",
        train=streams,
    )
    print("\nrecords per label (loaderx.sql):")
    print("  " + "  ".join(f"{r['label']}:{r['records']}" for r in summary.to_pylist()))
    lengths = loaderx.sql(
        "SELECT avg(array_length(tokens.data)) AS mean_len, "
        "max(array_length(tokens.data)) AS max_len FROM seqs",
        seqs={"tokens": tokens},
    ).to_pylist()[0]
    print(f"token sequences: mean length {lengths['mean_len']:.1f}, max {lengths['max_len']}")
    subset = loaderx.sql("SELECT record_id FROM train WHERE label IN (1, 3)", train=streams)
    ids = subset["record_id"]
    print(f"selected {len(ids)} records with label 1 or 3")

    # Train-style steps on the subset: the transform is the collate step.
    def collate(batch):
        x = batch["image"].astype(np.float32) / 255.0
        return x.mean(axis=(1, 2, 3)), batch["label"]

    steps, batch = 100, min(64, len(ids) // 2)
    with DataLoader(streams, batch_size=batch, indices=ids, transform=collate, seed=1) as loader:
        t0 = time.perf_counter()
        for _ in range(steps):
            feats, y = next(loader)
            assert np.isin(y, (1, 3)).all()
        dt = time.perf_counter() - t0
        state = loader.state_dict()
    print(
        f"{steps} loader steps of {batch} images on the subset: {steps / dt:.1f} batches/s "
        f"({steps * batch * images[0].nbytes / dt / 2**30:.2f} GiB/s); resume from {state}"
    )

    # Parquet export, read back by pyarrow.
    out = os.path.join(root, "train.parquet")
    t0 = time.perf_counter()
    rows = loaderx.parquet.export(streams, out)
    dt = time.perf_counter() - t0
    print(
        f"\nexported {rows} rows to Parquet in {dt:.2f}s "
        f"({images.nbytes / dt / 2**30:.2f} GiB/s logical, {os.path.getsize(out) / 2**20:.1f} MiB)"
    )
    try:
        import pyarrow.parquet as pq
    except ImportError:
        print("pyarrow is not installed: skipping the read-back")
    else:
        table = pq.read_table(out)
        back = table["image"].combine_chunks().to_numpy_ndarray()
        assert np.array_equal(back, images) and table["label"].to_pylist() == labels.tolist()
        print(f"pyarrow read it back bit-exact: {table.schema.field('image').type}")

    for s in (*streams.values(), tokens):
        s.close()
    if args.dir is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
