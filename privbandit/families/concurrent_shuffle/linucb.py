"""Algorithm 4 (App. C): concurrent-shuffle private LinUCB, on the counter of Algorithm 3, as a
vectorized simulation over runs (not yet a spine plug-in; docs/concurrent-shuffle.md).

Every user's statistics [φy, upper(φφᵀ)] (the linear family's entries layout) go through the tree:
each level-i node runs P_Vec (Chowdhury & Zhou 2022, App. C; imported from the linear family) over
its s_i users at (ε/k, δ/k), one mechanism for the vector and the matrix (P_Vec's log(4(d²+1)/δ)
counts both; spec §4, §8 item 10). At t0 = s_1, 2s_1, … the server forms u_t and Ṽ_t as Σ_{v∈V_t} S_v
(Alg. 4 step 7) and feeds the change since the last t0 to the linear family's learner (V = Ṽ + λI,
θ̂ = V⁻¹u, its eigenvalue floor); users of the next lowest-level batch act on the broadcast
(θ̂_{t−1}, V⁻¹_{t−1}, β_{t−1}) (steps 2–3, the paper's m − 1 read as t − 1, spec §8 item 5). With fixed
arms (the linear family's environments) a batch's users share their choice.

λ and β follow Thm C.3 [R]: λ = 2σ̃√d (``lambda_rule = "sqrt-d"``; "d" for 2σ̃d, spec §8 item 4),
β_t = σ√(2 log(2/α) + d log(3 + 2t/(dλ))) + √(3λ/2) + √(λ/2), α = 1/n, σ = ½ (Bernoulli rewards),
σ̃ the per-entry counter bound: z·√(max_t |V_t|·V_node) + (d_low − 1), z = √(2 log(2n(d² + d)/α)) [INF].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privbandit.families.concurrent_shuffle.tree import Tree, tree_for
from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits import params as lp
from privbandit.families.shuffle_linear_bandits.learners import BatchedLinUCB, arm_outer, ucb_actions
from privbandit.families.shuffle_linear_bandits.world import instances
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.privacy import Ledger


@dataclass(frozen=True)
class Alg4:
    tree: Tree
    d: int
    epsilon: float
    delta: float
    vec: tuple  # per level: VecParams
    vec_scale: float | None
    sigma_tilde: float
    lam: float
    private: bool = True

    def beta(self, t: int) -> float:
        sigma, alpha, d, lam = 0.5, 1.0 / self.tree.n, self.d, self.lam
        return (sigma * math.sqrt(2 * math.log(2 / alpha) + d * math.log(3 + 2 * t / (d * lam)))
                + math.sqrt(1.5 * lam) + math.sqrt(lam / 2))

    def ledger(self) -> Ledger:
        book = Ledger("shuffle" if self.private else "none", self.epsilon if self.private else None, self.delta,
                      users=self.tree.n)
        for level, p in enumerate(self.vec, start=1):
            budget = lp.Budget(self.epsilon / self.tree.k, self.delta / self.tree.k, 1)
            event = lp.batch_event("linucb-sdp-vec", "theory", budget, self.tree.sizes[level - 1], 1.0, None, p,
                                   self.vec_scale)
            book.record(event, f"level-{level}", None, releases=self.tree.nodes(level))
        return book


def node_variance(p: slb.VecParams, m: int) -> float:
    """Upper bound on one entry's P_Vec error variance for m users: (span/g)²·m·(¼ + b·p(1−p))."""
    return p.scale**2 * m * (0.25 + p.b * p.p * (1 - p.p))


def alg4(n: int, k: int, d: int, epsilon: float, delta: float, vec_scale: float | None = None,
         lambda_rule: str = "sqrt-d", d_low: int | None = None, degree: int | None = None) -> Alg4:
    tree = tree_for("csta_k", n, k, d_low, degree)
    budget = lp.Budget(epsilon / k, delta / k, 1)
    vec = tuple(lp.vec_params("theory", budget, s, d, 1.0, 1.0, vec_scale, "2delta") for s in tree.sizes)
    t0 = np.arange(1, n // tree.sizes[0] + 1) * tree.sizes[0]
    worst = 0.0
    for level in range(1, k + 1):  # the largest |V_t|-weighted variance over t, level by level
        lo, hi = tree.digits(t0, level)
        worst_level = (hi - lo).max()
        worst += worst_level * node_variance(vec[level - 1], tree.sizes[level - 1])
    z = math.sqrt(2 * math.log(2 * n * (d * d + d) * n))
    sigma_tilde = z * math.sqrt(worst) + tree.sizes[0] - 1
    lam = 2 * sigma_tilde * (math.sqrt(d) if lambda_rule == "sqrt-d" else d)
    return Alg4(tree, d, epsilon, delta, vec, vec_scale, sigma_tilde, max(lam, 1.0))


def run(a: Alg4, arms: int, seed: int, runs: list[int], label: str = "alg4", generator: str = "paper") -> dict:
    """R runs of Algorithm 4 (or, with ``a.private`` False, the same batches with exact sums):
    cumulative pseudo-regret at every t0 (R, n/s_1), and the learner's counters."""
    inst = instances(generator, arms, a.d, seed, runs)
    R, d, tree = len(runs), a.d, a.tree
    D = slb.n_entries(d)
    outer = arm_outer(inst.arms)
    means = inst.means
    best = means.max(axis=1)
    ridx = np.arange(R)
    learner = BatchedLinUCB(R, d, a.lam, a.lam / 2, a.beta)
    s1 = tree.sizes[0]
    steps = tree.n // s1
    rands = [slb.BitSumRandomizer(p) for p in a.vec]
    analyzers = [slb.BitSumAnalyzer(p) for p in a.vec]
    open_totals = [np.zeros((R, D)) for _ in range(tree.k)]
    done = [np.zeros((R, tree.nodes(i) + 1, D)) for i in range(1, tree.k + 1)]  # cumulative node sums
    rngs = [stream(seed, "cs-alg4", label, r) for r in runs]
    regret = np.zeros((R, steps))
    prev = np.zeros((R, D))
    total = np.zeros(R)
    for b in range(steps):
        theta, v_inv, beta = learner.broadcast()
        act = ucb_actions(inst.arms, theta, v_inv, beta, outer)  # one choice per run for the batch
        mu = means[ridx, act]
        u = np.stack([g.random(s1) for g in rngs])
        y = (u < mu[:, None]).astype(np.float64)
        x = np.broadcast_to(inst.arms[ridx, act][:, None, :], (R, s1, d))
        entries = slb.user_entries(x, y)  # (R, s1, D)
        total += s1 * (best - mu)
        regret[:, b] = total
        t0 = (b + 1) * s1
        for level in range(1, tree.k + 1):
            s = tree.sizes[level - 1]
            j = b * s1 // s
            if j >= tree.nodes(level):
                continue
            if a.private:
                noise = tuple(np.stack(parts) for parts in zip(*[rands[level - 1].draw((s1, D), g) for g in rngs]))
                open_totals[level - 1] += rands[level - 1].apply(entries, noise).sum(axis=1)
            else:
                open_totals[level - 1] += entries.sum(axis=1)
            if t0 % s == 0:  # node j executes (its shuffler releases) at its last user
                est = analyzers[level - 1].analyze(open_totals[level - 1], s) if a.private else open_totals[level - 1]
                done[level - 1][:, j + 1] = done[level - 1][:, j] + est
                open_totals[level - 1] = np.zeros((R, D))
        now = np.zeros((R, D))
        for level in range(1, tree.k + 1):  # Σ_{v∈V_t} S_v from each level's cumulative node sums
            lo, hi = tree.digits(t0, level)
            now += done[level - 1][:, int(hi)] - done[level - 1][:, int(lo)]
        u_inc, v_inc = slb.split_entries(now - prev, d)
        learner.update(u_inc, v_inc, s1)
        prev = now
    left = tree.n - steps * s1  # users after the last lowest-level batch act on the last model
    if left:
        theta, v_inv, beta = learner.broadcast()
        act = ucb_actions(inst.arms, theta, v_inv, beta, outer)
        total = total + left * (best - means[ridx, act])
    return {"regret_t0": regret, "final_regret": total, "clipped": learner.clipped.copy(),
            "not_pd": learner.not_pd.copy(), "sigma_tilde": a.sigma_tilde, "lambda": a.lam}
