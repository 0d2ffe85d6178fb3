"""examples/trl_dapo.py: the config's DAPO settings, and a smoke run of ``--tiny --max-steps 2``
(TRL's GRPOTrainer on CPU with a 1-layer random model that calls ``submit_answer`` or ends its
turn at random), in-process through ``main(argv)``: two optimizer steps, one JSONL row each
with finite rewards, every rollout one of the dataset's problems, every group one problem, and
the config's DAPO values on the trainer.

Compiles: a CART reset and one step of the host session. The file takes ~35 s with the compile
cache and ~46 s cold (ECOMJAX_JAX_CACHE=off) on 2 CPU cores, ~10 s of it importing trl."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="trl is not installed (extra: trl)")
pytest.importorskip("datasets", reason="datasets is not installed (extra: trl)")

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "trl_dapo.py"
DAPO = {
    "loss_type": "dapo",
    "epsilon": 0.2,
    "epsilon_high": 0.28,
    "beta": 0.0,
    "mask_truncated_completions": True,
}


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("trl_dapo_example", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_config_holds_dapo_settings(ex, tmp_path):
    from trl import GRPOConfig

    full, tiny = ex.load_config(), ex.load_config(tiny=True)
    assert "tiny" not in full and "tiny" not in tiny
    for cfg in (full, tiny):
        assert {k: cfg["grpo"][k] for k in DAPO} == DAPO
        assert cfg["overlong"]["soft_punish_cache"] > 0
    assert full["grpo"]["num_generations"] == 8 and full["data"]["collection"] == "C8"
    assert tiny["data"]["family"] == "CART" and tiny["data"]["collection"] is None
    assert tiny["grpo"]["use_cpu"] and not tiny["grpo"]["bf16"]
    assert full["grpo"]["bf16"] and "use_cpu" not in full["grpo"]  # the merge left it alone
    # every key of the GPU config is a GRPOConfig field (use_cpu: bf16 is refused without a GPU)
    args = GRPOConfig(output_dir=str(tmp_path), **{**full["grpo"], "use_cpu": True})
    assert {k: getattr(args, k) for k in DAPO} == DAPO
    assert args.generation_batch_size == 32  # 4 groups of 8 per optimizer step
    assert args.chat_template_kwargs == {"enable_thinking": False}
    args = ex.parse_args(["--model", "some/model", "--collection", "C4", "--difficulty", "5"])
    cfg = ex.resolve(args)
    assert cfg["model"]["name_or_path"] == "some/model" and cfg["data"]["family"] is None
    assert (cfg["data"]["collection"], cfg["data"]["difficulty"]) == ("C4", 5)
    rows = ex.problems({**cfg["data"], "n_problems": 8, "difficulty": [0, 3]})
    assert [r["difficulty"] for r in rows] == [0, 3] * 4
    assert [r["family"] for r in rows[:4]] == ["CART", "SUB", "PD", "RETURN"]  # C4[seed % 4]
    with pytest.raises(SystemExit):  # a real model or the tiny one, not both
        ex.parse_args(["--tiny", "--model", "x"])


def test_tiny_dapo_run(ex, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = ex.main(["--tiny", "--max-steps", "2", "--output-dir", str(tmp_path)])
    cfg = ex.load_config(tiny=True)
    grpo = {**cfg["grpo"], "max_steps": 2}
    assert json.loads((tmp_path / "config.json").read_text())["grpo"] == grpo

    # the config's values, DAPO's among them, reached the trainer
    got = {k: getattr(trainer.args, k) for k in grpo}
    assert got.pop("report_to") in ([], ["none"])  # "none": TrainingArguments' spelling of []
    assert got == {k: v for k, v in grpo.items() if k != "report_to"}
    assert (trainer.loss_type, trainer.epsilon_low, trainer.epsilon_high) == ("dapo", 0.2, 0.28)
    assert trainer.beta == 0.0 and trainer.ref_model is None and trainer.mask_truncated_completions
    assert trainer.reward_func_names == ["soft_overlong_punishment_reward", "EcomjaxToolEnv"]
    assert trainer.reward_weights.tolist() == [1.0, 1.0]
    assert trainer.state.global_step == 2

    # one JSONL row per step, finite rewards
    rows = [json.loads(line) for line in (tmp_path / ex.LOG_NAME).read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    g, batch = grpo["num_generations"], grpo["per_device_train_batch_size"]
    dataset = {(r["family"], r["difficulty"], r["seed"]) for r in trainer.train_dataset}
    assert dataset == {(p["family"], p["difficulty"], p["seed"]) for p in ex.problems(cfg["data"])}
    assert len(dataset) == cfg["data"]["n_problems"] == 4
    for row in rows:
        assert row["group_size"] == g and len(row["episodes"]) == batch
        for key in ("reward", "reward_std", "rewards/EcomjaxToolEnv/mean", "loss", "grad_norm"):
            assert math.isfinite(row[key]), key
        assert row["rewards/soft_overlong_punishment_reward/mean"] == 0.0  # short completions
        episodes = row["episodes"]
        rewards = [e["reward"] for e in episodes]
        assert all(math.isfinite(r) and -1.0 <= r <= 1.0 for r in rewards)
        assert row["rewards/EcomjaxToolEnv/mean"] == pytest.approx(sum(rewards) / batch, abs=1e-6)
        for e in episodes:  # submit_answer ends the episode; no call leaves it unfinished
            assert (e["done"] and e["termination_reason"] == "agent_done") or (
                not e["done"] and e["reward"] == cfg["env"]["unfinished_reward"]
            )
        # every rollout plays a dataset problem; a group plays one, the groups of a step differ
        groups = [episodes[i : i + g] for i in range(0, batch, g)]
        problems = [{(e["family"], e["difficulty"], e["seed"]) for e in grp} for grp in groups]
        assert all(len(p) == 1 and p <= dataset for p in problems)
        assert len(set.union(*problems)) == len(groups)

    # the tiny model's coin flip makes some group disagree, so DAPO's loss had a gradient
    assert min(r["frac_reward_zero_std"] for r in rows) < 1.0
    assert max(r["grad_norm"] for r in rows) > 0.0
