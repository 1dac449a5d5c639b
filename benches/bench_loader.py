"""End-to-end loader benchmark: loaderx's DataLoader against torch and Grain.

The whole input pipeline (sample, gather, collate, hand over a batch) on
2,500 CHW RGB uint8 images of (3, 224, 224) from ``_workloads.dense_vision``
plus an int64 label stream holding each record's index, batch 256.
Pipelines: ``loaderx-raw`` and ``loaderx-zstd`` (a ``DenseStore`` per
stream, ``DataLoader`` in cyclic mode) against ``torch.utils.data.DataLoader``
over ``.npy`` files opened with ``mmap_mode="r"`` in each worker, with
``fork`` (``torch``) and ``spawn`` (``torch-spawn``) workers, and Google's
Grain (``grain``: ``grain.python.DataLoader`` over a
``RandomAccessDataSource`` on the same ``.npy`` files, a shuffled
``IndexSampler`` and ``Batch``, with worker processes). Transforms:
``identity``; ``heavy``, a per-sample random crop and flip decided in Python
(:func:`heavy_sample`: its pixel work is NumPy copies, which release the GIL);
and ``augment``, ``heavy`` plus a random erasing whose boxes are drawn and
tested for overlap in a pure-Python loop (:func:`augment_sample`: a
Python-bound per-sample loop, the original benchmark's ``--transform augment``).

Grain is optional and is not in ``requirements/bench.txt`` (nor is torch, which the
loader needs): install it with ``.venv/bin/pip install grain`` (tested with
0.2.18). Without it the ``grain`` pipeline is skipped with a line on stderr.

Every pipeline runs in its own child process (this script re-invoked with a
hidden ``--run-one``): it validates its first batch, warms up, times three
rounds of 200 batches (median batches/s), then runs a separate steady
memory pass during which the parent samples PSS and RSS of the child's whole
process tree from ``/proc/<pid>/smaps_rollup`` every 100 ms.

Run from the repository root with the project venv::

    .venv/bin/python benches/bench_loader.py
    .venv/bin/python benches/bench_loader.py --only loaderx-raw,torch --transform heavy
    .venv/bin/python benches/bench_loader.py --quick     # seconds-long smoke run

The markdown table goes to stdout, progress to stderr and everything measured
to ``benches/out/loader.json`` (``-quick`` appended for --quick).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

import _workloads as wl
from _machine import describe_machine_and_build
from _plot import check_target as check_plot_target
from _plot import plot
from _proc import MemorySampler, emit, rollup
from _proc import run_child as run_child_process
from _report import DEFAULT_OUT, MIB, _target_cell, _x, log, write_json

# torch warns once per worker that a read-only mmap view becomes a tensor; the
# default collate only reads it (torch.stack copies into shared memory).
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------

PIPELINES = ("loaderx-raw", "loaderx-zstd", "torch", "torch-spawn", "grain")
TRANSFORMS = ("identity", "heavy", "augment")
DEFAULT_TRANSFORMS = ("identity", "heavy")  # augment on request (--transform augment)
TORCH = "torch"  # the reference row of every ratio; Grain is an extra reference, no target
GRAIN = "grain"
# Grain's per-worker output buffer, in batches: the counterpart of torch's prefetch_factor.
GRAIN_WORKER_BUFFER = 2
# Reader threads per Grain worker (ReadOptions.num_threads; Grain's default is 16 with a
# 500-record buffer, tuned for remote storage). Grain recommends 0 for data already in
# memory, as here (a warm page cache): each worker then reads its records itself, like a
# torch worker; in a quick check on a busy 2-CPU box the default was ~1.5x slower.
GRAIN_READ_THREADS = 0
# (pipeline, minimum batches/s ratio vs torch, maximum PSS ratio vs torch or None)
LOADER_TARGETS = {
    "loaderx-raw": (1.5, 0.5),
    "loaderx-zstd": (0.9, None),
}

DEFAULTS = {
    # name: (full run, --quick)
    "images": (2500, 256),
    "batch_size": (256, 32),
    "batches": (200, 10),
    "memory_seconds": (5.0, 1.0),
}

MEMORY_INTERVAL = 0.1  # seconds between two samples of the process tree
CHILD_TIMEOUT = 1800.0  # seconds before a hung pipeline child is killed


# --------------------------------------------------------------------------
# Loader: the transforms
# --------------------------------------------------------------------------

CROP = 200
_MASK64 = (1 << 64) - 1


def _splitmix64(state: int) -> tuple[int, int]:
    state = (state + 0x9E3779B97F4A7C15) & _MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return state, z ^ (z >> 31)


def heavy_sample(image: np.ndarray, key: int) -> np.ndarray:
    """A per-sample augmentation of one (3, H, W) uint8 image.

    The decisions are drawn in pure Python (splitmix64) from ``key``, the
    record index, so the output is a pure function of the record: a random
    200x200 crop and a horizontal flip with probability 1/2. Returns a fresh
    C-contiguous (3, 200, 200) uint8 array (torch cannot wrap the negative
    strides of a flipped view).
    """
    state, dy = _splitmix64(key)
    state, dx = _splitmix64(state)
    _, flip = _splitmix64(state)
    y = dy % (image.shape[1] - CROP + 1)
    x = dx % (image.shape[2] - CROP + 1)
    crop = image[:, y : y + CROP, x : x + CROP]
    if flip & 1:
        crop = crop[:, :, ::-1]
    return np.ascontiguousarray(crop)


ERASE_BOXES = 16  # candidate boxes per sample of augment's random erasing
ERASE_FILL = 127


def augment_sample(image: np.ndarray, key: int) -> np.ndarray:
    """``heavy_sample``, then a random erasing decided in a pure-Python loop.

    ``ERASE_BOXES`` candidate square boxes (side 8 to 32) are drawn with
    splitmix64 from a state derived from ``key``; a box is kept unless it
    overlaps one kept before it, and the kept boxes are filled with
    ``ERASE_FILL``. The draws and the overlap tests are Python (the GIL holds
    them on a standard build), the fills small NumPy slices; the output is a
    pure function of the record.
    """
    crop = heavy_sample(image, key)
    state = key ^ 0x5DEECE66D
    kept: list[tuple[int, int, int]] = []
    for _ in range(ERASE_BOXES):
        state, a = _splitmix64(state)
        state, b = _splitmix64(state)
        state, c = _splitmix64(state)
        size = 8 + a % 25
        y = b % (CROP - size)
        x = c % (CROP - size)
        for ky, kx, ks in kept:
            if y < ky + ks and ky < y + size and x < kx + ks and kx < x + size:
                break
        else:
            kept.append((y, x, size))
    for y, x, size in kept:
        crop[:, y : y + size, x : x + size] = ERASE_FILL
    return crop


SAMPLE_TRANSFORMS = {"identity": None, "heavy": heavy_sample, "augment": augment_sample}


def _batch_transform(sample):
    """loaderx's transform: ``sample`` on every image of the batch, stacked."""

    def transform(batch: dict) -> dict:
        images, labels = batch["image"], batch["label"]
        out = [sample(images[j], int(labels[j])) for j in range(len(labels))]
        return {"image": np.stack(out), "label": labels}

    transform.__name__ = f"{sample.__name__}_batch"
    return transform


heavy_batch = _batch_transform(heavy_sample)
augment_batch = _batch_transform(augment_sample)
BATCH_TRANSFORMS = {"identity": None, "heavy": heavy_batch, "augment": augment_batch}


class NpyDataset:
    """torch's map-style dataset: two .npy paths, mapped lazily in each worker.

    ``__getitem__`` returns one ``(image, label)`` sample: the image is a view
    of the mapped file (identity; the default collate copies it once) or the
    result of the transform's sample function (``SAMPLE_TRANSFORMS``).
    """

    def __init__(self, images: str, labels: str, n: int, transform: str):
        self.images_path = images
        self.labels_path = labels
        self.n = n
        self.transform = transform
        self._images = None
        self._labels = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self._images is None:
            self._images = np.load(self.images_path, mmap_mode="r")
            self._labels = np.load(self.labels_path, mmap_mode="r")
        label = int(self._labels[i])
        image = self._images[i]
        sample = SAMPLE_TRANSFORMS[self.transform]
        if sample is not None:
            image = sample(image, label)
        return image, label

    def __getstate__(self):
        return {**self.__dict__, "_images": None, "_labels": None}


class NpySource:
    """Grain's ``RandomAccessDataSource`` over the same two .npy files.

    A structural protocol: ``__len__`` and ``__getitem__`` (plus ``__repr__``,
    which Grain's checkpoint validation compares). ``__getitem__`` returns one
    record as ``{"image": view of the mapped file, "label": numpy.int64}``;
    the transform, if any, is a separate ``grain.MapTransform``. The files are
    mapped lazily in each worker process (Grain pickles the source into spawned
    workers); with Grain reader threads (``ReadOptions.num_threads > 0``) several
    threads may open them at once, hence the assignment order.
    """

    def __init__(self, images: str, labels: str, n: int):
        self.images_path = images
        self.labels_path = labels
        self.n = n
        self._images = None
        self._labels = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        if self._images is None:
            # Labels first: a thread that sees _images set also sees _labels.
            self._labels = np.load(self.labels_path, mmap_mode="r")
            self._images = np.load(self.images_path, mmap_mode="r")
        return {"image": self._images[i], "label": self._labels[i]}

    def __repr__(self) -> str:
        return f"NpySource({self.images_path!r}, {self.labels_path!r}, n={self.n})"

    def __getstate__(self):
        return {**self.__dict__, "_images": None, "_labels": None}


# --------------------------------------------------------------------------
# Loader: one pipeline, in its own process (--run-one)
# --------------------------------------------------------------------------


def _loaderx_pipeline(spec: dict):
    from loaderx.dataloader import DataLoader
    from loaderx.zrecord import DenseStore

    codec = spec["pipeline"].split("-", 1)[1]
    data = Path(spec["data"])
    streams = {
        "image": DenseStore.open(data / f"images-{codec}"),
        "label": DenseStore.open(data / f"labels-{codec}"),
    }
    loader = DataLoader(
        streams,
        batch_size=spec["batch_size"],
        transform=BATCH_TRANSFORMS[spec["transform"]],
        mode="cyclic",
        seed=spec["seed"],
        prefetch=4,
        workers=spec["workers"],
    )

    def unpack(batch):
        return batch["image"], batch["label"]

    def close():
        loader.close()
        for s in streams.values():
            s.close()

    return loader, unpack, close


def _torch_pipeline(spec: dict):
    import torch
    from torch.utils.data import DataLoader, RandomSampler

    data = Path(spec["data"])
    dataset = NpyDataset(
        str(data / "images.npy"),
        str(data / "labels.npy"),
        spec["images"],
        spec["transform"],
    )
    generator = torch.Generator()
    generator.manual_seed(spec["seed"])
    loader = DataLoader(
        dataset,
        batch_size=spec["batch_size"],
        sampler=RandomSampler(dataset, generator=generator),
        num_workers=spec["torch_workers"],
        multiprocessing_context="spawn" if spec["pipeline"] == "torch-spawn" else "fork",
        persistent_workers=True,
        prefetch_factor=2,
        drop_last=True,
    )

    def endless():
        while True:
            yield from loader

    it = endless()

    def unpack(batch):
        images, labels = batch
        if not (isinstance(images, torch.Tensor) and isinstance(labels, torch.Tensor)):
            raise AssertionError(
                f"torch batch: expected tensors, got {type(images).__name__}, "
                f"{type(labels).__name__}"
            )
        if images.dtype != torch.uint8 or labels.dtype != torch.int64:
            raise AssertionError(f"torch batch: dtypes {images.dtype}, {labels.dtype}")
        return images.numpy(), labels.numpy()

    def close():
        it.close()
        iterator = loader._iterator  # persistent workers: shut them down now
        if iterator is not None:
            iterator._shutdown_workers()

    return it, unpack, close


def _grain_sampler(spec: dict):
    import grain.python as grain

    return grain.IndexSampler(
        num_records=spec["images"],
        shard_options=grain.NoSharding(),
        shuffle=True,
        num_epochs=None,  # endless: epochs follow each other, each reshuffled
        seed=spec["seed"],
    )


def _grain_pipeline(spec: dict):
    import grain.python as grain

    sample = SAMPLE_TRANSFORMS[spec["transform"]]

    class Sample(grain.MapTransform):
        """The transform's sample function on one record, keyed by its label
        (the record index).

        Defined here so that Grain stays an optional import of this script;
        Grain ships its pipeline to the workers with cloudpickle, which pickles
        a local class by value.
        """

        def map(self, element: dict) -> dict:
            label = element["label"]
            return {"image": sample(element["image"], int(label)), "label": label}

    data = Path(spec["data"])
    source = NpySource(str(data / "images.npy"), str(data / "labels.npy"), spec["images"])
    operations = [Sample()] if sample is not None else []
    operations.append(grain.Batch(batch_size=spec["batch_size"], drop_remainder=True))
    loader = grain.DataLoader(
        data_source=source,
        sampler=_grain_sampler(spec),
        operations=operations,
        worker_count=spec["torch_workers"],
        worker_buffer_size=GRAIN_WORKER_BUFFER,
        shard_options=grain.NoSharding(),
        read_options=grain.ReadOptions(num_threads=GRAIN_READ_THREADS),
    )
    it = iter(loader)

    def unpack(batch):
        if not isinstance(batch, dict) or set(batch) != {"image", "label"}:
            raise AssertionError(f"grain batch: expected dict of image, label, got {batch!r:.80}")
        images, labels = batch["image"], batch["label"]
        if not (isinstance(images, np.ndarray) and isinstance(labels, np.ndarray)):
            raise AssertionError(
                f"grain batch: expected arrays, got {type(images).__name__}, "
                f"{type(labels).__name__}"
            )
        return images, labels

    def close():
        it._iterator.close()  # stops the worker processes now, not at garbage collection

    return it, unpack, close


def _expected_first_indices(spec: dict) -> np.ndarray:
    n, b, seed = spec["images"], spec["batch_size"], spec["seed"]
    if spec["pipeline"].startswith("loaderx"):
        from loaderx.zsampler import Sampler

        return Sampler(n, b, Sampler.Mode.CYCLIC, seed=seed).at(0)
    if spec["pipeline"] == GRAIN:
        # With W > 1 workers, worker w batches sampler positions w, w + W, ...
        # (mp_prefetch's slice(w, None, W)) and the first batch is worker 0's.
        w = spec["torch_workers"]
        stride = w if w > 1 else 1
        sampler = _grain_sampler(spec)
        return np.array([sampler[k * stride].record_key for k in range(b)], dtype=np.int64)
    import torch

    g = torch.Generator()
    g.manual_seed(seed)
    return torch.randperm(n, generator=g)[:b].numpy()  # RandomSampler's first epoch


def _validate_first(spec: dict, batch, unpack) -> None:
    """Shapes, dtypes, the sampled indices and every image against the source."""
    what = f"{spec['pipeline']}/{spec['transform']} first batch"
    images, labels = unpack(batch)
    b = spec["batch_size"]
    sample = SAMPLE_TRANSFORMS[spec["transform"]]
    shape = (b, 3, CROP, CROP) if sample is not None else (b, *wl.IMAGE_SHAPE)
    if images.dtype != np.uint8 or images.shape != shape:
        raise AssertionError(f"{what}: images {images.dtype} {images.shape}, want uint8 {shape}")
    if labels.dtype != np.int64 or labels.shape != (b,):
        raise AssertionError(f"{what}: labels {labels.dtype} {labels.shape}, want int64 ({b},)")
    want_idx = _expected_first_indices(spec)
    if not np.array_equal(labels, want_idx):
        raise AssertionError(f"{what}: labels are not the sampler's first indices")
    data = Path(spec["data"])
    src_images = np.load(data / "images.npy", mmap_mode="r")
    src_labels = np.load(data / "labels.npy", mmap_mode="r")
    try:
        if not np.array_equal(src_labels[labels], labels):
            raise AssertionError(f"{what}: label stream does not hold the record index")
        for j, i in enumerate(labels.tolist()):
            want = sample(src_images[i], i) if sample is not None else src_images[i]
            if not np.array_equal(images[j], want):
                raise AssertionError(f"{what}: image at position {j} is not record {i}")
    finally:
        del src_images, src_labels  # unmapped before anything is measured
        gc.collect()


def run_one(spec: dict) -> None:
    """One pipeline and transform; reports through protocol lines on stdout."""
    name = f"{spec['pipeline']}/{spec['transform']}"
    torch_side = spec["pipeline"].startswith("torch")
    grain_side = spec["pipeline"] == GRAIN
    if grain_side:
        make = _grain_pipeline
        import logging  # here, so that no other child pays for it

        # Grain warns on import (and in each worker) that there is no JAX profiler.
        logging.getLogger("absl").setLevel(logging.ERROR)
        import grain.python  # noqa: F401  (the import's memory, below)
    else:
        make = _torch_pipeline if torch_side else _loaderx_pipeline
        if torch_side or spec["import_torch"]:
            import torch.utils.data  # noqa: F401  (the import's memory, below)
        if not torch_side:
            import loaderx.dataloader  # noqa: F401
    import_rollup = rollup()

    it, unpack, close = make(spec)
    try:
        t0 = time.perf_counter()
        first = next(it)
        first_s = time.perf_counter() - t0
        _validate_first(spec, first, unpack)
        del first
        log(f"{name}: first batch valid ({first_s:.2f} s); warm-up {spec['warmup']} batches")
        for _ in range(spec["warmup"]):
            next(it)
        rounds = []
        cpu = {"user": 0.0, "system": 0.0, "wall": 0.0}
        for r in range(spec["rounds"]):
            gc.collect()
            c0 = os.times()
            t0 = time.perf_counter()
            for _ in range(spec["batches"]):
                next(it)
            seconds = time.perf_counter() - t0
            c1 = os.times()
            cpu["user"] += c1.user - c0.user
            cpu["system"] += c1.system - c0.system
            cpu["wall"] += seconds
            rounds.append(spec["batches"] / seconds)
            log(f"{name}: round {r + 1}: {rounds[-1]:.2f} batches/s")

        # The memory pass: the parent samples this process tree meanwhile.
        gc.collect()
        emit("memory-begin", os.getpid())
        t0 = time.perf_counter()
        memory_batches = 0
        while time.perf_counter() - t0 < spec["memory_seconds"]:
            next(it)
            memory_batches += 1
        memory_s = time.perf_counter() - t0
        emit("memory-end")
    finally:
        close()
    emit(
        "result",
        {
            "batches_s": float(np.median(rounds)),
            "rounds_batches_s": rounds,
            "first_batch_s": first_s,
            "import_rollup_kib": import_rollup,
            "memory_pass_batches": memory_batches,
            "memory_pass_s": memory_s,
            "memory_pass_batches_s": memory_batches / memory_s,
            # CPU time of this process (its threads, not worker processes)
            # over the timed rounds, in cores: (user, system) / wall.
            "process_cpu_cores": {
                "user": cpu["user"] / cpu["wall"],
                "system": cpu["system"] / cpu["wall"],
            },
        },
    )


# --------------------------------------------------------------------------
# Loader: the parent (data, children, process-tree memory)
# --------------------------------------------------------------------------


def _tree_memory(sampler: MemorySampler) -> dict:
    """The memory figures of the child's process tree (KiB samples, MiB out)."""
    peak = sampler.peak_pss or {}
    return {
        "samples": sampler.samples,
        "interval_s": sampler.interval,
        "max_processes": sampler.max_processes,
        "peak_pss_mib": peak.get("Pss", 0) / 1024,
        "peak_pss_split_mib": {
            k: v / 1024 for k, v in peak.items() if k.startswith("Pss_")
        },  # at the peak-PSS sample
        "peak_aggregate_rss_mib": sampler.peak_rss_kib / 1024,
    }


def run_child(spec: dict) -> dict:
    """Runs one pipeline in a fresh interpreter and samples its process tree."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--run-one", json.dumps(spec)]
    state: dict = {"monitor": None, "memory": None, "result": None}

    def on_message(proc, kind: str, payload) -> None:
        if kind == "memory-begin":
            state["monitor"] = MemorySampler([proc.pid], tree=True, interval=MEMORY_INTERVAL)
            state["monitor"].start()
        elif kind == "memory-end" and state["monitor"] is not None:
            state["memory"] = _tree_memory(state["monitor"].stop())
            state["monitor"] = None
        elif kind == "result":
            state["result"] = payload

    try:
        code = run_child_process(cmd, on_message, timeout=CHILD_TIMEOUT)
    finally:
        if state["monitor"] is not None:
            state["monitor"].stop()
    result, memory = state["result"], state["memory"]
    if code != 0 or result is None or memory is None:
        raise RuntimeError(f"child exited with code {code} (its stderr is above)")
    return {**result, "memory": memory}


def prepare_data(root: Path, n: int, seed: int, codecs: list[str]) -> dict:
    """The source arrays as .npy (torch's storage and the validation source)
    and one DenseStore per stream and codec."""
    from loaderx.zrecord import DenseStore

    log(f"loader: generating {n} images (seed {seed})")
    images = wl.dense_vision(n, seed)
    labels = np.arange(n, dtype=np.int64)  # the record index: first batches check exactly
    np.save(root / "images.npy", images)
    np.save(root / "labels.npy", labels)
    for codec in codecs:
        log(f"loader: writing the {codec} stores")
        for name, arr in (("images", images), ("labels", labels)):
            store = DenseStore.create(root / f"{name}-{codec}", arr.dtype, arr.shape[1:], codec)
            store.append(arr)
            store.close()
    return {"logical_bytes": int(images.nbytes), "batch_bytes": int(images[0].nbytes)}


def compute_loader_ratios(results: dict) -> dict:
    ratios = {}
    for key, r in results.items():
        pipeline, transform = key.split("/")
        ref = results.get(f"{TORCH}/{transform}")
        if pipeline == TORCH or ref is None or "error" in r or "error" in ref:
            continue
        bps = r["batches_s"] / ref["batches_s"]
        pss = r["memory"]["peak_pss_mib"] / ref["memory"]["peak_pss_mib"]
        q = {"batches_s_vs_torch": bps, "peak_pss_vs_torch": pss}
        if pipeline in LOADER_TARGETS:
            min_bps, max_pss = LOADER_TARGETS[pipeline]
            q["target_met"] = bps >= min_bps and (max_pss is None or pss <= max_pss)
        ratios[key] = q
    return ratios


def _loader_target_text(pipeline: str) -> str:
    if pipeline not in LOADER_TARGETS:
        return ""
    min_bps, max_pss = LOADER_TARGETS[pipeline]
    text = f"≥ {min_bps:g}× torch batches/s"
    return text + (f" at ≤ {max_pss:g}× PSS" if max_pss is not None else "")


def format_loader_table(results: dict, ratios: dict, skipped: dict | None = None) -> str:
    head = [
        "pipeline",
        "transform",
        "batches/s",
        "rounds",
        "peak PSS MiB",
        "peak aggregate RSS MiB",
        "import PSS MiB",
        "procs",
        "vs torch batches/s",
        "vs torch PSS",
        "target",
    ]
    out = [head, ["---", "---"] + ["---:"] * 8 + ["---"]]
    for key, r in results.items():
        pipeline, transform = key.split("/")
        if "error" in r:
            out.append([pipeline, transform, "FAILED: " + r["error"]] + [""] * 8)
            continue
        q = ratios.get(key, {})
        m = r["memory"]
        imp = r["import_rollup_kib"]
        target = _loader_target_text(pipeline)
        out.append(
            [
                pipeline,
                transform,
                f"{r['batches_s']:.2f}",
                " / ".join(f"{v:.1f}" for v in r["rounds_batches_s"]),
                f"{m['peak_pss_mib']:.0f}",
                f"{m['peak_aggregate_rss_mib']:.0f}",
                f"{imp['Pss'] / 1024:.0f}" if imp else "—",
                str(m["max_processes"]),
                _x(q.get("batches_s_vs_torch")) if q else "",
                _x(q.get("peak_pss_vs_torch")) if q else "",
                _target_cell(q.get("target_met"), target) if target and q else target,
            ]
        )
    for pipeline, reason in (skipped or {}).items():
        out.append([pipeline, "—", "skipped: " + reason] + [""] * 8)
    return "\n".join("| " + " | ".join(row) + " |" for row in out)


LOADER_NOTES = """\
- Every pipeline runs in its own child process; stores and .npy files share
  one temporary directory and a warm page cache. The first batch is validated
  (shapes, dtypes, the sampler's indices, every image against the source
  record, after the transform for `heavy` and `augment`); then warm-up, then three timed
  rounds. batches/s is the median round; `rounds` lists all three.
- loaderx-*: `DataLoader({"image", "label"}, mode="cyclic", prefetch=4,
  workers=W)` over one DenseStore per stream with that codec; `identity` is
  `transform=None` (no transform threads), `heavy` and `augment` run on the
  W threads.
- torch: `torch.utils.data.DataLoader` over .npy files mapped lazily in each
  worker, `RandomSampler` with a seeded generator, default collate,
  `drop_last=True`, persistent workers, prefetch_factor 2; `fork` (torch) or
  `spawn` (torch-spawn) workers. Epochs restart endlessly.
- grain (an extra reference, ratios against torch, no target):
  `grain.python.DataLoader` over a `RandomAccessDataSource` on the same .npy
  files (mapped lazily in each worker and read from each worker's own
  thread, `ReadOptions(num_threads=0)` as Grain advises for data in memory;
  one `{"image", "label"}` dict per record), `IndexSampler(shuffle=True,
  seed, num_epochs=None)` (endless, reshuffled per epoch, so a batch may
  straddle two epochs), `NoSharding`, `Batch(drop_remainder=True)`,
  `worker_count` = the torch worker count (`spawn` processes; batches come
  back through shared memory), `worker_buffer_size=2`. The first batch's
  expected indices are the sampler's positions 0, W, 2W, ... (worker 0's
  slice) for W > 1 workers.
- heavy: per sample, a crop offset and a flip decision drawn in pure Python
  from the record index, then the 200x200 crop (flipped with p = 1/2) copied
  out; loaderx runs it over the batch in its transform and stacks the crops,
  torch in `__getitem__` before the default collate stacks them, Grain in a
  `MapTransform` before `Batch` (`identity` has no `MapTransform`). Its pixel
  work is NumPy copies, which release the GIL.
- augment: `heavy`, then a random erasing decided in a pure-Python loop: 16
  candidate square boxes (side 8 to 32) drawn with splitmix64 from the
  record index, each kept unless it overlaps one kept before it; kept boxes
  are filled with 127. Run where `heavy` runs.
- Memory comes from a separate steady pass after the timed rounds: every
  100 ms the parent sums Pss and Rss from /proc/<pid>/smaps_rollup over the
  child and all its descendants (workers, resource tracker). Peak PSS
  apportions shared pages (inherited, mapped files, shared memory); aggregate
  RSS counts a shared page once per process that maps it. `procs` is the
  largest number of processes in the tree.
- import PSS: the child's own PSS after importing its pipeline's library
  (loaderx, torch or grain), before any data is opened. Unless
  `--import-torch` is given, loaderx children never import torch, so a
  training process that imports torch anyway adds about the torch row's
  import figure to the loaderx rows' PSS. Grain children never import torch."""


def _loader_geometry(args) -> None:
    if args.batch_size > args.images:
        sys.exit(f"error: --batch-size {args.batch_size} exceeds --images {args.images}")
    per_cycle = args.images // args.batch_size
    if args.warmup is None:
        # Cover every record at least twice (each cycle/epoch once) before timing.
        args.warmup = max(3 if args.quick else 20, 2 * math.ceil(args.images / args.batch_size))
    args.per_cycle = per_cycle


def _skip_unavailable(args) -> dict[str, str]:
    """Drops the optional pipelines whose package is missing; their reasons."""
    skipped = {}
    if GRAIN in args.selected and importlib.util.find_spec("grain") is None:
        reason = "grain is not installed (.venv/bin/pip install grain)"
        log(f"loader: skipping the {GRAIN} pipeline: {reason}")
        args.selected = [p for p in args.selected if p != GRAIN]
        skipped[GRAIN] = reason
    if not args.selected:
        sys.exit("error: no loader pipeline left to run")
    return skipped


def run_loader(args) -> dict:
    _loader_geometry(args)
    skipped = _skip_unavailable(args)
    run_name = "loader" + ("-quick" if args.quick else "")
    codecs = sorted({p.split("-", 1)[1] for p in args.selected if p.startswith("loaderx-")})
    data = Path(tempfile.mkdtemp(prefix=f"loaderx-bench-{run_name}-", dir=args.tmp))
    results: dict[str, dict] = {}
    try:
        machine, machine_text = describe_machine_and_build(data)
        if machine["store_filesystem"]["type"] in ("tmpfs", "ramfs"):
            log(f"warning: {data} is on {machine['store_filesystem']['type']}, not a disk")
        sizes = prepare_data(data, args.images, args.seed, codecs)
        gc.collect()
        for pipeline in args.selected:
            for transform in args.transforms:
                key = f"{pipeline}/{transform}"
                spec = {
                    "pipeline": pipeline,
                    "transform": transform,
                    "data": str(data),
                    "images": args.images,
                    "batch_size": args.batch_size,
                    "seed": args.seed,
                    "workers": args.workers,
                    "torch_workers": args.torch_workers,
                    "warmup": args.warmup,
                    "rounds": args.rounds,
                    "batches": args.batches,
                    "memory_seconds": args.memory_seconds,
                    "import_torch": args.import_torch,
                }
                log(f"loader: {key}")
                try:
                    results[key] = run_child(spec)
                except RuntimeError as e:
                    log(f"loader: {key} FAILED: {e}")
                    results[key] = {"error": str(e)}
    finally:
        shutil.rmtree(data, ignore_errors=True)

    ratios = compute_loader_ratios(results)
    batch_mib = sizes["batch_bytes"] * args.batch_size / MIB
    config = {
        "kind": "loader",
        "quick": args.quick,
        "images": args.images,
        "item_shape": list(wl.IMAGE_SHAPE),
        "dtype": "uint8",
        "logical_mib": sizes["logical_bytes"] / MIB,
        "batch_size": args.batch_size,
        "batch_mib": batch_mib,
        "pipelines": args.selected,
        "skipped_pipelines": skipped,
        "transforms": args.transforms,
        "loaderx_workers": args.workers,
        "loaderx_prefetch": 4,
        "torch_workers": args.torch_workers,
        "torch_prefetch_factor": 2,
        "grain_workers": args.torch_workers,
        "grain_worker_buffer_size": GRAIN_WORKER_BUFFER,
        "grain_read_threads": GRAIN_READ_THREADS,
        "warmup_batches": args.warmup,
        "rounds": args.rounds,
        "batches_per_round": args.batches,
        "memory_seconds": args.memory_seconds,
        "memory_interval_s": MEMORY_INTERVAL,
        "loaderx_imports_torch": args.import_torch,
        "seed": args.seed,
        "targets": {
            p: {"min_batches_s_vs_torch": b, "max_pss_vs_torch": m}
            for p, (b, m) in LOADER_TARGETS.items()
        },
    }
    payload = {
        "name": run_name,
        "config": config,
        "machine": machine,
        "results": results,
        "ratios": ratios,
    }
    path = write_json(args.out, run_name, payload)
    print(f"## {run_name}\n")
    print(
        f"End to end (sample, gather, collate, hand over): {args.images} CHW RGB uint8 "
        f"images of {wl.IMAGE_SHAPE} ({sizes['logical_bytes'] / MIB:.1f} MiB) plus an int64 "
        f"label stream, batch {args.batch_size} ({batch_mib:.1f} MiB of images); "
        f"loaderx {args.workers} transform threads, torch and Grain {args.torch_workers} "
        "worker processes; "
        f"{args.warmup} warm-up batches, then {args.rounds} rounds of {args.batches}; "
        f"memory over a separate {args.memory_seconds:g} s pass; loaderx children "
        f"{'import' if args.import_torch else 'do not import'} torch.\n"
    )
    print("Machine:\n" + machine_text + "\n")
    print(format_loader_table(results, ratios, skipped) + "\n")
    print(LOADER_NOTES + "\n")
    print(f"JSON: {path}")
    if args.plot is not None:
        print(f"Chart: {plot(payload, args.plot)}")
    if any("error" in r for r in results.values()):
        sys.exit("error: some pipelines failed (see the table and stderr)")
    return payload


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def _csv(value: str, choices: tuple[str, ...], flag: str, p: argparse.ArgumentParser) -> list:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in choices]
    if unknown or not names:
        p.error(
            f"{flag}: unknown {', '.join(unknown) or '(empty)'}; choose from {','.join(choices)}"
        )
    return [c for c in choices if c in names]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench_loader.py",
        description="End-to-end loader benchmark of loaderx against torch and Grain.",
    )
    p.add_argument("--quick", action="store_true", help="seconds-long smoke run (not results)")
    p.add_argument("--seed", type=int, default=0, help="data and sampler seed (default 0)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON directory")
    p.add_argument(
        "--tmp", type=Path, default=Path("/tmp"), help="parent of the data directory (/tmp)"
    )
    p.add_argument("--only", help="comma-separated subset of pipelines: " + ",".join(PIPELINES))
    p.add_argument(
        "--transform",
        help="comma-separated subset of transforms: "
        + ",".join(TRANSFORMS)
        + " (default: "
        + ",".join(DEFAULT_TRANSFORMS)
        + ")",
    )
    p.add_argument("--images", type=int, help="records (default 2500; 256 with --quick)")
    p.add_argument(
        "--batch-size", type=int, help="records per batch (default 256; 32 with --quick)"
    )
    p.add_argument("--batches", type=int, help="batches per timed round (default 200; 10 --quick)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds, median reported (3)")
    p.add_argument(
        "--warmup", type=int, help="warm-up batches (default: two passes over the records)"
    )
    p.add_argument(
        "--memory-seconds",
        type=float,
        help="length of the memory pass (default 5; 1 with --quick)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=2,
        help="loaderx transform threads (2, as torch's workers; DataLoader defaults to 4)",
    )
    p.add_argument(
        "--torch-workers", type=int, default=2, help="torch and Grain worker processes (2)"
    )
    p.add_argument(
        "--import-torch",
        action="store_true",
        help="loaderx children import torch too, as a training process would, so that "
        "PSS compares like with like (default: they do not)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="also draw batches/s per pipeline as a bar chart, FILE.svg or FILE.png "
        "(needs matplotlib; benches/plot.py replots a saved JSON)",
    )
    p.add_argument("--run-one", help=argparse.SUPPRESS)  # internal: one pipeline, as a child
    args = p.parse_args(argv)
    if args.run_one:
        return args
    args.selected = _csv(args.only, PIPELINES, "--only", p) if args.only else list(PIPELINES)
    args.transforms = (
        _csv(args.transform, TRANSFORMS, "--transform", p)
        if args.transform
        else list(DEFAULT_TRANSFORMS)
    )
    k = 1 if args.quick else 0
    for name, values in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, values[k])
    for flag in ("images", "batch_size", "batches", "rounds", "torch_workers"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be positive")
    if args.workers < 0 or args.memory_seconds <= 0:
        p.error("--workers must be >= 0, --memory-seconds > 0")
    if args.plot is not None:
        try:
            check_plot_target(args.plot)
        except (ImportError, ValueError) as e:
            p.error(f"--plot: {e}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.run_one:
        spec = json.loads(args.run_one)
        try:
            run_one(spec)
        except BaseException:
            traceback.print_exc()
            sys.exit(1)
        return
    run_loader(args)


if __name__ == "__main__":
    main()
