"""Per-jit XLA compiler options shared by the host bridge, the study and the tests."""

from __future__ import annotations

from typing import Any

# LLVM optimisation off: CPU compiles take about a third of the time
# (benchmarks/compile_flags.py) and steps run slower, a good trade for one-off programs
# (an LLM host's single-episode functions, smoke-scale studies).
FAST_COMPILE: dict[str, Any] = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
}
