"""Fixtures of the host-bridge tests: catalog id tables and a codec with a small order
history (the one ``fuzz.VALID_CALLS`` refers to)."""

from __future__ import annotations

import pytest
from ecomjax.llm_bridge.fuzz import fuzz_codec
from ecomjax.llm_bridge.ids import CatalogIds, IdCodec

from ecomjax.catalog.synthetic import synthetic_tables


@pytest.fixture(scope="session")
def cat_ids(catalog) -> CatalogIds:
    return CatalogIds.from_catalog(catalog, synthetic_tables())


@pytest.fixture
def codec(cat_ids) -> IdCodec:
    return fuzz_codec(cat_ids)
