"""A task family as the rest of the system sees it: one typed object per family.

Each ``ecomjax/envs/<family>/family.py`` builds its ``FAMILY`` from the functions beside
it; ``ecomjax.envs.subgoal_families`` and ``ecomjax.registry`` list them, and the verifier
table, the oracle and JOURNEY's sub-goals read those lists. No import by name: a family
that fails to import fails loudly instead of vanishing from a run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import jax
import numpy as np
from flax import struct

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.types import (
    Action,
    AnswerFields,
    Dialogue,
    EnvParams,
    Observation,
    Problem,
    Score,
    World,
)

# (key, catalog, d, params) -> Problem
Generate = Callable[[jax.Array, Catalog, jax.Array, EnvParams], Problem]
# (catalog, problem, world, dialogue, answer, has_answer) -> Score
Verify = Callable[[Catalog, Problem, World, Dialogue, AnswerFields, jax.Array], Score]
# (key, catalog, d, params, problem, sub[, h]) -> problem with sub-goal ``sub`` written
Fill = Callable[..., Problem]
# the main answer entry -> bool: its fields are in range for this family (SPEC §4.6)
AnswerCheck = Callable[[AnswerFields], jax.Array]


@struct.dataclass
class Feedback:
    """The customer's CONFIRM / CORRECT about one turn, from the family's ``feedback`` hook
    (SPEC §10.2; RETURN's returns, a registered family's own checks). Issues are flags in
    the family's ``issues`` order; frustration counts a CORRECT that repeats the previous
    one's issues and resets on one that names fewer (§10.3)."""

    confirm: jax.Array  # bool
    confirm_new: jax.Array  # bool: a confirmation not given before (user-caused)
    correct: jax.Array  # bool
    issues: jax.Array  # bool [MAX_FEEDBACK_ISSUES]
    reveal: jax.Array  # bool [N_SLOTS]: pending slots whose values the CORRECT states
    confirmed: jax.Array  # bool [MAX_CONFIRMED]: the family's memory of what it confirmed


# (catalog, problem, world before the turn's calls, world after, dialogue, action) -> Feedback
FeedbackHook = Callable[[Catalog, Problem, World, World, Dialogue, Action], Feedback]


class OraclePlan(Protocol):
    """The family's solvability witness (SPEC §8.9): it sees observations only. ``sub`` is
    the sub-goal whose reply rows it reads (0 outside JOURNEY). A plan may also offer
    ``act_batch(memory, obs, catalog)`` over a batch (JOURNEY does: it runs each sub-goal
    plan only on the lanes working on it); each running lane's result must equal ``act``'s
    (``Agent.act_batch``)."""

    def init_memory(self) -> Any: ...

    def act(
        self, memory: Any, obs: Observation, catalog: Catalog, sub: jax.Array
    ) -> tuple[Any, Action]: ...


@dataclass(frozen=True, eq=False, kw_only=True)
class Family:
    """What the engine and the host bridge need from a family. ``verify`` is None for a
    family scored from its sub-goals (JOURNEY); ``fill`` is set for a family that can be a
    JOURNEY sub-goal. ``env`` is the family's id in the arrays: the eight built-in families
    hold ``C.Env``; a family added with ``ecomjax.registry.register`` takes the next id."""

    env: int
    generate: Generate
    oracle: OraclePlan
    # names of the verifier's Score.detail entries, in order ("" for an unused entry)
    details: tuple[str, ...]
    # what the family asks of the agent (SPEC §8): the host's system message states it
    task_text: str
    # the slots the customer can be asked about (SPEC §10.1 knowable fields); JOURNEY asks
    # within a sub-goal, so it declares none and the sub-goal's family answers
    slots: tuple[C.Slot, ...]
    # the oracle's mean turns per episode at the curriculum's d (benchmarks/families.py);
    # auto-reset rounds size their recycle slots by it
    mean_turns: int
    verify: Verify | None = None
    fill: Fill | None = None
    # defaults to the ``C.Env`` member's name; a family outside ``C.Env`` must name itself
    name: str = ""
    # the answer object's keys beyond ``env`` (SPEC §4.6), each with the description the
    # model reads: keys of the bridge's fixed vocabulary (``llm_bridge.schemas.ANSWER_KEYS``),
    # since every family writes the same AnswerFields arrays (SPEC §4.8)
    answer: tuple[tuple[str, str], ...] = ()
    # a range check of the main answer entry beyond the schema (STATUS: a known status); an
    # answer that fails it is an INVALID_ANSWER hard fail
    answer_ok: AnswerCheck | None = None
    # the customer's opening line, for a family whose wording the bridge's templates do not
    # hold (the eight built-in families' openings are templates with slot values); stated
    # slots follow it as the generic slot phrases
    opening: str = ""
    # the CLARIFY slots that always have a value (CART's quantity defaults to 1)
    defaulted: tuple[C.Slot, ...] = ()
    # the customer's CONFIRM / CORRECT after a turn (RETURN: the returns it created); None:
    # the generic customer (CLARIFY, DONE, ACK, frustration). CART's item-level feedback
    # is the customer's own (its acts carry per-item fields no other family has).
    feedback: FeedbackHook | None = None
    # the names of the hook's issue flags, in order (the trace and the host's wording)
    issues: tuple[str, ...] = ()
    # the host's wording of each issue, for a family whose issues the bridge's templates
    # do not word (like ``opening``), and of the hook's CONFIRM
    issue_text: tuple[str, ...] = ()
    confirm_text: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            if not isinstance(self.env, C.Env):
                raise ValueError(f"a family with env id {self.env} outside C.Env needs a name")
            object.__setattr__(self, "name", self.env.name)
        if self.name != self.name.upper() or not self.name.isidentifier():
            raise ValueError(f"a family name is an upper-case identifier, not {self.name!r}")
        if len(self.issues) > C.MAX_FEEDBACK_ISSUES:
            raise ValueError(
                f"{self.name}: at most {C.MAX_FEEDBACK_ISSUES} feedback issues, "
                f"not {len(self.issues)}"
            )
        if self.issues and self.feedback is None:
            raise ValueError(f"{self.name}: issues without a feedback hook")

    @property
    def slot_mask(self) -> np.ndarray:
        return slot_mask(self.slots)

    def __repr__(self) -> str:  # messages show the name, not every function's address
        return f"Family({self.name})"


def slot_mask(slots: tuple[C.Slot, ...]) -> np.ndarray:
    """bool [N_SLOTS]: True at ``slots`` (an ask_user call's slot row, a table row)."""
    mask = np.zeros(C.N_SLOTS, bool)
    mask[list(slots)] = True
    return mask
