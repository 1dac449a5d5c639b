"""Editing rows in place, against Lance on the same data in the same run.

The table: the workload of ``bench_columns.py`` (``label`` int64 Zipf,
``score`` float32, ``year`` int16, a 6-word ``caption``) plus an int64
``id`` key (0..rows-1) and a 256-float16 embedding ``emb``, ``--rows`` rows
(4,000,000 by default), written by ``loaderx.ingest_sharded`` (default
layout and codec) and by ``lance.write_dataset``. Workloads, each on a
fresh hard-linked copy of both (an edit only ever writes new files):

* ``update_label``: the label of 1 % of rows set by a predicate
  (``score < 0.01``): ``Table.update`` against Lance's ``update``; the
  bytes each writes are measured on disk;
* ``update_emb``: the embedding of 0.1 % of rows set by id:
  ``Table.update(ids, ...)`` against Lance's ``merge_insert("id")
  .when_matched_update_all()`` of ``id`` and ``emb``;
* ``merge_insert``: 200,000 rows (``--merge-rows``), half of them existing
  keys, all columns: ``Table.merge_insert`` against Lance's
  ``merge_insert("id").when_matched_update_all().when_not_matched_insert_all()``;
* ``add_on``: a float column from a shuffled keyed source of all rows with
  1 % missing: ``add_columns(..., on="id")`` against Lance's ``merge``;
* ``s3``: the requests of the 1 % label update on a copy of the table's
  first ``--s3-rows`` rows (without the embedding) in an S3-compatible
  server on 127.0.0.1 (moto), counted by a proxy in front of it, the
  table opened before the call: loaderx against Lance;
* ``after_edits``: random training batches (1,024 rows of label, score,
  year, caption) and an SQL scan of the label column after 20 updates of
  1 % of rows each, against the unedited table, and the edited one after
  ``compact``; the same after one ``merge_insert`` (its columns patched),
  and after its ``compact`` (the five measured interleaved, best of
  ``--rounds``).

Each edit's figure is the median of ``--rounds`` runs. Page cache warm.
Results are checked equal (loaderx against Lance) before they count.

    .venv/bin/python benches/bench_edits.py [--rows 4000000] [--rounds 3] [--quick]

The markdown table goes to stdout, everything measured to
``benches/out/edits.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python" / "tests"))

from bench_columns import generate  # noqa: E402

import loaderx  # noqa: E402

from _machine import describe_machine_and_build  # noqa: E402
from _report import DEFAULT_OUT, log, write_json  # noqa: E402

DIM = 256


def make(rows: int, seed: int) -> pa.Table:
    data = generate(rows, seed)
    rng = np.random.default_rng(seed + 1)
    emb = rng.standard_normal((rows, DIM), dtype=np.float32).astype(np.float16)
    data = data.append_column("id", pa.array(np.arange(rows, dtype=np.int64)))
    return data.append_column("emb", pa.FixedShapeTensorArray.from_numpy_ndarray(emb))


def du(path: Path) -> int:
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            p = os.path.join(d, n)
            if not os.path.islink(p):
                total += os.stat(p).st_size
    return total


def new_bytes(before: dict, path: Path) -> int:
    """Bytes of the files under ``path`` that ``before`` (inode by path)
    did not list: what an edit of a hard-linked copy wrote."""
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            p = os.path.join(d, n)
            st = os.stat(p)
            if before.get(os.path.relpath(p, path)) != st.st_ino:
                total += st.st_size
    return total


def inodes(path: Path) -> dict:
    out = {}
    for d, _, names in os.walk(path):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, path)] = os.stat(p).st_ino
    return out


def fresh(src: Path, dst: Path) -> Path:
    shutil.rmtree(dst, ignore_errors=True)
    subprocess.run(["cp", "-al", str(src), str(dst)], check=True)
    return dst


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def merge_source(rows: int, rng, args) -> pa.Table:
    """``--merge-rows`` rows of the workload, half of them with keys the
    table has (drawn by ``rng``), half with new keys."""
    half = args.merge_rows // 2
    old_keys = rng.choice(rows, size=half, replace=False)
    merge_keys = np.concatenate([old_keys, np.arange(rows, rows + args.merge_rows - half)])
    return make(merge_keys.size, args.seed + 3).set_column(
        4, "id", pa.array(merge_keys.astype(np.int64))
    )


def edits(work: Path, lx: Path, ln: Path, data: pa.Table, args) -> dict:
    import lance

    rows = data.num_rows
    rng = np.random.default_rng(args.seed + 2)
    emb_ids = np.sort(rng.choice(rows, size=max(1, rows // 1000), replace=False))
    emb_new = rng.standard_normal((emb_ids.size, DIM), dtype=np.float32).astype(np.float16)
    merge_src = merge_source(rows, rng, args)
    keep = rng.permutation(rows)[: rows - rows // 100]
    add_src = pa.table({"id": pa.array(keep.astype(np.int64)), "quality": rng.random(keep.size)})

    def lx_update_label(t):
        return t.update("score < 0.01", {"label": 0})

    def ln_update_label(ds):
        return ds.update({"label": "0"}, where="score < 0.01")

    def lx_update_emb(t):
        return t.update(emb_ids, {"emb": emb_new})

    emb_tbl = pa.table(
        {
            "id": pa.array(emb_ids.astype(np.int64)),
            "emb": pa.FixedShapeTensorArray.from_numpy_ndarray(emb_new),
        }
    )

    def ln_update_emb(ds):
        return ds.merge_insert("id").when_matched_update_all().execute(emb_tbl)

    def lx_merge(t):
        return t.merge_insert(merge_src, "id")

    def ln_merge(ds):
        return (
            ds.merge_insert("id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(merge_src)
        )

    def lx_add(t):
        return t.add_columns(add_src, on="id")

    def ln_add(ds):
        return ds.merge(add_src, left_on="id")

    cases = {
        "update_label": (lx_update_label, ln_update_label),
        "update_emb": (lx_update_emb, ln_update_emb),
        "merge_insert": (lx_merge, ln_merge),
        "add_on": (lx_add, ln_add),
    }
    out: dict = {}
    for name, (lx_fn, ln_fn) in cases.items():
        if args.only and name not in args.only:
            continue
        got = {"loaderx": [], "lance": [], "loaderx_bytes": [], "lance_bytes": []}
        for r in range(args.rounds):
            a = fresh(lx, work / "lx-edit")
            before = inodes(a)
            t = loaderx.open_table(str(a), readonly=False)
            assert t.num_rows == rows  # opened before the clock starts, as Lance's
            got["loaderx"].append(timed(lambda t=t, fn=lx_fn: fn(t)))
            got["loaderx_bytes"].append(new_bytes(before, a))
            lx_check = t
            b = fresh(ln, work / "ln-edit")
            before = inodes(b)
            ds = lance.dataset(str(b))
            got["lance"].append(timed(lambda ds=ds, fn=ln_fn: fn(ds)))
            got["lance_bytes"].append(new_bytes(before, b))
            if r == 0:
                check(name, lx_check, lance.dataset(str(b)))
            lx_check.close()
        med = {k: statistics.median(v) for k, v in got.items()}
        med["ratio"] = med["loaderx"] / med["lance"]
        med["all"] = got
        out[name] = med
        log(
            f"{name}: loaderx {med['loaderx']:.3f} s, Lance {med['lance']:.3f} s, "
            f"ratio {med['ratio']:.2f}"
        )
    return out


def check(name: str, t, ds) -> None:
    """The edited tables hold the same rows (by id) in the columns edited."""
    cols = {
        "update_label": ["label"],
        "update_emb": ["emb"],
        "merge_insert": ["label", "caption"],
        "add_on": ["quality"],
    }[name]
    want = ds.to_table(columns=["id", *cols]).sort_by("id")
    from loaderx._streams import scan

    schema, batches = scan(pa, t, None, columns=["id", *cols], max_bytes=None)
    got = pa.Table.from_batches(list(batches), schema=schema).select(["id", *cols]).sort_by("id")
    assert got.num_rows == want.num_rows, (name, got.num_rows, want.num_rows)
    for c in cols:
        a, b = got[c].combine_chunks(), want[c].combine_chunks()
        if isinstance(a.type, pa.BaseExtensionType):
            a, b = a.storage, b.storage
            if not isinstance(b.type, pa.FixedSizeListType):
                b = b.cast(a.type)
        if pa.types.is_large_string(b.type) or pa.types.is_string_view(b.type):
            b = b.cast(pa.string())
        if c == "label":
            b = b.cast(a.type)
        assert a.equals(b), (name, c)


def s3_requests(data: pa.Table, args) -> dict:
    """Requests of the 1 % label update in the S3 server, loaderx and
    Lance, each table opened before the counted call."""
    import lance
    from remote_servers import FaultProxy, start_s3

    small = data.slice(0, args.s3_rows).drop_columns(["emb"])
    s3 = start_s3()
    try:
        opts = s3.options()
        from _s3 import lance_options

        lopts = lance_options(opts)
        proxy = FaultProxy(opts["aws_endpoint"])
        try:
            uri = f"s3://{s3.bucket}/edits/t"
            loaderx.ingest_sharded(small, uri, storage_options=opts).close()
            with loaderx.open_table(
                uri, readonly=False, storage_options=dict(opts, aws_endpoint=proxy.url)
            ) as t:
                proxy.reset_counts()
                t.update("score < 0.01", {"label": 0})
                ours = [f"{r.method} {r.path}" for r in proxy.requests]
            luri = f"s3://{s3.bucket}/edits/lance"
            lance.write_dataset(small, luri, storage_options=lopts)
            ds = lance.dataset(luri, storage_options=dict(lopts, aws_endpoint=proxy.url))
            proxy.reset_counts()
            ds.update({"label": "0"}, where="score < 0.01")
            peer = [f"{r.method} {r.path}" for r in proxy.requests]
        finally:
            proxy.stop()
    finally:
        s3.server.stop()
    out = {
        "rows": small.num_rows,
        "loaderx_requests": len(ours),
        "lance_requests": len(peer),
        "loaderx_request_list": ours,
        "lance_request_list": peer,
    }
    log(f"S3 update requests: loaderx {len(ours)}, Lance {len(peer)}")
    return out


def after_edits(work: Path, lx: Path, data: pa.Table, args) -> dict:
    """Random batches and an SQL scan of the label column after 20 updates
    of 1 % of rows each (a copy), against the unedited table and against
    the edited copy compacted: the three tables measured interleaved,
    ``--rounds`` rounds, best of each."""
    from loaderx.dataloader import DataLoader

    rows = data.num_rows
    names = ["label", "score", "year", "caption"]
    steps = args.steps
    q = "SELECT sum(label) AS s, count(*) AS n FROM t WHERE score > 0.5"

    def batches(t):
        with DataLoader(
            {n: t[n] for n in names}, batch_size=1024, mode="iid", seed=3, prefetch=2, workers=1
        ) as dl:
            for _ in range(8):
                next(dl)
            t0 = time.perf_counter()
            for _ in range(steps):
                next(dl)
            return steps / (time.perf_counter() - t0)

    def scan_s(t):
        loaderx.sql(q, t=t)
        return min(timed(lambda: loaderx.sql(q, t=t)) for _ in range(3))

    out = {}
    plain = fresh(lx, work / "lx-plain")
    edited = fresh(lx, work / "lx-edited")
    rng = np.random.default_rng(args.seed + 4)
    with loaderx.open_table(str(edited), readonly=False) as t:
        t0 = time.perf_counter()
        for k in range(20):
            ids = np.sort(rng.choice(rows, size=rows // 100, replace=False))
            t.update(ids, {"label": k})
        out["edit_s"] = time.perf_counter() - t0
    compacted = fresh(edited, work / "lx-compacted")
    with loaderx.open_table(str(compacted), readonly=False) as t:
        out["compact_s"] = timed(lambda: t.compact())
    # One merge_insert of --merge-rows rows (its columns patched, columnar
    # ones too), then compacted.
    merged = fresh(lx, work / "lx-merged")
    with loaderx.open_table(str(merged), readonly=False) as t:
        t.merge_insert(merge_source(rows, rng, args), "id")
    merged_compacted = fresh(merged, work / "lx-merged-compacted")
    with loaderx.open_table(str(merged_compacted), readonly=False) as t:
        out["merged_compact_s"] = timed(lambda: t.compact())
    tables = {
        "unedited": plain,
        "edited": edited,
        "compacted": compacted,
        "merged": merged,
        "merged_compacted": merged_compacted,
    }
    got = {k: {"batches_per_s": [], "sql_s": []} for k in tables}
    for _ in range(args.rounds):
        for k, path in tables.items():
            with loaderx.open_table(str(path)) as t:
                got[k]["batches_per_s"].append(batches(t))
                got[k]["sql_s"].append(scan_s(t))
    for k, v in got.items():
        out[k] = {"batches_per_s": max(v["batches_per_s"]), "sql_s": min(v["sql_s"]), "all": v}
    base = out["unedited"]
    for k in ("edited", "compacted", "merged", "merged_compacted"):
        out[k]["batches_ratio"] = out[k]["batches_per_s"] / base["batches_per_s"]
        out[k]["sql_ratio"] = base["sql_s"] / out[k]["sql_s"]
    log(
        f"after 20 edits: batches {out['edited']['batches_ratio']:.2f}x, "
        f"SQL {out['edited']['sql_ratio']:.2f}x; "
        f"compacted {out['compacted']['batches_ratio']:.2f}x, "
        f"{out['compacted']['sql_ratio']:.2f}x; "
        f"after a merge_insert {out['merged']['batches_ratio']:.2f}x, "
        f"{out['merged']['sql_ratio']:.2f}x; compacted "
        f"{out['merged_compacted']['batches_ratio']:.2f}x, "
        f"{out['merged_compacted']['sql_ratio']:.2f}x"
    )
    return out


def report(r: dict) -> str:
    lines = [
        f"{r['rows']:,} rows, median of {r['rounds']} runs",
        "",
        "| edit | loaderx | Lance | loaderx / Lance | loaderx wrote | Lance wrote |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, m in r["edits"].items():
        lines.append(
            f"| {name} | {m['loaderx']:.3f} s | {m['lance']:.3f} s | {m['ratio']:.2f}x | "
            f"{m['loaderx_bytes'] / 1e6:.1f} MB | {m['lance_bytes'] / 1e6:.1f} MB |"
        )
    q = r.get("s3")
    if q:
        lines += [
            "",
            f"S3 server, 1 % label update of {q['rows']:,} rows: loaderx "
            f"{q['loaderx_requests']} requests, Lance {q['lance_requests']}",
        ]
    a = r.get("after")
    if a:
        lines += [
            "",
            "| after 20 updates of 1 % (or one merge_insert) | batches/s | ÷ unedited "
            "| SQL scan of label | ÷ unedited |",
            "|---|---:|---:|---:|---:|",
            f"| unedited | {a['unedited']['batches_per_s']:.0f} | 1.00x | "
            f"{a['unedited']['sql_s'] * 1e3:.1f} ms | 1.00x |",
        ]
        for k in ("edited", "compacted", "merged", "merged_compacted"):
            lines.append(
                f"| {k.replace('_', ' ')} | {a[k]['batches_per_s']:.0f} | "
                f"{a[k]['batches_ratio']:.2f}x | "
                f"{a[k]['sql_s'] * 1e3:.1f} ms | {a[k]['sql_ratio']:.2f}x |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    import lance

    p = argparse.ArgumentParser(prog="bench_edits.py")
    p.add_argument("--rows", type=int)
    p.add_argument("--merge-rows", type=int)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--only", nargs="*", help="edits to run (default: every one)")
    p.add_argument("--no-after", action="store_true", help="skip the after-edits figures")
    p.add_argument("--no-s3", action="store_true", help="skip the S3 request count")
    p.add_argument("--s3-rows", type=int, default=100_000)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    args = p.parse_args(argv)
    rows = args.rows or (100_000 if args.quick else 4_000_000)
    args.merge_rows = args.merge_rows or min(200_000, rows // 20 * 2)
    if args.quick:
        args.rounds, args.steps = 1, 20
    work = Path(tempfile.mkdtemp(prefix="bench-edits-", dir=args.tmp))
    try:
        log(f"generating {rows} rows")
        data = make(rows, args.seed)
        lx, ln = work / "loaderx", work / "lance"
        loaderx.ingest_sharded(data, str(lx)).close()
        lance.write_dataset(data, str(ln))
        results = {
            "rows": rows,
            "rounds": args.rounds,
            "merge_rows": args.merge_rows,
            "loaderx_bytes": du(lx),
            "lance_bytes": du(ln),
        }
        results["edits"] = edits(work, lx, ln, data, args)
        if not args.no_s3:
            results["s3"] = s3_requests(data, args)
        if not args.no_after:
            results["after"] = after_edits(work, lx, data, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["machine"] = describe_machine_and_build(args.tmp)
    print(report(results))
    write_json(args.out, "edits", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
