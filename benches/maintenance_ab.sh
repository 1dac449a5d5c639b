#!/usr/bin/env bash
# Same-run A/B of the maintenance bench (benches/maintenance.rs) between a
# base revision and the working tree: builds the bench against both (the
# base in a temporary git worktree, each with its own target dir) and runs
# them in alternating rounds, printing one JSON line per measurement tagged
# with its build.
#
#   bash benches/maintenance_ab.sh BASE_REV [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
base="${1:?usage: maintenance_ab.sh BASE_REV [ROUNDS]}"
rounds="${2:-5}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}"
wt="$(mktemp -d)/base"
git worktree add -q --detach "$wt" "$base"
trap 'git worktree remove --force "$wt"' EXIT
cp benches/maintenance.rs "$wt/benches/"
grep -q 'name = "maintenance"' "$wt/Cargo.toml" ||
    printf '\n[[bench]]\nname = "maintenance"\nharness = false\n' >>"$wt/Cargo.toml"
run() { # DIR TARGET TAG
    (cd "$1" && CARGO_TARGET_DIR="$2" cargo bench -q -p loaderx --bench maintenance -- 1 2>/dev/null) |
        sed "s/^{/{\"build\": \"$3\", /"
}
run "$wt" "$cache/loaderx-bench-base" base >/dev/null   # build both first
run . "$cache/loaderx-bench-head" head >/dev/null
for _ in $(seq "$rounds"); do
    run "$wt" "$cache/loaderx-bench-base" base
    run . "$cache/loaderx-bench-head" head
done
