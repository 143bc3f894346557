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
from privbandit.families.shuffle_linear_bandits.learners import BatchedLinUCB, Widths
from privbandit.families.shuffle_linear_bandits.world import UserUniforms, instances
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.privacy import Ledger, NonPrivate


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
    preset: str = "theory"  # the P_Vec noise: Thm C.1's constants, or the exact accountant's ("exact")
    policy: str = "linucb"  # "random": uniformly random arms, nothing reported

    def beta(self, t: int) -> float:
        sigma, alpha, d, lam = 0.5, 1.0 / self.tree.n, self.d, self.lam
        return (sigma * math.sqrt(2 * math.log(2 / alpha) + d * math.log(3 + 2 * t / (d * lam)))
                + math.sqrt(1.5 * lam) + math.sqrt(lam / 2))

    def event(self, level: int):
        """What one level-``level`` node's release guarantees its users: P_Vec at (ε/k, δ/k), Thm C.1
        of Chowdhury & Zhou (its ``none proven`` below the theory constant), or under ``exact`` the
        exact accountant's ε at δ/k; exact sums: none."""
        if not self.private:
            return NonPrivate()
        budget = lp.Budget(self.epsilon / self.tree.k, self.delta / self.tree.k, 1)
        if self.preset == "exact":
            return lp.exact_vec_event(budget, self.tree.sizes[level - 1], self.vec[level - 1], slb.n_entries(self.d))
        return lp.batch_event("linucb-sdp-vec", "theory", budget, self.tree.sizes[level - 1], 1.0, None,
                              self.vec[level - 1], self.vec_scale)

    def empty_ledger(self) -> Ledger:
        return Ledger("shuffle" if self.private else "none", self.epsilon if self.private else None, self.delta,
                      users=self.tree.n)

    def ledger(self) -> Ledger:
        """The ledger of a whole run: every node's event in lane ``level-i`` (random play: none)."""
        book = self.empty_ledger()
        for level in range(1, self.tree.k + 1) if self.policy != "random" else ():
            book.record(self.event(level), f"level-{level}", None, releases=self.tree.nodes(level))
        return book


def node_variance(p: slb.VecParams, m: int) -> float:
    """Upper bound on one entry's P_Vec error variance for m users: (span/g)²·m·(¼ + b·p(1−p))."""
    return p.scale**2 * m * (0.25 + p.b * p.p * (1 - p.p))


def alg4(n: int, k: int, d: int, epsilon: float, delta: float, vec_scale: float | None = None,
         lambda_rule: str = "sqrt-d", d_low: int | None = None, degree: int | None = None,
         private: bool = True, preset: str = "theory", policy: str = "linucb") -> Alg4:
    """Algorithm 4's public parameters; ``private`` False: the same tree with exact node sums (λ = 1);
    ``preset`` "exact": each level's P_Vec from the exact accountant (:func:`lp.exact_vec_params`);
    ``policy`` "random": uniformly random arms on the same batches, nothing reported."""
    if preset not in ("theory", "exact") or policy not in ("linucb", "random"):
        raise ValueError(f"preset {preset!r} / policy {policy!r}: theory or exact / linucb or random")
    tree = tree_for("csta_k", n, k, d_low, degree)
    budget = lp.Budget(epsilon / k, delta / k, 1)
    if preset == "exact" and private:
        vec = tuple(lp.exact_vec_params(budget, s, d) for s in tree.sizes)
    else:
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
    if not private:
        return Alg4(tree, d, epsilon, delta, vec, vec_scale, 0.0, 1.0, private=False, preset=preset, policy=policy)
    return Alg4(tree, d, epsilon, delta, vec, vec_scale, sigma_tilde, max(lam, 1.0), preset=preset)


def batch_reports(a: Alg4, level: int, entries: np.ndarray, seed: int, label: str, runs: list[int],
                  batch: int) -> np.ndarray:
    """P_Vec counts (R, s_1, D) of one lowest-level batch's users for their level-``level`` node."""
    rand = slb.BitSumRandomizer(a.vec[level - 1])
    shape = entries.shape[1:]
    draws = [rand.draw(shape, stream(seed, "cs-alg4-noise", label, r, level, batch)) for r in runs]
    return rand.apply(entries, tuple(np.stack(p) for p in zip(*draws)))


class Alg4Server:
    """The server of Alg. 4 for R runs: node totals in, (θ̂, V⁻¹, β) out, deterministic."""

    def __init__(self, a: Alg4, runs: int):
        self.a = a
        self.learner = BatchedLinUCB(runs, a.d, a.lam, a.lam / 2, a.beta)
        D = slb.n_entries(a.d)
        self.done = [np.full((runs, a.tree.nodes(i) + 1, D), np.nan) for i in range(1, a.tree.k + 1)]
        for d in self.done:
            d[:, 0] = 0.0
        self.executed = [np.zeros(a.tree.nodes(i), bool) for i in range(1, a.tree.k + 1)]
        self.prev = np.zeros((runs, D))
        self.steps = 0  # lowest-level batches folded into the learner

    def on_node(self, level: int, j: int, totals: np.ndarray) -> None:
        """Node j of ``level`` executed: its released totals (R, D) (or exact sums, non-private)."""
        s = self.a.tree.sizes[level - 1]
        est = slb.BitSumAnalyzer(self.a.vec[level - 1]).analyze(totals, s) if self.a.private else totals
        self.executed[level - 1][j] = True
        self.done[level - 1][:, j + 1] = est  # node estimates; cumulated when V_t is formed

    def ready(self) -> bool:
        """Has every node of V_{t0} (t0 the next lowest-level boundary) executed?"""
        t0 = (self.steps + 1) * self.a.tree.sizes[0]
        for level in range(1, self.a.tree.k + 1):
            lo, hi = self.a.tree.digits(t0, level)
            if not self.executed[level - 1][int(lo):int(hi)].all():
                return False
        return True

    def advance(self) -> None:
        """Alg. 4 step 7 at t0: u_t, Ṽ_t = Σ_{v∈V_t} S_v; the learner takes the change since the last t0."""
        s1 = self.a.tree.sizes[0]
        t0 = (self.steps + 1) * s1
        now = np.zeros_like(self.prev)
        for level in range(1, self.a.tree.k + 1):
            lo, hi = self.a.tree.digits(t0, level)
            now += self.done[level - 1][:, int(lo) + 1:int(hi) + 1].sum(axis=1)
        u_inc, v_inc = slb.split_entries(now - self.prev, self.a.d)
        self.learner.update(u_inc, v_inc, s1)
        self.prev = now
        self.steps += 1


def run(a: Alg4, arms: int, seed: int, runs: list[int], label: str = "alg4", generator: str = "paper") -> dict:
    """R runs of Algorithm 4 (or, with ``a.private`` False, the same batches with exact sums):
    cumulative pseudo-regret at every t0 (R, n/s_1), the final pseudo- and realized regret, each
    batch's arm (R, n/s_1) and the learner's counters.

    User t's reward is 1{U_t < μ} with the linear family's common random number U_t
    (:class:`~privbandit.families.shuffle_linear_bandits.world.UserUniforms`), as the spine's users
    draw it (:mod:`.bandit`): run r faces the same θ*, arms *and* users as run r of every
    linear-family algorithm of the same seed and generator, and of every other k and label, so R6's
    comparisons are paired. The P_Vec noise is keyed by (label, run, level, batch)."""
    inst = instances(generator, arms, a.d, seed, runs)
    R, d, tree = len(runs), a.d, a.tree
    D = slb.n_entries(d)
    choose = Widths(inst.arms)
    means = inst.means
    best = means.max(axis=1)
    ridx = np.arange(R)
    server = Alg4Server(a, R)
    s1 = tree.sizes[0]
    steps = tree.n // s1
    common = UserUniforms(seed, runs)
    open_totals = [np.zeros((R, D)) for _ in range(tree.k)]
    regret = np.zeros((R, steps))
    actions = np.zeros((R, steps), np.int64)
    total = np.zeros(R)
    realized = np.zeros(R)
    for b in range(steps):
        theta, v_inv, beta = server.learner.broadcast()
        act = choose(theta, v_inv, beta)  # one choice per run for the batch
        actions[:, b] = act
        mu = means[ridx, act]
        u = common.get(b * s1, s1)
        y = (u < mu[:, None]).astype(np.float64)
        realized += ((u < best[:, None]).sum(axis=1) - y.sum(axis=1))
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
            reports = batch_reports(a, level, entries, seed, label, runs, b) if a.private else entries
            open_totals[level - 1] += reports.sum(axis=1)
            if t0 % s == 0:  # node j executes (its shuffler releases) at its last user
                server.on_node(level, j, open_totals[level - 1])
                open_totals[level - 1] = np.zeros((R, D))
        server.advance()
    left = tree.n - steps * s1  # users after the last lowest-level batch act on the last model
    if left:
        theta, v_inv, beta = server.learner.broadcast()
        act = choose(theta, v_inv, beta)
        mu = means[ridx, act]
        total = total + left * (best - mu)
        u = common.get(steps * s1, left)
        realized += (u < best[:, None]).sum(axis=1) - (u < mu[:, None]).sum(axis=1)
    return {"regret_t0": regret, "final_regret": total, "final_realized": realized, "actions": actions,
            "clipped": server.learner.clipped.copy(), "not_pd": server.learner.not_pd.copy(),
            "sigma_tilde": a.sigma_tilde, "lambda": a.lam}
