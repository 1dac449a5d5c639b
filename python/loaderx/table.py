"""Tables: plain (a directory of equal-length stores, one per column) and
sharded (a directory of plain tables joined end to end by a manifest).

A plain table is a directory whose subdirectories holding ``meta.zr`` are its
columns, named after the subdirectories (the command line's ``--table DIR``
convention). A sharded table is a directory of plain tables (its shards)
plus ``manifest.json`` naming the committed shards in order (see
:func:`commit_shards`). :func:`open_table` opens either and returns a
:class:`Table`, a ``Mapping[str, stream]`` (its columns are not assigned
as items: a writable table changes through its methods, each a new
version) that works wherever a dict of stores does: gathers,
``loaderx.arrow.table``, ``loaderx.sql``, Parquet export and the
DataLoader. A sharded table's column is one
read-only stream over every shard: a gather resolves each global index to
its shard and record in the same native call that decodes it.

>>> import numpy as np, tempfile, os
>>> root = tempfile.mkdtemp()
>>> with DenseStore.create(os.path.join(root, "t", "x"), np.int64, ()) as s:
...     s.append(np.arange(4))
>>> with open_table(os.path.join(root, "t")) as t:
...     t.num_rows, list(t), t["x"][[3, 1]]
(4, ['x'], array([3, 1]))
"""

from __future__ import annotations

import datetime
import json
import numbers
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from . import _native
from ._errors import CommitConflict
from ._ingest import (
    commit_shards,
    new_shard,
    read_manifest,  # noqa: F401 - loaderx.table.read_manifest, as before
    write_sharded,
)
from ._streams import Closing, StoreBase, check_path, check_storage_options, is_remote
from .zrecord import DenseStore, RaggedStore

__all__ = [
    "Table",
    "open_table",
    "new_shard",
    "commit_shards",
    "ingest_sharded",
    "copy_table",
    "CommitConflict",
    "DEFAULT_CACHE_BYTES",
]

#: How many times :meth:`Table.delete` plans a predicate again after a
#: concurrent commit replaced a shard it touched.

#: ``cache_bytes`` when :func:`open_table` gets a ``cache_dir`` alone.
DEFAULT_CACHE_BYTES = 8 << 30

#: Where a table keeps the validity streams of its nullable columns.
VALIDITY = _native.VALIDITY


def _wrap(native, path: str) -> StoreBase:
    return (DenseStore if native.kind == "dense" else RaggedStore)(native, path)


def open_store(
    path: str,
    readonly: bool = True,
    logical: str | None = None,
    validity=None,
    *,
    storage_options: dict[str, str] | None = None,
):
    """Opens the store at ``path`` with the class of its kind; ``logical``
    ("utf8", "binary") presents a ragged uint8 store as a text or binary
    column and ``validity`` (a dense bool store's path) gives it nulls (a
    table records both; see :func:`open_table`). A URI opens a remote store,
    read-only only, configured by ``storage_options`` (see
    :meth:`DenseStore.open`)."""
    if is_remote(path):
        options = check_storage_options(storage_options)
        native = _native.Store.open(path, None, readonly, logical, validity, options)
        return _wrap(native, path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no store at {path}: the path does not exist")
    return _wrap(_native.Store.open(path, None, readonly, logical, validity), path)


def column_names(path: str) -> list[str]:
    """The store subdirectories of a table directory, sorted."""
    return _native.column_names(path)


def open_columns(path: str, readonly: bool = True, names=None) -> dict:
    """Opens every store of a table directory (or those of ``names``), named
    by subdirectory, each presented as the type the table file records."""
    names = None if names is None else list(names)
    native = _native.open_columns(path, bool(readonly), names)
    return {name: _wrap(s, os.path.join(path, name)) for name, s in native}


class Table(Mapping, Closing):
    """The columns of a table: a ``Mapping`` of column name to store
    (``DenseStore`` or ``RaggedStore``), all of ``num_rows`` records. Items
    are not assigned; a table opened with ``readonly=False`` changes through
    its methods (``append``, ``add_columns``, ``delete``, ...), each a new
    version that this ``Table`` then shows.

    Columns come in the table's order: its source's (a new table keeps the
    order of the columns it was made from), columns added later last (a
    plain table's, in name order). ``close()`` (or leaving a ``with`` block)
    closes every column. Obtain one with :func:`open_table`.
    """

    def __init__(
        self,
        path: str,
        columns: dict,
        shards: list | None = None,
        storage_options: dict | None = None,
        version: int | None = None,
        evolvable: bool = False,
        view: str | None = None,
        basis: dict | None = None,
    ) -> None:
        # Private: use open_table().
        self._stale = False  # a commit made a newer version: shown on next use
        self._evolvable = evolvable
        self._view = view
        self._path = path
        self._columns = self._own(columns)
        self._shards = shards
        self._storage_options = storage_options
        self._version = version
        # In a bucket: manifest.json as the open (or the last commit) saw
        # it, with its tag, so that a write planned on it reads nothing first.
        self._basis = basis
        self._metadata = None  # read on first use
        self._num_rows = len(next(iter(columns.values()))) if columns else 0

    def _own(self, columns: dict) -> dict:
        """Each column keeps its table open while it is used: the h5py and
        zarr idiom ``open_table(p)["x"][:3]`` works (the table is closed
        when it and its columns are collected, or by ``close()``)."""
        for c in columns.values():
            c._table = self
        return columns

    def _live(self) -> dict:
        if self._columns is None:
            raise ValueError(f"table {self._path!r} is closed")
        if self._stale:
            self._refresh()
        return self._columns

    def __getitem__(self, name: str) -> StoreBase:
        columns = self._live()
        try:
            return columns[name]
        except KeyError:
            raise KeyError(
                f"table {self._path!r} has no column {name!r}; columns: {list(columns)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._live())

    def __len__(self) -> int:
        return len(self._live())

    @property
    def path(self) -> str:
        """The table directory or URI, as given to :func:`open_table`."""
        return self._path

    @property
    def remote(self) -> bool:
        """Whether the table lives on an object store (read-only)."""
        return is_remote(self._path)

    @property
    def num_rows(self) -> int:
        """The length every column shares."""
        self._live()
        return self._num_rows

    @property
    def sharded(self) -> bool:
        """Whether this is a sharded table (its columns join shards)."""
        return self._shards is not None

    @property
    def shards(self) -> list:
        """``[(shard directory, rows), ...]`` in order for a sharded table;
        ``[(path, num_rows)]`` for a plain one."""
        self._live()
        if self._shards is None:
            return [(self._path, self._num_rows)]
        return list(self._shards)

    @property
    def version(self) -> int | None:
        """The version of a sharded table this handle shows (1, 2, ...);
        None for a plain table (it has versions once it is sharded)."""
        if self._columns is not None:
            self._live()
        return self._version

    @property
    def metadata(self) -> dict:
        """The table's own metadata, a dict of plain data carried from
        version to version (an image table's ``"classes"``, say; empty for
        a plain table). A copy: changing it changes nothing on disk."""
        self._live()
        if self._metadata is None:
            self._metadata = json.loads(
                _native.table_metadata(self._path, self._version, self._storage_options)
            )
        return json.loads(json.dumps(self._metadata))

    @property
    def view(self) -> str | None:
        """The view this handle shows (see :meth:`save_view`), or None."""
        return self._view

    def _pin(self) -> tuple[str, int | None, str | None]:
        """Where this table reads, as a loader's state pins it: ``(path,
        version, view)``, a local path made absolute, never storage
        options."""
        return (self.path if self.remote else os.path.abspath(self.path), self.version, self.view)

    def versions(self) -> list[dict]:
        """Every version of the table that can still be opened, oldest
        first: dicts with ``version``, ``timestamp`` (an aware UTC
        ``datetime``; None for a table written before versions),
        ``operation`` (``"create"``, ``"append"``, ``"copy"``, ...) and
        ``num_rows``. A plain table has none: ``[]``."""
        if self._shards is None:
            return []
        out = _native.table_versions(self._path, self._storage_options)
        for v in out:
            ms = v.pop("timestamp_ms")
            v["timestamp"] = (
                None
                if ms is None
                else datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
            )
        return out

    def _sharded(self, what: str) -> None:
        # What a method reads (the version, the shards) is the latest
        # commit's, this handle's own last one included.
        if self._columns is not None:
            self._live()
        if self._shards is None:
            raise ValueError(
                f"{what} needs a sharded table, but {self._path!r} is a plain table "
                "(it has no versions)"
            )

    def _not_a_view(self, what: str) -> None:
        if self._view is not None:
            raise ValueError(
                f"{what} selects rows of a version, but this handle shows view "
                f"{self._view!r}; open the table without view= first"
            )

    def tag(self, name: str, version: int | None = None) -> int:
        """Names version ``version`` (default: this handle's version) ``name``
        so that ``open_table(path, version=name)`` opens it and
        :meth:`cleanup` keeps it; returns the version tagged. A tag is
        written once: ValueError when ``name`` is taken (naming its
        version; :meth:`untag` it first), is not a plain name
        (``[A-Za-z0-9_][A-Za-z0-9._-]*``, not all digits) or the version
        does not exist."""
        self._sharded("tag")
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if version is None:
            version = self._version
        _check_version_number("version", version)
        return _native.table_tag(self._path, name, version, self._storage_options)

    def tags(self) -> dict[str, int]:
        """``{tag: version}`` of the table's tags."""
        if self._shards is None:
            return {}
        return dict(_native.table_tags(self._path, self._storage_options))

    def untag(self, name: str) -> None:
        """Removes the tag ``name`` (ValueError naming the tags there are
        when there is none)."""
        self._sharded("untag")
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        _native.table_untag(self._path, name, self._storage_options)

    def cleanup(
        self,
        *,
        older_than: datetime.timedelta = datetime.timedelta(days=7),
        keep_last: int = 1,
    ) -> int:
        """Removes the versions committed more than ``older_than`` ago,
        except the last ``keep_last`` (at least 1) and tagged ones, and
        every shard that only removed versions named; returns the bytes
        freed. Handles open on a removed version keep reading only while
        their files stay open: clean up what no run reads any more. A
        cleanup killed midway is finished by the next one.

        It also removes what killed writers left behind, once older than
        ``older_than`` and at least an hour: shard and column-group
        directories of a local table that no version names and whose write
        no live process holds (a write in progress holds a lease in
        ``_leases/`` for as long as its process lives, however long it
        takes), the same objects of a table in a bucket, and this machine's
        local staging directories of writers to buckets that died; in S3,
        the multipart uploads open below the table that no live writer
        holds. A live writer's are never removed."""
        self._sharded("cleanup")
        if not isinstance(older_than, datetime.timedelta):
            raise TypeError(
                f"older_than must be a datetime.timedelta, got {type(older_than).__name__}"
            )
        if older_than < datetime.timedelta(0):
            raise ValueError(f"older_than must not be negative, got {older_than!r}")
        if type(keep_last) is not int or keep_last < 1:
            raise ValueError(f"keep_last must be an int of at least 1, got {keep_last!r}")
        ms = older_than // datetime.timedelta(milliseconds=1)
        return _native.table_cleanup(self._path, ms, keep_last, self._storage_options)

    @property
    def readonly(self) -> bool:
        """Whether the table was opened read-only (``readonly=True``): its
        columns cannot be written and it cannot evolve. A sharded table's
        columns are always read-only streams; opened with
        ``readonly=False`` it evolves through :meth:`append`,
        :meth:`add_columns` and :meth:`drop_columns`."""
        self._live()
        return not self._evolvable

    # -- evolution ------------------------------------------------------------

    def _opened_at(self, version: int) -> Table:
        """A read-only handle of version ``version`` of this table."""
        return open_table(self._path, version=version, storage_options=self._storage_options)

    def _begin_evolution(self, what: str) -> None:
        """Checks that this handle may evolve the table and turns a plain
        table into a versioned one in place (its columns then read as
        read-only streams of version 1)."""
        import io

        self._live()
        if not self._evolvable:
            raise io.UnsupportedOperation(
                f"{what} changes the table, but {self._path!r} was opened read-only: "
                "open it with readonly=False"
            )
        if self._shards is None:
            self.close()
            _native.make_versioned(self._path, self._storage_options)
            self._refresh()

    def _reopen(self, version: int | None = None, basis=None) -> None:
        """Shows version ``version`` (the one a commit made; None: the
        latest) from the handle's next use on: opening it costs what an
        open does, so the commit does not wait for it. ``basis`` is what
        the commit learnt of that version (in a bucket)."""
        self._basis = None
        if self._columns is not None:
            self._stale = True
            self._target = version
            self._target_basis = basis

    def _refresh(self) -> None:
        """Opens the version to show in place of what was open."""
        self._stale = False
        version, self._target = getattr(self, "_target", None), None
        basis, self._target_basis = getattr(self, "_target_basis", None), None
        columns, self._columns = self._columns, None
        for s in (columns or {}).values():
            s.close()
        # A handle that evolves a table in a bucket opens its latest as
        # one that may commit (see open_table's to_write).
        to_write = self._evolvable and version is None and is_remote(self._path)
        fresh = open_table(
            self._path,
            readonly=not to_write,
            storage_options=self._storage_options,
            version=version,
        )
        self._columns = self._own(fresh._release())
        self._shards = fresh._shards
        self._version = fresh._version
        self._basis = (
            basis if basis is not None and basis.version == fresh._version else fresh._basis
        )
        self._metadata = None
        self._num_rows = fresh._num_rows

    def append(
        self, source: Any, *, codec: str = "zstd", layout: str | dict[str, str] | None = None
    ) -> int:
        """Appends the rows of ``source`` as new shards, committed as one
        new version, and shows it; returns the new ``num_rows``.

        ``source`` is a pyarrow Table or RecordBatchReader, a Parquet file
        path, a polars DataFrame, or a dict of equal-length NumPy arrays or
        lists; its columns must be the table's (ValueError naming the
        column otherwise). Each column keeps the layout it has in the table
        (``layout``, as for :func:`ingest_sharded`, may only ask for that
        one). Concurrent appends from other processes are retried, never
        lost. Needs ``readonly=False``."""
        from ._evolve import as_table

        self._begin_evolution("append")
        if isinstance(source, Mapping):
            source = as_table(source, None, "source")
        try:
            with _ingest_sharded(
                source,
                self._path,
                codec=codec,
                workers=1,
                shards=1,
                storage_options=self._storage_options,
                layout=layout,
                base=self.version,
            ) as after:
                version, rows = after.version, after.num_rows
        except BaseException:
            self._reopen()
            raise
        self._reopen(version)
        return rows

    def add_columns(
        self,
        columns: Mapping[str, Any] | Callable[..., Any] | Any,
        *,
        read_columns: list[str] | None = None,
        codec: str = "zstd",
        workers: int | None = None,
        layout: str | dict[str, str] | None = None,
        on: str | list[str] | None = None,
    ) -> None:
        """Adds columns without rewriting any existing one, committed as one
        new version, and shows it.

        ``columns`` is a mapping of name to ``num_rows`` values (a NumPy
        array, a list of arrays, ``str`` or ``bytes``, a pyarrow Array, a
        polars Series), a pyarrow Table or RecordBatchReader or polars
        DataFrame of ``num_rows`` rows, or a function ``fn(batch) ->
        mapping`` called on batches (dicts of column to values, as
        ``table[column][rows]`` gives them) of the columns ``read_columns``,
        in row order. Each shard gets its new columns as a group of stores
        of its own; nothing an earlier version names is rewritten or
        re-uploaded. Text, binary and nullable columns map as in
        :func:`loaderx.arrow.ingest`; ``layout`` chooses how each new
        column is stored, as for :func:`ingest_sharded` (numbers, booleans
        and text columnar by default). ``workers`` threads write the shards'
        groups (default: the CPU count for data, or in a bucket up to one
        per shard, at most 8; 1 for a function). A name
        the table has already, or a wrong row count, is a ValueError naming
        the column; a concurrent commit that changed the shards raises
        :class:`loaderx.CommitConflict`. Needs ``readonly=False``.

        With ``on`` (a key column, or a list of them), the new columns are
        joined by key instead of by position: ``columns`` (anything
        :meth:`append` takes) holds ``on`` and the new columns, its rows in
        any order, with gaps. A row whose key ``columns`` lacks gets null (a
        ValueError for a column that cannot hold null, a dense tensor);
        keys the table lacks are ignored; a key given twice, or a column
        other than ``on`` that the table has already (see
        :meth:`merge_insert`), is a ValueError."""
        from ._edit import keyed_columns
        from ._evolve import add_columns

        self._begin_evolution("add_columns")
        if workers is not None and (type(workers) is not int or workers < 1):
            raise ValueError(f"workers must be a positive int or None, got {workers!r}")
        try:
            if on is not None:
                if callable(columns) and not isinstance(columns, Mapping):
                    raise TypeError("on joins data by key: give a keyed table, not a function")
                if read_columns is not None:
                    raise ValueError("read_columns is for a function, got data to add")
                columns = keyed_columns(self, columns, on)
            version, basis = add_columns(self, columns, read_columns, codec, workers, layout)
        except BaseException:
            self._reopen()
            raise
        self._reopen(version, basis)

    def delete(self, where: str | Any) -> int:
        """Deletes rows, committed as one new version, and shows it; returns
        how many rows it deleted.

        ``where`` is an SQL predicate (``str``, as in a ``WHERE`` clause of
        :func:`loaderx.sql`: ``"score < 0.2"``), an array of record ids, or
        a bool mask of ``num_rows``. No row is rewritten: each touched shard
        gets a deletion file. Record ids stay dense (``0..num_rows-1``) in
        the new version, the live rows in their order; gathers skip deleted
        rows through a precomputed mapping, one native call per batch as
        before. Older versions keep every row. A compaction committed
        meanwhile of a shard the rows are in raises
        :class:`loaderx.CommitConflict` for record ids or a mask; a
        predicate is evaluated again on the new version. Needs
        ``readonly=False``."""
        from ._evolve import record_ids

        self._begin_evolution("delete")
        try:
            if isinstance(where, str):
                # A predicate is evaluated on the version the core plans
                # on: this one, then (when a compaction replaced a shard it
                # touched) the latest, where the core retries.
                def plan(v: int):
                    if v == self._version:
                        return record_ids(self, where, "where")
                    with open_table(
                        self._path, storage_options=self._storage_options, version=v
                    ) as at_v:
                        return record_ids(at_v, where, "where")

                version, deleted = _native.delete_where(
                    self._path, plan, self._version, self._storage_options
                )
            else:
                # Record ids or a mask name rows of this version only: a
                # conflict is raised.
                ids = record_ids(self, where, "where")
                version, deleted = _native.delete_rows(
                    self._path, ids, self._version, self._storage_options
                )
        except BaseException:
            self._reopen()
            raise
        self._reopen(version)
        return deleted

    def update(
        self,
        where: str | Any,
        values: Mapping[str, Any] | Callable[..., Any],
        *,
        read_columns: list[str] | None = None,
    ) -> int:
        """Sets new values in the rows ``where`` matches, committed as one
        new version, and shows it; returns how many rows it matched (0:
        nothing is committed).

        ``where`` is as for :meth:`delete` (an SQL predicate, record ids,
        a bool mask of ``num_rows``), evaluated on the latest version.
        ``values`` maps a column to one value for every matched row (for a
        tensor column, one tensor of the item's shape) or to one value per
        matched row: with record ids in the order the ids are given (an id
        given twice is a ValueError), with a predicate or a mask in
        ascending record id. Or ``values`` is a function ``fn(batch) ->
        mapping`` called on batches of the matched rows of ``read_columns``
        (dicts of column to values, as ``table[column][rows]`` gives them),
        in ascending record id. Rows keep their record ids and order; each
        edited shard gets the edited columnar columns' new values as a
        column group of its own, and the edited records columns' (tensors,
        embeddings) as a patch of the edited rows only (other columns and
        shards are not rewritten; ``compact`` folds both). Older
        versions, and views and runs pinned to them, keep their values. A
        column the table lacks, a value the column cannot hold (a str for
        a number, a null where the column has none, a tensor of another
        shape) or a wrong number of values is a ValueError and commits
        nothing; a concurrent commit that deleted an edited row, edited the
        same rows, compacted an edited shard (for record ids or a mask; a
        predicate is evaluated again on the new version) or dropped the
        column raises :class:`loaderx.CommitConflict`; an update of other
        rows of the same shards is joined. Needs ``readonly=False``."""
        from ._edit import update

        self._begin_evolution("update")
        self._not_a_view("update")
        try:
            try:
                matched, version = update(self, where, values, read_columns)
            except CommitConflict as exc:
                if not isinstance(where, str) or "(compacted)" not in str(exc):
                    raise
                # A predicate is evaluated again on the version that
                # compacted a shard it touched, as for delete.
                self._reopen()
                self._live()
                matched, version = update(self, where, values, read_columns)
        except BaseException:
            self._reopen()
            raise
        if version is not None:
            self._reopen(version)
        return matched

    def merge_insert(
        self,
        source: Any,
        on: str | list[str],
        *,
        when_matched: str = "update",
        when_not_matched: str = "insert",
        when_not_matched_by_source: str = "keep",
    ) -> dict[str, int]:
        """Upserts ``source`` (anything :meth:`append` takes) by the key
        column(s) ``on``, committed as one new version, and shows it;
        returns ``{"updated": n, "inserted": n, "deleted": n}``.

        Target rows whose key the source has take the source's values of
        the columns it has, in place (their record ids and order stay), as
        patches of the matched rows, columnar columns too (their scans lay
        the patches over the chunks, without pruning by the chunks'
        statistics, until :meth:`compact` folds them;
        ``when_matched="keep"`` leaves the rows).
        Source rows whose key the table lacks are appended in source order
        (``when_not_matched="skip"`` drops them); columns the source lacks
        get nulls there (a ValueError for a tensor column, which cannot
        hold null). ``when_not_matched_by_source="delete"`` deletes the
        target rows whose key the source lacks; their ids close up as for
        :meth:`delete`. A key the source repeats, a key column either side
        lacks, a source column the table lacks or a value a column cannot
        hold is a ValueError and commits nothing. A merge that inserts rows
        raises :class:`loaderx.CommitConflict` when a commit since this
        handle's version added rows (so that no key is left twice); the
        other parts conflict as :meth:`update` and :meth:`delete` do. Needs
        ``readonly=False``."""
        from ._edit import merge_insert

        self._begin_evolution("merge_insert")
        self._not_a_view("merge_insert")
        choices = {
            "when_matched": when_matched,
            "when_not_matched": when_not_matched,
            "when_not_matched_by_source": when_not_matched_by_source,
        }
        try:
            counts, version = merge_insert(self, source, on, choices)
        except BaseException:
            self._reopen()
            raise
        if version is not None:
            self._reopen(version)
        return counts

    def compact(self, *, min_deleted: float = 0.1) -> int | None:
        """Rewrites every shard whose deleted fraction is at least
        ``min_deleted`` as a new shard of its live rows (same rows, same
        order, added columns folded in), and stores every records column of
        numbers, booleans or text as a columnar column (whatever
        ``min_deleted`` is; tensor and bytes files are not touched: the
        other shards get a group of columnar copies), committed as one new
        version; returns it, or None when there is nothing to do. Older
        versions keep reading the old files until :meth:`cleanup`. Needs
        ``readonly=False``."""
        self._begin_evolution("compact")
        if isinstance(min_deleted, bool) or not isinstance(min_deleted, (int, float)):
            raise TypeError(f"min_deleted must be a number, got {type(min_deleted).__name__}")
        try:
            version = _native.compact(self._path, float(min_deleted), self._storage_options)
        except BaseException:
            self._reopen()
            raise
        self._reopen(version)
        return version

    def save_view(self, name: str, rows: str | Any, *, replace: bool = False) -> int:
        """Saves a named selection of this version's rows (record ids, a
        bool mask or an SQL predicate) as a view; returns its row count.
        ``open_table(path, view=name)`` opens it (this version, restricted
        to those rows, record ids ``0..len-1`` in table order) wherever a
        table is used; :meth:`cleanup` keeps the version it selects from. A
        view name is written once (ValueError when taken; :meth:`drop_view`
        first), unless ``replace=True``: the view ``name`` (which must
        exist) is saved again in place, on this version. Since a view is
        pinned to its version, that is how a view shows an :meth:`update`
        made after it. It is refused (ValueError) when a delete or a
        compaction since the view's version changed the record ids of its
        rows. Saving a view makes no new version."""
        from ._evolve import record_ids

        self._sharded("save_view")
        self._not_a_view("save_view")
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if not isinstance(replace, bool):
            raise TypeError(f"replace must be a bool, got {type(replace).__name__}")
        ids = record_ids(self, rows, "rows")
        _, n = _native.save_view(
            self._path, name, ids, self._version, self._storage_options, replace
        )
        return n

    def views(self) -> dict[str, dict]:
        """``{name: {"version": int, "num_rows": int}}`` of the table's
        views."""
        if self._shards is None:
            return {}
        return {
            name: {"version": version, "num_rows": rows}
            for name, version, rows in _native.list_views(self._path, self._storage_options)
        }

    def drop_view(self, name: str) -> None:
        """Removes the view ``name`` (ValueError naming the views there are
        when there is none)."""
        self._sharded("drop_view")
        _native.drop_view(self._path, name, self._storage_options)

    def split(self, fractions: Mapping, *, seed: int = 0, by: str | None = None) -> dict:
        """Saves one view per name of ``fractions`` (``{"train": 0.8,
        "val": 0.1, "test": 0.1}``): disjoint, covering every row of this
        version, sizes within one row of the fractions, the same for the
        same ``seed``. With ``by`` (a column), rows of equal value stay in
        one split (whole groups are assigned, so sizes follow the fractions
        as closely as the groups allow). The core plans it and saves every
        view at once, or none (a view named already, a bad fraction, a
        kill midway: no view is saved). Returns ``{name: num_rows}``."""
        self._sharded("split")
        self._not_a_view("split")
        if not isinstance(fractions, Mapping) or not fractions:
            raise ValueError(f"fractions must map split names to fractions, got {fractions!r}")
        if type(seed) is not int or not 0 <= seed < 2**64:
            raise ValueError(f"seed must be an int in 0..2**64-1, got {seed!r}")
        shares = []
        for name, share in fractions.items():
            if not isinstance(name, str) or not isinstance(share, numbers.Real):
                raise ValueError(f"fractions must map split names to numbers, got {fractions!r}")
            shares.append((name, float(share)))
        # Planned and saved by the core, all views at once (or none).
        saved = _native.split(self._path, shares, seed, by, self._version, self._storage_options)
        return dict(saved)

    def drop_columns(self, names: str | list[str]) -> None:
        """Drops the columns ``names`` (one name or a list), committed as one
        new version, and shows it; their files stay for the versions that
        name them (see :meth:`cleanup`). ValueError naming a column the
        table does not have, or when no column would be left. Needs
        ``readonly=False``."""
        from ._evolve import check_names

        names = check_names(names, "names")
        self._begin_evolution("drop_columns")
        try:
            version = _native.drop_columns(self._path, names, self._version, self._storage_options)
        except BaseException:
            self._reopen()
            raise
        self._reopen(version)

    @property
    def closed(self) -> bool:
        return self._columns is None

    def to_pandas(
        self, columns: list[str] | None = None, index_column: str | None = "record_id"
    ) -> Any:
        """A pandas DataFrame of the rows (tensor columns as object columns
        of ndarrays, text as strings): see :func:`loaderx.pandas.to_pandas`."""
        from .pandas import to_pandas

        return to_pandas(self, columns=columns, index_column=index_column)

    def to_hf(self, columns: list[str] | None = None) -> Any:
        """The rows as a Hugging Face ``datasets.Dataset`` (tensor columns as
        ``ArrayND`` or ``List`` features, text as strings): see
        :func:`loaderx.hf.to_hf`."""
        from .hf import to_hf

        return to_hf(self, columns=columns)

    def _release(self) -> dict:
        """Hands the open columns to the caller (who closes them); the table
        becomes closed."""
        columns, self._columns = self._live(), None
        return columns

    def close(self) -> None:
        """Closes every column. Idempotent."""
        columns, self._columns = self._columns, None
        if columns is None:
            return
        errors = []
        for s in columns.values():
            try:
                s.close()
            except Exception as exc:  # noqa: BLE001 - the first one is raised
                errors.append(exc)
        if errors:
            raise errors[0]

    def __repr__(self) -> str:
        if self._columns is None:
            return f"<Table path={self._path!r} closed>"
        self._live()
        shards = f", shards={len(self._shards)}" if self._shards is not None else ""
        version = f", version={self._version}" if self._version is not None else ""
        if self._view is not None:
            version += f", view={self._view!r}"
        return (
            f"Table(path={self._path!r}, columns={list(self._columns)}, "
            f"num_rows={self._num_rows}{shards}{version})"
        )


def _check_version_number(name: str, version) -> None:
    if type(version) is not int or version < 1:
        raise ValueError(f"{name} must be a version number (an int of at least 1), got {version!r}")


def open_table(
    path: str | os.PathLike[str],
    readonly: bool = True,
    *,
    storage_options: dict[str, str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_bytes: int | None = None,
    version: int | str | None = None,
    view: str | None = None,
) -> Table:
    """Opens the table at ``path``, plain or sharded.

    A sharded table opens at its latest version, or at ``version``: a
    version number or a tag name (see :meth:`Table.versions` and
    :meth:`Table.tag`); ``view`` opens a saved view (see
    :meth:`Table.save_view`, :meth:`Table.split`): the version it was made
    from, restricted to its rows. ValueError naming the version when there is no such
    version (never committed, or removed by :meth:`Table.cleanup`) or tag.

    A plain table's columns are its store subdirectories. A sharded table
    (one holding ``manifest.json``) presents each column as one read-only
    stream joining that column's store in every committed shard, in order.

    Read-only by default (``readonly=True``: shared locks, so any number of
    processes, one per training rank say, open the same table at once);
    ``readonly=False`` opens a plain table's columns writable, and lets the
    handle evolve the table (:meth:`Table.append`,
    :meth:`Table.add_columns`, :meth:`Table.drop_columns`; the first such
    call on a plain table turns it into a versioned sharded one in place,
    no byte copied). A sharded or remote table's columns are read-only
    streams either way. Raises FileNotFoundError when ``path`` is not a
    directory, ValueError when it holds no store or when the columns'
    lengths differ (naming both columns and lengths) or when shards disagree
    on a column's dtype or shape, :class:`Corrupted` when the manifest is
    malformed or names a missing shard (naming it), and what
    :meth:`DenseStore.open` raises for a column.

    ``path`` may be a URI: ``s3://bucket/prefix``, ``gs://``, ``az://`` or
    ``abfs[s]://``, ``http(s)://`` (read-only), or ``file://``. A remote
    table's columns are read-only streams; ``storage_options`` configure
    the client with the ``object_store`` crate's key names (``aws_endpoint``, ``aws_region``,
    ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_allow_http``,
    ...; plus loaderx's own ``max_retries``, ``retry_timeout``,
    ``read_timeout``, ``hedge``, ``hedge_min_delay`` and ``hedge_multiple``:
    see the remote guide), on top of the usual
    ``AWS_*``/``GOOGLE_*``/``AZURE_*`` environment variables. Opening lists
    the table once (or takes the objects a sharded manifest records) and
    fetches every store's ``meta.zr`` and ``dict.zr`` concurrently; gathers
    then fetch their records in a few planned range requests. With
    ``cache_dir`` those reads go through a local cache of 4 MiB blocks,
    shared by every process on the host and kept under ``cache_bytes``
    (default :data:`DEFAULT_CACHE_BYTES`) by evicting the least recently
    used; a ``cache_bytes`` below one block is a ValueError. Without
    ``cache_dir`` nothing is written to local disk. Remote errors:
    FileNotFoundError for a missing object, PermissionError for refused
    credentials, TimeoutError or ConnectionError when retries run out,
    :class:`Corrupted` when an object changed under the open table; each
    names the object, never a credential.
    """
    path = check_path(path)
    if not isinstance(readonly, (bool, np.bool_)):
        raise TypeError(f"readonly must be a bool, got {type(readonly).__name__}")
    options = check_storage_options(storage_options)
    remote = is_remote(path)
    if cache_dir is not None:
        cache_dir = check_path(cache_dir)
        if cache_bytes is None:
            cache_bytes = DEFAULT_CACHE_BYTES
        if type(cache_bytes) is not int or cache_bytes < 0:
            raise ValueError(f"cache_bytes must be a non-negative int, got {cache_bytes!r}")
        if not remote:
            raise ValueError(f"cache_dir is for remote tables, but {path!r} is a local path")
    elif cache_bytes is not None:
        raise ValueError("cache_bytes needs cache_dir (where the cache lives)")
    if view is not None:
        if not isinstance(view, str):
            raise TypeError(f"view must be a view name (str), got {type(view).__name__}")
        if version is not None:
            raise ValueError(
                f"view={view!r} opens the version it was made from; got version={version!r} too"
            )
        if not readonly:
            raise ValueError(f"view={view!r} opens read-only (readonly=True), got readonly=False")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, (int, str)):
            raise TypeError(
                "version must be None, a version number (int) or a tag name (str), "
                f"got {type(version).__name__}"
            )
        if isinstance(version, int):
            _check_version_number("version", version)
        if not readonly:
            raise ValueError(
                f"version={version!r} opens read-only (readonly=True), got readonly=False: "
                "an older version is never written"
            )
    # A sharded or remote table's columns are read-only streams whatever
    # the mode; readonly=False lets the handle evolve the table.
    streams_only = remote or _native.is_sharded(path)
    native, shards, opened, basis = _native.open_table(
        path,
        bool(readonly) or streams_only,
        options,
        cache_dir,
        cache_bytes,
        None,
        version,
        view,
        not readonly,
    )
    join = (
        (lambda name: f"{path.rstrip('/')}/{name}")
        if remote
        else (lambda name: os.path.join(path, name))
    )
    columns = {name: _wrap(s, join(name)) for name, s in native}
    if shards is not None:
        shards = [(os.fspath(d), rows) for d, rows in shards]
    return Table(
        path, columns, shards, options, opened, evolvable=not readonly, view=view, basis=basis
    )


def _open_pinned(path: str, manifest: bytes, storage_options: dict | None) -> Table:
    """The sharded table at ``path`` as the manifest bytes ``manifest``
    describe it (not as the manifest there now says): what Ray's read
    tasks open, so every task reads the shards the driver planned with."""
    native, shards, opened, _ = _native.open_table(
        path, True, storage_options, None, None, manifest
    )
    remote = is_remote(path)
    join = (
        (lambda name: f"{path.rstrip('/')}/{name}")
        if remote
        else (lambda name: os.path.join(path, name))
    )
    columns = {name: _wrap(s, join(name)) for name, s in native}
    shards = [(os.fspath(d), rows) for d, rows in shards] if shards is not None else None
    return Table(path, columns, shards, storage_options, opened)


def copy_table(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    storage_options: dict[str, str] | None = None,
    progress: Callable[..., Any] | None = None,
) -> int:
    """Copies the table at ``src`` (plain or sharded) to ``dst``; either may
    be a local path or a URI (``s3://``, ``gs://``, ``az://``; ``http(s)://``
    only as a source). Returns the bytes copied.

    Objects are copied concurrently, large ones as multipart uploads, each
    checked for its size once assembled (a smaller one is one request,
    whose length the server checks). ``dst`` becomes a table only when the copy is
    complete: a local destination is filled under a temporary name beside
    it and renamed in; a remote one holds a marker object
    (``.loaderx-incomplete``) for the whole copy, and a sharded table's
    ``manifest.json`` (recording every shard's objects, so readers need not
    list them) is written after everything else. An interrupted copy leaves
    nothing that opens as a table, and copying again over it is allowed; any
    other existing content at ``dst`` raises FileExistsError. A copy into a
    bucket lists its open multipart uploads in a lease object
    (``_leases/``), as writers do: copying again over an interrupted copy
    aborts the uploads it left open.

    ``progress(done, total)`` is called with byte counts as objects land; an
    exception it raises stops the copy. ``storage_options`` apply to both
    ends.
    """
    src = check_path(src)
    dst = check_path(dst)
    options = check_storage_options(storage_options)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable, got {type(progress).__name__}")
    return _native.copy_table(src, dst, options, progress)


def ingest_sharded(
    source: Any,
    path: str | os.PathLike[str],
    *,
    codec: str = "zstd",
    dict_bytes: bytes | None = None,
    workers: int | None = None,
    shards: int | None = None,
    storage_options: dict[str, str] | None = None,
    layout: str | dict[str, str] | None = None,
) -> Table:
    """Ingests ``source`` into a sharded table at ``path`` on ``workers``
    threads, each writing its own shards, then commits them all at once;
    returns the table, opened read-only.

    ``source`` is a Parquet file path (split by row groups, each worker
    reading its own), a pyarrow Table (split into row ranges without
    copying), or any other ``__arrow_c_stream__`` source (read in order and
    cut into runs of about 64 MiB, one per shard, at most two per worker in
    memory). ``shards`` is how many shards to cut a file or Table into
    (default: two per worker, fewer when the source is small); ``workers``
    defaults to the CPU count. The column mapping is
    :func:`loaderx.arrow.ingest`'s; row order is the source's. ``path`` may
    be new or an existing sharded table (the shards are appended). On any
    error every shard this call wrote is removed and nothing is committed.
    Needs pyarrow.

    ``layout`` says how columns are stored: ``None`` (a new column of
    numbers, booleans or text is *columnar*, chunks of many values with
    statistics, Parquet's size and speed for SQL, polars and pandas; tensor
    and bytes columns are *records*, one frame per row; a column the table
    has keeps its layout), ``"columnar"`` (every column that can be),
    ``"records"`` (every column, as stores), or a dict of column name to
    either. ``codec="raw"`` leaves columnar chunks uncompressed; the zstd
    codecs compress them with zstd (a dictionary serves records columns
    only). A layout a column cannot have, or one that differs from the
    table's, is a ValueError naming the column.

    ``path`` may be a URI (``s3://``, ``gs://``, ``az://``, with
    ``storage_options`` as for :func:`open_table`): the shards are written
    in a local temporary directory, uploaded under their unique names, and
    committed with one conditional write of the remote ``manifest.json``
    (retried when another writer committed first, so concurrent writers on
    any hosts keep each other's shards).
    """
    return _ingest_sharded(
        source,
        path,
        codec=codec,
        dict_bytes=dict_bytes,
        workers=workers,
        shards=shards,
        storage_options=storage_options,
        layout=layout,
    )


def _ingest_sharded(source, path, *, storage_options=None, **kw) -> Table:
    """:func:`ingest_sharded`, with ``base`` and ``metadata`` besides (see
    :func:`loaderx._ingest.write_sharded`), opened."""
    options = check_storage_options(storage_options)
    written = write_sharded(source, path, storage_options=options, **kw)
    return open_table(written, storage_options=options)
