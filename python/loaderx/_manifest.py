"""The manifest of a sharded table: which shards, in which order.

A sharded table is a directory of plain tables (its *shards*) plus
``manifest.json`` naming the committed shards in order, each with its row
count (see ``docs/format.md``). A shard directory that the manifest does not
name is invisible: writers create their shards first (:func:`new_shard`,
any process, any machine sharing the filesystem) and :func:`commit_shards`
then makes a set of them visible at once, by writing a new manifest beside
the old one and renaming it over it (one ``rename``: readers see the old
set or the new one, never a mix, and a crash at any instant leaves one of
the two).

A leaf module: it imports only the native extension and the error classes.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets

from . import _native
from ._errors import Corrupted

__all__ = ["MANIFEST", "read_manifest", "new_shard", "commit_shards", "is_sharded"]

#: The manifest's file name inside a sharded table directory.
MANIFEST = "manifest.json"
#: What the manifest's ``format`` key holds.
FORMAT = "loaderx.sharded_table"
VERSION = 1
_LOCK = ".manifest.lock"
#: Where a table keeps the validity streams of its nullable columns.
VALIDITY = ".validity"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$")


def is_sharded(path: str) -> bool:
    """Whether ``path`` is a sharded table (holds a manifest)."""
    return os.path.isfile(os.path.join(path, MANIFEST))


def _bad(path: str, what: str) -> Corrupted:
    return Corrupted(f"{os.path.join(path, MANIFEST)}: {what}")


def read_manifest(path: str) -> dict:
    """The checked manifest of the sharded table at ``path``:
    ``{"columns": [...], "shards": [{"name": ..., "rows": ...}, ...],
    "types": {column: "utf8" | "binary"}}``.

    Raises :class:`~loaderx.Corrupted` naming the manifest and the broken
    rule when it is not a manifest of this format, and when it names a shard
    directory that does not exist (naming the shard).
    """
    file = os.path.join(path, MANIFEST)
    try:
        with open(file, "rb") as f:
            raw = f.read(1 << 26)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is not a sharded table: it has no {MANIFEST}") from None
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(path, f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(path, f"the 'format' key must be {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise _bad(path, f"version must be {VERSION}, got {doc.get('version')!r}")
    columns, shards = doc.get("columns"), doc.get("shards")
    if not isinstance(columns, list) or not all(isinstance(c, str) and c for c in columns):
        raise _bad(path, "'columns' must be a list of column names")
    if len(set(columns)) != len(columns):
        raise _bad(path, f"'columns' names a column twice: {columns}")
    if not isinstance(shards, list):
        raise _bad(path, "'shards' must be a list")
    types = doc.get("types", {})
    if not isinstance(types, dict) or not all(
        c in columns and t in ("utf8", "binary") for c, t in types.items()
    ):
        raise _bad(path, "'types' must map column names to 'utf8' or 'binary'")
    nullable = doc.get("nullable", [])
    if not isinstance(nullable, list) or not all(c in columns for c in nullable):
        raise _bad(path, "'nullable' must list column names")
    seen = set()
    out = []
    for i, s in enumerate(shards):
        name = s.get("name") if isinstance(s, dict) else None
        rows = s.get("rows") if isinstance(s, dict) else None
        if not isinstance(name, str) or not _NAME.match(name):
            raise _bad(path, f"shard {i} must have a plain directory 'name', got {name!r}")
        if type(rows) is not int or rows < 0:
            raise _bad(
                path, f"shard {name!r} must have a non-negative integer 'rows', got {rows!r}"
            )
        if name in seen:
            raise _bad(path, f"shard {name!r} is listed twice")
        seen.add(name)
        if not os.path.isdir(os.path.join(path, name)):
            raise _bad(path, f"it names shard {name!r}, but {os.path.join(path, name)} is missing")
        out.append({"name": name, "rows": rows})
    for name in nullable:
        for shard in out:
            v = os.path.join(path, shard["name"], VALIDITY, name)
            if not os.path.isfile(os.path.join(v, "meta.zr")):
                raise _bad(
                    path,
                    f"column {name!r} is nullable, but shard {shard['name']!r} has no "
                    f"validity stream {VALIDITY}/{name}",
                )
    return {"columns": list(columns), "shards": out, "types": dict(types), "nullable": nullable}


def new_shard(path) -> str:
    """Creates a new, empty, uniquely named shard directory inside the table
    directory ``path`` (created if needed) and returns its path.

    Write a plain table into it (one store per column, e.g. with
    :func:`loaderx.arrow.ingest`), then make it visible with
    :func:`commit_shards`. Until then no reader sees it.
    """
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    while True:
        shard = os.path.join(path, f"shard-{secrets.token_hex(8)}")
        try:
            os.mkdir(shard)
            return shard
        except FileExistsError:  # pragma: no cover - 64 random bits collided
            continue


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _shard_schema(shard_dir: str) -> tuple[dict, int]:
    """``({column: (kind, dtype, item_shape)}, rows)`` of the plain table
    ``shard_dir``, its columns in name order."""
    if not os.path.isdir(shard_dir):
        raise FileNotFoundError(f"shard directory {shard_dir} does not exist")
    names = sorted(
        d for d in os.listdir(shard_dir) if os.path.isfile(os.path.join(shard_dir, d, "meta.zr"))
    )
    if not names:
        raise ValueError(f"shard {shard_dir} holds no stores (no subdirectory with meta.zr)")
    schema, lengths = {}, {}
    types = _native.table_types(shard_dir)
    for name in names:
        logical, _ = types.get(name, ("tensor", False))
        native = _native.Store.open(os.path.join(shard_dir, name), None, True, logical)
        try:
            shape = native.item_shape
            schema[name] = (
                native.kind,
                native.dtype,
                tuple(shape) if shape is not None else None,
                logical,
            )
            lengths[name] = len(native)
        finally:
            native.close()
    first = names[0]
    for name, n in lengths.items():
        if n != lengths[first]:
            raise ValueError(
                f"shard {shard_dir}: columns must have equal lengths, but column {first!r} "
                f"has {lengths[first]} rows and column {name!r} has {n}"
            )
    return schema, lengths[first]


def _describe(spec) -> str:
    kind, dtype, shape, logical = spec
    if logical != "tensor":
        return f"{logical} values"
    return f"{kind} {dtype}" + (f" item_shape {shape}" if kind == "dense" else "")


def commit_shards(path, shards) -> int:
    """Appends the shard directories ``shards`` (paths inside the table
    directory ``path``, in order) to the table's manifest in one atomic
    rename, creating the manifest on the first commit. Returns the table's
    row count after the commit.

    Every shard is checked first (a plain table whose columns have equal
    lengths, the same column names and the same kind, dtype and item shape
    as the table's), so a rejected commit changes nothing. Commits from
    several processes serialise on a lock file in the table directory.
    """
    path = os.fspath(path)
    if isinstance(shards, (str, bytes, os.PathLike)):
        raise TypeError("shards must be a list of shard directories, got a single path")
    names = []
    for s in shards:
        s = os.fspath(s)
        parent, name = os.path.split(os.path.normpath(s))
        if os.path.realpath(parent or path) != os.path.realpath(path):
            raise ValueError(f"shard {s} must be a directory directly inside the table {path}")
        if not _NAME.match(name):
            raise ValueError(f"shard name {name!r} must be a plain directory name")
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError(f"shards names a shard twice: {names}")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"table directory {path} does not exist")
    lock = os.open(os.path.join(path, _LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_sharded(path):
            current = read_manifest(path)
        else:
            if any(os.path.isfile(os.path.join(path, d, "meta.zr")) for d in os.listdir(path)):
                raise ValueError(
                    f"{path} is a plain table (it holds stores directly); "
                    "shards go into a directory of their own"
                )
            current = {"columns": None, "shards": [], "types": {}, "nullable": []}
        committed = {s["name"] for s in current["shards"]}
        reference = None
        if current["shards"]:
            first = current["shards"][0]["name"]
            reference = (first, _shard_schema(os.path.join(path, first))[0])
        added = []
        for name in names:
            if name in committed:
                raise ValueError(f"shard {name!r} is already committed to {path}")
            schema, rows = _shard_schema(os.path.join(path, name))
            if reference is None:
                reference = (name, schema)
            ref_name, ref = reference
            if list(schema) != list(ref):
                raise ValueError(
                    f"shard {name!r} has columns {list(schema)}, but shard {ref_name!r} "
                    f"has {list(ref)}: every shard must have the same columns"
                )
            for col, spec in schema.items():
                if spec != ref[col]:
                    raise ValueError(
                        f"column {col!r}: shard {name!r} holds {_describe(spec)}, but shard "
                        f"{ref_name!r} holds {_describe(ref[col])}; shards must agree"
                    )
            added.append({"name": name, "rows": rows})
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "columns": list(reference[1]) if reference else [],
            "shards": current["shards"] + added,
        }
        types = {c: spec[3] for c, spec in (reference[1] if reference else {}).items()}
        types = {c: t for c, t in types.items() if t != "tensor"}
        if types:
            doc["types"] = types
        # A column with nulls in any shard is nullable in all: shards without
        # a validity stream for it get one of all-valid rows (an addition
        # beside their stores, before the manifest names it).
        nullable = set(current["nullable"])
        for s in added:
            shard_types = _native.table_types(os.path.join(path, s["name"]))
            nullable |= {c for c, (_, n) in shard_types.items() if n}
        if nullable:
            for s in doc["shards"]:
                for c in sorted(nullable):
                    _ensure_validity(os.path.join(path, s["name"]), c, s["rows"])
            doc["nullable"] = sorted(nullable)
        _write_atomically(path, json.dumps(doc, indent=1).encode() + b"\n")
        return sum(s["rows"] for s in doc["shards"])
    finally:
        os.close(lock)


def _ensure_validity(shard_dir: str, column: str, rows: int) -> None:
    """Gives ``shard_dir`` an all-valid validity stream for ``column`` unless
    it has one (which must then have ``rows`` rows)."""
    import numpy as np

    v = os.path.join(shard_dir, VALIDITY, column)
    if os.path.isfile(os.path.join(v, "meta.zr")):
        native = _native.Store.open(v, "dense", True)
        try:
            if len(native) != rows or native.dtype != "|b1":
                raise ValueError(
                    f"shard {shard_dir}: the validity stream of column {column!r} holds "
                    f"{len(native)} {native.dtype} rows, expected {rows} bool rows"
                )
        finally:
            native.close()
        return
    if os.path.exists(v):
        import shutil

        shutil.rmtree(v)  # a stream a killed commit left half-made
    native = _native.Store.create(v, "|b1", [], "zstd")
    try:
        if rows:
            native.append_dense(np.ones(rows, np.uint8))
    finally:
        native.close()


def _write_atomically(path: str, data: bytes) -> None:
    tmp = os.path.join(path, f".{MANIFEST}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.rename(tmp, os.path.join(path, MANIFEST))
    except BaseException:
        os.unlink(tmp)
        raise
    _fsync_dir(path)
