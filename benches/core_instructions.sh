#!/usr/bin/env bash
# Instructions per call of the core's Criterion benchmarks (benches/gather.rs:
# dense and ragged gathers per codec, the sampler), counted by callgrind, for
# a base revision and the working tree. A count does not move between runs
# the way times do on a small shared VM (10-20 % there), so a change of a
# percent shows. Instructions are not time: memory stalls and the second
# core are not in them, so read this beside benches/core_ab.sh.
#
# Both sides build the bench profile with thin LTO: the release profile (and
# so `cargo bench`) has no LTO since 2026-12-02, and a revision from before
# then would otherwise be compared with an unlike build. One thread
# (LOADERX_THREADS=1), so no gather fans out.
#
#   bash benches/core_instructions.sh BASE_REV [BENCH...]   (needs valgrind)
set -euo pipefail
cd "$(dirname "$0")/.."
base="${1:?usage: core_instructions.sh BASE_REV [BENCH...]}"
shift
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(
    gather_dense_3x64x64/raw gather_dense_3x64x64/zstd
    gather_ragged_tokens/raw gather_ragged_tokens/zstd
    sampler_1M_b256/cyclic sampler_1M_b256/iid)
command -v valgrind >/dev/null || { echo "core_instructions.sh: needs valgrind" >&2; exit 2; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}"
wt="$(mktemp -d)/base"
out="$(mktemp -d)"
git worktree add -q --detach "$wt" "$base"
trap 'git worktree remove --force "$wt"; rm -rf "$out"' EXIT
export CARGO_PROFILE_BENCH_LTO=thin LOADERX_THREADS=1
binary() { # DIR TARGET: builds the bench and prints its executable
    (cd "$1" && CARGO_TARGET_DIR="$2" cargo bench -q -p loaderx --bench gather --no-run \
        --message-format=json) | python3 -c '
import json, sys
exe = [m["executable"] for m in map(json.loads, sys.stdin)
       if m.get("reason") == "compiler-artifact" and m.get("executable")]
print(exe[-1])'
}
base_bin="$(binary "$wt" "$cache/loaderx-bench-base")"
head_bin="$(binary . "$cache/loaderx-bench-head")"
for b in "${benches[@]}"; do
    for side in base head; do
        bin="$base_bin"
        [ "$side" = head ] && bin="$head_bin"
        f="$out/$side.$(echo "$b" | tr / _)"
        valgrind --tool=callgrind --callgrind-out-file="$f.cg" "$bin" --bench \
            --profile-time 3 "$b" >/dev/null 2>&1
        callgrind_annotate --inclusive=yes --tree=caller "$f.cg" >"$f.txt" 2>/dev/null
    done
done
python3 - "$out" "$(git rev-parse --short "$base")" "${benches[@]}" <<'PY'
import re, sys
from pathlib import Path

out, base, benches = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
EDGE = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+<\s+\S*criterion::bencher::Bencher<M>::iter \(([\d,]+)x\)")

def per_call(path):
    """Instructions per call of the routine Criterion's iter calls (the
    largest inclusive count among iter's callees, over its call count)."""
    best = 0.0
    for line in path.read_text().splitlines():
        m = EDGE.match(line)
        if m:
            best = max(best, int(m.group(1).replace(",", "")) / int(m.group(2).replace(",", "")))
    return best

print(f"| benchmark | base {base} (instructions per call) | head | head / base |")
print("|---|---:|---:|---:|")
for b in benches:
    stem = b.replace("/", "_")
    bi, hi = (per_call(out / f"{side}.{stem}.txt") for side in ("base", "head"))
    ratio = f"{hi / bi:.3f}" if bi else "n/a"
    print(f"| {b} | {bi:,.0f} | {hi:,.0f} | {ratio} |")
PY
