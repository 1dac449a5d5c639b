"""Plain tables as Ray Data datasets (``pip install 'loaderx[ray]'``).

:func:`read_table` reads a plain table (see :func:`loaderx.open_table`) into a
``ray.data.Dataset`` through :class:`TableDatasource`. Read tasks cover
contiguous record ranges and open the column stores read-only inside the
workers, so any number of tasks on any number of nodes (sharing the table's
filesystem) read at once. Each task yields Arrow tables of at most about
16 MiB, gathering each selected column once per block. Row order is record
order. Columns, after the UInt64 ``record_id`` (unless ``index_column=None``):

* dense, ``item_shape == ()`` → a primitive column of the dtype;
* dense, ``item_shape == S`` → ``arrow.fixed_shape_tensor`` (pyarrow's
  ``FixedShapeTensorType``): numpy batches are ``(n, *S)`` arrays;
* ragged → Ray's ``ArrowVariableShapedTensorType``: numpy batches are object
  arrays holding each record with its exact shape (Ray's type needs one ndim
  per block, so a block whose records differ in ndim raises ValueError).

>>> ds = loaderx.ray.read_table("data/train", columns=["image", "label"])  # doctest: +SKIP
>>> next(ds.iter_batches(batch_format="numpy"))["image"].shape           # doctest: +SKIP
(256, 3, 32, 32)

``ray`` is imported only when this module's Ray names are used; without it
they raise ImportError naming the ``loaderx[ray]`` extra.
"""

from __future__ import annotations

import os

import numpy as np

from ._streams import BATCH_BYTES, check_index_column, check_path, require_pyarrow
from .table import column_names, open_store, open_table

# TableDatasource is built on first access (module __getattr__), so importing
# this module does not import Ray.
__all__ = ["read_table", "TableDatasource"]  # noqa: F822


def _require_ray():
    """The ``ray`` module with Ray Data, or ImportError naming the extra."""
    try:
        import ray
        import ray.data
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "this needs Ray Data, an optional dependency: pip install 'loaderx[ray]'"
        ) from exc
    return ray


def _check_columns(path: str, columns, available: list[str]) -> list[str]:
    if columns is None:
        return list(available)
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise TypeError(f"columns must be a list of column names or None, got {columns!r}")
    columns = list(columns)
    if not columns:
        raise ValueError("columns must name at least one column (or be None for all)")
    unknown = [c for c in columns if c not in available]
    if unknown:
        raise ValueError(f"table {path} has no column {unknown[0]!r}; columns: {available}")
    if len(set(columns)) != len(columns):
        raise ValueError(f"columns names a column twice: {columns}")
    return columns


def _row_bytes(store) -> int:
    """Arrow bytes per record of ``store``, from metadata alone (no record
    is decoded): exact for dense; for ragged, the stored (compressed) bytes
    per record plus Ray's per-row offsets and shape, a lower bound that the
    read tasks refine from the blocks they build."""
    if store._kind == "dense":
        return store.dtype.itemsize * int(np.prod(store.item_shape, dtype=np.int64))
    stats = store._drain().stats()
    records = max(1, stats["records"])
    return -(-stats["live_bytes"] // records) + 32


def _ragged_column(name: str, arrow_struct):
    """The native ragged struct ``{data: List<T>, shape: List<Int32>}`` as
    Ray's variable-shaped tensor array (``{data: LargeList<T>, shape:
    List<Int64>}``); the values buffer is reused, offsets are widened."""
    pa = require_pyarrow()
    from ray.data.extensions import ArrowVariableShapedTensorType

    shape = arrow_struct.field("shape")
    lengths = np.diff(np.asarray(shape.offsets))
    ndim = int(lengths[0]) if len(lengths) else 1
    if len(lengths) and (lengths != ndim).any():
        other = int(lengths[lengths != ndim][0])
        raise ValueError(
            f"column {name!r}: Ray's variable-shaped tensor type needs one ndim per block, "
            f"but records of this block have ndim {ndim} and {other}"
        )
    data = arrow_struct.field("data").cast(pa.large_list(arrow_struct.type["data"].type.value_type))
    shape = shape.cast(pa.list_(pa.int64()))
    ext = ArrowVariableShapedTensorType(data.type.value_type, ndim)
    storage = pa.StructArray.from_arrays([data, shape], ["data", "shape"])
    return ext.wrap_array(storage)


class _TableReader:
    """What a read task runs: opens the selected columns read-only, yields
    Arrow tables over record ranges of at most ``block_rows`` rows, and closes
    the stores. Picklable (it holds only the path and plan)."""

    def __init__(self, path, columns, index_column, start, stop, block_rows):
        self.path = path
        self.columns = columns
        self.index_column = index_column
        self.start = start
        self.stop = stop
        self.block_rows = block_rows

    def __call__(self):
        stores = {}
        try:
            for name in self.columns:
                stores[name] = open_store(os.path.join(self.path, name), readonly=True)
            lo, rows = self.start, self.block_rows
            while True:
                hi = min(self.stop, lo + rows)
                block = _block(stores, self.index_column, lo, hi)
                yield block
                if hi >= self.stop:
                    break
                # Size the next block from the bytes this one really took.
                rows = max(1, BATCH_BYTES * (hi - lo) // max(1, block.nbytes))
                lo = hi
        finally:
            for s in stores.values():
                s.close()


def _block(stores: dict, index_column, lo: int, hi: int):
    """Records ``lo..hi`` of ``stores`` as a ``pyarrow.Table``: one gather
    per column."""
    pa = require_pyarrow()
    arrays, names = [], []
    if index_column is not None:
        arrays.append(pa.array(np.arange(lo, hi, dtype=np.uint64)))
        names.append(index_column)
    index = np.arange(lo, hi, dtype=np.int64)
    for name, store in stores.items():
        if store._kind == "ragged":
            arr = _ragged_column(name, store.to_arrow(index))
        elif store.dtype == np.bool_ and store.item_shape != ():
            # pyarrow cannot turn a bool fixed_shape_tensor into NumPy; Ray's
            # own tensor type can.
            from ray.data.extensions import ArrowTensorArray

            arr = ArrowTensorArray.from_numpy(store[index])
        else:
            arr = store.to_arrow(index)
        arrays.append(arr)
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def _datasource_class():
    """Builds :class:`TableDatasource` on first use, so that importing this
    module does not import Ray."""
    cached = globals().get("_TableDatasource")
    if cached is not None:
        return cached
    _require_ray()
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class TableDatasource(Datasource):
        """A ``ray.data.Datasource`` over the plain table at ``path``.

        ``columns`` selects columns (None: all, in name order);
        ``index_column`` names the UInt64 record-number column placed first
        (None: none). Use with ``ray.data.read_datasource``, or through
        :func:`read_table`. The table is checked here, on the driver: a path
        that is not a table raises FileNotFoundError, an unknown column or
        columns of unequal length ValueError. Ray's projection pushdown
        (``ds.select_columns``) narrows the columns read as well.
        """

        def __init__(self, path, *, columns=None, index_column: str | None = "record_id"):
            super().__init__()
            self._projection_map = None  # the pushdown mixin's state: all columns
            path = os.path.abspath(check_path(path))
            if not os.path.isdir(path):
                raise FileNotFoundError(f"table directory {path} does not exist")
            available = column_names(path)
            columns = _check_columns(path, columns, available)
            check_index_column(index_column, available)
            # Opening checks every column and their equal lengths; it decodes
            # no record.
            with open_table(path, readonly=True) as table:
                self._num_rows = table.num_rows
            self._path = path
            self._columns = columns
            self._index_column = index_column
            # Per column, filled on the driver on first need, for selected
            # columns only: bytes per row and Arrow field.
            self._row_bytes: dict = {}
            self._fields: dict = {}

        def _column_row_bytes(self, name: str) -> int:
            if name not in self._row_bytes:
                with open_store(os.path.join(self._path, name)) as store:
                    self._row_bytes[name] = _row_bytes(store)
            return self._row_bytes[name]

        def _schema(self, columns, index_column):
            """The Arrow schema of the blocks, from metadata alone; None when
            a ragged column is selected (its ndim is known only from records,
            so Ray takes the schema from the first block)."""
            pa = require_pyarrow()
            fields = []
            if index_column is not None:
                fields.append(pa.field(index_column, pa.uint64()))
            for name in columns:
                if name not in self._fields:
                    with open_store(os.path.join(self._path, name)) as store:
                        if store._kind == "ragged":
                            self._fields[name] = None
                        else:  # an empty gather decodes nothing
                            self._fields[name] = _block({name: store}, None, 0, 0).schema[0]
                if self._fields[name] is None:
                    return None
                fields.append(self._fields[name])
            return pa.schema(fields)

        @property
        def path(self) -> str:
            return self._path

        @property
        def num_rows(self) -> int:
            return self._num_rows

        def get_name(self) -> str:
            return "LoaderxTable"

        def supports_projection_pushdown(self) -> bool:
            return True

        def _selected(self) -> tuple[list[str], str | None]:
            projection = self.get_projection_map()
            if projection is None:
                return self._columns, self._index_column
            columns = [c for c in self._columns if c in projection]
            index = self._index_column if self._index_column in projection else None
            return columns, index

        def _bytes_per_row(self, columns, index_column) -> int:
            return sum(self._column_row_bytes(c) for c in columns) + (8 if index_column else 0)

        def estimate_inmemory_data_size(self) -> int:
            columns, index_column = self._selected()
            return self._num_rows * self._bytes_per_row(columns, index_column)

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            columns, index_column = self._selected()
            schema = self._schema(columns, index_column)
            n = self._num_rows
            row_bytes = max(1, self._bytes_per_row(columns, index_column))
            block_rows = max(1, BATCH_BYTES // row_bytes)
            tasks = max(1, min(int(parallelism), n)) if parallelism and parallelism > 0 else 1
            bounds = np.linspace(0, n, tasks + 1).astype(np.int64)
            out = []
            for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
                if hi <= lo and n > 0:
                    continue
                meta = BlockMetadata(
                    num_rows=hi - lo,
                    size_bytes=(hi - lo) * row_bytes,
                    input_files=None,
                    exec_stats=None,
                )
                reader = _TableReader(self._path, columns, index_column, lo, hi, block_rows)
                out.append(
                    ReadTask(reader, meta, schema=schema, per_task_row_limit=per_task_row_limit)
                )
            return out

        def __repr__(self) -> str:
            return (
                f"TableDatasource(path={self._path!r}, columns={self._columns}, "
                f"num_rows={self._num_rows})"
            )

    # Picklable by reference: loaderx.ray.TableDatasource resolves to it.
    TableDatasource.__module__ = __name__
    TableDatasource.__qualname__ = "TableDatasource"
    globals()["_TableDatasource"] = TableDatasource
    return TableDatasource


def __getattr__(name: str):
    if name == "TableDatasource":
        return _datasource_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_table(
    path,
    *,
    columns=None,
    index_column: str | None = "record_id",
    override_num_blocks: int | None = None,
):
    """The plain table at ``path`` as a ``ray.data.Dataset`` (lazy).

    ``columns`` selects and orders columns (None: all, in name order); only
    those are read. ``index_column`` names the UInt64 record number placed
    first (None: omitted). ``override_num_blocks`` sets the number of read
    tasks (each a contiguous record range). Raises FileNotFoundError when
    ``path`` is not a table directory and ValueError for an unknown column or
    columns of unequal length, before any task runs.

    >>> ds = loaderx.ray.read_table("data/train")                      # doctest: +SKIP
    >>> ds.schema()                                                    # doctest: +SKIP
    """
    ray = _require_ray()
    source = _datasource_class()(path, columns=columns, index_column=index_column)
    if override_num_blocks is not None:
        if (
            isinstance(override_num_blocks, bool)
            or not isinstance(override_num_blocks, (int, np.integer))
            or override_num_blocks < 1
        ):
            raise ValueError(
                f"override_num_blocks must be a positive int, got {override_num_blocks!r}"
            )
        override_num_blocks = int(override_num_blocks)
    return ray.data.read_datasource(source, override_num_blocks=override_num_blocks)
