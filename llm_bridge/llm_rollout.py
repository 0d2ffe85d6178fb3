"""Batched LLM rollouts: B host sessions advanced together, one generate call per turn.

Every live episode's conversation goes to the backend in one batch (grouped by the tool
list, which depends on the disclosed env), each answer is played through its own
``Session``, and finished episodes leave the batch. Per turn the record keeps what a
trainer needs to learn from exact tokens: prompt and completion token ids and the loss
mask (1 on generated tokens, the end-of-turn token included). Problems are (family, d,
seed); ``attempts`` plays each one several times, which is what pass@k and pass^k and GRPO
groups need.

Each episode's row can be streamed as it ends (``on_row``, ``JsonlWriter``); an episode
whose model call fails is recorded with ``status`` "error" and the run goes on; a run can
skip the (problem, attempt) pairs it already has (``skip``), which is how ``ecomjax rollout
--resume`` continues a killed run with the same problems and seeds.

Each row also counts its parse-valid turns and generated tokens, and its ``timing`` splits
the episode's wall time into the model's share of the generate calls it was in
(``model_s``) and its own environment work (``env_s``: reset, step, render, parse). The
clock is read only for these measurement fields; no behaviour depends on it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from ecomjax.llm_bridge.backends import Backend, Generation, failed
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


OK, ERROR, UNFINISHED = "ok", "error", "unfinished"  # a row's ``status``


def parse_valid(parse: dict | None) -> bool:
    """Whether a turn's output parsed into a valid turn: no malformed text, no call or
    answer that failed its schema, no parser error (``info["parse"]`` of the session's
    step). A plain message with no call is valid; range checks left to the device are not
    parse errors."""
    return bool(
        parse is not None
        and not parse.get("malformed")
        and not parse.get("errors")
        and not parse.get("answer_error")
        and not parse.get("internal_error")
    )


def _completion_tokens(g: Generation) -> int | None:
    """Generated tokens of one turn: the exact ids where recorded, else the server's usage."""
    if g.completion_ids is not None:
        return len(g.completion_ids)
    n = (g.meta.get("usage") or {}).get("completion_tokens")
    return int(n) if isinstance(n, int) else None


@dataclass
class Episode:
    problem: Problem
    attempt: int
    session: Session
    turns: list[dict] = field(default_factory=list)
    last: dict | None = None
    status: str = OK
    error: str | None = None
    tokens: int | None = 0  # generated tokens over all turns (None: some turn unknown)
    # Measurement only (perf_counter seconds): never read by the rollout itself.
    t0: float = 0.0
    model_s: float = 0.0
    env_s: float = 0.0

    def record(self, agent: str | None = None) -> dict:
        """The JSONL row. ``status`` "error" (the model call failed after its retries;
        ``error`` says why) and "unfinished" (``max_turns`` reached) rows are not model
        results: ``summary`` counts them apart and ``--resume`` plays them again.
        ``timing`` (seconds) is the one field that differs between identical reruns."""
        last = self.last or {}
        done = self.status == OK
        return {
            "family": self.problem.family,
            "difficulty": self.problem.difficulty,
            "seed": self.problem.seed,
            "problem": self.problem.id,
            "attempt": self.attempt,
            "status": self.status,
            "error": self.error,
            "agent": agent,
            "reward": last.get("reward") if done else None,
            "is_correct": bool(last.get("is_correct")) if done else False,
            "termination_reason": last.get("termination_reason") if done else None,
            "reward_breakdown": last.get("reward_breakdown") if done else None,
            "turns": self.turns,
            "messages": self.session.messages,
            "parse_valid_turns": sum(parse_valid(t.get("parse")) for t in self.turns),
            "completion_tokens": self.tokens,
            "timing": {
                "wall_s": time.perf_counter() - self.t0,
                "model_s": self.model_s,
                "env_s": self.env_s,
            },
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
    """One generation per live episode. A backend exception fails that group's episodes
    (recorded as errors), not the run; backends report single failures in ``error``.
    Each episode's ``model_s`` gains its even share of its group's call."""
    if isinstance(backend, OracleBackend):
        t = time.perf_counter()
        gens = backend.generate_for([e.session for e in batch])
        for e in batch:
            e.model_s += (time.perf_counter() - t) / len(batch)
        return gens
    groups: dict[str, list[int]] = {}
    for i, e in enumerate(batch):
        groups.setdefault(json.dumps(e.session.tools, sort_keys=True), []).append(i)
    gens: list[Generation | None] = [None] * len(batch)
    for idx in groups.values():
        t = time.perf_counter()
        try:
            tools = batch[idx[0]].session.tools  # as shown, not the key's sorted copy
            outs = backend.generate([batch[i].session.messages for i in idx], tools)
            if len(outs) != len(idx):
                raise RuntimeError(f"backend returned {len(outs)} generations for {len(idx)}")
        except Exception as e:  # noqa: BLE001 - recorded on each episode of the group
            why = f"{type(e).__name__}: {e}"
            outs = [failed(getattr(backend, "fmt", "openai"), why) for _ in idx]
        share = (time.perf_counter() - t) / len(idx)
        for i, g in zip(idx, outs, strict=True):
            gens[i] = g
            batch[i].model_s += share
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
    *,
    skip: Container[tuple[str, int]] = (),
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Plays every (problem, attempt) not in ``skip`` (keys ``(problem.id, attempt)``),
    ``batch_size`` episodes at a time, and returns their rows in (problem, attempt) order.
    ``on_row(row)`` gets each row as soon as its episode ends (for streaming to disk).
    ``max_turns`` caps host turns as a safety net (the env's own T_max ends every episode
    first); ``session_kw`` goes to each ``Session`` (e.g. a FAISS ``search_fn``)."""
    queue = [(p, a) for p in todo for a in range(attempts) if (p.id, a) not in skip]
    agent = getattr(backend, "name", None)
    rows: list[dict] = []

    def finish(e: Episode) -> None:
        row = e.record(agent)
        rows.append(row)
        if on_row is not None:
            on_row(row)
        if progress is not None:
            progress.update(1)

    for start in range(0, len(queue), batch_size):
        batch = []
        for p, a in queue[start : start + batch_size]:
            t0 = time.perf_counter()
            s = Session(catalog, **{"event_role": False, **(session_kw or {})})
            ep = Episode(p, a, s, t0=t0)
            ep.last = s.reset(p.family, p.difficulty, p.seed)
            ep.env_s += time.perf_counter() - t0
            batch.append(ep)
            if ep.last["done"]:
                finish(ep)
        live = [e for e in batch if not e.last["done"]]
        turn = 0
        while live and (max_turns is None or turn < max_turns):
            gens = _generate(backend, live)
            for e, g in zip(live, gens, strict=True):
                if g.error is not None:
                    e.status, e.error = ERROR, g.error
                    finish(e)
                    continue
                t = time.perf_counter()
                e.last = e.session.step(g.output, g.fmt)
                e.env_s += time.perf_counter() - t
                n = _completion_tokens(g)
                e.tokens = None if n is None or e.tokens is None else e.tokens + n
                e.turns.append(
                    {
                        "output": g.output,
                        "fmt": g.fmt,
                        "prompt_ids": g.prompt_ids,
                        "completion_ids": g.completion_ids,
                        "loss_mask": g.loss_mask,
                        "finish_reason": g.meta.get("finish_reason"),
                        "parse": e.last["info"]["parse"],
                    }
                )
                if e.last["done"]:
                    finish(e)
            live = [e for e in live if e.status == OK and not e.last["done"]]
            turn += 1
        for e in live:
            e.status = UNFINISHED
            finish(e)
    order = {(p.id, a): i for i, (p, a) in enumerate(queue)}
    return sorted(rows, key=lambda r: order[(r["problem"], r["attempt"])])


def completed(rows: Iterable[dict]) -> list[dict]:
    """The rows of finished episodes (status "ok"; rows from before ``status`` count as ok),
    one per (problem, attempt), the first kept."""
    seen: set[tuple[str, int]] = set()
    out = []
    for r in rows:
        key = (r["problem"], r["attempt"])
        if r.get("status", OK) == OK and key not in seen:
            seen.add(key)
            out.append(r)
    return out


def summary(rows: Sequence[dict], ks: Sequence[int] = (1, 2, 4, 8)) -> dict:
    """Per family over finished episodes: episodes, success rate, mean reward, hard-fail
    rate (the model's SPEC §4.2 failures), pass@k and pass^k, and the ``turn_stats``;
    episodes whose model calls failed (``failed``) or that hit ``max_turns``
    (``unfinished``) are counted apart and scored in none of these."""
    out: dict[str, dict] = {}
    done = [r for r in rows if r.get("status", OK) == OK]
    for fam in sorted({r["family"] for r in rows}):
        rs = [r for r in done if r["family"] == fam]
        rewards = [r["reward"] for r in rs if r["reward"] is not None]
        out[fam] = {
            "episodes": len(rs),
            "failed": sum(r["family"] == fam and r.get("status") == ERROR for r in rows),
            "unfinished": sum(r["family"] == fam and r.get("status") == UNFINISHED for r in rows),
            "success_rate": float(np.mean([r["is_correct"] for r in rs])) if rs else None,
            "mean_reward": float(np.mean(rewards)) if rewards else None,
            "hard_fail_rate": (
                float(np.mean([r["termination_reason"] == "hard_fail" for r in rs])) if rs else None
            ),
        }
    for fam, m in per_family(done, ks).items():
        out[fam].update(m)
    for fam in out:
        out[fam].update(turn_stats([r for r in done if r["family"] == fam]))
    return out


def turn_stats(rows: Sequence[dict]) -> dict:
    """Per turn over ``rows``: turns, parse-valid rate, generated tokens and seconds per
    turn, and the share of the episodes' measured time (model + env) spent in the model.
    Rows written before these fields existed are left out of the ones they lack (None
    where no row has them)."""
    turns = sum(len(r["turns"]) for r in rows)
    valid = [r for r in rows if "parse_valid_turns" in r]
    known = [r for r in rows if r.get("completion_tokens") is not None]
    timed = [r for r in rows if r.get("timing")]

    def per_turn(rs: list[dict], total: float) -> float | None:
        n = sum(len(r["turns"]) for r in rs)
        return total / n if n else None

    model = sum(r["timing"]["model_s"] for r in timed)
    spent = model + sum(r["timing"]["env_s"] for r in timed)
    return {
        "turns": turns,
        "parse_valid_rate": per_turn(valid, sum(r["parse_valid_turns"] for r in valid)),
        "tokens_per_turn": per_turn(known, sum(r["completion_tokens"] for r in known)),
        "s_per_turn": per_turn(timed, spent),
        "model_share": model / spent if spent > 0 else None,
    }


def read_jsonl(path: str) -> list[dict]:
    """The rows of a JSONL file; a torn last line (a run killed mid-write) is skipped."""
    rows = []
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "problem" in row and "attempt" in row:
                rows.append(row)
    return rows


def write_jsonl(rows: Iterable[dict], path: str) -> None:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


class JsonlWriter:
    """Appends one row per call and flushes it, so a killed run keeps every finished
    episode. The file first becomes ``keep`` (written aside, then renamed in): nothing for
    a fresh run, the completed rows of a run being resumed."""

    def __init__(self, path: str, keep: Iterable[dict] | None = None) -> None:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            for r in keep or ():
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, path)
        self.f = open(path, "a")  # noqa: SIM115 - closed by close()
        self.n = 0

    def __call__(self, row: dict) -> None:
        self.f.write(json.dumps(row) + "\n")
        self.f.flush()
        self.n += 1

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
