#!/usr/bin/env bash
# Set up if needed, then run the main job on simulated ranks (simpg). Extra arguments go to it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m simpg.demo "$@"
