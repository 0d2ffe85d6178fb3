"""Step 2 of SPEC §4.3: run a turn's tool calls in order over the world.

Each call slot runs every tool branch and selects one (that is what ``vmap`` makes of a
``switch`` anyway), so each branch is kept small: at most ``SMALL_ROWS`` result rows.
Searches and the category list, whose rows are large, are resolved outside the scan.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax import exposure as X
from ecomjax.catalog.types import Catalog
from ecomjax.compact import first_true
from ecomjax.tools import cart as cart_tools
from ecomjax.tools import orders as order_tools
from ecomjax.tools import policy as policy_tools
from ecomjax.tools.rows import Row, _row
from ecomjax.types import SMALL_ROWS, Action, Problem, SearchResults, ToolResults, World
from ecomjax.world import (
    has_synth_variants,
    is_known,
    product_stock_qty,
    record_use,
    safe,
    stock_qty,
    target_item,
    variant_count,
)

T = C.Tool
TE = C.ToolError
I32 = jnp.int32
V = C.MAX_VARIANTS

# Tools whose rows are products the agent now has seen (SPEC §7, Seen).
PRODUCT_ROW_TOOLS = (
    T.CATALOG_SEARCH,
    T.CATALOG_RERANK,
    T.CATALOG_GET_PRODUCT,
    T.CATALOG_GET_VARIANTS,
    T.CART_VIEW,
    T.CART_ADD,
    T.CART_REMOVE,
    T.CART_SET_QUANTITY,
    T.ORDER_LIST,
    T.ORDER_GET_STATUS,
    T.USER_GET_VISIT_HISTORY,
)
CART_TOOLS = (T.CART_VIEW, T.CART_ADD, T.CART_REMOVE, T.CART_SET_QUANTITY)


@struct.dataclass
class TurnScratch:
    """What the customer needs to know about this turn's calls."""

    ask_any: jax.Array  # bool
    ask_slots: jax.Array  # bool [N_SLOTS]
    ask_items: jax.Array  # bool [MAX_ITEMS], CART items in the ask's scope
    ask_not_mine: jax.Array  # bool, a product-scoped ask about a non-target
    ask_subgoal: jax.Array  # int32, -1 = the active one
    cart_changed: jax.Array  # bool


def empty_scratch() -> TurnScratch:
    return TurnScratch(
        ask_any=jnp.bool_(False),
        ask_slots=jnp.zeros(C.N_SLOTS, bool),
        ask_items=jnp.zeros(C.MAX_ITEMS, bool),
        ask_not_mine=jnp.bool_(False),
        ask_subgoal=I32(-1),
        cart_changed=jnp.bool_(False),
    )


def _cart_row(world: World, error: jax.Array) -> Row:
    pid, var, qty, no, count, total = cart_tools.cart_rows(world)
    return _row(error, count, total, pid, var, qty, no)


def _variants_row(catalog: Catalog, problem: Problem, world: World, pid: jax.Array) -> Row:
    known = is_known(catalog, pid)
    nv = jnp.where(known, variant_count(catalog, problem, pid), 0)
    j = jnp.arange(V)
    live = j < nv
    synth = has_synth_variants(problem, pid)
    item = jnp.maximum(target_item(problem, pid), 0)
    attr = jnp.where(synth, problem.item_var_attr[item], C.Attr.COLOR)
    value = jnp.where(
        synth,
        jnp.pad(problem.item_var_vals[item], (0, V - 3)),
        catalog.var_color[safe(pid)].astype(jnp.float32),
    )
    qty = jax.vmap(lambda v: stock_qty(catalog, problem, world, pid, v))(j)
    return _row(
        jnp.where(known, TE.NONE, TE.UNKNOWN_PRODUCT),
        nv,
        nv,
        jnp.where(live, pid, -1),
        jnp.where(live, j, -1),
        jnp.where(live, qty, 0),
        None,
        jnp.where(live, attr, -1),
        jnp.where(live, value, 0.0),
    )


def _history_row(catalog: Catalog, problem: Problem, world: World) -> Row:
    hist = problem.history
    qty = jnp.where(hist >= 0, product_stock_qty(catalog, problem, world, safe(hist)), 0)
    count = (hist >= 0).sum()
    return _row(0, count, count, hist, None, qty)


def _gated(on: jax.Array, fn, fallback):
    """``fn()`` if ``on``, else ``fallback``. With an unbatched ``on`` (a batched driver's
    per-slot tool set) this is a real branch under vmap, so a tool no episode calls in a
    slot costs nothing; a batched ``on`` becomes a select, which computes both, as before.
    Either way the caller only selects ``fn``'s output for episodes that called the tool."""
    return jax.lax.cond(on, fn, lambda: fallback)


def _run_call(
    catalog: Catalog, problem: Problem, search: SearchResults, carry, i, slot_tools: jax.Array
):
    world, scratch, action = carry
    tool = action.tool[i]
    pid, var, qty = action.product[i], action.variant[i], action.qty[i]
    line = action.line[i]
    calls = slot_tools[i]  # bool [N_TOOLS]: tools some episode calls in this slot

    def any_of(tools) -> jax.Array:
        return calls[jnp.asarray(tools)].any()

    is_remove = tool == T.CART_REMOVE
    is_add = tool == T.CART_ADD
    is_setq = (tool == T.CART_SET_QUANTITY) | is_remove

    def cart_mutation():
        added, add_err = cart_tools.cart_add(catalog, problem, world, pid, var, qty)
        # cart_remove is cart_set_quantity(line, 0): one mutation graph serves both.
        setq, setq_err = cart_tools.cart_set_quantity(
            catalog, problem, world, line, jnp.where(is_remove, 0, qty)
        )
        cart_world = jax.tree_util.tree_map(
            lambda a, b, w: jnp.where(is_add, a, jnp.where(is_setq, b, w)), added, setq, world
        )
        cart_err = jnp.where(is_add, add_err, jnp.where(is_setq, setq_err, TE.NONE))
        return cart_world, cart_err.astype(I32)

    mutations = (T.CART_ADD, T.CART_SET_QUANTITY, T.CART_REMOVE)
    cart_world, cart_err = _gated(any_of(mutations), cart_mutation, (world, I32(TE.NONE)))
    cart_row = _gated(any_of(CART_TOOLS), lambda: _cart_row(cart_world, cart_err), _row())
    # Order and return tools (they may change the world: returns, exchange reservations).
    order_world, order_row = _gated(
        any_of(order_tools.ORDER_TOOLS),
        lambda: order_tools.run_order_call(catalog, problem, cart_world, action, i),
        (cart_world, _row()),
    )
    is_order_tool = jnp.isin(tool, jnp.array(order_tools.ORDER_TOOLS))
    cart_world = jax.tree_util.tree_map(
        lambda a, b: jnp.where(is_order_tool, a, b), order_world, cart_world
    )
    known = is_known(catalog, pid)
    rows = {
        T.CART_ADD: cart_row,
        T.CART_SET_QUANTITY: cart_row,
        T.CART_REMOVE: cart_row,
        T.CART_VIEW: cart_row,
        T.CATALOG_GET_PRODUCT: _gated(
            calls[T.CATALOG_GET_PRODUCT],
            lambda: _row(
                jnp.where(known, TE.NONE, TE.UNKNOWN_PRODUCT),
                known,
                known,
                jnp.where(known, pid, -1)[None],
                None,
                product_stock_qty(catalog, problem, world, safe(pid)[None]),
                variant_count(catalog, problem, pid)[None],
            ),
            _row(),
        ),
        T.CATALOG_GET_VARIANTS: _gated(
            calls[T.CATALOG_GET_VARIANTS],
            lambda: _variants_row(catalog, problem, world, pid),
            _row(),
        ),
        T.USER_GET_VISIT_HISTORY: _gated(
            calls[T.USER_GET_VISIT_HISTORY], lambda: _history_row(catalog, problem, world), _row()
        ),
        T.DATETIME_NOW: _row(0, 0, problem.today),
        T.CATALOG_SEARCH: _row(search.error[i]),
        **{t: order_row for t in order_tools.ORDER_TOOLS},
        T.POLICY_SEARCH: _gated(
            calls[T.POLICY_SEARCH], lambda: policy_tools.policy_search_row(action, i), _row()
        ),
    }
    row = _select_rows(tool, rows, _row())

    uses = is_add | (tool == T.RETURN_EXCHANGE)
    world_after = record_use(cart_world, pid, uses)
    changed = (is_add | is_setq) & (cart_err == TE.NONE)

    is_ask = tool == T.ASK_USER
    item = target_item(problem, pid)
    scoped = pid != -1
    items = jnp.where(scoped, jnp.arange(C.MAX_ITEMS) == item, problem.item_pid >= 0)
    scratch = scratch.replace(
        ask_any=scratch.ask_any | is_ask,
        ask_slots=scratch.ask_slots | (is_ask & action.slots[i]),
        ask_items=scratch.ask_items | (is_ask & items),
        ask_not_mine=scratch.ask_not_mine | (is_ask & scoped & (item < 0)),
        ask_subgoal=jnp.where(
            is_ask & (action.enum_b[i] >= 0), action.enum_b[i], scratch.ask_subgoal
        ),
        cart_changed=scratch.cart_changed | changed,
    )
    return (world_after, scratch, action), row


def _select_rows(tool: jax.Array, rows: dict, empty: Row) -> Row:
    tools = list(rows)
    return jax.tree_util.tree_map(
        lambda e, *xs: jnp.select([tool == t for t in tools], list(xs), e), empty, *rows.values()
    )


def slot_tools(tools: jax.Array) -> jax.Array:
    """bool [MAX_TOOL_CALLS, N_TOOLS]: which tools are called in each call slot of
    ``tools`` [..., MAX_TOOL_CALLS], over all leading axes (a whole batch's turn)."""
    flat = tools.reshape(-1, C.MAX_TOOL_CALLS)
    return (flat[:, :, None] == jnp.arange(C.N_TOOLS)[None, None, :]).any(0)


def _used_slots(calls: jax.Array) -> jax.Array:
    """int32: one past the last slot with any call (known tool or not) in it."""
    used = ~calls[:, T.NONE] | calls[:, 1:].any(-1)
    return jnp.where(used.any(), C.MAX_TOOL_CALLS - jnp.argmax(used[::-1]), 0).astype(I32)


def run_tools(
    catalog: Catalog,
    problem: Problem,
    world: World,
    action: Action,
    search: SearchResults,
    calls: jax.Array | None = None,
) -> tuple[World, TurnScratch, ToolResults]:
    """Runs the calls in slot order; each sees the effects of those before it.

    Slots run up to the last used one, so short turns do not pay for all MAX_TOOL_CALLS,
    and a slot runs only the tools called in it. A batched driver passes ``calls``
    (``slot_tools`` over the whole batch's live episodes, unbatched under vmap): the loop
    counter then stays a scalar, so the loop neither selects its carry per episode nor
    scatters rows at per-episode indices, and a tool no episode calls in a slot is
    skipped, not computed and discarded. Unused slots and skipped tools would have been
    no-ops or unselected, so every episode's results are the same either way."""
    if calls is None:
        calls = slot_tools(action.tool)
    n_slots = _used_slots(calls)
    blank = jax.tree_util.tree_map(
        lambda x: jnp.zeros((C.MAX_TOOL_CALLS, *x.shape), x.dtype), _row()
    ).replace(
        ids=jnp.full((C.MAX_TOOL_CALLS, SMALL_ROWS), -1, I32),
        var=jnp.full((C.MAX_TOOL_CALLS, SMALL_ROWS), -1, I32),
        var_attr=jnp.full((C.MAX_TOOL_CALLS, V), -1, I32),
        ord_status=jnp.full((C.MAX_TOOL_CALLS, C.MAX_ORDERS), -1, I32),
        ord_date=jnp.full((C.MAX_TOOL_CALLS, C.MAX_ORDERS), -1, I32),
        ord_aux=jnp.full((C.MAX_TOOL_CALLS, C.MAX_ORDERS), -1, I32),
        ord_track=jnp.full((C.MAX_TOOL_CALLS, C.MAX_ORDERS), -1, I32),
    )

    def body(carry):
        i, world, scratch, rows = carry
        (world, scratch, _), row = _run_call(
            catalog, problem, search, (world, scratch, action), i, calls
        )
        rows = jax.tree_util.tree_map(lambda all_, one: all_.at[i].set(one), rows, row)
        return i + 1, world, scratch, rows

    _, world, scratch, rows = jax.lax.while_loop(
        lambda c: c[0] < n_slots, body, (jnp.int32(0), world, empty_scratch(), blank)
    )
    tools = action.tool
    results = _assemble(catalog, tools, rows, search)
    return world, scratch, results


def _assemble(catalog: Catalog, tools: jax.Array, rows: Row, search: SearchResults) -> ToolResults:
    is_search = tools == T.CATALOG_SEARCH
    is_cats = tools == T.CATALOG_LIST_CATEGORIES
    n_cat = min(catalog.n_categories, SMALL_ROWS)
    cat_ids = jnp.pad(jnp.arange(n_cat, dtype=I32), (0, SMALL_ROWS - n_cat), constant_values=-1)
    cat_counts = jnp.pad(jnp.diff(catalog.cat_offsets)[:n_cat].astype(I32), (0, SMALL_ROWS - n_cat))
    n_found = search.count
    return ToolResults(
        tool=tools.astype(I32),
        error=jnp.where(is_search, search.error, rows.error),
        count=jnp.select(
            [is_search, is_cats], [n_found, jnp.full_like(n_found, n_cat)], rows.count
        ),
        total=jnp.select(
            [is_search, is_cats],
            [search.total, jnp.full_like(n_found, catalog.n_categories)],
            rows.total,
        ),
        ids=jnp.where(is_cats[:, None], cat_ids[None], rows.ids),
        var=rows.var,
        qty=jnp.where(is_cats[:, None], cat_counts[None], rows.qty),
        aux=rows.aux,
        var_attr=rows.var_attr,
        var_value=rows.var_value,
        ord_status=rows.ord_status,
        ord_date=rows.ord_date,
        ord_aux=rows.ord_aux,
        ord_track=rows.ord_track,
        info=rows.info,
        search=search,
    )


def mark_seen(
    world: World,
    results: ToolResults,
    n_products: int,
    calls: jax.Array | None = None,
    search_rows: bool = True,
) -> World:
    """Delivered product rows join Seen; only later uses count as grounded (SPEC §7).

    ``calls`` as in ``run_tools``: when no episode of the batch searched this turn, the
    search rows (all -1 then) are not scattered. ``search_rows=False`` (static) leaves the
    search rows to ``mark_searched_batch``."""
    product_rows = jnp.isin(results.tool, jnp.array(PRODUCT_ROW_TOOLS))
    live = (
        product_rows[:, None]
        & (jnp.arange(SMALL_ROWS)[None, :] < results.count[:, None])
        & (results.ids >= 0)
    )
    small = jnp.where(live, results.ids, -1).reshape(-1)
    if calls is None:
        calls = slot_tools(results.tool)

    def with_search(w: World) -> World:
        ids = jnp.concatenate([small, results.search.ids.reshape(-1)])
        return X.insert(w, ids, n_products, seen=True, oos=False)

    def without(w: World) -> World:
        return X.insert(w, small, n_products, seen=True, oos=False)

    if not search_rows:
        return without(world)
    # The search rows belong to search (and host-resolved rerank) slots only.
    searched = calls[:, T.CATALOG_SEARCH].any() | calls[:, T.CATALOG_RERANK].any()
    return jax.lax.cond(searched, with_search, without, world)


def mark_searched_batch(world: World, search: SearchResults, chunk: int) -> World:
    """The search rows of a whole batch join Seen (dense layout: ``seen`` [B, N]).

    Per episode, Seen takes every slot's 200 result ids whether the slot searched or not;
    here only the rows that hold results are visited, ``chunk`` rows at a time, so the
    scatter follows the number of searches, not B x call slots. ``search`` must already be
    empty where nothing was delivered (``rollout.step_batch``'s masked retrieval)."""
    b, n = world.seen.shape
    rows = search.ids.reshape(-1, search.ids.shape[-1])
    has = (rows >= 0).any(-1)
    count = has.sum(dtype=jnp.int32)
    nb = rows.shape[0]
    order = jnp.pad(first_true(has, nb), (0, -(-nb // chunk) * chunk - nb), constant_values=-1)
    calls = nb // b

    def body(i, flat):
        idx = jax.lax.dynamic_slice(order, (i * chunk,), (chunk,))
        valid = idx >= 0
        got = rows[jnp.where(valid, idx, 0)]
        ok = valid[:, None] & (got >= 0) & (got < n)
        dest = jnp.where(ok, (idx // calls)[:, None] * n + got, b * n)
        return flat.at[dest.reshape(-1)].set(True, mode="drop")

    flat = jax.lax.fori_loop(0, (count + chunk - 1) // chunk, body, world.seen.reshape(-1))
    return world.replace(seen=flat.reshape(b, n))
