"""POLICY against SPEC §8.6, §9 and §13: the rule base, the evaluator, policy_search, the
generator's invariants, hand-computed verifier cases and rollout sweeps over d = 0..20.

Rollouts share one batch shape (B = 420, 20 episodes per d) and a module-scoped result
per agent, so each agent compiles once.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import SUITE_AGENTS
from ecomjax import constants as C
from ecomjax import policy_rules as P
from ecomjax.agents.exploits import POLICY_MOST_COMMON
from ecomjax.difficulty import difficulty
from ecomjax.envs.policy.generator import context_for_rule, draw_context, generate
from ecomjax.envs.policy.verifier import verify
from ecomjax.sampling import stream
from ecomjax.testing import rate_exceeds, suite_part
from ecomjax.tools.policy import policy_search
from ecomjax.types import MAX_FACTS, EnvParams, empty_answer_fields

S = C.Slot
TM = C.Termination
T = P.TABLES
B = 420
DS = jnp.arange(B, dtype=jnp.int32) % (C.D_MAX + 1)
PARAMS = EnvParams()


def keys_for(seed: int, n: int = B) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(n))


# --- the rule base as data (SPEC §9.2) -----------------------------------------------------


def test_rule_base_counts():
    assert P.N_RULES == 62 and P.N_TOPICS == 25 and P.N_FIELDS == 19
    n_conds = np.bincount(T.rule_ncond, minlength=4)[1:]
    assert n_conds.tolist() == [42, 19, 1]
    categorical = T.topic_categorical[T.rule_topic]
    assert (~categorical).sum() == 51 and categorical.sum() == 11
    # Rank order as listed: pol_014 decides return_fee before pol_011.
    fee = [P.RULES[i].number for i in P.TOPIC_RULE_LISTS[P.TOPIC_INDEX["return_fee"]]]
    assert fee == [14, 11, 12, 13]
    cost = [P.RULES[i].number for i in P.TOPIC_RULE_LISTS[P.TOPIC_INDEX["shipping_cost"]]]
    assert cost == [24, 26, 18, 19, 20]
    assert (
        P.rule_text(P.RULE_BY_NUMBER[24])
        == "pol_024 (rank 1): IF membership_tier = premium AND order_total >= 100 THEN 0.00 USD"
    )
    # The 17 policy slots in Slot order, then return_method and quantity.
    assert P.FIELD_SLOT.tolist() == [*range(S.PRODUCT_CATEGORY, S.ITEM_PRICE + 1), 27, 23]
    assert P.FIELDS[0].values == C.POLICY_CATEGORIES
    assert P.answer_code("  next BUSINESS day!") == P.ANSWER_VOCAB.index("Next business day")
    assert P.answer_code("not applicable") == P.ANSWER_VOCAB.index("not_applicable")
    assert P.answer_code("maybe") == -1


def _py_holds(cond, ctx) -> bool:
    name, op, value = cond
    f = P.FIELD_INDEX[name]
    field = P.FIELDS[f]
    x = ctx[f]
    if field.categorical:
        x = field.values[int(x)]
    return {
        "eq": lambda: x == value,
        "neq": lambda: x != value,
        "gt": lambda: x > value,
        "gte": lambda: x >= value,
        "lt": lambda: x < value,
        "lte": lambda: x <= value,
        "in": lambda: x in value,
        "not_in": lambda: x not in value,
    }[op]()


def _py_evaluate(t: int, ctx) -> float | None:
    """A scalar re-implementation of SPEC §9.1 over the host tables."""
    topic = P.TOPICS[t]
    rules = [P.RULES[i] for i in P.TOPIC_RULE_LISTS[t]]
    code = (lambda v: float(P.ANSWER_VOCAB.index(v))) if topic.categorical else float
    hits = [r for r in rules if all(_py_holds(c, ctx) for c in r.conds)]
    if topic.mode == "sum":
        return float(np.float32(sum(np.float32(r.value) for r in hits)))
    if hits:
        return code(hits[0].value)
    return None if topic.default is None else code(topic.default)


def test_evaluator_matches_scalar_reference():
    """All 25 topics on 400 random contexts (every op of the rule base is exercised)."""
    ctxs = jax.vmap(lambda k: draw_context(k, jnp.int32(-1)))(keys_for(3, 400))
    # Bias numeric fields toward the thresholds so every comparison goes both ways.
    thresholds = np.asarray(ctxs).copy()
    rng = np.random.default_rng(0)
    for f, field in enumerate(P.FIELDS):
        if field.categorical:
            continue
        cuts = sorted({c[2] for r in P.RULES for c in r.conds if c[0] == field.name})
        if cuts:
            pick = rng.choice(cuts, 400) + rng.choice([-1 / field.inv, 0, 1 / field.inv], 400)
            thresholds[::2, f] = pick[::2]
    ctxs = jnp.asarray(thresholds, jnp.float32)
    topics = jnp.arange(P.N_TOPICS)
    val, defined, _ = jax.vmap(jax.vmap(P.evaluate_full, (0, None)), (None, 0))(topics, ctxs)
    val, defined, host = np.asarray(val), np.asarray(defined), np.asarray(ctxs)
    for i, t in itertools.product(range(400), range(P.N_TOPICS)):
        ref = _py_evaluate(t, host[i])
        assert defined[i, t] == (ref is not None), (i, t)
        if ref is not None:
            assert abs(val[i, t] - ref) < 1e-4, (P.TOPICS[t].name, host[i], val[i, t], ref)


def test_every_rule_admits_a_winning_context():
    """SPEC §9.5 step 2 for all 62 rules, 32 keys each: the rule wins (first) or matches
    (sum), the context lies in the field domains and meets the joint-domain limits."""
    n_keys = 32
    rules = jnp.repeat(jnp.arange(P.N_RULES), n_keys)
    keys = keys_for(5, P.N_RULES * n_keys)
    ctx = jax.jit(jax.vmap(context_for_rule))(keys, rules)
    topic = jnp.asarray(T.rule_topic)[rules]
    val, defined, winner = jax.vmap(P.evaluate_full)(topic, ctx)
    matches = jax.vmap(P.rule_matches)(ctx)[jnp.arange(rules.shape[0]), rules]
    is_sum = T.topic_sum[np.asarray(topic)]
    winner, rules_np = np.asarray(winner), np.asarray(rules)
    assert np.all(np.asarray(defined))
    assert np.all(np.asarray(matches))
    assert np.all(is_sum | (winner == rules_np))
    assert np.all(np.where(is_sum, True, np.asarray(val) == T.rule_value[rules_np]))
    _check_domains(np.asarray(ctx), np.asarray(topic))


def _check_domains(ctx: np.ndarray, topic: np.ndarray) -> None:
    for f, field in enumerate(P.FIELDS):
        x = ctx[:, f]
        used = T.topic_fields[topic, f]
        if field.categorical:
            assert np.all((x[used] >= 0) & (x[used] < len(field.values)))
            assert np.all(x == np.round(x))
        else:
            assert np.all((x[used] >= field.lo) & (x[used] <= field.hi + 1e-6))
            assert np.allclose(x * field.inv, np.round(x * field.inv), atol=1e-3)
        assert np.all(x[~used] == 0)
    tier = ctx[:, P.FIELD_INDEX["membership_tier"]]
    cat = ctx[:, P.FIELD_INDEX["product_category"]]
    price = ctx[:, P.FIELD_INDEX["item_price"]]
    fee = topic == P.TOPIC_INDEX["membership_fee"]
    assert np.all(np.isin(tier[fee], [1, 2]))
    assert np.all(tier[topic == P.TOPIC_INDEX["guest_order_limit"]] == 0)
    ext = topic == P.TOPIC_INDEX["extended_warranty_cost"]
    elec, furn = P.FIELDS[0].values.index("electronics"), P.FIELDS[0].values.index("furniture")
    assert np.all((cat[ext] == elec) | ((cat[ext] == furn) & (price[ext] >= 500)))


# --- the generator (SPEC §9.5, §8.6) ---------------------------------------------------------


@pytest.fixture(scope="module")
def problems():
    n = 4200  # 200 per d
    d = jnp.arange(n, dtype=jnp.int32) % (C.D_MAX + 1)
    gen = jax.jit(jax.vmap(generate, (0, None, 0, None)), static_argnums=3)
    return gen(keys_for(11, n), None, d, PARAMS), np.asarray(d)


@pytest.fixture(scope="module")
def questions(problems):
    """``sample_question`` on the keys ``fill`` gives it for the ``problems`` episodes, so
    the drawn clause count c and the near-miss flag are known per problem."""
    from ecomjax.envs.policy.generator import sample_question

    _, d = problems

    def one(key, dd):
        k_q, _ = jax.random.split(stream(key, "PROBLEM", C.Env.POLICY, 0))
        return sample_question(k_q, difficulty(dd, PARAMS.overrides).b_branch)

    out = jax.jit(jax.vmap(one))(keys_for(11, d.size), jnp.asarray(d))
    names = ("rule", "topic", "ctx", "answer", "c", "near")
    return {k: np.asarray(v) for k, v in zip(names, out, strict=True)}


def test_generated_questions_have_exactly_one_answer(problems):
    """Over 4,200 problems: the sampled rule wins, the answer is the topic evaluated on the
    stated context, and no field outside the stated context can change it (every topic
    evaluated on contexts whose unstated fields are redrawn)."""
    prob, d = problems
    topic, rule = np.asarray(prob.pol_topic), np.asarray(prob.pol_rule)
    val, defined, winner = jax.vmap(P.evaluate_full)(prob.pol_topic, prob.pol_context)
    assert np.all(np.asarray(defined))
    is_sum = T.topic_sum[topic]
    assert np.all(is_sum | (np.asarray(winner) == rule))
    assert np.array_equal(np.asarray(val), np.asarray(prob.pol_answer))
    assert np.all(T.rule_topic[rule] == topic)
    _check_domains(np.asarray(prob.pol_context), topic)
    # Redraw every field outside the topic 8 times: every topic's answer on the stated
    # fields stays the same, so the stated context determines exactly one answer.
    fields = jnp.asarray(T.topic_fields)[prob.pol_topic]
    for s in range(8):
        noise = jax.vmap(lambda k: draw_context(k, jnp.int32(-1)))(keys_for(100 + s, d.size))
        ctx = jnp.where(fields, prob.pol_context, noise)
        again = jax.vmap(P.evaluate)(prob.pol_topic, ctx)
        assert np.array_equal(np.asarray(again), np.asarray(prob.pol_answer))
        all_topics = jax.vmap(lambda c: jax.vmap(P.evaluate, (0, None))(jnp.arange(25), c))(ctx)
        assert np.all(np.isfinite(np.asarray(all_topics)))
    assert len(set(rule.tolist())) == 62


def test_slots_and_facts(problems, questions):
    prob, d = problems
    topic = np.asarray(prob.pol_topic)
    has = np.asarray(prob.has_slot[:, 0, 0])
    pend = np.asarray(prob.pending[:, 0, 0])
    val = np.asarray(prob.slot_value[:, 0])
    assert np.all(has[:, S.TOPIC]) and not np.any(pend[:, S.TOPIC])
    assert np.array_equal(val[:, S.TOPIC], topic)
    slots = P.FIELD_SLOT
    assert np.array_equal(has[:, slots], T.topic_fields[topic])
    assert np.array_equal(val[:, slots], np.asarray(prob.pol_context))
    assert not np.any(pend & ~has)
    others = np.setdiff1d(np.arange(C.N_SLOTS), [S.TOPIC, *slots])
    assert not np.any(has[:, others])
    # Omission follows p_missing: none pending at d = 0 is rare, many at d = 20.
    rate = [pend[d == k][:, slots].sum() / max(has[d == k][:, slots].sum(), 1) for k in (0, 20)]
    assert rate[0] < 0.2 and 0.65 < rate[1] < 0.95
    # Distractor facts: max(0, B_branch - c) for the drawn c, distinct fields outside the
    # topic.
    ff, fv = np.asarray(prob.pol_fact_field), np.asarray(prob.pol_fact_value)
    c = questions["c"]
    assert np.array_equal((ff >= 0).sum(1), np.clip(1 + d // 3 - c, 0, MAX_FACTS))
    for i in range(d.size):
        live = ff[i][ff[i] >= 0]
        assert len(set(live.tolist())) == live.size
        assert not np.any(T.topic_fields[topic[i], live])
        for f, v in zip(live, fv[i][ff[i] >= 0], strict=True):
            field = P.FIELDS[f]
            ok = v < len(field.values) if field.categorical else field.lo <= v <= field.hi
            assert ok and P.phrase(int(f), float(v))


# --- rank spread: near-miss questions (SPEC §9.5 v1.1) ----------------------------------------

# No earlier rule of any rank >= 2 rule has 3 clauses (062, the only one, is alone in its
# topic), so a near miss at c = 3 is built on a 2-clause rule: C_EFF = min(c, 2).
MAX_EARLIER = max(len(P.RULES[e].conds) for rules in P.TOPIC_RULE_LISTS for e in rules[:-1])


def _earlier(rule: int) -> list[int]:
    rules = P.TOPIC_RULE_LISTS[T.rule_topic[rule]]
    return list(rules[: rules.index(rule)])


def _is_near_miss(rule: int, ctx, c: int) -> bool:
    """SPEC §9.5 by the scalar reference: r has rank >= 2 in a ``first`` topic, r holds,
    every earlier rule fails, and an earlier rule with >= min(c, MAX_EARLIER) clauses
    fails on exactly one clause."""
    earlier = _earlier(rule)
    if T.topic_sum[T.rule_topic[rule]] or not earlier:
        return False
    if not all(_py_holds(x, ctx) for x in P.RULES[rule].conds):
        return False
    clauses = [[_py_holds(x, ctx) for x in P.RULES[e].conds] for e in earlier]
    if any(all(cl) for cl in clauses):
        return False
    c = min(c, MAX_EARLIER)
    return any(len(cl) >= c and cl.count(False) == 1 for cl in clauses)


def test_clause_count_and_near_miss_share(problems, questions):
    """The plain question has c = B_branch clauses up to 2, then 2 or 3 (so high d is not
    always rule 062); near misses replace it in 2/3 of the questions at B_branch >= 2 and
    never at B_branch = 1."""
    prob, d = problems
    q = questions
    assert np.array_equal(q["rule"], np.asarray(prob.pol_rule))
    assert np.array_equal(q["ctx"], np.asarray(prob.pol_context))
    bb = 1 + d // 3
    near, c, nc = q["near"], q["c"], T.rule_ncond[q["rule"]]
    assert np.array_equal(c[bb <= 2], bb[bb <= 2])
    assert set(c[bb > 2].tolist()) == {2, 3} and 0.4 < (c[bb > 2] == 3).mean() < 0.6
    assert np.all(nc[~near] == c[~near])
    assert not near[bb == 1].any()
    k, n = int(near[bb >= 2].sum()), int((bb >= 2).sum())
    assert not rate_exceeds(k, n, 2 / 3 + 0.02) and not rate_exceeds(n - k, n, 1 / 3 + 0.02)


def test_near_miss_contexts(problems, questions):
    """Every near-miss question (flag from the generator) is a near miss by the scalar
    reference semantics; every candidate target turns up, and those whose value repeats an
    earlier rule's (pol_012/013: pol_014's 0.00) at half the weight of the others."""
    from ecomjax.envs.policy.near_miss import CANDIDATE, PREFER

    q = questions
    rows = np.flatnonzero(q["near"])
    assert rows.size > 1000
    repeats = np.zeros(rows.size, bool)
    for n, i in enumerate(rows):
        r = int(q["rule"][i])
        assert _is_near_miss(r, q["ctx"][i], int(q["c"][i])), (P.RULES[r].rule_id, q["ctx"][i])
        repeats[n] = any(P.RULES[e].value == P.RULES[r].value for e in _earlier(r))
    targets = set(q["rule"][rows].tolist())
    assert targets == set(np.flatnonzero(CANDIDATE[1]).tolist())
    # The targets of SPEC §9.5 at c = 2, minus pol_031: whenever it holds, pol_030 fails on
    # both clauses, so it has no near-miss context.
    numbers = {P.RULES[r].number for r in targets}
    assert numbers == {11, 12, 13, 26, 18, 19, 20, 32, 38, 43, 59, 60}
    assert {P.RULES[r].number for r in q["rule"][rows][repeats]} == {12, 13}
    share, n, k = 2 / (2 + 10 * PREFER), rows.size, int(repeats.sum())  # 1/11
    assert not rate_exceeds(k, n, share + 0.02) and not rate_exceeds(n - k, n, 1 - share + 0.02)


def test_every_candidate_admits_a_near_miss_context():
    """All 12 candidates (the preferred 10 and pol_012/013), at c = 2 and 3, 32 keys each:
    the construction never falls back, and the context is a near miss in the domains."""
    from ecomjax.envs.policy.near_miss import CANDIDATE, near_miss_context

    cand = np.flatnonzero(CANDIDATE[1])
    assert len(cand) == 12
    n_keys = 32
    rules = np.repeat(cand, 2 * n_keys)
    c = np.tile(np.repeat([2, 3], n_keys), len(cand))
    keys = keys_for(17, rules.size)
    ctx, m, j, ok = jax.jit(jax.vmap(near_miss_context))(keys, jnp.asarray(rules), jnp.asarray(c))
    ctx, m, j = np.asarray(ctx), np.asarray(m), np.asarray(j)
    assert np.all(np.asarray(ok))
    for i in range(rules.size):
        assert _is_near_miss(int(rules[i]), ctx[i], int(c[i])), (P.RULES[rules[i]].rule_id, ctx[i])
        # The drawn missed rule m fails on clause j alone.
        holds = [_py_holds(x, ctx[i]) for x in P.RULES[m[i]].conds]
        assert len(holds) >= 2 and not holds[j[i]] and holds.count(False) == 1
    _check_domains(ctx, T.rule_topic[rules])


def test_questions_are_near_misses_at_b_branch_2(problems):
    """From the problems alone (no generator internals): at every d with B_branch >= 2,
    at least half of the questions are near misses by the reference semantics (2/3 are
    built as such, and some plain ones are by chance; before v1.1 about 1/4 were)."""
    prob, d = problems
    rule, ctx = np.asarray(prob.pol_rule), np.asarray(prob.pol_context)
    shaped = np.array([_is_near_miss(int(r), x, 2) for r, x in zip(rule, ctx, strict=True)])
    for level in range(3, C.D_MAX + 1):
        hit = shaped[d == level]
        share = hit.mean()
        assert not rate_exceeds(int((~hit).sum()), hit.size, 0.5), (level, share)


# --- policy_search (SPEC §9.4) ---------------------------------------------------------------


def _search(text_or_ids, k=3):
    ids = text_or_ids if isinstance(text_or_ids, list) else P.tokenize_query(text_or_ids)
    q = np.full(C.MAX_QUERY_TOKENS, -1, np.int32)
    q[: len(ids)] = ids
    out = policy_search(jnp.asarray(q), jnp.int32(k))
    return [np.asarray(x) for x in out]


def test_each_question_finds_its_topic_first():
    for t, topic in enumerate(P.TOPICS):
        ids, score, *_ = _search(topic.question)
        assert ids[0] == t and score[0] == 10_000, topic.name


def test_policy_search_scores_and_ties():
    # "return window" = {return, window}: return_window_days has both; earlier topic wins ties.
    ids, score, inter, count, total, n_q = _search("What is the return window?", k=10)
    assert n_q == 2 and ids[0] == P.TOPIC_INDEX["return_window_days"] and score[0] == 10_000
    live = ids[ids >= 0]
    assert count == live.size and total >= count
    s = score[ids >= 0]
    assert np.all(np.diff(s) <= 0)
    for a, b in zip(live[:-1], live[1:], strict=True):  # equal scores keep topic order
        if score[list(ids).index(a)] == score[list(ids).index(b)]:
            assert a < b
    # An unknown word counts in |Q|; a repeated token counts once; stop words are dropped.
    ids2, score2, *_, n_q2 = _search("return return zzzqqq the of")
    assert n_q2 == 2 and score2[0] == 5_000
    assert P.tokenize_query("the of my") == []
    ids3, _, _, count3, total3, n_q3 = _search([])
    assert count3 == 0 and total3 == 0 and np.all(ids3 == -1)
    # top_k caps the rows.
    assert _search("shipping", k=2)[3] == 2
    assert P.QUESTION_WORD_INDEX["shipping"] >= 0 and "the" not in P.QUESTION_WORD_INDEX


# --- the verifier (SPEC §8.6), hand-computed --------------------------------------------------


def _score(topic: str, truth: float, value: float, ok=True, has=True):
    from ecomjax.types import empty_problem

    prob = empty_problem().replace(
        pol_topic=jnp.int32(P.TOPIC_INDEX[topic]), pol_answer=jnp.float32(truth)
    )
    ans = empty_answer_fields().replace(
        env=jnp.int32(C.Env.POLICY), policy_value=jnp.float32(value), policy_ok=jnp.bool_(ok)
    )
    sc = verify(None, prob, None, None, ans, jnp.bool_(has))
    return float(sc.r_task), bool(sc.is_correct), float(sc.detail[0])


def test_verifier_hand_cases():
    assert _score("return_fee", 5.99, 5.99) == (1.0, True, 1.0)
    assert _score("return_fee", 0.0, 0.0) == (1.0, True, 1.0)
    assert _score("return_fee", 0.0, 5.99)[0] == -1.0
    assert _score("return_fee", 5.99, 0.0)[0] == -1.0
    assert _score("return_fee", 5.99, -5.99)[0] == -1.0
    r, ok, rho = _score("return_window_days", 10.0, 9.0)
    assert abs(rho - 0.9**4) < 1e-6 and abs(r - (2 * 0.9**4 - 1)) < 1e-6 and not ok
    # IsCorrect iff min/max >= 0.99369 (r_task >= 0.95).
    assert _score("return_window_days", 100.0, 99.4)[1]
    assert not _score("return_window_days", 100.0, 99.3)[1]
    cat = P.ANSWER_VOCAB.index("Next business day")
    assert _score("delivery_time", cat, cat) == (1.0, True, 1.0)
    assert _score("delivery_time", cat, cat + 1) == (-1.0, False, 0.0)
    assert _score("delivery_time", cat, -1) == (-1.0, False, 0.0)  # string not in vocabulary
    assert _score("return_fee", 5.99, 5.99, ok=False) == (-1.0, False, 0.0)  # unparsed
    assert _score("return_fee", 5.99, 5.99, has=False) == (-1.0, False, 0.0)  # no answer


# --- the most-common-answer exploit (from the shared suite, conftest) -----------------------


def _exploit(suite):
    return suite_part(suite, "POLICY", "policy_most_common", SUITE_AGENTS)


def test_most_common_answer_exploit(suite):
    """Answering the topic's most common value without reading the context.

    SPEC §9.5 answers with the sampled rule's value, so this shortcut wins whenever that
    is its topic's modal value: about 50 % at d <= 2 (c = 1, rule uniform), and 20-35 % at
    d >= 3, where the v1.1 rank spread puts 2/3 of the questions on rank >= 2 near misses
    (it was ~60-80 % before: topics with one rule of that size, rule 062). The bound asked
    for (<= 5 % at d >= 2) is still out of reach under the SPEC; see
    ``test_most_common_answer_exploit_is_blocked`` (strict xfail). Here: the exploit wins
    exactly on the episodes the rule table implies."""
    d, st = _exploit(suite)
    ok = np.asarray(st.reward.is_correct)
    topic = np.asarray(st.problem.pol_topic)
    answer = np.asarray(st.problem.pol_answer)
    # Exactly the episodes whose answer is the topic's modal value (within the ρ bar).
    guess = POLICY_MOST_COMMON[topic]
    hit = np.where(
        T.topic_categorical[topic],
        guess == answer,
        (np.minimum(guess, answer) / np.maximum(np.maximum(guess, answer), 1e-9)) ** 4 >= 0.975,
    )
    hit |= (np.abs(guess) < 1e-9) & (np.abs(answer) < 1e-9)
    assert np.array_equal(ok, hit)
    print("most-common exploit IsCorrect by d:", [float(ok[d == k].mean()) for k in range(21)])


@pytest.mark.xfail(strict=True, reason="SPEC §9.5 lets a context-free modal answer win >5 %")
def test_most_common_answer_exploit_is_blocked(suite):
    """The issue's bound, stated as a strict xfail: it must keep failing under this SPEC."""
    d, st = _exploit(suite)
    assert np.asarray(st.reward.is_correct)[d >= 2].mean() <= 0.05
