"""What :class:`loaderx.Table`'s evolution methods do (``append``,
``add_columns``, ``drop_columns``): turning their inputs into Arrow data cut
at shard boundaries and handing each shard's part to the core in one native
call. The core commits every change as one new version."""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable, Mapping

import numpy as np

from . import _native
from ._streams import require_pyarrow

#: Rows per call of an ``add_columns`` function.
BATCH_ROWS = 4096


def _array(pa, name: str, values):
    """One column's values as an Arrow array (ValueError naming the column
    for what cannot be one)."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if hasattr(values, "to_arrow") and not isinstance(values, np.ndarray):
        return values.to_arrow()  # a polars Series
    if isinstance(values, np.ndarray):
        if values.ndim == 0:
            raise ValueError(f"column {name!r}: expected one value per row, got a 0-d array")
        if values.ndim == 1:
            return pa.array(values)
        return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(values))
    if isinstance(values, (list, tuple)):
        if all(isinstance(v, str) for v in values):
            return pa.array(values, pa.string())
        if all(isinstance(v, (bytes, bytearray, memoryview)) for v in values):
            return pa.array([bytes(v) for v in values], pa.binary())
        if all(isinstance(v, np.ndarray) for v in values) and values:
            shapes = {v.shape for v in values}
            if len(shapes) == 1:
                return _array(pa, name, np.stack(values))
            if all(v.ndim == 1 for v in values):
                return pa.array(values)
            data = pa.array([np.ascontiguousarray(v).reshape(-1) for v in values])
            shape = pa.array([list(v.shape) for v in values], pa.list_(pa.int32()))
            return pa.StructArray.from_arrays([data, shape], ["data", "shape"])
        try:
            return pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(f"column {name!r}: {exc}") from None
    raise TypeError(
        f"column {name!r}: expected a NumPy array, a list, a pyarrow Array or a polars "
        f"Series, got {type(values).__name__}"
    )


def as_table(data, rows: int | None, what: str):
    """``data`` (a mapping of name to values, a pyarrow Table or
    RecordBatchReader, a polars DataFrame, anything with
    ``__arrow_c_stream__``) as a pyarrow Table or reader; with ``rows``,
    a mapping's columns must have that many values (ValueError naming the
    column otherwise)."""
    pa = require_pyarrow()
    if isinstance(data, Mapping):
        if not data:
            raise ValueError(f"{what} must name at least one column, got an empty mapping")
        arrays = {}
        for name, values in data.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"{what}: column names must be non-empty str, got {name!r}")
            arr = _array(pa, name, values)
            if rows is not None and len(arr) != rows:
                raise ValueError(f"column {name!r} has {len(arr)} rows, but the table has {rows}")
            arrays[name] = arr
        lengths = {len(a) for a in arrays.values()}
        if len(lengths) > 1:
            raise ValueError(
                f"{what}: columns must have equal lengths, got "
                + ", ".join(f"{n!r}: {len(a)}" for n, a in arrays.items())
            )
        return pa.table(arrays)
    if isinstance(data, (pa.Table, pa.RecordBatchReader)):
        return data
    if hasattr(data, "to_arrow"):
        return data.to_arrow()  # polars
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    raise TypeError(
        f"{what} must be a mapping of column to values, a pyarrow Table or RecordBatchReader, "
        f"a polars DataFrame or an Arrow stream, got {type(data).__name__}"
    )


def _empty(pa, schema):
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def add_columns(table, columns, read_columns, codec: str, workers: int | None, layout=None):
    """Writes the new columns of every shard of the sharded ``table`` (a
    :class:`loaderx.Table` at its latest version) and commits them as one
    version; returns it and what the commit learnt of it (a
    ``_native.TableBasis`` or None)."""
    write = _native.ColumnsWrite(table.path, table._storage_options, table.version, table._basis)
    shards = write.shards()
    starts = live_starts(shards)
    try:
        if not callable(columns) or isinstance(columns, Mapping):
            if read_columns is not None:
                raise ValueError("read_columns is for a function, got data to add")
            source = as_table(columns, table.num_rows, "columns")
            pool = workers or (os.cpu_count() or 1)
            if workers is None and table.remote:
                # Uploads wait on the network: every shard's at once (up to 8).
                pool = max(pool, min(len(shards), 8))
            # Cut at the shards' boundaries and written in the core.
            write.write_groups(source, codec, layout, pool)
            return write.commit(), write.committed_basis()
        read_columns = check_read_columns(table, read_columns)
        parts = (
            (i, function_run(table, columns, read_columns, starts[i], starts[i + 1]))
            for i in range(len(shards))
        )
        pool = workers or 1
        schema = None
        deferred = []
        # Each shard is written as soon as its part is made; a shard without
        # live rows waits for the new columns' types from the others.
        with concurrent.futures.ThreadPoolExecutor(pool) as ex:
            futures = []
            for i, run in parts:
                if not run:
                    deferred.append(i)
                    continue
                schema = run[0].schema
                if pool == 1:
                    write.write_group(i, run, codec, layout)
                else:
                    futures.append(ex.submit(write.write_group, i, run, codec, layout))
            for f in futures:
                f.result()
        write_empty(write, deferred, schema, codec, layout)
        return write.commit(), write.committed_basis()
    except BaseException:
        write.discard()
        raise


def live_starts(shards) -> list[int]:
    """The first record id of each shard's live rows, then the total."""
    return [0, *np.cumsum([live for _, _, live in shards]).tolist()]


def write_empty(write, empty: list[int], schema, codec: str, layout=None) -> None:
    """Writes the groups of the shards ``empty`` (without live rows) with
    the new columns' ``schema``."""
    if not empty:
        return
    if schema is None:
        raise ValueError(
            "the table has no live rows to compute or take the new columns' types from"
        )
    pa = require_pyarrow()
    for i in empty:
        # The native write lays the empty batch over the shard's deleted
        # rows (nulls).
        write.write_group(i, [_empty(pa, schema)], codec, layout)


def check_read_columns(table, read_columns) -> list[str]:
    if read_columns is None:
        raise ValueError("read_columns must name the columns the function reads, got None")
    if isinstance(read_columns, str):
        read_columns = [read_columns]
    read_columns = list(read_columns)
    unknown = [c for c in read_columns if c not in table]
    if unknown:
        raise ValueError(
            f"read_columns names {unknown[0]!r}, which table {table.path!r} does not have "
            f"(its columns: {list(table)})"
        )
    return read_columns


def function_run(table, fn: Callable, read_columns: list[str], lo: int, hi: int) -> list:
    """The batches of new columns ``fn`` makes from the rows ``lo..hi`` of
    ``read_columns``, called on batches of :data:`BATCH_ROWS` rows (one
    gather per column each) in row order."""
    run, names = [], None
    for start in range(lo, hi, BATCH_ROWS):
        stop = min(start + BATCH_ROWS, hi)
        idx = np.arange(start, stop, dtype=np.int64)
        out = fn({c: table[c][idx] for c in read_columns})
        if not isinstance(out, Mapping):
            raise TypeError(
                "the add_columns function must return a mapping of column to values, "
                f"got {type(out).__name__}"
            )
        got = as_table(out, stop - start, "the add_columns function's result")
        if names is None:
            names = got.column_names
        elif got.column_names != names:
            raise ValueError(
                f"the add_columns function returned columns {got.column_names} for rows "
                f"{start}..{stop}, but {names} before"
            )
        run += got.to_batches()
    return run


def check_names(names, what: str) -> list[str]:
    if isinstance(names, str):
        names = [names]
    names = list(names)
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{what} must be a column name or a list of them, got {names!r}")
    return names


def record_ids(table, rows, what: str) -> np.ndarray:
    """``rows`` (record ids, a bool mask of ``num_rows``, or an SQL
    predicate as in a ``WHERE`` clause of :func:`loaderx.sql`) as sorted,
    unique uint64 record ids of ``table``; ValueError naming ``what``, the
    expected and the actual value otherwise."""
    n = table.num_rows
    if isinstance(rows, str):
        from ._sql import sql

        if not rows.strip():
            raise ValueError(f"{what} must be a non-empty SQL predicate, got {rows!r}")
        try:
            found = sql(f"SELECT record_id FROM t WHERE {rows}", t=table)
        except Exception as exc:  # noqa: BLE001 - named with the predicate
            raise ValueError(f"{what}: the predicate {rows!r} failed: {exc}") from exc
        ids = np.asarray(found["record_id"].to_numpy(), dtype=np.uint64)
        return np.unique(ids)
    arr = np.asarray(rows)
    if arr.dtype == np.bool_:
        if arr.shape != (n,):
            raise ValueError(f"{what}: a bool mask must have shape ({n},), got {arr.shape}")
        return np.flatnonzero(arr).astype(np.uint64)
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ValueError(
            f"{what} must be record ids (a 1-D integer array), a bool mask of {n} rows or an "
            f"SQL predicate, got {type(rows).__name__} of dtype {arr.dtype} and shape {arr.shape}"
        )
    arr = arr.astype(np.int64, copy=False) if arr.dtype != np.uint64 else arr
    if arr.size and (arr.min() < 0 or int(arr.max()) >= n):
        bad = arr[(arr < 0) | (arr >= n)][0]
        raise ValueError(f"{what}: record ids must be in 0..{n}, got {int(bad)}")
    return np.unique(arr.astype(np.uint64))
