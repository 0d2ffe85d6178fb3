"""The memorising agent of SPEC §13.14: it knows the oracle's final answer and tool calls
(the product ids a policy could memorise from a fixed catalog) and plays them at once,
without retrieving anything. Retrieval must beat it: v1.1 gives a never-retrieved id no
task credit, so skipping the searches can only cost.

It is a replay, not an ``Agent``: its memory is another run's final state. Per turn it
sends up to B_tool(d) of the oracle's state-changing calls (``cart_add`` per final cart
line, ``return_exchange`` / ``return_initiate`` per active return) and the oracle's scored
answer entries, done once the calls are sent and, in JOURNEY, once every sub-goal can have
been introduced (one per turn).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.catalog.types import Catalog
from ecomjax.core import reset, step
from ecomjax.reward import scored_ids
from ecomjax.types import Answer, EnvParams, EpisodeState, Problem, empty_action

T = C.Tool
I32 = jnp.int32
N_CALLS = C.MAX_CART_LINES + C.MAX_RETURNS
# Families whose oracle answers or calls use catalog product ids: the memoriser's subject.
# STATUS and POLICY answer with order ids, statuses and policy values, drawn per episode.
ID_FAMILIES = ("PD", "SUB", "CART", "RETURN", "BUNDLE", "JOURNEY")


@struct.dataclass
class Memo:
    answer: Answer  # the oracle's scored entries: latest main, latest non-null sub-answers
    tool: jax.Array  # int32 [N_CALLS], compacted, NONE past n_calls
    product: jax.Array
    variant: jax.Array
    order: jax.Array
    line: jax.Array
    qty: jax.Array
    enum_a: jax.Array
    enum_b: jax.Array
    n_calls: jax.Array  # int32
    n_subgoals: jax.Array  # int32, 1 outside JOURNEY
    uses_ids: jax.Array  # bool: the oracle's answer or calls used a product id


def memo_from(state: EpisodeState) -> Memo:
    """What a memoriser knows of one episode: the oracle's final state (unbatched)."""
    w, dlg = state.world, state.dialogue
    cart = w.cart_no > 0
    ret = w.ret_active & (jnp.arange(C.MAX_RETURNS) < w.n_returns)
    exch = ret & (w.exch_pid >= 0)
    live = jnp.concatenate([cart, ret])
    # Cart lines in line order, then returns in the order they were made.
    rank = jnp.concatenate([w.cart_no, C.MAX_CART_LINES * 1000 + jnp.arange(C.MAX_RETURNS)])
    order = jnp.argsort(jnp.where(live, rank, jnp.iinfo(I32).max), stable=True)

    def col(cart_vals, ret_vals):
        return jnp.concatenate([cart_vals, ret_vals]).astype(I32)[order]

    neg = jnp.full(C.MAX_CART_LINES, -1, I32)
    tool = col(
        jnp.full(C.MAX_CART_LINES, T.CART_ADD, I32),
        jnp.where(exch, T.RETURN_EXCHANGE, T.RETURN_INITIATE),
    )
    answer = dlg.answer.replace(
        present=jnp.bool_(True),
        done=jnp.bool_(True),
        sub=dlg.sub_answers,
    )
    sub_env = state.problem.sub_env
    ids = scored_ids(dlg)
    return Memo(
        answer=answer,
        tool=jnp.where(live[order], tool, T.NONE),
        product=col(w.cart_pid, jnp.where(exch, w.exch_pid, -1)),
        variant=col(w.cart_var, jnp.where(exch, w.exch_var, -1)),
        order=col(neg, w.ret_order),
        line=col(neg, w.ret_line),
        qty=col(w.cart_qty, jnp.ones(C.MAX_RETURNS, I32)),
        enum_a=col(jnp.zeros(C.MAX_CART_LINES, I32), w.ret_reason),
        enum_b=col(neg, w.ret_method),
        n_calls=live.sum().astype(I32),
        n_subgoals=jnp.maximum((sub_env >= 0).sum(), 1).astype(I32),
        uses_ids=(ids >= 0).any() | cart.any() | exch.any(),
    )


def _action(catalog: Catalog, problem: Problem, params: EnvParams, memo: Memo, t: jax.Array):
    b = D.difficulty(problem.d, params.overrides).b_tool
    idx = t * b + jnp.arange(C.MAX_TOOL_CALLS)
    use = (jnp.arange(C.MAX_TOOL_CALLS) < b) & (idx < memo.n_calls)
    at = jnp.clip(idx, 0, N_CALLS - 1)

    def pick(x, empty):
        return jnp.where(use, x[at], empty)

    base = empty_action(catalog.embed_dim)
    done = ((t + 1) * b >= memo.n_calls) & (t + 1 >= memo.n_subgoals)
    return base.replace(
        has_message=jnp.bool_(True),
        tool=pick(memo.tool, T.NONE),
        product=pick(memo.product, base.product),
        variant=pick(memo.variant, base.variant),
        order=pick(memo.order, base.order),
        line=pick(memo.line, base.line),
        qty=pick(memo.qty, base.qty),
        enum_a=pick(memo.enum_a, base.enum_a),
        enum_b=pick(memo.enum_b, base.enum_b),
        answer=memo.answer.replace(done=done),
    )


def play_memorised(
    catalog: Catalog,
    key: jax.Array,
    problem: Problem,
    params: EnvParams,
    memo: Memo,
    max_turns: int,
) -> EpisodeState:
    """One episode of the memoriser (unbatched; vmap it); the final state holds the reward."""
    state, _ = reset(key, catalog, problem, params)

    def turn(state, t):
        state, _ = step(catalog, state, _action(catalog, problem, params, memo, t), params)
        return state, None

    state, _ = jax.lax.scan(turn, state, jnp.arange(max_turns))
    return state
