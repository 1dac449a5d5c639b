"""Records zstd does not shrink by a sixteenth are stored as zstd frames of
raw blocks (docs/format.md, "Frames of raw blocks"): valid zstd that any
decoder reads, counted by ``stats()["raw_records"]``, kept as they are by
``compact``, while compressible stores keep exactly their frames."""

import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from loaderx.utils import train_dict
from loaderx.zrecord import DenseStore, RaggedStore

MAGIC = b"\x28\xb5\x2f\xfd"


def locations(path):
    """(offset, phys_length, logic_length) of every record, from meta.zr."""
    meta = (path / "meta.zr").read_bytes()
    length = struct.unpack_from("<Q", meta, 0)[0]
    return [struct.unpack_from("<QII", meta, 4096 + 16 * i) for i in range(length)]


def frames(path):
    data = (path / "data.zr").read_bytes()
    return [data[off : off + phys] for off, phys, _ in locations(path)]


def is_raw_frame(frame, n):
    """Whether ``frame`` is the zstd frame of raw blocks of ``n`` bytes,
    built here from RFC 8878: magic, a single-segment descriptor with the
    content size in 1, 2 or 4 bytes, then raw blocks of at most 128 KiB."""
    if n <= 0xFF:
        want = MAGIC + bytes([0x20, n])
    elif n <= 0x100FF:
        want = MAGIC + b"\x60" + struct.pack("<H", n - 256)
    else:
        want = MAGIC + b"\xa0" + struct.pack("<I", n)
    if frame[: len(want)] != want:
        return False
    blocks = max(1, -(-n // (128 << 10)))
    pos = len(want)
    for b in range(blocks):
        size = min(128 << 10, n - b * (128 << 10))
        header = ((size << 3) | (b + 1 == blocks)).to_bytes(3, "little")
        if frame[pos : pos + 3] != header:
            return False
        pos += 3 + size
    return pos == len(frame)


def mixed_records(rng, n=60, width=768):
    """Noise (zstd cannot shrink it) and compressible rows, interleaved so
    both kinds of frame occur."""
    rows = rng.integers(0, 256, (n, width), dtype=np.uint8)
    rows[::3] = (np.arange(width) // 16).astype(np.uint8)
    return rows


@pytest.mark.parametrize("codec", ["zstd", "zstd_dict"])
def test_every_frame_decodes_with_python_zstandard(tmp_path, codec):
    import zstandard  # a test dependency with no free-threaded wheel

    rng = np.random.default_rng(5)
    data = mixed_records(rng)
    dict_bytes = train_dict(data[::3].copy(), tier="fast") if codec == "zstd_dict" else None
    path = tmp_path / "s"
    with DenseStore.create(path, np.uint8, (768,), codec=codec, dict_bytes=dict_bytes) as ds:
        ds.append(data)
        stats = ds.stats()
    dctx = (
        zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(dict_bytes))
        if dict_bytes
        else zstandard.ZstdDecompressor()
    )
    raw = 0
    for i, (frame, (_, _, logic)) in enumerate(zip(frames(path), locations(path))):
        assert frame[:4] == MAGIC
        assert dctx.decompress(frame, max_output_size=logic) == data[i].tobytes(), i
        raw += is_raw_frame(frame, logic)
    # Two in three rows are noise; the compressible third stays compressed.
    assert raw == stats["raw_records"] == 40
    with DenseStore.open(path) as ds:
        np.testing.assert_array_equal(ds[:], data)
        idx = rng.integers(0, 60, 256)
        np.testing.assert_array_equal(ds[idx], data[idx])


def test_cli_stats_reports_raw_records(tmp_path):
    path = tmp_path / "s"
    rng = np.random.default_rng(6)
    with DenseStore.create(path, np.uint8, (768,)) as ds:
        ds.append(mixed_records(rng))
        want = ds.stats()
    r = subprocess.run(
        [sys.executable, "-m", "loaderx.cli", "stats", str(path), "--json"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got == want and got["raw_records"] == 40
    r = subprocess.run(
        [sys.executable, "-m", "loaderx.cli", "stats", str(path)], capture_output=True, text=True
    )
    assert "raw_records: 40" in r.stdout


def test_raw_store_counts_every_record_raw(tmp_path):
    with DenseStore.create(tmp_path / "r", np.float32, (4,), codec="raw") as ds:
        ds.append(np.ones((7, 4), np.float32))
        assert ds.stats()["raw_records"] == 7


def test_compact_keeps_frames_as_they_are(tmp_path):
    path = tmp_path / "s"
    rng = np.random.default_rng(7)
    data = mixed_records(rng)
    with DenseStore.create(path, np.uint8, (768,)) as ds:
        ds.append(data)
    before = {bytes(f) for f in frames(path)}
    with DenseStore.open(path) as ds:
        ds.delete(np.arange(0, 60, 4))
        expect = ds[:]
        raw_before = ds.stats()["raw_records"]
        ds.compact()
        st = ds.stats()
        assert st["reclaimable"] == 0 and st["raw_records"] == raw_before
        np.testing.assert_array_equal(ds[:], expect)
    after = frames(path)
    assert len(after) == 45 and all(bytes(f) in before for f in after)


def _frames_of_libzstd(rows):
    import zstandard

    cctx = zstandard.ZstdCompressor(level=3, write_content_size=True)
    return sum(len(cctx.compress(r)) for r in rows)


def test_compressible_stores_keep_their_frames(tmp_path):
    rng = np.random.default_rng(8)
    # Pixels: 32x32x3 images of flat regions and gradients, a few specks.
    yy, xx = np.mgrid[0:32, 0:32]
    pixels = np.stack(
        [np.stack([yy // 4 * 24 + k, xx // 8 * 40 + k, (yy + xx) // 6 * 9], -1) for k in range(100)]
    ).astype(np.uint8)
    specks = rng.integers(0, pixels.size, pixels.size // 50)
    pixels.reshape(-1)[specks] = rng.integers(0, 256, specks.size, dtype=np.uint8)
    path = tmp_path / "pixels"
    with DenseStore.create(path, np.uint8, (32, 32, 3)) as ds:
        ds.append(pixels)
        st = ds.stats()
    assert st["raw_records"] == 0
    assert st["data_bytes"] == _frames_of_libzstd(p.tobytes() for p in pixels)

    # Token ids and text: ragged records (a shape prefix, then the payload).
    vocab = rng.integers(0, 2000, 400, dtype=np.int32)
    tokens = [vocab[rng.integers(0, 400, rng.integers(200, 600))] for _ in range(100)]
    words = b"the of and to in is was for that with as on by at from it an be".split()
    text = [
        np.frombuffer(b" ".join(words[j] for j in rng.integers(0, len(words), 300)), np.uint8)
        for _ in range(100)
    ]
    for name, dtype, recs in [("tokens", np.int32, tokens), ("text", np.uint8, text)]:
        path = tmp_path / name
        with RaggedStore.create(path, dtype) as rs:
            rs.append(recs)
            st = rs.stats()
        logical = [struct.pack("<QQ", 1, len(r)) + np.ascontiguousarray(r).tobytes() for r in recs]
        assert st["raw_records"] == 0, name
        assert st["data_bytes"] == _frames_of_libzstd(logical), name


def test_table_of_embeddings_stores_raw_frames(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import loaderx

    rng = np.random.default_rng(9)
    emb = rng.standard_normal((3000, 384)).astype(np.float16)
    label = rng.integers(0, 1000, 3000)
    table = pa.table(
        {
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), 384),
            "label": pa.array(label),
        }
    )
    t = loaderx.ingest_sharded(table, tmp_path / "t", workers=2)
    try:
        np.testing.assert_array_equal(np.asarray(t["emb"][np.arange(3000)]).reshape(3000, 384), emb)
    finally:
        t.close()
    stores = [m.parent for m in (tmp_path / "t").rglob("meta.zr") if m.parent.name == "emb"]
    assert stores
    for path in stores:
        for frame, (_, _, logic) in zip(frames(path), locations(path)):
            assert is_raw_frame(frame, logic)
