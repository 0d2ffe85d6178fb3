"""Compiled rounds carry no batch-sized constant.

XLA folds a vmapped gather's index arrays into constants with one entry per gathered
element: an unrolled binary search over [B, 60 lines, 64 candidates] once compiled a
125 MB constant into RETURN's B = 4,096 program (compact.in_sorted). Such a constant
grows with B, costs memory and start-up (the persistent cache stores it), and shows here
at B = 256 as a few MB.
"""

from __future__ import annotations

import jax
import pytest

from ecomjax.agents.oracle import make_oracle
from ecomjax.registry import family
from ecomjax.rollout import run_plan
from tests.support.hlo import constants

B = 256
LIMIT = 1 << 20  # bytes


@pytest.mark.parametrize("name", ["RETURN", pytest.param("JOURNEY", marks=pytest.mark.slow)])
def test_round_holds_no_batch_sized_constant(catalog, params, name):
    plan = ((name, B),)
    agent = make_oracle((family(name).env,))
    keys = jax.random.split(jax.random.key(0), B)
    d = jax.numpy.zeros(B, jax.numpy.int32)

    def round_fn(catalog, keys, d):
        return run_plan(catalog, keys, d, plan, agent, params).state.reward.r_total

    text = jax.jit(round_fn).lower(catalog, keys, d).compile().as_text()
    found = constants(text)
    assert found, "no constants parsed: the HLO text format changed"
    size, what, shape = found[0]
    assert size <= LIMIT, f"{what} {shape}: {size / 2**20:.1f} MiB baked into the program"
