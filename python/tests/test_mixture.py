"""loaderx.Mix through the DataLoader: per-step counts (property tests of
the "within one record" guarantee), each source's own cycle, rows and the
source column, ranks and elastic resume, bit-exact resume with schedules,
weighted sampling and random augmentations on any worker count, Arrow
output, tables, and the errors that name what is wrong."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loaderx
from loaderx.dataloader import DataLoader, record_seeds
from loaderx.mixture import Mix, source_seed
from loaderx.zrecord import DenseStore, RaggedStore

# Source sizes: a large, a tiny and a middling one.
SIZES = {"web": 300, "books": 7, "code": 40}
BASE = {"web": 0, "books": 10_000, "code": 20_000}


def _write(root, name, n):
    """Record i of source `name` holds BASE[name] + i in every column."""
    base = BASE[name]
    ids = np.arange(n, dtype=np.int64) + base
    with DenseStore.create(root / f"{name}_id", np.int64, ()) as s:
        s.append(ids)
    with DenseStore.create(root / f"{name}_img", np.float32, (2, 2), codec="raw") as s:
        s.append(np.broadcast_to(ids[:, None, None].astype(np.float32), (n, 2, 2)).copy())
    with RaggedStore.create(root / f"{name}_tok", np.int32) as s:
        s.append(np.full(i % 5 + 1, base + i, np.int32) for i in range(n))


def _open(root, name):
    return {
        "id": DenseStore.open(root / f"{name}_id", readonly=True),
        "img": DenseStore.open(root / f"{name}_img", readonly=True),
        "tok": RaggedStore.open(root / f"{name}_tok", readonly=True),
    }


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    for name, n in SIZES.items():
        _write(root, name, n)
    out = {name: _open(root, name) for name in SIZES}
    yield out
    for streams in out.values():
        for s in streams.values():
            s.close()


def check_rows(batch, names=tuple(SIZES)):
    """Every column holds the records the source column and ids say."""
    src, ids = batch["source"], batch["id"]
    assert src.dtype == np.uint16
    for s, i, img, tok in zip(src, ids, batch["img"], batch["tok"]):
        name = names[s]
        assert BASE[name] <= i < BASE[name] + SIZES[name]
        assert (img == i).all()
        assert tok.shape == ((i - BASE[name]) % 5 + 1,) and (tok == i).all()


def pairs(batch, names=tuple(SIZES)):
    """The batch's rows as (source, record within the source)."""
    return [(int(s), int(i) - BASE[names[s]]) for s, i in zip(batch["source"], batch["id"])]


WEIGHTS = {"web": 5, "books": 1, "code": 2}


def test_counts_rows_and_each_sources_cycle(sources):
    mix = Mix(sources, WEIGHTS)
    steps, b = 50, 16
    with DataLoader(mix, batch_size=b, seed=4, workers=2) as loader:
        batches = [next(loader) for _ in range(steps)]
    counts = mix.counts(b, steps)
    for k, batch in enumerate(batches):
        check_rows(batch)
        np.testing.assert_array_equal(np.bincount(batch["source"], minlength=3), counts[k])
        # Rows grouped by source, in source order.
        assert (np.diff(batch["source"].astype(int)) >= 0).all()
    # Each source continues its own cyclic stream: every run of len(source)
    # of its draws is a permutation of its records.
    for s, name in enumerate(SIZES):
        drawn = [i for batch in batches for (src, i) in pairs(batch) if src == s]
        n = SIZES[name]
        assert len(drawn) >= n, name
        for c in range(len(drawn) // n):
            assert sorted(drawn[c * n : (c + 1) * n]) == list(range(n)), (name, c)
    # The tiny source repeated while the large one was in its first pass.
    web = [i for batch in batches for (src, i) in pairs(batch) if src == 0]
    assert len(web) < SIZES["web"] * 2


def _exact_targets(rows, g):
    """Running targets G * w / sum(w), exact fractions, per step and source."""
    out, total = [], [Fraction(0)] * len(rows[0])
    for w in rows:
        s = sum(Fraction(x) for x in w)
        total = [t + g * Fraction(x) / s for t, x in zip(total, w)]
        out.append(total)
    return out


weights_st = st.lists(
    st.one_of(st.just(0.0), st.floats(0.01, 1.0), st.floats(1.0, 1000.0)), min_size=1, max_size=9
).filter(lambda w: any(x > 0 for x in w))


@settings(max_examples=300, deadline=None)
@given(weights_st, st.integers(1, 64), st.integers(1, 300))
def test_fixed_weights_keep_every_source_within_one_record(sources, weights, g, steps):
    names = [f"s{i}" for i in range(len(weights))]
    mix = Mix({n: sources["books"] for n in names}, dict(zip(names, weights)))
    counts = mix.counts(g, steps)
    assert (counts.sum(axis=1) == g).all() and (counts >= 0).all()
    cum = np.cumsum(counts, axis=0)
    targets = _exact_targets([weights] * steps, g)
    # Every prefix of steps: within one record (the shares are 2^-48
    # multiples, so the exact real target may differ by a hair).
    err = np.array([[float(c - t) for c, t in zip(row, tr)] for row, tr in zip(cum, targets)])
    assert np.abs(err).max() < 1 + 1e-6
    # Any window a..b: the difference of two prefixes, within two.
    rate = g * np.asarray(weights) / sum(weights)
    for a in range(0, steps, max(1, steps // 7)):
        for b in range(a + 1, steps + 1, max(1, steps // 5)):
            got = cum[b - 1] - (cum[a - 1] if a else 0)
            assert np.abs(got - (b - a) * rate).max() < 2 + 1e-6


@settings(max_examples=150, deadline=None)
@given(
    st.lists(weights_st.filter(lambda w: len(w) >= 2), min_size=1, max_size=20), st.integers(1, 40)
)
def test_schedules_never_run_a_record_ahead(sources, table, g):
    width = min(len(w) for w in table)
    table = [w[:width] if any(x > 0 for x in w[:width]) else [1.0] * width for w in table]
    names = [f"s{i}" for i in range(width)]
    mix = Mix(
        {n: sources["books"] for n in names},
        lambda k: dict(zip(names, table[k % len(table)])),
    )
    steps = 3 * len(table) + 20
    counts = mix.counts(g, steps)
    assert (counts.sum(axis=1) == g).all()
    rows = [table[k % len(table)] for k in range(steps)]
    cum = np.cumsum(counts, axis=0)
    for row, tr in zip(cum, _exact_targets(rows, g)):
        lead = [float(c - t) for c, t in zip(row, tr)]
        assert max(lead) < 1 + 1e-6
        # The shortfall is bounded by the other sources' leads.
        assert -min(lead) < width - 1 + 1e-6
    # Pure: the same counts again, and from any start.
    np.testing.assert_array_equal(mix.counts(g, steps, start=7), counts[7:])


def test_a_schedule_changes_the_mixture_with_the_step(sources):
    ramp = Mix(sources, lambda k: {"web": 1, "books": 0 if k < 10 else 1, "code": 1})
    with DataLoader(ramp, batch_size=12, seed=1, workers=0) as loader:
        batches = [next(loader) for _ in range(20)]
    for batch in batches:
        check_rows(batch)
    assert not any((b["source"] == 1).any() for b in batches[:10])
    assert all((b["source"] == 1).any() for b in batches[10:])
    np.testing.assert_array_equal(
        np.array([np.bincount(b["source"], minlength=3) for b in batches]), ramp.counts(12, 20)
    )


def test_a_schedules_bad_step_raises_at_that_step_naming_it(sources):
    def schedule(k):
        if k == 5:
            return {"web": 1, "books": float("nan"), "code": 1}
        if k == 7:
            raise KeyError("boom")
        return {"web": 1, "books": 1, "code": 1}

    mix = Mix(sources, schedule)
    with DataLoader(mix, batch_size=6, seed=0, workers=2) as loader:
        for _ in range(5):
            next(loader)
        with pytest.raises(ValueError, match=r"at step 5 .* got nan for source 'books'"):
            next(loader)
        # Later steps depend on step 5's counts: they fail too, naming it.
        with pytest.raises(ValueError, match="step 6: the mixture's weights at step 5"):
            next(loader)
    # The same schedule resumed past step 5 cannot plan: refused at once.
    with pytest.raises(ValueError, match="at step 5"):
        DataLoader(mix, batch_size=6, start_step=6)
    # An exception of the schedule's own is raised as is by its step.
    raising = Mix(sources, lambda k: schedule(k) if k != 5 else schedule(0))
    with DataLoader(raising, batch_size=6, workers=0) as loader:
        for _ in range(7):
            next(loader)
        with pytest.raises(KeyError, match="boom"):
            next(loader)
    # Unknown, missing and non-numeric names per step.
    for bad, match in [
        ({"web": 1, "books": 1, "code": 1, "wiki": 1}, r"unknown sources \['wiki'\]"),
        ({"web": 1, "books": 1}, r"lack sources \['code'\]"),
        ({"web": "1", "books": 1, "code": 1}, "got '1' for source 'web'"),
        ({"web": 0, "books": 0, "code": 0}, "all zero"),
        ([1, 2, 3], "must be a dict"),
    ]:
        with pytest.raises(ValueError, match=match):
            Mix(sources, lambda k, bad=bad: bad).weights_at(3)


def test_bad_sources_and_weights_name_what_is_wrong(sources, tmp_path):
    with pytest.raises(ValueError, match=r"unknown sources \['wiki'\]"):
        Mix(sources, {**WEIGHTS, "wiki": 1})
    with pytest.raises(ValueError, match=r"lack sources \['code'\]"):
        Mix(sources, {"web": 1, "books": 1})
    with pytest.raises(ValueError, match="got -1 for source 'books'"):
        Mix(sources, {**WEIGHTS, "books": -1})
    with pytest.raises(ValueError, match="got inf for source 'web'"):
        Mix(sources, {**WEIGHTS, "web": float("inf")})
    with pytest.raises(ValueError, match="all zero"):
        Mix(sources, {"web": 0, "books": 0.0, "code": 0})
    with pytest.raises(TypeError, match="dict of source name -> weight"):
        Mix(sources, [1, 2, 3])
    # Columns that differ.
    lacking = {**sources, "code": {k: v for k, v in sources["code"].items() if k != "tok"}}
    with pytest.raises(ValueError, match=r"source 'code' lacks \['tok'\]"):
        Mix(lacking, WEIGHTS)
    with DenseStore.create(tmp_path / "f", np.float64, ()) as s:
        s.append(np.zeros(40))
    with DenseStore.open(tmp_path / "f", readonly=True) as wrong:
        other = {**sources, "code": {**sources["code"], "id": wrong}}
        with pytest.raises(
            ValueError, match=r"column 'id' differs between sources 'web' \(dense int64.*'code'"
        ):
            Mix(other, WEIGHTS)
    with pytest.raises(ValueError, match="collides"):
        Mix(sources, WEIGHTS, source_column="id")
    with pytest.raises(ValueError, match="at least one source"):
        Mix({}, {})
    mix = Mix(sources, WEIGHTS)
    with pytest.raises(ValueError, match="indices does not apply to a Mix"):
        DataLoader(mix, indices=[0, 1])
    with pytest.raises(ValueError, match="weights apply only to mode 'weighted'"):
        DataLoader(mix, weights={"web": np.ones(300)})
    with pytest.raises(ValueError, match=r"unknown \[\], missing \['code'\]"):
        DataLoader(mix, mode="weighted", weights={"web": np.ones(300), "books": np.ones(7)})
    with pytest.raises(ValueError, match=r"weights\['books'\] must hold one weight per record"):
        DataLoader(mix, mode="weighted", weights={k: np.ones(300) for k in SIZES})


def test_no_source_column_and_repr(sources):
    mix = Mix(sources, WEIGHTS, source_column=None)
    with DataLoader(mix, batch_size=8, seed=2) as loader:
        batch = next(loader)
        assert sorted(batch) == ["id", "img", "tok"]
        assert "mix=['web', 'books', 'code']" in repr(loader)
    assert repr(mix).startswith("Mix(sources={'web': 300, 'books': 7, 'code': 40}")
    assert mix.weights == {"web": 5.0, "books": 1.0, "code": 2.0}
    assert mix.columns == ["id", "img", "tok"] and not mix.scheduled


def _augment(batch, info):
    """A random augmentation from the info's generators."""
    per_record = np.array([np.random.default_rng(s).random() for s in info.record_seeds])
    return {
        "id": batch["id"].copy(),
        "source": batch["source"].copy(),
        "noise": info.rng.random(len(batch["id"])),
        "per_record": per_record,
        "indices": info.indices.copy(),
        "sources": info.sources.copy(),
    }


def _schedule(k):
    return {"web": 3, "books": 1 + (k % 4), "code": 2 if k < 6 else 0.5}


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("mode", ["cyclic", "weighted", "iid", "blocked"])
def test_resume_is_bit_exact_with_schedules_and_augmentations_on_any_worker_count(
    sources, workers, mode
):
    extra = {}
    if mode == "weighted":
        extra["weights"] = {n: (np.arange(SIZES[n]) % 3).astype(float) for n in SIZES}
    if mode == "blocked":
        extra["block_size"] = 4
    mix = Mix(sources, _schedule)

    def run(start, steps, use_state):
        kw = dict(batch_size=10, mode=mode, seed=9, transform=_augment, workers=workers, **extra)
        if use_state:
            with DataLoader(mix, **kw) as loader:
                next(loader)
                loader.load_state_dict({**loader.state_dict(), "step": start})
                return [next(loader) for _ in range(steps)]
        with DataLoader(mix, start_step=start, **kw) as loader:
            return [next(loader) for _ in range(steps)]

    full = run(0, 14, False)
    for k, out in enumerate(full):
        # info.indices are records within each row's source, aligned.
        names = list(SIZES)
        assert out["sources"].tolist() == out["source"].tolist()
        want = [i - BASE[names[s]] for s, i in zip(out["source"], out["id"])]
        assert out["indices"].tolist() == want
        seeds = np.array(
            [
                record_seeds(source_seed(9, names[s]), k, [i])[0]
                for s, i in zip(out["source"], out["indices"])
            ],
            dtype=np.uint64,
        )
        per_record = [np.random.default_rng(s).random() for s in seeds]
        np.testing.assert_array_equal(out["per_record"], per_record)
        if mode == "weighted":
            assert (out["indices"] % 3 != 0).all()
    for use_state in (False, True):
        for a, b in zip(full[8:], run(8, 6, use_state)):
            for key in a:
                assert a[key].tobytes() == b[key].tobytes(), key
    # The generators differ per step and per record.
    assert not np.array_equal(full[0]["noise"], full[1]["noise"])


def test_load_state_dict_checks_the_sources(sources):
    mix = Mix(sources, WEIGHTS)
    with DataLoader(mix, batch_size=8, seed=3) as loader:
        state = loader.state_dict()
        assert state["sources"] == ["web", "books", "code"]
        with pytest.raises(ValueError, match=r"state\['sources'\] is \['web'\]"):
            loader.load_state_dict({**state, "sources": ["web"], "mix_weights": {"web": 1.0}})
        with pytest.raises(ValueError, match=r"state\['sources'\] is None"):
            loader.load_state_dict({k: v for k, v in state.items() if k != "sources"})
    with DataLoader(sources["web"], batch_size=8, seed=3) as single:
        with pytest.raises(ValueError, match=r"state\['sources'\]"):
            single.load_state_dict(state)


@pytest.mark.parametrize("mode", ["cyclic", "weighted"])
@pytest.mark.parametrize("after", [2, 3])
def test_elastic_resume_of_a_mixture_keeps_the_global_batch(sources, mode, after):
    """Saved at step 7 on 4 ranks of 6 records, resumed on `after` ranks
    (2 of 12, 3 of 8): every later step's ranks hold together the records
    of the global batch the 4 ranks would have drawn."""
    extra = {}
    if mode == "weighted":
        extra["weights"] = {n: np.linspace(0.5, 2, SIZES[n]) for n in SIZES}
    mix = Mix(sources, _schedule)

    def ranks(world, start=None, state=None):
        out = []
        for r in range(world):
            ld = DataLoader(
                mix,
                batch_size=24 // world,
                mode=mode,
                seed=8,
                rank=r,
                world_size=world,
                workers=1,
                **extra,
            )
            if state is not None:
                ld.load_state_dict(state)
            out.append(ld)
        return out

    before = ranks(4)
    for _ in range(7):
        for ld in before:
            check_rows(next(ld))
    state = before[0].state_dict()
    want = [sorted(p for ld in before for p in pairs(next(ld))) for _ in range(5)]
    for ld in before:
        ld.close()
    resumed = ranks(after, state=state)
    for k in range(5):
        got = [next(ld) for ld in resumed]
        for g in got:
            check_rows(g)
            assert len(g["id"]) == 24 // after
        assert sorted(p for g in got for p in pairs(g)) == want[k], k
    for ld in resumed:
        ld.close()


def test_a_different_global_batch_draws_a_different_plan(sources):
    """Resuming 4 ranks of 6 (24) on 3 ranks of 7 (21) is allowed but is a
    new plan: its steps are those of a global batch of 21."""
    mix = Mix(sources, WEIGHTS)
    with DataLoader(mix, batch_size=21, seed=8) as whole:
        whole.load_state_dict({"step": 7, "seed": 8, "mode": "cyclic", "sources": mix.names})
        want = sorted(pairs(next(whole)))
    got = []
    for r in range(3):
        with DataLoader(mix, batch_size=7, seed=8, rank=r, world_size=3, start_step=7) as ld:
            got += pairs(next(ld))
    assert sorted(got) == want
    np.testing.assert_array_equal(
        np.bincount([s for s, _ in got], minlength=3), mix.counts(21, 8, 7)[0]
    )


def test_arrow_output_carries_the_source_column(sources):
    pa = pytest.importorskip("pyarrow")
    mix = Mix(sources, WEIGHTS, source_column="src")
    with (
        DataLoader(mix, batch_size=16, seed=5, output="arrow") as arrow,
        DataLoader(mix, batch_size=16, seed=5) as arrays,
    ):
        for _ in range(4):
            rb, b = next(arrow), next(arrays)
            assert rb.schema.field("src").type == pa.uint16()
            np.testing.assert_array_equal(rb.column("src").to_numpy(), b["src"])
            np.testing.assert_array_equal(rb.column("id").to_numpy(), b["id"])
            assert rb.num_rows == 16


def test_tables_as_sources(tmp_path):
    pa = pytest.importorskip("pyarrow")
    paths = {}
    for name, n, base in [("en", 50, 0), ("de", 20, 1000)]:
        paths[name] = str(tmp_path / name)
        loaderx.arrow.ingest(
            pa.table(
                {
                    "id": pa.array(np.arange(n) + base),
                    "text": pa.array([None if i % 4 == 0 else f"{name}{i}" for i in range(n)]),
                }
            ),
            paths[name],
        )
    tables = {name: loaderx.open_table(p) for name, p in paths.items()}
    mix = Mix(tables, {"en": 1, "de": 1})
    with DataLoader(mix, batch_size=10, seed=0) as loader:
        for _ in range(6):
            batch = next(loader)
            assert (np.bincount(batch["source"], minlength=2) == 5).all()
            for s, i, t in zip(batch["source"], batch["id"], batch["text"]):
                name = ["en", "de"][s]
                local = int(i) - (0 if name == "en" else 1000)
                assert t == (None if local % 4 == 0 else f"{name}{local}")
    for t in tables.values():
        t.close()


def test_many_sources_and_one(sources):
    one = Mix({"only": sources["code"]}, {"only": 1})
    with DataLoader(one, batch_size=8, seed=1) as loader:
        batch = next(loader)
        assert (batch["source"] == 0).all() and len(batch["id"]) == 8
    many = Mix(
        {f"s{i}": sources["books"] for i in range(300)}, lambda k: {f"s{i}": 1 for i in range(300)}
    )
    with DataLoader(many, batch_size=7, seed=1, workers=0) as loader:
        seen = np.concatenate([next(loader)["source"] for _ in range(60)])
    # 420 draws over 300 equal sources: each once or twice.
    counts = np.bincount(seen, minlength=300)
    assert counts.min() >= 1 and counts.max() <= 2


def test_source_seed_is_a_pure_function_of_seed_and_name():
    assert source_seed(1, "web") == source_seed(1, "web")
    assert len({source_seed(1, "web"), source_seed(2, "web"), source_seed(1, "code")}) == 3
    with pytest.raises(TypeError, match="name must be a str"):
        source_seed(1, 3)


def test_a_forked_worker_restarts_a_scheduled_mixture_at_its_step(sources):
    mp = pytest.importorskip("multiprocessing")
    ctx = mp.get_context("fork")
    mix = Mix(sources, _schedule)
    loader = DataLoader(mix, batch_size=8, seed=3, workers=1)
    for _ in range(3):
        next(loader)
    want = [pairs(b) for b in (next(loader), next(loader))]
    loader.load_state_dict({"step": 3, "seed": 3, "mode": "cyclic", "sources": mix.names})
    q = ctx.Queue()

    def child():
        try:
            q.put([pairs(next(loader)) for _ in range(2)])
        except BaseException as exc:  # noqa: BLE001
            q.put(repr(exc))

    p = ctx.Process(target=child)
    p.start()
    got = q.get(timeout=60)
    p.join(60)
    loader.close()
    assert got == want
    assert p.exitcode == 0


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.integers(0, 2**64 - 1),
    st.integers(1, 30),
    st.sampled_from([1, 2, 4]),
    st.sampled_from(["cyclic", "weighted"]),
)
def test_property_resume_anywhere_is_bit_exact(sources, seed, k, workers, mode):
    extra = {}
    if mode == "weighted":
        extra["weights"] = {n: np.ones(SIZES[n]) for n in SIZES}
    mix = Mix(sources, _schedule)
    kw = dict(batch_size=6, mode=mode, seed=seed, transform=_augment, **extra)
    with DataLoader(mix, workers=0, **kw) as loader:
        full = [next(loader) for _ in range(k + 3)]
    with DataLoader(mix, workers=workers, start_step=k, **kw) as loader:
        tail = [next(loader) for _ in range(3)]
    for a, b in zip(full[k:], tail):
        for key in a:
            assert a[key].tobytes() == b[key].tobytes(), key


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.floats(0.1, 10.0), min_size=3, max_size=3),
    st.integers(1, 40),
    st.integers(0, 2**64 - 1),
    st.sampled_from([1, 2, 4]),
)
def test_property_each_source_keeps_its_own_cycle(sources, weights, batch, seed, world):
    """Whatever the weights, batch, seed and ranks: each source's draws,
    taken in step order (ranks in order, each rank's rows of a source in
    draw order), are its records in cycles, every cycle of len(source)
    draws a permutation of them."""
    mix = Mix(sources, dict(zip(SIZES, weights)))
    steps = 30
    loaders = [
        DataLoader(mix, batch_size=batch, seed=seed, rank=r, world_size=world, workers=0)
        for r in range(world)
    ]
    drawn = {s: [] for s in range(3)}
    for _ in range(steps):
        for ld in loaders:
            for src, i in pairs(next(ld)):
                drawn[src].append(i)
    for ld in loaders:
        ld.close()
    total = mix.counts(batch * world, steps).sum(axis=0)
    for s, name in enumerate(SIZES):
        assert len(drawn[s]) == total[s]
        n = SIZES[name]
        for c in range(len(drawn[s]) // n):
            assert sorted(drawn[s][c * n : (c + 1) * n]) == list(range(n)), (name, c)
        # The incomplete last cycle repeats nothing.
        tail = drawn[s][len(drawn[s]) // n * n :]
        assert len(set(tail)) == len(tail)
