"""The gymnasium adapter against gymnasium itself: ``check_env`` (warnings are failures) in
every obs_mode and fmt, seeding through ``super().reset``, spaces that hold what the env
returns and compare by value, sampled actions that are valid turns, ``gym.make`` with the
passive checker on, and ``gym.make_vec`` (sync, and async with spawned workers). Plus the
env's own contract: an episode, truncation, options, and the unseeded-reset rule.

Compiles: the resets of PD and CART, one step and one search (shared with every session of
the process)."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax.llm_bridge import gym_env as GE
from ecomjax.llm_bridge import schemas as SC
from ecomjax.llm_bridge import session as SS
from ecomjax.llm_bridge.parse import FORMATS, MAX_TEXT_CHARS, format_turn

gym = pytest.importorskip("gymnasium")
from gymnasium.utils import seeding  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402

FAMILY = {"text": "PD", "messages": "CART"}  # the two resets the bridge tests compile anyway


@pytest.fixture(scope="module")
def text(catalog) -> SS.CatalogText:
    return SS.CatalogText.build(catalog)


@pytest.fixture(scope="module")
def registered() -> str:
    GE.register()
    return GE.ENV_ID


def call(name: str, **args) -> dict:
    return {"message": "", "tool_calls": [{"name": name, "arguments": args}]}


def offline(text, family: str, d: int, seed: int, turns: list[dict]) -> dict:
    """The last observation of an offline session playing "json" ``turns``."""
    s = SS.Session(text, compiler_options=SS.FAST_COMPILE)
    obs = s.reset(family, d, seed)
    for t in turns:
        obs = s.step(t, "json")
    return obs


# --- gymnasium's checker and seeding -------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("obs_mode", ["text", "messages"])
def test_check_env_passes_without_warnings(text, registered, obs_mode, fmt):
    env = gym.make(registered, family=FAMILY[obs_mode], catalog=text, obs_mode=obs_mode, fmt=fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checker warning fails the test
        check_env(env.unwrapped)  # with its spec: the render and close checks run too
    env.close()


def test_reset_seeds_np_random_and_replays(text):
    env = GE.EcomjaxTextEnv(family="PD", catalog=text, seed_start=40)
    obs, info = env.reset(seed=7)
    assert env.np_random_seed == 7 and info["seed"] == 7
    want = seeding.np_random(7)[0].bit_generator.state
    assert env.np_random.bit_generator.state == want  # super().reset(seed=7) ran
    assert GE.EcomjaxTextEnv(family="PD", catalog=text).reset(seed=7)[0] == obs
    # A seeded reset fixes the unseeded ones after it (check_env compares two such runs).
    follow = [env.reset()[1]["seed"] for _ in range(2)]
    s1 = GE.next_seed(7)
    assert follow == [s1, GE.next_seed(s1)] and s1 != 8
    assert env.np_random_seed == follow[1]
    env.reset(seed=7)
    assert env.reset()[0] == GE.EcomjaxTextEnv(family="PD", catalog=text).reset(seed=s1)[0]
    fresh = GE.EcomjaxTextEnv(family="PD", catalog=text, seed_start=40)
    assert fresh.reset()[1]["seed"] == 40 and fresh.np_random_seed == 40
    top = GE.EcomjaxTextEnv(family="PD", catalog=text, seed_start=GE.MAX_SEED)
    assert top.reset()[1]["seed"] == GE.MAX_SEED and 0 <= top.reset()[1]["seed"] <= GE.MAX_SEED


# --- spaces ---------------------------------------------------------------------------------------


def test_messages_observation_is_in_its_space(text):
    env = GE.EcomjaxTextEnv(family="CART", catalog=text, fmt="json", obs_mode="messages")
    space = env.observation_space
    obs, _ = env.reset(seed=1)
    assert [m["role"] for m in obs] == ["system", "user"] and obs in space
    obs, *_ = env.step(call("cart_view"))
    assert [m["role"] for m in obs[2:]] == ["assistant", "tool", "user"] and obs in space
    assert obs[2]["tool_calls"][0]["function"]["name"] == "cart_view"
    obs, *_ = env.step({"message": "Done.", "answer": {"env": "CART"}})
    assert obs in space and env.session.done
    bad_calls = [{"id": "c", "type": "function", "function": {"name": "x"}}]
    for bad in (
        tuple(obs),
        obs[0]["content"],
        [*obs, {"role": "user"}],
        [*obs, {"role": "user", "content": 3}],
        [*obs, {"role": "critic", "content": "hi"}],
        [*obs, {"role": "user", "content": "hi", "name": "x"}],
        [*obs, {"role": "assistant", "content": "", "tool_calls": bad_calls}],
        [*obs, {"role": "tool", "content": "{}", "name": "cart_view"}],
    ):
        assert bad not in space, bad
    assert [] in space and len(obs) >= 4
    small = type(space)(max_length=10)
    assert obs not in small and [{"role": "user", "content": "0123456789"}] in small
    space.seed(3)
    samples = [space.sample() for _ in range(6)]
    assert all(s in space for s in samples) and any(len(s) > 2 for s in samples)
    space.seed(3)
    assert [space.sample() for _ in range(6)] == samples


def test_text_observation_is_in_its_space(text):
    env = GE.EcomjaxTextEnv(family="PD", catalog=text)
    obs, _ = env.reset(seed=2)
    space = env.observation_space
    assert isinstance(obs, str) and obs in space and [obs] not in space
    space.seed(0)
    sample = space.sample()
    assert sample and sample in space and type(space)(max_length=3).sample() in space
    assert "x" * 4 not in type(space)(max_length=3)


def test_spaces_compare_and_hash_by_value(text):
    """``make_vec`` compares each sub-env's spaces with the first one's."""
    a = GE.EcomjaxTextEnv(family="PD", catalog=text)
    b = GE.EcomjaxTextEnv(family="PD", catalog=text)
    for x, y in ((a.observation_space, b.observation_space), (a.action_space, b.action_space)):
        assert x == y and hash(x) == hash(y) and x == copy.deepcopy(y) and x is not y
        assert not x != y and len({x, y}) == 1  # noqa: SIM202 (__ne__ from __eq__)
    m = GE.EcomjaxTextEnv(family="PD", catalog=text, obs_mode="messages", fmt="json")
    assert m.observation_space != a.observation_space and m.action_space != a.action_space
    assert m.observation_space == copy.deepcopy(m.observation_space)
    assert a.observation_space != type(a.observation_space)(max_length=5)
    assert repr(a.action_space) == "TurnSpace(fmt='hermes')"
    assert repr(m.observation_space) == f"MessagesSpace(max_length={GE.MAX_OBS_CHARS})"


@pytest.mark.parametrize("fmt", FORMATS)
def test_sampled_actions_are_valid_turns(text, fmt):
    """A random policy must not hard-fail on syntax: every sample parses, and none ends the
    episode by a hard fail."""
    env = GE.EcomjaxTextEnv(family="PD", catalog=text, fmt=fmt)
    space = env.action_space
    space.seed(11)
    samples = [space.sample() for _ in range(8)]
    space.seed(11)
    assert [space.sample() for _ in range(8)] == samples  # the space's own seeded RNG
    assert len({repr(s) for s in samples}) > 2
    env.reset(seed=3)
    for action in samples:
        assert action in space and action not in ("", None)
        if env.session.done:  # a short t_max: play on in the next episode
            env.reset()
        _, reward, terminated, truncated, info = env.step(action)
        assert not info["parse"]["malformed"] and info["parse"]["errors"] == []
        assert info["termination_reason"] in (None, "t_max", "user_quit"), info
        assert reward == 0.0 or terminated or truncated
    assert format_turn(fmt, "hi") in space and 17 not in space
    assert ("x" * (MAX_TEXT_CHARS + 1)) not in space


# --- gym.make, gym.make_vec -----------------------------------------------------------------------


def test_gymnasium_registration_with_the_passive_checker(text, registered):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make(registered, family="PD", catalog=text)  # the env checker stays on
        obs, info = env.reset(seed=3)
        assert isinstance(obs, str) and env.observation_space.contains(obs)
        assert info["family"] == "PD" and env.action_space.contains("any text")
        env.action_space.seed(0)
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs in env.observation_space and reward == 0.0 and not (terminated or truncated)
    assert env.unwrapped.spec.id == registered


@pytest.mark.parametrize("obs_mode", ["text", "messages"])
def test_make_vec_sync(text, registered, obs_mode):
    envs = gym.make_vec(
        registered,
        num_envs=2,
        vectorization_mode="sync",
        family=FAMILY[obs_mode],
        catalog=text,
        obs_mode=obs_mode,
    )
    obs, info = envs.reset(seed=10)
    assert len(obs) == 2 and obs in envs.observation_space and list(info["seed"]) == [10, 11]
    assert all(o in envs.single_observation_space for o in obs) and obs[0] != obs[1]
    # Unseeded resets after a seeded one: fixed by it, and no sub-env replays another's seeds.
    seeds = [list(envs.reset()[1]["seed"]) for _ in range(3)]
    flat = [s for row in seeds for s in row]
    assert len(set(flat)) == len(flat) and 11 not in [row[0] for row in seeds]
    envs.action_space.seed(0)
    for _ in range(2):
        actions = envs.action_space.sample()
        assert len(actions) == 2 and actions in envs.action_space
        obs, reward, terminated, truncated, info = envs.step(actions)
        assert obs in envs.observation_space and reward.shape == (2,)
        assert not (terminated.any() or truncated.any()) and np.all(reward == 0.0)
    envs.close()


def test_make_vec_async_spawn_equals_sync(text, registered, monkeypatch):
    """The "async" mode with spawned workers (``fork`` after JAX starts deadlocks): each
    worker builds its env from the registered entry point and must play what a sync vector
    env plays. The workers inherit this process's compilation cache, so they load what the
    sync test above compiled instead of compiling it again."""
    import jax

    if jax.config.jax_compilation_cache_dir:
        monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", jax.config.jax_compilation_cache_dir)
    make = {"num_envs": 2, "family": "CART", "obs_mode": "messages"}
    sync = gym.make_vec(registered, vectorization_mode="sync", **make)
    spawned = gym.make_vec(
        registered,
        vectorization_mode="async",
        vector_kwargs={"context": "spawn", "shared_memory": False},
        **make,
    )
    try:
        assert spawned.observation_space == sync.observation_space
        got, want = spawned.reset(seed=20), sync.reset(seed=20)
        assert list(got[1]["seed"]) == list(want[1]["seed"]) == [20, 21]
        assert list(got[0]) == list(want[0]) and got[0][0] != got[0][1]
        sync.action_space.seed(1)
        for _ in range(2):
            actions = sync.action_space.sample()
            got, want = spawned.step(actions), sync.step(actions)
            assert list(got[0]) == list(want[0])
            for g, w in zip(got[1:4], want[1:4], strict=True):
                np.testing.assert_array_equal(g, w)
    finally:
        spawned.close()
        sync.close()


# --- the env's own contract -----------------------------------------------------------------------


def test_returned_data_is_fresh(text):
    """Users keep what an env returns: editing it must not touch the env or later returns."""
    env = GE.EcomjaxTextEnv(family="CART", catalog=text, fmt="json", obs_mode="messages")
    obs, info = env.reset(seed=1)
    obs2, *_, info2 = env.step(call("cart_view"))
    try:
        obs2[2]["tool_calls"].append("junk")
        obs2[0]["content"] = "edited"
        info2["tools"].append("junk")
        info2["user_acts"][0]["junk"] = 1
        assert "junk" not in env.session.messages[2]["tool_calls"]
        assert env.session.messages[0]["content"] != "edited"
        assert "junk" not in env.session.user_acts[-1]
        assert "junk" not in env.step(call("cart_view"))[-1]["tools"]
        assert "junk" not in env.tools
    finally:  # on a shared list (the schemas are cached per process): undo
        for shared in (env.tools, env.session.messages[2]["tool_calls"]):
            while "junk" in shared:
                shared.remove("junk")


def test_gym_env_episode(text):
    env = GE.EcomjaxTextEnv(family="CART", difficulty=1, catalog=text, expose_goal=True)
    obs, info = env.reset(seed=5)
    assert obs.startswith("[system]\n") and "\n\n[user]\n" in obs
    assert info["family"] == "CART" and info["seed"] == 5 and info["turn"] == 0
    assert [t["function"]["name"] for t in info["tools"]][-1] == SC.SUBMIT_ANSWER
    again = GE.EcomjaxTextEnv(family="CART", difficulty=1, catalog=text).reset(seed=5)[0]
    assert again == obs  # SPEC §12: (family, d, seed) fixes the episode

    hermes = '<tool_call>\n{"name": "user_get_visit_history", "arguments": {}}\n</tool_call>'
    obs, reward, terminated, truncated, info = env.step(hermes)
    assert "[tool user_get_visit_history" in obs and "[user]" in obs and "[assistant]" not in obs
    assert (reward, terminated, truncated) == (0.0, False, False) and "trace" not in info
    answer = format_turn("hermes", "", [], {"env": "CART"})
    obs, reward, terminated, truncated, info = env.step(answer)
    assert terminated and not truncated and info["termination_reason"] == "agent_done"
    assert reward == info["reward_breakdown"]["r_total"]
    assert info["trace"]["goals"][0]["items"]  # the goal, only now
    want = offline(
        text, "CART", 1, 5, [call("user_get_visit_history"), {"answer": {"env": "CART"}}]
    )
    assert reward == want["reward"]
    assert "[assistant]" in env.render() and "submit_answer" in env.render()
    with pytest.raises(RuntimeError):
        env.step(answer)


def test_gym_env_truncation_modes_and_options(text):
    env = GE.EcomjaxTextEnv(collection="C4", catalog=text, fmt="json", obs_mode="messages")
    obs, info = env.reset(seed=2, options={"family": "PD"})  # options win over the collection
    assert info["family"] == "PD" and isinstance(obs, list) and obs[0]["role"] == "system"
    steps = 0
    truncated = terminated = False
    while not (truncated or terminated):
        obs, reward, terminated, truncated, info = env.step({"message": "One moment, please."})
        assert obs in env.observation_space
        steps += 1
    assert truncated and not terminated and info["termination_reason"] == "t_max"
    assert steps == info["turn"] and len(obs) == len(env.session.messages)
    _, info = env.reset(seed=4)  # the collection's rule: C4[4 % 4] = CART
    assert info["family"] == C.COLLECTIONS["C4"][0] == GE.pick_family(None, "C4", 4)
    _, info = env.reset(options={"family": "PD"})  # no seed: next_seed of the last
    s5 = GE.next_seed(4)
    assert info["seed"] == s5
    assert env.reset(options={"family": "CART"})[1]["seed"] == GE.next_seed(s5)
    first = GE.EcomjaxTextEnv(family="PD", catalog=text).reset()[1]["seed"]
    assert first == 0  # seed_start
    for bad in ({"seed": -1}, {"seed": 2**32}, {"seed": 1.0}, {"seed": True},
                {"options": {"difficulty": 21}}, {"options": {"colour": "red"}},
                {"options": {"family": "NOPE"}}):  # fmt: skip
        with pytest.raises(ValueError):
            env.reset(**bad)
    assert env.reset(seed=np.int64(4), options={"family": "PD"})[1]["seed"] == 4
    with pytest.raises(ValueError):
        GE.EcomjaxTextEnv(family="PD", catalog=text, fmt="yaml")
    with pytest.raises(ValueError):
        GE.EcomjaxTextEnv(family="PD", catalog=text, render_mode="human")
