#!/usr/bin/env bash
# Set up, then run the whole test suite (reduced sweeps; add --runslow for the full ones).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
# One worker per core (ECOMJAX_TEST_WORKERS=0 runs in-process); see conftest.py for grouping.
# A worker that crashes is not replaced: under --dist loadgroup, pytest-xdist 3.8 can wait
# forever for a replaced worker (pytest-dev/pytest-xdist#1378), so a crash ends the session.
# --capture=sys: what native code writes to fd 2 as it dies (an XLA check, LLVM's out of
# memory, glibc's heap checks) reaches the log instead of pytest's capture file.
options=(-n "${ECOMJAX_TEST_WORKERS:-auto}" --dist loadgroup --max-worker-restart=0 --capture=sys)
# With paths given, run just those. Otherwise the device core and the host bridge run as two
# sessions, so the bridge's native libraries (torch, FAISS, uvloop, the tokenizers) and its
# server threads never share a process with the core's largest XLA compiles (a worker
# holding both once died in XLA's compiler: docs/testing.md).
for arg in "$@"; do
    if [[ "$arg" != -* && -e "${arg%%::*}" ]]; then
        exec .venv/bin/python -m pytest "${options[@]}" "$@"
    fi
done
status=0
session() {  # a -k that selects nothing in one session (pytest exit 5) is not a failure
    # A session a worker crash ended runs the files it left unfinished once more, in new
    # interpreters (long-lived workers ran out of memory maps: docs/testing.md).
    local rc=0
    .venv/bin/python -m tests.support.rerun_crashed "${options[@]}" "$@" || rc=$?
    if ((rc != 0 && rc != 5 && status == 0)); then status=$rc; fi
}
session --ignore=tests/test_trl_example.py "$@" -- tests ecomjax train
session "$@" -- llm_bridge tests/test_trl_example.py
exit "$status"
