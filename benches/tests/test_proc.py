"""benches/_proc.py: the child runner and the smaps_rollup sampler. No timing
or memory size is asserted beyond "more than nothing"."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/smaps_rollup").exists(), reason="needs /proc/<pid>/smaps_rollup"
)

# A child that holds ~32 MiB and starts one grandchild, then reports both pids.
PARENT = """
import subprocess, sys, time
sys.path.insert(0, {benches!r})
from _proc import emit
buf = bytearray(32 << 20)
kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
emit("pids", [__import__("os").getpid(), kid.pid])
sys.stdin.readline()
kid.kill()
kid.wait()
emit("result", len(buf))
"""


@pytest.fixture
def proc(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHES))
    import _proc

    return _proc


def test_rollup_of_self_and_of_a_gone_process(proc):
    r = proc.rollup()
    assert set(r) == set(proc.ROLLUP_KEYS) and r["Rss"] > 0 and r["Pss"] > 0
    assert proc.rollup(2**22 + 12345) is None  # above any default pid_max


def test_sampler_sums_a_process_tree(proc):
    child = subprocess.Popen(
        [sys.executable, "-c", PARENT.format(benches=str(BENCHES))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()
        assert line.startswith(proc.PROTOCOL)
        pids = __import__("json").loads(line[len(proc.PROTOCOL) :])["payload"]
        assert pids[0] == child.pid
        for _ in range(100):  # the grandchild may not have exec'd yet
            if pids[1] in proc.process_tree(child.pid):
                break
            time.sleep(0.05)
        assert set(proc.process_tree(child.pid)) >= set(pids)

        tree = proc.MemorySampler([child.pid], tree=True, interval=0.01).sample_for(0.1)
        alone = proc.MemorySampler([child.pid], interval=0.01).sample_for(0.1)
        assert tree.samples >= 1 and alone.samples >= 1
        assert tree.max_processes == 2 and alone.max_processes == 1
        assert tree.peak_pss["Pss"] > alone.peak_pss["Pss"] >= 32 << 10  # KiB
        assert tree.peak_rss_kib >= tree.peak_pss["Rss"] > 0
        assert tree.per_root_peak[0]["Pss"] == tree.peak_pss["Pss"]

        bg = proc.MemorySampler([child.pid, os.getpid()], interval=0.01).start()
        time.sleep(0.1)
        bg.stop()
        assert bg.samples >= 1 and len(bg.per_root_peak) == 2
        assert bg.peak_pss["processes"] == 2
    finally:
        child.stdin.write("\n")
        child.stdin.close()
        child.wait(timeout=60)
    # Gone: a sample of it counts nothing.
    gone = proc.MemorySampler([child.pid])
    assert gone.sample() is False and gone.samples == 0 and gone.peak_pss is None


def test_run_child_protocol_stray_lines_and_timeout(proc, capfd):
    code = (
        f"import sys; sys.path.insert(0, {str(BENCHES)!r}); from _proc import emit; "
        "print('stray'); emit('a', 1); emit('b', {'x': [2]})"
    )
    got = []
    rc = proc.run_child(
        [sys.executable, "-c", code], lambda p, k, v: got.append((k, v)), timeout=120
    )
    assert rc == 0 and got == [("a", 1), ("b", {"x": [2]})]
    assert "stray" in capfd.readouterr().err
    with pytest.raises(proc.ChildTimeout, match="killed after"):
        proc.run_child(
            [sys.executable, "-c", "import time; time.sleep(30)"],
            lambda *a: None,
            timeout=0.5,
        )


def test_run_and_child_env(proc, monkeypatch):
    monkeypatch.setenv("LOADERX_PROC_TEST", "1")
    env = proc.child_env(["LOADERX_PROC_TEST"], EXTRA="2")
    assert "LOADERX_PROC_TEST" not in env and env["EXTRA"] == "2"
    r = proc.run([sys.executable, "-c", "import os; print(os.environ.get('EXTRA'))"], env=env)
    assert r.stdout.strip() == "2"
    with pytest.raises(RuntimeError, match=r"(?s)the step failed:\n.*boom"):
        proc.run([sys.executable, "-c", "raise SystemExit('boom')"], what="the step")
