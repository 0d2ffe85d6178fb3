"""The "repeat one id" shortcut of SPEC §13 invariant 15, for PD and SUB.

It plays any agent (by default the oracle) and, whenever that agent answers, lists its
first recommended id in every position the agent filled. Ranking is a ranking only if
this never reaches IsCorrect once two or more products are feasible and available
(|F_end| >= 2): a repeated id has rel 0 after its first occurrence (SPEC §7).
"""

from __future__ import annotations

from functools import cache

import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.agents.base import Agent
from ecomjax.agents.oracle import make_oracle


def repeat_first(rec: jnp.ndarray) -> jnp.ndarray:
    """int32 [MAX_ANSWER_IDS]: every listed (non -1) entry replaced by the first one."""
    listed = rec != -1
    return jnp.where(listed, rec[jnp.argmax(listed)], -1).astype(jnp.int32)


@cache
def repeat_one_id(agent: Agent) -> Agent:
    """``agent`` with each main answer's list made one id repeated (cached, so a jitted
    rollout sees the same static agent every call)."""

    def act(key, memory, obs, catalog):
        memory, action = agent.act(key, memory, obs, catalog)
        main = action.answer.main.replace(rec=repeat_first(action.answer.main.rec))
        return memory, action.replace(answer=action.answer.replace(main=main))

    narrow = None
    if agent.for_family is not None:
        narrow = lambda env: repeat_one_id(agent.for_family(env))  # noqa: E731
    return Agent(f"repeat_one_id[{agent.name}]", agent.init, act, narrow)


repeat_one_id_agent = repeat_one_id(make_oracle((C.Env.PD, C.Env.SUB)))
