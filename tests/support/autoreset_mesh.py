"""Auto-reset rounds over a mesh of simulated CPU devices, for a subprocess
(``ecomjax.sharding.run_on_host_devices``: the device count is fixed when JAX starts).

Test support, not shipped. Reports the episode ids the lanes hold after a few rounds, so
a test can check that devices hand out disjoint ids (device j of S: ids ``c * S + j``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import curriculum as cur
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.constants import Env
from ecomjax.runner import _autoreset_init, _make_autoreset_round, make_plan
from ecomjax.sharding import batch_mesh
from ecomjax.types import EnvParams


def check_lane_ids(n_devices: int, rounds: int = 3, steps: int = 6) -> dict:
    plan = make_plan(("CART", "STATUS"), 8 * n_devices)
    agent = make_oracle((Env.CART, Env.STATUS))
    params, ccfg = EnvParams(), cur.CurriculumConfig.default()
    mesh = batch_mesh(jax.devices()[:n_devices])
    catalog = generate_catalog(0, 200)
    lanes = jax.jit(_autoreset_init(plan, agent, params, mesh))(catalog)
    round_fn = jax.jit(_make_autoreset_round(plan, agent, params, ccfg, "stream", steps, mesh))
    cstate, completed = cur.init(len(plan)), 0
    for _ in range(rounds):
        cstate, lanes, valid, *_ = round_fn(
            catalog, cstate, lanes, jax.random.key(5), jnp.int32(0), jnp.bool_(False)
        )
        completed += int(np.asarray(valid).sum())
    ids = np.asarray(lanes.episode).reshape(n_devices, -1)
    return {
        "ids": ids.tolist(),
        "counters": np.asarray(lanes.next_episode).tolist(),
        "completed": completed,
    }
