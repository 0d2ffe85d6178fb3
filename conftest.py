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
