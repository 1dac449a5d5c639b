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

Run from the repository root with the project venv::

    .venv/bin/python benches/bench_feeds.py
    .venv/bin/python benches/bench_feeds.py --quick

The markdown table goes to stdout.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import loaderx
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    min_time = 0.05 if args.quick else 1.0
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(400), 0.8, 256).astype(int), 1, 4096)
    # Grain's packer takes records no longer than a row: every packer gets
    # the same records, cut to 2,048 tokens.
    records = [rng.integers(0, 50_000, min(n, 2048), dtype=np.int32) for n in lengths]
    seq_len = 2048

    print("| what | loaderx | peer | peer time | loaderx / peer speed |")
    print("|---|---|---|---|---|")
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
