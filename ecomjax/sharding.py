"""A mixed batch (``run_plan``) with the episode axis sharded over a device mesh.

Why ``shard_map`` over a re-cut plan rather than ``jit`` with batch shardings: a plan is a
static list of per-family slices, and the rollout slices the batch by family and by agent.
Under SPMD partitioning those slice boundaries do not line up with shard boundaries, so
XLA would move episodes between devices every turn. Instead each slice is cut into S equal
parts and device j runs part j of every slice: the same local plan on every device, one
compile, no communication inside the loop, and each device stops its while loop as soon
as its own episodes end. Episodes are independent under vmap (``tests/test_mixed.py``
checks batched == one at a time), so the result equals the single-device run bit for bit;
``env_steps`` is a ``psum`` and ``turns`` a ``pmax``. The catalog is replicated, or its
embedding rows are split over the same axis (``catalog.sharded_emb.place_catalog``): then
the loops that read them run in lockstep across devices.

``run_on_host_devices`` runs a check in a fresh interpreter with
``--xla_force_host_platform_device_count``, which must be set before JAX starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, PartitionSpec

from ecomjax.catalog.sharded_emb import catalog_specs, place_catalog
from ecomjax.catalog.types import Catalog
from ecomjax.kernels.sharded import shard_map_compat
from ecomjax.rollout import Plan, RolloutResult, run_plan
from ecomjax.types import EnvParams

__all__ = [
    "batch_mesh",
    "check_sharded_rollout",
    "make_sharded_rollout",
    "run_on_host_devices",
    "run_plan_sharded",
    "shard_plan",
]


def batch_mesh(devices=None, axis: str = "batch") -> Mesh:
    """A 1-D mesh over ``devices`` (default: all) named ``axis``."""
    devs = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devs), (axis,))


def shard_plan(plan: Plan, n_shards: int) -> tuple[Plan, np.ndarray]:
    """(local plan, perm): every slice cut into ``n_shards`` equal contiguous parts.

    ``x[perm]`` lays a plan-ordered batch out device-major: device j's block holds part j
    of every slice, in plan order, which is exactly the local plan. Every slice's size
    must be divisible by ``n_shards`` (``runner.make_plan(tasks, B)`` with B a multiple of
    S·len(tasks) satisfies it); a slice may not be split unevenly, since every device runs
    the same program."""
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")
    bad = [(e[0], e[1]) for e in plan if e[1] % n_shards]
    if bad:
        raise ValueError(f"slice sizes {bad} are not divisible by {n_shards} shards")
    local = tuple((e[0], e[1] // n_shards, *e[2:]) for e in plan)
    starts = np.cumsum([0] + [e[1] for e in plan])[:-1]
    perm = [
        np.arange(a + j * m, a + (j + 1) * m)
        for j in range(n_shards)
        for a, (_, m, *_) in zip(starts, local, strict=True)
    ]
    total = int(sum(e[1] for e in plan))
    return local, (np.concatenate(perm) if perm else np.zeros(0, int)).astype(np.int32)[:total]


def make_sharded_rollout(
    plan: Plan,
    agent,
    params: EnvParams,
    mesh: Mesh,
    axis: str = "batch",
    device_order: bool = False,
) -> Callable[[Catalog, jax.Array, jax.Array], RolloutResult]:
    """A jitted ``(catalog, keys, d) -> RolloutResult`` equal to ``run_plan`` on one device.

    ``keys`` and ``d`` are in plan order. The returned state is in plan order too, unless
    ``device_order``: then it stays laid out device-major (``x[perm]`` of ``shard_plan``),
    which saves a cross-device gather when the caller only reduces over episodes. A catalog
    placed by ``catalog.sharded_emb.place_catalog(catalog, mesh, axis)`` keeps its
    embedding rows split over the same axis (the episodes' searches then run in lockstep
    across devices); any other catalog is whole on every device."""
    local, perm = shard_plan(plan, mesh.shape[axis])
    inv = np.argsort(perm)

    def per_device(catalog, keys, d):
        res = run_plan(catalog, keys, d, local, agent, params)
        steps = jax.lax.psum(res.env_steps, axis)
        return res.state, steps, jax.lax.pmax(res.turns, axis)

    @jax.jit
    def rollout(catalog, keys, d):
        fn = shard_map_compat(
            per_device,
            mesh,
            in_specs=(
                catalog_specs(catalog, catalog.emb_axis),
                PartitionSpec(axis),
                PartitionSpec(axis),
            ),
            out_specs=(PartitionSpec(axis), PartitionSpec(), PartitionSpec()),
        )
        p = jnp.asarray(perm)
        state, steps, turns = fn(catalog, keys[p], d[p])
        if not device_order:
            state = jax.tree_util.tree_map(lambda x: x[jnp.asarray(inv)], state)
        return RolloutResult(state=state, env_steps=steps, turns=turns)

    return rollout


def run_plan_sharded(
    catalog: Catalog,
    keys: jax.Array,
    d: jax.Array,
    plan: Plan,
    agent,
    params: EnvParams,
    mesh: Mesh | None = None,
    axis: str = "batch",
) -> RolloutResult:
    """``run_plan`` with the batch sharded over ``mesh`` (default: all devices)."""
    mesh = batch_mesh(axis=axis) if mesh is None else mesh
    return make_sharded_rollout(plan, agent, params, mesh, axis)(catalog, keys, d)


def check_sharded_rollout(
    tasks: str = "STATUS,POLICY",
    per_device: int = 2,
    n_products: int = 300,
    n_devices: int | None = None,
    shard_catalog: bool = False,
    agent: str = "oracle",
    search_chunk: int = 0,
) -> dict:
    """Sharded ``run_plan`` == single-device ``run_plan``, every leaf bit for bit.

    A mixed batch of ``tasks`` (``agent``: oracle or random; d spread over 0..20),
    ``per_device`` episodes of each family on each device; ``shard_catalog`` splits the
    embedding rows over the devices too. ``search_chunk`` > 0 sets
    ``EnvParams.search_chunk``: the relevance dots of a split table match the whole one's
    when every device holds at least that many rows (``kernels.sharded``). Raises
    AssertionError naming the first leaf that differs; returns a small report. Needs
    several devices in this process (see ``run_on_host_devices``)."""
    from ecomjax.agents.oracle import make_oracle
    from ecomjax.catalog.synthetic import generate_catalog
    from ecomjax.registry import family, resolve_tasks
    from ecomjax.rollout import run_plan_jit
    from ecomjax.runner import make_plan

    devices = jax.devices()[: n_devices or jax.device_count()]
    mesh = batch_mesh(devices)
    names = resolve_tasks(tasks)
    batch = per_device * len(devices) * len(names)
    plan = make_plan(names, batch)
    if agent == "oracle":
        player = make_oracle(tuple(family(t).env for t in names))
    else:
        from ecomjax.agents import AGENTS

        player = AGENTS[agent]
    params = EnvParams(search_chunk=search_chunk) if search_chunk else EnvParams()
    catalog = generate_catalog(42, n_products)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(7), i))(jnp.arange(batch))
    d = (jnp.arange(batch, dtype=jnp.int32) * 5) % 21
    want = jax.block_until_ready(run_plan_jit(catalog, keys, d, plan, player, params))
    placed = place_catalog(catalog, mesh, "batch") if shard_catalog else catalog
    got = make_sharded_rollout(plan, player, params, mesh)(placed, keys, d)
    got = jax.block_until_ready(got)
    shards = {len(x.sharding.device_set) for x in jax.tree_util.tree_leaves(got.state)}

    def data(x: jax.Array) -> np.ndarray:
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        if not x.is_fully_addressable:  # a mesh over several processes: every slice
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    flat_w, tree_w = jax.tree_util.tree_flatten_with_path(want)
    flat_g, tree_g = jax.tree_util.tree_flatten_with_path(got)
    if tree_w != tree_g:
        raise AssertionError("result trees differ")
    for (path, a), (_, b) in zip(flat_w, flat_g, strict=True):
        x, y = data(a), data(b)
        if x.dtype != y.dtype or x.shape != y.shape:
            raise AssertionError(f"{jax.tree_util.keystr(path)}: dtype/shape differ")
        if not np.array_equal(np.atleast_1d(x).view(np.uint8), np.atleast_1d(y).view(np.uint8)):
            raise AssertionError(f"{jax.tree_util.keystr(path)}: values differ")
    return {
        "devices": len(devices),
        "plan": [list(e) for e in plan],
        "env_steps": int(got.env_steps),
        "turns": int(got.turns),
        "output_devices": sorted(shards),
        "emb_rows_per_device": int(placed.emb.addressable_shards[0].data.shape[0]),
        "identical": True,
    }


CHECKS = {
    "topk": "ecomjax.kernels.sharded:check_sharded_topk",
    "pool": "ecomjax.kernels.sharded_pool:check_sharded_pool",
    "rollout": "ecomjax.sharding:check_sharded_rollout",
    "emb": "ecomjax.catalog.sharded_emb:check_sharded_emb",
}


def run_on_host_devices(
    check: str = "rollout",
    n_devices: int = 8,
    timeout: float | None = 900,
    kwargs: dict | None = None,
) -> dict:
    """Run a check (a key of ``CHECKS`` or ``"module:function"``) in a fresh
    interpreter on ``n_devices`` simulated CPU devices; returns its report dict.

    Why a subprocess: the device count is an XLA flag read once, when JAX initialises,
    so it cannot be changed in a process that has already used JAX. Raises
    RuntimeError with the child's output if the check fails."""
    target = CHECKS.get(check, check)
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "").split()
    flags = [f for f in flags if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={n_devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    args = [target, str(n_devices), json.dumps(kwargs or {})]
    cmd = [sys.executable, "-m", "ecomjax.sharding", *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{target} failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(lines[-1])


def _main(argv: list[str]) -> int:
    import importlib

    target, n = argv[0], int(argv[1])
    kwargs = json.loads(argv[2]) if len(argv) > 2 else {}
    if jax.device_count() < n:
        raise SystemExit(f"need {n} devices, have {jax.device_count()} (set XLA_FLAGS)")
    module, name = target.split(":")
    report = getattr(importlib.import_module(module), name)(n_devices=n, **kwargs)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
