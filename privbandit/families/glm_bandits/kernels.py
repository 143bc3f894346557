"""Compiled kernels of the GLM learners' per-round sums over all their data, R runs per call.

GLM-UCB (Filippi et al. 2010, Algorithm 1) re-solves its quasi-likelihood equation
Σ_s (μ(⟨x_s, θ⟩) − r_s) x_s + reg·θ = 0 every round by Newton steps over all t rows (docs/glm-bandits.md):
its gradient Σ_s w_s x_s and Hessian Σ_s μ̇(⟨x_s, θ⟩) x_s x_sᵀ are two passes over the data per step.
:func:`newton_sums` makes both in one pass, with the very order numpy's ``einsum`` uses for
``"rt,rtd->rd"`` and ``"rt,rtd,rte->rde"`` (per output entry, the rows left to right, each term
(w_s·x_sk)·x_sl; numba without ``fastmath`` neither reassociates nor contracts them), so the
learner's numbers are those of the einsums, bit for bit
(tests/families/glm_bandits/test_kernels.py holds them equal on random data up to 20,000 rows).

Compiled on first use and cached beside this file (numba's ``cache=True``; ``NUMBA_CACHE_DIR``
moves the cache where the package directory is read-only).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def newton_sums(w_grad: np.ndarray, w_hess: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R, d) Σ_s w_grad[r, s]·x[r, s] and (R, d, d) Σ_s w_hess[r, s]·x[r, s]·x[r, s]ᵀ over the t rows
    of ``x`` (R, t, d): ``einsum("rt,rtd->rd")`` and ``einsum("rt,rtd,rte->rde")`` in one pass."""
    runs, t, d = x.shape
    grad = np.zeros((runs, d))
    hess = np.zeros((runs, d, d))
    for r in range(runs):
        g = np.zeros(d)
        h = np.zeros((d, d))
        for s in range(t):
            wg, wh = w_grad[r, s], w_hess[r, s]
            for k in range(d):
                xk = x[r, s, k]
                g[k] += wg * xk
                a = wh * xk
                for m in range(d):
                    h[k, m] += a * x[r, s, m]
        grad[r] = g
        hess[r] = h
    return grad, hess
