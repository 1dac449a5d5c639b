"""Remote tables against their peers, all against one S3-compatible server
(s3s-fs, Rust) on 127.0.0.1 behind a latency proxy, in one run.

For each added latency (0 ms, then 20 ms: a realistic S3 first-byte time):

* the server's own ceiling through the proxy: plain concurrent ranged GETs
  (curl, 64 in flight) of the size loaderx's requests have;
* a random batch gather (256 records) of dense-vision (uint8 (3, 224, 224),
  147 KiB) and ragged-vision: loaderx against Lance's ``take`` of the same
  indices (pylance, same endpoint) and pyarrow's ``Dataset.take`` over the
  same rows exported to Parquet (``pyarrow.fs.S3FileSystem``), with
  requests per batch and bytes fetched per byte returned (the proxy counts);
  the bound the in-flight limit allows (64 × bytes per request ÷ latency,
  or the ceiling, whichever is lower);
* the DataLoader over the remote table (it overlaps the gathers of the steps
  it prefetches) against the ceiling, and against the same loader over a
  local copy.

At 20 ms also small records (dense-tokens, int32[512]) with
``mode="blocked"`` and a block cache: the first cycle against downloading
the whole object (what Mosaic streaming and LitData do), later cycles
against a local store; and Ray Data's ``read_table`` from the bucket
against ``read_parquet`` of the exported file from the same bucket.

    python benches/bench_remote.py [--quick] [--records N] [--out DIR]
        [--only gather,loader,blocked,ray] [--server-cpus 0,1]

``--server-cpus`` runs the server and the proxy on those CPUs and the
benchmark (loaderx, its peers and curl) on the others, so that the client
does not share cores with the server (on a small machine, the only way to
see what a gather does against a server that is not the bottleneck).

Every batch is checked against the local data. Needs s3s-fs (see _s3.py),
curl, pylance, pyarrow and (for the Ray row) ray.
"""

# ruff: noqa: E501 - the report rows are long f-strings
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _s3  # noqa: E402

import loaderx  # noqa: E402
from loaderx import _native  # noqa: E402

import _workloads as wl  # noqa: E402
from _machine import describe_machine  # noqa: E402
from _report import log  # noqa: E402

INFLIGHT = 64
LABELS = {"loaderx": "loaderx (zstd)", "loaderx-raw": "loaderx (raw)"}
EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def ceiling(srv, key: str, size: int, request_bytes: int, n: int) -> dict:
    """Plain concurrent ranged GETs of ``request_bytes`` through the proxy."""
    cfg = tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False)
    rng = np.random.default_rng(0)
    for i in range(n):
        at = int(rng.integers(0, max(1, size - request_bytes)))
        if i:
            cfg.write("next\n")
        cfg.write(
            f'url = "{srv.endpoint}/{srv.bucket}/{key}"\nrange = "{at}-{at + request_bytes - 1}"\n'
            f'output = "/dev/null"\naws-sigv4 = "aws:amz:us-east-1:s3"\n'
            f'user = "{_s3.KEY}:{_s3.SECRET}"\nheader = "x-amz-content-sha256: {EMPTY_SHA}"\n'
            'write-out = "%{http_code}\\n"\nsilent\n'
        )
    cfg.close()
    t0 = time.perf_counter()
    r = subprocess.run(
        ["curl", "--parallel", "--parallel-max", str(INFLIGHT), "-s", "-K", cfg.name],
        capture_output=True,
        text=True,
    )
    dt = time.perf_counter() - t0
    os.unlink(cfg.name)
    codes = r.stdout.split()
    assert len(codes) == n and set(codes) == {"206"}, (codes[:5], r.stderr[:300])
    return {
        "requests_s": n / dt,
        "gib_s": n * request_bytes / dt / 2**30,
        "request_bytes": request_bytes,
    }


def timed(fn, rounds: int):
    best = float("inf")
    out = None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def build(tmp: str, records: int, tokens: int) -> dict:
    """Local tables of every workload and their arrays: the vision ones
    with zstd (as Lance and Parquet compress too) and raw (``-raw``), the
    tokens raw."""
    out = {}
    dv = wl.dense_vision(records, 1)
    rv = wl.ragged_vision(records, 2)
    for codec in ("zstd", "raw"):
        suffix = "" if codec == "zstd" else "-raw"
        path = os.path.join(tmp, f"dv{suffix}")
        with loaderx.DenseStore.create(
            os.path.join(path, "image"), np.uint8, wl.IMAGE_SHAPE, codec=codec
        ) as s:
            s.append(dv)
        out[f"dense-vision{suffix}"] = (path, dv)
        path = os.path.join(tmp, f"rv{suffix}")
        with loaderx.RaggedStore.create(os.path.join(path, "image"), np.uint8, codec=codec) as s:
            s.append(rv)
        out[f"ragged-vision{suffix}"] = (path, rv)
    dt = wl.dense_tokens(tokens, 3)
    path = os.path.join(tmp, "dt")
    with loaderx.DenseStore.create(
        os.path.join(path, "tokens"), np.int32, dt.shape[1:], codec="raw"
    ) as s:
        s.append(dt)
    out["dense-tokens"] = (path, dt)
    return out


def lance_dataset(srv, name: str, records) -> object:
    import lance
    import pyarrow as pa

    blobs = pa.array([np.ascontiguousarray(r).tobytes() for r in records], pa.large_binary())
    uri = f"s3://{srv.bucket}/lance/{name}"
    opts = {**srv.options(), "allow_http": "true"}
    lance.write_dataset(pa.table({"image": blobs}), uri, storage_options=opts)
    return lance.dataset(uri, storage_options=opts)


def arrow_fs(srv):
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(
        access_key=_s3.KEY,
        secret_key=_s3.SECRET,
        region=_s3.REGION,
        scheme="http",
        endpoint_override=srv.endpoint.removeprefix("http://"),
    )


def gather_rows(srv, data, opts, plans, rounds, latency, results):
    import pyarrow.dataset as pads

    for name in ("dense-vision", "ragged-vision"):
        local, arrays = data[name]
        dense = name.startswith("dense")
        want = [np.ascontiguousarray(arrays[i]).tobytes() for i in plans[0]]
        row = results.setdefault(f"{name} @ {latency} ms", {})
        with loaderx.open_table(f"s3://{srv.bucket}/{name}-raw", storage_options=opts) as t:
            secs, got = timed(lambda t=t: t["image"][plans[0]], rounds)
            got = [np.ascontiguousarray(g).tobytes() for g in got]
            assert got == want, f"{name}: loaderx raw batch differs"
            nbytes = sum(len(w) for w in want)
            row["loaderx-raw"] = {
                "seconds": secs,
                "records_s": len(plans[0]) / secs,
                "gib_s": nbytes / secs / 2**30,
            }
        uri = f"s3://{srv.bucket}/{name}"
        with loaderx.open_table(uri, storage_options=opts) as t:
            col = t["image"]
            before = srv.stats()
            b0 = _native.remote_stats()
            secs, got = timed(lambda col=col: col[plans[0]], rounds)
            after = srv.stats()
            b1 = _native.remote_stats()
            got = [np.ascontiguousarray(g).tobytes() for g in (got if not dense else list(got))]
            assert got == want, f"{name}: loaderx batch differs"
            nbytes = sum(len(w) for w in want)
            reqs = (after["requests"] - before["requests"]) / rounds
            fetched = (b1["bytes"] - b0["bytes"]) / rounds
            row["loaderx"] = {
                "seconds": secs,
                "records_s": len(plans[0]) / secs,
                "gib_s": nbytes / secs / 2**30,
                "requests_per_batch": reqs,
                "fetched_per_returned": fetched / nbytes,
                "fetched_gib_s": fetched / secs / 2**30,
                "bytes_per_request": fetched / max(reqs, 1),
            }
        ds = lance_dataset_cache[name]
        secs, tbl = timed(lambda ds=ds: ds.take(plans[0].tolist(), columns=["image"]), rounds)
        assert [b.as_py() for b in tbl.column("image")] == want, f"{name}: lance batch differs"
        row["lance"] = {
            "seconds": secs,
            "records_s": len(plans[0]) / secs,
            "gib_s": nbytes / secs / 2**30,
        }
        pds = pads.dataset(
            f"{srv.bucket}/parquet/{name}.parquet", filesystem=arrow_fs(srv), format="parquet"
        )
        secs, tbl = timed(lambda pds=pds: pds.take(plans[0], columns=["image"]), rounds)
        assert tbl.num_rows == len(plans[0])
        row["pyarrow-parquet"] = {
            "seconds": secs,
            "records_s": len(plans[0]) / secs,
            "gib_s": nbytes / secs / 2**30,
        }
        per_req = row["loaderx"]["bytes_per_request"]
        size = os.path.getsize(os.path.join(local, "image", "data.zr"))
        ceil = ceiling(
            srv, f"{name}/image/data.zr", size, max(1, int(per_req)), 256 if latency else 512
        )
        row["ceiling"] = ceil
        bound = ceil["gib_s"]
        if latency:
            bound = min(bound, INFLIGHT * per_req / (latency / 1000) / 2**30)
        row["bound_gib_s"] = bound
        log(
            f"{name} @ {latency} ms: {json.dumps({k: v for k, v in row.items()}, default=str)[:300]}"
        )


lance_dataset_cache: dict = {}


def loader_row(srv, data, opts, latency, batches, results):
    from loaderx.dataloader import DataLoader

    local, arrays = data["dense-vision"]
    uri = f"s3://{srv.bucket}/dense-vision"
    nbytes = 256 * arrays[0].nbytes
    out = results.setdefault(f"DataLoader dense-vision @ {latency} ms", {})
    for label, where, kw in (("remote", uri, {"storage_options": opts}), ("local", local, {})):
        with loaderx.open_table(where, **kw) as t:
            with DataLoader(t, batch_size=256, mode="iid", seed=5, prefetch=6, workers=0) as loader:
                first = next(loader)
                assert np.array_equal(first["image"][0], arrays[loader_indices(t.num_rows)[0]])
                b0 = _native.remote_stats()["bytes"]
                t0 = time.perf_counter()
                for _ in range(batches):
                    next(loader)
                dt = time.perf_counter() - t0
                fetched = _native.remote_stats()["bytes"] - b0
        out[label] = {
            "batches_s": batches / dt,
            "gib_s": batches * nbytes / dt / 2**30,
            "fetched_gib_s": fetched / dt / 2**30,
        }
    log(f"loader @ {latency} ms: {out}")


def loader_indices(n: int) -> np.ndarray:
    return loaderx.zsampler.Sampler(n, 256, "iid", seed=5).at(0)


def blocked_cache_row(srv, data, opts, tmp, results):
    """dense-tokens with mode='blocked' and a cache: first cycle against a
    whole-object download, later cycles against the local store."""
    from loaderx.zsampler import Sampler

    local, arrays = data["dense-tokens"]
    n = len(arrays)
    block = max(1, (4 << 20) // arrays[0].nbytes)
    sampler = Sampler(n, 256, "blocked", seed=3, block_size=block)
    steps = n // 256  # a cycle: every record once (the remainder dropped)
    cache = os.path.join(tmp, "cache")
    out = results.setdefault("dense-tokens blocked + cache @ 20 ms", {})
    uri = f"s3://{srv.bucket}/dense-tokens"
    with loaderx.open_table(uri, storage_options=opts, cache_dir=cache, cache_bytes=1 << 30) as t:
        col = t["tokens"]
        t0 = time.perf_counter()
        for k in range(steps):
            col[sampler.at(k)]
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        for k in range(steps, 2 * steps):
            col[sampler.at(k)]
        later = time.perf_counter() - t0
    with loaderx.open_table(local) as t:
        col = t["tokens"]
        t0 = time.perf_counter()
        for k in range(steps, 2 * steps):
            col[sampler.at(k)]
        local_s = time.perf_counter() - t0
    # The whole object in one GET, then the same cycle read locally.
    size = os.path.getsize(os.path.join(local, "tokens", "data.zr"))
    t0 = time.perf_counter()
    ceiling(srv, "dense-tokens/tokens/data.zr", size + 1, size, 1)
    download = time.perf_counter() - t0 + local_s
    out.update(
        {
            "cycle_batches": steps,
            "first_cycle_s": first,
            "whole_download_then_local_s": download,
            "later_cycle_s": later,
            "local_cycle_s": local_s,
        }
    )
    log(f"blocked+cache: {out}")


def ray_row(srv, data, opts, results):
    try:
        import ray
    except ImportError:
        return
    import loaderx.ray as lray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        uri = f"s3://{srv.bucket}/dense-vision"
        out = results.setdefault("Ray dense-vision @ 20 ms", {})
        for label, make in (
            ("loaderx.ray.read_table", lambda: lray.read_table(uri, storage_options=opts)),
            (
                "ray.data.read_parquet",
                lambda: ray.data.read_parquet(
                    f"{srv.bucket}/parquet/dense-vision.parquet", filesystem=arrow_fs(srv)
                ),
            ),
        ):
            t0 = time.perf_counter()
            rows = sum(
                len(b["image"]) for b in make().iter_batches(batch_size=None, batch_format="numpy")
            )
            dt = time.perf_counter() - t0
            out[label] = {"rows_s": rows / dt, "seconds": dt}
        log(f"ray: {out}")
    finally:
        ray.shutdown()


def table(results: dict) -> str:
    lines = [
        "| workload | reader | records/s | GiB/s | requests/batch | fetched/returned | vs |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for wkey, row in results.items():
        if "loaderx" not in row:
            continue
        lx = row["loaderx"]
        for reader in ("loaderx", "loaderx-raw", "lance", "pyarrow-parquet"):
            r = row[reader]
            vs = ""
            if reader == "loaderx":
                vs = (
                    f"{lx['gib_s'] / row['lance']['gib_s']:.2f}× Lance, "
                    f"fetches {lx['fetched_gib_s']:.3f} GiB/s = "
                    f"{lx['fetched_gib_s'] / row['bound_gib_s']:.2f}× bound ({row['bound_gib_s']:.2f} GiB/s; "
                    f"ceiling {row['ceiling']['gib_s']:.2f})"
                )
            lines.append(
                f"| {wkey} | {LABELS.get(reader, reader)} | {r['records_s']:,.0f} | {r['gib_s']:.3f} | "
                + (
                    f"{lx['requests_per_batch']:.1f} | {lx['fetched_per_returned']:.2f} | "
                    if reader == "loaderx"
                    else " | | "
                )
                + f"{vs} |"
            )
    for wkey, row in results.items():
        if "remote" in row:
            # The ceiling comes from the gather row (absent with --only loader).
            ceil = results.get(wkey.replace("DataLoader ", ""), {}).get("ceiling", {}).get("gib_s")
            vs_ceiling = f" = {row['remote']['fetched_gib_s'] / ceil:.2f}× ceiling" if ceil else ""
            lines.append(
                f"| {wkey} | DataLoader remote | {row['remote']['batches_s']:.1f} batches/s | "
                f"{row['remote']['gib_s']:.3f} | | | fetches {row['remote']['fetched_gib_s']:.3f} GiB/s{vs_ceiling}, "
                f"{row['remote']['batches_s'] / row['local']['batches_s']:.2f}× local ({row['local']['batches_s']:.1f}/s) |"
            )
        if "first_cycle_s" in row:
            lines.append(
                f"| {wkey} | first cycle ({row['cycle_batches']} batches) | | | | | "
                f"{row['whole_download_then_local_s'] / row['first_cycle_s']:.2f}× a whole download + local read |"
            )
            lines.append(
                f"| {wkey} | later cycle | | | | | {row['local_cycle_s'] / row['later_cycle_s']:.2f}× local |"
            )
        if "ray.data.read_parquet" in row:
            a, b = row["loaderx.ray.read_table"], row["ray.data.read_parquet"]
            lines.append(
                f"| {wkey} | loaderx.ray.read_table | {a['rows_s']:,.0f} rows/s | | | | "
                f"{a['rows_s'] / b['rows_s']:.2f}× read_parquet ({b['rows_s']:,.0f}) |"
            )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=65536)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    p.add_argument(
        "--only",
        default="gather,loader,blocked,ray",
        help="comma-separated rows to run: gather, loader, blocked, ray",
    )
    p.add_argument(
        "--server-cpus",
        default="",
        help="comma-separated CPUs for the server and the proxy (the rest run the client)",
    )
    args = p.parse_args()
    only = set(args.only.split(","))
    unknown = only - {"gather", "loader", "blocked", "ray"}
    if unknown:
        p.error(f"--only: unknown rows {sorted(unknown)}")
    server_cpus = {int(c) for c in args.server_cpus.split(",") if c.strip()}
    client_cpus = os.sched_getaffinity(0) - server_cpus
    if server_cpus and not client_cpus:
        p.error(f"--server-cpus {args.server_cpus} leaves no CPU for the client")
    if args.quick:
        args.records, args.tokens, args.rounds = 300, 8192, 1
    tmp = tempfile.mkdtemp(prefix="loaderx-bench-remote-")
    srv = _s3.start(cpus=server_cpus or None)
    if server_cpus:
        os.sched_setaffinity(0, client_cpus)
        log(f"server on CPUs {sorted(server_cpus)}, client on {sorted(client_cpus)}")
    results: dict = {}
    try:
        data = build(tmp, args.records, args.tokens)
        direct = {**srv.options(), "aws_endpoint": srv.direct}
        for name, (path, arrays) in data.items():
            loaderx.copy_table(path, f"s3://{srv.bucket}/{name}", storage_options=direct)
            if name in ("dense-vision", "ragged-vision") and "gather" in only:
                with loaderx.open_table(path) as t:
                    loaderx.parquet.export(
                        t, f"s3://{srv.bucket}/parquet/{name}.parquet", storage_options=direct
                    )
                lance_dataset_cache[name] = lance_dataset(srv, name, arrays)
        log("data uploaded")
        opts = srv.options()
        plans = wl.index_plan(args.records, 256, 2, seed=11)
        for latency in (0, 20):
            srv.set_latency(latency)
            if "gather" in only:
                gather_rows(srv, data, opts, plans, args.rounds, latency, results)
            if "loader" in only:
                loader_row(srv, data, opts, latency, 8 if args.quick else 24, results)
        srv.set_latency(20)
        if "blocked" in only:
            blocked_cache_row(srv, data, opts, tmp, results)
        if "ray" in only:
            ray_row(srv, data, opts, results)
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    machine = describe_machine(Path(tempfile.gettempdir()))
    print(table(results))
    os.makedirs(args.out, exist_ok=True)
    out = Path(args.out) / f"remote-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {"machine": machine, "results": results, "args": vars(args)}, indent=1, default=str
        )
    )
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
