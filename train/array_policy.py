"""A small learned array policy over ``ecomjax`` observations, with factored action heads.

The policy never leaves the device: it reads the array ``Observation`` and writes an
``ecomjax.types.Action``, like the oracle and the random agent. It has two parts.

* A fixed, non-learned **encoder** (``observe`` + ``encode``) folds each observation into a
  small memory (``AgentMemory``): a table of ``rows`` products the agent has retrieved
  (from the visit history, searches, variant lists and the cart), what the customer said
  about the items it wants, and the orders it has listed. Product descriptions the customer
  speaks are matched against retrieved cards exactly as the oracle does (the description
  keys are part of what a card shows), so the network gets "this row is the product the
  customer called item i" as a feature, as an LLM would by reading the card titles. The
  encoder turns the memory into fixed-shape float features (``PolicyInputs``).
* A flax **network** (``PolicyNet``): global MLP + GRU memory across turns, a row encoder,
  and factored heads sampled autoregressively per call slot: tool (or no call) -> pointer
  into the row table -> variant -> quantity; ask_user slots (one primary slot + Bernoulli
  extras, so an ask is never empty); search sort order; and per turn the answer kind
  (none / done / stored) with its fields (ids as Bernoulli row inclusion, order, line,
  status, policy value bin).

The log-probability of a turn is the sum over the factors that were actually sampled and
that change the action (a head whose output the action ignores, e.g. the pointer of a
``cart_view``, is not counted), so the policy gradient is exact over the sampled factors.
``PolicyNet(..., given=samples)`` re-scores stored samples under new parameters.

Validity: call slots beyond ``tool_budget`` are forced to no call, pointer tools are
masked while the table is empty, quantities stay in range and every ask names a slot, so
every action passes ``ecomjax.tools.validate`` (tested). Tool errors (an unknown line, a
wrong variant) stay possible on purpose: they are the agent's business mistakes.
"""

from __future__ import annotations

from dataclasses import dataclass

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.order_history import N_STATUSES, match_line
from ecomjax.types import Action, Observation, empty_action
from ecomjax.world import safe

T = C.Tool
S = C.Slot
I32 = jnp.int32
F32 = jnp.float32
MI, V, MO = C.MAX_ITEMS, C.MAX_VARIANTS, C.MAX_ORDERS
NS = C.N_SLOTS
NEG = -1e9
SMALL = 16  # small result rows read per call (visit history <= 16, variants <= 4)
N_VALUE_BINS = 16
VALUE_BINS = (
    0.0,
    1.0,
    2.0,
    3.0,
    5.0,
    7.0,
    10.0,
    14.0,
    15.0,
    20.0,
    25.0,
    30.0,
    45.0,
    60.0,
    90.0,
    100.0,
)
N_KIND = 3  # answer kind: 0 none, 1 answer and end (done), 2 store (done = false)

# Tool presets. CART needs no free-text search; the full set adds a structured search
# (category filter + the category's embedding as the query) and order listing.
CART_TOOLS: tuple[int, ...] = (
    T.NONE,
    T.ASK_USER,
    T.USER_GET_VISIT_HISTORY,
    T.CATALOG_GET_VARIANTS,
    T.CART_ADD,
    T.CART_SET_QUANTITY,
    T.CART_VIEW,
)
ALL_TOOLS: tuple[int, ...] = (*CART_TOOLS, T.CATALOG_SEARCH, T.ORDER_LIST)
POINTER_TOOLS = (T.CATALOG_GET_VARIANTS, T.CART_ADD, T.CART_SET_QUANTITY, T.CATALOG_GET_PRODUCT)
QTY_TOOLS = (T.CART_ADD, T.CART_SET_QUANTITY)
ROW_TOOLS = (
    T.USER_GET_VISIT_HISTORY,
    T.CATALOG_GET_VARIANTS,
    T.CATALOG_GET_PRODUCT,
    T.CART_ADD,
    T.CART_SET_QUANTITY,
    T.CART_REMOVE,
    T.CART_VIEW,
)
# Per-row memory fields, reset when a new product takes the row.
ROW_FIELDS = (
    "from_hist",
    "from_search",
    "stock",
    "oos",
    "n_var",
    "var_attr",
    "var_value",
    "var_stock",
    "cart_qty",
    "cart_line",
    "cart_var",
    "n_add",
    "n_getvar",
)
CART_RESULT_TOOLS = (T.CART_ADD, T.CART_SET_QUANTITY, T.CART_REMOVE, T.CART_VIEW)
REC_ENVS = (C.Env.PD, C.Env.SUB, C.Env.BUNDLE)


@dataclass(frozen=True)
class PolicyConfig:
    """Static (hashable) policy shape; changing it recompiles."""

    hidden: int = 64
    memory: int = 32  # GRU state carried across turns
    rows: int = 16  # product table size (the pointer's range)
    calls: int = 4  # call slots filled per turn (<= MAX_TOOL_CALLS; masked to the budget)
    max_qty: int = 4  # quantity head: "as stated", or 0..max_qty (0 only to set a line)
    answer_prior: float = 2.0  # initial logit of "no answer" over answering this turn
    search_rows: int = 8  # cards of each search kept in the table
    tools: tuple[int, ...] = CART_TOOLS

    def __post_init__(self) -> None:
        if not 1 <= self.calls <= C.MAX_TOOL_CALLS:
            raise ValueError(f"calls must lie in 1..{C.MAX_TOOL_CALLS}")
        if self.tools[0] != T.NONE or len(set(self.tools)) != len(self.tools):
            raise ValueError("tools must start with Tool.NONE and hold no duplicates")

    @property
    def searches(self) -> bool:
        return T.CATALOG_SEARCH in self.tools


# --- memory ------------------------------------------------------------------------------


@struct.dataclass
class Items:
    """CART items as the customer described them (indexed like the customer's items)."""

    valid: jax.Array  # bool [MI]
    form: jax.Array  # int32 [MI], DescForm
    key: jax.Array  # int32 [MI]
    qty: jax.Array  # int32 [MI], known quantity (1 until told otherwise)
    var_attr: jax.Array  # int32 [MI], -1 none / unknown
    var_value: jax.Array  # float32 [MI]
    dropped: jax.Array  # bool [MI]
    confirmed: jax.Array  # bool [MI]
    issue: jax.Array  # int32 [MI], last CORRECT issue (CartIssue)


@struct.dataclass
class AgentMemory:
    """Everything the encoder keeps between turns (no learned state; see ``PolicyNet``)."""

    pid: jax.Array  # int32 [P], -1 empty
    ptr: jax.Array  # int32, next table slot to overwrite (ring)
    from_hist: jax.Array  # bool [P]
    from_search: jax.Array  # bool [P]
    stock: jax.Array  # int32 [P], last stock_qty seen
    oos: jax.Array  # bool [P], a shock event named it
    n_var: jax.Array  # int32 [P], -1 unknown
    var_attr: jax.Array  # int32 [P, V]
    var_value: jax.Array  # float32 [P, V]
    var_stock: jax.Array  # int32 [P, V]
    cart_qty: jax.Array  # int32 [P], units in the cart (last cart result)
    cart_line: jax.Array  # int32 [P], line number of its first line, -1 none
    cart_var: jax.Array  # int32 [P], variant of that line
    n_add: jax.Array  # int32 [P], cart_add calls on the row
    n_getvar: jax.Array  # int32 [P], get_variants calls on the row
    items: Items
    cat: jax.Array  # int32, stated category, -1 unknown
    ref_order: jax.Array  # int32, order the customer referred to, -1 unknown
    ref_line: jax.Array  # int32, its line (by description), -1 unknown
    ref_form: jax.Array  # int32
    ref_key: jax.Array  # int32
    ord_listed: jax.Array  # bool [MO]
    ord_status: jax.Array  # int32 [MO]
    tool_counts: jax.Array  # int32 [N_TOOLS], calls made so far
    cart_seen: jax.Array  # bool, a cart result came back at least once
    last_error: jax.Array  # bool, a call of the last turn failed


def init_memory(cfg: PolicyConfig) -> AgentMemory:
    p = cfg.rows
    return AgentMemory(
        pid=jnp.full(p, -1, I32),
        ptr=I32(0),
        from_hist=jnp.zeros(p, bool),
        from_search=jnp.zeros(p, bool),
        stock=jnp.zeros(p, I32),
        oos=jnp.zeros(p, bool),
        n_var=jnp.full(p, -1, I32),
        var_attr=jnp.full((p, V), -1, I32),
        var_value=jnp.zeros((p, V), F32),
        var_stock=jnp.zeros((p, V), I32),
        cart_qty=jnp.zeros(p, I32),
        cart_line=jnp.full(p, -1, I32),
        cart_var=jnp.full(p, -1, I32),
        n_add=jnp.zeros(p, I32),
        n_getvar=jnp.zeros(p, I32),
        items=Items(
            valid=jnp.zeros(MI, bool),
            form=jnp.zeros(MI, I32),
            key=jnp.full(MI, -1, I32),
            qty=jnp.ones(MI, I32),
            var_attr=jnp.full(MI, -1, I32),
            var_value=jnp.zeros(MI, F32),
            dropped=jnp.zeros(MI, bool),
            confirmed=jnp.zeros(MI, bool),
            issue=jnp.zeros(MI, I32),
        ),
        cat=I32(-1),
        ref_order=I32(-1),
        ref_line=I32(-1),
        ref_form=I32(0),
        ref_key=I32(-1),
        ord_listed=jnp.zeros(MO, bool),
        ord_status=jnp.full(MO, -1, I32),
        tool_counts=jnp.zeros(C.N_TOOLS, I32),
        cart_seen=jnp.bool_(False),
        last_error=jnp.bool_(False),
    )


def _listen(mem: AgentMemory, obs: Observation) -> AgentMemory:
    """Folds the customer's reply in: items, quantities, variants, drops, references."""
    r, it = obs.reply, mem.items
    said = r.item_valid
    var_said = said & (r.item_var_attr >= 0)
    items = it.replace(
        valid=it.valid | said,
        form=jnp.where(said, r.item_desc_form, it.form),
        key=jnp.where(said, r.item_desc_key, it.key),
        qty=jnp.where(said & (r.item_qty >= 0), r.item_qty, it.qty),
        var_attr=jnp.where(var_said, r.item_var_attr, it.var_attr),
        var_value=jnp.where(var_said, r.item_var_value, it.var_value),
        dropped=it.dropped | (r.item_update & (r.item_qty == 0)),
        confirmed=it.confirmed | r.item_confirm,
        issue=jnp.where(said | (r.item_issue > 0), r.item_issue, 0),
    )
    sub = jnp.clip(r.active, 0, C.MAX_SUBGOALS - 1)
    cat_said = r.slot_stated[sub, S.CATEGORY]
    ref_said = r.slot_stated[sub, S.ORDER_REFERENCE]
    ref_desc = r.ref_form[sub] > 0
    return mem.replace(
        items=items,
        cat=jnp.where(cat_said, r.slot_value[sub, S.CATEGORY].astype(I32), mem.cat),
        ref_order=jnp.where(
            ref_said & (r.slot_value[sub, S.ORDER_REFERENCE] >= 0),
            r.slot_value[sub, S.ORDER_REFERENCE].astype(I32),
            mem.ref_order,
        ),
        ref_form=jnp.where(ref_desc, r.ref_form[sub], mem.ref_form),
        ref_key=jnp.where(ref_desc, r.ref_key[sub], mem.ref_key),
    )


def _read_results(mem: AgentMemory, obs: Observation, cfg: PolicyConfig) -> AgentMemory:
    """Adds newly retrieved products to the table and refreshes what rows know."""
    res = obs.results
    k, p = cfg.calls, cfg.rows
    tool, ok = res.tool[:k], res.error[:k] == 0
    rows_ok = jnp.arange(SMALL)[None, :] < res.count[:k, None]
    small_ok = (jnp.isin(tool, jnp.array(ROW_TOOLS)) & ok)[:, None] & rows_ok
    small_ids = jnp.where(small_ok & (res.ids[:k, :SMALL] >= 0), res.ids[:k, :SMALL], -1)
    is_hist = jnp.broadcast_to((tool == T.USER_GET_VISIT_HISTORY)[:, None], small_ids.shape)
    cand = [small_ids.reshape(-1)]
    cand_stock = [res.qty[:k, :SMALL].reshape(-1)]
    cand_hist = [is_hist.reshape(-1)]
    cand_search = [jnp.zeros(k * SMALL, bool)]
    if cfg.searches:
        n = cfg.search_rows
        s_ok = (tool == T.CATALOG_SEARCH) & ok
        s_ids = jnp.where(s_ok[:, None], res.search.ids[:k, :n], -1)
        cand += [s_ids.reshape(-1)]
        cand_stock += [res.search.stock[:k, :n].reshape(-1)]
        cand_hist += [jnp.zeros(k * n, bool)]
        cand_search += [jnp.ones(k * n, bool)]
    ids = jnp.concatenate(cand)
    stock = jnp.concatenate(cand_stock)
    hist = jnp.concatenate(cand_hist)
    srch = jnp.concatenate(cand_search)
    valid = ids >= 0
    m = ids.shape[0]
    # Insert unseen ids (first occurrence only) into the ring table.
    earlier = (ids[:, None] == ids[None, :]) & (jnp.arange(m)[None, :] < jnp.arange(m)[:, None])
    first = valid & ~(earlier & valid[None, :]).any(-1)
    new = first & ~(ids[:, None] == mem.pid[None, :]).any(-1)
    pos_in_new = jnp.cumsum(new) - 1
    n_new = jnp.minimum(new.sum(), p)
    dest = jnp.where(new & (pos_in_new < p), (mem.ptr + pos_in_new) % p, p)
    pid = mem.pid.at[dest].set(ids, mode="drop")
    fresh = jnp.zeros(p, bool).at[dest].set(True, mode="drop")
    blank = init_memory(cfg)
    reset = {
        f: jnp.where(
            fresh.reshape((p,) + (1,) * (getattr(mem, f).ndim - 1)),
            getattr(blank, f),
            getattr(mem, f),
        )
        for f in ROW_FIELDS
    }
    mem = mem.replace(pid=pid, ptr=(mem.ptr + n_new) % p, **reset)
    hit = (pid[:, None] == ids[None, :]) & valid[None, :]  # [P, M]
    any_hit = hit.any(-1)
    last = m - 1 - jnp.argmax(hit[:, ::-1], -1)
    mem = mem.replace(
        stock=jnp.where(any_hit, stock[last], mem.stock),
        from_hist=mem.from_hist | (hit & hist[None, :]).any(-1),
        from_search=mem.from_search | (hit & srch[None, :]).any(-1),
    )
    # Variant lists.
    is_var = (tool == T.CATALOG_GET_VARIANTS) & ok
    vhit = is_var[None, :] & (pid[:, None] == res.ids[None, :k, 0]) & (pid[:, None] >= 0)
    vany = vhit.any(-1)
    vs = jnp.argmax(vhit, -1)
    mem = mem.replace(
        n_var=jnp.where(vany, res.count[:k][vs], mem.n_var),
        var_attr=jnp.where(vany[:, None], res.var_attr[:k][vs], mem.var_attr),
        var_value=jnp.where(vany[:, None], res.var_value[:k][vs], mem.var_value),
        var_stock=jnp.where(vany[:, None], res.qty[:k, :V][vs], mem.var_stock),
    )
    # The cart, from the last call that returned it (a full cart view).
    is_cart = jnp.isin(tool, jnp.array(CART_RESULT_TOOLS))
    got_cart = is_cart.any()
    cs = k - 1 - jnp.argmax(is_cart[::-1])
    lines = jnp.arange(res.ids.shape[1]) < res.count[cs]
    lid = jnp.where(lines, res.ids[cs], -1)
    on = (pid[:, None] == lid[None, :]) & (pid[:, None] >= 0)  # [P, lines]
    first_line = jnp.argmax(on, -1)
    mem = mem.replace(
        cart_qty=jnp.where(got_cart, (on * res.qty[cs][None, :]).sum(-1), mem.cart_qty),
        cart_line=jnp.where(
            got_cart, jnp.where(on.any(-1), res.aux[cs][first_line], -1), mem.cart_line
        ),
        cart_var=jnp.where(
            got_cart, jnp.where(on.any(-1), res.var[cs][first_line], -1), mem.cart_var
        ),
        cart_seen=mem.cart_seen | got_cart,
        last_error=((res.tool[:k] != T.NONE) & ~ok).any(),
        oos=mem.oos | (pid[:, None] == obs.events[None, :]).any(-1) & (pid >= 0),
    )
    return mem


def _read_orders(mem: AgentMemory, obs: Observation, catalog: Catalog) -> AgentMemory:
    res = obs.results
    is_list = (res.tool == T.ORDER_LIST) & (res.error == 0)
    st = jnp.where(is_list[:, None], res.ord_status, -1).max(0)
    found, order, line, _ = match_line(catalog, obs, mem.ref_form, mem.ref_key)
    return mem.replace(
        ord_listed=mem.ord_listed | (st >= 0),
        ord_status=jnp.where(st >= 0, st, mem.ord_status),
        ref_order=jnp.where(found & (mem.ref_order < 0), order, mem.ref_order),
        ref_line=jnp.where(found, line, mem.ref_line),
    )


def observe(mem: AgentMemory, obs: Observation, catalog: Catalog, cfg: PolicyConfig):
    """One observation folded into the memory (deterministic, no parameters)."""
    mem = _listen(mem, obs)
    mem = _read_results(mem, obs, cfg)
    return _read_orders(mem, obs, catalog)


# --- features ----------------------------------------------------------------------------


@struct.dataclass
class PolicyInputs:
    """Fixed-shape network inputs of one turn; stored per turn to re-score samples."""

    glob: jax.Array  # float32 [G]
    rows: jax.Array  # float32 [P, R]
    row_valid: jax.Array  # bool [P]
    row_in_cart: jax.Array  # bool [P]
    var: jax.Array  # float32 [P, V, 4]
    var_valid: jax.Array  # bool [P, V], variants listed by get_variants
    orders: jax.Array  # float32 [MO, 8]
    budget: jax.Array  # int32, call slots allowed this turn
    env: jax.Array  # int32, disclosed env (-1 hidden)
    force_done: jax.Array  # bool: the driver's turn cap, the answer head is forced to done


def _onehot(x: jax.Array, n: int) -> jax.Array:
    return jax.nn.one_hot(x, n, dtype=F32)


def _matches(mem: AgentMemory, catalog: Catalog) -> tuple[jax.Array, jax.Array]:
    """(row x item description match [P, MI], row x variant match [P, V])."""
    it = mem.items
    form = jnp.clip(it.form, 1, 3) - 1
    keys = catalog.desc_key[safe(mem.pid)]  # [P, 3]
    row_key = jnp.take_along_axis(keys[:, None, :], form[None, :, None], 2)[..., 0]  # [P, MI]
    match = (row_key == it.key[None, :]) & it.valid[None, :] & (it.form > 0)[None, :]
    match = match & (mem.pid >= 0)[:, None]
    item = jnp.argmax(match, -1)
    want_attr = jnp.where(match.any(-1), it.var_attr[item], -1)
    want_val = it.var_value[item]
    var_ok = (jnp.arange(V)[None, :] < mem.n_var[:, None]) & (want_attr >= 0)[:, None]
    vmatch = (
        var_ok
        & (mem.var_attr == want_attr[:, None])
        & (jnp.abs(mem.var_value - want_val[:, None]) < 1e-6)
    )
    return match, vmatch


def encode(
    mem: AgentMemory, obs: Observation, catalog: Catalog, cfg: PolicyConfig, force_done
) -> PolicyInputs:
    """Memory + observation counters -> fixed-shape float features."""
    it = mem.items
    match, vmatch = _matches(mem, catalog)
    matched = match.any(-1)
    item = jnp.argmax(match, -1)
    need = jnp.where(matched, it.qty[item], 0)
    needs_var = matched & (it.var_attr[item] >= 0)
    right_var = vmatch.any(-1)
    var_index = jnp.argmax(vmatch, -1)
    live_item = matched & ~it.dropped[item]
    in_cart = mem.cart_qty > 0
    cart_ok = jnp.where(needs_var, right_var & (mem.cart_var == var_index), True)
    done_row = live_item & (mem.cart_qty == need) & cart_ok
    valid = mem.pid >= 0
    clip = lambda x, hi: jnp.clip(x, 0, hi).astype(F32) / hi
    rows = jnp.concatenate(
        [
            jnp.stack(
                [
                    valid,
                    mem.from_hist,
                    mem.from_search,
                    mem.stock > 0,
                    mem.oos,
                    mem.n_var >= 0,
                    in_cart,
                    (mem.cart_qty == need) & matched,
                    (mem.cart_qty < need) & matched,
                    (mem.cart_qty > need) | (in_cart & ~live_item),
                    matched,
                    needs_var,
                    right_var,
                    needs_var & ~right_var & (mem.n_var >= 0),
                    it.dropped[item] & matched,
                    it.confirmed[item] & matched,
                    done_row,
                    mem.cart_var >= 0,
                    cart_ok & in_cart,
                ],
                -1,
            ).astype(F32),
            clip(mem.cart_qty, 4)[:, None],
            clip(mem.n_add, 2)[:, None],
            clip(mem.n_getvar, 2)[:, None],
            match.astype(F32),
            _onehot(jnp.where(matched, need, 0), cfg.max_qty + 1),
            _onehot(jnp.where(matched, it.issue[item], 0), len(C.CartIssue)),
        ],
        -1,
    )
    rows = rows * valid[:, None]
    var_known = jnp.arange(V)[None, :] < mem.n_var[:, None]
    var = jnp.stack(
        [var_known, vmatch, mem.var_stock > 0, jnp.broadcast_to(needs_var[:, None], vmatch.shape)],
        -1,
    ).astype(F32)
    var_valid = var_known  # only variants the agent has listed (none until then)
    is_ref = jnp.arange(MO) == mem.ref_order
    orders = jnp.concatenate(
        [
            jnp.stack([mem.ord_listed, is_ref], -1).astype(F32),
            _onehot(mem.ord_status, N_STATUSES),
            (jnp.arange(MO, dtype=F32) / MO)[:, None],
        ],
        -1,
    )
    r = obs.reply
    live_items = it.valid & ~it.dropped
    n_items = jnp.maximum(live_items.sum(), 1).astype(F32)
    row_item = jax.nn.one_hot(item, MI, dtype=bool) & match
    resolved = (row_item & valid[:, None]).any(0) & live_items
    satisfied = (row_item & done_row[:, None]).any(0) & live_items
    want_var = live_items & (it.var_attr >= 0)
    var_resolved = (row_item & right_var[:, None]).any(0) & want_var
    counts = jnp.clip(mem.tool_counts[jnp.array(cfg.tools)], 0, 3).astype(F32) / 3
    budget = jnp.minimum(obs.tool_budget, cfg.calls)
    glob = jnp.concatenate(
        [
            _onehot(obs.env + 1, len(C.Env) + 1),
            jnp.stack(
                [
                    jnp.clip(obs.turn, 0, 14) / 14.0,
                    r.user_caused,
                    r.cart_confirm,
                    it.valid.any(),
                    live_items.sum() / MI,
                    resolved.sum() / n_items,
                    satisfied.sum() / n_items,
                    (satisfied == live_items).all() & live_items.any(),
                    (want_var & ~var_resolved).sum() / n_items,
                    want_var.any(),
                    ((it.qty > 1) & live_items).any(),
                    it.dropped.any(),
                    mem.cart_seen,
                    (in_cart & ~live_item & valid).any(),
                    valid.any(),
                    valid.sum() / cfg.rows,
                    mem.cat >= 0,
                    mem.ref_order >= 0,
                    mem.ref_line >= 0,
                    mem.ord_listed.any(),
                    obs.n_events > 0,
                    mem.last_error,
                    force_done,
                ]
            ).astype(F32),
            _onehot(jnp.clip(obs.turns_left, 0, 6), 7),
            _onehot(jnp.clip(budget, 0, cfg.calls), cfg.calls + 1),
            r.acts.astype(F32),
            counts,
            _onehot(jnp.clip(mem.ref_line, -1, C.MAX_ORDER_LINES - 1) + 1, C.MAX_ORDER_LINES + 1),
        ]
    )
    return PolicyInputs(
        glob=glob,
        rows=rows,
        row_valid=valid,
        row_in_cart=valid & (mem.cart_line > 0),
        var=var,
        var_valid=var_valid,
        orders=orders,
        budget=budget.astype(I32),
        env=obs.env.astype(I32),
        force_done=jnp.asarray(force_done, bool),
    )


# --- network -----------------------------------------------------------------------------


@struct.dataclass
class Samples:
    """The sampled factors of one turn (indices into each head's choices)."""

    tool: jax.Array  # int32 [K], index into cfg.tools
    ptr: jax.Array  # int32 [K], table row
    var: jax.Array  # int32 [K], 0 = no variant, 1 + j = variant j
    qty: jax.Array  # int32 [K], 0 = as stated, 1 + q = quantity q
    ask: jax.Array  # int32 [K], primary ask slot
    ask_extra: jax.Array  # bool [K, NS]
    sort: jax.Array  # int32 [K], SortBy
    kind: jax.Array  # int32, 0 none / 1 done / 2 store
    order: jax.Array  # int32
    status: jax.Array  # int32
    line: jax.Array  # int32
    rec: jax.Array  # bool [P]
    value: jax.Array  # int32, VALUE_BINS index


HEADS = ("tool", "pointer", "variant", "qty", "ask", "sort", "answer", "fields")  # logp order


def _masked(logits: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.where(mask, logits, NEG)


def _cat(key, logits, mask, given):
    """Sample (or take ``given``) from a masked categorical: (choice, log-prob, entropy)."""
    logits = _masked(logits, mask)
    logp_all = jax.nn.log_softmax(logits)
    x = jax.random.categorical(key, logits) if given is None else given
    lp = jnp.take_along_axis(logp_all, x[..., None], -1)[..., 0]
    ent = -(jnp.where(mask, jnp.exp(logp_all) * logp_all, 0.0)).sum(-1)
    return x.astype(I32), lp, ent


def _bern(key, logits, given):
    """Independent Bernoullis: (draws, log-probs, entropies), elementwise."""
    x = jax.random.bernoulli(key, jax.nn.sigmoid(logits)) if given is None else given
    lp = jnp.where(x, jax.nn.log_sigmoid(logits), jax.nn.log_sigmoid(-logits))
    pr = jax.nn.sigmoid(logits)
    ent = -(pr * jax.nn.log_sigmoid(logits) + (1 - pr) * jax.nn.log_sigmoid(-logits))
    return x, lp, ent


CALL_FIELDS = ("tool", "ptr", "var", "qty", "ask", "ask_extra", "sort")
CALL_HEADS = ("tool", "pointer", "variant", "qty", "ask", "sort")


class CallSlot(nn.Module):
    """One call slot's heads: tool -> pointer -> variant, quantity; ask slots; sort order.

    Scanned over the K slots with shared weights (one trace, whatever K); the carry holds
    the rows and tools already picked this turn, so the slots are autoregressive."""

    cfg: PolicyConfig
    sampling: bool

    @nn.compact
    def __call__(self, carry, xs):
        cfg = self.cfg
        hd, p, k_calls = cfg.hidden, cfg.rows, cfg.calls
        tools = jnp.array(cfg.tools, I32)
        n_tools = len(cfg.tools)
        picked, chosen, torso, e, ek, var_in, var_valid, row_valid, in_cart, budget = carry
        k, keys, given = xs
        gv = (lambda f: None) if self.sampling else (lambda f: getattr(given, f))
        z = nn.relu(
            nn.Dense(hd, name="ctx")(
                jnp.concatenate([torso, _onehot(k, k_calls), chosen / k_calls])
            )
        )
        needs_ptr = jnp.isin(tools, jnp.array(POINTER_TOOLS))
        tool_ok = (~needs_ptr | row_valid.any()) & ((tools != T.CART_SET_QUANTITY) | in_cart.any())
        allowed = jnp.where(k < budget, tool_ok, jnp.arange(n_tools) == 0)
        t_idx, t_lp, t_ent = _cat(keys[0], nn.Dense(n_tools, name="tool")(z), allowed, gv("tool"))
        tool = tools[t_idx]
        real = allowed.sum() > 1
        # Pointer into the table; knows the tool and the rows picked by earlier slots.
        q = nn.Dense(hd, name="ptr_q")(jnp.concatenate([z, _onehot(t_idx, n_tools)]))
        pick_w = self.param("pick_w", nn.initializers.zeros, ())
        plog = nn.Dense(1, name="ptr_out")(nn.relu(ek + q))[:, 0] + pick_w * picked
        pmask = jnp.where(tool == T.CART_SET_QUANTITY, in_cart, row_valid)
        pmask = jnp.where(pmask.any(), pmask, jnp.arange(p) == 0)
        r_idx, r_lp, r_ent = _cat(keys[1], plog, pmask, gv("ptr"))
        use_ptr = jnp.isin(tool, jnp.array(POINTER_TOOLS))
        z2 = nn.relu(
            nn.Dense(hd, name="sub_ctx")(jnp.concatenate([z, e[r_idx], _onehot(t_idx, n_tools)]))
        )
        # Variant of the pointed row: none, or one of its variants.
        vl = nn.Dense(1, name="var_out")(
            nn.relu(nn.Dense(hd, name="var_k")(var_in[r_idx]) + nn.Dense(hd, name="var_q")(z2))
        )[:, 0]
        vlog = jnp.concatenate([nn.Dense(1, name="var_none")(z2), vl])
        vmask = jnp.concatenate([jnp.ones(1, bool), var_valid[r_idx]])
        v_idx, v_lp, v_ent = _cat(keys[2], vlog, vmask, gv("var"))
        use_var = tool == T.CART_ADD
        # Quantity: 0 = "as the customer stated" for the pointed row's item, 1 + q = q.
        n_q = cfg.max_qty + 2
        qmask = (jnp.arange(n_q) != 1) | (tool == T.CART_SET_QUANTITY)
        q_idx, q_lp, q_ent = _cat(keys[3], nn.Dense(n_q, name="qty")(z2), qmask, gv("qty"))
        use_qty = jnp.isin(tool, jnp.array(QTY_TOOLS))
        # ask_user: one primary slot (so an ask is never empty) plus Bernoulli extras.
        a_idx, a_lp, a_ent = _cat(
            keys[4], nn.Dense(NS, name="ask")(z), jnp.ones(NS, bool), gv("ask")
        )
        x_draw, x_lp, x_ent = _bern(keys[5], nn.Dense(NS, name="ask_extra")(z), gv("ask_extra"))
        others = jnp.arange(NS) != a_idx
        x_draw = x_draw & others
        use_ask = tool == T.ASK_USER
        n_sort = len(C.SortBy)
        s_idx, s_lp, s_ent = _cat(
            keys[6], nn.Dense(n_sort, name="sort")(z), jnp.ones(n_sort, bool), gv("sort")
        )
        use_sort = tool == T.CATALOG_SEARCH
        lp = jnp.stack(
            [
                jnp.where(real, t_lp, 0.0),
                jnp.where(use_ptr, r_lp, 0.0),
                jnp.where(use_var, v_lp, 0.0),
                jnp.where(use_qty, q_lp, 0.0),
                jnp.where(use_ask, a_lp + (x_lp * others).sum(), 0.0),
                jnp.where(use_sort, s_lp, 0.0),
            ]
        )
        ent = (
            jnp.where(real, t_ent, 0.0)
            + jnp.where(use_ptr, r_ent, 0.0)
            + jnp.where(use_var, v_ent, 0.0)
            + jnp.where(use_qty, q_ent, 0.0)
            # The extras' entropy enters as a mean: summed over 47 Bernoullis it would
            # outweigh every other head and the bonus would reward random asks.
            + jnp.where(use_ask, a_ent + (x_ent * others).sum() / (NS - 1), 0.0)
            + jnp.where(use_sort, s_ent, 0.0)
        )
        picked = picked + (use_ptr & (jnp.arange(p) == r_idx))
        chosen = chosen + _onehot(t_idx, n_tools)
        carry = (picked, chosen, torso, e, ek, var_in, var_valid, row_valid, in_cart, budget)
        out = dict(
            zip(CALL_FIELDS, (t_idx, r_idx, v_idx, q_idx, a_idx, x_draw, s_idx), strict=True)
        )
        return carry, (out, lp, ent)


class PolicyNet(nn.Module):
    """Factored autoregressive heads over ``PolicyInputs`` for one episode (vmap outside).

    ``__call__(inp, h, key, given)`` returns ``(h', samples, logp [len(HEADS)], entropy)``;
    with ``given`` it re-scores those samples (``key`` is then unused). ``entropy`` (for the
    loss's bonus) sums the used heads' entropies; Bernoulli groups enter as means."""

    cfg: PolicyConfig

    @nn.compact
    def __call__(self, inp: PolicyInputs, h, key, given: Samples | None = None):
        cfg = self.cfg
        hd, k_calls, p = cfg.hidden, cfg.calls, cfg.rows
        sampling = given is None
        keys = jax.random.split(key if sampling else jax.random.key(0), 8 * k_calls + 8)
        g = nn.relu(nn.Dense(hd, name="glob0")(inp.glob))
        h, _ = nn.GRUCell(cfg.memory, name="gru")(h, g)
        e = nn.relu(nn.Dense(hd, name="row0")(inp.rows))
        e = nn.relu(nn.Dense(hd, name="row1")(e))
        rv = inp.row_valid[:, None].astype(F32)
        pooled = (e * rv).sum(0) / jnp.maximum(rv.sum(), 1.0)
        eo = nn.relu(nn.Dense(hd // 2, name="order0")(inp.orders))
        torso = nn.relu(nn.Dense(hd, name="torso")(jnp.concatenate([g, h, pooled, eo.mean(0)])))
        ek = nn.Dense(hd, name="ptr_k")(e)

        slots = nn.scan(
            CallSlot,
            variable_broadcast="params",
            split_rngs={"params": False},
            length=k_calls,
        )(cfg, sampling, name="call")
        n_tools = len(cfg.tools)
        carry = (
            jnp.zeros(p, F32),
            jnp.zeros(n_tools, F32),
            torso,
            e,
            ek,
            inp.var,
            inp.var_valid,
            inp.row_valid,
            inp.row_in_cart,
            inp.budget,
        )
        if sampling:
            given_calls = _dummy_calls(cfg)
        else:
            given_calls = Samples(
                **{f: getattr(given, f) for f in CALL_FIELDS},
                **{f: None for f in ANSWER_FIELDS},
            )
        xs = (jnp.arange(k_calls), keys[: 8 * k_calls].reshape(k_calls, 8), given_calls)
        _, (out, call_lp, call_ent) = slots(carry, xs)
        lp = dict(zip(CALL_HEADS, call_lp.sum(0), strict=True))
        ent = call_ent.sum()

        # The answer: kind, then the fields its env's schema scores.
        ka = keys[8 * k_calls :]
        gv = (lambda f: None) if sampling else (lambda f: getattr(given, f))
        kmask = jnp.where(inp.force_done, jnp.arange(N_KIND) == 1, jnp.ones(N_KIND, bool))
        prior = jnp.array([cfg.answer_prior, 0.0, 0.0], F32)
        kind_head = nn.Dense(N_KIND, name="kind", bias_init=lambda *_: prior)
        kind, kind_lp, kind_ent = _cat(ka[0], kind_head(torso), kmask, gv("kind"))
        lp["answer"] = jnp.where(inp.force_done, 0.0, kind_lp)
        ent += jnp.where(inp.force_done, 0.0, kind_ent)
        oq = nn.Dense(hd // 2, name="order_q")(torso)
        olog = nn.Dense(1, name="order_out")(nn.relu(eo + oq))[:, 0]
        listed = inp.orders[:, 0] > 0
        omask = jnp.where(listed.any(), listed, True)
        o_idx, o_lp, o_ent = _cat(ka[1], olog, omask, gv("order"))
        st_in = jnp.concatenate([torso, eo[o_idx], inp.orders[o_idx]])
        st, st_lp, st_ent = _cat(
            ka[2],
            nn.Dense(N_STATUSES, name="status")(st_in),
            jnp.ones(N_STATUSES, bool),
            gv("status"),
        )
        ln, ln_lp, ln_ent = _cat(
            ka[3],
            nn.Dense(C.MAX_ORDER_LINES, name="line")(torso),
            jnp.ones(C.MAX_ORDER_LINES, bool),
            gv("line"),
        )
        rec_in = jnp.concatenate([e, jnp.broadcast_to(torso, e.shape)], -1)
        rec, rec_lp, rec_ent = _bern(ka[4], nn.Dense(1, name="rec")(rec_in)[:, 0], gv("rec"))
        rec = rec & inp.row_valid
        val, val_lp, val_ent = _cat(
            ka[5],
            nn.Dense(N_VALUE_BINS, name="value")(torso),
            jnp.ones(N_VALUE_BINS, bool),
            gv("value"),
        )
        answering = kind > 0
        env = inp.env
        use = {
            "rec": answering & jnp.isin(env, jnp.array(REC_ENVS)),
            "order": answering & ((env == C.Env.RETURN) | (env == C.Env.STATUS)),
            "line": answering & (env == C.Env.RETURN),
            "status": answering & (env == C.Env.STATUS),
            "value": answering & (env == C.Env.POLICY),
        }
        rvalid = inp.row_valid
        parts = {
            "rec": (
                (rec_lp * rvalid).sum(),
                (rec_ent * rvalid).sum() / jnp.maximum(rvalid.sum(), 1),
            ),
            "order": (o_lp, o_ent),
            "line": (ln_lp, ln_ent),
            "status": (st_lp, st_ent),
            "value": (val_lp, val_ent),
        }
        lp["fields"] = sum(jnp.where(use[f], parts[f][0], 0.0) for f in parts)
        ent += sum(jnp.where(use[f], parts[f][1], 0.0) for f in parts)
        samples = Samples(**out, kind=kind, order=o_idx, status=st, line=ln, rec=rec, value=val)
        return h, samples, jnp.stack([lp[name] for name in HEADS]), ent


ANSWER_FIELDS = ("kind", "order", "status", "line", "rec", "value")


def _dummy_calls(cfg: PolicyConfig) -> Samples:
    """Placeholder call-slot samples for the sampling pass (scan needs a fixed structure)."""
    k = cfg.calls
    z = jnp.zeros(k, I32)
    return Samples(
        tool=z,
        ptr=z,
        var=z,
        qty=z,
        ask=z,
        ask_extra=jnp.zeros((k, NS), bool),
        sort=z,
        **{f: None for f in ANSWER_FIELDS},
    )


# --- samples -> Action ---------------------------------------------------------------------


def to_action(
    samples: Samples, mem: AgentMemory, inp: PolicyInputs, catalog: Catalog, cfg: PolicyConfig
) -> Action:
    """The Action the sampled factors describe (deterministic)."""
    b = C.MAX_TOOL_CALLS
    k = cfg.calls
    tool = jnp.array(cfg.tools, I32)[samples.tool]
    # Used call slots first: the validator counts used slots.
    used = tool != T.NONE
    pos = jnp.cumsum(used) - 1
    dest = jnp.where(used, pos, b)

    def place(x, fill):
        return jnp.full((b, *x.shape[1:]), fill, x.dtype).at[dest].set(x, mode="drop")

    pid = mem.pid[samples.ptr]
    var = samples.var - 1
    line = jnp.maximum(mem.cart_line[samples.ptr], 1)
    slots = samples.ask_extra | jax.nn.one_hot(samples.ask, NS, dtype=bool)
    is_search = tool == T.CATALOG_SEARCH
    base = empty_action(catalog.embed_dim)
    cat_ok = mem.cat >= 0
    qemb = jnp.where(cat_ok, catalog.cat_emb[jnp.maximum(mem.cat, 0)], 0.0).astype(F32)
    fdisc = jnp.full((k, C.N_DISC_FILTERS), -1, I32).at[:, 0].set(jnp.where(cat_ok, mem.cat, -1))
    match, _ = _matches(mem, catalog)
    it = jnp.argmax(match, -1)
    stated = jnp.where(match.any(-1), mem.items.qty[it], 1)[samples.ptr]
    qty = jnp.where(samples.qty == 0, stated, samples.qty - 1)
    qty = jnp.where(tool == T.ORDER_LIST, 365, jnp.where(is_search, 20, qty))
    action = base.replace(
        has_message=jnp.bool_(True),
        tool=place(tool, T.NONE),
        product=place(jnp.where(jnp.isin(tool, jnp.array(POINTER_TOOLS)), pid, -1), -1),
        variant=place(jnp.where(tool == T.CART_ADD, var, -1), -1),
        line=place(jnp.where(tool == T.CART_SET_QUANTITY, line, -1), -1),
        qty=place(jnp.maximum(qty, jnp.where(tool == T.CART_SET_QUANTITY, 0, 1)), 1),
        enum_a=place(jnp.where(is_search, samples.sort, 0), 0),
        flag=place(is_search, False),
        has_query=place(is_search, False),
        query_emb=place(jnp.where(is_search[:, None], qemb[None, :], 0.0), 0.0),
        filter_disc=place(jnp.where(is_search[:, None], fdisc, -1), -1),
        slots=place(slots & (tool == T.ASK_USER)[:, None], False),
    )
    env = jnp.where(inp.env >= 0, inp.env, C.Env.CART).astype(I32)
    rec_ids = jnp.where(samples.rec, mem.pid, -1)
    rec = jnp.full(C.MAX_ANSWER_IDS, -1, I32)
    rpos = jnp.cumsum(samples.rec) - 1
    rec = rec.at[jnp.where(samples.rec, rpos, C.MAX_ANSWER_IDS)].set(rec_ids, mode="drop")
    main = base.answer.main.replace(
        env=env,
        rec=rec,
        order=samples.order,
        line=samples.line,
        status=samples.status,
        policy_value=jnp.array(VALUE_BINS, F32)[samples.value],
        policy_ok=jnp.bool_(True),
    )
    answer = base.answer.replace(
        present=samples.kind > 0,
        done=samples.kind == 1,
        main=main,
    )
    return action.replace(answer=answer)


def after_act(mem: AgentMemory, samples: Samples, cfg: PolicyConfig) -> AgentMemory:
    """Counts the calls made, per tool and per pointed row."""
    tool = jnp.array(cfg.tools, I32)[samples.tool]
    rows = jax.nn.one_hot(samples.ptr, cfg.rows, dtype=I32)  # [K, P]
    return mem.replace(
        tool_counts=mem.tool_counts + jax.nn.one_hot(tool, C.N_TOOLS, dtype=I32).sum(0),
        n_add=mem.n_add + ((tool == T.CART_ADD)[:, None] * rows).sum(0),
        n_getvar=mem.n_getvar + ((tool == T.CATALOG_GET_VARIANTS)[:, None] * rows).sum(0),
    )


# --- the policy as functions ---------------------------------------------------------------


class Policy:
    """Binds a config to the network and the encoder. Everything is a pure function of
    explicit arguments (params, memory, keys); nothing here jits."""

    def __init__(self, cfg: PolicyConfig = PolicyConfig()):
        self.cfg = cfg
        self.net = PolicyNet(cfg)

    def init_carry(self) -> tuple[AgentMemory, jax.Array]:
        return init_memory(self.cfg), jnp.zeros(self.cfg.memory, F32)

    def dummy_inputs(self, catalog: Catalog, obs: Observation) -> PolicyInputs:
        return encode(init_memory(self.cfg), obs, catalog, self.cfg, False)

    def init_params(self, key: jax.Array, catalog: Catalog, obs: Observation):
        """Parameters from one (unbatched) observation, e.g. a reset's."""
        inp = self.dummy_inputs(catalog, obs)
        h = jnp.zeros(self.cfg.memory, F32)
        return self.net.init(jax.random.fold_in(key, 1), inp, h, jax.random.fold_in(key, 2))

    def act(self, params, mem, h, obs, catalog, key, force_done=False):
        """One turn of one episode: ``(mem, h, inputs, samples, logp [heads], entropy,
        action)``."""
        mem = observe(mem, obs, catalog, self.cfg)
        inp = encode(mem, obs, catalog, self.cfg, force_done)
        h, samples, logp, ent = self.net.apply(params, inp, h, key)
        action = to_action(samples, mem, inp, catalog, self.cfg)
        return after_act(mem, samples, self.cfg), h, inp, samples, logp, ent, action

    def score(self, params, inp: PolicyInputs, h, samples: Samples):
        """Re-score stored samples: ``(h, logp [heads], entropy)``."""
        h, _, logp, ent = self.net.apply(params, inp, h, None, samples)
        return h, logp, ent


__all__ = [
    "ALL_TOOLS",
    "CART_TOOLS",
    "HEADS",
    "AgentMemory",
    "Policy",
    "PolicyConfig",
    "PolicyInputs",
    "PolicyNet",
    "Samples",
    "after_act",
    "encode",
    "init_memory",
    "observe",
    "to_action",
]
