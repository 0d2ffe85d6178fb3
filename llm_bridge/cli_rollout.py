"""``ecomjax rollout``: B episodes played by an LLM (or the text-speaking oracle), batched
across episodes, written as JSONL with token ids, loss masks and reward breakdowns."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("rollout", help="play episodes with an LLM agent and write JSONL")
    p.add_argument("--backend", default="oracle", choices=["oracle", "transformers", "openai"])
    p.add_argument("--model", help="transformers: a local path; openai: the model name")
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
    p.add_argument("--catalog-size", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="rollouts.jsonl")
    return p


def _backend(args):
    from ecomjax.llm_bridge import backends
    from ecomjax.llm_bridge.rollout import OracleBackend

    if args.backend == "oracle":
        return OracleBackend(args.fmt)
    if not args.model:
        raise SystemExit("--model is required for the transformers and openai backends")
    if args.backend == "transformers":
        return backends.TransformersBackend.from_pretrained(
            args.model,
            fmt=args.fmt,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            seed=args.seed,
        )
    if not args.base_url:
        raise SystemExit("--base-url is required for the openai backend")
    return backends.OpenAIBackend(
        args.base_url,
        args.model,
        api_key=args.api_key,
        temperature=args.temperature,
        max_tokens=args.max_new_tokens,
        seed=args.seed,
    )


def main(args: argparse.Namespace) -> int:
    from ecomjax.llm_bridge.rollout import problems, run_rollouts, summary, write_jsonl
    from ecomjax.llm_bridge.session import CatalogText
    from tqdm import tqdm

    from ecomjax import constants as C
    from ecomjax.catalog.synthetic import generate_catalog
    from ecomjax.registry import resolve_tasks

    try:
        tasks = resolve_tasks(args.tasks)
        ds = [int(x) for x in str(args.difficulty).split(",") if x.strip()]
    except (KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not ds or any(not 0 <= d <= C.D_MAX for d in ds) or args.problems < 1:
        print(f"error: difficulties must be in 0..{C.D_MAX}, problems >= 1", file=sys.stderr)
        return 2
    backend = _backend(args)
    text = CatalogText.build(generate_catalog(42, args.catalog_size))
    todo = problems(tasks, ds, args.problems, args.seed)
    bar = tqdm(total=len(todo) * args.attempts, desc="episodes", file=sys.stderr)
    rows = run_rollouts(backend, todo, text, args.attempts, args.batch, progress=bar)
    bar.close()
    write_jsonl(rows, args.out)
    print(json.dumps({"out": args.out, "per_family": summary(rows)}, indent=1))
    return 0
