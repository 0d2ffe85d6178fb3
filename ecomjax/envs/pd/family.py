"""The PD family's descriptor (see ``ecomjax.family``)."""

from ecomjax.constants import Env
from ecomjax.envs.pd import generator, oracle, verifier
from ecomjax.family import Family

FAMILY = Family(
    env=Env.PD,
    generate=generator.generate,
    oracle=oracle,
    details=("r_rank", "r_cons", "r_avail"),
    task_text=(
        "Find the products the customer asks for and recommend the best ones, best first, "
        "in the order of the customer's stated priority."
    ),
    slots=generator.SLOTS,
    mean_turns=3,
    verify=verifier.verify,
    fill=generator.fill,
    answer=(("recommended_product_ids", "Product ids, best first."),),
)
