"""Encoded images to training tensors: loaderx's native decode in the loader
against the torch DataLoader with PIL, and the full-decode limit.

Workload: ``--images`` JPEGs (1,200 by default) made from the photos
scikit-image and scikit-learn ship, each a random crop of one photo
resized so that its longer side is 500 pixels (about ImageNet's typical
500 × 375) and saved at quality 75 to 95. Every peer reads the same files
and makes the same output: a 224 × 224 random-resized-crop (scale 0.08–1,
ratio 3/4–4/3) with a horizontal flip at 0.5, uint8, batches of 64, on
``--workers`` cores (all of them by default).

* **loaderx**: the files ingested once with ``images.ingest_folder``, then
  ``DataLoader(table, decode={"image": loaderx.Image(224)})``: decoding,
  cropping, resizing and flipping on the native producer threads.
* **torch + PIL**: ``torch.utils.data.DataLoader`` with ``num_workers`` =
  cores over a map-style dataset that opens each file with PIL, draws the
  crop as torchvision's ``RandomResizedCrop`` does, resizes it (bilinear)
  and flips it, then collates uint8 tensors. (torchvision itself is not
  installed here; its transform does the same PIL calls.)
* **torch + torchvision.io**: the same loader, each file decoded with
  ``torchvision.io.decode_jpeg`` and cropped, resized (bilinear,
  antialiased) and flipped with ``torchvision.transforms.v2.functional``.
* **DALI CPU**: a DALI pipeline on the CPU alone (``device_id=None``,
  ``num_threads`` = cores): ``fn.readers.file``,
  ``fn.decoders.image_random_crop`` (libjpeg-turbo, decoding only the
  crop's region), ``fn.resize`` and ``fn.crop_mirror_normalize`` (flip,
  CHW, uint8).
* **FFCV**: the files written to an FFCV dataset (``RGBImageField``, JPEG:
  FFCV encodes them itself, with OpenCV at quality 90), read by its
  ``Loader`` with ``num_workers`` = cores, random order,
  ``RandomResizedCropRGBImageDecoder``, ``RandomHorizontalFlip`` and
  ``ToTorchImage(channels_last=False)`` (contiguous CHW, like the others).
  FFCV builds from source against the system's OpenCV and libjpeg-turbo
  (Debian: ``libopencv-dev libturbojpeg0-dev pkg-config``); where it is
  installed in a separate environment, run this script with that
  environment's interpreter.
* **limit**: cores × one core's full-size decode rate of the same files
  with simplejpeg (libjpeg-turbo; PIL where simplejpeg is not installed):
  what a decoder that reads every pixel reaches.

The optional peers (torchvision, DALI, FFCV, simplejpeg) are in
``requirements/bench-images.txt``; a peer that does not import is left out
and said so.

Each loader runs ``--batches`` batches after one warm-up batch, ``--rounds``
interleaved rounds; a figure is the best round. Page cache warm.

    .venv/bin/python benches/bench_images.py [--images 1200] [--quick]

The markdown table goes to stdout, everything measured to
``benches/out/images.json``.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loaderx  # noqa: E402
from loaderx import images  # noqa: E402

from _machine import describe_machine_and_build  # noqa: E402
from _report import DEFAULT_OUT, log, write_json  # noqa: E402

SIZE = 224
BATCH = 64


def photos(npz: Path | None = None) -> list[np.ndarray]:
    """The bundled photos: scikit-image's and scikit-learn's, or the same
    arrays from ``npz`` (written by ``--save-photos``, for a machine that
    has neither package)."""
    if npz is not None:
        with np.load(npz) as f:
            return [f[k] for k in sorted(f.files)]
    import skimage.data as d
    from sklearn.datasets import load_sample_images

    out = [d.astronaut(), d.chelsea(), d.coffee(), d.rocket()]
    out += list(load_sample_images().images)
    return out


def save_photos(path: Path) -> None:
    """The bundled photos as one compressed ``.npz`` (``--photos`` reads it)."""
    np.savez_compressed(path, **{f"p{i:02d}": p for i, p in enumerate(photos())})


def make_files(root: Path, n: int, npz: Path | None = None) -> list[Path]:
    """``n`` JPEGs in two class folders (see the module documentation),
    cut from :func:`photos`."""
    from PIL import Image

    rng = random.Random(0)
    sources = [Image.fromarray(p).convert("RGB") for p in photos(npz)]
    files = []
    for i in range(n):
        src = sources[i % len(sources)]
        w, h = src.size
        cw, ch = int(w * rng.uniform(0.6, 1.0)), int(h * rng.uniform(0.6, 1.0))
        x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
        im = src.crop((x, y, x + cw, y + ch))
        s = 500 / max(im.size)
        im = im.resize((round(im.size[0] * s), round(im.size[1] * s)), Image.BICUBIC)
        path = root / f"class{i % 2}" / f"{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        im.save(path, quality=rng.randint(75, 95))
        files.append(path)
    return files


def rrc_params(rng: random.Random, h: int, w: int) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params`` (scale 0.08–1, ratio
    3/4–4/3), with Python's random."""
    area = h * w
    log_ratio = (math.log(3 / 4), math.log(4 / 3))
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        aspect = math.exp(rng.uniform(*log_ratio))
        cw = int(round(math.sqrt(target * aspect)))
        ch = int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, h - ch), rng.randint(0, w - cw), ch, cw
    return 0, 0, h, w


class PilDataset:
    """A map-style dataset: PIL decode, random-resized-crop, flip."""

    def __init__(self, files: list[Path]):
        self.files = [str(f) for f in files]

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        import torch
        from PIL import Image

        rng = random.Random(i * 7919 + int(time.time_ns() % 1000))
        with Image.open(self.files[i]) as im:
            im = im.convert("RGB")
            y, x, h, w = rrc_params(rng, im.size[1], im.size[0])
            im = im.resize((SIZE, SIZE), Image.BILINEAR, box=(x, y, x + w, y + h))
            if rng.random() < 0.5:
                im = im.transpose(Image.FLIP_LEFT_RIGHT)
            a = np.asarray(im)
        return torch.from_numpy(a.transpose(2, 0, 1).copy()), i % 2


class TvDataset(PilDataset):
    """A map-style dataset: torchvision.io.decode_jpeg, random-resized-crop
    and flip with torchvision's tensor functions."""

    def __getitem__(self, i: int):
        import torch
        from torchvision.io import decode_jpeg
        from torchvision.transforms.v2 import functional as F

        rng = random.Random(i * 7919 + int(time.time_ns() % 1000))
        with open(self.files[i], "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        x = decode_jpeg(data, mode=torchvision_rgb())
        y0, x0, h, w = rrc_params(rng, x.shape[1], x.shape[2])
        x = F.resized_crop(x, y0, x0, h, w, [SIZE, SIZE], antialias=True)
        if rng.random() < 0.5:
            x = F.horizontal_flip(x)
        return x, i % 2


def torchvision_rgb():
    from torchvision.io import ImageReadMode

    return ImageReadMode.RGB


def torch_images_per_second(torch, it, batches):
    """Images a second of ``batches`` batches drawn from ``it`` (already
    warmed up), each checked to be a (BATCH, 3, SIZE, SIZE) uint8 tensor."""
    t = time.perf_counter()
    for _ in range(batches):
        x, _ = next(it)
        assert x.shape == (BATCH, 3, SIZE, SIZE) and x.dtype == torch.uint8
    return batches * BATCH / (time.perf_counter() - t)


def run_torch(files: list[Path], workers: int, batches: int, dataset=PilDataset) -> float:
    import torch

    ds = dataset(files)
    sampler = torch.utils.data.RandomSampler(ds, replacement=True, num_samples=10**9)
    dl = torch.utils.data.DataLoader(
        ds, batch_size=BATCH, sampler=sampler, num_workers=workers, persistent_workers=False
    )
    it = iter(dl)
    next(it)  # warm-up: workers started
    rate = torch_images_per_second(torch, it, batches)
    del it, dl
    return rate


def dali_pipeline(files: list[Path], batch: int, workers: int, gpu: bool = False):
    """DALI's built pipeline over ``files``: libjpeg-turbo on the CPU
    decoding only the crop's region (``gpu``: nvJPEG, ``device="mixed"``),
    random-resized-crop, resize, flip at 0.5, uint8 CHW; it gives (images,
    labels), the label being the file's class folder."""
    from nvidia.dali import fn, pipeline_def, types

    labels = [int(Path(f).parent.name[-1]) for f in files]

    @pipeline_def(batch_size=batch, num_threads=workers, device_id=0 if gpu else None, seed=1)
    def pipe():
        jpegs, label = fn.readers.file(
            files=[str(f) for f in files], labels=labels, random_shuffle=True, name="reader"
        )
        x = fn.decoders.image_random_crop(
            jpegs,
            device="mixed" if gpu else "cpu",
            output_type=types.RGB,
            random_area=[0.08, 1.0],
            random_aspect_ratio=[3 / 4, 4 / 3],
        )
        x = fn.resize(x, resize_x=SIZE, resize_y=SIZE)
        x = fn.crop_mirror_normalize(
            x, dtype=types.UINT8, output_layout="CHW", mirror=fn.random.coin_flip(probability=0.5)
        )
        return x, (label.gpu() if gpu else label)

    p = pipe()
    p.build()
    return p


def run_dali(files: list[Path], workers: int, batches: int) -> float:
    p = dali_pipeline(files, BATCH, workers)
    p.run()  # warm-up
    t = time.perf_counter()
    for _ in range(batches):
        x, _ = p.run()
        a = x.as_array()
        assert a.shape == (BATCH, 3, SIZE, SIZE) and a.dtype == np.uint8
    dt = time.perf_counter() - t
    del p
    return batches * BATCH / dt


def write_ffcv(files: list[Path], path: Path, workers: int) -> None:
    """The files in an FFCV dataset: FFCV stores JPEGs it encodes itself
    (OpenCV, quality 90; the files here are 75 to 95), so each file is
    decoded and handed to its writer."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    from PIL import Image

    class Files:
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, i: int):
            with Image.open(files[i]) as im:
                return np.asarray(im.convert("RGB")), i % 2

    fields = {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()}
    DatasetWriter(str(path), fields, num_workers=workers).from_indexed_dataset(Files())


def run_ffcv(path: Path, workers: int, batches: int) -> float:
    """FFCV's loader: random order, its random-resized-crop JPEG decoder
    (libjpeg-turbo), flip, CHW uint8 tensors (contiguous, as the others)."""
    import torch
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage

    loader = Loader(
        str(path),
        batch_size=BATCH,
        num_workers=workers,
        order=OrderOption.RANDOM,
        os_cache=True,
        seed=1,
        pipelines={
            "image": [
                RandomResizedCropRGBImageDecoder((SIZE, SIZE)),
                RandomHorizontalFlip(),
                ToTensor(),
                ToTorchImage(channels_last=False),
            ],
            "label": [IntDecoder(), ToTensor()],
        },
    )

    def batches_forever(epochs):
        while True:
            yield from epochs

    it = batches_forever(loader)
    for _ in range(len(loader)):  # warm-up: one epoch (its code is compiled on first use)
        next(it)
    rate = torch_images_per_second(torch, it, batches)
    del it, loader
    return rate


def ffcv_child(what: str, path: Path, workers: int, batches: int, files: list[Path] = ()) -> float:
    """FFCV in a process of its own (``--ffcv-child``): its loader's threads
    and compiled code stay out of the other peers' way, and of the limit's."""
    cmd = [sys.executable, __file__, "--ffcv-child", what, "--ffcv-path", str(path)]
    cmd += ["--workers", str(workers), "--batches", str(batches)]
    cmd += [str(f) for f in files]
    # FFCV 1.0.2 with numba 0.68 may abort at interpreter exit (a numba
    # finalizer), after its figure is printed: the figure is what counts.
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"FFCV child ({what}) failed: {done.stderr[-2000:]}")
    return float(lines[-1])


def run_loaderx(table, workers: int, batches: int) -> float:
    from loaderx.dataloader import DataLoader

    with DataLoader(
        table,
        batch_size=BATCH,
        mode="iid",
        seed=1,
        prefetch=max(2, workers),
        workers=0,
        decode={"image": loaderx.Image(SIZE)},
    ) as run:
        next(run)
        t = time.perf_counter()
        for _ in range(batches):
            b = next(run)
            assert b["image"].shape == (BATCH, 3, SIZE, SIZE)
        return batches * BATCH / (time.perf_counter() - t)


def decode_limit(files: list[Path], cores: int, loops: int = 1) -> tuple[float, str]:
    """cores × one core's full decode rate (simplejpeg, or PIL; both
    libjpeg-turbo), the best of ``loops`` passes, and which decoder
    measured it."""
    blobs = [f.read_bytes() for f in files[:300]]
    try:
        import simplejpeg

        def decode(b):
            simplejpeg.decode_jpeg(b, colorspace="RGB")

        name = "simplejpeg"
    except ImportError:
        from PIL import Image

        def decode(b):
            with Image.open(io.BytesIO(b)) as im:
                im.convert("RGB").load()

        name = "PIL"
    best = 0.0
    for _ in range(loops):
        t = time.perf_counter()
        for b in blobs:
            decode(b)
        best = max(best, cores * len(blobs) / (time.perf_counter() - t))
    return best, name


def available(peer: str) -> str | None:
    """Why an optional peer cannot run here (None: it can)."""
    try:
        if peer == "torch_tv":
            import torchvision.io  # noqa: F401
            from torchvision.transforms.v2 import functional  # noqa: F401
        elif peer == "dali_cpu":
            import nvidia.dali  # noqa: F401
        elif peer == "dali_gpu":  # bench_images_gpu.py's
            import nvidia.dali.plugin.pytorch  # noqa: F401
        elif peer == "ffcv":
            import ffcv.loader  # noqa: F401
    except Exception as e:  # noqa: BLE001 (any failure to import leaves the peer out)
        return f"{type(e).__name__}: {e}"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=1200)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true", help="a small run (a smoke test)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--photos", type=Path, help="the photos from this .npz (see --save-photos)")
    ap.add_argument("--save-photos", type=Path, help="write the bundled photos to this .npz, exit")
    ap.add_argument("--ffcv-child", choices=["write", "run"], help=argparse.SUPPRESS)
    ap.add_argument("--ffcv-path", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("files", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.save_photos:
        save_photos(args.save_photos)
        return
    if args.ffcv_child == "write":
        write_ffcv(args.files, args.ffcv_path, args.workers)
        print(0.0)
        return
    if args.ffcv_child == "run":
        print(run_ffcv(args.ffcv_path, args.workers, args.batches))
        return
    if args.quick:
        args.images, args.batches, args.rounds = 64, 3, 1
    tmp = Path(tempfile.mkdtemp(prefix="loaderx-bench-images-"))
    try:
        log(f"writing {args.images} JPEGs")
        files = make_files(tmp / "folder", args.images, args.photos)
        t = time.perf_counter()
        table = images.ingest_folder(tmp / "folder", str(tmp / "table"), workers=args.workers)
        ingest_s = time.perf_counter() - t
        peers = {
            "loaderx": lambda: run_loaderx(table, args.workers, args.batches),
            "torch_pil": lambda: run_torch(files, args.workers, args.batches),
            "torch_tv": lambda: run_torch(files, args.workers, args.batches, TvDataset),
            "dali_cpu": lambda: run_dali(files, args.workers, args.batches),
            "ffcv": lambda: ffcv_child("run", tmp / "ffcv.beton", args.workers, args.batches),
        }
        missing = {p: why for p in peers if (why := available(p)) is not None}
        for p, why in missing.items():
            log(f"{p} left out: {why}")
            del peers[p]
        if "ffcv" in peers:
            ffcv_child("write", tmp / "ffcv.beton", args.workers, 0, files)
        results: dict[str, list[float]] = {p: [] for p in peers}
        limits: list[float] = []
        for r in range(args.rounds):
            log(f"round {r + 1}/{args.rounds}")
            for p, run in peers.items():
                results[p].append(run())
            # The limit is measured in every round too, interleaved with
            # the loaders, so that a slow spell of the machine reaches all.
            one, limit_by = decode_limit(files, args.workers, loops=2)
            limits.append(one)
        limit = max(limits)
        table.close()
        best = {k: max(v) for k, v in results.items()}
        names = {
            "loaderx": "loaderx (decode in the loader)",
            "torch_pil": "torch DataLoader + PIL",
            "torch_tv": "torch DataLoader + torchvision.io.decode_jpeg",
            "dali_cpu": "DALI CPU pipeline",
            "ffcv": "FFCV Loader (its own JPEGs, quality 90)",
        }
        rows = [(names[p], v) for p, v in best.items()]
        rows.append((f"limit: cores × one core's {limit_by} full decode", limit))
        print(
            f"| {args.images} JPEGs, 224² random-resized-crop + flip, {args.workers} cores "
            "| images/s | loaderx ÷ it |"
        )
        print("|---|---:|---:|")
        for name, v in rows:
            print(f"| {name} | {v:,.0f} | {best['loaderx'] / v:.2f}× |")
        print(f"\ningest_folder: {args.images / ingest_s:,.0f} files/s (each fully decoded once)")
        machine, text = describe_machine_and_build(tmp)
        print("\n" + text)
        write_json(
            args.out,
            "images",
            {
                "machine": machine,
                "images": args.images,
                "workers": args.workers,
                "batch": BATCH,
                "rounds": results,
                "best": best,
                "limit_images_per_s": limit,
                "limit_decoder": limit_by,
                "left_out": missing,
                "ingest_files_per_s": args.images / ingest_s,
            },
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
