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

from privbandit.families.shuffle_linear_bandits import kernels


def _betas(beta: float | np.ndarray, runs: int) -> np.ndarray:
    if isinstance(beta, (float, int)):
        return np.full(runs, float(beta))
    return np.ascontiguousarray(np.broadcast_to(np.asarray(beta, dtype=np.float64), (runs,)))


def ucb_actions(arms: np.ndarray, theta: np.ndarray, v_inv: np.ndarray, beta: float | np.ndarray,
                table: np.ndarray | None = None) -> np.ndarray:
    """Line 4 for R runs at once: arms (R, K, d), θ̂ (R, d), V⁻¹ (R, d, d), β (scalar or (R,)) →
    actions (R,): the first arm of the largest ⟨φ, θ̂⟩ + β‖φ‖_{V⁻¹} (:func:`.kernels.ucb_argmax`;
    ``table``: the arms' :func:`.kernels.arm_table`, for arms that stay fixed)."""
    if table is None:
        table = kernels.arm_table(arms)
    out = np.empty(table.shape[0], dtype=np.int64)
    kernels.ucb_argmax(table, np.ascontiguousarray(theta, dtype=np.float64),
                       np.ascontiguousarray(v_inv, dtype=np.float64), _betas(beta, table.shape[0]), out)
    return out


CONTEXT_CELLS = 1 << 21  # score-table entries (8 bytes each) one chunk of per-user arm sets builds at most


def context_actions(arms: np.ndarray, theta: np.ndarray, v_inv: np.ndarray, beta: float | np.ndarray) -> np.ndarray:
    """Line 4 for users with their own contexts: arms (R, n, K, d) (user t's {φ(c_t, a)}), θ̂ (R, d),
    V⁻¹ (R, d, d), β (scalar or (R,)) → actions (R, n). Every user is one row of :func:`ucb_actions`
    (the (R·n) rows' score tables, θ̂ and V⁻¹ repeated per user: one compiled loop, no Python loop
    over users), so a user's arm is the arithmetic of the fixed-arm path and does not depend on the
    block or process that computes it (a chunk of users at a time, to bound the tables' memory)."""
    r, n, k, d = arms.shape
    per_user = k * (d + d * (d + 1) // 2)
    step = max(1, CONTEXT_CELLS // per_user)
    beta = _betas(beta, r)
    out = np.empty((r, n), dtype=np.int64)
    for lo in range(0, n, step):  # chunks of users, not users
        hi = min(n, lo + step)
        m = hi - lo
        flat = np.ascontiguousarray(arms[:, lo:hi]).reshape(r * m, k, d)
        out[:, lo:hi] = ucb_actions(flat, np.repeat(theta, m, axis=0), np.repeat(v_inv, m, axis=0),
                                    np.repeat(beta, m)).reshape(r, m)
    return out


class Widths:
    """:func:`ucb_actions` for the fixed arms of R runs (their score table built once)."""

    def __init__(self, arms: np.ndarray):
        self.arms = arms
        self.table = kernels.arm_table(arms)

    def __call__(self, theta: np.ndarray, v_inv: np.ndarray, beta: float) -> np.ndarray:
        return ucb_actions(self.arms, theta, v_inv, beta, self.table)


class BatchedLinUCB:
    """V_m, u_m, V_m⁻¹ and θ̂_m of R runs; every update through :mod:`.kernels`."""

    def __init__(self, runs: int, d: int, lam: float, floor: float, beta_fn):
        self.d = d
        self.lam, self.floor = float(lam), float(floor)
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
        self._ok = np.empty(runs, dtype=np.bool_)

    def smallest_eigenvalues(self) -> np.ndarray:
        """λ_min(V_m) per run (of the released V_m, before any clipping)."""
        if self.lambda_min is None:
            self.lambda_min = np.linalg.eigvalsh(self.V)[:, 0]
        return self.lambda_min

    def broadcast(self) -> tuple[np.ndarray, np.ndarray, float]:
        return self.theta, self.v_inv, self.beta

    def update(self, u_inc: np.ndarray, v_inc: np.ndarray, users: int) -> None:
        """Lines 13–16 after a batch of ``users``: ũ (R, d), Ṽ (R, d, d) symmetric. Each run is
        decided alone (a run's model must not depend on the runs stacked with it: one task of a
        distributed run is one run, and it must match this one)."""
        ok = self._ok
        kernels.update(self.u, self.V, self.v_inv, self.theta, np.ascontiguousarray(u_inc, dtype=np.float64),
                       np.ascontiguousarray(v_inc, dtype=np.float64), self.floor, ok)
        if not ok.all():
            self.clip(~ok)
        self.t += users
        self.lambda_min = None  # computed on demand (diagnostics only)
        self.beta = self.beta_fn(self.t)

    def clip(self, low: np.ndarray) -> None:
        """The safeguard for the runs ``low`` (R,) whose V_m − floor·I has no Cholesky factor:
        V⁻¹ from the eigenvalue-clipped V̄_m, θ̂ = V̄_m⁻¹u_m; counted."""
        w, q = np.linalg.eigh(self.V[low])
        self.clipped[low] += w[:, 0] < self.floor
        self.not_pd[low] += w[:, 0] <= 0
        w = np.maximum(w, self.floor)
        self.v_inv[low] = np.matmul(q / w[:, None, :], np.swapaxes(q, 1, 2))
        theta = np.empty((int(low.sum()), self.d))
        kernels.thetas(np.ascontiguousarray(self.v_inv[low]), np.ascontiguousarray(self.u[low]), theta)
        self.theta[low] = theta

    def update_rank_one(self, x: np.ndarray, y: np.ndarray) -> None:
        """Non-private fast path: Ṽ = xxᵀ exactly, so Sherman–Morrison keeps V⁻¹ (V stays ⪰ λI)."""
        kernels.rank_one(self.u, self.V, self.v_inv, self.theta, np.ascontiguousarray(x, dtype=np.float64),
                         np.ascontiguousarray(y, dtype=np.float64))
        self.t += 1
        self.beta = self.beta_fn(self.t)
