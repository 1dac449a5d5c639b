"""Encoded images in, training tensors out.

* :class:`Image` says how a column of encoded images (JPEG, PNG, WebP)
  becomes uint8 tensors: the output size, the crop (torchvision's
  random-resized-crop, the evaluation centre crop, or the whole image), the
  flip probability, the layout and what an undecodable record becomes.
* :func:`decode` decodes a list of encoded images that way, natively, on
  the worker pool with the GIL released.
* :func:`ingest_folder` turns an ImageFolder tree (one folder per class)
  into a table: ``image`` (the file's bytes), ``label``, ``height``,
  ``width`` and ``path``, the class names in ``Table.metadata["classes"]``;
  ``columns=`` carries each file's other values (captions, scores).
* :func:`ingest_parquet` does the same for a table of encoded images with
  its other columns: Hugging Face–style Parquet files (whose image column
  is a struct ``{bytes, path}``), a pyarrow Table or RecordBatchReader, or
  a polars DataFrame.

Crop boxes and flips are drawn from one seed per record (see
:func:`decode`), a pure function of it: the same seed gives the same box
on every run and machine. EXIF orientation is not applied (PIL and
torchvision do not apply it by default either).

>>> import io, os, tempfile
>>> import numpy as np
>>> from PIL import Image as PILImage
>>> import loaderx
>>> from loaderx import images
>>> root = tempfile.mkdtemp()
>>> for label, color in (("cat", 200), ("dog", 40)):
...     os.makedirs(os.path.join(root, label))
...     pixels = np.full((48, 64, 3), color, np.uint8)
...     PILImage.fromarray(pixels).save(os.path.join(root, label, "a.png"))
>>> t = images.ingest_folder(root, os.path.join(tempfile.mkdtemp(), "pets"), workers=1)
>>> t.metadata["classes"], t["label"][:].tolist(), t["height"][:].tolist()
(['cat', 'dog'], [0, 1], [48, 48])
>>> batch = images.decode(t["image"][:], loaderx.Image(32, crop="none"))
>>> batch.shape, int(batch[0, 0, 0, 0]), int(batch[1, 0, 0, 0])
((2, 3, 32, 32), 200, 40)
>>> t.close()
"""

from __future__ import annotations

import numbers
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _native

if TYPE_CHECKING:
    from .table import Table

__all__ = ["Image", "decode", "ingest_folder", "ingest_parquet", "EXTENSIONS"]

#: File name endings :func:`ingest_folder` reads (any case).
EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")

_CROPS = ("random", "center", "none")
_LAYOUTS = ("CHW", "HWC")
_ON_ERROR = ("raise", "zeros")


def _pair(name: str, value) -> tuple[float, float]:
    try:
        lo, hi = value
        return float(lo), float(hi)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a pair of numbers (low, high), got {value!r}") from None


class Image:
    """How encoded images are decoded: ``size`` (an int for a square, or
    ``(height, width)``), ``crop`` (``"random"``: torchvision's
    random-resized-crop with ``scale``, the area fraction, and ``ratio``,
    the aspect ratio, each ``(low, high)``; ``"center"``: the shorter side
    resized to ``size / 0.875``, then the centre; ``"none"``: the whole
    image resized to ``size``), ``flip`` (the probability of a horizontal
    flip), ``layout`` (``"CHW"``, the seed's, or ``"HWC"``) and
    ``on_error`` (``"raise"``: a ``ValueError`` naming the record;
    ``"zeros"``: a zero image, and ``False`` in a boolean ``ok``
    column). The output is uint8 RGB."""

    __slots__ = ("height", "width", "crop", "scale", "ratio", "flip", "layout", "on_error")

    def __init__(
        self,
        size: int | tuple[int, int],
        *,
        crop: str = "random",
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        flip: float = 0.5,
        layout: str = "CHW",
        on_error: str = "raise",
    ) -> None:
        if isinstance(size, numbers.Integral) and not isinstance(size, bool):
            h = w = int(size)
        elif (
            isinstance(size, Sequence)
            and len(size) == 2
            and all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in size)
        ):
            h, w = int(size[0]), int(size[1])
        else:
            raise TypeError(f"size must be an int or (height, width), got {size!r}")
        if h < 1 or w < 1:
            raise ValueError(f"size must be positive, got {size!r}")
        if crop not in _CROPS:
            raise ValueError(f"crop must be 'random', 'center' or 'none', got {crop!r}")
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be 'raise' or 'zeros', got {on_error!r}")
        if not isinstance(flip, numbers.Real) or isinstance(flip, bool):
            raise TypeError(f"flip must be a probability (a number), got {flip!r}")
        self.height, self.width = h, w
        self.crop, self.layout, self.on_error = crop, layout, on_error
        self.scale, self.ratio = _pair("scale", scale), _pair("ratio", ratio)
        self.flip = float(flip)
        _native.image_check(self._spec())  # the core's checks (scale, ratio, flip)

    def _spec(self) -> tuple:
        return (
            self.height,
            self.width,
            self.crop,
            self.scale,
            self.ratio,
            self.flip,
            self.layout,
            self.on_error,
        )

    def _settings(self) -> dict:
        """The settings as a loader's state keeps them (the core's
        ``Image::to_value``: ``scale`` and ``ratio`` for a random crop only)."""
        out: dict = {"size": [self.height, self.width], "crop": self.crop}
        if self.crop == "random":
            out["scale"], out["ratio"] = list(self.scale), list(self.ratio)
        out.update(flip=self.flip, layout=self.layout, on_error=self.on_error)
        return out

    @classmethod
    def _from_settings(cls, name: str, settings: Any) -> Image:
        """The ``Image`` of a state's ``decode[name]`` settings."""
        known = {"size", "crop", "scale", "ratio", "flip", "layout", "on_error"}
        if not isinstance(settings, dict) or "size" not in settings or set(settings) - known:
            raise ValueError(
                f"state['decode'][{name!r}] must hold an image's decode settings "
                f"({sorted(known)}), got {settings!r}"
            )
        kw = {k: v for k, v in settings.items() if k != "size"}
        for k in ("scale", "ratio"):
            if k in kw:
                kw[k] = tuple(kw[k])
        size = settings["size"]
        return cls(tuple(size) if isinstance(size, list) else size, **kw)

    def __eq__(self, other) -> bool:
        return isinstance(other, Image) and self._spec() == other._spec()

    def __hash__(self) -> int:
        return hash(self._spec())

    def __repr__(self) -> str:
        size = self.height if self.height == self.width else (self.height, self.width)
        return (
            f"Image({size!r}, crop={self.crop!r}, scale={self.scale}, ratio={self.ratio}, "
            f"flip={self.flip}, layout={self.layout!r}, on_error={self.on_error!r})"
        )


def _decode_specs(decode) -> list[tuple]:
    """A loader's ``decode=``: ``{column: Image}`` checked, as the native
    loader takes it (``[(column, settings)]``)."""
    from collections.abc import Mapping

    if not isinstance(decode, Mapping):
        raise TypeError(f"decode must be a dict of column -> loaderx.Image, got {decode!r}")
    out = []
    for name, image in decode.items():
        if not isinstance(image, Image):
            raise TypeError(f"decode[{name!r}] must be a loaderx.Image, got {image!r}")
        out.append((name, image._spec()))
    return out


def _provenance(loader, steps: np.ndarray, records: np.ndarray, sources=None) -> dict:
    """``<column>_box`` (y, x, h, w in source pixels) and ``<column>_flip``
    of each provenance row, drawn from the records' ``height`` and
    ``width`` columns and seeds without reading an image (for a mixture,
    each row's source's columns and seeds)."""
    import pyarrow as pa

    from ._transform import _row_record_seeds

    ids = np.asarray(records, dtype=np.uint64)
    if sources is None:
        # The whole source: a loader given columns= may deliver neither.
        parts = [(loader._source, np.ones(len(ids), dtype=bool))]
        row_seeds = np.full(len(ids), loader._seed, dtype=np.uint64)
    else:
        sources = np.asarray(sources)
        mix = loader._mix
        parts = [(mix.sources[name], sources == i) for i, name in enumerate(mix.names)]
        row_seeds = loader._source_seeds[sources]
    heights = np.empty(len(ids), dtype=np.int64)
    widths = np.empty(len(ids), dtype=np.int64)
    for streams, at in parts:
        if "height" not in streams or "width" not in streams:
            raise ValueError(
                "provenance of a decoded column needs the streams' 'height' and 'width' "
                f"columns (the image ingests write them), got streams {list(streams)}"
            )
        if at.any():
            heights[at] = np.asarray(streams["height"][ids[at]], dtype=np.int64).reshape(-1)
            widths[at] = np.asarray(streams["width"][ids[at]], dtype=np.int64).reshape(-1)
    seeds = np.empty(len(ids), dtype=np.uint64)
    steps = np.asarray(steps, dtype=np.uint64)
    for step in np.unique(steps):
        at = steps == step
        seeds[at] = _row_record_seeds(row_seeds[at], int(step), ids[at])
    out = {}
    for name, spec in loader._decode:
        boxes, flips = _native.image_plan(spec, heights, widths, seeds)
        flat = pa.array(np.ascontiguousarray(boxes, dtype=np.int32).reshape(-1), pa.int32())
        out[f"{name}_box"] = pa.FixedSizeListArray.from_arrays(flat, 4)
        out[f"{name}_flip"] = pa.array(flips, pa.bool_())
    return out


def _values(values) -> list[bytes]:
    """``values`` as a list of bytes: a list of bytes-likes, a binary
    Arrow array or chunked array, or a binary column of a table."""
    if hasattr(values, "to_pylist"):
        values = values.to_pylist()
    elif not isinstance(values, (list, tuple)) and hasattr(values, "__getitem__"):
        values = values[np.arange(len(values))]
    out = []
    for i, v in enumerate(values):
        if isinstance(v, (bytes, bytearray, memoryview)):
            out.append(bytes(v))
        elif isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 1:
            out.append(v.tobytes())
        else:
            raise TypeError(f"values[{i}] must be bytes (an encoded image), got {type(v).__name__}")
    return out


def decode(
    values: Sequence[bytes] | Any,
    image: Image,
    *,
    seeds: Any = None,
    ids: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Decodes ``values`` (a list of bytes, a binary Arrow array, or a
    binary column) as ``image`` says, natively with the GIL released:
    uint8 ``(n, 3, H, W)`` (or ``(n, H, W, 3)``). ``seeds`` are the
    records' seeds (uint64, one per value) that draw random crops and
    flips; by default value ``i`` has
    ``loaderx.dataloader.record_seeds(0, 0, [i])[0]``. An undecodable
    value raises ``ValueError`` naming its index (or ``ids[i]``), or with
    ``on_error="zeros"`` becomes a zero image: then ``(array, ok)`` is
    returned, ``ok`` a bool array."""
    from ._transform import record_seeds

    if not isinstance(image, Image):
        raise TypeError(f"image must be a loaderx.Image, got {type(image).__name__}")
    data = _values(values)
    n = len(data)
    if seeds is None:
        seeds = record_seeds(0, 0, np.arange(n, dtype=np.uint64))
    seeds = np.ascontiguousarray(seeds, dtype=np.uint64).reshape(-1)
    ids = np.arange(n, dtype=np.uint64) if ids is None else np.asarray(ids, dtype=np.uint64)
    ids = np.ascontiguousarray(ids).reshape(-1)
    if len(seeds) != n or len(ids) != n:
        raise ValueError(
            f"seeds and ids must hold one value per image ({n}), got {len(seeds)} and {len(ids)}"
        )
    array, ok = _native.image_decode(data, image._spec(), seeds, ids)
    return (array, ok) if image.on_error == "zeros" else array


def _files(root: str) -> tuple[list[str], list[tuple[str, int]]]:
    """The class names (sub-folders sorted by name) and ``(relative path,
    label)`` of every image file below them, in class and path order."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    if not classes:
        raise ValueError(f"root {root!r} holds no class folder (one folder per class)")
    found = []
    for label, name in enumerate(classes):
        top = os.path.join(root, name)
        for d, dirs, names in sorted(os.walk(top, followlinks=True)):
            dirs.sort()
            for f in sorted(names):
                if f.lower().endswith(EXTENSIONS):
                    found.append((os.path.relpath(os.path.join(d, f), root), label))
    return classes, found


#: Files read per native call of an ingest.
_CHUNK = 256


def ingest_folder(
    root: str | os.PathLike[str],
    uri: str | os.PathLike[str],
    *,
    workers: int | None = None,
    on_error: str = "raise",
    progress: bool = False,
    storage_options: dict[str, str] | None = None,
    columns: Any = None,
) -> Table:
    """Ingests the ImageFolder tree ``root`` (one folder per class,
    classes sorted by name as torchvision sorts them; files ending in
    ``.jpg``, ``.jpeg``, ``.png`` or ``.webp``, any case, others ignored)
    into a new sharded table at ``uri``, opened and returned: ``image``
    (binary, the file's bytes, records layout), ``label`` (int64),
    ``height`` and ``width`` (int32, from each header) and ``path`` (utf8,
    relative to ``root``); ``Table.metadata["classes"]`` lists the class
    names in label order. The files are read and checked (each fully
    decoded) on the worker pool. A file that is not a decodable image
    raises ``ValueError`` naming it and nothing is committed, or with
    ``on_error="skip"`` is left out and listed in
    ``Table.metadata["skipped"]``. ``progress=True`` prints the files read
    to stderr.

    ``columns`` carries other values of each image (captions, scores,
    ...): a mapping ``{relative path: {column: value}}`` (paths as the
    ``path`` column writes them, relative to ``root``; a column a file's
    dict lacks is null there), or a table with a ``path`` column and one
    column per value (a pyarrow Table, a polars DataFrame or a dict of
    equal-length lists). Every image file needs an entry (ValueError
    naming the first that has none, and a path with no file). The
    columns are written in this order: ``image``, ``label``, ``path``,
    the extra columns in the order given, then the derived ``height`` and
    ``width``."""
    import pyarrow as pa

    from ._ingest import as_raised
    from .table import _ingest_sharded

    root = os.fspath(root)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"no folder at {root!r}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    classes, files = _files(root)
    if not files:
        raise ValueError(f"root {root!r} holds no image file ({', '.join(EXTENSIONS)})")
    extra, at_path = _extra_columns(columns, [p for p, _ in files], root, pa)
    fields = [("image", pa.binary()), ("label", pa.int64()), ("path", pa.string())]
    fields += [(f.name, f.type) for f in (extra.schema if extra is not None else [])]
    fields += [("height", pa.int32()), ("width", pa.int32())]
    schema = pa.schema(fields)
    skipped: list[str] = []
    failure: list[ValueError] = []

    def batches():
        done = 0
        for at in range(0, len(files), _CHUNK):
            chunk = files[at : at + _CHUNK]
            read = _native.image_read_files([os.path.join(root, p) for p, _ in chunk])
            rows = {"image": [], "label": [], "path": [], "height": [], "width": []}
            for (path, label), (data, h, w, why) in zip(chunk, read):
                if why is not None:
                    if on_error == "raise":
                        failure.append(ValueError(f"{path!r} in {root!r} is {_reason(why)}"))
                        raise failure[0]
                    skipped.append(path)
                    continue
                for k, v in zip(
                    ("image", "label", "path", "height", "width"), (data, label, path, h, w)
                ):
                    rows[k].append(v)
            done += len(chunk)
            if progress:
                print(f"\ringest_folder: {done}/{len(files)} files", end="", file=sys.stderr)
            if rows["path"]:
                cols = []
                for f in schema:
                    if f.name in rows:
                        cols.append(pa.array(rows[f.name], f.type))
                    else:
                        take = pa.array([at_path[p] for p in rows["path"]], pa.int64())
                        cols.append(extra.column(f.name).take(take).combine_chunks())
                yield pa.record_batch(cols, schema)
        if progress:
            print(file=sys.stderr)

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    return as_raised(
        failure,
        _ingest_sharded,
        reader,
        uri,
        workers=workers,
        storage_options=storage_options,
        layout={"image": "records"},
        # Once every file is read: the skipped ones are known.
        metadata=lambda: {"classes": classes, **({"skipped": skipped} if skipped else {})},
    )


#: The columns :func:`ingest_folder` writes itself.
_FOLDER_COLUMNS = ("image", "label", "path", "height", "width")


def _extra_columns(columns, paths: list[str], root: str, pa) -> tuple[Any, dict]:
    """``ingest_folder``'s ``columns=`` as ``(pyarrow Table of the extra
    columns, {path: its row})``, checked against the files ``paths``;
    ``(None, {})`` without columns."""
    from collections.abc import Mapping

    if columns is None:
        return None, {}
    if type(columns).__module__.split(".")[0] == "polars" and hasattr(columns, "to_arrow"):
        columns = columns.to_arrow()
    if (
        isinstance(columns, Mapping)
        and columns
        and all(isinstance(v, Mapping) for v in columns.values())
    ):
        # {path: {column: value}}: the columns in the order first seen.
        names: dict[str, None] = {}
        for path, values in columns.items():
            if not isinstance(path, str):
                raise TypeError(f"columns must be keyed by relative path (str), got {path!r}")
            names.update(dict.fromkeys(values))
        keys = list(columns)
        data = {"path": keys}
        data.update({n: [columns[p].get(n) for p in keys] for n in names})
        try:
            table = pa.table(data)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(f"columns' values do not make one type per column: {exc}") from None
    elif isinstance(columns, Mapping):
        try:
            table = pa.table(dict(columns))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise ValueError(
                "columns must be {relative path: {column: value}} or a table with a 'path' "
                f"column (equal-length columns), got {exc}"
            ) from None
    elif isinstance(columns, pa.Table):
        table = columns
    else:
        raise TypeError(
            "columns must be {relative path: {column: value}} or a table with a 'path' column "
            f"(a pyarrow Table, a polars DataFrame or a dict of lists), got "
            f"{type(columns).__name__}"
        )
    if "path" not in table.column_names:
        raise ValueError(f"columns must have a 'path' column, got columns {table.column_names}")
    clash = [n for n in table.column_names if n in _FOLDER_COLUMNS and n != "path"]
    if clash:
        raise ValueError(
            f"columns {clash} are columns ingest_folder writes itself ({list(_FOLDER_COLUMNS)})"
        )
    if not pa.types.is_string(table.schema.field("path").type) and not pa.types.is_large_string(
        table.schema.field("path").type
    ):
        raise TypeError(f"columns' 'path' must be str, got {table.schema.field('path').type}")
    at_path: dict[str, int] = {}
    for i, p in enumerate(table.column("path").to_pylist()):
        key = os.path.normpath(p) if p is not None else p
        if key in at_path:
            raise ValueError(f"columns names path {p!r} more than once")
        at_path[key] = i
    missing = [p for p in paths if p not in at_path]
    if missing:
        raise ValueError(
            f"columns has no entry for {len(missing)} of the {len(paths)} image files in "
            f"{root!r}, the first {missing[0]!r}"
        )
    found = set(paths)
    stray = [p for p in at_path if p not in found]
    if stray:
        raise ValueError(
            f"columns names {len(stray)} paths that are no image file in {root!r}, "
            f"the first {stray[0]!r}"
        )
    return table.drop(["path"]).combine_chunks(), at_path


def _reason(why: str) -> str:
    """``why`` (the core's reason a value is not an image, or an OS error
    reading a file) as "not a decodable image: ...", said once."""
    prefix = "not a decodable image: "
    return prefix + why.removeprefix(prefix)


def _parquet_files(source) -> list[str]:
    """``source`` as Parquet file paths: a file, a folder (every
    ``*.parquet`` file below it, sorted) or a list of files."""
    if isinstance(source, (str, os.PathLike)):
        source = os.fspath(source)
        if os.path.isdir(source):
            found = sorted(
                os.path.join(d, f)
                for d, _, names in os.walk(source)
                for f in names
                if f.lower().endswith(".parquet")
            )
            if not found:
                raise ValueError(f"source {source!r} holds no .parquet file")
            return found
        if not os.path.isfile(source):
            raise FileNotFoundError(f"no Parquet file or folder at {source!r}")
        return [source]
    if isinstance(source, Sequence) and source:
        files = [os.fspath(f) for f in source]
        for f in files:
            if not os.path.isfile(f):
                raise FileNotFoundError(f"no Parquet file at {f!r}")
        return files
    raise TypeError(f"source must be a Parquet file, a folder or a list of files, got {source!r}")


def _class_names(schema, column_names) -> list[str] | None:
    """The class names of a Hugging Face ``ClassLabel`` feature, from the
    schema's ``huggingface`` metadata: the ``label`` column's, or the only
    one's."""
    import json

    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is None:
        return None
    try:
        features = json.loads(raw).get("info", {}).get("features", {})
    except (ValueError, AttributeError):
        return None
    if not isinstance(features, dict):
        return None
    labels = {
        k: v["names"]
        for k, v in features.items()
        if isinstance(v, dict)
        and v.get("_type") == "ClassLabel"
        and isinstance(v.get("names"), list)
        and k in column_names
    }
    if "label" in labels:
        return [str(n) for n in labels["label"]]
    if len(labels) == 1:
        return [str(n) for n in next(iter(labels.values()))]
    return None


def _arrow_parts(source, pa) -> tuple[Any, list, int, str]:
    """``source`` of :func:`ingest_parquet` as ``(schema, parts, rows,
    name)``: ``parts`` a list of ``(name, label, batches)`` read in order
    (``batches()`` yielding record batches of at most ``_CHUNK`` rows),
    ``label`` how an error names the part (a file's repr, or ``"the
    source"``), ``rows`` the total when known (None otherwise)."""
    import pyarrow.parquet as pq

    if isinstance(source, (str, os.PathLike)) or (
        isinstance(source, Sequence) and not isinstance(source, (bytes, bytearray))
    ):
        files = _parquet_files(source)
        schema = pq.read_schema(files[0])

        def reader(file):
            def batches():
                pf = pq.ParquetFile(file)
                if pf.schema_arrow.remove_metadata() != schema.remove_metadata():
                    raise ValueError(
                        f"{file!r} has columns {pf.schema_arrow.names} of other types than "
                        f"{files[0]!r}: every file must have the same schema"
                    )
                yield from pf.iter_batches(batch_size=_CHUNK)

            return batches

        parts = [(os.path.basename(f), repr(f), reader(f)) for f in files]
        total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        return schema, parts, total, repr(files[0])
    if type(source).__module__.split(".")[0] == "polars" and hasattr(source, "to_arrow"):
        source = source.to_arrow()
    if isinstance(source, pa.Table):
        table = source

        def batches():
            yield from table.to_batches(max_chunksize=_CHUNK)

        return table.schema, [("source", "the source", batches)], table.num_rows, "the source"
    if isinstance(source, pa.RecordBatchReader) or hasattr(source, "__arrow_c_stream__"):
        stream = (
            source
            if isinstance(source, pa.RecordBatchReader)
            else pa.RecordBatchReader.from_stream(source)
        )

        def batches():
            for batch in stream:
                for at in range(0, batch.num_rows, _CHUNK):
                    yield batch.slice(at, _CHUNK)

        return stream.schema, [("source", "the source", batches)], None, "the source"
    raise TypeError(
        "source must be a Parquet file, a folder or a list of files, a pyarrow Table or "
        f"RecordBatchReader, or a polars DataFrame, got {type(source).__name__}"
    )


def ingest_parquet(
    source: str | os.PathLike[str] | Any,
    uri: str | os.PathLike[str],
    *,
    column: str = "image",
    workers: int | None = None,
    on_error: str = "raise",
    progress: bool = False,
    storage_options: dict[str, str] | None = None,
) -> Table:
    """Ingests a table of encoded images with its other columns into a new
    sharded table at ``uri``, opened and returned. ``source`` is
    Hugging Face–style Parquet (a file, a folder of ``*.parquet`` files
    read in sorted order, or a list of files), a pyarrow Table or
    RecordBatchReader, or a polars DataFrame (any other Arrow stream
    source is read as a RecordBatchReader). The image column ``column`` is
    a struct ``{bytes, path}`` (the ``datasets`` library's ``Image``
    feature) or plain binary; it becomes a binary column of the encoded
    bytes (records layout). Every other column is kept as it is, and the
    columns are written in the source's order, followed by those the
    ingest derives: ``height`` and ``width`` (int32, from each header)
    and, for a struct, ``path`` (utf8). The class names of a
    ``ClassLabel`` feature (the ``label`` column's, or the only one's, in
    the schema's ``huggingface`` metadata) go in
    ``Table.metadata["classes"]``. Each image is checked (fully decoded)
    on the worker pool. A null or undecodable image raises ``ValueError``
    naming its file (or the source), row and path, and nothing is
    committed; with ``on_error="skip"`` its row is left out and listed
    (``file[row]``, or ``source[row]``) in ``Table.metadata["skipped"]``.
    ``progress=True`` prints the rows read to stderr."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ._ingest import as_raised
    from .table import _ingest_sharded

    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    schema, parts, total, first = _arrow_parts(source, pa)
    if column not in schema.names:
        raise ValueError(f"column {column!r} is not in {first}; its columns: {schema.names}")
    kind = schema.field(column).type
    binary = (pa.types.is_binary, pa.types.is_large_binary)
    if pa.types.is_struct(kind):
        names = [kind.field(i).name for i in range(kind.num_fields)]
        if "bytes" not in names or not any(f(kind.field("bytes").type) for f in binary):
            raise TypeError(
                f"column {column!r} must be binary or a struct with a binary 'bytes' field, "
                f"got {kind}"
            )
        with_path = "path" in names
    elif any(f(kind) for f in binary):
        with_path = False
    else:
        raise TypeError(f"column {column!r} must be binary or a struct {{bytes, path}}, got {kind}")
    added = ["height", "width"] + (["path"] if with_path else [])
    clash = [n for n in added if n in schema.names]
    if clash:
        raise ValueError(f"the ingest adds columns {added}, but {first} already has {clash}")
    # The source's columns in its order, then the derived ones.
    fields = [pa.field(column, pa.binary()) if f.name == column else f for f in schema]
    fields += [("height", pa.int32()), ("width", pa.int32())]
    if with_path:
        fields.append(("path", pa.string()))
    out_schema = pa.schema(fields)
    classes = _class_names(schema, schema.names)
    skipped: list[str] = []
    failure: list[ValueError] = []
    of_total = "" if total is None else f"/{total}"

    def batches():
        done = 0
        for name, label, read in parts:
            row = 0
            try:
                for batch in read():
                    yield from convert(batch, name, label, row)
                    row += batch.num_rows
                    done += batch.num_rows
                    if progress:
                        print(f"\ringest_parquet: {done}{of_total} rows", end="", file=sys.stderr)
            except ValueError as exc:
                if not failure:
                    failure.append(exc)
                raise failure[0] from None
        if progress:
            print(file=sys.stderr)

    def convert(batch, name, label, row):
        col = batch.column(column)
        if pa.types.is_struct(col.type):
            data = col.field("bytes")
            paths = col.field("path").to_pylist() if with_path else None
            nulls = pc.or_(col.is_null(), data.is_null()).to_pylist()
        else:
            data, paths, nulls = col, None, col.is_null().to_pylist()
        values = [b"" if v is None else v for v in data.to_pylist()]
        checked = _native.image_check_values(values)
        keep = []
        for i, ((_, _, why), null) in enumerate(zip(checked, nulls)):
            if null:
                why = "the image is null"
            if why is not None:
                where = f"{label} row {row + i}" + (
                    f" (path {paths[i]!r})" if paths and paths[i] else ""
                )
                if on_error == "raise":
                    failure.append(ValueError(f"{where} is {_reason(why)}"))
                    raise failure[0]
                skipped.append(f"{name}[{row + i}]")
            else:
                keep.append(i)
        if not keep:
            return
        take = pa.array(keep, pa.int64())
        cols = []
        for f in out_schema:
            if f.name == column:
                cols.append(pc.take(data, take).cast(pa.binary()))
            elif f.name in ("height", "width"):
                k = 0 if f.name == "height" else 1
                cols.append(pa.array([checked[i][k] for i in keep], pa.int32()))
            elif with_path and f.name == "path":
                cols.append(pa.array([paths[i] for i in keep], pa.string()))
            else:
                cols.append(pc.take(batch.column(f.name), take))
        yield pa.record_batch(cols, out_schema)

    reader = pa.RecordBatchReader.from_batches(out_schema, batches())

    def metadata():
        out = {}
        if classes is not None:
            out["classes"] = classes
        if skipped:
            out["skipped"] = skipped
        return out

    return as_raised(
        failure,
        _ingest_sharded,
        reader,
        uri,
        workers=workers,
        storage_options=storage_options,
        layout={column: "records"},
        metadata=metadata,
    )
