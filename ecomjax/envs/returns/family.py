"""The RETURN family's descriptor (see ``ecomjax.family``)."""

from ecomjax.constants import Env
from ecomjax.envs.returns import customer, generator, oracle, verifier
from ecomjax.family import Family

FAMILY = Family(
    env=Env.RETURN,
    generate=generator.generate,
    oracle=oracle,
    details=("r_sel", "r_ret", "r_rep"),
    task_text=(
        "Find the order line the customer wants to return, start the return (with a "
        "replacement if wanted) and answer with the order and line ids."
    ),
    slots=generator.SLOTS,
    mean_turns=3,
    verify=verifier.verify,
    fill=generator.fill,
    answer=(
        ("selected_order_id", "The order of the line."),
        ("selected_line_id", "The line to return."),
    ),
    feedback=customer.return_feedback,
    issues=customer.ISSUES,
    # its issues are worded by the bridge's templates (with slot values); its CONFIRM is one line
    confirm_text="Yes, that return is exactly what I wanted.",
)
