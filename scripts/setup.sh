#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with torch 2.13.0 (CPU) and the test tools.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=.venv/.setup-stamp
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check \
        "torch==2.13.0" numpy pytest pytest-xdist pytest-timeout hypothesis expecttest tqdm matplotlib safetensors fsspec
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
    touch "$stamp"
fi
# the compiled dispatch entry (Note [native fast path] in dtensor/dispatch/native): seconds when its
# source changed, nothing otherwise; without a compiler dtensor keeps its Python entry
.venv/bin/python dtensor/dispatch/native/build.py
