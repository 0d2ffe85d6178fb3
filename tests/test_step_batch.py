"""``rollout.step_batch`` (the batch-level gates of ``ecomjax.gates``: slot count, per-slot
tool gating, answer-id recording) against the plain ``vmap(step)``: the same states and
time steps, bit for bit, for random agents that call every tool and answer with ids in
main and sub-goal entries, over a batch that mixes families and difficulties.

The comparison (``tests/support/step_batch_check.py``) runs in a fresh interpreter: three
times a long-lived test worker died of a segmentation fault inside XLA's compiler while
compiling this program, which always compiled cleanly in a new process (docs/testing.md).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from ecomjax import constants as C

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_step_batch_equals_vmapped_step():
    from tests.support import step_batch_check

    cache = os.environ.get("ECOMJAX_JAX_CACHE", os.path.join(ROOT, ".jax_cache"))
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as pool:
        out = pool.submit(step_batch_check.compare, None if cache == "off" else cache).result()
    assert out["state_diffs"] == [], out["state_diffs"]
    assert out["timestep_diffs"] == [], out["timestep_diffs"]
    # The sweep is only meaningful if the agents called many kinds of tools and lived on.
    assert len(set(np.unique(out["tools"]).tolist()) & set(range(1, C.N_TOOLS))) >= 12
    assert out["running"].any()
    # ... and answered with ids in both ways: turns with sub-goal ids, turns with main only.
    main_ids, sub_ids = out["main_ids"], out["sub_ids"]
    assert sub_ids.any() and (main_ids & ~sub_ids).any(), (main_ids, sub_ids)
    # ... and some hard-failed turns had searches, which step_batch must not deliver.
    assert out["failed_search"]
