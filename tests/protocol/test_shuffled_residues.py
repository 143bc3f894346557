"""Issue #13 item 1: Pólya shares calibrated for secure aggregation, released as a shuffled
multiset of residues, are not ε-DP at the secure-aggregation ε. An exact lower bound on the ε of
that release, for one worst-case neighbouring pair, exceeds the ε that secure aggregation would
claim; the ledger must therefore say "none proven" for it, never the secure-aggregation ε.

Neighbours: n users all with reward 0 (x̂ = 0) against the same with one reward 1 (x̂ = g, exact
under randomized rounding). Each residue is (x̂_i + η_i) mod m with η_i = γ⁺ − γ⁻,
γ^± ~ Pólya(1/n, β), β = e^{−ε/g}. Event E: "some residue equals g". The multiset determines E,
so any (ε, δ) guarantee of the shuffled release needs P₁(E) ≤ e^ε P₀(E) + δ. We bound P₁(E) from
below and P₀(E) from above with exact negative-binomial sums (truncation error bounded by tails),
which gives a certified lower bound ε ≥ ln((P₁(E) − δ) / P₀(E)).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privbandit.families.distributed_dp_mab.mechanisms import PolyaSecAgg

EPSILON = 0.5
CUTOFF = 4000  # terms of each negative-binomial sum; the rest is bounded by the tail mass


def _share_law(n: int, g: int):
    """γ ~ Pólya(1/n, β): scipy's nbinom(r, 1 − β)."""
    return stats.nbinom(1.0 / n, -math.expm1(-EPSILON / g))


def epsilon_lower_bound(n: int, delta: float) -> tuple[float, float, float]:
    q = PolyaSecAgg(EPSILON, 1e-6).params(n)
    g, m = q.g, q.m
    law = _share_law(n, g)
    x = np.arange(CUTOFF)
    pmf = law.pmf(x)
    tail = law.sf(CUTOFF - 1)  # P(γ ≥ CUTOFF)
    # P(η = 0) ≥ Σ_{x<L} P(γ = x)², the special user's residue is g whenever η ≡ 0.
    p1 = float((pmf ** 2).sum())
    # P(η ≡ g mod m) ≤ P(η = g) + P(|η| ≥ m − g); P(η = g) ≤ Σ_{x<L} P(γ = x + g)P(γ = x) + P(γ ≥ L).
    eta_g = float((pmf[g:] * pmf[: CUTOFF - g]).sum()) + tail
    wrap = 2 * float(law.sf(m - g - 1))
    q0 = eta_g + wrap
    p0 = -math.expm1(n * math.log1p(-q0))  # 1 − (1 − q0)^n: some of n users hits g
    return math.log((p1 - delta) / p0), p1, p0


@pytest.mark.parametrize("n", [16, 64, 256])
def test_shuffled_polya_residues_leak_more_than_the_secagg_epsilon(n):
    bound, p1, p0 = epsilon_lower_bound(n, delta=1e-6)
    # ε ≥ 1.23, 1.91, 2.60 at n = 16, 64, 256 (3.29 at 1024): more than twice the ε = 0.5 secure
    # aggregation would claim, and growing with n, because ever fewer shares carry any noise.
    assert p1 > 0.8  # the neighbour's own residue is its true value, most of the time
    assert bound > 2 * EPSILON, (n, bound, p1, p0)


def test_the_ledger_claims_no_guarantee_for_shuffled_shares(tmp_path):
    """A Dist-DP-SE run behind a shuffler: the ledger's guarantee is "none proven", and no ε
    below the lower bound above is stated anywhere in its privacy record."""
    from privbandit.runner import run_file

    (tmp_path / "s.toml").write_text("""
name = "shuffled"
horizon = 3000
seed = 5
epsilon = 0.5
runs = 2
[environment]
kind = "uniform"
arms = 3
[algorithms.shuffled]
algorithm = "dist-dp-se"
intermediary = "shuffler-residues"
[algorithms.secagg]
algorithm = "dist-dp-se"
""")
    privacy = run_file(tmp_path / "s.toml").summary["privacy"]
    assert privacy["secagg"]["guarantee"] == "proven" and privacy["secagg"]["epsilon_pure"] == EPSILON
    shuffled = privacy["shuffled"]
    assert shuffled["guarantee"] == "none proven"
    bound = epsilon_lower_bound(16, delta=shuffled["delta"])[0]
    for key in ("epsilon_pure", "epsilon_at_delta", "cdp_epsilon"):
        assert shuffled[key] is None or shuffled[key] >= bound, (key, shuffled[key], bound)
