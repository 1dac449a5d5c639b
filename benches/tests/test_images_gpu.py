"""benches/bench_images_gpu.py's every path, on the CPU where there is no
GPU (``--quick``): ResNet-18 fed from batches kept on the device, from
loaderx's loader and from torch's DataLoader with PIL, with the photos read
from the ``.npz`` bench_images.py saves for a host without scikit-image.
No timing is asserted."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

BENCHES = Path(__file__).resolve().parents[1]


def test_the_gpu_images_bench_trains_resnet18_from_every_feed(tmp_path):
    npz = tmp_path / "photos.npz"
    subprocess.run(
        [sys.executable, str(BENCHES / "bench_images.py"), "--save-photos", str(npz)], check=True
    )
    with np.load(npz) as f:
        shapes = [f[k].shape for k in sorted(f.files)]
    assert len(shapes) == 6 and all(len(s) == 3 and s[2] == 3 for s in shapes), shapes
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCHES / "bench_images_gpu.py"),
            "--quick",
            "--photos",
            str(npz),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads((out / "images_gpu.json").read_text())
    import torch

    feeds = {"resident", "loaderx", "torch_pil"} | ({"dali_gpu"} - set(got["left_out"]))
    assert set(got["best"]) == feeds
    assert all(v > 0 for v in got["best"].values())
    assert got["loaderx_vs_resident"] == got["best"]["loaderx"] / got["best"]["resident"]
    assert got["device"] == (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU")
    assert "| loaderx (decode in the loader, pinned hand-off) |" in done.stdout
