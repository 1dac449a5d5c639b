"""Bar charts of the benchmarks: benches/_plot.py, benches/plot.py and the
benches' --plot. No timing is asserted. (``loaderx bench --plot``, the
package's own chart, is tested in python/tests/test_cli_bench.py.)

benches/tests has no conftest.py: python/tests's test modules import names
from their ``conftest``, and a second one would shadow it when both
directories run in one pytest session. A benches test puts benches/ on
sys.path itself (the ``plotting`` fixture), as the bench scripts do."""

import copy
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parents[1]

GATHER = {
    "name": "dense-vision",
    "config": {
        "kind": "dense",
        "workload": "vision",
        "quick": False,
        "records": 2500,
        "batch_size": 256,
        "logical_mib": 358.9,
    },
    "machine": {
        "date_utc": "2026-11-29T23:10:00+00:00",
        "cpu_model": "Synthetic CPU",
        "logical_cpus": 2,
    },
    "limits": {"memcpy": {"1": {"best_gib_s": 18.6}, "2": {"best_gib_s": 19.0}}},
    "results": {
        name: {"gather": {"gib_s": g, "krecords_s": g * 7.1, "p95_ms": 1.0}}
        for name, g in [
            ("zrecord-raw", 18.65),
            ("zrecord-zstd", 2.74),
            ("npy-mmap-raw", 17.27),
            ("arrow-ipc-raw", 16.42),
            ("lance-raw", 0.36),
        ]
    },
}

LOADER = {
    "name": "loader",
    "config": {
        "kind": "loader",
        "quick": False,
        "images": 2500,
        "item_shape": [3, 224, 224],
        "dtype": "uint8",
        "batch_size": 256,
        "transforms": ["identity", "heavy"],
        "loaderx_workers": 2,
        "torch_workers": 2,
        "skipped_pipelines": {"grain": "grain is not installed"},
    },
    "machine": {"date_utc": "2026-11-29T23:44:00+00:00", "cpu_model": "Synthetic CPU"},
    "results": {
        "loaderx-raw/identity": {"batches_s": 578.7, "memory": {"peak_pss_mib": 182}},
        "loaderx-raw/heavy": {"batches_s": 88.1, "memory": {"peak_pss_mib": 358}},
        "torch/identity": {"batches_s": 57.0, "memory": {"peak_pss_mib": 1060}},
        "torch/heavy": {"batches_s": 49.9, "memory": {"peak_pss_mib": 1070}},
        "torch-spawn/identity": {"error": "child exited with code 1"},
    },
}


@pytest.fixture
def plotting(monkeypatch):
    """benches/_plot.py, imported as the bench scripts import it."""
    monkeypatch.syspath_prepend(str(BENCHES))
    import _plot

    return _plot


def svg_text(path: Path) -> str:
    """All text of an SVG file, which must parse as XML with an <svg> root."""
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    return " ".join(t for el in root.iter() if el.tag.endswith("text") for t in el.itertext())


def test_gather_chart_names_every_backend(plotting, tmp_path):
    pytest.importorskip("matplotlib")
    out = plotting.plot(GATHER, tmp_path / "gather.svg")
    text = svg_text(out)
    for name in GATHER["results"]:
        assert name in text
    assert "dense-vision" in text and "Synthetic CPU" in text and "2026-11-29" in text
    assert "memcpy, 2 threads" in text
    assert out.stat().st_size < 200_000


def test_loader_chart_and_png(plotting, tmp_path):
    pytest.importorskip("matplotlib")
    text = svg_text(plotting.plot(LOADER, tmp_path / "loader.svg"))
    for key in ("loaderx-raw / identity", "loaderx-raw / heavy", "torch / heavy"):
        assert key in text
    assert "grain skipped" in text and "torch-spawn/identity failed" in text
    png = plotting.plot(LOADER, tmp_path / "loader.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_py_replots_saved_json_into_panels(tmp_path):
    pytest.importorskip("matplotlib")
    tokens = copy.deepcopy(GATHER)
    tokens["name"] = "dense-tokens"
    tokens["results"]["lmdb-raw"] = {"gather": {"gib_s": 1.4, "krecords_s": 736.0}}
    paths = []
    for payload in (GATHER, tokens):
        paths.append(tmp_path / f"{payload['name']}.json")
        paths[-1].write_text(json.dumps(payload))
    out = tmp_path / "both.svg"
    r = subprocess.run(
        [sys.executable, str(BENCHES / "plot.py"), *map(str, paths), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    text = svg_text(out)
    assert "dense-vision" in text and "dense-tokens" in text and "lmdb-raw" in text
    r = subprocess.run(
        [sys.executable, str(BENCHES / "plot.py"), str(paths[0]), "--out", str(tmp_path / "x.gif")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and ".svg or .png" in r.stderr


def test_bad_inputs(plotting, tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(ValueError, match=".svg or .png"):
        plotting.plot(GATHER, tmp_path / "chart.pdf")
    with pytest.raises(ValueError, match="separate charts"):
        plotting.plot([GATHER, LOADER], tmp_path / "mixed.svg")
    with pytest.raises(ValueError, match="no chart"):
        plotting.plot({"config": {"kind": "sampler"}, "results": {}}, tmp_path / "s.svg")


def test_missing_matplotlib_names_the_extra(plotting, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match="requirements/bench.txt"):
        plotting.plot(GATHER, tmp_path / "gather.svg")
    with pytest.raises(ImportError, match="matplotlib"):
        plotting.check_target(tmp_path / "gather.svg")
    assert not (tmp_path / "gather.svg").exists()


def test_quick_bench_run_plots(tmp_path):
    """A real --quick run of bench_dense.py with --plot, then a replot of its JSON."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("zstandard")  # the run measures the zstd decode limit
    backends = "zrecord-raw,zrecord-zstd,npy-mmap-raw"
    out = tmp_path / "dense.svg"
    cmd = [sys.executable, str(BENCHES / "bench_dense.py"), "--quick", "--only", backends]
    cmd += ["--min-time", "0.05", "--out", str(tmp_path), "--tmp", str(tmp_path)]
    r = subprocess.run(
        cmd + ["--plot", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert r.returncode == 0, r.stderr
    text = svg_text(out)
    for name in backends.split(","):
        assert name in text
    assert "--quick smoke run" in text
    saved = tmp_path / "dense-vision-quick.json"
    again = tmp_path / "again.png"
    r = subprocess.run(
        [sys.executable, str(BENCHES / "plot.py"), str(saved), "--out", str(again)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert again.read_bytes()[:4] == b"\x89PNG"
    # A bad --plot fails at parse time, before anything runs.
    r = subprocess.run(
        cmd + ["--plot", str(tmp_path / "dense.jpg")], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "--plot" in r.stderr
    assert not (tmp_path / "dense.jpg").exists()
