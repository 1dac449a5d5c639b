"""Every script in examples/ runs to completion on a small input."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# script, small-size arguments, optional packages it needs
CASES = [
    ("quickstart.py", [], []),
    ("demo.py", ["--images", "64", "--sequences", "600"], ["pyarrow"]),
    ("sql_parquet.py", ["--records", "300"], ["pyarrow"]),
    ("duckdb_inspect.py", ["--records", "1000"], ["pyarrow", "duckdb"]),
    ("polars_prep.py", ["--rows", "800", "--steps", "5"], ["pyarrow", "polars"]),
    ("torch_train.py", ["--steps", "5"], ["torch"]),
    (
        "images_resnet.py",
        ["--steps", "6", "--per-class", "8"],
        ["torch", "PIL", "sklearn", "skimage"],
    ),
    ("llm_packing.py", ["--docs", "300", "--seq-len", "512", "--steps", "4"], []),
    ("llm_mixture.py", ["--docs", "300", "--seq-len", "512", "--steps", "6"], []),
    ("torch_dataset.py", ["--records", "600"], ["torch"]),
    ("grain_source.py", ["--records", "300"], ["grain"]),
    # Spawns its ranks itself; without torch they run the data path only.
    ("ddp_train.py", ["--steps", "5", "--world-size", "2"], []),
    # A local Ray: Ray Train workers (or one actor per rank), then a resume.
    ("ray_train.py", ["--steps", "8", "--resume-at", "5"], ["ray"]),
    # Real data shipped in scikit-learn and scikit-image.
    (
        "real_data.py",
        [],
        ["pyarrow", "polars", "duckdb", "sklearn", "skimage", "imageio"],
    ),
]


def test_every_example_is_listed():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(c[0] for c in CASES)


@pytest.mark.parametrize(("script", "args", "needs"), CASES, ids=[c[0] for c in CASES])
def test_example_runs(script, args, needs, tmp_path):
    for name in needs:
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{script} needs {name}")
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "LOADERX_THREADS": "2"},
        timeout=600,
    )
    assert r.returncode == 0, f"{script} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert r.stdout.strip(), f"{script} printed nothing"
