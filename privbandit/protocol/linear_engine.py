"""The in-process engine of the shuffle-model linear bandits: Algorithm 1's loop, all runs stacked.

One batch of B users at a time (B = 1 for the per-round baselines):

1. users read the broadcast (θ̂, V⁻¹, β) and pick their arm (line 4); with fixed arms the whole batch
   picks the same arm per run, so a batch is one vectorized step;
2. each user observes her reward and randomizes [φy, upper(φφᵀ)] locally (line 7);
3. the intermediary releases what its trust model allows (line 11);
4. the analyzer decodes the release into (ũ, Ṽ) and updates the model (lines 13–16).

A trailing partial batch is served from the last model but never aggregated (Algorithm 1 only updates
at t = mB; spec §11 item 15). Ground truth (means, θ*) is used here only to score regret and
diagnostics; it never reaches the parties.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privbandit.protocol.learners.batched_linucb import BatchedLinUCB, arm_outer, ucb_actions
from privbandit.protocol.linear_environments import LinearInstances
from privbandit.protocol.mechanisms import shuffle_linear_bandits as slb


@dataclass
class Protocol:
    """A (randomizer, intermediary, analyzer) chain; ``None`` parts mean raw data passes through."""

    name: str
    randomizer: object | None = None
    intermediary: object | None = None
    analyzer: object | None = None
    tree: slb.TreeAggregator | None = None

    def process(self, entries: np.ndarray, rng_users, rng_shuffler, rng_analyzer) -> np.ndarray:
        """(R, n, D) true entries of one batch → (R, D) the analyzer's estimate of their sum."""
        reports = entries if self.randomizer is None else self.randomizer.randomize(entries, rng_users)
        release = reports if self.intermediary is None else self.intermediary.release(reports, rng_shuffler)
        if isinstance(self.analyzer, slb.BitSumAnalyzer):
            estimate = self.analyzer.analyze(release, entries.shape[-2])
        elif self.analyzer is not None:
            estimate = self.analyzer.analyze(release)
        else:
            estimate = release.sum(axis=-2)
        if self.tree is not None:  # central: the trusted analyzer adds tree noise to prefix sums
            estimate = self.tree.step(estimate, rng_analyzer)
        return estimate


@dataclass
class LinearRunResult:
    pseudo: np.ndarray  # (R, C) cumulative pseudo-regret at the checkpoints
    realized: np.ndarray  # (R, C)
    diagnostics: dict  # per recorded batch: arrays over batches, averaged over runs
    clipped: np.ndarray  # (R,) batches whose V_m was clipped to the floor
    not_pd: np.ndarray  # (R,) batches whose V_m had λ_min ≤ 0
    batches: int


def run(protocol: Protocol, learner: BatchedLinUCB, inst: LinearInstances, uniforms: np.ndarray, batch: int,
        checkpoints: np.ndarray, rngs: tuple, diag_batches: np.ndarray | None = None) -> LinearRunResult:
    arms, theta_star = inst.arms, inst.theta
    mu = inst.means
    runs, horizon = uniforms.shape
    d = arms.shape[-1]
    ridx = np.arange(runs)
    best = mu.max(axis=1)
    inc_pseudo = np.empty((runs, horizon))
    inc_real = np.empty((runs, horizon))
    n_batches = -(-horizon // batch)
    record = np.zeros(n_batches, dtype=bool)
    if diag_batches is not None:
        record[np.clip(diag_batches, 0, n_batches - 1)] = True
    diag = {k: [] for k in ("batch", "t", "lambda_min_mean", "lambda_min_min", "clipped_frac", "theta_error",
                            "u_error_mean", "u_error_var", "V_error_mean", "V_error_var")}
    outer = arm_outer(arms)
    exact = protocol.randomizer is None and protocol.tree is None
    for m in range(n_batches):
        t0 = m * batch
        t1 = min(horizon, t0 + batch)
        theta, v_inv, beta = learner.broadcast()
        a = ucb_actions(arms, theta, v_inv, beta, outer)
        mu_a = mu[ridx, a]
        u = uniforms[:, t0:t1]
        y = (u < mu_a[:, None]).astype(np.float64)
        inc_pseudo[:, t0:t1] = (best - mu_a)[:, None]
        inc_real[:, t0:t1] = (u < best[:, None]) - y
        if t1 - t0 < batch:
            break
        x = arms[ridx, a]
        if exact and batch == 1:
            learner.update_rank_one(x, y[:, 0])
            continue
        entries = slb.user_entries(np.broadcast_to(x[:, None, :], (runs, t1 - t0, d)), y)
        estimate = protocol.process(entries, *rngs)
        u_inc, v_inc = slb.split_entries(estimate, d)
        learner.update(u_inc, v_inc, t1 - t0)
        if record[m]:
            err = estimate - entries.sum(axis=1)
            diag["batch"].append(m + 1)
            diag["t"].append(t1)
            lam_min = learner.smallest_eigenvalues()
            diag["lambda_min_mean"].append(float(lam_min.mean()))
            diag["lambda_min_min"].append(float(lam_min.min()))
            diag["clipped_frac"].append(float((lam_min < learner.floor).mean()))
            diag["theta_error"].append(float(np.linalg.norm(learner.theta - theta_star, axis=1).mean()))
            diag["u_error_mean"].append(float(err[:, :d].mean()))
            diag["u_error_var"].append(float(err[:, :d].var()))
            diag["V_error_mean"].append(float(err[:, d:].mean()))
            diag["V_error_var"].append(float(err[:, d:].var()))
    cp = np.asarray(checkpoints) - 1
    return LinearRunResult(pseudo=np.cumsum(inc_pseudo, axis=1)[:, cp], realized=np.cumsum(inc_real, axis=1)[:, cp],
                           diagnostics={k: np.asarray(v) for k, v in diag.items()}, clipped=learner.clipped.copy(),
                           not_pd=learner.not_pd.copy(), batches=n_batches)
