"""Customer templates (SPEC §11) on hand-built acts: every act kind renders in every env
it occurs in, every stated value appears in the text, omitted slots drop their phrase,
required slots raise ``MissingSlot``, and the keyed variant draw changes wording only.

The acts here are built directly (hypothesis draws the stated slots and their values), so
these tests need no compile; real episodes are covered in ``session_test``."""

from __future__ import annotations

import re
from dataclasses import fields
from types import SimpleNamespace

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax import constants as C
from ecomjax import policy_rules as P
from ecomjax.catalog.synthetic import describe, synthetic_tables
from ecomjax.catalog.vocabulary import BRANDS, STORES, TAXONOMY, VARIANT_POOL_TEXT, VOCAB
from ecomjax.constraints import SLOT_ATTR
from ecomjax.envs.bundle.generator import PROJECT_CATS, PROJECTS
from ecomjax.envs.subgoal_families import SUBGOAL_FAMILIES
from ecomjax.llm_bridge import templates
from ecomjax.llm_bridge.noise import MARKER_CHARS, PROTECT, QUIET, key_rng
from ecomjax.types import UserAct, empty_user_act

S = C.Slot
A = C.Attr
E = C.Env
ACT = C.Act
CS = C.ClarifyStatus
CI = C.CartIssue
RI = C.ReturnIssue
BLANK = jax.tree_util.tree_map(np.asarray, empty_user_act())
SUB_ENVS = (E.PD, E.SUB, E.CART, E.RETURN, E.STATUS, E.POLICY, E.BUNDLE)
CONS = templates.CONSTRAINT_SLOTS
# Code ranges of the discrete constraint values (synthetic tables).
DISC_RANGE = {
    A.BRAND: len(BRANDS),
    A.STORE: len(STORES),
    **{a: len(VOCAB[a]) for a in C.DISC_ATTRS},
}


@pytest.fixture(scope="module")
def lex(catalog) -> templates.Lexicon:
    return templates.Lexicon.from_catalog(catalog, synthetic_tables())


def blank() -> SimpleNamespace:
    """A writable act (UserAct is frozen): every field a fresh numpy array."""
    return SimpleNamespace(**{f.name: np.array(getattr(BLANK, f.name)) for f in fields(UserAct)})


def to_act(a: SimpleNamespace) -> UserAct:
    return UserAct(**{k: np.asarray(v) for k, v in vars(a).items()})


def render(
    a: SimpleNamespace, ep: templates.EpisodeText, r: np.random.Generator, **kw
) -> templates.Utterance:
    return templates.render_reply(to_act(a), ep, r, **kw)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# --- expected texts, written independently of the renderer ---------------------------------------


def value_text(slot: int, v: float, op: int) -> str:
    attr = int(SLOT_ATTR[slot])
    if attr == A.CAT:
        return TAXONOMY[int(v)][2]
    if attr == A.BRAND:
        return BRANDS[int(v)]
    if attr == A.STORE:
        return STORES[int(v)]
    if attr in VOCAB:
        return VOCAB[attr][int(v)].replace("_", " ")
    return {
        A.PRICE: f"${v:.2f}",
        A.RATING: f"{v:.1f}",
        A.WEIGHT_LBS: f"{v:.1f}",
        A.SCREEN_SIZE_INCHES: f"{v:.1f}",
    }.get(attr, str(int(round(v))))


def expected_texts(act, ep: templates.EpisodeText) -> list[str]:
    """Every value the act states, as it must appear (SPEC §13.9, §13.10)."""
    a, lex = act, ep.lexicon
    out: list[str] = []
    for row in range(C.MAX_SUBGOALS):
        for s in S:
            if not a.slot_stated[row, s]:
                continue
            v, op = float(a.slot_value[row, s]), int(a.slot_op[row, s])
            if ep.row_env(row) == E.POLICY and s in templates.POLICY_FIELD_OF_SLOT:
                out.append(P.phrase(templates.POLICY_FIELD_OF_SLOT[s], v))
            elif SLOT_ATTR[s] >= 0:
                out.append(value_text(s, v, op))
            elif s == S.NUM_RESULTS:
                out.append(str(int(v)))
            elif s == S.PRIORITY:
                out.append(templates.PRIORITY_WORDS[int(v)])
            elif s == S.REASON:
                out.append(templates.REASON_PHRASES[templates.REASON_NAMES[int(v)]])
            elif s == S.RETURN_METHOD:
                out.append(templates.METHOD_PHRASES[templates.METHOD_NAMES[int(v)]])
            elif s == S.PURCHASE_DATE:
                out.append(templates.day_text(v))
            elif s == S.BUDGET:
                out.append(f"${v:.2f}")
            elif s == S.TOPIC:
                out.append(P.TOPICS[int(v)].question)
            elif s == S.ORDER_REFERENCE and v >= 0:
                out.append(f"ord_{int(v) + 1:03d}")
            elif s == S.ITEMS and ep.row_env(row) == E.BUNDLE:
                out.append(PROJECTS[int(v)][0])
        if int(a.ref_form[row]) > 0:
            out.append(lex.describe(int(a.ref_form[row]), int(a.ref_key[row])))
    for i in range(C.MAX_ITEMS):
        if not a.item_valid[i]:
            continue
        out.append(lex.describe(int(a.item_desc_form[i]), int(a.item_desc_key[i])))
        qty = int(a.item_qty[i])
        if qty > 0 or (qty == 0 and not a.item_update[i]):  # "leave it out" says 0 in words
            out.append(str(qty))
        if int(a.item_var_attr[i]) >= 0:
            attr, v = int(a.item_var_attr[i]), float(a.item_var_value[i])
            word = VOCAB[attr][int(v)].replace("_", " ") if attr in VOCAB else None
            out.append(word or templates.exact_text(v))
    for f, k, kind in zip(a.extra_form, a.extra_key, a.extra_kind, strict=True):
        if kind:
            out.append(lex.describe(int(f), int(k)))
    out += [TAXONOMY[int(c)][2] for c in a.cats if c >= 0]
    facts = zip(a.fact_field, a.fact_value, strict=True)
    out += [P.phrase(int(f), float(v)) for f, v in facts if f >= 0]
    return out


def check_rendered(u: templates.Utterance, act, ep: templates.EpisodeText) -> None:
    text = u.text
    assert text and not set(text) & MARKER_CHARS
    assert not re.search(r"[{}]|\s[.,!?]|\s\s", text), text
    for v in expected_texts(act, ep):
        assert v in text, (v, text)
    for v in u.values:
        assert v in text


# --- act builders (hypothesis) -----------------------------------------------------------------


def product_ref(draw, lex: templates.Lexicon) -> tuple[int, int]:
    form = np.asarray(lex.catalog.desc_form)
    i = draw(st.integers(0, len(form) - 1).filter(lambda j: form[j] > 0))
    return int(form[i]), int(lex.catalog.desc_key[i, int(form[i]) - 1])


def constraint_value(draw, slot: int) -> tuple[float, int]:
    attr = int(SLOT_ATTR[slot])
    if attr in DISC_RANGE:
        return float(draw(st.integers(0, DISC_RANGE[attr] - 1))), 0
    op = C.NUMERIC_OP[A(attr)] or draw(st.sampled_from([-1, 1]))
    prec = C.NUMERIC_PRECISION[A(attr)]
    steps = draw(st.integers(1, 20000))
    return float(np.float32(round(steps * prec, 2))), op


def state(a, row: int, slot: int, value: float, op: int = 0) -> None:
    a.slot_stated[row, slot] = True
    a.slot_value[row, slot] = value
    a.slot_op[row, slot] = op


def fill_row(draw, a, row: int, env: int, lex: templates.Lexicon, full: bool) -> None:
    """Stated slots of one sub-goal row: the critical ones always (``full``) and a drawn
    subset of the others."""
    maybe = (lambda: True) if full else (lambda: draw(st.booleans()))
    if env in (E.PD, E.SUB):
        state(a, row, S.CATEGORY, draw(st.integers(0, 39)))
        state(a, row, S.NUM_RESULTS, draw(st.integers(1, 10)))
        if env == E.PD and maybe():
            state(a, row, S.PRIORITY, draw(st.integers(0, 2)))
        if env == E.SUB:
            a.slot_stated[row, S.ORIGINAL] = True
            a.ref_form[row], a.ref_key[row] = product_ref(draw, lex)
        for s in draw(st.lists(st.sampled_from(CONS), max_size=5, unique=True)):
            state(a, row, s, *constraint_value(draw, s))
    elif env == E.RETURN:
        a.slot_stated[row, S.ITEMS] = True
        a.ref_form[row], a.ref_key[row] = product_ref(draw, lex)
        if maybe():
            state(a, row, S.PURCHASE_DATE, draw(st.integers(-60, 400)))
        if maybe():
            state(a, row, S.REASON, draw(st.integers(0, 7)))
        if maybe():
            state(a, row, S.RETURN_METHOD, draw(st.integers(0, 2)))
        replace = draw(st.booleans())
        if maybe():
            state(a, row, S.REPLACEMENT, float(replace))
            if replace:
                state(a, row, S.CATEGORY, draw(st.integers(0, 39)))
        if replace:
            for s in draw(st.lists(st.sampled_from(CONS), max_size=4, unique=True)):
                state(a, row, s, *constraint_value(draw, s))
    elif env == E.STATUS:
        if draw(st.booleans()):
            state(a, row, S.ORDER_REFERENCE, draw(st.integers(0, 11)))
        else:
            state(a, row, S.ORDER_REFERENCE, -1.0)
            a.ref_form[row], a.ref_key[row] = product_ref(draw, lex)
    elif env == E.POLICY:
        state(a, row, S.TOPIC, draw(st.integers(0, P.N_TOPICS - 1)))
        for f in draw(st.lists(st.integers(0, P.N_FIELDS - 1), max_size=5, unique=True)):
            state(a, row, int(P.FIELD_SLOT[f]), field_value(draw, f))
        n = draw(st.integers(0, 3))
        for k, f in enumerate(
            draw(st.lists(st.integers(0, P.N_FIELDS - 1), min_size=n, max_size=n))
        ):
            a.fact_field[k], a.fact_value[k] = f, field_value(draw, f)
    elif env == E.BUNDLE:
        p = draw(st.integers(0, len(PROJECTS) - 1))
        state(a, row, S.ITEMS, p)
        cats = [c for c in PROJECT_CATS[p] if c >= 0][: draw(st.integers(1, 12))]
        a.cats[: len(cats)] = cats
        if maybe():
            state(a, row, S.BUDGET, float(np.float32(draw(st.integers(100, 500000)) / 100)))
    elif env == E.CART:
        fill_items(draw, a, lex, draw(st.integers(1, C.MAX_ITEMS)))


def field_value(draw, f: int) -> float:
    fld = P.FIELDS[f]
    if fld.categorical:
        return float(draw(st.integers(0, len(fld.values) - 1)))
    steps = draw(st.integers(int(fld.lo * fld.inv), int(fld.hi * fld.inv)))
    return float(np.float32(steps / fld.inv))


VARIANT_ATTRS = (A.COLOR, A.SIZE, A.MATERIAL, A.CONNECTOR_TYPE, A.WATTAGE, A.SCREEN_SIZE_INCHES)


def fill_items(draw, a, lex: templates.Lexicon, n: int, qty: bool = True, var: bool = True) -> None:
    for i in range(n):
        a.item_valid[i] = True
        a.item_desc_form[i], a.item_desc_key[i] = product_ref(draw, lex)
        if qty and draw(st.booleans()):
            a.item_qty[i] = draw(st.integers(1, 4))
        if var and draw(st.booleans()):
            attr = draw(st.sampled_from(VARIANT_ATTRS))
            pool = VARIANT_POOL_TEXT[attr]
            v = draw(st.sampled_from(range(len(pool))))
            a.item_var_attr[i] = attr
            a.item_var_value[i] = VOCAB[attr].index(pool[v]) if attr in VOCAB else pool[v]
        elif var and draw(st.booleans()):
            a.item_var_nopref[i] = True


APPLICABLE = {f.env: f.slots for f in SUBGOAL_FAMILIES}  # each family's askable slots


def episode(env: int, row: int = 0) -> tuple[int, tuple[int, ...]]:
    """(episode env, sub_envs): ``env`` alone, or as JOURNEY row ``row``."""
    if row == 0:
        return env, ()
    subs = [e for e in SUB_ENVS if e != env][:4]
    subs.insert(row, env)
    return E.JOURNEY, tuple(subs[:5])


# --- every act kind x env ---------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(SUB_ENVS), st.booleans())
def test_opening_states_exactly_its_values(lex, data, env, journey):
    a = blank()
    a.acts[ACT.INFORM] = True
    fill_row(data.draw, a, 0, env, lex, full=False)
    if journey:
        a.n_subgoals = data.draw(st.integers(2, 5))
    others = [e for e in SUB_ENVS if e != env][:4]
    ep = (
        templates.EpisodeText(lex, E.JOURNEY, (env, *others))
        if journey
        else templates.EpisodeText(lex, env)
    )
    u = render(a, ep, rng(data.draw(st.integers(0, 99))))
    check_rendered(u, a, ep)
    if journey:
        assert u.text.startswith(f"I have {int(a.n_subgoals)} things to sort out today. First:")


@settings(max_examples=80, deadline=None)
@given(st.data(), st.sampled_from(SUB_ENVS), st.integers(0, 4))
def test_clarify_answers_every_requested_slot(lex, data, env, row):
    a = blank()
    a.acts[ACT.CLARIFY] = True
    a.user_caused = True
    ep_env, subs = episode(env, row)
    a.subgoal = row
    fill_row(data.draw, a, row, env, lex, full=False)
    applicable = APPLICABLE[env]
    for s in S:
        if a.slot_stated[row, s] and s in applicable:
            a.slot_status[s] = CS.VALUE
        elif data.draw(st.integers(0, 9)) == 0:
            a.slot_status[s] = CS.NO_PREFERENCE if s in applicable else CS.NOT_UNDERSTOOD
    if env == E.CART:
        a.slot_status[S.ITEMS] = CS.VALUE
    if env == E.CART and data.draw(st.booleans()):  # a product-scoped ask about another product
        a.item_valid[:] = False
        a.slot_status[:] = np.where(a.slot_status == CS.VALUE, CS.NOT_MINE, a.slot_status)
    if not a.slot_status.any():
        a.slot_status[S.TOPIC if env == E.POLICY else applicable[0]] = CS.NOT_UNDERSTOOD
    ep = templates.EpisodeText(lex, ep_env, subs)
    u = render(a, ep, rng(row))
    check_rendered(u, a, ep)
    text = u.text
    for s in S:
        st_ = int(a.slot_status[s])
        if st_ in (CS.NO_PREFERENCE, CS.NOT_UNDERSTOOD):
            assert templates.SLOT_LABELS[s] in text
        if st_ == CS.NOT_MINE:
            assert "That is not one of my items." in text
    # CLARIFY values are protected: every expected value lies in a PROTECT span.
    spans = re.findall(f"{PROTECT[0]}(.*?){PROTECT[1]}", u.marked)
    for v in expected_texts(a, ep):
        assert any(v in s for s in spans), v


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_cart_update_confirm_correct(lex, data):
    a = blank()
    n = data.draw(st.integers(1, C.MAX_ITEMS))
    fill_items(data.draw, a, lex, n, qty=False, var=False)
    for i in range(n):
        kind = data.draw(st.sampled_from(["update", "confirm", "correct"]))
        if kind == "update":
            a.item_update[i] = True
            a.item_qty[i] = data.draw(st.integers(0, 3))
            a.acts[ACT.INFORM_UPDATE] = True
        elif kind == "confirm":
            a.item_confirm[i] = True
            a.acts[ACT.CONFIRM] = True
        else:
            issue = data.draw(st.sampled_from(list(CI)[1:]))
            a.item_issue[i] = issue
            a.acts[ACT.CORRECT] = True
            if issue in (CI.QTY_LOW, CI.QTY_HIGH):
                a.item_qty[i] = data.draw(st.integers(1, 4))
            if issue == CI.WRONG_VARIANT:
                a.item_var_attr[i], a.item_var_value[i] = A.COLOR, data.draw(st.integers(0, 7))
    if data.draw(st.booleans()):
        a.cart_confirm = True
        a.acts[ACT.CONFIRM] = True
    if data.draw(st.booleans()):
        for k in range(data.draw(st.integers(1, 3))):
            a.extra_form[k], a.extra_key[k] = product_ref(data.draw, lex)
            a.extra_kind[k] = data.draw(st.integers(1, 2))
        a.acts[ACT.CORRECT] = True
    ep = templates.EpisodeText(lex, E.CART)
    u = render(a, ep, rng(1))
    check_rendered(u, a, ep)
    for i in range(n):
        desc = lex.describe(int(a.item_desc_form[i]), int(a.item_desc_key[i]))
        if a.item_update[i] and a.item_qty[i] == 0:
            assert f"The {desc} just sold out — leave it out." in u.text
        elif a.item_update[i]:
            keep = f"I'll keep the {int(a.item_qty[i])} in my cart."
            assert f"The {desc} just sold out — {keep}" in u.text
        if a.item_confirm[i]:
            assert f"Yes, that's my {desc}." in u.text


def test_reply_acts_come_in_spec_order(lex):
    """INFORM-update, CLARIFY, CONFIRM / CORRECT, SWITCH / DONE (SPEC §10.2)."""
    a = blank()
    form = int(lex.catalog.desc_form[7])
    for i in range(2):
        a.item_valid[i] = True
        a.item_desc_form[i], a.item_desc_key[i] = form, int(lex.catalog.desc_key[7, form - 1])
    a.item_update[0], a.item_qty[0] = True, 0
    a.item_issue[1], a.item_qty[1] = CI.QTY_HIGH, 2
    a.feedback_confirm = True
    for k in (ACT.INFORM_UPDATE, ACT.CLARIFY, ACT.CONFIRM, ACT.CORRECT, ACT.DONE):
        a.acts[k] = True
    a.slot_status[S.BUDGET] = CS.NOT_UNDERSTOOD
    # a CART item feedback and a RETURN confirm in one reply: a JOURNEY holding both
    text = render(a, templates.EpisodeText(lex, E.JOURNEY, (E.CART, E.RETURN)), rng(0)).text
    marks = ["just sold out", "not sure what you mean", "that return is exactly", "I only need"]
    pos = [text.find(m) for m in marks]
    assert -1 not in pos and pos == sorted(pos), text
    assert text.endswith(("That's everything I needed, thanks!", "That's all, thank you!"))


def test_a_product_without_a_short_form_is_named_by_title(lex):
    cat = lex.catalog
    i = 11
    title_key = int(cat.desc_key[i, 2])
    assert lex.describe(0, title_key) == describe(cat, lex.tables, i, C.DescForm.TITLE)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.booleans())
def test_return_confirm_and_correct(lex, data, journey):
    a = blank()
    row = 2 if journey else 0
    ep_env, subs = episode(E.RETURN, row)
    issues = data.draw(st.lists(st.sampled_from(list(RI)), min_size=0, max_size=3, unique=True))
    if not issues:
        a.acts[ACT.CONFIRM] = True
        a.feedback_confirm = True
    else:
        a.acts[ACT.CORRECT] = True
    for k in issues:
        a.feedback_issues[k] = True
        if k == RI.WRONG_REASON:
            state(a, row, S.REASON, data.draw(st.integers(0, 7)))
        elif k == RI.WRONG_METHOD:
            state(a, row, S.RETURN_METHOD, data.draw(st.integers(0, 2)))
        elif k == RI.REPLACEMENT_CONSTRAINT:
            for s in data.draw(
                st.lists(st.sampled_from(CONS), min_size=1, max_size=3, unique=True)
            ):
                state(a, row, s, *constraint_value(data.draw, s))
        elif k == RI.REPLACEMENT_UNWANTED:
            state(a, row, S.REPLACEMENT, 0.0)
        elif k == RI.REPLACEMENT_MISSING:
            state(a, row, S.REPLACEMENT, 1.0)
            state(a, row, S.CATEGORY, data.draw(st.integers(0, 39)))
    ep = templates.EpisodeText(lex, ep_env, subs)
    u = render(a, ep, rng(2))
    check_rendered(u, a, ep)
    if RI.WRONG_LINE in issues:
        assert "That's not the item I wanted to return." in u.text


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(SUB_ENVS), st.integers(1, 4), st.booleans(), st.booleans())
def test_switch_introduces_or_resumes_a_subgoal(lex, data, env, row, intro, mid):
    a = blank()
    a.acts[ACT.SWITCH] = True
    a.user_caused = True
    ep_env, subs = episode(env, row)
    a.active, a.intro_env, a.switch_intro = row, env, intro
    fill_row(data.draw, a, row, env, lex, full=True)
    if data.draw(st.booleans()):
        a.acts[ACT.CLARIFY] = True  # a CLARIFY about the old sub-goal in the same reply
        a.subgoal = 0
        a.slot_status[APPLICABLE[subs[0]][0]] = CS.NO_PREFERENCE
    ep = templates.EpisodeText(lex, ep_env, subs)
    u = render(a, ep, rng(3), mid_task=mid)
    check_rendered(u, a, ep)
    lead = ("Actually, before that:",) if intro and mid else ("Next:", "Next, one more thing:")
    if not intro:
        lead = ("Back to my earlier request:", "Now, back to what I asked before:")
    assert any(x in u.text for x in lead)


@pytest.mark.parametrize("env", [*SUB_ENVS, E.JOURNEY])
@pytest.mark.parametrize("act", [ACT.DONE, ACT.ACK, ACT.QUIT])
def test_done_ack_quit_are_fixed_and_quiet(lex, env, act):
    a = blank()
    a.acts[act] = True
    texts = set()
    for seed in range(8):
        u = render(a, templates.EpisodeText(lex, env, tuple(SUB_ENVS[:5])), rng(seed))
        assert u.marked.startswith(QUIET[0]) and u.marked.endswith(QUIET[1])
        texts.add(u.text)
    if act == ACT.ACK:
        assert texts == {"Okay, go ahead."}
    else:
        assert len(texts) == 2  # two keyed variants


# --- omission, required slots, variants ---------------------------------------------------------


def pd_opening(lex, **extra) -> tuple:
    a = blank()
    a.acts[ACT.INFORM] = True
    state(a, 0, S.CATEGORY, 0)
    state(a, 0, S.NUM_RESULTS, 3)
    for s, v in extra.items():
        state(a, 0, S[s.upper()], *v)
    return a, templates.EpisodeText(lex, E.PD)


def test_omitted_slot_drops_its_whole_phrase(lex):
    a, ep = pd_opening(lex, priority=(0,), price=(45.5, -1))
    full = render(a, ep, rng(0)).text
    assert "Show me the cheapest options first." in full and "priced at most $45.50" in full
    a.slot_stated[0, S.PRIORITY] = False
    a.slot_stated[0, S.PRICE] = False
    short = render(a, ep, rng(0)).text
    assert "options first" not in short and "priced" not in short and "$" not in short
    assert short.startswith(("I'm looking for headphones.", "Hi! I need headphones."))


def test_canonical_pd_opening(lex):
    a, ep = pd_opening(lex, priority=(1,), brand=(0, 0), rating=(4.2, 1))
    texts = {render(a, ep, rng(s)).text for s in range(20)}
    assert (
        "I'm looking for headphones rated at least 4.2 stars and from TechPro. Show me the "
        "best-rated options first. Please suggest your top 3." in texts
    )


@pytest.mark.parametrize(
    "case",
    [
        "pd_without_category",
        "sub_without_original",
        "status_without_reference",
        "qty_low_without_qty",
        "wrong_variant_without_variant",
        "confirm_nothing",
        "switch_without_env",
        "journey_without_count",
        "update_without_qty",
        "unknown_description",
        "no_acts",
        "clarify_unknown_template",
    ],
)
def test_missing_required_slot_raises(lex, case):
    a = blank()
    ep = templates.EpisodeText(lex, E.PD)
    if case == "pd_without_category":
        a, ep = pd_opening(lex)
        a.slot_stated[0, S.CATEGORY] = False
    elif case == "sub_without_original":
        a.acts[ACT.INFORM] = True
        state(a, 0, S.CATEGORY, 1)
        state(a, 0, S.NUM_RESULTS, 3)
        ep = templates.EpisodeText(lex, E.SUB)
    elif case == "status_without_reference":
        a.acts[ACT.INFORM] = True
        state(a, 0, S.ORDER_REFERENCE, -1)
        ep = templates.EpisodeText(lex, E.STATUS)
    elif case in ("qty_low_without_qty", "wrong_variant_without_variant", "update_without_qty"):
        a.item_valid[0] = True
        a.item_desc_form[0], a.item_desc_key[0] = (
            int(lex.catalog.desc_form[5]),
            int(lex.catalog.desc_key[5, int(lex.catalog.desc_form[5]) - 1]),
        )
        if case == "update_without_qty":
            a.acts[ACT.INFORM_UPDATE] = True
            a.item_update[0] = True
            a.item_qty[0] = -1
        else:
            a.acts[ACT.CORRECT] = True
            a.item_issue[0] = CI.QTY_LOW if case == "qty_low_without_qty" else CI.WRONG_VARIANT
        ep = templates.EpisodeText(lex, E.CART)
    elif case == "confirm_nothing":
        a.acts[ACT.CONFIRM] = True
    elif case == "switch_without_env":
        a.acts[ACT.SWITCH] = True
        ep = templates.EpisodeText(lex, E.JOURNEY, SUB_ENVS[:3])
    elif case == "journey_without_count":
        a.acts[ACT.INFORM] = True
        state(a, 0, S.ORDER_REFERENCE, 2)
        ep = templates.EpisodeText(lex, E.JOURNEY, (E.STATUS, E.PD))
    elif case == "unknown_description":
        a.acts[ACT.INFORM] = True
        a.item_valid[0] = True
        a.item_desc_form[0], a.item_desc_key[0] = 1, 10**8
        ep = templates.EpisodeText(lex, E.CART)
    elif case == "clarify_unknown_template":
        a.acts[ACT.CLARIFY] = True
        state(a, 0, S.VARIANT, 1)
        a.slot_status[S.VARIANT] = CS.VALUE
        ep = templates.EpisodeText(lex, E.STATUS)
    with pytest.raises(templates.MissingSlot):
        render(a, ep, rng(0))


@settings(max_examples=30, deadline=None)
@given(st.data(), st.sampled_from(SUB_ENVS))
def test_variants_change_wording_not_values(lex, data, env):
    a = blank()
    a.acts[ACT.INFORM] = True
    fill_row(data.draw, a, 0, env, lex, full=True)
    ep = templates.EpisodeText(lex, env)
    outs = [render(a, ep, rng(s)) for s in range(12)]
    assert len({sorted(u.values).__repr__() for u in outs}) == 1
    assert render(a, ep, rng(5)).marked == outs[5].marked  # same draw, same text
    if env not in (E.RETURN, E.POLICY, E.BUNDLE):  # the envs with a single template
        assert len({u.text for u in outs}) > 1


def test_template_stream_is_keyed_by_message_index(lex):
    a, ep = pd_opening(lex, priority=(2,))
    key = jax.random.key(3)
    texts = [render(a, ep, key_rng(key, "TEMPLATE", i)).text for i in range(16)]
    again = [render(a, ep, key_rng(key, "TEMPLATE", i)).text for i in range(16)]
    assert texts == again and len(set(texts)) > 1


def test_descriptions_never_use_indices(lex):
    """An act names a product by (form, key); any product with that key reads the same."""
    cat = lex.catalog
    form = np.asarray(cat.desc_form)
    for i in np.flatnonzero(form > 0)[:200]:
        f = int(form[i])
        key = int(cat.desc_key[i, f - 1])
        assert lex.describe(f, key) == describe(cat, lex.tables, int(i), f)
        assert "syn_" not in lex.describe(f, key)


def test_normalise_whitespace_and_punctuation():
    assert templates.normalise("  a  b .  c ,d ") == "a b. c,d"
    m = f"x {PROTECT[0]}y{PROTECT[1]} ."
    assert templates.normalise(m) == f"x {PROTECT[0]}y{PROTECT[1]}."
