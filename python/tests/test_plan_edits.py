"""Editing a run's plan and listing its records: ``DataLoader.exclude`` and
``skip`` are kept in the state as events and replayed exactly on resume (on
any number of ranks), ``indices`` and ``provenance`` give what the loader
yields without reading data, and ``from_state`` rebuilds a Mix of pinned
tables."""

import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loaderx
from loaderx.dataloader import DataLoader
from loaderx.mixture import Mix

pa = pytest.importorskip("pyarrow")

N = 60
GLOBAL = 12  # the global batch: 1 x 12, 2 x 6, 3 x 4, 4 x 3
MODES = ["cyclic", "blocked", "sequential", "iid", "weighted"]


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    d = tmp_path_factory.mktemp("edits")
    ids = loaderx.DenseStore.create(str(d / "id"), np.int64, ())
    ids.append(np.arange(N, dtype=np.int64))
    yield {"id": ids}
    ids.close()


def mode_args(mode):
    if mode == "blocked":
        return {"block_size": 5}
    if mode == "weighted":
        return {"weights": (np.arange(N) % 4 + 1).astype(np.float64)}
    return {}


def loader(streams, mode, world=1, rank=0, **kw):
    return DataLoader(
        streams,
        batch_size=GLOBAL // world,
        mode=mode,
        seed=5,
        workers=0,
        rank=rank,
        world_size=world,
        **mode_args(mode),
        **kw,
    )


def ids(batch):
    return batch["id"].tolist()


# A script: ("next", k), ("exclude", ids), ("skip", k), ("resume", world).
ops = st.one_of(
    st.tuples(st.just("next"), st.integers(1, 9)),
    st.tuples(st.just("exclude"), st.lists(st.integers(0, N - 1), min_size=1, max_size=8)),
    st.tuples(st.just("skip"), st.integers(1, 4)),
    st.tuples(st.just("resume"), st.sampled_from([1, 2, 3, 4])),
)


def reference(streams, mode, script):
    """One uninterrupted world-1 run of ``script`` (resumes ignored):
    {step: global batch}, and the excluded records in force at each step."""
    out, banned, excluded_at = {}, set(), {}
    with loader(streams, mode) as run:
        for op, arg in script:
            if op == "next":
                for _ in range(arg):
                    step = run.step
                    out[step] = ids(next(run))
                    excluded_at[step] = set(banned)
            elif op == "exclude":
                run.exclude(arg)
                banned |= set(arg)
            elif op == "skip":
                run.skip(arg)
        return out, excluded_at, run.state_dict()


def interrupted(streams, mode, script):
    """``script`` with every ``resume`` a new set of ranks built from the
    state (``world`` loaders, each given the state): {step: global batch}."""
    out = {}
    ranks = [loader(streams, mode)]
    try:
        for op, arg in script:
            if op == "next":
                for _ in range(arg):
                    step = ranks[0].step
                    rows = []
                    for r in ranks:
                        assert r.step == step
                        rows += ids(next(r))
                    out[step] = rows
            elif op == "exclude":
                for r in ranks:
                    r.exclude(arg)
            elif op == "skip":
                for r in ranks:
                    r.skip(arg)
            else:
                # Through JSON, as a checkpoint would keep it.
                state = json.loads(json.dumps(ranks[0].state_dict()))
                assert all(r.state_dict() == ranks[0].state_dict() for r in ranks)
                for r in ranks:
                    r.close()
                ranks = [loader(streams, mode, world=arg, rank=k) for k in range(arg)]
                for r in ranks:
                    r.load_state_dict(state)
        return out
    finally:
        for r in ranks:
            r.close()


@pytest.mark.parametrize("mode", MODES)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(script=st.lists(ops, min_size=1, max_size=12))
def test_resumed_runs_on_any_world_size_equal_the_uninterrupted_run(streams, mode, script):
    want, excluded_at, _ = reference(streams, mode, script)
    got = interrupted(streams, mode, script)
    assert got == want
    for step, batch in want.items():
        assert not excluded_at[step] & set(batch), f"step {step} drew an excluded record"


@pytest.mark.parametrize("mode", MODES)
def test_provenance_equals_what_the_loader_yielded(streams, mode):
    with loader(streams, mode, world=2, rank=1) as run:
        seen = {}
        for k in range(40):
            if k == 7:
                run.exclude([0, 1, 2, 3, 33])
            if k == 15:
                run.skip(3)
            step = run.step
            seen[step] = ids(next(run))
            assert run.indices(step, rank=1).tolist() == seen[step]
        table = run.provenance(range(0, run.step))
        assert table.column_names == ["step", "rank", "row", "record_id"]
        assert table.schema.field("record_id").type == pa.uint64()
        mine = table.filter(pa.compute.equal(table["rank"], 1))
        listed = {}
        for s, r in zip(mine["step"].to_pylist(), mine["record_id"].to_pylist()):
            listed.setdefault(s, []).append(r)
        assert listed == seen
        # Every rank: both halves of each global batch, skipped steps left out.
        assert table.num_rows == len(seen) * GLOBAL
        assert set(table["step"].to_pylist()) == set(seen)
        one = run.provenance(range(20, 22), rank=1)
        assert one["record_id"].to_pylist() == seen[20] + seen[21]
        assert one["row"].to_pylist() == list(range(6)) * 2


def test_provenance_of_arrow_batches_and_a_mix(tmp_path):
    def source(name, n, base):
        d = tmp_path / name
        s = loaderx.DenseStore.create(str(d / "v"), np.int64, ())
        s.append(np.arange(base, base + n, dtype=np.int64))
        return {"v": s}

    a, b = source("a", 40, 0), source("b", 25, 1000)
    mix = Mix({"a": a, "b": b}, {"a": 2.0, "b": 1.0})
    with DataLoader(mix, batch_size=6, seed=2, workers=0, output="arrow") as run:
        got = []
        for k in range(30):
            if k == 5:
                run.exclude([1000 - 1000, 7], source="b")
            batch = next(run)
            got.append(list(zip(batch["source"].to_pylist(), batch["v"].to_pylist())))
        table = run.provenance(range(30))
        assert table.column_names == ["step", "rank", "row", "source", "record_id"]
        sources = table["source"].to_pylist()
        records = table["record_id"].to_pylist()
        names = ["a", "b"]
        expect = [(names.index(s), (0 if s == "a" else 1000) + r) for s, r in zip(sources, records)]
        assert expect == [row for batch in got for row in batch]
        srcs, recs = run.indices(29)
        assert list(zip(srcs.tolist(), recs.tolist())) == [
            (s, v - (0 if s == 0 else 1000)) for s, v in got[29]
        ]
        for batch in got[5:]:
            assert (1, 1000) not in batch and (1, 1007) not in batch
        with pytest.raises(ValueError, match="source must name a source of the Mix"):
            run.exclude([1])
        with pytest.raises(ValueError, match=r"record_ids holds 25, not a record of source 'b'"):
            run.exclude([25], source="b")


def test_cyclic_exclusion_finishes_the_cycle_and_then_covers_each_live_record_once(streams):
    with DataLoader(streams, batch_size=5, seed=9, workers=0) as run:
        for _ in range(4):  # 12 batches per cycle: 4 done
            next(run)
        banned = {3, 14, 15, 59}
        run.exclude(sorted(banned))
        drawn = run.provenance(range(0, 4))["record_id"].to_pylist()
        rest = []
        while True:
            batch = ids(next(run))
            if set(batch) & set(drawn + rest):
                break
            rest += batch
        live = set(range(N)) - banned
        assert not banned & set(rest)
        assert len(set(drawn + rest)) == len(drawn + rest)  # nothing twice in the cycle
        assert len(live - set(drawn) - set(rest)) < 5  # only the dropped remainder
        # The following cycles: (60 - 4) // 5 = 11 batches, each live record at most once.
        cycle = batch
        for _ in range(10):
            cycle += ids(next(run))
        assert len(cycle) == len(set(cycle)) == 55 and not banned & set(cycle)


def test_bad_edits_raise_and_change_nothing(streams):
    with loader(streams, "cyclic") as run:
        next(run)
        before = run.state_dict()
        with pytest.raises(ValueError, match=r"record_ids holds 60, not a record"):
            run.exclude([1, 60])
        with pytest.raises(ValueError, match=r"record_ids holds -1"):
            run.exclude([-1])
        with pytest.raises(ValueError, match="fewer than a global batch of 12"):
            run.exclude(list(range(50)))
        with pytest.raises(TypeError, match="record_ids must be integers"):
            run.exclude([1.5])
        with pytest.raises(ValueError, match="source applies to a loader over a Mix"):
            run.exclude([1], source="a")
        with pytest.raises(ValueError, match=r"n must be in 0\.\."):
            run.skip(-1)
        assert run.state_dict() == before
        want = ids(next(run))
    with loader(streams, "iid") as run:
        with pytest.raises(ValueError, match="leaves none"):
            run.exclude(list(range(N)))
        assert "events" not in run.state_dict()
    with loader(streams, "cyclic") as fresh:
        fresh.load_state_dict(before)
        assert ids(next(fresh)) == want
        bad = dict(before, events=[{"step": 0, "exclude": [99], "source": None}])
        with pytest.raises(ValueError, match="record_ids holds 99"):
            fresh.load_state_dict(bad)
        with pytest.raises(ValueError, match="events come in step order"):
            fresh.load_state_dict(dict(before, events=[{"step": 5, "skip": 1}]))


def test_a_mix_of_pinned_tables_resumes_from_its_state_with_its_edits(tmp_path):
    paths = {}
    for name, n in (("web", 50), ("books", 30)):
        paths[name] = str(tmp_path / name)
        loaderx.ingest_sharded(
            pa.table({"x": np.arange(n, dtype=np.int64)}), paths[name], workers=1, shards=2
        ).close()

    def run_mix():
        tables = {k: loaderx.open_table(p) for k, p in paths.items()}
        return tables, DataLoader(
            Mix(tables, {"web": 3.0, "books": 1.0}), batch_size=8, seed=4, workers=0
        )

    tables, whole = run_mix()
    with whole:
        want = []
        for k in range(20):
            if k == 6:
                whole.exclude([0, 1, 2], source="books")
            want.append(whole.next()["x"].tolist())
    tables2, first = run_mix()
    with first:
        got = []
        for k in range(9):
            if k == 6:
                first.exclude([0, 1, 2], source="books")
            got.append(first.next()["x"].tolist())
        state = json.loads(json.dumps(first.state_dict()))
    assert state["mix_weights"] == {"web": 3.0, "books": 1.0}
    for t in (*tables.values(), *tables2.values()):
        t.close()
    with loaderx.open_table(paths["web"], readonly=False) as t:
        t.append({"x": np.arange(100, 140)})
    with DataLoader.from_state(state) as resumed:
        assert resumed.step == 9 and resumed.events == state["events"]
        got += [resumed.next()["x"].tolist() for _ in range(11)]
    assert got == want
    schedule_state = dict(state, mix_weights=None)
    with pytest.raises(ValueError, match="give the same schedule again"):
        DataLoader.from_state(schedule_state)


def test_provenance_joins_back_to_the_table_with_sql(tmp_path):
    path = str(tmp_path / "captions")
    text = [f"caption {i}" for i in range(40)]
    loaderx.ingest_sharded(
        pa.table({"caption": text, "n": np.arange(40, dtype=np.int64)}), path, workers=1
    ).close()
    with loaderx.open_table(path) as t, DataLoader(t, batch_size=4, seed=1, workers=0) as run:
        yielded = [next(run)["caption"] for _ in range(6)]
        prov = run.provenance(range(3, 5))
        out = loaderx.sql(
            "SELECT p.step, t.caption FROM prov p JOIN captions t ON p.record_id = t.record_id "
            "ORDER BY p.step, p.row",
            prov=prov,
            captions=t,
        )
    captions = out.column("caption").to_pylist()
    assert captions == list(yielded[3]) + list(yielded[4])


def test_the_cli_lists_a_runs_records(tmp_path, table_path=None):
    path = str(tmp_path / "t")
    loaderx.ingest_sharded(pa.table({"x": np.arange(30, dtype=np.int64)}), path, workers=1).close()
    with loaderx.open_table(path) as t, DataLoader(t, batch_size=5, seed=2, workers=0) as run:
        run.exclude([4])
        yielded = [next(run)["x"].tolist() for _ in range(4)]
        state = run.state_dict()
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(state))
    out = tmp_path / "p.parquet"
    from loaderx.cli import main

    assert main(["provenance", str(state_file), "--steps", "1:3", "--out", str(out)]) == 0
    import pyarrow.parquet as pq

    listed = pq.read_table(out)
    assert listed["record_id"].to_pylist() == yielded[1] + yielded[2]
    assert listed["step"].to_pylist() == [1] * 5 + [2] * 5
    assert os.path.getsize(out) > 0


def test_the_cli_refuses_bad_steps_and_states_without_a_table(tmp_path, streams, capsys):
    from loaderx.cli import main

    with loader(streams, "cyclic") as run:
        state = run.state_dict()
    state_file = tmp_path / "s.json"
    state_file.write_text(json.dumps(state))
    out = str(tmp_path / "p.parquet")
    assert main(["provenance", str(state_file), "--steps", "x:3", "--out", out]) != 0
    assert "--steps must be A:B or A" in capsys.readouterr().err
    assert main(["provenance", str(state_file), "--steps", "5:5", "--out", out]) != 0
    assert main(["provenance", str(state_file), "--steps", "0:2", "--out", out]) != 0
    assert "pins no table" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_edits_with_transform_workers_give_the_batches_of_a_serial_run(streams):
    def run(workers):
        out = []
        with DataLoader(
            streams,
            batch_size=GLOBAL,
            seed=5,
            transform=lambda b: b["id"] * 2,
            workers=workers,
            prefetch=4,
        ) as ld:
            for k in range(30):
                if k == 4:
                    ld.exclude([0, 1, 2])
                if k == 9:
                    ld.skip(2)
                out.append(next(ld).tolist())
            assert ld.step == 32
        return out

    serial = run(0)
    assert run(3) == serial
    assert all(v not in (0, 2, 4) for b in serial[4:] for v in b)


STATES = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "loader_states")


def _fixture_streams(root, desc, name):
    s = loaderx.DenseStore.create(os.path.join(root, name), np.int64, ())
    s.append(desc["v"]["offset"] + np.arange(desc["v"]["n"], dtype=np.int64))
    return {"v": s}


@pytest.mark.parametrize("name", ["cyclic_edits", "blocked", "mix_edits", "table_edits"])
def test_states_saved_before_the_core_kept_them_still_load(tmp_path, name):
    """States the loader saved before its state moved into the core resume
    and give exactly the batches the saving run gave next."""
    with open(os.path.join(STATES, f"{name}.json")) as f:
        fixture = json.load(f)
    state, expect = fixture["state"], fixture["expect"]
    opened = []
    if name == "table_edits":
        path = str(tmp_path / "t")
        loaderx.ingest_sharded(
            pa.table({"v": np.arange(50, dtype=np.int64)}), path, workers=1, shards=2
        ).close()
        state["tables"][0]["path"] = path
        run = DataLoader.from_state(state, workers=0)
    elif name == "mix_edits":
        sources = {k: _fixture_streams(str(tmp_path), fixture["streams"][k], k) for k in "ab"}
        opened = [s["v"] for s in sources.values()]
        run = DataLoader(Mix(sources, state["mix_weights"]), batch_size=6, seed=2, workers=0)
        run.load_state_dict(state)
    else:
        streams = _fixture_streams(str(tmp_path), fixture["streams"], "v")
        opened = [streams["v"]]
        kw = {"block_size": state["block_size"]} if "block_size" in state else {}
        run = DataLoader(
            streams,
            batch_size=state["batch_size"],
            mode=state["mode"],
            seed=state["seed"],
            workers=2,
            **kw,
        )
        run.load_state_dict(state)
    with run:
        assert run.state_dict() == state
        for want in expect:
            batch = next(run)
            assert batch["v"].tolist() == want["v"]
            if "source" in want:
                assert batch["source"].tolist() == want["source"]
    for s in opened:
        s.close()
