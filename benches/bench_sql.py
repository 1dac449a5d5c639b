"""SQL and Parquet benchmarks on the dense-vision set.

Workload: 2,500 CHW uint8 images (3, 224, 224) plus an int64 label with ten
classes (``label = 3`` selects about 10 %), stored with codec raw.

Measured, in one run:

1. ``SELECT label, count(*) FROM t GROUP BY label``: bytes each store handle
   read (from its read counters) — only the label store should be touched.
2. ``SELECT image FROM t WHERE label = 3``: time with pushdown (the label
   predicate runs first, images are gathered for survivors only) against the
   same query with pushdown disabled (every image read, then filtered).
3. Export of the table to Parquet (zstd pages) against pyarrow writing the
   same Arrow data with ``pq.write_table(..., compression="zstd")``.
4. DuckDB running queries 1 and 2 over that Parquet file, as a reference.

    python benches/bench_sql.py [--records 2500] [--quick] [--out DIR]
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
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import loaderx  # noqa: E402
import loaderx.arrow  # noqa: E402
import loaderx.parquet  # noqa: E402
from loaderx import _native  # noqa: E402
from loaderx._sql import _tables  # noqa: E402
from loaderx.zrecord import DenseStore  # noqa: E402

import _machine  # noqa: E402
import _workloads  # noqa: E402

Q_GROUP = "SELECT label, count(*) AS n FROM t GROUP BY label ORDER BY label"
Q_FILTER = "SELECT image FROM t WHERE label = 3"


def timed(fn, min_time: float, reps: int = 3) -> tuple[float, object]:
    """Median seconds of one call (each repetition runs for at least min_time)."""
    result = fn()  # warm-up and the value to validate
    times = []
    for _ in range(reps):
        n = 0
        t0 = time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        times.append(dt / n)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=2500)
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out"))
    ap.add_argument("--tmp", default="/tmp")
    args = ap.parse_args()
    if args.quick:
        args.records, args.min_time = 200, 0.1
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(args.seed)
    images = _workloads.dense_vision(args.records, args.seed)
    labels = rng.integers(0, 10, args.records).astype(np.int64)
    root = tempfile.mkdtemp(prefix="loaderx-bench-sql-", dir=args.tmp)
    report: dict = {"workload": f"dense-vision {args.records} x (3, 224, 224) uint8 + int64 label"}
    try:
        report["machine"] = _machine.describe_machine(
            Path(root), packages=("loaderx", "pyarrow", "duckdb")
        )
        with DenseStore.create(
            os.path.join(root, "image"), np.uint8, images.shape[1:], codec="raw"
        ) as s:
            s.append(images)
        with DenseStore.create(os.path.join(root, "label"), np.int64, ()) as s:
            s.append(labels)
        streams = {
            "image": DenseStore.open(os.path.join(root, "image")),
            "label": DenseStore.open(os.path.join(root, "label")),
        }
        specs = _tables({"t": streams}, "record_id")

        def counters():
            return {k: s._live().read_counters()[1] for k, s in streams.items()}

        # 1. GROUP BY reads only the label store.
        before = counters()
        grouped = loaderx.sql(Q_GROUP, t=streams)
        after = counters()
        expect = np.bincount(labels, minlength=10)
        assert grouped["n"].to_pylist() == expect[grouped["label"].to_numpy()].tolist()
        read = {k: after[k] - before[k] for k in streams}
        report["group_by"] = {
            "bytes_read": read,
            "label_bytes": labels.nbytes,
            "image_bytes_read": read["image"],
            "label_read_over_label_bytes": read["label"] / labels.nbytes,
        }

        # 2. Late materialization against no pushdown, for each image codec.
        survivors = int((labels == 3).sum())
        with DenseStore.create(
            os.path.join(root, "image-zstd"), np.uint8, images.shape[1:], codec="zstd"
        ) as s:
            s.append(images)
        zstd_image = DenseStore.open(os.path.join(root, "image-zstd"))
        zstd_specs = _tables({"t": {"image": zstd_image, "label": streams["label"]}}, "record_id")

        def run_zstd(pushdown: bool):
            return pa.table(_native.sql(Q_FILTER, zstd_specs, pushdown))

        z_pd, zout = timed(lambda: run_zstd(True), args.min_time)
        assert zout.num_rows == survivors
        z_nopd, _ = timed(lambda: run_zstd(False), args.min_time)
        report["filter_zstd"] = {
            "seconds_pushdown": z_pd,
            "seconds_no_pushdown": z_nopd,
            "speedup": z_nopd / z_pd,
        }
        zstd_image.close()

        def run(pushdown: bool):
            return pa.table(_native.sql(Q_FILTER, specs, pushdown))

        with_pd, out = timed(lambda: run(True), args.min_time)
        got = out["image"].combine_chunks().to_numpy_ndarray()
        assert len(got) == survivors
        np.testing.assert_array_equal(
            np.sort(got.reshape(len(got), -1)[:, :64], axis=0),
            np.sort(images[labels == 3].reshape(survivors, -1)[:, :64], axis=0),
        )
        i0 = counters()["image"]
        run(True)
        image_read_pd = counters()["image"] - i0
        without_pd, out2 = timed(lambda: run(False), args.min_time)
        assert out2.num_rows == survivors
        i0 = counters()["image"]
        run(False)
        image_read_nopd = counters()["image"] - i0
        report["filter"] = {
            "selectivity": survivors / args.records,
            "seconds_pushdown": with_pd,
            "seconds_no_pushdown": without_pd,
            "speedup": without_pd / with_pd,
            "image_bytes_read_pushdown": image_read_pd,
            "image_bytes_read_no_pushdown": image_read_nopd,
        }

        # 3. Export against pyarrow writing the same Arrow data.
        path = os.path.join(root, "t.parquet")

        def export():
            if os.path.exists(path):
                os.remove(path)
            loaderx.parquet.export(streams, path)

        export_s, _ = timed(export, args.min_time, reps=1 if args.quick else 3)
        back = pq.read_table(path)
        np.testing.assert_array_equal(back["image"].combine_chunks().to_numpy_ndarray(), images)
        table = pa.table(loaderx.arrow.table(streams, index_column=None))
        pa_path = os.path.join(root, "pa.parquet")
        pa_s, _ = timed(
            lambda: pq.write_table(table, pa_path, compression="zstd"),
            args.min_time,
            reps=1 if args.quick else 3,
        )
        logical = images.nbytes + labels.nbytes
        report["export"] = {
            "logical_bytes": logical,
            "loaderx_gib_s": logical / export_s / 2**30,
            "pyarrow_gib_s": logical / pa_s / 2**30,
            "ratio": pa_s / export_s,
            "loaderx_file_bytes": os.path.getsize(path),
            "pyarrow_file_bytes": os.path.getsize(pa_path),
        }

        # 4. DuckDB over the Parquet file.
        con = duckdb.connect()
        src = f"read_parquet('{path}')"
        g_s, g = timed(
            lambda: con.execute(Q_GROUP.replace("FROM t", f"FROM {src}")).fetchall(), args.min_time
        )
        assert [n for _, n in g] == grouped["n"].to_pylist()
        f_s, f = timed(
            lambda: con.execute(Q_FILTER.replace("FROM t", f"FROM {src}")).to_arrow_table(),
            args.min_time,
        )
        ours_g, _ = timed(lambda: loaderx.sql(Q_GROUP, t=streams), args.min_time)
        report["duckdb_parquet"] = {
            "group_by_seconds": g_s,
            "filter_seconds": f_s,
            "loaderx_group_by_seconds": ours_g,
            "loaderx_filter_seconds": with_pd,
        }
        for s in streams.values():
            s.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    m = report["machine"]
    print("## SQL and Parquet (dense-vision)\n")
    print(f"{report['workload']}; {m['cpu_model']}, {m['logical_cpus']} CPUs; {m['date_utc']}\n")
    gb = report["group_by"]
    print(
        f"- GROUP BY label: read {gb['bytes_read']['label']} bytes of labels "
        f"({gb['label_read_over_label_bytes']:.2f}x the label bytes) and "
        f"{gb['image_bytes_read']} bytes of images"
    )
    fl = report["filter"]
    print(
        f"- WHERE label = 3 ({fl['selectivity']:.1%} selected): "
        f"{fl['seconds_pushdown'] * 1e3:.1f} ms with pushdown, "
        f"{fl['seconds_no_pushdown'] * 1e3:.1f} ms without: {fl['speedup']:.1f}x (target >= 5x); "
        f"image bytes read {fl['image_bytes_read_pushdown']} vs "
        f"{fl['image_bytes_read_no_pushdown']} (images stored raw)"
    )
    fz = report["filter_zstd"]
    print(
        f"- the same with images stored zstd (the default codec): "
        f"{fz['seconds_pushdown'] * 1e3:.1f} ms with pushdown, "
        f"{fz['seconds_no_pushdown'] * 1e3:.1f} ms without: {fz['speedup']:.1f}x"
    )
    ex = report["export"]
    print(
        f"- Parquet export: loaderx {ex['loaderx_gib_s']:.2f} GiB/s, pyarrow write_table(zstd) "
        f"{ex['pyarrow_gib_s']:.2f} GiB/s ({ex['ratio']:.2f}x); files {ex['loaderx_file_bytes']} "
        f"and {ex['pyarrow_file_bytes']} bytes"
    )
    dd = report["duckdb_parquet"]
    print(
        f"- DuckDB over the Parquet file: GROUP BY {dd['group_by_seconds'] * 1e3:.1f} ms "
        f"(loaderx.sql over stores {dd['loaderx_group_by_seconds'] * 1e3:.1f} ms), filter "
        f"{dd['filter_seconds'] * 1e3:.1f} ms "
        f"(loaderx.sql {dd['loaderx_filter_seconds'] * 1e3:.1f} ms)"
    )
    os.makedirs(args.out, exist_ok=True)
    name = "sql-quick.json" if args.quick else "sql.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(report, f, indent=2, default=str)


if __name__ == "__main__":
    main()
