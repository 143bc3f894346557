"""The GLM family's learners: Private-GLM (Algorithm 2, joint DP) and the non-private baselines.

The analyzer (:class:`PrivateGLM`, :class:`GLMUCB`, :class:`GLOC`, :class:`ECOLog`) keeps its statistics
over R runs stacked and publishes, before every round, the billboard every user acts on (:func:`choose`):

- Private-GLM: V_t (the V tree's prefix + λI), θ̂_o, and (θ̂_τ, H_τ) from the last switch;
- the baselines: their θ̂, V⁻¹ and confidence width (ECOLog's with ``reward_index``: it ranks arms
  by μ(⟨x, θ̂⟩) + width, not ⟨x, θ̂⟩ + width).

:func:`choose` is Algorithm 2 lines 4–15 on the user's side: Criterion I (explore the arm of largest
‖x‖_{V⁻¹} when max ‖x‖²_{V⁻¹} ≥ threshold), else gap-based elimination with UCB_o/LCB_o (eqs.
16–17) and the optimistic arm of UCB(x, H_τ, θ̂_τ) (eq. 18). The baselines use the same function
with no Criterion I and no elimination. Every quantity it reads is released (post-processing), so
the actions given to other users are functions of the privatized billboard only (the Billboard
lemma behind JDP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from privbandit.families.glm_bandits import mechanisms as mech
from privbandit.families.glm_bandits.kernels import newton_sums
from privbandit.families.glm_bandits.world import mu, mu_dot, mu_dot_max
from privbandit.protocol.primitives.seeding import stream


def choose(arms: np.ndarray, theta_o: np.ndarray, v_inv: np.ndarray, threshold: np.ndarray, width_o: np.ndarray,
           theta: np.ndarray, h_inv: np.ndarray, beta: np.ndarray, link: str | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Each run's arm (R,) and whether Criterion I fired (R,): ``arms`` (R, K, d), θ's (R, d),
    inverses (R, d, d), scalars (R,). ``threshold`` inf disables Criterion I; ``width_o`` inf
    disables the elimination. The optimistic index is ⟨x, θ⟩ + β‖x‖_{H⁻¹}, or, with ``link``, the
    reward-scale μ(⟨x, θ⟩) + β‖x‖_{H⁻¹} (ECOLog's)."""
    nv = np.sqrt(np.maximum(np.einsum("rkd,rde,rke->rk", arms, v_inv, arms), 0.0))
    explore = (nv**2).max(axis=1) >= threshold
    # Once per user: what a baseline's billboard makes moot is not computed (the same arms, bit for
    # bit): no elimination when every width_o is inf, ‖x‖_{H⁻¹} = ‖x‖_{V⁻¹} when H⁻¹ is V⁻¹'s array.
    finite = np.isfinite(width_o)
    if finite.any():
        lin_o = np.einsum("rkd,rd->rk", arms, theta_o)
        with np.errstate(invalid="ignore"):
            ucb_o = lin_o + width_o[:, None] * nv
            lcb_o = lin_o - width_o[:, None] * nv
        keep = ~finite[:, None] | (ucb_o >= lcb_o.max(axis=1, keepdims=True))
    else:
        keep = None
    nh = nv if h_inv is v_inv else np.sqrt(np.maximum(np.einsum("rkd,rde,rke->rk", arms, h_inv, arms), 0.0))
    lin = np.einsum("rkd,rd->rk", arms, theta)
    ucb = (lin if link is None else mu(link, lin)) + beta[:, None] * nh
    exploit = (ucb if keep is None else np.where(keep, ucb, -np.inf)).argmax(axis=1)
    return np.where(explore, nv.argmax(axis=1), exploit), explore


def safe_inverse(m: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """(M⁺)⁻¹ of symmetric matrices whose eigenvalues are clipped to ≥ ``floor`` (the authors'
    PSD projection), and how many eigenvalues were clipped per run (a PSD diagnostic)."""
    w, q = np.linalg.eigh(m)
    clipped = (w < floor).sum(axis=-1)
    w = np.maximum(w, floor)
    return np.einsum("...ij,...j,...kj->...ik", q, 1.0 / w, q), clipped


def logdet(m: np.ndarray, floor: float) -> np.ndarray:
    w = np.linalg.eigvalsh(m)
    return np.log(np.maximum(w, floor)).sum(axis=-1)


# --- Private-GLM's constants (Sec. 6.1 eqs. 19–21; the authors' code, spec §9.2) -------------

@dataclass(frozen=True)
class GLMConstants:
    """One run's constants of Algorithm 2."""

    lam: float
    lam_min: float
    lam_max: float
    gamma: float
    beta: float
    threshold: float  # Criterion I: ‖x‖²_{V⁻¹} ≥ threshold
    count1_cutoff: int
    count2_cutoff: int
    eps_o: float
    delta_o: float
    eps_tau: float
    delta_tau: float

    def asdict(self) -> dict:
        return dict(self.__dict__)


def paper_constants(d: int, T: int, eps: float, delta: float, zeta: float, R: float, S: float, kappa: float,
                    kappa_star: float, C: float = 1.0, c: float = 1.0) -> GLMConstants:
    """Eqs. (19)–(21) with the unspecified universal constants C = c = 1, λ_min/λ_max's ratios,
    the cutoffs and the optimizers' per-call budgets of Sec. 6.1 (θ̂_τ's from count2, spec §12 item 14)."""
    sd, L = math.sqrt(d), math.log(T)
    lam = 64 * (4 * sd + 1) * math.log(32 / delta) * L * (math.log(16 * T / zeta) + sd) / (eps * kappa_star)
    beta = C * R * S * sd * math.log(T / zeta) * math.log(1 / delta) / math.sqrt(eps * kappa_star)
    gamma = c * R**5 * S**4 * d * math.log(T * d / zeta) ** 2 * math.log(32 / delta) / (min(eps, 1) * kappa_star**2)
    lam_min, lam_max = lam * 4 * sd / (4 * sd + 1), lam * (4 * sd + 2) / (4 * sd + 1)
    c1 = max(1, math.ceil(8 * d * R**2 * kappa * gamma**2 * L))
    c2 = max(1, math.ceil(math.log2(lam_max / lam_min + (T / kappa_star**2) / (lam_min * d))))
    return GLMConstants(lam, lam_min, lam_max, gamma, beta, 1 / (gamma**2 * kappa * R**2), c1, c2,
                        eps / (6 * math.sqrt(2 * c1 * math.log(4 / delta))), delta / (6 * c1),
                        eps / (6 * math.sqrt(2 * c2 * math.log(4 / delta))), delta / (6 * c2))


def paper_code_constants(d: int, T: int, eps: float, delta: float, zeta: float, R: float, S: float, kappa: float,
                         kappa_star: float) -> GLMConstants:
    """The authors' code's constants (spec §9.2): λ, λ_max/min, γ, β, the Criterion I threshold
    1/(0.01κR⁴S²d), the rescaled cutoffs (count2 ×3 as in their HEAD), and each optimizer part
    (ε/3, δ/3) spread over its cutoff by their ``per_step_budget_auto``."""
    a = math.log(4 * T / zeta)
    noise = 1.5 * math.log(4 / delta) * a**2 / (eps * kappa_star)
    lam = 2 * math.log(4 / delta) * a**2 / (eps * kappa_star) + 0.75 * d * a / R**2
    gamma = R * S * math.sqrt(d * math.log(T / zeta))
    beta = 4 * math.sqrt(d * math.log(T / zeta))
    lam_min, lam_max = lam - noise, lam + noise
    c1 = max(1, int(d * R**2 * kappa * gamma**2 * math.log(T) / 20000))
    c2 = max(1, 3 * int(math.log2(lam_max / lam_min + T / (kappa_star**2 * lam_min * d))))
    eo, do = mech.per_call_budget(eps / 3, delta / 3, c1)
    et, dt = mech.per_call_budget(eps / 3, delta / 3, c2)
    return GLMConstants(lam, lam_min, lam_max, gamma, beta, 1 / (0.01 * kappa * R**4 * S**2 * d), c1, c2,
                        eo, do, et, dt)


# --- Private-GLM (Algorithm 2) ------------------------------------------------------------------

@dataclass(frozen=True)
class PrivateGLMSpec:
    """Everything public about Private-GLM on one task (per-run constants: κ and κ* are per run)."""

    link: str
    d: int
    T: int
    S: float
    R: float
    consts: tuple[GLMConstants, ...]
    kappa: tuple[float, ...]
    kappa_star: tuple[float, ...]
    tree_v: tuple[mech.TreeCalibration, ...] | None  # None: exact sums (RS-GLinUCB)
    tree_h: tuple[mech.TreeCalibration, ...] | None
    optimizer: str              # "pgd-pvec" (the paper) | "dp-sgd" (the authors' code) | "mle" (non-private)
    opt_reg: str                # "lambda-max" (the paper) | "tiny" (the authors' 1e-5)
    ucb_theta: str              # "tau" (eq. 18) | "average" ((θ̂_o + θ̂_τ)/2, the authors' code)
    tau_data: str               # "unexplored" ([t−1] \ T_o, the paper) | "all" (the authors' code)
    max_iterations: int
    sgd: mech.SGDSettings
    # The authors' HEAD, for the Figure 1 gap (docs/glm-bandits.md): its DP-SGD schedule ("head":
    # epochs by the per-call ε₀, warm start at (θ̂_o + θ̂_τ)/2), its Criterion II ("psd-dominance"),
    # and, a defect of their initial commit, its tree query ("paper-code-buggy-tree").
    sgd_schedule: str = "fixed"
    criterion2: str = "det-doubling"
    tree_query: str = "correct"
    rs: "RSSettings | None" = None  # RS-GLinUCB (optimizer "mle") only: its switches


def head_epochs(eps0: float) -> int:
    """The authors' HEAD starts DP-SGD with 15, 25, 50, 75 or 100 epochs as the call's ε₀ is ≤ 0.1,
    ≤ 0.3, ≤ 1, ≤ 2 or above (public: ε₀ is a constant of the run)."""
    for bound, epochs in ((0.1, 15), (0.3, 25), (1.0, 50), (2.0, 75)):
        if eps0 <= bound:
            return epochs
    return 100


def psd_growth(h_prev_inv: np.ndarray, h: np.ndarray) -> np.ndarray:
    """λ_max(H_prev^{−1/2} H H_prev^{−1/2}) per run: how far H has grown past H_prev in its most-grown
    direction (the authors' HEAD's Criterion II, with H_prev⁻¹ the released, eigenvalue-floored inverse)."""
    w, q = np.linalg.eigh(h_prev_inv)
    half = np.einsum("rij,rj,rkj->rik", q, np.sqrt(np.maximum(w, 0.0)), q)
    return np.linalg.eigvalsh(half @ h @ half)[:, -1]


class PrivateGLM:
    """Algorithm 2's server over R runs: the two trees, T_o, the counts, θ̂_o, θ̂_τ, H_τ."""

    def __init__(self, s: PrivateGLMSpec, keys: list[int]):
        self.s = s
        R, d, T = len(keys), s.d, s.T
        self.R = R
        self.keys = keys
        buggy = s.tree_query == "paper-code-buggy-tree"
        self.tree_v = _tree(s.tree_v, T, [stream(k, "glm-tree-V") for k in keys], buggy) or ExactSums(R, d)
        self.tree_h = _tree(s.tree_h, T, [stream(k, "glm-tree-H") for k in keys], buggy) or ExactSums(R, d)
        c = s.consts
        self.lam = np.array([x.lam for x in c])
        self.gamma_sqrt_kappa = np.array([x.gamma * math.sqrt(k) for x, k in zip(c, s.kappa)])
        self.beta = np.array([x.beta for x in c])
        self.threshold = np.array([x.threshold for x in c])
        self.weight_cap = np.array([1.0 / ks for ks in s.kappa_star])
        self.x = np.zeros((R, T, d))
        self.r = np.zeros((R, T))
        self.explored = np.zeros((R, T), dtype=bool)
        self.t = 0  # rounds served
        eye = np.eye(d)
        self.theta_o = np.zeros((R, d))
        self.theta_tau = np.zeros((R, d))
        self.h_tau_inv = np.broadcast_to(eye, (R, d, d)) / self.lam[:, None, None]
        self.maxdet_all = d * np.log(self.lam)  # log det(λI): Criterion II's start (spec §12 item 24)
        self.maxdet_tau = self.maxdet_all.copy()
        self.count1 = np.zeros(R, dtype=np.int64)
        self.count2 = np.zeros(R, dtype=np.int64)
        self.switches: list[list[int]] = [[] for _ in range(R)]
        self.psd_clipped = np.zeros(R, dtype=np.int64)
        self.skipped = np.zeros(R, dtype=np.int64)
        self.v_inv = None
        self._v_bits = self._h_bits = None  # the last V and H queried, and their inverse and log det
        self._v_inverse = self._h_logdet = None
        self.optimizer_calls: list[tuple[int, str, int]] = []  # (run, "o"|"tau", n) of the last update

    def _matrices(self) -> tuple[np.ndarray, np.ndarray]:
        eye = np.eye(self.s.d)
        lam = self.lam[:, None, None]
        return self.tree_v.prefix() + lam * eye, self.tree_h.prefix() + lam * eye

    def broadcast(self) -> tuple[dict, list[tuple[int, str, int]]]:
        """Before round t + 1: query V and H (lines 2), Criterion II (lines 11–12), the billboard.
        Returns the body and the optimizer calls Criterion II made (their privacy events)."""
        s, t = self.s, self.t
        V, H = self._matrices()
        floor = 1e-12
        # V (H) the same bits as at the last query: the same inverse (log det). RS-GLinUCB's exact sums
        # change V only on Criterion I's rounds and H only on the others: one eigh a round, not two.
        if (v_bits := V.tobytes()) != self._v_bits:
            self._v_bits, self._v_inverse = v_bits, safe_inverse(V, floor)
        if (h_bits := H.tobytes()) != self._h_bits:
            self._h_bits, self._h_logdet = h_bits, logdet(H, floor)
        self.v_inv, clipped_v = self._v_inverse
        self.psd_clipped += clipped_v
        self.maxdet_all = np.maximum(self.maxdet_all, self._h_logdet)
        calls = []
        rs = s.rs
        if s.criterion2 == "psd-dominance":
            grown = psd_growth(self.h_tau_inv, H) > 1 + 5 / (8 * math.sqrt(s.d)) + 0.05
        else:
            grown = self.maxdet_all > np.log(2.0 if rs is None else rs.switch_factor) + self.maxdet_tau
        switch = grown & (self.count2 < np.array([c.count2_cutoff for c in s.consts]))
        if rs is not None and "rs-frozen-h" in rs.defects:
            # the defect: after its first switch H_τ *is* the live H, so det H_t = det H_τ from then on
            frozen = self.count2 > 0
            switch &= ~frozen
            if frozen.any():
                self.h_tau_inv = np.where(frozen[:, None, None], safe_inverse(H, floor)[0], self.h_tau_inv)
        for i in np.flatnonzero(switch):
            mask = np.ones(t, dtype=bool) if s.tau_data == "all" else ~self.explored[i, :t]
            if not mask.any():
                continue
            c = s.consts[i]
            theta = self._optimize(i, self.x[i, :t][mask], self.r[i, :t][mask], c.eps_tau, c.delta_tau, c.lam_max,
                                   ("tau", t))
            if theta is None:
                continue
            self.theta_tau[i] = theta
            h_inv, clipped = safe_inverse(H[i], floor)
            self.psd_clipped[i] += clipped
            self.h_tau_inv = self.h_tau_inv.copy()
            self.h_tau_inv[i] = h_inv
            self.maxdet_tau[i] = self.maxdet_all[i]
            self.count2[i] += 1
            self.switches[i].append(t + 1)
            calls.append((int(i), "tau", int(mask.sum())))
        theta = self.theta_tau if s.ucb_theta == "tau" else (self.theta_o + self.theta_tau) / 2
        body = {"t": t + 1, "theta_o": self.theta_o.copy(), "v_inv": self.v_inv, "threshold": self.threshold,
                "width_o": self.gamma_sqrt_kappa, "theta": theta.copy(), "h_inv": np.ascontiguousarray(self.h_tau_inv),
                "beta": self.beta}
        return body, calls

    def update(self, x: np.ndarray, r: np.ndarray, explored: np.ndarray) -> list[tuple[int, str, int]]:
        """Round t's raw (x_t, r_t, Criterion I fired) per run: the trees' leaves (Private-
        UpdateExplore / Exploit) and θ̂_o on T_o while count1 < cutoff (line 8). Returns the
        optimizer calls made."""
        s, t = self.s, self.t
        self.x[:, t], self.r[:, t], self.explored[:, t] = x, r, explored
        outer = x[:, :, None] * x[:, None, :]
        w = np.minimum(mu_dot(s.link, np.einsum("rd,rd->r", x, self.theta_o)) / math.e, self.weight_cap)
        leaf_v = outer
        if s.rs is not None and "rs-v-leaf" in s.rs.defects:
            # the defect: Sherman–Morrison's denominator kept on V itself, V += xxᵀ/(1 + ‖x‖²_{V⁻¹})
            leaf_v = outer / (1.0 + np.einsum("rd,rde,re->r", x, self.v_inv, x))[:, None, None]
        self.tree_v.insert(np.where(explored[:, None, None], leaf_v, 0.0))
        self.tree_h.insert(np.where(explored[:, None, None], 0.0, w[:, None, None] * outer))
        self.t += 1
        calls = []
        cut1 = np.array([c.count1_cutoff for c in s.consts])
        for i in np.flatnonzero(explored & (self.count1 < cut1)):
            mask = self.explored[i, : t + 1]
            c = s.consts[i]
            theta = self._optimize(i, self.x[i, : t + 1][mask], self.r[i, : t + 1][mask], c.eps_o, c.delta_o,
                                   c.lam_max, ("o", t + 1))
            if theta is None:
                continue
            self.theta_o[i] = theta
            self.count1[i] += 1
            calls.append((int(i), "o", int(mask.sum())))
        return calls

    def _optimize(self, i: int, x: np.ndarray, r: np.ndarray, eps: float, delta: float, lam_max: float,
                  tag: tuple) -> np.ndarray:
        s = self.s
        rng = stream(self.keys[i], "glm-optimizer", *tag)
        reg = lam_max if s.opt_reg == "lambda-max" else 1e-5 * len(r)
        if s.optimizer == "mle":  # RS-GLinUCB: the exact regularized MLE (on the S-ball unless switched off)
            rs = s.rs or RSSettings()
            reg, radius = lam_max if rs.reg is None else rs.reg, s.S if rs.project else math.inf
            if "rs-lbfgs" not in rs.defects:
                return mle(s.link, x, r, reg, radius)
            # the defect: their warm starts, and a failed solve keeps the old θ̂ (the call still counts)
            old = self.theta_o[i] if tag[0] == "o" else self.theta_tau[i]
            start = (self.theta_o[i] + self.theta_tau[i]) / 2 if tag[0] == "o" else old
            theta, ok = lbfgs_defect_mle(s.link, x, r, reg / 2, start)
            return mech.project_ball(theta, radius) if ok else old.copy()
        if s.optimizer == "pgd-pvec":
            plan = self.pgd_plan(len(r), eps, delta, lam_max)
            if (plan.vec.g + plan.vec.b) * len(r) >= 2**62:
                # P_Vec's count totals would overflow int64 (eq. (127)'s b grows as 1/ε_it²; the
                # paper's constants reach b > 10¹⁸). Not simulated: θ̂ keeps its value, nothing is
                # released, nothing is charged, and the summary counts the call as skipped.
                self.skipped[i] += 1
                return None
            return mech.projected_gd_pvec(s.link, x, r, reg, s.S, plan, rng)
        sgd, start = s.sgd, None
        if s.sgd_schedule == "head":
            sgd = replace(s.sgd, epochs=head_epochs(eps))
            start = (self.theta_o[i] + self.theta_tau[i]) / 2  # released: post-processing
        theta, _ = mech.dp_sgd(s.link, x, r, reg, s.S, eps, delta, sgd, rng, start)
        return theta

    def pgd_plan(self, n: int, eps: float, delta: float, lam_max: float) -> mech.PGDPlan:
        # L = R + S·λ_max/n: the per-sample gradient's bound plus the regularizer's (spec §12 item 6)
        return mech.pgd_plan(n, self.s.d, eps, delta, self.s.S, self.s.R + self.s.S * lam_max / n,
                             self.s.max_iterations)

    def summary(self) -> list[dict]:
        return [{"explored": int(self.explored[i, : self.t].sum()), "count1": int(self.count1[i]),
                 "count2": int(self.count2[i]), "switches": len(self.switches[i]),
                 "count1_cutoff": self.s.consts[i].count1_cutoff, "count2_cutoff": self.s.consts[i].count2_cutoff,
                 "psd_clipped_eigenvalues": int(self.psd_clipped[i]), "optimizer_skipped": int(self.skipped[i])} for i in range(self.R)]


class ExactSums:
    """The non-private counterpart of a tree (RS-GLinUCB): exact prefix sums of the leaves."""

    def __init__(self, R: int, d: int):
        self.total = np.zeros((R, d, d))

    def insert(self, leaves: np.ndarray) -> None:
        self.total = self.total + leaves

    def prefix(self) -> np.ndarray:
        return self.total.copy()

    def true_prefix(self) -> np.ndarray:
        return self.total.copy()


def _tree(cals, T: int, rngs, buggy: bool = False):
    """One tree for R runs; its σ must be the same across the stacked runs (one noise law).
    ``cals`` None: no noise (RS-GLinUCB's exact sums). ``buggy``: the authors' initial commit's
    defective query (:class:`~.mechanisms.BuggyHeapTreeDefect`), only to measure it."""
    if cals is None:
        return None
    kind = mech.BuggyHeapTreeDefect if buggy else mech.GridGaussianTree
    if len({c.sigma for c in cals}) != 1:
        trees = [kind(c, T, [g]) for c, g in zip(cals, rngs)]
        return _StackedTrees(trees)
    return kind(cals[0], T, rngs)


class _StackedTrees:
    """Runs whose trees differ in σ (κ* differs per run): one tree each, released stacked."""

    def __init__(self, trees):
        self.trees = trees

    def insert(self, leaves: np.ndarray) -> None:
        for i, tr in enumerate(self.trees):
            tr.insert(leaves[i : i + 1])

    def prefix(self) -> np.ndarray:
        return np.concatenate([tr.prefix() for tr in self.trees])


# --- non-private baselines -------------------------------------------------------------------------

# The authors' GLOC (repository HEAD and initial commit, inherited from Faury et al.'s criteo code)
# departs from Jun et al. 2017 in five places; each is a DEFECT, reproduced only to measure it
# (``code_defects``; docs/glm-bandits.md, "Table 2"): never a default, in no preset.
GLOC_DEFECTS = (
    "gloc-sphere-projection",  # the ONS step rescaled onto the sphere ‖θ‖ = S, not projected on the ball
    "gloc-ons-centre",         # the index centred at the ONS iterate θ_t, not at the ridge centre θ̂_t
    "gloc-reward-scale",       # the index μ(⟨x, θ⟩) + √γ‖x‖_{V⁻¹}: a linear-scale width on the reward scale
    "gloc-l2-noise",           # L² = (sup μ̇)² in the place of the noise's sub-Gaussian R in β_t
    "gloc-radius-terms",       # γ_t without λS² − (‖z‖² − θ̂ᵀXᵀz)
)


class GLMUCB:
    """GLM-UCB (Filippi et al. 2010), non-private: the regularized quasi-likelihood estimate (the root
    of Σ(μ(⟨x_s, θ⟩) − r_s)x_s + reg·θ = 0, Newton steps warm-started each round), V_t = λI + Σx_sx_sᵀ.
    ``width``:

    - ``"filippi"`` (Filippi et al. Algorithm 1 / Thm 1, the authors' constants): the reward-scale index
      μ(⟨x, θ̂⟩) + ρ(t)‖x‖_{V⁻¹} with ρ(t) = 2k_μκ_FRκ·√(2d·log t·log(2dT/ζ)), k_μ = sup μ̇ (the link's
      Lipschitz constant: ρ bounds |μ(⟨x, θ̂⟩) − μ(⟨x, θ*⟩)|), κ_F = √(3 + 2log(1 + 2M²/λ)) (M = 1,
      λ the design's smallest eigenvalue at the start), c_μ = 1/κ, R the reward bound;
    - ``"ours"`` (preset ``paper``): the linear-scale index ⟨x, θ̂⟩ + κ·(1/κ*)·√(2d·log(t + 1)·
      log(2dT/ζ))‖x‖_{V⁻¹}: Filippi's ρ without 2κ_FR (about 4× narrower at λ = d = 3) and, with its
      k_μ (1/κ*, the largest μ̇ offered) still in, read on the linear scale (narrower again by ≈ μ̇)."""

    def __init__(self, link: str, d: int, T: int, R: int, kappa: np.ndarray, kappa_star: np.ndarray, zeta: float,
                 lam: float = 1.0, reg: float | None = None, width: str = "ours", reward_bound: float = 1.0):
        self.link, self.d, self.T = link, d, T
        self.x = np.zeros((R, T, d))
        self.r = np.zeros((R, T))
        self.t = 0
        self.lam = lam
        self.reg = lam if reg is None else reg
        self.V = np.broadcast_to(lam * np.eye(d), (R, d, d)).copy()
        self.theta = np.zeros((R, d))
        root = math.sqrt(2 * d * math.log(2 * d * T / zeta))
        self.reward_index = width == "filippi"
        if width == "filippi":
            kappa_f = math.sqrt(3 + 2 * math.log(1 + 2 / lam))
            self.coef = 2 * mu_dot_max(link) * kappa_f * reward_bound * kappa * root
            self.shift = 1  # log t at round t = self.t + 1: no bonus in round 1
        elif width == "ours":
            self.coef = kappa / kappa_star * root
            self.shift = 2
        else:
            raise ValueError(f"GLM-UCB width {width!r} is not 'ours' or 'filippi'")

    def broadcast(self) -> dict:
        R = self.theta.shape[0]
        width = self.coef * math.sqrt(math.log(self.t + self.shift))
        v_inv = np.linalg.inv(self.V)
        theta, inf = self.theta.copy(), np.full(R, np.inf)  # one array where two fields are equal
        body = {"t": self.t + 1, "theta_o": theta, "v_inv": v_inv, "threshold": inf,
                "width_o": inf, "theta": theta, "h_inv": v_inv, "beta": width.copy()}
        if self.reward_index:
            body["reward_index"] = True
        return body

    def update(self, x: np.ndarray, r: np.ndarray) -> None:
        t = self.t
        self.x[:, t], self.r[:, t] = x, r
        self.V += x[:, :, None] * x[:, None, :]
        self.t += 1
        X, Y = self.x[:, : t + 1], self.r[:, : t + 1]
        for _ in range(2):  # Newton steps, warm-started from the last θ̂
            z = np.einsum("rtd,rd->rt", X, self.theta)
            # the gradient's and Hessian's sums over all t rows in one compiled pass, the einsums' bits
            grad, hess = newton_sums(mu(self.link, z) - Y, mu_dot(self.link, z), X)
            grad = grad + self.reg * self.theta
            hess = hess + self.reg * np.eye(self.d)
            self.theta = self.theta - np.linalg.solve(hess, grad[..., None])[..., 0]


class GLOC:
    """GLOC (Jun et al. 2017), non-private: online Newton steps θ_{t+1} = Π(θ_t − κ·A_t⁻¹∇ℓ_t(θ_t)) with
    A_t = λI + Σx_sx_sᵀ (Euclidean projection on the S-ball instead of the A_t-norm one: our
    simplification), the ridge regression θ̂_t = V_t⁻¹Σz_sx_s of the online predictions z_s = ⟨x_s, θ_s⟩
    (V_t = A_t) and the index ⟨x, θ̂_t⟩ + √γ_t‖x‖_{V_t⁻¹}. ``width``:

    - ``"jun"`` (their Thm 1 with the ONS bound of Thm 3, the authors' data-dependent B_t):
      γ_t = β_t + λS² − (‖z‖² − θ̂ᵀXᵀz), β_t = 1 + 4κB_t + 8R²κ²·log((2/ζ)√(1 + 2κB_t + 4R⁴κ⁴/ζ²)),
      B_t = 2λS²/κ + (κ/2)·Σ‖∇ℓ_s(θ_s)‖²_{A_s⁻¹} (Jun's κ is our 1/κ; R the reward bound);
    - ``"ours"`` (preset ``paper``): γ_t = 1 + 4κB_t + 8κ² log(√(4 + 8κB_t)/ζ) + λS² with the worst-case
      B_t = 2κd·log(1 + t/(dλ)).

    ``defects``: names from :data:`GLOC_DEFECTS` (the authors' code's departures, only to measure them)."""

    def __init__(self, link: str, d: int, T: int, R: int, kappa: np.ndarray, S: float, zeta: float, lam: float = 1.0,
                 width: str = "ours", defects: tuple[str, ...] = (), reward_bound: float = 1.0):
        if width not in ("ours", "jun"):
            raise ValueError(f"GLOC width {width!r} is not 'ours' or 'jun'")
        unknown = set(defects) - set(GLOC_DEFECTS)
        if unknown:
            raise ValueError(f"GLOC defects {sorted(unknown)} are not among {', '.join(GLOC_DEFECTS)}")
        self.link, self.d, self.S, self.zeta, self.lam = link, d, S, zeta, lam
        self.width, self.defects = width, frozenset(defects)
        self.noise = mu_dot_max(link) ** 2 if "gloc-l2-noise" in self.defects else reward_bound
        self.kappa = kappa
        self.A_inv = np.broadcast_to(np.eye(d) / lam, (R, d, d)).copy()
        self.V_inv = self.A_inv.copy()
        self.b = np.zeros((R, d))
        self.zz = np.zeros(R)  # ‖z‖²
        self.B = 2 * lam * S**2 / kappa  # the ONS bound's start (width "jun")
        self.theta_online = np.zeros((R, d))
        self.theta = np.zeros((R, d))
        self.t = 0

    def radius(self) -> np.ndarray:
        """√γ_t per run."""
        k, lam, S = self.kappa, self.lam, self.S
        if self.width == "ours":
            B = 2 * k * self.d * math.log(1 + self.t / (self.d * lam))
            return np.sqrt(1 + 4 * k * B + 8 * k**2 * np.log(np.sqrt(4 + 8 * k * B) / self.zeta) + lam * S**2)
        B, R = self.B, self.noise
        beta = 1 + 4 * k * B + 8 * R**2 * k**2 * np.log(2 / self.zeta * np.sqrt(1 + 2 * k * B + 4 * R**4 * k**4
                                                                               / self.zeta**2))
        if "gloc-radius-terms" not in self.defects:
            beta = beta + lam * S**2 - (self.zz - np.einsum("rd,rd->r", self.theta, self.b))
        return np.sqrt(np.maximum(beta, 0.0))

    def broadcast(self) -> dict:
        R = self.theta.shape[0]
        centre = (self.theta_online if "gloc-ons-centre" in self.defects else self.theta).copy()
        v_inv, inf = self.V_inv.copy(), np.full(R, np.inf)  # one array where two fields are equal
        body = {"t": self.t + 1, "theta_o": centre, "v_inv": v_inv, "threshold": inf, "width_o": inf,
                "theta": centre, "h_inv": v_inv, "beta": self.radius()}
        if "gloc-reward-scale" in self.defects:
            body["reward_index"] = True
        return body

    def update(self, x: np.ndarray, r: np.ndarray) -> None:
        z = np.einsum("rd,rd->r", x, self.theta_online)
        self.b += z[:, None] * x
        self.zz += z * z
        # A_t = V_t (both λI + Σxxᵀ): one Sherman–Morrison update serves both, the same bits as two
        self.V_inv = _sherman_morrison(self.V_inv, x)
        self.theta = np.einsum("rde,re->rd", self.V_inv, self.b)
        self.A_inv = self.V_inv
        g = (mu(self.link, z) - r)[:, None] * x
        self.B = self.B + self.kappa / 2 * np.einsum("rd,rde,re->r", g, self.A_inv, g)
        step = self.theta_online - self.kappa[:, None] * np.einsum("rde,re->rd", self.A_inv, g)
        norm = np.maximum(np.linalg.norm(step, axis=1, keepdims=True), 1e-300)
        scale = self.S / norm if "gloc-sphere-projection" in self.defects else np.minimum(1.0, self.S / norm)
        self.theta_online = step * scale
        self.t += 1


def _sherman_morrison(inv: np.ndarray, x: np.ndarray) -> np.ndarray:
    u = np.einsum("rde,re->rd", inv, x)
    return inv - u[:, :, None] * u[:, None, :] / (1 + np.einsum("rd,rd->r", x, u))[:, None, None]


def mle(link: str, x: np.ndarray, r: np.ndarray, lam: float, radius: float, steps: int = 20) -> np.ndarray:
    """argmin Σℓ(θ; x, r) + (λ/2)‖θ‖² by damped Newton steps, projected on the S-ball (non-private)."""
    d = x.shape[1]
    theta = np.zeros(d)
    for _ in range(steps):
        z = x @ theta
        grad = x.T @ (mu(link, z) - r) + lam * theta
        hess = (x * mu_dot(link, z)[:, None]).T @ x + lam * np.eye(d)
        step = np.linalg.solve(hess, grad)
        theta = mech.project_ball(theta - step, radius)
        if np.linalg.norm(step) < 1e-9:
            break
    return theta


# RS-GLinUCB in the authors' code (rs_glinucb.py, initial commit ab8fd16 and HEAD d9c93e1, itself from
# Sawarni et al.'s code) departs from privbandit's in these ingredients (docs/glm-bandits.md, "Table 2's
# RS-GLinUCB"). Their constants, which preset paper-code takes:
RS_CONSTANTS = (
    "rs-lambda-half",       # λ = 0.5 (Sawarni et al.'s code's), not 0.75·d·log(4T/ζ)/R²
    "rs-switch-1.5",        # Criterion II at det H_t ≥ 1.5·det H_τ (their doubling_constant 0.5), not 2
    "rs-tiny-regulariser",  # the MLEs' penalty 10⁻³‖θ‖² (initial commit; 10⁻⁵ at HEAD), not (λ/2)‖θ‖²
    "rs-unprojected",       # the MLEs not projected on the S-ball
)
# DEFECTS of their code, reproduced only to measure them: never a default, in no preset.
RS_DEFECTS = (
    "rs-v-leaf",    # V += xxᵀ/(1 + ‖x‖²_{V⁻¹}): Sherman–Morrison's denominator (Sawarni's code updates V⁻¹) put on V
    "rs-frozen-h",  # prev_H = curr_H aliases one array: one switch, then H_τ is the live H and θ̂_τ never moves
    "rs-lbfgs",     # the MLEs by L-BFGS-B with a gradient not the probit loss's, a failed solve kept silently
)
# Their HEAD's regulariser, 10⁻⁵‖θ‖² (the only change of RS-GLinUCB between their commits, under the
# driver's default switching), in the place of "rs-tiny-regulariser": only to reproduce that commit.
RS_HEAD = ("rs-head-regulariser",)
RS_CODE = RS_CONSTANTS + RS_HEAD + RS_DEFECTS


@dataclass(frozen=True)
class RSSettings:
    """RS-GLinUCB's switches (:data:`RS_CODE`): Criterion II's factor, the MLEs' ridge ``reg`` (the
    gradient's reg·θ; None: λ) and S-ball projection, and the defects switched on."""

    switch_factor: float = 2.0
    reg: float | None = None
    project: bool = True
    defects: frozenset = frozenset()


def lbfgs_defect_mle(link: str, x: np.ndarray, r: np.ndarray, c: float, start: np.ndarray) -> tuple[np.ndarray, bool]:
    """The authors' RS-GLinUCB estimator, a DEFECT reproduced only to measure it (``rs-lbfgs``): L-BFGS-B
    from ``start`` on −Σ[r log μ + (1 − r) log(1 − μ)] + c‖θ‖², the logs taken of μ as computed (−∞ once
    μ rounds to 0 or 1), given the gradient Xᵀ(μ − r) + 2cθ, which is that loss's gradient only for
    the logistic link. Returns the solver's θ and whether it reported success."""
    from scipy.optimize import minimize  # here: scipy costs every party start-up time

    def loss(theta):
        p = mu(link, x @ theta)
        with np.errstate(divide="ignore", invalid="ignore"):
            return -np.sum(r * np.log(p) + (1 - r) * np.log(1 - p)) + c * np.sum(theta * theta)

    def grad(theta):
        return x.T @ (mu(link, x @ theta) - r) + 2.0 * c * theta

    res = minimize(loss, np.asarray(start, dtype=np.float64), jac=grad, method="L-BFGS-B")
    return res.x, bool(res.success)


def rs_glinucb_constants(d: int, T: int, zeta: float, R: float, S: float, kappa: float,
                         lam: float | None = None) -> GLMConstants:
    """RS-GLinUCB (Sawarni et al. 2024), the non-private algorithm Algorithm 2 privatizes: the
    authors' code's γ, β and Criterion I bar (as in :func:`paper_code_constants`) and ``lam``, by default
    their Private-GLM's λ without its noise term, 0.75·d·log(4T/ζ)/R²; no cutoffs (nothing to budget)."""
    lam = 0.75 * d * math.log(4 * T / zeta) / R**2 if lam is None else lam
    gamma = R * S * math.sqrt(d * math.log(T / zeta))
    beta = 4 * math.sqrt(d * math.log(T / zeta))
    return GLMConstants(lam, lam, lam, gamma, beta, 1 / (0.01 * kappa * R**4 * S**2 * d), T, T, 0.0, 0.0, 0.0, 0.0)


def rs_glinucb_spec(link: str, d: int, T: int, S: float, R: float, zeta: float, kappa: tuple[float, ...],
                    kappa_star: tuple[float, ...], code: list[str] | None, preset: str, ucb_theta: str = "tau",
                    tau_data: str = "unexplored") -> PrivateGLMSpec:
    """RS-GLinUCB as Algorithm 2 without noise (exact sums, the exact MLE), with the authors' code's
    ingredients ``code`` (:data:`RS_CODE`; None: the preset's, every one of :data:`RS_CONSTANTS` under
    ``paper-code`` and none under ``paper``). ``ucb_theta`` and ``tau_data`` as Private-GLM's."""
    unknown = set(code or ()) - set(RS_CODE)
    if unknown:
        raise ValueError(f"rs_code {sorted(unknown)} are not among {', '.join(RS_CODE)}")
    on = set(RS_CONSTANTS if preset == "paper-code" else ()) if code is None else set(code)
    if {"rs-tiny-regulariser", "rs-head-regulariser"} <= on:
        raise ValueError("rs_code: 'rs-tiny-regulariser' and 'rs-head-regulariser' are two values of one "
                         "regulariser (the initial commit's and HEAD's); take one")
    lam = 0.5 if "rs-lambda-half" in on else None
    consts = tuple(rs_glinucb_constants(d, T, zeta, R, S, k, lam) for k in kappa)
    # their penalty c‖θ‖² has gradient 2cθ; RSSettings.reg is that gradient's coefficient
    reg = 2e-3 if "rs-tiny-regulariser" in on else 2e-5 if "rs-head-regulariser" in on else None
    rs = RSSettings(1.5 if "rs-switch-1.5" in on else 2.0, reg, "rs-unprojected" not in on,
                    frozenset(on & set(RS_DEFECTS)))
    return PrivateGLMSpec(link, d, T, S, R, consts, kappa, kappa_star, None, None, "mle", "lambda-max", ucb_theta,
                          tau_data, 1, mech.SGDSettings(), rs=rs)


# --- ECOLog (Faury, Abeille, Jun, Calauzènes 2022) --------------------------------------------------

ECOLOG_LAMBDA = 10.0  # the ℓ2 regularization λ of Sarmasarkar's ECOLog baseline (Faury et al.'s own code: 1)


def _log_loss(s: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The logistic loss ℓ(s; r) = −r log μ(s) − (1 − r) log(1 − μ(s)), stable in the tails."""
    return np.logaddexp(0.0, s) - r * s


def online_newton_step(lam: np.ndarray, Q: np.ndarray, center: np.ndarray, x: np.ndarray, k: float,
                       y: np.ndarray, S: float) -> np.ndarray:
    """argmin_{‖θ‖ ≤ S} L(⟨x, θ⟩) + ½‖θ − center‖²_Ṽ for R runs, where Ṽ = Q diag(lam) Qᵀ (R, d, d)
    and L is the convex scalar loss with L′(s) = k·μ(s) − y (k = 1, y = r: the logistic loss, ECOLog's
    θ_{t+1}; k = 2, y = 1: ℓ(s; 0) + ℓ(s; 1), its companion θ̄_{t+1}). Exact up to float precision.

    The KKT point is θ(ν) = (Ṽ + νI)⁻¹(Ṽ·center − L′(s)·x) with s = ⟨x, θ(ν)⟩ (a scalar equation,
    monotone in s) and ν ≥ 0 the ball's multiplier: ν = 0 when θ(0) is inside the ball, else
    ‖θ(ν)‖ = S, which ‖θ(ν)‖'s decrease in ν (the regularisation path of a convex loss) makes a
    bracketed root; Newton on 1/‖θ(ν)‖ − 1/S, bisection where Newton leaves the bracket."""
    a = np.einsum("rde,rd->re", Q, center)  # center in Ṽ's eigenbasis
    b = np.einsum("rde,rd->re", Q, x)
    la = lam * a

    def solve(nu: np.ndarray, s: np.ndarray):
        den = lam + nu[:, None]
        P, q = (b * la / den).sum(-1), (b * b / den).sum(-1)
        for _ in range(8):  # h(s) = s − P + L′(s)·q: h′ ∈ [1, 1 + kq/4], q ≤ ‖x‖²/λ_min: Newton is exact in a few
            m = mu("logistic", s)
            s = s - (s - P + (k * m - y) * q) / (1.0 + k * m * (1.0 - m) * q)
        g = k * mu("logistic", s) - y
        return s, (la - g[:, None] * b) / den, den, q

    R = lam.shape[0]
    nu = np.zeros(R)
    s, u, den, q = solve(nu, (b * a).sum(-1))
    norm = np.linalg.norm(u, axis=1)
    active = norm > S * (1 + 1e-12)
    if active.any():
        lo = np.zeros(R)
        hi = (np.linalg.norm(la, axis=1) + np.linalg.norm(b, axis=1)) / S  # ‖θ(ν)‖ ≤ (‖Ṽc‖ + ‖x‖)/ν: ≤ S here
        for _ in range(60):
            phi = 1.0 / norm - 1.0 / S
            lo = np.where(active & (phi < 0), nu, lo)
            hi = np.where(active & (phi > 0), nu, hi)
            md = k * mu_dot("logistic", s)
            ds = -(b * u / den).sum(-1) / (1.0 + md * q)
            du = -(u + (md * ds)[:, None] * b) / den
            dphi = -(u * du).sum(-1) / norm**3
            with np.errstate(divide="ignore", invalid="ignore"):
                step = nu - phi / dphi
            bisect = ~np.isfinite(step) | (step <= lo) | (step >= hi)
            nu = np.where(active, np.where(bisect, (lo + hi) / 2, step), 0.0)
            s, u, den, q = solve(nu, s)
            norm = np.linalg.norm(u, axis=1)
            if np.all(~active | (np.abs(norm - S) <= 1e-12 * S) | (hi - lo <= 1e-15 * np.maximum(hi, 1.0))):
                break
    return np.einsum("rde,re->rd", Q, u)


class ECOLog:
    """ada-OFU-ECOLog (Faury, Abeille, Jun, Calauzènes, "Jointly Efficient and Optimal Algorithms for
    Logistic Bandits", AISTATS 2022, Algorithm 2) as Sarmasarkar's code runs it for Fig. 1(a), non-
    private, logistic only:

    - the optimistic index in the reward scale: x_t = argmax μ(⟨x, θ_t⟩) + σ_t·‖x‖_{Ṽ_t⁻¹};
    - the ECOLog online Newton step θ_{t+1} = argmin_{‖θ‖≤S} ℓ(⟨x_t, θ⟩; r_t) + ½‖θ − θ_t‖²_{Ṽ_t}, solved
      exactly (:func:`online_newton_step`; the codes run projected gradient to precision 1/t), then
      Ṽ_{t+1} = Ṽ_t + μ̇(⟨x_t, θ_{t+1}⟩)·x_t x_tᵀ, Ṽ_1 = λI;
    - the companion θ̄_{t+1} = argmin_{‖θ‖≤S} ℓ(⟨x_t, θ⟩; 0) + ℓ(⟨x_t, θ⟩; 1) + ½‖θ − θ_{t+1}‖²_{Ṽ_t} and
      the data-dependent radius σ_t² = 2λS² + (1 + S)²·γ_t + Σ_{s<t} [2(1 + S)(ℓ_s(θ̄_{s+1}) − ℓ_s(θ_{s+1}))
      − ½‖θ_{s+1} − θ̄_{s+1}‖_{Ṽ_s}], γ_t = √λ/2 + (2/√λ)·log(2√(1 + t/(4λ))/ζ), with the codes' (Faury
      et al.'s and Sarmasarkar's) unsquared norm and d-free log, and λ = 10 (Sarmasarkar's);
    - Algorithm 2's data-dependent condition μ̇(⟨x_t, θ̄_{t+1}⟩) ≤ 2·μ̇(⟨x_t, θ_{t+1}⟩): where it fails,
      Algorithm 2 sends the round to its ℋ_t branch (an MLE on those rounds that shrinks Θ_t); the codes
      stop with an error, and here the failures are counted per run (:meth:`summary`) and the round
      is learned as any other. The ℋ_t branch is not built."""

    def __init__(self, link: str, d: int, R: int, S: float, zeta: float, lam: float = ECOLOG_LAMBDA):
        if link != "logistic":
            raise ValueError(f"ECOLog is a logistic-bandit algorithm: environment.link = {link!r} must be 'logistic'")
        self.d, self.S, self.zeta, self.lam = d, S, zeta, lam
        self.V = np.broadcast_to(lam * np.eye(d), (R, d, d)).copy()
        self.eig = (np.full((R, d), lam), np.broadcast_to(np.eye(d), (R, d, d)).copy())
        self.theta = np.zeros((R, d))
        self.cum_loss = np.zeros(R)
        self.failed = np.zeros(R, dtype=np.int64)
        self.t = 0

    def radius(self) -> np.ndarray:
        lam, S, t = self.lam, self.S, self.t + 1
        gamma = math.sqrt(lam) / 2 + 2 * math.log(2 * math.sqrt(1 + t / (4 * lam)) / self.zeta) / math.sqrt(lam)
        return np.sqrt(np.maximum(2 * lam * S**2 + (1 + S) ** 2 * gamma + self.cum_loss, 0.0))

    def v_inv(self) -> np.ndarray:
        lam, Q = self.eig
        return np.einsum("rdk,rk,rek->rde", Q, 1.0 / lam, Q)

    def broadcast(self) -> dict:
        R = self.theta.shape[0]
        v_inv = self.v_inv()
        return {"t": self.t + 1, "theta_o": self.theta.copy(), "v_inv": v_inv, "threshold": np.full(R, np.inf),
                "width_o": np.full(R, np.inf), "theta": self.theta.copy(), "h_inv": v_inv.copy(),
                "beta": self.radius(), "reward_index": True}

    def update(self, x: np.ndarray, r: np.ndarray) -> None:
        lam, Q = self.eig
        theta = online_newton_step(lam, Q, self.theta, x, 1.0, r, self.S)
        bar = online_newton_step(lam, Q, theta, x, 2.0, np.ones_like(r), self.S)
        diff = theta - bar
        disc = np.sqrt(np.maximum(np.einsum("rd,rde,re->r", diff, self.V, diff), 0.0))
        s, s_bar = np.einsum("rd,rd->r", x, theta), np.einsum("rd,rd->r", x, bar)
        w, w_bar = mu_dot("logistic", s), mu_dot("logistic", s_bar)
        self.failed += w_bar > 2 * w
        self.cum_loss += 2 * (1 + self.S) * (_log_loss(s_bar, r) - _log_loss(s, r)) - 0.5 * disc
        self.V = self.V + w[:, None, None] * x[:, :, None] * x[:, None, :]
        self.eig = np.linalg.eigh(self.V)
        self.theta = theta
        self.t += 1

    def summary(self) -> list[dict]:
        return [{"condition_failed": int(f)} for f in self.failed]
