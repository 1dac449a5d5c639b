#!/usr/bin/env bash
# Runs benches/bench_free_threaded.py on CPython 3.13.5 built twice from the
# same source (scripts/_py313t.sh): the standard build with the abi3 release
# wheel, the free-threaded one with the cp313t release wheel, both from dist/
# (scripts/wheel.sh). Each gets a virtualenv with numpy and the wheel only,
# kept in ~/.cache/loaderx-bench-ft. Arguments go to bench_free_threaded.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY313_GIL=1
# shellcheck source=scripts/_py313t.sh
source scripts/_py313t.sh
VENVS="${LOADERX_BENCH_FT_VENVS:-$HOME/.cache/loaderx-bench-ft}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
abi3="$(ls dist/loaderx-"$version"-cp39-abi3-manylinux*.whl)"
ft="$(ls dist/loaderx-"$version"-cp313-cp313t-manylinux*.whl)"
setup() {  # name interpreter wheel
    local venv="$VENVS/$1"
    [ -x "$venv/bin/python" ] || "$2" -m venv "$venv"
    "$venv/bin/python" -m pip install -q numpy==2.4.6
    "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$3"
}
setup gil "$PY313" "$abi3"
setup ft "$PY313T" "$ft"
exec "$VENVS/gil/bin/python" benches/bench_free_threaded.py \
    --gil-python "$VENVS/gil/bin/python" --ft-python "$VENVS/ft/bin/python" "$@"
