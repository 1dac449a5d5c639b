"""The bar chart of ``loaderx bench --plot FILE``: raw against zstd gather.

matplotlib is not a dependency of loaderx; it is imported only here, when a
chart is asked for, on the Agg backend. The format follows the suffix (.svg or
.png); an SVG keeps its text as text.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform

SUFFIXES = (".svg", ".png")
COLORS = {"raw": "#1f6fb4", "zstd": "#7fb2e0"}


def _pyplot():
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError(
            "--plot needs matplotlib: pip install matplotlib (or loaderx[plot])"
        ) from e
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def check_target(path: str) -> None:
    """Fails before a benchmark runs: a suffix other than .svg/.png, or no matplotlib."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"--plot {path}: the file must end in .svg or .png")
    _pyplot()


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def plot_bench(results: dict, config: dict, path: str) -> str:
    """Draws the gather GiB/s of each codec in ``results`` (``cmd_bench``'s dict)."""
    plt = _pyplot()
    fmt = os.path.splitext(path)[1].lower()[1:]
    codecs = [c for c, r in results.items() if isinstance(r, dict)]
    gib = [results[c]["gather_gib_s"] for c in codecs]
    top = max(gib + [1e-9])
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "loaderx", "font.size": 9}):
        fig, ax = plt.subplots(figsize=(7, 0.5 * len(codecs) + 1.6))
        try:
            y = list(range(len(codecs)))
            bars = ax.barh(y, gib, color=[COLORS.get(c, "#8c8c8c") for c in codecs], height=0.6)
            for bar, c in zip(bars, codecs):
                r = results[c]
                ax.text(
                    bar.get_width() + top * 0.01,
                    bar.get_y() + bar.get_height() / 2,
                    f"{r['gather_gib_s']:.2f} GiB/s · {r['krecords_s']:,.1f} krec/s · "
                    f"{r['ratio']:.2f}× smaller on disk",
                    va="center",
                    fontsize=8,
                )
            ax.set_yticks(y, [f"DenseStore {c}" for c in codecs])
            ax.invert_yaxis()
            ax.set_xlim(0, top * 1.8)
            ax.set_xlabel("random batch gather, GiB/s (uncompressed bytes returned)")
            ax.spines[["top", "right"]].set_visible(False)
            ax.set_title(
                f"loaderx bench: {config['records']:,} uint8 (3, 64, 64) images, "
                f"batches of {config['batch_size']}, {config['seconds']:g} s per codec\n"
                f"{_cpu()}, {os.cpu_count()} logical CPUs; {date}",
                fontsize=9,
                loc="left",
            )
            fig.tight_layout()
            fig.savefig(path, format=fmt, metadata={"Date": None} if fmt == "svg" else {})
        finally:
            plt.close(fig)
    return path
