"""The machine a benchmark runs on, and its physical limits.

The description (CPU, affinity, cgroup limits, RAM, load, versions, date,
the filesystem of the data, the loaderx extension in use) and the limits
measured in the same process as the benchmark: memcpy on 1, 2 and all
threads, one batch copied into a reused vs a fresh buffer, and single-core
zstd level-3 compression and decode of the workload's own records.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import functools
import importlib.metadata
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Callable

import numpy as np

from _report import GIB, MIB, _size, log

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


# The packages whose versions the sampler and loader reports list (when installed).
LOADER_PACKAGES = ("loaderx", "torch", "grain")


def describe_machine_and_build(
    path: Path, packages: Sequence[str] = LOADER_PACKAGES
) -> tuple[dict, str]:
    """The machine description plus the loaderx build in use, and its text."""
    machine = describe_machine(path, packages)
    machine["loaderx_native"] = nb = native_build()
    if nb.get("likely_dev_build"):
        log(
            f"warning: {nb['path']} carries DWARF sections, the mark of a dev-profile "
            "build; measure a release build (maturin develop --release)"
        )
    return machine, format_machine(machine) + "\n" + format_native_build(nb)


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
