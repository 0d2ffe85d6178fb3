"""Step 1 of SPEC §4.3: validate the whole action before any call runs (§4.2).

The host parser flags what only text can show (unparseable JSON, unknown keys, wrong JSON
types) in ``Action.malformed`` / ``Action.bad_args``; this module checks everything an
array agent can get wrong: tool ids, required arguments, ranges, enums and the budget.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import order_history as O
from ecomjax.registry import FAMILIES
from ecomjax.types import Action

T = C.Tool
HF = C.HardFail


def _in(x: jax.Array, lo: int, hi: int) -> jax.Array:
    return (x >= lo) & (x <= hi)


def call_valid(action: Action) -> jax.Array:
    """bool [MAX_TOOL_CALLS]: each used slot satisfies its tool's schema."""
    t = action.tool
    has_p = action.product != -1
    has_line = action.line != -1
    has_order = action.order != -1
    reason_ok = _in(action.enum_a, 0, O.N_REASONS - 1)
    method_ok = _in(action.enum_b, 0, O.N_METHODS - 1)
    checks = {
        T.NONE: jnp.ones_like(has_p),
        T.CATALOG_SEARCH: action.has_query
        & _in(action.qty, 1, 500)
        & _in(action.enum_a, 0, len(C.SortBy) - 1),
        T.CATALOG_RERANK: action.has_query & _in(action.qty, 1, 100),
        T.CATALOG_GET_PRODUCT: has_p,
        T.CATALOG_GET_VARIANTS: has_p,
        T.CATALOG_LIST_CATEGORIES: jnp.ones_like(has_p),
        T.CART_VIEW: jnp.ones_like(has_p),
        T.CART_ADD: has_p & _in(action.qty, 1, 99),
        T.CART_REMOVE: has_line,
        T.CART_SET_QUANTITY: has_line & _in(action.qty, 0, 99),
        T.ORDER_LIST: _in(action.qty, 1, 365),
        T.ORDER_GET_STATUS: has_order,
        T.RETURN_CHECK_ELIGIBILITY: has_order & has_line,
        T.RETURN_INITIATE: has_order & has_line & reason_ok & method_ok,
        T.RETURN_EXCHANGE: has_order & has_line & has_p & reason_ok & method_ok,
        T.RETURN_CANCEL: has_order,
        # A query with vocabulary tokens counts as given; a non-empty text of stop words
        # only (no tokens) is still schema-valid, so has_query alone also passes.
        T.POLICY_SEARCH: (action.has_query | (action.query_tokens != -1).any(-1))
        & _in(action.qty, 1, 10),
        T.DATETIME_NOW: jnp.ones_like(has_p),
        T.USER_GET_VISIT_HISTORY: jnp.ones_like(has_p),
        T.ASK_USER: action.slots.any(-1) & _in(action.enum_b, -1, C.MAX_SUBGOALS - 1),
    }
    table = jnp.stack([checks[tool] for tool in T], axis=-1)  # [B, N_TOOLS]
    known_tool = _in(t, 0, C.N_TOOLS - 1)
    ok = jnp.take_along_axis(table, jnp.clip(t, 0, C.N_TOOLS - 1)[:, None], -1)[:, 0]
    return known_tool & ok & ~action.bad_args


def answer_valid(action: Action, env: jax.Array) -> jax.Array:
    """The answer object matches the episode's env schema (SPEC §4.6), with each family's
    own range check of the main entry (``Family.answer_ok``: STATUS's status)."""

    ans = action.answer
    main = ans.main
    sub_ok = (ans.sub.env == -1) | (_in(ans.sub.env, 0, C.Env.JOURNEY - 1))
    own_ok = [
        jnp.where(main.env == fam.env, fam.answer_ok(main), True)
        for fam in FAMILIES.values()
        if fam.answer_ok is not None
    ]
    ok = main.env == env
    for family_ok in own_ok:
        ok = ok & family_ok
    return ok & jnp.where(env == C.Env.JOURNEY, sub_ok.all(), True)


def hard_fail_kind(action: Action, env: jax.Array, budget: jax.Array) -> jax.Array:
    """int32 HardFail of the first violated row of §4.2 (NONE if the action is valid)."""
    used = action.tool != T.NONE
    empty = ~action.has_message & ~used.any() & ~action.answer.present
    return jnp.select(
        [
            action.malformed | empty,
            ~call_valid(action).all(),
            jnp.maximum(used.sum(), action.n_calls) > budget,
            action.answer.present & ~answer_valid(action, env),
        ],
        [HF.MALFORMED_ACTION, HF.INVALID_TOOL_CALL, HF.TOOL_BUDGET_EXCEEDED, HF.INVALID_ANSWER],
        HF.NONE,
    ).astype(jnp.int32)
