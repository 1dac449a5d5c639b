"""Arrow interop: stores as Arrow tensor columns, and Arrow data into stores.

Every store speaks the Arrow PyCapsule protocol (``__arrow_c_schema__`` and
``__arrow_c_stream__``), so ``pa.chunked_array(store)`` and
``pl.Series(store)`` read it directly. The mapping:

* dense, ``item_shape == ()`` → a primitive column of the dtype;
* dense, ``item_shape == S`` → ``FixedSizeList<T>[prod(S)]`` with the
  canonical ``arrow.fixed_shape_tensor`` extension (pyarrow:
  ``FixedShapeTensorType``);
* ragged → ``struct{data: List<T>, shape: List<Int32>}`` (exact per-record
  shapes), or ``arrow.variable_shape_tensor`` on request.

Numeric columns are zero-copy: the buffer a gather fills becomes the Arrow
values buffer. ``bool`` is bit-packed in Arrow, so it is converted.

pyarrow is optional (``pip install 'loaderx[arrow]'``); it is needed only by
the functions that return pyarrow objects (``table``, ``to_arrow``,
``DataLoader(output="arrow")``). ``ingest`` and appending Arrow data need
nothing but an object with the Arrow PyCapsule interface.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from . import _native
from ._streams import (
    check_codec,
    check_index_column,
    check_path,
    drain_streams,
    require_pyarrow,
    scan,
)
from ._typing import ArrowSource, PathLike, Streams
from .table import open_columns

if TYPE_CHECKING:
    import pyarrow as pa

    from .zrecord import DenseStore, RaggedStore

__all__ = ["table", "ingest"]


def table(streams: Streams, index_column: str | None = "record_id") -> pa.RecordBatchReader:
    """A lazy ``pyarrow.RecordBatchReader`` over equal-length streams.

    One column per stream in dict order, preceded by a UInt64 index column
    named ``index_column`` (omit it with ``None``). Batches are bounded in
    bytes; records are gathered as the reader is consumed.

    >>> import os, tempfile
    >>> import numpy as np
    >>> import loaderx
    >>> train = os.path.join(tempfile.mkdtemp(), "train")
    >>> images = loaderx.DenseStore.create(os.path.join(train, "image"), np.uint8, (3, 8, 8))
    >>> images.append(np.zeros((12, 3, 8, 8), np.uint8))
    >>> labels = loaderx.DenseStore.create(os.path.join(train, "label"), np.int64, ())
    >>> labels.append(np.arange(12) % 4)
    >>> import loaderx.arrow
    >>> reader = loaderx.arrow.table({"image": images, "label": labels})
    >>> reader.schema.names
    ['record_id', 'image', 'label']
    >>> reader.read_all().num_rows
    12
    >>> images.close(); labels.close()
    """
    pa = require_pyarrow()
    _, names = drain_streams(streams)
    check_index_column(index_column, names)
    schema, batches = scan(pa, streams, index_column)
    return pa.RecordBatchReader.from_batches(schema, batches)


def ingest(
    source: ArrowSource, root: PathLike, codec: str = "zstd", dict_bytes: bytes | None = None
) -> dict[str, DenseStore | RaggedStore]:
    """Writes every column of ``source`` into its own new store under
    ``root/<column>`` and returns ``{column: store}``, opened.

    ``source`` is anything with ``__arrow_c_stream__`` (or
    ``__arrow_c_array__``): a pyarrow Table or RecordBatchReader, a polars
    DataFrame, a DuckDB result. It is streamed batch by batch, so memory stays
    bounded. FixedSizeList (with or without ``arrow.fixed_shape_tensor``)
    becomes a DenseStore, List/LargeList a RaggedStore of 1-D records, the
    ragged struct a RaggedStore, and a primitive column a DenseStore of
    scalars. On any error (an unsupported type, nulls) the stores created so
    far are removed.
    """
    root = check_path(root)
    blob = check_codec(codec, dict_bytes)
    if not (hasattr(source, "__arrow_c_stream__") or hasattr(source, "__arrow_c_array__")):
        raise TypeError(
            "source must support the Arrow PyCapsule interface (__arrow_c_stream__), "
            f"got {type(source).__name__}"
        )
    fresh_root = not os.path.exists(root)
    os.makedirs(root, exist_ok=True)
    try:
        made = _native.arrow_ingest(source, root, codec, blob)
    except BaseException:
        if fresh_root and not os.listdir(root):
            os.rmdir(root)  # leave nothing behind
        raise
    return open_columns(root, False, [name for name, _ in made])
