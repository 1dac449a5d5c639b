#!/usr/bin/env bash
# Builds in the dev profile and runs every test: the Rust suites and the Rust
# examples, then pytest (which also runs every Python example and the
# docstring examples) and the documentation's examples against the freshly
# built extension.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
# Hugging Face datasets (loaderx.hf's tests and docs) never reaches the hub.
export HF_HUB_OFFLINE=1
# fault-injection numbers every write for the crash-point sweeps (tests/crash.rs);
# the cloud features are the ones the extension builds (one build of object_store).
cargo test -p loaderx -p loaderx-datafusion -p loaderx-parquet \
    --features loaderx/fault-injection,loaderx/aws,loaderx/gcp,loaderx/azure,loaderx/http
# The core without remote support (nor Arrow): the same location rules
# (one URI parser in every build), remote URIs refused naming the feature.
cargo test -q -p loaderx --no-default-features --lib
cargo run -q -p loaderx --example quickstart
cargo run -q -p loaderx --example loader
maturin develop --quiet
# The test suite and every docstring example of the package (ray.py's need a
# Ray cluster and are not collected).
python -m pytest -q python/tests python/loaderx --doctest-modules \
    --ignore=python/loaderx/__main__.py --ignore=python/loaderx/ray.py "$@"
# The benches' own tests (their helpers, the A/B table, the charts).
python -m pytest -q benches/tests "$@"
# The Python examples of the README and the documentation pages.
python scripts/check_docs_examples.py
