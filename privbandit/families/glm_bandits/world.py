"""The GLM bandits' world (Sarmasarkar, "Shuffle and joint differential privacy for generalized linear
contextual bandits"): links, κ-parameters, arm sets, θ*, Bernoulli rewards, pseudo-regret.

- Links (Sec. 4, Def. 4.1; App. A): ``logistic`` μ(z) = 1/(1 + e^{−z}) and ``probit`` μ(z) = Φ(z).
  Probit–Bernoulli is not a canonical exponential family and its self-concordance (Lemma G.1)
  fails for |z| > R: the probit runs are outside the paper's theory (spec §2, §12 item 27).
- κ-parameters over the arms a run ever offers (eq. 4, the adversarial-context setting M2):
  κ = max 1/μ̇(⟨x,θ*⟩), 1/κ* = max μ̇(⟨x,θ*⟩); and eq. (3)'s 1/κ̂ = E_X[μ̇(⟨x*,θ*⟩)] (the
  empirical mean over the rounds' optimal arms).
- Arms: K arms per round, uniform in the unit ball of R^d (App. A: a Gaussian direction times a
  U^{1/d} radius, as the authors' ``environment.py``).
- θ* of norm S, two generators, named: ``sphere`` (the paper: uniform on the sphere of radius S)
  and ``normalised-cube`` (the authors' code: S·u/‖u‖ with u ~ U[−1, 1]^d, norm S but a
  direction that is not uniform).
- Real data (``theta`` = ``digits``, ``wine``, ``iris`` or ``breast_cancer``: scikit-learn's bundled
  sets, no download; docs/real-data.md): user t's K = C arms are the disjoint encoding e_a ⊗ x_t of a
  row x_t of the set (d = C·(p + 1)), θ* the one-vs-rest fits of the labels under the link, scaled
  to norm S (:mod:`privbandit.datasets.real`).
- Rewards r ~ Bernoulli(μ(⟨x,θ*⟩)) (R = 1). Regret is the pseudo-regret of eq. (2):
  Σ_t max_x μ(⟨x,θ*⟩) − μ(⟨x_t,θ*⟩).
- ``conversion = "classes"`` (real data only): the supervised-to-bandit conversion (Dudík et al.
  2011): the same arm sets, but user t's reward is the label's 1{a = y_t}, so regret counts the
  mistakes. No θ* generates these rewards: κ and κ* are eq. (4)'s bounds from Assumption 4.2
  (:func:`kappa_bounds`), and the fitted θ is kept only as the reference ‖θ̂ − θ‖ is measured against.

Everything is vectorized over runs (axis 0), rounds and arms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, log_ndtr, ndtr

from privbandit.datasets.real import DATASETS
from privbandit.protocol.primitives.seeding import stream

LINKS = ("logistic", "probit")
REAL = DATASETS  # scikit-learn's bundled sets (privbandit/datasets/real.py; sklearn loads on first use)
THETA_GENERATORS = ("sphere", "normalised-cube") + REAL
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def mu(link: str, z: np.ndarray) -> np.ndarray:
    """The mean function μ = ḃ (logistic σ(z) or probit Φ(z))."""
    if link == "logistic":
        return expit(z)
    if link == "probit":
        return ndtr(z)
    raise ValueError(f"link={link!r} is not one of {', '.join(LINKS)}")


def mu_dot(link: str, z: np.ndarray) -> np.ndarray:
    """μ̇: σ(z)(1 − σ(z)) for logistic, the normal density φ(z) for probit."""
    z = np.asarray(z, dtype=np.float64)
    if link == "logistic":
        s = expit(z)
        return s * (1.0 - s)
    if link == "probit":
        return _INV_SQRT_2PI * np.exp(-0.5 * z * z)
    raise ValueError(f"link={link!r} is not one of {', '.join(LINKS)}")


def mu_dot_max(link: str) -> float:
    """sup_z μ̇(z): 1/4 (logistic), 1/√(2π) (probit); the weight of an H-tree leaf never exceeds it."""
    return 0.25 if link == "logistic" else _INV_SQRT_2PI


def log_mu(link: str, z: np.ndarray) -> np.ndarray:
    """log μ(z), stable in the tails (for log-likelihood diagnostics)."""
    return -np.logaddexp(0.0, -z) if link == "logistic" else log_ndtr(z)


def unit_ball(rng: np.random.Generator, shape: tuple[int, ...], d: int) -> np.ndarray:
    """``shape + (d,)`` points uniform in the unit ball: a Gaussian direction, radius U^{1/d}."""
    g = rng.standard_normal(shape + (d,))
    g /= np.linalg.norm(g, axis=-1, keepdims=True)
    return g * rng.random(shape + (1,)) ** (1.0 / d)


def theta_star(generator: str, rng: np.random.Generator, d: int, norm: float) -> np.ndarray:
    """θ* of Euclidean norm exactly S: ``sphere`` (uniform direction, the paper) or
    ``normalised-cube`` (S·u/‖u‖, u ~ U[−1, 1]^d: the authors' ``full_norm=True``)."""
    if generator == "sphere":
        u = rng.standard_normal(d)
    elif generator == "normalised-cube":
        u = rng.uniform(-1.0, 1.0, d)
    else:
        raise ValueError(f"theta generator {generator!r} is not one of {', '.join(THETA_GENERATORS)}")
    return norm * u / np.linalg.norm(u)


@dataclass(frozen=True)
class Kappas:
    """The instance's κ-parameters over every arm the run offers (eq. 4) and eq. (3)'s κ̂."""

    kappa: float       # max 1/μ̇(⟨x,θ*⟩)
    kappa_star: float  # 1 / max μ̇(⟨x,θ*⟩)
    kappa_hat: float   # 1 / mean over rounds of μ̇(⟨x*_t,θ*⟩)


def kappa_bounds(link: str, S: float) -> tuple[float, float]:
    """(κ, κ*) from Assumption 4.2's bounds (‖x‖ ≤ 1, ‖θ*‖ ≤ S): μ̇ is even and decreasing in |z| for
    both links, so eq. (4)'s κ ≤ 1/μ̇(S) and κ* ≥ 1/μ̇(0), the upper and lower bounds the paper says
    suffice (Sec. 4, after eq. (4)). For a world that has no θ* (a caller's, or real labels)."""
    return float(1.0 / mu_dot(link, np.float64(S))), float(1.0 / mu_dot_max(link))


def kappas(link: str, arms: np.ndarray, theta: np.ndarray) -> Kappas:
    """κ, κ*, κ̂ of one run: ``arms`` (T, K, d), ``theta`` (d,)."""
    z = arms @ theta
    md = mu_dot(link, z)
    best = np.take_along_axis(md, z.argmax(axis=-1)[..., None], axis=-1)[..., 0]
    return Kappas(float(1.0 / md.min()), float(1.0 / md.max()), float(1.0 / best.mean()))


@dataclass
class GLMWorld:
    """R runs' worlds stacked: arms (R, T, K, d), θ* (R, d), means μ(⟨x,θ*⟩) (R, T, K), and each
    run's reward uniforms (R, T): user t's reward for the arm she plays is 1[u_t < μ]. Every
    algorithm of an experiment faces the same arms and uniforms (common random numbers)."""

    link: str
    arms: np.ndarray
    theta: np.ndarray
    means: np.ndarray
    uniforms: np.ndarray
    stated: Kappas | None = None  # κ-parameters from public bounds, where no θ* makes the rewards

    @property
    def best(self) -> np.ndarray:
        return self.means.max(axis=-1)

    def kappas(self, i: int) -> Kappas:
        return self.stated if self.stated is not None else kappas(self.link, self.arms[i], self.theta[i])


def world_of(link: str, generator: str, seed: int, runs: list[int], horizon: int, arms: int, d: int,
             norm: float, reuse_contexts: bool, conversion: str = "model") -> GLMWorld:
    """Run r's world from ``(seed, "glm-world", r)``: θ* first, then its T arm sets, then its reward
    uniforms from ``(seed, "glm-rewards", r)``. ``reuse_contexts`` (the authors' code): every run
    faces run 0's θ* and arm sets (pre-generated once per environment); runs then differ only in
    rewards and the algorithms' noise. ``conversion = "classes"``: the rows' labels are the rewards
    (module docstring)."""
    A, TH, U, Y = [], [], [], []
    for r in runs:
        rng = stream(seed, "glm-world", 0 if reuse_contexts else r)
        if generator in REAL:  # one θ* (the data's fit), each run's own draw of rows
            from privbandit.datasets import real

            TH.append(real.glm_theta(generator, link, arms, d, norm))
            if conversion == "classes":  # the rows' labels too: they are the rewards
                x, y = real.glm_contexts(generator, arms, d, rng, horizon, labels=True)
                Y.append(y)
            else:
                x = real.glm_contexts(generator, arms, d, rng, horizon)
            A.append(x)
        else:
            TH.append(theta_star(generator, rng, d, norm))
            A.append(unit_ball(rng, (horizon, arms), d))
        U.append(stream(seed, "glm-rewards", r).random(horizon))
    arms_ = np.stack(A)
    theta = np.stack(TH)
    if conversion == "classes":
        if generator not in REAL:
            raise ValueError(f"conversion 'classes' needs a real dataset, not theta = {generator!r}")
        # 1{a = y_t}: with uniforms in [0, 1), the users' 1[u < mean] is the label's reward exactly
        means = (np.arange(arms) == np.stack(Y)[..., None]).astype(np.float64)
        kappa, kappa_star = kappa_bounds(link, norm)
        return GLMWorld(link, arms_, theta, means, np.stack(U), Kappas(kappa, kappa_star, kappa))
    means = mu(link, np.einsum("rtkd,rd->rtk", arms_, theta))
    return GLMWorld(link, arms_, theta, means, np.stack(U))
