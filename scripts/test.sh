#!/usr/bin/env bash
# Builds in the dev profile and runs every test: the Rust suites and the Rust
# examples, then pytest (which also runs every Python example) against the
# freshly built extension.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
# fault-injection numbers every write for the crash-point sweeps (tests/crash.rs).
cargo test -p loaderx -p loaderx-datafusion -p loaderx-parquet --features loaderx/fault-injection
cargo run -q -p loaderx --example quickstart
cargo run -q -p loaderx --example loader
maturin develop --quiet
python -m pytest -q python/tests "$@"
