"""The ``loaderx`` command line.

    loaderx info PATH [--json]              kind, length, dtype, item_shape, codec
    loaderx stats PATH [--json]             records, live/data bytes, reclaimable, raw_records
    loaderx verify PATH [--json]            decode every record
    loaderx sql QUERY --table NAME=DIR ...  SQL over tables (each DIR: a table, plain or sharded)
    loaderx export --out FILE --table DIR   a table of stores to Parquet
    loaderx import FILE ROOT [--codec C]    Parquet or Arrow IPC to one store per column
    loaderx copy SRC DST                    a table from any location to any other
    loaderx versions TABLE                  a sharded table's versions and tags
    loaderx tag TABLE NAME [--version N]    name a version (--delete removes the tag)
    loaderx cleanup TABLE [--older-than D]  remove old versions and what only they need
    loaderx compact TABLE [--min-deleted F] scalar and text columns to columnar, shards rewritten
    loaderx update TABLE --where PRED --set COL=VALUE ...  set values in the rows matched
    loaderx bench [--plot FILE.svg]         a quick gather and sampler benchmark (and its chart)

A table ``DIR`` is anything :func:`loaderx.open_table` opens: a plain table
(a directory whose subdirectories holding ``meta.zr``, or ``column.zc`` for a
columnar column, are its columns, named after the subdirectories) or a
sharded one. ``DIR@VERSION`` (``sql``'s
``--table NAME=DIR@VERSION`` and ``export --table``) opens a sharded table
at a version number or tag; the text after the last ``@`` is taken as the
version when it holds no ``/``. ``info``, ``stats``, ``verify``,
``sql`` and ``export`` open stores and tables read-only, so they run while
other processes read the stores (a training job's read-only handles), but
not while a writer holds one.

Every PATH, DIR and the ``copy`` ends may be URIs (``s3://bucket/prefix``,
``gs://``, ``az://``, ``http(s)://`` to read), configured by repeated
``--storage-option KEY=VALUE`` (the ``object_store`` crate's key names,
e.g. ``aws_endpoint``, ``aws_region``) and the usual environment variables.
Exit status 0 on success; otherwise one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

import numpy as np

from . import _native

BAD_INPUT = 1


class CliError(Exception):
    """A failure to report as one line on stderr."""


# -- helpers -------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr, shown only on a terminal."""

    def __init__(self, label: str, total: int | None, stream=None):
        self.label = label
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.start = time.perf_counter()
        self.last = 0.0

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last < 0.1 and (self.total is None or done < self.total):
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        if self.total:
            frac = min(done / self.total, 1.0)
            bar = "#" * int(frac * 30)
            line = f"{self.label} [{bar:<30}] {frac:6.1%} {done}/{self.total} ({rate:,.0f}/s)"
        else:
            line = f"{self.label} {done} ({rate:,.0f}/s)"
        self.stream.write("\r" + line)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _options(args) -> dict | None:
    """``--storage-option KEY=VALUE`` arguments as a dict (None when none)."""
    specs = getattr(args, "storage_option", None) or []
    if not specs:
        return None
    out = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not key:
            # The value may be a secret: only the key is named.
            raise CliError(f"--storage-option expects KEY=VALUE, got one for {key!r}")
        out[key] = value
    return out


def _is_remote(path: str) -> bool:
    return _native.is_remote(path)


def _open_any(path: str, options: dict | None = None):
    """Opens the store at ``path`` (local or remote) with the class of its
    kind, read-only, so that inspecting a store works while others read it
    (a training job's read-only handles)."""
    from .table import _wrap, open_store

    if not _is_remote(path) and os.path.isfile(os.path.join(path, "column.zc")):
        # A columnar column's directory: the same read-only handle.
        return _wrap(_native.open_columnar(path), path)
    return open_store(path, True, storage_options=options)


def _split_version(spec: str) -> tuple[str, int | str | None]:
    """``DIR@VERSION`` as ``(DIR, VERSION)``: a version number, a tag, or
    None without one (the text after the last ``@``, when it holds no
    ``/``)."""
    path, sep, version = spec.rpartition("@")
    if not sep or not path or not version or "/" in version:
        return spec, None
    return path, int(version) if version.isdigit() else version


def _table_dir(spec: str, options: dict | None = None) -> dict:
    """The read-only columns of the table at ``spec`` (``DIR`` or
    ``DIR@VERSION``), as :func:`loaderx.open_table` opens it (plain,
    sharded or remote)."""
    from .table import open_table

    path, version = _split_version(spec)
    return open_table(path, storage_options=options, version=version)._release()


def _close_all(streams: dict) -> None:
    for s in streams.values():
        s.close()


def _emit(args, data: dict, text: str) -> None:
    print(json.dumps(data) if args.json else text)


# -- subcommands ---------------------------------------------------------------


def cmd_info(args) -> int:
    with _open_any(args.path, options=_options(args)) as s:
        shape = list(s.item_shape) if hasattr(s, "item_shape") else None
        data = {
            "kind": s._kind,
            "length": len(s),
            "dtype": s.dtype.name,
            "item_shape": shape,
            "codec": s.codec,
        }
        if s.layout == "columnar":
            data["layout"] = "columnar"
    text = "\n".join(
        f"{k}: {tuple(v) if k == 'item_shape' and v is not None else v}" for k, v in data.items()
    )
    _emit(args, data, text)
    return 0


def cmd_stats(args) -> int:
    with _open_any(args.path, options=_options(args)) as s:
        data = s.stats()
    _emit(args, data, "\n".join(f"{k}: {v}" for k, v in data.items()))
    return 0


def cmd_verify(args) -> int:
    from .zrecord import Corrupted

    with _open_any(args.path, options=_options(args)) as s:
        n = len(s)
        progress = Progress("verify", n)
        # Chunks of about 64 MiB (estimated from the stored sizes).
        st = s.stats()
        per = max(1, st["live_bytes"] // max(n, 1))
        step = max(1, min(n, (64 << 20) // max(per, 1)))
        records = 0
        nbytes = 0
        try:
            for start in range(0, n, step):
                out = s[np.arange(start, min(start + step, n))]
                records += len(out)
                nbytes += out.nbytes if isinstance(out, np.ndarray) else sum(r.nbytes for r in out)
                progress.update(records)
        except Corrupted as exc:
            progress.close()
            raise CliError(f"verify failed: {exc}") from exc
        progress.close()
    data = {"ok": True, "records": records, "logical_bytes": nbytes}
    _emit(args, data, f"ok: {records} records decoded ({nbytes} logical bytes)")
    return 0


def _parse_tables(specs: Sequence[str]) -> dict:
    tables = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise CliError(f"--table expects NAME=DIR (or NAME=URI), got {spec!r}")
        if name in tables:
            raise CliError(f"table {name!r} given twice")
        tables[name] = path
    return tables


def cmd_sql(args) -> int:
    from ._sql import sql

    tables = _parse_tables(args.table)
    if not tables:
        raise CliError("give at least one --table NAME=DIR")
    opened = {}
    try:
        for name, path in tables.items():
            opened[name] = _table_dir(path, options=_options(args))
        result = sql(args.query, **opened)
    finally:
        for streams in opened.values():
            _close_all(streams)
    if args.json:
        print(json.dumps({"columns": result.column_names, "rows": result.to_pylist()}, default=str))
    else:
        print(result.to_pandas().to_string(index=False) if _has_pandas() else result)
    return 0


def _has_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


def cmd_export(args) -> int:
    from .parquet import export

    options = _options(args)
    streams = _table_dir(args.table, options=options)
    try:
        total = len(next(iter(streams.values())))
        progress = Progress("export", total)
        t0 = time.perf_counter()
        rows = export(
            streams,
            args.out,
            index_column=args.index_column,
            progress=progress.update,
            storage_options=options,
        )
        progress.close()
        seconds = time.perf_counter() - t0
    finally:
        _close_all(streams)
    if _is_remote(args.out):
        size = _native.file_size(args.out, options)
    else:
        size = os.path.getsize(args.out)
    data = {"rows": rows, "path": args.out, "bytes": size, "seconds": seconds}
    _emit(args, data, f"exported {rows} rows to {args.out} ({data['bytes']} bytes, {seconds:.2f}s)")
    return 0


def cmd_import(args) -> int:
    from .parquet import ingest

    total = _native.parquet_rows(args.file) if os.path.isfile(args.file) else None
    progress = Progress("import", total)
    stores = ingest(args.file, args.root, codec=args.codec, progress=progress.update)
    progress.close()
    data = {name: {"kind": s._kind, "length": len(s)} for name, s in stores.items()}
    _close_all(stores)
    lines = [f"{name}: {v['kind']} store of {v['length']} records" for name, v in data.items()]
    _emit(args, {"root": args.root, "stores": data}, "\n".join(lines))
    return 0


def cmd_copy(args) -> int:
    from .table import copy_table

    progress = None
    t0 = time.perf_counter()

    def report(done: int, total: int) -> None:
        nonlocal progress
        if progress is None:
            progress = Progress("copy (bytes)", total)
        progress.update(done)

    try:
        copied = copy_table(args.src, args.dst, storage_options=_options(args), progress=report)
    finally:
        if progress is not None:
            progress.close()
    seconds = time.perf_counter() - t0
    data = {"src": args.src, "dst": args.dst, "bytes": copied, "seconds": seconds}
    _emit(args, data, f"copied {copied} bytes from {args.src} to {args.dst} ({seconds:.2f}s)")
    return 0


def _open_sharded(args):
    from .table import open_table

    t = open_table(args.table, storage_options=_options(args))
    if not t.sharded:
        t.close()
        raise CliError(f"{args.table} is a plain table: it has no versions")
    return t


def cmd_versions(args) -> int:
    with _open_sharded(args) as t:
        versions = t.versions()
        tags = t.tags()
    by_version: dict = {}
    for name, v in sorted(tags.items()):
        by_version.setdefault(v, []).append(name)
    rows = [
        {
            "version": v["version"],
            "timestamp": v["timestamp"].isoformat() if v["timestamp"] else None,
            "operation": v["operation"],
            "num_rows": v["num_rows"],
            "tags": by_version.get(v["version"], []),
        }
        for v in versions
    ]
    lines = [
        f"{r['version']:>8}  {r['timestamp'] or '-':<32}  {r['operation']:<12}  "
        f"{r['num_rows']:>12} rows  {' '.join(r['tags'])}".rstrip()
        for r in rows
    ]
    _emit(args, {"versions": rows, "tags": tags}, "\n".join(lines))
    return 0


def cmd_tag(args) -> int:
    with _open_sharded(args) as t:
        if args.delete:
            if args.version is not None:
                raise CliError("--delete takes no --version")
            t.untag(args.name)
            data = {"tag": args.name, "deleted": True}
            text = f"removed tag {args.name!r}"
        else:
            version = t.tag(args.name, args.version)
            data = {"tag": args.name, "version": version}
            text = f"tagged version {version} {args.name!r}"
    _emit(args, data, text)
    return 0


def cmd_cleanup(args) -> int:
    import datetime

    if args.older_than < 0:
        raise CliError(f"--older-than must not be negative, got {args.older_than}")
    with _open_sharded(args) as t:
        before = [v["version"] for v in t.versions()]
        freed = t.cleanup(
            older_than=datetime.timedelta(days=args.older_than), keep_last=args.keep_last
        )
        after = [v["version"] for v in t.versions()]
    removed = sorted(set(before) - set(after))
    data = {"removed_versions": removed, "kept_versions": after, "bytes_freed": freed}
    _emit(args, data, f"removed {len(removed)} versions, freed {freed} bytes; kept {after}")
    return 0


def cmd_compact(args) -> int:
    from .table import open_table

    if not 0.0 <= args.min_deleted <= 1.0:
        raise CliError(f"--min-deleted must be a fraction in [0, 1], got {args.min_deleted}")
    with open_table(args.table, readonly=False, storage_options=_options(args)) as t:
        before = t.version
        version = t.compact(min_deleted=args.min_deleted)
        layouts = {name: t[name].layout for name in t}
    data = {"version": version, "previous_version": before, "layouts": layouts}
    if version is None:
        text = f"nothing to compact in {args.table} (version {before})"
    else:
        columnar = sorted(n for n, layout in layouts.items() if layout == "columnar")
        text = f"committed version {version}; columnar columns: {', '.join(columnar) or '-'}"
    _emit(args, data, text)
    return 0


def _sql_literal(text: str):
    """An SQL literal (``7``, ``-2.5``, ``'text'`` with ``''`` for a quote,
    ``NULL``, ``TRUE``, ``FALSE``) as its Python value."""
    import re

    word = text.strip()
    if word.upper() == "NULL":
        return None
    if word.upper() in ("TRUE", "FALSE"):
        return word.upper() == "TRUE"
    if len(word) >= 2 and word[0] == word[-1] == "'" and "'" not in word[1:-1].replace("''", ""):
        return word[1:-1].replace("''", "'")
    if re.fullmatch(r"[+-]?\d+", word):
        return int(word)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", word):
        return float(word)
    raise CliError(f"--set values must be SQL literals (7, 2.5, 'text', NULL, TRUE), got {text!r}")


def cmd_update(args) -> int:
    from .table import open_table

    values: dict = {}
    for item in args.set:
        column, eq, literal = item.partition("=")
        if not eq or not column.strip():
            raise CliError(f"--set must be COLUMN=VALUE, got {item!r}")
        column = column.strip()
        if column in values:
            raise CliError(f"--set names column {column!r} twice")
        values[column] = _sql_literal(literal)
    if not values:
        raise CliError("update needs at least one --set COLUMN=VALUE")
    with open_table(args.table, readonly=False, storage_options=_options(args)) as t:
        before = t.version
        matched = t.update(args.where, values)
        version = t.version if matched else None
    data = {"matched": matched, "version": version, "previous_version": before}
    if matched:
        text = f"updated {matched} rows; committed version {version}"
    else:
        text = f"no row matches {args.where!r}; nothing committed (version {before})"
    _emit(args, data, text)
    return 0


def _steps(text: str) -> range:
    """``A:B`` (steps A to B-1) or ``A`` (that step) as a range."""
    try:
        if ":" in text:
            lo, hi = text.split(":", 1)
            return range(int(lo), int(hi))
        return range(int(text), int(text) + 1)
    except ValueError:
        raise CliError(f"--steps must be A:B or A (integers), got {text!r}") from None


def cmd_provenance(args) -> int:
    import json

    from .dataloader import DataLoader

    steps = _steps(args.steps)
    if _is_remote(args.out):
        raise CliError(f"--out must be a local file, got {args.out}")
    if steps.start < 0 or steps.stop <= steps.start:
        raise CliError(f"--steps must name at least one step >= 0, got {args.steps!r}")
    try:
        with open(args.state, encoding="utf-8") as f:
            state = json.load(f)
    except json.JSONDecodeError as exc:
        raise CliError(f"{args.state} is not a JSON state_dict: {exc}") from None
    # The ranks are the run's (the state does not keep them): a per-rank
    # batch size other than the state's goes with them.
    kwargs = {"world_size": 1 if args.world_size is None else args.world_size}
    if args.batch_size is not None:
        kwargs["batch_size"] = args.batch_size
    if isinstance(state, dict):
        # Which records a step drew does not depend on the run's transform.
        state = {k: v for k, v in state.items() if k != "transform"}
    with DataLoader.from_state(
        state, storage_options=_options(args), workers=0, prefetch=1, **kwargs
    ) as loader:
        table = loader.provenance(steps, rank=args.rank)
    import pyarrow.parquet as pq

    # Written whole or not at all: a temporary file beside it, then renamed.
    out = os.path.abspath(args.out)
    tmp = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    data = {"out": args.out, "rows": table.num_rows, "steps": [steps.start, steps.stop]}
    _emit(args, data, f"wrote {table.num_rows} rows of steps {args.steps} to {args.out}")
    return 0


def cmd_bench(args) -> int:
    import shutil
    import tempfile

    from .zrecord import DenseStore
    from .zsampler import Sampler

    if args.plot:
        from ._chart import check_target

        check_target(args.plot)  # before the run: the suffix, and matplotlib
    rng = np.random.default_rng(0)
    n, batch = args.records, args.batch_size
    yy, xx = np.mgrid[0:64, 0:64].astype(np.float32) / 64
    images = np.empty((n, 3, 64, 64), np.uint8)
    progress = Progress("generate", n)
    for i in range(n):
        f = rng.uniform(1, 5, 3)
        for c in range(3):
            images[i, c] = 128 + 100 * np.sin(2 * np.pi * f[c] * (xx + yy) + i)
        progress.update(i + 1)
    progress.close()
    root = tempfile.mkdtemp(prefix="loaderx-bench-")
    results = {}
    try:
        plans = [rng.integers(0, n, batch) for _ in range(20)]
        for codec in ("raw", "zstd"):
            path = os.path.join(root, codec)
            t0 = time.perf_counter()
            with DenseStore.create(path, np.uint8, (3, 64, 64), codec=codec) as ds:
                ds.append(images)
            write = time.perf_counter() - t0
            with DenseStore.open(path) as ds:
                assert np.array_equal(ds[plans[0]], images[plans[0]])
                progress = Progress(f"gather {codec}", None)
                done = 0
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < args.seconds:
                    for idx in plans:
                        ds[idx]
                        done += len(idx)
                    progress.update(done)
                dt = time.perf_counter() - t0
                progress.close()
                disk = sum(os.stat(os.path.join(path, f)).st_blocks * 512 for f in os.listdir(path))
            results[codec] = {
                "gather_gib_s": done * images[0].nbytes / dt / 2**30,
                "krecords_s": done / dt / 1e3,
                "write_s": write,
                "ratio": images.nbytes / disk,
            }
        s = Sampler(1_000_000, 256, Sampler.Mode.IID)
        t0 = time.perf_counter()
        k = 0
        while time.perf_counter() - t0 < min(args.seconds, 1.0):
            s.next()
            k += 1
        results["sampler_iid_batches_s"] = k / (time.perf_counter() - t0)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lines = [
        f"{c}: {r['gather_gib_s']:.2f} GiB/s, {r['krecords_s']:.1f} krecords/s, "
        f"ratio {r['ratio']:.2f}x, write {r['write_s']:.2f}s"
        for c, r in results.items()
        if isinstance(r, dict)
    ]
    lines.append(f"sampler (IID, batch 256): {results['sampler_iid_batches_s']:,.0f} batches/s")
    if args.plot:
        from ._chart import plot_bench

        config = {"records": n, "batch_size": batch, "seconds": args.seconds}
        results["chart"] = plot_bench(results, config, args.plot)
        lines.append(f"chart: {results['chart']}")
    _emit(args, results, "\n".join(lines))
    return 0


# -- entry point ----------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loaderx", description="Inspect, query and convert loaderx stores."
    )
    sub = p.add_subparsers(dest="command", required=True)

    def add(name, func, help_text, remote=True):
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("--json", action="store_true", help="machine-readable output")
        if remote:
            sp.add_argument(
                "--storage-option",
                action="append",
                default=[],
                metavar="KEY=VALUE",
                help="an option of the remote locations' client (repeat for more)",
            )
        sp.set_defaults(func=func)
        return sp

    add("info", cmd_info, "kind, length, dtype, item_shape and codec of a store").add_argument(
        "path"
    )
    add("stats", cmd_stats, "space accounting of a store").add_argument("path")
    add("verify", cmd_verify, "decode every record of a store").add_argument("path")
    sp = add("sql", cmd_sql, "run SQL over tables of stores")
    sp.add_argument("query")
    sp.add_argument("--table", action="append", default=[], metavar="NAME=DIR[@VERSION]")
    sp = add("export", cmd_export, "export a table of stores to Parquet")
    sp.add_argument("--out", required=True, metavar="FILE")
    sp.add_argument("--table", required=True, metavar="DIR")
    sp.add_argument("--index-column", default=None, metavar="NAME")
    sp = add("versions", cmd_versions, "list a sharded table's versions and tags")
    sp.add_argument("table")
    sp = add("tag", cmd_tag, "name a version of a sharded table (or remove a tag)")
    sp.add_argument("table")
    sp.add_argument("name")
    sp.add_argument("--version", type=int, default=None, help="default: the latest")
    sp.add_argument("--delete", action="store_true", help="remove the tag instead")
    sp = add(
        "cleanup", cmd_cleanup, "remove old versions of a sharded table and what only they need"
    )
    sp.add_argument("table")
    sp.add_argument(
        "--older-than",
        type=float,
        default=7.0,
        metavar="DAYS",
        help="remove versions committed more than DAYS ago (default 7)",
    )
    sp.add_argument("--keep-last", type=int, default=1, metavar="N", help="always keep the last N")
    sp = add(
        "compact",
        cmd_compact,
        "make a table's scalar and text columns columnar and rewrite shards with many deleted "
        "rows, as one new version",
    )
    sp.add_argument("table")
    sp.add_argument(
        "--min-deleted",
        type=float,
        default=0.1,
        metavar="F",
        help="rewrite the shards with at least this fraction of rows deleted (default 0.1)",
    )
    sp = add(
        "update",
        cmd_update,
        "set values in the rows an SQL predicate matches, as one new version (rows keep their "
        "record ids)",
    )
    sp.add_argument("table")
    sp.add_argument("--where", required=True, metavar="PRED", help="an SQL predicate")
    sp.add_argument(
        "--set",
        action="append",
        default=[],
        required=True,
        metavar="COL=VALUE",
        help="a column and its new value, an SQL literal: 7, 2.5, 'text', NULL (repeat for more)",
    )
    sp = add(
        "provenance",
        cmd_provenance,
        "list the records of a run's steps (from its saved state_dict) to Parquet",
    )
    sp.add_argument("state", metavar="STATE.json")
    sp.add_argument("--steps", required=True, metavar="A:B", help="steps A to B-1 (or one step A)")
    sp.add_argument("--out", required=True, metavar="FILE.parquet")
    sp.add_argument("--rank", type=int, default=None, help="one rank's rows (default: every rank)")
    sp.add_argument("--world-size", type=int, default=None, help="the run's ranks (default 1)")
    sp.add_argument("--batch-size", type=int, default=None, help="per rank (default: the state's)")
    sp = add("copy", cmd_copy, "copy a table between locations (local paths and URIs)")
    sp.add_argument("src")
    sp.add_argument("dst")
    sp = add(
        "import",
        cmd_import,
        "import a Parquet or Arrow IPC file as one store per column",
        remote=False,
    )
    sp.add_argument("file")
    sp.add_argument("root")
    sp.add_argument("--codec", default="zstd", choices=["raw", "zstd"])
    sp = add(
        "bench", cmd_bench, "a quick gather and sampler benchmark on generated data", remote=False
    )
    sp.add_argument("--records", type=int, default=2000)
    sp.add_argument("--batch-size", type=int, default=256)
    sp.add_argument("--seconds", type=float, default=1.0)
    sp.add_argument(
        "--plot",
        metavar="FILE",
        help="draw raw vs zstd gather as a bar chart, FILE.svg or FILE.png (needs matplotlib)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("loaderx: interrupted", file=sys.stderr)
        return 130
    except (CliError, OSError, ValueError, TypeError, IndexError, ImportError) as exc:
        message = str(exc).replace("\n", " ")
        print(f"loaderx {args.command}: error: {message}", file=sys.stderr)
        return BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
