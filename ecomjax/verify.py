"""Verification dispatch (SPEC §7, §8): each family's verifier scores its own (sub-)goal;
JOURNEY averages its sub-goals. Hallucinated answer ids reach the verifiers as unknown ids
(SPEC §7 v1.1), so no family can give them task credit. ``families`` is static, so a batch
slice of one family traces only that family's verifier (DESIGN: verification is vmapped
per slice)."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.envs.subgoal_families import SUBGOAL_FAMILIES
from ecomjax.family import Verify
from ecomjax.registry import by_env, next_env
from ecomjax.types import AnswerFields, Dialogue, Problem, Score, World, make_score
from ecomjax.world import unknown_if_hallucinated

E = C.Env
# Every family with a verifier of its own, in env order (JOURNEY is scored from these).
VERIFIERS: dict[int, Verify] = {f.env: f.verify for f in SUBGOAL_FAMILIES}
ALL_FAMILIES: tuple[int, ...] = tuple(E)


def registered_envs() -> tuple[int, ...]:
    """Every family's env id, a registered one's too (``registry.register``): the default
    of a ``families`` argument, read when a program is traced."""
    return tuple(range(next_env()))


def _verifier(env: int) -> Verify:
    """The built-in sub-goal verifiers, else a registered family's (``registry.register``)."""
    if env in VERIFIERS:
        return VERIFIERS[env]
    fam = by_env(env)
    if fam.verify is None:
        raise ValueError(f"{fam.name} has no verifier of its own")
    return fam.verify


def _grounded(world: World, fields: AnswerFields) -> AnswerFields:
    """The answer entry with each hallucinated id replaced by an unknown id of its own."""
    return fields.replace(rec=unknown_if_hallucinated(world, fields.rec))


def _pick(fields: AnswerFields, i: jax.Array) -> AnswerFields:
    return jax.tree_util.tree_map(lambda x: x[i], fields)


def score(
    catalog: Catalog,
    problem: Problem,
    world: World,
    dlg: Dialogue,
    families: Sequence[int] | None = None,
) -> Score:
    """The task score of a terminated episode from its final world and latest answers.
    ``families`` (static) defaults to every registered family."""
    fams = tuple(sorted({int(f) for f in (registered_envs() if families is None else families)}))
    journey = E.JOURNEY in fams
    base = tuple(f for f in fams if f != E.JOURNEY)
    if journey:  # every sub-goal family may appear, besides the batch's own
        base = (*VERIFIERS, *(f for f in base if f not in VERIFIERS))
    is_journey = problem.env == E.JOURNEY
    main = _grounded(world, dlg.answer.main)
    per_family: dict[int, Score] = {}
    answered: dict[int, jax.Array] = {}
    for f in base:
        slot = jnp.argmax(problem.sub_env == f)
        in_journey = is_journey & (problem.sub_env == f).any()
        sub_ans = _grounded(world, _pick(dlg.sub_answers, slot))
        ans = jax.tree_util.tree_map(lambda s, m: jnp.where(is_journey, s, m), sub_ans, main)
        has = jnp.where(
            is_journey,
            in_journey & dlg.introduced[slot] & (sub_ans.env == f),
            dlg.has_answer & (main.env == f),
        )
        answered[f] = has
        per_family[f] = _verifier(f)(catalog, problem, world, dlg, ans, has)
    out = make_score(-1.0, False)
    for f, sc in per_family.items():
        mine = problem.env == f
        out = jax.tree_util.tree_map(lambda a, b: jnp.where(mine, a, b), sc, out)
    if journey:
        envs = problem.sub_env
        # Every sub-goal needs its own stored sub-answer, CART too (SPEC §8.8 v1.1): the
        # cart alone scores nothing without one.
        has = jnp.stack([answered[f] for f in VERIFIERS])  # [7]
        r = jnp.where(has, jnp.stack([per_family[f].r_task for f in VERIFIERS]), -1.0)
        ok = has & jnp.stack([per_family[f].is_correct for f in VERIFIERS])
        fam_index = jnp.clip(envs, 0, len(VERIFIERS) - 1)
        live = envs >= 0
        # A sub-goal never introduced scores -1 (SPEC §8.8), whatever the world shows.
        intro = dlg.introduced
        r_sub = jnp.where(live, jnp.where(intro, r[fam_index], -1.0), 0.0)
        ok_sub = jnp.where(live, intro & ok[fam_index], True)
        n = jnp.maximum(live.sum(), 1)
        r_j = jnp.clip(r_sub.sum() / n, -1.0, 1.0)
        detail = jnp.zeros_like(out.detail).at[0].set((live & ok_sub).sum() / n)
        j = Score(r_j.astype(jnp.float32), ok_sub.all() & live.any(), detail)
        out = jax.tree_util.tree_map(lambda a, b: jnp.where(is_journey, a, b), j, out)
    return out
