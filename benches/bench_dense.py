"""Random batch gather of fixed-shape records: loaderx DenseStore against peers.

Workloads (identical records and index plan for every backend):

- ``vision``: CHW RGB uint8 images (3, 224, 224) from the smooth spatial
  model in ``_workloads.py``; 2,500 records, 50 batches of 256 by default.
- ``tokens``: a synthetic GPT-2-vocabulary int32 stream packed into
  200,000 records of int32[512]; 100 batches of 256 by default.

Run from the repository root with the project venv, for example::

    .venv/bin/python benches/bench_dense.py --workload vision
    .venv/bin/python benches/bench_dense.py --workload tokens --only zrecord-zstd,npy-mmap-raw
    .venv/bin/python benches/bench_dense.py --quick   # seconds-long smoke run

The markdown table goes to stdout, progress to stderr and everything measured
to ``benches/out/dense-<workload>.json`` (``-quick`` appended for --quick).
"""

from __future__ import annotations

import numpy as np

import _workloads as wl
from _backends import BACKENDS
from _common import Workload, run, validate_dense

WORKLOADS = {
    "vision": Workload(
        name="vision",
        make=wl.dense_vision,
        **wl.VISION_SIZES,
        describe="{records} CHW RGB uint8 images of (3, 224, 224), {logical_mib:.1f} MiB "
        "logical; {batches} random batches of {batch_size}.",
    ),
    "tokens": Workload(
        name="tokens",
        make=wl.dense_tokens,
        **wl.TOKEN_SIZES,
        describe="{records} records of int32[512] packed from a synthetic GPT-2-vocabulary "
        "token stream, {logical_mib:.1f} MiB logical; {batches} random batches of "
        "{batch_size}.",
    ),
}


def spec(records: np.ndarray) -> dict:
    return {"dtype": records.dtype, "item_shape": tuple(records.shape[1:])}


if __name__ == "__main__":
    run("dense", WORKLOADS, BACKENDS, validate_dense, spec)
