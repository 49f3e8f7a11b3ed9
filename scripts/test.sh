#!/usr/bin/env bash
# Set up if needed, then run the default test suite on all cores. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n auto --dist worksteal "$@"
