"""A ninth family, defined in this file, joins ecomjax through its descriptor alone
(``registry.register``): the shared API contract, a mixed batch with built-in families
through reset/step and the oracle, the customer, and the curriculum of ``ecomjax run``.
Its text-bridge half (system message, opening, parse, one server episode) is
``llm_bridge/ninth_family_test.py``, which runs with the bridge's tests (two test
sessions: docs/testing.md). docs/extending.md walks through it.

LATEST_ORDER: "What is the status of my most recent order?" The agent lists the orders and
answers with the latest one's id and status. Its customer hook corrects a lookup of another
order and confirms one of the latest."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax import order_history as O
from ecomjax import registry
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.catalog.types import Catalog
from ecomjax.family import Family, Feedback
from ecomjax.rollout import run_plan_jit
from ecomjax.runner import RunConfig
from ecomjax.runner import run as run_rounds
from ecomjax.sampling import base_problem
from ecomjax.testing import api_test
from ecomjax.types import (
    Action,
    AnswerFields,
    Dialogue,
    EnvParams,
    Observation,
    Problem,
    Score,
    World,
    empty_action,
    make_score,
)

I32 = jnp.int32
T = C.Tool
LATEST = registry.next_env()  # the first id after the built-in families'
HISTORY_DAYS = 365


# --- the family -------------------------------------------------------------------------


def generate(key: jax.Array, catalog: Catalog, d: jax.Array, params: EnvParams) -> Problem:
    """An order history of at least one order (H_orders(d) of them); the goal is implicit:
    the latest order, which chronological numbering makes the highest-numbered one."""
    h = jnp.maximum(D.difficulty(d, params.overrides).h_orders, 1)
    problem = base_problem(key, d, LATEST, params, catalog)
    return O.sort_orders(O.ensure_history(key, catalog, problem, h))


def verify(
    catalog: Catalog, problem: Problem, world: World, dlg: Dialogue, ans: AnswerFields, has
) -> Score:
    """r_task = r_oid + r_stat - 1, as STATUS scores its order."""
    del catalog, world, dlg
    target = problem.n_orders - 1
    status = problem.order_status[jnp.clip(target, 0, C.MAX_ORDERS - 1)]
    r_oid = (has & (ans.order == target) & (target >= 0)).astype(jnp.float32)
    r_stat = (has & (ans.status == status) & (target >= 0)).astype(jnp.float32)
    return make_score(r_oid + r_stat - 1.0, (r_oid == 1.0) & (r_stat == 1.0), r_oid, r_stat)


@struct.dataclass
class Memory:
    order: jax.Array  # int32, -1 unknown
    status: jax.Array  # int32


class LatestOrderPlan:
    """order_list(365), then the highest-numbered listed order and its status."""

    @staticmethod
    def init_memory() -> Memory:
        return Memory(order=I32(-1), status=I32(-1))

    @staticmethod
    def act(
        mem: Memory, obs: Observation, catalog: Catalog, sub: jax.Array | int = 0
    ) -> tuple[Memory, Action]:
        del sub
        res = obs.results
        rows = (res.tool == T.ORDER_LIST) & (res.error == 0)
        listed = res.ord_status[jnp.argmax(rows)]  # [MAX_ORDERS], -1: not listed
        latest = jnp.max(jnp.where(listed >= 0, jnp.arange(C.MAX_ORDERS), -1))
        found = rows.any() & (latest >= 0)
        mem = Memory(
            order=jnp.where(found, latest, mem.order).astype(I32),
            status=jnp.where(found, listed[jnp.maximum(latest, 0)], mem.status).astype(I32),
        )
        ready = mem.order >= 0
        action = empty_action(catalog.embed_dim)
        tool = jnp.where((jnp.arange(C.MAX_TOOL_CALLS) == 0) & ~ready, T.ORDER_LIST, T.NONE)
        main = action.answer.main.replace(env=I32(LATEST), order=mem.order, status=mem.status)
        return mem, action.replace(
            has_message=jnp.bool_(True),
            tool=tool.astype(I32),
            qty=jnp.where(tool == T.ORDER_LIST, HISTORY_DAYS, 1).astype(I32),
            answer=action.answer.replace(present=ready, done=jnp.bool_(True), main=main),
        )


def known_status(main: AnswerFields) -> jax.Array:
    return (main.status >= 0) & (main.status < O.N_STATUSES)


def feedback(
    catalog: Catalog,
    problem: Problem,
    world_before: World,
    world: World,
    dlg: Dialogue,
    action: Action,
) -> Feedback:
    """The customer hears which order the agent looks up: another one than the latest is a
    CORRECT (issue 0, wrong_order); the latest, a CONFIRM the first time (its memory: flag
    0 of ``confirmed``)."""
    del catalog, world_before, world
    looked = action.tool == T.ORDER_GET_STATUS
    latest = problem.n_orders - 1
    wrong = (looked & (action.order != latest)).any()
    right = (looked & (action.order == latest)).any()
    confirm = right & ~wrong & ~dlg.feedback_confirmed[0]
    return Feedback(
        confirm=confirm,
        confirm_new=confirm,
        correct=wrong,
        issues=jnp.zeros(C.MAX_FEEDBACK_ISSUES, bool).at[0].set(wrong),
        reveal=jnp.zeros(C.N_SLOTS, bool),
        confirmed=dlg.feedback_confirmed.at[0].set(dlg.feedback_confirmed[0] | confirm),
    )


FAMILY = Family(
    env=LATEST,
    name="LATEST_ORDER",
    generate=generate,
    oracle=LatestOrderPlan,
    details=("r_oid", "r_stat"),
    task_text="Tell the customer the id and the current status of their most recent order.",
    slots=(C.Slot.ORDER_REFERENCE,),  # "which order?" - no preference: the latest
    mean_turns=2,
    verify=verify,
    answer=(
        ("selected_order_id", "Their most recent order."),
        ("order_status", "Its status."),
    ),
    answer_ok=known_status,
    opening="What is the status of my most recent order?",
    feedback=feedback,
    issues=("wrong_order",),
    issue_text=("That's not my most recent order.",),
    confirm_text="Yes, that's my most recent order.",
)


@pytest.fixture(scope="module", autouse=True)
def registered():
    with registry.extended(FAMILY):
        yield
    assert "LATEST_ORDER" not in registry.FAMILIES


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return generate_catalog(42, 1000)


# --- registration ------------------------------------------------------------------------


def test_registration_checks_the_descriptor():
    assert registry.family("latest_order") is FAMILY and registry.by_env(LATEST) is FAMILY
    kw = dict(
        generate=generate,
        oracle=LatestOrderPlan,
        details=(),
        task_text="x",
        slots=(),
        mean_turns=1,
        verify=verify,
        opening="Hi.",
    )
    with pytest.raises(ValueError, match="takes env id 9"):
        registry.register(Family(env=LATEST + 5, name="OTHER", **kw))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Family(env=LATEST + 1, name="LATEST_ORDER", **kw))
    with pytest.raises(ValueError, match="JOURNEY sub-goals"):
        registry.register(Family(env=LATEST + 1, name="OTHER", fill=generate, **kw))
    with pytest.raises(ValueError, match="needs a name"):
        Family(env=LATEST + 1, **kw)
    with pytest.raises(ValueError, match="upper-case identifier"):
        Family(env=LATEST + 1, name="other one", **kw)
    with pytest.raises(ValueError, match="host's wording"):
        registry.register(
            Family(env=LATEST + 1, name="OTHER", feedback=feedback, issues=("x",), **kw)
        )
    with pytest.raises(ValueError, match="without a feedback hook"):
        Family(env=LATEST + 1, name="OTHER", issues=("x",), **kw)
    with pytest.raises(ValueError, match="at most 6 feedback issues"):
        Family(env=LATEST + 1, name="OTHER", feedback=feedback, issues=("x",) * 7, **kw)
    with pytest.raises(ValueError, match="built-in"):
        registry.unregister("CART")
    assert registry.next_env() == LATEST + 1  # nothing half-registered


def test_the_shared_contract(catalog):
    """jit, vmap, bit-identical replay, batch = single runs, fixed shapes, reward ranges."""
    api_test("LATEST_ORDER", catalog)


# --- a mixed batch with built-in families -------------------------------------------------

N = 48  # episodes per slice


def _keys(offset: int, n: int) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(7), i))(jnp.arange(n) + offset)


def host(tree):
    """numpy leaves, typed PRNG keys as their key data."""

    def leaf(x):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)

    return jax.tree_util.tree_map(leaf, tree)


def mixed_batch(catalog, others: tuple[str, ...], n: int):
    """The ninth family's slice first, then ``others``: (states of the mixed batch, states
    of ``others`` alone on the same keys and d)."""
    d = jnp.arange(n, dtype=I32) % (C.D_MAX + 1)
    names = ("LATEST_ORDER", *others)
    keys = [_keys(i * n, n) for i in range(len(names))]
    params = EnvParams()
    envs = [registry.family(x).env for x in names]
    mixed = run_plan_jit(
        catalog,
        jnp.concatenate(keys),
        jnp.tile(d, len(names)),
        tuple((x, n) for x in names),
        make_oracle(envs),
        params,
    )
    alone = run_plan_jit(
        catalog,
        jnp.concatenate(keys[1:]),
        jnp.tile(d, len(others)),
        tuple((x, n) for x in others),
        make_oracle(envs[1:]),
        params,
    )
    return host(mixed.state), host(alone.state)


def check_mixed(m, w, n: int) -> None:
    for a, b in zip(jax.tree_util.tree_leaves(m), jax.tree_util.tree_leaves(w), strict=True):
        np.testing.assert_array_equal(a[n:], b)
    ninth = slice(0, n)
    assert (m.problem.env[ninth] == LATEST).all()
    assert m.reward.is_correct[ninth].all() and (m.reward.r_task[ninth] == 1.0).all()
    assert (m.reward.detail[ninth, :2] == 1.0).all()  # r_oid, r_stat
    assert (m.dialogue.turn[ninth] == 2).all()  # order_list, then the answer


def test_a_mixed_batch_changes_nothing_for_the_others(catalog):
    """LATEST_ORDER, CART and STATUS in one batch: the oracle solves every LATEST_ORDER
    episode, and the CART and STATUS episodes end bit for bit as in a batch without it."""
    check_mixed(*mixed_batch(catalog, ("CART", "STATUS"), N), N)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # two C8-sized compiles
def test_a_mixed_batch_with_the_eight(catalog):
    """The same beside all eight built-in families (two C8-sized compiles)."""
    check_mixed(*mixed_batch(catalog, C.ENV_NAMES, 16), 16)


@pytest.fixture(scope="module")
def episode(catalog):
    """(state after reset, jitted step) of one LATEST_ORDER episode with two orders or more."""
    from ecomjax.core import reset, step

    params = EnvParams()
    problem = jax.jit(generate, static_argnums=3)(jax.random.key(3), catalog, I32(9), params)
    assert int(problem.n_orders) >= 2
    state, _ = reset(jax.random.key(3), catalog, problem, params)
    return state, jax.jit(step, static_argnums=3)


def test_a_wrong_or_out_of_range_answer(catalog, episode):
    """The verifier gives no credit for another order, and the descriptor's answer check
    makes an unknown status an INVALID_ANSWER hard fail."""
    state, step = episode
    problem = state.problem

    def answer(order: int, status: int):
        a = empty_action(catalog.embed_dim)
        main = a.answer.main.replace(env=I32(LATEST), order=I32(order), status=I32(status))
        ans = a.answer.replace(present=jnp.bool_(True), done=jnp.bool_(True), main=main)
        return step(catalog, state, a.replace(answer=ans), EnvParams())[0]

    last = int(problem.n_orders) - 1
    right = answer(last, int(problem.order_status[last]))
    assert bool(right.reward.is_correct) and float(right.reward.r_task) == 1.0
    wrong = answer(last - 1, int(problem.order_status[last]))
    assert not bool(wrong.reward.is_correct) and float(wrong.reward.r_task) == 0.0
    bad = answer(last, O.N_STATUSES)
    assert int(bad.dialogue.hard_fail) == C.HardFail.INVALID_ANSWER
    assert float(bad.reward.r_total) == -1.0


def test_the_customer_reads_the_descriptors_slots(catalog, episode):
    """Asked about its one slot (which order), the customer has no preference; asked about
    a slot the family does not declare, it does not understand (SPEC §10.2)."""
    state, step = episode
    status = {}
    for slot in (C.Slot.ORDER_REFERENCE, C.Slot.QUANTITY):
        a = empty_action(catalog.embed_dim)
        a = a.replace(
            has_message=jnp.bool_(True),
            tool=a.tool.at[0].set(T.ASK_USER),
            slots=a.slots.at[0, slot].set(True),
        )
        _, ts = step(catalog, state, a, EnvParams())
        assert bool(ts.observation.reply.acts[C.Act.CLARIFY])
        status[slot] = int(ts.observation.reply.slot_status[slot])
    CS = C.ClarifyStatus
    assert status == {C.Slot.ORDER_REFERENCE: CS.NO_PREFERENCE, C.Slot.QUANTITY: CS.NOT_UNDERSTOOD}


def lookup(catalog: Catalog, order: int) -> Action:
    """A turn that tells the customer it looks up ``order``'s status."""
    a = empty_action(catalog.embed_dim)
    return a.replace(
        has_message=jnp.bool_(True),
        tool=a.tool.at[0].set(T.ORDER_GET_STATUS),
        order=a.order.at[0].set(order),
    )


def test_the_customer_speaks_through_the_feedback_hook(catalog, episode):
    """The descriptor's hook drives the shared customer (SPEC §10.2, §10.3): looking up
    another order is a CORRECT naming its issue, and the same CORRECT again raises the
    frustration until the customer quits on the fourth; the latest order is confirmed
    once (user-caused), then acknowledged."""
    state, step = episode
    params = EnvParams()
    last = int(state.problem.n_orders) - 1
    s = state
    for turn in range(4):
        s, ts = step(catalog, s, lookup(catalog, last - 1), params)
        acts = np.asarray(ts.observation.reply.acts)
        if turn < 3:
            assert acts[C.Act.CORRECT] and not acts[C.Act.ACK] and not bool(ts.terminated)
            assert np.asarray(ts.observation.reply.feedback_issues).tolist() == [1, 0, 0, 0, 0, 0]
            assert int(s.dialogue.frustration) == turn
        else:
            assert acts[C.Act.QUIT] and bool(ts.terminated)
    s = state
    for turn in range(2):
        s, ts = step(catalog, s, lookup(catalog, last), params)
        reply = ts.observation.reply
        acts = np.asarray(reply.acts)
        assert bool(acts[C.Act.CONFIRM]) == bool(reply.feedback_confirm) == (turn == 0)
        assert bool(acts[C.Act.ACK]) == (turn == 1) and not acts[C.Act.CORRECT]
        assert bool(reply.user_caused) == (turn == 0)


def test_the_curriculum_of_a_run(catalog):
    """``ecomjax run``'s rounds: LATEST_ORDER is a task of its own in the curriculum, and
    the oracle's successes move its window up as they move CART's."""
    res = run_rounds(
        RunConfig(tasks="CART,LATEST_ORDER", batch=64, rounds=4, seed=1), catalog=catalog
    )
    assert set(res.per_task) == {"CART", "LATEST_ORDER"}
    summary = res.summary()["per_task"]
    assert summary["LATEST_ORDER"]["success_rate"] == 1.0
    windows = [h["LATEST_ORDER"] for h in res.history]
    assert windows[-1][1] > windows[0][1], windows  # every episode solved: h rose
    assert len(res.state["h"]) == 2 and res.state["h"][1] == res.curriculum["LATEST_ORDER"][1]
