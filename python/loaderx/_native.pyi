"""Type stubs of the private extension module (the public API is the
``loaderx`` package's modules; nothing here is stable)."""

from collections.abc import Callable, Iterable
from os import PathLike
from typing import Any

import numpy as np
import numpy.typing as npt

DICT_TIERS: dict[str, tuple[int, int]]
MIN_DICT_SAMPLE_BYTES: int
BATCH_BYTES: int
FILTER_ROWS: int
HAS_SQL: bool

#: ``layout=`` of the table writers: None, "columnar", "records", or a
#: dict of column name to one of those.
Layout = str | dict[str, str] | None

class StoreBusy(OSError): ...
class Corrupted(OSError): ...
class CommitConflict(RuntimeError): ...

class GatherBuffer:
    def __len__(self) -> int: ...

class PackedRecords:
    def __len__(self) -> int: ...
    @property
    def nbytes(self) -> int: ...

class Store:
    @staticmethod
    def create(
        path: str | PathLike[str],
        dtype: str,
        item_shape: list[int] | None,
        codec: str,
        dict_bytes: bytes | None = None,
        checksum: bool = False,
    ) -> Store: ...
    @staticmethod
    def open(
        path: str | PathLike[str],
        kind: str | None = None,
        readonly: bool = False,
        logical: str | None = None,
        validity: str | PathLike[str] | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> Store: ...
    @property
    def part_lengths(self) -> list[int]: ...
    @property
    def path(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def checksum(self) -> bool: ...
    @property
    def dtype(self) -> str: ...
    @property
    def item_shape(self) -> tuple[int, ...] | None: ...
    @property
    def codec(self) -> str: ...
    @property
    def logical(self) -> str: ...
    @property
    def nullable(self) -> bool: ...
    @property
    def layout(self) -> str: ...
    @property
    def cheap(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def readonly(self) -> bool: ...
    def require_writable(self, op: str) -> None: ...
    def __len__(self) -> int: ...
    def append_dense(self, data: npt.NDArray[np.uint8]) -> None: ...
    def pack(self, records: Iterable[Any]) -> PackedRecords: ...
    def submit_packed(self, batch: PackedRecords) -> None: ...
    def drain_writes(self) -> None: ...
    def raise_pending_write(self) -> None: ...
    def stop_writes(self) -> None: ...
    def gather(self, idx: npt.NDArray[np.int64]) -> np.ndarray | list[np.ndarray]: ...
    def get(self, index: int) -> np.ndarray: ...
    def delete(self, idx: npt.NDArray[np.int64]) -> None: ...
    def read_counters(self) -> tuple[int, int]: ...
    def compact(self) -> None: ...
    def sync(self) -> None: ...
    def stats(self) -> dict[str, int]: ...
    def close(self) -> None: ...
    def dict_sample(self, budget: int) -> tuple[bytes, list[int]]: ...

class Sampler:
    def __init__(
        self,
        n: int,
        batch_size: int,
        mode: str,
        seed: int = 0,
        block_size: int | None = None,
        weights: npt.NDArray[np.float64] | None = None,
    ) -> None: ...
    def next(self) -> npt.NDArray[np.int64]: ...
    def at(self, step: int) -> npt.NDArray[np.int64]: ...
    step: int
    @property
    def n(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def block_size(self) -> int | None: ...

def parse_state(text: str) -> str: ...

_ImageSpec = tuple[int, int, str, tuple[float, float], tuple[float, float], float, str, str]

def image_check(spec: _ImageSpec) -> None: ...
def image_decode(
    values: list[bytes],
    spec: _ImageSpec,
    seeds: npt.NDArray[np.uint64],
    ids: npt.NDArray[np.uint64],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bool_]]: ...
def image_plan(
    spec: _ImageSpec,
    heights: npt.NDArray[np.int64],
    widths: npt.NDArray[np.int64],
    seeds: npt.NDArray[np.uint64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]: ...
def image_check_values(values: list[bytes]) -> list[tuple[int, int, str | None]]: ...
def image_read_files(
    paths: list[str],
) -> list[tuple[bytes | None, int, int, str | None]]: ...
def table_metadata(
    path: str, version: int | None = None, storage_options: dict[str, str] | None = None
) -> str: ...

class Loader:
    def __init__(
        self,
        stores: list[Store],
        names: list[str],
        batch_size: int,
        mode: str,
        seed: int,
        start_step: int,
        indices: npt.NDArray[np.uint64] | npt.NDArray[np.int64] | None,
        depth: int,
        producers: int,
        rank: int,
        world_size: int,
        arrow: bool = False,
        raw: bool = False,
        block_size: int | None = None,
        weights: npt.NDArray[np.float64] | None = None,
        pins: list[tuple[str, int | None, str | None] | None] | None = None,
        decode: list[tuple[str, _ImageSpec]] | None = None,
    ) -> None: ...
    @staticmethod
    def mixture(
        sources: list[list[Store]],
        source_names: list[str],
        names: list[str],
        batch_size: int,
        mode: str,
        seed: int,
        start_step: int,
        depth: int,
        producers: int,
        rank: int,
        world_size: int,
        weights: list[float] | None,
        record_weights: list[npt.NDArray[np.float64]] | None = None,
        arrow: bool = False,
        raw: bool = False,
        block_size: int | None = None,
        source_column: str | None = None,
        pins: list[tuple[str, int | None, str | None] | None] | None = None,
        decode: list[tuple[str, _ImageSpec]] | None = None,
    ) -> Loader: ...
    def next(self) -> Any: ...
    @property
    def step(self) -> int: ...
    def indices_at(self, step: int) -> npt.NDArray[np.uint64]: ...
    def rows_at(
        self, step: int
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint16] | None]: ...
    def provenance(
        self,
        steps: npt.NDArray[np.uint64],
        rank: int | None = None,
        schedule: npt.NDArray[np.float64] | None = None,
    ) -> tuple[
        npt.NDArray[np.uint64],
        npt.NDArray[np.uint32],
        npt.NDArray[np.uint32],
        npt.NDArray[np.uint64],
        npt.NDArray[np.uint16] | None,
    ]: ...
    def planned(
        self,
        steps: npt.NDArray[np.uint64],
        rank: int | None = None,
        schedule: npt.NDArray[np.float64] | None = None,
    ) -> tuple[
        npt.NDArray[np.uint64],
        npt.NDArray[np.uint32],
        npt.NDArray[np.uint32],
        npt.NDArray[np.uint64],
        npt.NDArray[np.uint16] | None,
    ]: ...
    def state(self, step: int) -> str: ...
    def exclude(
        self, step: int, records: npt.NDArray[np.uint64], source: str | None = None
    ) -> None: ...
    def skip(self, step: int, n: int) -> None: ...
    def load_state(self, text: str) -> None: ...
    def restart(self, step: int) -> None: ...
    def push_weights(self, weights: npt.NDArray[np.float64]) -> None: ...
    def fail_weights(self, why: str) -> None: ...
    @property
    def weights_pushed(self) -> int | None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

class FfiTableProvider:
    def __init__(
        self, stores: list[Store], names: list[str], index_column: str | None, pushdown: bool = True
    ) -> None: ...
    def __datafusion_table_provider__(self, session: Any) -> Any: ...

class BatchReader:
    @property
    def schema(self) -> Any: ...
    def read_next(self) -> Any | None: ...

class ArrayReader:
    @property
    def field(self) -> Any: ...
    def read_next(self) -> Any | None: ...

def train_dict(samples: bytes, sizes: list[int], tier: str) -> bytes: ...
def dict_tier(tier: str) -> tuple[int, int]: ...
def arrow_field(store: Store, name: str) -> Any: ...
def arrow_stream(
    store: Store, name: str, requested_schema: Any = None, max_bytes: int = ...
) -> Any: ...
def arrow_gather(
    store: Store, idx: npt.NDArray[np.int64], name: str, variable_shape_tensor: bool = False
) -> Any: ...
def table_scan(
    stores: list[Store],
    names: list[str],
    index_column: str | None,
    columns: list[str] | None = None,
    start: int = 0,
    end: int | None = None,
    limit: int | None = None,
    max_bytes: int | None = ...,
    max_rows: int | None = None,
    filter_columns: list[str] | None = None,
    filter: Callable[[Any], Any] | None = None,
    filter_rows: int = ...,
    predicate: str | None = None,
    predicate_exact: bool = False,
) -> BatchReader | None: ...
def pack(
    records: list[npt.NDArray[Any]],
    dtype: str,
    seq_len: int,
    rows: int | None,
    pad: int,
    max_segments: int | None,
    split: bool,
) -> dict[str, Any]: ...
def mix_counts(
    weights: npt.NDArray[np.float64], global_batch: int, start: int, stop: int
) -> npt.NDArray[np.int64]: ...
def source_seed(seed: int, name: str) -> int: ...
def record_seeds(
    seeds: npt.NDArray[np.uint64], step: int, indices: npt.NDArray[np.uint64]
) -> npt.NDArray[np.uint64]: ...
def arrow_chunks(store: Store, name: str, max_bytes: int = ...) -> ArrayReader: ...
def table_types(dir: str | PathLike[str]) -> dict[str, tuple[str, bool]]: ...
def arrow_append(store: Store, data: Any) -> PackedRecords | None: ...
def arrow_ingest(
    source: Any, root: str, codec: str = "zstd", dict_bytes: bytes | None = None
) -> list[tuple[str, str]]: ...
def sql(
    query: str,
    tables: list[tuple[str, list[Store], list[str], str | None]],
    pushdown: bool = True,
    arrow_tables: list[tuple[str, Any]] = ...,
) -> Any: ...
def parquet_export(
    stores: list[Store],
    names: list[str],
    path: str,
    index_column: str | None = None,
    row_group_bytes: int | None = None,
    progress: Any = None,
    key_value: list[tuple[str, str]] | None = None,
) -> tuple[int, int]: ...
def parquet_key_value(path: str, key: str) -> str | None: ...
def parquet_ingest(
    path: str, root: str, codec: str = "zstd", dict_bytes: bytes | None = None, progress: Any = None
) -> list[tuple[str, str]]: ...
def parquet_rows(path: str) -> int | None: ...

MANIFEST: str
MANIFEST_LOCK: str
VALIDITY: str

def open_table(
    path: str,
    readonly: bool,
    storage_options: dict[str, str] | None = None,
    cache_dir: str | PathLike[str] | None = None,
    cache_bytes: int | None = None,
    pinned: bytes | None = None,
    version: int | str | None = None,
    view: str | None = None,
    to_write: bool = False,
) -> tuple[
    list[tuple[str, Store]], list[tuple[PathLike[str], int]] | None, int | None, TableBasis | None
]: ...

class TableBasis:
    @property
    def version(self) -> int: ...

def make_versioned(uri: str, storage_options: dict[str, str] | None = None) -> int: ...
def key_index(
    target: npt.NDArray[np.int64], source: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], int | None]: ...
def drop_columns(
    uri: str,
    names: list[str],
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> int: ...
def delete_rows(
    uri: str,
    ids: npt.NDArray[np.uint64],
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> tuple[int, int]: ...
def delete_where(
    uri: str,
    plan: Callable[[int], npt.NDArray[np.uint64]],
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> tuple[int, int]: ...
def compact(
    uri: str, min_deleted: float, storage_options: dict[str, str] | None = None
) -> int | None: ...
def save_view(
    uri: str,
    name: str,
    ids: npt.NDArray[np.uint64],
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
    replace: bool = False,
) -> tuple[int, int]: ...
def split(
    uri: str,
    fractions: list[tuple[str, float]],
    seed: int,
    by: str | None = None,
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> list[tuple[str, int]]: ...
def list_views(
    uri: str, storage_options: dict[str, str] | None = None
) -> list[tuple[str, int, int]]: ...
def drop_view(uri: str, name: str, storage_options: dict[str, str] | None = None) -> None: ...

class ColumnsWrite:
    def __init__(
        self,
        uri: str,
        storage_options: dict[str, str] | None = None,
        version: int | None = None,
        basis: TableBasis | None = None,
    ) -> None: ...
    @property
    def version(self) -> int: ...
    @staticmethod
    def _resume(
        uri: str,
        storage_options: dict[str, str] | None,
        version: int,
        token: str,
        editing: bool = False,
    ) -> ColumnsWrite: ...
    def shards(self) -> list[tuple[str, int, int]]: ...
    def deleted(self, shard: int) -> npt.NDArray[np.uint64]: ...
    def write_group(
        self, shard: int, sources: list[Any], codec: str, layout: Layout = None
    ) -> None: ...
    def write_patch(
        self, shard: int, sources: list[Any], codec: str, rows: npt.NDArray[np.uint64]
    ) -> None: ...
    def write_groups(
        self, source: Any, codec: str, layout: Layout = None, workers: int = 1
    ) -> None: ...
    def commit(self) -> int: ...
    def committed_basis(self) -> TableBasis | None: ...
    def discard(self) -> None: ...
    @staticmethod
    def editing(
        uri: str, storage_options: dict[str, str] | None = None, version: int | None = None
    ) -> ColumnsWrite: ...
    def layouts(self) -> dict[str, str]: ...
    def commit_edit(self, edited: dict[int, npt.NDArray[np.uint64]], operation: str) -> int: ...
    def commit_merge(
        self,
        edited: dict[int, npt.NDArray[np.uint64]],
        delete: npt.NDArray[np.uint64],
        insert: tuple[TableWrite, list[str]] | None = None,
    ) -> int: ...

def table_manifest(
    path: str, storage_options: dict[str, str] | None = None, version: int | str | None = None
) -> bytes: ...
def table_versions(
    path: str, storage_options: dict[str, str] | None = None
) -> list[dict[str, Any]]: ...
def table_tags(
    path: str, storage_options: dict[str, str] | None = None
) -> list[tuple[str, int]]: ...
def table_tag(
    path: str,
    name: str,
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> int: ...
def table_untag(path: str, name: str, storage_options: dict[str, str] | None = None) -> None: ...
def table_cleanup(
    path: str,
    older_than_ms: int,
    keep_last: int,
    storage_options: dict[str, str] | None = None,
    _leftover_min_age_ms: int | None = None,
    _lease_ttl_ms: int | None = None,
) -> int: ...
def open_columns(
    path: str | PathLike[str], readonly: bool = True, names: list[str] | None = None
) -> list[tuple[str, Store]]: ...
def column_names(path: str | PathLike[str]) -> list[str]: ...
def is_sharded(path: str | PathLike[str]) -> bool: ...
def read_manifest(path: str | PathLike[str]) -> dict[str, Any]: ...
def new_shard(path: str | PathLike[str]) -> PathLike[str]: ...
def commit_shards(path: str | PathLike[str], shards: list[str | PathLike[str]]) -> int: ...

CACHE_BLOCK: int

def copy_table(
    src: str,
    dst: str,
    storage_options: dict[str, str] | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> int: ...
def is_remote(path: str) -> bool: ...
def upload_file(
    local: str | PathLike[str], uri: str, storage_options: dict[str, str] | None = None
) -> int: ...
def file_size(uri: str, storage_options: dict[str, str] | None = None) -> int | None: ...

class TableWrite:
    token: str
    def __init__(
        self,
        uri: str,
        storage_options: dict[str, str] | None = None,
        create: bool = True,
        layout: Layout = None,
    ) -> None: ...
    @staticmethod
    def _resume(
        uri: str,
        storage_options: dict[str, str] | None,
        create: bool,
        token: str,
        existed: bool,
        layout: Layout = None,
    ) -> TableWrite: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    def write_streams(self, sources: list[Any], codec: str) -> tuple[str, int]: ...
    def keep_order(self, names: list[str]) -> None: ...
    def commit(self, names: list[str]) -> int: ...
    def discard(self) -> list[str]: ...

def open_columnar(path: str | PathLike[str]) -> Store: ...
def columnar_kept_bytes() -> int: ...
def ingest_sharded(
    uri: str,
    storage_options: dict[str, str] | None,
    codec: str,
    dict_bytes: bytes | None,
    workers: int,
    shards: int | None = None,
    parquet: str | PathLike[str] | None = None,
    sources: list[Any] | None = None,
    run_bytes: int | None = None,
    layout: Layout = None,
    base: int | None = None,
    metadata: Any = None,
) -> int: ...
def read_table_file(
    path: str, name: str, storage_options: dict[str, str] | None = None
) -> bytes | None: ...
def remote_stats() -> dict[str, int]: ...
