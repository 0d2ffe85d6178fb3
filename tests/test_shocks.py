"""Stock shocks (SPEC §6) against a plain numpy reading of the rule, over thousands of
random worlds: a product is exposed when it is Seen, in a goal category, not protected
and has free product-SKU stock (catalog stock minus plain cart lines and active
exchanges, 0 once forced out); each exposed product goes out with the hazard, drawn by
``keyed_uniform``. Cart lines share products (variants, repeats) so reservations sum."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax.compact import compact
from ecomjax.envs.cart.generator import generate
from ecomjax.shocks import apply_shocks, goal_categories, keyed_uniform
from ecomjax.tools.cart import cart_add
from ecomjax.world import init_world

B = 2048


def _random_world(key, catalog, problem, n: int):
    """A dense world whose reservations pile onto a few products (the CART targets, in
    goal categories, and random ones), so some run out. As the cart tools keep it, each
    product-variant has at most one line; variant lines and exchanges share products."""
    k = jax.random.split(key, 9)
    lines, rets = C.MAX_CART_LINES, C.MAX_RETURNS
    # Seven distinct products: the targets first, then random ones.
    cand = jnp.concatenate([problem.item_pid, jax.random.permutation(k[0], n)[:12]])
    earlier = (cand[None, :] == cand[:, None]) & (jnp.arange(17)[None, :] < jnp.arange(17)[:, None])
    p = 7
    pool = compact(cand, (cand >= 0) & ~earlier.any(-1), p)
    order = jax.random.permutation(k[2], lines)  # line i: product i % p, variant i // p - 1
    live = jax.random.bernoulli(k[1], 0.5, (lines,))
    # Half the lines hold their product's stock less 0-2 units: an exchange tips them over.
    stock = catalog.stock[pool[order % p]].astype(jnp.int32)
    near = jnp.maximum(stock - jax.random.randint(k[4], (lines,), 0, 3), 1)
    qty = jnp.where(jax.random.bernoulli(k[0], 0.5, (lines,)), near, 1 + order % 5)
    exch_on = jax.random.bernoulli(k[6], 0.8, (rets,))
    return init_world(n).replace(
        cart_pid=jnp.where(live, pool[order % p], -1),
        cart_var=jnp.where(live, order // p - 1, -1),
        cart_qty=jnp.where(live, qty, 0),
        cart_no=jnp.where(live, jnp.arange(1, lines + 1), 0),
        seen=jax.random.bernoulli(k[5], 0.6, (n,)),
        oos=jax.random.bernoulli(k[7], 0.05, (n,)),
        ret_active=exch_on,
        # Exchanges crowd onto three products, one of them often with a plain line.
        exch_pid=jnp.where(exch_on, jax.random.choice(k[8], pool[:3], (rets,)), -1),
        exch_var=jnp.where(jax.random.bernoulli(k[3], 0.1, (rets,)), 1, -1),
    )


def _reference(catalog, problem, world, u, hazard):
    """(shocked bool [N], products kept from exposure by reservations alone), per product
    in numpy. ``u`` [N] is the turn's keyed draw."""
    n = catalog.n_products
    stock = np.asarray(catalog.stock, np.int64)
    reserved = np.zeros(n, np.int64)
    for pid, var, qty, no in zip(
        *(np.asarray(x) for x in (world.cart_pid, world.cart_var, world.cart_qty, world.cart_no)),
        strict=True,
    ):
        if no > 0 and var == -1:
            reserved[pid] += qty
    for on, pid, var in zip(
        *(np.asarray(x) for x in (world.ret_active, world.exch_pid, world.exch_var)), strict=True
    ):
        if on and pid >= 0 and var == -1:
            reserved[pid] += 1
    free = np.where(np.asarray(world.oos), 0, np.maximum(stock - reserved, 0))
    cats = np.asarray(goal_categories(catalog, problem))
    in_goal = np.isin(np.asarray(catalog.category), cats[cats >= 0])
    protected = np.zeros(n, bool)
    prot = np.asarray(problem.protected)
    protected[prot[prot >= 0]] = True
    candidate = np.asarray(world.seen) & in_goal & ~protected
    exposed = candidate & (free > 0)
    used_up = candidate & ~np.asarray(world.oos) & (stock > 0) & (free == 0)
    return exposed & (u < hazard), used_up.sum()


def test_shocks_match_the_rule(catalog, params):
    n = catalog.n_products
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(66), i))(jnp.arange(B))
    d = jnp.arange(B, dtype=jnp.int32) % (C.D_MAX + 1)
    problems = jax.vmap(generate, (0, None, 0, None))(keys, catalog, d, params)
    # Protect a few seen goal-category products too (PD target / witnesses in other families).
    problems = problems.replace(protected=problems.protected.at[:, 0].set(problems.item_pid[:, 0]))
    worlds = jax.vmap(lambda k, p: _random_world(k, catalog, p, n))(keys, problems)
    turn = jnp.int32(3)
    hazard = jnp.float32(0.5)
    draws = jax.vmap(
        lambda k: keyed_uniform(
            jax.random.fold_in(jax.random.fold_in(k, C.STREAM["SHOCK"]), turn), jnp.arange(n)
        )
    )(keys)

    @jax.jit
    def run(keys, problems, worlds):
        return jax.vmap(lambda k, p, w: apply_shocks(k, catalog, p, w, turn, hazard))(
            keys, problems, worlds
        )

    out, events, n_events, items = run(keys, problems, worlds)
    got = np.asarray(out.oos) & ~np.asarray(worlds.oos)
    problems, worlds, draws = jax.tree_util.tree_map(np.asarray, (problems, worlds, draws))
    n_out = n_used_up = 0
    for i in range(B):
        pick = lambda t: jax.tree_util.tree_map(lambda x: x[i], t)  # noqa: E731
        want, used_up = _reference(catalog, pick(problems), pick(worlds), draws[i], 0.5)
        n_used_up += used_up
        np.testing.assert_array_equal(got[i], want, err_msg=f"episode {i}")
        assert int(n_events[i]) == want.sum()
        listed = np.asarray(events[i])
        np.testing.assert_array_equal(listed[listed >= 0], np.flatnonzero(want)[: C.MAX_EVENTS])
        targets = np.asarray(problems.item_pid[i])
        np.testing.assert_array_equal(
            np.asarray(items[i]), (targets >= 0) & want[np.maximum(targets, 0)]
        )
        n_out += want.sum()
    # The sweep means something: shocks happened, and reservations kept products out.
    assert n_out > B and n_used_up > 100, (n_out, n_used_up)


def test_cart_lines_hold_distinct_product_variants(catalog, params):
    """What ``reserved_out`` relies on: however often an agent adds the same products and
    variants, each product-variant has at most one live line (``cart_add`` merges)."""
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(67), i))(jnp.arange(B))
    d = jnp.arange(B, dtype=jnp.int32) % (C.D_MAX + 1)
    problems = jax.vmap(generate, (0, None, 0, None))(keys, catalog, d, params)

    def adds(key, problem):
        pool = jnp.where(problem.item_pid >= 0, problem.item_pid, problem.item_pid[0])[:3]

        def add(world, k):
            k1, k2, k3 = jax.random.split(k, 3)
            pid = jax.random.choice(k1, pool)
            var = jax.random.randint(k2, (), -1, 2)
            qty = jax.random.randint(k3, (), 1, 3)
            world, err = cart_add(catalog, problem, world, pid, var, qty)
            return world, err == C.ToolError.NONE

        return jax.lax.scan(add, init_world(catalog.n_products), jax.random.split(key, 24))

    worlds, ok = jax.jit(jax.vmap(adds))(keys, problems)
    w = jax.tree_util.tree_map(np.asarray, worlds)
    live = w.cart_no > 0
    same = (
        (w.cart_pid[:, :, None] == w.cart_pid[:, None, :])
        & (w.cart_var[:, :, None] == w.cart_var[:, None, :])
        & live[:, :, None]
        & live[:, None, :]
    )
    assert not (same & ~np.eye(C.MAX_CART_LINES, dtype=bool)).any()
    # Repeats happened: more successful adds than lines in most episodes.
    assert (np.asarray(ok).sum(-1) > live.sum(-1)).mean() > 0.9
