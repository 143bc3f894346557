"""Goodness-of-fit helpers for the statistical tests.

Every statistical test runs at a fixed seed, so it is deterministic; its threshold (p > 1e-3 unless a
test says otherwise) is what a wrong law fails. Each sampler test also checks that the same test
*rejects* a plausible wrong law, so we know it has the power to fail.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

P_MIN = 1e-3


def chi_square_pvalue(samples: np.ndarray, pmf, min_expected: float = 5.0, pad: int = 20_000) -> float:
    """Chi-square test of integer samples against ``pmf(k)``.

    The pmf is evaluated on the observed range widened by ``pad`` on each side; the outermost
    cells are pooled inwards until each expected count is ≥ ``min_expected``, so the pooled tails
    carry all the mass outside the kept cells.
    """
    samples = np.asarray(samples, dtype=np.int64)
    n = samples.size
    lo, hi = int(samples.min()) - pad, int(samples.max()) + pad
    probs = pmf(np.arange(lo, hi + 1)) * n
    observed = np.bincount(samples - lo, minlength=probs.size).astype(np.float64)
    left = np.cumsum(probs)
    right = np.cumsum(probs[::-1])[::-1]
    a = int(np.searchsorted(left, min_expected))  # first cell where the pooled left tail is enough
    b = int(probs.size - 1 - np.searchsorted(right[::-1], min_expected))
    if b <= a + 1:
        raise ValueError("too few samples for a chi-square test at this min_expected")
    obs = np.concatenate(([observed[: a + 1].sum()], observed[a + 1 : b], [observed[b:].sum()]))
    exp = np.concatenate(([left[a]], probs[a + 1 : b], [right[b]]))
    exp *= n / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)
