"""SPEC §12: a generator gives the same Problem bit for bit whether it is jitted (and
vmapped) or run op by op. Stated bounds are computed in integer units (cents, tenths,
steps), so no compiler rewrite can move a stated value by an ulp: under jit XLA turns
``x / c`` into ``x * (1/c)``, contracts ``a*b + c`` into an FMA and inlines ``exp``, none of
which happens op by op. Each family runs one jitted vmapped batch and the same problems
eagerly under ``jax.disable_jit()`` (slow, so one key per level)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax.registry import family
from ecomjax.testing import tree_equal
from ecomjax.types import EnvParams

LEVELS = (0, 5, 12, 20)
# JOURNEY reruns every family's fill; at d >= 12 it holds 5 of the 7, so two levels do.
FAMILY_LEVELS = {"JOURNEY": (12, 20)}
PARAMS = EnvParams()


def _differing_fields(a, b) -> list[str]:
    return [
        f.name
        for f in dataclasses.fields(a)
        if not np.array_equal(np.asarray(getattr(a, f.name)), np.asarray(getattr(b, f.name)))
    ]


@pytest.mark.parametrize("name", list(C.ENV_NAMES))
def test_jitted_generation_equals_eager(catalog, name):
    gen = family(name).generate
    levels = FAMILY_LEVELS.get(name, LEVELS)
    keys = jax.vmap(lambda d: jax.random.fold_in(jax.random.key(1212), d))(jnp.asarray(levels))
    d = jnp.asarray(levels, jnp.int32)
    batch = jax.jit(jax.vmap(gen, (0, None, 0, None)), static_argnums=3)(keys, catalog, d, PARAMS)
    bad = {}
    for i, level in enumerate(levels):
        with jax.disable_jit():
            eager = gen(keys[i], catalog, d[i], PARAMS)
        jitted = jax.tree_util.tree_map(lambda x, i=i: x[i], batch)
        if not tree_equal(eager, jitted):
            bad[level] = _differing_fields(eager, jitted)
    assert not bad, f"{name}: jitted != eager at d -> fields {bad}"
