"""Prepare a dataset in polars, ingest it into stores, train from a DataLoader.

1. Generates a small table in polars: a fixed-size feature vector per row
   (``Array(Float32, 32)``), a variable-length token list (``List(Int32)``)
   and a ``source`` string.
2. Cleans and derives columns in polars: drops the "junk" source and rows
   with fewer than 4 tokens, truncates token lists to 64, derives an integer
   label from the features and a token count.
3. Ingests the training columns with ``loaderx.arrow.ingest``: the Array
   column becomes a ``DenseStore`` of float32 (32,), the List column a
   ``RaggedStore`` of 1-D int32 records, the label a ``DenseStore`` of int64
   scalars, and the ``source`` strings a text column (``store[i]`` is a
   ``str``, SQL and polars see strings).
4. Checks the round trip (``pl.Series(store)`` reads a store back).
5. Trains a tiny NumPy softmax regression for a few steps from a
   ``DataLoader`` whose transform is the collate step (pads the ragged
   tokens into a ``(B, L)`` array with lengths).

    python examples/polars_prep.py [--rows 6000] [--steps 60] [--batch-size 128] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import numpy as np
import polars as pl

import loaderx.arrow
from loaderx.dataloader import DataLoader

FEATURES = 32
MAX_TOKENS = 64
VOCAB = 1000
CLASSES = 4


def make_frame(rows: int, seed: int) -> pl.DataFrame:
    """Raw generated rows, as they might come out of a data source."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 96, rows)
    tokens = np.split(
        rng.integers(0, VOCAB, int(lengths.sum()), dtype=np.int32), np.cumsum(lengths)[:-1]
    )
    return pl.DataFrame(
        {
            "features": rng.standard_normal((rows, FEATURES)).astype(np.float32),
            "tokens": pl.Series(tokens, dtype=pl.List(pl.Int32)),
            "source": rng.choice(["web", "books", "junk"], rows, p=[0.6, 0.3, 0.1]),
        }
    )


def prepare(raw: pl.DataFrame) -> pl.DataFrame:
    """Filtering and derivation, all in polars; returns the training columns."""
    f = pl.col("features")
    return (
        raw.filter(pl.col("source") != "junk")
        .with_columns(n_tokens=pl.col("tokens").list.len())
        .filter(pl.col("n_tokens") >= 4)
        .with_columns(
            tokens=pl.col("tokens").list.head(MAX_TOKENS),
            # Four classes from the signs of two feature dimensions: learnable
            # by the linear model below.
            label=(f.arr.get(0) > 0).cast(pl.Int64) * 2 + (f.arr.get(1) > 0).cast(pl.Int64),
        )
        .select("features", "tokens", "label", "source")
    )


def collate(batch: dict) -> dict:
    """numpy batch -> model inputs: features as is, tokens padded with 0 plus lengths."""
    seqs = batch["tokens"]
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    padded = np.zeros((len(seqs), int(lengths.max())), dtype=np.int32)
    for row, s in zip(padded, seqs):
        row[: len(s)] = s
    return {
        "features": batch["features"],
        "tokens": padded,
        "lengths": lengths,
        "label": batch["label"],
    }


def softmax_step(w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray, lr: float):
    """One SGD step of softmax regression; returns (loss, accuracy)."""
    logits = x @ w + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
    acc = float((p.argmax(axis=1) == y).mean())
    p[np.arange(len(y)), y] -= 1.0
    w -= lr * (x.T @ p) / len(y)
    b -= lr * p.mean(axis=0)
    return loss, acc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=6000)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--dir", default=None, help="where to write stores (default: a temp dir)")
    args = ap.parse_args()

    root = args.dir or tempfile.mkdtemp(prefix="loaderx-polars-")
    t0 = time.perf_counter()
    raw = make_frame(args.rows, seed=0)
    df = prepare(raw)
    print(f"polars: {raw.height} raw rows -> {df.height} after filtering; schema {df.schema}")
    print(df.group_by("label").len().sort("label"))

    stores = loaderx.arrow.ingest(df, root, codec="zstd")
    try:
        for name, store in stores.items():
            print(f"  {name}: {store!r}")
        print(f"ingested into {root} in {time.perf_counter() - t0:.2f}s")

        # Round trip: a store is an Arrow array stream, so polars reads it back.
        assert pl.Series(stores["label"]).equals(df["label"], check_names=False)
        assert np.array_equal(stores["features"][:], df["features"].to_numpy())
        i = df.height // 2
        assert np.array_equal(stores["tokens"][i], df["tokens"][i].to_numpy())
        assert stores["source"][:] == df["source"].to_list()
        print("round trip checked: labels, every feature vector, one token list, sources")

        w = np.zeros((FEATURES + 1, CLASSES), dtype=np.float64)
        b = np.zeros(CLASSES, dtype=np.float64)
        loader = DataLoader(
            stores,
            batch_size=args.batch_size,
            transform=collate,
            mode="cyclic",
            seed=0,
            prefetch=2,
            workers=1,
        )
        with loader:
            t0 = time.perf_counter()
            for step in range(args.steps):
                batch = next(loader)
                x = np.concatenate(
                    [batch["features"], (batch["lengths"][:, None] / MAX_TOKENS)], axis=1
                )
                loss, acc = softmax_step(w, b, x, batch["label"], lr=0.5)
                if step % 10 == 0 or step == args.steps - 1:
                    print(
                        f"step {step:3d}  loss {loss:.3f}  acc {acc:.2f}  "
                        f"tokens {batch['tokens'].shape}  features {batch['features'].shape}"
                    )
            dt = time.perf_counter() - t0
            print(f"{args.steps} steps in {dt:.2f}s; resume with {loader.state_dict()}")
    finally:
        for store in stores.values():
            store.close()
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
