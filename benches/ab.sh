#!/usr/bin/env bash
# Same-run A/B of the Python benchmarks between a base revision and the
# working tree.
#
#   bash benches/ab.sh BASE_REV [--quick] [--rounds N] [--out DIR] [--tmp DIR]
#
# 1. Builds the Python extension of BASE_REV (checked out in a temporary git
#    worktree, target dir ~/.cache/loaderx-ab-base) and of the working tree
#    (target dir ~/.cache/loaderx-ab-head) with the same optimised profile:
#    `maturin build --release` with the release profile's LTO turned off for
#    both (CARGO_PROFILE_RELEASE_LTO=false: the release profile of source
#    installs, and of revisions before it dropped LTO). Set AB_LTO=thin to
#    build what the published wheels use (the dist profile: release with
#    thin LTO).
# 2. Installs each wheel into its own virtualenv (~/.cache/loaderx-ab-venv-base
#    and -head, `python -m venv` without system site-packages) with the pins
#    of requirements/dev.txt for numpy, pyarrow, datafusion, polars, duckdb
#    (bench_sql.py) and zstandard (the gathers' per-core decode limit), which
#    pip takes from its cache when the dev virtualenv already installed them.
# 3. Runs in interleaved rounds (base, head, base, head, ...; 3 rounds, 1 with
#    --quick) the working tree's benches under each build: the gathers of the
#    four store workloads (bench_dense.py / bench_ragged.py --workload vision
#    and tokens, --only zrecord-raw,zrecord-zstd), bench_ingest.py,
#    bench_loader.py (--only loaderx-raw,loaderx-zstd) and bench_sql.py, each
#    writing its --out JSON to OUT/<base|head>/round-<k>/ (OUT defaults to a
#    new directory under /tmp). --quick passes each bench's --quick.
# 4. Prints one table from those JSON files (benches/_ab.py): metric, base
#    median, head median, head/base ratio; OUT/ab.json holds every figure.
#
# Both sides run the same (working tree) bench code, so the A/B measures the
# library; a bench that needs what the base lacks fails on the base side, and
# its metrics show "—" there. AB_BASE_PYTHON / AB_HEAD_PYTHON name
# interpreters that already have a build installed and skip its build.
# To smoke-test this script itself (not to measure), AB_PROFILE=dev builds
# the dev profile. Each side keeps its own target dir: one target dir shared
# by two checkouts lets cargo take one checkout's build of a workspace crate
# as fresh for the other (seen here: base failed to compile against another
# worktree's loaderx core).
set -euo pipefail
shopt -s inherit_errexit # a failed build inside $(build ...) stops the script
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
usage="usage: benches/ab.sh BASE_REV [--quick] [--rounds N] [--out DIR] [--tmp DIR]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
base_rev="$1"
shift
quick=0
rounds=""
out=""
tmp=/tmp
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --rounds) rounds="${2:?--rounds N}"; shift ;;
        --out) out="${2:?--out DIR}"; shift ;;
        --tmp) tmp="${2:?--tmp DIR}"; shift ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$rounds" ] || { [ "$quick" = 1 ] && rounds=1 || rounds=3; }
base_sha="$(git rev-parse --verify "$base_rev^{commit}")"
out="${out:-$(mktemp -d "${TMPDIR:-/tmp}/loaderx-ab.XXXXXX")}"
mkdir -p "$out"
cache="${XDG_CACHE_HOME:-$HOME/.cache}"
PY="${PYTHON:-python3}"
profile="${AB_PROFILE:-release}"
export CARGO_PROFILE_RELEASE_LTO="${AB_LTO:-false}"

pins=()
for pkg in maturin numpy pyarrow datafusion polars duckdb zstandard; do
    pin="$(grep -E "^$pkg==" requirements/dev.txt | sed 's/[[:space:]]*#.*//')"
    [ -n "$pin" ] || { echo "ab.sh: no $pkg pin in requirements/dev.txt" >&2; exit 1; }
    pins+=("$pin")
done

# build SIDE TREE: the side's wheel, installed into its virtualenv.
build() {
    local side="$1" tree="$2"
    local venv="$cache/loaderx-ab-venv-$side"
    local target="$cache/loaderx-ab-$side"
    local wheels="$out/wheels-$side"
    echo "== $side: building $(git -C "$tree" rev-parse --short HEAD)$([ "$side" = head ] && echo " + working tree") (profile $profile, release lto=$CARGO_PROFILE_RELEASE_LTO) into $venv" >&2
    {
        [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
        "$venv/bin/python" -m pip install -q "${pins[@]}"
        rm -rf "$wheels"
        local started=$SECONDS
        (cd "$tree" && CARGO_TARGET_DIR="$target" "$venv/bin/maturin" build --profile "$profile" --quiet \
            -i "$venv/bin/python" -o "$wheels")
        echo "== $side: built in $((SECONDS - started)) s (target dir $target)"
        "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheels"/loaderx-*.whl
    } >&2
    echo "$venv/bin/python"  # the only line on stdout
}

wt=""
cleanup() {
    if [ -n "$wt" ]; then
        git worktree remove --force "$wt" || true
        rmdir "$(dirname "$wt")" 2>/dev/null || true
    fi
}
trap cleanup EXIT
if [ -n "${AB_BASE_PYTHON:-}" ]; then
    base_py="$AB_BASE_PYTHON"
else
    wt="$(mktemp -d "${TMPDIR:-/tmp}/loaderx-ab-base.XXXXXX")/tree"
    git worktree add -q --detach "$wt" "$base_sha"
    base_py="$(build base "$wt")"
fi
head_py="${AB_HEAD_PYTHON:-$(build head "$ROOT")}"

qflag=()
[ "$quick" = 1 ] && qflag=(--quick)
STORE="--only zrecord-raw,zrecord-zstd"
BENCHES=(
    "bench_dense.py --workload vision $STORE"
    "bench_dense.py --workload tokens $STORE"
    "bench_ragged.py --workload vision $STORE"
    "bench_ragged.py --workload tokens $STORE"
    "bench_ingest.py"
    "bench_loader.py --only loaderx-raw,loaderx-zstd"
    "bench_sql.py"
)
failed=0
for r in $(seq "$rounds"); do
    for side in base head; do
        py="$base_py"
        [ "$side" = head ] && py="$head_py"
        dir="$out/$side/round-$r"
        mkdir -p "$dir"
        for b in "${BENCHES[@]}"; do
            read -r -a cmd <<<"$b"
            echo "== round $r/$rounds, $side: ${cmd[*]}" >&2
            if ! "$py" "benches/${cmd[0]}" "${cmd[@]:1}" "${qflag[@]}" --out "$dir" --tmp "$tmp" \
                >>"$dir/stdout.md" 2>>"$dir/stderr.log"; then
                echo "== round $r, $side: ${cmd[0]} failed (see $dir/stderr.log)" >&2
                failed=1
            fi
        done
    done
done
"$head_py" benches/_ab.py "$out" --base "$base_rev ($(git rev-parse --short "$base_sha"))" \
    --head "working tree ($(git rev-parse --short HEAD))"
exit "$failed"
