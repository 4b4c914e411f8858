"""pass@k: the chance that at least one of ``k`` attempts passes, estimated from ``n`` attempts of which ``c`` passed.

The unbiased estimator of Chen et al. 2021 (Evaluating Large Language Models Trained on Code, eq. 1):
``1 - C(n - c, k) / C(n, k)``, computed as a product so that large ``n`` neither overflows nor loses digits.
Averaged over instances it is the suite's pass@k; with ``k = 1`` it is the plain pass rate ``c / n``.
"""

from __future__ import annotations

from collections.abc import Iterable

from rsi_env.errors import RsiEnvError


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one instance attempted ``n`` times with ``c`` passes (needs ``1 <= k <= n``)."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise RsiEnvError(f"pass@k counts are whole numbers, got n={n!r}, c={c!r}, k={k!r}")
    if not 0 <= c <= n or not 1 <= k <= n:
        raise RsiEnvError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k attempts holds a pass
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):  # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
        miss *= 1.0 - k / i
    return 1.0 - miss


def mean_pass_at_k(outcomes: Iterable[tuple[int, int]], k: int) -> float:
    """pass@k over instances, each given as ``(n, c)``; nan for none."""
    vals = [pass_at_k(n, c, k) for n, c in outcomes]
    return sum(vals) / len(vals) if vals else float("nan")
