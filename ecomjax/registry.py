"""Families by name: plain functions and params, never a jitted class (DESIGN)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ecomjax import constants as C
from ecomjax.envs.cart.generator import generate as cart_generate


class Family(NamedTuple):
    name: str
    env: C.Env
    generate: Callable  # (key, catalog, d, params) -> Problem


FAMILIES: dict[str, Family] = {
    "CART": Family("CART", C.Env.CART, cart_generate),
}


def family(name: str) -> Family:
    key = name.upper()
    if key not in FAMILIES:
        landed = ", ".join(sorted(FAMILIES))
        raise KeyError(f"unknown or not yet implemented task family {name!r}; available: {landed}")
    return FAMILIES[key]


def resolve_tasks(spec: str) -> tuple[str, ...]:
    """A collection name (C1, C2, C4, C8) or a comma-separated family list."""
    names = C.COLLECTIONS.get(spec.upper(), tuple(s.strip() for s in spec.split(",") if s.strip()))
    for n in names:
        family(n)
    return tuple(n.upper() for n in names)
