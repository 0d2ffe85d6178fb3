"""The array-agent contract."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class Agent(NamedTuple):
    name: str
    init: Callable[..., Any]  # (key, obs, catalog) -> memory
    act: Callable[..., Any]  # (key, memory, obs, catalog) -> (memory, Action)
