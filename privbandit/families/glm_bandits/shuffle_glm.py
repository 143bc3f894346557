"""Building blocks of Algorithm 1 (ShuffleGLM, stochastic contexts, shuffle DP). The algorithm itself
is not yet wired into the spine (docs/glm-bandits.md says how it will be); these are its pure parts:

- :func:`batch_schedule`: the batch lengths of eqs. (6)–(7), truncated so that they add up to T;
- :func:`g_optimal_design`: the G-optimal design π^G of Lemma 4.3 by Frank–Wolfe (Fedorov–Wynn)
  steps on the D-optimal objective (equivalent by Kiefer–Wolfowitz), vectorized over many users'
  arm sets, stopped once max_x ‖x‖²_{A(π)⁻¹} ≤ 2d (the paper's "2d in poly time"; spec §3.3);
- :func:`scaled_arms`: eqs. (11)–(12), x̃ = √(μ̇(⟨x,θ̂₁⟩)/β(x))·x with β(x) = exp(R·min(2S,
  γ√κ‖x‖_{V⁻¹})), and the weight clipped to 1/κ* so the covariance round's Δ = 1/κ* holds
  always, not only w.h.p. (spec §12 item 11).
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.families.glm_bandits.world import mu_dot


def batch_schedule(T: int, M: int, kappa: float, S: float, d: int, gamma: float,
                   exponent: str = "eq7") -> list[int]:
    """B_1 = (√κ·e^{3S}·d²·γ²·α/S)^{2/3}, B_2 = α, B_k = α·√B_{k−1} (k ≥ 3), α = T^{1/(2(1−2^{−M+1}))}
    (eq. 7; ``exponent="thm-e1"``: Thm E.1's 1/(2(1−2^{−M}))). Lengths are rounded up and the last
    batch is cut so that they add up to T exactly (Σ B_k > T under eq. 7; spec §12 item 2); batches
    past T are dropped. M ≥ 2."""
    if M < 2:
        raise ValueError(f"M = {M} batches: Algorithm 1 needs a warm-up and at least one more batch")
    power = 1 - 2.0 ** (-M + 1) if exponent == "eq7" else 1 - 2.0 ** (-M)
    alpha = T ** (1 / (2 * power))
    raw = [(math.sqrt(kappa) * math.exp(3 * S) * d**2 * gamma**2 * alpha / S) ** (2 / 3), alpha]
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


def g_optimal_design(arms: np.ndarray, reg: float = 1e-6, tol: float = 2.0, max_steps: int = 500
                     ) -> tuple[np.ndarray, np.ndarray]:
    """π over each arm set: ``arms`` (N, K, d) → (π (N, K), max_x ‖x‖²_{A(π)⁻¹} (N,)), with
    A(π) = reg·I + Σ π_x x xᵀ. Frank–Wolfe from the uniform design: move towards the arm of largest
    ‖x‖²_{A⁻¹} = g by the exact line search of the log-det, γ = (g/d − 1)/(g − 1); each set stops
    once g ≤ ``tol``·d (Kiefer–Wolfowitz: the optimum is d)."""
    N, K, d = arms.shape
    pi = np.full((N, K), 1.0 / K)
    eye = reg * np.eye(d)
    g = np.empty((N, K))
    for _ in range(max_steps):
        A = np.einsum("nk,nki,nkj->nij", pi, arms, arms) + eye
        g = np.einsum("nki,nij,nkj->nk", arms, np.linalg.inv(A), arms)
        j = g.argmax(axis=1)
        gmax = g[np.arange(N), j]
        active = gmax > tol * d
        if not active.any():
            break
        step = np.where(active, (gmax / d - 1) / np.maximum(gmax - 1, 1e-12), 0.0)
        pi *= (1 - step)[:, None]
        pi[np.arange(N), j] += step
    return pi, g.max(axis=1)


def scaled_arms(link: str, arms: np.ndarray, theta1: np.ndarray, v_inv: np.ndarray, gamma: float, kappa: float,
                kappa_star: float, S: float, R: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. (11)–(12) for ``arms`` (..., K, d): (x̃, the weight μ̇(⟨x,θ̂₁⟩)/β(x) clipped to 1/κ*)."""
    norm = np.sqrt(np.maximum(np.einsum("...ki,ij,...kj->...k", arms, v_inv, arms), 0.0))
    beta = np.exp(R * np.minimum(2 * S, gamma * math.sqrt(kappa) * norm))
    w = np.minimum(mu_dot(link, arms @ theta1) / beta, 1.0 / kappa_star)
    return np.sqrt(w)[..., None] * arms, w
