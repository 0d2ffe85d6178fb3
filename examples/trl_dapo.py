"""Train an LLM on ecomjax's text environments with TRL's ``GRPOTrainer``, DAPO-style.

Every dataset row is one problem (family, difficulty, seed); GRPO plays each row
``num_generations`` times, so the rollouts of a group share one episode and their rewards are
compared with each other. The model acts through tools: ``ecomjax.llm_bridge.trl_adapter``
turns each environment tool (plus ``message_customer`` and ``submit_answer``) into a method
that plays one turn, and the episode's reward is the environment's own (SPEC §7).

Run (from the repository root; needs the ``trl`` extra: ``pip install -e '.[trl,llm]'``)::

    # a real model on a GPU (downloads the weights from the Hugging Face Hub)
    python examples/trl_dapo.py --model Qwen/Qwen3-0.6B --output-dir runs/dapo
    # several GPUs
    accelerate launch examples/trl_dapo.py --model Qwen/Qwen3-0.6B --output-dir runs/dapo
    # offline smoke run on CPU: a 1-layer random model built to call submit_answer
    python examples/trl_dapo.py --tiny --max-steps 2 --output-dir /tmp/dapo-smoke

Settings come from ``examples/trl_dapo.yaml`` (``--config`` for another YAML or JSON file);
its ``grpo`` section goes verbatim to ``trl.GRPOConfig``. Each logged step appends one row to
``<output-dir>/rewards.jsonl``: TRL's metrics (``reward``, ``reward_std``,
``frac_reward_zero_std``, ``rewards/<EnvClass>/mean``, ``loss``, ``clip_ratio/...``,
``tools/...``) and ``episodes``, the rollouts scored since the previous row, in batch order
(so every ``group_size`` consecutive episodes form one group), each with its problem and
reward. Under ``accelerate`` the main process logs its own rollouts only.

DAPO (arXiv 2503.14476) in TRL 1.16:

- clip-higher: ``epsilon`` 0.2 / ``epsilon_high`` 0.28;
- token-level policy-gradient loss: ``loss_type="dapo"`` (normalised by the active tokens of
  the global accumulated batch);
- overlong filtering: ``mask_truncated_completions=True``; soft overlong punishment:
  ``trl.rewards.get_soft_overlong_punishment`` as an extra reward (``overlong`` section);
- no KL penalty: ``beta=0.0`` (no reference model is loaded).
- Dynamic sampling is absent: GRPOTrainer neither over-samples nor drops groups whose
  rewards are all equal, and it does not refill the batch. Such groups get zero advantage (no
  gradient), but with ``loss_type="dapo"`` their tokens still count in the normaliser, so they
  dilute the step. The rewards here are graded (task, efficiency, hallucination terms), so
  all-equal groups are rarer than with 0/1 accuracy; watch ``frac_reward_zero_std`` (and the
  episodes' ``is_correct``) and choose ``data.difficulty`` so groups disagree.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = Path(__file__).with_name("trl_dapo.yaml")
LOG_NAME = "rewards.jsonl"


# --- configuration -------------------------------------------------------------------------------


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in: nested mappings merge, anything else replaces."""
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_config(path: str | os.PathLike = DEFAULT_CONFIG, tiny: bool = False) -> dict[str, Any]:
    """The run's settings: a YAML (or ``.json``) file; with ``tiny`` its ``tiny`` section is
    merged over the rest."""
    text = Path(path).read_text()
    if str(path).endswith(".json"):
        cfg = json.loads(text)
    else:
        import yaml  # a dependency of trl (and transformers)

        cfg = yaml.safe_load(text)
    overrides = cfg.pop("tiny", None) or {}
    return deep_merge(cfg, overrides) if tiny else cfg


def problems(data: Mapping[str, Any]) -> list[dict]:
    """The dataset rows: ``n_problems`` problems from ``trl_adapter.make_dataset``; a list
    ``difficulty`` is cycled over the problems."""
    from ecomjax.llm_bridge.trl_adapter import make_dataset

    d = data.get("difficulty", 0)
    difficulty = (lambda i: d[i % len(d)]) if isinstance(d, Sequence) else int(d)
    return make_dataset(
        int(data["n_problems"]),
        family=data.get("family"),
        collection=data.get("collection"),
        difficulty=difficulty,
        seed=int(data.get("seed", 0)),
        prompt=data.get("prompt", ""),
    )


def catalog_text(cat: Mapping[str, Any]):
    """The synthetic catalog and its text tables, built once and shared by every env."""
    from ecomjax.catalog.synthetic import generate_catalog
    from ecomjax.llm_bridge.session import CatalogText

    return CatalogText.build(generate_catalog(int(cat["seed"]), int(cat["n_products"])))


# --- the environment and the reward log ----------------------------------------------------------


def recording_env_class(text, data: Mapping[str, Any], env: Mapping[str, Any], episodes: list):
    """``trl_adapter.environment_factory`` whose ``get_reward`` (called by TRL once per rollout,
    in batch order) also appends the episode's problem and outcome to ``episodes``."""
    from ecomjax.llm_bridge.trl_adapter import environment_factory

    d = data.get("difficulty", 0)
    base = environment_factory(  # the defaults only serve rows without these columns
        text,
        family=data.get("family"),
        collection=data.get("collection"),
        difficulty=d if isinstance(d, int) else 0,
        unfinished_reward=float(env.get("unfinished_reward", -1.0)),
    )

    def get_reward(self) -> float:
        reward = base.get_reward(self)
        family, difficulty, seed = self.problem or (None, None, None)
        obs = self.observation or {}
        breakdown = obs.get("reward_breakdown") or {}
        episodes.append(
            {
                "family": family,
                "difficulty": difficulty,
                "seed": seed,
                "reward": reward,
                "done": self.done,
                "termination_reason": obs.get("termination_reason"),
                "turns": obs.get("turn"),
                "is_correct": obs.get("is_correct"),
                "hard_fail_kind": breakdown.get("hard_fail_kind"),
            }
        )
        return reward

    get_reward.__doc__ = base.get_reward.__doc__
    # Same class name: TRL logs the env's reward as rewards/<class name>/mean.
    return type(base.__name__, (base,), {"get_reward": get_reward, "__doc__": base.__doc__})


def reward_log_callback(path: Path, episodes: list, group_size: int, verbose: bool = True):
    """A ``TrainerCallback`` that writes one JSONL row per logged training step."""
    from transformers import TrainerCallback

    class RewardLog(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("")

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "reward" not in logs:  # the end-of-training summary has no reward
                return
            played = list(episodes)
            episodes.clear()
            if not state.is_world_process_zero:
                return
            metrics = {
                k: v
                for k, v in logs.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
            row = {"step": state.global_step, "group_size": group_size, **metrics}
            row["episodes"] = played
            with path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            if verbose:
                zero = metrics.get("frac_reward_zero_std", math.nan)
                print(
                    f"step {state.global_step}: reward {metrics['reward']:.4f} "
                    f"(std {metrics.get('reward_std', math.nan):.4f}), zero-std groups "
                    f"{zero:.0%}, {len(played)} episodes",
                    flush=True,
                )

    return RewardLog()


# --- the trainer ---------------------------------------------------------------------------------


def build_trainer(cfg: Mapping[str, Any], output_dir: str | os.PathLike, tiny: bool = False):
    """A ``GRPOTrainer`` for ``cfg`` (see ``load_config``), writing to ``output_dir``."""
    import datasets
    from trl import GRPOConfig, GRPOTrainer
    from trl.rewards import get_soft_overlong_punishment

    out = Path(output_dir)
    grpo = dict(cfg["grpo"])
    reward_funcs = []
    cache = int(cfg.get("overlong", {}).get("soft_punish_cache", 0) or 0)
    if cache > 0:
        if cache >= grpo["max_completion_length"]:
            raise ValueError("overlong.soft_punish_cache must be below grpo.max_completion_length")
        reward_funcs.append(get_soft_overlong_punishment(grpo["max_completion_length"], cache))
        grpo.setdefault("reward_weights", [float(cfg["overlong"].get("weight", 1.0))])
    args = GRPOConfig(output_dir=str(out), **grpo)

    if tiny:
        from ecomjax.llm_bridge.tiny_models import tiny_tool_caller

        model, tokenizer = tiny_tool_caller(float(cfg["model"].get("tiny_p_no_call", 0.0)))
    else:
        model, tokenizer = cfg["model"]["name_or_path"], None  # TRL loads both

    rows = problems(cfg["data"])
    episodes: list[dict] = []
    env_class = recording_env_class(
        catalog_text(cfg["catalog"]), cfg["data"], cfg.get("env", {}), episodes
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        reward_funcs=reward_funcs or None,
        train_dataset=datasets.Dataset.from_list(rows),
        environment_factory=env_class,
        callbacks=[reward_log_callback(out / LOG_NAME, episodes, args.num_generations)],
    )
    return trainer


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group()
    which.add_argument("--model", help="a Hub id or local path (default: the config's model)")
    which.add_argument(
        "--tiny", action="store_true", help="an offline 1-layer random model on CPU (smoke run)"
    )
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="YAML or JSON settings")
    p.add_argument("--output-dir", default="runs/trl_dapo")
    p.add_argument("--max-steps", type=int, help="optimizer steps (overrides grpo.max_steps)")
    p.add_argument("--family", help="every problem from this family (overrides data.*)")
    p.add_argument("--collection", help="families by seed from C1/C2/C4/C8 (overrides data.*)")
    p.add_argument("--difficulty", type=int, help="overrides data.difficulty (0..20)")
    p.add_argument("--n-problems", type=int, help="overrides data.n_problems")
    return p.parse_args(argv)


def resolve(args: argparse.Namespace) -> dict[str, Any]:
    """The config file with the command line's overrides."""
    cfg = load_config(args.config, tiny=args.tiny)
    if args.model:
        cfg["model"]["name_or_path"] = args.model
    if args.max_steps is not None:
        cfg["grpo"]["max_steps"] = args.max_steps
    data = cfg["data"]
    if args.family:
        data["family"], data["collection"] = args.family, None
    elif args.collection:
        data["family"], data["collection"] = None, args.collection
    if args.difficulty is not None:
        data["difficulty"] = args.difficulty
    if args.n_problems is not None:
        data["n_problems"] = args.n_problems
    return cfg


def main(argv: Sequence[str] | None = None):
    """Trains, writes ``rewards.jsonl`` and ``config.json`` under ``--output-dir``; returns the
    trainer."""
    args = parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental
    cfg = resolve(args)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    trainer = build_trainer(cfg, out, tiny=args.tiny)
    trainer.train()
    if cfg.get("save_final_model"):
        trainer.save_model(str(out))
    return trainer


if __name__ == "__main__":
    main(sys.argv[1:])
