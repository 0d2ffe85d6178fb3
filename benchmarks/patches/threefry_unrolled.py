"""A lead measured and not kept: XLA:CPU's threefry with its 20 rounds unrolled.

JAX lowers ``threefry2x32`` on CPU as a 5-step rolled loop (less to compile); the op
profile names its kernels among C8's largest. This wrapper registers JAX's own unrolled
lowering (the one other backends use; private API, same bits) for CPU, then runs
``families.py`` with the remaining arguments:

    python benchmarks/patches/threefry_unrolled.py unrolled --n 1000 --tasks C8 --batch 4096
    python benchmarks/patches/threefry_unrolled.py rolled --n 1000 --tasks C8 --batch 4096

In the C8 round it was not faster (benchmarks/README.md, "Threefry unrolled on CPU").
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ == "__main__":
    if sys.argv[1] == "unrolled":
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as tf

        mlir.register_lowering(tf.threefry2x32_p, tf._threefry2x32_lowering_rule, platform="cpu")
    import families

    sys.exit(families.main(sys.argv[2:]) or 0)
