"""Ids an answer recommends: the ones hallucination and the safety guard look at."""

import jax
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax import constants as C
from ecomjax.reward import answer_ids
from ecomjax.types import empty_answer

_ids = jax.jit(answer_ids)
K = C.MAX_ANSWER_IDS


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.sampled_from([-1, C.Env.PD, C.Env.SUB, C.Env.BUNDLE]),
        min_size=C.MAX_SUBGOALS,
        max_size=C.MAX_SUBGOALS,
    ),
    st.integers(0, 2**31 - 1),
)
def test_null_journey_entries_recommend_nothing(envs, seed):
    rng = np.random.default_rng(seed)
    main = rng.integers(-1, 1000, K).astype(np.int32)
    sub = rng.integers(-1, 1000, (C.MAX_SUBGOALS, K)).astype(np.int32)
    a = empty_answer()
    a = a.replace(
        main=a.main.replace(rec=main),
        sub=a.sub.replace(rec=sub, env=np.asarray(envs, np.int32)),
    )
    got = np.asarray(_ids(a)).reshape(1 + C.MAX_SUBGOALS, K)
    np.testing.assert_array_equal(got[0], main)
    for j, env in enumerate(envs):
        np.testing.assert_array_equal(got[1 + j], sub[j] if env != -1 else -1)
