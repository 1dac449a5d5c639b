"""The write path, timed end to end: what issue-level A/Bs of the write path
compare between two builds.

* ``ingest``: ``loaderx.ingest_sharded`` of the ragged-tokens Parquet file
  (bench_ingest.py's ``tokens`` workload: int32 token lists and an int64
  label) into a new local table, on ``--workers`` threads;
* ``ray_local`` / ``ray_s3``: ``loaderx.ray.write_table`` of the same rows
  (``ray.data.from_arrow``, four blocks) to a local path and to the S3
  server, on a local Ray;
* ``copy_s3``: ``loaderx.copy_table`` of the ingested (sharded) table to the
  S3 server.

The S3 server is moto's on 127.0.0.1 (the one the test suite starts). Each
figure is the median wall time over ``--rounds`` runs after one warm-up,
every run writing a new table; every written table is opened and its row
count checked. Prints one JSON object (seconds per workload) and writes it
to ``--out``.

    python benches/bench_write.py --records 400000 --rounds 3 --out /tmp/w.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python" / "tests"))

WORKLOADS = ("ingest", "ray_local", "ray_s3", "copy_s3")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_write.py", description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=400_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--only", default=",".join(WORKLOADS))
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    only = args.only.split(",")

    import pyarrow.parquet as pq
    from bench_ingest import tokens

    import loaderx

    root = Path(tempfile.mkdtemp(prefix="loaderx-write-"))
    table, _ = tokens(args.records, 0)
    src = root / "tokens.parquet"
    rows_per_group = max(1, args.records // 16)
    pq.write_table(table, src, row_group_size=rows_per_group, compression="none")
    s3 = None
    if any(w.endswith("_s3") for w in only):
        from remote_servers import start_s3

        s3 = start_s3()
    ray = None
    if any(w.startswith("ray") for w in only):
        import ray

        import loaderx.ray as lray

        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        ds = ray.data.from_arrow(table).repartition(4).materialize()
    sharded = root / "sharded"
    loaderx.ingest_sharded(str(src), sharded, workers=args.workers).close()

    def once(workload: str) -> float:
        name = uuid.uuid4().hex[:8]
        t0 = time.perf_counter()
        if workload == "ingest":
            dst = root / name
            t = loaderx.ingest_sharded(str(src), dst, workers=args.workers)
        elif workload == "ray_local":
            dst = lray.write_table(ds, root / name)
        elif workload == "ray_s3":
            dst = lray.write_table(ds, f"s3://{s3.bucket}/{name}", storage_options=s3.options())
        else:
            dst = f"s3://{s3.bucket}/{name}"
            loaderx.copy_table(sharded, dst, storage_options=s3.options())
        took = time.perf_counter() - t0
        if workload != "ingest":
            options = s3.options() if str(dst).startswith("s3://") else None
            t = loaderx.open_table(dst, storage_options=options)
        rows = t.num_rows
        t.close()
        if rows != args.records:
            raise AssertionError(f"{workload}: {rows} rows, want {args.records}")
        if not str(dst).startswith("s3://"):
            shutil.rmtree(dst)
        return took

    result = {"records": args.records, "workers": args.workers}
    try:
        for w in only:
            once(w)  # warm-up
            runs = [once(w) for _ in range(args.rounds)]
            result[w] = statistics.median(runs)
            print(f"{w}: median {result[w]:.3f} s over {runs}", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if ray is not None:
            ray.shutdown()
        if s3 is not None:
            s3.server.stop()
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
