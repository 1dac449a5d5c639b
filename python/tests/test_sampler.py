"""Zsampler: purity, determinism, and each mode's definition."""

import numpy as np
import pytest

from loaderx.zsampler import Sampler

MODES = [Sampler.Mode.SEQUENTIAL, Sampler.Mode.IID, Sampler.Mode.CYCLIC]


@pytest.mark.parametrize("mode", MODES)
def test_at_equals_the_steps_next(mode):
    s = Sampler(1000, 64, mode, seed=3)
    batches = [s.next() for _ in range(40)]
    assert s.step == 40
    for k, b in enumerate(batches):
        assert b.dtype == np.int64 and b.shape == (64,)
        np.testing.assert_array_equal(s.at(k), b)
    assert s.step == 40  # at() is pure
    s.step = 7
    np.testing.assert_array_equal(s.next(), batches[7])
    assert s.step == 8


@pytest.mark.parametrize("mode", [Sampler.Mode.IID, Sampler.Mode.CYCLIC])
def test_per_seed_determinism(mode):
    a = Sampler(10_000, 128, mode, seed=11)
    b = Sampler(10_000, 128, mode, seed=11)
    c = Sampler(10_000, 128, mode, seed=12)
    for k in (0, 1, 99, 12345):
        np.testing.assert_array_equal(a.at(k), b.at(k))
        assert not np.array_equal(a.at(k), c.at(k))


def test_sequential_formula():
    n, B = 10, 4
    s = Sampler(n, B, "sequential")
    for k in range(12):
        np.testing.assert_array_equal(s.at(k), (k * B + np.arange(B)) % n)
    big = Sampler(3, 7, Sampler.Mode.SEQUENTIAL)  # B > n is allowed
    np.testing.assert_array_equal(big.at(1), (7 + np.arange(7)) % 3)
    huge = Sampler(2**63, 2, "sequential")
    np.testing.assert_array_equal(huge.at(2**62), [0, 1])


@pytest.mark.parametrize("n,B", [(100, 10), (103, 10), (1000, 333), (7, 7), (5, 1), (4097, 64)])
def test_cyclic_coverage(n, B):
    s = Sampler(n, B, Sampler.Mode.CYCLIC, seed=5)
    per_cycle = n // B
    seen_cycles = []
    for c in range(3):
        picked = np.concatenate([s.at(c * per_cycle + b) for b in range(per_cycle)])
        assert len(picked) == n - n % B
        assert len(np.unique(picked)) == len(picked)  # no repeats
        assert picked.min() >= 0 and picked.max() < n
        seen_cycles.append(picked)
    if n > B:
        assert not np.array_equal(seen_cycles[0], seen_cycles[1])  # reshuffled per cycle


def test_iid_in_range_and_unbiased():
    n = 10
    s = Sampler(n, 1000, Sampler.Mode.IID, seed=1)
    draws = np.concatenate([s.at(k) for k in range(200)])
    assert draws.min() >= 0 and draws.max() < n
    counts = np.bincount(draws, minlength=n)
    expected = len(draws) / n
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 40, (chi2, counts)  # 9 dof; p < 1e-5 would be ~38
    big = Sampler(3, 10, "iid")  # B > n is allowed for IID
    assert set(big.at(0)) <= {0, 1, 2}
    top = Sampler(2**63, 64, "iid", seed=9).at(0)
    assert top.min() >= 0


def test_cyclic_rejects_batch_larger_than_n():
    with pytest.raises(ValueError, match="batch_size"):
        Sampler(10, 11, Sampler.Mode.CYCLIC)


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        Sampler(10, 2, "random")
    with pytest.raises(ValueError, match="n must be"):
        Sampler(0, 2, "iid")
    with pytest.raises(ValueError, match="batch_size"):
        Sampler(10, 0, "iid")
    with pytest.raises(TypeError, match="n must be an int"):
        Sampler(10.0, 2, "iid")
    with pytest.raises(ValueError, match="seed"):
        Sampler(10, 2, "iid", seed=-1)
    with pytest.raises(ValueError, match="n must be"):
        Sampler(2**63 + 1, 2, "iid")


@pytest.mark.parametrize("n, B, S", [(1000, 32, 100), (997, 10, 64), (50, 7, 200), (64, 64, 1)])
def test_blocked_cycles_visit_each_record_once_from_few_blocks(n, B, S):
    s = Sampler(n, B, "blocked", seed=9, block_size=S)
    assert s.mode is Sampler.Mode.BLOCKED and s.block_size == S
    per = n // B
    windows = max(2, -(-B // S))
    for c in range(3):
        cycle = np.concatenate([s.at(k) for k in range(c * per, (c + 1) * per)])
        assert len(np.unique(cycle)) == per * B and cycle.min() >= 0 and cycle.max() < n
        for k in range(c * per, (c + 1) * per):
            assert len(np.unique(s.at(k) // S)) <= 4 * windows + 1
    assert not np.array_equal(s.at(0), Sampler(n, B, "blocked", seed=10, block_size=S).at(0))
    assert "block_size=" in repr(s)


def test_blocked_block_size_is_checked():
    with pytest.raises(ValueError, match="block_size must be given for mode 'blocked'"):
        Sampler(100, 10, "blocked")
    with pytest.raises(ValueError, match="block_size must be >= 1, got 0"):
        Sampler(100, 10, "blocked", block_size=0)
    with pytest.raises(TypeError, match="block_size must be an int, got str"):
        Sampler(100, 10, "blocked", block_size="8")
    with pytest.raises(ValueError, match="block_size applies only to mode 'blocked'.*'cyclic'"):
        Sampler(100, 10, "cyclic", block_size=8)
    with pytest.raises(ValueError, match="exceeds n"):
        Sampler(5, 6, "blocked", block_size=2)
    assert Sampler(100, 10, "cyclic").block_size is None


def test_weighted_draws_are_proportional_and_pure():
    w = np.array([1, 0, 2, 7, 0.5, 0, 4.5, 10])
    s = Sampler(len(w), 4096, "weighted", seed=1, weights=w)
    assert s.mode is Sampler.Mode.WEIGHTED
    draws = np.concatenate([s.at(k) for k in range(50)])
    counts = np.bincount(draws, minlength=len(w))
    p = w / w.sum()
    sd = np.sqrt(len(draws) * p * (1 - p))
    assert (np.abs(counts - len(draws) * p) <= 5 * sd + 1e-9).all(), counts
    assert (counts[w == 0] == 0).all()
    np.testing.assert_array_equal(s.at(3), s.at(3))
    assert not np.array_equal(s.at(3), Sampler(8, 4096, "weighted", seed=2, weights=w).at(3))
    # Integer, bool and float32 weights are all numbers.
    Sampler(3, 2, "weighted", weights=np.array([1, 2, 3], np.int8))
    Sampler(3, 2, "weighted", weights=[True, False, True])


def test_weighted_weights_are_checked():
    with pytest.raises(ValueError, match="weights must be given for mode 'weighted'"):
        Sampler(3, 2, "weighted")
    with pytest.raises(ValueError, match="weights apply only to mode 'weighted'.*'iid'"):
        Sampler(3, 2, "iid", weights=[1, 1, 1])
    with pytest.raises(ValueError, match=r"one weight per record \(3\), got 2"):
        Sampler(3, 2, "weighted", weights=[1, 1])
    with pytest.raises(ValueError, match="finite and >= 0, got -1.*position 1"):
        Sampler(3, 2, "weighted", weights=[1, -1, 1])
    with pytest.raises(ValueError, match="got NaN at position 2"):
        Sampler(3, 2, "weighted", weights=[1, 1, np.nan])
    with pytest.raises(ValueError, match="positive, finite sum"):
        Sampler(3, 2, "weighted", weights=[0, 0, 0])
    with pytest.raises(TypeError, match="weights must be numbers"):
        Sampler(2, 2, "weighted", weights=["a", "b"])
    with pytest.raises(ValueError, match="1-D"):
        Sampler(4, 2, "weighted", weights=np.ones((2, 2)))
