"""loaderx: a persistent record store (Zrecord) and an endless, step-based
sampler and prefetch loader for training, from local disk or object
storage, in one process, one per GPU, across hosts or through Ray Data.

Modules:

* :mod:`loaderx.zrecord` — ``DenseStore``, ``RaggedStore``, ``DICT_TIERS``,
  ``StoreBusy``, ``Corrupted``.
* :mod:`loaderx.utils` — ``train_dict`` for the ``zstd_dict`` codec.
* :mod:`loaderx.zsampler` — the step-addressed ``Sampler``.
* :mod:`loaderx.dataloader` — the endless, prefetching ``DataLoader``.
* ``loaderx.Mix`` (:class:`loaderx.mixture.Mix`) — several weighted
  sources in one loader, with fixed weights or a schedule (imported on
  first use, like the submodules below).
* :mod:`loaderx.arrow` — Arrow tables, ingest and the tensor column mapping.
* :func:`loaderx.pack` — token records packed into fixed-length rows with
  segment ids and positions.
* :func:`loaderx.sql` — SQL over stores (DataFusion), returning Arrow tables.
* :mod:`loaderx.datafusion` — stores as datafusion-python tables.
* :mod:`loaderx.parquet` — streaming Parquet export and ingest.
* :mod:`loaderx.polars` — ``scan_table``: a table as a polars LazyFrame with
  projection, predicate and head pushdown.
* :mod:`loaderx.pandas` — ``to_pandas``: a table as a pandas DataFrame,
  tensor columns as object columns of exact-shape ndarrays.
* :mod:`loaderx.ray` — Ray Data: ``read_table`` and ``write_table``.
* :mod:`loaderx.grain` — ``DataSource``: a table as a Grain data source.
* :mod:`loaderx.torch` — ``Dataset``: a table as a PyTorch map-style dataset
  (batched ``__getitems__``, fork- and spawn-safe workers), and
  ``as_tensors`` for loader batches.
* :mod:`loaderx.hf` — tables as Hugging Face datasets (``to_hf``) and back
  (``ingest``).
* :mod:`loaderx.images` — encoded images (JPEG, PNG, WebP) decoded natively:
  ``loaderx.Image`` settings, ``decode`` and ``ingest_folder``.
* :mod:`loaderx.table` — :func:`loaderx.open_table` and the sharded-table
  writers below.
* :func:`loaderx.open_table` — a table (plain: a directory of equal-length
  stores; sharded: plain tables joined by a manifest) as a ``Mapping`` of
  column name to stream, changed through its methods when writable; :func:`loaderx.new_shard` and
  :func:`loaderx.commit_shards` let parallel writers add shards, and
  :func:`loaderx.ingest_sharded` ingests an Arrow source on all cores.
* :func:`loaderx.copy_table` — a table copied between any two locations
  (local paths, ``s3://``, ``gs://``, ``az://``; ``http(s)://`` as a
  source); every function that opens a table or store also takes a URI and
  ``storage_options``.

``import loaderx`` imports numpy and the native extension only; each
submodule above is imported the first time it is named
(``loaderx.polars.scan_table(...)`` works after a bare ``import loaderx``),
so optional packages (pyarrow, polars, Ray, ...) load only when used.
"""

from ._errors import CommitConflict
from ._pack import pack
from ._sql import sql
from .table import Table, commit_shards, copy_table, ingest_sharded, new_shard, open_table
from .zrecord import DICT_TIERS, Corrupted, DenseStore, RaggedStore, StoreBusy

__all__ = [
    "DenseStore",
    "RaggedStore",
    "DICT_TIERS",
    "StoreBusy",
    "Corrupted",
    "CommitConflict",
    "sql",
    "pack",
    "Mix",
    "Image",
    "open_table",
    "Table",
    "new_shard",
    "commit_shards",
    "ingest_sharded",
    "copy_table",
]

#: Submodules imported on first attribute access (see the module docstring).
_SUBMODULES = frozenset(
    {
        "arrow",
        "cli",
        "datafusion",
        "dataloader",
        "grain",
        "hf",
        "images",
        "mixture",
        "pandas",
        "parquet",
        "polars",
        "ray",
        "table",
        "torch",
        "utils",
        "zrecord",
        "zsampler",
    }
)


def __getattr__(name: str):
    if name == "Mix":
        from .mixture import Mix

        return Mix
    if name == "Image":
        from .images import Image

        return Image
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SUBMODULES | {"Mix", "Image"})
