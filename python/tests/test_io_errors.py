"""I/O errors keep their class: ``OSError`` with its errno (and the file)
through appends, syncs, Arrow/Parquet/IPC export and import, SQL scans and
the command line, never ``ValueError``.

A full disk is a 256 KiB tmpfs (ENOSPC) where this process may mount one
(root), and always also a 256 KiB file size limit (RLIMIT_FSIZE with SIGXFSZ
ignored, so writes past it fail with EFBIG). The tmpfs variants are skipped,
with the reason, where mounting is refused; the rlimit ones run everywhere.
"""

import contextlib
import errno
import os
import resource
import signal
import subprocess
import sys

import numpy as np
import pytest

import loaderx
import loaderx.arrow as lxa
import loaderx.parquet as lpq
from loaderx import cli
from loaderx.zrecord import Corrupted, DenseStore, RaggedStore

pa = pytest.importorskip("pyarrow")
ipc = pytest.importorskip("pyarrow.ipc")

#: Size of the small filesystem, or the file size limit.
LIMIT = 256 << 10


class SmallFS:
    """A directory where writes beyond LIMIT bytes fail with ``errno``."""

    def __init__(self, path, how):
        self.path = path
        self.how = how
        self.errno = errno.ENOSPC if how == "tmpfs" else errno.EFBIG

    @staticmethod
    def _set_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        soft = LIMIT if hard == resource.RLIM_INFINITY else min(LIMIT, hard)
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    @contextlib.contextmanager
    def limited(self):
        """Runs the block with the writes limited (the rlimit variant)."""
        if self.how == "tmpfs":
            yield
            return
        old_handler = signal.getsignal(signal.SIGXFSZ)
        old = resource.getrlimit(resource.RLIMIT_FSIZE)
        self._set_limit()
        try:
            yield
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, old)
            signal.signal(signal.SIGXFSZ, old_handler)

    def run(self, *args):
        """Runs a command (the CLI) with the writes limited."""
        return subprocess.run(
            list(map(str, args)),
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=self._set_limit if self.how == "rlimit" else None,
        )


@pytest.fixture(params=["tmpfs", "rlimit"])
def small_fs(request, tmp_path):
    path = tmp_path / "small"
    path.mkdir()
    if request.param == "rlimit":
        yield SmallFS(path, "rlimit")
        return
    try:
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={LIMIT}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        refused = (
            r.returncode != 0 and (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[0]
        )
    except OSError as exc:
        refused = str(exc)
    if refused:
        pytest.skip(f"cannot mount a tmpfs here ({refused}); the rlimit variant gives EFBIG")
    try:
        yield SmallFS(path, "tmpfs")
    finally:
        # Lazy: a handle a failed test left open must not keep it mounted.
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def streams(tmp_path):
    """1 MiB of incompressible records (four times LIMIT), opened."""
    rng = np.random.default_rng(0)
    src = tmp_path / "src"
    with DenseStore.create(src / "image", np.uint8, (32, 32), codec="raw") as s:
        s.append(rng.integers(0, 256, (1024, 32, 32), dtype=np.uint8))
    with DenseStore.create(src / "label", np.int64, ()) as s:
        s.append(np.arange(1024))
    opened = {"image": DenseStore.open(src / "image"), "label": DenseStore.open(src / "label")}
    yield opened
    for s in opened.values():
        s.close()


def assert_os_error(exc, expected_errno, in_dir=None, filename=None):
    assert isinstance(exc, OSError) and not isinstance(exc, ValueError), repr(exc)
    assert exc.errno == expected_errno, repr(exc)
    assert os.strerror(expected_errno) in str(exc)
    if filename is not None:
        assert exc.filename == str(filename)
    if in_dir is not None:
        assert exc.filename and exc.filename.startswith(str(in_dir)), repr(exc)
    assert os.path.basename(exc.filename) in str(exc), "the message names the file"


def test_parquet_export_to_a_full_disk_is_an_os_error(small_fs, streams):
    out = small_fs.path / "out.parquet"
    with small_fs.limited(), pytest.raises(OSError) as info:
        lpq.export(streams, out, index_column="record_id")
    assert_os_error(info.value, small_fs.errno, filename=out)
    assert os.listdir(small_fs.path) == [], "neither the file nor its partial is left"


def test_arrow_ingest_onto_a_full_disk_is_an_os_error(small_fs, streams):
    table = pa.table(lxa.table(streams))
    root = small_fs.path / "ingested"
    with small_fs.limited(), pytest.raises(OSError) as info:
        lxa.ingest(table, root)
    assert_os_error(info.value, small_fs.errno, in_dir=root)
    assert not root.exists()


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "arrows"])
def test_parquet_and_ipc_import_onto_a_full_disk_is_an_os_error(small_fs, streams, tmp_path, fmt):
    src = tmp_path / f"t.{fmt}"
    if fmt == "parquet":
        lpq.export(streams, src)
    else:
        table = pa.table(lxa.table(streams, index_column=None))
        new = ipc.new_file if fmt == "arrow" else ipc.new_stream
        with new(src, table.schema) as w:
            w.write_table(table, max_chunksize=256)
    root = small_fs.path / "back"
    with small_fs.limited(), pytest.raises(OSError) as info:
        lpq.ingest(src, root)
    assert_os_error(info.value, small_fs.errno, in_dir=root)
    assert not root.exists()


def test_import_of_what_is_not_a_readable_file_is_an_os_error(tmp_path):
    with pytest.raises(IsADirectoryError) as info:
        lpq.ingest(tmp_path, tmp_path / "out")
    assert_os_error(info.value, errno.EISDIR, filename=tmp_path)
    with pytest.raises(FileNotFoundError) as info:
        lpq.ingest(tmp_path / "missing.parquet", tmp_path / "out")
    assert info.value.errno == errno.ENOENT
    assert info.value.filename == str(tmp_path / "missing.parquet")
    assert not (tmp_path / "out").exists()


def test_dense_append_onto_a_full_disk_is_an_os_error(small_fs):
    rng = np.random.default_rng(0)
    path = small_fs.path / "d"
    with small_fs.limited():
        ds = DenseStore.create(path, np.uint8, (32, 32), codec="raw")
        with pytest.raises(OSError) as info:
            ds.append(rng.integers(0, 256, (1024, 32, 32), dtype=np.uint8))
        with contextlib.suppress(OSError):
            ds.close()
    assert_os_error(info.value, small_fs.errno, filename=path / "data.zr")


def test_ragged_write_error_surfaces_at_sync_as_an_os_error(small_fs):
    rng = np.random.default_rng(0)
    path = small_fs.path / "r"
    records = [rng.integers(0, 256, 4096, dtype=np.uint8) for _ in range(256)]
    with small_fs.limited():
        rs = RaggedStore.create(path, np.uint8, codec="raw")
        rs.append(records)  # queued: the write error comes at the next drain
        with pytest.raises(OSError) as info:
            rs.sync()
        with contextlib.suppress(OSError):
            rs.close()
    assert_os_error(info.value, small_fs.errno, in_dir=path)


def test_sync_of_a_record_table_too_big_for_the_disk_is_an_os_error(small_fs):
    # 20 KB of data, but a 320 KB table of record locations in meta.zr.
    path = small_fs.path / "s"
    with small_fs.limited():
        ds = DenseStore.create(path, np.uint8, ())
        with pytest.raises(OSError) as info:
            ds.append(np.zeros(20_000, np.uint8))
            ds.sync()
        with contextlib.suppress(OSError):
            ds.close()
    assert_os_error(info.value, small_fs.errno, in_dir=path)


def test_cli_export_and_import_onto_a_full_disk_print_one_line(small_fs, streams, tmp_path):
    table = tmp_path / "src"
    for s in streams.values():
        s.close()
    out = small_fs.path / "out.parquet"
    r = small_fs.run(sys.executable, "-m", "loaderx", "export", "--out", out, "--table", table)
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("loaderx export: error: ")
    assert f"[Errno {small_fs.errno}]" in r.stderr and "out.parquet" in r.stderr
    assert not out.exists()

    src = tmp_path / "t.parquet"
    assert cli.main(["export", "--out", str(src), "--table", str(table)]) == 0
    r = small_fs.run(sys.executable, "-m", "loaderx", "import", src, small_fs.path / "back")
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("loaderx import: error: ")
    assert f"[Errno {small_fs.errno}]" in r.stderr and "back" in r.stderr


@pytest.fixture
def corrupted(tmp_path):
    """A zstd store whose data.zr holds zeros: every read fails."""
    path = tmp_path / "img"
    with DenseStore.create(path, np.uint8, (64,), codec="zstd") as s:
        s.append(np.random.default_rng(0).integers(0, 256, (200, 64), dtype=np.uint8))
    data = path / "data.zr"
    data.write_bytes(b"\0" * data.stat().st_size)
    with DenseStore.open(path) as s:
        yield s


def test_a_failing_read_in_a_sql_scan_keeps_its_class(corrupted, tmp_path):
    with DenseStore.create(tmp_path / "lab", np.int64, ()) as s:
        s.append(np.arange(200))
    with DenseStore.open(tmp_path / "lab") as lab:
        for query in (
            "SELECT img FROM t",
            "SELECT img FROM t WHERE record_id > 3",
            "SELECT t.img, u.lab FROM t JOIN u ON t.record_id = u.record_id WHERE u.lab % 2 = 0",
        ):
            with pytest.raises(Corrupted, match="data.zr") as info:
                loaderx.sql(query, t={"img": corrupted}, u={"lab": lab})
            assert isinstance(info.value, OSError)


def test_a_failing_read_through_the_arrow_stream_is_an_os_error(corrupted):
    for read in (
        lambda: pa.table(lxa.table({"img": corrupted})),
        lambda: pa.chunked_array(corrupted),
    ):
        with pytest.raises(OSError, match="data.zr") as info:
            read()
        assert not isinstance(info.value, ValueError)
