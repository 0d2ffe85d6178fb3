"""Reading compiled programs: the constants XLA baked into them."""

from __future__ import annotations

import math
import re

_CONSTANT = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = (\w+)\[([\d,]*)\]\S* constant\(", re.M)
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2}


def constants(hlo_text: str) -> list[tuple[int, str, str]]:
    """(bytes, name, shape) of every array constant in optimized HLO text, largest first."""
    out = []
    for name, dtype, dims in _CONSTANT.findall(hlo_text):
        n = math.prod(int(d) for d in dims.split(",")) if dims else 1
        out.append((n * _BYTES.get(dtype, 4 if "64" not in dtype else 8), name, f"{dtype}[{dims}]"))
    return sorted(out, reverse=True)
