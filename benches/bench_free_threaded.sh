#!/usr/bin/env bash
# Runs benches/bench_free_threaded.py on one CPython version built twice from
# the same source (scripts/_cpython.sh): the standard build with the abi3
# release wheel, the free-threaded one with its cp31Xt release wheel, both
# from dist/ (scripts/wheel.sh). Each gets a virtualenv with numpy and the
# wheel only, kept in ~/.cache/loaderx-bench-ft.
#
#   benches/bench_free_threaded.sh [ARGS]                        3.14 (default)
#   LOADERX_FT_VERSION=3.13 benches/bench_free_threaded.sh [ARGS]  3.13
#
# ARGS go to bench_free_threaded.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
FT_VERSION="${LOADERX_FT_VERSION:-3.14}"
tag="cp$(echo "$FT_VERSION" | cut -d. -f1,2 | tr -d .)"
# shellcheck source=scripts/_cpython.sh
source scripts/_cpython.sh
cpython_ensure "$FT_VERSION" gil
GIL_PY="$CPYTHON"
cpython_ensure "$FT_VERSION" ft
FT_PY="$CPYTHON"
VENVS="${LOADERX_BENCH_FT_VENVS:-$HOME/.cache/loaderx-bench-ft}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
abi3="$(ls dist/loaderx-"$version"-cp39-abi3-manylinux*.whl)"
ft="$(ls dist/loaderx-"$version"-"$tag"-"${tag}"t-manylinux*.whl)"
setup() {  # name interpreter wheel
    local venv="$VENVS/$1"
    if [ ! -x "$venv/bin/python" ] || [ "$(readlink -f "$venv/bin/python")" != "$(readlink -f "$2")" ]; then
        rm -rf "$venv"
        "$2" -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install -q numpy==2.4.6
    "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$3"
}
setup "gil-$FT_VERSION" "$GIL_PY" "$abi3"
setup "ft-$FT_VERSION" "$FT_PY" "$ft"
exec "$VENVS/gil-$FT_VERSION/bin/python" benches/bench_free_threaded.py \
    --gil-python "$VENVS/gil-$FT_VERSION/bin/python" \
    --ft-python "$VENVS/ft-$FT_VERSION/bin/python" "$@"
