"""Tables as pandas DataFrames: :func:`to_pandas`.

>>> import os, tempfile
>>> import numpy as np
>>> import loaderx
>>> train = os.path.join(tempfile.mkdtemp(), "train")
>>> images = loaderx.DenseStore.create(os.path.join(train, "image"), np.uint8, (3, 8, 8))
>>> images.append(np.zeros((12, 3, 8, 8), np.uint8))
>>> labels = loaderx.DenseStore.create(os.path.join(train, "label"), np.int64, ())
>>> labels.append(np.arange(12) % 4)
>>> images.close(); labels.close()
>>> import loaderx.pandas
>>> with loaderx.open_table(train) as table:
...     df = loaderx.pandas.to_pandas(table)
>>> list(df.columns), df.index.name, len(df)
(['image', 'label'], 'record_id', 12)
>>> df["image"].iloc[0].shape
(3, 8, 8)

What pandas gets, column by column:

* dense, ``item_shape == ()`` → a NumPy column of the store's dtype;
* dense, ``item_shape == S`` → an ``object`` column whose cells are
  ``S``-shaped ndarrays: views into one ``(n, *S)`` array (no copy per cell);
* ragged → an ``object`` column of ndarrays, each of its record's exact
  shape;
* a column whose Arrow type is utf8 or binary → pyarrow's ``to_pandas()``
  (strings, or ``bytes`` objects).

The index is a ``RangeIndex`` named ``index_column`` (``"record_id"``): the
row number. Everything is read into memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ._streams import (
    drain_streams,
    is_ragged_struct,
    is_text,
    require,
    require_pyarrow,
    scan,
)
from ._typing import Streams

if TYPE_CHECKING:
    import pandas

__all__ = ["to_pandas"]


def _cells(records: list) -> np.ndarray:
    cells = np.empty(len(records), dtype=object)
    for i, rec in enumerate(records):
        cells[i] = rec
    return cells


def _column(pa, field, arr):
    """One scanned column (a ``pyarrow.Array`` of every row) as what
    pandas gets (see the module docstring)."""
    t = field.type
    if is_text(pa, t) or arr.null_count:
        return arr.to_pandas()
    if isinstance(t, pa.FixedShapeTensorType):
        # The flat values as one (n, *S) array; each cell is a view of it.
        values = arr.storage.flatten().to_numpy(zero_copy_only=False)
        return _cells(list(values.reshape((len(arr), *t.shape))))
    if is_ragged_struct(pa, t):
        data, shape = arr.field("data"), arr.field("shape")
        values = data.values.to_numpy(zero_copy_only=False)
        offsets = np.asarray(data.offsets)
        dims = shape.values.to_numpy(zero_copy_only=False)
        ends = np.asarray(shape.offsets)
        return _cells(
            [
                values[offsets[i] : offsets[i + 1]].reshape(tuple(dims[ends[i] : ends[i + 1]]))
                for i in range(len(arr))
            ]
        )
    return arr.to_numpy(zero_copy_only=False)


def to_pandas(
    table: Streams,
    *,
    columns: Sequence[str] | None = None,
    index_column: str | None = "record_id",
) -> pandas.DataFrame:
    """A ``pandas.DataFrame`` of a table's rows.

    ``table`` is an open :class:`loaderx.Table` or a dict of equal-length
    stores (a path: open it first, ``with loaderx.open_table(path) as t``).
    ``columns`` picks and orders the columns (default: all). Tensor columns
    become ``object`` columns of ndarrays with exact shapes (see the module
    docstring); the index is a ``RangeIndex`` named ``index_column``
    (``None``: unnamed). Needs pandas (``pip install 'loaderx[pandas]'``).
    """
    pd = require("pandas", "pandas")
    if not isinstance(table, Mapping):
        raise TypeError(
            "table must be a loaderx.Table or a dict of stores (open a path with "
            f"loaderx.open_table), got {type(table).__name__}"
        )
    return _frame(pd, table, columns, index_column)


def _frame(pd, streams, columns, index_column):
    _, names = drain_streams(streams)
    if index_column is not None and not isinstance(index_column, str):
        raise TypeError(f"index_column must be a str or None, got {type(index_column).__name__}")
    if columns is None:
        columns = names
    elif isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise TypeError("columns must be a list of column names")
    missing = [c for c in columns if c not in streams]
    if missing:
        raise KeyError(f"no column {missing[0]!r}; columns: {names}")
    lengths = {len(streams[c]) for c in names}
    if len(lengths) > 1:
        raise ValueError(f"columns must have equal lengths, got {sorted(lengths)}")
    n = lengths.pop() if lengths else 0
    pa = require_pyarrow()
    # One scan of the selected columns, in one batch: the frame is read into
    # memory whole, and one gather per column avoids concatenating batches.
    schema, batches = scan(pa, streams, None, columns=list(columns), max_bytes=None)
    batch = next(batches, None)
    if batch is None:  # no rows
        arrays = [c.combine_chunks() for c in schema.empty_table().columns]
    else:
        arrays = batch.columns
    data = {f.name: _column(pa, f, arr) for f, arr in zip(schema, arrays)}
    index = pd.RangeIndex(n, name=index_column)
    return pd.DataFrame(data, index=index, copy=False)
