"""The evolving-table fault campaign (``scripts/evolve_faults.py``), short
and local: evolvers SIGKILLed at random instants, a reader, cleanups; every
invariant the script checks holds (docs/benchmarks.md has longer runs,
locally and in the S3 server)."""

import json
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "evolve_faults.py")


def test_a_short_fault_campaign_on_a_local_table_finds_nothing():
    """Four evolvers for 15 seconds (on a loaded machine, until 25 operations
    committed), one killed about every second: no row
    lost or added, no operation in part, no wrong value read, nothing left
    that a cleanup should reclaim."""
    r = subprocess.run(
        [sys.executable, SCRIPT, "--where", "local", "--seconds", "15", "--kill-every", "1"]
        + ["--min-done", "25"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = r.stdout
    assert r.returncode == 0 and out.rstrip().endswith("0 finding(s)"), (
        out[-6000:] + r.stderr[-3000:]
    )
    summary = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert summary["kills"] >= 3, summary
    committed = sum(c.get("done", 0) for c in summary["operations"].values())
    assert committed >= 20 and summary["reads"] > 0, summary
