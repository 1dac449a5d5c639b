"""loaderx.pack: first-fit-decreasing packing, its invariants (property
tests) and its argument checks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loaderx

records_st = st.lists(st.integers(0, 40), max_size=30)


def _records(lengths):
    # Record i holds tokens 1000 * (i + 1) + 0, 1, 2, ...: each token says
    # which record and which position it is.
    return [np.arange(n, dtype=np.int32) + 1000 * (i + 1) for i, n in enumerate(lengths)]


def _segments(out):
    """Per row, the list of segments (arrays of tokens) in order."""
    segs = []
    for toks, ids, pos in zip(out["tokens"], out["segment_ids"], out["positions"]):
        row = []
        for s in range(1, ids.max(initial=0) + 1):
            where = np.flatnonzero(ids == s)
            assert (np.diff(where) == 1).all(), "a segment is contiguous"
            np.testing.assert_array_equal(pos[where], np.arange(len(where)))
            row.append(toks[where])
        assert (toks[ids == 0] == -1).all(), "padding holds pad"
        used = np.flatnonzero(ids != 0)
        assert used.size == 0 or used.max() == used.size - 1, "segments are left-aligned"
        segs.append(row)
    return segs


@settings(max_examples=200, deadline=None)
@given(
    records_st,
    st.integers(1, 50),
    st.one_of(st.none(), st.integers(0, 6)),
    st.one_of(st.none(), st.integers(1, 5)),
    st.booleans(),
)
def test_packing_keeps_every_kept_token_once_in_order(lengths, seq_len, rows, max_segments, split):
    recs = _records(lengths)
    out = loaderx.pack(recs, seq_len, rows, pad=-1, max_segments=max_segments, split=split)
    n = out["tokens"].shape[0]
    assert out["tokens"].shape == out["segment_ids"].shape == out["positions"].shape
    assert out["tokens"].shape[1] == seq_len
    assert out["tokens"].dtype == (np.int32 if lengths else np.int64)
    if rows is not None:
        assert n == rows
    segs = _segments(out)
    if max_segments is not None:
        assert all(len(r) <= max_segments for r in segs)
    pieces = {}
    for row in segs:
        for seg in row:
            rec = int(seg[0]) // 1000 - 1
            pieces.setdefault(rec, []).append(seg)
            if not split:
                # Whole records only: a segment is a record, start to end.
                np.testing.assert_array_equal(seg, recs[rec])
    kept = 0
    for rec, parts in pieces.items():
        # The pieces of a record, in row order, are its tokens once, in order
        # (a prefix of it when the rows ran out).
        tokens = np.concatenate(parts)
        np.testing.assert_array_equal(tokens, recs[rec][: len(tokens)])
        if not split:
            assert len(parts) == 1
        kept += len(tokens)
    assert kept + out["dropped"] == sum(lengths)
    if rows is None and not split:
        assert out["dropped"] == sum(n for n in lengths if n > seq_len)
    if rows is None and split:
        assert out["dropped"] == 0


def test_first_fit_decreasing_and_the_documented_example():
    out = loaderx.pack([np.array([5, 6, 7]), np.array([8, 9]), np.array([4])], 4)
    assert out["tokens"].tolist() == [[5, 6, 7, 4], [8, 9, 0, 0]]
    assert out["segment_ids"].tolist() == [[1, 1, 1, 2], [1, 1, 0, 0]]
    assert out["dropped"] == 0
    # A fixed row count drops a record that fits nowhere, whole.
    out = loaderx.pack([np.array([1, 2, 3]), np.array([4, 5, 6])], 4, rows=1, pad=9)
    assert out["tokens"].tolist() == [[1, 2, 3, 9]] and out["dropped"] == 3
    # ... or cuts it into the room there is with split=True.
    out = loaderx.pack([np.array([1, 2, 3]), np.array([4, 5, 6])], 4, rows=1, split=True)
    assert out["tokens"].tolist() == [[1, 2, 3, 4]] and out["dropped"] == 2
    assert out["segment_ids"].tolist() == [[1, 1, 1, 2]]
    # A record longer than a row is cut across rows; positions restart.
    out = loaderx.pack([np.array([1, 2, 3, 4, 5, 6])], 4, split=True)
    assert out["tokens"].tolist() == [[1, 2, 3, 4], [5, 6, 0, 0]]
    assert out["positions"].tolist() == [[0, 1, 2, 3], [0, 1, 0, 0]]
    empty = loaderx.pack([], 8)
    assert empty["tokens"].shape == (0, 8) and empty["dropped"] == 0


def test_large_outputs_never_show_an_earlier_batch():
    # Outputs of this size come from recycled memory: every element of a
    # new batch (padding, segment ids, positions) is written afresh, for
    # every token dtype, and each array outlives the others and the dict.
    rng = np.random.default_rng(3)
    kept = []
    for dtype in (np.int8, np.uint16, np.int32, np.int64, np.int32):
        full = [np.full(4000, 77, dtype) for _ in range(40)]
        big = loaderx.pack(full, 4096)
        assert big["tokens"].dtype == dtype and big["tokens"].shape == (40, 4096)
        del big
        # About 30 rows: within twice the size of the 40 before, so the
        # memory of those is reused.
        lengths = rng.integers(300, 900, 200)
        recs = [np.arange(n, dtype=dtype) % 50 + 1 for n in lengths]
        out = loaderx.pack(recs, 4096, pad=-1 if np.dtype(dtype).kind == "i" else 0)
        segs = _segments_any_pad(out)
        got = sorted(tuple(t.tolist()) for row in segs for t in row)
        assert got == sorted(tuple(r.tolist()) for r in recs)
        kept.append(out["positions"])
        del out
    for pos in kept:
        assert pos.flags.writeable and pos.dtype == np.int32 and pos.min() >= 0


def _segments_any_pad(out):
    segs = []
    pad = out["tokens"][out["segment_ids"] == 0]
    assert pad.size == 0 or (pad == pad.flat[0]).all()
    assert (out["positions"][out["segment_ids"] == 0] == 0).all()
    for toks, ids, pos in zip(out["tokens"], out["segment_ids"], out["positions"]):
        row = []
        for s in range(1, ids.max(initial=0) + 1):
            where = np.flatnonzero(ids == s)
            np.testing.assert_array_equal(pos[where], np.arange(len(where)))
            row.append(toks[where])
        segs.append(row)
    return segs


def test_packing_a_loader_batch(tmp_path):
    from loaderx.dataloader import DataLoader

    with loaderx.RaggedStore.create(tmp_path / "tok", np.uint16) as s:
        s.append(np.full(i % 9 + 1, i, np.uint16) for i in range(100))
    with (
        loaderx.RaggedStore.open(tmp_path / "tok") as s,
        DataLoader(
            {"tok": s}, batch_size=16, seed=1, transform=lambda b: loaderx.pack(b["tok"], 32)
        ) as loader,
    ):
        out = next(loader)
    assert out["tokens"].dtype == np.uint16 and out["tokens"].shape[1] == 32
    assert out["dropped"] == 0


def test_bad_arguments_name_themselves():
    r = [np.array([1, 2], np.int64)]
    with pytest.raises(ValueError, match="seq_len must be"):
        loaderx.pack(r, 0)
    with pytest.raises(ValueError, match="max_segments must be"):
        loaderx.pack(r, 4, max_segments=0)
    with pytest.raises(ValueError, match="rows must be"):
        loaderx.pack(r, 4, rows=-1)
    with pytest.raises(TypeError, match="integer tokens, got dtype float32"):
        loaderx.pack([np.zeros(3, np.float32)], 4)
    with pytest.raises(TypeError, match="record 1 is 1-D int32"):
        loaderx.pack([np.zeros(3, np.int64), np.zeros(3, np.int32)], 4)
    with pytest.raises(TypeError, match="one ndarray"):
        loaderx.pack(np.zeros((3, 3), np.int64), 4)
    with pytest.raises(
        ValueError, match=r"pad must fit the records' dtype uint8 \(0..255\), got -1"
    ):
        loaderx.pack([np.zeros(3, np.uint8)], 4, pad=-1)
    with pytest.raises(TypeError, match="split must be a bool"):
        loaderx.pack(r, 4, split="yes")
