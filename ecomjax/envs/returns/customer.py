"""RETURN customer feedback (SPEC §10.2): CONFIRM / CORRECT after a turn that created a
return or an exchange. The customer judges its own returns (knowable, §10.1) as they
stand after the turn.

- CONFIRM: the turn created the active return on the target line, with the user's
  reason, a method that fits the preference and the wanted replacement (an exchange to
  another product satisfying C_rep, or no exchange when none is wanted), and no other
  line has an active return. Each return is confirmed once (``feedback_confirmed``).
- CORRECT: the turn created a return and the returns now have issues (ReturnIssue, in
  listing order): wrong_line (an active return on another line) · wrong_reason (reveals
  the reason) · wrong_method (reveals the method) · replacement_constraint (reveals the
  violated C_rep constraints) · replacement_unwanted (reveals the wish: no replacement) ·
  replacement_missing (no exchange, or one to the same product: reveals the wish and its
  category). Reason, method and replacement issues concern the target line's return.

This is RETURN's ``Family.feedback`` hook; the customer composes it like any family's.
"""

from __future__ import annotations

import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.constraints import ATTR_SLOT, constraint_holds
from ecomjax.envs.returns.verifier import REP, target_return
from ecomjax.family import Feedback
from ecomjax.types import Action, Dialogue, Problem, World

RI = C.ReturnIssue
S = C.Slot


ISSUES = tuple(k.name.lower() for k in RI)


def return_feedback(
    catalog: Catalog,
    problem: Problem,
    world_before: World,
    world: World,
    dlg: Dialogue,
    action: Action | None = None,
) -> Feedback:
    """The RETURN CONFIRM / CORRECT of one turn (world before and after its calls)."""
    del action
    created = world.n_returns > world_before.n_returns
    active, on, r = target_return(problem, world)
    on_target = on.any()
    o = jnp.clip(problem.ret_order, 0, C.MAX_ORDERS - 1)
    j = jnp.clip(problem.ret_line, 0, C.MAX_ORDER_LINES - 1)
    line_pid = problem.line_pid[o, j]
    new = world.exch_pid[r]
    swapped = on_target & (new >= 0) & (new != line_pid)
    holds = constraint_holds(
        catalog, new, problem.cons_attr[REP], problem.cons_op[REP], problem.cons_val[REP]
    )  # [MC]
    violated = swapped & ~holds & (problem.cons_attr[REP] >= 0)

    issues = jnp.zeros(C.N_RET_ISSUES, bool)
    issues = issues.at[RI.WRONG_LINE].set((active & ~on).any())
    issues = issues.at[RI.WRONG_REASON].set(on_target & (world.ret_reason[r] != problem.ret_reason))
    issues = issues.at[RI.WRONG_METHOD].set(
        on_target & (problem.ret_method >= 0) & (world.ret_method[r] != problem.ret_method)
    )
    want = problem.ret_replace
    issues = issues.at[RI.REPLACEMENT_CONSTRAINT].set(want & violated.any())
    issues = issues.at[RI.REPLACEMENT_UNWANTED].set(~want & on_target & (new >= 0))
    issues = issues.at[RI.REPLACEMENT_MISSING].set(want & on_target & ~swapped)
    issues = issues & created

    correct = created & issues.any()
    fresh = r >= world_before.n_returns
    confirm = created & ~issues.any() & on_target & fresh & ~dlg.feedback_confirmed[r]

    reveal = jnp.zeros(C.N_SLOTS, bool)
    reveal = reveal.at[S.REASON].set(issues[RI.WRONG_REASON])
    reveal = reveal.at[S.RETURN_METHOD].set(issues[RI.WRONG_METHOD])
    cons_slot = jnp.where(
        violated, jnp.asarray(ATTR_SLOT)[jnp.maximum(problem.cons_attr[REP], 0)], C.N_SLOTS
    )
    reveal = reveal.at[cons_slot].set(issues[RI.REPLACEMENT_CONSTRAINT], mode="drop")
    wish = issues[RI.REPLACEMENT_UNWANTED] | issues[RI.REPLACEMENT_MISSING]
    reveal = reveal.at[S.REPLACEMENT].set(reveal[S.REPLACEMENT] | wish)
    reveal = reveal.at[S.CATEGORY].set(reveal[S.CATEGORY] | issues[RI.REPLACEMENT_MISSING])
    return Feedback(
        confirm=confirm,
        confirm_new=confirm,
        correct=correct,
        issues=issues,
        reveal=reveal & correct,
        confirmed=jnp.where(
            confirm, dlg.feedback_confirmed.at[r].set(True), dlg.feedback_confirmed
        ),
    )
