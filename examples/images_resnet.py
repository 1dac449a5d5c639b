"""Training a small ResNet on encoded photos, decoded in the loader.

The photos scikit-image and scikit-learn ship are cut into an ImageFolder
tree (one folder per photo: the class is which photo a crop comes from),
ingested with ``loaderx.images.ingest_folder`` as JPEG bytes, and fed to a
ResNet-style network through ``DataLoader(..., decode={"image":
loaderx.Image(64)})``: each batch arrives decoded, random-resized-cropped
and flipped on the loader's native threads, as uint8 ``(B, 3, 64, 64)``.
The run stops halfway, saves its state, and resumes bit-exactly. Runs on
CUDA when available, else on the CPU.

    pip install torch pillow scikit-image scikit-learn
    python examples/images_resnet.py [--steps 60]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import torch
from PIL import Image as PILImage

import loaderx
from loaderx import images
from loaderx.dataloader import DataLoader


def photos() -> dict[str, np.ndarray]:
    import skimage.data as d
    from sklearn.datasets import load_sample_images

    out = {"astronaut": d.astronaut(), "chelsea": d.chelsea(), "coffee": d.coffee()}
    for i, img in enumerate(load_sample_images().images):
        out[f"sample{i}"] = img
    return out


def build_folder(root: str, per_class: int) -> None:
    """``per_class`` JPEG crops (about 320 pixels across) of each photo."""
    rng = np.random.default_rng(0)
    for name, a in photos().items():
        os.makedirs(os.path.join(root, name))
        h, w = a.shape[:2]
        for i in range(per_class):
            ch, cw = int(h * rng.uniform(0.5, 0.9)), int(w * rng.uniform(0.5, 0.9))
            y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            crop = PILImage.fromarray(a[y : y + ch, x : x + cw]).convert("RGB")
            crop.thumbnail((320, 320))
            crop.save(os.path.join(root, name, f"{i:03d}.jpg"), quality=int(rng.integers(75, 95)))


class Block(torch.nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c_out)
        self.conv2 = torch.nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c_out)
        self.skip = (
            torch.nn.Identity()
            if stride == 1 and c_in == c_out
            else torch.nn.Sequential(
                torch.nn.Conv2d(c_in, c_out, 1, stride, bias=False), torch.nn.BatchNorm2d(c_out)
            )
        )

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))


def resnet(classes: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, 1, 1, bias=False),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        Block(16, 32, 2),
        Block(32, 64, 2),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, classes),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--per-class", type=int, default=24)
    args = ap.parse_args()
    torch.manual_seed(0)
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    work = tempfile.mkdtemp(prefix="loaderx-images-")
    build_folder(os.path.join(work, "photos"), args.per_class)
    table = images.ingest_folder(os.path.join(work, "photos"), os.path.join(work, "table"))
    classes = table.metadata["classes"]
    print(f"{table.num_rows} photos in {len(classes)} classes: {classes}")

    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255

    def to_device(batch):
        x = torch.from_numpy(batch["image"]).to(device, non_blocking=True)
        y = torch.from_numpy(batch["label"]).to(device, non_blocking=True)
        return (x.float() - mean) / std, y

    model = resnet(len(classes)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    decode = {"image": loaderx.Image(64)}

    def train(loader, steps: int) -> list[float]:
        losses = []
        for _ in range(steps):
            x, y = next(loader)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    half = args.steps // 2
    with DataLoader(table, batch_size=32, seed=1, transform=to_device, decode=decode) as run:
        first = train(run, half)
        state = run.state_dict()
    # Resume where the run stopped: the same batches, decoded the same way.
    with DataLoader.from_state(state, transform=to_device, decode=decode) as run:
        rest = train(run, args.steps - half)
    losses = first + rest
    print(f"step 1 loss {losses[0]:.3f}, step {len(losses)} loss {losses[-1]:.3f}")
    print(f"resumed at step {state['step']}; decode settings kept: {state['decode']['image']}")
    table.close()


if __name__ == "__main__":
    main()
