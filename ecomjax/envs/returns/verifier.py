"""RETURN verifier (SPEC §8.4): r_sel (the answered line), r_ret (the returns in the final
world) and r_rep (the replacement), with eligibility from ``ecomjax.order_history``."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.constraints import satisfaction
from ecomjax.numerics import weighted_sum
from ecomjax.order_history import eligibility
from ecomjax.types import AnswerFields, Dialogue, Problem, Score, World, make_score
from ecomjax.world import hallucinated

REP = 2  # Problem.cons_* row of the RETURN replacement


def target_return(problem: Problem, world: World) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(active [MAX_RETURNS], on the target line [MAX_RETURNS], index of the target's
    active return (0 if none))."""
    active = world.ret_active & (jnp.arange(C.MAX_RETURNS) < world.n_returns)
    on = active & (world.ret_order == problem.ret_order) & (world.ret_line == problem.ret_line)
    return active, on, jnp.argmax(on)


def replacement_score(catalog: Catalog, problem: Problem, pid: jax.Array) -> jax.Array:
    """s(p | C_rep)."""
    return satisfaction(
        catalog, pid, problem.cons_attr[REP], problem.cons_op[REP], problem.cons_val[REP]
    )


def components(
    catalog: Catalog, problem: Problem, world: World, ans: AnswerFields, has: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(r_sel, r_ret, r_rep)."""
    eligible, _, _, _ = eligibility(catalog, problem, problem.ret_order, problem.ret_line)
    active, on, r = target_return(problem, world)
    hit = has & (ans.order == problem.ret_order) & (ans.line == problem.ret_line)
    r_sel = jnp.where(hit, 1.0, -1.0)

    on_target = on.any()
    others = (active & ~on).any()
    reason_ok = world.ret_reason[r] == problem.ret_reason
    method_ok = (problem.ret_method < 0) | (world.ret_method[r] == problem.ret_method)
    r_ret_elig = jnp.where(~on_target | others, -1.0, jnp.where(reason_ok & method_ok, 1.0, 0.0))
    r_ret = jnp.where(eligible, r_ret_elig, jnp.where(active.any(), -1.0, 1.0))

    exch_active = active & (world.exch_pid >= 0)
    line_pid = problem.line_pid[
        jnp.clip(problem.ret_order, 0, C.MAX_ORDERS - 1),
        jnp.clip(problem.ret_line, 0, C.MAX_ORDER_LINES - 1),
    ]
    new = world.exch_pid[r]
    # An exchange to a product the agent never retrieved is no replacement (SPEC §7 v1.1).
    swapped = on_target & (new >= 0) & (new != line_pid) & ~hallucinated(world, new)
    s = replacement_score(catalog, problem, new)
    r_rep_wanted = jnp.where(swapped, 2.0 * s - 1.0, -1.0)
    r_rep = jnp.where(
        problem.ret_replace & eligible, r_rep_wanted, jnp.where(exch_active.any(), -1.0, 1.0)
    )
    return r_sel, r_ret, r_rep


def verify(
    catalog: Catalog,
    problem: Problem,
    world: World,
    dlg: Dialogue,
    ans: AnswerFields,
    has: jax.Array,
) -> Score:
    """r_task = clip(0.45·r_sel + 0.45·r_ret + 0.10·r_rep); no answer gives -1.
    detail: (r_sel, r_ret, r_rep)."""
    del dlg
    r_sel, r_ret, r_rep = components(catalog, problem, world, ans, has)
    r_task = jnp.clip(weighted_sum((0.45, 0.45, 0.10), (r_sel, r_ret, r_rep)), -1.0, 1.0)
    r_task = jnp.where(has, r_task, -1.0)
    ok = has & (r_sel == 1.0) & (r_ret == 1.0) & (r_rep >= 0.95)
    return make_score(r_task, ok, r_sel, r_ret, r_rep)
