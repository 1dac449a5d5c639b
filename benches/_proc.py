"""Child processes and their memory, shared by the benchmarks.

- :func:`rollup`: one process's ``Rss``, ``Pss`` and the ``Pss`` split from
  ``/proc/<pid>/smaps_rollup``, in KiB.
- :func:`process_tree`: a process and every process descending from it.
- :class:`MemorySampler`: peak PSS and RSS of some processes, each one alone
  or with its whole process tree, sampled in a loop (:meth:`~MemorySampler.sample_for`)
  or on a background thread (:meth:`~MemorySampler.start` ... :meth:`~MemorySampler.stop`).
- :func:`run_child`: a child that reports through ``@@bench {json}`` lines on
  its stdout (:func:`emit`), with a watchdog; other lines pass to stderr.
- :func:`run`: a command run to completion; a failure raises with the tail of
  its stderr. :func:`child_env` is the environment to give it.

Nothing here reads ``/proc`` unless asked: a benchmark samples memory in its
own window, never while it times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Callable

ROLLUP_KEYS = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem")
PROTOCOL = "@@bench "  # prefix of the lines a child reports on stdout


def rollup(pid: int | str = "self", keys: Sequence[str] = ROLLUP_KEYS) -> dict[str, int] | None:
    """``keys`` of ``/proc/<pid>/smaps_rollup`` in KiB (None if the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in keys:
            out[key] = int(rest.split()[0])
    return out


def _parents() -> dict[int, int]:
    """pid -> ppid of every process."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        out[int(entry.name)] = int(fields[1])
    return out


def process_tree(root: int) -> list[int]:
    """``root`` and every process whose ancestry leads to it."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


class MemorySampler:
    """Peak memory of ``roots`` (pids), in KiB, over the samples taken.

    A sample reads each root's ``smaps_rollup`` (with ``tree=True``, summed
    over the root and every process descending from it) and counts only when
    every root answered. Kept: per root the peak of each key, the peak of the
    total ``Pss`` over all roots together with every key's total at that
    sample (``peak_pss``, plus ``processes``), the peak total ``Rss``, and the
    most processes seen in one sample.
    """

    def __init__(
        self,
        roots: Iterable[int],
        *,
        tree: bool = False,
        interval: float = 0.1,
        keys: Sequence[str] = ROLLUP_KEYS,
    ):
        self.roots = list(roots)
        self.tree = tree
        self.interval = interval
        self.keys = tuple(keys)
        self.samples = 0
        self.max_processes = 0
        self.per_root_peak = [dict.fromkeys(self.keys, 0) for _ in self.roots]
        self.peak_pss: dict | None = None
        self.peak_rss_kib = 0
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def _one(self, root: int) -> tuple[dict[str, int], int] | None:
        pids = process_tree(root) if self.tree else [root]
        totals = dict.fromkeys(self.keys, 0)
        procs = 0
        for pid in pids:
            r = rollup(pid, self.keys)
            if r is None:
                continue
            procs += 1
            for k in totals:
                totals[k] += r.get(k, 0)
        return (totals, procs) if procs else None

    def sample(self) -> bool:
        """Takes one sample; False (and nothing kept) when a root was gone."""
        snap = [self._one(root) for root in self.roots]
        if any(s is None for s in snap):
            return False
        totals = dict.fromkeys(self.keys, 0)
        procs = 0
        for peak, (one, n) in zip(self.per_root_peak, snap):
            procs += n
            for k in self.keys:
                peak[k] = max(peak[k], one[k])
                totals[k] += one[k]
        self.samples += 1
        self.max_processes = max(self.max_processes, procs)
        self.peak_rss_kib = max(self.peak_rss_kib, totals.get("Rss", 0))
        if self.peak_pss is None or totals.get("Pss", 0) > self.peak_pss.get("Pss", 0):
            self.peak_pss = {**totals, "processes": procs}
        return True

    def sample_for(self, seconds: float) -> MemorySampler:
        """Samples every ``interval`` s for ``seconds``, in this thread."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            self.sample()
            time.sleep(max(0.0, self.interval - (time.monotonic() - t0)))
        return self

    def _run(self) -> None:
        while not self._halt.is_set():
            t0 = time.monotonic()
            self.sample()
            self._halt.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def start(self) -> MemorySampler:
        """Samples every ``interval`` s on a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> MemorySampler:
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self


def emit(kind: str, payload: object = None) -> None:
    """In a child of :func:`run_child`: one message to the parent."""
    sys.stdout.write(PROTOCOL + json.dumps({"kind": kind, "payload": payload}) + "\n")
    sys.stdout.flush()


class ChildTimeout(RuntimeError):
    pass


def run_child(
    cmd: Sequence[str],
    on_message: Callable[[subprocess.Popen, str, object], None],
    *,
    timeout: float,
    env: dict | None = None,
) -> int:
    """Runs ``cmd`` and calls ``on_message(proc, kind, payload)`` for each
    :func:`emit` line of its stdout, as it comes; other stdout lines go to
    stderr (stray output of the child, kept visible). The child is killed
    (by its pid) after ``timeout`` s, which raises :class:`ChildTimeout`.
    Returns the exit code."""
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, text=True, bufsize=1, env=env)
    watchdog = threading.Timer(timeout, proc.kill)  # only this child, by its pid
    watchdog.start()
    try:
        for line in proc.stdout:
            if not line.startswith(PROTOCOL):
                sys.stderr.write(line)
                continue
            msg = json.loads(line[len(PROTOCOL) :])
            on_message(proc, msg["kind"], msg["payload"])
    finally:
        code = proc.wait()
        timed_out = not watchdog.is_alive() and code < 0
        watchdog.cancel()
    if timed_out:
        raise ChildTimeout(f"child killed after {timeout:g} s without finishing")
    return code


def child_env(drop: Iterable[str] = (), **set_: str) -> dict[str, str]:
    """This process's environment without ``drop``, with ``set_`` added."""
    env = {k: v for k, v in os.environ.items() if k not in set(drop)}
    env.update(set_)
    return env


def run(
    cmd: Sequence[str],
    *,
    env: dict | None = None,
    capture: bool = True,
    what: str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess:
    """Runs ``cmd`` to completion. ``capture``: stdout and stderr come back as
    text; otherwise stdout is discarded and stderr passes through. A non-zero
    exit raises RuntimeError naming ``what`` (default: the command) with the
    last 3,000 characters of its stderr."""
    if capture:
        r = subprocess.run(list(cmd), env=env, capture_output=True, text=True, timeout=timeout)
    else:
        r = subprocess.run(list(cmd), env=env, stdout=subprocess.DEVNULL, timeout=timeout)
    if r.returncode != 0:
        tail = (r.stderr or "")[-3000:] if capture else "(its stderr is above)"
        raise RuntimeError(f"{what or ' '.join(map(str, cmd))} failed:\n{tail}")
    return r
