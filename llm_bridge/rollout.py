"""Batched LLM rollouts: B host sessions advanced together, one generate call per turn.

Every live episode's conversation goes to the backend in one batch (grouped by the tool
list, which depends on the disclosed env), each answer is played through its own
``Session``, and finished episodes leave the batch. Per turn the record keeps what a
trainer needs to learn from exact tokens: prompt and completion token ids and the loss
mask (1 on generated tokens). Problems are (family, d, seed); ``attempts`` plays each one
several times, which is what pass@k and pass^k and GRPO groups need.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from ecomjax.llm_bridge.backends import Backend, Generation
from ecomjax.llm_bridge.metrics import per_family
from ecomjax.llm_bridge.parse import format_turn
from ecomjax.llm_bridge.render import action_to_turn
from ecomjax.llm_bridge.session import CatalogText, Session

from ecomjax.rollout import AGENT_STREAM


@dataclass(frozen=True)
class Problem:
    family: str
    difficulty: int
    seed: int

    @property
    def id(self) -> str:
        return f"{self.family}:{self.difficulty}:{self.seed}"


def problems(families: Sequence[str], difficulties: Sequence[int], n: int, seed: int = 0):
    """``n`` problems per (family, d), seeds from ``seed`` up: deterministic and disjoint
    across families and difficulties."""
    out, s = [], seed
    for fam in families:
        for d in difficulties:
            for _ in range(n):
                out.append(Problem(fam.upper(), int(d), s))
                s += 1
    return out


@dataclass
class Episode:
    problem: Problem
    attempt: int
    session: Session
    turns: list[dict] = field(default_factory=list)
    last: dict | None = None

    def record(self) -> dict:
        last = self.last or {}
        return {
            "family": self.problem.family,
            "difficulty": self.problem.difficulty,
            "seed": self.problem.seed,
            "problem": self.problem.id,
            "attempt": self.attempt,
            "reward": last.get("reward"),
            "is_correct": bool(last.get("is_correct")),
            "termination_reason": last.get("termination_reason"),
            "reward_breakdown": last.get("reward_breakdown"),
            "turns": self.turns,
            "messages": self.session.messages,
        }


class OracleBackend:
    """The array oracle (SPEC §8.9) speaking through text: each turn its Action is written
    in ``fmt`` and parsed back by the session like any model output. It needs no model,
    so ``ecomjax rollout`` runs offline, and it is the reference an LLM is compared to."""

    name = "oracle"

    def __init__(self, fmt: str = "hermes") -> None:
        from ecomjax.agents.oracle import make_oracle

        self.fmt = fmt
        self.agent = make_oracle()
        self._act = jax.jit(self.agent.act)
        self.memory: dict[int, Any] = {}

    def generate_for(self, sessions: Sequence[Session]) -> list[Generation]:
        out = []
        for s in sessions:
            cat = s.text.catalog
            key = jax.random.fold_in(s.key, AGENT_STREAM)
            if id(s) not in self.memory or int(s.state.dialogue.turn) == 0:
                self.memory[id(s)] = self.agent.init(key, s.timestep.observation, cat)
            turn = int(s.state.dialogue.turn)
            mem, action = self._act(
                jax.random.fold_in(key, turn), self.memory[id(s)], s.timestep.observation, cat
            )
            self.memory[id(s)] = mem
            message, calls, answer = action_to_turn(action, s.codec, s.text.lexicon)
            out.append(Generation(format_turn(self.fmt, message, calls, answer), self.fmt))
        return out


def _generate(backend: Any, batch: list[Episode]) -> list[Generation]:
    if isinstance(backend, OracleBackend):
        return backend.generate_for([e.session for e in batch])
    groups: dict[str, list[int]] = {}
    for i, e in enumerate(batch):
        groups.setdefault(json.dumps(e.session.tools, sort_keys=True), []).append(i)
    gens: list[Generation | None] = [None] * len(batch)
    for key, idx in groups.items():
        outs = backend.generate([batch[i].session.messages for i in idx], json.loads(key))
        if len(outs) != len(idx):
            raise RuntimeError(f"backend returned {len(outs)} generations for {len(idx)}")
        for i, g in zip(idx, outs, strict=True):
            gens[i] = g
    return gens  # type: ignore[return-value]


def run_rollouts(
    backend: Backend | OracleBackend,
    todo: Iterable[Problem],
    catalog: CatalogText,
    attempts: int = 1,
    batch_size: int = 64,
    max_turns: int | None = None,
    progress: Any = None,
    session_kw: dict | None = None,
) -> list[dict]:
    """Plays every (problem, attempt), ``batch_size`` episodes at a time. ``max_turns``
    caps host turns as a safety net (the env's own T_max ends every episode first);
    ``session_kw`` goes to each ``Session`` (e.g. a FAISS ``search_fn``)."""
    queue = [(p, a) for p in todo for a in range(attempts)]
    rows: list[dict] = []
    for start in range(0, len(queue), batch_size):
        batch = []
        for p, a in queue[start : start + batch_size]:
            s = Session(catalog, **{"event_role": False, **(session_kw or {})})
            ep = Episode(p, a, s)
            ep.last = s.reset(p.family, p.difficulty, p.seed)
            batch.append(ep)
        live = [e for e in batch if not e.last["done"]]
        turn = 0
        while live and (max_turns is None or turn < max_turns):
            gens = _generate(backend, live)
            for e, g in zip(live, gens, strict=True):
                e.last = e.session.step(g.output, g.fmt)
                e.turns.append(
                    {
                        "output": g.output,
                        "fmt": g.fmt,
                        "prompt_ids": g.prompt_ids,
                        "completion_ids": g.completion_ids,
                        "loss_mask": g.loss_mask,
                        "parse": e.last["info"]["parse"],
                    }
                )
            live = [e for e in live if not e.last["done"]]
            turn += 1
        rows.extend(e.record() for e in batch)
        if progress is not None:
            progress.update(len(batch))
    return rows


def summary(rows: Sequence[dict], ks: Sequence[int] = (1, 2, 4, 8)) -> dict:
    """Per family: episodes, success rate, mean reward, pass@k and pass^k."""
    out: dict[str, dict] = {}
    for fam in sorted({r["family"] for r in rows}):
        rs = [r for r in rows if r["family"] == fam]
        rewards = [r["reward"] for r in rs if r["reward"] is not None]
        out[fam] = {
            "episodes": len(rs),
            "success_rate": float(np.mean([r["is_correct"] for r in rs])),
            "mean_reward": float(np.mean(rewards)) if rewards else None,
        }
    for fam, m in per_family(rows, ks).items():
        out[fam].update(m)
    return out


def write_jsonl(rows: Iterable[dict], path: str) -> None:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
