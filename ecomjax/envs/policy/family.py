"""The POLICY family's descriptor (see ``ecomjax.family``)."""

from ecomjax.constants import Env
from ecomjax.envs.policy import generator, oracle, verifier
from ecomjax.family import Family

FAMILY = Family(
    env=Env.POLICY,
    generate=generator.generate,
    oracle=oracle,
    details=("rho",),
    task_text=(
        "Answer the customer's store-policy question from the policy rules and the "
        "customer's situation."
    ),
    slots=generator.SLOTS,
    mean_turns=2,
    verify=verifier.verify,
    fill=generator.fill,
    answer=(("policy_answer", "The policy's answer."),),
)
