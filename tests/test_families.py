"""The family descriptors (``ecomjax.family``): one per env, imported statically, and every
per-family table (registry, verifiers, oracle plans, JOURNEY's fills and plans) read from
them, so no family can be skipped silently or loaded by a name that drifts."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax import customer, verify
from ecomjax.agents import oracle
from ecomjax.envs.journey import generator as journey_generator
from ecomjax.envs.journey import oracle as journey_oracle
from ecomjax.envs.subgoal_families import SUBGOAL_FAMILIES
from ecomjax.family import Family
from ecomjax.registry import FAMILIES, by_env, family
from ecomjax.types import N_DETAIL

ROOT = Path(__file__).resolve().parents[1]


def test_one_descriptor_per_env_in_env_order():
    assert [f.env for f in FAMILIES.values()] == list(C.Env)
    assert list(FAMILIES) == [e.name for e in C.Env]
    for name, fam in FAMILIES.items():
        assert isinstance(fam, Family) and fam.name == name
        assert family(name.lower()) is fam and by_env(int(fam.env)) is fam
        assert callable(fam.generate)
        assert callable(fam.oracle.init_memory) and callable(fam.oracle.act)
        assert 1 <= len(fam.details) <= N_DETAIL and fam.mean_turns >= 1
        assert fam.task_text.strip(), fam


def test_subgoal_families_are_every_verified_family():
    """JOURNEY is scored from its sub-goals; every other family verifies itself and can be
    a sub-goal (its ``fill``)."""
    assert [f.env for f in SUBGOAL_FAMILIES] == [e for e in C.Env if e != C.Env.JOURNEY]
    for fam in SUBGOAL_FAMILIES:
        assert callable(fam.verify) and callable(fam.fill), fam
    journey = FAMILIES["JOURNEY"]
    assert journey.verify is None and journey.fill is None


def test_every_table_reads_the_descriptors():
    assert {f.env: f.verify for f in SUBGOAL_FAMILIES} == verify.VERIFIERS
    assert {f.env: f.fill for f in SUBGOAL_FAMILIES} == journey_generator.FILLS
    assert {f.env: f.oracle for f in SUBGOAL_FAMILIES} == journey_oracle.PLANS
    assert oracle._plans(tuple(C.Env)) == {int(f.env): f.oracle for f in FAMILIES.values()}


def test_the_customers_slot_table_is_the_descriptors():
    """Which slots the customer can be asked about in each env (SPEC §10.1) comes from the
    descriptors; the values are the table customer.py held before (spot-checked rows)."""
    S = C.Slot
    applicable, defaulted = customer.slot_tables()
    for fam in FAMILIES.values():
        assert applicable[fam.env].tolist() == fam.slot_mask.tolist(), fam
        assert len(set(fam.slots)) == len(fam.slots), fam  # no slot twice
    assert set(np.flatnonzero(applicable[C.Env.CART])) == {S.ITEMS, S.VARIANT, S.QUANTITY}
    assert np.flatnonzero(applicable[C.Env.STATUS]).tolist() == [S.ORDER_REFERENCE]
    assert applicable[C.Env.PD].sum() == 20 and applicable[C.Env.SUB].sum() == 20
    assert applicable[C.Env.RETURN].sum() == 23 and not applicable[C.Env.JOURNEY].any()
    # only CART's quantity has a default (1)
    assert [tuple(np.flatnonzero(row)) for row in defaulted] == [
        (S.QUANTITY,) if e == C.Env.CART else () for e in C.Env
    ]


def test_no_family_imports_the_customer():
    """The customer imports the families (their descriptors, reply hooks); a family that
    imported the customer back made the cycle issue 18 names. Tests may."""
    bad = []
    for p in (ROOT / "ecomjax" / "envs").rglob("*.py"):
        if p.name.endswith("_test.py"):
            continue
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom) and node.module == "ecomjax.customer":
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Import) and any(
                a.name == "ecomjax.customer" for a in node.names
            ):
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "ecomjax":
                bad += [
                    f"{p.relative_to(ROOT)}:{node.lineno}"
                    for a in node.names
                    if a.name == "customer"
                ]
    assert not bad, bad


def test_an_unknown_family_is_an_error():
    with pytest.raises(ValueError):
        oracle.make_oracle((int(C.Env.PD), 99))
    with pytest.raises(KeyError, match="available: PD, SUB"):
        family("NINTH")


def test_no_family_is_imported_by_name_or_skipped():
    """The registry, the verifier, the oracle and every env import their families
    statically, and swallow no import error (an ``importlib`` lookup inside ``except
    ModuleNotFoundError`` hid an import cycle and dropped a family that failed to load)."""
    files = [ROOT / "ecomjax" / f for f in ("registry.py", "verify.py", "family.py")]
    files += [ROOT / "ecomjax" / "agents" / "oracle.py", *(ROOT / "ecomjax" / "envs").rglob("*.py")]
    bad = []
    for p in files:
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                bad += [f"{p.name}:{node.lineno}" for n in names if n.startswith("importlib")]
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                caught = ast.unparse(node.type)
                if "ImportError" in caught or "ModuleNotFoundError" in caught:
                    bad.append(f"{p.name}:{node.lineno} except {caught}")
    assert not bad, bad
