"""A fault campaign on evolving tables: concurrent evolvers SIGKILLed at
random instants, readers of old versions, cleanups, locally and in a local
S3-compatible server (moto); then every invariant checked.

    python scripts/evolve_faults.py --where local --seconds 60
    python scripts/evolve_faults.py --where s3 --seconds 60 --kill-every 1.5

Each evolver runs random operations on one table (append, add_columns,
drop_columns, delete, update, merge_insert, compact, save_view, drop_view,
split, tag, cleanup, copy_table) and journals each one's start and
outcome; the parent kills a random evolver every ``--kill-every`` seconds
(mid-operation or not) and starts another, while readers open every
version listed and check it. Every cell is a function of its row's ``id``
and its column's name, except ``v``, which an edit (``update`` of a range
of the evolver's own rows, or the matched part of a ``merge_insert`` that
also inserts new rows) sets to ``3 id + mark``, the mark naming the
evolver and the edit: a read checks every value it gets (``v`` is
``3 id`` or carries a mark of the evolver that owns the row). At the end,
with every process gone:

* the latest version holds exactly the rows the journals say it must:
  every committed append's (and merge_insert's inserted) rows, less every
  committed delete's range; an operation a kill interrupted counts all or
  nothing, never in part;
* each row's ``v`` is what the last committed edit of it set (replayed
  from its evolver's journal, in order), or, for the rows of an edit a
  kill interrupted, that edit's mark on all of them or on none;
* its columns, views and tags are those the journals say (splits save all
  their views or none);
* every version listed opens and reads correctly; copies read as their
  source;
* no operation failed but with ``CommitConflict`` (or a named, expected
  refusal listed below); no reader saw a wrong value;
* a cleanup (leftovers of any age, every lease treated as dead) leaves no
  shard or group no version names, no lease object or file, no local
  staging directory and, in S3, no open multipart upload.

Exit status 0 when nothing is found; otherwise every finding is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

BASE_ROWS = 2_000
# Worker g appends ids from g * SPAN up (generations never reuse a span).
SPAN = 1_000_000
# An edit's mark: gen * MARK + its operation number (1..MARK-1).
MARK = 100_000


def expected(op: str, error: str, message: str) -> bool:
    """Whether a failure is what the docs promise for a race lost, not a
    finding: ``CommitConflict`` (a concurrent commit, or a cleanup that
    removed the version a change was planned on); ``tag`` of the handle's
    version after a cleanup removed it (ValueError naming it, as
    documented); a copy whose version a concurrent cleanup removed under
    it (FileNotFoundError naming a file of a shard: "clean up what no run
    reads any more")."""
    if error == "CommitConflict":
        return True
    if (
        op in ("update", "merge_insert")
        and error == "ValueError"
        and "removed by a cleanup" in message
    ):
        return True
    if op == "tag" and error == "ValueError" and "removed by a cleanup" in message:
        return True
    return op == "copy_table" and error == "FileNotFoundError" and "/shard-" in message


def value(name: str, ids: np.ndarray) -> np.ndarray:
    """Every cell of column ``name`` at the rows ``ids``."""
    if name == "id":
        return ids
    if name == "v":
        return ids * 3
    n = int(name.split("_")[1])
    return ids * 7 + n


def table_ids_and_check(t, findings: list, what: str) -> np.ndarray:
    """The ``id`` column of the open table ``t``, each other column
    checked against its function of ``id``."""
    rows = np.arange(t.num_rows)
    ids = np.asarray(t["id"][rows]).astype(np.int64)
    if len(np.unique(ids)) != len(ids):
        findings.append(f"{what}: duplicate ids")
    for name in t:
        if name == "id":
            continue
        got = np.asarray(t[name][rows]).astype(np.int64).reshape(-1)
        if name == "v":
            # 3 id, or 3 id + a mark of the evolver that owns the row.
            mark = got - value("v", ids)
            owner = ids // SPAN
            edited = mark != 0
            bad = edited & ((mark // MARK != owner) | (mark % MARK == 0) | (owner == 0))
            if bad.any():
                findings.append(f"{what}: column v has wrong values")
        elif not np.array_equal(got, value(name, ids)):
            findings.append(f"{what}: column {name} has wrong values")
    return ids


# -- one evolver -------------------------------------------------------------


def evolver(path: str, opts: dict | None, gen: int, journal: str, seconds: float) -> None:
    import loaderx

    rng = random.Random(gen)
    n = 0
    next_id = gen * SPAN
    mine: list[tuple[int, int]] = []  # ranges this evolver appended (done)
    gone: set[int] = set()  # ids its committed deletes removed
    deadline = time.time() + seconds
    with open(journal, "a", buffering=1) as log:

        def note(kind: str, op: str, **args) -> None:
            log.write(json.dumps({"kind": kind, "op": op, "gen": gen, **args}) + "\n")
            log.flush()
            os.fsync(log.fileno())

        while time.time() < deadline:
            n += 1
            op = rng.choice(
                ["append"] * 4
                + ["add_columns"] * 2
                + ["drop_columns", "delete", "delete", "compact", "save_view", "drop_view"]
                + ["update", "update", "merge_insert"]
                + ["split", "tag", "cleanup", "copy_table"]
            )
            args: dict = {}
            try:
                t = loaderx.open_table(path, readonly=False, storage_options=opts)
            except Exception as e:  # noqa: BLE001
                note("fail", "open", error=type(e).__name__, message=str(e)[:300])
                continue
            try:
                cols = list(t)
                if op == "append":
                    m = rng.randint(1, 300)
                    ids = np.arange(next_id, next_id + m, dtype=np.int64)
                    next_id += m
                    args = {"lo": int(ids[0]), "hi": int(ids[-1]) + 1}
                    note("start", op, **args)
                    t.append({c: value(c, ids) for c in cols})
                    mine.append((args["lo"], args["hi"]))
                elif op == "add_columns":
                    name = f"c_{gen * 1000 + n}"
                    args = {"name": name}
                    ids = np.asarray(t["id"][np.arange(t.num_rows)]).astype(np.int64)
                    note("start", op, **args)
                    t.add_columns({name: value(name, ids)})
                elif op == "drop_columns":
                    added = [c for c in cols if c.startswith("c_")]
                    if not added:
                        continue
                    args = {"name": rng.choice(added)}
                    note("start", op, **args)
                    t.drop_columns([args["name"]])
                elif op == "delete":
                    if not mine:
                        continue
                    lo, hi = rng.choice(mine)
                    a = rng.randint(lo, hi - 1)
                    b = rng.randint(a + 1, hi)
                    args = {"lo": a, "hi": b}
                    note("start", op, **args)
                    t.delete(f"id >= {a} AND id < {b}")
                    gone |= set(range(a, b))
                elif op == "update":
                    if not mine or n >= MARK:
                        continue
                    lo, hi = rng.choice(mine)
                    a = rng.randint(lo, hi - 1)
                    b = rng.randint(a + 1, hi)
                    mark = gen * MARK + n
                    args = {"ulo": a, "uhi": b, "mark": mark}
                    note("start", op, **args)
                    t.update(
                        f"id >= {a} AND id < {b}",
                        lambda batch, mark=mark: {"v": value("v", batch["id"]) + mark},
                        read_columns=["id"],
                    )
                elif op == "merge_insert":
                    if n >= MARK:
                        continue
                    m = rng.randint(1, 50)
                    new = np.arange(next_id, next_id + m, dtype=np.int64)
                    next_id += m
                    old = np.zeros(0, np.int64)
                    a = b = 0
                    if mine:
                        lo, hi = rng.choice(mine)
                        a = rng.randint(lo, hi - 1)
                        b = rng.randint(a + 1, min(hi, a + 100))
                        old = np.array([i for i in range(a, b) if i not in gone], np.int64)
                    keys = np.concatenate([old, new])
                    mark = gen * MARK + n
                    args = {
                        "lo": int(new[0]),
                        "hi": int(new[-1]) + 1,
                        "ulo": a,
                        "uhi": b,
                        "mark": mark,
                    }
                    note("start", op, **args)
                    src = {c: value(c, keys) for c in cols}
                    src["v"] = value("v", keys) + mark
                    t.merge_insert(src, "id")
                    mine.append((args["lo"], args["hi"]))
                elif op == "compact":
                    note("start", op)
                    t.compact(min_deleted=rng.choice([0.0, 0.05, 0.5]))
                elif op == "save_view":
                    name = f"w_{gen}_{n}"
                    args = {"name": name, "version": t.version}
                    note("start", op, **args)
                    args["rows"] = t.save_view(name, "id % 5 = 0")
                elif op == "drop_view":
                    own = [v for v in t.views() if v.startswith(f"w_{gen}_")]
                    if not own:
                        continue
                    args = {"name": rng.choice(own)}
                    note("start", op, **args)
                    t.drop_view(args["name"])
                elif op == "split":
                    names = [f"s_{gen}_{n}_a", f"s_{gen}_{n}_b"]
                    args = {"names": names}
                    note("start", op, **args)
                    t.split({names[0]: 0.5, names[1]: 0.5}, seed=n)
                elif op == "tag":
                    name = f"t_{gen}_{n}"
                    args = {"name": name}
                    note("start", op, **args)
                    t.tag(name)
                elif op == "cleanup":
                    note("start", op)
                    import datetime

                    t.cleanup(older_than=datetime.timedelta(0), keep_last=rng.choice([2, 5]))
                elif op == "copy_table":
                    dst = f"{path}-copy-{gen}-{n}"
                    args = {"dst": dst, "version": t.version}
                    note("start", op, **args)
                    loaderx.copy_table(path, dst, storage_options=opts)
                note("done", op, **args)
            except Exception as e:  # noqa: BLE001
                note("fail", op, error=type(e).__name__, message=str(e)[:300], **args)
            finally:
                t.close()


# -- readers ---------------------------------------------------------------------


def reader(path: str, opts: dict | None, out: str, seconds: float) -> None:
    """Opens every listed version, again and again, and checks each; writes
    what it found (wrong values, unexpected errors) to ``out``."""
    import loaderx

    findings: list[str] = []
    errors: dict[str, int] = {}
    reads = 0
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with loaderx.open_table(path, storage_options=opts) as t:
                versions = [v["version"] for v in t.versions()]
            for v in random.sample(versions, min(3, len(versions))):
                with loaderx.open_table(path, storage_options=opts, version=v) as t:
                    table_ids_and_check(t, findings, f"reader, version {v}")
                reads += 1
        except Exception as e:  # noqa: BLE001
            # A version removed by a cleanup between the listing and the
            # open (or under the read) is a clean error; anything else,
            # and any panic, is a finding.
            key = type(e).__name__
            errors[key] = errors.get(key, 0) + 1
            if "panic" in key.lower() or "Panic" in str(e):
                findings.append(f"reader: {key}: {e}")
    with open(out, "w") as f:
        json.dump({"findings": findings, "errors": errors, "reads": reads}, f)


# -- the campaign -------------------------------------------------------------------


def child(fn: str, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--child", fn, json.dumps(args)],
        env=os.environ.copy(),
    )


def done_in(journal: str) -> int:
    """Operations the journal says committed so far."""
    try:
        with open(journal) as f:
            return sum(1 for line in f if line.endswith("\n") and '"kind": "done"' in line)
    except FileNotFoundError:
        return 0


def campaign(a) -> int:
    from remote_servers import start_s3

    import loaderx

    work = tempfile.mkdtemp(prefix="evolve-faults-")
    staging = os.path.join(work, "tmp")
    os.makedirs(staging)
    os.environ["TMPDIR"] = staging  # the evolvers' staging, ours to check
    server = None
    if a.where == "s3":
        server = start_s3()
        opts = server.options()
        path = f"s3://{server.bucket}/campaign-{os.getpid()}/t"
    else:
        opts = None
        path = os.path.join(work, "t")
    findings: list[str] = []
    try:
        ids = np.arange(BASE_ROWS, dtype=np.int64)
        import pyarrow as pa

        # v stored as records, so that updates of it are patches (new
        # values of the edited rows only) until a compaction makes it
        # columnar (whole groups then).
        loaderx.ingest_sharded(
            pa.table({"id": ids, "v": value("v", ids)}),
            path,
            workers=1,
            shards=4,
            storage_options=opts,
            layout={"v": "records"},
        ).close()
        journal = os.path.join(work, "journal.jsonl")
        rng = random.Random(a.seed)
        gen = 1
        live: dict[int, subprocess.Popen] = {}
        for _ in range(a.evolvers):
            live[gen] = child("evolver", path, opts, gen, journal, a.seconds + 60)
            gen += 1
        outs = [os.path.join(work, f"reader-{i}.json") for i in range(a.readers)]
        readers = [child("reader", path, opts, o, a.seconds) for o in outs]
        kills = 0
        end = time.time() + a.seconds
        # A loaded machine starts evolvers slowly: the campaign goes on
        # past its seconds (up to ten times them) until --min-done
        # operations have committed, so that it always tests commits.
        last = time.time() + 10 * a.seconds
        while time.time() < end or (done_in(journal) < a.min_done and time.time() < last):
            time.sleep(rng.uniform(0.2, 2 * a.kill_every))
            victim = rng.choice(sorted(live))
            live.pop(victim).send_signal(signal.SIGKILL)
            kills += 1
            live[gen] = child("evolver", path, opts, gen, journal, max(end, last) - time.time())
            gen += 1
        for p in live.values():
            p.send_signal(signal.SIGKILL)
        for p in [*live.values(), *readers]:
            p.wait()
        entries = [json.loads(line) for line in open(journal) if line.endswith("\n")]
        summary = check(path, opts, entries, findings)
        for o in outs:
            got = json.load(open(o))
            findings += got["findings"]
            summary.setdefault("reader errors", {}).update(got["errors"])
            summary["reads"] = summary.get("reads", 0) + got["reads"]
        check_leftovers(path, opts, server, staging, findings)
        summary.update(kills=kills, generations=gen - 1, where=a.where, seconds=a.seconds)
        print(json.dumps(summary, indent=1, sort_keys=True))
    finally:
        if server is not None:
            server.server.stop()
        shutil.rmtree(work, ignore_errors=True)
    for f in findings:
        print("FINDING:", f)
    print(f"{len(findings)} finding(s)")
    return 1 if findings else 0


def check(path: str, opts: dict | None, entries: list[dict], findings: list[str]) -> dict:
    import loaderx

    started: dict[tuple, dict] = {}
    outcome: dict[tuple, str] = {}
    counts: dict[str, dict[str, int]] = {}
    fails: dict[str, int] = {}
    for e in entries:
        key = (
            e["gen"],
            e["op"],
            json.dumps({k: e.get(k) for k in ("lo", "hi", "name", "names", "dst", "mark")}),
        )
        if e["kind"] == "start":
            started[key] = e
        else:
            outcome[key] = e["kind"]
            if e["kind"] == "fail":
                fails[e["error"]] = fails.get(e["error"], 0) + 1
                if not expected(e["op"], e["error"], e["message"]):
                    findings.append(f"{e['op']} failed: {e['error']}: {e['message']}")
        counts.setdefault(e["op"], {})
    for key, e in started.items():
        k = outcome.get(key, "killed")
        counts[e["op"]][k] = counts[e["op"]].get(k, 0) + 1
    done = [started[k] for k in started if outcome.get(k) == "done"]
    unsure = [started[k] for k in started if k not in outcome]

    def ranges(op, group):
        ops = ("append", "merge_insert") if op == "append" else (op,)
        return [(e["lo"], e["hi"]) for e in group if e["op"] in ops]

    with loaderx.open_table(path, storage_options=opts) as t:
        ids = table_ids_and_check(t, findings, "latest version")
        v_now = dict(zip(ids.tolist(), np.asarray(t["v"][np.arange(t.num_rows)]).tolist()))
        cols = set(t)
        views = set(t.views())
        tags = set(t.tags())
        versions = [v["version"] for v in t.versions()]
    have = set(ids.tolist())
    deleted_done = set()
    for lo, hi in ranges("delete", done):
        deleted_done |= set(range(lo, hi))
    deleted_maybe = set(deleted_done)
    for lo, hi in ranges("delete", unsure):
        deleted_maybe |= set(range(lo, hi))
    must = set(range(BASE_ROWS))
    for lo, hi in ranges("append", done):
        must |= set(range(lo, hi))
    may = set(must)
    for lo, hi in ranges("append", unsure):
        block = set(range(lo, hi)) - deleted_maybe
        got = block & have
        if got and got != block:
            findings.append(f"a killed append [{lo}, {hi}) is in the table in part")
        may |= set(range(lo, hi))
    for lo, hi in ranges("delete", unsure):
        block = set(range(lo, hi)) & must - deleted_done
        kept = block & have
        if kept and kept != block:
            findings.append(f"a killed delete [{lo}, {hi}) took effect in part")
    lost = (must - deleted_maybe) - have
    if lost:
        findings.append(f"{len(lost)} rows lost, e.g. {sorted(lost)[:5]}")
    extra = have - may
    if extra:
        findings.append(f"{len(extra)} rows no append wrote, e.g. {sorted(extra)[:5]}")
    back = have & deleted_done
    if back:
        findings.append(f"{len(back)} deleted rows still there, e.g. {sorted(back)[:5]}")
    # Edits, replayed per evolver in journal order: each row's v is the
    # last committed edit's, and a killed edit's mark is on all of its
    # rows or none (rows a later edit could not overwrite: it is the last).
    edits = []
    for e in entries:
        if e["kind"] == "start" and e["op"] in ("update", "merge_insert"):
            key = (
                e["gen"],
                e["op"],
                json.dumps({k: e.get(k) for k in ("lo", "hi", "name", "names", "dst", "mark")}),
            )
            edits.append((e, outcome.get(key, "killed")))
    want_v: dict[int, int] = {}
    for e, how in edits:
        if how != "done":
            continue
        for i in range(e["ulo"], e["uhi"]):
            want_v[i] = 3 * i + e["mark"]
        if e["op"] == "merge_insert":
            for i in range(e["lo"], e["hi"]):
                want_v[i] = 3 * i + e["mark"]
    killed_rows: dict[int, int] = {}
    for e, how in edits:
        if how == "killed":
            rows = set(range(e["ulo"], e["uhi"]))
            if e["op"] == "merge_insert":
                rows |= set(range(e["lo"], e["hi"]))
            present = [i for i in rows if i in v_now]
            marked = [i for i in present if v_now[i] == 3 * i + e["mark"]]
            if marked and len(marked) != len(present):
                findings.append(f"a killed {e['op']} (mark {e['mark']}) took effect in part")
            for i in marked:
                killed_rows[i] = e["mark"]
    wrong = [i for i, v in v_now.items() if i not in killed_rows and v != want_v.get(i, 3 * i)]
    if wrong:
        findings.append(f"{len(wrong)} rows with v no committed edit set, e.g. {sorted(wrong)[:5]}")
    # Columns: every committed add present unless a committed drop took it.
    for e in done:
        if e["op"] == "add_columns":
            dropped = any(
                d["op"] == "drop_columns" and d["name"] == e["name"] for d in done + unsure
            )
            if e["name"] not in cols and not dropped:
                findings.append(f"added column {e['name']} is missing")
        if e["op"] == "drop_columns" and e["name"] in cols:
            findings.append(f"dropped column {e['name']} is still there")
        if e["op"] == "save_view":
            gone = any(d["op"] == "drop_view" and d["name"] == e["name"] for d in done + unsure)
            if e["name"] not in views and not gone:
                findings.append(f"saved view {e['name']} is missing")
        if e["op"] == "tag" and e["name"] not in tags:
            findings.append(f"tag {e['name']} is missing")
    known = {e["name"] for e in done + unsure if e["op"] == "add_columns"}
    for c in cols - {"id", "v"} - known:
        findings.append(f"column {c} that no add_columns wrote")
    for e in done + unsure:
        if e["op"] == "split":
            present = [n in views for n in e["names"]]
            if any(present) and not all(present):
                findings.append(f"split {e['names']} saved in part: {present}")
            if e in done and not all(present):
                findings.append(f"split {e['names']} committed but missing")
    # Every view and version reads; copies read as their source.
    for name in views:
        with loaderx.open_table(path, storage_options=opts, view=name) as t:
            table_ids_and_check(t, findings, f"view {name}")
    for v in versions:
        with loaderx.open_table(path, storage_options=opts, version=v) as t:
            table_ids_and_check(t, findings, f"version {v}")
    copies = 0
    for e in done:
        if e["op"] == "copy_table":
            with loaderx.open_table(e["dst"], storage_options=opts) as t:
                table_ids_and_check(t, findings, f"copy {e['dst']}")
            copies += 1
    return {
        "operations": counts,
        "failures": fails,
        "rows": len(have),
        "columns": len(cols),
        "versions": len(versions),
        "views": len(views),
        "copies checked": copies,
    }


def check_leftovers(path, opts, server, staging, findings) -> None:
    """A cleanup that treats every leftover as old and every lease as dead
    (every writer is gone) leaves nothing that no version names."""
    import loaderx
    from loaderx import _native

    with loaderx.open_table(path, storage_options=opts) as t:
        before = table_ids_and_check(t, findings, "before the last cleanup")
    _native.table_cleanup(path, 0, 1_000_000, opts, _leftover_min_age_ms=0, _lease_ttl_ms=0)
    with loaderx.open_table(path, storage_options=opts) as t:
        after = table_ids_and_check(t, findings, "after the last cleanup")
    if not np.array_equal(before, after):
        findings.append("the last cleanup changed the rows")
    if server is not None:
        prefix = path.split(f"s3://{server.bucket}/", 1)[1] + "/"
        keys = [k[len(prefix) :] for k in server.keys(prefix)]

        def read(rel):
            return server.client().get_object(Bucket=server.bucket, Key=prefix + rel)["Body"].read()

        uploads = server.client().list_multipart_uploads(Bucket=server.bucket, Prefix=prefix)
        if uploads.get("Uploads"):
            findings.append(f"{len(uploads['Uploads'])} multipart uploads left open")
    else:
        keys = []
        for root, _, files in os.walk(path):
            for f in files:
                keys.append(os.path.relpath(os.path.join(root, f), path))

        def read(rel):
            with open(os.path.join(path, rel), "rb") as f:
                return f.read()

    # A killed commit's temporary files (".<name>.<pid>.<hex>") are no
    # versions; the last cleanup has removed them.
    def temporary(k):
        parts = k.split("/")
        return parts[-1].startswith(".") and (
            len(parts) == 1
            and parts[0].startswith((".manifest.json.", "._cleanup.json."))
            or len(parts) == 2
            and parts[0] in ("_versions", "_tags", "_views", "_view_sets")
        )

    findings += [f"leftover temporary file {k}" for k in keys if temporary(k)]
    keys = [k for k in keys if not temporary(k)]
    versions = [json.loads(read(k)) for k in keys if k.startswith("_versions/")]
    named, groups = set(), set()
    for m in versions:
        for s in m["shards"]:
            named.add(s["name"])
            for g in s.get("groups", []):
                groups.add((s["name"], g["dir"]))
    for k in keys:
        parts = k.split("/")
        if parts[0].startswith("shard-") and parts[0] not in named:
            findings.append(f"leftover shard {parts[0]}")
        elif parts[0].startswith("shard-") and parts[1].startswith("_g-"):
            if (parts[0], parts[1]) not in groups:
                findings.append(f"leftover group {parts[0]}/{parts[1]}")
        elif parts[0] == "_leases" and not parts[-1].startswith("."):
            findings.append(f"leftover lease {k}")
    left = [d for d in os.listdir(staging) if d.startswith("loaderx-")]
    if left:
        findings.append(f"{len(left)} staging directories left: {left[:3]}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--where", choices=["local", "s3"], default="local")
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--evolvers", type=int, default=4)
    p.add_argument("--readers", type=int, default=1)
    p.add_argument("--kill-every", type=float, default=1.0, help="mean seconds between kills")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--min-done",
        type=int,
        default=0,
        help="go on past --seconds (up to ten times) until this many operations committed",
    )
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        fn, args = a.child
        {"evolver": evolver, "reader": reader}[fn](*json.loads(args))
        return 0
    return campaign(a)


if __name__ == "__main__":
    sys.exit(main())
