"""Checks the sizing rules of docs/scale.md with many processes on this
machine against one S3-compatible server (s3s-fs, behind the latency proxy
of _s3.py that counts requests).

P processes play the ranks of one host: each builds ``DataLoader(table,
batch_size=B, rank=r, world_size=P, ...)`` over the remote table and takes
``steps`` batches. Two plans:

* ``iid`` without a cache. Rule: a rank's batch of B/P random records of a
  table much larger than a batch costs one request per record (records are
  further apart than the merge gap), so the host makes about ``B`` requests
  per step whatever P is.
* ``blocked`` with one cache directory shared by the P processes. Rule: a
  step of the global batch touches at most ``2W`` blocks of ``block_size``
  records (W = max(2, ceil(B / block_size))), every rank draws from the same
  blocks, and the shared cache fetches each 4 MiB cache block once: over a
  cycle the host makes about ``table bytes / 4 MiB`` requests, however many
  ranks share the cache (P times fewer than ranks with caches of their own).

    python benches/scale_sim.py [--ranks 1,2,4,8] [--records N]

Prints predicted against measured requests for each P; the numbers are
counts, so a slow machine changes the time, not the result.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _s3  # noqa: E402

import loaderx  # noqa: E402

# What a rank's DataLoader gathers at each step (the rank's slice of the
# global batch), without the loader's prefetching, so counts are exact.
RANK = textwrap.dedent(
    """
    import json, sys
    import loaderx
    from loaderx.zsampler import Sampler
    uri, opts, rank, world, mode, steps, cache, block, batch = json.loads(sys.argv[1])
    kw = {"cache_dir": cache, "cache_bytes": 4 << 30} if cache else {}
    t = loaderx.open_table(uri, storage_options=opts, **kw)
    extra = {"block_size": block} if mode == "blocked" else {}
    sampler = Sampler(t.num_rows, batch, mode, seed=1, **extra)
    per = batch // world
    col = t["tokens"]
    for k in range(steps):
        col[sampler.at(k)[rank * per:(rank + 1) * per]]
    t.close()
    """
)


def run_ranks(srv, uri, world, mode, steps, cache, block, batch) -> tuple[int, float]:
    before = srv.stats()["requests"]
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RANK,
                json.dumps([uri, srv.options(), r, world, mode, steps, cache, block, batch]),
            ]
        )
        for r in range(world)
    ]
    for p in procs:
        assert p.wait() == 0
    return srv.stats()["requests"] - before, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--records", type=int, default=131072)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--latency", type=float, default=20.0)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="loaderx-scale-")
    srv = _s3.start()
    rows = []
    try:
        # dense-tokens: int32[512] records (2 KiB), raw.
        local = os.path.join(tmp, "t")
        rng = np.random.default_rng(0)
        with loaderx.DenseStore.create(
            os.path.join(local, "tokens"), np.int32, (512,), codec="raw"
        ) as s:
            for lo in range(0, args.records, 16384):
                n = min(16384, args.records - lo)
                s.append(rng.integers(0, 50257, (n, 512), dtype=np.int32))
        uri = f"s3://{srv.bucket}/tokens"
        loaderx.copy_table(
            local, uri, storage_options={**srv.options(), "aws_endpoint": srv.direct}
        )
        srv.set_latency(args.latency)
        record = 512 * 4
        table_bytes = args.records * record
        block_records = (4 << 20) // record  # one cache block of records
        cycle = args.records // args.batch
        for world in [int(w) for w in args.ranks.split(",")]:
            steps = 8
            got, secs = run_ranks(srv, uri, world, "iid", steps, None, None, args.batch)
            # open: a manifest GET and a listing and one meta.zr per rank.
            opened = 3 * world
            predicted = steps * args.batch
            rows.append(("iid, no cache", world, steps, predicted, got - opened, secs))
            cache = os.path.join(tmp, f"cache-{world}")
            got, secs = run_ranks(
                srv, uri, world, "blocked", cycle, cache, block_records, args.batch
            )
            predicted = -(-table_bytes // (4 << 20))
            rows.append(
                ("blocked + shared cache, one cycle", world, cycle, predicted, got - opened, secs)
            )
            shutil.rmtree(cache, ignore_errors=True)
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"records {args.records} x 2 KiB, batch {args.batch}, "
        f"latency {args.latency} ms, block 4 MiB"
    )
    print(
        "| plan | ranks | steps | predicted requests | measured | measured / predicted | seconds |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for plan, world, steps, pred, got, secs in rows:
        print(f"| {plan} | {world} | {steps} | {pred} | {got} | {got / pred:.2f} | {secs:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
