"""Rows edited in place: :meth:`loaderx.Table.update`,
:meth:`~loaderx.Table.merge_insert` and ``add_columns(..., on=)`` (columns
joined by key), and the pieces ``loaderx.ray.merge_insert`` shares. Each
edited shard gets a column group of the edited columnar columns (every
row) and a patch of the edited records columns (the edited rows only),
written here and committed by the core (``ColumnsWrite.editing`` /
``commit_edit`` / ``commit_merge``)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from . import _native
from ._evolve import BATCH_ROWS, _array, as_table, check_read_columns, live_starts, record_ids
from ._streams import require_pyarrow


def key_names(on, what: str = "on") -> list[str]:
    """``on`` (a column name or a list of them) as a list."""
    names = [on] if isinstance(on, str) else on
    if (
        not isinstance(names, (list, tuple))
        or not names
        or not all(isinstance(n, str) and n for n in names)
    ):
        raise TypeError(f"{what} must be a column name or a list of them, got {on!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names a column twice: {list(names)}")
    return list(names)


def source_table(pa, source, what: str):
    """Anything ``append`` takes (a mapping, a pyarrow Table or
    RecordBatchReader, a polars DataFrame, a Parquet path) read whole, as
    a pyarrow Table."""
    if isinstance(source, (str, os.PathLike)):
        import pyarrow.parquet as pq

        return pq.read_table(source)
    data = as_table(source, None, what)
    return data.read_all() if isinstance(data, pa.RecordBatchReader) else data


def repeated_key(pa, keys, on: list[str]):
    """The first key of table ``keys`` (its columns ``on``) given more than
    once, or None."""
    import pyarrow.compute as pc

    if len(on) == 1:
        # One column: a value repeated is one whose first place is not its
        # own (a hash lookup, no grouping).
        col = keys[on[0]].combine_chunks()
        if col.null_count > 1:
            return None
        first = pc.index_in(col, value_set=col, skip_nulls=True).fill_null(-1)
        first = first.to_numpy(zero_copy_only=False)
        places = np.flatnonzero((first != np.arange(len(col))) & (first >= 0))
        return col[int(places[0])].as_py() if places.size else None
    counts = keys.group_by(on).aggregate([([], "count_all")])
    twice = counts.filter(pc.greater(counts["count_all"], 1))
    if twice.num_rows == 0:
        return None
    row = {c: twice[c][0].as_py() for c in on}
    return row[on[0]] if len(on) == 1 else row


def _integer_keys(pa, typ, target_keys, source_keys) -> bool:
    """Whether a key column of type ``typ`` (the source's cast to it)
    holds integers that int64 holds exactly, and neither side a null."""
    exact = pa.types.is_signed_integer(typ) or (
        pa.types.is_unsigned_integer(typ) and typ.bit_width < 64
    )
    return exact and target_keys.null_count == 0 and source_keys.null_count == 0


def check_keys(table, source, on: list[str], what: str) -> None:
    """ValueError naming a key column ``table`` or ``source`` lacks."""
    for c in on:
        if c not in table:
            raise ValueError(
                f"on names {c!r}, which table {table.path!r} does not have "
                f"(its columns: {list(table)})"
            )
        if c not in source.column_names:
            raise ValueError(
                f"on names {c!r}, which {what} does not have (its columns: {source.column_names})"
            )


def key_match(pa, table, source, on: list[str], what: str):
    """For each live row of ``table`` (record id order), the row of
    ``source`` with its key (columns ``on``), as an int64 array with nulls
    where the source lacks the key; ValueError naming a key the source
    repeats or a key column either lacks."""
    from ._streams import scan

    check_keys(table, source, on, what)
    schema, batches = scan(pa, table, None, columns=on, max_bytes=None)
    target = pa.Table.from_batches(list(batches), schema=schema)
    keys = source.select(on)
    for c in on:
        want = target.schema.field(c).type
        if keys.schema.field(c).type != want:
            keys = keys.set_column(
                keys.column_names.index(c), c, same_kind(pa, c, want, keys[c].combine_chunks())
            )
    if len(on) == 1 and _integer_keys(
        pa, target.schema.field(on[0]).type, target[on[0]], keys[on[0]]
    ):
        # Integer keys: one native pass finds a repeated key and looks up
        # each target key (a hash map of the source's keys).
        def as_int64(col):
            col = col.combine_chunks() if col.num_chunks else pa.array([], col.type)
            return np.ascontiguousarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)

        index, twice = _native.key_index(as_int64(target[on[0]]), as_int64(keys[on[0]]))
        if twice is not None:
            raise ValueError(f"{what} gives key {twice!r} (of {on}) more than once")
        return pa.array(index, mask=index < 0), keys
    twice = repeated_key(pa, keys, on)
    if twice is not None:
        raise ValueError(f"{what} gives key {twice!r} (of {on}) more than once")
    if len(on) == 1:
        # One key column: a hash lookup of the target's keys in the
        # source's, in record id order (no join, no sort).
        import pyarrow.compute as pc

        if target.num_rows == 0:
            return pa.array([], pa.int64()), keys
        column = target[on[0]].combine_chunks()
        found = pc.index_in(column, value_set=keys[on[0]].combine_chunks(), skip_nulls=True)
        return found.cast(pa.int64()), keys
    left = target.append_column("__row", pa.array(np.arange(target.num_rows, dtype=np.int64)))
    right = keys.append_column("__src", pa.array(np.arange(keys.num_rows, dtype=np.int64)))
    joined = left.join(right, keys=on, join_type="left outer").sort_by("__row")
    return joined["__src"].combine_chunks(), keys


def keyed_columns(table, columns, on):
    """The new columns of keyed ``columns`` (``add_columns(..., on=)``) as
    a pyarrow Table of the table's rows, in record id order: null where a
    row's key is absent."""
    pa = require_pyarrow()
    on = key_names(on)
    source = source_table(pa, columns, "columns")
    check_keys(table, source, on, "columns")
    added = [c for c in source.column_names if c not in on]
    if not added:
        raise ValueError(f"columns holds only the key {on}: no column to add")
    have = [c for c in added if c in table]
    if have:
        raise ValueError(
            f"columns holds {have[0]!r}, which table {table.path!r} has already: "
            "merge_insert(source, on=...) updates existing columns by key"
        )
    index, _ = key_match(pa, table, source, on, "columns")
    missing = index.null_count
    out = {}
    for c in added:
        arr = source[c].combine_chunks() if source.num_rows else pa.array([], source[c].type)
        typ = arr.type
        if missing and isinstance(typ, pa.BaseExtensionType):
            raise ValueError(
                f"column {c!r} cannot hold null (a dense tensor), but {missing} rows of table "
                f"{table.path!r} have no key in columns"
            )
        if isinstance(typ, pa.BaseExtensionType):
            out[c] = pa.ExtensionArray.from_storage(typ, arr.storage.take(index))
        else:
            out[c] = arr.take(index)
    return pa.table(out)


def _edit_ids(table, where) -> tuple[np.ndarray, np.ndarray | None]:
    """The record ids ``where`` matches, ascending, and for record ids
    given (not a predicate or a mask) where each was given: the id at rank
    ``j`` was given at position ``order[j]`` (``None``: values follow
    ascending ids)."""
    if isinstance(where, str) or np.asarray(where).dtype == np.bool_:
        return record_ids(table, where, "where"), None
    arr = np.asarray(where)
    ids = record_ids(table, arr, "where")
    if ids.size != arr.size:
        _, first, counts = np.unique(arr, return_index=True, return_counts=True)
        repeated = arr[first[counts > 1][0]]
        raise ValueError(
            f"where: record id {int(repeated)} is given more than once; each row takes one value"
        )
    # Values follow the ids in the order given: sorted position j takes
    # the value given at position order[j].
    return ids, np.argsort(arr.astype(np.int64, copy=False), kind="stable")


def _holds(arr: np.ndarray, dtype) -> bool:
    """Whether values ``arr`` fit a column of ``dtype`` without changing:
    numbers of the same kind (or integers as floats), integers in range."""
    dtype = np.dtype(dtype)
    if arr.dtype == object:
        return False
    if arr.dtype.kind in "iub" and dtype.kind in "iu" and arr.dtype.kind != "b":
        if arr.size == 0:
            return True
        info = np.iinfo(dtype)
        return bool(arr.min() >= info.min and arr.max() <= info.max)
    return np.can_cast(arr.dtype, dtype, "same_kind")


def _column_values(pa, name: str, typ, value, k: int, per_row: bool | None = None):
    """``value`` (one value for every row, or one per row) as an Arrow
    array of ``k`` values of the column's Arrow type ``typ``; ValueError or
    TypeError naming the column for what the column cannot hold."""
    ext = isinstance(typ, pa.BaseExtensionType)
    if ext and typ.extension_name == "arrow.fixed_shape_tensor":
        dtype = typ.value_type.to_pandas_dtype()
        shape = tuple(typ.shape)
        try:
            arr = np.asarray(value)
        except Exception as exc:  # noqa: BLE001 - named with the column
            raise ValueError(f"column {name!r}: {exc}") from None
        if not _holds(arr, dtype):
            raise ValueError(
                f"column {name!r} holds {np.dtype(dtype)} tensors of shape {shape}, "
                f"got values of dtype {arr.dtype}"
            )
        if arr.shape == shape:
            arr = np.broadcast_to(arr, (k, *shape))
        elif arr.shape != (k, *shape):
            raise ValueError(
                f"column {name!r} holds tensors of shape {shape}: expected one of that shape "
                f"or {k} of them, shape {(k, *shape)}, got shape {arr.shape}"
            )
        arr = np.ascontiguousarray(arr, dtype=dtype)
        return pa.FixedShapeTensorArray.from_numpy_ndarray(arr)
    if pa.types.is_struct(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ):
        # A ragged column: one array of any shape per row, or one for all.
        data_type = typ.field("data").type if pa.types.is_struct(typ) else typ
        dtype = data_type.value_type.to_pandas_dtype()
        many = isinstance(value, (list, tuple))
        rows = list(value) if many else [value] * k
        if len(rows) != k:
            raise ValueError(f"column {name!r}: expected {k} values (one per row), got {len(rows)}")
        arrays = []
        for v in rows:
            a = np.asarray(v)
            if not _holds(a, dtype):
                raise ValueError(f"column {name!r} holds {np.dtype(dtype)} arrays, got {a.dtype}")
            if a.size == 0:
                raise ValueError(
                    f"column {name!r} holds nonempty arrays (a ragged record is never empty), "
                    f"got an array of shape {a.shape}"
                )
            arrays.append(np.ascontiguousarray(a, dtype=dtype))
        if pa.types.is_struct(typ):
            data = pa.array([a.reshape(-1) for a in arrays], data_type)
            shape = pa.array([list(a.shape) for a in arrays], typ.field("shape").type)
            return pa.StructArray.from_arrays([data, shape], fields=list(typ))
        return pa.array([a.reshape(-1) for a in arrays], typ)
    # A scalar or text column.
    scalar = not isinstance(value, (list, tuple, np.ndarray, pa.Array, pa.ChunkedArray)) or (
        isinstance(value, np.ndarray) and value.ndim == 0
    )
    if hasattr(value, "to_arrow") and not isinstance(value, np.ndarray):
        scalar = False  # a polars Series
    if scalar:
        item = value.item() if isinstance(value, np.generic | np.ndarray) else value
        if isinstance(item, bool) != pa.types.is_boolean(typ) and item is not None:
            raise ValueError(f"column {name!r} holds {typ}, got {item!r}")
        try:
            one = pa.array([item])
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise ValueError(f"column {name!r} holds {typ}, got {item!r}: {exc}") from None
        return pa.repeat(same_kind(pa, name, typ, one)[0], k)
    arr = _array(pa, name, value)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if len(arr) != k:
        raise ValueError(f"column {name!r}: expected {k} values (one per row), got {len(arr)}")
    return same_kind(pa, name, typ, arr)


def same_kind(pa, name: str, typ, arr):
    """``arr`` as the column's type ``typ``, where its values keep their
    meaning (numbers as numbers, no float as an integer, text as text, in
    range); ValueError naming the column otherwise."""
    if arr.type != typ:
        same_kind = (
            (
                (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type))
                and (pa.types.is_integer(typ) or pa.types.is_floating(typ))
                and not (pa.types.is_floating(arr.type) and pa.types.is_integer(typ))
            )
            or (
                (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type))
                and (pa.types.is_string(typ) or pa.types.is_large_string(typ))
            )
            or (
                (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type))
                and (pa.types.is_binary(typ) or pa.types.is_large_binary(typ))
            )
            or pa.types.is_null(arr.type)
        )
        if not same_kind:
            raise ValueError(f"column {name!r} holds {typ}, got values of type {arr.type}")
        try:
            arr = arr.cast(typ, safe=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(f"column {name!r} holds {typ}: {exc}") from None
    return arr


def _merged(pa, old, new, at: np.ndarray):
    """``old`` with the values at positions ``at`` (ascending) replaced by
    ``new``'s, in order."""
    import pyarrow.compute as pc

    if isinstance(old, pa.ChunkedArray):
        old = old.combine_chunks() if old.num_chunks else pa.array([], old.type)
    idx = np.arange(len(old), dtype=np.int64)
    idx[at] = len(old) + np.arange(len(at), dtype=np.int64)
    if isinstance(old.type, pa.BaseExtensionType):
        both = pa.concat_arrays([old.storage, new.storage])
        return pa.ExtensionArray.from_storage(old.type, pc.take(both, pa.array(idx)))
    return pc.take(pa.concat_arrays([old, new]), pa.array(idx))


def update(table, where, values, read_columns) -> tuple[int, int | None]:
    """What :meth:`loaderx.Table.update` does: returns the rows matched and
    the version committed (None when nothing matched)."""
    from ._streams import scan

    pa = require_pyarrow()
    if callable(values) and not isinstance(values, Mapping):
        read_columns = check_read_columns(table, read_columns)
    elif not isinstance(values, Mapping):
        raise TypeError(
            "values must be a mapping of column to values or a function fn(batch) -> mapping, "
            f"got {type(values).__name__}"
        )
    elif read_columns is not None:
        raise ValueError("read_columns is for a function, got a mapping of values")
    elif not values:
        raise ValueError("values must name at least one column, got an empty mapping")
    ids, order = _edit_ids(table, where)
    k = int(ids.size)
    from_fn = callable(values) and not isinstance(values, Mapping)
    if from_fn:
        fn, values, names = values, {}, None
        for start in range(0, k, BATCH_ROWS):
            idx = ids[start : start + BATCH_ROWS].astype(np.int64)
            out = fn({c: table[c][idx] for c in read_columns})
            if not isinstance(out, Mapping) or not out:
                raise TypeError(
                    "the update function must return a non-empty mapping of column to values, "
                    f"got {out!r:.80}"
                )
            if names is None:
                names = list(out)
            elif list(out) != names:
                raise ValueError(
                    f"the update function returned columns {list(out)} for rows "
                    f"{start}..{start + len(idx)}, but {names} before"
                )
            for c, v in out.items():
                values.setdefault(c, []).append((v, len(idx)))
    unknown = [c for c in values if c not in table]
    if unknown:
        raise ValueError(
            f"values names column {unknown[0]!r}, which table {table.path!r} does not have "
            f"(its columns: {list(table)})"
        )
    if k == 0:
        return 0, None
    names = list(values)
    schema, _ = scan(pa, table, None, columns=names, start=0, end=0)
    types = {f.name: f for f in schema}
    new = {}
    for c in names:
        field = types[c]
        v = values[c]
        if from_fn:
            # (values, rows) of each batch the function made.
            parts = [_column_values(pa, c, field.type, part, n) for part, n in v]
            arr = pa.concat_arrays(parts) if parts else pa.array([], field.type)
        else:
            arr = _column_values(pa, c, field.type, v, k)
            if order is not None:
                # The id at sorted rank j was given at position order[j].
                arr = arr.take(pa.array(order))
        if arr.null_count and not field.nullable:
            raise ValueError(f"column {c!r} cannot hold null (it has no nulls), got a null value")
        new[c] = arr
    return k, _commit_edit(pa, table, ids, new)


# How many times an edit is planned again on the latest version when
# another edit of the same columns of the same shards (other rows)
# committed first.
EDIT_TRIES = 8


def edit_groups(
    pa, write, reader, ids: np.ndarray, new: dict, check=None, *, patch_columnar: bool = False
) -> dict:
    """Writes into ``write`` (a ``ColumnsWrite.editing``), for each shard
    holding one of the record ids ``ids`` (ascending), the new values of
    the columns ``new`` (one per id): a patch (the edited rows only) of the
    records ones, and of the columnar ones a column group merged into the
    shard's values as ``reader`` (the version planned on) holds them, or a
    patch too when ``patch_columnar``; returns ``{shard: live positions
    edited}``. ``check(shard name, replaced)`` sees the values each
    shard's edit replaces first. The patches of the shards are written
    on threads (each native write releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    from ._streams import scan

    names = list(new)
    layouts = write.layouts()
    whole = [] if patch_columnar else [c for c in names if layouts[c] != "records"]
    patched = [c for c in names if c not in whole]
    shards = write.shards()
    starts = live_starts(shards)
    edited = {}
    jobs = []
    for i in range(len(shards)):
        lo, hi = starts[i], starts[i + 1]
        a, b = np.searchsorted(ids, [lo, hi])
        if a == b:
            continue
        at = (ids[a:b] - lo).astype(np.int64)
        old = None
        if whole:
            got, batches = scan(pa, reader, None, columns=whole, start=lo, end=hi, max_bytes=None)
            old = pa.Table.from_batches(list(batches), schema=got).select(whole)
        if check is not None:
            replaced = {c: old[c].take(pa.array(at)) for c in whole}
            rows = ids[a:b].astype(np.int64)
            replaced.update({c: reader[c].to_arrow(rows) for c in patched})
            check(shards[i][0], pa.table({c: replaced[c] for c in names}))
        if whole:
            arrays = [_merged(pa, old[c], new[c].slice(a, b - a), at) for c in whole]
            batch = pa.RecordBatch.from_arrays(arrays, schema=old.schema)
            write.write_group(i, [batch], "zstd", {c: layouts[c] for c in whole})
        if patched:
            arrays = [new[c].slice(a, b - a) for c in patched]
            batch = pa.RecordBatch.from_arrays(arrays, names=patched)
            jobs.append((i, batch, at.astype(np.uint64)))
        edited[i] = at.astype(np.uint64)
    if len(jobs) == 1:
        i, batch, at = jobs[0]
        write.write_patch(i, [batch], "zstd", at)
    elif jobs:
        # More threads than cores: a small patch's write is mostly waits
        # on fsyncs (each of its stores', then the group's), which overlap.
        with ThreadPoolExecutor(min(len(jobs), 4 * (os.cpu_count() or 1))) as pool:
            done = [pool.submit(write.write_patch, i, [b], "zstd", at) for i, b, at in jobs]
            for f in done:
                f.result()
    return edited


def _commit_edit(pa, table, ids: np.ndarray, new: dict) -> int:
    """Writes the groups of an update (:func:`edit_groups`) and commits
    them as one version, which it returns. An edit of the same columns of
    the same shards committed meanwhile is joined when it changed none of
    these rows (the edit is planned again on it); otherwise
    CommitConflict."""
    from ._errors import CommitConflict

    options = table._storage_options
    version = table.version
    first_shards = None
    first_old = {}  # shard name -> the values the edit replaces, as first read
    for attempt in range(EDIT_TRIES):
        write = _native.ColumnsWrite.editing(table.path, options, version)
        reader = None
        try:
            shards = write.shards()
            if first_shards is None:
                first_shards = shards
            starts = live_starts(shards)
            last = int(np.searchsorted(starts, ids[-1], side="right"))
            if attempt and [s[::2] for s in shards[:last]] != [s[::2] for s in first_shards[:last]]:
                # A delete or compaction came too: the ids moved.
                raise CommitConflict(
                    f"table {table.path!r}: this update was planned on version {table.version}, "
                    f"but version {write.version} was committed meanwhile and changed the "
                    "record ids of its rows (a delete or a compaction)"
                )
            reader = table if attempt == 0 else table._opened_at(write.version)

            def check(name, replaced, attempt=attempt, write=write):
                if attempt == 0:
                    first_old[name] = replaced
                elif not replaced.equals(first_old[name]):
                    raise CommitConflict(
                        f"table {table.path!r}: this update was planned on version "
                        f"{table.version}, but version {write.version} was committed meanwhile "
                        f"and changed rows of shard {name!r} that it changes too"
                    )

            edited = edit_groups(pa, write, reader, ids, new, check)
            return write.commit_edit(edited, "update")
        except CommitConflict as exc:
            write.discard()
            if "edited column" not in str(exc) or attempt == EDIT_TRIES - 1:
                raise
            version = None  # plan again on the latest
        except BaseException:
            write.discard()
            raise
        finally:
            if reader is not None and reader is not table:
                reader.close()
    raise AssertionError("unreachable")


MERGE_CHOICES = {
    "when_matched": ("update", "keep"),
    "when_not_matched": ("insert", "skip"),
    "when_not_matched_by_source": ("keep", "delete"),
}


def _source_values(pa, arr, want=None):
    """A source column's values (an Arrow array) as :func:`_column_values`
    takes them for a column of type ``want``: tensors as one NumPy array
    (from a tensor type, or a fixed-size list of the item's values, as a
    shuffle may leave them), ragged arrays as a list."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], arr.type)
    typ = arr.type
    if isinstance(typ, pa.BaseExtensionType):
        if typ.extension_name == "arrow.fixed_shape_tensor":
            return arr.to_numpy_ndarray()
        if hasattr(arr, "to_numpy"):
            return arr.to_numpy()  # another library's tensor type
    if (
        pa.types.is_fixed_size_list(typ)
        and isinstance(want, pa.BaseExtensionType)
        and want.extension_name == "arrow.fixed_shape_tensor"
    ):
        flat = arr.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(arr), *want.shape)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return [np.asarray(v) for v in arr.to_pylist()]
    return arr


def merge_updates(pa, fields: dict, src, rows: np.ndarray, updates: list[str]) -> dict:
    """The new values of columns ``updates`` for the matched target rows,
    from the source ``src``'s rows ``rows`` (one per target row, in the
    target rows' order), as the columns' Arrow types (``fields``)."""
    new = {}
    for c in updates:
        values = _source_values(pa, src[c].take(pa.array(rows)), fields[c].type)
        arr = _column_values(pa, c, fields[c].type, values, int(rows.size))
        if arr.null_count and not fields[c].nullable:
            raise ValueError(f"column {c!r} cannot hold null (it has no nulls), got a null value")
        new[c] = arr
    return new


def merge_inserts(pa, fields: dict, columns: list[str], src, rows: np.ndarray):
    """The source ``src``'s rows ``rows`` as rows of the table (its
    ``columns``, of types ``fields``): null where the source lacks a
    column, a ValueError for a tensor column it lacks."""
    take = pa.array(rows)
    arrays = []
    for c in columns:
        typ = fields[c].type
        if c in src.column_names:
            values = _source_values(pa, src[c].take(take), typ)
            arrays.append(_column_values(pa, c, typ, values, int(rows.size)))
        elif (
            isinstance(typ, pa.BaseExtensionType)
            or pa.types.is_list(typ)
            or pa.types.is_large_list(typ)
            or pa.types.is_struct(typ)
        ):
            raise ValueError(
                f"source lacks column {c!r}, which cannot hold null (a tensor column): "
                f"the {rows.size} rows it inserts need a value there"
            )
        else:
            arrays.append(pa.nulls(int(rows.size), typ))
    return pa.Table.from_arrays(arrays, names=columns)


def merge_patches(pa, write, table, matched, new) -> dict:
    """The patches of a merge's matched rows (:func:`edit_groups`).
    Columnar columns too are patched (the rows matched only): a merge
    touches rows all over the table, and rewriting whole groups of its
    columns cost more than the merge itself."""
    return edit_groups(pa, write, table, matched, new, patch_columnar=True)


def check_choices(choices: dict) -> None:
    for arg, allowed in MERGE_CHOICES.items():
        if choices[arg] not in allowed:
            raise ValueError(f"{arg} must be one of {list(allowed)}, got {choices[arg]!r}")


def merge_insert(table, source, on, choices: dict) -> tuple[dict, int | None]:
    """What :meth:`loaderx.Table.merge_insert` does: returns the counts and
    the version committed (None when there was nothing to do)."""
    from ._streams import scan

    check_choices(choices)
    pa = require_pyarrow()
    on = key_names(on)
    src = source_table(pa, source, "source")
    check_keys(table, src, on, "source")
    unknown = [c for c in src.column_names if c not in table]
    if unknown:
        raise ValueError(
            f"source holds column {unknown[0]!r}, which table {table.path!r} does not have "
            f"(its columns: {list(table)}); add_columns(..., on=) adds columns by key"
        )
    index, _ = key_match(pa, table, src, on, "source")
    valid = np.asarray(index.is_valid(), dtype=bool)
    matched = np.flatnonzero(valid).astype(np.uint64)  # record ids, ascending
    from_src = np.asarray(index.filter(index.is_valid()), dtype=np.int64)
    columns = list(table)
    schema, _ = scan(pa, table, None, columns=columns, start=0, end=0)
    fields = {f.name: f for f in schema}
    # Matched rows take the source's values of the columns it has.
    updates = [c for c in src.column_names if c not in on]
    new = {}
    if choices["when_matched"] == "update" and updates and matched.size:
        new = merge_updates(pa, fields, src, from_src, updates)
    # Source rows whose key the table lacks, in source order.
    inserts = None
    if choices["when_not_matched"] == "insert":
        hit = np.zeros(src.num_rows, dtype=bool)
        hit[from_src] = True
        rows = np.flatnonzero(~hit).astype(np.int64)
        if rows.size:
            inserts = merge_inserts(pa, fields, columns, src, rows)
    deletes = np.zeros(0, np.uint64)
    if choices["when_not_matched_by_source"] == "delete":
        deletes = np.flatnonzero(~valid).astype(np.uint64)
    counts = {
        "updated": int(matched.size) if new else 0,
        "inserted": 0 if inserts is None else inserts.num_rows,
        "deleted": int(deletes.size),
    }
    if not any(counts.values()):
        return counts, None
    options = table._storage_options
    write = _native.ColumnsWrite.editing(table.path, options, table.version)
    rows_write = None
    try:
        edited = {}
        if inserts is not None:
            # The inserted rows are written on a thread of their own while
            # the patches are (each native write releases the GIL; a patch
            # waits on fsyncs more than it computes).
            from concurrent.futures import ThreadPoolExecutor

            rows_write = _native.TableWrite(table.path, options, False, None)
            with ThreadPoolExecutor(1) as pool:
                pending = pool.submit(rows_write.write_streams, [inserts], "zstd")
                if new:
                    edited = merge_patches(pa, write, table, matched, new)
                name, _ = pending.result()
            insert = (rows_write, [name])
        else:
            insert = None
            if new:
                edited = merge_patches(pa, write, table, matched, new)
        version = write.commit_merge(edited, deletes, insert)
    except BaseException:
        write.discard()
        if rows_write is not None:
            rows_write.discard()
        raise
    return counts, version
