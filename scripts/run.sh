#!/usr/bin/env bash
# The main job: set up, then curriculum rounds on the embedded defaults (synthetic catalog
# from seed 42, hashing embedder, template customer). Extra arguments go to `ecomjax run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/ecomjax run "$@"
