"""Argument checks shared by the store, loader, Arrow, SQL and Parquet entry
points, and the optional-dependency requirements they raise.

A leaf: it imports no other module of the package but the native one, so any
module can use it without an import circle. The store classes live in
:mod:`loaderx.zrecord`; they derive from :class:`StoreBase`, which is what the
stream checks test for.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import TypeVar

import numpy as np

from . import _native

__all__ = [
    "BATCH_BYTES",
    "SCAN_FILTER_ROWS",
    "CODECS",
    "Closing",
    "StoreBase",
    "require",
    "require_pyarrow",
    "require_sql",
    "is_text",
    "is_ragged_struct",
    "check_path",
    "check_storage_options",
    "is_remote",
    "check_codec",
    "check_streams",
    "drain_streams",
    "check_index_column",
    "check_table",
]

#: Upper bound of one batch (or chunk) that readers produce: the core's
#: ``loaderx::arrow::DEFAULT_BATCH_BYTES`` (16 MiB), which its own readers
#: and the DataFusion provider use too.
BATCH_BYTES: int = _native.BATCH_BYTES

#: Rows a :func:`scan` ``filter`` sees at once. Deliberately twice the core's
#: ``loaderx::arrow::FILTER_ROWS`` (``_native.FILTER_ROWS``, 32 Ki, what a
#: native predicate such as DataFusion's gets): here every step is a call
#: into Python (the polars scan's predicate), and 64 Ki rows per step, what
#: the polars scan filtered before it ran on the core's scan, halves them.
SCAN_FILTER_ROWS = 1 << 16

CODECS = ("raw", "zstd", "zstd_dict")


_H = TypeVar("_H", bound="Closing")


class Closing:
    """``with`` and garbage collection for a handle (a store, a table, a
    loader): entering a ``with`` block calls ``_live()``, which raises for a
    closed handle where that matters (a store, a table); leaving it closes
    the handle, and so does collection, best effort. Subclasses define an
    idempotent ``close()``."""

    __slots__ = ()

    def _live(self):
        return self

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _H) -> _H:
        self._live()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort at garbage collection
            pass


class StoreBase(Closing):
    """The base of ``DenseStore`` and ``RaggedStore``."""

    __slots__ = ()

    def _drain(self):
        """Waits for queued writes and returns the open native store."""
        raise NotImplementedError


def require(module: str, extra: str, *, name: str | None = None, user: str = "this"):
    """Imports ``module`` (an optional dependency) and returns its top-level
    package; ImportError "``user`` needs ``name``, an optional dependency:
    pip install 'loaderx[``extra``]'" when it is missing."""
    try:
        importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"{user} needs {name or module}, an optional dependency: pip install 'loaderx[{extra}]'"
        ) from exc
    return importlib.import_module(module.partition(".")[0])


def require_pyarrow():
    """The ``pyarrow`` module, or ImportError naming the ``loaderx[arrow]`` extra."""
    return require("pyarrow", "arrow")


_TEXT_TYPES = ("string", "large_string", "string_view", "binary", "large_binary", "binary_view")


def is_text(pa, t) -> bool:
    """Whether the Arrow type ``t`` is utf8 or binary (a text column)."""
    return any(getattr(pa.types, f"is_{k}", lambda _: False)(t) for k in _TEXT_TYPES)


def is_ragged_struct(pa, t) -> bool:
    """Whether the Arrow type ``t`` is the ragged tensor struct
    ``{data: List<T>, shape: List<Int32>}`` that a RaggedStore reads as."""
    return pa.types.is_struct(t) and [f.name for f in t] == ["data", "shape"]


def require_sql() -> None:
    if not _native.HAS_SQL:
        raise ImportError("this loaderx build has no SQL support (built without the 'sql' feature)")


def check_path(path) -> str:
    try:
        return os.fspath(path)
    except TypeError as exc:
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}") from exc


def is_remote(path: str) -> bool:
    """Whether ``path`` names a remote location: a URI whose scheme is not
    ``file`` (``s3://``, ``gs://``, ``az://``, ``abfs://``, ``http(s)://``)."""
    return _native.is_remote(path)


def check_storage_options(storage_options) -> dict[str, str] | None:
    """``storage_options`` as the native layer takes them: None, or a dict
    of option names to strings (``True``/``False`` become ``"true"`` and
    ``"false"``, integers and floats their decimal text). TypeError names
    the offending key, never a value (values may be credentials)."""
    if storage_options is None:
        return None
    if not isinstance(storage_options, Mapping):
        raise TypeError(
            "storage_options must be a dict of option names to strings, "
            f"got {type(storage_options).__name__}"
        )
    out = {}
    for key, value in storage_options.items():
        if not isinstance(key, str):
            raise TypeError(f"storage_options keys must be str, got {type(key).__name__}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (int, float)):
            value = str(value)
        elif not isinstance(value, str):
            raise TypeError(f"storage_options[{key!r}] must be a str, got {type(value).__name__}")
        out[key] = value
    return out


def check_codec(codec, dict_bytes) -> bytes | None:
    """Checks ``codec`` and ``dict_bytes`` together; returns the dictionary
    bytes for ``zstd_dict``, else None."""
    if not isinstance(codec, str) or codec not in CODECS:
        raise ValueError(f"codec must be one of 'raw', 'zstd', 'zstd_dict', got {codec!r}")
    if codec == "zstd_dict":
        if dict_bytes is None:
            raise ValueError(
                "dict_bytes is required for codec 'zstd_dict'; "
                "train one with loaderx.utils.train_dict(...)"
            )
        if not isinstance(dict_bytes, (bytes, bytearray, memoryview)):
            raise TypeError(f"dict_bytes must be bytes, got {type(dict_bytes).__name__}")
        if len(dict_bytes) == 0:
            raise ValueError("dict_bytes must be a non-empty zstd dictionary, got 0 bytes")
        return bytes(dict_bytes)
    if dict_bytes is not None:
        raise ValueError(f"dict_bytes is only valid with codec 'zstd_dict', got codec {codec!r}")
    return None


def _check_mapping(streams) -> None:
    if not isinstance(streams, Mapping):
        raise TypeError(f"streams must be a dict of name -> store, got {type(streams).__name__}")
    if not streams:
        raise ValueError("streams must hold at least one store")


def _check_stream(name, store) -> None:
    if not isinstance(name, str):
        raise TypeError(f"stream names must be str, got {name!r}")
    if not isinstance(store, StoreBase):
        raise TypeError(
            f"streams[{name!r}] must be a DenseStore or RaggedStore, got {type(store).__name__}"
        )


def check_streams(streams) -> list[str]:
    """Checks a dict of name -> store and returns its names; touches no store."""
    _check_mapping(streams)
    for name, store in streams.items():
        _check_stream(name, store)
    return list(streams)


def drain_streams(streams) -> tuple[list, list[str]]:
    """Checks a dict of name -> store and returns ``(natives, names)``, each
    store drained (queued writes written, a closed store raising) in turn."""
    _check_mapping(streams)
    natives, names = [], []
    for name, store in streams.items():
        _check_stream(name, store)
        natives.append(store._drain())
        names.append(name)
    return natives, names


def check_index_column(index_column, names) -> None:
    if index_column is None:
        return
    if not isinstance(index_column, str):
        raise TypeError(f"index_column must be a str or None, got {type(index_column).__name__}")
    if index_column in names:
        raise ValueError(f"index_column {index_column!r} collides with a stream name")


def check_table(name, streams, index_column: str | None) -> tuple[list, list[str]]:
    """``drain_streams`` for one named SQL table, whose streams must not be
    named ``index_column``."""
    if not isinstance(streams, Mapping):
        raise TypeError(
            f"table {name!r} must be a dict of stream name -> store, got {type(streams).__name__}"
        )
    natives, names = drain_streams(streams)
    if index_column in names:
        raise ValueError(f"table {name!r}: stream {index_column!r} collides with the index column")
    return natives, names


def scan(
    pa,
    streams,
    index_column: str | None,
    *,
    columns: list[str] | None = None,
    start: int = 0,
    end: int | None = None,
    limit: int | None = None,
    max_bytes: int | None = BATCH_BYTES,
    max_rows: int | None = None,
    filter=None,
    filter_columns: list[str] | None = None,
    filter_rows: int = SCAN_FILTER_ROWS,
    predicate: str | None = None,
    predicate_exact: bool = False,
):
    """The core's table scan over ``streams`` (a Table or dict of stores),
    as ``(schema, batches)``: the ``pyarrow.Schema`` of the batches and an
    iterator of ``pyarrow.RecordBatch``, one native call each (the GIL
    released around the gather). ``filter`` takes a ``pyarrow.RecordBatch``
    of ``filter_columns`` (``filter_rows`` rows at most) and returns a
    boolean Arrow array; the scan reads the other columns only for the rows
    it keeps. ``max_bytes=None`` reads everything in one batch.
    ``predicate`` (JSON, the core's ``columnar::Pred``) is evaluated on the
    stored chunks of columnar columns, when every column read is one: the
    rows it rejects are not read (the caller filters what comes back).
    With ``predicate_exact``, a scan the core cannot apply ``predicate``
    to (a column read is not columnar, or has deleted rows or a view), or
    whose answer the core does not say is exact (the rows it keeps are
    exactly those where the predicate holds), is None in place of
    ``(schema, batches)``.

    The batches come through ``read_next``, not the C stream interface:
    that carries only an errno and a message, so a ``Corrupted`` or
    ``StoreBusy`` raised while reading would reach the caller as a bare
    ``OSError``; this way errors keep their class."""
    natives, names = drain_streams(streams)
    keep = None
    if filter is not None:

        def keep(batch):
            return filter(pa.record_batch(batch))

    native = _native.table_scan(
        natives,
        names,
        index_column,
        columns,
        start,
        end,
        limit,
        max_bytes,
        max_rows,
        filter_columns,
        keep,
        filter_rows,
        predicate,
        predicate_exact,
    )
    if native is None:
        return None

    def batches():
        while (batch := native.read_next()) is not None:
            yield pa.record_batch(batch)

    return pa.schema(native.schema), batches()


def chunked_array(pa, native_store, name: str):
    """The whole store as a ``pyarrow.ChunkedArray`` of byte-bounded chunks
    (see :func:`scan` for why not through the C stream)."""
    reader = _native.arrow_chunks(native_store, name, BATCH_BYTES)
    chunks = []
    while (chunk := reader.read_next()) is not None:
        chunks.append(pa.array(chunk))
    return pa.chunked_array(chunks, type=pa.field(reader.field).type)


def index_array(indices, name: str = "indices", *, ids: bool = False) -> np.ndarray:
    """``indices`` (the argument ``name``) as a contiguous int64 or uint64
    array (uint64 with ``ids``, after refusing a negative one). Whether it
    is nonempty and within the streams is the native loader's check."""
    try:
        arr = np.asarray(indices)
    except Exception as exc:  # noqa: BLE001
        raise TypeError(
            f"{name} must be an array of integers, got {type(indices).__name__}"
        ) from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    # An empty list has a float dtype: it is reported as empty, not as floats.
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
    if not ids:
        return np.ascontiguousarray(arr, dtype=np.uint64 if arr.dtype.kind == "u" else np.int64)
    if arr.size and arr.dtype.kind == "i" and int(arr.min()) < 0:
        raise ValueError(f"{name} holds {int(arr.min())}: ids and steps are >= 0")
    return np.ascontiguousarray(arr, dtype=np.uint64)
