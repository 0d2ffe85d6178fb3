"""The unified episode pytrees shared by all eight task families (DESIGN "Data model").

One state type serves every family: fields a family does not use stay at their padding
values. Every shape is fixed by the static maxima of ``ecomjax.constants`` and by the
catalog size N, so a change of difficulty never recompiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.difficulty import AxisOverrides

I32 = jnp.int32
F32 = jnp.float32


def _full(shape, value, dtype=I32) -> jax.Array:
    return jnp.full(shape, value, dtype)


@dataclass(frozen=True)
class EnvParams:
    """Static, hashable configuration: changing it recompiles, nothing else does."""

    d_max: int = C.D_MAX
    w_task: float = 0.75
    w_eff: float = 0.15
    w_hall: float = 0.10
    disclose_env_id: bool = True
    overrides: AxisOverrides = field(default_factory=AxisOverrides)
    # Device retrieval: rows scored per chunk of the masked top-k kernel.
    search_chunk: int = 4096
    # Batched retrieval (tools.search.resolve_batch): search calls scored per loop step. The
    # last step of a turn is padded to it, so small values suit long tails of few searches.
    search_batch: int = 32
    # Seen / out-of-stock layout (ecomjax.exposure): "dense" bitmaps over N, a "sparse"
    # sorted id list, or "auto" (sparse once the bitmaps would be much larger).
    exposure: str = "auto"


# --- the hidden goal -----------------------------------------------------------------------


@struct.dataclass
class Problem:
    """Everything the generator decides. Never part of an observation."""

    env: jax.Array  # int32, Env
    d: jax.Array  # int32
    today: jax.Array  # int32, days since 2025-01-01 (stream TIME)
    tier: jax.Array  # int32, membership tier 0 none / 1 basic / 2 premium (stream ACCOUNT)
    t_max: jax.Array  # int32
    # CART targets (SPEC §8.3); -1 padded.
    item_pid: jax.Array  # int32 [MAX_ITEMS]
    item_qty: jax.Array  # int32 [MAX_ITEMS], requested quantity
    item_var_req: jax.Array  # bool [MAX_ITEMS]
    item_var_attr: jax.Array  # int32 [MAX_ITEMS], Attr of the synthesized variants
    item_var_vals: jax.Array  # float32 [MAX_ITEMS, 3], variant values (vocab code or number)
    item_var_target: jax.Array  # int32 [MAX_ITEMS], index of the required variant in 0..2
    item_desc_form: jax.Array  # int32 [MAX_ITEMS], DescForm scoped to the catalog
    item_desc_key: jax.Array  # int32 [MAX_ITEMS]
    # Visit history (CART: targets + distractors, shuffled; other envs: 6 random products).
    history: jax.Array  # int32 [MAX_HISTORY]
    # Slots: which goal slots exist and which start pending (omitted), per sub-goal and item.
    has_slot: jax.Array  # bool [MAX_SUBGOALS, MAX_ITEMS, N_SLOTS]
    pending: jax.Array  # bool [MAX_SUBGOALS, MAX_ITEMS, N_SLOTS]
    # What the customer would say for each slot, per sub-goal (item row 0 for non-CART
    # envs): a category index, a count, an enum code, a day number, cents, or a number.
    slot_value: jax.Array  # float32 [MAX_SUBGOALS, N_SLOTS]
    slot_op: jax.Array  # int32 [MAX_SUBGOALS, N_SLOTS], constraint op 0 eq / +1 gte / -1 lte
    # A product the customer names by identifying description, per sub-goal (SUB original,
    # RETURN line product, STATUS indirect reference): DescForm and key, scoped as the
    # family says (catalog or order history).
    ref_form: jax.Array  # int32 [MAX_SUBGOALS]
    ref_key: jax.Array  # int32 [MAX_SUBGOALS]
    # PD / SUB / RETURN-replacement constraint sets (index 0 / 1 / 2).
    cons_attr: jax.Array  # int32 [3, MAX_CONSTRAINTS], Attr, -1 padded
    cons_op: jax.Array  # int32 [3, MAX_CONSTRAINTS], 0 eq / +1 gte / -1 lte
    cons_val: jax.Array  # float32 [3, MAX_CONSTRAINTS]
    k_rec: jax.Array  # int32
    priority: jax.Array  # int32, PD stated priority 0 price / 1 rating / 2 ship
    pd_target: jax.Array  # int32
    sub_original: jax.Array  # int32
    sub_witness: jax.Array  # int32
    # PD / SUB further witnesses W (SPEC §8.1, §8.2 v1.1), row 0 PD, row 1 SUB, -1 padded.
    pool_witness: jax.Array  # int32 [2, MAX_K_REC - 1]
    # Order history (RETURN, STATUS, JOURNEY).
    n_orders: jax.Array  # int32
    order_status: jax.Array  # int32 [MAX_ORDERS]
    order_date: jax.Array  # int32 [MAX_ORDERS]
    order_aux_date: jax.Array  # int32 [MAX_ORDERS], delivered or eta date, -1 none
    order_tracking: jax.Array  # int32 [MAX_ORDERS], 9 digits, -1 none
    order_n_lines: jax.Array  # int32 [MAX_ORDERS]
    line_pid: jax.Array  # int32 [MAX_ORDERS, MAX_ORDER_LINES]
    line_qty: jax.Array  # int32 [MAX_ORDERS, MAX_ORDER_LINES]
    ret_order: jax.Array  # int32, RETURN target order
    ret_line: jax.Array  # int32
    ret_reason: jax.Array  # int32
    ret_method: jax.Array  # int32, -1 = no preference
    ret_replace: jax.Array  # bool
    ret_witness: jax.Array  # int32
    status_order: jax.Array  # int32, STATUS target order
    status_indirect: jax.Array  # bool
    # POLICY.
    pol_topic: jax.Array  # int32
    pol_rule: jax.Array  # int32
    pol_context: jax.Array  # float32 [N_POLICY_FIELDS]
    pol_answer: jax.Array  # float32 (numeric value or categorical code)
    pol_fact_field: jax.Array  # int32 [MAX_FACTS], distractor facts (policy field), -1 pad
    pol_fact_value: jax.Array  # float32 [MAX_FACTS]
    # BUNDLE.
    bundle_cats: jax.Array  # int32 [MAX_BUNDLE_SLOTS], -1 padded
    budget_cents: jax.Array  # int32, -1 = no budget
    # JOURNEY.
    sub_env: jax.Array  # int32 [MAX_SUBGOALS], -1 padded
    # Products that stock shocks never touch (SPEC §6).
    protected: jax.Array  # int32 [MAX_PROTECTED]: PD target, SUB witness, RETURN witness,
    # then (JOURNEY) the cheapest in-stock product of each BUNDLE slot


N_POLICY_FIELDS = 19  # the 17 policy slots, then return_method and quantity (SPEC §9.2)
MAX_FACTS = 6  # B_branch(D_MAX) - 1 distractor facts at most
MAX_PROTECTED = 3 + C.MAX_BUNDLE_SLOTS


def empty_problem() -> Problem:
    """All padding: a family's generator fills in only its own fields."""
    mi, ms = C.MAX_ITEMS, C.MAX_SUBGOALS
    return Problem(
        env=I32(C.Env.CART),
        d=I32(0),
        today=I32(0),
        tier=I32(0),
        t_max=I32(4),
        item_pid=_full(mi, -1),
        item_qty=_full(mi, 0),
        item_var_req=_full(mi, False, bool),
        item_var_attr=_full(mi, -1),
        item_var_vals=_full((mi, 3), 0.0, F32),
        item_var_target=_full(mi, -1),
        item_desc_form=_full(mi, 0),
        item_desc_key=_full(mi, -1),
        history=_full(C.MAX_HISTORY, -1),
        has_slot=_full((ms, mi, C.N_SLOTS), False, bool),
        pending=_full((ms, mi, C.N_SLOTS), False, bool),
        slot_value=_full((ms, C.N_SLOTS), 0.0, F32),
        slot_op=_full((ms, C.N_SLOTS), 0),
        ref_form=_full(ms, 0),
        ref_key=_full(ms, -1),
        cons_attr=_full((3, C.MAX_CONSTRAINTS), -1),
        cons_op=_full((3, C.MAX_CONSTRAINTS), 0),
        cons_val=_full((3, C.MAX_CONSTRAINTS), 0.0, F32),
        k_rec=I32(0),
        priority=I32(0),
        pd_target=I32(-1),
        sub_original=I32(-1),
        sub_witness=I32(-1),
        pool_witness=_full((2, C.MAX_K_REC - 1), -1),
        n_orders=I32(0),
        order_status=_full(C.MAX_ORDERS, -1),
        order_date=_full(C.MAX_ORDERS, -1),
        order_aux_date=_full(C.MAX_ORDERS, -1),
        order_tracking=_full(C.MAX_ORDERS, -1),
        order_n_lines=_full(C.MAX_ORDERS, 0),
        line_pid=_full((C.MAX_ORDERS, C.MAX_ORDER_LINES), -1),
        line_qty=_full((C.MAX_ORDERS, C.MAX_ORDER_LINES), 0),
        ret_order=I32(-1),
        ret_line=I32(-1),
        ret_reason=I32(-1),
        ret_method=I32(-1),
        ret_replace=jnp.bool_(False),
        ret_witness=I32(-1),
        status_order=I32(-1),
        status_indirect=jnp.bool_(False),
        pol_topic=I32(-1),
        pol_rule=I32(-1),
        pol_context=_full(N_POLICY_FIELDS, 0.0, F32),
        pol_answer=F32(0.0),
        pol_fact_field=_full(MAX_FACTS, -1),
        pol_fact_value=_full(MAX_FACTS, 0.0, F32),
        bundle_cats=_full(C.MAX_BUNDLE_SLOTS, -1),
        budget_cents=I32(-1),
        sub_env=_full(ms, -1),
        protected=_full(MAX_PROTECTED, -1),
    )


# --- the agent's turn ------------------------------------------------------------------------


@struct.dataclass
class AnswerFields:
    """One non-JOURNEY answer object (SPEC §4.6). Ids are catalog indices; -1 pads and any
    code <= -2 is an id string the catalog does not know (the host numbers them per episode)."""

    env: jax.Array  # int32, -1 = null answer
    rec: jax.Array  # int32 [MAX_ANSWER_IDS]
    order: jax.Array  # int32
    line: jax.Array  # int32
    status: jax.Array  # int32
    policy_value: jax.Array  # float32 (numeric, or categorical code)
    policy_ok: jax.Array  # bool, False = the value did not parse


def empty_answer_fields(lead: tuple[int, ...] = ()) -> AnswerFields:
    return AnswerFields(
        env=_full(lead, -1),
        rec=_full((*lead, C.MAX_ANSWER_IDS), -1),
        order=_full(lead, -1),
        line=_full(lead, -1),
        status=_full(lead, -1),
        policy_value=_full(lead, 0.0, F32),
        policy_ok=_full(lead, False, bool),
    )


@struct.dataclass
class Answer:
    present: jax.Array  # bool: this turn carries an answer
    done: jax.Array  # bool: the answer ends the episode (default true)
    main: AnswerFields
    sub: AnswerFields  # leading axis MAX_SUBGOALS: JOURNEY subgoal_answers


def empty_answer() -> Answer:
    return Answer(
        present=jnp.bool_(False),
        done=jnp.bool_(True),
        main=empty_answer_fields(),
        sub=empty_answer_fields((C.MAX_SUBGOALS,)),
    )


@struct.dataclass
class Action:
    """One structured agent turn. Array agents build it directly; the host bridge builds it
    from LLM text. Call slot i is unused when ``tool[i] == Tool.NONE``."""

    malformed: jax.Array  # bool: set by the parser (unparseable JSON, unknown key, two answers)
    has_message: jax.Array  # bool: a non-empty message to the customer
    present: jax.Array  # int32 [MAX_PRESENTED]: products the message presents (id or title)
    tool: jax.Array  # int32 [MAX_TOOL_CALLS], Tool
    # Calls the turn made, counted by the parser before slots run out (12+ calls at
    # B_tool = MAX_TOOL_CALLS must still fail the budget); 0 = count the used slots.
    n_calls: jax.Array  # int32
    bad_args: jax.Array  # bool [MAX_TOOL_CALLS]: the parser found a schema violation
    product: jax.Array  # int32 [MAX_TOOL_CALLS], product_id / new_product_id / similar_to
    variant: jax.Array  # int32 [MAX_TOOL_CALLS], variant index, -1 = null
    line: jax.Array  # int32 [MAX_TOOL_CALLS], cart line number / order line index
    order: jax.Array  # int32 [MAX_TOOL_CALLS], order index / return number
    qty: jax.Array  # int32 [MAX_TOOL_CALLS], quantity / days / top_k
    enum_a: jax.Array  # int32 [MAX_TOOL_CALLS], sort_by / reason_code
    enum_b: jax.Array  # int32 [MAX_TOOL_CALLS], method / subgoal
    flag: jax.Array  # bool [MAX_TOOL_CALLS], in_stock_only
    has_query: jax.Array  # bool [MAX_TOOL_CALLS]
    query_emb: jax.Array  # float32 [MAX_TOOL_CALLS, D], the embedded text query
    # policy_search: the query's tokens as policy-vocabulary ids (SPEC §9.4), -1 padded;
    # a token outside the vocabulary is -2 (it still counts in |Q|).
    query_tokens: jax.Array  # int32 [MAX_TOOL_CALLS, MAX_QUERY_TOKENS]
    filter_disc: jax.Array  # int32 [MAX_TOOL_CALLS, N_DISC_FILTERS], -1 = no filter
    filter_num: jax.Array  # float32 [MAX_TOOL_CALLS, N_NUM_FILTERS], NaN = no filter
    slots: jax.Array  # bool [MAX_TOOL_CALLS, N_SLOTS], ask_user slots
    answer: Answer


# The Action fields with a leading call-slot axis (one home for builders and parsers).
CALL_FIELDS = (
    "tool",
    "bad_args",
    "product",
    "variant",
    "line",
    "order",
    "qty",
    "enum_a",
    "enum_b",
    "flag",
    "has_query",
    "query_emb",
    "query_tokens",
    "filter_disc",
    "filter_num",
    "slots",
)


def empty_action(embed_dim: int = C.EMBED_DIM) -> Action:
    b = C.MAX_TOOL_CALLS
    return Action(
        malformed=jnp.bool_(False),
        has_message=jnp.bool_(False),
        present=_full(C.MAX_PRESENTED, -1),
        tool=_full(b, C.Tool.NONE),
        n_calls=jnp.int32(0),
        bad_args=_full(b, False, bool),
        product=_full(b, -1),
        variant=_full(b, -1),
        line=_full(b, -1),
        order=_full(b, -1),
        qty=_full(b, 1),
        enum_a=_full(b, 0),
        enum_b=_full(b, -1),
        flag=_full(b, False, bool),
        has_query=_full(b, False, bool),
        query_emb=_full((b, embed_dim), 0.0, F32),
        query_tokens=_full((b, C.MAX_QUERY_TOKENS), -1),
        filter_disc=_full((b, C.N_DISC_FILTERS), -1),
        filter_num=_full((b, C.N_NUM_FILTERS), jnp.nan, F32),
        slots=_full((b, C.N_SLOTS), False, bool),
        answer=empty_answer(),
    )


@struct.dataclass
class SearchResults:
    """catalog_search results resolved before the step (device top-k or host FAISS)."""

    ids: jax.Array  # int32 [MAX_TOOL_CALLS, MAX_SEARCH_RESULTS], -1 padded
    score: jax.Array  # float32 [MAX_TOOL_CALLS, MAX_SEARCH_RESULTS]
    stock: jax.Array  # int32 [MAX_TOOL_CALLS, MAX_SEARCH_RESULTS], cards' stock_qty
    total: jax.Array  # int32 [MAX_TOOL_CALLS], |T|
    count: jax.Array  # int32 [MAX_TOOL_CALLS], ids delivered (ids >= 0)
    top_k: jax.Array  # int32 [MAX_TOOL_CALLS], top_k_applied
    error: jax.Array  # int32 [MAX_TOOL_CALLS], ToolError (unknown similar_to)


# --- what the agent sees ---------------------------------------------------------------------


SMALL_ROWS = 64  # cart lines (32), history (16), variants (4), categories (40), order lines (60)


@struct.dataclass
class ToolResults:
    """Per call slot of the previous turn. Small rows hold cart lines, history, variants,
    product records and categories; searches keep their own wide rows, passed through
    from the retrieval stage rather than copied."""

    tool: jax.Array  # int32 [B]
    error: jax.Array  # int32 [B], ToolError
    count: jax.Array  # int32 [B], rows filled (search: cards returned)
    total: jax.Array  # int32 [B], search total_matches / cart total units / today
    ids: jax.Array  # int32 [B, SMALL_ROWS], product (or category) index per row
    var: jax.Array  # int32 [B, SMALL_ROWS], variant index per row, -1 none
    qty: jax.Array  # int32 [B, SMALL_ROWS], stock_qty of a card or variant; qty of a line
    aux: jax.Array  # int32 [B, SMALL_ROWS], cart line number; variant_count
    var_attr: jax.Array  # int32 [B, MAX_VARIANTS], Attr of each listed variant
    var_value: jax.Array  # float32 [B, MAX_VARIANTS]
    # Order tools: per order index (-1 = not listed): status, order date, delivered or eta
    # date, tracking number. Rows of order tools are lines: ids product, var order index,
    # aux line index, qty line quantity.
    ord_status: jax.Array  # int32 [B, MAX_ORDERS]
    ord_date: jax.Array  # int32 [B, MAX_ORDERS]
    ord_aux: jax.Array  # int32 [B, MAX_ORDERS]
    ord_track: jax.Array  # int32 [B, MAX_ORDERS]
    # Small per-call facts (eligibility verdict and reason, window, days, fees, return
    # number, ...); each tool documents its layout where it fills them.
    info: jax.Array  # float32 [B, N_INFO]
    search: SearchResults  # wide rows of catalog_search slots (-1 elsewhere)


N_INFO = 8


def empty_results() -> ToolResults:
    b, s, v, mo = C.MAX_TOOL_CALLS, SMALL_ROWS, C.MAX_VARIANTS, C.MAX_ORDERS
    return ToolResults(
        tool=_full(b, 0),
        error=_full(b, 0),
        count=_full(b, 0),
        total=_full(b, 0),
        ids=_full((b, s), -1),
        var=_full((b, s), -1),
        qty=_full((b, s), 0),
        aux=_full((b, s), 0),
        var_attr=_full((b, v), -1),
        var_value=_full((b, v), 0.0, F32),
        ord_status=_full((b, mo), -1),
        ord_date=_full((b, mo), -1),
        ord_aux=_full((b, mo), -1),
        ord_track=_full((b, mo), -1),
        info=_full((b, N_INFO), 0.0, F32),
        search=no_search(),
    )


def no_search(batch: tuple[int, ...] = ()) -> SearchResults:
    """SearchResults for a turn without searches."""
    b, r = C.MAX_TOOL_CALLS, C.MAX_SEARCH_RESULTS
    return SearchResults(
        ids=_full((*batch, b, r), -1),
        score=_full((*batch, b, r), 0.0, F32),
        stock=_full((*batch, b, r), 0),
        total=_full((*batch, b), 0),
        count=_full((*batch, b), 0),
        top_k=_full((*batch, b), 0),
        error=_full((*batch, b), 0),
    )


@struct.dataclass
class UserAct:
    """The customer's reply as structured acts (SPEC §10). Knowable content only: products
    are named by identifying-description keys, never by index."""

    acts: jax.Array  # bool [N_ACTS]
    user_caused: jax.Array  # bool
    item_valid: jax.Array  # bool [MAX_ITEMS]: item mentioned in this reply
    item_desc_form: jax.Array  # int32 [MAX_ITEMS]
    item_desc_key: jax.Array  # int32 [MAX_ITEMS]
    item_qty: jax.Array  # int32 [MAX_ITEMS], -1 = not stated
    item_var_attr: jax.Array  # int32 [MAX_ITEMS], -1 = not stated
    item_var_value: jax.Array  # float32 [MAX_ITEMS]
    item_var_nopref: jax.Array  # bool [MAX_ITEMS], CLARIFY: no variant needed
    item_update: jax.Array  # bool [MAX_ITEMS], INFORM-update: sold out, item_qty = new need
    item_issue: jax.Array  # int32 [MAX_ITEMS], CORRECT: CartIssue
    item_confirm: jax.Array  # bool [MAX_ITEMS], CONFIRM: "yes, that's my {desc}"
    cart_confirm: jax.Array  # bool: CONFIRM of the whole cart
    extra_form: jax.Array  # int32 [MAX_PRESENTED], CORRECT extra / not_mine products
    extra_key: jax.Array  # int32 [MAX_PRESENTED]
    extra_kind: jax.Array  # int32 [MAX_PRESENTED], 0 none / 1 extra product / 2 not mine
    slot_status: jax.Array  # int32 [N_SLOTS], CLARIFY: ClarifyStatus per requested slot
    # Slot values this reply states, per sub-goal (INFORM, CLARIFY, CORRECT, SWITCH).
    slot_stated: jax.Array  # bool [MAX_SUBGOALS, N_SLOTS]
    slot_value: jax.Array  # float32 [MAX_SUBGOALS, N_SLOTS]
    slot_op: jax.Array  # int32 [MAX_SUBGOALS, N_SLOTS]
    ref_form: jax.Array  # int32 [MAX_SUBGOALS], a product named by description (0 = none)
    ref_key: jax.Array  # int32 [MAX_SUBGOALS]
    cats: jax.Array  # int32 [MAX_BUNDLE_SLOTS], BUNDLE slot categories stated, -1 pad
    fact_field: jax.Array  # int32 [MAX_FACTS], POLICY distractor facts, -1 pad
    fact_value: jax.Array  # float32 [MAX_FACTS]
    subgoal: jax.Array  # int32: the sub-goal the reply's CLARIFY/feedback refers to
    active: jax.Array  # int32: JOURNEY active sub-goal after this reply (0 otherwise)
    switch_intro: jax.Array  # bool: SWITCH introduces a new sub-goal (else resumes)
    # a family's feedback hook (ecomjax.family.Feedback; RETURN's returns): the CORRECT's
    # issue flags in the family's ``issues`` order (RETURN: ReturnIssue), its CONFIRM
    feedback_issues: jax.Array  # bool [MAX_FEEDBACK_ISSUES]
    feedback_confirm: jax.Array  # bool
    intro_env: jax.Array  # int32: env of the sub-goal this INFORM / SWITCH opens, else -1
    n_subgoals: jax.Array  # int32: JOURNEY opening "I have {L} things", else 0


def empty_user_act() -> UserAct:
    mi, mp, ms = C.MAX_ITEMS, C.MAX_PRESENTED, C.MAX_SUBGOALS
    return UserAct(
        acts=_full(C.N_ACTS, False, bool),
        user_caused=jnp.bool_(False),
        item_valid=_full(mi, False, bool),
        item_desc_form=_full(mi, 0),
        item_desc_key=_full(mi, -1),
        item_qty=_full(mi, -1),
        item_var_attr=_full(mi, -1),
        item_var_value=_full(mi, 0.0, F32),
        item_var_nopref=_full(mi, False, bool),
        item_update=_full(mi, False, bool),
        item_issue=_full(mi, 0),
        item_confirm=_full(mi, False, bool),
        cart_confirm=jnp.bool_(False),
        extra_form=_full(mp, 0),
        extra_key=_full(mp, -1),
        extra_kind=_full(mp, 0),
        slot_status=_full(C.N_SLOTS, 0),
        slot_stated=_full((ms, C.N_SLOTS), False, bool),
        slot_value=_full((ms, C.N_SLOTS), 0.0, F32),
        slot_op=_full((ms, C.N_SLOTS), 0),
        ref_form=_full(ms, 0),
        ref_key=_full(ms, -1),
        cats=_full(C.MAX_BUNDLE_SLOTS, -1),
        fact_field=_full(MAX_FACTS, -1),
        fact_value=_full(MAX_FACTS, 0.0, F32),
        subgoal=I32(0),
        active=I32(0),
        switch_intro=jnp.bool_(False),
        feedback_issues=_full(C.MAX_FEEDBACK_ISSUES, False, bool),
        feedback_confirm=jnp.bool_(False),
        intro_env=I32(-1),
        n_subgoals=I32(0),
    )


N_DETAIL = 4


@struct.dataclass
class Score:
    """One family verifier's verdict on one (sub-)goal."""

    r_task: jax.Array  # float32 in [-1, 1]
    is_correct: jax.Array  # bool
    detail: jax.Array  # float32 [N_DETAIL], the family's components (r_rank, r_sel, F1, ...)


def make_score(r_task, is_correct, *detail) -> Score:
    d = [jnp.asarray(x, F32) for x in detail][:N_DETAIL]
    d += [F32(0.0)] * (N_DETAIL - len(d))
    return Score(jnp.asarray(r_task, F32), jnp.asarray(is_correct, bool), jnp.stack(d))


@struct.dataclass
class RewardInfo:
    r_total: jax.Array  # float32
    r_task: jax.Array  # float32 (0 on a hard fail, where it is null)
    r_eff: jax.Array
    r_hall: jax.Array
    is_correct: jax.Array  # bool
    hard_fail: jax.Array  # int32, HardFail
    f1: jax.Array  # float32, CART unit F1 (family detail)
    detail: jax.Array  # float32 [N_DETAIL], family components (see ecomjax.verify)


def zero_reward() -> RewardInfo:
    z = F32(0.0)
    return RewardInfo(
        r_total=z,
        r_task=z,
        r_eff=z,
        r_hall=z,
        is_correct=jnp.bool_(False),
        hard_fail=I32(0),
        f1=z,
        detail=jnp.zeros(N_DETAIL, F32),
    )


@struct.dataclass
class Observation:
    """What the agent sees after a step. Holds no hidden-goal field (tested)."""

    env: jax.Array  # int32, Env (-1 when disclose_env_id is off)
    today: jax.Array  # int32
    turn: jax.Array  # int32, turns taken
    turns_left: jax.Array  # int32
    tool_budget: jax.Array  # int32, B_tool(d)
    results: ToolResults
    events: jax.Array  # int32 [MAX_EVENTS], products that just went out of stock
    n_events: jax.Array  # int32, may exceed MAX_EVENTS (the list is then truncated)
    reply: UserAct
    done: jax.Array  # bool
    termination: jax.Array  # int32, Termination
    reward: RewardInfo  # terminal only; zeros before


# --- the episode -----------------------------------------------------------------------------


@struct.dataclass
class World:
    """The episode's mutable world: cart, stock overlay, returns and hallucination records."""

    cart_pid: jax.Array  # int32 [MAX_CART_LINES], -1 = empty slot
    cart_var: jax.Array  # int32 [MAX_CART_LINES]
    cart_qty: jax.Array  # int32 [MAX_CART_LINES]
    cart_no: jax.Array  # int32 [MAX_CART_LINES], line number (line_001 -> 1), 0 = empty
    lines_created: jax.Array  # int32
    # Seen and the forced out-of-stock overlay (ecomjax.exposure): dense, seen_ids is empty
    # and the flags are bitmaps over N; sparse, the flags align with the sorted id list.
    seen_ids: jax.Array  # int32 [M] or [0]
    oos: jax.Array  # bool [N or M], forced out of stock (shocks, SUB original)
    seen: jax.Array  # bool [N or M], product ids already delivered to the agent
    used: jax.Array  # int32 [MAX_USED_IDS], distinct product ids the agent used
    used_hall: jax.Array  # bool [MAX_USED_IDS], not in Seen at first use
    n_used: jax.Array  # int32
    n_searches: jax.Array  # int32, search-call counter (stream SEARCH)
    ret_order: jax.Array  # int32 [MAX_RETURNS]
    ret_line: jax.Array  # int32 [MAX_RETURNS]
    ret_reason: jax.Array  # int32 [MAX_RETURNS]
    ret_method: jax.Array  # int32 [MAX_RETURNS]
    ret_active: jax.Array  # bool [MAX_RETURNS]
    exch_pid: jax.Array  # int32 [MAX_RETURNS], -1 = no exchange
    exch_var: jax.Array  # int32 [MAX_RETURNS]
    n_returns: jax.Array  # int32


@struct.dataclass
class Dialogue:
    """Customer memory and episode counters."""

    pending: jax.Array  # bool [MAX_SUBGOALS, MAX_ITEMS, N_SLOTS]
    req_final: jax.Array  # int32 [MAX_ITEMS], CART required_final (SPEC §6)
    presented: jax.Array  # bool [MAX_ITEMS], CART targets presented so far
    confirmed_fp: jax.Array  # int32 [8], fingerprints of cart states already confirmed
    n_confirmed: jax.Array  # int32
    last_issue: jax.Array  # int32 [MAX_ITEMS], previous CORRECT's per-item issues
    last_extra: jax.Array  # int32 [MAX_PRESENTED], previous CORRECT's extra product ids
    had_correct: jax.Array  # bool
    frustration: jax.Array  # int32
    done_emitted: jax.Array  # bool
    # JOURNEY agenda (SPEC §8.8).
    introduced: jax.Array  # bool [MAX_SUBGOALS]
    addressed: jax.Array  # bool [MAX_SUBGOALS]
    interrupted: jax.Array  # bool [MAX_SUBGOALS]
    active: jax.Array  # int32, the active sub-goal
    # Latest non-null answer per sub-goal (JOURNEY scores each one's latest).
    sub_answers: AnswerFields  # leading axis MAX_SUBGOALS
    # Feedback-hook memory (RETURN: returns already confirmed), previous CORRECT's issues.
    feedback_confirmed: jax.Array  # bool [MAX_CONFIRMED]
    last_feedback_issues: jax.Array  # bool [MAX_FEEDBACK_ISSUES]
    answer: Answer  # latest stored answer
    has_answer: jax.Array  # bool
    turn: jax.Array  # int32, T
    t_user: jax.Array  # int32
    termination: jax.Array  # int32, Termination
    hard_fail: jax.Array  # int32, HardFail


@struct.dataclass
class EpisodeState:
    key: jax.Array  # the episode key; every draw folds a stream tag into it (SPEC §12)
    problem: Problem
    world: World
    dialogue: Dialogue
    reward: RewardInfo


@struct.dataclass
class TimeStep:
    """gymnax-style: terminated (goal reached / failed) and truncated (t_max) kept apart.
    ``extras`` has the same keys at every step so that ``lax.scan`` works."""

    observation: Observation
    reward: jax.Array  # float32, r_total at the terminal step, else 0
    terminated: jax.Array  # bool
    truncated: jax.Array  # bool
    extras: dict
