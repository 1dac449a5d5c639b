#!/usr/bin/env bash
# Runs every Python benchmark in sequence, each with its default options, or
# with its own quick option under --quick; JSON goes to benches/out (--out).
# Each bench's markdown table goes to stdout and to OUT/<step>[-quick].md.
# A failing bench does not stop the others: the summary at the end names it
# and the script exits 1.
#
#   bash benches/run_all.sh [--quick] [--out DIR] [--tmp DIR] [STEP...]
#
# STEPs (default: all, in this order): dense-vision dense-tokens ragged-vision
# ragged-tokens arrow sampler loader readonly polars ray ingest text sql
# columns threads python-threads. bench_free_threaded.py is not among them: it needs
# two interpreters (benches/bench_free_threaded.sh builds them).
# PYTHON (default .venv/bin/python) runs them; the loader needs torch.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
quick=0
out="$ROOT/benches/out"
tmp=/tmp
steps=()
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --out) out="${2:?--out DIR}"; shift ;;
        --tmp) tmp="${2:?--tmp DIR}"; shift ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "run_all.sh: unknown option $1" >&2; exit 2 ;;
        *) steps+=("$1") ;;
    esac
    shift
done
ALL=(dense-vision dense-tokens ragged-vision ragged-tokens arrow sampler loader readonly
    polars ray ingest text sql columns threads python-threads)
[ ${#steps[@]} -gt 0 ] || steps=("${ALL[@]}")
mkdir -p "$out"
suffix=""
[ "$quick" = 1 ] && suffix="-quick"

# The command line of one step (without --quick, --out, --tmp).
command_of() {
    case "$1" in
        dense-vision) echo "bench_dense.py --workload vision" ;;
        dense-tokens) echo "bench_dense.py --workload tokens" ;;
        ragged-vision) echo "bench_ragged.py --workload vision" ;;
        ragged-tokens) echo "bench_ragged.py --workload tokens" ;;
        arrow | sampler | loader | readonly | polars | ray | ingest | text | sql | columns | threads)
            echo "bench_$1.py" ;;
        python-threads) echo "bench_python_threads.py --json" ;;
        *) return 1 ;;
    esac
}
for s in "${steps[@]}"; do
    command_of "$s" >/dev/null || { echo "run_all.sh: unknown step $s (one of: ${ALL[*]})" >&2; exit 2; }
done

failed=()
for s in "${steps[@]}"; do
    read -r -a cmd <<<"$(command_of "$s")"
    args=()
    case "$s" in
        python-threads)
            # Standard library only, no --out: its JSON is its stdout.
            [ "$quick" = 1 ] && args+=(--draws 50000 --rounds 1) ;;
        threads)
            args+=(--out "$out"); [ "$quick" = 1 ] && args+=(--quick) ;;
        *)
            args+=(--out "$out" --tmp "$tmp"); [ "$quick" = 1 ] && args+=(--quick) ;;
    esac
    echo "== $s: benches/${cmd[*]} ${args[*]}" >&2
    t0=$SECONDS
    if [ "$s" = python-threads ]; then
        "$PY" "benches/${cmd[0]}" "${cmd[@]:1}" "${args[@]}" >"$out/python_threads$suffix.json"
        rc=$?
        cat "$out/python_threads$suffix.json"
    else
        "$PY" "benches/${cmd[0]}" "${cmd[@]:1}" "${args[@]}" | tee "$out/$s$suffix.md"
        rc=${PIPESTATUS[0]}
    fi
    echo "== $s: exit $rc after $((SECONDS - t0)) s" >&2
    [ "$rc" = 0 ] || failed+=("$s")
done
echo "== run_all: ${#steps[@]} steps, JSON in $out" >&2
if [ ${#failed[@]} -gt 0 ]; then
    echo "== run_all: failed: ${failed[*]}" >&2
    exit 1
fi
