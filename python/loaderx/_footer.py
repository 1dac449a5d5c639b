"""A Parquet file's key-value metadata, read and set in its footer.

A Parquet file ends with its ``FileMetaData`` (Thrift compact protocol),
the footer's length (4 bytes, little-endian) and ``PAR1``. The key-value
metadata is field 5 of ``FileMetaData``, a list of ``KeyValue {1: key,
2: value}``. Setting a key re-encodes only that field and writes a new
footer after the data pages, which stay as they are (no row is read or
rewritten): :func:`loaderx.parquet.export` keeps a table's metadata this
way under :data:`METADATA_KEY`, and :func:`loaderx.ingest_sharded` reads
it back. Needs no pyarrow.
"""

from __future__ import annotations

import json
import os
import struct

#: The Parquet key-value metadata key holding a table's ``Table.metadata`` (JSON).
METADATA_KEY = "loaderx.metadata"

_MAGIC = b"PAR1"
_KEY_VALUES = 5  # FileMetaData.key_value_metadata
_BINARY, _LIST, _SET, _MAP, _STRUCT = 8, 9, 10, 11, 12
_FIXED = {3: 1, 7: 8, 13: 16}  # byte, double, uuid


class _Reader:
    def __init__(self, data: bytes, where: str):
        self.data, self.pos, self.where = data, 0, where

    def fail(self) -> ValueError:
        return ValueError(f"{self.where} has a Parquet footer this reader cannot parse")

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise self.fail()
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        out, shift = 0, 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 70:
                raise self.fail()

    def binary(self) -> bytes:
        n = self.varint()
        if self.pos + n > len(self.data):
            raise self.fail()
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def fields(self):
        """``(field id, type)`` of a struct's fields, the value left to read."""
        last = 0
        while True:
            b = self.byte()
            if b == 0:
                return
            kind, delta = b & 0x0F, b >> 4
            if delta:
                last += delta
            else:
                z = self.varint()
                last = (z >> 1) ^ -(z & 1)
            yield last, kind

    def list_header(self) -> tuple[int, int]:
        b = self.byte()
        size = b >> 4
        if size == 15:
            size = self.varint()
        return size, b & 0x0F

    def skip(self, kind: int, in_field: bool = True) -> None:
        if kind in (1, 2):  # a bool: in a field's header, a byte in a list
            if not in_field:
                self.byte()
        elif kind in (4, 5, 6):
            self.varint()
        elif kind in _FIXED:
            self.pos += _FIXED[kind]
        elif kind == _BINARY:
            self.binary()
        elif kind in (_LIST, _SET):
            size, elem = self.list_header()
            for _ in range(size):
                self.skip(elem, in_field=False)
        elif kind == _MAP:
            size = self.varint()
            if size:
                kv = self.byte()
                for _ in range(size):
                    self.skip(kv >> 4, in_field=False)
                    self.skip(kv & 0x0F, in_field=False)
        elif kind == _STRUCT:
            for _, k in self.fields():
                self.skip(k)
        else:
            raise self.fail()
        if self.pos > len(self.data):
            raise self.fail()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field_header(last: int, field: int, kind: int) -> bytes:
    delta = field - last
    if 0 < delta <= 15:
        return bytes([(delta << 4) | kind])
    return bytes([kind]) + _varint((field << 1) ^ (field >> 15))


def _footer(path: str) -> tuple[bytes, int]:
    """The footer's bytes and where they start in the file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size < 12:
            raise ValueError(f"{path!r} is not a Parquet file (too short)")
        f.seek(size - 8)
        tail = f.read(8)
        if tail[4:] != _MAGIC:
            raise ValueError(f"{path!r} is not a Parquet file (no PAR1 at its end)")
        (length,) = struct.unpack("<I", tail[:4])
        start = size - 8 - length
        if start < 4:
            raise ValueError(f"{path!r} has a footer length ({length}) longer than the file")
        f.seek(start)
        return f.read(length), start


def _parse(footer: bytes, where: str):
    """The top-level fields ``[(id, type, value bytes)]`` of a footer and
    its key-value pairs (``{key: value or None}``, in order)."""
    r = _Reader(footer, where)
    fields, pairs = [], {}
    for field, kind in r.fields():
        at = r.pos
        if field == _KEY_VALUES and kind == _LIST:
            size, elem = r.list_header()
            if elem != _STRUCT:
                raise r.fail()
            for _ in range(size):
                key = value = None
                for f, k in r.fields():
                    if f == 1 and k == _BINARY:
                        key = r.binary()
                    elif f == 2 and k == _BINARY:
                        value = r.binary()
                    else:
                        r.skip(k)
                if key is None:
                    raise r.fail()
                pairs[key] = value
        else:
            r.skip(kind)
        fields.append((field, kind, footer[at : r.pos]))
    return fields, pairs


def key_values(path: str) -> dict[bytes, bytes | None]:
    """The key-value metadata of the Parquet file at ``path``."""
    footer, _ = _footer(path)
    return _parse(footer, repr(path))[1]


def set_key_value(path: str, key: str, value: str) -> None:
    """Sets ``key`` to ``value`` in the key-value metadata of the Parquet
    file at ``path`` (replacing the key's value if it has one), in place:
    the footer is rewritten after the data, which is not touched."""
    footer, start = _footer(path)
    fields, pairs = _parse(footer, repr(path))
    pairs[key.encode()] = value.encode()
    items = bytearray()
    n = len(pairs)
    items += bytes([(n << 4) | _STRUCT]) if n < 15 else bytes([0xF0 | _STRUCT]) + _varint(n)
    for k, v in pairs.items():
        items += bytes([0x10 | _BINARY]) + _varint(len(k)) + k
        if v is not None:
            items += bytes([0x10 | _BINARY]) + _varint(len(v)) + v
        items += b"\x00"
    fields = [f for f in fields if f[0] != _KEY_VALUES] + [(_KEY_VALUES, _LIST, bytes(items))]
    fields.sort(key=lambda f: f[0])
    out, last = bytearray(), 0
    for field, kind, raw in fields:
        out += _field_header(last, field, kind) + raw
        last = field
    out += b"\x00"
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(out)
        f.write(struct.pack("<I", len(out)))
        f.write(_MAGIC)
        f.truncate()


def table_metadata(source) -> dict | None:
    """The ``Table.metadata`` that ``source`` carries under
    :data:`METADATA_KEY`: a Parquet file's key-value metadata, or a pyarrow
    Table's or RecordBatchReader's schema metadata (as ``pyarrow.parquet``
    reads a file's); None when it carries none."""
    key = METADATA_KEY.encode()
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            return None  # the ingest names what is missing
        try:
            raw = key_values(path).get(key)
        except ValueError:
            return None  # not Parquet (or a footer of another kind): the ingest says so
        where = f"{path!r}"
    else:
        schema = getattr(source, "schema", None)
        metadata = getattr(schema, "metadata", None)
        if not isinstance(metadata, dict):
            return None
        raw = metadata.get(key)
        where = "the source's schema"
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        raise ValueError(f"{where} holds {METADATA_KEY!r} that is not JSON: {raw[:80]!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where} holds {METADATA_KEY!r} that is not a JSON object: {value!r}")
    return value
