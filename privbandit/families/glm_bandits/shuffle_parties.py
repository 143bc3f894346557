"""Algorithm 1 (ShuffleGLM, stochastic contexts, shuffle DP) as the spine's analyzer and user logic.

Who does what (spec §11.3, M1):

- Batch k is one plan to its B_k users (``phase`` 0). The plan carries the billboard: θ̂_1 … θ̂_{k−1},
  V⁻¹ and H_2⁻¹ … H_{k−1}⁻¹ (lists of (R, d) and (R, d, d) arrays). Each user runs lines 12–17 on
  her own arm set (:func:`~.shuffle_glm.eliminate`, :func:`~.shuffle_glm.scaled_weights`, the
  G-optimal design by Frank–Wolfe, a draw from it), plays, draws her Bernoulli reward and sends
  R2 of her (weighted) outer product: per-label bit counts (P_Vec, reused from the linear family:
  :class:`~privbandit.families.shuffle_linear_bandits.mechanisms.BitSumRandomizer`) into one ``sum``
  round at the ``shuffler``; only the label totals leave it. Δ = 1 in the warm-up and 1/κ* after it,
  where the weight is clipped to 1/κ*, so the sensitivity holds always (spec §12 item 11).
- 𝒫_GD (Algorithm 7) is T_it further plans to the *same* users (``phase`` 1; a plan may name any
  first user): each broadcasts θ_t (and the batch's billboard again) and opens one ``sum`` round at
  the shuffler for R1 of the users' gradients (μ(⟨x,θ_t⟩) − r)·x (Δ = 1). The analyzer adds the
  regularizer's gradient (λ_max/B_k)θ, steps, projects on the S-ball and averages the iterates.
- The fleet keeps nothing: a user's arm, weight and reward for her batch are a function of the
  world seed, her index and the billboard (the arm sets and reward uniforms are the world's; her
  draw from π^G is keyed by (seed, label, run, first user of her block)); a gradient plan recomputes
  them (:class:`ShuffleGLMUsers` memoizes the last few blocks, a pure cache: a restarted fleet gets
  the same numbers).
- The last batch's H_M and θ̂_M (lines 20–21 at k = M) are never read by any user: its plan opens
  no round and its users send nothing (post-processing: this only removes releases).

The ledger (lane, group): each covariance round is ``ApproxDP(ε/2, δ/2)`` (Lemma S.2) in lane
``covariance`` (batches reach disjoint users: parallel composition); each gradient round is one
:class:`~privbandit.protocol.privacy.AdvancedComposition` round at Algorithm 7's per-iteration budget
(ε/2)/(2√(2T_it log(2/δ))), (δ/2)/(T_it + 1), in lane ``optimizer`` and group k, composed as
Algorithm 1 line 8 sets it (𝒫_GD at (ε/2, δ/2); Lemma T.2). Lanes compose sequentially: (ε, δ).
Where eq. (127)'s constant is below 24·10⁴ or a call's ε exceeds 15 (Lemma S.1/S.2's range), the
rounds are ``NoneProven``.

Preset ``exact`` (issue #30 item 4): every P_Vec call draws fair noise bits (p = ½), b the fewest the
exact accountant of the released counts allows (:mod:`privbandit.protocol.privacy.counts`; no
eq. (127) constant, so a ``vec_constant`` other than its default is refused). A covariance round's d(d+1)/2 counts are
calibrated at (ε/2, δ/2) and recorded as that accountant's ``ApproxDP`` (its ε at δ/2). 𝒫_GD's T_it
gradient rounds are calibrated *together*: b is the fewest for which their d·T_it counts, composed
exactly by privacy-loss distributions (adaptive composition of rounds each dominated by the same
pair), are (ε/2, δ/2)-DP; each round is recorded as :class:`ExactCountRounds`, whose group of k
rounds the ledger charges the exact k-fold ε at δ/2 (not advanced composition, which needs
b = 271,025 where this needs 10,183 at n = 3000, T_it = 50, (ε, δ) = (1, 0.1); docs/glm-bandits.md).
σ̃ in λ (:func:`~.shuffle_glm.constants`) is the exact calibration's.

Everything is vectorized over the users of a block and the runs stacked.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from privbandit.families.glm_bandits import mechanisms as mech
from privbandit.families.glm_bandits import shuffle_glm as sg
from privbandit.families.glm_bandits.learners import safe_inverse
from privbandit.families.glm_bandits.world import GLMWorld, mu
from privbandit.families.shuffle_linear_bandits.mechanisms import (
    BitSumAnalyzer,
    BitSumRandomizer,
    VecParams,
    from_upper,
    upper_indices,
)
from privbandit.protocol.primitives.seeding import stream
from privbandit.families.shuffle_linear_bandits import params as lp
from privbandit.protocol.privacy import AdvancedComposition, ApproxDP, NoneProven, PrivacyEvent, counts
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Round, Truth
from privbandit.protocol.spine.family import BlockAnswer, Spend
from privbandit.protocol.spine.observer import checkpoints_in

VEC_MAX_EPSILON = 15.0  # Lemma S.1/S.2: 0 < ε ≤ 15, δ < 1/2
COVARIANCE_BASIS = "P_Vec covariance (ε/2, δ/2): Lemma S.2 (Cheu et al. 2021 Thm 4.2), weight clipped to 1/κ*"
GRADIENT_BASIS = ("𝒫_GD gradient round: P_Vec (Lemma S.1) at (ε/(2√(2T log(1/δ))), δ/(T+1)), composed by "
                  "advanced composition (Algorithm 1 line 8, Lemma T.2)")
PHASE_BATCH, PHASE_GRADIENT = 0, 1
EXACT_GRADIENT_BASIS = (counts.BASIS + "; 𝒫_GD's gradient rounds: their d·T_it counts composed exactly by the same "
                        "privacy-loss distribution, calibrated together at (ε/2, δ/2) (Algorithm 1 line 8's budget)")


@dataclass(frozen=True)
class ExactCountRounds(AdvancedComposition):
    """One of 𝒫_GD's gradient rounds under the ``exact`` preset: ``labels`` counts of Bin(``trials``, ½)
    noise bits, data shifted by ≤ ``shift``. The ledger groups a batch's rounds and charges k of them
    :meth:`composed` (k): the exact privacy-loss distribution of k·labels such counts at the batch's
    δ (``delta``), so it states what the rounds so far cost, as for advanced composition, whose
    grouping this reuses. On its own (a record's ε) a round is (ε of one round at δ, δ)."""

    trials: int = 0
    shift: int = 0
    labels: int = 0

    def __post_init__(self) -> None:
        # one round of a calibrated set may cost ε = 0 at the set's δ, which advanced composition refuses
        if not (self.trials >= 1 and self.shift >= 1 and self.labels >= 1 and self.epsilon >= 0
                and 0 < self.delta < 1):
            raise ValueError(f"exact count rounds need trials, shift, labels ≥ 1, ε ≥ 0 and δ in (0, 1); got "
                             f"({self.trials}, {self.shift}, {self.labels}, {self.epsilon}, {self.delta})")

    def composed(self, k: int) -> tuple[float, float]:
        if k <= 0:
            return 0.0, 0.0
        return counts.count_epsilon(self.trials, self.shift, self.labels * k, self.delta), self.delta


@dataclass(frozen=True)
class ShuffleSetup:
    """Everything public about Algorithm 1 on one task. Stacked runs must share their world's κ, κ*
    (the family stacks only runs with shared contexts), so one schedule and one set of rounds serve all."""

    d: int
    T: int
    link: str
    S: float
    R: float
    epsilon: float
    delta: float
    kappa: float
    kappa_star: float
    runs: int
    consts: sg.ShuffleGLMConstants
    schedule: tuple[int, ...]
    max_iterations: int
    vec_constant: float
    diagnostic: frozenset
    preset: str = "paper"  # "exact": every P_Vec call calibrated by the exact count accountant

    @property
    def exact(self) -> bool:
        return self.preset == "exact"

    @cached_property
    def starts(self) -> tuple[int, ...]:
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.schedule)[:-1]]))

    @property
    def batches(self) -> int:
        return len(self.schedule)

    def shift(self, k: int) -> float:
        """Δ of batch k's covariance round: 1 (warm-up, x xᵀ) or 1/κ* (the clipped weights)."""
        return 1.0 if k == 0 else 1.0 / self.kappa_star

    def cov_vec(self, k: int) -> VecParams:
        if self.exact:
            return mech.exact_pvec_params(self.schedule[k], self.d, mech.n_upper(self.d), self.epsilon / 2,
                                          self.delta / 2, self.shift(k))
        return mech.pvec_params(self.schedule[k], self.d, self.epsilon / 2, self.delta / 2, self.shift(k),
                                self.vec_constant)

    def pgd(self, k: int) -> mech.PGDPlan:
        """Algorithm 7 for batch k at (ε/2, δ/2), L = R + S·λ_max/B_k (per-sample gradient bound plus the
        regularizer's; spec §12 item 6), T_it capped at ``max_iterations``."""
        n = self.schedule[k]
        return mech.pgd_plan(n, self.d, self.epsilon / 2, self.delta / 2, self.S,
                             self.R + self.S * self.consts.lam_max / n, self.max_iterations, self.vec_constant,
                             exact=self.exact)

    def cov_round(self, rid: int, k: int) -> Round:
        return Round(rid, "shuffler", "sum", expected=self.schedule[k], width=self.d * (self.d + 1) // 2,
                     integer=True, low=0, high=self.cov_vec(k).max_count)

    def grad_round(self, rid: int, k: int) -> Round:
        return Round(rid, "shuffler", "sum", expected=self.schedule[k], width=self.d, integer=True, low=0,
                     high=self.pgd(k).vec.max_count)

    def uncovered(self, eps: float, delta: float) -> str | None:
        """Why Lemma S.1/S.2 does not cover a P_Vec call at (ε, δ) with these constants (None: it does)."""
        if self.vec_constant < mech.VEC_CONSTANT:
            return f"eq. (127)'s constant {self.vec_constant:g} < 24·10⁴: Lemma S.1/S.2 do not hold"
        if not (eps <= VEC_MAX_EPSILON and delta < 0.5):
            return f"a P_Vec call at (ε, δ) = ({eps:.4g}, {delta:.4g}), outside Lemma S.1/S.2's ε ≤ 15, δ < 1/2"
        return None

    def cov_event(self, k: int) -> PrivacyEvent:
        if self.exact:
            return lp.exact_vec_event(lp.Budget(self.epsilon / 2, self.delta / 2, 1), self.schedule[k], self.cov_vec(k),
                                      mech.n_upper(self.d))
        why = self.uncovered(self.epsilon / 2, self.delta / 2)
        return NoneProven("P_Vec covariance: " + why) if why else ApproxDP(self.epsilon / 2, self.delta / 2,
                                                                            COVARIANCE_BASIS)

    def grad_event(self, k: int) -> PrivacyEvent:
        p = self.pgd(k)
        if self.exact:
            return ExactCountRounds(p.eps_iter, p.delta_iter, p.delta_iter, EXACT_GRADIENT_BASIS,
                                    trials=self.schedule[k] * p.vec.b, shift=p.vec.g, labels=self.d)
        why = self.uncovered(p.eps_iter, p.delta_iter)
        if why:
            return NoneProven("𝒫_GD gradient round: " + why)
        # slack δ′ = δ_it (T_it·δ_it + δ′ = δ/2), a hair less so the sum never rounds above δ/2
        return AdvancedComposition(p.eps_iter, p.delta_iter, p.delta_iter * (1 - 1e-9), GRADIENT_BASIS)

    def describe(self) -> dict:
        """Schedule, constants, each batch's rounds and what one of its users sends over all of them."""
        per_batch = []
        for k, n in enumerate(self.schedule):
            row = {"users": n, "first_user": self.starts[k]}
            if k < self.batches - 1:
                cov, p = self.cov_vec(k), self.pgd(k)
                D = self.d * (self.d + 1) // 2
                cov_bits = D * max(1, cov.max_count.bit_length())
                grad_bits = self.d * max(1, p.vec.max_count.bit_length())
                row.update(rounds=1 + p.iterations, iterations=p.iterations, iterations_formula=p.iterations_formula,
                           eps_iter=p.eps_iter, delta_iter=p.delta_iter, step=p.step, cov_g=cov.g, cov_b=cov.b,
                           grad_g=p.vec.g, grad_b=p.vec.b,
                           protocol_bytes_per_user=(cov_bits + p.iterations * grad_bits) / 8,
                           literal_bits_per_user=D * (cov.g + cov.b) + p.iterations * self.d * (p.vec.g + p.vec.b))
            else:
                row.update(rounds=0, protocol_bytes_per_user=0.0, literal_bits_per_user=0)
            per_batch.append(row)
        accountant = ({"covariance": counts.BASIS, "gradient": EXACT_GRADIENT_BASIS} if self.exact else
                      {"covariance": COVARIANCE_BASIS, "gradient": GRADIENT_BASIS})
        return {"kind": "shuffle-glm", "preset": self.preset, "accountant": accountant, "epsilon": self.epsilon,
                "delta": self.delta, "kappa": self.kappa, "kappa_star": self.kappa_star,
                "vec_constant": None if self.exact else self.vec_constant, "schedule": list(self.schedule),
                "constants": self.consts.asdict(), "batches": per_batch}


def shuffle_setup(public: dict) -> ShuffleSetup:
    a = public["algorithm"]
    kappa, kappa_star = public["kappa"], public["kappa_star"]
    if len(set(kappa)) > 1 or len(set(kappa_star)) > 1:
        raise ValueError("shuffle-glm stacks only runs that share their world (κ, κ* differ across these runs)")
    d, T, S, R = public["dim"], public["horizon"], public["norm"], public["reward_bound"]
    eps, delta, M = a["epsilon"], public["delta"], a["batches"]
    preset = public.get("preset", "paper")
    # σ̃ of the exact calibration at n = T: n·b/g² hardly moves with n, and the batch sizes are not
    # known yet (the schedule depends on γ, which depends on λ)
    sigma = mech.exact_noise_sd(T, d, eps / 2, delta / 2, 1.0) if preset == "exact" else None
    consts = sg.constants(d, T, M, eps, delta, R, S, kappa[0], a["vec_constant"], a["gamma"], sigma)
    schedule = sg.batch_schedule(T, M, kappa[0], S, d, consts.gamma, a["schedule_exponent"], first=a["warmup"])
    return ShuffleSetup(d, T, public["link"], S, R, eps, delta, kappa[0], kappa_star[0], len(kappa), consts,
                        tuple(schedule), a["max_iterations"], a["vec_constant"],
                        frozenset(int(c) for c in public["diagnostic"]), preset)


class ShuffleGLMServer:
    """The analyzer's logic of Algorithm 1 over R stacked runs: batch plans, covariance decoding,
    𝒫_GD's iterations, the billboard. Sequential: one plan (one open round) at a time."""

    def __init__(self, s: ShuffleSetup, keys: list[int]):
        self.s = s
        self.R = len(keys)
        self.k = 0                 # the batch being served or learned from
        self.iteration = 0         # 𝒫_GD's iteration of batch k
        self.phase = "batch"       # "batch" | "covariance" | "gradient" | "finished"
        self.open: Round | None = None
        self.plan_id = 0
        self.batch_plan = 0        # the id of batch k's plan (its truths carry θ*)
        self.thetas: list[np.ndarray] = []
        self.inverses: list[np.ndarray] = []
        self.pending_inverse: np.ndarray | None = None
        self.point = np.zeros((self.R, s.d))
        self.total = np.zeros((self.R, s.d))
        self.clipped = np.zeros(self.R, dtype=np.int64)

    @property
    def done(self) -> bool:
        return self.phase == "finished"

    def _billboard(self) -> dict:
        return {"batch": self.k, "thetas": [t.copy() for t in self.thetas],
                "inverses": [v.copy() for v in self.inverses]}

    def plans(self) -> list[Plan]:
        if self.open is not None or self.phase == "finished":
            return []
        s, k, pid = self.s, self.k, self.plan_id
        first, n = s.starts[k], s.schedule[k]
        if self.phase == "batch":
            body = {"phase": PHASE_BATCH, "iteration": 0, **self._billboard()}
            self.batch_plan = pid
            if k == s.batches - 1:  # nothing of the last batch is ever read: it collects nothing
                self.phase = "finished"
                self.plan_id += 1
                return [Plan(pid, first, n, body)]
            rnd = s.cov_round(pid, k)
            self.phase = "covariance"
        else:
            body = {"phase": PHASE_GRADIENT, "iteration": self.iteration, **self._billboard(),
                    "point": self.point.copy()}
            rnd = s.grad_round(pid, k)
        self.open = rnd
        self.plan_id += 1
        return [Plan(pid, first, n, body, (rnd,), (Join(pid, first, n, n),))]

    def on_release(self, rnd: Round, release: Release) -> tuple[dict, Spend]:
        if self.open is None or rnd.id != self.open.id:
            raise ProtocolError("unknown-round", f"round {rnd.id} is not the open round")
        s, k, n = self.s, self.k, release.n_reports
        totals = release.values.astype(np.float64)
        # decided: check_release bounded the totals by the round's range; state changes from here
        body = {"batch": k, "plan": self.batch_plan}
        if self.phase == "covariance":
            est = BitSumAnalyzer(s.cov_vec(k)).analyze(totals, n)  # A2: upper triangle, debiased by nΔ
            matrix = from_upper(est, s.d) + s.consts.lam * np.eye(s.d)
            self.pending_inverse, clipped = safe_inverse(matrix, 1e-9)
            self.clipped += clipped
            self.phase, self.iteration = "gradient", 0
            self.point, self.total = np.zeros((self.R, s.d)), np.zeros((self.R, s.d))
            spend = Spend(s.cov_event(k), "covariance")
            body["phase"] = "covariance"
        else:
            p = s.pgd(k)
            grad = BitSumAnalyzer(p.vec).analyze(totals, n) / n  # A1, then the mean
            self.total += self.point
            self.point = mech.pgd_step(self.point, grad, p, s.consts.lam_max, n, s.S)
            self.iteration += 1
            spend = Spend(s.grad_event(k), "optimizer", k)
            body.update(phase="gradient", iteration=self.iteration)
            if self.iteration == p.iterations:  # θ̂_k: the average of θ_0 … θ_{T−1}
                theta = self.total / p.iterations
                self.thetas.append(theta)
                self.inverses.append(self.pending_inverse)
                self.k += 1
                self.phase = "batch"
                body["theta"] = theta.copy()
        self.open = None
        return body, spend

    def summary(self) -> list[dict]:
        return [{"batches_learned": len(self.thetas), "schedule": list(self.s.schedule),
                 "psd_clipped_eigenvalues": int(self.clipped[i])} for i in range(self.R)]


class ShuffleGLMUsers:
    """The users of R stacked runs: their world, and each plan's block of users acting on it."""

    MEMO = 8  # blocks whose (arm, weight, reward) are kept for the gradient plans that follow

    def __init__(self, s: ShuffleSetup, world: GLMWorld, seed: int, label: str, runs: list[int],
                 checkpoints: np.ndarray):
        self.s = s
        self.world = world
        self.seed, self.label, self.runs = seed, label, list(runs)
        self.best = world.best
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)
        self.memo: dict[tuple, tuple] = {}

    def shard(self, plan: Plan, block: int, shards: int) -> int:
        return (int(plan.body["batch"]) + block) % shards  # a batch's plans reach its users' fleet

    def _streams(self, *path) -> list[np.random.Generator]:
        return [stream(self.seed, "glm1", path[0], self.label, r, *path[1:]) for r in self.runs]

    def played(self, body: dict, first: int, size: int) -> tuple[np.ndarray, ...]:
        """Users first … first + size − 1 under batch ``body["batch"]``'s billboard: arm x (R, N, d),
        weight (R, N) (1 in the warm-up), reward y (R, N), pseudo- and realized regret (R, N)."""
        thetas = [np.asarray(t, dtype=np.float64) for t in body["thetas"]]
        inverses = [np.asarray(v, dtype=np.float64) for v in body["inverses"]]
        digest = hashlib.blake2b(b"".join(a.tobytes() for a in thetas + inverses), digest_size=16).digest()
        key = (int(body["batch"]), first, size, digest)
        if key in self.memo:
            return self.memo[key]
        s, w_ = self.s, self.world
        R, K, d = len(self.runs), w_.arms.shape[2], s.d
        if any(t.shape != (R, d) for t in thetas) or any(v.shape != (R, d, d) for v in inverses):
            raise ValueError(f"the billboard does not fit {R} runs in d = {d}")
        arms = w_.arms[:, first:first + size]  # (R, N, K, d)
        N = arms.shape[1]
        if thetas:
            width = np.full(R, s.consts.width)
            left = sg.eliminate(arms, thetas, inverses, [width] * len(thetas))
            weight = sg.scaled_weights(s.link, arms, thetas[0], inverses[0], width, np.full(R, s.kappa_star),
                                       s.S, s.R)
            design = np.sqrt(weight)[..., None] * arms
        else:
            left, weight, design = np.ones((R, N, K), dtype=bool), np.ones((R, N, K)), arms
        pi, _ = sg.g_optimal_design(design.reshape(R * N, K, d), mask=left.reshape(R * N, K))
        u = np.stack([g.random(N) for g in self._streams("design", first)])
        a = sg.sample(pi.reshape(R, N, K), u)
        r_idx, n_idx = np.arange(R)[:, None], np.arange(N)[None, :]
        x = arms[r_idx, n_idx, a]
        mean = w_.means[r_idx, first + n_idx, a]
        uniforms = w_.uniforms[:, first:first + size]
        y = (uniforms < mean).astype(np.float64)
        best = self.best[:, first:first + size]
        out = (x, weight[r_idx, n_idx, a], y, best - mean, (uniforms < best).astype(np.float64) - y)
        if len(self.memo) >= self.MEMO:
            self.memo.pop(next(iter(self.memo)))
        self.memo[key] = out
        return out

    def act(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None) -> BlockAnswer:
        b, s = plan.body, self.s
        k = int(b["batch"])
        x, weight, y, gap, realized = self.played(b, first, size)
        truth = None
        if b["phase"] == PHASE_BATCH:
            at = checkpoints_in(self.checkpoints, first, size) - first - 1
            extras = {"theta_star": self.world.theta.copy()} if block == 0 else {}
            truth = Truth(plan.id, block, first, size, pseudo=gap.sum(axis=1), realized=realized.sum(axis=1),
                          pseudo_at=np.cumsum(gap, axis=1)[:, at], realized_at=np.cumsum(realized, axis=1)[:, at],
                          extras=extras)
            if not plan.joins:
                return BlockAnswer(truth)
            iu, ju = upper_indices(s.d)
            entries = weight[..., None] * x[..., iu] * x[..., ju]  # upper(w·x xᵀ)
            randomizer = BitSumRandomizer(s.cov_vec(k))
            rngs = self._streams("covariance", k, first)
        else:
            theta = np.asarray(b["point"], dtype=np.float64)
            entries = (mu(s.link, np.einsum("rnd,rd->rn", x, theta)) - y)[..., None] * x  # ‖·‖ ≤ 1 = Δ
            randomizer = BitSumRandomizer(s.pgd(k).vec)
            rngs = self._streams("gradient", k, int(b["iteration"]), first)
        draws = [randomizer.draw(entries.shape[1:], g) for g in rngs]
        counts = randomizer.apply(entries, tuple(np.stack(part) for part in zip(*draws)))
        offsets = np.arange(size) if stay is None else np.flatnonzero(stay)
        return BlockAnswer(truth, [(plan.joins[0].round_id, offsets, counts[:, offsets], None)])


def check_plan(plan: Plan, d: int | None = None) -> None:
    """Raise ValueError unless the plan's body is one :class:`ShuffleGLMServer` makes."""
    b = plan.body
    fields = {"phase", "iteration", "batch", "thetas", "inverses"}
    phase = b.get("phase")
    if phase not in (PHASE_BATCH, PHASE_GRADIENT) or isinstance(phase, bool):
        raise ValueError(f"plan {plan.id}: phase = {phase!r} must be 0 (batch) or 1 (gradient)")
    want = fields | ({"point"} if phase == PHASE_GRADIENT else set())
    if set(b) != want:
        raise ValueError(f"plan {plan.id}: body fields {sorted(b)} are not ShuffleGLM's {sorted(want)}")
    k, it = b["batch"], b["iteration"]
    if not (isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= 12):
        raise ValueError(f"plan {plan.id}: batch = {k!r} must be an integer in 0..12")
    if not (isinstance(it, int) and not isinstance(it, bool) and 0 <= it <= 100_000):
        raise ValueError(f"plan {plan.id}: iteration = {it!r} must be an integer in 0..100000")
    thetas, inverses = b["thetas"], b["inverses"]
    if not (isinstance(thetas, list) and isinstance(inverses, list) and len(thetas) == len(inverses) == k):
        raise ValueError(f"plan {plan.id}: batch {k} needs {k} θ̂'s and {k} inverses")
    arrays = thetas + inverses + ([b["point"]] if phase == PHASE_GRADIENT else [])
    for v in arrays:
        if not (isinstance(v, np.ndarray) and v.dtype == np.float64 and np.isfinite(v).all()):
            raise ValueError(f"plan {plan.id}: θ̂'s, inverses and the point must be finite float64 arrays")
    shapes = {v.shape for v in thetas} | ({b["point"].shape} if phase == PHASE_GRADIENT else set())
    if len(shapes) > 1 or any(len(sh) != 2 for sh in shapes):
        raise ValueError(f"plan {plan.id}: θ̂'s and the point must all be (runs, d)")
    for v in inverses:
        if v.ndim != 3 or v.shape[1] != v.shape[2] or (shapes and v.shape[:2] != next(iter(shapes))):
            raise ValueError(f"plan {plan.id}: inverses must be (runs, d, d), as the θ̂'s (runs, d)")
