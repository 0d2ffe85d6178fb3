"""The SUB family's descriptor (see ``ecomjax.family``)."""

from ecomjax.constants import Env
from ecomjax.envs.sub import generator, oracle, verifier
from ecomjax.family import Family

FAMILY = Family(
    env=Env.SUB,
    generate=generator.generate,
    oracle=oracle,
    details=("r_rank", "", "r_avail"),
    task_text=(
        "The product the customer wanted is out of stock: recommend similar in-stock "
        "alternatives that meet the customer's requirements, most similar first."
    ),
    slots=generator.SLOTS,
    mean_turns=3,
    verify=verifier.verify,
    fill=generator.fill,
    answer=(("recommended_product_ids", "Product ids, best first."),),
)
