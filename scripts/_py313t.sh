# Builds (once) a free-threaded CPython 3.13 from Debian trixie's source
# package python3.13 (3.13.5) and sets PY313T to its interpreter; with
# PY313_GIL=1 also the standard (GIL) build of the same source, PY313 (the
# free-threaded benchmark compares the two). Kept in the user cache directory
# across runs and fresh clones, like the cargo target dir. Sourced by
# scripts/test_free_threaded.sh, scripts/wheel.sh and
# benches/bench_free_threaded.sh.
PY313T_VERSION=3.13.5
PY313T_SHA256=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
PY313T_URL="http://deb.debian.org/debian/pool/main/p/python3.13/python3.13_${PY313T_VERSION}.orig.tar.xz"
PY313T_HOME="${LOADERX_PY313T_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/loaderx-py313t}"
PY313T_PREFIX="$PY313T_HOME/$PY313T_VERSION"
PY313T="$PY313T_PREFIX/bin/python3.13t"
PY313_PREFIX="$PY313T_HOME/$PY313T_VERSION-gil"
PY313="$PY313_PREFIX/bin/python3.13"

_py313t_build() {  # prefix interpreter gil_enabled configure-flags...
    local prefix="$1" exe="$2" gil="$3"
    shift 3
    local deps=(build-essential pkg-config libssl-dev zlib1g-dev libffi-dev libbz2-dev
                liblzma-dev libsqlite3-dev libreadline-dev uuid-dev curl xz-utils)
    local missing=()
    for p in "${deps[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "_py313t.sh: installing ${missing[*]}" >&2
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    mkdir -p "$PY313T_HOME"
    local tarball="$PY313T_HOME/python3.13_${PY313T_VERSION}.orig.tar.xz"
    if ! echo "$PY313T_SHA256  $tarball" | sha256sum -c --status 2>/dev/null; then
        curl -sSfL -o "$tarball.part" "$PY313T_URL"
        mv "$tarball.part" "$tarball"
        echo "$PY313T_SHA256  $tarball" | sha256sum -c --status \
            || { echo "_py313t.sh: checksum mismatch for $tarball" >&2; return 1; }
    fi
    local build="$prefix.build"
    rm -rf "$build" "$prefix"
    mkdir -p "$build"
    tar -xf "$tarball" -C "$build" --strip-components=1
    echo "_py313t.sh: building CPython $PY313T_VERSION ($*) into $prefix" >&2
    (
        cd "$build"
        ./configure "$@" --prefix="$prefix" --with-ensurepip=install \
            >"$build/configure.log" 2>&1
        nice -n 10 make -j"$(nproc)" >"$build/make.log" 2>&1
        make install >"$build/install.log" 2>&1
    ) || { echo "_py313t.sh: build failed, logs in $build" >&2; return 1; }
    "$exe" -c "import sys, ssl, zlib, sqlite3; assert sys._is_gil_enabled() == $gil" \
        || { echo "_py313t.sh: $exe is not a working build (GIL enabled: $gil)" >&2; return 1; }
    rm -rf "$build"
}

if [ ! -x "$PY313T" ] || ! "$PY313T" -c 'import sys; assert not sys._is_gil_enabled()' 2>/dev/null; then
    _py313t_build "$PY313T_PREFIX" "$PY313T" False --disable-gil
fi
if [ "${PY313_GIL:-0}" = 1 ] \
    && { [ ! -x "$PY313" ] || ! "$PY313" -c 'import sys; assert sys._is_gil_enabled()' 2>/dev/null; }; then
    _py313t_build "$PY313_PREFIX" "$PY313" True
fi
