#!/usr/bin/env bash
# Builds in the dev profile and runs every test: the Rust suites, then pytest
# against the freshly built extension.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
cargo test -p loaderx -p loaderx-datafusion -p loaderx-parquet
maturin develop --quiet
python -m pytest -q python/tests "$@"
