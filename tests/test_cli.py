"""`ecomjax run` end to end: the JSON summary contract and the curriculum's direction."""

from __future__ import annotations

import json

import pytest

from ecomjax.cli import main


def _summary(capsys, *args) -> dict:
    assert main(["run", "--batch", "256", "--rounds", "3", "--json", *args]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    return json.loads(out[-1])


def test_oracle_climbs_the_curriculum(capsys):
    s = _summary(capsys, "--agent", "oracle", "--tasks", "C1")
    assert set(s) >= {"episodes", "episodes_per_s", "compile_s", "per_task"}
    assert s["episodes"] == 768
    cart = s["per_task"]["CART"]
    assert set(cart) == {"success_rate", "mean_reward", "h"}
    assert cart["success_rate"] == 1.0
    # One level per round: the frontier fills (32 episodes at d = h) within every round.
    assert cart["h"] == 3


@pytest.mark.slow  # its own compile; the curriculum's gating is tested in test_curriculum.py
def test_random_agent_stays_at_d0(capsys):
    s = _summary(capsys, "--agent", "random", "--tasks", "C1")
    assert s["per_task"]["CART"]["h"] == 0
    assert s["per_task"]["CART"]["success_rate"] < 0.25


@pytest.mark.parametrize(
    "args",
    [["--tasks", "NOPE"], ["--difficulty", "21"], ["--batch", "0"], ["--auto-reset", "-1"]],
)
def test_bad_options_exit_2_with_a_message(capsys, args):
    assert main(["run", *args]) == 2
    assert "ecomjax run:" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args", [["--tasks", "NOPE"], ["--difficulty", "21"], ["--max-http-sessions", "0"]]
)
def test_bad_serve_options_exit_2_with_a_message(capsys, args):
    pytest.importorskip("uvicorn", reason="the serve extra is not installed")
    assert main(["serve", "--no-warmup", *args]) == 2  # before binding a port
    assert "ecomjax serve:" in capsys.readouterr().err
