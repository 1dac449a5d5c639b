"""Training-feed benchmarks: ``loaderx.pack`` and ``mode="weighted"``
against what people use instead, measured in the same run.

* **pack**: batches of ragged token records (int32, lengths drawn from a
  log-normal around 400 tokens, 256 records a batch) packed into rows of
  2,048 by ``loaderx.pack`` (native, first fit decreasing) against the same
  algorithm as a Python loop over NumPy slices, and against Grain's
  ``FirstFitPackIterDataset`` where ``grain`` is installed. Target: at least
  10x the Python loop.
* **weighted**: a batch of draws in proportion to 1,000,000 weights:
  ``Sampler(..., "weighted").at(k)`` against NumPy's
  ``Generator.choice(n, size=B, p=w)`` and ``torch.multinomial(w, B,
  replacement=True)`` where torch is installed.
* **mixture**: ``DataLoader(Mix(...))`` over 2 and 8 sources (fixed
  weights 1:2:...:k, and the same weights from a schedule called once per
  step) against a ``DataLoader`` over one source, every source being the
  same table, so that only the mixture's own work differs (the plan, one
  gather per source, the source column, the schedule): batches of 256
  images of 3x32x32 uint8 (raw, so the gather is as cheap as it gets and
  that work shows most) and an int64 label, no transform, one consumer
  thread, in interleaved rounds. Target: within 5 % of the single
  source's batches/s. The ratio is the median of each round's ratio to
  the same round's single source, with its quartiles.

Run from the repository root with the project venv::

    .venv/bin/python benches/bench_feeds.py
    .venv/bin/python benches/bench_feeds.py --quick

The markdown table goes to stdout.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import loaderx
from loaderx.dataloader import DataLoader
from loaderx.zsampler import Sampler


def best_of(fn, min_time: float) -> float:
    """Median seconds per call of ``fn`` over at least ``min_time``."""
    fn()  # warm
    times = []
    start = time.perf_counter()
    while time.perf_counter() - start < min_time or len(times) < 5:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def python_pack(records, seq_len):
    """First fit decreasing in Python: the loop ``loaderx.pack`` replaces."""
    order = sorted(range(len(records)), key=lambda i: -len(records[i]))
    rows, fill = [], []
    for i in order:
        r = records[i]
        if len(r) > seq_len:
            continue
        k = next((k for k, used in enumerate(fill) if seq_len - used >= len(r)), None)
        if k is None:
            rows.append((np.zeros(seq_len, r.dtype), np.zeros(seq_len, np.int32)))
            fill.append(0)
            k = len(fill) - 1
        tokens, segs = rows[k]
        tokens[fill[k] : fill[k] + len(r)] = r
        segs[fill[k] : fill[k] + len(r)] = segs.max() + 1
        fill[k] += len(r)
    return rows


def grain_pack(records, seq_len):
    try:
        import grain.python as grain
    except ImportError:
        return None
    packer = getattr(grain.experimental, "FirstFitPackIterDataset", None)
    if packer is None:
        return None
    ds = grain.MapDataset.source([{"tokens": r} for r in records]).to_iter_dataset()
    packed = packer(ds, length_struct={"tokens": seq_len}, num_packing_bins=len(records))

    def run():
        return list(packed)

    return run


def _table(path: str, images: np.ndarray, labels: np.ndarray) -> None:
    with loaderx.DenseStore.create(os.path.join(path, "image"), np.uint8, (3, 32, 32)) as s:
        s.append(images)
    with loaderx.DenseStore.create(os.path.join(path, "label"), np.int64, ()) as s:
        s.append(labels)


def _batches_per_s(streams, steps: int) -> float:
    """Batches/s of ``steps`` batches of 256 after a warm-up of 8."""
    with DataLoader(streams, batch_size=256, seed=0, workers=0, prefetch=4) as loader:
        for _ in range(8):
            next(loader)
        t = time.perf_counter()
        for _ in range(steps):
            next(loader)
        return steps / (time.perf_counter() - t)


def mixture(records: int, steps: int, rounds: int) -> None:
    """Mixed loaders against one source (see the module docstring); prints
    one table row per mixture."""
    rng = np.random.default_rng(1)
    images = rng.integers(0, 255, (records, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, 10, records)
    with tempfile.TemporaryDirectory(prefix="loaderx-bench-mix-") as root:
        _table(root, images, labels)
        with loaderx.open_table(root) as table:
            configs: dict = {"single": table}
            for k in (2, 8):
                weights = {f"s{i}": float(i + 1) for i in range(k)}
                sources = dict.fromkeys(weights, table)
                configs[f"{k} sources, fixed weights"] = loaderx.Mix(sources, weights)
                configs[f"{k} sources, a schedule"] = loaderx.Mix(
                    sources, lambda step, w=weights: w
                )
            runs: dict[str, list[float]] = {name: [] for name in configs}
            for streams in configs.values():  # a warm-up round, not counted
                _batches_per_s(streams, max(steps // 4, 8))
            names = list(configs)
            for r in range(rounds):
                # Each round starts at another configuration, so that none
                # always runs first (or right after the single source).
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    runs[name].append(_batches_per_s(configs[name], steps))
    # Each round's mixture against the same round's single source (the
    # machine's load drifts between rounds, much less within one).
    single = np.asarray(runs["single"])
    for name, got in runs.items():
        if name == "single":
            continue
        ratios = np.asarray(got) / single
        q1, q3 = np.percentile(ratios, [25, 75])
        print(
            f"| DataLoader over a Mix of {name}, batch 256 of 3x32x32 uint8 | "
            f"{np.median(got):,.0f} batches/s | one source ({records:,} records) | "
            f"{np.median(single):,.0f} batches/s | {np.median(ratios):.3f}x "
            f"(quartiles {q1:.3f}-{q3:.3f}, {rounds} rounds) |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--only", choices=["pack", "weighted", "mixture"], help="run one part of the table"
    )
    args = parser.parse_args()
    min_time = 0.05 if args.quick else 1.0
    print("| what | loaderx | peer | peer time | loaderx / peer speed |")
    print("|---|---|---|---|---|")
    if args.only in (None, "mixture"):
        if args.quick:
            mixture(records=4_000, steps=20, rounds=1)
        else:
            mixture(records=40_000, steps=500, rounds=31)
        if args.only == "mixture":
            return
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(400), 0.8, 256).astype(int), 1, 4096)
    # Grain's packer takes records no longer than a row: every packer gets
    # the same records, cut to 2,048 tokens.
    records = [rng.integers(0, 50_000, min(n, 2048), dtype=np.int32) for n in lengths]
    seq_len = 2048

    if args.only in (None, "pack"):
        pack_rows(records, seq_len, min_time)
    if args.only in (None, "weighted"):
        weighted_rows(rng, min_time)


def pack_rows(records, seq_len: int, min_time: float) -> None:
    ours = best_of(lambda: loaderx.pack(records, seq_len), min_time)
    peer = best_of(lambda: python_pack(records, seq_len), min_time)
    what = f"pack 256 records into rows of {seq_len}"
    print(
        f"| {what} | {ours * 1e3:.3f} ms | Python first-fit loop | "
        f"{peer * 1e3:.3f} ms | {peer / ours:.1f}x |"
    )
    grain_run = grain_pack(records, seq_len)
    if grain_run is None:
        print("| pack (Grain) | | grain not installed | | |")
    else:
        peer = best_of(grain_run, min_time)
        print(
            f"| {what} | {ours * 1e3:.3f} ms | Grain FirstFitPack | "
            f"{peer * 1e3:.3f} ms | {peer / ours:.1f}x |"
        )


def weighted_rows(rng, min_time: float) -> None:
    n = 1_000_000
    w = rng.random(n)
    p = w / w.sum()
    for batch in (256, 4096):
        s = Sampler(n, batch, "weighted", seed=0, weights=w)
        steps = iter(range(1 << 62))
        gen = np.random.default_rng(0)
        ours = best_of(lambda s=s, steps=steps: s.at(next(steps)), min_time)
        peer = best_of(lambda gen=gen, b=batch: gen.choice(n, size=b, p=p), min_time)
        print(
            f"| weighted draw of {batch} over 1M weights | {ours * 1e6:.1f} us | "
            f"numpy Generator.choice(p=) | {peer * 1e6:.1f} us | {peer / ours:.0f}x |"
        )
        try:
            import torch
        except ImportError:
            continue
        tw = torch.from_numpy(w)
        peer = best_of(lambda tw=tw, b=batch: torch.multinomial(tw, b, replacement=True), min_time)
        print(
            f"| weighted draw of {batch} over 1M weights | {ours * 1e6:.1f} us | "
            f"torch.multinomial | {peer * 1e6:.1f} us | {peer / ours:.0f}x |"
        )


if __name__ == "__main__":
    main()
