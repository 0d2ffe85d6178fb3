"""Keyed POLICY contexts inside a box of conditions (SPEC §9.3, §9.5 step 2).

Every condition of the rule base names one field, so any conjunction of conditions
(including negated ones, for near misses) is a box: an allowed code set per categorical
field and an integer-unit interval per numeric one. Drawing uniformly in that box is the
building block of both the winning and the near-miss contexts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import policy_rules as P
from ecomjax.constraints import ratio

T = P.TABLES
NF = P.N_FIELDS
OP = P.OP_INDEX


def rule_conditions(rule: jax.Array):
    """(field, op, value, mask), each [MAX_CONDS], of a rule; field -1 pads (and rule -1
    has no conditions)."""
    r = jnp.maximum(rule, 0)
    field = jnp.where(rule >= 0, jnp.asarray(T.cond_field)[r], -1)
    return field, jnp.asarray(T.cond_op)[r], jnp.asarray(T.cond_val)[r], jnp.asarray(T.cond_mask)[r]


def bounds(field: jax.Array, op: jax.Array, val: jax.Array, mask: jax.Array):
    """(allowed codes [N_FIELDS, MAX_DOMAIN], lo units [N_FIELDS], hi units [N_FIELDS]):
    each field's domain ∩ the conjunction of the conditions [K] (field -1 = none).
    Numeric conditions are gt/gte/lt/lte/eq on whole-number thresholds."""
    codes = jnp.arange(P.MAX_DOMAIN)[None, :]
    fields = jnp.arange(NF)
    allowed = codes < jnp.asarray(T.field_size)[:, None]
    lo = jnp.asarray(T.field_lo_u)
    hi = jnp.asarray(T.field_hi_u)
    inv = jnp.asarray(T.field_inv)
    for j in range(field.shape[0]):
        on = field[j] == fields  # [NF]
        o, v = op[j], val[j]
        bit = ((mask[j] >> codes) & 1) == 1
        cat_ok = jnp.select(
            [o == OP["eq"], o == OP["neq"], o == OP["in"], o == OP["not_in"]],
            [codes == v, codes != v, bit, ~bit],
            jnp.ones_like(bit),
        )
        allowed &= ~on[:, None] | cat_ok
        vu = v * inv  # thresholds are whole numbers, so this is exact
        new_lo = jnp.select(
            [o == OP["gt"], o == OP["gte"], o == OP["eq"]],
            [jnp.floor(vu) + 1, jnp.ceil(vu), jnp.round(vu)],
            lo.astype(jnp.float32),
        ).astype(jnp.int32)
        new_hi = jnp.select(
            [o == OP["lt"], o == OP["lte"], o == OP["eq"]],
            [jnp.ceil(vu) - 1, jnp.floor(vu), jnp.round(vu)],
            hi.astype(jnp.float32),
        ).astype(jnp.int32)
        lo = jnp.where(on, jnp.maximum(lo, new_lo), lo)
        hi = jnp.where(on, jnp.minimum(hi, new_hi), hi)
    return allowed, lo, hi


def field_bounds(rule: jax.Array):
    """The box of one rule's conditions (rule -1 = every field's whole domain)."""
    return bounds(*rule_conditions(rule))


def place(u: jax.Array, allowed: jax.Array, lo: jax.Array, hi: jax.Array) -> jax.Array:
    """float32 [N_FIELDS] from uniforms u [2, N_FIELDS]: a categorical field takes the
    ⌊u·count⌋-th allowed code, a numeric one the ⌊u·span⌋-th grid point of [lo, hi], so
    each field is uniform in its box (two uniforms per field: the generators draw 64 tries
    per question, and a Gumbel draw per code cost six times as many random bits)."""
    count = allowed.sum(-1)
    k = jnp.minimum(jnp.floor(u[0] * count), count - 1)
    code = jnp.argmax(jnp.cumsum(allowed, -1) > k[:, None], -1).astype(jnp.float32)
    span = (jnp.maximum(hi, lo) - lo + 1).astype(jnp.float32)
    units = lo + jnp.minimum(jnp.floor(u[1] * span), span - 1).astype(jnp.int32)
    num = ratio(units, jnp.asarray(T.field_inv).astype(jnp.int32))  # same bits under jit
    return jnp.where(jnp.asarray(T.field_categorical), code, num)


def draw_in(key: jax.Array, allowed: jax.Array, lo: jax.Array, hi: jax.Array) -> jax.Array:
    """One context uniform in the box (an empty box is never asked for)."""
    return place(jax.random.uniform(key, (2, NF)), allowed, lo, hi)


def draw_tries(key: jax.Array, n: int, allowed: jax.Array, lo: jax.Array, hi: jax.Array):
    """float32 [n, N_FIELDS]: n i.i.d. contexts uniform in the box, from one keyed draw."""
    u = jax.random.uniform(key, (n, 2, NF))
    return jax.vmap(place, (0, None, None, None))(u, allowed, lo, hi)


def draw_context(key: jax.Array, rule: jax.Array) -> jax.Array:
    """float32 [N_FIELDS]: every field drawn uniformly from its domain ∩ the rule's
    conditions."""
    return draw_in(key, *field_bounds(rule))
