"""Algorithm 2 (Private-GLM, joint DP) and the non-private baselines as the spine's analyzer and
user logic, under central trust (spec §1.3, §11.3 M2).

- :class:`GLMServer` (the analyzer's logic, the trusted curator): one plan per round t, to user t,
  with the billboard (V_t⁻¹, θ̂_o, θ̂_τ, H_τ⁻¹ and the constants; :func:`~.learners.choose` reads
  only these). The plan opens one ``pass`` round at the ``aggregator``: user t's raw (x_t, r_t,
  Criterion I fired) reaches the trusted analyzer with her identity, as the central model says. The
  analyzer inserts the trees' leaves, runs the optimizers, and declares per release the events of
  the trees (lane ``trees``) and of every optimizer call it made (lane ``optimizer``: θ̂_o's and
  θ̂_τ's calls of one run compose sequentially in that run's group; the worst group is the worst
  run's, so a stacked task's ledger is that of its most-spending run, not the most θ̂_o calls of one
  run added to the most θ̂_τ calls of another), plus once the paper's charge for the switching
  indicators (lane ``switching``).
- :class:`GLMUsers` (the users' logic): user t observes her arm set X_t, acts on the billboard,
  draws her Bernoulli reward from her run's uniform u_t and reports.

Algorithm 2's actions are the same whether the user computes them from the billboard or sends X_t
to the curator who answers x_t (every input is released or hers): the billboard keeps X_t with the
user. All arrays carry the runs axis first; runs stack (one user per plan in every run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privbandit.families.glm_bandits import learners as gl
from privbandit.families.glm_bandits import mechanisms as mech
from privbandit.families.glm_bandits.world import GLMWorld
from privbandit.protocol.privacy import ApproxDP, NonPrivate, NoneProven, PrivacyEvent, ZCDP
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Round, Truth
from privbandit.protocol.spine.family import BlockAnswer, Spend
from privbandit.protocol.spine.observer import checkpoints_in

BODY_FIELDS = ("t", "theta_o", "v_inv", "threshold", "width_o", "theta", "h_inv", "beta")


@dataclass(frozen=True)
class Setup:
    """Everything public about one algorithm on one task (per-run constants from κ, κ*)."""

    kind: str
    d: int
    T: int
    link: str
    S: float
    epsilon: float
    delta: float
    zeta: float
    kappa: tuple[float, ...]
    kappa_star: tuple[float, ...]
    diagnostic: frozenset
    spec: gl.PrivateGLMSpec | None
    baseline: dict | None = None  # GLM-UCB's and GLOC's λ, width, defects and R

    def round(self, t: int) -> Round:
        # x (‖x‖ ≤ 1), r ∈ {0, 1}, the Criterion I flag ∈ {0, 1}: every entry in [−1, 1]
        return Round(t, "aggregator", "pass", expected=1, width=self.d + 2, integer=False, low=-1.0, high=1.0)

    def describe(self) -> dict:
        out = {"kind": self.kind, "epsilon": self.epsilon, "delta": self.delta, "zeta": self.zeta,
               "kappa": list(self.kappa), "kappa_star": list(self.kappa_star)}
        if self.spec is not None:
            s = self.spec
            out.update(optimizer=s.optimizer, ucb_theta=s.ucb_theta, tau_data=s.tau_data,
                       sgd_schedule=s.sgd_schedule, criterion2=s.criterion2, tree_query=s.tree_query,
                       constants=[c.asdict() for c in s.consts])
        if self.baseline is not None:
            out.update(baseline_lambda=self.baseline["lam"], baseline_width=self.baseline["width"],
                       code_defects=list(self.baseline["defects"]))
        if self.spec is not None and self.spec.tree_v is not None:
            out.update(tree_sigma_V=[c.sigma for c in s.tree_v], tree_sigma_H=[c.sigma for c in s.tree_h],
                       tree_rho=[v.rho + h.rho for v, h in zip(s.tree_v, s.tree_h)])
        return out


def setup(public: dict) -> Setup:
    a = public["algorithm"]
    kind, d, T, eps, delta, zeta = a["algorithm"], public["dim"], public["horizon"], a["epsilon"], public["delta"], \
        public["zeta"]
    S, R, link = public["norm"], public["reward_bound"], public["link"]
    kappa, kappa_star = tuple(public["kappa"]), tuple(public["kappa_star"])
    spec = None
    if kind == "rs-glinucb":
        spec = gl.rs_glinucb_spec(link, d, T, S, R, zeta, kappa, kappa_star, a.get("rs_code"), public["preset"],
                                  a["ucb_theta"], a["tau_data"])
    if kind == "private-glm":
        code = public["preset"] == "paper-code"
        consts = tuple((gl.paper_code_constants if code else gl.paper_constants)(d, T, eps, delta, zeta, R, S, k, ks)
                       for k, ks in zip(kappa, kappa_star))
        # The trees: (ε/3, δ/3) for both (the paper, Sec. 5.4 (i)), split evenly in ρ; the authors'
        # code gives each tree (ε/3, δ/3). Replace-one neighbours: a leaf moves by ≤ √2 in Frobenius
        # norm (the norm App. I.1's symmetric noise is private in) in V (two PSD matrices of Frobenius
        # norm ≤ 1) and by ≤ √2/κ* in H (weights clipped to 1/κ*).
        rho = mech.zcdp_rho(eps / 3, delta / 3)
        per_tree = rho if code else rho / 2
        buggy = a.get("tree_query", "correct") == "paper-code-buggy-tree"
        # the defective heap tree puts each leaf in ⌈log₂ T⌉ + 1 noisy nodes: calibrated for them
        levels = mech.buggy_tree_levels(T) if buggy else None
        tree_v = tuple(tree_calibration(per_tree, math.sqrt(2), T, d, levels, a) for _ in kappa)
        tree_h = tuple(tree_calibration(per_tree, math.sqrt(2) / ks, T, d, levels, a) for ks in kappa_star)
        spec = gl.PrivateGLMSpec(link, d, T, S, R, consts, kappa, kappa_star, tree_v, tree_h, a["optimizer"],
                                 "tiny" if code else "lambda-max", a["ucb_theta"], a["tau_data"], a["max_iterations"],
                                 mech.SGDSettings(epochs=a["sgd_epochs"], burn_in=a["sgd_burn_in"]),
                                 a.get("sgd_schedule", "fixed"), a.get("criterion2", "det-doubling"),
                                 a.get("tree_query", "correct"))
    baseline = None
    if kind in ("glm-ucb", "gloc"):
        lam, published = a["baseline_lambda"], a["baseline_width"] == "published"
        # GLM-UCB's penalty goes with the width: the authors' λ‖θ‖² (gradient 2λθ) with the published
        # one, ours (λ/2)‖θ‖² with ours (so that width "ours" at λ = 1 is the paper preset's GLM-UCB)
        baseline = {"lam": lam, "reg": 2 * lam if published else lam, "width": a["baseline_width"],
                    "defects": tuple(a.get("code_defects", ())), "reward_bound": R}
    return Setup(kind, d, T, link, S, eps, delta, zeta, kappa, kappa_star,
                 frozenset(int(c) for c in public["diagnostic"]), spec, baseline)


def tree_calibration(rho: float, sensitivity: float, T: int, d: int, levels: int | None, a: dict):
    """A tree's noise for ``rho``-zCDP at the replace-one ``sensitivity``; with ``tree_noise =
    "paper-code-add-remove-defect"`` (a DEFECT, only to measure it) σ is the repository's, calibrated
    at a leaf's add/remove sensitivity (1, and 1/κ* for H: √2 less; with the same App. I.1
    symmetrization, so the node noise is theirs exactly), while ρ stays computed at the replace-one
    sensitivity: the ledger then reads what such a tree really spends (2ρ)."""
    if a.get("tree_noise", "replace-one") == "replace-one":
        return mech.calibrate_tree(rho, sensitivity, T, d, levels)
    cal = mech.calibrate_tree(rho, sensitivity / math.sqrt(2), T, d, levels)
    return mech.TreeCalibration(cal.sigma, sensitivity, cal.levels, d)


def tree_event(s: Setup) -> PrivacyEvent:
    """The V and H trees' release per round: zCDP ρ_V + ρ_H (each user's leaf, parallel across users)."""
    v, h = s.spec.tree_v[0], s.spec.tree_h[0]
    return ZCDP(v.rho + h.rho)


def switching_event(s: Setup) -> PrivacyEvent:
    """The paper's (ε/3, δ/3) of Lemma 6.1 for the switching indicators, charged once."""
    return ApproxDP(s.epsilon / 3, s.delta / 3, "switching indicators: the paper's (ε/3, δ/3) of Lemma 6.1 "
                                                "(post-processing of the V tree here: a conservative charge)")


# What :func:`~.mechanisms.sgd_noise_multiplier` calibrates each call to (the ledger states no more).
SGD_BASIS = ("DP-SGD: dp-accounting RDP, replace-one, per order the smaller of the sampled-without-replacement "
             "curve (Wang–Balle–Kasiviswanathan 2019 Thm 27) and the unamplified Gaussian's (steps·α/(2z²)); "
             "exact discrete Gaussian on a grid")


def dp_sgd_event(s: Setup, part: str) -> PrivacyEvent:
    """One DP-SGD call of optimizer ``part`` ("o": θ̂_o, "tau": θ̂_τ): the largest per-call budget of the
    stacked runs (their κ may differ)."""
    eps = max(c.eps_o if part == "o" else c.eps_tau for c in s.spec.consts)
    delta = max(c.delta_o if part == "o" else c.delta_tau for c in s.spec.consts)
    return ApproxDP(eps, delta, SGD_BASIS)


def optimizer_spends(recorded: dict, count1: np.ndarray, count2: np.ndarray, event) -> list[Spend]:
    """The spends of the optimizer calls each run made since ``recorded`` (per part, per run; updated
    in place): one ``event(part, run)`` per call, in lane ``optimizer``, group = the run."""
    out = []
    for part, counts in (("o", count1), ("tau", count2)):
        for run in np.flatnonzero(counts > recorded[part]):
            out += [Spend(event(part, int(run)), "optimizer", int(run))] * int(counts[run] - recorded[part][run])
            recorded[part][run] = counts[run]
    return out


def record_private_glm(s: Setup, ledger, count1, count2) -> None:
    """Record into ``ledger`` what a Private-GLM task with DP-SGD declares once its runs made
    ``count1`` θ̂_o and ``count2`` θ̂_τ calls (per run): the events :class:`GLMServer` declares, in the
    same lanes and groups, without running it. This is how a nominal ε is solved for a target
    guarantee (experiments/reproduce_glm.py, equal guarantees); 𝒫_GD's events depend on the calls'
    sizes and are not covered."""
    if s.kind != "private-glm" or s.spec.optimizer != "dp-sgd":
        raise ValueError(f"record_private_glm covers private-glm with dp-sgd (got {s.kind}, "
                         f"{getattr(s.spec, 'optimizer', None)})")
    ledger.record(tree_event(s), "trees", None, 1)
    ledger.record(switching_event(s), "switching", "all", 0)
    c1, c2 = np.atleast_1d(np.asarray(count1, dtype=np.int64)), np.atleast_1d(np.asarray(count2, dtype=np.int64))
    recorded = {"o": np.zeros(c1.size, dtype=np.int64), "tau": np.zeros(c2.size, dtype=np.int64)}
    for spend in optimizer_spends(recorded, c1, c2, lambda part, run: dp_sgd_event(s, part)):
        ledger.record(spend.event, spend.lane, spend.group, 0)


class GLMServer:
    """The trusted analyzer's logic of one task (R runs)."""

    def __init__(self, s: Setup, keys: list[int]):
        self.s = s
        self.runs = len(keys)
        k, ks = np.array(s.kappa), np.array(s.kappa_star)
        if s.kind in ("private-glm", "rs-glinucb"):
            self.learner = gl.PrivateGLM(s.spec, keys)
        elif s.kind == "glm-ucb":
            b = s.baseline
            self.learner = gl.GLMUCB(s.link, s.d, s.T, self.runs, k, ks, s.zeta, b["lam"], b["reg"],
                                     "filippi" if b["width"] == "published" else "ours", b["reward_bound"])
        elif s.kind == "ecolog":
            self.learner = gl.ECOLog(s.link, s.d, self.runs, s.S, s.zeta)
        else:
            b = s.baseline
            self.learner = gl.GLOC(s.link, s.d, s.T, self.runs, k, s.S, s.zeta, b["lam"],
                                   "jun" if b["width"] == "published" else "ours", b["defects"], b["reward_bound"])
        self.planned = 0
        self.open: int | None = None
        self.pending_calls: list = []
        self.switching_charged = False
        self.recorded = {"o": np.zeros(self.runs, dtype=np.int64), "tau": np.zeros(self.runs, dtype=np.int64)}

    @property
    def done(self) -> bool:
        return self.planned >= self.s.T

    def plans(self) -> list[Plan]:
        if self.open is not None or self.done:
            return []
        t = self.planned
        if self.s.spec is not None:
            body, self.pending_calls = self.learner.broadcast()
        else:
            body = self.learner.broadcast()
        self.open = t
        self.planned += 1
        return [Plan(t, t, 1, body, (self.s.round(t),), (Join(t, t, 1, 1),))]

    def on_release(self, rnd: Round, release: Release) -> tuple[dict, list[Spend]]:
        if rnd.id != self.open:
            raise ProtocolError("unknown-round", f"round {rnd.id} is not the open round {self.open}")
        v = release.values[:, 0, :]
        d = self.s.d
        x, r, flag = v[:, :d], v[:, d], v[:, d + 1]
        # (comparisons, not np.isin: the same test at a tenth of its cost, once per user)
        if not (((r == 0.0) | (r == 1.0)).all() and ((flag == 0.0) | (flag == 1.0)).all()):
            raise ProtocolError("out-of-range", f"round {rnd.id}: a reward or flag not in {{0, 1}}")
        if (np.sqrt(np.add.reduce(x * x, axis=1)) > 1 + 1e-9).any():  # np.linalg.norm(x, axis=1)'s own arithmetic
            raise ProtocolError("out-of-range", f"round {rnd.id}: an arm outside the unit ball")
        # decided: the release is usable; state changes from here
        body = {"t": rnd.id + 1}
        if self.s.kind == "rs-glinucb":
            self.learner.update(x, r, flag.astype(bool))
            spends = [Spend(NonPrivate(), "round")]
        elif self.s.kind != "private-glm":
            self.learner.update(x, r)
            spends = [Spend(NonPrivate(), "round")]
        else:
            calls = self.pending_calls + self.learner.update(x, r, flag.astype(bool))
            self.pending_calls = []
            spends = [Spend(self.tree_event(), "trees")]
            if not self.switching_charged:
                spends.append(Spend(switching_event(self.s), "switching", "all"))
                self.switching_charged = True
            spends += optimizer_spends(self.recorded, self.learner.count1, self.learner.count2,
                                       lambda part, run: self.optimizer_event(
                                           part, [n for i, p, n in calls if p == part and i == run]))
        if rnd.id + 1 in self.s.diagnostic and self.s.spec is not None:
            lr = self.learner
            body.update(theta_o=lr.theta_o.copy(), theta_tau=lr.theta_tau.copy(),
                        count1=lr.count1.copy(), count2=lr.count2.copy(),
                        explored=lr.explored[:, : lr.t].sum(axis=1).astype(np.int64))
        elif rnd.id + 1 in self.s.diagnostic:
            body.update(theta=self.learner.theta.copy())
        self.open = None
        return body, spends

    def tree_event(self) -> PrivacyEvent:
        return tree_event(self.s)

    def optimizer_event(self, part: str, sizes: list[int]) -> PrivacyEvent:
        """One optimizer call's event: the largest per-call budget of the stacked runs (their κ may
        differ), for the sizes of one run's calls this round (P_Vec's range check needs n)."""
        s = self.s.spec
        eps = max(c.eps_o if part == "o" else c.eps_tau for c in s.consts)
        delta = max(c.delta_o if part == "o" else c.delta_tau for c in s.consts)
        if s.optimizer == "pgd-pvec":
            for n in sizes:
                for c in s.consts:
                    plan = self.learner.pgd_plan(n, eps, delta, c.lam_max)
                    if plan.eps_iter > 15 or plan.delta_iter >= 0.5:
                        return NoneProven(f"P_Vec per iteration at ε = {plan.eps_iter:.3g} > 15 (Lemma S.1's range)")
            return ApproxDP(eps, delta, "𝒫_GD: P_Vec per iteration (Cheu et al. Thm 4.2) and advanced "
                                        "composition over T_it (Lemma T.2)")
        return dp_sgd_event(self.s, part)

    def summary(self) -> list[dict]:
        if self.s.spec is not None or self.s.kind == "ecolog":
            return self.learner.summary()
        return [{} for _ in range(self.runs)]


class GLMUsers:
    """The users of R runs stacked: their worlds, and each plan's one user acting on it."""

    def __init__(self, s: Setup, world: GLMWorld, checkpoints: np.ndarray):
        self.s = s
        self.world = world
        self.best = world.best  # (R, T)
        self.ridx = np.arange(world.arms.shape[0])
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)

    def shard(self, plan: Plan, block: int, shards: int) -> int:
        return plan.id % shards

    def act(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None) -> BlockAnswer:
        b = plan.body
        t = first
        R, d = self.ridx.size, self.s.d
        theta = np.asarray(b["theta"])
        if theta.shape != (R, d):
            raise ValueError(f"plan {plan.id}: θ {theta.shape} does not fit {R} runs in d = {d}")
        arms = self.world.arms[:, t]
        a, explored = gl.choose(arms, np.asarray(b["theta_o"]), np.asarray(b["v_inv"]), np.asarray(b["threshold"]),
                                np.asarray(b["width_o"]), theta, np.asarray(b["h_inv"]), np.asarray(b["beta"]),
                                self.s.link if b.get("reward_index") else None)
        mean = self.world.means[self.ridx, t, a]
        u = self.world.uniforms[:, t]
        y = (u < mean).astype(np.float64)
        gap = self.best[:, t] - mean
        realized = (u < self.best[:, t]).astype(np.float64) - y
        at = checkpoints_in(self.checkpoints, first, size) - first - 1
        pseudo = gap[:, None]
        extras = {}
        if t + 1 in self.s.diagnostic:
            extras = {"theta_star": self.world.theta.copy()}
        truth = Truth(plan.id, block, first, size, pseudo=gap, realized=realized,
                      pseudo_at=pseudo[:, at], realized_at=realized[:, None][:, at], extras=extras)
        reports = []
        if stay is None or stay[0]:
            values = np.concatenate([arms[self.ridx, a], y[:, None], explored[:, None].astype(np.float64)], axis=1)
            reports.append((plan.joins[0].round_id, np.array([0]), values[:, None, :], None))
        return BlockAnswer(truth, reports)
