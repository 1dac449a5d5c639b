"""Random rows of columnar columns at any table size: gathers read in place
(format version 3) equal a pyarrow model for every scalar and text type
with nulls, sorted, unsorted and repeated ids, across chunk and group
boundaries, after deletes and through views, with the budget of kept
chunks off, tiny and default, from two tables at once; a cold random read
asks the file for about its rows' own pages; the kept chunks stay within
their budget however large the table; tables written by the release
before this encoding (committed test data) open, read and convert."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import loaderx

pa = pytest.importorskip("pyarrow")

HERE = os.path.dirname(__file__)
V2 = os.path.join(HERE, "data", "columnar_v2_table")


def footer_version(path: str) -> int:
    """The format version byte of a column file's footer."""
    with open(path, "rb") as f:
        b = f.read()
    footer_len = int.from_bytes(b[-16:-12], "little")
    return b[len(b) - 16 - footer_len]


def column_files(root: str) -> list:
    return [os.path.join(d, "column.zc") for d, _, fs in os.walk(root) if "column.zc" in fs]


def run(code: str, budget: str | None) -> str:
    env = dict(os.environ)
    env.pop("LOADERX_COLUMN_CACHE", None)
    if budget is not None:
        env["LOADERX_COLUMN_CACHE"] = budget
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


#: What every case gathers and checks against the model, in a fresh
#: process (the budget is read once a process).
MODEL_CHECK = """
import sys, numpy as np, pyarrow as pa, loaderx
sys.path.insert(0, {here!r})
from test_columnar import batch
path, path2 = {path!r}, {path2!r}
model = pa.concat_tables([batch(0, 20000, 1), batch(20000, 45000, 2)]).combine_chunks()
deleted = np.array({deleted!r}, dtype=np.int64)
keep = np.setdiff1d(np.arange(model.num_rows), deleted)
model = model.take(pa.array(keep))
t, t2 = loaderx.open_table(path), loaderx.open_table(path2)
n = model.num_rows
rng = np.random.default_rng(5)
cases = [
    np.sort(rng.choice(n, 1024, replace=False)),      # sorted
    rng.integers(0, n, 700),                          # unsorted, repeats
    np.array([0, 63, 64, 65, 127, 128, n - 1, n - 1, 0]),  # group edges
    np.arange(8190, 8200),                            # chunk edges (int64)
    np.sort(rng.choice(n, 20, replace=False)),        # few
]
names = [c for c in model.column_names]
for idx in cases:
    for c in names:
        want = model.column(c).take(pa.array(idx)).combine_chunks()
        for table in (t, t2):
            got = table[c].to_arrow(idx)
            assert got.equals(want), (c, idx[:8], got[:5], want[:5])
        # NumPy gathers of numbers, lists of text.
        v = t[c][idx]
        if isinstance(v, np.ndarray) and want.null_count == 0:
            assert (v == want.to_numpy(zero_copy_only=False)).all(), c
# A view of rows (an ascending selection) reads as the model's rows.
v = loaderx.open_table(path, view="odd")
idx = np.sort(rng.choice(v.num_rows, 300, replace=False))
for c in names:
    want = model.column(c).take(pa.array(np.arange(1, n, 2)[idx])).combine_chunks()
    assert v[c].to_arrow(idx).equals(want), c
print(loaderx._native.columnar_kept_bytes())
"""


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """The same rows of every type (nulls, two shards, deleted rows) in two
    tables."""
    sys.path.insert(0, HERE)
    from test_columnar import batch

    root = tmp_path_factory.mktemp("random")
    deleted = [3, 64, 8191, 20000, 44999]
    paths = []
    for name in ("a", "b"):
        p = str(root / name)
        loaderx.ingest_sharded(batch(0, 20000, 1), p).close()
        with loaderx.open_table(p, readonly=False) as t:
            t.append(batch(20000, 45000, 2))
            t.delete(deleted)
        with loaderx.open_table(p, readonly=False) as t:
            t.save_view("odd", np.arange(1, t.num_rows, 2))
        paths.append(p)
    return paths, deleted


@pytest.mark.parametrize("budget", ["0", "200K", None])
def test_random_gathers_equal_the_model(tables, budget):
    """Off (every row read in place), tiny (read in place, or from the few
    chunks small enough to keep) and the default (chunks kept)."""
    (path, path2), deleted = tables
    for f in column_files(path):
        assert footer_version(f) == 3, f
    code = MODEL_CHECK.format(here=HERE, path=path, path2=path2, deleted=deleted)
    kept = int(run(code, budget).split()[-1])
    if budget == "0":
        assert kept == 0
    elif budget == "200K":
        # A sixteenth of it a shard: only chunks that small are kept.
        assert kept <= 200 << 10
    else:
        assert kept > 0


def index_ranges(path: str) -> list:
    """Each chunk's index (group starts and block checksums): its byte
    range in the column file, from the footer."""
    with open(path, "rb") as f:
        b = f.read()
    footer_len = int.from_bytes(b[-16:-12], "little")
    at = len(b) - 16 - footer_len
    n = int.from_bytes(b[at + 16 : at + 24], "little")
    out = []
    for i in range(n):
        e = b[at + 32 + 96 * i : at + 32 + 96 * (i + 1)]
        off = int.from_bytes(e[0:8], "little")
        validity, values, index = (int.from_bytes(e[k : k + 4], "little") for k in (20, 24, 28))
        start = off + validity + values
        out.append((start, start + index))
    return out


def test_a_cold_random_read_asks_for_its_rows_pages(tmp_path):
    """After the column file's pages are dropped (``POSIX_FADV_DONTNEED``),
    1,000 random captions of 3 M, with nothing kept, leave at most 8 KiB a
    row of the file's values resident (the mapping reads no ahead); the
    pages of the chunks' indexes (group starts, block checksums) are
    counted apart, at most about one a row."""
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("posix_fadvise is not available here")
    rng = np.random.default_rng(2)
    words = np.array(["harbor", "light", "boat", "sea", "the", "of", "a", "grey", "north"])
    n = 3_000_000
    caps = pa.array([" ".join(w) for w in words[rng.integers(0, len(words), (n, 6))]])
    path = str(tmp_path / "t")
    loaderx.ingest_sharded(pa.table({"caption": caps}), path, workers=1, shards=1).close()
    del caps
    (f,) = column_files(path)
    code = f"""
    import ctypes, mmap, os, numpy as np, loaderx
    fd = os.open({f!r}, os.O_RDONLY)
    size = os.fstat(fd).st_size
    t = loaderx.open_table({path!r})
    os.posix_fadvise(fd, 0, size, os.POSIX_FADV_DONTNEED)
    idx = np.sort(np.random.default_rng(9).choice({n}, 1000, replace=False))
    got = t["caption"][idx]
    libc = ctypes.CDLL(None, use_errno=True)
    m = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
    page = mmap.PAGESIZE
    vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
    base = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(m)))
    assert libc.mincore(base, ctypes.c_size_t(size), vec) == 0, ctypes.get_errno()
    print(page, len(got), " ".join(str(i) for i, v in enumerate(vec) if v & 1))
    """
    out = run(code, "0").split()
    page, count, resident = int(out[0]), int(out[1]), [int(x) for x in out[2:]]
    assert count == 1000
    index_pages = set()
    for a, z in index_ranges(f):
        index_pages.update(range(a // page, (z - 1) // page + 1))
    # The footer (and the symbol table before it) is read on open.
    size = os.path.getsize(f)
    tail = set(range((size - 65536) // page, size // page + 1))
    values = [p for p in resident if p not in index_pages and p not in tail]
    index = [p for p in resident if p in index_pages]
    assert len(values) * page / 1000 <= 8192, (len(values), len(index))
    assert len(index) <= 1100, len(index)


def test_kept_chunks_stay_within_the_budget(tmp_path):
    """Gathering at random from a table whose decoded columns are several
    times the budget keeps at most the budget, and the process's anonymous
    memory grows by at most the budget and 64 MiB."""
    n = 2_000_000
    rng = np.random.default_rng(3)
    path = str(tmp_path / "t")
    loaderx.ingest_sharded(
        pa.table(
            {
                "label": rng.integers(0, 1000, n),
                "score": rng.random(n, dtype=np.float32),
                "name": pa.array([f"row {i}" for i in range(n)]),
            }
        ),
        path,
        # Text files of about 2 MiB, each fitting half the budget (random
        # reads keep those), 30 MiB in all: several times the budget.
        shards=16,
    ).close()
    code = f"""
    import numpy as np, loaderx
    def anon():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    t = loaderx.open_table({path!r})
    rng = np.random.default_rng(4)
    before = anon()
    peak = 0
    for _ in range(200):
        idx = np.sort(rng.choice({n}, 1024, replace=False))
        for c in ("label", "score", "name"):
            t[c][idx]
        peak = max(peak, loaderx._native.columnar_kept_bytes())
    print(peak, anon() - before)
    """
    peak, grown = (int(x) for x in run(code, "8M").split()[-2:])
    assert 0 < peak <= 8 << 20
    assert grown <= (8 << 20) + (64 << 20), grown


def test_tables_of_the_release_before_read_and_convert(tmp_path):
    """Committed test data: a sharded table of columnar columns in format
    version 2 (zstd streams, two shards, deleted rows) reads as the rows it
    was written from, at random too, and ``compact`` rewrites it in version
    3 as one new version that reads the same."""
    sys.path.insert(0, HERE)
    from test_columnar import batch, same

    path = str(tmp_path / "t")
    shutil.copytree(V2, path)
    files = column_files(path)
    # That release wrote version 2 where a chunk is packed, else 1.
    versions = {footer_version(f) for f in files}
    assert versions == {1, 2}, versions
    model = pa.concat_tables([batch(0, 700, 1), batch(700, 1500, 2)]).combine_chunks()
    keep = np.setdiff1d(np.arange(model.num_rows), [3, 800])
    model = model.take(pa.array(keep))
    with loaderx.open_table(path) as t:
        before_version = t.version
        got = loaderx.arrow.table(t, index_column=None).read_all().select(model.column_names)
        assert same(got, model)
        idx = np.random.default_rng(1).integers(0, t.num_rows, 200)
        for c in model.column_names:
            assert t[c].to_arrow(idx).equals(model.column(c).take(pa.array(idx)).combine_chunks())
    with loaderx.open_table(path, readonly=False) as t:
        assert t.compact(min_deleted=1.0) == before_version + 1
        assert t.compact(min_deleted=1.0) is None  # nothing left to do
    with loaderx.open_table(path) as t:
        got = loaderx.arrow.table(t, index_column=None).read_all().select(model.column_names)
        assert same(got, model)
    with loaderx.open_table(path, version=before_version) as old:
        assert same(
            loaderx.arrow.table(old, index_column=None).read_all().select(model.column_names),
            model,
        )
    # The manifest now says version 3 (releases before refuse the table
    # rather than misread its files); the committed one said 2.
    with open(os.path.join(V2, "manifest.json")) as f:
        assert json.load(f)["version"] == 2
    with open(os.path.join(path, "manifest.json")) as f:
        assert json.load(f)["version"] == 3
    # Once the old version's files are cleaned up, every column file left
    # is version 3, and the table reads the same.
    import datetime

    with loaderx.open_table(path, readonly=False) as t:
        t.cleanup(older_than=datetime.timedelta(0))
    files = column_files(path)
    assert files and all(footer_version(f) == 3 for f in files), files
    with loaderx.open_table(path) as t:
        got = loaderx.arrow.table(t, index_column=None).read_all().select(model.column_names)
        assert same(got, model)


def test_a_forked_child_gathers_with_its_own_budget(tmp_path):
    """A child forked while the parent keeps chunks (and while another
    thread of the parent gathers) makes its own budget and reads the same
    rows; the parent's kept chunks are untouched."""
    import multiprocessing as mp
    import threading

    n = 300_000
    path = str(tmp_path / "t")
    loaderx.ingest_sharded(
        pa.table({"x": np.arange(n) * 3, "s": pa.array([f"v{i}" for i in range(n)])}), path
    ).close()
    t = loaderx.open_table(path)
    rng = np.random.default_rng(6)
    idx = np.sort(rng.choice(n, 2000, replace=False))
    assert (t["x"][idx] == idx * 3).all()
    # Text chunks are kept for random reads (numbers are read in place).
    assert t["s"][idx] == [f"v{i}" for i in idx]
    kept = loaderx._native.columnar_kept_bytes()
    assert kept > 0
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            t["s"][rng.integers(0, n, 64)]

    th = threading.Thread(target=busy)
    th.start()
    try:
        ctx = mp.get_context("fork")
        with ctx.Pool(2) as pool:
            got = pool.starmap(_child_gather, [(path, idx, n)] * 4)
    finally:
        stop.set()
        th.join()
    assert all(got)
    assert loaderx._native.columnar_kept_bytes() >= kept
    assert (t["x"][idx] == idx * 3).all()


def _child_gather(path, idx, n):
    t = loaderx.open_table(path)
    ok = (t["x"][idx] == idx * 3).all() and t["s"][idx[:5]] == [f"v{i}" for i in idx[:5]]
    return bool(ok) and loaderx._native.columnar_kept_bytes() > 0
