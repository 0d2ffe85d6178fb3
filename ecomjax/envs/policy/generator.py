"""POLICY problem generator (SPEC §8.6, §9.5): a rule, a full context it wins, distractor
facts and the answer, all from keyed draws with fixed shapes.

Encodings (Problem): ``pol_rule`` is the device rule index (``policy_rules.RULES[i]``, not
the pol_ number); ``pol_context`` [N_FIELDS] holds the topic's fields (others 0);
``pol_fact_field`` holds policy field indices (``policy_rules.FIELDS``, -1 pad) of fields
outside the topic, with their values in ``pol_fact_value``. Slots: TOPIC (critical, value
= topic index) and one non-critical slot per topic field (``FIELD_SLOT``), value = the code
or number.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax import policy_rules as P
from ecomjax.catalog.types import Catalog
from ecomjax.sampling import TRIES, base_problem, omission, stream
from ecomjax.types import MAX_FACTS, EnvParams, Problem

S = C.Slot
T = P.TABLES
NF = P.N_FIELDS
OP = P.OP_INDEX


def field_bounds(rule: jax.Array):
    """(allowed codes [N_FIELDS, MAX_DOMAIN], lo units [N_FIELDS], hi units [N_FIELDS]) under
    the rule's conditions (rule -1 = none): the satisfying set ∩ each field's domain."""
    codes = jnp.arange(P.MAX_DOMAIN)[None, :]
    fields = jnp.arange(NF)
    allowed = codes < jnp.asarray(T.field_size)[:, None]
    lo = jnp.asarray(T.field_lo_u)
    hi = jnp.asarray(T.field_hi_u)
    inv = jnp.asarray(T.field_inv)
    r = jnp.maximum(rule, 0)
    for j in range(P.MAX_CONDS):
        on = (rule >= 0) & (jnp.asarray(T.cond_field)[r, j] == fields)  # [NF]
        op = jnp.asarray(T.cond_op)[r, j]
        val = jnp.asarray(T.cond_val)[r, j]
        bit = ((jnp.asarray(T.cond_mask)[r, j] >> codes) & 1) == 1
        cat_ok = jnp.select(
            [op == OP["eq"], op == OP["neq"], op == OP["in"], op == OP["not_in"]],
            [codes == val, codes != val, bit, ~bit],
            jnp.ones_like(bit),
        )
        allowed &= ~on[:, None] | cat_ok
        vu = val * inv  # thresholds are whole numbers, so this is exact
        new_lo = jnp.select(
            [op == OP["gt"], op == OP["gte"], op == OP["eq"]],
            [jnp.floor(vu) + 1, jnp.ceil(vu), jnp.round(vu)],
            lo.astype(jnp.float32),
        ).astype(jnp.int32)
        new_hi = jnp.select(
            [op == OP["lt"], op == OP["lte"], op == OP["eq"]],
            [jnp.ceil(vu) - 1, jnp.floor(vu), jnp.round(vu)],
            hi.astype(jnp.float32),
        ).astype(jnp.int32)
        lo = jnp.where(on, jnp.maximum(lo, new_lo), lo)
        hi = jnp.where(on, jnp.minimum(hi, new_hi), hi)
    return allowed, lo, hi


def draw_context(key: jax.Array, rule: jax.Array) -> jax.Array:
    """float32 [N_FIELDS]: every field drawn uniformly from its domain ∩ the rule's
    conditions (a numeric field uniform over its grid points in the interval)."""
    allowed, lo, hi = field_bounds(rule)
    k_cat, k_num = jax.random.split(key)
    logits = jnp.where(allowed, 0.0, -jnp.inf)
    code = jax.random.categorical(k_cat, logits, -1).astype(jnp.float32)
    u = jax.random.uniform(k_num, (NF,))
    span = (jnp.maximum(hi, lo) - lo + 1).astype(jnp.float32)
    units = lo + jnp.minimum(jnp.floor(u * span), span - 1).astype(jnp.int32)
    num = units.astype(jnp.float32) / jnp.asarray(T.field_inv)
    return jnp.where(jnp.asarray(T.field_categorical), code, num)


def rule_fields(rule: jax.Array) -> jax.Array:
    """bool [N_FIELDS]: fields the rule's conditions name."""
    cf = jnp.asarray(T.cond_field)[jnp.maximum(rule, 0)]
    return (cf[None, :] == jnp.arange(NF)[:, None]).any(-1) & (rule >= 0)


def context_for_rule(key: jax.Array, rule: jax.Array) -> jax.Array:
    """SPEC §9.5 step 2: a full context of the rule's topic where the rule wins (``first``
    topics; at most TRIES redraws of the free fields) or matches (``sum``). Fields outside
    the topic are 0."""
    topic = jnp.asarray(T.rule_topic)[rule]
    constrained = rule_fields(rule)
    tries = jax.vmap(lambda t: draw_context(jax.random.fold_in(key, t), rule))(jnp.arange(TRIES))
    # Fields in r's conditions keep their first draw; the free fields are redrawn per try.
    tries = jnp.where(constrained[None, :], tries[0][None, :], tries)
    winners = jax.vmap(lambda ctx: P.evaluate_full(topic, ctx)[2])(tries)
    wins = jnp.asarray(T.topic_sum)[topic] | (winners == rule)
    ctx = tries[jnp.argmax(wins)]
    return jnp.where(jnp.asarray(T.topic_fields)[topic], ctx, 0.0)


def sample_question(key: jax.Array, b_branch: jax.Array):
    """(rule, topic, context [N_FIELDS], answer, n_clauses) of SPEC §9.5 steps 1, 2, 4."""
    k_c, k_r, k_ctx = jax.random.split(key, 3)
    c = jnp.where(b_branch <= 2, b_branch, 2 + jax.random.bernoulli(k_c).astype(jnp.int32))
    c = jnp.clip(c, 1, 3)
    n = jnp.asarray(T.n_by_nconds)[c - 1]
    rule = jnp.asarray(T.rules_by_nconds)[c - 1, jax.random.randint(k_r, (), 0, n)]
    topic = jnp.asarray(T.rule_topic)[rule]
    ctx = context_for_rule(k_ctx, rule)
    return rule, topic, ctx, P.evaluate(topic, ctx), c


def distractor_facts(key: jax.Array, topic: jax.Array, n: jax.Array):
    """n facts (n <= MAX_FACTS) about distinct fields outside the topic, random values."""
    k_f, k_v = jax.random.split(key)
    outside = ~jnp.asarray(T.topic_fields)[topic]
    prio = jax.random.uniform(k_f, (NF,)) + jnp.where(outside, 0.0, 2.0)
    fields = jnp.argsort(prio)[:MAX_FACTS].astype(jnp.int32)
    values = draw_context(k_v, jnp.int32(-1))[fields]
    live = jnp.arange(MAX_FACTS) < n
    return jnp.where(live, fields, -1), jnp.where(live, values, 0.0)


def fill(
    key: jax.Array, catalog: Catalog, d: jax.Array, params: EnvParams, problem: Problem, sub
) -> Problem:
    """Writes the POLICY goal into ``problem`` with its slot rows at sub-goal ``sub``."""
    del catalog
    diff = D.difficulty(d, params.overrides)
    k_q, k_f = jax.random.split(stream(key, "PROBLEM", C.Env.POLICY, sub))
    rule, topic, ctx, answer, c = sample_question(k_q, diff.b_branch)
    n_facts = jnp.clip(diff.b_branch - c, 0, MAX_FACTS)
    fact_field, fact_value = distractor_facts(k_f, topic, n_facts)

    slots = jnp.asarray(P.FIELD_SLOT)
    topic_fields = jnp.asarray(T.topic_fields)[topic]
    omit = jax.vmap(lambda s: omission(key, sub, 0, s, diff.p_missing))(slots)
    has = problem.has_slot.at[sub, 0, S.TOPIC].set(True)
    has = has.at[sub, 0, slots].set(topic_fields)
    pending = problem.pending.at[sub, 0, S.TOPIC].set(False)
    pending = pending.at[sub, 0, slots].set(topic_fields & omit)
    value = problem.slot_value.at[sub, S.TOPIC].set(topic.astype(jnp.float32))
    value = value.at[sub, slots].set(jnp.where(topic_fields, ctx, 0.0))
    op = problem.slot_op.at[sub, S.TOPIC].set(0).at[sub, slots].set(0)
    return problem.replace(
        has_slot=has,
        pending=pending,
        slot_value=value,
        slot_op=op,
        pol_topic=topic.astype(jnp.int32),
        pol_rule=rule.astype(jnp.int32),
        pol_context=ctx,
        pol_answer=answer,
        pol_fact_field=fact_field,
        pol_fact_value=fact_value,
    )


def generate(key: jax.Array, catalog: Catalog, d: jax.Array, params: EnvParams) -> Problem:
    return fill(key, catalog, d, params, base_problem(key, d, C.Env.POLICY, params, catalog), 0)
