"""Order and return tools (SPEC §5.2): order_list, order_get_status,
return_check_eligibility, return_initiate, return_exchange, return_cancel.

Action encoding (per call slot i): ``order`` = order index (``ord_{order+1:03d}``; for
return_cancel the return number n of ``ret_{n:03d}``), ``line`` = line index within the
order (``{order_id}_line_{line+1:02d}``), ``enum_a`` = reason_code, ``enum_b`` = method,
``product`` / ``variant`` = the exchange's new product and variant (-1 = null),
``qty`` = order_list ``days``.

Result rows (``rows.Row``):
- order_list, order_get_status: rows are order lines, newest order first (order_list) —
  ``ids`` product, ``var`` order index, ``aux`` line index, ``qty`` line quantity;
  ``count`` = lines, ``total`` = orders shown. Per order index, ``ord_status``
  (OrderStatus; -1 = not shown: the marker of a listed order), ``ord_date``, ``ord_aux``
  (delivered date for DELIVERED, else the eta; -1 none) and ``ord_track`` (9 digits, -1
  none). Dates are day numbers since 2025-01-01 (negative in 2024).
- return_check_eligibility: ``ids[0]`` the line product (for its title), ``info`` =
  [eligible (1/0), ineligible_reason (orders.Ineligible), window_days,
  days_since_purchase, fee mail, fee in_store, fee pickup (dollars), 0]. All 8 reason
  codes and all 3 methods are always allowed.
- return_initiate: ``info`` = [return number n, fee (dollars), reason_code, method,
  label (1 = mail label), 0, 0, 0]; ``ids[0]`` the line product.
- return_exchange: ``info`` = [return number n, exchange number, fee, reason_code, method,
  label, 0, 0]; ``ids`` = [old product, new product], ``var`` = [-1, new variant].
- return_cancel: ``info[0]`` = the return number; status CANCELLED.

Business errors (never hard fails, SPEC §4.2): unknown_order, unknown_line,
unknown_product / unknown_variant / out_of_stock (exchange's new item), ineligible,
already_returned (the line has an active return), unknown_return, already_cancelled, and
too_many_returns once MAX_RETURNS returns exist (our addition, like cart_full).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.compact import first_true
from ecomjax.order_history import Method, eligibility, line_known, return_fee_cents
from ecomjax.tools.rows import Row, _row
from ecomjax.types import SMALL_ROWS, Action, Problem, World
from ecomjax.world import is_known, stock_qty, variant_count

T = C.Tool
TE = C.ToolError
I32 = jnp.int32
F32 = jnp.float32
MO, ML, MR = C.MAX_ORDERS, C.MAX_ORDER_LINES, C.MAX_RETURNS

assert SMALL_ROWS >= MO * ML  # order_list fits every line of the history in one row set

ORDER_TOOLS = (
    T.ORDER_LIST,
    T.ORDER_GET_STATUS,
    T.RETURN_CHECK_ELIGIBILITY,
    T.RETURN_INITIATE,
    T.RETURN_EXCHANGE,
    T.RETURN_CANCEL,
)


# Every (order, line) slot, newest order first and lines in order: the row order of a
# listing. Live slots keep this order, so compaction replaces a per-call argsort.
_O = np.repeat(np.arange(MO - 1, -1, -1, dtype=np.int32), ML)
_J = np.tile(np.arange(ML, dtype=np.int32), MO)


def _line_rows(problem: Problem, shown: jax.Array) -> Row:
    """Rows for the lines of the shown orders, newest order first, lines in order."""
    o, j = jnp.asarray(_O), jnp.asarray(_J)
    live = shown[o] & (j < problem.order_n_lines[o])
    first = first_true(live, MO * ML)
    ok = first >= 0
    o, j = o[jnp.maximum(first, 0)], j[jnp.maximum(first, 0)]
    return _row(
        TE.NONE,
        live.sum(),
        shown.sum(),
        jnp.where(ok, problem.line_pid[o, j], -1),
        jnp.where(ok, o, -1),
        jnp.where(ok, problem.line_qty[o, j], 0),
        jnp.where(ok, j, 0),
        ord_status=jnp.where(shown, problem.order_status, -1),
        ord_date=jnp.where(shown, problem.order_date, -1),
        ord_aux=jnp.where(shown, problem.order_aux_date, -1),
        ord_track=jnp.where(shown, problem.order_tracking, -1),
    )


def _listed(problem: Problem, days: jax.Array) -> jax.Array:
    live = jnp.arange(MO) < problem.n_orders
    return live & (problem.order_date >= problem.today - days)


def _status_shown(problem: Problem, order: jax.Array) -> tuple[jax.Array, jax.Array]:
    known, _ = line_known(problem, order, jnp.int32(0))
    return known & (jnp.arange(MO) == order), known


def active_return_on(world: World, order: jax.Array, line: jax.Array) -> jax.Array:
    live = jnp.arange(MR) < world.n_returns
    return (live & world.ret_active & (world.ret_order == order) & (world.ret_line == line)).any()


def _fees(tier: jax.Array) -> jax.Array:
    return jax.vmap(lambda m: return_fee_cents(m, tier))(jnp.arange(3)).astype(F32) / 100.0


def run_order_call(
    catalog: Catalog, problem: Problem, world: World, action: Action, i: jax.Array
) -> tuple[World, Row]:
    """The world after call slot i (if it is an order tool) and its result row."""
    tool, order, line = action.tool[i], action.order[i], action.line[i]
    reason, method = action.enum_a[i], action.enum_b[i]
    new_pid, new_var = action.product[i], action.variant[i]
    o_ok, l_ok = line_known(problem, order, line)
    o = jnp.clip(order, 0, MO - 1)
    j = jnp.clip(line, 0, ML - 1)
    line_pid = jnp.where(l_ok, problem.line_pid[o, j], -1)
    eligible, why, window, days = eligibility(catalog, problem, order, line)
    fee = return_fee_cents(method, problem.tier).astype(F32) / 100.0
    label = (method == Method.MAIL).astype(F32)
    line_err = jnp.where(o_ok, jnp.where(l_ok, TE.NONE, TE.UNKNOWN_LINE), TE.UNKNOWN_ORDER)

    # return_check_eligibility
    fees = _fees(problem.tier)
    elig_info = jnp.concatenate(
        [jnp.stack([eligible, why, window, days]).astype(F32), fees, jnp.zeros(1, F32)]
    )
    elig_row = _row(line_err, l_ok, l_ok, jnp.where(l_ok, line_pid, -1)[None], info=elig_info)

    # return_initiate / return_exchange: shared checks, then the new item for an exchange.
    is_exch = tool == T.RETURN_EXCHANGE
    known_new = is_known(catalog, new_pid)
    var_ok = (new_var == -1) | (
        (new_var >= 0) & (new_var < variant_count(catalog, problem, new_pid))
    )
    free = stock_qty(catalog, problem, world, new_pid, new_var)
    n = world.n_returns
    ret_err = jnp.select(
        [
            line_err != TE.NONE,
            is_exch & ~known_new,
            is_exch & ~var_ok,
            ~eligible,
            active_return_on(world, order, line),
            is_exch & (free < 1),
            n >= MR,
        ],
        [
            line_err,
            TE.UNKNOWN_PRODUCT,
            TE.UNKNOWN_VARIANT,
            TE.INELIGIBLE,
            TE.ALREADY_RETURNED,
            TE.OUT_OF_STOCK,
            TE.TOO_MANY_RETURNS,
        ],
        TE.NONE,
    ).astype(I32)
    creates = ((tool == T.RETURN_INITIATE) | is_exch) & (ret_err == TE.NONE)
    slot = jnp.minimum(n, MR - 1)
    n_exch = (world.exch_pid >= 0).sum()

    def put(arr, v):
        return jnp.where(creates, arr.at[slot].set(v), arr)

    created = world.replace(
        ret_order=put(world.ret_order, order),
        ret_line=put(world.ret_line, line),
        ret_reason=put(world.ret_reason, reason),
        ret_method=put(world.ret_method, method),
        ret_active=put(world.ret_active, True),
        exch_pid=put(world.exch_pid, jnp.where(is_exch, new_pid, -1)),
        exch_var=put(world.exch_var, jnp.where(is_exch, new_var, -1)),
        n_returns=n + creates.astype(I32),
    )
    ok = ret_err == TE.NONE
    init_info = jnp.stack([n + 1, fee, reason, method, label, 0, 0, 0]).astype(F32)
    exch_info = jnp.stack([n + 1, n_exch + 1, fee, reason, method, label, 0, 0]).astype(F32)
    init_row = _row(
        ret_err,
        ok,
        ok,
        jnp.where(ok, line_pid, -1)[None],
        info=jnp.where(ok, init_info, 0.0),
    )
    exch_row = _row(
        ret_err,
        ok * 2,
        ok * 2,
        jnp.where(ok, jnp.stack([line_pid, new_pid]), -1),
        jnp.where(ok, jnp.stack([-1, new_var]), -1),
        info=jnp.where(ok, exch_info, 0.0),
    )

    # return_cancel: ``order`` carries the return number.
    r = order - 1
    r_known = (r >= 0) & (r < n)
    rc = jnp.clip(r, 0, MR - 1)
    cancel_err = jnp.select(
        [~r_known, ~world.ret_active[rc]], [TE.UNKNOWN_RETURN, TE.ALREADY_CANCELLED], TE.NONE
    ).astype(I32)
    cancelled = world.replace(
        ret_active=jnp.where(
            cancel_err == TE.NONE, world.ret_active.at[rc].set(False), world.ret_active
        )
    )
    cancel_row = _row(cancel_err, info=jnp.where(cancel_err == TE.NONE, order, 0).astype(F32)[None])

    # order_list and order_get_status differ only in which orders they show: one listing.
    status_shown, status_known = _status_shown(problem, order)
    is_status = tool == T.ORDER_GET_STATUS
    listing = _line_rows(
        problem, jnp.where(is_status, status_shown, _listed(problem, action.qty[i]))
    )
    rows = {
        T.ORDER_LIST: listing,
        T.ORDER_GET_STATUS: listing.replace(
            error=jnp.where(status_known, TE.NONE, TE.UNKNOWN_ORDER).astype(I32)
        ),
        T.RETURN_CHECK_ELIGIBILITY: elig_row,
        T.RETURN_INITIATE: init_row,
        T.RETURN_EXCHANGE: exch_row,
        T.RETURN_CANCEL: cancel_row,
    }
    tools = list(rows)
    row = jax.tree_util.tree_map(
        lambda e, *xs: jnp.select([tool == t for t in tools], list(xs), e),
        _row(),
        *rows.values(),
    )
    is_create = (tool == T.RETURN_INITIATE) | is_exch
    out = jax.tree_util.tree_map(
        lambda a, b, w: jnp.where(is_create, a, jnp.where(tool == T.RETURN_CANCEL, b, w)),
        created,
        cancelled,
        world,
    )
    return out, row
