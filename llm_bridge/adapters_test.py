"""The TRL adapter: its contract, that a group of rollouts of one dataset row plays one problem,
that rewards equal an offline ``Session`` replay of the same turns, and (with trl installed) one
real ``GRPOTrainer`` step whose tiny model is built to call ``submit_answer``, so the whole tool
loop runs. (The gymnasium env's tests are in ``gym_env_test.py``.)

Compiles: the resets of PD and CART, one step (shared with every session of the process)."""

from __future__ import annotations

import inspect
import json

import pytest

from ecomjax import constants as C
from ecomjax.llm_bridge import schemas as SC
from ecomjax.llm_bridge import session as SS
from ecomjax.llm_bridge import trl_adapter as TA
from ecomjax.llm_bridge.tiny_models import tiny_tool_caller
from ecomjax.llm_bridge.tool_turns import MESSAGE_TOOL, call_tools

FAST = SS.FAST_COMPILE


@pytest.fixture(scope="module")
def text(catalog) -> SS.CatalogText:
    return SS.CatalogText.build(catalog)


def offline(text, family: str, d: int, seed: int, turns: list[dict]) -> dict:
    """The last observation of an offline session playing "json" ``turns``."""
    s = SS.Session(text, compiler_options=FAST)
    obs = s.reset(family, d, seed)
    for t in turns:
        obs = s.step(t, "json")
    return obs


def call(name: str, **args) -> dict:
    return {"message": "", "tool_calls": [{"name": name, "arguments": args}]}


# --- TRL adapter without trl --------------------------------------------------------------------


def tool_methods(cls) -> dict:
    """What TRL exposes as tools: public functions of the class but reset / get_reward."""
    return {
        n: f
        for n, f in inspect.getmembers(cls, predicate=inspect.isfunction)
        if not n.startswith("_") and n not in ("reset", "get_reward")
    }


def test_methods_mirror_the_tool_schemas():
    cls = TA.make_env_class()
    methods = tool_methods(cls)
    schemas = {t["function"]["name"]: t for t in call_tools(with_submit=True)}
    assert set(methods) == set(schemas) and len(methods) == len(SC.all_tools()) + 2
    for name, fn in methods.items():
        params = schemas[name]["function"]["parameters"]
        sig = inspect.signature(fn)
        assert list(sig.parameters)[1:] == list(params["properties"]), name
        required = [p for p, v in sig.parameters.items() if p != "self" and v.default is v.empty]
        assert required == [p for p in params["properties"] if p in params["required"]], name
        assert schemas[name]["function"]["description"] in fn.__doc__


def test_transformers_reads_the_same_schemas():
    pytest.importorskip("transformers")
    from transformers.utils import get_json_schema

    env = TA.environment_factory(family="PD")()
    for name in tool_methods(type(env)):
        got = get_json_schema(getattr(env, name))["function"]  # a bound method, as TRL passes
        want = next(
            t["function"] for t in call_tools(with_submit=True)
            if t["function"]["name"] == name
        )  # fmt: skip
        assert got["name"] == name and got["description"] == want["description"]
        params = want["parameters"]
        assert set(got["parameters"]["properties"]) == set(params["properties"])
        assert sorted(got["parameters"].get("required", [])) == sorted(params["required"])
        for p, sch in params["properties"].items():
            if "enum" in sch:
                assert got["parameters"]["properties"][p]["enum"] == sch["enum"], (name, p)
    ask = get_json_schema(env.ask_user)["function"]["parameters"]["properties"]["slots"]
    assert ask["type"] == "array" and ask["items"]["enum"] == list(C.SLOT_NAMES)


def fake_grpo(factory, rows: list[dict], num_generations: int, policy) -> list:
    """TRL's contract without trl: each row played ``num_generations`` times, one env per
    rollout, tools called by name with keyword arguments, then get_reward."""
    out = []
    for row in rows:
        for _ in range(num_generations):
            env = factory()
            prompt = env.reset(**row)
            transcript = [prompt]
            for name, args in policy(row):
                transcript.append(getattr(env, name)(**args))
            out.append((row, env, transcript, env.get_reward()))
    return out


def test_fake_trainer_groups_share_a_problem_and_rewards_match_offline(text):
    rows = TA.make_dataset(3, collection="C1", difficulty=2, seed=40)
    assert [r["seed"] for r in rows] == [40, 41, 42] and {r["family"] for r in rows} == {"CART"}
    factory = TA.environment_factory(text)

    def policy(row):
        yield "user_get_visit_history", {}
        yield MESSAGE_TOOL, {"message": "Anything else?"}
        yield SC.SUBMIT_ANSWER, {"answer": {"env": "CART"}}
        yield "cart_view", {}  # after the end: reported, not played

    runs = fake_grpo(factory, rows, num_generations=2, policy=policy)
    for i in range(0, len(runs), 2):
        (row, a, ta, ra), (_, b, tb, rb) = runs[i], runs[i + 1]
        assert ta == tb and ra == rb and a.problem == b.problem == ("CART", 2, row["seed"])
    assert runs[0][2][0] != runs[2][2][0]  # different rows, different problems
    row, env, transcript, reward = runs[0]
    opening = env.observation["messages"][1]["content"]
    assert transcript[0].endswith("\n\nCustomer: " + opening) and TA.ADAPTER_NOTE in transcript[0]
    assert "Customer: " in transcript[1] and json.loads(transcript[1].split("\nCustomer: ")[0])
    assert transcript[3].endswith("The conversation has ended (agent_done).")
    assert transcript[4].startswith("The conversation is over")
    want = offline(text, "CART", 2, row["seed"], [
        call("user_get_visit_history"),
        {"message": "Anything else?"},
        call(SC.SUBMIT_ANSWER, answer={"env": "CART"}),
    ])  # fmt: skip
    assert env.done and reward == want["reward"] and env.observation["turn"] == 3


def test_adapter_passes_bad_calls_to_the_env_and_scores_unfinished_rollouts(text):
    factory = TA.environment_factory(text, family="PD", difficulty=1, unfinished_reward=-0.5)
    env = factory()
    env.reset(seed=9)
    assert env.get_reward() == -0.5  # the rollout stopped before the episode ended
    out = env.catalog_search(query="lamp", top_k=None, sort_by=None)  # None = omitted
    assert "results" in out and not env.done
    out = env.cart_add(product_id="syn_000001", bogus=True)  # unknown argument: hard fail
    assert "cart_add has no argument 'bogus'; the turn was rejected and no call ran." in out
    assert env.done and env.get_reward() == -1.0
    assert env.observation["reward_breakdown"]["hard_fail_kind"] == "invalid_tool_call"
    assert env.reset(seed=9) and not env.done  # reusable, as TRL pools environments
    with pytest.raises(ValueError):
        env.reset(seed=-3)


# --- one real GRPO step -------------------------------------------------------------------------


def test_one_grpo_step_with_trl(text, tmp_path, monkeypatch):
    pytest.importorskip("trl", reason="trl is not installed (extra: trl)")
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = tiny_tool_caller()
    made = []
    base = TA.environment_factory(text, family="CART")

    class Env(base):  # records its instances (TRL makes one per rollout, pooled)
        def __init__(self):
            super().__init__()
            made.append(self)

    rows = TA.make_dataset(1, family="CART", difficulty=1, seed=5)
    args = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
        max_completion_length=64, max_steps=1, logging_steps=1, report_to=[], use_cpu=True,
        bf16=False, max_tool_calling_iterations=1, save_strategy="no", learning_rate=1e-3,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, args=args,
        train_dataset=datasets.Dataset.from_list(rows), environment_factory=Env,
    )  # fmt: skip
    trainer.train()
    log = trainer.state.log_history[0]
    played = [e for e in made if e.problem is not None]
    assert len(played) == 2 and {e.problem for e in played} == {("CART", 1, 5)}  # one group
    assert all(e.done and e.observation["termination_reason"] == "agent_done" for e in played)
    want = offline(text, "CART", 1, 5, [call(SC.SUBMIT_ANSWER, answer={"env": "CART"})])
    assert log["tools/call_frequency"] == 1.0 and log["tools/failure_frequency"] == 0.0
    assert log["rewards/Env/mean"] == pytest.approx(want["reward"], abs=1e-6)
    assert log["reward_std"] == 0.0  # a group of one problem, one deterministic policy
