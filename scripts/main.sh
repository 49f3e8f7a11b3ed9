#!/usr/bin/env bash
# Set up if needed, then run the main job: train the Llama-style model on a simulated 2x2x2
# dp x cp x tp mesh (the whole stack: fully sharded + context + tensor + sequence + loss
# parallel, bf16, accumulation, checkpointed blocks) beside one device. Extra arguments go to
# it (python -m examples.train --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m examples.train "$@"
