"""benches/_ab.py, the table of benches/ab.sh, on made-up JSON files laid out
as ab.sh writes them (OUT/<side>/round-<k>/<bench>.json)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parents[1]


@pytest.fixture
def ab(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHES))
    import _ab

    return _ab


def dense(gib_raw, gib_zstd):
    return {
        "name": "dense-vision-quick",
        "results": {
            "zrecord-raw": {"gather": {"gib_s": gib_raw, "krecords_s": 1.0}},
            "zrecord-zstd": {"gather": {"gib_s": gib_zstd}},
            "memcpy": {"note": "not a backend with a gather"},
        },
    }


def ingest(gib):
    return {"benchmark": "ingest", "results": {"vision-table-raw-parallel": {"gib_s": gib}}}


def loader(bps, pss):
    return {
        "results": {
            "loaderx-raw/identity": {"batches_s": bps, "memory": {"peak_pss_mib": pss}},
            "loaderx-zstd/identity": {"error": "child exited with code 1"},
            "torch/identity": {"batches_s": 1.0, "memory": {"peak_pss_mib": 1.0}},
        }
    }


def sql(pushdown_s):
    return {
        "filter": {"seconds_pushdown": pushdown_s, "seconds_no_pushdown": 0.1},
        "filter_zstd": {"seconds_pushdown": 0.02, "seconds_no_pushdown": 0.2},
        "export": {"loaderx_gib_s": 1.5},
        "duckdb_parquet": {"loaderx_group_by_seconds": 0.001},
    }


def lay_out(root: Path, side: str, rounds: list[dict]) -> None:
    for k, files in enumerate(rounds, 1):
        d = root / side / f"round-{k}"
        d.mkdir(parents=True)
        for name, payload in files.items():
            (d / name).write_text(json.dumps(payload))
        (d / "stdout.md").write_text("not JSON, ignored\n")


@pytest.fixture
def out(tmp_path):
    base = [
        {
            "dense-vision-quick.json": dense(g, 2.0),
            "ingest-quick.json": ingest(1.0),
            "loader-quick.json": loader(100.0 + g, 80.0),
            "sql-quick.json": sql(0.010),
            "sampler-quick.json": {"results": {"ignored": 1}},
        }
        for g in (10.0, 30.0, 20.0)
    ]
    head = [
        {
            "dense-vision-quick.json": dense(g, 3.0),
            "loader-quick.json": loader(150.0, 40.0),
            "sql-quick.json": sql(0.005),
        }
        for g in (25.0, 15.0, 35.0)
    ]
    lay_out(tmp_path, "base", base)
    lay_out(tmp_path, "head", head)
    return tmp_path


def test_medians_and_ratios(ab, out):
    rows = {r["metric"]: r for r in ab.summarise(ab.collect(out))}
    raw = rows["dense-vision zrecord-raw gather GiB/s"]
    assert raw["base_rounds"] == [10.0, 30.0, 20.0] and raw["head_rounds"] == [25.0, 15.0, 35.0]
    assert raw["base_median"] == 20.0 and raw["head_median"] == 25.0
    assert raw["head_over_base"] == pytest.approx(1.25)
    assert rows["dense-vision zrecord-zstd gather GiB/s"]["head_over_base"] == pytest.approx(1.5)
    assert rows["loader loaderx-raw/identity batches/s"]["base_median"] == 120.0
    assert rows["loader loaderx-raw/identity peak PSS MiB"]["head_over_base"] == 0.5
    assert rows["sql filter (raw, pushdown) ms"]["base_median"] == pytest.approx(10.0)
    assert rows["sql filter (raw, pushdown) ms"]["head_over_base"] == pytest.approx(0.5)
    assert {"sql filter (zstd, no pushdown) ms", "sql group by ms", "parquet export GiB/s"} <= set(
        rows
    )
    # Only loaderx pipelines, only what ran; other benches' files are not read.
    assert not any("torch" in k or "loaderx-zstd/identity" in k for k in rows)
    assert not any("memcpy" in k or "ignored" in k for k in rows)
    # A metric only one side produced: no median there, no ratio.
    missing = rows["ingest vision-table-raw-parallel GiB/s"]
    assert missing["base_median"] == 1.0 and missing["head_median"] is None
    assert missing["head_over_base"] is None


def test_table_and_json(ab, out):
    r = subprocess.run(
        [sys.executable, str(BENCHES / "_ab.py"), str(out), "--base", "main (abc)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "## A/B: main (abc) against head"
    assert "Median of 3 base and 3 head rounds" in r.stdout
    assert "| metric | base median | head median | head/base |" in lines
    assert "| dense-vision zrecord-raw gather GiB/s | 20 | 25 | 1.250× |" in lines
    assert "| ingest vision-table-raw-parallel GiB/s | 1 | — | — |" in lines
    assert "| loader loaderx-raw/identity batches/s | 120 | 150 | 1.250× |" in lines
    saved = json.loads((out / "ab.json").read_text())
    assert saved["base"] == "main (abc)" and len(saved["rows"]) == len(
        ab.summarise(ab.collect(out))
    )


def test_rounds_in_numeric_order(ab, tmp_path):
    lay_out(tmp_path, "base", [{"ingest.json": ingest(float(k))} for k in range(1, 12)])
    got = ab.collect(tmp_path)
    assert got["base"]["ingest vision-table-raw-parallel GiB/s"] == [float(k) for k in range(1, 12)]
    assert got["head"] == {}


def test_nothing_to_read(tmp_path):
    r = subprocess.run(
        [sys.executable, str(BENCHES / "_ab.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "no bench JSON" in r.stderr
