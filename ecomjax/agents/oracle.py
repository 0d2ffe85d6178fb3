"""The oracle of SPEC §8.9: a solvability witness that sees only observations and acts.

Each family's plan lives beside it (``ecomjax.envs.<family>.oracle``) with the protocol
``init_memory() -> memory`` and ``act(memory, obs, catalog, sub) -> (memory, Action)``,
where ``sub`` is the sub-goal whose reply rows the plan reads (0 outside JOURNEY) and the
plan's answer goes in ``action.answer.main``. ``make_oracle`` runs the plans of the
families a batch may hold and picks each episode's by its disclosed env id.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.agents.base import Agent
from ecomjax.family import OraclePlan
from ecomjax.registry import by_env, on_change


def _plans(families: Sequence[int]) -> dict[int, OraclePlan]:
    return {f: by_env(f).oracle for f in sorted({int(x) for x in families})}


def make_oracle(families: Sequence[int] = tuple(C.Env)) -> Agent:
    return _oracle(tuple(sorted({int(f) for f in families})))


@cache
def _oracle(families: tuple[int, ...]) -> Agent:
    plans = _plans(families)
    names = "+".join(by_env(f).name for f in plans)

    def init(key, obs, catalog):
        del key, obs, catalog
        return {by_env(f).name: m.init_memory() for f, m in plans.items()}

    def act(key, memory, obs, catalog):
        del key
        out_mem, actions = {}, []
        for f, m in plans.items():
            name = by_env(f).name
            out_mem[name], a = m.act(memory[name], obs, catalog, jnp.int32(0))
            actions.append((f, a))
        action = actions[0][1]
        for f, a in actions[1:]:
            mine = obs.env == f
            action = jax.tree_util.tree_map(lambda x, y: jnp.where(mine, x, y), a, action)
        return out_mem, action

    narrow = None if len(plans) == 1 else (lambda f: _oracle((int(f),)))
    batch = None
    if len(plans) == 1 and hasattr(only := next(iter(plans.values())), "act_batch"):
        name = by_env(next(iter(plans))).name

        def batch(keys, memory, obs, catalog):
            del keys
            mem, action = only.act_batch(memory[name], obs, catalog)
            return {name: mem}, action

    return Agent(f"oracle[{names}]", init, act, narrow, batch)


# an env id may name another family after ``registry.unregister``
on_change(_oracle.cache_clear)
oracle_agent = make_oracle()
