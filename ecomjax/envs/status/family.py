"""The STATUS family's descriptor (see ``ecomjax.family``)."""

from ecomjax.constants import Env
from ecomjax.envs.status import generator, oracle, verifier
from ecomjax.family import Family

FAMILY = Family(
    env=Env.STATUS,
    generate=generator.generate,
    oracle=oracle,
    details=("r_oid", "r_stat"),
    task_text="Find the order the customer means and answer with its id and current status.",
    slots=generator.SLOTS,
    mean_turns=2,
    verify=verifier.verify,
    fill=generator.fill,
    answer=(
        ("selected_order_id", "The order asked about."),
        ("order_status", "Its status."),
    ),
    answer_ok=verifier.status_in_range,
)
