"""A host session: one episode driven by LLM text (SPEC §4).

Why this shape: the episode itself is the jitted single-episode ``ecomjax.core`` reset and
step; the session only turns text into an ``Action`` (``parse.parse_turn``), runs the
step, and turns the result back into chat messages (``render``, ``templates``,
``noise``). The compiled functions live in a module-level cache keyed by what fixes a
compile (the family for generation, the params, the compiler options), so a pool of
sessions in one process compiles each of them once. The catalog is always an argument,
never closed over.

What an observation holds (SPEC §4.4): the transcript, the tool schemas, the counters,
this step's events, and at the end the reward and its breakdown. ``info["user_acts"]``
is the debug channel of §4.4: the customer's acts with knowable content only. The hidden
goal is never put in an observation (tests check this across all families).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.catalog.synthetic import synthetic_tables
from ecomjax.catalog.types import Catalog, CatalogTables
from ecomjax.core import reset as core_reset
from ecomjax.core import step as core_step
from ecomjax.llm_bridge import schemas as SC
from ecomjax.llm_bridge import templates
from ecomjax.llm_bridge.ids import CatalogIds, IdCodec
from ecomjax.llm_bridge.noise import add_noise, key_rng
from ecomjax.llm_bridge.parse import EmbedFn, format_turn, parse_turn
from ecomjax.llm_bridge.render import (
    HARD_FAIL_NAMES,
    ResultRenderer,
    action_to_turn,
    assistant_message,
    error,
    event_message,
    store_notice,
    synth_variants,
    system_message,
    tool_message,
)
from ecomjax.program_cache import KeptJit
from ecomjax.registry import by_env, env_name, on_change
from ecomjax.registry import family as get_family
from ecomjax.tools.search import resolve_searches
from ecomjax.types import Action, EnvParams, EpisodeState, SearchResults, TimeStep, no_search
from ecomjax.xla_options import FAST_COMPILE as FAST_COMPILE  # re-exported

T = C.Tool
E = C.Env
TM_ = C.Termination
SearchFn = Callable[[Catalog, EpisodeState, Action, EnvParams], SearchResults]

# FAST_COMPILE (re-exported here) cuts CPU compile time for the host's single-episode
# functions; it costs step time, which an LLM host does not notice.

# --- compiled functions, once per process ------------------------------------------------------

_COMPILED: dict[tuple, Callable] = {}
on_change(_COMPILED.clear)  # a reset is keyed by family name


def _opts_key(opts: Mapping[str, Any] | None) -> tuple:
    return tuple(sorted((opts or {}).items()))


def _jit(key: tuple, make: Callable[[], Callable], static: tuple[int, ...], opts) -> Callable:
    full = (*key, _opts_key(opts))
    fn = _COMPILED.get(full)
    if fn is None:
        fn = KeptJit("-".join(map(str, key)), make(), static, opts)
        _COMPILED[full] = fn
    return fn


def _reset_fn(name: str) -> Callable:
    generate = get_family(name).generate

    def run(key, catalog, d, params):
        problem = generate(key, catalog, d, params)
        state, ts = core_reset(key, catalog, problem, params)
        return state, ts, D.difficulty(d, params.overrides).p_noise

    return run


def compiled_reset(name: str, opts=None) -> Callable:
    """(key, catalog, d, params) -> (state, timestep, p_noise), jitted per family."""
    return _jit(("reset", name.upper()), lambda: _reset_fn(name), (3,), opts)


def compiled_step(opts=None) -> Callable:
    """``ecomjax.core.step`` with a resolved search, jitted once for every family."""
    return _jit(("step",), lambda: core_step, (3,), opts)


def compiled_search(opts=None) -> Callable:
    """The device retrieval stage (``resolve_searches``), jitted once."""
    return _jit(("search",), lambda: resolve_searches, (3,), opts)


def compiled_functions() -> int:
    """How many executables the process's jitted functions hold (sessions share them)."""
    return sum(f._cache_size() for f in _COMPILED.values())


# --- catalog text, shared by the sessions of one catalog -----------------------------------------


@dataclass
class CatalogText:
    """A catalog with its host strings: the id tables of the parser and the lexicon of the
    renderers. Build once per catalog and hand it to every session."""

    catalog: Catalog = field(repr=False)
    tables: CatalogTables = field(repr=False)
    ids: CatalogIds = field(repr=False)
    lexicon: templates.Lexicon = field(repr=False)

    @classmethod
    def build(cls, catalog: Catalog, tables: CatalogTables | None = None) -> CatalogText:
        tables = tables if tables is not None else synthetic_tables()
        return cls(
            catalog,
            tables,
            CatalogIds.from_catalog(catalog, tables),
            templates.Lexicon.from_catalog(catalog, tables),
        )


def _as_text(catalog: Catalog | CatalogText, tables: CatalogTables | None) -> CatalogText:
    return catalog if isinstance(catalog, CatalogText) else CatalogText.build(catalog, tables)


# --- user acts as knowable records ------------------------------------------------------------


def act_record(act: Any, ep: templates.EpisodeText) -> dict:
    """A UserAct as JSON-friendly knowable content: act names, stated slot values (codes as
    the customer would name them), items by description. No index of a product, order or
    line ever appears (SPEC §10.1)."""
    a = jax.tree_util.tree_map(np.asarray, act)
    lex = ep.lexicon
    out: dict[str, Any] = {"acts": [templates.ACT_NAMES[k] for k in C.Act if a.acts[k]]}
    out["user_caused"] = bool(a.user_caused)
    slots: dict[str, dict[str, Any]] = {}
    for row in range(C.MAX_SUBGOALS):
        for s in C.Slot:
            if a.slot_stated[row, s]:
                slots.setdefault(str(row), {})[C.SLOT_NAMES[s]] = {
                    "value": float(a.slot_value[row, s]),
                    "op": int(a.slot_op[row, s]),
                }
        if int(a.ref_form[row]) > 0:
            slots.setdefault(str(row), {})["product"] = lex.describe(
                int(a.ref_form[row]), int(a.ref_key[row])
            )
    out["slots"] = slots
    status = {C.SLOT_NAMES[s]: C.ClarifyStatus(int(a.slot_status[s])).name.lower()
              for s in C.Slot if int(a.slot_status[s]) != 0}  # fmt: skip
    if status:
        out["clarify"] = status
    items = []
    for i in range(C.MAX_ITEMS):
        if not a.item_valid[i]:
            continue
        rec: dict[str, Any] = {
            "item": i,
            "description": lex.describe(int(a.item_desc_form[i]), int(a.item_desc_key[i])),
        }
        if int(a.item_qty[i]) >= 0:
            rec["qty"] = int(a.item_qty[i])
        if int(a.item_var_attr[i]) >= 0:
            rec["variant"] = {
                "attr": C.ATTR_NAMES[int(a.item_var_attr[i])],
                "value": float(a.item_var_value[i]),
            }
        for flag in ("item_var_nopref", "item_update", "item_confirm"):
            if bool(getattr(a, flag)[i]):
                rec[flag.removeprefix("item_")] = True
        if int(a.item_issue[i]):
            rec["issue"] = C.CartIssue(int(a.item_issue[i])).name.lower()
        items.append(rec)
    if items:
        out["items"] = items
    extras = [
        {
            "description": lex.describe(int(f), int(k)),
            "kind": "extra_product" if int(kind) == 1 else "not_mine",
        }
        for f, k, kind in zip(a.extra_form, a.extra_key, a.extra_kind, strict=True)
        if int(kind) > 0
    ]
    if extras:
        out["extras"] = extras
    if a.feedback_issues.any():
        fam, _ = ep.feedback_row()
        flagged = np.flatnonzero(a.feedback_issues)
        out["feedback_issues"] = [fam.issues[k] if k < len(fam.issues) else int(k) for k in flagged]
    if bool(a.cart_confirm):
        out["cart_confirm"] = True
    if bool(a.feedback_confirm):
        out["feedback_confirm"] = True
    cats = [lex.category(c) for c in a.cats if int(c) >= 0]
    if cats:
        out["categories"] = cats
    facts = [
        {"field": templates.P.FIELD_NAMES[int(f)], "value": float(v)}
        for f, v in zip(a.fact_field, a.fact_value, strict=True)
        if int(f) >= 0
    ]
    if facts:
        out["facts"] = facts
    out["subgoal"] = int(a.subgoal)
    out["active"] = int(a.active)
    if int(a.intro_env) >= 0:
        out["intro_env"] = env_name(int(a.intro_env))
        out["switch_intro"] = bool(a.switch_intro)
    if int(a.n_subgoals) > 0:
        out["n_subgoals"] = int(a.n_subgoals)
    return out


# --- the session ---------------------------------------------------------------------------------


@dataclass
class Session:
    """One episode at a time. ``reset`` starts one, ``step`` plays one assistant turn.

    ``search_fn(catalog, state, action, params) -> SearchResults`` replaces the device
    retrieval (e.g. a FAISS index); ``embed_fn`` embeds query text for the parser.
    ``event_role=False`` folds store events into ``[Store notice]`` lines that open the
    next user message. ``noise=False`` switches typo noise off. ``compiler_options``
    (e.g. ``FAST_COMPILE``) are passed to XLA for the session's jitted functions."""

    catalog: Catalog | CatalogText = field(repr=False)
    tables: CatalogTables | None = field(default=None, repr=False)
    params: EnvParams = field(default_factory=EnvParams)
    search_fn: SearchFn | None = None
    embed_fn: EmbedFn | None = None
    event_role: bool = True
    noise: bool = True
    submit_tool: bool = True
    compiler_options: Mapping[str, Any] | None = None
    fmt: str = "openai"
    # Optional LLM wording of customer turns (``verbaliser.Verbaliser``); the template text
    # is used whenever its checks fail. Scores never depend on it.
    verbaliser: Any = None

    def __post_init__(self) -> None:
        self.text = _as_text(self.catalog, self.tables)
        self.messages: list[dict] = []
        self.state: EpisodeState | None = None
        self.timestep: TimeStep | None = None
        self.done = True

    # -- episode start ------------------------------------------------------------------------

    def reset(
        self,
        family: str,
        difficulty: int,
        seed: int,
        catalog: Catalog | CatalogText | None = None,
        tables: CatalogTables | None = None,
    ) -> dict:
        """Starts episode (family, d, seed): the episode key is ``key(seed)`` (SPEC §12)."""
        if catalog is not None and catalog is not self.text and catalog is not self.text.catalog:
            self.text = _as_text(catalog, tables)
        fam = get_family(family)
        self.family = fam.name
        self.seed = int(seed)
        self.key = jax.random.key(self.seed)
        self.d = int(difficulty)
        run = compiled_reset(fam.name, self.compiler_options)
        state, ts, p_noise = run(self.key, self.text.catalog, jnp.int32(self.d), self.params)
        self.state, self.timestep = state, ts
        problem = jax.device_get(state.problem)
        self.p_noise = float(p_noise) if self.noise else 0.0
        self.codec = IdCodec.from_problem(self.text.ids, problem)
        sub_envs = tuple(int(x) for x in np.asarray(problem.sub_env))
        self.episode = templates.EpisodeText(self.text.lexicon, int(fam.env), sub_envs)
        self.results = ResultRenderer(self.text.lexicon, self.codec, synth_variants(problem))
        self.t_max = int(problem.t_max)
        obs = jax.device_get(ts.observation)
        self._dlg = jax.device_get(state.dialogue)  # host copy: the next step reads it
        self.b_tool = int(obs.tool_budget)
        self.n_user = 0
        self.done = False
        self.user_acts: list[dict] = []
        self.acts: list[Any] = []  # host UserAct per user message (debug channel)
        self.utterances: list[templates.Utterance] = []  # their noise-free renderings
        env_shown = int(fam.env) if self.params.disclose_env_id else None
        self.messages = [
            system_message(env_shown, int(problem.today), self.t_max, self.b_tool, self.submit_tool)
        ]
        opening = self._user_message(obs.reply, mid_task=False, notices=[])
        self.messages.append(opening)
        return self._observation([self.messages[0], opening], obs, [], None)

    @property
    def tools(self) -> list[dict]:
        """The tool schemas shown to the model (with ``submit_answer`` unless disabled)."""
        env = env_name(self.episode.env) if self.params.disclose_env_id else None
        return _tools(self.submit_tool, env)

    # -- one turn ---------------------------------------------------------------------------------

    def step(self, assistant_output: Any, fmt: str | None = None) -> dict:
        """Plays one assistant turn given as model output in ``fmt`` ("openai", "hermes",
        "qwen_xml" or "json"). Malformed output is a hard fail (reward -1), not an error."""
        if self.done or self.state is None:
            raise RuntimeError("the episode is over: call reset first")
        fmt = fmt or self.fmt
        dlg0 = self._dlg
        turn = int(dlg0.turn) + 1
        action, info = parse_turn(assistant_output, self.codec, fmt, self.embed_fn, turn)
        search = self._search(action)
        step = compiled_step(self.compiler_options)
        state, ts = step(self.text.catalog, self.state, action, self.params, search)
        self.state, self.timestep = state, ts
        obs, dlg = fetch((ts.observation, state.dialogue))
        self._dlg = dlg
        new: list[dict] = [assistant_message(info, assistant_output)]
        new.extend(self._tool_messages(info, obs, action, int(dlg.hard_fail)))
        events = [
            self.codec.product_id(int(p))
            for p in np.asarray(obs.events)[: min(int(obs.n_events), C.MAX_EVENTS)]
            if p >= 0
        ]
        term = int(obs.termination)
        if self.event_role:
            new.extend(event_message(p) for p in events)
        if term in (TM_.RUNNING, TM_.USER_QUIT):
            prev = int(dlg0.active)
            mid = bool(dlg.interrupted[prev]) and not bool(dlg0.interrupted[prev])
            notices = [] if self.event_role else events
            new.append(self._user_message(obs.reply, mid_task=mid, notices=notices))
        self.messages.extend(new)
        self.done = bool(obs.done)
        return self._observation(new, obs, events, info)

    def step_action(self, action: Action, fmt: str = "json") -> dict:
        """An array agent's turn through the text bridge: ``action`` is written as text
        (``render.action_to_turn``) and parsed back, exactly like an LLM turn."""
        message, calls, answer = action_to_turn(action, self.codec, self.text.lexicon)
        return self.step(format_turn(fmt, message, calls, answer), fmt)

    # -- parts ------------------------------------------------------------------------------------

    def _search(self, action: Action) -> SearchResults:
        if not (np.asarray(action.tool) == T.CATALOG_SEARCH).any():
            return _no_search()
        if self.search_fn is not None:
            out = self.search_fn(self.text.catalog, self.state, action, self.params)
            return jax.tree_util.tree_map(jnp.asarray, out)
        run = compiled_search(self.compiler_options)
        return run(self.text.catalog, self.state, action, self.params)

    def _tool_messages(self, info: dict, obs: Any, action: Action, hard: int) -> list[dict]:
        failed = int(obs.termination) == TM_.HARD_FAIL and hard != C.HardFail.SAFETY_VIOLATION
        out = []
        act = jax.tree_util.tree_map(np.asarray, action)
        for c in info.get("calls", []):
            name = c.get("name") if isinstance(c.get("name"), str) else "invalid"
            if name == SC.SUBMIT_ANSWER:
                continue
            if failed or c.get("slot") is None:
                content = error(HARD_FAIL_NAMES[hard], rejection(info, c, hard))
            else:
                content = self.results.content(obs.results, act, int(c["slot"]), c)
            out.append(tool_message(c["id"], name, content))
        if info.get("answer") is not None or info.get("answer_error"):
            msg = assistant_message(info, None)
            answer_call = msg["tool_calls"][-1]
            if failed:
                why = info.get("answer_error")
                own = {"problem": f"{SC.SUBMIT_ANSWER}: the answer is invalid ({why})"}
                content = error(HARD_FAIL_NAMES[hard], rejection(info, own if why else {}, hard))
            else:
                content = {"status": "received", "done": bool(info["answer"].get("done", True))}
            out.append(tool_message(answer_call["id"], SC.SUBMIT_ANSWER, content))
        return out

    def _user_message(self, act: Any, mid_task: bool, notices: list[str]) -> dict:
        idx = self.n_user
        self.n_user += 1
        rng = key_rng(self.key, "TEMPLATE", idx)
        utt = templates.render_reply(act, self.episode, rng, mid_task=mid_task)
        self.utterances.append(utt)
        marked = utt.marked if self.verbaliser is None else self.verbaliser(utt, self.messages)
        text = add_noise(marked, self.p_noise, key_rng(self.key, "NOISE", idx))
        if notices:
            text = store_notice(notices) + "\n" + text
        self.acts.append(jax.tree_util.tree_map(np.asarray, act))
        self.user_acts.append(act_record(act, self.episode))
        return {"role": "user", "content": text}

    def _observation(self, new: list[dict], obs: Any, events: list[str], info: dict | None):
        done = bool(obs.done)
        term = int(obs.termination)
        out: dict[str, Any] = {
            "messages": list(self.messages),
            "new_messages": new,
            "tools": self.tools,  # shared across sessions: read-only
            "env_id": env_name(self.episode.env) if self.params.disclose_env_id else None,
            "turn": int(obs.turn),
            "turns_left": int(obs.turns_left),
            "tool_budget": int(obs.tool_budget),
            "events": [{"type": "out_of_stock", "product_id": p} for p in events],
            "done": done,
            "termination_reason": C.TERMINATION_NAMES[term] if done else None,
            "reward": float(obs.reward.r_total) if done else 0.0,
            "reward_breakdown": self._breakdown(obs) if done else None,
            "is_correct": bool(obs.reward.is_correct) if done else None,
            "info": {
                "user_acts": [self.user_acts[-1]] if (new and new[-1]["role"] == "user") else [],
                "parse": _parse_summary(info),
            },
        }
        return out

    def _breakdown(self, obs: Any) -> dict:
        r = obs.reward
        dlg = self._dlg
        hard = int(r.hard_fail)
        failed = hard != C.HardFail.NONE
        names = by_env(self.episode.env).details  # the names its verifier gives them
        details = {
            n: (None if failed else float(v))
            for n, v in zip(names, np.asarray(r.detail), strict=False)
            if n
        }
        return {
            "r_task": None if failed else float(r.r_task),
            "r_eff": None if failed else float(r.r_eff),
            "r_hall": None if failed else float(r.r_hall),
            "r_total": float(r.r_total),
            "is_correct": bool(r.is_correct),
            "T": int(dlg.turn),
            "T_user": int(dlg.t_user),
            "hard_fail_kind": HARD_FAIL_NAMES[hard] if failed else None,
            "details": details,
        }


_PACKERS: dict = {}


def fetch(tree: Any) -> Any:
    """``jax.device_get`` in one transfer per dtype instead of one per leaf: a step's
    observation and dialogue are ~110 small arrays, and per-leaf transfers were most of
    the host time of a turn. Leaves are packed on device by one cached jitted function."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    sig = (treedef, tuple((x.shape, x.dtype) for x in leaves))
    if sig not in _PACKERS:
        dtypes = sorted({x.dtype for x in leaves}, key=str)
        groups = [[i for i, x in enumerate(leaves) if x.dtype == dt] for dt in dtypes]

        def pack(xs):
            return tuple(
                jnp.concatenate([jnp.ravel(xs[i]) for i in g]) if g else None for g in groups
            )

        _PACKERS[sig] = (jax.jit(pack), groups)
    pack, groups = _PACKERS[sig]
    out: list[Any] = [None] * len(leaves)
    for g, buf in zip(groups, jax.device_get(pack(leaves)), strict=True):
        at = 0
        for i in g:
            n = int(np.prod(leaves[i].shape, dtype=np.int64))
            out[i] = np.asarray(buf[at : at + n]).reshape(leaves[i].shape)
            at += n
    return jax.tree_util.tree_unflatten(treedef, out)


@cache
def _no_search() -> SearchResults:
    """One device copy of the empty retrieval stage (arrays are immutable, so shared)."""
    return no_search()


@cache
def _tools(with_submit: bool, env: str | None) -> list[dict]:
    return SC.all_tools(with_submit=with_submit, env=env)


def rejection(info: Mapping, call: Mapping, hard: int) -> str:
    """Why a turn was rejected (SPEC §4.2), as the tool result of one of its calls: the
    call's own violation (field, bound, value) if it has one, else the turn's first. Only
    the model's own arguments and the public schemas are named, never the hidden goal."""
    own = call.get("problem")
    if own:
        return f"{own}; the turn was rejected and no call ran."
    reason = next((c["problem"] for c in info.get("calls", ()) if c.get("problem")), None)
    if reason is None and info.get("answer_error"):
        reason = f"the answer is invalid: {info['answer_error']}"
    if reason is None and hard == C.HardFail.TOOL_BUDGET_EXCEEDED:
        reason = f"{info.get('n_calls', 0)} tool calls are more than the per-turn budget"
    if reason is None:
        return "The turn was rejected; no call ran."
    return f"The turn was rejected ({reason}); no call ran."


def _parse_summary(info: dict | None) -> dict | None:
    if info is None:
        return None
    return {
        "malformed": info.get("malformed"),
        "errors": list(info.get("errors", [])),
        "n_calls": info.get("n_calls", 0),
        "answer_error": info.get("answer_error"),
        "internal_error": info.get("internal_error"),
    }
