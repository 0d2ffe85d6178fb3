"""The array-agent contract."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class Agent(NamedTuple):
    name: str
    init: Callable[..., Any]  # (key, obs, catalog) -> memory
    act: Callable[..., Any]  # (key, memory, obs, catalog) -> (memory, Action)
    # Optional: the same agent narrowed to one family (env id -> Agent). Mixed-batch
    # rollouts use it on each family's slice, so a many-family agent pays only for the
    # family in front of it.
    for_family: Callable[[int], Any] | None = None
