"""Do-nothing agents of SPEC §13 invariant 5: they bound the reward from below."""

from __future__ import annotations

import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.agents.base import Agent
from ecomjax.types import empty_action


def _silent_act(key, memory, obs, catalog):
    """'ok' every turn: a message, no tools, no answer."""
    del key
    return memory, empty_action(catalog.embed_dim).replace(has_message=jnp.bool_(True))


def _empty_cart_act(key, memory, obs, catalog):
    """An immediate done with an empty answer (an empty cart in CART)."""
    del key
    action = empty_action(catalog.embed_dim)
    env = jnp.where(obs.env >= 0, obs.env, C.Env.CART).astype(jnp.int32)
    answer = action.answer.replace(
        present=jnp.bool_(True), main=action.answer.main.replace(env=env)
    )
    return memory, action.replace(answer=answer)


silent_agent = Agent("silent", lambda key, obs, catalog: jnp.int32(0), _silent_act)
empty_cart_agent = Agent("empty", lambda key, obs, catalog: jnp.int32(0), _empty_cart_act)
