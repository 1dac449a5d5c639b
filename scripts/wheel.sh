#!/usr/bin/env bash
# Builds the release wheels and the sdist into dist/:
#   loaderx-V-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
#       every CPython >= 3.9 with the GIL (the stable ABI);
#   loaderx-V-cp313-cp313t-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
#   loaderx-V-cp314-cp314t-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
#       free-threaded CPython 3.13 and 3.14 (built by scripts/_cpython.sh);
#   loaderx-V.tar.gz
#       the sdist (builds the abi3 wheel with `pip wheel`).
# Every wheel links against glibc 2.17 symbols through zig (maturin --zig, the
# `ziglang` package): no manylinux container. `auditwheel show` prints each
# wheel's platform tag at the end, and the script fails unless it says
# manylinux_2_17. Options: --abi3-only skips the free-threaded wheels,
# --ft-only the abi3 one.
#
# The release cargo target dir is its own (~/.cache/loaderx-target-wheel):
# zig's C compiler would otherwise rebuild the C dependencies of the dev
# build in ~/.cache/loaderx-target. Timings: docs/development.md "Build times".
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
build_abi3=1
build_ft=1
for a in "$@"; do
    case "$a" in
        --abi3-only) build_ft=0 ;;
        --ft-only) build_abi3=0 ;;
        *) echo "usage: scripts/wheel.sh [--abi3-only | --ft-only]" >&2; exit 2 ;;
    esac
done
export CARGO_TARGET_DIR="${LOADERX_WHEEL_TARGET:-$HOME/.cache/loaderx-target-wheel}"
# A small virtualenv with the build tools only.
TOOLS="${LOADERX_WHEEL_VENV:-$ROOT/.venv-wheel}"
REQ=requirements/wheel.txt
if [ ! -x "$TOOLS/bin/python" ]; then
    python3 -m venv "$TOOLS"
fi
stamp="$TOOLS/.requirements.sha"
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$TOOLS/bin/python" -m pip install -q --upgrade pip
    "$TOOLS/bin/python" -m pip install -q -r "$REQ"
    echo "$want" > "$stamp"
fi
# maturin finds zig through the `ziglang` module of the python on PATH.
export PATH="$TOOLS/bin:$PATH"
MATURIN="$TOOLS/bin/maturin"
mkdir -p dist
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
[ "$build_abi3" = 0 ] || rm -f dist/loaderx-"$version"-cp39-abi3-*.whl
[ "$build_ft" = 0 ] || rm -f dist/loaderx-"$version"-cp31[34]-cp31[34]t-*.whl
rm -f dist/loaderx-"$version".tar.gz
# Build from a copy of the tracked and new (not ignored) files, so nothing
# ignored (an extension left by `maturin develop`, a virtualenv) rides along;
# the copy stays at one path so that cargo rebuilds only what changed.
STAGE="${LOADERX_WHEEL_STAGE:-$HOME/.cache/loaderx-wheel-src}"
mkdir -p "$STAGE"
git ls-files -co --exclude-standard > "$STAGE.files"
# tar keeps the modification times, so unchanged files look unchanged to cargo.
tr '\n' '\0' < "$STAGE.files" | tar --null --ignore-failed-read -T - -cf - | tar -xf - -C "$STAGE"
# Drop files that left the tree since the last run.
(cd "$STAGE" && find . -type f -printf '%P\n' | sort | comm -23 - <(sort "$STAGE.files") \
    | tr '\n' '\0' | xargs -0 -r rm -f)
DIST="$ROOT/dist"
cd "$STAGE"

if [ "$build_abi3" = 1 ]; then
    t0=$(date +%s)
    nice -n 10 "$MATURIN" build --profile dist --zig --compatibility manylinux2014 \
        --interpreter "$TOOLS/bin/python" --out "$DIST"
    echo "wheel.sh: abi3 wheel in $(( $(date +%s) - t0 ))s" >&2
fi
if [ "$build_ft" = 1 ]; then
    # shellcheck source=scripts/_cpython.sh
    source "$ROOT/scripts/_cpython.sh"
    for ftv in 3.13 3.14; do
        cpython_ensure "$ftv" ft
        tag="cp$(echo "$ftv" | tr -d .)t"
        # PyO3 0.30 supports free-threaded CPython from 3.14 on; its version
        # check is skipped for 3.13t (see scripts/test_free_threaded.sh).
        if [ "$ftv" = 3.13 ]; then
            export UNSAFE_PYO3_SKIP_VERSION_CHECK=1
        else
            unset UNSAFE_PYO3_SKIP_VERSION_CHECK
        fi
        t0=$(date +%s)
        nice -n 10 "$MATURIN" build --profile dist --zig --compatibility manylinux2014 \
            --no-default-features --features sql,remote --interpreter "$CPYTHON" --out "$DIST"
        echo "wheel.sh: $tag wheel in $(( $(date +%s) - t0 ))s" >&2
    done
fi
"$MATURIN" sdist --out "$DIST"

cd "$ROOT"
for whl in dist/loaderx-"$version"-*.whl; do
    "$TOOLS/bin/auditwheel" show "$whl"
    "$TOOLS/bin/auditwheel" show "$whl" | grep -q 'manylinux_2_17_x86_64' \
        || { echo "wheel.sh: $whl is not manylinux_2_17 (manylinux2014)" >&2; exit 1; }
    # One extension module per wheel, and it is the one for the wheel's tag.
    n="$("$TOOLS/bin/python" -c 'import sys, zipfile; print(sum(n.endswith(".so") for n in zipfile.ZipFile(sys.argv[1]).namelist()))' "$whl")"
    [ "$n" = 1 ] || { echo "wheel.sh: $whl holds $n extension modules" >&2; exit 1; }
done
ls -la dist/
