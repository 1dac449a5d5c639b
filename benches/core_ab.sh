#!/usr/bin/env bash
# Same-run A/B of the core's Criterion gather bench (benches/gather.rs:
# dense gathers per codec, ragged gathers, the sampler) between a base
# revision and the working tree. Both are built in the bench profile, the
# base in a temporary git worktree with its own target dir; the rounds
# alternate base, head, base, head... and the table gives, per benchmark,
# the median over rounds of Criterion's point estimate for each build and
# the ratio head / base (below 1: the head is faster).
#
#   bash benches/core_ab.sh BASE_REV [ROUNDS]      (default 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
base="${1:?usage: core_ab.sh BASE_REV [ROUNDS]}"
rounds="${2:-3}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}"
wt="$(mktemp -d)/base"
out="$(mktemp -d)"
git worktree add -q --detach "$wt" "$base"
trap 'git worktree remove --force "$wt"; rm -rf "$out"' EXIT
run() { # DIR TARGET TAG ROUND
    (cd "$1" && CARGO_TARGET_DIR="$2" cargo bench -q -p loaderx --bench gather -- \
        --warm-up-time 1 --measurement-time 3 --noplot 2>/dev/null) >"$out/$3.$4.txt"
}
run "$wt" "$cache/loaderx-bench-base" base 0 # builds (and warms) both first
run . "$cache/loaderx-bench-head" head 0
for r in $(seq "$rounds"); do
    run "$wt" "$cache/loaderx-bench-base" base "$r"
    run . "$cache/loaderx-bench-head" head "$r"
done
python3 - "$out" "$rounds" "$(git rev-parse --short "$base")" <<'PY'
import re, statistics, sys
from pathlib import Path

out, rounds, base = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
UNIT = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}

def estimates(path):
    """{benchmark: point estimate in ns} of one Criterion run's output."""
    found, name = {}, None
    for line in path.read_text().splitlines():
        m = re.match(r"^(\S+/\S+)\s*(time:.*)?$", line.strip())
        if m and "time:" not in m.group(1):
            name = m.group(1)
        t = re.search(r"time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", line)
        if t and name:
            found[name] = float(t.group(1)) * UNIT[t.group(2)]
    return found

runs = {tag: [estimates(out / f"{tag}.{r}.txt") for r in range(1, rounds + 1)] for tag in ("base", "head")}
names = sorted(set().union(*runs["base"]) & set().union(*runs["head"]))
print(f"| benchmark | base {base} (median of {rounds}) | head | head / base |")
print("|---|---|---|---|")
for n in names:
    b = statistics.median(r[n] for r in runs["base"] if n in r)
    h = statistics.median(r[n] for r in runs["head"] if n in r)
    fmt = lambda ns: f"{ns / 1e3:,.1f} µs" if ns < 1e6 else f"{ns / 1e6:,.2f} ms"
    print(f"| {n} | {fmt(b)} | {fmt(h)} | {h / b:.3f} |")
PY
