"""Customer acts -> customer text (SPEC §11 templates), one reply at a time.

Why a renderer of its own: the customer's decisions are structured acts computed on
device (``ecomjax.customer``); the words are not scored. The renderer may therefore use
only what an act states plus public host tables (catalog strings, category names, policy
phrases); it never sees the hidden goal. Products are named by the act's identifying
description (form and key, SPEC §8.0), which ``Lexicon`` turns into text, never by index.

Rules kept here (SPEC §11):
- the canonical strings are the quoted ones of §8 and §10.2, with the phrases of §1.2
  (constraints), §9.3 (policy facts) and a fixed phrase per reason / method / priority;
- variants are drawn from the TEMPLATE stream keyed by the message index; every variant of
  a sentence states the same values;
- a phrase whose slot the act omits is dropped whole; a *required* slot without a value is
  a generator bug and raises ``MissingSlot``; no placeholder is ever emitted;
- every slot value the act states appears in the text ("stated equals rendered"): a value
  no section claims is still said, in a closing catch-all sentence;
- values are wrapped in ``noise`` markers: protected in CLARIFY and CORRECT, noise-free
  (quiet) in CONFIRM, DONE, ACK and QUIT; punctuation and whitespace are normalised last.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from ecomjax import constants as C
from ecomjax import policy_rules as P
from ecomjax.catalog.synthetic import describe
from ecomjax.catalog.types import Catalog, CatalogTables
from ecomjax.catalog.vocabulary import VOCAB
from ecomjax.constraints import CONSTRAINT_SLOTS, SLOT_ATTR
from ecomjax.envs.bundle.generator import PROJECTS
from ecomjax.family import Family
from ecomjax.llm_bridge.noise import PROTECT, QUIET, VALUE, strip_markers
from ecomjax.order_history import METHOD_NAMES, REASON_NAMES
from ecomjax.registry import by_env, next_env

S = C.Slot
A = C.Attr
E = C.Env
ACT = C.Act
CS = C.ClarifyStatus
CI = C.CartIssue
RI = C.ReturnIssue

EPOCH = _dt.date(2025, 1, 1)  # day 0 of the episode calendar (SPEC §1.7)


class MissingSlot(ValueError):
    """A template's required slot has no value in the act (a generator bug, SPEC §11)."""


# --- fixed phrases ---------------------------------------------------------------------------

PRIORITY_WORDS = ("cheapest", "best-rated", "fastest-shipping")
REASON_PHRASES: dict[str, str] = {
    "defective": "it's defective",
    "wrong_item": "I received the wrong item",
    "not_as_described": "it's not as described",
    "changed_mind": "I changed my mind",
    "too_large": "it's too large",
    "too_small": "it's too small",
    "arrived_late": "it arrived late",
    "better_price_found": "I found a better price elsewhere",
}
METHOD_PHRASES: dict[str, str] = {"mail": "by mail", "in_store": "in store", "pickup": "by pickup"}
assert set(REASON_PHRASES) == set(REASON_NAMES) and set(METHOD_PHRASES) == set(METHOD_NAMES)

# SPEC §1.2 user phrases of the discrete attributes ({v} is the value).
DISC_PHRASES: dict[int, str] = {
    A.BRAND: "from {v}",
    A.STORE: "sold by {v}",
    A.COLOR: "in {v}",
    A.SIZE: "in size {v}",
    A.MATERIAL: "made of {v}",
    A.CONNECTOR_TYPE: "with a {v} connector",
    A.ITEM_FORM: "in {v} form",
    A.SKIN_TYPE: "for {v} skin",
    A.FINISH_TYPE: "with a {v} finish",
    A.AGE_RANGE: "for ages {v}",
}
# Numeric attributes: (phrase with {op} = "least" / "most", decimals, money).
NUM_PHRASES: dict[int, tuple[str, int, bool]] = {
    A.PRICE: ("priced at {op} {v}", 2, True),
    A.RATING: ("rated at {op} {v} stars", 1, False),
    A.RATING_COUNT: ("with at {op} {v} reviews", 0, False),
    A.SHIP_DAYS: ("that ships within {v} days", 0, False),
    A.WATTAGE: ("with at {op} {v} W", 0, False),
    A.WEIGHT_LBS: ("weighing at {op} {v} lb", 1, False),
    A.SCREEN_SIZE_INCHES: ("with a screen of at {op} {v} inches", 1, False),
}
# A synthesized CART variant names one exact value (SPEC §8.3).
VARIANT_NUM_PHRASES: dict[int, str] = {
    A.WATTAGE: "in the {v} W version",
    A.WEIGHT_LBS: "in the {v} lb version",
    A.SCREEN_SIZE_INCHES: "with a {v}-inch screen",
}
SLOT_LABELS: dict[int, str] = {
    **{s: s.name.lower().replace("_", " ") for s in S},
    S.NUM_RESULTS: "number of results",
    S.ORDER_REFERENCE: "order",
    S.ITEMS: "items",
    S.ITEM_WEIGHT_LBS: "item weight",
    S.WEIGHT_LBS: "weight",
    S.SCREEN_SIZE_INCHES: "screen size",
}
POLICY_FIELD_OF_SLOT: dict[int, int] = {int(s): f for f, s in enumerate(P.FIELD_SLOT)}
CART_SLOTS = (S.ITEMS, S.VARIANT, S.QUANTITY)
ACT_NAMES: tuple[str, ...] = tuple(a.name.lower() for a in ACT)
# Acts whose text noise may touch (SPEC §11); the others are rendered quiet.
NOISY_ACTS = (ACT.INFORM, ACT.INFORM_UPDATE, ACT.CLARIFY, ACT.CORRECT, ACT.SWITCH)


def day_text(day: float) -> str:
    """An episode day number (days since 2025-01-01) as an ISO date."""
    return (EPOCH + _dt.timedelta(days=int(round(float(day))))).isoformat()


def number_text(v: float, decimals: int) -> str:
    return f"{float(v):.{decimals}f}" if decimals else str(int(round(float(v))))


def money_text(v: float) -> str:
    return f"${float(v):.2f}"


def exact_text(v: float) -> str:
    """A variant's numeric value without trailing zeros (as in its id, SPEC §8.3)."""
    return f"{float(np.float32(v)):.4f}".rstrip("0").rstrip(".")


# --- host strings ----------------------------------------------------------------------------


@dataclass
class Lexicon:
    """Host strings of one catalog: category names, attribute values and identifying
    descriptions by (form, key). Built once per catalog and shared by its sessions."""

    catalog: Catalog = field(repr=False)  # numpy leaves (``jax.device_get``)
    tables: CatalogTables = field(repr=False)
    _sorted: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list, repr=False)

    @classmethod
    def from_catalog(cls, catalog: Catalog, tables: CatalogTables) -> Lexicon:
        host = jax.device_get(catalog)
        keys = np.asarray(host.desc_key)
        order = [np.argsort(keys[:, f], kind="stable") for f in range(3)]
        srt = [(keys[o, f], o) for f, o in enumerate(order)]
        return cls(host, tables, srt)

    def product_for(self, form: int, key: int) -> int:
        """Some product whose description of ``form`` has ``key`` (all such products read
        the same), or -1."""
        if not 1 <= form <= 3 or key < 0:
            return -1
        keys, order = self._sorted[form - 1]
        j = int(np.searchsorted(keys, key))
        return int(order[j]) if j < len(keys) and int(keys[j]) == key else -1

    def describe(self, form: int, key: int) -> str:
        """The identifying description text; form 0 with a key means the full title (a
        product whose shorter forms are ambiguous, SPEC §8.0)."""
        form = int(form) if int(form) > 0 else int(C.DescForm.TITLE)
        i = self.product_for(form, int(key))
        if i < 0:
            raise MissingSlot(f"no product has description key {key} of form {form}")
        return describe(self.catalog, self.tables, i, form)

    def category(self, c: float) -> str:
        i = int(round(float(c)))
        if not 0 <= i < len(self.tables.cat_display):
            raise MissingSlot(f"unknown category {c}")
        return self.tables.cat_display[i]

    def disc_value(self, attr: int, code: float) -> str:
        i = int(round(float(code)))
        if attr == A.CAT:
            return self.category(i)
        names = {A.BRAND: self.tables.brands, A.STORE: self.tables.stores}.get(attr)
        if names is None:
            names = self.tables.vocab.get(int(attr)) or list(VOCAB.get(A(attr), ()))
        if not 0 <= i < len(names):
            raise MissingSlot(f"unknown {C.ATTR_NAMES[attr]} code {code}")
        return str(names[i]).replace("_", " ")


@dataclass
class EpisodeText:
    """What the renderer knows of one episode beyond its acts: the catalog strings, the
    env, and (JOURNEY) the family of each sub-goal row, which only picks wording."""

    lexicon: Lexicon = field(repr=False)
    env: int
    sub_envs: tuple[int, ...] = ()

    def row_env(self, row: int) -> int:
        if self.env != E.JOURNEY:
            return int(self.env)
        if 0 <= row < len(self.sub_envs) and self.sub_envs[row] >= 0:
            return int(self.sub_envs[row])
        raise MissingSlot(f"JOURNEY sub-goal {row} has no family")

    def feedback_row(self) -> tuple[Family, int]:
        """The family whose ``feedback`` hook gave the act's CONFIRM / CORRECT flags and its
        sub-goal row (the engine's rule: the episode's family, or JOURNEY's sub-goal with a
        hook)."""
        if self.env != E.JOURNEY:
            rows = [(0, int(self.env))] if 0 <= self.env < next_env() else []
        else:
            rows = [(r, int(e)) for r, e in enumerate(self.sub_envs) if 0 <= e < next_env()]
        for row, env in rows:
            if by_env(env).feedback is not None:
                return by_env(env), row
        raise MissingSlot(f"feedback flags in env {self.env}, whose families give none")


@dataclass(frozen=True)
class Utterance:
    """One rendered customer reply. ``marked`` keeps the noise markers; ``values`` lists the
    text of every value stated (for the stated-equals-rendered checks)."""

    marked: str
    acts: tuple[str, ...]
    values: tuple[str, ...]

    @property
    def text(self) -> str:
        return strip_markers(self.marked)


# --- normalisation -----------------------------------------------------------------------------

_MARK = "[\x02-\x05\x0e\x0f]*"
_SPACE_BEFORE_PUNCT = re.compile(rf"\s+({_MARK}[.,!?;:])")
_SPACES = re.compile(r"\s+")


def normalise(marked: str) -> str:
    """Whitespace collapsed and no space before punctuation (markers are kept)."""
    out = _SPACES.sub(" ", marked).strip()
    return _SPACE_BEFORE_PUNCT.sub(r"\1", out)


def join_phrases(phrases: Sequence[str], conj: str = "and") -> str:
    """ "a", "a and b", "a, b and c"."""
    ps = [p for p in phrases if p]
    if len(ps) <= 1:
        return "".join(ps)
    return ", ".join(ps[:-1]) + f" {conj} " + ps[-1]


# --- the reply builder ---------------------------------------------------------------------------


def _host(act: Any) -> Any:
    return jax.tree_util.tree_map(np.asarray, act)


class _Reply:
    """Renders one reply. ``protect`` is the current section's value mode."""

    def __init__(self, act: Any, ep: EpisodeText, rng: Any, mid_task: bool):
        self.a = _host(act)
        self.ep = ep
        self.lex = ep.lexicon
        self.rng = rng
        self.mid_task = mid_task
        self.protect = False
        self.values: list[str] = []
        self.said: set[tuple[int, int]] = set()  # (row, slot) rendered
        self.updates_said = False  # INFORM-update sentences already in this reply

    # -- values -------------------------------------------------------------------------

    def val(self, text: str) -> str:
        if not text or any(c in text for c in "\x02\x03\x04\x05\x0e\x0f"):
            raise MissingSlot(f"empty or unprintable value {text!r}")
        self.values.append(text)
        o, c = PROTECT if self.protect else VALUE
        return f"{o}{text}{c}"

    def pick(self, *variants: str) -> str:
        return variants[int(self.rng.integers(len(variants)))]

    def stated(self, row: int, slot: int) -> bool:
        return bool(self.a.slot_stated[row, slot])

    def value(self, row: int, slot: int) -> float:
        if not self.stated(row, slot):
            raise MissingSlot(f"slot {C.SLOT_NAMES[slot]} of sub-goal {row} is not stated")
        self.said.add((row, slot))
        return float(self.a.slot_value[row, slot])

    def opt(self, row: int, slot: int, fn: Callable[[float], str]) -> str:
        """``fn(value)`` if the slot is stated, else "" (the phrase is dropped whole)."""
        return fn(self.value(row, slot)) if self.stated(row, slot) else ""

    def ref(self, row: int) -> str:
        form, key = int(self.a.ref_form[row]), int(self.a.ref_key[row])
        if form <= 0 or key < 0:
            raise MissingSlot(f"sub-goal {row} names no product")
        return self.val(self.lex.describe(form, key))

    # -- slot phrases -------------------------------------------------------------------

    def constraint(self, row: int, slot: int) -> str:
        attr = int(SLOT_ATTR[slot])
        v = self.value(row, slot)
        if attr in DISC_PHRASES:
            return DISC_PHRASES[attr].format(v=self.val(self.lex.disc_value(attr, v)))
        phrase, decimals, money = NUM_PHRASES[attr]
        text = money_text(v) if money else number_text(v, decimals)
        op = int(self.a.slot_op[row, slot])
        if attr == A.SHIP_DAYS and op > 0:
            phrase = "that ships in at least {v} days"
        return phrase.format(op="least" if op > 0 else "most", v=self.val(text))

    def constraints(self, row: int) -> list[str]:
        return [self.constraint(row, s) for s in CONSTRAINT_SLOTS if self.stated(row, s)]

    def category(self, row: int) -> str:
        return self.val(self.lex.category(self.value(row, S.CATEGORY)))

    def reason(self, row: int) -> str:
        code = int(self.value(row, S.REASON))
        return self.val(REASON_PHRASES[REASON_NAMES[_index(code, REASON_NAMES)]])

    def method(self, row: int) -> str:
        code = int(self.value(row, S.RETURN_METHOD))
        return self.val(METHOD_PHRASES[METHOD_NAMES[_index(code, METHOD_NAMES)]])

    def policy_fact(self, f: int, v: float) -> str:
        if not 0 <= f < P.N_FIELDS:
            raise MissingSlot(f"unknown policy field {f}")
        return self.val(P.phrase(f, v))

    def order_reference(self, row: int) -> str:
        v = self.value(row, S.ORDER_REFERENCE)
        if v >= 0:
            return "order " + self.val(f"ord_{int(v) + 1:03d}")
        return "my order with the " + self.ref(row)

    # -- CART items ---------------------------------------------------------------------

    def item_desc(self, i: int) -> str:
        form, key = int(self.a.item_desc_form[i]), int(self.a.item_desc_key[i])
        if form <= 0 or key < 0:
            raise MissingSlot(f"CART item {i} has no description")
        return self.val(self.lex.describe(form, key))

    def variant(self, i: int) -> str:
        attr = int(self.a.item_var_attr[i])
        v = float(self.a.item_var_value[i])
        if attr in VARIANT_NUM_PHRASES:
            return VARIANT_NUM_PHRASES[attr].format(v=self.val(exact_text(v)))
        if attr in DISC_PHRASES:
            return DISC_PHRASES[attr].format(v=self.val(self.lex.disc_value(attr, v)))
        raise MissingSlot(f"CART item {i} has no variant attribute")

    def item(self, i: int) -> str:
        parts = [self.item_desc(i)]
        qty = int(self.a.item_qty[i])
        if qty >= 0:
            parts.append(f"(x{self.val(str(qty))})")
        if int(self.a.item_var_attr[i]) >= 0:
            parts.append(self.variant(i))
        elif bool(self.a.item_var_nopref[i]):
            parts.append("(any variant is fine)")
        return " ".join(parts)

    def listed_items(self) -> list[int]:
        """Mentioned items, less those an INFORM-update drops (sold out, need 0)."""
        a = self.a
        return [
            i
            for i in range(C.MAX_ITEMS)
            if a.item_valid[i] and not (a.item_update[i] and int(a.item_qty[i]) == 0)
        ]

    def qty_of(self, i: int) -> str:
        qty = int(self.a.item_qty[i])
        if qty < 0:
            raise MissingSlot(f"CART item {i}: quantity not stated")
        return self.val(str(qty))

    def updates(self) -> list[str]:
        if self.updates_said:
            return []
        self.updates_said = True
        out = []
        for i in range(C.MAX_ITEMS):
            if not (self.a.item_valid[i] and self.a.item_update[i]):
                continue
            desc, qty = self.item_desc(i), int(self.a.item_qty[i])
            if qty == 0:
                out.append(f"The {desc} just sold out — leave it out.")
            else:
                out.append(f"The {desc} just sold out — I'll keep the {self.qty_of(i)} in my cart.")
        return out

    # -- openings (INFORM, SWITCH) -------------------------------------------------------

    def opening(self, row: int, env: int) -> str:
        fn = {
            E.PD: self.open_pd,
            E.SUB: self.open_sub,
            E.CART: lambda r: self.open_cart(),
            E.RETURN: self.open_return,
            E.STATUS: self.open_status,
            E.POLICY: self.open_policy,
            E.BUNDLE: self.open_bundle,
        }.get(env)
        if fn is not None:
            return fn(row)
        # A family these templates do not word (registry.register): its descriptor's line;
        # the slots it states follow as the generic phrases (``leftovers``).
        if 0 <= env < next_env() and by_env(env).opening:
            return by_env(env).opening
        raise MissingSlot(f"no opening for env {env}")

    def open_pd(self, row: int) -> str:
        cat = self.category(row)
        cons = join_phrases(self.constraints(row))
        prio = self.opt(
            row,
            S.PRIORITY,
            lambda v: (
                f"Show me the {self.val(PRIORITY_WORDS[_index(v, PRIORITY_WORDS)])} options first."
            ),
        )
        k = self.val(number_text(self.value(row, S.NUM_RESULTS), 0))
        first = self.pick(f"I'm looking for {cat} {cons}.", f"Hi! I need {cat} {cons}.")
        last = self.pick(f"Please suggest your top {k}.", f"Could you suggest your top {k}?")
        return f"{first} {prio} {last}"

    def open_sub(self, row: int) -> str:
        orig = self.ref(row)
        self.said.add((row, S.ORIGINAL))
        k = self.val(number_text(self.value(row, S.NUM_RESULTS), 0))
        cat = self.category(row)
        cons = join_phrases(self.constraints(row))
        return self.pick(
            f"The {orig} I wanted is out of stock. Can you suggest {k} similar {cat} "
            f"alternatives {cons}?",
            f"Unfortunately the {orig} I wanted is out of stock. Could you find {k} similar "
            f"{cat} alternatives {cons}?",
        )

    def open_cart(self) -> str:
        items = [self.item(i) for i in self.listed_items()]
        ups = self.updates()
        if not items and not ups:
            raise MissingSlot("a CART opening without items")
        lead = ""
        if items:
            lead = self.pick(
                f"Please add these to my cart: {join_phrases(items)}.",
                f"Can you put these in my cart: {join_phrases(items)}?",
            )
        return " ".join([lead, *ups])

    def open_return(self, row: int) -> str:
        desc = self.ref(row)
        self.said.add((row, S.ITEMS))
        date = self.opt(row, S.PURCHASE_DATE, lambda v: f"I ordered on {self.val(day_text(v))}")
        reason = self.opt(row, S.REASON, lambda v: f"Reason: {self.reason(row)}.")
        cons = join_phrases(self.constraints(row))
        rep = ""
        if self.stated(row, S.REPLACEMENT):
            if self.value(row, S.REPLACEMENT) > 0.5:
                what = (
                    f"a different {self.category(row)} as a replacement"
                    if self.stated(row, S.CATEGORY)
                    else "a replacement"
                )
                rep = f"I'd also like {what} {cons}."
            else:
                rep = "I don't need a replacement."
        elif cons or self.stated(row, S.CATEGORY):
            cat = self.opt(row, S.CATEGORY, lambda v: f"a different {self.category(row)}")
            rep = f"For a replacement, I'd want {cat or 'one'} {cons}."
        method = self.opt(
            row, S.RETURN_METHOD, lambda v: f"I'd prefer to return it {self.method(row)}."
        )
        return f"I'd like to return the {desc} {date}. {reason} {rep} {method}"

    def open_status(self, row: int) -> str:
        ref = self.order_reference(row)
        return self.pick(
            f"Hi, can you check the status of {ref}?", f"Hello, what's the status of {ref}?"
        )

    def facts(self, row: int, skip: frozenset[int] = frozenset()) -> list[str]:
        """Context facts stated for the POLICY row (less the ``skip`` slots, said on their
        own), and the distractor facts, shuffled."""
        out = []
        for slot, f in POLICY_FIELD_OF_SLOT.items():
            if self.stated(row, slot) and slot not in skip:
                out.append(self.policy_fact(f, self.value(row, slot)))
        for f, v in zip(self.a.fact_field, self.a.fact_value, strict=True):
            if int(f) >= 0:
                out.append(self.policy_fact(int(f), float(v)))
        return [out[i] for i in self.rng.permutation(len(out))]

    def topic(self, row: int) -> str:
        t = int(round(self.value(row, S.TOPIC)))
        if not 0 <= t < P.N_TOPICS:
            raise MissingSlot(f"unknown policy topic {t}")
        return self.val(P.TOPICS[t].question)

    def open_policy(self, row: int) -> str:
        facts = self.facts(row)
        return " ".join([*facts, self.topic(row)])

    def bundle_cats(self) -> list[str]:
        cats = [self.val(self.lex.category(c)) for c in self.a.cats if int(c) >= 0]
        if not cats:
            raise MissingSlot("a BUNDLE request without categories")
        return cats

    def project(self, row: int) -> str:
        p = int(round(self.value(row, S.ITEMS)))
        if not 0 <= p < len(PROJECTS):
            raise MissingSlot(f"unknown BUNDLE project {p}")
        return self.val(PROJECTS[p][0])

    def budget(self, row: int) -> str:
        return f"My total budget is {self.val(money_text(self.value(row, S.BUDGET)))}."

    def open_bundle(self, row: int) -> str:
        proj = self.project(row)
        cats = ", ".join(self.bundle_cats())
        budget = self.opt(row, S.BUDGET, lambda v: self.budget(row))
        return f"I'm putting together a {proj}. I need one item from each of: {cats}. {budget}"

    # -- CLARIFY -------------------------------------------------------------------------

    def clarify(self) -> str:
        a = self.a
        row = int(a.subgoal)
        env = self.ep.row_env(row)
        status = a.slot_status
        out: list[str] = []
        cart_value = env == E.CART and any(int(status[s]) == CS.VALUE for s in CART_SLOTS)
        if cart_value:
            items = [self.item(i) for i in self.listed_items()]
            if not items:
                raise MissingSlot("a CART CLARIFY without items")
            out.append(
                self.pick(
                    f"My items are: {join_phrases(items)}.", f"I need: {join_phrases(items)}."
                )
            )
        cons: list[str] = []
        nopref: list[str] = []
        unclear: list[str] = []
        for s in S:
            st = int(status[s])
            if st == CS.NOT_ASKED:
                continue
            if st == CS.NO_PREFERENCE:
                nopref.append(self.val(SLOT_LABELS[s]))
            elif st == CS.NOT_UNDERSTOOD:
                unclear.append(self.val(SLOT_LABELS[s]))
            elif st == CS.NOT_MINE:
                if s == min(x for x in S if int(status[x]) == CS.NOT_MINE):
                    out.append(f"{self.val('That is not one of my items')}.")
            elif env == E.CART and s in CART_SLOTS:
                continue
            elif s in CONSTRAINT_SLOTS:
                cons.append(self.constraint(row, s))
            else:
                out.append(self.clarify_slot(row, env, s))
        if nopref:
            out.append(
                self.pick(
                    f"I have no preference on {join_phrases(nopref)}.",
                    f"Any {join_phrases(nopref, 'or')} is fine.",
                )
            )
        if unclear:
            out.append(f"I'm not sure what you mean by {join_phrases(unclear, 'or')}.")
        if cons:
            lead = "For the replacement, I want one" if env == E.RETURN else "I want one"
            out.append(f"{lead} {join_phrases(cons)}.")
        if not out:
            raise MissingSlot("a CLARIFY that answers no slot")
        return " ".join(out)

    def clarify_slot(self, row: int, env: int, s: int) -> str:
        if s == S.CATEGORY:
            if env == E.RETURN:
                return f"The replacement should be a different {self.category(row)}."
            return f"I'm looking for {self.category(row)}."
        if s == S.NUM_RESULTS:
            return f"Please suggest your top {self.val(number_text(self.value(row, s), 0))}."
        if s == S.PRIORITY:
            word = PRIORITY_WORDS[_index(self.value(row, s), PRIORITY_WORDS)]
            return f"Show me the {self.val(word)} options first."
        if s == S.ORIGINAL:
            self.value(row, s)
            return f"The one I wanted was the {self.ref(row)}."
        if s == S.ITEMS:
            if env == E.RETURN:
                self.value(row, s)
                return f"I want to return the {self.ref(row)}."
            if env == E.BUNDLE:
                cats = ", ".join(self.bundle_cats())
                return f"It's for a {self.project(row)}: I need one item from each of: {cats}."
        if s == S.REASON:
            return f"I'm returning it because {self.reason(row)}."
        if s == S.PURCHASE_DATE:
            return f"I ordered it on {self.val(day_text(self.value(row, s)))}."
        if s == S.REPLACEMENT:
            if self.value(row, s) > 0.5:
                return f"{self.val('Yes, I would like a replacement')}."
            return f"{self.val('I do not need a replacement')}."
        if s == S.RETURN_METHOD and env == E.RETURN:
            return f"I'd prefer to return it {self.method(row)}."
        if s == S.ORDER_REFERENCE:
            return f"It's {self.order_reference(row)}."
        if s == S.BUDGET:
            return self.budget(row)
        if s == S.TOPIC:
            asked = frozenset(int(x) for x in np.flatnonzero(self.a.slot_status == CS.VALUE))
            facts = self.facts(row, skip=asked - {S.TOPIC})
            return " ".join([*facts, f"My question is: {self.topic(row)}"])
        if s in POLICY_FIELD_OF_SLOT and env == E.POLICY:
            return self.policy_fact(POLICY_FIELD_OF_SLOT[s], self.value(row, s))
        raise MissingSlot(f"no CLARIFY template for slot {C.SLOT_NAMES[s]} in env {env}")

    # -- CONFIRM / CORRECT ----------------------------------------------------------------

    def confirm(self) -> str:
        a = self.a
        out = [
            f"Yes, that's my {self.item_desc(i)}." for i in range(C.MAX_ITEMS) if a.item_confirm[i]
        ]
        if a.cart_confirm:
            out.append(
                self.pick("Yes, my cart is exactly right now.", "Perfect, that's exactly my cart.")
            )
        if a.feedback_confirm:
            fam, _ = self.ep.feedback_row()
            out.append(self._own_wording(fam, fam.confirm_text, "confirm_text"))
        if not out:
            raise MissingSlot("a CONFIRM that confirms nothing")
        return " ".join(out)

    def correct(self) -> str:
        a = self.a
        out: list[str] = []
        for i in range(C.MAX_ITEMS):
            issue = int(a.item_issue[i])
            if issue == CI.NONE:
                continue
            desc = self.item_desc(i)
            if issue == CI.WRONG_VARIANT:
                if int(a.item_var_attr[i]) < 0:
                    raise MissingSlot(f"wrong_variant without the needed variant (item {i})")
                out.append(f"The {desc} is the wrong variant — I need it {self.variant(i)}.")
            elif issue == CI.MISSING:
                need = f" — I need {self.qty_of(i)}" if int(a.item_qty[i]) > 0 else ""
                out.append(f"The {desc} is missing from my cart{need}.")
            elif issue == CI.QTY_LOW:
                out.append(f"I need {self.qty_of(i)} of the {desc}, not fewer.")
            elif issue == CI.QTY_HIGH:
                out.append(f"I only need {self.qty_of(i)} of the {desc}.")
        for form, key, kind in zip(a.extra_form, a.extra_key, a.extra_kind, strict=True):
            if int(kind) == 0:
                continue
            desc = self.val(self.lex.describe(int(form), int(key)))
            out.append(
                f"I didn't ask for the {desc}."
                if int(kind) == 1
                else f"The {desc} isn't one of my items."
            )
        out.extend(self.feedback_issues())
        if not out:
            raise MissingSlot("a CORRECT without issues")
        return " ".join(out)

    def feedback_issues(self) -> list[str]:
        a = self.a
        if not a.feedback_issues.any():
            return []
        fam, row = self.ep.feedback_row()
        if fam.env == E.RETURN:
            return self.return_issues(row)
        flagged = np.flatnonzero(a.feedback_issues)
        if flagged[-1] >= len(fam.issue_text):
            raise MissingSlot(f"{fam.name} issue {flagged[-1]} has no issue_text")
        return [self._own_wording(fam, fam.issue_text[k], "issue_text") for k in flagged]

    @staticmethod
    def _own_wording(fam: Family, text: str, what: str) -> str:
        """A line the family's descriptor holds (a CONFIRM, a registered family's issue)."""
        if not text:
            raise MissingSlot(f"{fam.name} gives feedback but no {what}")
        return text

    def return_issues(self, row: int) -> list[str]:
        a = self.a
        out = []
        if a.feedback_issues[RI.WRONG_LINE]:
            out.append("That's not the item I wanted to return.")
        if a.feedback_issues[RI.WRONG_REASON]:
            out.append(f"That's the wrong reason — I'm returning it because {self.reason(row)}.")
        if a.feedback_issues[RI.WRONG_METHOD]:
            out.append(f"I wanted to return it {self.method(row)}.")
        if a.feedback_issues[RI.REPLACEMENT_CONSTRAINT]:
            cons = self.constraints(row)
            if not cons:
                raise MissingSlot("replacement_constraint without the violated constraint")
            out.append(f"The replacement doesn't fit — I want one {join_phrases(cons)}.")
        if a.feedback_issues[RI.REPLACEMENT_UNWANTED]:
            self.value(row, S.REPLACEMENT)
            out.append(f"{self.val('I do not need a replacement')}.")
        if a.feedback_issues[RI.REPLACEMENT_MISSING]:
            self.value(row, S.REPLACEMENT)
            if self.stated(row, S.CATEGORY):
                out.append(f"I wanted a different {self.category(row)} as a replacement.")
            else:
                out.append("I wanted a replacement.")
        return out

    # -- SWITCH / the catch-all -----------------------------------------------------------

    def switch(self) -> str:
        a = self.a
        row = int(a.active)
        env = int(a.intro_env)
        if env < 0:
            raise MissingSlot("a SWITCH without its sub-goal's family")
        if a.switch_intro:
            lead = (
                "Actually, before that:"
                if self.mid_task
                else self.pick("Next:", "Next, one more thing:")
            )
        else:
            lead = self.pick("Back to my earlier request:", "Now, back to what I asked before:")
        return f"{lead} {self.opening(row, env)}"

    def leftovers(self) -> str:
        """Stated values that no section said (kept, so rendering never drops content)."""
        a = self.a
        out = []
        for row in range(C.MAX_SUBGOALS):
            for s in S:
                if a.slot_stated[row, s] and (row, s) not in self.said:
                    env = self.ep.row_env(row)
                    if s in CONSTRAINT_SLOTS:
                        lead = (
                            "For the replacement, I want one" if env == E.RETURN else "I want one"
                        )
                        out.append(f"{lead} {self.constraint(row, s)}.")
                    else:
                        out.append(self.clarify_slot(row, env, s))
        return " ".join(out)


def _index(v: float, names: Sequence[Any]) -> int:
    i = int(round(float(v)))
    if not 0 <= i < len(names):
        raise MissingSlot(f"code {v} outside 0..{len(names) - 1}")
    return i


def _quiet(text: str) -> str:
    return f"{QUIET[0]}{text}{QUIET[1]}"


def render_reply(act: Any, ep: EpisodeText, rng: Any, mid_task: bool = False) -> Utterance:
    """One customer reply (an opening INFORM or a post-turn reply) as an ``Utterance``.

    ``rng`` draws the variants: the TEMPLATE stream of this message (``noise.key_rng(key,
    "TEMPLATE", index)``, or any object with ``integers`` and ``permutation``).
    ``mid_task`` says a SWITCH interrupts the active sub-goal ("Actually, before that:
    ..."), which the caller knows from the dialogue, not from the act."""
    r = _Reply(act, ep, rng, mid_task)
    a = r.a
    acts = [ACT_NAMES[k] for k in ACT if a.acts[k]]
    if not acts:
        raise MissingSlot("a reply without acts")
    parts: list[str] = []
    if a.acts[ACT.QUIT]:
        parts.append(
            _quiet(
                r.pick(
                    "This isn't working for me. Goodbye.", "Never mind, I'll shop elsewhere. Bye."
                )
            )
        )
    elif a.acts[ACT.INFORM]:
        env0 = r.ep.row_env(0)
        body = r.opening(0, env0)
        if ep.env == E.JOURNEY:
            n = int(a.n_subgoals)
            if n <= 0:
                raise MissingSlot("a JOURNEY opening without its sub-goal count")
            body = f"I have {r.val(str(n))} things to sort out today. First: {body}"
        parts.append(body)
    else:
        if a.acts[ACT.INFORM_UPDATE]:
            ups = r.updates()
            if not ups:
                raise MissingSlot("an INFORM-update without a sold-out item")
            parts.append(" ".join(ups))
        if a.acts[ACT.CLARIFY]:
            r.protect = True
            parts.append(r.clarify())
            r.protect = False
        if a.acts[ACT.CONFIRM]:
            parts.append(_quiet(r.confirm()))
        if a.acts[ACT.CORRECT]:
            r.protect = True
            parts.append(r.correct())
            r.protect = False
        if a.acts[ACT.SWITCH]:
            parts.append(r.switch())
        if a.acts[ACT.DONE]:
            parts.append(
                _quiet(r.pick("That's everything I needed, thanks!", "That's all, thank you!"))
            )
        if a.acts[ACT.ACK]:
            parts.append(_quiet("Okay, go ahead."))
    r.protect = True
    rest = r.leftovers()
    if rest:
        parts.append(rest)
    return Utterance(normalise(" ".join(parts)), tuple(acts), tuple(r.values))
