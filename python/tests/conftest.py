import os

import numpy as np
import pytest


@pytest.fixture
def root(tmp_path):
    """A temporary directory for stores."""
    return tmp_path


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Runs the test with the current directory set to a temporary one."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def snapshot(path):
    """The bytes of every file of a store directory (to prove nothing changed)."""
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out


DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]


def random_records(dtype, shape, rng):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind == "f":
        return rng.standard_normal(size=shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
