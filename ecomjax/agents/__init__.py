"""Reference agents as pure array functions: they never leave the device.

An agent is a pair of functions, ``init(key, obs, catalog) -> memory`` and
``act(key, memory, obs, catalog) -> (memory, Action)``, vmapped over episodes by the
rollout driver like the environment itself.
"""

from ecomjax.agents.base import Agent
from ecomjax.agents.oracle import oracle_agent
from ecomjax.agents.random_agent import random_agent
from ecomjax.agents.silent import empty_cart_agent, silent_agent

AGENTS = {
    "oracle": oracle_agent,
    "random": random_agent,
    "silent": silent_agent,
}

__all__ = ["AGENTS", "Agent", "empty_cart_agent", "oracle_agent", "random_agent", "silent_agent"]
