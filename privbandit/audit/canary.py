"""The one-run audit (Steinke, Nasr & Jagielski, "Privacy Auditing with One (1) Training Run",
NeurIPS 2023): m canaries, each included independently with probability ½; from the run's output
the auditor guesses the inclusion of r of them (abstaining on the rest) and gets v right.

If the run is (ε, δ)-DP with respect to each canary, their Theorem 3 bounds the number of correct
guesses W:

    P[W ≥ v] ≤ P[Bin(r, q) ≥ v] + 2mδ · max_{1≤i≤v} P[v − i ≤ Bin(r, q) < v] / i,   q = e^ε/(1 + e^ε).

So an observed v whose bound is below β rejects (ε, δ)-DP with confidence 1 − β, and the largest ε
it rejects is a lower bound on the run's ε. Unlike :mod:`.testers`, one run suffices, and what is
audited is the whole run (every release a canary reaches, composed as the protocol composes them),
not one release; the price is a looser bound (the guesses' accuracy, not a likelihood ratio).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """The bound above on P[W ≥ v] for an (ε, δ)-DP run with m canaries and r guesses."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 ≤ v ≤ r ≤ m, got v={v}, r={r}, m={m}")
    if epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError(f"epsilon={epsilon} must be ≥ 0 and delta={delta} in [0, 1]")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(binom.sf(v - 1, r, q))
    slack = 0.0
    if delta > 0 and v > 0:
        i = np.arange(1, v + 1)
        below = np.cumsum(binom.pmf(v - i, r, q))  # P[v − i ≤ Bin(r, q) < v]
        slack = float(np.max(below / i))
    return min(1.0, tail + 2 * m * delta * slack)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, beta: float) -> float:
    """The largest ε the observation rejects at level β (0 if it rejects none), to 10⁻⁶: the bound
    grows with ε, so bisection."""
    if not 0 < beta < 1:
        raise ValueError(f"beta={beta} must lie in (0, 1)")
    if p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2 * hi
        if hi > 1e3:
            return math.inf  # every ε is rejected (e.g. δ = 0 and all guesses right with r large)
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p_value(m, r, v, mid, delta) < beta else (lo, mid)
    return lo


def guess_and_bound(scores: np.ndarray, included: np.ndarray, delta: float, confidence: float,
                    fractions: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0)) -> dict:
    """Guess "included" for the r/2 highest scores and "excluded" for the r/2 lowest, for each r in
    ``fractions`` of m fixed in advance; each r's bound is taken at β/len(fractions) (Bonferroni),
    so the best of them holds with the stated confidence."""
    scores, included = np.asarray(scores, dtype=np.float64), np.asarray(included, dtype=bool)
    m = scores.size
    if m < 2 or included.shape != scores.shape:
        raise ValueError(f"need at least 2 canaries with one inclusion bit each, got {m}")
    beta = (1 - confidence) / len(fractions)
    order = np.argsort(scores, kind="stable")
    rows = []
    for f in fractions:
        k = max(1, int(f * m) // 2)
        low, high = order[:k], order[m - k:]
        v = int((~included[low]).sum() + included[high].sum())
        rows.append({"r": 2 * k, "v": v, "epsilon": epsilon_lower_bound(m, 2 * k, v, delta, beta)})
    best = max(rows, key=lambda row: row["epsilon"])  # the first of the largest
    return {"canaries": m, "included": int(included.sum()), "delta": delta, "confidence": confidence,
            "epsilon": best["epsilon"], "guesses": best["r"], "correct": best["v"], "by_guesses": rows}
