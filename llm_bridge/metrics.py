"""pass@k and pass^k over repeated attempts of the same problem.

pass@k (Chen et al., 2021) is the chance that at least one of k attempts drawn without
replacement from n succeeds; pass^k (tau-bench) is the chance that all k do. Both use the
unbiased estimators over n >= k recorded attempts with c successes, so a report from 8
attempts per problem is not biased by which 4 were kept.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): at least one of k attempts succeeds."""
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k): all k attempts succeed (reliability, not coverage)."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")


def per_family(
    rows: Iterable[Mapping], ks: Iterable[int] = (1, 2, 4, 8)
) -> dict[str, dict[str, float]]:
    """Mean pass@k and pass^k per family over problems.

    ``rows`` are episode records with ``family``, ``problem`` (the id shared by a problem's
    attempts) and ``is_correct``. k values above a problem's attempt count are skipped."""
    groups: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for r in rows:
        groups[(str(r["family"]), str(r["problem"]))].append(bool(r["is_correct"]))
    sums: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (fam, _), outcomes in groups.items():
        n, c = len(outcomes), sum(outcomes)
        for k in ks:
            if k <= n:
                sums[fam][f"pass@{k}"].append(pass_at_k(n, c, k))
                sums[fam][f"pass^{k}"].append(pass_hat_k(n, c, k))
    return {
        fam: {name: sum(v) / len(v) for name, v in sorted(m.items())}
        for fam, m in sorted(sums.items())
    }
