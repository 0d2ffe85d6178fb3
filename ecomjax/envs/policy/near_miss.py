"""Near-miss POLICY questions: SPEC §9.5 "Rank spread (v1.1)".

Multi-clause rules tend to stand first in their topic, so without this "answer the top
rule" wins most high-d questions. A near-miss question targets a rule r of rank ≥ 2 in a
``first`` topic, and its context makes every earlier rule fail while one earlier rule m
with ≥ c clauses fails on exactly one clause j: the agent has to check m clause by clause
to see that it does not apply. At c = 2 the candidates are pol_011/012/013 (return_fee),
026/018/019/020 (shipping_cost), 032, 038, 043, 059 and 060; pol_031 is not one, since
pol_030 fails on both clauses wherever pol_031 holds.

Host tables (exact, from a grid that meets every region the rule thresholds cut):
``NEAR[r, m, j]``: some context of r's topic makes r win while m fails on clause j alone;
``CANDIDATE[c - 1, r]``: r has such an (m, j) with m of ≥ c clauses; ``PREFERRED[r]``: r's
value differs from every earlier rule's value in its topic (a wrong rule then never gives
the right answer by coincidence); ``C_EFF[c - 1]``: the clause count actually used, the
largest c' ≤ c with candidates (the only 3-clause rule, 062, is alone in its topic, so c = 3
falls back to 2; falling back to the plain draw instead would leave rule 062, a rank-1
rule, answering half of all questions at d ≥ 6).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import policy_rules as P
from ecomjax.envs.policy.context import bounds, draw_tries, rule_conditions
from ecomjax.sampling import CHUNK, first_try

T = P.TABLES
OP = P.OP_INDEX
NC = P.MAX_CONDS
# Whole-context redraws per near-miss question. A single try wins with probability >= 0.74
# for every feasible (r, m, j) (the box fixes most of the topic's fields), so 16 tries
# fail with probability < 1e-9; the test sweeps every candidate.
TRIES = 16
# Weight of a preferred target (value unlike every earlier rule's) against 1 for the others.
# A strict preference would leave 5 of the 10 preferred targets at c = 2 at rank 2, and
# rank 2 deciding 2/3·5/10 + 1/3·6/19 = 43.9 % of the questions at d = 3..5, a hair under
# the 45 % bound; weight 2 gives 40.8 %, and a coincidental answer (pol_012/013 repeat
# pol_014's 0.00) in 6 % of the questions there.
PREFER = 2.0
# The negation of each op (index = op): eq <-> neq, gt <-> lte, gte <-> lt, in <-> not_in.
NEGATE = np.array(
    [OP[o] for o in ("neq", "eq", "lte", "lt", "gte", "gt", "not_in", "in")], np.int32
)


def _np_holds(x: np.ndarray, op: int, val: float, mask: int) -> np.ndarray:
    code = np.clip(np.round(x), 0, 30).astype(np.int64)
    in_set = ((mask >> code) & 1) == 1
    return [x == val, x != val, x > val, x >= val, x < val, x <= val, in_set, ~in_set][op]


def _grid(topic: int) -> np.ndarray:
    """float64 [G, N_FIELDS]: contexts of the topic's fields meeting every region that the
    rule base's conditions cut (each threshold ± one grid step, and the domain ends)."""
    axes = []
    for f in P.TOPIC_FIELDS[topic]:
        field = P.FIELDS[f]
        if field.categorical:
            axes.append(np.arange(len(field.values), dtype=np.float64))
            continue
        cuts = T.cond_val[T.cond_field == f].astype(np.float64)
        step = 1.0 / field.inv
        pts = np.concatenate([[field.lo, field.hi], cuts - step, cuts, cuts + step])
        axes.append(np.unique(np.clip(np.round(pts * field.inv) / field.inv, field.lo, field.hi)))
    grid = np.zeros((int(np.prod([a.size for a in axes])), P.N_FIELDS))
    grid[:, list(P.TOPIC_FIELDS[topic])] = np.array(list(itertools.product(*axes)))
    return grid


def _clauses(grid: np.ndarray) -> np.ndarray:
    """bool [G, N_RULES, MAX_CONDS]: each condition on each grid context (pads hold)."""
    out = np.ones((grid.shape[0], P.N_RULES, NC), bool)
    for r, j in itertools.product(range(P.N_RULES), range(NC)):
        f = T.cond_field[r, j]
        if f >= 0:
            out[:, r, j] = _np_holds(
                grid[:, f], T.cond_op[r, j], T.cond_val[r, j], T.cond_mask[r, j]
            )
    return out


def _negatable(m: int, j: int) -> bool:
    """The clause's negation is a box (numeric eq/neq are not; the rule base has none)."""
    f = T.cond_field[m, j]
    return f >= 0 and (T.field_categorical[f] or T.cond_op[m, j] not in (OP["eq"], OP["neq"]))


def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    near = np.zeros((P.N_RULES, P.N_RULES, NC), bool)
    preferred = np.zeros(P.N_RULES, bool)
    for t, rules in enumerate(P.TOPIC_RULE_LISTS):
        if T.topic_sum[t] or len(rules) < 2:
            continue
        holds = _clauses(_grid(t))
        match = holds.all(-1)
        for k, r in enumerate(rules[1:], start=1):
            earlier = list(rules[:k])
            wins = match[:, r] & ~match[:, earlier].any(1)
            preferred[r] = np.all(T.rule_value[earlier] != T.rule_value[r])
            for m in earlier:
                for j in range(T.rule_ncond[m]):
                    fails_j = ~holds[:, m, j] & (np.delete(holds[:, m], j, 1).all(1))
                    near[r, m, j] = _negatable(m, j) and bool(np.any(wins & fails_j))
    cand = np.stack([(near & (T.rule_ncond[None, :, None] >= c)).any((1, 2)) for c in (1, 2, 3)])
    c_eff = np.array([max(k for k in range(1, c + 1) if cand[k - 1].any()) for c in (1, 2, 3)])
    return near, cand, preferred, c_eff.astype(np.int32)


NEAR, CANDIDATE, PREFERRED, C_EFF = _tables()


def draw_target(key: jax.Array, c: jax.Array) -> jax.Array:
    """A keyed target among the candidates at C_EFF(c), a preferred one with PREFER times
    the weight of the others."""
    cand = jnp.asarray(CANDIDATE)[jnp.asarray(C_EFF)[c - 1] - 1]
    weight = jnp.where(jnp.asarray(PREFERRED), PREFER, 1.0)
    logits = jnp.where(cand, jnp.log(weight), -jnp.inf)
    return jax.random.categorical(key, logits).astype(jnp.int32)


def near_miss_context(
    key: jax.Array, rule: jax.Array, c: jax.Array, skip: jax.Array | bool = False
):
    """(context [N_FIELDS], missed rule m, missed clause j, ok) for a target: (m, j) drawn
    uniformly among the rule's feasible pairs with m of ≥ C_EFF(c) clauses, and a context
    uniform over the box {r's conditions, m's other clauses, not m's clause j}, redrawn
    whole (at most TRIES times) until r wins. ok is False if r has no such pair or every try
    failed (or ``skip``: the question will not be asked, so nothing is drawn). Fields
    outside the topic are 0."""
    k_m, k_ctx = jax.random.split(key)
    big = jnp.asarray(T.rule_ncond) >= jnp.asarray(C_EFF)[c - 1]
    pairs = (jnp.asarray(NEAR)[rule] & big[:, None]).reshape(-1)
    pick = jax.random.categorical(k_m, jnp.where(pairs, 0.0, -jnp.inf)).astype(jnp.int32)
    m, j = pick // NC, pick % NC
    mf, mo, mv, mm = rule_conditions(m)
    mo = jnp.where(jnp.arange(NC) == j, jnp.asarray(NEGATE)[mo], mo)
    rf, ro, rv, rm = rule_conditions(rule)
    cat = jnp.concatenate
    box = bounds(cat([rf, mf]), cat([ro, mo]), cat([rv, mv]), cat([rm, mm]))
    topic = jnp.asarray(T.rule_topic)[rule]
    found, ctx = first_try(
        k_ctx,
        lambda k: draw_tries(k, CHUNK, *box),
        lambda ctx: P.evaluate_full(topic, ctx)[2] == rule,
        TRIES,
        empty=skip | ~pairs.any(),
    )
    ctx = jnp.where(jnp.asarray(T.topic_fields)[topic], ctx, 0.0)
    return ctx, m, j, found & pairs.any()


def near_miss_question(key: jax.Array, c: jax.Array, skip: jax.Array | bool = False):
    """(rule, context, m, j, ok): a drawn target (``draw_target``) and its near-miss
    context (``near_miss_context``)."""
    k_r, k_ctx = jax.random.split(key)
    rule = draw_target(k_r, c)
    return rule, *near_miss_context(k_ctx, rule, c, skip)
