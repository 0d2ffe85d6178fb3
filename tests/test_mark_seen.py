"""``mark_searched_batch`` (the search rows of a whole batch joining Seen, visiting only the
rows that hold results) equals each episode's own ``exposure.insert`` of every slot's
result ids, bit for bit, for any pattern of searching slots, padding, out-of-range ids
and chunk size. ``tests/test_step_batch.py`` checks the same inside whole turns."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax import constants as C
from ecomjax import exposure as X
from ecomjax.tools.execute import mark_searched_batch
from ecomjax.types import no_search
from ecomjax.world import init_world

B, N = 9, 60


@partial(jax.jit, static_argnums=2)
def both(seen, ids, chunk):
    world = jax.vmap(lambda s: init_world(N).replace(seen=s))(seen)
    search = no_search((B,)).replace(ids=ids)
    want = jax.vmap(lambda w, i: X.insert(w, i, N, seen=True, oos=False))(world, ids)
    return mark_searched_batch(world, search, chunk), want


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    p_search=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    chunk=st.sampled_from([1, 7, 32, B * C.MAX_TOOL_CALLS, 1000]),
)
def test_batch_marking_equals_per_episode_insert(seed, p_search, chunk):
    rng = np.random.default_rng(seed)
    shape = (B, C.MAX_TOOL_CALLS, C.MAX_SEARCH_RESULTS)
    ids = rng.integers(-1, N + 5, size=shape).astype(np.int32)  # -1 pads, >= N ignored
    ids[rng.random(shape) < 0.5] = -1
    ids[rng.random(shape[:2]) >= p_search] = -1  # slots that did not search
    seen = rng.random((B, N)) < 0.2
    got, want = both(jnp.asarray(seen), jnp.asarray(ids), chunk)
    assert np.array_equal(np.asarray(got.seen), np.asarray(want.seen))
    assert np.array_equal(np.asarray(got.oos), np.asarray(want.oos))
    # The case is not trivial: some search marked a product not already Seen.
    if p_search == 1.0:
        assert (np.asarray(got.seen) & ~seen).any()
