"""Cart tools with stock reservation (SPEC §5.2): add merges into an existing
(product, variant) line, and every change reserves or releases units."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.types import Problem, World
from ecomjax.world import is_known, stock_qty, variant_count

TE = C.ToolError
I32 = jnp.int32


def _first(mask: jax.Array) -> jax.Array:
    return jnp.where(mask.any(), jnp.argmax(mask), -1)


def _line_slot(world: World, line: jax.Array) -> jax.Array:
    return _first((world.cart_no == line) & (line > 0))


def cart_add(
    catalog: Catalog,
    problem: Problem,
    world: World,
    pid: jax.Array,
    var: jax.Array,
    qty: jax.Array,
) -> tuple[World, jax.Array]:
    known = is_known(catalog, pid)
    var_ok = (var == -1) | ((var >= 0) & (var < variant_count(catalog, problem, pid)))
    free = stock_qty(catalog, problem, world, pid, var)
    existing = _first((world.cart_pid == pid) & (world.cart_var == var) & (world.cart_no > 0))
    empty = _first(world.cart_no == 0)
    err = jnp.select(
        [~known, ~var_ok, free == 0, free < qty, (existing < 0) & (empty < 0)],
        [
            TE.UNKNOWN_PRODUCT,
            TE.UNKNOWN_VARIANT,
            TE.OUT_OF_STOCK,
            TE.INSUFFICIENT_STOCK,
            TE.CART_FULL,
        ],
        TE.NONE,
    ).astype(I32)
    ok = err == TE.NONE
    slot = jnp.where(existing >= 0, existing, jnp.maximum(empty, 0))
    new_line = existing < 0
    number = jnp.where(new_line, world.lines_created + 1, world.cart_no[slot])

    def put(arr, value):
        return jnp.where(ok, arr.at[slot].set(value), arr)

    world = world.replace(
        cart_pid=put(world.cart_pid, pid),
        cart_var=put(world.cart_var, var),
        cart_qty=put(world.cart_qty, world.cart_qty[slot] * (~new_line) + qty),
        cart_no=put(world.cart_no, number),
        lines_created=world.lines_created + (ok & new_line).astype(I32),
    )
    return world, err


def cart_set_quantity(
    catalog: Catalog, problem: Problem, world: World, line: jax.Array, qty: jax.Array
) -> tuple[World, jax.Array]:
    """Quantity 0 removes the line; an increase must fit the free stock."""
    slot = _line_slot(world, line)
    s = jnp.maximum(slot, 0)
    cur = world.cart_qty[s]
    free = stock_qty(catalog, problem, world, world.cart_pid[s], world.cart_var[s])
    err = jnp.select(
        [slot < 0, (qty > cur) & (free < qty - cur)],
        [TE.UNKNOWN_LINE, TE.INSUFFICIENT_STOCK],
        TE.NONE,
    ).astype(I32)
    ok = err == TE.NONE
    remove = ok & (qty == 0)
    world = world.replace(
        cart_qty=jnp.where(ok, world.cart_qty.at[s].set(qty), world.cart_qty),
        cart_pid=jnp.where(remove, world.cart_pid.at[s].set(-1), world.cart_pid),
        cart_var=jnp.where(remove, world.cart_var.at[s].set(-1), world.cart_var),
        cart_no=jnp.where(remove, world.cart_no.at[s].set(0), world.cart_no),
    )
    return world, err


def line_order(no: jax.Array, keep: jax.Array, k: int) -> jax.Array:
    """int32 [lines]: each kept line's position among the kept lines by line number, k for
    the rest and past the first k. Line numbers are distinct, so a line's rank is the count
    of kept lines numbered below it: a [lines, lines] comparison instead of a sort."""
    rank = (keep[None, :] & (no[None, :] < no[:, None])).sum(-1)
    return jnp.where(keep & (rank < k), rank, k)


def cart_rows(world: World) -> tuple[jax.Array, ...]:
    """Cart lines ordered by line id: (pid, var, qty, line number, count, total units)."""
    no = world.cart_no
    active = no > 0
    n = no.shape[0]
    dest = line_order(no, active, n)

    def ordered(values: jax.Array, fill) -> jax.Array:
        return jnp.full(n, fill, values.dtype).at[dest].set(values, mode="drop")

    qty = ordered(world.cart_qty, 0)
    return (
        ordered(world.cart_pid, -1),
        ordered(world.cart_var, -1),
        qty,
        ordered(no, 0),
        active.sum().astype(I32),
        jnp.sum(qty),
    )
