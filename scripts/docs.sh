#!/usr/bin/env bash
# Build the documentation site into docs/_build/html: set up if needed (scripts/setup.sh),
# install the 'docs' extra of pyproject.toml when it is missing or pyproject.toml changed,
# then run Sphinx with warnings as errors. Extra arguments go to sphinx-build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
stamp=.venv/.docs-stamp
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[docs]"
    touch "$stamp"
fi
exec .venv/bin/sphinx-build -W -b html docs docs/_build/html "$@"
