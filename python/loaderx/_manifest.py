"""The manifest of a sharded table, by its former module name: reading,
creating and committing shards live in the core (``loaderx::table``), and
:mod:`loaderx.table` exposes them."""

from . import _native
from .table import commit_shards, is_sharded, new_shard, read_manifest

__all__ = ["MANIFEST", "read_manifest", "new_shard", "commit_shards", "is_sharded"]

#: The manifest's file name inside a sharded table directory.
MANIFEST = _native.MANIFEST
