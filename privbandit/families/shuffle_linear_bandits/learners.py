"""Algorithm 1 of Chowdhury & Zhou (ICML 2022), "Shuffle Private LinUCB": batched LinUCB.

The analyzer side (:class:`BatchedLinUCB`) keeps V_m = λI + Σ Ṽ and u_m = Σ ũ (line 14), solves
θ̂_m = V_m⁻¹ u_m (line 15; the printed Σ to M is a typo for m, spec §11 item 3) and broadcasts
(θ̂_m, V_m⁻¹, β_m) (line 16). The user side (:func:`ucb_actions`) picks
a_t ∈ argmax ⟨φ(c_t,a), θ̂⟩ + β‖φ(c_t,a)‖_{V⁻¹} (line 4) from the broadcast and its own context.

Everything is stacked over R independent runs: V is (R, d, d), so one call steps all runs.

Non-PD safeguard (spec §11 item 17). Privacy noise can leave V_m indefinite. The regret proof
(Lemma A.2) conditions on V_m ⪰ λ_min·I; we keep the accumulated V_m as released (the noise is never
"repaired" into the statistics) and, when its smallest eigenvalue is below the floor λ_min, use the
eigenvalue-clipped V̄_m = Q·max(Λ, λ_min)·Qᵀ for θ̂ and the widths. Every clip is counted, and so is
every V_m that is not positive definite at all.
"""

from __future__ import annotations

import numpy as np

try:  # the kernels behind np.einsum(optimize=False) and np.linalg.inv / cholesky
    from numpy._core.multiarray import c_einsum as _einsum
    from numpy.linalg import _umath_linalg

    def _inv(a: np.ndarray) -> np.ndarray:
        return _umath_linalg.inv(a, signature="d->d")

    def _pd(a: np.ndarray) -> bool:
        """Does every matrix of the stack have a Cholesky factor? (np.linalg.cholesky raises iff not;
        the kernel fills a failed factor with NaN: call under np.errstate(invalid="ignore"))"""
        c = _umath_linalg.cholesky_lo(a, signature="d->d")[:, 0, 0]
        return c.size == 1 and c[0] == c[0] or not np.isnan(c).any()
except ImportError:  # pragma: no cover - another numpy layout: the public functions, same kernels
    _einsum = np.einsum
    _inv = np.linalg.inv

    def _pd(a: np.ndarray) -> bool:
        try:
            np.linalg.cholesky(a)
            return True
        except np.linalg.LinAlgError:
            return False


def arm_outer(arms: np.ndarray) -> np.ndarray:
    """vec(φφᵀ) per arm, (R, K, d²): makes every width one matrix product (see :func:`ucb_actions`)."""
    r, k, d = arms.shape
    return (arms[..., :, None] * arms[..., None, :]).reshape(r, k, d * d)


def ucb_actions(arms: np.ndarray, theta: np.ndarray, v_inv: np.ndarray, beta: float | np.ndarray,
                outer: np.ndarray | None = None) -> np.ndarray:
    """Line 4 for R runs at once: arms (R, K, d), θ̂ (R, d), V⁻¹ (R, d, d) → actions (R,).

    ‖φ‖²_{V⁻¹} = ⟨vec(φφᵀ), vec(V⁻¹)⟩, so with ``outer`` = :func:`arm_outer` (fixed arms: computed once)
    the widths of all K arms cost one (K × d²)·(d² × 1) product per run instead of a d-wide reduction.
    """
    r, k, d = arms.shape
    if outer is None:
        outer = arm_outer(arms)
    quad = np.matmul(outer, v_inv.reshape(r, d * d, 1))[..., 0]
    mean = np.matmul(arms, theta[:, :, None])[..., 0]
    return np.argmax(mean + np.asarray(beta)[..., None] * np.sqrt(np.maximum(quad, 0.0)), axis=1)


class Widths:
    """:func:`ucb_actions` for fixed arms, with preallocated outputs (the same kernels and
    elementwise operations, the same bits): the per-round cost of line 4 is its kernel calls."""

    def __init__(self, arms: np.ndarray, outer: np.ndarray | None = None):
        self.arms = arms
        self.outer = arm_outer(arms) if outer is None else outer
        r, k, d = arms.shape
        self.flat = (r, d * d, 1)
        self.quad = np.empty((r, k, 1))
        self.mean = np.empty((r, k, 1))

    def scores(self, theta: np.ndarray, v_inv: np.ndarray, beta: float) -> np.ndarray:
        """⟨φ, θ̂⟩ + β‖φ‖_{V⁻¹} of every arm, (R, K, 1) (overwritten by the next call)."""
        q, mu = self.quad, self.mean
        np.matmul(self.outer, v_inv.reshape(self.flat), out=q)
        np.matmul(self.arms, theta[:, :, None], out=mu)
        np.maximum(q, 0.0, out=q)
        np.sqrt(q, out=q)
        np.multiply(q, beta, out=q)
        return np.add(mu, q, out=mu)

    def __call__(self, theta: np.ndarray, v_inv: np.ndarray, beta: float) -> np.ndarray:
        return self.scores(theta, v_inv, beta)[:, :, 0].argmax(axis=1)


def _has_cholesky(a: np.ndarray) -> bool:
    try:
        np.linalg.cholesky(a)
        return True
    except np.linalg.LinAlgError:
        return False


class BatchedLinUCB:
    def __init__(self, runs: int, d: int, lam: float, floor: float, beta_fn):
        self.d = d
        self.lam, self.floor = float(lam), float(floor)
        self.floor_eye = self.floor * np.eye(d)
        self.beta_fn = beta_fn
        self.V = np.broadcast_to(lam * np.eye(d), (runs, d, d)).copy()
        self.u = np.zeros((runs, d))
        self.v_inv = np.broadcast_to(np.eye(d) / lam, (runs, d, d)).copy()
        self.theta = np.zeros((runs, d))
        self.t = 0
        self.beta = beta_fn(0)
        self.lambda_min = None
        self.clipped = np.zeros(runs, dtype=np.int64)  # batches whose V_m needed the floor
        self.not_pd = np.zeros(runs, dtype=np.int64)  # batches whose V_m had λ_min ≤ 0

    def smallest_eigenvalues(self) -> np.ndarray:
        """λ_min(V_m) per run (of the released V_m, before any clipping)."""
        if self.lambda_min is None:
            self.lambda_min = np.linalg.eigvalsh(self.V)[:, 0]
        return self.lambda_min

    def broadcast(self) -> tuple[np.ndarray, np.ndarray, float]:
        return self.theta, self.v_inv, self.beta

    def update(self, u_inc: np.ndarray, v_inc: np.ndarray, users: int) -> None:
        """Lines 13–16 after a batch of ``users``: ũ (R, d), Ṽ (R, d, d) symmetric."""
        self.u += u_inc
        self.V += v_inc
        self.t += users
        self.lambda_min = None  # computed on demand (diagnostics only)
        shifted = self.V - self.floor_eye
        with np.errstate(invalid="ignore"):
            pd = _pd(shifted)
        if pd:  # the common case, cheaply: every V_m ⪰ floor·I ⇔ V_m − floor·I has a Cholesky factor
            self.v_inv = _inv(self.V)
        else:
            # Decide run by run, with the same test: a run's model must not depend on the other runs
            # stacked with it (one task of a distributed run is one run; it must match this one).
            low = np.array([not _has_cholesky(s) for s in shifted])
            self.v_inv = np.empty_like(self.V)
            if not low.all():
                self.v_inv[~low] = np.linalg.inv(self.V[~low])
            w, q = np.linalg.eigh(self.V[low])
            self.clipped[low] += w[:, 0] < self.floor
            self.not_pd[low] += w[:, 0] <= 0
            w = np.maximum(w, self.floor)
            self.v_inv[low] = np.matmul(q / w[:, None, :], np.swapaxes(q, 1, 2))
        self.theta = np.matmul(self.v_inv, self.u[:, :, None])[:, :, 0]
        self.beta = self.beta_fn(self.t)

    def update_rank_one(self, x: np.ndarray, y: np.ndarray) -> None:
        """Non-private fast path: Ṽ = xxᵀ exactly, so Sherman–Morrison keeps V⁻¹ (V stays ⪰ λI)."""
        self.u += x * y[:, None]
        self.V += x[:, :, None] * x[:, None, :]
        vx = _einsum("rde,re->rd", self.v_inv, x)
        self.v_inv -= vx[:, :, None] * vx[:, None, :] / (1.0 + (vx * x).sum(-1))[:, None, None]
        self.theta = _einsum("rde,re->rd", self.v_inv, self.u)
        self.t += 1
        self.beta = self.beta_fn(self.t)
