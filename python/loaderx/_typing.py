"""Type aliases of the public signatures (a leaf: it imports nothing of the
package). They document what each argument accepts; nothing is checked
here."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Union

import numpy as np
import numpy.typing as npt

__all__ = ["PathLike", "Key", "DTypeLike", "Shape", "Streams", "ArrowSource"]

#: A filesystem path: ``str`` or ``os.PathLike`` (``pathlib.Path``).
PathLike = Union[str, "os.PathLike[str]"]

#: A record selection: an int (one record), a slice, a sequence of ints or a
#: tuple of them (a record set, never nested indexing), an integer ndarray or
#: a bool mask of length ``len``.
Key = Union[
    int, np.integer, slice, Sequence[int], "npt.NDArray[np.integer]", "npt.NDArray[np.bool_]"
]

#: Anything ``numpy.dtype()`` accepts.
DTypeLike = npt.DTypeLike

#: An item shape: a sequence of positive ints (``()`` for scalars).
Shape = Sequence[int]

#: Equal-length streams by name: a ``dict`` of open stores or a ``loaderx.Table``.
Streams = Mapping[str, Any]

#: An object of the Arrow PyCapsule interface (``__arrow_c_stream__`` or
#: ``__arrow_c_array__``): a pyarrow Table, RecordBatchReader or Array, a
#: polars DataFrame or Series, a DuckDB result.
ArrowSource = Any
