"""Tables as lazy polars frames: :func:`scan_table`.

>>> import os, tempfile
>>> import numpy as np
>>> import loaderx
>>> train = os.path.join(tempfile.mkdtemp(), "train")
>>> images = loaderx.DenseStore.create(os.path.join(train, "image"), np.uint8, (3, 8, 8))
>>> images.append(np.zeros((12, 3, 8, 8), np.uint8))
>>> labels = loaderx.DenseStore.create(os.path.join(train, "label"), np.int64, ())
>>> labels.append(np.arange(12) % 4)
>>> images.close(); labels.close()
>>> import polars as pl
>>> import loaderx.polars
>>> lf = loaderx.polars.scan_table(train)
>>> df = lf.filter(pl.col("label") == 3).select("record_id", "image").collect().sort("record_id")
>>> df["record_id"].to_list(), df["image"].dtype
([3, 7, 11], Array(UInt8, shape=(3, 8, 8)))

The scan is a polars IO plugin (``polars.io.plugins.register_io_source``).
Column types, known without reading a record:

* ``record_id`` (``index_column``): ``UInt64``, the row number, first;
* dense, ``item_shape == ()`` → the dtype (``Int64``, ``Float32``, ...);
* dense, ``item_shape == S`` → ``Array(dtype, S)`` (the records' memory,
  no copy);
* ragged → ``List(dtype)`` of each record's values, flattened in C order (a
  ragged store fixes no ndim, so nested lists cannot be typed up front; for
  1-D records this is the record itself). ``ragged="struct"`` gives
  ``Struct{data: List(dtype), shape: List(Int32)}`` instead, which keeps
  every record's exact shape (the Arrow mapping, as ``pl.Series(store)``);
* a column whose Arrow type is utf8 or binary → ``String`` / ``Binary``.

Pushdown: only the projected columns are gathered. ``record_id``,
columnar, scalar and text columns are *cheap*: a predicate that reads only
cheap columns is evaluated on them first, batch by batch, and the other
projected columns are then gathered for the surviving rows only (one gather
per column per batch). When every column a collect reads is columnar (or
``record_id``), they are read as whole arrays in frames of up to 32 MiB
(every chunk decoded on the core's threads straight into them) and polars
applies the predicate itself. A predicate that reads a heavy column is
evaluated after gathering what it needs. ``head(n)`` / ``limit(n)`` stops
the scan after ``n`` rows; other slices stop early under polars' streaming
engine.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from ._streams import (
    check_index_column,
    check_path,
    check_storage_options,
    drain_streams,
    is_ragged_struct,
    is_remote,
    require,
    require_pyarrow,
    scan,
)
from ._typing import PathLike, Streams

if TYPE_CHECKING:
    import polars

__all__ = ["scan_table"]

#: Bytes of a frame of columnar columns read whole (polars filters it).
BULK_BYTES = 32 << 20


class _Column:
    """How one stream becomes a polars Series, told by its Arrow type."""

    def __init__(self, pa, pl, name: str, store, ragged: str):
        self.name = name
        self.store = store
        self.ragged_mode = ragged
        t = pa.field(store).type
        self.item_shape = None
        self.ragged = False
        if isinstance(t, pa.FixedShapeTensorType):
            self.item_shape = tuple(t.shape)
        elif pa.types.is_fixed_size_list(t):
            self.item_shape = (t.list_size,)
        elif is_ragged_struct(pa, t):
            self.ragged = True
        # Cheap: read whole to evaluate a predicate (the core's rule).
        self.cheap = store._native.cheap
        self.columnar = store.layout == "columnar"
        self._pa, self._pl = pa, pl

    @functools.cached_property
    def dtype(self):
        """The Series' polars type (asked of an empty gather, once: a scan's
        frames need the rest of what the column knows, not this)."""
        return self.series(self._pa, self._pl, self.store.to_arrow(np.empty(0, np.int64))).dtype

    def gather(self, pa, pl, idx: np.ndarray):
        return self.series(pa, pl, self.store.to_arrow(idx))

    def series(self, pa, pl, arr):
        n = len(arr)
        if self.item_shape is not None:
            # arrow.fixed_shape_tensor over FixedSizeList: the flat values,
            # reshaped into a polars Array without copying.
            values = arr.storage if isinstance(arr.type, pa.BaseExtensionType) else arr
            if isinstance(values.type, pa.FixedSizeListType):
                values = values.flatten()
            return pl.Series(self.name, values).reshape((n, *self.item_shape))
        if self.ragged and self.ragged_mode == "list":
            return pl.Series(self.name, arr.flatten()[0])
        return pl.Series(self.name, arr)


def _columns(pa, pl, streams: Mapping, ragged: str) -> dict:
    drain_streams(streams)  # checks names and store types, raises if closed
    return {name: _Column(pa, pl, name, store, ragged) for name, store in streams.items()}


def _schema(pl, columns: dict, index_column: str | None) -> dict:
    schema = {}
    if index_column is not None:
        schema[index_column] = pl.UInt64
    for name, col in columns.items():
        schema[name] = col.dtype
    return schema


def scan_table(
    path_or_table: PathLike | Streams,
    *,
    batch_rows: int | None = None,
    index_column: str | None = "record_id",
    ragged: str = "list",
    pushdown: bool = True,
    storage_options: dict[str, str] | None = None,
) -> polars.LazyFrame:
    """A ``polars.LazyFrame`` over a table, read as it is collected.

    ``path_or_table`` is a table directory (plain or sharded; opened
    read-only at each collect and closed when the scan ends), an open
    :class:`loaderx.Table`, or any dict of equal-length stores (left open).
    The frame has a UInt64 ``index_column`` (``"record_id"``; ``None`` omits
    it) first, then one column per stream; see the module docstring for the
    types and ``ragged``. ``batch_rows`` is the number of rows per produced
    frame (default: about 16 MiB of the projected columns).

    Projection, predicate and ``head``/``limit`` are pushed into the scan
    (see the module docstring). ``pushdown=False`` turns that off: every
    column of every row is gathered and polars then filters, projects and
    slices (the baseline of ``benches/bench_polars.py``).

    A path may be a URI (``s3://``, ``gs://``, ``az://``, ``http(s)://``),
    opened with ``storage_options`` as :func:`loaderx.open_table` does.

    Raises FileNotFoundError when the path is not a directory, and what
    :func:`loaderx.open_table` raises. Needs polars and pyarrow
    (``pip install 'loaderx[polars]'``).
    """
    pl = require("polars", "polars", user="loaderx.polars")
    pa = require_pyarrow()
    from polars.io.plugins import register_io_source

    if ragged not in ("list", "struct"):
        raise ValueError(f"ragged must be 'list' or 'struct', got {ragged!r}")
    if batch_rows is not None and (type(batch_rows) is not int or batch_rows < 1):
        raise ValueError(f"batch_rows must be a positive int or None, got {batch_rows!r}")
    if not isinstance(pushdown, (bool, np.bool_)):
        raise TypeError(f"pushdown must be a bool, got {type(pushdown).__name__}")

    if isinstance(path_or_table, Mapping):
        streams, path, options = path_or_table, None, None
        _, names = drain_streams(streams)
        check_index_column(index_column, names)
        schema = _schema(pl, _columns(pa, pl, streams, ragged), index_column)
    else:
        from .table import open_table

        path = check_path(path_or_table)
        options = check_storage_options(storage_options)
        if not is_remote(path) and not os.path.isdir(path):
            raise FileNotFoundError(f"no table at {path}: not a directory")
        with open_table(path, storage_options=options) as table:
            check_index_column(index_column, list(table))
            schema = _schema(pl, _columns(pa, pl, table, ragged), index_column)
        streams = None

    plan = _Scan(pa, pl, schema, index_column, ragged, batch_rows, pushdown)

    def source(with_columns, predicate, n_rows, batch_size) -> Iterator:
        if path is None:
            yield from plan.frames(streams, with_columns, predicate, n_rows)
            return
        from .table import open_table

        with open_table(path, storage_options=options) as table:
            yield from plan.frames(table, with_columns, predicate, n_rows)

    label = path if path is not None else f"{len(schema)} columns"
    return register_io_source(
        source,
        schema=schema,
        explain_name="loaderx",
        explain_detail=f"table {label}" + ("" if pushdown else " (pushdown off)"),
    )


class _Scan:
    """One scan's settings; :meth:`frames` runs one collect."""

    def __init__(self, pa, pl, schema, index_column, ragged, batch_rows, pushdown):
        self.pa, self.pl = pa, pl
        self.schema = schema
        self.index_column = index_column
        self.ragged = ragged
        self.batch_rows = batch_rows
        self.pushdown = pushdown

    def frames(self, streams, with_columns, predicate, n_rows) -> Iterator:
        """Yields the frames of one collect, read by the core's table scan
        (one native call per batch, bounded in bytes and ``batch_rows``)."""
        pa, pl = self.pa, self.pl
        schema, index_column = self.schema, self.index_column
        columns = _columns(pa, pl, streams, self.ragged)
        expected = [c for c in schema if c != index_column]
        if list(columns) != expected:
            raise ValueError(
                f"the table's columns changed since scan_table: "
                f"{expected} then, {list(columns)} now"
            )
        lengths = {name: len(col.store) for name, col in columns.items()}
        num_rows = next(iter(lengths.values()), 0)
        for name, n in lengths.items():
            if n != num_rows:
                raise ValueError(f"column {name!r} has {n} rows, expected {num_rows}")

        def read(names, **kw) -> Iterator:
            kw.setdefault("max_rows", self.batch_rows)
            _, batches = scan(pa, streams, index_column, columns=names, **kw)
            for batch in batches:
                yield self.frame(columns, batch)

        wanted = list(with_columns) if with_columns is not None else list(schema)
        yielded = False
        if not self.pushdown:
            # Baseline: read everything, then let polars do what the plan asks.
            out_rows = 0
            for df in read(list(schema)):
                if predicate is not None:
                    df = df.filter(predicate)
                if with_columns is not None:
                    df = df.select(with_columns)
                if n_rows is not None:
                    df = df.head(n_rows - out_rows)
                out_rows += df.height
                yielded = True
                yield df
                if n_rows is not None and out_rows >= n_rows:
                    return
        elif predicate is None:
            for df in read(wanted, limit=n_rows, **self.bulk(columns, wanted)):
                yielded = True
                yield df
        elif self.bulk(columns, wanted + predicate.meta.root_names()):
            # Columnar columns only: whole arrays (every chunk decoded in
            # parallel straight into them), filtered by polars itself.
            names = list(dict.fromkeys(predicate.meta.root_names()))
            need = wanted + [c for c in names if c not in wanted]
            remaining = num_rows if n_rows is None else n_rows
            # The predicate as the core's: it reads only the chunks that
            # may match, and when it says its answer is exact polars need
            # not filter again (then the columns only it reads stay
            # unread); otherwise polars applies the whole of it to what
            # comes back.
            columnar = {c: schema[c] for c in columns if columns[c].columnar}
            native = native_predicate(predicate, columnar)
            got = None
            if native is not None:
                got = scan(
                    pa,
                    streams,
                    index_column,
                    columns=wanted,
                    limit=n_rows,
                    max_rows=self.batch_rows,
                    predicate=native,
                    predicate_exact=True,
                    **self.bulk(columns, wanted),
                )
            if got is not None:
                for batch in got[1]:
                    yielded = True
                    yield self.frame(columns, batch)
            else:
                frames = read(need, predicate=native, **self.bulk(columns, need))
                for df in _filtered(frames, predicate, wanted, remaining):
                    yielded = True
                    yield df
        else:
            names = list(dict.fromkeys(predicate.meta.root_names()))
            cheap = bool(names) and all(
                c == index_column or (c in columns and columns[c].cheap) for c in names
            )
            if cheap:
                # The core evaluates the predicate on its cheap columns first
                # (SCAN_FILTER_ROWS rows a call) and gathers the projected
                # columns for the survivors only.
                def keep(batch):
                    mask = pl.from_arrow(batch).select(predicate.alias("keep"))["keep"]
                    return mask.to_arrow()

                for df in read(wanted, limit=n_rows, filter=keep, filter_columns=names):
                    yielded = True
                    yield df
            else:
                remaining = num_rows if n_rows is None else n_rows
                need = wanted + [c for c in names if c not in wanted]
                for df in _filtered(read(need), predicate, wanted, remaining):
                    yielded = True
                    yield df
        if not yielded:
            yield _empty(pa, pl, columns, index_column, wanted)

    def bulk(self, columns, names) -> dict:
        """The scan arguments that read ``names`` in frames of up to
        :data:`BULK_BYTES` when every one is columnar (or the index column)
        and no ``batch_rows`` was asked for; none otherwise."""
        columnar = all(c == self.index_column or columns[c].columnar for c in names)
        if columnar and self.batch_rows is None:
            return {"max_bytes": BULK_BYTES}
        return {}

    def frame(self, columns, batch):
        """A scan batch as a frame, each column typed as :class:`_Column` says."""
        pl = self.pl
        out = []
        for name, arr in zip(batch.schema.names, batch.columns):
            if name == self.index_column:
                out.append(pl.Series(name, arr))
            else:
                out.append(columns[name].series(self.pa, pl, arr))
        return pl.DataFrame(out, height=batch.num_rows)


_CMP = {"Eq": "eq", "NotEq": "ne", "Lt": "lt", "LtEq": "le", "Gt": "gt", "GtEq": "ge"}
_SWAP = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
_UNKNOWN = {"unknown": True}


def _literal(node):
    """A polars literal node as the core's literal, or None."""
    lit = node.get("Literal") if isinstance(node, dict) else None
    if not isinstance(lit, dict) or len(lit) != 1:
        return None
    ((kind, body),) = lit.items()
    if not isinstance(body, dict) or len(body) != 1:
        return None
    ((tag, value),) = body.items()
    if isinstance(value, bool):
        return {"int": int(value)} if tag == "Boolean" else None
    if isinstance(value, int) and tag.startswith(("Int", "UInt")):
        return {"int": value}
    if isinstance(value, float) and tag.startswith("Float") and math.isfinite(value):
        return {"float": value}
    if isinstance(value, str) and tag == "String":
        return {"str": value}
    return None


def _as_compared(dtype, value: dict) -> dict:
    """The literal ``value`` as polars compares it with a column of
    ``dtype``: cast to the column's float type (a float32 column compares
    with the literal rounded to float32)."""
    if str(dtype) not in ("Float32", "Float64") or "str" in value:
        return value
    x = float(value.get("float", value.get("int")))
    if str(dtype) == "Float32":
        x = float(np.float32(x))
    return {"float": x} if math.isfinite(x) else None


# What a regular expression matches as itself: letters, digits, space and
# punctuation that is no operator (anything past ASCII is a literal too).
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-,:;'\"=!@%/")


def _text_test(inputs, function, columnar: dict):
    """``str.contains`` (a literal, or a pattern that is one),
    ``str.starts_with`` and ``str.ends_with`` of a columnar column by a
    string as the core's substring, prefix and suffix tests; None for
    anything else."""
    if not (isinstance(inputs, list) and len(inputs) == 2 and isinstance(function, dict)):
        return None
    name = inputs[0].get("Column") if isinstance(inputs[0], dict) else None
    value = _literal(inputs[1])
    if not (isinstance(name, str) and name in columnar and value and "str" in value):
        return None
    s, test = value["str"], function.get("StringExpr")
    if test in ("StartsWith", "EndsWith"):
        return {"starts_with" if test == "StartsWith" else "ends_with": [name, s]}
    contains = test.get("Contains") if isinstance(test, dict) else None
    if isinstance(contains, dict) and (
        contains.get("literal") is True or all(c in _PLAIN or ord(c) > 127 for c in s)
    ):
        return {"contains": [name, s]}
    return None


def _translate(node, columnar: dict) -> dict:
    """A polars expression node (its JSON form) as the core's predicate
    (its JSON form): what it does not take is ``{"unknown": true}``, which
    may hold on any row. Floats compare in polars' order (every NaN
    largest, -0 equal to +0). Whether the core's answer is exact is the
    core's to say."""
    if not isinstance(node, dict) or len(node) != 1:
        return _UNKNOWN
    ((kind, body),) = node.items()
    if kind == "BinaryExpr" and isinstance(body, dict):
        op = body.get("op")
        left, right = body.get("left"), body.get("right")
        if op in ("And", "LogicalAnd", "Or", "LogicalOr"):
            a, b = _translate(left, columnar), _translate(right, columnar)
            return {"or" if op in ("Or", "LogicalOr") else "and": [a, b]}
        cmp = _CMP.get(op)
        if cmp is None:
            return _UNKNOWN
        for col, lit, o in ((left, right, cmp), (right, left, _SWAP[cmp])):
            name = col.get("Column") if isinstance(col, dict) else None
            value = _literal(lit)
            if isinstance(name, str) and name in columnar and value is not None:
                value = _as_compared(columnar[name], value)
                if value is None:
                    return _UNKNOWN
                return {"cmp": [name, o, value], "floats": "nan_last"}
        return _UNKNOWN
    if kind == "Function" and isinstance(body, dict):
        inputs, function = body.get("input"), body.get("function")
        text = _text_test(inputs, function, columnar)
        if text is not None:
            return text
        if isinstance(inputs, list) and len(inputs) == 1 and isinstance(function, dict):
            name = inputs[0].get("Column") if isinstance(inputs[0], dict) else None
            test = function.get("Boolean")
            if isinstance(name, str) and name in columnar and test in ("IsNull", "IsNotNull"):
                return {"is_null" if test == "IsNull" else "is_not_null": name}
    return _UNKNOWN


def native_predicate(predicate, columnar: dict) -> str | None:
    """The polars ``predicate`` as the core's predicate over the
    ``columnar`` columns (name to polars type), as JSON: the core prunes
    chunks by it, evaluates it on the stored chunks and says whether its
    answer is exact. None when the core takes nothing of it."""
    import json

    try:
        tree = json.loads(predicate.meta.serialize(format="json"))
    except Exception:  # noqa: BLE001 - an expression polars cannot serialise
        return None
    found = _translate(tree, columnar)
    return None if found == _UNKNOWN else json.dumps(found)


def _filtered(frames, predicate, wanted: list, limit: int):
    """The rows of ``frames`` that ``predicate`` keeps, of the columns
    ``wanted``, at most ``limit`` in all; frames left empty are dropped."""
    for df in frames:
        df = df.filter(predicate).select(wanted).head(limit)
        limit -= df.height
        if df.height:
            yield df
        if limit <= 0:
            return


def _empty(pa, pl, columns, index_column, names):
    """The named columns with no rows."""
    idx = np.empty(0, np.int64)
    out = []
    for name in names:
        if name == index_column:
            out.append(pl.Series(name, [], dtype=pl.UInt64))
        else:
            out.append(columns[name].gather(pa, pl, idx))
    return pl.DataFrame(out)
