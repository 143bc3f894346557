"""Returning users (Chowdhury & Zhou 2023, Appendix I): a user takes part in up to B batches, once
per batch (Assumption 2), so her guarantee is the composition of B releases.

Two ways to account for it, the comparison the appendix makes:

- ``composition = "rdp"`` (the appendix's RDP route, Remark 8's "numeric accounting"): her B
  releases compose as Rényi curves (pure ε as its curve and as B·ε), converted to (ε, δ) once at the
  end. Which B releases are hers is not known in advance, so the ledger charges B times the worst
  release: every release enters B lanes, each lane keeps the worst (elementwise over the curve), and
  lanes compose (:func:`b_fold`). Calibrated (``calibrate = true``), each round's noise is the
  smallest for which that B-fold composition is (ε, δ)-DP.
- ``composition = "advanced"`` (the approximate-DP route, e.g. Tenenbaum et al.'s binomial noise):
  every release is made (ε_i, δ_i)-DP, δ_i = δ/(2B) and slack δ′ = δ/2 as the appendix splits δ, and
  her B releases are charged by advanced composition
  (:class:`~privbandit.protocol.privacy.events.AdvancedComposition`: the optimal composition of
  Kairouz et al., never more than Dwork–Rothblum–Vadhan's bound, its Theorem 7). ε_i is the largest
  for which that composition is at most ε (:func:`advanced_targets`); the appendix's closed form
  (:func:`appendix_split`) spends less.

The appendix's claim: the RDP route saves a factor log(1/δ) (up to log B) in the noise variance,
i.e. sqrt(log(1/δ)) in the regret's privacy term (its eqs. 14–15 are lost in the extraction we
have). ``experiments/returning_users.py`` measures both routes on the same instances.
"""

from __future__ import annotations

import math
from functools import lru_cache

from privbandit.protocol.privacy import AdvancedComposition, Ledger, PrivacyEvent
from privbandit.protocol.privacy.events import advanced_epsilon


def appendix_split(epsilon: float, delta: float, returning: int) -> tuple[float, float, float]:
    """(ε_i, δ_i, δ′) as App. I prints them: ε_i = ε/(2·sqrt(2B·ln(1/δ′))), δ_i = δ/(2B), δ′ = δ/2, made
    for Dwork–Rothblum–Vadhan's bound (its Theorem 7)."""
    if returning < 1:
        raise ValueError(f"returning = {returning} must be ≥ 1")
    slack = delta / 2
    return epsilon / (2 * math.sqrt(2 * returning * math.log(1 / slack))), delta / (2 * returning), slack


@lru_cache(maxsize=1024)
def advanced_targets(epsilon: float, delta: float, returning: int) -> tuple[float, float, float]:
    """(ε_i, δ_i, δ′) of the advanced-composition route: App. I's δ_i = δ/(2B) and δ′ = δ/2, and the
    largest ε_i whose B-fold composition, as the ledger charges it (the optimal composition, or
    basic composition where smaller: :func:`~privbandit.protocol.privacy.events.advanced_epsilon`),
    is at most ε. App. I's printed ε_i (:func:`appendix_split`) is made for the looser DRV bound and
    spends less than ε (a quarter of it at B = 8, δ = 10⁻⁷): solving for ε_i gives the route its
    best case, so the comparison with the RDP route is at equal guarantees."""
    low, delta_i, slack = appendix_split(epsilon, delta, returning)
    high = epsilon
    if advanced_epsilon(high, delta_i, returning, slack)[0] <= epsilon:
        return high, delta_i, slack
    for _ in range(100):  # the composed ε grows with ε_i; App. I's ε_i is always below the answer
        mid = math.sqrt(low * high)
        low, high = (mid, high) if advanced_epsilon(mid, delta_i, returning, slack)[0] <= epsilon else (low, mid)
        if high / low - 1 < 1e-10:
            break
    return low, delta_i, slack


def b_fold(events: list[PrivacyEvent], returning: int, delta: float, users: int) -> Ledger:
    """A ledger charging a user of ``returning`` batches: every event in B lanes (module docstring)."""
    ledger = Ledger("returning", None, delta, users=users)
    for event in events:
        for visit in range(returning):
            ledger.record(event, lane=f"visit-{visit}", releases=1 if visit == 0 else 0)
    return ledger


def advanced_ledger(per_release_epsilon: float, returning: int, delta: float, users: int) -> Ledger:
    """A ledger charging a user of B releases, each (ε_i, δ_i)-DP, by advanced composition."""
    delta_i, slack = delta / (2 * returning), delta / 2
    ledger = Ledger("returning", None, delta, users=users)
    event = AdvancedComposition(per_release_epsilon, delta_i, slack,
                                basis="a user in up to B batches (Chowdhury & Zhou App. I), each release "
                                      "(ε_i, δ/(2B))-DP, advanced composition with slack δ/2")
    for _ in range(returning):
        ledger.record(event, lane="returning", group=0)
    return ledger
