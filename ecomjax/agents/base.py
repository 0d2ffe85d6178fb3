"""The array-agent contract."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax


class Agent(NamedTuple):
    name: str
    init: Callable[..., Any]  # (key, obs, catalog) -> memory
    act: Callable[..., Any]  # (key, memory, obs, catalog) -> (memory, Action)
    # Optional: the same agent narrowed to one family (env id -> Agent). Mixed-batch
    # rollouts use it on each family's slice, so a many-family agent pays only for the
    # family in front of it.
    for_family: Callable[[int], Any] | None = None
    # Optional: ``act`` over a batch (every argument with a leading lane axis). An agent
    # whose per-lane choice between costly branches can be dispatched at the batch level
    # offers it; each lane's result must equal ``act``'s, except on lanes whose episode
    # has ended (``obs.done``), whose action is ignored and memory never read again.
    act_batch: Callable[..., Any] | None = None


def batch_act(agent: Agent) -> Callable[..., Any]:
    """The agent's batched act: its own ``act_batch``, or ``act`` under vmap."""
    if agent.act_batch is not None:
        return agent.act_batch
    return jax.vmap(agent.act, (0, 0, 0, None))
