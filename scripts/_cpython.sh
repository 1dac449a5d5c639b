# Builds (once) a CPython from Debian's source package and prints nothing;
# `cpython_ensure MINOR KIND` (MINOR 3.13 or 3.14; a full version such as
# 3.13.5 is read as its minor) sets CPYTHON to the interpreter and
# CPYTHON_VERSION to its version. KIND is `ft` (configure --disable-gil:
# the free-threaded build, python3.Xt) or `gil` (the standard build of the
# same source; the free-threaded benchmark compares the two).
#
# No free-threaded CPython installs as a binary from the package registries,
# but Debian's archive serves CPython's source packages, and apt fetches
# them with its ordinary client, checked against the archive's signed
# Sources index: python3.13 from trixie, python3.14 from forky. The mirror is
# the one this machine's apt already uses (read from its sources); a private
# source list under the cache dir leaves the system's apt configuration
# alone. Each build is kept in the user cache directory across runs and
# fresh clones, like the cargo target dir, and a cached build is used
# without touching the network. Sourced by scripts/test_free_threaded.sh,
# scripts/wheel.sh and benches/bench_free_threaded.sh.
CPYTHON_HOME="${LOADERX_CPYTHON_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/loaderx-cpython}"

_cpython_suite() {  # minor -> the Debian suite whose python3.X source is built
    case "$1" in
        3.13) echo trixie ;;
        3.14) echo forky ;;
        *) echo "_cpython.sh: no Debian source suite known for CPython $1 (3.13 or 3.14)" >&2; return 1 ;;
    esac
}

_cpython_apt() {  # apt-get ARGS... with a private list of Debian's source suites
    local dir="$CPYTHON_HOME/apt" uri keyring
    if [ ! -f "$dir/etc/sources.sources" ]; then
        # The Debian mirror and keyring this machine's apt uses already.
        if [ -f /etc/apt/sources.list.d/debian.sources ]; then
            uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
            keyring=$(awk '/^Signed-By:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
        else
            uri=$(awk '$1 == "deb" && $2 !~ /^\[/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
        fi
        [ -n "$uri" ] || { echo "_cpython.sh: no Debian mirror found in /etc/apt" >&2; return 1; }
        mkdir -p "$dir/etc" "$dir/lists/partial"
        {
            echo "Types: deb-src"
            echo "URIs: $uri"
            echo "Suites: trixie forky"
            echo "Components: main"
            [ -z "$keyring" ] || echo "Signed-By: $keyring"
        } >"$dir/etc/sources.sources"
    fi
    apt-get -q -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$dir/etc" \
        -o Dir::State::Lists="$dir/lists" -o APT::Get::List-Cleanup=0 "$@"
}

_cpython_cached() {  # minor kind -> the newest working cached build's version
    local minor="$1" kind="$2" gil prefix v best=""
    [ "$kind" = ft ] && gil=False || gil=True
    for prefix in "$CPYTHON_HOME/$minor".*-"$kind"; do
        [ -d "$prefix" ] || continue
        v="${prefix##*/}"
        v="${v%-"$kind"}"
        local py="$prefix/bin/python$minor"
        [ "$kind" = ft ] && py="${py}t"
        "$py" -c "import sys; assert sys._is_gil_enabled() == $gil" 2>/dev/null || continue
        best="$(printf '%s\n%s\n' "$best" "$v" | sed '/^$/d' | sort -V | tail -n 1)"
    done
    [ -n "$best" ] && echo "$best"
}

_cpython_fetch() {  # minor -> prints the path of the upstream source tarball
    local minor="$1" suite src
    suite="$(_cpython_suite "$minor")" || return 1
    src="$CPYTHON_HOME/src"
    mkdir -p "$src"
    echo "_cpython.sh: fetching python$minor's source from Debian $suite" >&2
    _cpython_apt update >/dev/null || return 1
    # apt checks each file against the signed Sources index.
    (cd "$src" && _cpython_apt source --download-only "python$minor/$suite" >/dev/null) || {
        echo "_cpython.sh: Debian's archive did not serve python$minor's source ($suite)" >&2
        return 1
    }
    ls "$src/python${minor}_${minor}".*.orig.tar.xz 2>/dev/null | sort -V | tail -n 1
}

cpython_ensure() {  # minor-or-version kind(ft|gil)
    local minor kind="$2" gil flags=()
    minor="$(echo "$1" | cut -d. -f1,2)"
    case "$kind" in
        ft) gil=False; flags=(--disable-gil) ;;
        gil) gil=True ;;
        *) echo "_cpython.sh: kind must be ft or gil, got $kind" >&2; return 1 ;;
    esac
    _cpython_suite "$minor" >/dev/null || return 1
    _cpython_python() {  # version -> sets CPYTHON
        CPYTHON="$CPYTHON_HOME/$1-$kind/bin/python$minor"
        [ "$kind" = ft ] && CPYTHON="${CPYTHON}t"
        CPYTHON_VERSION="$1"
    }
    local cached
    if cached="$(_cpython_cached "$minor" "$kind")"; then
        _cpython_python "$cached"
        return 0
    fi
    local deps=(build-essential pkg-config libssl-dev zlib1g-dev libffi-dev libbz2-dev
                liblzma-dev libsqlite3-dev libreadline-dev uuid-dev xz-utils)
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
    local tarball version
    tarball="$(_cpython_fetch "$minor")" && [ -n "$tarball" ] || return 1
    version="${tarball##*_}"
    version="${version%.orig.tar.xz}"
    _cpython_python "$version"
    local prefix="$CPYTHON_HOME/$version-$kind" build="$CPYTHON_HOME/$version-$kind.build"
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
