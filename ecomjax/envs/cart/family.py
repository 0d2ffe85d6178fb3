"""The CART family's descriptor (see ``ecomjax.family``)."""

from ecomjax.constants import Env, Slot
from ecomjax.envs.cart import generator, oracle, verifier
from ecomjax.family import Family

FAMILY = Family(
    env=Env.CART,
    generate=generator.generate,
    oracle=oracle,
    details=("f1",),
    task_text=(
        "Put exactly the items, variants and quantities the customer wants into the cart, "
        "then submit the answer."
    ),
    slots=generator.SLOTS,
    mean_turns=3,
    verify=verifier.verify,
    fill=generator.fill,
    defaulted=(Slot.QUANTITY,),
)
