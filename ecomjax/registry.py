"""Families by name: the descriptors of ``ecomjax.family``, never a jitted class (DESIGN).

The eight built-in families are imported statically. ``register`` adds one more at run
time (its descriptor alone: every table in the engine and the host bridge is read from
here when a program is traced), which is how a family defined outside the package, even
inside a test, joins a mixed batch (docs/extending.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import jax

from ecomjax import constants as C
from ecomjax.envs.journey.family import FAMILY as JOURNEY
from ecomjax.envs.subgoal_families import SUBGOAL_FAMILIES
from ecomjax.family import Family

__all__ = [
    "FAMILIES",
    "Family",
    "by_env",
    "env_name",
    "extended",
    "next_env",
    "on_change",
    "family",
    "register",
    "resolve_tasks",
    "unregister",
]

BUILTIN: tuple[Family, ...] = (*SUBGOAL_FAMILIES, JOURNEY)
assert [f.env for f in BUILTIN] == list(C.Env), "one descriptor per Env, in order"
# Every family, in env order (an env id is its position); ``register`` appends.
FAMILIES: dict[str, Family] = {f.name: f for f in BUILTIN}
_BY_ENV: list[Family] = list(BUILTIN)
_FORGET: list[Callable[[], None]] = []


def by_env(env: int) -> Family:
    """The family whose env id is ``env``."""
    e = int(env)
    if not 0 <= e < len(_BY_ENV):
        raise ValueError(f"no family has env id {e}; known ids 0..{len(_BY_ENV) - 1}")
    return _BY_ENV[e]


def env_name(env: int) -> str:
    return by_env(env).name


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


def register(fam: Family) -> Family:
    """Adds ``fam`` as the next family. Its env id must be the next free one (ids index the
    engine's per-family tables), it needs a verifier and an oracle plan, and it cannot be a
    JOURNEY sub-goal (JOURNEY's sub-goal draw is part of its episodes' bit-identity)."""
    if fam.name in FAMILIES:
        raise ValueError(f"a family named {fam.name} is already registered")
    if int(fam.env) != len(_BY_ENV):
        raise ValueError(f"{fam.name}: the next family takes env id {len(_BY_ENV)}, not {fam.env}")
    if fam.verify is None:
        raise ValueError(f"{fam.name}: a registered family needs a verifier")
    if fam.fill is not None:
        raise ValueError(f"{fam.name}: only the built-in families can be JOURNEY sub-goals")
    if not fam.opening:
        raise ValueError(f"{fam.name}: the customer needs an opening line (Family.opening)")
    if fam.feedback is not None and (
        not fam.confirm_text or len(fam.issue_text) != len(fam.issues)
    ):
        raise ValueError(
            f"{fam.name}: a feedback hook needs the host's wording: confirm_text and one "
            "issue_text per issue"
        )
    FAMILIES[fam.name] = fam
    _BY_ENV.append(fam)
    _changed()
    return fam


def unregister(name: str) -> None:
    """Removes the last registered family (and, like ``register``, clears the caches of
    programs traced with the old tables)."""
    fam = family(name)
    if fam in BUILTIN:
        raise ValueError(f"{fam.name} is a built-in family")
    if _BY_ENV[-1] is not fam:
        raise ValueError(f"unregister the families added after {fam.name} first")
    _BY_ENV.pop()
    del FAMILIES[fam.name]
    _changed()


def on_change(forget: Callable[[], None]) -> None:
    """``forget()`` runs whenever a family is added or removed: a cache keyed by env id or
    family name (the oracle's, the host session's compiled functions) drops its entries."""
    _FORGET.append(forget)


def _changed() -> None:
    """Programs traced before the change read the old tables (a ``families`` default is
    every registered family), so JAX's caches go too."""
    for forget in _FORGET:
        forget()
    jax.clear_caches()


@contextmanager
def extended(*fams: Family) -> Iterator[tuple[Family, ...]]:
    """``register`` each of ``fams`` for the body of a ``with`` block, then remove them."""
    done: list[Family] = []
    try:
        for f in fams:
            done.append(register(f))
        yield tuple(done)
    finally:
        for f in reversed(done):
            unregister(f.name)


def next_env() -> int:
    """The env id the next registered family takes."""
    return len(_BY_ENV)
