"""Shared fixtures. Compiles are the expensive part on CPU, so batches reuse one shape."""

from __future__ import annotations

import os

import jax
import pytest

jax.config.update(
    "jax_compilation_cache_dir", os.path.join(os.path.dirname(__file__), ".jax_cache")
)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.0)


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="run the full (slow) sweeps")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow") or os.environ.get("ECOMJAX_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="full sweep: pass --runslow or set ECOMJAX_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def catalog():
    from ecomjax.catalog.synthetic import generate_catalog

    return generate_catalog(42, 1000)


@pytest.fixture(scope="session")
def params():
    from ecomjax.types import EnvParams

    return EnvParams()


SUITE_AGENTS = ("oracle", "random", "silent", "empty")


@pytest.fixture(scope="session")
def suite(catalog, params, request):
    """Every family x every reference agent x d = 0..20 in ONE compiled mixed rollout, so
    the SPEC §13 sweeps of all families cost one compile. Returns (plan, d, result)."""
    import jax.numpy as jnp

    from ecomjax import constants as C
    from ecomjax.agents import empty_cart_agent, random_agent, silent_agent
    from ecomjax.agents.oracle import make_oracle
    from ecomjax.rollout import run_plan_jit

    slow = request.config.getoption("--runslow") or os.environ.get("ECOMJAX_SLOW") == "1"
    per_d = 50 if slow else 10
    agents = (make_oracle(), random_agent, silent_agent, empty_cart_agent)
    n = 21 * per_d
    # Agent-major: each agent acts on one contiguous run of episodes.
    plan = tuple((name, n, j) for j in range(len(agents)) for name in C.ENV_NAMES)
    total = n * len(plan)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(2025), i))(jnp.arange(total))
    d = jnp.arange(total, dtype=jnp.int32) % 21
    return plan, d, run_plan_jit(catalog, keys, d, plan, agents, params)
