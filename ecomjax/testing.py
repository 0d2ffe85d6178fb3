"""``api_test``: a reusable conformance check for a task family (after pgx's).

It plays a small batch with a reference agent and checks what every family must honour:
it runs under ``jit`` and ``vmap``, the same key replays bit-identically, a vmapped batch
equals the stacked single episodes, shapes and dtypes never change between steps, values
are finite, rewards stay in range, and the observation carries no hidden-goal field.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax.agents import AGENTS, Agent
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.catalog.types import Catalog
from ecomjax.core import reset, step
from ecomjax.registry import Family, family
from ecomjax.rollout import families_for, run_batch_jit
from ecomjax.types import EnvParams, Observation, Problem, UserAct

# Problem fields that name the hidden goal by index or answer (SPEC §10.1 "never
# expressed"); none may appear in what the agent sees. Knowable statements (description
# keys, quantities, variant values) travel in UserAct under their own names.
HIDDEN_FIELDS = {
    "item_pid",
    "item_var_target",
    "item_var_vals",
    "pending",
    "has_slot",
    "pd_target",
    "sub_original",
    "sub_witness",
    "pool_witness",
    "ret_order",
    "ret_line",
    "ret_witness",
    "status_order",
    "pol_rule",
    "pol_answer",
    "protected",
    "req_final",
    "line_pid",
    "order_status",
}
assert {f.name for f in dataclasses.fields(Problem)} | {"req_final"} >= HIDDEN_FIELDS


# Words of the synthetic catalog's titles, for random search queries in tests.
QUERY_WORDS = (
    "wireless", "headphones", "charger", "premium", "shoes", "running",
    "yoga", "mat", "desk", "lamp", "usb", "cable",
)  # fmt: skip


@partial(jax.jit, static_argnums=(0, 4))
def generate_batch(generate, keys, catalog, d, params: EnvParams) -> Problem:
    """``vmap(generate)`` under one jit: run eagerly, vmap compiles each primitive alone
    (hundreds of small compiles per call site)."""
    return jax.vmap(generate, (0, None, 0, None))(keys, catalog, d, params)


@partial(jax.jit, static_argnums=3)
def reset_batch(keys, catalog, problems: Problem, params: EnvParams):
    """``vmap(reset)`` under one jit, shared by every test on a worker."""
    return jax.vmap(reset, (0, None, 0, None))(keys, catalog, problems, params)


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): whether k successes in n contradict a rate <= p."""
    lp, lq, ln = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    logs = [
        ln - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq
        for j in range(k, n + 1)
    ]
    return float(sum(math.exp(x) for x in logs))


def rate_exceeds(k: int, n: int, p: float, alpha: float = 1e-3) -> bool:
    """A success rate above ``p``, significant at ``alpha``: small default sweeps cannot
    tell 3/38 from 5 %, the full sweep (thousands of episodes) can."""
    return k > n * p and binomial_tail(k, n, p) < alpha


def _host(x) -> np.ndarray:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def suite_part(suite, env: str, agent: str, agents: tuple[str, ...]):
    """(d, state) of all (family, agent) slices of a multi-agent ``run_plan`` result (a plan
    run in several rounds repeats its entries)."""
    from ecomjax.rollout import slices

    plan, d, res = suite
    j = agents.index(agent)
    idx = [
        np.arange(a, b)
        for (name, a, b), entry in zip(slices(plan), plan, strict=True)
        if name == env and entry[2] == j
    ]
    if not idx:
        raise KeyError((env, agent))
    sel = jnp.asarray(np.concatenate(idx))
    state = jax.tree_util.tree_map(lambda x: x[sel], res.state)
    return np.asarray(d)[np.asarray(sel)], state


def check_reward_ranges(r, params: EnvParams | None = None) -> None:
    """SPEC §13.1 over a batch of RewardInfo: every component in range, the breakdown
    recomposes to r_total after clipping, and no hard fail is IsCorrect."""
    p = params if params is not None else EnvParams()
    r_total, r_task = np.asarray(r.r_total), np.asarray(r.r_task)
    r_eff, r_hall = np.asarray(r.r_eff), np.asarray(r.r_hall)
    hard = np.asarray(r.hard_fail) != 0
    assert np.all(np.abs(r_total) <= 1 + 1e-6) and np.all(np.abs(r_task) <= 1 + 1e-6)
    assert np.all(np.abs(r_eff) <= 1 + 1e-6)
    assert np.all((r_hall <= 0) & (r_hall >= -1))
    recomposed = np.clip(p.w_task * r_task + p.w_eff * r_eff + p.w_hall * r_hall, -1, 1)
    np.testing.assert_allclose(np.where(hard, -1.0, recomposed), r_total, atol=1e-6)
    assert not np.any(np.asarray(r.is_correct) & hard)


def tree_equal(a, b) -> bool:
    """Bitwise equality of two pytrees (typed PRNG keys compare by their key data)."""
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        x.dtype == y.dtype and x.shape == y.shape and np.array_equal(_host(x), _host(y))
        for x, y in zip(la, lb, strict=True)
    )


def _spec(tree) -> list[tuple]:
    return [(x.shape, x.dtype) for x in jax.tree_util.tree_leaves(tree)]


def check_no_hidden_fields() -> None:
    names = {f.name for f in dataclasses.fields(Observation)}
    names |= {f.name for f in dataclasses.fields(UserAct)}
    leaked = names & HIDDEN_FIELDS
    if leaked:
        raise AssertionError(f"observation exposes hidden-goal fields: {sorted(leaked)}")


def play_single(
    catalog: Catalog,
    key: jax.Array,
    d: int,
    fam: Family,
    agent: Agent,
    params: EnvParams,
    max_turns: int = 4 + C.D_MAX // 2,
    jit: bool = True,
):
    """One episode with the unbatched functions in a Python loop: the reference that a
    vmapped batch must equal."""
    wrap = (lambda f, **kw: jax.jit(f, **kw)) if jit else (lambda f, **kw: f)
    gen = wrap(fam.generate, static_argnums=3)
    rst = wrap(reset, static_argnums=3)
    stp = wrap(step, static_argnums=3)
    act = wrap(agent.act)
    problem = gen(key, catalog, jnp.int32(d), params)
    state, ts = rst(key, catalog, problem, params)
    akey = jax.random.fold_in(key, 0xA6E)
    memory = agent.init(akey, ts.observation, catalog)
    for t in range(max_turns):
        if int(state.dialogue.termination) != C.Termination.RUNNING:
            break
        memory, action = act(jax.random.fold_in(akey, t), memory, ts.observation, catalog)
        state, ts = stp(catalog, state, action, params)
    return state


def api_test(
    env: str | Family,
    catalog: Catalog | None = None,
    params: EnvParams | None = None,
    agent: str = "oracle",
    n: int = 8,
) -> None:
    """Raises AssertionError when the family breaks the shared contract."""
    fam = family(env) if isinstance(env, str) else env
    catalog = catalog if catalog is not None else generate_catalog(42, 1000)
    params = params if params is not None else EnvParams()
    ag = AGENTS[agent]
    check_no_hidden_fields()
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(n))
    d = jnp.arange(n, dtype=jnp.int32) % (C.D_MAX + 1)
    fams = families_for(fam.env)
    first = run_batch_jit(catalog, keys, d, fam.generate, ag, params, families=fams)
    again = run_batch_jit(catalog, keys, d, fam.generate, ag, params, families=fams)
    if not tree_equal(first.state, again.state):
        raise AssertionError("the same keys did not replay bit-identically")
    for i in (0, n - 1):
        single = play_single(catalog, keys[i], int(d[i]), fam, ag, params)
        batched = jax.tree_util.tree_map(lambda x, i=i: x[i], first.state)
        if not tree_equal(single, batched):
            raise AssertionError(f"vmapped episode {i} differs from the same episode run alone")
    # Shapes and dtypes are fixed across steps, so lax.scan can carry them.
    problem = jax.jit(fam.generate, static_argnums=3)(keys[0], catalog, d[0], params)
    state, ts0 = jax.jit(reset, static_argnums=3)(keys[0], catalog, problem, params)
    memory = ag.init(keys[0], ts0.observation, catalog)
    _, action = jax.jit(ag.act)(keys[0], memory, ts0.observation, catalog)
    state1, ts1 = jax.jit(step, static_argnums=3)(catalog, state, action, params)
    if _spec(state) != _spec(state1) or _spec(ts0) != _spec(ts1):
        raise AssertionError("state or timestep changed shape or dtype across a step")
    if set(ts0.extras) != set(ts1.extras):
        raise AssertionError("extras keys differ between reset and step")
    for leaf in jax.tree_util.tree_leaves(first.state):
        if jnp.issubdtype(leaf.dtype, jnp.floating) and not bool(jnp.all(jnp.isfinite(leaf))):
            raise AssertionError("non-finite value in the episode state")
    r = first.state.reward
    done = first.state.dialogue.termination != C.Termination.RUNNING
    if not bool(done.all()):
        raise AssertionError("an episode did not terminate within the turn limit")
    ok = (
        (jnp.abs(r.r_total) <= 1 + 1e-6).all()
        & (jnp.abs(r.r_task) <= 1 + 1e-6).all()
        & (jnp.abs(r.r_eff) <= 1 + 1e-6).all()
        & (r.r_hall <= 0).all()
        & (r.r_hall >= -1).all()
    )
    if not bool(ok):
        raise AssertionError("a reward component left its range")
