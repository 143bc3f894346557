"""(ε, δ) accounting for the shuffle-model linear bandits (Chowdhury & Zhou, ICML 2022).

Four published bounds, each evaluated numerically so the ledger shows the ε actually obtained:

- :func:`gaussian_epsilon`: the exact (ε, δ) curve of the continuous Gaussian mechanism (Balle &
  Wang 2018, "analytic Gaussian mechanism", Thm 8): δ(ε) = Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ).
  The audits compare against it; the linear family's randomizers are the grid's discrete Gaussian,
  whose local ε₀(δ₀) is :func:`discrete_gaussian_local_epsilon` (zCDP, converted).
- :func:`shuffle_epsilon` and :func:`amplified_randomizer`: amplification by shuffling, Feldman,
  McMillan & Talwar, "Hiding among the clones" (FOCS 2021), Thm 3.2 evaluated numerically (their §5): shuffling n ε₀-LDP reports is
  (ε, δ)-DP when the pair P = (A+Δ, C−A+1−Δ), Q = (A+1−Δ, C−A+Δ) is (ε, δ)-indistinguishable, with
  C ~ Bin(n−1, e^{−ε₀}), A ~ Bin(C, ½), Δ ~ Bern(e^{ε₀}/(e^{ε₀}+1)). Approximate-DP randomizers
  (the discrete Gaussian) go through their Thm 3.8: add (e^ε + 1)(1 + e^{−ε₀}/2)·n·δ₀ to δ. :func:`fmt_closed_form`
  is the closed form the paper's Lemma B.4 quotes; the numeric bound is never worse.
- :func:`advanced_composition`: Dwork, Rothblum & Vadhan 2010 (the paper's Thm E.2 uses its
  simplified form) for returning users who take part in up to M batches.
- :func:`zcdp_epsilon`: ρ-zCDP ⇒ (ρ + 2√(ρ log(1/δ)), δ)-DP (Bun & Steinke 2016, Prop. 1.3), which
  calibrates the JDP baseline's tree (the ledger converts its ρ more tightly, by dp-accounting).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import optimize, stats
from scipy.special import gammaln

# Bisection tolerance on ε: far below anything the ledger prints.
EPS_TOL = 1e-6


def gaussian_delta(epsilon: float, sensitivity: float, sigma: float) -> float:
    """Exact δ(ε) of the Gaussian mechanism N(0, σ²) on an ℓ2-sensitivity-Δ query."""
    a, b = sensitivity / (2 * sigma), epsilon * sigma / sensitivity
    # e^ε Φ(−a − b) underflows to 0·inf for large ε; use the log-cdf.
    return float(stats.norm.cdf(a - b) - math.exp(epsilon + stats.norm.logcdf(-a - b)))


def gaussian_epsilon(sensitivity: float, sigma: float, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ δ for the Gaussian mechanism (analytic, not the 1.25/δ bound)."""
    if gaussian_delta(0.0, sensitivity, sigma) <= delta:
        return 0.0
    hi = 1.0
    while gaussian_delta(hi, sensitivity, sigma) > delta:
        hi *= 2
        if hi > 1e6:
            return math.inf
    return float(optimize.brentq(lambda e: gaussian_delta(e, sensitivity, sigma) - delta, 0.0, hi, xtol=EPS_TOL))


def _binom_logpmf(k: np.ndarray, n: np.ndarray, p: float) -> np.ndarray:
    """log Bin(k; n, p) on broadcast grids, −inf outside 0 ≤ k ≤ n."""
    k, n = np.broadcast_arrays(np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64))
    ok = (k >= 0) & (k <= n)
    ks, ns = np.where(ok, k, 0), np.where(ok, n, 0)
    with np.errstate(divide="ignore"):
        logp = gammaln(ns + 1) - gammaln(ks + 1) - gammaln(ns - ks + 1) + ks * math.log(p)
        logp = logp + (ns - ks) * (math.log1p(-p) if p < 1 else 0.0)
    return np.where(ok, logp, -np.inf)


def _clone_pair(n: int, eps0: float) -> tuple[np.ndarray, np.ndarray, float]:
    """P and Q of FMT Thm 3.2 on the grid (c, k): c clones, first coordinate k (the second is c+1−k).

    Only clone counts within 15 standard deviations of the mean are kept; the Binomial mass left out
    (≤ 1e-40 or so) is returned so callers can add it to δ and stay an upper bound.
    """
    q = min(math.exp(-eps0), 1.0)
    mean, sd = (n - 1) * q, math.sqrt(max((n - 1) * q * (1 - q), 1.0))
    c_lo, c_hi = max(0, int(mean - 15 * sd)), min(n - 1, int(math.ceil(mean + 15 * sd)))
    c = np.arange(c_lo, c_hi + 1, dtype=np.float64)[:, None]
    k = np.arange(c_hi + 2, dtype=np.float64)[None, :]
    pi = 1.0 / (1.0 + math.exp(-eps0))  # P(Δ = 1) = e^ε₀/(e^ε₀+1)
    w = np.exp(_binom_logpmf(c, n - 1, q))
    a0 = np.exp(_binom_logpmf(k, c, 0.5))  # A = k, Δ = 0
    a1 = np.exp(_binom_logpmf(k - 1, c, 0.5))  # A = k − 1, Δ = 1
    p = w * ((1 - pi) * a0 + pi * a1)
    qq = w * (pi * a0 + (1 - pi) * a1)
    return p, qq, max(0.0, 1.0 - float(w.sum()))


def _hockey(p: np.ndarray, q: np.ndarray, left_out: float, epsilon: float) -> float:
    e = math.exp(epsilon)
    return float(max(np.maximum(p - e * q, 0).sum(), np.maximum(q - e * p, 0).sum())) + left_out


def clone_delta(n: int, eps0: float, epsilon: float) -> float:
    """Hockey-stick divergence max(D_{e^ε}(P‖Q), D_{e^ε}(Q‖P)) of FMT's clone pair."""
    return _hockey(*_clone_pair(n, eps0), epsilon)


def shuffle_epsilon(n: int, eps0: float, delta: float) -> float:
    """Numeric FMT 2021 bound: ε after shuffling n reports of an ε₀-LDP randomizer, at δ.

    Never more than ε₀ (shuffling cannot hurt), and monotone in δ. O(n²) memory: fine for the batch
    sizes of this family (B ≤ a few thousand).
    """
    if n < 1:
        raise ValueError(f"n={n} must be ≥ 1")
    if not math.isfinite(eps0):
        return math.inf
    if (n - 1) * math.exp(-eps0) < 1e-30:  # no clones to hide among: the local ε₀ is all there is
        return eps0
    pair = _clone_pair(n, eps0)
    if _hockey(*pair, 0.0) <= delta:
        return 0.0
    if _hockey(*pair, eps0) > delta:  # cannot happen for a true ε₀-DP pair; guard anyway
        return eps0
    return float(optimize.brentq(lambda e: _hockey(*pair, e) - delta, 0.0, eps0, xtol=EPS_TOL))


def fmt_closed_form(n: int, eps0: float, delta: float) -> float | None:
    """FMT 2021 Thm 3.1 / the paper's Lemma B.4; ``None`` outside its range ε₀ ≤ log(n/(16 log(2/δ)))."""
    if eps0 > math.log(n / (16 * math.log(2 / delta))):
        return None
    e0 = math.exp(eps0)
    return math.log1p((e0 - 1) / (e0 + 1) * (8 * math.sqrt(e0 * math.log(4 / delta)) / math.sqrt(n) + 8 * e0 / n))


def discrete_gaussian_local_epsilon(rho: float) -> Callable[[float], float]:
    """δ₀ ↦ ε₀ of a ρ-zCDP randomizer (the multivariate discrete Gaussian on the grid, CKS 2020
    Thm 14), by the ledger's Rényi conversion. The analytic curve (:func:`gaussian_epsilon`) is the
    continuous mechanism's: no theorem states it for the multivariate discrete Gaussian."""
    from privbandit.protocol.privacy.events import ORDERS
    from privbandit.protocol.privacy.ledger import rdp_to_dp

    curve = ORDERS * rho
    return lambda d0: rdp_to_dp(curve, d0)


def amplified_randomizer(n: int, local_epsilon: Callable[[float], float], delta: float, steps: int = 14) -> dict:
    """The shuffled (ε₀(δ₀), δ₀)-LDP randomizer's (ε̃, δ̃) with δ̃ ≤ δ, via FMT Thm 3.8.

    ``local_epsilon(δ₀)`` is the randomizer's ε₀ at δ₀, for every δ₀ (:func:`discrete_gaussian_local_epsilon`
    for the linear family's grid Gaussian). Thm 3.8 then gives δ̃ = δ′ + (e^ε̃+1)(1+e^{−ε₀}/2)·n·δ₀.
    We fix δ′ = δ/2 and take the largest δ₀ (bisection in log δ₀) whose second term fits in δ/2: a
    larger δ₀ lowers ε₀ and hence ε̃, so that δ₀ gives the smallest ε̃ this split allows.
    """
    d_shuffle = delta / 2

    def attempt(log_d0: float) -> tuple[float, float, float, float]:
        d0 = math.exp(log_d0)
        eps0 = local_epsilon(d0)
        eps_t = shuffle_epsilon(n, eps0, d_shuffle)
        slack = (math.exp(min(eps_t, 700)) + 1) * (1 + math.exp(-eps0) / 2) * n * d0
        return d0, eps0, eps_t, slack

    lo, hi = math.log(1e-300), math.log(delta / (2 * n * 3))  # hi: the best case ε̃ = 0
    best = attempt(hi)
    if best[3] > delta / 2:
        best = attempt(lo)
        for _ in range(steps):
            mid = 0.5 * (lo + hi)
            trial = attempt(mid)
            if trial[3] <= delta / 2:
                lo, best = mid, trial
            else:
                hi = mid
    d0, eps0, eps_t, slack = best
    out = {"epsilon_local": eps0, "delta_local": d0, "epsilon": eps_t, "delta": d_shuffle + slack,
           "closed_form_epsilon": fmt_closed_form(n, eps0, d_shuffle), "amplified": True}
    # Shuffling is post-processing: the randomizer's own (ε₀(δ), δ) also holds, and wins when ε₀ is so
    # large that there are no clones to hide among.
    local = local_epsilon(delta)
    if local < eps_t:
        out.update(epsilon=local, delta=delta, epsilon_local=local, delta_local=delta, amplified=False)
    return out


def advanced_composition(epsilon: float, delta: float, k: int, delta_slack: float) -> tuple[float, float]:
    """k-fold (ε, δ)-DP ⇒ (√(2k log(1/δ″))ε + kε(e^ε − 1), kδ + δ″)-DP (Dwork, Rothblum, Vadhan 2010)."""
    eps = math.sqrt(2 * k * math.log(1 / delta_slack)) * epsilon + k * epsilon * math.expm1(epsilon)
    return min(eps, k * epsilon), k * delta + delta_slack


def zcdp_epsilon(rho: float, delta: float) -> float:
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The largest ρ with ρ + 2√(ρ log(1/δ)) ≤ ε (inverse of :func:`zcdp_epsilon`): ρ-zCDP then gives
    (ε, δ)-DP (Bun & Steinke 2016, Prop. 1.3), the calibration of the linear JDP tree and of the GLM
    authors' tree."""
    if not epsilon > 0 or not 0 < delta < 1:
        raise ValueError(f"zCDP calibration needs ε > 0 and δ in (0, 1); got ε={epsilon}, δ={delta}")
    lg = math.log(1 / delta)
    return (math.sqrt(lg + epsilon) - math.sqrt(lg)) ** 2
