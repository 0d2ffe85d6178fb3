"""The BUNDLE family's descriptor (see ``ecomjax.family``)."""

from ecomjax.constants import Env
from ecomjax.envs.bundle import generator, oracle, verifier
from ecomjax.family import Family

FAMILY = Family(
    env=Env.BUNDLE,
    generate=generator.generate,
    oracle=oracle,
    details=("f1", "pen"),
    task_text=(
        "Recommend one in-stock product for each category the customer's project needs, "
        "within the budget if one is given."
    ),
    slots=generator.SLOTS,
    mean_turns=3,
    verify=verifier.verify,
    fill=generator.fill,
    answer=(("recommended_product_ids", "One product per category."),),
)
