"""The oracle of SPEC §8.9: a solvability witness that sees only observations and acts."""

from __future__ import annotations

from ecomjax.agents.base import Agent
from ecomjax.envs.cart import oracle as cart_oracle


def _init(key, obs, catalog):
    del key, catalog
    return cart_oracle.init_memory()


def _act(key, memory, obs, catalog):
    # Other families' plans join here as they land; CART is the one family so far.
    del key
    return cart_oracle.act(memory, obs, catalog)


oracle_agent = Agent("oracle", _init, _act)
