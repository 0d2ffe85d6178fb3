"""CART verifier (SPEC §8.3): unit F1 of the final cart against R_final (§6)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax.catalog.types import Catalog
from ecomjax.types import AnswerFields, Dialogue, Problem, Score, World, make_score
from ecomjax.world import hallucinated


def item_units(
    problem: Problem, world: World, grounded_only: bool = False
) -> tuple[jax.Array, jax.Array]:
    """Per target: (units under its required key, units of the same product under other keys).

    A variant-required target is keyed ``pid::vid`` (``pid::none`` without a variant); any
    other product is keyed by ``pid`` alone, whatever variant its line carries.
    ``grounded_only`` (the verifier) lets a line added with a hallucinated id match nothing
    (SPEC §7 v1.1); the customer, who sees only the cart, matches every line.
    """
    active = world.cart_no > 0
    if grounded_only:
        active &= ~hallucinated(world, world.cart_pid)
    same_pid = (world.cart_pid[None, :] == problem.item_pid[:, None]) & active[None, :]
    same_pid &= problem.item_pid[:, None] >= 0
    right_var = world.cart_var[None, :] == problem.item_var_target[:, None]
    correct = same_pid & jnp.where(problem.item_var_req[:, None], right_var, True)
    qty = world.cart_qty[None, :]
    return (jnp.where(correct, qty, 0).sum(-1), jnp.where(same_pid & ~correct, qty, 0).sum(-1))


def cart_totals(problem: Problem, world: World, req: jax.Array) -> tuple[jax.Array, ...]:
    """(U_match, U_cart, U_req). Hallucinated lines count in U_cart only."""
    correct, _ = item_units(problem, world, grounded_only=True)
    u_match = jnp.minimum(req, correct).sum()
    u_cart = jnp.where(world.cart_no > 0, world.cart_qty, 0).sum()
    return u_match, u_cart, req.sum()


def unit_f1(u_match: jax.Array, u_cart: jax.Array, u_req: jax.Array) -> jax.Array:
    p = u_match / jnp.maximum(u_cart, 1)
    r = u_match / jnp.maximum(u_req, 1)
    f1 = jnp.where(p + r > 0, 2 * p * r / jnp.maximum(p + r, 1e-12), 0.0)
    return jnp.where(u_req == 0, (u_cart == 0).astype(jnp.float32), f1).astype(jnp.float32)


def verify_cart(problem: Problem, world: World, req_final: jax.Array):
    """(r_task, is_correct, f1)."""
    u_match, u_cart, u_req = cart_totals(problem, world, req_final)
    f1 = unit_f1(u_match, u_cart, u_req)
    exact = (u_match == u_req) & (u_cart == u_req)
    return (2.0 * f1 - 1.0).astype(jnp.float32), exact, f1


def verify(
    catalog: Catalog,
    problem: Problem,
    world: World,
    dlg: Dialogue,
    ans: AnswerFields,
    has: jax.Array,
) -> Score:
    """CART is scored from the cart, answer or not (SPEC §4.5). detail: (F1,)."""
    del catalog, ans, has
    r_task, exact, f1 = verify_cart(problem, world, dlg.req_final)
    return make_score(r_task, exact, f1)
