"""The JOURNEY family's descriptor (see ``ecomjax.family``): scored from its sub-goals by
``ecomjax.verify.score``, so it has no verifier of its own, and it is no sub-goal itself."""

from ecomjax.constants import Env
from ecomjax.envs.journey import generator, oracle
from ecomjax.family import Family

FAMILY = Family(
    env=Env.JOURNEY,
    generate=generator.generate,
    oracle=oracle,
    details=("subgoals_correct",),
    task_text=(
        "The customer has several requests in one conversation. Handle each one; store "
        "each request's answer in subgoal_answers at its index (done=false keeps the "
        "conversation going) and finish with done=true."
    ),
    slots=generator.SLOTS,
    mean_turns=11,
)
