"""``loaderx bench --plot``: the CLI's own raw-against-zstd chart, drawn from
inside the package (python/loaderx/_chart.py). No timing is asserted. The
benchmarks' charts (benches/_plot.py) are tested in benches/tests."""

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from loaderx import cli


def svg_text(path: Path) -> str:
    """All text of an SVG file, which must parse as XML with an <svg> root."""
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    return " ".join(t for el in root.iter() if el.tag.endswith("text") for t in el.itertext())


def test_cli_bench_without_matplotlib_fails_before_running(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "out.svg"
    code = cli.main(["bench", "--records", "64", "--seconds", "0.1", "--plot", str(out)])
    assert code == cli.BAD_INPUT
    err = capsys.readouterr().err
    assert "pip install matplotlib" in err and err.count("\n") == 1
    assert not out.exists()


def test_cli_bench_plot_writes_svg(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out.svg"
    r = subprocess.run(
        [sys.executable, "-m", "loaderx", "bench", "--records", "64", "--seconds", "0.1"]
        + ["--plot", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert f"chart: {out}" in r.stdout
    text = svg_text(out)
    assert "DenseStore raw" in text and "DenseStore zstd" in text and "loaderx bench" in text
    r = subprocess.run(
        [sys.executable, "-m", "loaderx", "bench", "--plot", str(tmp_path / "out.txt")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == cli.BAD_INPUT and ".svg or .png" in r.stderr
