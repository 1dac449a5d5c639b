#!/usr/bin/env bash
# Builds the release extension and runs the end-to-end demo on generated data.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
maturin develop --release --quiet
python examples/demo.py "$@"
