#!/usr/bin/env bash
# Set up, then run the whole test suite (reduced sweeps; add --runslow for the full ones).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
