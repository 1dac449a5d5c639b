#!/usr/bin/env bash
# Installs a built loaderx wheel (not a development build) into a fresh
# virtualenv that holds numpy only, and runs the original API examples
# (python/tests/test_seed_examples.py) against it; then builds a wheel from
# the sdist with pip and does the same with that one.
#
#   scripts/test_wheel.sh                 builds both here first (CI): the abi3
#                                         wheel and the sdist with maturin, in
#                                         the dev profile and the dev cargo
#                                         target dir (a release build would
#                                         cost ~20 min cold on 2 cores)
#   scripts/test_wheel.sh WHEEL SDIST     tests given ones (scripts/wheel.sh's
#                                         release builds in dist/); the sdist
#                                         then builds in the release profile
#                                         (LOADERX_SDIST_PROFILE=dev: the dev one)
#   scripts/test_wheel.sh WHEEL           the wheel only, e.g. the cp314t one
#                                         with PYTHON=python3.14t
#
# pytest runs from a side directory on PYTHONPATH, so the virtualenv itself
# holds nothing but numpy, loaderx and pip.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/loaderx-wheel-test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
NUMPY="numpy==2.4.6"
PYTEST="pytest==9.2.0"

if [ "$#" -eq 0 ]; then
    # The dev virtualenv's maturin and the dev target dir (scripts/_env.sh).
    source scripts/_env.sh
    t0=$(date +%s)
    maturin build --profile dev --out "$WORK/built" 2>&1 | tail -2
    maturin sdist --out "$WORK/built" 2>&1 | tail -1
    echo "test_wheel.sh: wheel and sdist built in $(( $(date +%s) - t0 ))s"
    WHEEL="$(ls "$WORK"/built/loaderx-*-abi3-*.whl)"
    SDIST="$(ls "$WORK"/built/loaderx-*.tar.gz)"
    SDIST_PROFILE=dev
    deactivate
elif [ "$#" -le 2 ]; then
    WHEEL="$(realpath "$1")"
    SDIST="$([ "$#" -eq 2 ] && realpath "$2" || true)"
    SDIST_PROFILE="${LOADERX_SDIST_PROFILE:-release}"
else
    echo "usage: scripts/test_wheel.sh [WHEEL [SDIST]]" >&2
    exit 2
fi
PY="${PYTHON:-python3}"

# pytest and its dependencies, outside any virtualenv under test.
"$PY" -m pip install -q --target "$WORK/pytest" "$PYTEST"
mkdir -p "$WORK/tests"
cp python/tests/test_seed_examples.py python/tests/conftest.py "$WORK/tests/"

run_examples() {  # venv
    local venv="$1"
    # Only numpy and loaderx are installed (besides pip), and loaderx is the wheel's.
    "$venv/bin/python" - <<'PY'
import importlib.metadata as md
import os
import sys

import loaderx
import loaderx._native

# (a venv of Python < 3.12 also brings setuptools)
names = sorted(d.metadata["Name"].lower() for d in md.distributions())
assert [n for n in names if n not in ("pip", "setuptools")] == ["loaderx", "numpy"], names
site = os.path.realpath(os.path.join(sys.prefix, "lib"))
for mod in (loaderx, loaderx._native):
    assert os.path.realpath(mod.__file__).startswith(site), mod.__file__
print("loaderx", md.version("loaderx"), "from", os.path.dirname(loaderx._native.__file__))
PY
    (cd "$WORK/tests" && PYTHONPATH="$WORK/pytest" "$venv/bin/python" -m pytest -q \
        -p no:cacheprovider --rootdir "$WORK/tests" test_seed_examples.py)
}

fresh_venv() {  # dir
    "$PY" -m venv "$1"
    "$1/bin/python" -m pip install -q "$NUMPY"
}

# The license travels with both: the wheel's dist-info and the sdist's root.
"$PY" - "$WHEEL" "$SDIST" <<'PY'
import sys, tarfile, zipfile
wheel, sdist = sys.argv[1], sys.argv[2]
names = zipfile.ZipFile(wheel).namelist()
assert any(n.split("/")[0].endswith(".dist-info") and n.endswith("LICENSE") for n in names), (
    f"{wheel} carries no LICENSE: {[n for n in names if 'dist-info' in n]}"
)
if sdist:
    members = tarfile.open(sdist).getnames()
    assert any(m.count("/") == 1 and m.endswith("/LICENSE") for m in members), (
        f"{sdist} carries no LICENSE at its root"
    )
print("test_wheel.sh: LICENSE is in the wheel" + (" and the sdist" if sdist else ""))
PY
echo "test_wheel.sh: $(basename "$WHEEL")"
fresh_venv "$WORK/venv-wheel"
"$WORK/venv-wheel/bin/python" -m pip install -q "$WHEEL"
run_examples "$WORK/venv-wheel"
[ -n "$SDIST" ] || exit 0

echo "test_wheel.sh: $(basename "$SDIST") -> wheel ($SDIST_PROFILE profile)"
t0=$(date +%s)
# pip builds the sdist in isolation with maturin from PyPI (pyproject's
# build-system); MATURIN_PEP517_ARGS picks the cargo profile, and the cargo
# target dir is reused (CARGO_TARGET_DIR).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/loaderx-target}"
[ "$SDIST_PROFILE" = release ] && CARGO_TARGET_DIR="${LOADERX_WHEEL_TARGET:-$HOME/.cache/loaderx-target-wheel}"
MATURIN_PEP517_ARGS="--profile $SDIST_PROFILE" \
    "$PY" -m pip wheel -q --no-cache-dir --no-deps --wheel-dir "$WORK/from-sdist" "$SDIST"
echo "test_wheel.sh: sdist built in $(( $(date +%s) - t0 ))s"
fresh_venv "$WORK/venv-sdist"
"$WORK/venv-sdist/bin/python" -m pip install -q "$WORK"/from-sdist/loaderx-*.whl
run_examples "$WORK/venv-sdist"
