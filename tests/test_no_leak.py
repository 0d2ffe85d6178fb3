"""Invariant 16 (SPEC v1.1): the no-leak check compares values, not names. Each hidden
field of the problem is perturbed in turn, to another value of its own domain, and every
observation an agent gets before it retrieves anything (the opening, the reply to an
``ask_user`` for every slot, the reply to a plain message) must stay bit-identical. A
target id planted in any observation field makes this fail; a check of field names
(``testing.check_no_hidden_fields``) would not notice."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import SUITE_AGENTS
from ecomjax import constants as C
from ecomjax import policy_rules as P
from ecomjax.actions import Call, make_action
from ecomjax.core import reset, step
from ecomjax.order_history import OrderStatus
from ecomjax.testing import suite_part, tree_equal
from ecomjax.types import Problem

N_STATUS = len(OrderStatus)


def _next_id(x, n):
    """Another valid id in [0, n) where x is one; padding (< 0) stays."""
    return jnp.where(x >= 0, (x + 1) % n, x)


def _perturbations(n_products: int) -> dict[str, Callable[[Problem], Problem]]:
    """hidden field -> a function giving the problem with that field's values changed."""

    def orders(p, x):
        return jnp.where(p.n_orders > 1, (x + 1) % jnp.maximum(p.n_orders, 1), x)

    def lines(p):
        n = p.order_n_lines[jnp.clip(p.ret_order, 0, C.MAX_ORDERS - 1)]
        return jnp.where(n > 1, (p.ret_line + 1) % jnp.maximum(n, 1), p.ret_line)

    pid = lambda x: _next_id(x, n_products)  # noqa: E731
    return {
        "item_pid": lambda p: p.replace(item_pid=pid(p.item_pid)),
        "item_var_target": lambda p: p.replace(
            item_var_target=jnp.where(p.item_var_req, (p.item_var_target + 1) % 3, 0)
        ),
        "pd_target": lambda p: p.replace(pd_target=pid(p.pd_target)),
        "sub_original": lambda p: p.replace(sub_original=pid(p.sub_original)),
        "sub_witness": lambda p: p.replace(sub_witness=pid(p.sub_witness)),
        "pool_witness": lambda p: p.replace(pool_witness=pid(p.pool_witness)),
        "ret_witness": lambda p: p.replace(ret_witness=pid(p.ret_witness)),
        "ret_order": lambda p: p.replace(ret_order=orders(p, p.ret_order)),
        "ret_line": lambda p: p.replace(ret_line=lines(p)),
        "status_order": lambda p: p.replace(
            status_order=jnp.where(p.status_indirect, orders(p, p.status_order), p.status_order)
        ),
        "order_status": lambda p: p.replace(order_status=(p.order_status + 1) % N_STATUS),
        "order_tracking": lambda p: p.replace(
            order_tracking=jnp.where(p.order_tracking >= 0, p.order_tracking + 1, -1)
        ),
        "line_pid": lambda p: p.replace(line_pid=pid(p.line_pid)),
        "pol_rule": lambda p: p.replace(pol_rule=(p.pol_rule + 1) % P.N_RULES),
        "pol_answer": lambda p: p.replace(pol_answer=p.pol_answer + 1.0),
        "protected": lambda p: p.replace(protected=pid(p.protected)),
    }


# Fields the customer states or reveals when asked (SPEC §10.1: knowable); they are
# perturbed only where pending, and compared only before the agent asks.
ASKABLE = {"item_var_target"}


def _player(catalog, params):
    """Observations of the opening, the reply to a plain message, then to an ``ask_user``
    for every slot: the three turns an agent has before it retrieves anything. One jitted
    function for every perturbation (same shapes: one compile)."""
    say = make_action()
    ask = make_action([Call(C.Tool.ASK_USER, slots=tuple(range(C.N_SLOTS)))])

    def play(key, problem):
        state, ts = reset(key, catalog, problem, params)
        obs = [ts.observation]
        for action in (say, ask):
            state, ts = step(catalog, state, action, params, families=())
            obs.append(ts.observation)
        return obs, state.dialogue.termination

    return jax.jit(jax.vmap(play))


@pytest.fixture(scope="module")
def episodes(suite):
    """(keys, problems) of every family's oracle episodes in the shared suite rollout
    (conftest ``suite``): every d, no extra generator compile."""
    parts = [suite_part(suite, env, "oracle", SUITE_AGENTS)[1] for env in C.ENV_NAMES]
    cat = lambda *xs: jnp.concatenate(xs)  # noqa: E731
    return cat(*[p.key for p in parts]), jax.tree_util.tree_map(cat, *[p.problem for p in parts])


@pytest.fixture(scope="module")
def observed(catalog, params, episodes):
    """{field or None: (problems, observations)} for the unperturbed batch and each
    perturbation, plus the terminations of the unperturbed run."""
    keys, problems = episodes
    play = _player(catalog, params)
    perturb = _perturbations(catalog.n_products)
    obs, term = play(keys, problems)
    out = {None: (problems, obs)}
    for f in sorted(perturb):
        changed = jax.vmap(perturb[f])(problems)
        if f in ASKABLE:  # only where the customer has not said it
            pend = problems.pending[..., C.Slot.VARIANT].any(1)  # [B, MAX_ITEMS]
            moved = jnp.where(pend, getattr(changed, f), getattr(problems, f))
            changed = changed.replace(**{f: moved})
        out[f] = (changed, play(keys, changed)[0])
    return out, np.asarray(term)


def test_silent_turns_do_not_end_the_episodes(observed):
    _, term = observed
    assert (term == C.Termination.RUNNING).mean() >= 0.9


@pytest.mark.parametrize("field", sorted(_perturbations(1000)))
def test_hidden_values_never_reach_observations(observed, field):
    runs, _ = observed
    problems, base = runs[None]
    changed, moved = runs[field]
    # The perturbation must really change something, or the test could not fail.
    assert not tree_equal(getattr(changed, field), getattr(problems, field)), field
    turns = 2 if field in ASKABLE else 3
    for t in range(turns):
        assert tree_equal(base[t], moved[t]), f"{field}: observation {t} depends on its value"
