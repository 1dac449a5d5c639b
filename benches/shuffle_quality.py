"""How well ``"blocked"`` sampling shuffles, against ``"cyclic"``.

Not a timing: every figure is a count over the indices the sampler gives,
so it is the same on every machine. For an index space of ``n`` records,
batches of ``B`` and blocks of ``S`` records, over one whole cycle:

* ``blocks/batch``: the distinct aligned blocks (``i // S``) one batch
  touches, median and maximum. A reader fetches at least this many blocks
  per batch from object storage.
* ``fetches/cycle``: the blocks fetched over the cycle by an LRU cache of
  ``C`` blocks (C = 4 * W, W = max(2, ceil(B / S)) the window), in units of
  the ``n / S`` blocks there are. 1.0 means each block is fetched once.
* ``|Δ| p10/p50/p90``: the distance between consecutive draws (within a
  batch and across batch boundaries), as a fraction of ``n``. A uniform
  shuffle has a median near 0.29 (the median of |U - V|).
* ``same block``: the fraction of consecutive draws in the same aligned
  block (a uniform shuffle: about S / n).
* ``mixing``: over batches, the mean distinct "classes" per batch when the
  records are sorted by class (100 classes of n / 100 consecutive records),
  against what a uniform shuffle gives. This is the cost of locality for a
  dataset stored in class order.

Run from the repository root with the project venv::

    .venv/bin/python benches/shuffle_quality.py
    .venv/bin/python benches/shuffle_quality.py --quick

The markdown table goes to stdout.
"""

from __future__ import annotations

import argparse
from collections import OrderedDict

import numpy as np

from loaderx.zsampler import Sampler


def cycle(s: Sampler) -> np.ndarray:
    per = s.n // s.batch_size
    return np.stack([s.at(k) for k in range(per)])


def lru_fetches(batches: np.ndarray, block: int, capacity: int) -> int:
    cache: OrderedDict[int, None] = OrderedDict()
    fetched = 0
    for b in (batches // block).ravel().tolist():
        if b in cache:
            cache.move_to_end(b)
            continue
        fetched += 1
        cache[b] = None
        if len(cache) > capacity:
            cache.popitem(last=False)
    return fetched


def row(name: str, batches: np.ndarray, n: int, batch: int, block: int) -> str:
    per_batch = [len(np.unique(b // block)) for b in batches]
    window = max(2, -(-batch // block))
    fetches = lru_fetches(batches, block, 4 * window) / (-(-n // block))
    flat = batches.ravel().astype(np.int64)
    delta = np.abs(np.diff(flat)) / n
    p10, p50, p90 = np.quantile(delta, [0.1, 0.5, 0.9])
    same = float(np.mean(flat[1:] // block == flat[:-1] // block))
    classes = n // 100
    mixing = np.mean([len(np.unique(b // classes)) for b in batches])
    return (
        f"| {name} | {block:,} | {int(np.median(per_batch))} / {max(per_batch)} | "
        f"{fetches:.2f} | {p10:.3f} / {p50:.3f} / {p90:.3f} | {same:.4f} | {mixing:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller index space")
    args = parser.parse_args()
    n = 100_000 if args.quick else 1_000_000
    batch = 256
    print(f"n = {n:,}, batch_size = {batch}, one cycle, seed 0\n")
    print(
        "| mode | block_size | blocks/batch (median / max) | fetches/cycle (LRU of 4W) | "
        "|Δ|/n p10 / p50 / p90 | same block | classes/batch (of 100) |"
    )
    print("|---|---|---|---|---|---|---|")
    cyclic = cycle(Sampler(n, batch, "cyclic", seed=0))
    for block in (64, 1024, 16_384):
        print(row("cyclic", cyclic, n, batch, block))
        blocked = cycle(Sampler(n, batch, "blocked", seed=0, block_size=block))
        print(row("blocked", blocked, n, batch, block))


if __name__ == "__main__":
    main()
