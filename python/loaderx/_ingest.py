"""Writing shards: a source ingested into a sharded table on all cores
(:func:`write_sharded`, behind :func:`loaderx.ingest_sharded` and
``Table.append``), and shards written by hand and committed
(:func:`new_shard`, :func:`commit_shards`)."""

from __future__ import annotations

import functools
import json
import os

from . import _native
from ._streams import check_codec, check_path, check_storage_options, require_pyarrow


def new_shard(path: str | os.PathLike[str]) -> str:
    """Creates a new, empty, uniquely named shard directory inside the table
    directory ``path`` (created if needed) and returns its path.

    Write a plain table into it (one store per column, e.g. with
    :func:`loaderx.arrow.ingest`), then make it visible with
    :func:`commit_shards`. Until then no reader sees it.
    """
    return os.fspath(_native.new_shard(os.fspath(path)))


def commit_shards(path: str | os.PathLike[str], shards: list[str | os.PathLike[str]]) -> int:
    """Appends the shard directories ``shards`` (paths inside the table
    directory ``path``, in order) to the table's manifest in one atomic
    rename, creating the manifest on the first commit. Returns the table's
    row count after the commit.

    Every shard is checked first (a plain table whose columns have equal
    lengths, the same column names and the same kind, dtype and item shape
    as the table's), so a rejected commit changes nothing. Commits from
    several processes serialise on a lock file in the table directory.
    """
    path = os.fspath(path)
    if isinstance(shards, (str, bytes, os.PathLike)):
        raise TypeError("shards must be a list of shard directories, got a single path")
    return _native.commit_shards(path, [os.fspath(s) for s in shards])


def read_manifest(path) -> dict:
    """The checked manifest of the sharded table at ``path``:
    ``{"columns": [...], "shards": [{"name": ..., "rows": ...}, ...],
    "types": {column: "utf8" | "binary"}, "nullable": [...]}``.

    Raises :class:`~loaderx.Corrupted` naming the manifest and the broken
    rule when it is not a manifest of this format, and when it names a shard
    directory that does not exist (naming the shard).
    """
    return _native.read_manifest(os.fspath(path))


def _chunks(total: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous, near-equal ``(offset, length)`` ranges of ``total``."""
    parts = max(1, min(parts, total))
    base, extra = divmod(total, parts)
    out, at = [], 0
    for k in range(parts):
        n = base + (k < extra)
        out.append((at, n))
        at += n
    return out


def write_sharded(
    source,
    path,
    *,
    codec: str = "zstd",
    dict_bytes: bytes | None = None,
    workers: int | None = None,
    shards: int | None = None,
    storage_options: dict[str, str] | None = None,
    layout=None,
    base: int | None = None,
    metadata=None,
) -> str:
    """Writes ``source`` into the sharded table at ``path`` (the work of
    :func:`loaderx.ingest_sharded`) and returns ``path`` as checked, for
    the caller to open; with ``base``, the rows were made for that
    version (:meth:`Table.append`'s), so a concurrent change of the columns
    is a :class:`~loaderx.CommitConflict` naming both versions; ``metadata``
    (a callable returning a dict, called once every row is read) is set in
    the new version's :attr:`Table.metadata`. Without ``metadata`` and
    ``base`` (a new ingest, not an append), the ``Table.metadata`` a
    Parquet file or a pyarrow source carries under ``loaderx.metadata``
    (what :func:`loaderx.parquet.export` writes) is restored."""
    if metadata is None and base is None:
        carried = table_metadata(source)
        if carried is not None:
            metadata = lambda: carried  # noqa: E731
    path = check_path(path)
    options = check_storage_options(storage_options)
    blob = check_codec(codec, dict_bytes)
    if workers is None:
        workers = os.cpu_count() or 1
    if type(workers) is not int or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    if shards is not None and (type(shards) is not int or shards < 1):
        raise ValueError(f"shards must be a positive int or None, got {shards!r}")
    # The core writes the shards on its own threads, commits them at once
    # and on any error removes every shard it wrote.
    write = functools.partial(
        _native.ingest_sharded,
        path,
        options,
        codec,
        blob,
        workers,
        layout=layout,
        base=base,
        metadata=None if metadata is None else (lambda: json.dumps(metadata())),
    )
    if isinstance(source, (str, os.PathLike)):
        source = check_path(source)
        if not os.path.isfile(source):
            raise FileNotFoundError(f"no Parquet file at {source}")
        write(shards, parquet=source)
    else:
        pa = require_pyarrow()
        if isinstance(source, pa.Table):
            ranges = _chunks(source.num_rows, shards or 2 * workers) or [(0, 0)]
            write(sources=[source.slice(at, n) for at, n in ranges])
        elif isinstance(source, pa.RecordBatchReader):
            # A Python source's own error, raised as it was: the Arrow
            # stream would carry it as text with its traceback.
            failure: list[BaseException] = []
            reader = pa.RecordBatchReader.from_batches(source.schema, _kept(source, failure))
            as_raised(failure, write, sources=[reader], run_bytes=_RUN_BYTES)
        elif hasattr(source, "__arrow_c_stream__"):
            write(sources=[source], run_bytes=_RUN_BYTES)
        else:
            raise TypeError(
                "source must be a Parquet file path or support the Arrow PyCapsule "
                f"interface (__arrow_c_stream__), got {type(source).__name__}"
            )
    return path


def _kept(reader, failure: list):
    """The batches of ``reader``, the error reading them raises appended
    to ``failure`` (then raised on)."""
    try:
        yield from reader
    except Exception as e:
        failure.append(e)
        raise


def as_raised(failure: list, write, *args, **kwargs):
    """``write(*args, **kwargs)``, an ingest fed by a batch generator that
    appends the error it raises to ``failure``: that error, as raised, in
    place of the one the core reports after the Arrow stream carried it
    (which wraps the message in the stream's own text and a traceback)."""
    try:
        return write(*args, **kwargs)
    except Exception:
        if failure:
            raise failure[0] from None
        raise


#: Bytes of a one-pass stream that :func:`ingest_sharded` writes per shard.
_RUN_BYTES = 64 << 20


#: The Parquet key-value metadata key holding a table's ``Table.metadata`` (JSON).
METADATA_KEY = "loaderx.metadata"


def table_metadata(source) -> dict | None:
    """The ``Table.metadata`` that ``source`` carries under
    :data:`METADATA_KEY`: a Parquet file's key-value metadata, or a pyarrow
    Table's or RecordBatchReader's schema metadata (as ``pyarrow.parquet``
    reads a file's); None when it carries none."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            return None  # the ingest names what is missing
        try:
            raw = _native.parquet_key_value(path, METADATA_KEY)
        except (ValueError, OSError):
            return None  # not Parquet: the ingest says so
        where = f"{path!r}"
    else:
        schema = getattr(source, "schema", None)
        metadata = getattr(schema, "metadata", None)
        if not isinstance(metadata, dict):
            return None
        raw = metadata.get(METADATA_KEY.encode())
        where = "the source's schema"
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        raise ValueError(f"{where} holds {METADATA_KEY!r} that is not JSON: {raw[:80]!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where} holds {METADATA_KEY!r} that is not a JSON object: {value!r}")
    return value
