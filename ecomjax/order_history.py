"""The order history (SPEC §1.8) and return eligibility (SPEC §5.2), shared by the order
tools, the RETURN and STATUS generators and verifiers, and JOURNEY; and the agent-side
reading of a described order line from the order tools' rows (``match_line``).

One history serves a whole episode. The first order-based family of an episode builds it
(``build_history``, H orders from stream ORDERS, folded by (order, line)); a second one
(JOURNEY: RETURN and STATUS target distinct orders) picks its own target among the orders
the first did not take and may adjust that order (RETURN forces DELIVERED and sets the
window-edge date). ``sort_orders`` then renumbers the orders chronologically (order index
= ``ord_{index+1:03d}``) and remaps the targets already fixed.

Return eligibility has one definition (``eligibility``), used by the tools and the
verifier alike: a line is eligible iff its order is DELIVERED, W > 0 and
today - order_date <= W, with W = ``return_window_days`` of the line product's policy
category (SPEC §9.2).
"""

from __future__ import annotations

from enum import IntEnum

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.compact import in_sorted
from ecomjax.sampling import first_valid, in_category, stream, taken_products
from ecomjax.types import Observation, Problem
from ecomjax.world import safe

I32 = jnp.int32
MO, ML = C.MAX_ORDERS, C.MAX_ORDER_LINES


class OrderStatus(IntEnum):
    """Order statuses, in the order of the STATUS answer enum (SPEC §4.6)."""

    CONFIRMED = 0
    SHIPPED = 1
    IN_TRANSIT = 2
    DELIVERED = 3
    CANCELLED = 4


ORDER_STATUS_NAMES = tuple(s.name for s in OrderStatus)
N_STATUSES = len(OrderStatus)


class Ineligible(IntEnum):
    """``ineligible_reason`` of return_check_eligibility (SPEC §5.2); NONE = eligible."""

    NONE = 0
    NOT_DELIVERED = 1
    CANCELLED = 2
    WINDOW_EXPIRED = 3
    NON_RETURNABLE = 4


INELIGIBLE_NAMES = ("", "not_delivered", "cancelled", "window_expired", "non_returnable")


class Method(IntEnum):
    MAIL = 0
    IN_STORE = 1
    PICKUP = 2


METHOD_NAMES = ("mail", "in_store", "pickup")
REASON_NAMES = (
    "defective",
    "wrong_item",
    "not_as_described",
    "changed_mind",
    "too_large",
    "too_small",
    "arrived_late",
    "better_price_found",
)
N_REASONS = len(REASON_NAMES)
N_METHODS = len(METHOD_NAMES)

# Policy topic return_window_days (SPEC §9.2, rules pol_001-010, default 30), indexed like
# constants.POLICY_CATEGORIES.
_WINDOW_BY_POLICY = {
    "electronics": 15,
    "clothing": 30,
    "furniture": 30,
    "groceries": 0,
    "jewelry": 30,
    "books": 14,
    "toys": 30,
    "sports": 30,
    "beauty": 14,
    "automotive": 15,
}
WINDOW_DAYS: tuple[int, ...] = tuple(_WINDOW_BY_POLICY.get(p, 30) for p in C.POLICY_CATEGORIES)
MAIL_FEE_CENTS = 599  # pol_011; pol_014 makes it 0 for premium members; 012/013 are 0

# Status of a non-target order from a uniform u (SPEC §1.8): cut points of the table.
_STATUS_CUTS = (0.10, 0.25, 0.45, 0.90)
# Age in days by status: U{lo..hi}.
_AGE_LO = (0, 1, 2, 3, 0)
_AGE_HI = (3, 7, 14, 90, 90)
_TRACKING_MAX = 10**9  # "TRK" + 9 digits
# Sub-draw tags of one order's key (line keys fold the line index 0..4 instead).
_T_STATUS, _T_AGE, _T_AUX, _T_TRACK, _T_LINES = (0x1000 + i for i in range(5))


# --- eligibility and fees ----------------------------------------------------------------------


def return_window(catalog: Catalog, pid: jax.Array) -> jax.Array:
    """W in days for a product (policy category of its taxonomy leaf); 0 if unknown."""
    pol = catalog.cat_policy[catalog.category[safe(pid)].astype(I32)].astype(I32)
    w = jnp.asarray(WINDOW_DAYS, I32)[jnp.clip(pol, 0, len(WINDOW_DAYS) - 1)]
    return jnp.where(pid >= 0, w, 0)


def return_fee_cents(method: jax.Array, tier: jax.Array) -> jax.Array:
    """Policy topic return_fee: mail 5.99 (0.00 for premium), in store and pickup 0.00."""
    mail = jnp.where(tier == 2, 0, MAIL_FEE_CENTS)
    return jnp.where(method == Method.MAIL, mail, 0).astype(I32)


def line_known(problem: Problem, order: jax.Array, line: jax.Array) -> tuple[jax.Array, ...]:
    """(order known, line known within a known order)."""
    o_ok = (order >= 0) & (order < problem.n_orders)
    n_lines = problem.order_n_lines[jnp.clip(order, 0, MO - 1)]
    return o_ok, o_ok & (line >= 0) & (line < n_lines)


def eligibility(
    catalog: Catalog, problem: Problem, order: jax.Array, line: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(eligible, Ineligible reason, W, days since purchase) of one order line.

    The caller checks that the order and line exist; unknown ones read padding."""
    o = jnp.clip(order, 0, MO - 1)
    j = jnp.clip(line, 0, ML - 1)
    status = problem.order_status[o]
    w = return_window(catalog, problem.line_pid[o, j])
    days = problem.today - problem.order_date[o]
    reason = jnp.select(
        [
            status == OrderStatus.CANCELLED,
            status != OrderStatus.DELIVERED,
            w <= 0,
            days > w,
        ],
        [
            Ineligible.CANCELLED,
            Ineligible.NOT_DELIVERED,
            Ineligible.NON_RETURNABLE,
            Ineligible.WINDOW_EXPIRED,
        ],
        Ineligible.NONE,
    ).astype(I32)
    return reason == Ineligible.NONE, reason, w, days


# --- history generation -------------------------------------------------------------------------


def status_from_u(u: jax.Array) -> jax.Array:
    """The status table of SPEC §1.8: 10/15/20/45/10 %."""
    return (u[..., None] >= jnp.asarray(_STATUS_CUTS, jnp.float32)).sum(-1).astype(I32)


def order_dates(
    key: jax.Array, status: jax.Array, today: jax.Array, age: jax.Array | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(order_date, delivered-or-eta date (-1 none), tracking number (-1 none)) of one order
    of this status. ``age`` overrides the status's age draw (RETURN's window edge)."""
    k_age, k_aux, k_trk = (jax.random.fold_in(key, t) for t in (_T_AGE, _T_AUX, _T_TRACK))
    s = jnp.clip(status, 0, 4)
    lo, hi = jnp.asarray(_AGE_LO, I32)[s], jnp.asarray(_AGE_HI, I32)[s]
    drawn = jax.random.randint(k_age, (), lo, hi + 1)
    age = drawn if age is None else jnp.asarray(age, I32)
    date = today - age
    u_aux = jax.random.randint(k_aux, (), 0, 1 << 20)

    def unif(a, b):  # U{a..b} from one integer draw, so every status reads the same key
        return a + u_aux % (b - a + 1)

    aux = jnp.select(
        [
            s == OrderStatus.DELIVERED,
            s == OrderStatus.SHIPPED,
            s == OrderStatus.IN_TRANSIT,
            s == OrderStatus.CONFIRMED,
        ],
        [
            date + jnp.minimum(age, unif(1, 5)),
            today + unif(2, 10),
            today + unif(1, 7),
            date + unif(5, 14),
        ],
        -1,
    ).astype(I32)
    tracked = (
        (s == OrderStatus.DELIVERED) | (s == OrderStatus.SHIPPED) | (s == OrderStatus.IN_TRANSIT)
    )
    track = jnp.where(tracked, jax.random.randint(k_trk, (), 0, _TRACKING_MAX), -1).astype(I32)
    return date.astype(I32), aux, track


def _line_ok(catalog: Catalog):
    def ok(p):
        denied = catalog.cat_denied[catalog.category[p].astype(I32)]
        return ~denied & (catalog.desc_form[p] > 0)

    return ok


def build_history(key: jax.Array, catalog: Catalog, problem: Problem, h: jax.Array) -> Problem:
    """H orders (unsorted: call ``sort_orders`` once the targets are fixed).

    Statuses by the u table, ages by status, U{1..5} lines each, products drawn without
    replacement across the history from non-denied products with a catalog-unique title
    (so every line has an identifying description in any scope), avoiding products that
    earlier sub-goals use; qty U{1..3}."""
    h = jnp.clip(jnp.asarray(h, I32), 1, MO)
    taken = jnp.sort(taken_products(problem))
    okp = _line_ok(catalog)
    n = catalog.n_products

    def one_order(o):
        ko = stream(key, "ORDERS", o)
        status = status_from_u(jax.random.uniform(jax.random.fold_in(ko, _T_STATUS)))
        date, aux, track = order_dates(ko, status, problem.today)
        n_lines = jax.random.randint(jax.random.fold_in(ko, _T_LINES), (), 1, ML + 1)
        return status, date, aux, track, n_lines

    status, date, aux, track, n_lines = jax.vmap(one_order)(jnp.arange(MO))
    live_order = jnp.arange(MO) < h
    n_lines = jnp.where(live_order, n_lines, 0)

    def draw(picked, idx):
        o, j = idx // ML, idx % ML
        kl = stream(key, "ORDERS", o, j)
        k_p, k_q = jax.random.split(kl)
        live = j < n_lines[o]

        def ok(p):
            return okp(p) & ~(picked == p).any() & ~in_sorted(taken, p, unrolled=True)

        pid = jnp.where(live, first_valid(k_p, 0, n, ok), -1)
        qty = jnp.where(pid >= 0, jax.random.randint(k_q, (), 1, 4), 0)
        return picked.at[idx].set(pid), (pid, qty)

    _, (pid, qty) = jax.lax.scan(draw, jnp.full(MO * ML, -1, I32), jnp.arange(MO * ML))
    pid, qty = pid.reshape(MO, ML), qty.reshape(MO, ML)
    # A line whose draw failed (tiny catalogs only) is dropped; the rest move up.
    order = jnp.argsort(pid < 0, axis=1, stable=True)
    pid = jnp.take_along_axis(pid, order, 1)
    qty = jnp.take_along_axis(qty, order, 1)
    n_lines = (pid >= 0).sum(1).astype(I32)
    return problem.replace(
        n_orders=h,
        order_status=jnp.where(live_order, status, -1),
        order_date=jnp.where(live_order, date, -1),
        order_aux_date=jnp.where(live_order, aux, -1),
        order_tracking=jnp.where(live_order, track, -1),
        order_n_lines=n_lines,
        line_pid=pid,
        line_qty=qty,
    )


def set_order(
    problem: Problem, o: jax.Array, status: jax.Array, date: jax.Array, aux: jax.Array, track
) -> Problem:
    return problem.replace(
        order_status=problem.order_status.at[o].set(status),
        order_date=problem.order_date.at[o].set(date),
        order_aux_date=problem.order_aux_date.at[o].set(aux),
        order_tracking=problem.order_tracking.at[o].set(track),
    )


def sort_orders(problem: Problem) -> Problem:
    """Chronological numbering (SPEC §1.8): orders sorted by order_date, ties by their
    current index; the RETURN and STATUS targets follow their orders."""
    live = jnp.arange(MO) < problem.n_orders
    big = jnp.iinfo(I32).max
    perm = jnp.argsort(jnp.where(live, problem.order_date, big), stable=True)
    inv = jnp.argsort(perm)

    def remap(t):
        return jnp.where(t >= 0, inv[jnp.clip(t, 0, MO - 1)], t).astype(I32)

    # A direct STATUS reference states the order index: it follows its order too.
    ref = problem.slot_value[:, C.Slot.ORDER_REFERENCE]
    direct = problem.has_slot[:, 0, C.Slot.ORDER_REFERENCE] & (ref >= 0)
    ref = jnp.where(direct, remap(ref.astype(I32)).astype(jnp.float32), ref)
    return problem.replace(
        slot_value=problem.slot_value.at[:, C.Slot.ORDER_REFERENCE].set(ref),
        order_status=problem.order_status[perm],
        order_date=problem.order_date[perm],
        order_aux_date=problem.order_aux_date[perm],
        order_tracking=problem.order_tracking[perm],
        order_n_lines=problem.order_n_lines[perm],
        line_pid=problem.line_pid[perm],
        line_qty=problem.line_qty[perm],
        ret_order=remap(problem.ret_order),
        status_order=remap(problem.status_order),
    )


def ensure_history(key: jax.Array, catalog: Catalog, problem: Problem, h: jax.Array) -> Problem:
    """The episode's history: the one an earlier sub-goal built, else a fresh one."""
    fresh = build_history(key, catalog, problem, h)
    built = problem.n_orders > 0
    return jax.tree_util.tree_map(lambda a, b: jnp.where(built, a, b), problem, fresh)


# --- identifying descriptions scoped to the history ----------------------------------------------


def history_products(problem: Problem) -> jax.Array:
    """int32 [MO * ML]: the products on the history's lines, -1 padded."""
    live = (jnp.arange(MO) < problem.n_orders)[:, None] & (
        jnp.arange(ML)[None, :] < problem.order_n_lines[:, None]
    )
    return jnp.where(live, problem.line_pid, -1).reshape(-1)


def history_desc(catalog: Catalog, problem: Problem, pid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(DescForm, key) of ``pid`` scoped to the order history (SPEC §8.0): the first of
    SHORT, MEDIUM, TITLE whose key no other history product shares."""
    prods = history_products(problem)
    keys = catalog.desc_key[safe(prods)]  # [L, 3]
    mine = catalog.desc_key[safe(pid)]  # [3]
    other = (prods >= 0) & (prods != pid)
    clash = (other[:, None] & (keys == mine[None, :])).any(0)  # [3]
    unique = ~clash
    form = jnp.where(unique.any(), jnp.argmax(unique) + 1, C.DescForm.NONE).astype(I32)
    key = jnp.where(form > 0, mine[jnp.maximum(form - 1, 0)], -1).astype(I32)
    return form, key


def match_line(
    catalog: Catalog, obs: Observation, form: jax.Array, key: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(found, order, line, product) of the first order-tool row (order_list or
    order_get_status, without error) whose product the description (form, key) names: the
    agent-side inverse of ``history_desc``, read from an observation. Used by the RETURN
    and STATUS oracle plans and train's policy."""
    res = obs.results
    order_tool = (res.tool == C.Tool.ORDER_LIST) | (res.tool == C.Tool.ORDER_GET_STATUS)
    is_list = order_tool & (res.error == 0)
    rows = jnp.arange(res.ids.shape[1])[None, :] < res.count[:, None]
    f = jnp.clip(form, 1, 3) - 1
    row_key = catalog.desc_key[safe(res.ids)][..., f]  # [B, S]
    hit = is_list[:, None] & rows & (res.ids >= 0) & (row_key == key) & (form > 0)
    flat = hit.reshape(-1)
    k = jnp.argmax(flat)
    found = flat.any()
    return (
        found,
        res.var.reshape(-1)[k],
        res.aux.reshape(-1)[k],
        res.ids.reshape(-1)[k],
    )


def witness_for(key: jax.Array, catalog: Catalog, pid: jax.Array, avoid: jax.Array) -> jax.Array:
    """A uniform in-stock product of ``pid``'s category other than ``pid`` and the
    products in ``avoid`` (sorted ascending, for ``compact.in_sorted``); -1 if none was
    found (then the category has no other usable product)."""
    cat = catalog.category[safe(pid)].astype(I32)
    lo, hi = in_category(catalog, cat)

    def ok(pos):
        q = catalog.cat_order[pos]
        return (catalog.stock[q] > 0) & (q != pid) & ~in_sorted(avoid, q)

    pos = first_valid(key, lo, hi, ok)
    return jnp.where((pos >= 0) & (pid >= 0), catalog.cat_order[jnp.maximum(pos, 0)], -1)
