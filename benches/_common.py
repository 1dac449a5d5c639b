"""Shared machinery of the store benchmarks: machine, limits, timing, checks, report.

A run has one workload and a list of backends. Each backend writes the same
records (timed), is validated against the source on every record and on every
batch of the random plan (untimed; this also warms the page cache). Then
every backend, still open, gathers the plan repeatedly for at least
``min_time`` seconds in each of several interleaved rounds (the order rotates
each round, and memcpy is measured in every round too); each reports its
median round, so a drift of the machine's memory bandwidth during the run
does not favour whichever backend ran at a good moment. Throughputs are
logical: uncompressed NumPy payload bytes returned by the public API divided by
the time spent inside the gather calls. The physical limits (memcpy on 1, 2 and
all threads; single-core zstd level-3 decode of the workload's own records) are
measured in the same process so that the ratios in the table compare numbers
taken under the same conditions.
"""

from __future__ import annotations

import argparse
import bisect
import concurrent.futures
import datetime as _dt
import functools
import gc
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from _workloads import index_plan

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
# Machine description
# --------------------------------------------------------------------------


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _cpu_model() -> str:
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _ranges(cpus: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out: list[str] = []
    cpus = sorted(cpus)
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def _cgroup_dirs(mount: Path, rel: str) -> list[Path]:
    """Existing cgroup directories from ``rel`` up to the mount root."""
    parts = [p for p in rel.split("/") if p]
    dirs = []
    for k in range(len(parts), -1, -1):
        d = mount.joinpath(*parts[:k])
        if d.is_dir():
            dirs.append(d)
    return dirs


def _cgroup_limits() -> dict:
    """Tightest memory limit (bytes) and CPU quota (cores) over the cgroup ancestry."""
    memory: int | None = None
    cpu: float | None = None
    text = _read("/proc/self/cgroup") or ""
    root = Path("/sys/fs/cgroup")
    version = None
    for line in text.splitlines():
        hier, controllers, rel = line.split(":", 2)
        names = controllers.split(",") if controllers else []
        if hier == "0" and not names:  # cgroup v2 unified hierarchy
            if not (root / "cgroup.controllers").exists():
                continue
            version = "v2"
            for d in _cgroup_dirs(root, rel):
                m = _read(d / "memory.max")
                if m and m != "max":
                    memory = min(memory or int(m), int(m))
                c = _read(d / "cpu.max")
                if c and not c.startswith("max"):
                    quota, period = c.split()
                    cores = int(quota) / int(period)
                    cpu = min(cpu or cores, cores)
            continue
        if "memory" in names:
            version = "v1"
            for d in _cgroup_dirs(root / "memory", rel):
                m = _read(d / "memory.limit_in_bytes")
                if m and int(m) < (1 << 62):
                    memory = min(memory or int(m), int(m))
        if "cpu" in names:
            version = "v1"
            mount = next((root / n for n in ("cpu", "cpu,cpuacct") if (root / n).is_dir()), None)
            for d in _cgroup_dirs(mount, rel) if mount else []:
                q, p = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
                if q and p and int(q) > 0:
                    cores = int(q) / int(p)
                    cpu = min(cpu or cores, cores)
    return {"version": version, "memory_limit_bytes": memory, "cpu_quota_cores": cpu}


def _ram_bytes() -> int | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def _filesystem(path: Path) -> dict:
    """Mount point, device and type of the filesystem holding ``path``."""
    best = {"mount": None, "device": None, "type": None}
    target = str(path.resolve())
    for line in (_read("/proc/mounts") or "").splitlines():
        device, mount, fstype = line.split()[:3]
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best["mount"] or ""):
            best = {"mount": mount, "device": device, "type": fstype}
    return best


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _elf_section_names(path: Path) -> list[str]:
    """Section names of a 64-bit ELF file ([] for anything else)."""
    import struct

    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
            return []
        end = "<" if head[5] == 1 else ">"
        (shoff,) = struct.unpack_from(end + "Q", head, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", head, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)

        def section(i: int) -> tuple[int, int, int]:
            name, _, _, _, offset, size = struct.unpack_from(end + "IIQQQQ", table, i * shentsize)
            return name, offset, size

        _, offset, size = section(shstrndx)
        f.seek(offset)
        strtab = f.read(size)
    names = []
    for i in range(shnum):
        at = section(i)[0]
        names.append(strtab[at : strtab.index(b"\0", at)].decode(errors="replace"))
    return names


def native_build() -> dict:
    """The loaderx extension module in use, and whether it looks like a dev build.

    This repository's dev profile (``scripts/test.sh``, plain ``maturin
    develop``) keeps DWARF line tables and compiles the loaderx crate itself
    unoptimised; the release profile carries no ``.debug_*`` sections. A dev
    build measures the wrong thing, so the reports flag it.
    """
    try:
        from loaderx import _native
    except ImportError as e:
        return {"path": None, "error": str(e)}
    path = Path(_native.__file__)
    debug = sorted(n for n in _elf_section_names(path) if n.startswith(".debug_"))
    return {
        "path": str(path),
        "bytes": path.stat().st_size,
        "debug_sections": debug,
        "likely_dev_build": bool(debug),
    }


def format_native_build(nb: dict) -> str:
    if nb.get("path") is None:
        return f"- loaderx extension: not importable ({nb.get('error')})"
    text = f"- loaderx extension: {nb['path']} ({nb['bytes'] / MIB:.1f} MiB)"
    if nb["likely_dev_build"]:
        text += (
            "; WARNING: it carries DWARF sections, the mark of a dev-profile build "
            "(loaderx unoptimised): rebuild with `maturin develop --release` before measuring"
        )
    return text


# The packages whose versions a machine description lists (when installed).
STORE_PACKAGES = ("loaderx", "pyarrow", "lmdb", "pylance", "h5py", "zstandard")


def describe_machine(store_dir: Path, packages: Sequence[str] = STORE_PACKAGES) -> dict:
    affinity = _affinity()
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "affinity": _ranges(affinity),
        "affinity_count": len(affinity),
        "cgroup": _cgroup_limits(),
        "ram_bytes": _ram_bytes(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "gil_enabled": gil,
        "numpy": np.__version__,
        "packages": {d: _version(d) for d in packages},
        "store_dir": str(store_dir),
        "store_filesystem": _filesystem(store_dir),
    }


def format_machine(m: dict) -> str:
    cg = m["cgroup"]
    mem = cg["memory_limit_bytes"]
    cpu = cg["cpu_quota_cores"]
    fs = m["store_filesystem"]
    pk = ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v)
    load = m["load_average"]
    return "\n".join(
        [
            f"- date: {m['date_utc']}",
            f"- CPU: {m['cpu_model']}; {m['logical_cpus']} logical CPUs, "
            f"affinity {m['affinity']} ({m['affinity_count']})",
            f"- RAM: {m['ram_bytes'] / GIB:.1f} GiB; cgroup {cg['version'] or 'none'}: "
            f"memory {'unlimited' if mem is None else f'{mem / GIB:.1f} GiB'}, "
            f"cpu {'unlimited' if cpu is None else f'{cpu:g} cores'}",
            f"- load average at start: {' '.join(f'{x:.2f}' for x in load) if load else 'n/a'}",
            f"- {m['python']} (GIL {'on' if m['gil_enabled'] else 'off'}), numpy {m['numpy']}; "
            f"{pk}",
            f"- {m['platform']}",
            f"- stores: {m['store_dir']} on {fs['type']} ({fs['device']})",
        ]
    )


# --------------------------------------------------------------------------
# Physical limits
# --------------------------------------------------------------------------


def _rates(nbytes: int, seconds: list[float]) -> dict:
    s = np.asarray(seconds)
    return {
        "best_gib_s": nbytes / s.min() / GIB,
        "median_gib_s": nbytes / float(np.median(s)) / GIB,
        "reps": len(seconds),
    }


def _repeat(fn: Callable[[], None], min_time: float, min_reps: int = 3) -> list[float]:
    fn()  # warm-up, not counted
    reps: list[float] = []
    start = time.perf_counter()
    while len(reps) < min_reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        reps.append(time.perf_counter() - t0)
    return reps


def _copy_shares(pool, dst: np.ndarray, src: np.ndarray, shares: list[slice]) -> None:
    if len(shares) == 1:
        np.copyto(dst, src)
    else:
        list(pool.map(lambda s: np.copyto(dst[s], src[s]), shares))


def measure_memcpy(buffer_bytes: int, thread_counts: Sequence[int], min_time: float) -> dict:
    """np.copyto GiB/s between two pre-faulted buffers, split across threads."""
    src = np.full(buffer_bytes, 7, dtype=np.uint8)
    dst = np.zeros(buffer_bytes, dtype=np.uint8)
    out = {}
    for threads in thread_counts:
        bounds = np.linspace(0, buffer_bytes, threads + 1).astype(np.int64)
        shares = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            copy_all = functools.partial(_copy_shares, pool, dst, src, shares)
            out[str(threads)] = _rates(buffer_bytes, _repeat(copy_all, min_time))
    return out


def measure_batch_copy(batch_bytes: int, min_time: float) -> dict:
    """One thread copying one batch into a reused buffer vs into a fresh np.empty."""
    src = np.full(batch_bytes, 7, dtype=np.uint8)
    reused = np.zeros(batch_bytes, dtype=np.uint8)

    def into_reused() -> None:
        np.copyto(reused, src)

    def into_fresh() -> None:
        dst = np.empty(batch_bytes, dtype=np.uint8)
        np.copyto(dst, src)

    return {
        "batch_bytes": batch_bytes,
        "prefaulted": _rates(batch_bytes, _repeat(into_reused, min_time)),
        "fresh": _rates(batch_bytes, _repeat(into_fresh, min_time)),
    }


def measure_zstd(records: Sequence[np.ndarray], min_time: float) -> dict:
    """python-zstandard level 3 on one thread over the workload's own records.

    Every record is compressed on its own (timed once: the single-threaded
    compression reference for the write column), then the frames are decoded
    one by one in a Python loop, whole passes repeated until ``min_time``.
    """
    import zstandard

    cctx = zstandard.ZstdCompressor(level=3)
    t0 = time.perf_counter()
    frames = [cctx.compress(r) for r in records]
    compress_s = time.perf_counter() - t0
    raw = int(sum(r.nbytes for r in records))
    packed = sum(len(f) for f in frames)

    decompress = zstandard.ZstdDecompressor().decompress
    passes: list[float] = []
    start = time.perf_counter()
    while not passes or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        for f in frames:
            decompress(f)
        passes.append(time.perf_counter() - t0)
    best = min(passes)
    return {
        "level": 3,
        "records": len(frames),
        "ratio": raw / packed,
        "compress_s": compress_s,
        "compress_gib_s": raw / compress_s / GIB,
        "decode_best_gib_s": raw / best / GIB,
        "decode_median_gib_s": raw / float(np.median(passes)) / GIB,
        "decode_krecords_s": len(frames) / best / 1e3,
        "passes": len(passes),
    }


def measure_limits(records: Sequence[np.ndarray], batch_bytes: int, *, quick: bool) -> dict:
    cpus = len(_affinity())
    counts = sorted({1, 2, cpus})
    min_time = 0.1 if quick else 0.5
    log(f"limits: memcpy on {counts} threads")
    memcpy = measure_memcpy((32 if quick else 512) << 20, counts, min_time)
    batch = measure_batch_copy(batch_bytes, min_time)
    log("limits: zstd-3 single-core compress/decode of the workload records")
    zstd = measure_zstd(records, 0.2 if quick else 1.0)
    return {
        "memcpy": memcpy,
        "memcpy_all_threads": str(cpus),
        "batch_copy": batch,
        "zstd": zstd,
    }


def format_limits(lim: dict) -> str:
    mc = lim["memcpy"]
    threads = ", ".join(
        f"{t} thread{'s' if t != '1' else ''} {v['best_gib_s']:.2f}" for t, v in mc.items()
    )
    bc = lim["batch_copy"]
    z = lim["zstd"]
    return "\n".join(
        [
            f"- memcpy (np.copyto, best rep of the median timing round, GiB/s): {threads}"
            f" (all threads = {lim['memcpy_all_threads']})",
            f"- one {_size(bc['batch_bytes'])} batch, 1 thread: into a reused buffer "
            f"{bc['prefaulted']['best_gib_s']:.2f} GiB/s, into a fresh np.empty "
            f"{bc['fresh']['best_gib_s']:.2f} GiB/s",
            f"- zstd level 3, 1 core, per record: ratio {z['ratio']:.2f}x, "
            f"compress {z['compress_gib_s']:.3f} GiB/s ({z['compress_s']:.2f} s for all records), "
            f"decode {z['decode_best_gib_s']:.3f} GiB/s ({z['decode_krecords_s']:.1f} krecords/s)",
        ]
    )


# --------------------------------------------------------------------------
# Timing, disk
# --------------------------------------------------------------------------


def allocated_bytes(path: Path) -> int:
    """Allocated blocks (st_blocks * 512), summed over every file under ``path``."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_blocks * 512
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(d, f)).st_blocks * 512
    return total


def timed_gather(
    gather: Callable[[np.ndarray], object],
    plan: Sequence[np.ndarray],
    plan_bytes: Sequence[int],
    min_time: float,
) -> dict:
    """Repeat the complete plan until ``min_time`` has elapsed; time every batch.

    Only the gather call is timed; dropping the previous result happens
    between timings. The cyclic garbage collector is paused, as timeit does.
    """
    latencies: list[float] = []
    passes = 0
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        while True:
            for idx in plan:
                t0 = time.perf_counter()
                out = gather(idx)
                latencies.append(time.perf_counter() - t0)
                del out
            passes += 1
            if time.perf_counter() - start >= min_time:
                break
        wall = time.perf_counter() - start
    finally:
        if gc_was_enabled:
            gc.enable()
    lat = np.asarray(latencies)
    seconds = float(lat.sum())
    records = passes * sum(len(i) for i in plan)
    nbytes = passes * int(sum(plan_bytes))
    return {
        "passes": passes,
        "batches": len(latencies),
        "records": records,
        "bytes": nbytes,
        "seconds": seconds,
        "wall_seconds": wall,
        "gib_s": nbytes / seconds / GIB,
        "krecords_s": records / seconds / 1e3,
        "p50_ms": float(np.percentile(lat, 50)) * 1e3,
        "p95_ms": float(np.percentile(lat, 95)) * 1e3,
        "p99_ms": float(np.percentile(lat, 99)) * 1e3,
    }


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------


class ValidationError(AssertionError):
    pass


class StoreMappings:
    """Address ranges of this process's mappings of files under one directory.

    A gather result whose data lies inside one of them is a lazy view of the
    store, not a result materialised in process memory.
    """

    def __init__(self, root: Path):
        self.root = str(Path(root).resolve())
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.refresh()

    def refresh(self) -> None:
        ranges = []
        for line in (_read("/proc/self/maps") or "").splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith(self.root + "/"):
                a, b = parts[0].split("-")
                ranges.append((int(a, 16), int(b, 16)))
        ranges.sort()
        self.starts = [a for a, _ in ranges]
        self.ends = [b for _, b in ranges]

    def check(self, arr: np.ndarray, what: str) -> None:
        if arr.nbytes == 0 or not self.starts:
            return
        lo = arr.__array_interface__["data"][0]
        hi = lo + arr.nbytes
        k = bisect.bisect_right(self.starts, hi - 1) - 1
        if k >= 0 and self.ends[k] > lo:
            raise ValidationError(f"{what}: result is a view of a memory-mapped store file")


def _check_array(got: object, want: np.ndarray, what: str) -> None:
    if not isinstance(got, np.ndarray) or isinstance(got, np.memmap):
        raise ValidationError(f"{what}: expected numpy.ndarray, got {type(got).__name__}")
    if got.dtype != want.dtype:
        raise ValidationError(f"{what}: dtype {got.dtype} != {want.dtype}")
    if got.shape != want.shape:
        raise ValidationError(f"{what}: shape {got.shape} != {want.shape}")
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        raise ValidationError(f"{what}: values differ at {len(bad)} positions, first {bad[0]}")


def validate_dense(
    out: object, records: np.ndarray, idx: np.ndarray, maps: StoreMappings | None, what: str
) -> None:
    want = records[idx]
    _check_array(out, want, what)
    if maps is not None:
        maps.check(out, what)


def validate_ragged(
    out: object,
    records: Sequence[np.ndarray],
    idx: np.ndarray,
    maps: StoreMappings | None,
    what: str,
) -> None:
    if not isinstance(out, list):
        raise ValidationError(f"{what}: expected list of arrays, got {type(out).__name__}")
    if len(out) != len(idx):
        raise ValidationError(f"{what}: {len(out)} arrays for {len(idx)} indices")
    for j, i in enumerate(idx.tolist()):
        _check_array(out[j], records[i], f"{what} position {j} (record {i})")
        if maps is not None:
            maps.check(out[j], f"{what} position {j} (record {i})")


# --------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------


class Backend:
    """One store under test. Subclasses name their codec in ``name``.

    Life cycle: ``prepare`` (untimed, reusable input preparation), ``build``
    (timed: the public write path), ``finish`` (untimed: final durability
    barrier, close, reopen for reading), ``gather`` and ``disk_bytes``,
    ``close``.
    """

    name = "?"
    # (import name, pip distribution) pairs this backend needs; all are
    # imported before anything is timed, so no import lands in a timer.
    requires: tuple[tuple[str, str], ...] = ()

    def __init__(self, root: Path, dtype: np.dtype, item_shape: tuple[int, ...] | None):
        self.root = Path(root)
        self.dtype = np.dtype(dtype)
        self.item_shape = item_shape  # None for ragged workloads
        self.root.mkdir(parents=True)

    def prepare(self, records) -> None:
        pass

    def build(self, records) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass

    def gather(self, idx: np.ndarray):
        raise NotImplementedError

    def disk_bytes(self) -> int:
        return allocated_bytes(self.root)

    def close(self) -> None:
        pass


def check_requirements(backends: Sequence[type[Backend]]) -> None:
    """Import every package the selected backends need; exit naming any missing."""
    missing = []
    needed = [("zstandard", "zstandard", "the zstd limit measurement")]
    for b in backends:
        needed += [(mod, dist, b.name) for mod, dist in b.requires]
    seen = set()
    for mod, dist, who in needed:
        if (mod, who) in seen:
            continue
        seen.add((mod, who))
        try:
            importlib.import_module(mod)
        except ImportError as e:
            missing.append(f"  {who}: needs Python package '{dist}' (import {mod}): {e}")
    if missing:
        hint = (
            "peers: pip install -r benches/requirements.txt; loaderx: build it into the "
            "venv (maturin develop / pip install .). Use --only to run a subset."
        )
        sys.exit("error: missing packages\n" + "\n".join(missing) + "\n" + hint)


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


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


@dataclass
class Workload:
    """One workload: how to make its records, and its default geometry."""

    name: str
    make: Callable[[int, int], object]
    records: int
    batch_size: int
    batches: int
    quick_records: int
    quick_batch_size: int
    quick_batches: int
    describe: str = ""
    extra: dict = field(default_factory=dict)


def parse_args(
    kind: str, workloads: dict[str, Workload], backends: dict[str, type[Backend]], argv=None
) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"bench_{kind}.py",
        description=f"Random-gather benchmark of {kind} record stores against peers.",
        epilog="Write timing: each backend's public build path is timed; reusable input "
        "preparation (zstd_dict's dictionary training) is not, nor is the final "
        "bulk durability barrier of Zrecord (sync/close), which happens after the "
        "timer; LMDB's commit, which fsyncs by default, is inside it. Compare "
        "durability with a dedicated benchmark, not this column.",
    )
    p.add_argument("--workload", choices=sorted(workloads), default="vision")
    p.add_argument("--records", type=int, help="number of records (workload default)")
    p.add_argument("--batches", type=int, help="batches in the random plan")
    p.add_argument("--batch-size", type=int, help="records per batch")
    p.add_argument(
        "--only",
        help="comma-separated subset of backends: " + ",".join(backends),
    )
    p.add_argument("--quick", action="store_true", help="seconds-long smoke run (not results)")
    p.add_argument("--seed", type=int, default=0, help="data and plan seed (default 0)")
    p.add_argument(
        "--min-time",
        type=float,
        help="seconds of repeated plan per backend (default 1.0; 0.2 with --quick)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        help="interleaved timing rounds; each backend reports its median round "
        "(default 5; 1 with --quick)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON directory")
    p.add_argument(
        "--tmp", type=Path, default=Path("/tmp"), help="parent of the store directory (/tmp)"
    )
    args = p.parse_args(argv)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in backends]
        if unknown:
            p.error(f"unknown backend(s) {', '.join(unknown)}; choose from {', '.join(backends)}")
        args.selected = [n for n in backends if n in names]
    else:
        args.selected = list(backends)
    wl = workloads[args.workload]
    if args.quick:
        args.records = args.records or wl.quick_records
        args.batch_size = args.batch_size or wl.quick_batch_size
        args.batches = args.batches or wl.quick_batches
        args.min_time = args.min_time if args.min_time is not None else 0.2
        args.rounds = args.rounds or 1
    else:
        args.records = args.records or wl.records
        args.batch_size = args.batch_size or wl.batch_size
        args.batches = args.batches or wl.batches
        args.min_time = args.min_time if args.min_time is not None else 1.0
        args.rounds = args.rounds or 5
    for flag in ("records", "batch_size", "batches", "rounds"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be positive")
    return args


def _sizes(records) -> np.ndarray:
    if isinstance(records, np.ndarray):
        return np.full(len(records), records[0].nbytes if len(records) else 0, dtype=np.int64)
    return np.fromiter((r.nbytes for r in records), dtype=np.int64, count=len(records))


def build_backend(
    cls: type[Backend],
    root: Path,
    records,
    plan: list[np.ndarray],
    validate: Callable,
    spec: dict,
    logical_bytes: int,
) -> tuple[Backend, dict]:
    """Writes (timed) and validates one backend; returns it open, for timing."""
    name = cls.name
    # A throw-away store of a few records first, so one-time library set-up
    # (lazy initialisation, first-call caches) stays out of the write timer.
    warm = cls(root.with_name(root.name + ".warm-up"), **spec)
    try:
        sample = records[: min(len(records), 32)]
        warm.prepare(sample)
        warm.build(sample)
        warm.finish()
    finally:
        warm.close()
        shutil.rmtree(warm.root, ignore_errors=True)

    backend = cls(root, **spec)
    try:
        log(f"{name}: prepare")
        backend.prepare(records)
        gc.collect()
        log(f"{name}: write")
        t0 = time.perf_counter()
        backend.build(records)
        write_s = time.perf_counter() - t0
        backend.finish()
        disk = backend.disk_bytes()
        if name.endswith("-raw") and disk < 0.95 * logical_bytes:
            log(f"warning: {name} occupies {disk / logical_bytes:.2f} of the logical bytes")

        log(f"{name}: validate every record and every planned batch")
        maps = StoreMappings(root)
        n = len(records)
        step = max(len(plan[0]), 1)
        for lo in range(0, n, step):
            idx = np.arange(lo, min(lo + step, n), dtype=np.int64)
            out = backend.gather(idx)
            if lo == 0:
                maps.refresh()
            validate(out, records, idx, maps, f"{name} sweep {lo}")
        maps.refresh()
        for b, idx in enumerate(plan):
            out = backend.gather(idx)
            validate(out, records, idx, maps, f"{name} plan batch {b}")
        del out
    except BaseException:
        backend.close()
        raise
    return backend, {
        "write_s": write_s,
        "write_gib_s": logical_bytes / write_s / GIB,
        "disk_bytes": disk,
        "logical_over_disk": logical_bytes / disk if disk else None,
        "validated_records": n,
        "validated_batches": len(plan),
    }


def timed_rounds(
    opened: dict[str, Backend],
    plan: list[np.ndarray],
    plan_bytes: list[int],
    min_time: float,
    rounds: int,
    memcpy_bytes: int,
    memcpy_threads: Sequence[int],
) -> tuple[dict[str, list[dict]], list[dict]]:
    """Times every open backend in ``rounds`` interleaved rounds.

    This VM's memory bandwidth drifts by tens of percent from minute to
    minute, so timing one backend after another would compare different
    machines. Instead each round times every backend once (the whole plan,
    repeated for ``min_time``), in an order rotated by one each round, and
    measures the memcpy limit alongside; each backend then reports its median
    round.
    """
    names = list(opened)
    per: dict[str, list[dict]] = {n: [] for n in names}
    memcpy: list[dict] = []
    for r in range(rounds):
        k = r % len(names) if names else 0
        for name in names[k:] + names[:k]:
            log(f"round {r + 1}/{rounds}: {name}: gather")
            per[name].append(timed_gather(opened[name].gather, plan, plan_bytes, min_time))
        memcpy.append(measure_memcpy(memcpy_bytes, memcpy_threads, min(min_time, 0.5)))
    return per, memcpy


def median_round(rounds: list[dict]) -> dict:
    """The round with the median gather rate (the lower middle of an even count)."""
    ordered = sorted(rounds, key=lambda g: g["gib_s"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["rounds_gib_s"] = [g["gib_s"] for g in rounds]
    return chosen


def run(
    kind: str,
    workloads: dict[str, Workload],
    backends: dict[str, type[Backend]],
    validate: Callable,
    spec_of: Callable[[object], dict],
    argv=None,
) -> dict:
    args = parse_args(kind, workloads, backends, argv)
    selected = [backends[n] for n in args.selected]
    check_requirements(selected)
    wl = workloads[args.workload]
    run_name = f"{kind}-{wl.name}" + ("-quick" if args.quick else "")

    log(f"{run_name}: generating {args.records} records (seed {args.seed})")
    t0 = time.perf_counter()
    records = wl.make(args.records, args.seed)
    gen_s = time.perf_counter() - t0
    plan = index_plan(args.records, args.batch_size, args.batches, args.seed)
    sizes = _sizes(records)
    plan_bytes = [int(sizes[idx].sum()) for idx in plan]
    logical = int(sizes.sum())

    store_dir = Path(tempfile.mkdtemp(prefix=f"loaderx-bench-{run_name}-", dir=args.tmp))
    try:
        machine = describe_machine(store_dir)
        if machine["store_filesystem"]["type"] in ("tmpfs", "ramfs"):
            log(f"warning: {store_dir} is on {machine['store_filesystem']['type']}, not a disk")
        limits = measure_limits(records, int(np.mean(plan_bytes)), quick=args.quick)
        results: dict[str, dict] = {}
        opened: dict[str, Backend] = {}
        try:
            for cls in selected:
                opened[cls.name], results[cls.name] = build_backend(
                    cls, store_dir / cls.name, records, plan, validate, spec_of(records), logical
                )
            per, memcpy = timed_rounds(
                opened,
                plan,
                plan_bytes,
                args.min_time,
                args.rounds,
                (32 if args.quick else 512) << 20,
                [int(t) for t in limits["memcpy"]],
            )
        finally:
            for backend in opened.values():
                backend.close()
        for name, rounds in per.items():
            results[name]["gather"] = median_round(rounds)
        # The memcpy limit, like the backends: the median round's best rep.
        for t, v in limits["memcpy"].items():
            bests = [m[t]["best_gib_s"] for m in memcpy]
            v["before_rounds_best_gib_s"] = v["best_gib_s"]
            v["rounds_best_gib_s"] = bests
            v["best_gib_s"] = sorted(bests)[(len(bests) - 1) // 2]
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)

    ratios = compute_ratios(results, limits)
    config = {
        "kind": kind,
        "workload": wl.name,
        "quick": args.quick,
        "records": args.records,
        "batch_size": args.batch_size,
        "batches": args.batches,
        "seed": args.seed,
        "min_time_s": args.min_time,
        "rounds": args.rounds,
        "logical_bytes": logical,
        "logical_mib": logical / MIB,
        "mean_batch_bytes": float(np.mean(plan_bytes)),
        "generate_s": gen_s,
        "backends": args.selected,
        **wl.extra,
        **workload_stats(records),
    }
    config["describe"] = wl.describe.format(**config)
    payload = {
        "name": run_name,
        "config": config,
        "machine": machine,
        "limits": limits,
        "results": results,
        "ratios": ratios,
    }
    path = write_json(args.out, run_name, payload)

    print(f"## {run_name}\n")
    print(config["describe"])
    print(format_records(config) + "\n")
    print("Machine:\n" + format_machine(machine) + "\n")
    print("Limits measured in this run:\n" + format_limits(limits) + "\n")
    print(format_table(results, ratios, logical) + "\n")
    print(TABLE_NOTES + "\n")
    print(f"JSON: {path}")
    return payload


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
