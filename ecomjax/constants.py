"""Protocol enums and static shapes of SPEC §1, §4 and §10, as host tuples.

Every device array stores indices into these tuples; text lives only on the host. The
catalog's word lists (taxonomy, brands, stores, attribute values, variant pools) are in
``ecomjax.catalog.vocabulary``.
"""

from __future__ import annotations

from enum import IntEnum

# --- task families (SPEC §0) -------------------------------------------------------------


class Env(IntEnum):
    """The built-in families' ids (array values). A family registered at run time
    (``ecomjax.registry.register``) takes the next id without a member here."""

    PD = 0
    SUB = 1
    CART = 2
    RETURN = 3
    STATUS = 4
    POLICY = 5
    BUNDLE = 6
    JOURNEY = 7


ENV_NAMES: tuple[str, ...] = tuple(e.name for e in Env)  # the built-in families, in id order


COLLECTIONS: dict[str, tuple[str, ...]] = {
    "C1": ("CART",),
    "C2": ("CART", "SUB"),
    "C4": ("CART", "SUB", "PD", "RETURN"),
    "C8": ENV_NAMES,
}

# --- policy categories (SPEC §1.3) -------------------------------------------------------
# Every catalog category maps to one (the taxonomy's last column); the policy rules and the
# return windows key on it.

POLICY_CATEGORIES: tuple[str, ...] = (
    "electronics",
    "clothing",
    "furniture",
    "groceries",
    "jewelry",
    "books",
    "toys",
    "sports",
    "beauty",
    "automotive",
    "appliances",
    "home",
)

# --- attributes (SPEC §1.2) --------------------------------------------------------------
# One id space for every constrainable attribute. Discrete ones first.


class Attr(IntEnum):
    CAT = 0
    BRAND = 1
    STORE = 2
    COLOR = 3
    SIZE = 4
    MATERIAL = 5
    CONNECTOR_TYPE = 6
    ITEM_FORM = 7
    SKIN_TYPE = 8
    FINISH_TYPE = 9
    AGE_RANGE = 10
    PRICE = 11
    RATING = 12
    RATING_COUNT = 13
    SHIP_DAYS = 14
    WATTAGE = 15
    WEIGHT_LBS = 16
    SCREEN_SIZE_INCHES = 17


ATTR_NAMES: tuple[str, ...] = tuple(a.name.lower() for a in Attr)
N_ATTRS = len(Attr)
# Discrete attributes stored in the catalog's [N, A_d] code matrix (color .. age_range).
DISC_ATTRS: tuple[Attr, ...] = (
    Attr.COLOR,
    Attr.SIZE,
    Attr.MATERIAL,
    Attr.CONNECTOR_TYPE,
    Attr.ITEM_FORM,
    Attr.SKIN_TYPE,
    Attr.FINISH_TYPE,
    Attr.AGE_RANGE,
)
# Numeric attributes stored in the catalog's [N, A_n] float matrix.
NUM_ATTRS: tuple[Attr, ...] = (Attr.WATTAGE, Attr.WEIGHT_LBS, Attr.SCREEN_SIZE_INCHES)
A_DISC = len(DISC_ATTRS)
A_NUM = len(NUM_ATTRS)

# Numeric constraint direction and precision (SPEC §1.2). +1 = gte, -1 = lte, 0 = either (keyed).
NUMERIC_OP: dict[Attr, int] = {
    Attr.PRICE: -1,
    Attr.RATING: +1,
    Attr.RATING_COUNT: +1,
    Attr.SHIP_DAYS: -1,
    Attr.WATTAGE: +1,
    Attr.WEIGHT_LBS: -1,
    Attr.SCREEN_SIZE_INCHES: 0,
}
NUMERIC_PRECISION: dict[Attr, float] = {
    Attr.PRICE: 0.01,
    Attr.RATING: 0.1,
    Attr.RATING_COUNT: 1.0,
    Attr.SHIP_DAYS: 1.0,
    Attr.WATTAGE: 1.0,
    Attr.WEIGHT_LBS: 0.1,
    Attr.SCREEN_SIZE_INCHES: 0.1,
}

# --- tools (SPEC §4.7) -------------------------------------------------------------------


class Tool(IntEnum):
    NONE = 0  # padding: no call in this slot
    CATALOG_SEARCH = 1
    CATALOG_RERANK = 2
    CATALOG_GET_PRODUCT = 3
    CATALOG_GET_VARIANTS = 4
    CATALOG_LIST_CATEGORIES = 5
    CART_VIEW = 6
    CART_ADD = 7
    CART_REMOVE = 8
    CART_SET_QUANTITY = 9
    ORDER_LIST = 10
    ORDER_GET_STATUS = 11
    RETURN_CHECK_ELIGIBILITY = 12
    RETURN_INITIATE = 13
    RETURN_EXCHANGE = 14
    RETURN_CANCEL = 15
    POLICY_SEARCH = 16
    DATETIME_NOW = 17
    USER_GET_VISIT_HISTORY = 18
    ASK_USER = 19


TOOL_NAMES: tuple[str, ...] = tuple(t.name.lower() for t in Tool)
N_TOOLS = len(Tool)


class SortBy(IntEnum):
    RELEVANCE = 0
    PRICE_ASC = 1
    RATING_DESC = 2
    SHIP_DAYS_ASC = 3


# Numeric search filters (SPEC §4.7): (attribute, +1 = minimum bound, -1 = maximum bound).
NUMERIC_FILTERS: tuple[tuple[str, Attr, int], ...] = (
    ("price_min", Attr.PRICE, +1),
    ("price_max", Attr.PRICE, -1),
    ("rating_min", Attr.RATING, +1),
    ("rating_max", Attr.RATING, -1),
    ("rating_count_min", Attr.RATING_COUNT, +1),
    ("ship_days_max", Attr.SHIP_DAYS, -1),
    ("wattage_min", Attr.WATTAGE, +1),
    ("wattage_max", Attr.WATTAGE, -1),
    ("weight_lbs_max", Attr.WEIGHT_LBS, -1),
    ("screen_size_inches_min", Attr.SCREEN_SIZE_INCHES, +1),
    ("screen_size_inches_max", Attr.SCREEN_SIZE_INCHES, -1),
)
N_NUM_FILTERS = len(NUMERIC_FILTERS)
# Discrete search filters: cat, brand, store, then the catalog's discrete attribute columns.
DISC_FILTERS: tuple[Attr, ...] = (Attr.CAT, Attr.BRAND, Attr.STORE, *DISC_ATTRS)
N_DISC_FILTERS = len(DISC_FILTERS)


class ToolError(IntEnum):
    """Business errors (SPEC §4.2): returned to the agent, never a hard fail."""

    NONE = 0
    UNKNOWN_PRODUCT = 1
    UNKNOWN_VARIANT = 2
    OUT_OF_STOCK = 3
    INSUFFICIENT_STOCK = 4
    UNKNOWN_LINE = 5
    UNKNOWN_ORDER = 6
    UNKNOWN_RETURN = 7
    INELIGIBLE = 8
    ALREADY_RETURNED = 9
    ALREADY_CANCELLED = 10
    CART_FULL = 11  # our addition: the cart holds at most MAX_CART_LINES lines
    TOO_MANY_RETURNS = 12  # our addition: an episode holds at most MAX_RETURNS returns


class HardFail(IntEnum):
    NONE = 0
    MALFORMED_ACTION = 1
    INVALID_TOOL_CALL = 2
    TOOL_BUDGET_EXCEEDED = 3
    INVALID_ANSWER = 4
    SAFETY_VIOLATION = 5


class Termination(IntEnum):
    RUNNING = 0
    AGENT_DONE = 1
    T_MAX = 2
    USER_QUIT = 3
    HARD_FAIL = 4


TERMINATION_NAMES = ("running", "agent_done", "t_max", "user_quit", "hard_fail")

# --- customer (SPEC §10) -----------------------------------------------------------------


class Slot(IntEnum):
    CATEGORY = 0
    NUM_RESULTS = 1
    PRIORITY = 2
    ORIGINAL = 3
    PRICE = 4
    RATING = 5
    RATING_COUNT = 6
    SHIP_DAYS = 7
    BRAND = 8
    STORE = 9
    COLOR = 10
    SIZE = 11
    MATERIAL = 12
    CONNECTOR_TYPE = 13
    ITEM_FORM = 14
    SKIN_TYPE = 15
    FINISH_TYPE = 16
    AGE_RANGE = 17
    WATTAGE = 18
    WEIGHT_LBS = 19
    SCREEN_SIZE_INCHES = 20
    ITEMS = 21
    VARIANT = 22
    QUANTITY = 23
    REASON = 24
    PURCHASE_DATE = 25
    REPLACEMENT = 26
    RETURN_METHOD = 27
    ORDER_REFERENCE = 28
    BUDGET = 29
    TOPIC = 30
    PRODUCT_CATEGORY = 31
    MEMBERSHIP_TIER = 32
    SHIPPING_METHOD = 33
    DESTINATION = 34
    ORDER_TOTAL = 35
    ITEM_WEIGHT_LBS = 36
    PURCHASE_CHANNEL = 37
    COMPETITOR_TYPE = 38
    ORDER_TYPE = 39
    ITEM_STATUS = 40
    COUPON_TYPE = 41
    CUSTOMER_TYPE = 42
    ITEM_CONDITION = 43
    ANNUAL_SPEND = 44
    DAYS_SINCE_SIGNUP = 45
    IS_BIRTHDAY_MONTH = 46
    ITEM_PRICE = 47


SLOT_NAMES: tuple[str, ...] = tuple(s.name.lower() for s in Slot)
N_SLOTS = len(Slot)


class Act(IntEnum):
    """Customer dialogue acts (SPEC §10.2); a reply is a set of these, rendered in this order."""

    INFORM = 0  # opening, or a JOURNEY sub-goal introduction
    INFORM_UPDATE = 1
    CLARIFY = 2
    CONFIRM = 3
    CORRECT = 4
    SWITCH = 5
    DONE = 6
    ACK = 7
    QUIT = 8


N_ACTS = len(Act)


class ClarifyStatus(IntEnum):
    """What a CLARIFY says about one requested slot."""

    NOT_ASKED = 0
    VALUE = 1  # the slot's value (pending or already stated)
    NO_PREFERENCE = 2  # the goal lacks this slot
    NOT_UNDERSTOOD = 3  # the slot does not apply to this env
    NOT_MINE = 4  # CART, product-scoped ask about a non-target product


class CartIssue(IntEnum):
    """Per-item CORRECT issues for CART, in precedence order (SPEC §10.2)."""

    NONE = 0
    WRONG_VARIANT = 1
    MISSING = 2
    QTY_LOW = 3
    QTY_HIGH = 4


class ReturnIssue(IntEnum):
    """RETURN CORRECT issues (SPEC §10.2), in listing order."""

    WRONG_LINE = 0
    WRONG_REASON = 1  # reveals the reason
    WRONG_METHOD = 2  # reveals the method
    REPLACEMENT_CONSTRAINT = 3  # reveals the violated constraint(s)
    REPLACEMENT_UNWANTED = 4
    REPLACEMENT_MISSING = 5


N_RET_ISSUES = len(ReturnIssue)
# A family's CONFIRM / CORRECT feedback (ecomjax.family.Feedback): the issue flags one
# CORRECT can name (RETURN's six) and the things the customer remembers confirming.
MAX_FEEDBACK_ISSUES = N_RET_ISSUES


class DescForm(IntEnum):
    """Which identifying description (SPEC §8.0) names a product."""

    NONE = 0
    SHORT = 1  # synthetic "{Brand} {Noun}"
    MEDIUM = 2  # synthetic "{Adj} {Brand} {Noun}"
    TITLE = 3  # the full title


# --- difficulty and static maxima (SPEC §2, §4.8) ----------------------------------------

D_MAX = 20
MAX_CONSTRAINTS = 12
MAX_K_REC = 10
MAX_ITEMS = 5
MAX_TOOL_CALLS = 11
MAX_SUBGOALS = 5
MAX_ORDERS = 12
MAX_ORDER_LINES = 5
MAX_BUNDLE_SLOTS = 12
MAX_CART_LINES = 32
MAX_VARIANTS = 4
MAX_SEARCH_RESULTS = 200  # top_k(d) <= 200 at every d, so no search ever returns more
MAX_ANSWER_IDS = 50
MAX_HISTORY = 16  # CART: 5 targets + max(3, 2*5) distractors
MAX_RETURNS = 8
MAX_CONFIRMED = MAX_RETURNS  # Feedback.confirmed: RETURN confirms each return once
MAX_USED_IDS = 128
# Hallucinated answer ids become unknown ids at and below this (world.unknown_if_hallucinated),
# clear of the host's codes for made-up strings (-2 down to -2 - 2**16).
HALLUCINATED_BASE = -(1 << 20)
MAX_EVENTS = 32
MAX_PRESENTED = 8
EMBED_DIM = 384
MAX_QUERY_TOKENS = 32  # policy_search query tokens (SPEC §9.4)

# Keyed-draw streams (SPEC §12).
STREAM = {
    "PROBLEM": 2,
    "VARIANT": 3,
    "ORDERS": 4,
    "TIME": 5,
    "OMIT": 6,
    "TEMPLATE": 7,
    "NOISE": 8,
    "SEARCH": 9,
    "SHOCK": 10,
    "SWITCH": 11,
    "HISTORY": 12,
    "PERSONA": 13,
    "ACCOUNT": 14,
    "CURRICULUM": 15,
}
