"""Families by name: the descriptors of ``ecomjax.family``, never a jitted class (DESIGN)."""

from __future__ import annotations

from ecomjax import constants as C
from ecomjax.envs.journey.family import FAMILY as JOURNEY
from ecomjax.envs.subgoal_families import SUBGOAL_FAMILIES
from ecomjax.family import Family

__all__ = ["FAMILIES", "Family", "by_env", "family", "resolve_tasks"]

FAMILIES: dict[str, Family] = {f.name: f for f in (*SUBGOAL_FAMILIES, JOURNEY)}
assert [f.env for f in FAMILIES.values()] == list(C.Env), "one descriptor per Env, in order"


def by_env(env: int) -> Family:
    """The family whose env id is ``env``."""
    return FAMILIES[C.Env(int(env)).name]


def family(name: str) -> Family:
    key = name.upper()
    if key not in FAMILIES:
        known = ", ".join(FAMILIES)
        raise KeyError(f"unknown task family {name!r}; available: {known}")
    return FAMILIES[key]


def resolve_tasks(spec: str) -> tuple[str, ...]:
    """A collection name (C1, C2, C4, C8) or a comma-separated family list."""
    names = C.COLLECTIONS.get(spec.upper(), tuple(s.strip() for s in spec.split(",") if s.strip()))
    for n in names:
        family(n)
    return tuple(n.upper() for n in names)
