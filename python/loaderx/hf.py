"""Tables as Hugging Face datasets and back (``pip install 'loaderx[hf]'``).

:func:`to_hf` (also ``Table.to_hf()``) gives a ``datasets.Dataset`` of a
table's rows, its columns typed the way ``datasets`` types them:

* a dense scalar column → ``Value(dtype)``;
* a dense tensor of shape ``(k,)`` → ``List(Value(dtype), length=k)``; of
  2 to 5 dimensions → ``Array2D`` ... ``Array5D`` of that shape;
* a ragged column of 1-D records → ``List(Value(dtype))``; of records with
  one ndim (2 to 5) and the same trailing dimensions → ``ArrayND`` with a
  variable first dimension (``shape=(None, ...)``);
* text → ``Value("large_string")``, binary → ``Value("large_binary")``;
  null rows stay null.

Other ragged columns (records of differing ndim or trailing shape) and
tensors of more than five dimensions have no ``datasets`` type: ValueError
naming the column. The dataset is built in memory from the table's Arrow
data (values buffers are reused, nested offsets are computed).

:func:`ingest` writes a ``datasets.Dataset`` as a new table, the mapping
reversed (``ArrayND`` with a fixed shape → a dense tensor column, with a
variable first dimension → a ragged column; lists → ragged 1-D records;
fixed-length lists → dense), through :func:`loaderx.arrow.ingest`.

``datasets`` is imported only by these functions.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from . import _native
from ._streams import (
    check_codec,
    check_path,
    is_ragged_struct,
    require,
    require_pyarrow,
    scan,
)

__all__ = ["to_hf", "ingest"]


def _dtype(pa_type) -> str:
    """The NumPy name of an Arrow value type (``float32``, ``bool``)."""
    return np.dtype(pa_type.to_pandas_dtype()).name


def _nest(pa, values, dims: list[int], first: Any, n: int, mask):
    """``values`` (flat, record after record) as nested lists of depth
    ``len(dims) + 1``: the innermost of ``dims[-1]`` values, ..., the
    outermost of ``first`` (an int, or per-record counts) per record."""
    arr = values
    for d in reversed(dims):
        count = len(arr) // d
        offsets = pa.array(np.arange(count + 1, dtype=np.int32) * d)
        arr = pa.ListArray.from_arrays(offsets, arr)
    if isinstance(first, (int, np.integer)):
        offsets = np.arange(n + 1, dtype=np.int32) * int(first)
    else:
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(first, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), arr, mask=mask)


def _to_hf_column(pa, datasets, name: str, arr):
    """One column of the table's Arrow data as ``(array, feature)``."""
    from datasets.features import features as hf

    t = arr.type
    mask = arr.is_null() if arr.null_count else None
    if isinstance(t, pa.FixedShapeTensorType):
        shape = list(t.shape)
        dtype = _dtype(t.value_type)
        if len(shape) == 1:
            return arr.storage, datasets.List(datasets.Value(dtype), length=shape[0])
        if len(shape) > 5:
            raise ValueError(
                f"column {name!r}: a tensor of {len(shape)} dimensions has no datasets type "
                "(Array2D ... Array5D hold 2 to 5)"
            )
        values = arr.storage.flatten()
        storage = _nest(pa, values, shape[1:], shape[0], len(arr), mask)
        ext = getattr(hf, f"Array{len(shape)}DExtensionType")(tuple(shape), dtype)
        feature = getattr(datasets, f"Array{len(shape)}D")(shape=tuple(shape), dtype=dtype)
        return pa.ExtensionArray.from_storage(ext, storage.cast(ext.storage_type)), feature
    if is_ragged_struct(pa, t):
        data, shape = arr.field("data"), arr.field("shape")
        value_type = t["data"].type.value_type
        dtype = _dtype(value_type)
        ndims = np.diff(np.asarray(shape.offsets))
        ndim = int(ndims[0]) if len(ndims) else 1
        if (ndims != ndim).any():
            raise ValueError(
                f"column {name!r}: its records differ in ndim, which no datasets type holds"
            )
        if ndim <= 1:
            lists = pa.ListArray.from_arrays(data.offsets, data.values, mask=mask)
            return lists, datasets.List(datasets.Value(dtype))
        if ndim > 5:
            raise ValueError(f"column {name!r}: records of {ndim} dimensions have no datasets type")
        dims = np.asarray(shape.values).reshape(-1, ndim)
        trailing = dims[:, 1:]
        if len(dims) and (trailing != trailing[0]).any():
            raise ValueError(
                f"column {name!r}: its records' trailing dimensions differ, but datasets' "
                f"Array{ndim}D varies only in the first"
            )
        tail = [int(d) for d in trailing[0]] if len(dims) else [1] * (ndim - 1)
        values = data.flatten()
        storage = _nest(pa, values, tail, dims[:, 0], len(arr), mask)
        ext = getattr(hf, f"Array{ndim}DExtensionType")((None, *tail), dtype)
        feature = getattr(datasets, f"Array{ndim}D")(shape=(None, *tail), dtype=dtype)
        return pa.ExtensionArray.from_storage(ext, storage.cast(ext.storage_type)), feature
    if pa.types.is_large_string(t) or pa.types.is_string(t):
        return arr.cast(pa.large_string()), datasets.Value("large_string")
    if pa.types.is_large_binary(t) or pa.types.is_binary(t):
        return arr.cast(pa.large_binary()), datasets.Value("large_binary")
    return arr, datasets.Value(_dtype(t))


def to_hf(table: Any, columns: list[str] | None = None) -> Any:
    """A ``datasets.Dataset`` of ``table``'s rows (a table or a dict of
    equal-length streams), ``columns`` selected (None: all), typed as the
    module docstring says."""
    pa = require_pyarrow()
    datasets = require("datasets", "hf", name="Hugging Face datasets")
    names = list(table) if columns is None else list(columns)
    unknown = [c for c in names if c not in table]
    if unknown:
        raise ValueError(f"table has no column {unknown[0]!r}; columns: {list(table)}")
    # The core's scan, in one batch: one gather per column.
    schema, batches = scan(pa, {n: table[n] for n in names}, None, max_bytes=None)
    data = pa.Table.from_batches(list(batches), schema)
    arrays, features = [], {}
    for name in names:
        arr, feature = _to_hf_column(pa, datasets, name, data.column(name).combine_chunks())
        arrays.append(arr)
        features[name] = feature
    hf_table = pa.Table.from_arrays(arrays, names=names)
    return datasets.Dataset(
        datasets.table.InMemoryTable(hf_table),
        info=datasets.DatasetInfo(features=datasets.Features(features)),
    )


def _from_hf_column(pa, name: str, arr):
    """One column of a dataset's Arrow data in the layout the ingest reads."""
    from datasets.features import features as hf

    t = arr.type
    if isinstance(t, hf._ArrayXDExtensionType):
        shape = list(t.shape)
        storage = arr.storage
        mask = storage.is_null() if storage.null_count else None
        values = storage
        for _ in shape:
            values = values.flatten()
        value_type = values.type
        if shape[0] is not None:
            size = int(np.prod(shape))
            fixed = pa.FixedSizeListArray.from_arrays(values, size, mask=mask)
            return pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(value_type, shape), fixed)
        # A variable first dimension: ragged records of shape (k_i, *tail).
        tail = [int(d) for d in shape[1:]]
        firsts = np.diff(np.asarray(storage.offsets))
        sizes = firsts * int(np.prod(tail))
        offsets = np.zeros(len(arr) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        data = pa.LargeListArray.from_arrays(pa.array(offsets), values)
        dims = np.column_stack([firsts, np.tile(tail, (len(arr), 1))]).astype(np.int64)
        shape_offsets = pa.array(np.arange(len(arr) + 1, dtype=np.int32) * len(shape))
        shapes = pa.ListArray.from_arrays(shape_offsets, pa.array(dims.ravel()))
        return pa.StructArray.from_arrays([data, shapes], ["data", "shape"], mask=mask)
    return arr


def ingest(dataset: Any, path: str | os.PathLike[str], *, codec: str = "zstd") -> str:
    """Writes the ``datasets.Dataset`` ``dataset`` as a new plain table at
    ``path`` (one store per column, the module docstring's mapping
    reversed) and returns its path. A column without a store mapping
    raises TypeError naming it, and nothing is left behind (as in
    :func:`loaderx.arrow.ingest`)."""
    pa = require_pyarrow()
    datasets = require("datasets", "hf", name="Hugging Face datasets")
    root = check_path(path)
    blob = check_codec(codec, None)
    if not isinstance(dataset, datasets.Dataset):
        raise TypeError(f"dataset must be a datasets.Dataset, got {type(dataset).__name__}")
    data = dataset.with_format("arrow")[:] if dataset.num_rows else dataset.data.table
    if not isinstance(data, pa.Table):
        data = pa.table(data)
    columns = [
        _from_hf_column(pa, name, data.column(name).combine_chunks()) for name in data.column_names
    ]
    source = pa.Table.from_arrays(columns, names=data.column_names)
    fresh_root = not os.path.exists(root)
    os.makedirs(root, exist_ok=True)
    try:
        _native.arrow_ingest(source, root, codec, blob)
    except BaseException:
        if fresh_root and not os.listdir(root):
            os.rmdir(root)  # leave nothing behind
        raise
    return root
