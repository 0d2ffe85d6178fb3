"""The policy rule base of SPEC §9 as data: host tables for text and device arrays for a
``jnp`` evaluator.

Fields (SPEC §9.3). The 17 policy fields of ``Slot.PRODUCT_CATEGORY .. Slot.ITEM_PRICE``
come first, in Slot order; the rule base also conditions on two fields that are goal slots
of other families, ``return_method`` (rules 011-014) and ``quantity`` (rules 032-034), so
they follow as fields 17 and 18. A context is float32 [N_FIELDS]: a categorical field holds
its code (index in its domain), a numeric one its value. ``FIELD_SLOT`` maps a field to the
``ask_user`` slot that names it.

Answers. A numeric answer is its number; a categorical answer is its code in the single
answer vocabulary ``ANSWER_VOCAB`` (the verifier compares codes; the host maps a string to
a code after the §8.6 normalisation with ``answer_code``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C

S = C.Slot

# --- fields and domains (SPEC §9.3) --------------------------------------------------------


@dataclass(frozen=True)
class Field:
    name: str
    slot: int
    values: tuple[str, ...] = ()  # categorical domain; empty = numeric
    lo: float = 0.0  # numeric domain [lo, hi] on a grid of 1/inv
    hi: float = 0.0
    inv: int = 1  # 100 = cents, 10 = tenths, 1 = integers

    @property
    def categorical(self) -> bool:
        return bool(self.values)


FIELDS: tuple[Field, ...] = (
    Field("product_category", S.PRODUCT_CATEGORY, C.POLICY_CATEGORIES),
    Field("membership_tier", S.MEMBERSHIP_TIER, ("none", "basic", "premium")),
    Field("shipping_method", S.SHIPPING_METHOD, ("standard", "express", "overnight")),
    Field("destination", S.DESTINATION, ("domestic", "alaska", "hawaii", "international")),
    Field("order_total", S.ORDER_TOTAL, lo=5.0, hi=300.0, inv=100),
    Field("item_weight_lbs", S.ITEM_WEIGHT_LBS, lo=1.0, hi=120.0, inv=10),
    Field("purchase_channel", S.PURCHASE_CHANNEL, ("online", "in_store")),
    Field("competitor_type", S.COMPETITOR_TYPE, ("authorized_retailer", "marketplace")),
    Field("order_type", S.ORDER_TYPE, ("standard",)),
    Field("item_status", S.ITEM_STATUS, ("regular", "clearance")),
    Field("coupon_type", S.COUPON_TYPE, ("percentage", "fixed_amount")),
    Field("customer_type", S.CUSTOMER_TYPE, ("regular", "student", "employee")),
    Field("item_condition", S.ITEM_CONDITION, ("new", "open_box")),
    Field("annual_spend", S.ANNUAL_SPEND, lo=0.0, hi=1500.0, inv=100),
    Field("days_since_signup", S.DAYS_SINCE_SIGNUP, lo=1.0, hi=365.0, inv=1),
    Field("is_birthday_month", S.IS_BIRTHDAY_MONTH, ("true", "false")),
    Field("item_price", S.ITEM_PRICE, lo=5.0, hi=1500.0, inv=100),
    Field("return_method", S.RETURN_METHOD, ("mail", "in_store", "pickup")),
    Field("quantity", S.QUANTITY, lo=1.0, hi=200.0, inv=1),
)
N_FIELDS = len(FIELDS)
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)
FIELD_INDEX: dict[str, int] = {f.name: i for i, f in enumerate(FIELDS)}
assert [f.slot for f in FIELDS[:17]] == list(range(S.PRODUCT_CATEGORY, S.ITEM_PRICE + 1))
MAX_DOMAIN = max(len(f.values) for f in FIELDS)  # 12

# Context phrases (SPEC §9.3): one template per field; categorical fields may give one
# phrase per value (a tuple in domain order).
PHRASES: dict[str, str | tuple[str, ...]] = {
    "product_category": "It's a {v} item.",
    "return_method": (
        "I'd return it by mail.",
        "I'd return it in store.",
        "I'd return it by pickup.",
    ),
    "membership_tier": (
        "I don't have a membership.",
        "I'm a basic member.",
        "I'm a premium member.",
    ),
    "shipping_method": "I'd use {v} shipping.",
    "destination": (
        "It ships within the mainland US.",
        "It ships to Alaska.",
        "It ships to Hawaii.",
        "It ships internationally.",
    ),
    "order_total": "My order total is ${v}.",
    "annual_spend": "I've spent ${v} this year.",
    "item_price": "The item costs ${v}.",
    "item_weight_lbs": "The item weighs {v} lb.",
    "quantity": "I'm buying {v} identical items.",
    "days_since_signup": "I signed up {v} days ago.",
    "purchase_channel": ("I bought it online.", "I bought it in store."),
    "competitor_type": (
        "The lower price is from an authorized retailer.",
        "The lower price is from a marketplace seller.",
    ),
    "order_type": ("It's a standard order.",),
    "item_status": ("The item is regular-priced.", "The item is on clearance."),
    "coupon_type": ("My coupon is a percentage coupon.", "My coupon is a fixed-amount coupon."),
    "customer_type": ("I'm a regular customer.", "I'm a student.", "I'm an employee."),
    "item_condition": ("The item is new.", "The item is open-box."),
    "is_birthday_month": ("It is my birthday month.", "It isn't my birthday month."),
}


def field_value_text(field: int, value: float) -> str:
    """A context value as text: the domain word, or the number at the field's precision."""
    f = FIELDS[field]
    if f.categorical:
        return f.values[int(value)]
    if f.inv == 100:
        return f"{value:.2f}"
    if f.inv == 10:
        return f"{value:.1f}"
    return str(int(round(value)))


def phrase(field: int, value: float) -> str:
    """The §9.3 phrase stating one context fact."""
    p = PHRASES[FIELDS[field].name]
    if isinstance(p, tuple):
        return p[int(value)]
    return p.format(v=field_value_text(field, value))


# --- ops ----------------------------------------------------------------------------------

OPS: tuple[str, ...] = ("eq", "neq", "gt", "gte", "lt", "lte", "in", "not_in")
OP_INDEX = {o: i for i, o in enumerate(OPS)}
OP_SYMBOL = {"eq": "=", "neq": "!=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
OP_SYMBOL |= {"in": "in", "not_in": "not in"}

# --- answers -------------------------------------------------------------------------------

ANSWER_VOCAB: tuple[str, ...] = (
    "5-7 business days",
    "2-3 business days",
    "Next business day",
    "eligible",
    "ineligible",
    "applicable",
    "not_applicable",
    "Not included",
    "Free returns on all items via any method",
    "Free 2-day shipping on all orders",
    "Eligible for complimentary premium upgrade",
    "Not eligible",
    "Full refund within 30 days of signup",
    "No refund",
    "Included free for 12 months",
)


def normalise(text: str) -> str:
    """SPEC §8.6: lower-case, each non-alphanumeric run to "_", trimmed of "_"."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


_ANSWER_NORM = {normalise(a): i for i, a in enumerate(ANSWER_VOCAB)}
assert len(_ANSWER_NORM) == len(ANSWER_VOCAB)


def answer_code(text: str) -> int:
    """The code of a categorical answer string, -1 if it is none of the vocabulary."""
    return _ANSWER_NORM.get(normalise(text), -1)


# --- topics and rules (SPEC §9.2) ----------------------------------------------------------


@dataclass(frozen=True)
class Topic:
    name: str
    category: str
    mode: str  # "first" | "sum"
    default: float | str | None
    unit: str  # "days", "USD", "USD/yr", "%", "count", "points", "months", "" (categorical)
    question: str

    @property
    def categorical(self) -> bool:
        return self.unit == ""


TOPICS: tuple[Topic, ...] = (
    Topic("return_window_days", "returns", "first", 30, "days",
          "How many days is the return window for this item?"),
    Topic("return_fee", "returns", "first", None, "USD",
          "What is the return fee if I send it back?"),
    Topic("free_shipping_threshold", "shipping", "first", None, "USD",
          "What order amount qualifies for free shipping?"),
    Topic("shipping_cost", "shipping", "first", None, "USD",
          "How much does shipping cost for my order?"),
    Topic("shipping_surcharge", "shipping", "sum", 0, "USD",
          "Is there any shipping surcharge on this order?"),
    Topic("delivery_time", "shipping", "first", None, "",
          "How long does delivery take?"),
    Topic("price_match_window_days", "pricing", "first", None, "days",
          "How many days after purchase can I request a price match?"),
    Topic("price_match_eligibility", "pricing", "first", "ineligible", "",
          "Is my purchase eligible for price matching against a competitor?"),
    Topic("bulk_discount_pct", "pricing", "first", 0, "%",
          "What bulk discount percentage do I get?"),
    Topic("max_coupons", "pricing", "first", None, "count",
          "How many coupons can I use on one order?"),
    Topic("coupon_applicability", "pricing", "first", "applicable", "",
          "Does my coupon apply to this item?"),
    Topic("customer_discount_pct", "pricing", "first", 0, "%",
          "What customer discount percentage do I qualify for?"),
    Topic("open_box_discount_pct", "pricing", "first", 0, "%",
          "What is the open box discount percentage?"),
    Topic("membership_fee", "membership", "first", None, "USD/yr",
          "What is the annual membership fee for my tier?"),
    Topic("points_per_dollar", "membership", "first", 0, "points",
          "How many reward points per dollar do I earn?"),
    Topic("premium_return_perk", "membership", "first", "Not included", "",
          "What premium return perk does my membership include?"),
    Topic("premium_shipping_perk", "membership", "first", "Not included", "",
          "What premium shipping perk does my membership include?"),
    Topic("upgrade_eligibility", "membership", "first", "Not eligible", "",
          "Am I eligible for a membership upgrade?"),
    Topic("cancellation_refund", "membership", "first", "No refund", "",
          "Would I get a refund if I cancel my membership?"),
    Topic("guest_order_limit", "membership", "first", None, "USD",
          "What is the guest order limit without a membership?"),
    Topic("birthday_bonus_points", "membership", "first", 0, "points",
          "How many birthday bonus points do I get?"),
    Topic("standard_warranty_months", "warranty", "first", 0, "months",
          "How many months of standard warranty does this item have?"),
    Topic("extended_warranty_cost", "warranty", "first", None, "USD",
          "How much does an extended warranty cost for this item?"),
    Topic("premium_bonus_warranty_months", "warranty", "first", 0, "months",
          "How many bonus warranty months does premium membership add?"),
    Topic("accidental_damage_protection", "warranty", "first", "Not included", "",
          "Is accidental damage protection included for this item?"),
)  # fmt: skip
N_TOPICS = len(TOPICS)
TOPIC_INDEX = {t.name: i for i, t in enumerate(TOPICS)}

Cond = tuple[str, str, object]  # (field, op, value): a domain word, a number or a tuple


@dataclass(frozen=True)
class Rule:
    number: int  # pol_001 .. pol_062
    topic: str
    conds: tuple[Cond, ...]
    value: float | str

    @property
    def rule_id(self) -> str:
        return f"pol_{self.number:03d}"


def _cat(v: str) -> Cond:
    return ("product_category", "eq", v)


def _tier(v: str) -> Cond:
    return ("membership_tier", "eq", v)


def _ship(v: str) -> Cond:
    return ("shipping_method", "eq", v)


# Rank order within each topic is the listing order (SPEC §9.2).
RULES: tuple[Rule, ...] = (
    *(
        Rule(n, "return_window_days", (_cat(c),), v)
        for n, c, v in (
            (1, "electronics", 15),
            (2, "clothing", 30),
            (3, "furniture", 30),
            (4, "groceries", 0),
            (5, "jewelry", 30),
            (6, "books", 14),
            (7, "toys", 30),
            (8, "sports", 30),
            (9, "beauty", 14),
            (10, "automotive", 15),
        )
    ),
    Rule(14, "return_fee", (("return_method", "eq", "mail"), _tier("premium")), 0.0),
    Rule(11, "return_fee", (("return_method", "eq", "mail"),), 5.99),
    Rule(12, "return_fee", (("return_method", "eq", "in_store"),), 0.0),
    Rule(13, "return_fee", (("return_method", "eq", "pickup"),), 0.0),
    Rule(15, "free_shipping_threshold", (_tier("none"),), 50),
    Rule(16, "free_shipping_threshold", (_tier("basic"),), 35),
    Rule(17, "free_shipping_threshold", (_tier("premium"),), 0),
    Rule(24, "shipping_cost", (_tier("premium"), ("order_total", "gte", 100)), 0.0),
    Rule(26, "shipping_cost", (_ship("standard"), ("destination", "eq", "international")), 19.99),
    Rule(18, "shipping_cost", (_ship("standard"),), 7.99),
    Rule(19, "shipping_cost", (_ship("express"),), 14.99),
    Rule(20, "shipping_cost", (_ship("overnight"),), 24.99),
    Rule(25, "shipping_surcharge", (_cat("furniture"), ("item_weight_lbs", "gt", 50)), 29.99),
    Rule(
        27,
        "shipping_surcharge",
        (("destination", "in", ("alaska", "hawaii")), _ship("standard")),
        9.99,
    ),
    Rule(21, "delivery_time", (_ship("standard"),), "5-7 business days"),
    Rule(22, "delivery_time", (_ship("express"),), "2-3 business days"),
    Rule(23, "delivery_time", (_ship("overnight"),), "Next business day"),
    Rule(28, "price_match_window_days", (("purchase_channel", "eq", "in_store"),), 14),
    Rule(29, "price_match_window_days", (("purchase_channel", "eq", "online"),), 7),
    Rule(
        30,
        "price_match_eligibility",
        (_cat("electronics"), ("competitor_type", "eq", "authorized_retailer")),
        "eligible",
    ),
    Rule(
        31,
        "price_match_eligibility",
        (("competitor_type", "eq", "marketplace"), ("product_category", "neq", "electronics")),
        "ineligible",
    ),
    Rule(34, "bulk_discount_pct", (("quantity", "gte", 100),), 15),
    Rule(33, "bulk_discount_pct", (("quantity", "gte", 25), ("quantity", "lt", 100)), 10),
    Rule(32, "bulk_discount_pct", (("quantity", "gte", 10), ("quantity", "lt", 25)), 5),
    Rule(35, "max_coupons", (("order_type", "eq", "standard"),), 2),
    Rule(
        36,
        "coupon_applicability",
        (("item_status", "eq", "clearance"), ("coupon_type", "eq", "percentage")),
        "not_applicable",
    ),
    Rule(
        37,
        "customer_discount_pct",
        (("customer_type", "eq", "student"), _cat("electronics")),
        10,
    ),
    Rule(38, "customer_discount_pct", (("customer_type", "eq", "employee"),), 20),
    Rule(39, "open_box_discount_pct", (("item_condition", "eq", "open_box"),), 15),
    Rule(40, "membership_fee", (_tier("basic"),), 29.99),
    Rule(41, "membership_fee", (_tier("premium"),), 99.99),
    Rule(42, "points_per_dollar", (_tier("basic"), ("purchase_channel", "eq", "online")), 1),
    Rule(43, "points_per_dollar", (_tier("premium"), ("purchase_channel", "eq", "online")), 3),
    Rule(
        44, "premium_return_perk", (_tier("premium"),), "Free returns on all items via any method"
    ),
    Rule(45, "premium_shipping_perk", (_tier("premium"),), "Free 2-day shipping on all orders"),
    Rule(
        46,
        "upgrade_eligibility",
        (_tier("basic"), ("annual_spend", "gte", 500)),
        "Eligible for complimentary premium upgrade",
    ),
    Rule(
        47,
        "cancellation_refund",
        (("days_since_signup", "lte", 30),),
        "Full refund within 30 days of signup",
    ),
    Rule(48, "guest_order_limit", (_tier("none"),), 500.0),
    Rule(49, "birthday_bonus_points", (_tier("premium"), ("is_birthday_month", "eq", "true")), 500),
    *(
        Rule(n, "standard_warranty_months", (_cat(c),), v)
        for n, c, v in (
            (50, "electronics", 12),
            (51, "furniture", 24),
            (52, "appliances", 12),
            (53, "clothing", 3),
            (54, "jewelry", 6),
            (55, "toys", 6),
            (56, "sports", 6),
            (57, "automotive", 12),
        )
    ),
    Rule(58, "extended_warranty_cost", (_cat("electronics"), ("item_price", "lt", 200)), 19.99),
    Rule(59, "extended_warranty_cost", (_cat("electronics"), ("item_price", "gte", 200)), 49.99),
    Rule(60, "extended_warranty_cost", (_cat("furniture"), ("item_price", "gte", 500)), 79.99),
    Rule(61, "premium_bonus_warranty_months", (_tier("premium"), _cat("electronics")), 6),
    Rule(
        62,
        "accidental_damage_protection",
        (_tier("premium"), _cat("electronics"), ("item_price", "gte", 100)),
        "Included free for 12 months",
    ),
)
N_RULES = len(RULES)
MAX_CONDS = 3
assert sorted(r.number for r in RULES) == list(range(1, 63))
RULE_BY_NUMBER = {r.number: r for r in RULES}
# Device rule index = listing position (topic-grouped, rank order within a topic).
TOPIC_RULE_LISTS: tuple[tuple[int, ...], ...] = tuple(
    tuple(i for i, r in enumerate(RULES) if r.topic == t.name) for t in TOPICS
)
MAX_TOPIC_RULES = max(len(x) for x in TOPIC_RULE_LISTS)  # 10
RULE_RANK: tuple[int, ...] = tuple(
    TOPIC_RULE_LISTS[TOPIC_INDEX[r.topic]].index(i) + 1 for i, r in enumerate(RULES)
)
# Topic fields: every field some rule of the topic conditions on.
TOPIC_FIELDS: tuple[tuple[int, ...], ...] = tuple(
    tuple(
        sorted(
            {FIELD_INDEX[c[0]] for i in rules for c in RULES[i].conds},
        )
    )
    for rules in TOPIC_RULE_LISTS
)


def _value_code(topic: Topic, v: float | str | None) -> float:
    if v is None:
        return float("nan")
    if topic.categorical:
        return float(ANSWER_VOCAB.index(v))
    return float(v)


def _cond_arrays(cond: Cond) -> tuple[int, int, float, int]:
    """(field, op, value, mask): categorical values become codes, sets become bitmasks."""
    name, op, value = cond
    f = FIELDS[FIELD_INDEX[name]]
    if op in ("in", "not_in"):
        mask = sum(1 << f.values.index(v) for v in value)
        return FIELD_INDEX[name], OP_INDEX[op], 0.0, mask
    v = float(f.values.index(value)) if f.categorical else float(value)
    return FIELD_INDEX[name], OP_INDEX[op], v, 0


def _counts() -> tuple[int, int, int]:
    n = [sum(len(r.conds) == c for r in RULES) for c in (1, 2, 3)]
    return n[0], n[1], n[2]


assert _counts() == (42, 19, 1)
assert sum(t.categorical for t in (TOPICS[TOPIC_INDEX[r.topic]] for r in RULES)) == 11


class _Tables:
    """numpy versions of the device arrays (jnp copies are made per use: they are small)."""

    def __init__(self) -> None:
        cf = np.full((N_RULES, MAX_CONDS), -1, np.int32)
        co = np.zeros((N_RULES, MAX_CONDS), np.int32)
        cv = np.zeros((N_RULES, MAX_CONDS), np.float32)
        cm = np.zeros((N_RULES, MAX_CONDS), np.int32)
        for i, r in enumerate(RULES):
            for j, c in enumerate(r.conds):
                cf[i, j], co[i, j], cv[i, j], cm[i, j] = _cond_arrays(c)
        self.cond_field, self.cond_op, self.cond_val, self.cond_mask = cf, co, cv, cm
        self.rule_topic = np.array([TOPIC_INDEX[r.topic] for r in RULES], np.int32)
        self.rule_ncond = np.array([len(r.conds) for r in RULES], np.int32)
        self.rule_value = np.array(
            [_value_code(TOPICS[TOPIC_INDEX[r.topic]], r.value) for r in RULES], np.float32
        )
        self.rule_number = np.array([r.number for r in RULES], np.int32)
        tr = np.full((N_TOPICS, MAX_TOPIC_RULES), -1, np.int32)
        for t, rules in enumerate(TOPIC_RULE_LISTS):
            tr[t, : len(rules)] = rules
        self.topic_rules = tr
        self.topic_sum = np.array([t.mode == "sum" for t in TOPICS], bool)
        self.topic_categorical = np.array([t.categorical for t in TOPICS], bool)
        self.topic_has_default = np.array([t.default is not None for t in TOPICS], bool)
        self.topic_default = np.array(
            [0.0 if t.default is None else _value_code(t, t.default) for t in TOPICS], np.float32
        )
        tf = np.zeros((N_TOPICS, N_FIELDS), bool)
        for t, fs in enumerate(TOPIC_FIELDS):
            tf[t, list(fs)] = True
        self.topic_fields = tf
        # Rules by clause count c = 1, 2, 3 (row c - 1), -1 padded; and their counts.
        by = np.full((MAX_CONDS, N_RULES), -1, np.int32)
        for c in (1, 2, 3):
            idx = [i for i, r in enumerate(RULES) if len(r.conds) == c]
            by[c - 1, : len(idx)] = idx
        self.rules_by_nconds = by
        self.n_by_nconds = np.array(_counts(), np.int32)
        # Field domains.
        self.field_categorical = np.array([f.categorical for f in FIELDS], bool)
        self.field_size = np.array([len(f.values) for f in FIELDS], np.int32)
        self.field_lo_u = np.array([round(f.lo * f.inv) for f in FIELDS], np.int32)
        self.field_hi_u = np.array([round(f.hi * f.inv) for f in FIELDS], np.int32)
        self.field_inv = np.array([f.inv for f in FIELDS], np.float32)
        self.field_slot = np.array([f.slot for f in FIELDS], np.int32)


TABLES = _Tables()
FIELD_SLOT: np.ndarray = TABLES.field_slot

# --- the evaluator (device) ----------------------------------------------------------------


def _cond_holds(x: jax.Array, op: jax.Array, val: jax.Array, mask: jax.Array) -> jax.Array:
    code = jnp.clip(jnp.round(x), 0, 30).astype(jnp.int32)
    in_set = ((mask >> code) & 1) == 1
    return jnp.select(
        [op == k for k in range(len(OPS))],
        [x == val, x != val, x > val, x >= val, x < val, x <= val, in_set, ~in_set],
        False,
    )


def clause_holds(rules: jax.Array, context: jax.Array) -> jax.Array:
    """bool [..., MAX_CONDS]: each condition of the given rule indices on the context
    (padding conditions hold)."""
    t = TABLES
    field = jnp.asarray(t.cond_field)[rules]
    x = context[jnp.maximum(field, 0)]
    op, val, mask = (jnp.asarray(a)[rules] for a in (t.cond_op, t.cond_val, t.cond_mask))
    return _cond_holds(x, op, val, mask) | (field < 0)


def rule_matches(context: jax.Array) -> jax.Array:
    """bool [N_RULES]: every condition of the rule holds on the context."""
    return clause_holds(jnp.arange(N_RULES), context).all(-1)


def evaluate_full(topic: jax.Array, context: jax.Array):
    """(value, defined, winner): the topic's answer on the context (SPEC §9.1).

    ``first``: the first matching rule in rank order, else the default; ``sum``: the sum of
    the matching rules. ``defined`` is False only for a topic without a default where no
    rule applies; ``winner`` is the deciding rule index (first mode; -1 for the default or
    for sum topics). Only the topic's own rules are evaluated (generators call this per
    rejection try)."""
    t = TABLES
    rules = jnp.asarray(t.topic_rules)[topic]  # [MAX_TOPIC_RULES]
    live = rules >= 0
    match = clause_holds(jnp.maximum(rules, 0), context).all(-1) & live
    values = jnp.asarray(t.rule_value)[jnp.maximum(rules, 0)]
    any_match = match.any()
    first = jnp.argmax(match)
    is_sum = jnp.asarray(t.topic_sum)[topic]
    default = jnp.asarray(t.topic_default)[topic]
    has_default = jnp.asarray(t.topic_has_default)[topic]
    first_value = jnp.where(any_match, values[first], default)
    value = jnp.where(is_sum, jnp.where(match, values, 0.0).sum(), first_value)
    defined = is_sum | any_match | has_default
    winner = jnp.where(~is_sum & any_match, rules[first], -1)
    return value.astype(jnp.float32), defined, winner


def evaluate(topic: jax.Array, context: jax.Array) -> jax.Array:
    """The topic's answer on a full context (float32; categorical answers as codes)."""
    return evaluate_full(topic, context)[0]


# --- policy_search text (SPEC §9.4) --------------------------------------------------------

_STOP = "the a an of for to is on in my i do does how what much many can and or with this it me get"
STOP_WORDS = frozenset(_STOP.split())


def tokens(text: str) -> list[str]:
    """Lower-cased alphanumeric runs minus the stop words, in order (with repeats)."""
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP_WORDS]


def _value_text(topic: Topic, v: float | str) -> str:
    if topic.categorical:
        return f'"{v}"'
    if topic.unit in ("USD", "USD/yr"):
        return f"{float(v):.2f} {topic.unit}"
    unit = {"%": "%", "days": " days", "months": " months", "points": " points"}.get(topic.unit, "")
    return f"{float(v):g}{unit}"


def cond_text(cond: Cond) -> str:
    name, op, value = cond
    v = "{" + ", ".join(value) + "}" if isinstance(value, tuple) else str(value)
    return f"{name} {OP_SYMBOL[op]} {v}"


def rule_title(rule: Rule) -> str:
    topic = rule.topic.replace("_", " ")
    return f"{topic[0].upper()}{topic[1:]}: " + " and ".join(
        cond_text(c).replace("_", " ") for c in rule.conds
    )


def rule_text(rule: Rule) -> str:
    """E.g. "pol_024 (rank 1): IF membership_tier = premium AND order_total >= 100 THEN
    0.00 USD"."""
    topic = TOPICS[TOPIC_INDEX[rule.topic]]
    conds = " AND ".join(cond_text(c) for c in rule.conds)
    rank = RULE_RANK[RULES.index(rule)]
    return f"{rule.rule_id} (rank {rank}): IF {conds} THEN {_value_text(topic, rule.value)}"


def _json_value(v: object) -> object:
    return list(v) if isinstance(v, tuple) else v


def topic_record(t: int) -> dict:
    """The policy_search result object of one topic (SPEC §9.4)."""
    topic = TOPICS[t]
    return {
        "topic": topic.name,
        "question": topic.question,
        "mode": topic.mode,
        "default": topic.default,
        "unit": topic.unit or None,
        "answer_type": "categorical" if topic.categorical else "numeric",
        "fields": [FIELDS[f].name for f in TOPIC_FIELDS[t]],
        "rules": [
            {
                "rule_id": RULES[i].rule_id,
                "rank": RULE_RANK[i],
                "title": rule_title(RULES[i]),
                "conditions": [
                    {"field": c[0], "op": c[1], "value": _json_value(c[2])} for c in RULES[i].conds
                ],
                "value": RULES[i].value,
                "text": rule_text(RULES[i]),
            }
            for i in TOPIC_RULE_LISTS[t]
        ],
    }


def topic_text(t: int) -> str:
    """Everything policy_search matches against: id words, question, fields and their
    domain values, rule titles and conditions."""
    topic = TOPICS[t]
    parts = [topic.name.replace("_", " "), topic.question]
    for f in TOPIC_FIELDS[t]:
        parts.append(FIELDS[f].name)
        parts.extend(FIELDS[f].values)
    for i in TOPIC_RULE_LISTS[t]:
        parts.append(rule_title(RULES[i]))
        parts.extend(cond_text(c) for c in RULES[i].conds)
    return " ".join(parts)


_TOPIC_WORDS = [tokens(topic_text(t)) for t in range(N_TOPICS)]
TOPIC_TOKENS: tuple[frozenset[str], ...] = tuple(frozenset(ws) for ws in _TOPIC_WORDS)
# The policy-search vocabulary: every topic token, in first-appearance order.
QUESTION_WORDS: tuple[str, ...] = tuple(dict.fromkeys(w for ws in _TOPIC_WORDS for w in ws))
QUESTION_WORD_INDEX = {w: i for i, w in enumerate(QUESTION_WORDS)}
N_QUESTION_WORDS = len(QUESTION_WORDS)
OOV = -2  # a query token outside the vocabulary (still counts in |Q|)
W_TOPIC = np.zeros((N_TOPICS, N_QUESTION_WORDS), bool)
for _t, _ws in enumerate(TOPIC_TOKENS):
    W_TOPIC[_t, [QUESTION_WORD_INDEX[w] for w in _ws]] = True


def tokenize_query(text: str) -> list[int]:
    """Query text -> distinct token ids (first-appearance order), -2 per distinct unknown
    word, at most MAX_QUERY_TOKENS. Deduplicated here so each -2 is one distinct word."""
    out = [QUESTION_WORD_INDEX.get(w, OOV) for w in dict.fromkeys(tokens(text))]
    return out[: C.MAX_QUERY_TOKENS]


def query_array(text: str) -> np.ndarray:
    """int32 [MAX_QUERY_TOKENS] for Action.query_tokens, -1 padded."""
    out = np.full(C.MAX_QUERY_TOKENS, -1, np.int32)
    ids = tokenize_query(text)
    out[: len(ids)] = ids
    return out


# Each topic's question as a query (the oracle's policy_search argument).
QUESTION_TOKENS: np.ndarray = np.stack([query_array(t.question) for t in TOPICS])
