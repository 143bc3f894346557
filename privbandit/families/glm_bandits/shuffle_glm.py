"""Building blocks of Algorithm 1 (ShuffleGLM, stochastic contexts, shuffle DP); its parties on the spine
are :mod:`.shuffle_parties`. The pure parts:

- :func:`batch_schedule`: the batch lengths of eqs. (6)–(7), truncated so that they add up to T;
- :func:`g_optimal_design`: the G-optimal design π^G of Lemma 4.3 by Frank–Wolfe (Fedorov–Wynn)
  steps on the D-optimal objective (equivalent by Kiefer–Wolfowitz), vectorized over many users'
  arm sets, stopped once max_x ‖x‖²_{A(π)⁻¹} ≤ 2d (the paper's "2d in poly time"; spec §3.3);
- :func:`scaled_arms`: eqs. (11)–(12), x̃ = √(μ̇(⟨x,θ̂₁⟩)/β(x))·x with β(x) = exp(R·min(2S,
  γ√κ‖x‖_{V⁻¹})), and the weight clipped to 1/κ* so the covariance round's Δ = 1/κ* holds
  always, not only w.h.p. (spec §12 item 11);
- :func:`eliminate`: lines 13–15, sequential elimination with UCB_j/LCB_j of eqs. (13)–(14);
- :func:`constants`: λ, λ_min, λ_max, ν, γ (eqs. 8–9, 15, 24; Observation 1) with every O(·) constant 1
  and σ̃ the covariance rounds' actual noise sd (:func:`noise_sd`; P_Vec's parameters are
  :func:`~.mechanisms.pvec_params`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privbandit.families.glm_bandits.world import mu_dot


def batch_schedule(T: int, M: int, kappa: float, S: float, d: int, gamma: float,
                   exponent: str = "eq7", first: int | None = None) -> list[int]:
    """B_1 = (√κ·e^{3S}·d²·γ²·α/S)^{2/3}, B_2 = α, B_k = α·√B_{k−1} (k ≥ 3), α = T^{1/(2(1−2^{−M+1}))}
    (eq. 7; ``exponent="thm-e1"``: Thm E.1's 1/(2(1−2^{−M}))). Lengths are rounded up and the last
    batch is cut so that they add up to T exactly (Σ B_k > T under eq. 7; spec §12 item 2); batches
    past T are dropped. M ≥ 2. ``first``: B_1 given instead of eq. (6)'s (whose e^{3S}·d²·γ² exceeds any
    horizon we can run: the whole horizon would be the warm-up)."""
    if M < 2:
        raise ValueError(f"M = {M} batches: Algorithm 1 needs a warm-up and at least one more batch")
    alpha = schedule_alpha(T, M, exponent)
    b1 = eq6_warmup(T, M, kappa, S, d, gamma, exponent) if first is None else first
    raw = [b1, alpha]
    while len(raw) < M:
        raw.append(alpha * math.sqrt(raw[-1]))
    out, left = [], T
    for b in raw:
        if left <= 0:
            break
        take = min(left, max(1, math.ceil(b)))
        out.append(take)
        left -= take
    if left > 0:
        out[-1] += left  # the schedule fell short of T: the last batch runs to the horizon
    return out


def schedule_alpha(T: int, M: int, exponent: str = "eq7") -> float:
    """α = T^{1/(2(1−2^{−M+1}))} (eq. 7), or Thm E.1's T^{1/(2(1−2^{−M}))} (``exponent="thm-e1"``)."""
    power = 1 - 2.0 ** (-M + 1) if exponent == "eq7" else 1 - 2.0 ** (-M)
    return T ** (1 / (2 * power))


def eq6_warmup(T: int, M: int, kappa: float, S: float, d: int, gamma: float, exponent: str = "eq7") -> float:
    """Eq. (6): B_1 = (√κ·e^{3S}·d²·γ²·α/S)^{2/3}, unrounded (App. F's (φd²α/R)^{2/3} with
    φ = √κe^{3S}γ/(2S) has γ, not γ², and R for S: spec §12 item 3; we follow eq. 6)."""
    alpha = schedule_alpha(T, M, exponent)
    return (math.sqrt(kappa) * math.exp(3 * S) * d**2 * gamma**2 * alpha / S) ** (2 / 3)


def g_optimal_design(arms: np.ndarray, reg: float = 1e-6, tol: float = 2.0, max_steps: int = 500,
                     mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """π over each arm set: ``arms`` (N, K, d) → (π (N, K), max_x ‖x‖²_{A(π)⁻¹} (N,)), with
    A(π) = reg·I + Σ π_x x xᵀ. Frank–Wolfe from the uniform design: move towards the arm of largest
    ‖x‖²_{A⁻¹} = g by the exact line search of the log-det, γ = (g/d − 1)/(g − 1); each set stops
    once g ≤ ``tol``·d (Kiefer–Wolfowitz: the optimum is d). ``mask`` (N, K): the arms left (after
    elimination); the others get no mass and are not in the max. Only the sets not yet stopped are
    stepped (most stop within a few dozen steps)."""
    N, K, d = arms.shape
    mask = np.ones((N, K), dtype=bool) if mask is None else mask
    if not mask.any(axis=1).all():
        raise ValueError("every arm set needs at least one arm left")
    pi = mask / mask.sum(axis=1, keepdims=True)
    eye = reg * np.eye(d)
    gmax = np.empty(N)
    rows = np.arange(N)
    for _ in range(max_steps):
        a, p = arms[rows], pi[rows]
        A = np.einsum("nk,nki,nkj->nij", p, a, a) + eye
        g = np.where(mask[rows], np.einsum("nki,nij,nkj->nk", a, np.linalg.inv(A), a), -np.inf)
        j = g.argmax(axis=1)
        top = g[np.arange(rows.size), j]
        gmax[rows] = top
        going = top > tol * d
        if not going.any():
            break
        rows, j, top = rows[going], j[going], top[going]
        step = (top / d - 1) / np.maximum(top - 1, 1e-12)
        pi[rows] *= (1 - step)[:, None]
        pi[rows, j] += step
    return pi, gmax


def sample(pi: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """The index drawn from each row of π (..., K) by inverting its CDF at ``uniforms`` (...)."""
    cdf = np.cumsum(pi, axis=-1)
    idx = (cdf < uniforms[..., None] * cdf[..., -1:]).sum(axis=-1)
    return np.minimum(idx, pi.shape[-1] - 1)


def eliminate(arms: np.ndarray, thetas: list[np.ndarray], inverses: list[np.ndarray], widths: list[np.ndarray]
              ) -> np.ndarray:
    """Lines 13–15 for ``arms`` (R, N, K, d): batch j's θ̂_j (R, d), V_j⁻¹ (R, d, d) and width w_j (R,)
    remove, in turn, the arms x with UCB_j(x) = ⟨x,θ̂_j⟩ + w_j‖x‖_{V_j⁻¹} below max over the arms
    left of LCB_j. Returns the mask of arms left (R, N, K): never empty (the max LCB's arm stays)."""
    left = np.ones(arms.shape[:-1], dtype=bool)
    for theta, inv, w in zip(thetas, inverses, widths):
        lin = np.einsum("rnkd,rd->rnk", arms, theta)
        norm = np.sqrt(np.maximum(np.einsum("rnki,rij,rnkj->rnk", arms, inv, arms), 0.0))
        ucb, lcb = lin + w[:, None, None] * norm, lin - w[:, None, None] * norm
        best = np.where(left, lcb, -np.inf).max(axis=-1, keepdims=True)
        left &= ucb >= best
    return left


def scaled_arms(link: str, arms: np.ndarray, theta1: np.ndarray, v_inv: np.ndarray, gamma: float, kappa: float,
                kappa_star: float, S: float, R: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. (11)–(12) for ``arms`` (..., K, d): (x̃, the weight μ̇(⟨x,θ̂₁⟩)/β(x) clipped to 1/κ*).
    ``theta1`` (d,) and ``v_inv`` (d, d) are one run's; :func:`scaled_weights` takes R runs'."""
    K, d = arms.shape[-2:]
    w = scaled_weights(link, arms.reshape(1, -1, K, d), theta1[None], v_inv[None],
                       np.array([gamma * math.sqrt(kappa)]), np.array([kappa_star]), S, R).reshape(arms.shape[:-1])
    return np.sqrt(w)[..., None] * arms, w


def scaled_weights(link: str, arms: np.ndarray, theta1: np.ndarray, v_inv: np.ndarray, width: np.ndarray,
                   kappa_star: np.ndarray, S: float, R: float = 1.0) -> np.ndarray:
    """Eq. (12)'s weights for R runs: ``arms`` (R, N, K, d), θ̂₁ (R, d), V⁻¹ (R, d, d), the width
    γ√κ (R,) and κ* (R,): min(μ̇(⟨x,θ̂₁⟩)/β(x), 1/κ*), β(x) = exp(R·min(2S, γ√κ‖x‖_{V⁻¹}))."""
    norm = np.sqrt(np.maximum(np.einsum("rnki,rij,rnkj->rnk", arms, v_inv, arms), 0.0))
    beta = np.exp(R * np.minimum(2 * S, width[:, None, None] * norm))
    z = np.einsum("rnkd,rd->rnk", arms, theta1)
    return np.minimum(mu_dot(link, z) / beta, 1.0 / kappa_star[:, None, None])


# --- Algorithm 1's constants -----------------------------------------------------------------------

P_VEC_P = 0.25  # eq. (127)


@dataclass(frozen=True)
class ShuffleGLMConstants:
    """One run's constants of Algorithm 1 (see :func:`constants`)."""

    sigma: float       # σ̃: sd of one entry of the covariance round's noise at Δ = 1
    margin: float      # σ̃(√d + 6√log(2dMT/δ)): Observation 1's bound on the noise's eigenvalues
    lam: float
    lam_min: float
    lam_max: float
    nu: float
    gamma: float
    width: float       # γ√κ: eqs. (13)–(14)'s and β(x)'s factor of ‖x‖_{V⁻¹}

    def asdict(self) -> dict:
        return dict(self.__dict__)


def noise_sd(vec_constant: float, d: int, epsilon: float, delta: float, shift: float) -> float:
    """sd of one entry of P_Vec's error at (ε, δ), Δ = ``shift``, span 2Δ (ignoring b's rounding up and
    the randomized rounding): (2Δ/g)·√(n·b·p(1−p)) with eq. (127)'s b = C·g²·log²(4(d²+1)/δ)/(ε²n),
    i.e. 2Δ·√(C·p(1−p))·log(4(d²+1)/δ)/ε, whatever n and g."""
    return 2 * shift * math.sqrt(vec_constant * P_VEC_P * (1 - P_VEC_P)) * math.log(4 * (d * d + 1) / delta) / epsilon


def constants(d: int, T: int, M: int, epsilon: float, delta: float, R: float, S: float, kappa: float,
              vec_constant: float, gamma: float | None = None, sigma: float | None = None) -> ShuffleGLMConstants:
    """λ = 20dR·log T + σ̃(√d + 6√log(2dMT/δ)) and λ_max/min = λ ± σ̃(√d + 6√log(2dMT/δ)) (App. E.1 and
    Observation 1, so that λ_min = 20dR·log T as Lemma E.4 needs; eq. (8) omits the σ̃√d term and
    eq. (15) writes log(2MT/δ): spec §12 item 4), with σ̃ the covariance rounds' actual noise sd at
    their (ε/2, δ/2) and Δ = 1 (the warm-up's; the paper's σ = R·log(d²/δ)/(κ*ε) covers H_k's rounds
    at Δ = 1/κ* but not V's). ν = (RS²/ε')·√(d·log³(Td/δ')) (App. D.2 with its O(·) constant 1), and γ
    = eq. (24): 24RS√(log T + d) + R(log T + d)/√λ_min + 2S√λ_max + √(4RSν), unless given. ``sigma``:
    σ̃ when the covariance rounds are not calibrated by eq. (127) (the ``exact`` preset's accountant)."""
    eps, dlt = epsilon / 2, delta / 2
    sigma = noise_sd(vec_constant, d, eps, dlt, 1.0) if sigma is None else sigma
    margin = sigma * (math.sqrt(d) + 6 * math.sqrt(math.log(2 * d * M * T / dlt)))
    lam_min = 20 * d * R * math.log(T)
    lam, lam_max = lam_min + margin, lam_min + 2 * margin
    nu = R * S**2 / eps * math.sqrt(d * math.log(T * d / dlt) ** 3)
    L = math.log(T) + d
    g = gamma if gamma is not None else (24 * R * S * math.sqrt(L) + R * L / math.sqrt(lam_min)
                                        + 2 * S * math.sqrt(lam_max) + math.sqrt(4 * R * S * nu))
    return ShuffleGLMConstants(sigma, margin, lam, lam_min, lam_max, nu, g, g * math.sqrt(kappa))

