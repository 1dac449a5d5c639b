"""Reporting of the benchmarks: units, progress lines, JSON, and the store table.

Units (GiB, MiB) and the output directory, ``log`` (progress on stderr),
``write_json``, the number formats of the tables, and the store benchmarks'
report: the ratio columns against the reference rows, the markdown table and
its notes, and the description of the records.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

GIB = float(1 << 30)
MIB = float(1 << 20)

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = BENCH_DIR / "out"

# The reference rows of the ratio columns.
NPY = "npy-mmap-raw"
ARROW = "arrow-ipc-raw"
PYZSTD = "python-zstandard"
Z_RAW = "zrecord-raw"
Z_ZSTD = "zrecord-zstd"
Z_DICT = "zrecord-zstd_dict"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def compute_ratios(results: dict, limits: dict) -> dict:
    def gib(name: str) -> float | None:
        return results[name]["gather"]["gib_s"] if name in results else None

    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    ratios: dict[str, dict] = {}
    for name in results:
        if name.startswith("zrecord-"):
            ratios[name] = {
                "gather_vs_npy_mmap_raw": div(gib(name), gib(NPY)),
                "gather_vs_arrow_ipc_raw": div(gib(name), gib(ARROW)),
            }
    if Z_RAW in results:
        two = limits["memcpy"].get("2", {}).get("best_gib_s")
        ratios[Z_RAW]["gather_vs_memcpy_2_threads"] = div(gib(Z_RAW), two)
    if Z_ZSTD in results:
        core = limits["zstd"]["decode_best_gib_s"]
        z = ratios[Z_ZSTD]
        z["gather_vs_2x_zstd_core_decode"] = div(gib(Z_ZSTD), 2 * core)
        z["gather_vs_python_zstandard"] = div(gib(Z_ZSTD), gib(PYZSTD))
        # Speed-up of the store write over compressing the same records alone.
        z["write_speedup_vs_python_zstandard_compress"] = div(
            limits["zstd"]["compress_s"], results[Z_ZSTD]["write_s"]
        )
    if Z_DICT in results and Z_ZSTD in results:
        d, z = results[Z_DICT], results[Z_ZSTD]
        ratios[Z_DICT]["disk_vs_zrecord_zstd"] = div(d["disk_bytes"], z["disk_bytes"])
        ratios[Z_DICT]["krecords_vs_zrecord_zstd"] = div(
            d["gather"]["krecords_s"], z["gather"]["krecords_s"]
        )
    return ratios


def _rate(v: float) -> str:
    """Two decimals, or three significant digits below 0.1."""
    return f"{v:.2f}" if v >= 0.1 else f"{v:.3g}"


def _size(nbytes: float) -> str:
    return f"{nbytes / MIB:.1f} MiB" if nbytes >= MIB else f"{nbytes / 1024:.1f} KiB"


def _x(v: float | None, suffix: str = "") -> str:
    return "—" if v is None else f"{v:.2f}×{suffix}"


def _target_cell(met: bool | None, text: str) -> str:
    if met is None:
        return text
    return f"{text}: {'met' if met else 'MISSED'}"


def format_table(results: dict, ratios: dict, logical_bytes: int) -> str:
    head = [
        "backend",
        "write s",
        "write GiB/s",
        "disk MiB",
        "logical/disk",
        "gather GiB/s",
        "krec/s",
        "p95 ms",
        "vs npy-mmap-raw",
        "vs arrow-ipc-raw",
        "vs physical limit",
        "vs peer",
    ]
    rows = [head, ["---"] + ["---:"] * (len(head) - 3) + ["---", "---"]]
    for name, r in results.items():
        g = r["gather"]
        q = ratios.get(name, {})
        limit = ""
        peer = ""
        if name == Z_RAW:
            limit = _x(q.get("gather_vs_memcpy_2_threads"), " memcpy-2T")
        elif name == Z_ZSTD:
            limit = _x(q.get("gather_vs_2x_zstd_core_decode"), " 2×zstd-core")
            peer = (
                f"gather {_x(q.get('gather_vs_python_zstandard'))} python-zstandard; "
                f"write {_x(q.get('write_speedup_vs_python_zstandard_compress'))} "
                "the speed of 1-core python-zstandard compress"
            )
        elif name == Z_DICT:
            peer = (
                f"disk {_x(q.get('disk_vs_zrecord_zstd'))}, "
                f"krec/s {_x(q.get('krecords_vs_zrecord_zstd'))} zrecord-zstd"
            )
        rows.append(
            [
                name,
                f"{r['write_s']:.2f}",
                _rate(logical_bytes / r["write_s"] / GIB),
                f"{r['disk_bytes'] / MIB:.1f}",
                f"{logical_bytes / r['disk_bytes']:.2f}×",
                _rate(g["gib_s"]),
                f"{g['krecords_s']:.1f}",
                f"{g['p95_ms']:.2f}",
                _x(q.get("gather_vs_npy_mmap_raw")) if q else "",
                _x(q.get("gather_vs_arrow_ipc_raw")) if q else "",
                limit,
                peer,
            ]
        )
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


TABLE_NOTES = """\
- write: the backend's public build path, timed from an empty directory until
  every record is accepted. Not timed: reusable input preparation (the
  zstd_dict dictionary is trained first) and Zrecord's final sync()/close().
  LMDB's commit, which fsyncs by default, is timed. Durability differs per
  backend, so this column does not compare durability.
- disk: allocated blocks (st_blocks * 512) of every file of the store.
- gather GiB/s: uncompressed payload bytes returned / time inside the gather
  calls; the whole random plan repeats until the minimum time has elapsed, in
  each of several interleaved rounds (every backend once per round, order
  rotated); the median round is reported, and memcpy is taken the same way.
  krec/s: records returned per second. p95: one batch's gather latency.
- vs npy-mmap-raw, vs arrow-ipc-raw: gather throughput ratio (loaderx rows).
- vs physical limit: zrecord-raw against the 2-thread memcpy rate, zrecord-zstd
  against twice the single-core zstd-3 decode rate of the same records.
- vs peer: zrecord-zstd's gather against the python-zstandard backend, and its
  write time against one core compressing the same records with
  python-zstandard (speed-up, > 1 is faster); zrecord-zstd_dict's disk bytes
  and krecords/s against zrecord-zstd."""


def write_json(out_dir: Path, name: str, payload: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    return path


def format_records(config: dict) -> str:
    if "item_shape" in config:
        return f"Records: {config['dtype']} {tuple(config['item_shape'])}."
    parts = []
    for axis in range(config["ndim"]):
        d = config[f"dim{axis}"]
        if isinstance(d, int):
            parts.append(f"dim {axis} = {d}")
        else:
            parts.append(
                f"dim {axis}: {d['min']}..{d['max']}, p10 {d['p10']:g}, median {d['median']:g}, "
                f"mean {d['mean']:.1f}, p90 {d['p90']:g}"
            )
    return f"Records: {config['dtype']}, " + "; ".join(parts) + "."


def workload_stats(records) -> dict:
    """Shape statistics of the records, for the report."""
    if isinstance(records, np.ndarray):
        return {"item_shape": list(records.shape[1:]), "dtype": str(records.dtype)}
    shapes = np.array([r.shape for r in records])
    stats = {"dtype": str(records[0].dtype), "ndim": int(shapes.shape[1])}
    for axis in range(shapes.shape[1]):
        col = shapes[:, axis]
        if col.min() == col.max():
            stats[f"dim{axis}"] = int(col[0])
            continue
        p10, p50, p90 = np.percentile(col, [10, 50, 90])
        stats[f"dim{axis}"] = {
            "min": int(col.min()),
            "p10": float(p10),
            "median": float(p50),
            "mean": float(col.mean()),
            "p90": float(p90),
            "max": int(col.max()),
        }
    return stats
