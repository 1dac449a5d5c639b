# Builds (once) a CPython from a distribution's source package and prints
# nothing; `cpython_ensure VERSION KIND` sets CPYTHON to the interpreter.
# KIND is `ft` (configure --disable-gil: the free-threaded build, python3.Xt)
# or `gil` (the standard build of the same source; the free-threaded
# benchmark compares the two). No free-threaded CPython installs as a binary
# from the package registries these machines reach, but the source packages
# below do, with their checksums from the distributions' Sources indexes:
#   3.13.5  Debian trixie   python3.13 (deb.debian.org)
#   3.14.4  Ubuntu resolute python3.14 (archive.ubuntu.com)
# Each build is kept in the user cache directory across runs and fresh
# clones, like the cargo target dir. Sourced by scripts/test_free_threaded.sh,
# scripts/wheel.sh, benches/bench_free_threaded.sh and .ci/run.
CPYTHON_HOME="${LOADERX_CPYTHON_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/loaderx-cpython}"

_cpython_source() {  # version -> url sha256
    case "$1" in
        3.13.5) echo "http://deb.debian.org/debian/pool/main/p/python3.13/python3.13_3.13.5.orig.tar.xz" \
                     "93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640" ;;
        3.14.4) echo "http://archive.ubuntu.com/ubuntu/pool/main/p/python3.14/python3.14_3.14.4.orig.tar.xz" \
                     "d923c51303e38e249136fc1bdf3568d56ecb03214efdef48516176d3d7faaef8" ;;
        *) echo "_cpython.sh: no source known for CPython $1" >&2; return 1 ;;
    esac
}

cpython_reachable() {  # version: 0 if a build or the tarball is cached, or its source answers
    local url sha
    read -r url sha < <(_cpython_source "$1") || return 1
    [ -x "$CPYTHON_HOME/$1-ft/bin/python${1%.*}t" ] && return 0
    echo "$sha  $CPYTHON_HOME/${url##*/}" | sha256sum -c --status 2>/dev/null && return 0
    curl -sSfI -m 30 -o /dev/null "$url"
}

cpython_ensure() {  # version kind(ft|gil)
    local version="$1" kind="$2" minor gil flags=()
    minor="${version%.*}"
    case "$kind" in
        ft) gil=False; flags=(--disable-gil); CPYTHON="$CPYTHON_HOME/$version-ft/bin/python${minor}t" ;;
        gil) gil=True; CPYTHON="$CPYTHON_HOME/$version-gil/bin/python${minor}" ;;
        *) echo "_cpython.sh: kind must be ft or gil, got $kind" >&2; return 1 ;;
    esac
    local prefix="$CPYTHON_HOME/$version-$kind"
    if [ -x "$CPYTHON" ] && "$CPYTHON" -c "import sys; assert sys._is_gil_enabled() == $gil" 2>/dev/null; then
        return 0
    fi
    local deps=(build-essential pkg-config libssl-dev zlib1g-dev libffi-dev libbz2-dev
                liblzma-dev libsqlite3-dev libreadline-dev uuid-dev curl xz-utils)
    local missing=()
    for p in "${deps[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "_cpython.sh: installing ${missing[*]}" >&2
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    local url sha
    read -r url sha < <(_cpython_source "$version") || return 1
    mkdir -p "$CPYTHON_HOME"
    local tarball="$CPYTHON_HOME/${url##*/}"
    if ! echo "$sha  $tarball" | sha256sum -c --status 2>/dev/null; then
        curl -sSfL -o "$tarball.part" "$url"
        mv "$tarball.part" "$tarball"
        echo "$sha  $tarball" | sha256sum -c --status \
            || { echo "_cpython.sh: checksum mismatch for $tarball" >&2; return 1; }
    fi
    local build="$prefix.build"
    rm -rf "$build" "$prefix"
    mkdir -p "$build"
    tar -xf "$tarball" -C "$build" --strip-components=1
    echo "_cpython.sh: building CPython $version ($kind) into $prefix" >&2
    (
        cd "$build"
        ./configure "${flags[@]}" --prefix="$prefix" --with-ensurepip=install \
            >"$build/configure.log" 2>&1
        nice -n 10 make -j"$(nproc)" >"$build/make.log" 2>&1
        make install >"$build/install.log" 2>&1
    ) || { echo "_cpython.sh: build failed, logs in $build" >&2; return 1; }
    "$CPYTHON" -c "import sys, ssl, zlib, sqlite3; assert sys._is_gil_enabled() == $gil" \
        || { echo "_cpython.sh: $CPYTHON is not a working build (GIL enabled: $gil)" >&2; return 1; }
    rm -rf "$build"
}
