"""Tables that evolve, against Lance on the same data in the same run.

The table: ``--rows`` rows of a 3x32x32 uint8 image (a smooth pattern plus
noise, so zstd has something to do), an int64 id and a text caption,
ingested by loaderx (``ingest_sharded``, zstd) and written by Lance
(``lance.write_dataset``). Workloads (``--only``):

* ``add``: ``Table.add_columns`` of one int64 column and of one
  256-float32 column, locally; against writing that column alone as a new
  loaderx table (the target: within 1.2x), and Lance's ``add_columns``
  (from a reader of the same values). Bytes written are measured on disk.
* ``add_s3``: the same two columns added to a copy of the table's first
  100,000 rows on an S3-compatible server on 127.0.0.1 (``--s3 moto``:
  moto, in Python and in this process, keeping objects in memory; ``--s3
  s3s``: s3s-fs, in Rust, keeping them as files, reached without the
  latency proxy of ``benches/_s3.py``), against writing the column alone
  there and Lance's ``add_columns`` on its own dataset written there; then
  one more add of each, counted through a proxy (``remote_servers.FaultProxy``)
  in front of the server: the requests of the ``add_columns`` call alone,
  the table opened before it, for loaderx and for Lance.
* ``delete``: ``Table.delete`` of 1 % of the rows by a predicate on the id
  column, against a scan of that column (``loaderx.sql`` of the predicate)
  and Lance's ``delete``; then random batch gathers of the image column
  (batch 256) with 10 % of the rows deleted, against the compacted table
  (the target: >= 0.95x), and Lance's ``take`` on its own deleted and
  compacted datasets.
* ``versions``: opening version 1 of a table with 100 versions (four
  shards of 10,000 rows, then 99 deletes of one row each) against opening
  the latest, in the S3 server through a counting proxy: requests and
  median time.

Each figure is the median of ``--rounds`` runs, every run on a fresh copy
where the workload changes the table (hard-linked: evolutions only ever
write new files). Prints a markdown table and writes
the JSON to ``--out``.

    python benches/bench_evolve.py --rows 1000000 --rounds 3 --out benches/out/evolve.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python" / "tests"))

WORKLOADS = ("add", "add_s3", "delete", "versions")
#: Rows of the ``add_s3`` table (moto keeps every object in memory).
S3_ROWS = 100_000


def link_copy(src, dst) -> None:
    """A copy of a table made of hard links: every evolution writes new
    files (and replaces manifests by renaming), never into an existing
    one, so the copy starts as the original without using disk."""
    shutil.copytree(src, dst, copy_function=os.link)


def du(path) -> int:
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            total += os.path.getsize(os.path.join(d, n))
    return total


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median(xs):
    return statistics.median(xs)


def make_table(pa, rows: int, seed: int = 0):
    """The benchmark table, in batches of 50,000 rows (pyarrow Table)."""
    rng = np.random.default_rng(seed)
    batches = []
    base = (np.arange(32)[:, None] + np.arange(32)[None, :]).astype(np.uint8)
    for lo in range(0, rows, 50_000):
        n = min(50_000, rows - lo)
        img = np.broadcast_to(base, (n, 3, 32, 32)) + rng.integers(0, 8, (n, 3, 32, 32), np.uint8)
        batches.append(
            pa.record_batch(
                {
                    "id": np.arange(lo, lo + n, dtype=np.int64),
                    "image": pa.FixedShapeTensorArray.from_numpy_ndarray(img),
                    "caption": [
                        f"a photo of thing {i % 997} number {i}" for i in range(lo, lo + n)
                    ],
                }
            )
        )
    return pa.Table.from_batches(batches)


def new_column(pa, kind: str, rows: int):
    if kind == "int64":
        return pa.array(np.arange(rows, dtype=np.int64) * 3)
    values = np.random.default_rng(1).standard_normal((rows, 256)).astype(np.float32)
    return pa.FixedShapeTensorArray.from_numpy_ndarray(values)


def bench_add(pa, lance, loaderx, table, root: Path, rounds: int, out: dict):
    base = root / "base"
    lbase = root / "base.lance"
    loaderx.ingest_sharded(table, str(base), workers=os.cpu_count() or 1).close()
    lance.write_dataset(table, str(lbase))
    rows = table.num_rows
    for kind in ("int64", "float32x256"):
        col = new_column(pa, kind, rows)
        add, alone, peer, written, lwritten, alone_bytes = [], [], [], [], [], []
        for r in range(rounds):
            work = root / f"add-{kind}-{r}"
            link_copy(base, work)
            before = du(work)
            with loaderx.open_table(str(work), readonly=False) as t:
                add.append(timed(lambda t=t, col=col: t.add_columns({"new": col})))
            written.append(du(work) - before)
            solo = root / f"alone-{kind}-{r}"
            alone.append(
                timed(
                    lambda solo=solo, col=col: loaderx.ingest_sharded(
                        pa.table({"new": col}), str(solo), workers=os.cpu_count() or 1
                    ).close()
                )
            )
            alone_bytes.append(du(solo))
            lwork = root / f"add-{kind}-{r}.lance"
            link_copy(lbase, lwork)
            lbefore = du(lwork)
            ds = lance.dataset(str(lwork))
            reader = _new_column_reader(pa, col)
            peer.append(timed(lambda ds=ds, reader=reader: ds.add_columns(reader)))
            lwritten.append(du(lwork) - lbefore)
            assert lance.dataset(str(lwork)).count_rows() == rows
            for p in (work, solo, lwork):
                shutil.rmtree(p)
        out[f"add_{kind}"] = {
            "loaderx_add_s": median(add),
            "loaderx_alone_s": median(alone),
            "lance_add_s": median(peer),
            "add_over_alone": median(add) / median(alone),
            "lance_over_loaderx": median(peer) / median(add),
            "loaderx_bytes_written": int(median(written)),
            "alone_table_bytes": int(median(alone_bytes)),
            "lance_bytes_written": int(median(lwritten)),
        }


class _S3s:
    """s3s-fs (an S3-compatible server in Rust, objects as files in a
    directory) reached directly, without the latency proxy: what
    ``bench_add_s3`` needs of a server."""

    def __init__(self):
        sys.path.insert(0, str(HERE))
        import _s3

        self.servers = _s3.start()
        self.bucket = self.servers.bucket
        self.dir = Path(self.servers.root) / self.bucket
        self.key, self.secret, self.region = _s3.KEY, _s3.SECRET, _s3.REGION

    def options(self) -> dict[str, str]:
        return {
            "aws_endpoint": self.servers.direct,
            "aws_region": self.region,
            "aws_access_key_id": self.key,
            "aws_secret_access_key": self.secret,
            "aws_allow_http": "true",
        }

    def port(self) -> int:
        return self.servers.server_port

    def sizes(self, prefix: str) -> list[tuple[str, int]]:
        out = []
        for d, _, names in os.walk(self.dir / prefix):
            for n in names:
                p = Path(d) / n
                out.append((str(p.relative_to(self.dir)), p.stat().st_size))
        return sorted(out)

    def delete_prefix(self, prefix: str) -> None:
        parent, _, start = prefix.rpartition("/")
        for p in (self.dir / parent).glob(start + "*"):
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()

    def stop(self) -> None:
        self.servers.stop()


class _Moto:
    def __init__(self):
        from remote_servers import start_s3

        self.s3 = start_s3()
        self.bucket = self.s3.bucket

    def options(self) -> dict[str, str]:
        return self.s3.options()

    def port(self) -> int:
        return int(self.s3.options()["aws_endpoint"].rsplit(":", 1)[1])

    def sizes(self, prefix: str) -> list[tuple[str, int]]:
        return self.s3.sizes(prefix)

    def delete_prefix(self, prefix: str) -> None:
        self.s3.delete_prefix(prefix)

    def stop(self) -> None:
        self.s3.server.stop()


def bench_add_s3(pa, lance, loaderx, table, root: Path, rounds: int, out: dict, server="moto"):
    s3 = _S3s() if server == "s3s" else _Moto()
    try:
        opts = s3.options()
        base = root / "base-s3"
        # The server keeps objects in memory: at most S3_ROWS rows.
        table = table.slice(0, S3_ROWS)
        loaderx.ingest_sharded(table, str(base), workers=os.cpu_count() or 1).close()
        from _s3 import lance_options

        lopts = lance_options(opts)
        for kind in ("int64", "float"):
            col = new_column(pa, kind, table.num_rows)
            add, alone, written, peer = [], [], [], []
            for r in range(rounds):
                target = f"s3://{s3.bucket}/evolve/{kind}-add-{r}"
                loaderx.copy_table(str(base), target, storage_options=opts)
                before = dict(s3.sizes(f"evolve/{kind}-add-{r}/"))
                with loaderx.open_table(target, readonly=False, storage_options=opts) as t:
                    add.append(timed(lambda t=t, col=col: t.add_columns({"new": col})))
                after = dict(s3.sizes(f"evolve/{kind}-add-{r}/"))
                added = set(after) - set(before)
                assert all(
                    "/_g-" in k or "/_versions/" in k or k.endswith("manifest.json") for k in added
                )
                written.append(sum(after[k] for k in added if "/_g-" in k))
                solo = f"s3://{s3.bucket}/evolve/{kind}-alone-{r}"
                alone.append(
                    timed(
                        lambda solo=solo, col=col: loaderx.ingest_sharded(
                            pa.table({"new": col}),
                            solo,
                            workers=os.cpu_count() or 1,
                            storage_options=opts,
                        ).close()
                    )
                )
                s3.delete_prefix(f"evolve/{kind}-")
            # Lance on the same server: its dataset written there, then the
            # same column added (object_store's S3 options, plain HTTP).
            if lance is not None:
                for r in range(rounds):
                    luri = f"s3://{s3.bucket}/evolve/lance-{kind}-{r}"
                    lance.write_dataset(table, luri, storage_options=lopts)
                    ds = lance.dataset(luri, storage_options=lopts)
                    reader = _new_column_reader(pa, col)
                    peer.append(timed(lambda ds=ds, reader=reader: ds.add_columns(reader)))
                    s3.delete_prefix(f"evolve/lance-{kind}-")
            requests = count_add_requests(
                pa, lance, loaderx, s3, base, table, col, kind, opts, lopts
            )
            out[f"add_s3_{kind}"] = {
                "server": server,
                **requests,
                "rows": table.num_rows,
                "loaderx_add_s": median(add),
                "loaderx_alone_s": median(alone),
                "add_over_alone": median(add) / median(alone),
                "loaderx_bytes_written": int(median(written)),
                "lance_add_s": median(peer) if peer else None,
                "lance_over_loaderx": median(peer) / median(add) if peer else None,
            }
    finally:
        s3.stop()


def _new_column_reader(pa, col):
    """The column ``new`` holding ``col``, as a reader for Lance's
    ``add_columns``."""
    return pa.RecordBatchReader.from_batches(
        pa.schema([("new", col.type)]),
        pa.table({"new": col}).to_batches(max_chunksize=65536),
    )


def count_add_requests(pa, lance, loaderx, s3, base, table, col, kind, opts, lopts):
    """The requests of one ``add_columns`` of ``col`` by loaderx and by
    Lance, counted by a proxy in front of the server: each table is written
    directly, opened through the proxy, and only the call that adds the
    column is counted (its requests listed as ``METHOD path``)."""
    from remote_servers import FaultProxy

    proxy = FaultProxy(opts["aws_endpoint"])
    try:
        popts = dict(opts, aws_endpoint=proxy.url)
        plopts = dict(lopts, aws_endpoint=proxy.url)
        target = f"s3://{s3.bucket}/evolve/{kind}-count"
        loaderx.copy_table(str(base), target, storage_options=opts)
        with loaderx.open_table(target, readonly=False, storage_options=popts) as t:
            proxy.reset_counts()
            t.add_columns({"new": col})
            ours = [f"{r.method} {r.path}" for r in proxy.requests]
        peer = None
        if lance is not None:
            luri = f"s3://{s3.bucket}/evolve/lance-{kind}-count"
            lance.write_dataset(table, luri, storage_options=lopts)
            ds = lance.dataset(luri, storage_options=plopts)
            reader = _new_column_reader(pa, col)
            proxy.reset_counts()
            ds.add_columns(reader)
            peer = [f"{r.method} {r.path}" for r in proxy.requests]
        s3.delete_prefix(f"evolve/{kind}-count")
        s3.delete_prefix(f"evolve/lance-{kind}-count")
        return {
            "loaderx_add_requests": len(ours),
            "lance_add_requests": None if peer is None else len(peer),
            "loaderx_add_request_list": ours,
            "lance_add_request_list": peer,
        }
    finally:
        proxy.stop()


def gathers(read, n: int, batches: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    plans = [np.sort(rng.choice(n, 256, replace=False)) for _ in range(batches)]
    t0 = time.perf_counter()
    for idx in plans:
        read(idx)
    return (time.perf_counter() - t0) / batches


def bench_delete(pa, lance, loaderx, table, root: Path, rounds: int, out: dict):
    base = root / "del-base"
    lbase = root / "del-base.lance"
    loaderx.ingest_sharded(table, str(base), workers=os.cpu_count() or 1).close()
    lance.write_dataset(table, str(lbase))
    rows = table.num_rows
    delete, scan, peer = [], [], []
    for r in range(rounds):
        work = root / f"del-{r}"
        link_copy(base, work)
        with loaderx.open_table(str(work), readonly=False) as t:
            scan.append(
                timed(lambda t=t: loaderx.sql("SELECT record_id FROM t WHERE id % 100 = 0", t=t))
            )
            delete.append(timed(lambda t=t: t.delete("id % 100 = 0")))
            assert t.num_rows == rows - (rows + 99) // 100
        lwork = root / f"del-{r}.lance"
        link_copy(lbase, lwork)
        ds = lance.dataset(str(lwork))
        peer.append(timed(lambda ds=ds: ds.delete("id % 100 = 0")))
        shutil.rmtree(work)
        shutil.rmtree(lwork)
    out["delete_1pct"] = {
        "loaderx_delete_s": median(delete),
        "loaderx_scan_s": median(scan),
        "lance_delete_s": median(peer),
        "delete_over_scan": median(delete) / median(scan),
        "lance_over_loaderx": median(peer) / median(delete),
    }
    # Gathers with 10 % deleted against the compacted table.
    work = root / "del10"
    link_copy(base, work)
    with loaderx.open_table(str(work), readonly=False) as t:
        t.delete("id % 10 = 0")
    compacted = root / "del10-compacted"
    link_copy(work, compacted)
    with loaderx.open_table(str(compacted), readonly=False) as t:
        t.compact(min_deleted=0.0)
    lwork = root / "del10.lance"
    link_copy(lbase, lwork)
    lance.dataset(str(lwork)).delete("id % 10 = 0")
    lcomp = root / "del10-compacted.lance"
    link_copy(lwork, lcomp)
    lance.dataset(str(lcomp)).optimize.compact_files()
    n = rows - (rows + 9) // 10
    batches = 200
    deleted_g, compact_g, ldel_g, lcomp_g = [], [], [], []
    with loaderx.open_table(str(work)) as td, loaderx.open_table(str(compacted)) as tc:
        assert td.num_rows == tc.num_rows == n
        idx = np.arange(0, n, max(1, n // 1000))
        assert np.array_equal(td["image"][idx], tc["image"][idx])
        dl, cl = lance.dataset(str(lwork)), lance.dataset(str(lcomp))
        for r in range(rounds):
            deleted_g.append(gathers(lambda i: td["image"][i], n, batches, r))
            compact_g.append(gathers(lambda i: tc["image"][i], n, batches, r))
            ldel_g.append(gathers(lambda i: dl.take(i, columns=["image"]), n, batches, r))
            lcomp_g.append(gathers(lambda i: cl.take(i, columns=["image"]), n, batches, r))
    out["gather_10pct_deleted"] = {
        "loaderx_deleted_batch_s": median(deleted_g),
        "loaderx_compacted_batch_s": median(compact_g),
        "lance_deleted_batch_s": median(ldel_g),
        "lance_compacted_batch_s": median(lcomp_g),
        "deleted_speed_over_compacted": median(compact_g) / median(deleted_g),
        "lance_deleted_over_loaderx_deleted": median(ldel_g) / median(deleted_g),
    }


def bench_versions(pa, loaderx, root: Path, rounds: int, out: dict):
    from remote_servers import FaultProxy, start_s3

    s3 = start_s3()
    proxy = FaultProxy(s3.endpoint)
    try:
        opts = s3.options()
        target = f"s3://{s3.bucket}/evolve/versions"
        loaderx.ingest_sharded(
            pa.table({"id": np.arange(10_000)}), target, workers=1, shards=4, storage_options=opts
        ).close()
        # A cleaning history: 99 deletes of one row each.
        with loaderx.open_table(target, readonly=False, storage_options=opts) as t:
            for k in range(99):
                t.delete([k])
            assert t.version == 100
        popts = s3.options(endpoint=proxy.url)
        res = {}
        for name, version in (("latest", None), ("version_1", 1)):
            times, reqs = [], []
            for _ in range(max(rounds, 5)):
                proxy.reset_counts()
                times.append(
                    timed(
                        lambda v=version: loaderx.open_table(
                            target, version=v, storage_options=popts
                        ).close()
                    )
                )
                reqs.append(proxy.count())
            res[name] = {"open_s": median(times), "requests": int(median(reqs))}
        res["version_1_over_latest_time"] = res["version_1"]["open_s"] / res["latest"]["open_s"]
        res["version_1_over_latest_requests"] = (
            res["version_1"]["requests"] / res["latest"]["requests"]
        )
        out["open_version_of_100"] = res
    finally:
        proxy.stop()
        s3.server.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_evolve.py", description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default=",".join(WORKLOADS))
    p.add_argument("--out", type=Path)
    p.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    p.add_argument(
        "--s3",
        choices=("moto", "s3s"),
        default="moto",
        help="add_s3's server: moto (Python, in process) or s3s-fs (Rust, benches/_s3.py)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.rounds = 20_000, 1
    only = args.only.split(",")

    import lance
    import pyarrow as pa

    import loaderx

    root = Path(tempfile.mkdtemp(prefix="loaderx-evolve-"))
    out = {
        "rows": args.rows,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "date": datetime.date.today().isoformat(),
        "lance": lance.__version__,
    }
    try:
        table = make_table(pa, args.rows) if set(only) & {"add", "add_s3", "delete"} else None
        if "add" in only:
            bench_add(pa, lance, loaderx, table, root, args.rounds, out)
        if "add_s3" in only:
            bench_add_s3(pa, lance, loaderx, table, root, args.rounds, out, args.s3)
        if "delete" in only:
            bench_delete(pa, lance, loaderx, table, root, args.rounds, out)
        if "versions" in only:
            bench_versions(pa, loaderx, root, args.rounds, out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
