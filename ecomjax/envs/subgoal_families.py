"""The seven families a JOURNEY may hold as sub-goals, imported statically (a family that
fails to import stops the program). ``ecomjax.registry`` adds JOURNEY itself."""

from ecomjax.envs.bundle.family import FAMILY as BUNDLE
from ecomjax.envs.cart.family import FAMILY as CART
from ecomjax.envs.pd.family import FAMILY as PD
from ecomjax.envs.policy.family import FAMILY as POLICY
from ecomjax.envs.returns.family import FAMILY as RETURN
from ecomjax.envs.status.family import FAMILY as STATUS
from ecomjax.envs.sub.family import FAMILY as SUB
from ecomjax.family import Family

# In env order: JOURNEY's sub-goal draw and fills depend on it (same keys, same episodes).
SUBGOAL_FAMILIES: tuple[Family, ...] = (PD, SUB, CART, RETURN, STATUS, POLICY, BUNDLE)
