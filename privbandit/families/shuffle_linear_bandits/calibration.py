"""Comparisons at equal guarantees (issue #13 item 4): the nominal ε at which an algorithm's ledger
meets a target (ε, δ).

The five algorithms turn the nominal ε into noise by different rules, and under ``paper-code`` by the
authors' constants, which are not their theorems': LDP's σ omits the theorem's factor 4√2, so at
nominal ε = 1 a user is (≈ 6, δ)-DP; JDP's tree is calibrated on ln n where the node count is
⌊log₂ n⌋ + 1. A nominal-ε table therefore compares unequal guarantees. :func:`calibrated_epsilon`
solves, per algorithm, the nominal ε whose run the ledger reads as exactly the target ε at the
experiment's δ, from the same events the analyzer records (:func:`run_epsilon`), by bisection on
log ε (the ledger's ε grows with the nominal one: every σ is proportional to 1/ε, P_Vec's b to 1/ε²).
"""

from __future__ import annotations

import math

from privbandit.families.shuffle_linear_bandits.parties import Setup
from privbandit.protocol.privacy import Ledger
from privbandit.runner.config import ConfigError

LOWEST, HIGHEST = 1e-6, 1e6  # the nominal ε searched


def batch_lane(kind: str, m: int) -> str:
    """The ledger lane of batch m's release, as :class:`~.parties.LinearServer` records it: JDP's
    node of level (trailing ones of m) in ``level-j``, every other release in ``round``."""
    if kind != "linucb-jdp":
        return "round"
    return f"level-{(~m & (m + 1)).bit_length() - 1}"


def run_epsilon(s: Setup, ledger: Ledger) -> float | None:
    """ε at the ledger's δ of one run of ``s``, recording exactly the events its analyzer records
    (one per full batch; JDP's in its tree level's lane; returning users in one group); None if no
    proof covers it."""
    event = s.event()
    group = "returning" if s.budget.participations > 1 else None
    batches = s.horizon // s.batch
    if group is None:  # disjoint users: one release per lane stands for them all
        for lane in sorted({batch_lane(s.kind, (1 << j) - 1) for j in range(batches.bit_length())}):
            ledger.record(event, lane)
    else:
        for m in range(batches):
            ledger.record(event, batch_lane(s.kind, m), group)
    summary = ledger.summary()
    return summary["epsilon_at_delta"] if summary["guarantee"] == "proven" else None


def calibrated_epsilon(spent, label: str, algorithm: str, target: float, delta: float) -> float:
    """The largest nominal ε ≤ what bisection can tell apart (10⁻⁹ relative) whose run ``spent(ε)``
    (ε at δ, or None when no proof covers it) does not exceed ``target``."""

    def over(eps: float) -> bool:
        got = spent(eps)
        return got is None or got > target

    if over(LOWEST):
        got = spent(LOWEST)
        why = "no proof covers its release (the ledger says none proven)" if got is None else f"ε = {LOWEST:g} spends {got:.3g}"
        raise ConfigError(f"calibrate: algorithms.{label} ({algorithm}) cannot be calibrated to ε = {target} at "
                          f"δ = {delta}: {why}; set its epsilon")
    lo, hi = LOWEST, target
    while not over(hi):  # a ledger may read less than the nominal ε (a conservative σ): search upward
        lo, hi = hi, hi * 4
        if hi > HIGHEST:
            return lo
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if over(mid) else (mid, hi)
        if hi / lo - 1 < 1e-9:
            break
    return lo
