"""The test command's worker grouping (conftest) must reach pytest-xdist's scheduler."""

from __future__ import annotations

import pytest


def test_group_reaches_the_scheduler(request):
    """Under ``--dist loadgroup`` xdist tags each node id with its group; without the tag
    every file's compiles repeat on every worker (pytest 9.2 with xdist 3.8 dropped it)."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("runs under the test command (pytest-xdist --dist loadgroup)")
    assert request.node.nodeid.endswith("@tests/test_xdist_groups.py")
