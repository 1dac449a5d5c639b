"""Tables as Ray Data datasets, and datasets as tables (``pip install
'loaderx[ray]'``).

:func:`read_table` reads a plain table (see :func:`loaderx.open_table`) or a
sharded one (a directory of plain tables plus ``manifest.json``) into a
``ray.data.Dataset`` through :class:`TableDatasource`. Read tasks cover
contiguous record ranges (a range may span shards) and open the table
read-only inside the workers, so any number of tasks on any number of nodes
(sharing the table's filesystem) read at once. Each task runs the core's
table scan and yields Arrow tables of at most about 16 MiB, gathering each
selected column once per block. Row order is record order; ``record_id`` is the global record
number. Columns, after the UInt64 ``record_id`` (unless
``index_column=None``):

* dense, ``item_shape == ()`` → a primitive column of the dtype;
* dense, ``item_shape == S`` → ``arrow.fixed_shape_tensor`` (pyarrow's
  ``FixedShapeTensorType``): numpy batches are ``(n, *S)`` arrays;
* ragged → Ray's ``ArrowVariableShapedTensorType``: numpy batches are object
  arrays holding each record with its exact shape (Ray's type needs one ndim
  per block, so a block whose records differ in ndim raises ValueError).

The examples on this page need a Ray cluster and a table on disk, so the
test suite does not run them as doctests (``python/tests/test_ray.py`` and
``test_ray_write.py`` run the same calls against a local Ray).

>>> ds = loaderx.ray.read_table("data/train", columns=["image", "label"])  # doctest: +SKIP
>>> next(ds.iter_batches(batch_format="numpy"))["image"].shape           # doctest: +SKIP
(256, 3, 32, 32)

:func:`write_table` (or :class:`TableDatasink` with
``Dataset.write_datasink``) writes a dataset as a new sharded table: one
shard per write task, committed by the driver in block order with one
atomic rename once every task succeeded, and nothing visible on failure.
Tensor columns become dense stores when every row has one shape, ragged
stores otherwise.

>>> loaderx.ray.write_table(ds, "data/copy")                               # doctest: +SKIP
'/abs/data/copy'

``ray`` is imported only when this module's Ray names are used; without it
they raise ImportError naming the ``loaderx[ray]`` extra.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import _native
from ._streams import (
    BATCH_BYTES,
    check_index_column,
    check_path,
    check_storage_options,
    is_ragged_struct,
    is_remote,
    require,
    require_pyarrow,
    scan,
)
from .table import _open_pinned, open_table
from .zrecord import DenseStore, RaggedStore

#: The least bytes :func:`read_table` gives a read task unless told how many
#: tasks to make (``override_num_blocks``).
MIN_TASK_BYTES = 64 << 20

# TableDatasource is built on first access (module __getattr__), so importing
# this module does not import Ray.
__all__ = [  # noqa: F822
    "read_table",
    "TableDatasource",
    "write_table",
    "TableDatasink",
    "add_columns",
    "merge_insert",
]


def _require_ray():
    """The ``ray`` module with Ray Data, or ImportError naming the extra."""
    return require("ray.data", "ray", name="Ray Data")


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
    """Arrow bytes per record of ``store`` (a table's column), from
    metadata alone (no record is decoded): exact for dense; for ragged, the
    stored (compressed) bytes per record plus Ray's per-row offsets and
    shape, a lower bound that the read tasks refine from the blocks they
    build."""
    if isinstance(store, DenseStore):
        return store.dtype.itemsize * int(np.prod(store.item_shape, dtype=np.int64))
    stats = store.stats()
    return -(-stats["live_bytes"] // max(1, stats["records"])) + 32


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


def _table_path(path, storage_options=None) -> tuple[str, dict | None]:
    """The location of ``path`` and its storage options: a path or URI, or
    a read-only table handle (a writable one holds exclusive locks, so every
    Ray worker opening its stores would fail with StoreBusy). A local path
    is made absolute, since tasks run in other directories."""
    options = check_storage_options(storage_options)
    if isinstance(path, Mapping) and hasattr(path, "readonly") and hasattr(path, "path"):
        if not all(s.readonly for s in path.values()):
            raise ValueError(
                f"table {path.path!r} is open writable (readonly=False): its exclusive locks "
                "would make Ray's workers fail with StoreBusy; pass its path, or a table "
                "opened with loaderx.open_table(path, readonly=True)"
            )
        options = options if options is not None else getattr(path, "_storage_options", None)
        path = path.path
    path = check_path(path)
    if not is_remote(path):
        path = os.path.abspath(path)
    return path, options


def _open(path: str, options, pinned: bytes | str | None):
    """The table at ``path`` read-only: as the pinned manifest describes it
    when there is one (a sharded table), the view when ``pinned`` names one
    (views never change), else as it is."""
    if isinstance(pinned, str):
        return open_table(path, view=pinned, storage_options=options)
    if pinned is not None:
        return _open_pinned(path, pinned, options)
    return open_table(path, readonly=True, storage_options=options)


def _blocks(streams, columns, index_column, lo: int, hi: int):
    """Rows ``lo..hi`` of ``streams`` (a Table or dict of stores) as Ray
    blocks (``pyarrow.Table`` objects of about :data:`BATCH_BYTES` each), read
    by the core's table scan: one native call per block, one gather per
    column. At least one block, empty when the range is."""
    pa = require_pyarrow()
    names = ([index_column] if index_column is not None else []) + list(columns)
    schema, batches = scan(
        pa, streams, index_column, columns=names, start=lo, end=hi, max_bytes=BATCH_BYTES
    )
    empty = True
    for batch in batches:
        empty = False
        yield _block(pa, batch)
    if empty:
        arrays = [c.combine_chunks() for c in schema.empty_table().columns]
        yield _block(pa, pa.RecordBatch.from_arrays(arrays, schema=schema))


def _block(pa, batch):
    """A scan batch as a Ray block: ragged tensors become Ray's
    variable-shaped tensor type, bool tensors Ray's tensor type (pyarrow
    cannot turn a bool ``fixed_shape_tensor`` into NumPy); the rest is
    Arrow as the core maps it."""
    arrays = []
    for field, arr in zip(batch.schema, batch.columns):
        t = field.type
        if is_ragged_struct(pa, t):
            arr = _ragged_column(field.name, arr)
        elif isinstance(t, pa.FixedShapeTensorType) and pa.types.is_boolean(t.value_type):
            from ray.data.extensions import ArrowTensorArray

            values = arr.storage.flatten().to_numpy(zero_copy_only=False)
            arr = ArrowTensorArray.from_numpy(values.reshape((len(arr), *t.shape)))
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, names=batch.schema.names)


class _ReadTask:
    """What a read task runs: opens the table at ``path`` (a path or URI,
    with its storage options) read-only in the worker, as the manifest the
    driver pinned describes it, and yields the blocks of its rows
    ``lo..hi``. Picklable (it holds the location, the options, the pinned
    manifest and the plan; never an open handle), so it runs on any node."""

    def __init__(self, path, options, pinned, columns, index_column, lo, hi):
        self.path, self.options, self.pinned = path, options, pinned
        self.columns, self.index_column = columns, index_column
        self.lo, self.hi = lo, hi

    def __call__(self):
        with _open(self.path, self.options, self.pinned) as table:
            yield from _blocks(table, self.columns, self.index_column, self.lo, self.hi)

    def __repr__(self) -> str:
        # The options may hold credentials: only their keys are shown.
        keys = sorted(self.options) if self.options else []
        return f"_ReadTask({self.path!r}, rows {self.lo}..{self.hi}, options={keys})"


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

        ``path`` is a plain table or a sharded table (a directory of plain
        tables plus ``manifest.json``), or a read-only :class:`loaderx.Table`
        (a writable one raises ValueError: its exclusive locks would make
        every read task fail with StoreBusy). ``columns`` selects columns
        (None: all, in the table's order); ``index_column`` names the UInt64
        record-number column placed first (None: none). Use with
        ``ray.data.read_datasource``, or through :func:`read_table`. The
        table is checked here, on the driver, without decoding a record: a
        path that is not a table raises FileNotFoundError, an unknown column
        or columns of unequal length ValueError, a manifest that does not
        match its shards :class:`loaderx.Corrupted`. Ray's projection
        pushdown (``ds.select_columns``) narrows the columns read as well.
        """

        def __init__(
            self,
            path: str | os.PathLike[str] | Mapping,
            *,
            columns: list[str] | None = None,
            index_column: str | None = "record_id",
            storage_options: dict[str, str] | None = None,
            min_task_bytes: int = 0,
        ) -> None:
            super().__init__()
            self._projection_map = None  # the pushdown mixin's state: all columns
            # A table handle reads as it shows: its version, or its view.
            version = getattr(path, "version", None) if isinstance(path, Mapping) else None
            view = getattr(path, "view", None) if isinstance(path, Mapping) else None
            path, options = _table_path(path, storage_options)
            if not is_remote(path) and not os.path.isdir(path):
                raise FileNotFoundError(f"table directory {path} does not exist")
            # A sharded table's version, pinned: every read task opens the
            # shards it names, whatever is committed meanwhile.
            pinned = view
            if view is None and _native.read_table_file(path, _native.MANIFEST, options):
                pinned = _native.table_manifest(path, options, version)
            # Opening checks the table as the core does for every reader
            # (equal lengths; for a sharded table every shard against the
            # manifest and the others); it decodes no record.
            with _open(path, options, pinned) as table:
                available = list(table)
                shards = list(table.shards)
            columns = _check_columns(path, columns, available)
            check_index_column(index_column, available)
            self._path = path
            self._options = options
            self._pinned = pinned
            if type(min_task_bytes) is not int or min_task_bytes < 0:
                raise ValueError(
                    f"min_task_bytes must be a non-negative int, got {min_task_bytes!r}"
                )
            self._min_task_bytes = min_task_bytes
            self._num_rows = sum(rows for _, rows in shards)
            self._columns = columns
            self._index_column = index_column
            # Per column, filled on the driver on first need, for selected
            # columns only: bytes per row and Arrow field.
            self._row_bytes: dict = {}
            self._fields: dict = {}

        def _column_row_bytes(self, name: str) -> int:
            if name not in self._row_bytes:
                with _open(self._path, self._options, self._pinned) as table:
                    self._row_bytes[name] = _row_bytes(table[name])
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
                    with _open(self._path, self._options, self._pinned) as table:
                        store = table[name]
                        if isinstance(store, RaggedStore) and store.logical == "tensor":
                            self._fields[name] = None
                        else:  # an empty scan decodes nothing
                            block = next(_blocks({name: store}, [name], None, 0, 0))
                            self._fields[name] = block.schema[0]
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

        def get_read_tasks(
            self,
            parallelism: int,
            per_task_row_limit: int | None = None,
            data_context: Any = None,
        ) -> list:
            columns, index_column = self._selected()
            schema = self._schema(columns, index_column)
            n = self._num_rows
            row_bytes = max(1, self._bytes_per_row(columns, index_column))
            tasks = max(1, min(int(parallelism), n)) if parallelism and parallelism > 0 else 1
            if self._min_task_bytes:
                # Each task opens the table (for a remote one: a few
                # requests and round trips) before it reads: tasks of at
                # least this many bytes keep that small beside the read.
                enough = -(-n * row_bytes // self._min_task_bytes)
                tasks = max(1, min(tasks, enough))
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
                reader = _ReadTask(
                    self._path, self._options, self._pinned, columns, index_column, lo, hi
                )
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
    if name == "TableDatasink":
        return _sink_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------- writing


def _sink_class():
    """Builds :class:`TableDatasink` on first use (Ray is imported then)."""
    cached = globals().get("_TableDatasink")
    if cached is not None:
        return cached
    _require_ray()
    from ray.data.block import BlockAccessor
    from ray.data.datasource import Datasink

    class TableDatasink(Datasink):
        """A ``ray.data.Datasink`` writing a dataset as a new sharded table at
        ``path`` (for ``Dataset.write_datasink``; :func:`write_table` wraps it).

        Each write task writes the blocks it is given as one shard (a plain
        table, one store per column, compressed with ``codec``); when every
        task has succeeded the driver commits the shards in task order (the
        dataset's block order when ``DataContext.execution_options.
        preserve_order`` is set, as :func:`write_table` does) with one atomic
        rename of the manifest. On any failure the shards of this write are
        removed and nothing becomes visible. With ``mode="create"`` (the
        default) ``path`` must not exist or be an empty directory
        (FileExistsError otherwise, raised here); with ``mode="append"`` the
        shards are appended to the sharded table there as one new version.
        A local table's filesystem must be shared by the write tasks and
        the driver.

        Columns: a bool, int, uint or float scalar becomes a dense store of
        scalars; a tensor column (Ray's tensor types or Arrow's
        ``fixed_shape_tensor``) a dense store when every row of the dataset
        has one shape, a ragged store otherwise, its dtype kept; a list
        column a ragged store of 1-D records. Each task decides from its own
        blocks; when the shards disagree (one block's rows all of one shape,
        another's of another), the driver rewrites that column of the
        shards that came out dense as ragged before committing, so every
        shard agrees. Strings and bytes become text and binary columns, and
        null rows are kept in scalar, text and binary columns (a null row
        in a tensor column raises ValueError). The mapping is the core's,
        the one :func:`loaderx.arrow.ingest` uses. Other types (structs,
        nested lists, timestamps, ...) raise TypeError naming the column
        and its Arrow type, as do dtypes or logical types that differ
        between blocks. ``layout`` says how columns are stored, as for
        :func:`loaderx.ingest_sharded` (numbers, booleans and text are
        columnar by default).
        """

        def __init__(
            self,
            path: str | os.PathLike[str],
            codec: str = "zstd",
            *,
            storage_options: dict[str, str] | None = None,
            mode: str = "create",
            layout: str | dict[str, str] | None = None,
        ) -> None:
            from ._streams import check_codec

            path, options = _table_path(path, storage_options)
            check_codec(codec, None)
            if mode not in ("create", "append"):
                raise ValueError(f"mode must be 'create' or 'append', got {mode!r}")
            self._path = path
            self._codec = codec
            # The core's write: it names, checks, uploads, commits and
            # cleans up this write's shards (FileExistsError here unless
            # the target is new or empty, for a new table).
            self._write = _native.TableWrite(path, options, mode == "create", layout)
            self._rows = None

        @property
        def path(self) -> str:
            return self._path

        @property
        def num_rows(self) -> int | None:
            """The table's row count once committed (None before)."""
            return self._rows

        def get_name(self) -> str:
            return "LoaderxTable"

        def write(self, blocks: Any, ctx: Any) -> dict:
            tables = []
            for b in blocks:
                t = BlockAccessor.for_block(b).to_arrow()
                if t.num_rows:
                    tables.append(t)
            task = int(getattr(ctx, "task_idx", 0))
            if not tables:
                return {"task": task, "shard": None, "rows": 0}
            name, rows = self._write.write_streams(tables, self._codec)
            return {"task": task, "shard": name, "rows": rows, "columns": tables[0].column_names}

        def on_write_complete(self, write_result: Any) -> None:
            done = [r for r in write_result.write_returns if r and r["shard"]]
            done.sort(key=lambda r: r["task"])
            if not done:
                self._write.discard()
                raise ValueError("the dataset has no rows: there is nothing to write")
            # The core decides each column's layout over every shard, commits
            # them in task order (a new table in the dataset's column order)
            # and removes what a retried task left.
            self._write.keep_order(done[0]["columns"])
            self._rows = self._write.commit([r["shard"] for r in done])

        def on_write_failed(self, error: Exception) -> None:
            self._write.discard()

        def __repr__(self) -> str:
            return f"TableDatasink(path={self._path!r}, codec={self._codec!r})"

    TableDatasink.__module__ = __name__
    TableDatasink.__qualname__ = "TableDatasink"
    globals()["_TableDatasink"] = TableDatasink
    return TableDatasink


def write_table(
    dataset: Any,
    path: str | os.PathLike[str],
    *,
    codec: str = "zstd",
    storage_options: dict[str, str] | None = None,
    mode: str = "create",
    layout: str | dict[str, str] | None = None,
) -> str:
    """Writes the ``ray.data.Dataset`` ``dataset`` as a new sharded table at
    ``path`` (``mode="append"``: appends it to the sharded table there, as
    one new version) and returns the table's absolute path.

    Several blocks are written by several write tasks in parallel, each into
    its own shard; the driver then commits every shard at once (one atomic
    rename of the manifest) in the dataset's block order, which is the
    table's row order (this call sets ``preserve_order`` for its own
    execution). On any failure nothing becomes visible. ``path`` must not
    exist or be an empty directory (FileExistsError). Column mapping and
    errors as in :class:`TableDatasink`. Read it back with
    :func:`read_table`.

    ``path`` may be a URI (``s3://``, ``gs://``, ``az://``, with
    ``storage_options`` as for :func:`loaderx.open_table`): each task writes
    its shard on its own node's disk and uploads it; the driver commits
    them with one conditional write of the manifest, and on failure deletes
    what this write uploaded. No shared filesystem is needed.

    The example needs a Ray cluster (not run as a doctest):

    >>> loaderx.ray.write_table(ds, "data/train")       # doctest: +SKIP
    '/abs/data/train'
    """
    ray = _require_ray()
    if not isinstance(dataset, ray.data.Dataset):
        raise TypeError(f"dataset must be a ray.data.Dataset, got {type(dataset).__name__}")
    sink = _sink_class()(
        path, codec=codec, storage_options=storage_options, mode=mode, layout=layout
    )
    options = dataset.context.execution_options
    saved = options.preserve_order
    options.preserve_order = True
    try:
        dataset.write_datasink(sink)
    finally:
        options.preserve_order = saved
    return sink.path


def add_columns(
    path: str | os.PathLike[str] | Mapping,
    fn: Callable[..., Any],
    *,
    read_columns: list[str],
    storage_options: dict[str, str] | None = None,
    codec: str = "zstd",
    num_cpus: float = 1,
    num_gpus: float = 0,
    layout: str | dict[str, str] | None = None,
) -> int:
    """Adds the columns ``fn`` computes to the sharded table at ``path``
    with one Ray task per shard (on any node), committed as one new version
    when every task has succeeded; returns that version.

    ``fn(batch) -> mapping`` is called on batches (dicts of column to
    values, as ``table[column][rows]`` gives them) of ``read_columns``, in
    row order, as :meth:`loaderx.Table.add_columns` calls it: an embedding
    or a caption model over an image column, say. Each task reads its
    shard's rows of the version the driver planned on and writes the new
    columns as a group of stores beside the shard's (uploaded, for a
    table in a bucket); nothing existing is rewritten. ``num_cpus`` and
    ``num_gpus`` are each task's Ray resources. On any failure nothing is
    committed and the tasks' groups are removed; a version committed
    meanwhile that changed the shards raises :class:`loaderx.CommitConflict`.

    The example needs a Ray cluster (not run as a doctest):

    >>> loaderx.ray.add_columns("s3://b/t", embed, read_columns=["image"])  # doctest: +SKIP
    7
    """
    ray = _require_ray()
    from . import _evolve
    from ._streams import check_codec

    check_codec(codec, None)
    if not callable(fn):
        raise TypeError(f"fn must be a function of a batch, got {type(fn).__name__}")
    path, options = _table_path(path, storage_options)
    write = _native.ColumnsWrite(path, options, None)
    shards = write.shards()
    # Every task reads the version the driver planned on.
    pinned = _native.table_manifest(path, options, write.version)
    with _open(path, options, pinned) as table:
        read_columns = _evolve.check_read_columns(table, read_columns)
    starts = _evolve.live_starts(shards)
    # Spread over the nodes: the tasks read and write whole shards.
    task = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, scheduling_strategy="SPREAD")(
        _add_columns_task
    )
    try:
        schemas = ray.get(
            [
                task.remote(
                    write, path, options, pinned, fn, read_columns, i, lo, hi, codec, layout
                )
                for i, (lo, hi) in enumerate(zip(starts, starts[1:]))
            ]
        )
        schema = next((s for s in schemas if s is not None), None)
        empty = [i for i, s in enumerate(schemas) if s is None]
        _evolve.write_empty(write, empty, schema, codec, layout)
        return write.commit()
    except BaseException:
        write.discard()
        raise


def _add_columns_task(write, path, options, pinned, fn, read_columns, i, lo, hi, codec, layout):
    """One shard's new columns (a Ray task): computed from its live rows of
    the pinned version and written as its group; the new columns' Arrow
    schema, or None for a shard without live rows (the driver writes it)."""
    from . import _evolve

    with _open(path, options, pinned) as table:
        run = _evolve.function_run(table, fn, read_columns, lo, hi)
    if not run:
        return None
    write.write_group(i, run, codec, layout)
    return run[0].schema


def merge_insert(
    path: str | os.PathLike[str],
    dataset: Any,
    on: str | list[str],
    *,
    storage_options: dict[str, str] | None = None,
    when_matched: str = "update",
    when_not_matched: str = "insert",
    when_not_matched_by_source: str = "keep",
    num_cpus: float = 1,
) -> dict[str, int]:
    """:meth:`loaderx.Table.merge_insert` of a Ray ``dataset`` too large
    for one process into the sharded table at ``path``: one Ray task per
    shard of the table that the source touches (and one for the rows it
    inserts), one version committed by the driver once every task has
    succeeded; returns ``{"updated": n, "inserted": n, "deleted": n}``.

    The driver reads the table's key column(s) ``on`` once; each source
    batch is matched against them where it is read, the matched rows are
    grouped by the table shard they edit, and each shard's task writes that
    shard's new values as a column group (uploaded, for a table in a
    bucket), as :meth:`~loaderx.Table.update` writes them. The rows whose
    key the table lacks are appended as one shard, in the order Ray's
    grouping delivers them (not necessarily the source's). Options, errors
    and conflicts are those of :meth:`~loaderx.Table.merge_insert` (a key
    repeated in the source raises ValueError naming it); on any failure
    nothing is committed and what the tasks wrote is removed.

    The example needs a Ray cluster (not run as a doctest):

    >>> loaderx.ray.merge_insert("s3://b/t", crawl, on="url")  # doctest: +SKIP
    {'updated': 120000, 'inserted': 80000, 'deleted': 0}
    """
    ray = _require_ray()
    from . import _edit, _evolve

    pa = require_pyarrow()
    choices = {
        "when_matched": when_matched,
        "when_not_matched": when_not_matched,
        "when_not_matched_by_source": when_not_matched_by_source,
    }
    _edit.check_choices(choices)
    on = _edit.key_names(on)
    path, options = _table_path(path, storage_options)
    names = list(dataset.schema().names)
    write = _native.ColumnsWrite.editing(path, options, None)
    rows_write = None
    try:
        pinned = _native.table_manifest(path, options, write.version)
        with _open(path, options, pinned) as table:
            columns = list(table)
            for c in on:
                if c not in columns or c not in names:
                    where = f"table {path!r}" if c not in columns else "the dataset"
                    raise ValueError(f"on names {c!r}, which {where} does not have")
            unknown = [c for c in names if c not in columns]
            if unknown:
                raise ValueError(
                    f"the dataset holds column {unknown[0]!r}, which table {path!r} does not "
                    f"have (its columns: {columns}); add_columns(..., on=) adds columns by key"
                )
            schema, batches = scan(pa, table, None, columns=on, max_bytes=None)
            keys = pa.Table.from_batches(list(batches), schema=schema)
        keys = keys.append_column("__rid", pa.array(np.arange(keys.num_rows, dtype=np.int64)))
        starts = _evolve.live_starts(write.shards())
        if choices["when_not_matched"] == "insert":
            rows_write = _native.TableWrite(path, options, False, None)
        routed = dataset.map_batches(
            _route,
            batch_format="pyarrow",
            fn_kwargs={"keys": ray.put(keys), "on": on, "starts": starts},
        )
        done = routed.groupby("__shard").map_groups(
            _merge_group,
            batch_format="pyarrow",
            num_cpus=num_cpus,
            fn_kwargs={
                "write": write,
                "rows_write": rows_write,
                "path": path,
                "options": options,
                "pinned": pinned,
                "on": on,
                "choices": choices,
            },
        )
        results = done.take_all()
        edited, matched, shards = {}, [], []
        updated = inserted = 0
        for r in results:
            i = r["shard"]
            if i >= 0:
                matched.append(np.asarray(r["rows"], np.uint64) + np.uint64(starts[i]))
                if r["edited"]:
                    edited[i] = np.asarray(r["rows"], np.uint64)
                    updated += len(r["rows"])
            elif r["name"]:
                shards.append(r["name"])
                inserted += r["inserted"]
        deletes = np.zeros(0, np.uint64)
        if choices["when_not_matched_by_source"] == "delete":
            hit = np.zeros(starts[-1], bool)
            for m in matched:
                hit[m.astype(np.int64)] = True
            deletes = np.flatnonzero(~hit).astype(np.uint64)
        counts = {"updated": updated, "inserted": inserted, "deleted": int(deletes.size)}
        if not any(counts.values()):
            write.discard()
            if rows_write is not None:
                rows_write.discard()
            return counts
        insert = (rows_write, shards) if shards else None
        write.commit_merge(edited, deletes, insert)
        return counts
    except BaseException:
        write.discard()
        if rows_write is not None:
            rows_write.discard()
        raise


def _route(batch, keys, on, starts):
    """A source batch with the table shard (``__shard``, -1: none) and the
    record id (``__rid``) its key matches."""
    from . import _edit

    pa = require_pyarrow()
    import pyarrow.compute as pc

    ray = _require_ray()
    if isinstance(keys, ray.ObjectRef):
        keys = ray.get(keys)  # the driver's key table, put once
    for c in on:
        want = keys.schema.field(c).type
        if batch.schema.field(c).type != want:
            arr = _edit.same_kind(pa, c, want, batch[c].combine_chunks())
            batch = batch.set_column(batch.column_names.index(c), c, arr)
    seq = pa.array(np.arange(batch.num_rows, dtype=np.int64))
    joined = (
        batch.select(on)
        .append_column("__seq", seq)
        .join(keys, keys=on, join_type="left outer")
        .sort_by("__seq")
    )
    if joined.num_rows != batch.num_rows:
        raise ValueError(
            f"the table holds a key (of {on}) of the dataset more than once: a distributed "
            "merge_insert needs the table's keys unique"
        )
    rid = pc.fill_null(joined["__rid"], -1).to_numpy()
    shard = np.where(rid >= 0, np.searchsorted(starts, rid, side="right") - 1, -1)
    # Tensors go through the shuffle as their storage (fixed-size lists):
    # Ray's shuffle cannot make empty tensor columns.
    for k, f in enumerate(batch.schema):
        if isinstance(f.type, pa.BaseExtensionType) and pa.types.is_fixed_size_list(
            f.type.storage_type
        ):
            batch = batch.set_column(k, f.name, batch[f.name].combine_chunks().storage)
    return batch.append_column("__rid", pa.array(rid, pa.int64())).append_column(
        "__shard", pa.array(shard, pa.int64())
    )


def _merge_group(group, write, rows_write, path, options, pinned, on, choices):
    """One table shard's source rows (a Ray task): their new values written
    as the shard's group; or the rows to insert written as a new shard."""
    from . import _edit, _evolve

    pa = require_pyarrow()
    i = int(group["__shard"][0].as_py())
    twice = _edit.repeated_key(pa, group.select(on), on)
    if twice is not None:
        raise ValueError(f"the dataset gives key {twice!r} (of {on}) more than once")
    src = group.drop_columns(["__shard", "__rid"])
    with _open(path, options, pinned) as table:
        schema, _ = scan(pa, table, None, columns=list(table), start=0, end=0)
        fields = {f.name: f for f in schema}
        columns = list(table)
        if i < 0:
            name, n = None, 0
            if rows_write is not None and src.num_rows:
                rows = np.arange(src.num_rows, dtype=np.int64)
                inserts = _edit.merge_inserts(pa, fields, columns, src, rows)
                name, n = rows_write.write_streams([inserts], "zstd")
            return pa.table(
                {
                    "shard": [i],
                    "rows": pa.array([[]], pa.list_(pa.uint64())),
                    "edited": [False],
                    "name": [name],
                    "inserted": [n],
                }
            )
        rid = group["__rid"].to_numpy()
        order = np.argsort(rid, kind="stable")
        ids = rid[order].astype(np.uint64)
        updates = [c for c in src.column_names if c not in on]
        edit = choices["when_matched"] == "update" and bool(updates)
        if edit:
            new = _edit.merge_updates(pa, fields, src, order.astype(np.int64), updates)
            _edit.merge_patches(pa, write, table, ids, new)
    rows = ids - np.uint64(_evolve.live_starts(write.shards())[i])
    return pa.table(
        {
            "shard": [i],
            "rows": pa.array([rows.tolist()], pa.list_(pa.uint64())),
            "edited": [edit],
            "name": pa.array([None], pa.string()),
            "inserted": [0],
        }
    )


def read_table(
    path: str | os.PathLike[str] | Mapping,
    *,
    columns: list[str] | None = None,
    index_column: str | None = "record_id",
    override_num_blocks: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> Any:
    """The plain or sharded table at ``path`` (or a read-only
    :class:`loaderx.Table`) as a ``ray.data.Dataset`` (lazy).

    ``columns`` selects and orders columns (None: all, in the table's order); only
    those are read. ``index_column`` names the UInt64 record number placed
    first (None: omitted). ``override_num_blocks`` sets the number of read
    tasks (each a contiguous record range); without it each task reads at
    least :data:`MIN_TASK_BYTES` (64 MiB) of the selected columns, within
    the number Ray asks for. Raises FileNotFoundError when
    ``path`` is not a table directory, ValueError for an unknown column,
    columns of unequal length or a writable table handle, and
    :class:`loaderx.Corrupted` for a manifest that names a missing shard or
    disagrees with one, before any task runs.

    ``path`` may be a URI (``s3://``, ``gs://``, ``az://``, ``http(s)://``),
    with ``storage_options`` as for :func:`loaderx.open_table`. Read tasks
    carry the location, the options and the sharded table's manifest as the
    driver read it (so every task reads the same shards, whatever is
    committed meanwhile), never an open handle, and run on any node.

    The example needs a Ray cluster (not run as a doctest):

    >>> ds = loaderx.ray.read_table("data/train")                      # doctest: +SKIP
    >>> ds.schema()                                                    # doctest: +SKIP
    """
    ray = _require_ray()
    # Without an explicit count, Ray asks for at least 200 tasks whatever
    # the size; tasks of 64 MiB or more keep each task's open (requests
    # and round trips for a remote table) small beside its read.
    source = _datasource_class()(
        path,
        columns=columns,
        index_column=index_column,
        storage_options=storage_options,
        min_task_bytes=0 if override_num_blocks is not None else MIN_TASK_BYTES,
    )
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
