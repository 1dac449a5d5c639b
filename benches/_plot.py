"""Bar charts of the benchmarks' JSON payloads (SVG or PNG, by the file suffix).

``plot(payloads, path)`` draws what a payload holds:

- a store payload (``bench_dense.py``, ``bench_ragged.py``; ``config.kind`` is
  ``dense`` or ``ragged``): one panel per workload, a horizontal bar per
  backend with its median-round gather GiB/s, annotated with krecords/s;
  loaderx's rows are coloured, the peers grey, and the 2-thread memcpy of the
  same run is a dashed line;
- a loader payload (``bench_loader.py``; ``config.kind`` is ``loader``): one
  bar per pipeline and transform with its median batches/s, annotated with
  images/s and peak PSS.

Titles carry the run's name, the machine (CPU, logical CPUs) and its UTC date,
all from the payload. matplotlib is an optional bench dependency
(``pip install -r requirements/bench.txt``); it is imported when a chart is
drawn, with the Agg backend, and text stays text in the SVG (searchable, small).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

LOADERX = "#1f6fb4"  # loaderx bars
LOADERX_ALT = "#7fb2e0"  # loaderx, second transform
PEER = "#8c8c8c"  # peer bars
PEER_ALT = "#c8c8c8"  # peers, second transform
MEMCPY = "#c0392b"  # the 2-thread memcpy line of a store run
SUFFIXES = (".svg", ".png")
STORE_KINDS = ("dense", "ragged")


def _pyplot():
    """matplotlib.pyplot on the Agg backend, or an ImportError naming the extra."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError(
            "charts need matplotlib, an optional bench dependency: "
            "pip install -r requirements/bench.txt (or pip install matplotlib)"
        ) from e
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _check_suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"{path}: chart files end in .svg or .png, not {suffix or '(none)'!r}")
    return suffix[1:]


def _machine_line(payload: dict) -> str:
    m = payload.get("machine") or {}
    cpu = m.get("cpu_model", "unknown CPU")
    n = m.get("logical_cpus")
    date = (m.get("date_utc") or "").replace("T", " ").replace("+00:00", " UTC")
    parts = [f"{cpu}, {n} logical CPUs" if n else cpu]
    if date:
        parts.append(date)
    load = m.get("load_average")
    if load:
        parts.append(f"load average {load[0]:.2f} at start")
    if (payload.get("config") or {}).get("quick"):
        parts.append("--quick smoke run, not results")
    return "; ".join(parts)


def _is_loaderx(name: str) -> bool:
    return name.startswith(("zrecord-", "loaderx"))


def _annotate(ax, bars, labels: Sequence[str], top: float) -> None:
    for bar, text in zip(bars, labels):
        ax.text(
            bar.get_width() + top * 0.01,
            bar.get_y() + bar.get_height() / 2,
            text,
            va="center",
            ha="left",
            fontsize=8,
        )


def _gather_panel(ax, payload: dict) -> None:
    results = payload["results"]
    names = [n for n, r in results.items() if "gather" in r]
    gib = [results[n]["gather"]["gib_s"] for n in names]
    krec = [results[n]["gather"]["krecords_s"] for n in names]
    colors = [LOADERX if _is_loaderx(n) else PEER for n in names]
    y = list(range(len(names)))
    bars = ax.barh(y, gib, color=colors, height=0.7)
    memcpy = (payload.get("limits") or {}).get("memcpy", {}).get("2", {}).get("best_gib_s")
    top = max(gib + ([memcpy] if memcpy else []) + [1e-9])
    if memcpy:
        ax.axvline(memcpy, color=MEMCPY, ls="--", lw=1)
    _annotate(ax, bars, [f"{g:.3g} GiB/s · {k:,.0f} krec/s" for g, k in zip(gib, krec)], top)
    ax.set_yticks(y, names)
    for tick, name in zip(ax.get_yticklabels(), names):
        if _is_loaderx(name):
            tick.set_fontweight("bold")
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.45)
    ax.set_xlabel("random batch gather, GiB/s (median round; logical bytes)")
    c = payload["config"]
    limit = f"; memcpy on 2 threads {memcpy:.1f} GiB/s (dashed)" if memcpy else ""
    ax.set_title(
        f"{payload['name']}: {c['records']:,} records, {c['logical_mib']:.0f} MiB, "
        f"batches of {c['batch_size']}{limit}\n{_machine_line(payload)}",
        fontsize=9,
        loc="left",
    )


def _loader_panel(ax, payload: dict) -> None:
    c = payload["config"]
    batch = c.get("batch_size", 1)
    transforms = c.get("transforms") or ["identity"]
    rows = [(k, r) for k, r in payload["results"].items() if "batches_s" in r]
    names = [k.replace("/", " / ") for k, _ in rows]
    bps = [r["batches_s"] for _, r in rows]
    colors = []
    for key, _ in rows:
        pipeline, transform = key.split("/")
        second = transforms.index(transform) > 0 if transform in transforms else False
        if _is_loaderx(pipeline):
            colors.append(LOADERX_ALT if second else LOADERX)
        else:
            colors.append(PEER_ALT if second else PEER)
    y = list(range(len(rows)))
    bars = ax.barh(y, bps, color=colors, height=0.7)
    top = max(bps + [1e-9])
    labels = []
    for (_, r), b in zip(rows, bps):
        text = f"{b:,.1f} batches/s · {b * batch:,.0f} img/s"
        pss = (r.get("memory") or {}).get("peak_pss_mib")
        if pss is not None:
            text += f" · PSS {pss:,.0f} MiB"
        labels.append(text)
    _annotate(ax, bars, labels, top)
    ax.set_yticks(y, names)
    for tick, (key, _) in zip(ax.get_yticklabels(), rows):
        if _is_loaderx(key):
            tick.set_fontweight("bold")
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.7)
    ax.set_xlabel("batches/s (median of the timed rounds)")
    shape = "×".join(str(d) for d in c.get("item_shape", []))
    skipped = c.get("skipped_pipelines") or {}
    failed = [k for k, r in payload["results"].items() if "error" in r]
    notes = "".join(f"; {p} skipped" for p in skipped) + "".join(f"; {k} failed" for k in failed)
    ax.set_title(
        f"{payload['name']}: {c.get('images', '?'):,} images of {shape} {c.get('dtype', '')}, "
        f"batch {batch}\nloaderx {c.get('loaderx_workers')} transform threads, "
        f"torch and Grain {c.get('torch_workers')} worker processes{notes}\n"
        f"{_machine_line(payload)}",
        fontsize=9,
        loc="left",
    )


def _legend(fig, loader: bool) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(color=LOADERX, label="loaderx"),
        Patch(color=PEER, label="peers"),
        Line2D([], [], color=MEMCPY, ls="--", lw=1, label="memcpy, 2 threads"),
    ]
    if loader:
        handles = [
            Patch(color=LOADERX, label="loaderx, identity"),
            Patch(color=LOADERX_ALT, label="loaderx, heavy"),
            Patch(color=PEER, label="peers, identity"),
            Patch(color=PEER_ALT, label="peers, heavy"),
        ]
    fig.legend(handles=handles, loc="lower right", fontsize=8, frameon=False, ncol=len(handles))


def check_target(path: str | Path) -> Path:
    """Checks a ``--plot`` file before a run: its suffix, and that matplotlib imports.

    Raises ValueError or ImportError, so a run does not fail after the fact.
    """
    path = Path(path)
    _check_suffix(path)
    _pyplot()
    return path


def kind_of(payload: dict) -> str:
    kind = (payload.get("config") or {}).get("kind")
    if kind in STORE_KINDS:
        return "gather"
    if kind == "loader":
        return "loader"
    raise ValueError(
        f"no chart for a payload of kind {kind!r} (charts: dense, ragged and loader runs)"
    )


def plot(payloads: dict | Sequence[dict], path: str | Path) -> Path:
    """Draws one or more payloads of the same chart kind into ``path`` (.svg or .png).

    Store payloads (one per workload) become stacked panels of one figure; a
    loader payload is one panel. Returns the path written.
    """
    path = Path(path)
    fmt = _check_suffix(path)
    payloads = [payloads] if isinstance(payloads, dict) else list(payloads)
    if not payloads:
        raise ValueError("nothing to plot")
    kinds = {kind_of(p) for p in payloads}
    if len(kinds) > 1:
        raise ValueError("store and loader payloads go into separate charts")
    loader = kinds == {"loader"}
    plt = _pyplot()
    # Inches per panel: the bars, the title lines and the axis label.
    heights = [0.42 * len(p["results"]) + (1.3 if loader else 1.0) for p in payloads]
    with plt.rc_context(
        {"svg.fonttype": "none", "svg.hashsalt": "loaderx", "font.size": 9, "axes.titlesize": 9}
    ):
        fig, axes = plt.subplots(
            len(payloads),
            1,
            figsize=(9, sum(heights) + 0.3),
            gridspec_kw={"height_ratios": heights},
            squeeze=False,
        )
        try:
            for ax, payload in zip(axes[:, 0], payloads):
                (_loader_panel if loader else _gather_panel)(ax, payload)
                ax.spines[["top", "right"]].set_visible(False)
                ax.tick_params(axis="y", length=0)
            _legend(fig, loader)
            fig.tight_layout(rect=(0, 0.25 / (sum(heights) + 0.3), 1, 1))
            path.parent.mkdir(parents=True, exist_ok=True)
            # No creation date in the file: the same payload gives the same bytes.
            meta = {"Date": None} if fmt == "svg" else {}
            fig.savefig(path, format=fmt, metadata=meta, dpi=110)
        finally:
            plt.close(fig)
    return path


def plot_files(json_paths: Sequence[str | Path], path: str | Path) -> Path:
    """Replots saved JSON results (``benches/out/*.json``) without rerunning."""
    return plot([json.loads(Path(p).read_text()) for p in json_paths], path)
