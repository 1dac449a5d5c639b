"""Replot saved benchmark results as a bar chart, without rerunning anything.

    .venv/bin/python benches/plot.py benches/out/dense-vision.json --out docs/img/dense-vision.svg
    .venv/bin/python benches/plot.py benches/out/dense-vision.json benches/out/dense-tokens.json \\
        --out gather.png                       # one panel per workload
    .venv/bin/python benches/plot.py benches/out/loader.json --out loader.svg

Store results (``bench_dense.py``, ``bench_ragged.py``) and loader results
(``bench_loader.py``) go into separate charts. The format follows the suffix
(.svg or .png). Needs matplotlib (``pip install -r requirements/bench.txt``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _plot import plot_files


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="plot.py", description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", type=Path, help="JSON written by a bench (benches/out)")
    p.add_argument("--out", required=True, type=Path, help="chart file, .svg or .png")
    args = p.parse_args(argv)
    try:
        path = plot_files(args.results, args.out)
    except (ImportError, ValueError, OSError, KeyError) as e:
        print(f"plot.py: error: {e}", file=sys.stderr)
        return 1
    print(f"chart: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
