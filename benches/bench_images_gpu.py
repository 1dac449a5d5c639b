"""ResNet-18 trained on encoded JPEGs decoded in the loader, against the
same training on batches already on the GPU.

The question: does a vision run fed by loaderx keep its GPU busy? The
same ResNet-18 (torchvision's architecture, written out here so that
torchvision is not needed) trains on 224 × 224 random-resized-crops with a
horizontal flip, batch ``--batch``, SGD with momentum, bf16 autocast and
channels-last on CUDA, under each feed in turn:

* **resident**: ``--resident`` batches decoded by loaderx beforehand and
  kept on the GPU as uint8; each step takes the next one. The speed the
  model reaches when the data costs nothing: the ceiling.
* **loaderx**: ``DataLoader(table, decode={"image": loaderx.Image(224)})``
  over the JPEGs ingested with ``images.ingest_folder``, batches handed to
  torch in page-locked memory (``as_tensors(pin_memory=True)`` on two
  transform threads) and copied with ``non_blocking=True``. The target:
  at least 0.95× resident.
* **torch + PIL**: torch's ``DataLoader`` with ``num_workers`` = cores and
  ``pin_memory`` over the same files, PIL decode and torchvision's
  random-resized-crop and flip (bench_images.py's ``PilDataset``).
* **DALI GPU**: DALI's pipeline with ``fn.decoders.image_random_crop`` on
  ``device="mixed"`` (nvJPEG), resize and ``crop_mirror_normalize`` (flip,
  CHW, uint8) on the GPU, through ``DALIGenericIterator``; only where DALI
  imports and CUDA is there.

Every feed's batch reaches the step as uint8 (B, 3, 224, 224) and is
normalised on the GPU the same way. Each feed trains ``--warmup`` steps,
then ``--steps`` timed steps (the GPU synchronised at both ends);
``--rounds`` interleaved rounds, the best of each feed counts.

Without CUDA it runs on the CPU (``--quick``: a smoke test of every path,
whose figures mean nothing). On a GPU host with neither scikit-image nor
scikit-learn, make the photos here with ``bench_images.py --save-photos
photos.npz`` and pass ``--photos photos.npz``.

    python benches/bench_images_gpu.py [--images 2000] [--steps 100] [--batch 256]

The markdown table goes to stdout, everything measured to
``benches/out/images_gpu.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_images import SIZE, PilDataset, available, dali_pipeline, make_files  # noqa: E402

import loaderx  # noqa: E402
from loaderx import images  # noqa: E402
from loaderx.dataloader import DataLoader  # noqa: E402

from _machine import describe_machine_and_build  # noqa: E402
from _report import DEFAULT_OUT, log, write_json  # noqa: E402


def resnet18(torch, classes: int):
    """torchvision's ResNet-18: a 7 × 7 stem, four stages of two basic
    blocks (64, 128, 256, 512 channels), average pool, one linear layer."""
    nn = torch.nn

    class Basic(nn.Module):
        def __init__(self, c_in: int, c_out: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c_out)
            self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c_out)
            self.down = None
            if stride != 1 or c_in != c_out:
                self.down = nn.Sequential(
                    nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
                )

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    layers = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    c = 64
    for i, width in enumerate((64, 128, 256, 512)):
        layers += [Basic(c, width, 1 if i == 0 else 2), Basic(width, width, 1)]
        c = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


class Trainer:
    """The model, its optimiser and one training step on a uint8 batch."""

    def __init__(self, torch, device: str, classes: int):
        self.torch, self.device = torch, device
        self.cuda = device.startswith("cuda")
        torch.manual_seed(0)
        self.model = resnet18(torch, classes).to(device)
        if self.cuda:
            self.model = self.model.to(memory_format=torch.channels_last)
            torch.backends.cudnn.benchmark = True
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255

    def step(self, x, y):
        torch = self.torch
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        x = (x.float() - self.mean) / self.std
        if self.cuda:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda" if self.cuda else "cpu", torch.bfloat16, enabled=self.cuda):
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss

    def images_per_second(self, batches, warmup: int, steps: int, batch: int) -> float:
        """Trains ``warmup`` steps, then times ``steps`` steps, on the
        ``(x, y)`` pairs ``batches`` yields."""
        for _ in range(warmup):
            self.step(*next(batches))
        self.sync()
        t = time.perf_counter()
        for _ in range(steps):
            loss = self.step(*next(batches))
        loss.item()  # waits for the last step
        self.sync()
        return steps * batch / (time.perf_counter() - t)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()


def loaderx_feed(table, batch: int, cuda: bool):
    """``(x, y)`` tensors from loaderx's loader, decoded on its threads."""
    from loaderx.torch import as_tensors

    run = DataLoader(
        table,
        batch_size=batch,
        mode="iid",
        seed=1,
        prefetch=4,
        workers=2,
        transform=partial(as_tensors, pin_memory=cuda),
        decode={"image": loaderx.Image(SIZE)},
    )

    def pairs():
        for b in run:
            yield b["image"], b["label"]

    return run, pairs()


def resident_feed(torch, table, batch: int, count: int, device: str):
    """``count`` batches decoded by loaderx beforehand, kept on the device,
    given out in turn forever."""
    with DataLoader(
        table, batch_size=batch, mode="iid", seed=2, decode={"image": loaderx.Image(SIZE)}
    ) as run:
        kept = []
        for _ in range(count):
            b = next(run)
            kept.append(
                (
                    torch.from_numpy(b["image"]).to(device),
                    torch.from_numpy(b["label"]).to(device),
                )
            )

    def pairs():
        while True:
            yield from kept

    return pairs()


def torch_pil_feed(torch, files, batch: int, workers: int, cuda: bool):
    ds = PilDataset(files)
    sampler = torch.utils.data.RandomSampler(ds, replacement=True, num_samples=10**9)
    dl = torch.utils.data.DataLoader(
        ds,
        batch_size=batch,
        sampler=sampler,
        num_workers=workers,
        pin_memory=cuda,
        prefetch_factor=4,
        persistent_workers=False,
    )
    return iter(dl)


def dali_feed(files, batch: int, workers: int):
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    p = dali_pipeline(files, batch, workers, gpu=True)
    it = DALIGenericIterator([p], ["x", "y"], reader_name="reader", auto_reset=True)

    def pairs():
        while True:
            for out in it:
                yield out[0]["x"], out[0]["y"].view(-1).long()

    return pairs()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--resident", type=int, default=8, help="batches kept on the GPU")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--photos", type=Path, help="the photos from this .npz")
    ap.add_argument("--quick", action="store_true", help="a small run (a smoke test)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    if args.quick:
        args.images, args.batch, args.steps, args.warmup = 32, 4, 2, 1
        args.rounds, args.resident = 1, 2
    import torch

    cuda = torch.cuda.is_available()
    device = "cuda:0" if cuda else "cpu"
    tmp = Path(tempfile.mkdtemp(prefix="loaderx-bench-images-gpu-"))
    try:
        log(f"writing {args.images} JPEGs")
        files = make_files(tmp / "folder", args.images, args.photos)
        table = images.ingest_folder(tmp / "folder", str(tmp / "table"), workers=args.workers)
        classes = len(table.metadata["classes"])
        trainer = Trainer(torch, device, classes)
        resident = resident_feed(torch, table, args.batch, args.resident, device)
        feeds = {
            "resident": lambda: (None, resident),
            "loaderx": lambda: loaderx_feed(table, args.batch, cuda),
            "torch_pil": lambda: (
                None,
                torch_pil_feed(torch, files, args.batch, args.workers, cuda),
            ),
            "dali_gpu": lambda: (None, dali_feed(files, args.batch, args.workers)),
        }
        missing = {}
        if (why := available("dali_gpu") if cuda else "no CUDA device") is not None:
            missing["dali_gpu"] = why
            del feeds["dali_gpu"]
        for p, why in missing.items():
            log(f"{p} left out: {why}")
        results: dict[str, list[float]] = {p: [] for p in feeds}
        for r in range(args.rounds):
            log(f"round {r + 1}/{args.rounds}")
            for name, make in feeds.items():
                handle, pairs = make()
                try:
                    rate = trainer.images_per_second(pairs, args.warmup, args.steps, args.batch)
                finally:
                    if handle is not None:
                        handle.close()
                    del pairs
                results[name].append(rate)
                log(f"  {name}: {rate:,.0f} images/s")
        table.close()
        best = {k: max(v) for k, v in results.items()}
        names = {
            "resident": "batches already on the device (the ceiling)",
            "loaderx": "loaderx (decode in the loader, pinned hand-off)",
            "torch_pil": "torch DataLoader + PIL",
            "dali_gpu": "DALI GPU pipeline (nvJPEG)",
        }
        where = torch.cuda.get_device_name(0) if cuda else "CPU"
        print(
            f"| ResNet-18 on {where}, batch {args.batch}, {args.images} JPEGs, "
            f"{args.workers} cores | images/s | ÷ resident |"
        )
        print("|---|---:|---:|")
        for p, v in best.items():
            print(f"| {names[p]} | {v:,.0f} | {v / best['resident']:.2f}× |")
        machine, text = describe_machine_and_build(tmp)
        print("\n" + text)
        write_json(
            args.out,
            "images_gpu",
            {
                "machine": machine,
                "device": where,
                "torch": torch.__version__,
                "images": args.images,
                "batch": args.batch,
                "steps": args.steps,
                "workers": args.workers,
                "rounds": results,
                "best": best,
                "loaderx_vs_resident": best["loaderx"] / best["resident"],
                "left_out": missing,
            },
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
