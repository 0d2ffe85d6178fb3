"""The CART customer's feedback acts (SPEC §10.2): INFORM-update after a shock, CONFIRM of
an exact cart or a presented target, CORRECT with the per-item issue list."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.compact import compact
from ecomjax.envs.cart.verifier import item_units
from ecomjax.tools.cart import line_order
from ecomjax.tools.execute import TurnScratch
from ecomjax.types import Dialogue, Problem, World
from ecomjax.world import cart_fingerprint

CI = C.CartIssue
MP = C.MAX_PRESENTED


@struct.dataclass
class CartFeedback:
    req_final: jax.Array  # int32 [MAX_ITEMS]
    update: jax.Array  # bool [MAX_ITEMS], INFORM-update
    confirm: jax.Array  # bool
    confirm_new: jax.Array  # bool, user-caused
    cart_confirm: jax.Array  # bool
    item_confirm: jax.Array  # bool [MAX_ITEMS]
    correct: jax.Array  # bool
    item_issue: jax.Array  # int32 [MAX_ITEMS]
    extra_pid: jax.Array  # int32 [MAX_PRESENTED]
    extra_kind: jax.Array  # int32 [MAX_PRESENTED], 1 extra product / 2 not mine
    reveal_var: jax.Array  # bool [MAX_ITEMS]
    reveal_qty: jax.Array  # bool [MAX_ITEMS]
    presented: jax.Array  # bool [MAX_ITEMS]
    confirmed_fp: jax.Array
    n_confirmed: jax.Array


def cart_feedback(
    problem: Problem,
    world: World,
    dlg: Dialogue,
    scratch: TurnScratch,
    present: jax.Array,
    shocked_items: jax.Array,
) -> CartFeedback:
    valid = problem.item_pid >= 0
    correct_units, other_units = item_units(problem, world)
    # INFORM-update: a shocked target keeps only the units of its key already in the cart.
    update = shocked_items & valid
    req = jnp.where(update, jnp.minimum(dlg.req_final, correct_units), dlg.req_final)

    # Cart feedback.
    issue = jnp.select(
        [
            problem.item_var_req & (other_units > 0),
            (correct_units == 0) & (req > 0),
            correct_units < req,
            correct_units > req,
        ],
        [CI.WRONG_VARIANT, CI.MISSING, CI.QTY_LOW, CI.QTY_HIGH],
        CI.NONE,
    ).astype(jnp.int32)
    issue = jnp.where(valid, issue, CI.NONE)
    line_live = world.cart_no > 0
    is_target = (world.cart_pid[:, None] == problem.item_pid[None, :]).any(-1)
    line_extra = line_live & ~is_target
    dest = line_order(world.cart_no, line_extra, MP)
    extra_line_pid = jnp.full(MP, -1, jnp.int32).at[dest].set(world.cart_pid, mode="drop")
    # Several lines may hold the same extra product (different variants): name it once.
    dup = (extra_line_pid[None, :] == extra_line_pid[:, None]) & (
        jnp.arange(MP)[None, :] < jnp.arange(MP)[:, None]
    )
    extra_line_pid = compact(extra_line_pid, ~dup.any(-1) & (extra_line_pid >= 0), MP)
    exact = (issue == CI.NONE).all() & ~line_extra.any()
    fp = cart_fingerprint(world)
    fp_new = ~(dlg.confirmed_fp == fp).any()
    cart_turn = scratch.cart_changed
    cart_confirm = cart_turn & exact
    cart_correct = cart_turn & ~exact

    # Presentation feedback, only when the cart did not change this turn.
    shown = (present[:, None] == problem.item_pid[None, :]) & (present[:, None] >= 0)
    shown_items = shown.any(0) & valid
    new_items = shown_items & ~dlg.presented & ~cart_turn
    not_mine = (present >= 0) & ~shown.any(-1) & ~cart_turn
    not_mine_pid = compact(present, not_mine, MP)

    extra_pid = jnp.where(cart_correct, extra_line_pid, not_mine_pid)
    extra_kind = jnp.where(extra_pid >= 0, jnp.where(cart_correct, 1, 2), 0)
    correct = cart_correct | not_mine.any()
    item_issue = jnp.where(cart_correct, issue, CI.NONE)
    confirm = cart_confirm | new_items.any()
    confirm_new = (cart_confirm & fp_new) | new_items.any()
    slot = jnp.minimum(dlg.n_confirmed, dlg.confirmed_fp.shape[0] - 1)
    record = cart_confirm & fp_new
    return CartFeedback(
        req_final=req,
        update=update,
        confirm=confirm,
        confirm_new=confirm_new,
        cart_confirm=cart_confirm,
        item_confirm=new_items,
        correct=correct,
        item_issue=item_issue,
        extra_pid=extra_pid,
        extra_kind=extra_kind,
        reveal_var=item_issue == CI.WRONG_VARIANT,
        reveal_qty=(item_issue == CI.QTY_LOW) | (item_issue == CI.QTY_HIGH) | update,
        presented=dlg.presented | new_items,
        confirmed_fp=jnp.where(record, dlg.confirmed_fp.at[slot].set(fp), dlg.confirmed_fp),
        n_confirmed=dlg.n_confirmed + record.astype(jnp.int32),
    )
