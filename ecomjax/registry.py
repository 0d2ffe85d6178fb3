"""Families by name: plain functions and params, never a jitted class (DESIGN)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import NamedTuple

from ecomjax import constants as C

# env -> the package under ecomjax.envs that holds its generator, verifier and oracle.
PACKAGES: dict[C.Env, str] = {
    C.Env.PD: "pd",
    C.Env.SUB: "sub",
    C.Env.CART: "cart",
    C.Env.RETURN: "returns",
    C.Env.STATUS: "status",
    C.Env.POLICY: "policy",
    C.Env.BUNDLE: "bundle",
    C.Env.JOURNEY: "journey",
}


class Family(NamedTuple):
    name: str
    env: C.Env
    generate: Callable  # (key, catalog, d, params) -> Problem


def module(env: C.Env, part: str):
    """``ecomjax.envs.<family>.<part>`` (generator, verifier, oracle, ...)."""
    return importlib.import_module(f"ecomjax.envs.{PACKAGES[C.Env(env)]}.{part}")


def _landed() -> dict[str, Family]:
    out = {}
    for env in C.Env:
        try:
            gen = module(env, "generator").generate
        except (ModuleNotFoundError, AttributeError):
            continue
        out[env.name] = Family(env.name, env, gen)
    return out


FAMILIES: dict[str, Family] = _landed()


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
