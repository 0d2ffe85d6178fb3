"""POLICY problem generator (SPEC §8.6, §9.5): a rule, a full context it wins, distractor
facts and the answer, all from keyed draws with fixed shapes. For B_branch ≥ 2, two thirds
of the questions are near misses (``near_miss``): a rank ≥ 2 target behind an earlier
rule that fails on one clause only, so the first rule listed is rarely the answer.

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
from ecomjax.envs.policy.context import draw_context, draw_in, draw_tries, field_bounds
from ecomjax.envs.policy.near_miss import near_miss_question
from ecomjax.sampling import CHUNK, base_problem, first_try, omission, stream
from ecomjax.types import MAX_FACTS, EnvParams, Problem

S = C.Slot
# The slots the customer can be asked about (SPEC §10.1 knowable fields).
# quantity and return_method are policy facts here (SPEC §10.1 scope).
SLOTS = (S.TOPIC, S.QUANTITY, S.RETURN_METHOD, *(s for s in S if s >= S.PRODUCT_CATEGORY))
T = P.TABLES
NF = P.N_FIELDS
P_NEAR_MISS = 2.0 / 3.0  # SPEC §9.5 rank spread, for B_branch >= 2
NEAR_MISS_TAG = 0x4E4D  # folds the near-miss draws off the plain ones' key


def rule_fields(rule: jax.Array) -> jax.Array:
    """bool [N_FIELDS]: fields the rule's conditions name."""
    cf = jnp.asarray(T.cond_field)[jnp.maximum(rule, 0)]
    return (cf[None, :] == jnp.arange(NF)[:, None]).any(-1) & (rule >= 0)


def context_for_rule(key: jax.Array, rule: jax.Array) -> jax.Array:
    """SPEC §9.5 step 2: a full context of the rule's topic where the rule wins (``first``
    topics; at most 64 redraws of the free fields, ``sampling.first_try``) or matches
    (``sum``). Fields outside the topic are 0."""
    topic = jnp.asarray(T.rule_topic)[rule]
    constrained = rule_fields(rule)
    box = field_bounds(rule)
    k_fixed, k_tries = jax.random.split(key)
    # Fields in r's conditions keep one draw; the free fields are redrawn per try.
    fixed = draw_in(k_fixed, *box)

    def draw(k):
        return jnp.where(constrained[None, :], fixed[None, :], draw_tries(k, CHUNK, *box))

    def wins(ctx):
        return jnp.asarray(T.topic_sum)[topic] | (P.evaluate_full(topic, ctx)[2] == rule)

    _, ctx = first_try(k_tries, draw, wins)
    return jnp.where(jnp.asarray(T.topic_fields)[topic], ctx, 0.0)


def sample_question(key: jax.Array, b_branch: jax.Array):
    """(rule, topic, context [N_FIELDS], answer, c, near) of SPEC §9.5 steps 1, 2, 4.

    The plain question: c clauses, r uniform over the c-clause rules, a context r wins.
    For B_branch ≥ 2, with probability 2/3 a near-miss question replaces it
    (``near_miss.near_miss_question``; ``near`` says it did). c is the drawn clause count
    either way, and sets the number of distractor facts."""
    k_c, k_r, k_ctx = jax.random.split(key, 3)
    c = jnp.where(b_branch <= 2, b_branch, 2 + jax.random.bernoulli(k_c).astype(jnp.int32))
    c = jnp.clip(c, 1, 3)
    n = jnp.asarray(T.n_by_nconds)[c - 1]
    rule = jnp.asarray(T.rules_by_nconds)[c - 1, jax.random.randint(k_r, (), 0, n)]
    ctx = context_for_rule(k_ctx, rule)
    k_take, k_nm = jax.random.split(jax.random.fold_in(key, NEAR_MISS_TAG))
    take = (b_branch >= 2) & jax.random.bernoulli(k_take, P_NEAR_MISS)
    nm_rule, nm_ctx, _, _, nm_ok = near_miss_question(k_nm, c, skip=~take)
    near = take & nm_ok
    rule = jnp.where(near, nm_rule, rule)
    ctx = jnp.where(near, nm_ctx, ctx)
    topic = jnp.asarray(T.rule_topic)[rule]
    return rule, topic, ctx, P.evaluate(topic, ctx), c, near


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
    rule, topic, ctx, answer, c, _ = sample_question(k_q, diff.b_branch)
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
