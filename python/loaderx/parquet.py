"""Streaming Parquet export and ingest.

>>> import os, tempfile
>>> import numpy as np
>>> import loaderx
>>> train = os.path.join(tempfile.mkdtemp(), "train")
>>> images = loaderx.DenseStore.create(os.path.join(train, "image"), np.uint8, (3, 8, 8))
>>> images.append(np.zeros((12, 3, 8, 8), np.uint8))
>>> labels = loaderx.DenseStore.create(os.path.join(train, "label"), np.int64, ())
>>> labels.append(np.arange(12) % 4)
>>> import loaderx.parquet
>>> import pyarrow.parquet as pq
>>> out = os.path.join(os.path.dirname(train), "train.parquet")
>>> rows = loaderx.parquet.export({"image": images, "label": labels}, out)
>>> pq.read_table(out).schema.field("image").type
FixedShapeTensorType(extension<arrow.fixed_shape_tensor[value_type=uint8, shape=[3,8,8]]>)
>>> stores = loaderx.parquet.ingest(out, os.path.join(os.path.dirname(train), "restored"))
>>> sorted(stores), len(stores["image"])
(['image', 'label'], 12)
>>> for s in [images, labels, *stores.values()]:
...     s.close()
"""

from __future__ import annotations

import errno
import json
import os
from typing import TYPE_CHECKING, Callable

from . import _native
from ._ingest import METADATA_KEY
from ._streams import (
    check_codec,
    check_index_column,
    check_path,
    check_storage_options,
    drain_streams,
    is_remote,
)
from ._typing import PathLike, Streams
from .table import Table, open_columns

if TYPE_CHECKING:
    from .zrecord import DenseStore, RaggedStore

__all__ = ["METADATA_KEY", "export", "ingest"]


def export(
    streams: Streams,
    path: PathLike,
    index_column: str | None = None,
    *,
    row_group_bytes: int | None = None,
    progress: Callable[[int], None] | None = None,
    storage_options: dict[str, str] | None = None,
) -> int:
    """Writes equal-length streams to one Parquet file and returns its row count.

    Streaming with bounded memory: record batches and row groups are bounded
    in bytes; pages are zstd-compressed; the Arrow schema (tensor extension
    types included) is kept, so pyarrow, polars and DuckDB read the columns
    back as they were. ``index_column`` adds a UInt64 row-number column first
    (none by default). The file appears only once it is complete.

    ``path`` may be a URI (``s3://``, ``gs://``, ``az://``, with
    ``storage_options`` as for :func:`loaderx.open_table`): the file is
    written in the local temporary directory, then uploaded (as a multipart
    upload when large), so the object too appears only once complete. The
    streams may be a remote table's.

    When ``streams`` is a :class:`loaderx.Table` whose
    :attr:`~loaderx.Table.metadata` holds anything (an image table's
    ``"classes"``, say), it is written as JSON into the file's key-value
    metadata under the key ``loaderx.metadata``
    (:data:`METADATA_KEY`), read back with
    ``pq.read_metadata(path).metadata[b"loaderx.metadata"]``;
    :func:`loaderx.ingest_sharded` of the file restores it as the new
    table's metadata.
    """
    metadata = streams.metadata if isinstance(streams, Table) else None
    key_value = [(METADATA_KEY, json.dumps(metadata))] if metadata else None
    natives, names = drain_streams(streams)
    path = check_path(path)
    check_index_column(index_column, names)
    options = check_storage_options(storage_options)
    if not is_remote(path):
        rows, _ = _native.parquet_export(
            natives, names, path, index_column, row_group_bytes, progress, key_value
        )
        return rows
    import shutil
    import tempfile

    staging = tempfile.mkdtemp(prefix="loaderx-export-")
    try:
        local = os.path.join(staging, "export.parquet")
        rows, _ = _native.parquet_export(
            natives, names, local, index_column, row_group_bytes, progress, key_value
        )
        _native.upload_file(local, path, options)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return rows


def ingest(
    path: PathLike,
    root: PathLike,
    codec: str = "zstd",
    dict_bytes: bytes | None = None,
    *,
    progress: Callable[[int], None] | None = None,
) -> dict[str, DenseStore | RaggedStore]:
    """Streams a Parquet file into one new store per column under
    ``root/<column>`` and returns ``{column: store}``, opened. An Arrow IPC
    file or stream (``.arrow``, ``.feather`` v2, ``.arrows``) is read the
    same way; the format is told by the file's magic bytes. The column
    mapping is that of :func:`loaderx.arrow.ingest`; a column with nulls or of
    an unsupported type raises and leaves nothing behind."""
    path = check_path(path)
    root = check_path(root)
    blob = check_codec(codec, dict_bytes)
    if not os.path.exists(path):
        # A directory or an unreadable file fails with its own errno below.
        raise FileNotFoundError(errno.ENOENT, "no Parquet or Arrow IPC file", path)
    fresh_root = not os.path.exists(root)
    try:
        made = _native.parquet_ingest(path, root, codec, blob, progress)
    except BaseException:
        if fresh_root and os.path.isdir(root) and not os.listdir(root):
            os.rmdir(root)
        raise
    return open_columns(root, False, [name for name, _ in made])
