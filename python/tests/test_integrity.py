"""Opt-in checksums: create(..., checksum=True) writes zstd frames that carry
their content checksum, so a damaged payload raises Corrupted instead of
decoding to wrong bytes."""

import os
import struct

import numpy as np
import pytest

from loaderx.utils import train_dict
from loaderx.zrecord import Corrupted, DenseStore, RaggedStore

from conftest import snapshot

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def locations(path):
    """(offset, phys_length, logic_length) of every record, from meta.zr."""
    with open(os.path.join(path, "meta.zr"), "rb") as f:
        meta = f.read()
    (length,) = struct.unpack_from("<Q", meta, 0)
    return [struct.unpack_from("<QII", meta, 4096 + 16 * i) for i in range(length)]


def flip(path, at):
    with open(os.path.join(path, "data.zr"), "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x10]))


def frame_has_checksum(path, offset):
    with open(os.path.join(path, "data.zr"), "rb") as f:
        f.seek(offset)
        head = f.read(5)
    assert head[:4] == ZSTD_MAGIC, "a record is a plain zstd frame"
    return bool(head[4] & 0x04)


def incompressible(n, seed=0):
    # Random bytes: zstd stores them as raw blocks, where a flipped byte
    # decodes without error unless the frame has a checksum.
    return np.random.default_rng(seed).integers(0, 256, size=(n, 256), dtype=np.uint8)


def damage_outcomes(path, reopen, record=0):
    """Flips each byte of record ``record``'s frame in turn; counts how often
    the read raised Corrupted and how often it returned wrong bytes."""
    offset, phys, _ = locations(path)[record]
    with reopen() as store:
        good = store[record].copy()
    caught = silent = 0
    for at in range(offset, offset + phys):
        flip(path, at)
        try:
            with reopen() as store:
                got = store[record]
            if not np.array_equal(np.asarray(got), good):
                silent += 1
        except Corrupted as exc:
            assert "data.zr" in str(exc)
            caught += 1
        flip(path, at)  # restore
    return caught, silent


def test_every_flipped_payload_byte_is_caught_with_checksum(root):
    path = str(root / "sum")
    with DenseStore.create(path, np.uint8, (256,), checksum=True) as ds:
        assert ds.checksum
        ds.append(incompressible(3))
    caught, silent = damage_outcomes(path, lambda: DenseStore.open(path), record=1)
    assert silent == 0
    assert caught > 0


def test_without_checksum_some_flips_decode_to_wrong_bytes(root):
    # What the option buys: the default store trusts its raw blocks.
    path = str(root / "plain")
    with DenseStore.create(path, np.uint8, (256,)) as ds:
        assert not ds.checksum
        ds.append(incompressible(3))
    _, silent = damage_outcomes(path, lambda: DenseStore.open(path), record=1)
    assert silent > 0


def test_checksum_with_a_dictionary_and_ragged_records(root):
    rng = np.random.default_rng(3)
    sample = [
        rng.integers(0, 50, size=int(rng.integers(20, 200)), dtype=np.int32) for _ in range(400)
    ]
    blob = train_dict(sample, tier="fast")
    path = str(root / "rag")
    with RaggedStore.create(
        path, np.int32, codec="zstd_dict", dict_bytes=blob, checksum=True
    ) as rs:
        rs.append(sample[:20])
    offsets = [loc[0] for loc in locations(path)]
    assert all(frame_has_checksum(path, o) for o in offsets)
    caught, silent = damage_outcomes(path, lambda: RaggedStore.open(path), record=4)
    assert silent == 0 and caught > 0


def test_checksum_is_kept_on_reopen(root):
    path = str(root / "keep")
    with DenseStore.create(path, np.uint8, (256,), checksum=True) as ds:
        ds.append(incompressible(2))
    with DenseStore.open(path) as ds:
        assert ds.checksum
        ds.append(incompressible(2, seed=1))
    # The records appended after the reopen carry checksums too.
    assert all(frame_has_checksum(path, loc[0]) for loc in locations(path))
    with DenseStore.create(str(root / "off"), np.uint8, (256,)) as ds:
        ds.append(incompressible(1))
    with DenseStore.open(str(root / "off")) as ds:
        assert not ds.checksum


def test_checksum_arguments_are_checked_before_anything_is_written(root):
    path = root / "raw"
    with pytest.raises(ValueError, match="checksum"):
        DenseStore.create(str(path), np.float32, (2,), codec="raw", checksum=True)
    assert not (path / "meta.zr").exists()
    with pytest.raises(TypeError, match="checksum must be a bool"):
        RaggedStore.create(str(root / "t"), np.int32, checksum="yes")
    assert not (root / "t").exists()


def test_checksum_store_is_unchanged_by_a_failed_read(root):
    path = str(root / "ro")
    with DenseStore.create(path, np.uint8, (256,), checksum=True) as ds:
        ds.append(incompressible(2))
    offset, phys, _ = locations(path)[0]
    flip(path, offset + phys // 2)
    before = snapshot(path)
    with DenseStore.open(path) as ds:
        with pytest.raises(Corrupted, match="record 0"):
            ds[0]
        np.testing.assert_array_equal(ds[1], incompressible(2)[1])
    assert snapshot(path) == before
