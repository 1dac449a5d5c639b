"""Zrecord: typed, persistent record stores.

A store is a directory of records that all share one dtype. Two contracts:

* :class:`DenseStore` — every record is one array of a fixed ``item_shape``;
  a gather returns one stacked ``(k, *item_shape)`` array.
* :class:`RaggedStore` — every record keeps its own shape; a gather returns a
  ``list`` of arrays.

Records are compressed one by one (``codec="zstd"`` by default, ``"raw"`` or
``"zstd_dict"`` with a dictionary from :func:`loaderx.utils.train_dict`), and a
batch gather decompresses straight into the returned array on native threads
with the GIL released.

>>> import numpy as np, tempfile, os
>>> root = tempfile.mkdtemp()
>>> data = np.arange(64, dtype=np.float32).reshape(8, 2, 4)
>>> with DenseStore.create(os.path.join(root, "data"), data.dtype, data.shape[1:]) as ds:
...     ds.append(data)
>>> ds = DenseStore.open(os.path.join(root, "data"))
>>> ds[0, 5, 2].shape
(3, 2, 4)
>>> ds.close()
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np

from . import _native
from ._errors import Corrupted, StoreBusy
from ._keys import normalize
from ._streams import (
    BATCH_BYTES,
    StoreBase,
    check_codec,
    check_path,
    check_storage_options,
    chunked_array,
    is_remote,
    require_pyarrow,
)
from ._typing import ArrowSource, DTypeLike, Key, PathLike, Shape

if TYPE_CHECKING:
    import pyarrow as pa

_S = TypeVar("_S", bound="_Store")

__all__ = ["DenseStore", "RaggedStore", "DICT_TIERS", "DictTier", "StoreBusy", "Corrupted"]


class DictTier(NamedTuple):
    """A dictionary-training preset: the dictionary size and the byte budget
    of the strided record sample it is trained on."""

    name: str
    dict_size: int
    sample_bytes: int


#: The named dictionary tiers, from the smallest dictionary (fastest gather)
#: to the largest (best ratio on small records).
DICT_TIERS = MappingProxyType(
    {name: DictTier(name, size, budget) for name, (size, budget) in _native.DICT_TIERS.items()}
)


def _check_dtype(dtype) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be a NumPy dtype, got {dtype!r}") from exc
    if dt.fields is not None or dt.subdtype is not None or dt.kind not in "biuf":
        raise TypeError(
            "dtype must be bool, int8-int64, uint8-uint64 or float16/32/64, "
            f"got {dt} (structured, subarray, complex, datetime, string and object "
            "dtypes are not supported)"
        )
    if dt.byteorder == ">":
        raise TypeError(f"dtype must be little-endian or byte-order free, got big-endian {dt.str}")
    if dt.metadata:
        raise TypeError(f"dtype must not carry metadata, got {dt!r}")
    return dt.newbyteorder("<") if dt.byteorder == "=" else dt


def _check_checksum(checksum) -> bool:
    if not isinstance(checksum, (bool, np.bool_)):
        raise TypeError(f"checksum must be a bool, got {type(checksum).__name__}")
    return bool(checksum)


class _Store(StoreBase):
    """Behaviour shared by both store contracts."""

    _kind = ""

    def __init__(self, native: Any, path: str) -> None:
        # Private: use create() or open().
        self._native = native
        self._path = path
        self._dtype = np.dtype(native.dtype)

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    def open(
        cls: type[_S],
        path: PathLike,
        readonly: bool = False,
        *,
        storage_options: dict[str, str] | None = None,
    ) -> _S:
        """Opens an existing store of this kind.

        By default the handle reads and writes, and holds the store alone: it
        takes an exclusive lock, so any other handle (in this or another
        process) makes it raise :class:`StoreBusy`. With ``readonly=True`` it
        takes a shared lock instead: any number of read-only handles, in any
        number of processes (one per training rank, say), may hold the store
        at once, while a writer and readers exclude each other with
        :class:`StoreBusy`. A read-only handle opens its files read-only,
        refuses ``append``, ``delete``, ``compact`` and ``sync`` with
        ``io.UnsupportedOperation`` (a ValueError and an OSError) and writes
        nothing on ``close()``; reads, Arrow, SQL, Parquet export and the
        DataLoader work as with any store.

        ``path`` may be a URI (``s3://bucket/prefix/store``, ``gs://``,
        ``az://``, ``http(s)://``): a remote store opens read-only only
        (``readonly=True``; ValueError naming the URI otherwise), configured
        by ``storage_options`` (the ``object_store`` crate's key names, such
        as ``aws_endpoint``, ``aws_region``, ``aws_access_key_id``) and the
        usual ``AWS_*``/``GOOGLE_*``/``AZURE_*`` environment variables. Its
        ``meta.zr`` and ``dict.zr`` are fetched once at open; each gather
        fetches its records' bytes in a few planned range requests.

        Raises FileNotFoundError when ``path`` holds no store, ValueError when
        it holds a store of the other kind, :class:`StoreBusy` when another
        handle has it open and :class:`Corrupted` when it is malformed.
        """
        path = check_path(path)
        if not isinstance(readonly, (bool, np.bool_)):
            raise TypeError(f"readonly must be a bool, got {type(readonly).__name__}")
        options = check_storage_options(storage_options)
        if not is_remote(path):
            return cls(_native.Store.open(path, cls._kind, bool(readonly)), path)
        if not readonly:
            raise ValueError(
                f"{path} is a remote location: a store there opens read-only (readonly=True)"
            )
        return cls(
            _native.Store.open(path, cls._kind, True, None, None, options),
            path,
        )

    def _live(self):
        native = self._native
        if native is None:
            raise ValueError(f"{type(self).__name__} {self._path!r} is closed")
        return native

    def _drain(self):
        """Waits for queued writes (ragged stores) and raises their errors."""
        return self._live()

    def close(self) -> None:
        """Syncs and releases the store. Idempotent."""
        native = self._native
        if native is None:
            return
        try:
            self._drain()
        finally:
            self._native = None
            native.close()

    # -- properties --------------------------------------------------------

    @property
    def path(self) -> str:
        """The store directory, as given to create/open."""
        self._live()
        return self._path

    @property
    def dtype(self) -> np.dtype:
        """The dtype every record shares."""
        self._live()
        return self._dtype

    @property
    def codec(self) -> str:
        """``"raw"``, ``"zstd"`` or ``"zstd_dict"``."""
        return self._live().codec

    @property
    def checksum(self) -> bool:
        """Whether new zstd frames carry a content checksum: set by
        ``create(..., checksum=True)`` and kept on reopen by looking at the
        store's newest frame."""
        return self._live().checksum

    @property
    def logical(self) -> str:
        """``"tensor"``, or ``"utf8"`` / ``"binary"`` for a table's text or
        binary column (a ragged uint8 store whose records are the values)."""
        return self._live().logical

    @property
    def layout(self) -> str:
        """How the column is stored: ``"records"`` (a Zrecord store, one
        frame and one location per record) or ``"columnar"`` (a table's
        ``column.zc``, chunks of many values; see ``docs/format.md``)."""
        return self._live().layout

    @property
    def closed(self) -> bool:
        return self._native is None

    @property
    def readonly(self) -> bool:
        """Whether the handle was opened with ``readonly=True``."""
        return self._live().readonly

    def __len__(self) -> int:
        return len(self._drain())

    # -- reads -------------------------------------------------------------

    def __getitem__(self, key: Key) -> Any:
        native = self._drain()
        index, scalar = normalize(key, lambda: len(native))
        if scalar:
            return self._one(native, index)
        return native.gather(index)

    def _one(self, native, index):
        return native.get(index)

    # -- maintenance -------------------------------------------------------

    def delete(self, key: Key) -> None:
        """Deletes records (any key form). The last record moves into each
        hole, so the index space stays ``0..len``; indices of moved records
        change. Duplicates delete once."""
        native = self._drain()
        native.require_writable("delete")
        index, scalar = normalize(key, lambda: len(native))
        if scalar:
            index = np.array([index], dtype=np.int64)
        if len(index):
            native.delete(index)

    def stats(self) -> dict[str, int]:
        """``{'records', 'live_bytes', 'data_bytes', 'reclaimable', 'raw_records'}``.

        ``raw_records`` counts the live records stored uncompressed: all of
        a ``raw`` store's; in a ``zstd`` or ``zstd_dict`` store, those zstd
        did not shrink by a sixteenth, stored as frames of raw blocks (still
        valid zstd frames), which gathers read as copies."""
        return self._drain().stats()

    def sync(self) -> None:
        """Durability barrier: after it returns, every record appended so far
        survives a crash."""
        native = self._drain()
        native.require_writable("sync")
        native.sync()

    def compact(self) -> None:
        """Reclaims the space of deleted records, in place. Offline: do not
        read the store from other threads meanwhile."""
        native = self._drain()
        native.require_writable("compact")
        native.compact()

    # -- Arrow ---------------------------------------------------------------

    @property
    def _field_name(self) -> str:
        return os.path.basename(os.path.normpath(self._path))

    def __arrow_c_schema__(self):
        """The Arrow field of the records (named after the store directory)."""
        return _native.arrow_field(self._drain(), self._field_name)

    def __arrow_c_stream__(self, requested_schema=None):
        """The whole store as an Arrow array stream (ChunkedArray semantics,
        chunks bounded in bytes)."""
        native = self._drain()
        return _native.arrow_stream(native, self._field_name, requested_schema, BATCH_BYTES)

    def to_arrow(self, key: Key | None = None) -> pa.ChunkedArray | pa.Array:
        """The records as Arrow: a ``pyarrow.ChunkedArray`` of the whole store
        (``key=None``) or a ``pyarrow.Array`` of the selected records (a key of
        any indexing form; an int gives a length-1 array)."""
        pa = require_pyarrow()
        native = self._drain()
        if key is None:
            return chunked_array(pa, native, self._field_name)
        index, scalar = normalize(key, lambda: len(native))
        if scalar:
            index = np.array([index], dtype=np.int64)
        return pa.array(_native.arrow_gather(native, index, self._field_name))

    def __repr__(self) -> str:
        name = type(self).__name__
        if self._native is None:
            return f"<{name} path={self._path!r} closed>"
        shape = f", item_shape={self._native.item_shape}" if self._kind == "dense" else ""
        logical = self._native.logical
        logical = f", logical={logical!r}" if logical != "tensor" else ""
        return (
            f"{name}(path={self._path!r}, kind={self._kind!r}, dtype={self._dtype.name!r}"
            f"{shape}{logical}, codec={self._native.codec!r}, len={len(self._native)})"
        )


class DenseStore(_Store):
    """A store of fixed-shape records: record ``i`` is one ``item_shape`` array.

    ``ds[i]`` returns one record (a NumPy scalar when ``item_shape`` is
    ``()``); ``ds[[0, 5, 2]]``, ``ds[0, 5, 2]``, ``ds[idx_array]``,
    ``ds[2:10]`` and ``ds[bool_mask]`` return a ``(k, *item_shape)`` array.
    """

    _kind = "dense"

    @classmethod
    def create(
        cls,
        path: PathLike,
        dtype: DTypeLike,
        item_shape: Shape,
        codec: str = "zstd",
        dict_bytes: bytes | None = None,
        checksum: bool = False,
    ) -> DenseStore:
        """Creates an empty dense store at ``path`` (parents are created).

        ``codec`` is ``"zstd"`` (level 3, the default), ``"raw"`` or
        ``"zstd_dict"`` (level 19 against ``dict_bytes``). With
        ``checksum=True`` every zstd frame carries its content checksum, so a
        damaged payload raises :class:`Corrupted` instead of decoding to wrong
        bytes (raw records carry none: it needs a compressed codec). Raises
        FileExistsError if ``path`` already holds a store.
        """
        path = check_path(path)
        dt = _check_dtype(dtype)
        try:
            shape = tuple(int(d) for d in item_shape)
        except TypeError as exc:
            raise TypeError(
                f"item_shape must be a tuple of ints, got {type(item_shape).__name__}"
            ) from exc
        if any(d <= 0 for d in shape):
            raise ValueError(f"item_shape must have positive dimensions, got {shape}")
        blob = check_codec(codec, dict_bytes)
        checksum = _check_checksum(checksum)
        return cls(_native.Store.create(path, dt.str, list(shape), codec, blob, checksum), path)

    @property
    def item_shape(self) -> tuple[int, ...]:
        """The shape of every record."""
        return self._live().item_shape

    def _one(self, native, index):
        record = native.get(index)
        return record[()] if record is not None and record.ndim == 0 else record

    def append(self, data: np.ndarray | ArrowSource) -> None:
        """Appends the records of ``data``, an array of shape
        ``(n, *item_shape)`` and exactly the store's dtype.

        The call is synchronous and copies nothing: a C-contiguous array is
        compressed and written straight from its memory. Nothing is written if
        the dtype or shape is wrong. Add the leading axis for one record:
        ``ds.append(x[None])``.
        """
        native = self._live()
        native.require_writable("append")
        if not isinstance(data, np.ndarray):
            if hasattr(data, "__arrow_c_array__") or hasattr(data, "__arrow_c_stream__"):
                # Arrow arrays, chunked arrays and array streams: checked in
                # full, then written synchronously.
                _native.arrow_append(native, data)
                return
            raise TypeError(f"data must be a numpy.ndarray, got {type(data).__name__}")
        shape = native.item_shape
        if data.dtype != self._dtype:
            raise TypeError(
                f"data has dtype {data.dtype}, expected {self._dtype} (the store's dtype)"
            )
        if data.ndim != len(shape) + 1 or tuple(data.shape[1:]) != shape:
            raise ValueError(
                f"data must have shape (n, {', '.join(map(str, shape))}"
                f"{',' if len(shape) == 1 else ''}), got {data.shape}"
                if shape
                else f"data must have shape (n,), got {data.shape}"
            )
        if data.shape[0] == 0:
            return
        native.append_dense(np.ascontiguousarray(data).reshape(-1).view(np.uint8))


def _encode_values(logical: str, values) -> list:
    """The records of text (``str``) or binary (``bytes``) values: a value's
    bytes as a 1-D uint8 array, an empty value as the 0-d array ``0``."""
    out = []
    for i, v in enumerate(values):
        if logical == "utf8":
            if not isinstance(v, str):
                raise TypeError(
                    f"records[{i}] must be a str for a utf8 column, got {type(v).__name__}"
                )
            try:
                b = v.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"records[{i}] cannot be encoded as UTF-8: {exc}") from None
        else:
            if not isinstance(v, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"records[{i}] must be bytes for a binary column, got {type(v).__name__}"
                )
            b = bytes(v)
        out.append(np.frombuffer(b, np.uint8) if b else np.zeros((), np.uint8))
    return out


class RaggedStore(_Store):
    """A store of variable-shape records: each record keeps its exact shape.

    Any key selecting several records returns a ``list`` of arrays; an int
    returns one array. ``append`` packs the batch and hands it to a one-slot
    writer queue, so Python can prepare the next batch while the previous one
    is compressed and written.
    """

    _kind = "ragged"

    @classmethod
    def create(
        cls,
        path: PathLike,
        dtype: DTypeLike,
        codec: str = "zstd",
        dict_bytes: bytes | None = None,
        checksum: bool = False,
    ) -> RaggedStore:
        """Creates an empty ragged store at ``path`` (parents are created);
        ``codec``, ``dict_bytes`` and ``checksum`` as in :meth:`DenseStore.create`."""
        path = check_path(path)
        dt = _check_dtype(dtype)
        blob = check_codec(codec, dict_bytes)
        checksum = _check_checksum(checksum)
        return cls(_native.Store.create(path, dt.str, None, codec, blob, checksum), path)

    def _drain(self):
        native = self._live()
        native.drain_writes()
        return native

    def to_arrow(
        self, key: Key | None = None, variable_shape_tensor: bool = False
    ) -> pa.ChunkedArray | pa.Array:
        """Like :meth:`DenseStore.to_arrow`; with ``variable_shape_tensor=True``
        (and a key) the records come as the canonical
        ``arrow.variable_shape_tensor``, which needs every selected record to
        have the same ndim."""
        if not variable_shape_tensor:
            return super().to_arrow(key)
        pa = require_pyarrow()
        native = self._drain()
        if key is None:
            key = slice(None)
        index, scalar = normalize(key, lambda: len(native))
        if scalar:
            index = np.array([index], dtype=np.int64)
        return pa.array(_native.arrow_gather(native, index, self._field_name, True))

    def append(self, records: Iterable[np.ndarray] | ArrowSource) -> None:
        """Appends records from any iterable of arrays of the store's dtype.

        Each record must be nonempty; its shape is kept exactly (0-d
        included). Validation happens here (TypeError for a wrong dtype,
        ValueError for an empty record, nothing queued); the packed batch is
        then written in the background. A write error surfaces at the next
        append or at the next call that drains the queue (len, reads, stats,
        sync, delete, compact, close).
        """
        native = self._live()
        native.require_writable("append")
        if hasattr(records, "__arrow_c_array__") or hasattr(records, "__arrow_c_stream__"):
            if not isinstance(records, np.ndarray):
                # Arrow arrays, chunked arrays and array streams: checked and
                # packed here, written by the writer queue.
                packed = _native.arrow_append(native, records)
                if len(packed):
                    native.submit_packed(packed)
                return
        if isinstance(records, (str, bytes)) or not hasattr(records, "__iter__"):
            raise TypeError(
                f"records must be an iterable of numpy arrays, got {type(records).__name__}"
            )
        if native.logical != "tensor":
            records = _encode_values(native.logical, records)
        packed = native.pack(records)
        if len(packed) == 0:
            native.raise_pending_write()
            return
        native.submit_packed(packed)

    def close(self) -> None:
        native = self._native
        if native is None:
            return
        try:
            native.drain_writes()
        finally:
            native.stop_writes()
            self._native = None
            native.close()
