"""Testers: two samples of a release, one from each of two neighbouring inputs, in; a lower bound
on the ε the release can satisfy at a stated δ, with confidence 1 − β, out.

The argument is the definition read backwards. If a release M is (ε, δ)-DP then for every event S

    P[M(D₀) ∈ S] ≤ e^ε · P[M(D₁) ∈ S] + δ,   so   ε ≥ log((P₀(S) − δ) / P₁(S)),

and the same with D₀ and D₁ exchanged. Replacing P₀(S) by a Clopper–Pearson lower bound and P₁(S)
by an upper bound keeps the inequality with probability ≥ 1 − β once every bound used holds, which
a union bound over all of them (Bonferroni) guarantees. The bound is thus *sound whatever S is*;
S only decides how tight it is.

The events are those of the likelihood-ratio test, the Neyman–Pearson optimum that DP-Sniper
(Bichsel et al. 2021) approximates with a classifier: for an integer release, ``S_t = {x :
log P₀(x)/P₁(x) ≥ t}``. The likelihood ratios are estimated on a *selection* half of each
sample, and the thresholds t scanned over them; the event probabilities are then counted on the
other, *evaluation* half, which the choice of S never saw (so the Clopper–Pearson bounds are
honest). Scanning t gives a δ(ε) curve, not one point (Delta-Siege's point, Lokna et al. 2023).

A real-valued release is binned first (:func:`histogram_test`, DP-Auditorium's histogram tester):
any function of the release is post-processing, so a bound on the bins is a bound on the release.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.stats import beta as beta_dist

DEFAULT_THRESHOLDS = 64


def clopper_pearson(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Clopper–Pearson bounds on a binomial proportion: each of ``(lower, upper)`` holds
    with probability ≥ 1 − alpha (the exact beta-quantile bounds, never the normal approximation)."""
    k = np.asarray(k, dtype=np.float64)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha} must lie in (0, 1)")
    with np.errstate(invalid="ignore"):
        lower = np.where(k > 0, beta_dist.ppf(alpha, k, n - k + 1), 0.0)
        upper = np.where(k < n, beta_dist.ppf(1 - alpha, k + 1, n - k), 1.0)
    return np.nan_to_num(lower, nan=0.0), np.nan_to_num(upper, nan=1.0)


@dataclass
class Bound:
    """What one tester concludes from two samples.

    ``epsilon``: the ε lower bound at ``delta`` holding with confidence ``confidence`` (0 when no
    event shows anything). ``epsilon_estimate``: the best event's ratio with its counted frequencies in
    place of their Clopper–Pearson bounds: no guarantee, the top of the confidence band.
    ``curve``: ``(ε, δ lower bound at that ε)`` pairs, a lower bound on the release's δ(ε) curve
    with the same confidence. ``event``: the best event's threshold, direction and probabilities.
    """

    epsilon: float
    epsilon_estimate: float
    delta: float
    confidence: float
    samples: int  # per neighbour
    evaluated: int  # per neighbour: the evaluation half
    events: int  # how many events the Bonferroni correction covers
    curve: list[tuple[float, float]] = field(default_factory=list)
    curve_estimate: list[tuple[float, float]] = field(default_factory=list)  # frequencies for bounds
    event: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    half = x.size // 2
    return x[:half], x[half:]


def likelihood_ratio_test(x0: np.ndarray, x1: np.ndarray, delta: float, confidence: float,
                          thresholds: int = DEFAULT_THRESHOLDS, eps_grid: np.ndarray | None = None) -> Bound:
    """The ε lower bound of the estimated likelihood-ratio threshold test on integer releases.

    ``x0``, ``x1``: i.i.d. releases under the two neighbouring inputs (equal sizes, ≥ 4 each).
    ``thresholds``: at most this many threshold sets are scanned; with both directions and two
    one-sided bounds per probability, each Clopper–Pearson bound is taken at β/(4·thresholds).
    """
    x0 = np.asarray(x0).ravel()
    x1 = np.asarray(x1).ravel()
    if x0.dtype.kind not in "iub" or x1.dtype.kind not in "iub":
        raise ValueError("likelihood_ratio_test takes integer releases; bin real ones (histogram_test)")
    if x0.size != x1.size or x0.size < 4:
        raise ValueError(f"need two samples of one size ≥ 4, got {x0.size} and {x1.size}")
    if not 0 <= delta < 1:
        raise ValueError(f"delta={delta} must lie in [0, 1)")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} must lie in (0, 1)")
    sel0, ev0 = _split(x0)
    sel1, ev1 = _split(x1)

    # Selection: log-likelihood ratio per value seen, add-½ smoothed; unseen values get the ratio
    # of two unseen counts (0 for equal halves), which only decides which events they join.
    values, inverse = np.unique(np.concatenate([sel0, sel1]), return_inverse=True)
    c0 = np.bincount(inverse[: sel0.size], minlength=values.size)
    c1 = np.bincount(inverse[sel0.size:], minlength=values.size)
    llr = np.log((c0 + 0.5) / (sel0.size + 1)) - np.log((c1 + 0.5) / (sel1.size + 1))
    unseen = math.log((0.5 / (sel0.size + 1)) / (0.5 / (sel1.size + 1)))
    levels = np.unique(llr)
    if levels.size > thresholds:  # evenly spread over the distinct ratios seen
        levels = levels[np.unique(np.linspace(0, levels.size - 1, thresholds).round().astype(int))]
    k = levels.size

    def scores(ev: np.ndarray) -> np.ndarray:
        at = np.searchsorted(values, ev)
        at_c = np.minimum(at, values.size - 1)
        hit = values[at_c] == ev
        return np.sort(np.where(hit, llr[at_c], unseen))

    s0, s1 = scores(ev0), scores(ev1)
    n = ev0.size
    # counts of the events S_t = {llr ≥ t}, per threshold t
    k0 = n - np.searchsorted(s0, levels, side="left")
    k1 = n - np.searchsorted(s1, levels, side="left")
    alpha = (1 - confidence) / (4 * k)
    lo0, hi0 = clopper_pearson(k0, n, alpha)
    lo1, hi1 = clopper_pearson(k1, n, alpha)
    # Direction 0 → 1: S_t, P₀ large, P₁ small. Direction 1 → 0: the complement of S_t.
    big = np.concatenate([lo0, 1 - hi1])  # lower bounds on the favoured side's probability
    small = np.concatenate([hi1, 1 - lo0])  # upper bounds on the other side's
    f_big = np.concatenate([k0, n - k1]) / n
    f_small = np.concatenate([k1, n - k0]) / n

    def eps_of(p_big, p_small):
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.log((p_big - delta) / p_small)
        return np.where((p_big - delta > 0) & (p_small > 0), e, np.where(p_big - delta > 0, np.inf, -np.inf))

    eps = eps_of(big, small)
    best = int(np.argmax(eps))
    # The estimate: the best event's own frequencies (the maximum of the plug-in ratio over all
    # events would chase the noise of the rare ones).
    est = eps_of(f_big[best], f_small[best]) if f_small[best] > 0 else np.inf
    grid = np.linspace(0.0, max(4.0, float(np.nanmax(np.where(np.isfinite(eps), eps, 0))) * 1.5), 81) \
        if eps_grid is None else np.asarray(eps_grid, dtype=np.float64)
    curve = [(float(e), float(max(0.0, np.max(big - np.exp(e) * small)))) for e in grid]
    curve_est = [(float(e), float(max(0.0, np.max(f_big - np.exp(e) * f_small)))) for e in grid]
    return Bound(
        epsilon=float(max(0.0, eps[best])),
        epsilon_estimate=float(max(0.0, est)),
        delta=float(delta),
        confidence=float(confidence),
        samples=int(x0.size),
        evaluated=int(n),
        events=int(2 * k),
        curve=curve,
        curve_estimate=curve_est,
        event={"direction": "0>1" if best < k else "1>0", "threshold_llr": float(levels[best % k]),
               "p_favoured_lower": float(big[best]), "p_other_upper": float(small[best]),
               "p_favoured": float(f_big[best]), "p_other": float(f_small[best])},
    )


def histogram_test(x0: np.ndarray, x1: np.ndarray, delta: float, confidence: float, bins: int = 200,
                   thresholds: int = DEFAULT_THRESHOLDS, eps_grid: np.ndarray | None = None) -> Bound:
    """Real-valued releases: bin them, then :func:`likelihood_ratio_test` on the bin indices.

    The bin edges are quantiles of the *selection* halves only (pooled), so the evaluation halves
    stay untouched by every choice the tester makes; values beyond the outer edges share the
    outer bins."""
    x0 = np.asarray(x0, dtype=np.float64).ravel()
    x1 = np.asarray(x1, dtype=np.float64).ravel()
    if not (np.all(np.isfinite(x0)) and np.all(np.isfinite(x1))):
        raise ValueError("histogram_test takes finite releases")
    if bins < 2:
        raise ValueError(f"bins={bins} must be ≥ 2")
    pooled = np.concatenate([_split(x0)[0], _split(x1)[0]])
    edges = np.unique(np.quantile(pooled, np.linspace(0, 1, bins + 1)[1:-1]))
    return likelihood_ratio_test(np.searchsorted(edges, x0, side="right"), np.searchsorted(edges, x1, side="right"),
                                 delta, confidence, thresholds, eps_grid)
