#!/usr/bin/env bash
# Set up, then run the whole test suite (reduced sweeps; add --runslow for the full ones).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
# One worker per core (ECOMJAX_TEST_WORKERS=0 runs in-process); see conftest.py for grouping.
exec .venv/bin/python -m pytest -n "${ECOMJAX_TEST_WORKERS:-auto}" --dist loadgroup "$@"
