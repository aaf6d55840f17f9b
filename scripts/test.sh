#!/usr/bin/env bash
# Installs the package with its test dependencies and runs every test, Rust and Python.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --upgrade pip "maturin>=1.9.4,<2"
python -m pip install --quiet ".[test]"
cargo test --all-targets --quiet
python -m pytest tests
