"""Ray Data read throughput of a plain table: ``loaderx.ray.read_table``
against ``ray.data.read_parquet`` and ``ray.data.read_numpy`` of the same data.

Workloads: dense-vision (uint8 (3, 224, 224) ``image`` + int64 ``label``) and
ragged-tokens (int32 16..512 ``tokens`` + int64 ``label``); ``label`` is the
record number. The table is one store per column under one directory, written
with codec raw and zstd; the Parquet file is ``loaderx.parquet.export`` of the
raw table (zstd pages, whatever the store codec); the ``.npy`` file holds the
dense images (dense-vision only: ``read_numpy`` has no ragged form). Every
reader runs on the same local Ray (``ray.init(num_cpus=2)``) in the same
process, in interleaved rounds (order rotated per round); a read is a fresh
dataset consumed in full with ``iter_batches(batch_size, batch_format="numpy")``.
Before timing, one ordered pass (``preserve_order=True``) per reader checks
every record and label against the source; timed passes run with Ray's
default order and check the record count and the sum of the labels.

Run from the repository root with the project venv::

    .venv/bin/python benches/bench_ray.py
    .venv/bin/python benches/bench_ray.py --workload vision --codecs raw
    .venv/bin/python benches/bench_ray.py --quick       # smoke run

The markdown table goes to stdout, progress to stderr and everything measured
to ``benches/out/ray.json`` (``-quick`` appended for --quick).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads as wl  # noqa: E402
from _machine import describe_machine_and_build  # noqa: E402
from _report import DEFAULT_OUT, GIB, MIB, _rate, log, write_json  # noqa: E402

WORKLOADS = {
    "vision": dict(column="image", ragged=False, records=2500, quick_records=64),
    "tokens": dict(column="tokens", ragged=True, records=200_000, quick_records=4000),
}
CODECS = ("raw", "zstd")
PACKAGES = ("loaderx", "ray", "pyarrow")


def _records(name: str, n: int, seed: int):
    return wl.dense_vision(n, seed) if name == "vision" else wl.ragged_tokens(n, seed)


def build(root: Path, name: str, records, codecs) -> dict:
    """The table per codec, the Parquet file and (dense) the .npy file."""
    from loaderx.parquet import export
    from loaderx.zrecord import DenseStore, RaggedStore

    col = WORKLOADS[name]["column"]
    n = len(records)
    labels = np.arange(n, dtype=np.int64)
    paths = {}
    for codec in codecs:
        table = root / f"{name}-{codec}"
        if isinstance(records, np.ndarray):
            data = DenseStore.create(table / col, records.dtype, records.shape[1:], codec=codec)
            data.append(records)
        else:
            data = RaggedStore.create(table / col, records[0].dtype, codec=codec)
            data.append(records)
        lab = DenseStore.create(table / "label", np.int64, (), codec=codec)
        lab.append(labels)
        if codec == codecs[0]:
            paths["parquet"] = root / f"{name}.parquet"
            export({col: data, "label": lab}, paths["parquet"])
        data.close()
        lab.close()
        paths[f"loaderx-{codec}"] = table
    if isinstance(records, np.ndarray):
        paths["numpy"] = root / f"{name}.npy"
        np.save(paths["numpy"], records)
    return paths


def dataset(reader: str, path: Path):
    import ray.data

    import loaderx.ray

    if reader.startswith("loaderx-"):
        return loaderx.ray.read_table(str(path), index_column=None)
    if reader == "parquet":
        return ray.data.read_parquet(str(path))
    return ray.data.read_numpy(str(path))


def _payload(batch: dict, col: str):
    return batch[col] if col in batch else batch["data"]


def validate(reader: str, path: Path, name: str, records, batch_size: int) -> int:
    """One pass checking every record against the source record its label
    names, and that every label comes exactly once; returns logical bytes.

    Rows are matched by label, not position: Ray's read_parquet does not
    keep the file's row order even with ``preserve_order`` (measured with Ray
    2.60: the first rows came from the file's second row group)."""
    import ray.data

    col = WORKLOADS[name]["column"]
    ctx = ray.data.DataContext.get_current()
    old = ctx.execution_options.preserve_order
    ctx.execution_options.preserve_order = True
    seen = np.zeros(len(records), dtype=bool)
    try:
        nbytes = 0
        for batch in dataset(reader, path).iter_batches(
            batch_size=batch_size, batch_format="numpy"
        ):
            data = _payload(batch, col)
            k = len(data)
            if "label" in batch:
                labels = np.asarray(batch["label"], dtype=np.int64)
            else:  # read_numpy: records only, in file order
                labels = np.arange(int(seen.sum()), int(seen.sum()) + k)
            if seen[labels].any():
                raise AssertionError(f"{reader}: a label came twice")
            seen[labels] = True
            if isinstance(records, np.ndarray):
                want = records[labels]
                if data.dtype != want.dtype or data.shape != want.shape:
                    raise AssertionError(f"{reader}: got {data.dtype} {data.shape}")
                if not np.array_equal(data, want):
                    raise AssertionError(f"{reader}: records {labels[0]}.. differ")
                nbytes += data.nbytes
            else:
                for lab, rec in zip(labels, data):
                    if isinstance(rec, dict):  # Parquet: the struct {data, shape}
                        rec = np.asarray(rec["data"]).reshape(rec["shape"])
                    rec = np.asarray(rec)
                    want = records[lab]
                    if rec.dtype != want.dtype or not np.array_equal(rec, want):
                        raise AssertionError(f"{reader}: record {lab} differs")
                    nbytes += rec.nbytes
        if not seen.all():
            raise AssertionError(f"{reader}: {int(seen.sum())} records, want {len(records)}")
        return nbytes
    finally:
        ctx.execution_options.preserve_order = old


def timed_read(reader: str, path: Path, name: str, n: int, batch_size: int) -> dict:
    col = WORKLOADS[name]["column"]
    ragged = WORKLOADS[name]["ragged"]
    records = label_sum = nbytes = 0
    t0 = time.perf_counter()
    for batch in dataset(reader, path).iter_batches(batch_size=batch_size, batch_format="numpy"):
        data = _payload(batch, col)
        records += len(data)
        if not ragged:
            nbytes += data.nbytes
        if "label" in batch:
            label_sum += int(batch["label"].sum())
    seconds = time.perf_counter() - t0
    if records != n:
        raise AssertionError(f"{reader}: {records} records, want {n}")
    if reader != "numpy" and label_sum != n * (n - 1) // 2:
        raise AssertionError(f"{reader}: label sum {label_sum}, want {n * (n - 1) // 2}")
    return {"seconds": seconds, "records": records, "bytes": nbytes}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_ray.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=("all", *WORKLOADS), default="all")
    p.add_argument("--codecs", default="raw,zstd", help="loaderx store codecs: raw,zstd")
    p.add_argument("--records", type=int, help="records (vision 2,500, tokens 200,000)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--rounds", type=int, help="interleaved rounds, median reported (5; 1 quick)")
    p.add_argument("--quick", action="store_true", help="smoke run (not results)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON directory")
    p.add_argument("--tmp", type=Path, default=Path("/tmp"), help="parent of the data (/tmp)")
    args = p.parse_args(argv)
    args.codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    if not args.codecs or any(c not in CODECS for c in args.codecs):
        p.error(f"--codecs: choose from {','.join(CODECS)}")
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.workloads = list(WORKLOADS) if args.workload == "all" else [args.workload]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    root = Path(tempfile.mkdtemp(prefix="loaderx-ray-", dir=args.tmp))
    machine, machine_text = describe_machine_and_build(root, PACKAGES)
    results: dict[str, dict] = {}
    geometry = {}
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        import ray.data

        ray.data.DataContext.get_current().enable_progress_bars = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        for name in args.workloads:
            w = WORKLOADS[name]
            n = args.records or (w["quick_records"] if args.quick else w["records"])
            log(f"{name}: generating {n} records")
            records = _records(name, n, args.seed)
            paths = build(root, name, records, args.codecs)
            readers = sorted(paths, key=lambda r: (not r.startswith("loaderx-"), r == "numpy"))
            logical = {}
            for reader in readers:
                log(f"{name} {reader}: validating every record (ordered pass)")
                logical[reader] = validate(reader, paths[reader], name, records, args.batch_size)
            if len(set(logical.values())) != 1:
                raise AssertionError(f"{name}: logical bytes differ between readers: {logical}")
            nbytes = next(iter(logical.values()))
            geometry[name] = {
                "records": n,
                "logical_bytes": nbytes,
                "batch_size": args.batch_size,
                "files_bytes": {
                    r: sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                    if p.is_dir()
                    else p.stat().st_size
                    for r, p in paths.items()
                },
            }
            del records
            rounds: dict[str, list[dict]] = {r: [] for r in readers}
            for rd in range(args.rounds):
                order = readers[rd % len(readers) :] + readers[: rd % len(readers)]
                for reader in order:
                    res = timed_read(reader, paths[reader], name, n, args.batch_size)
                    res["bytes"] = nbytes
                    rounds[reader].append(res)
                    log(
                        f"round {rd + 1}/{args.rounds} {name} {reader}: "
                        f"{nbytes / res['seconds'] / GIB:.3f} GiB/s"
                    )
            for reader, rs in rounds.items():
                secs = statistics.median(r["seconds"] for r in rs)
                results[f"{name}/{reader}"] = {
                    "workload": name,
                    "reader": reader,
                    "median_seconds": secs,
                    "rounds_seconds": [r["seconds"] for r in rs],
                    "records_s": n / secs,
                    "gib_s": nbytes / secs / GIB,
                }
            for reader in readers:
                if not reader.startswith("loaderx-"):
                    continue
                r = results[f"{name}/{reader}"]
                for peer in ("parquet", "numpy"):
                    pr = results.get(f"{name}/{peer}")
                    r[f"vs_read_{peer}"] = r["gib_s"] / pr["gib_s"] if pr else None
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)

    def x(v):
        return "—" if v is None else f"{v:.2f}×"

    head = ["workload", "reader", "records/s", "GiB/s", "rounds s", "vs read_parquet"]
    head.append("vs read_numpy")
    rows = [head, ["---", "---"] + ["---:"] * (len(head) - 2)]
    label = {"parquet": "ray.data.read_parquet", "numpy": "ray.data.read_numpy"}
    for r in results.values():
        rd = r["reader"]
        rows.append(
            [
                r["workload"],
                label[rd] if rd in label else f"loaderx.ray.read_table ({rd[len('loaderx-') :]})",
                f"{r['records_s']:,.0f}",
                _rate(r["gib_s"]),
                ", ".join(f"{s:.2f}" for s in r["rounds_seconds"]),
                x(r.get("vs_read_parquet")) if rd.startswith("loaderx-") else "",
                x(r.get("vs_read_numpy")) if rd.startswith("loaderx-") else "",
            ]
        )
    print(f"# Ray Data read throughput{' (quick: smoke, not results)' * args.quick}")
    print()
    print(machine_text)
    print()
    print(
        "Data: "
        + "; ".join(
            f"{k}: {g['records']} records, {g['logical_bytes'] / MIB:.0f} MiB logical, batch "
            f"{g['batch_size']}"
            for k, g in geometry.items()
        )
        + f". Median of {args.rounds} interleaved rounds; Ray local, num_cpus=2."
    )
    print()
    print("\n".join("| " + " | ".join(row) + " |" for row in rows))
    print()
    print(
        "- A read: dataset creation plus full consumption with iter_batches(batch_format="
        '"numpy"). GiB/s: logical payload bytes (image or tokens, not labels) / seconds.\n'
        "- Parquet: loaderx.parquet.export of the table (zstd pages) whatever the store codec; "
        ".npy: the dense images only, no labels.\n"
        "- Target: loaderx.ray.read_table (raw) ≥ 1.5× read_parquet on dense-vision."
    )
    target = results.get("vision/loaderx-raw", {}).get("vs_read_parquet")
    if target is not None:
        print(f"- Measured: {target:.2f}× ({'met' if target >= 1.5 else 'MISSED'}).")
    payload = {
        "benchmark": "ray",
        "quick": args.quick,
        "machine": machine,
        "config": {"codecs": args.codecs, "rounds": args.rounds, "seed": args.seed},
        "workloads": geometry,
        "results": results,
    }
    out = write_json(args.out, "ray" + ("-quick" if args.quick else ""), payload)
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
