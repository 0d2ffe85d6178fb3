"""Shared fixtures. Compiles are the expensive part on CPU, so batches reuse one shape."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

# Tests compile far more XLA programs than they run (hundreds of shapes, each executed a
# few times), so they trade code quality for compile time: LLVM at -O0 compiles about
# 25-50% faster (ecomjax/envs/sub/sub_test.py: 71 -> 54 CPU seconds), and XLA's older
# loop emitters compile a family's rollout faster than the fusion emitters (CART 11.8 ->
# 7.5 s, POLICY 7.6 -> 7.1 s: benchmarks/compile_flags.py; the suite's one giant program
# compiled slower with them when tried by hand, so it opts back in below). Set
# ECOMJAX_TEST_XLA_OPT=1 to test the optimised code path instead. This must happen before
# JAX initialises its backend.


def _xla_accepts(flag: str) -> bool:
    """XLA aborts the process on an unknown flag, so ask a throwaway interpreter first
    (flags come and go between jaxlib releases)."""
    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    code = "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"
    probe = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
    return probe.returncode == 0


if os.environ.get("ECOMJAX_TEST_XLA_OPT") != "1":
    _fast = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    if _xla_accepts("--xla_cpu_use_fusion_emitters=false"):
        _fast += " --xla_cpu_use_fusion_emitters=false"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_fast}".strip()

import jax  # noqa: E402
import pytest  # noqa: E402

# A persistent compile cache speeds up reruns; ECOMJAX_JAX_CACHE=off measures a cold run.
_CACHE = os.environ.get("ECOMJAX_JAX_CACHE", os.path.join(os.path.dirname(__file__), ".jax_cache"))
if _CACHE != "off":
    jax.config.update("jax_compilation_cache_dir", _CACHE)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.0)


# Files whose tests run the same compiled programs share a worker (and so one compile).
SHARED_COMPILES = {
    "train/loop_test.py": "train_step",
    "train/curriculum_study_test.py": "train_step",
}


# Every executable XLA:CPU loads keeps its JIT code in memory mappings until the jit cache
# that holds it is cleared, and Linux caps a process at vm.max_map_count mappings (65,530
# here). A worker that had compiled for ~30 min hit the cap: LLVM's "Unable to allocate
# section memory!" and an abort, with gigabytes of RAM free (docs/testing.md). So once a
# worker holds half the cap, the next test teardown clears JAX's caches (programs still
# needed recompile, mostly from the persistent cache).
def _map_limit() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except OSError:  # not Linux: no such cap to watch
        return 0


_MAP_LIMIT = _map_limit()


def _n_maps() -> int:
    with open("/proc/self/maps", "rb") as f:
        return f.read().count(b"\n")


def pytest_runtest_teardown(item, nextitem):
    if not _MAP_LIMIT or (n_maps := _n_maps()) <= _MAP_LIMIT // 2:
        return
    jax.clear_caches()
    gc.collect()
    note = f"conftest: {n_maps} memory maps after {item.nodeid}; caches cleared: {_n_maps()}\n"
    os.write(2, note.encode())


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="run the full (slow) sweeps")


@pytest.hookimpl(tryfirst=True)  # before xdist tags nodeids with their group
def pytest_collection_modifyitems(config, items):
    # Under `pytest -n N --dist loadgroup` (scripts/test.sh) a worker takes whole files, so
    # module fixtures compile once; every test of the shared `suite` rollout goes to one
    # worker, so that rollout compiles once.
    for item in items:
        path = item.nodeid.split("::")[0]
        shared = "suite" in getattr(item, "fixturenames", ())
        group = "suite" if shared else SHARED_COMPILES.get(path, path)
        item.add_marker(pytest.mark.xdist_group(group))
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


# The reference agents play every family; each exploit plays the families it targets.
SUITE_AGENTS = (
    "oracle",
    "random",
    "silent",
    "empty",
    "first_k",
    "history_cart",
    "return_all",
    "status_most_common",
    "unseen_ids",
    "cheapest_table",
    "policy_most_common",
)
SUITE_STATS: dict[str, int] = {}


def _suite_agents_and_targets():
    from ecomjax import constants as C
    from ecomjax.agents import empty_cart_agent, random_agent, silent_agent
    from ecomjax.agents.exploits import SHORTCUTS, policy_most_common_agent
    from ecomjax.agents.oracle import make_oracle

    every = tuple(C.ENV_NAMES)
    table = {
        "oracle": (make_oracle(), every),
        "random": (random_agent, every),
        "silent": (silent_agent, every),
        "empty": (empty_cart_agent, every),
        "policy_most_common": (policy_most_common_agent, ("POLICY",)),
    }
    for name, (agent, envs) in SHORTCUTS.items():
        table[name] = (agent, tuple(C.ENV_NAMES[e] for e in envs))
    return [table[name] for name in SUITE_AGENTS]


@pytest.fixture(scope="session")
def suite(catalog, params, request):
    """Every family x every reference agent, and every exploit agent on its families,
    x d = 0..20, in ONE compiled mixed rollout, so the SPEC §13 sweeps and the exploit
    checks of all families cost one compile. The compiled plan runs in rounds with new
    keys and d shifted by the round (1 round of 2 episodes per (family, agent, d) by
    default, as the compile dominates; 20 rounds of 10 with --runslow), and
    ``SUITE_STATS`` records that later rounds never recompiled. Returns (plan repeated
    per round, d, result concatenated)."""
    import jax.numpy as jnp

    from ecomjax.rollout import run_plan

    run_plan_jit = jax.jit(
        run_plan,
        static_argnames=("plan", "agent", "params"),
        compiler_options={"xla_cpu_use_fusion_emitters": True},  # see XLA_FLAGS above
    )

    slow = request.config.getoption("--runslow") or os.environ.get("ECOMJAX_SLOW") == "1"
    per_d, rounds = (10, 20) if slow else (2, 1)
    table = _suite_agents_and_targets()
    agents = tuple(agent for agent, _ in table)
    n = 21 * per_d
    # Agent-major: each agent acts on one contiguous run of episodes.
    plan = tuple((env, n, j) for j, (_, envs) in enumerate(table) for env in envs)
    total = n * len(plan)
    results, ds = [], []
    for r in range(rounds):
        ids = r * total + jnp.arange(total)
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(2025), i))(ids)
        d = (jnp.arange(total, dtype=jnp.int32) + r) % 21
        results.append(run_plan_jit(catalog, keys, d, plan, agents, params))
        ds.append(d)
        SUITE_STATS.setdefault("cache_after_first_round", run_plan_jit._cache_size())
    SUITE_STATS["cache_after_last_round"] = run_plan_jit._cache_size()
    SUITE_STATS["rounds"] = rounds
    res = jax.tree_util.tree_map(
        lambda *xs: jnp.concatenate([jnp.atleast_1d(x) for x in xs]), *results
    )
    return plan * rounds, jnp.concatenate(ds), res
