"""The simulated world of the shuffle-model linear bandits (Chowdhury & Zhou, ICML 2022), §5: K fixed
arms in R^d, Bernoulli rewards, and the users' common random numbers.

Two generators (spec §8.1, §9, §11 item 13):

- ``paper``: the paper's wording, after Vaswani et al. 2020: θ and every arm are a (d−1)-dimensional
  vector of norm 1/√2, uniform on that sphere, with a 1/√2 entry appended. So ‖φ‖ = ‖θ‖ = 1
  (Assumption 3.1) and the mean rewards ⟨θ, φ⟩ lie in [0, 1].
- ``paper-code``: the authors' code: arms (u, 1) with u uniform on the unit sphere of R^{d−1}, the first
  d arms replaced by the rows of I_d with the last entry set to 1; θ = (v/2, 1/2). So ‖φ‖ ≤ √2,
  ‖θ‖ = 1/√2, the same mean range.
- ``authors-main``: the ``paper-code`` instances as the authors' ``__main__`` draws them
  (``LinBanditPrivate.py``: ``np.random.seed(seed)``, then per run ``randn(K, d − 1)`` and
  ``randn(d − 1)``, their arithmetic), so with ``seed = 2`` run r is their r-th environment bit for
  bit: the instances to pair privbandit with their code on. The draws are one sequence, so run r costs
  the draws of runs 0 … r − 1 (cheap: K·d numbers each); ``seed`` must be in [0, 2³² − 1].
- ``digits``, ``wine``, ``iris``, ``breast_cancer``: real data (scikit-learn's bundled sets, no
  download): K rows of the set as arms (d − 1 principal components and an intercept, ‖φ‖ ≤ 1) and θ*
  the least-squares fit of a target class's indicator, shrunk so every mean is in [0, 1] and
  ‖θ*‖ ≤ 1 (:func:`privbandit.datasets.real.linear_instance`, docs/real-data.md).
  With ``conversion = "classes"`` the same sets give every user her own context instead
  (:class:`ClassContexts`): arms = classes, φ(x_t, a) = e_a ⊗ x_t, reward 1{a = y_t}.

Rewards use common random numbers: user t draws one U_t ~ U(0, 1) and would get 1{U_t < μ_a} from
any arm a. That makes the authors' *realized* regret 1{U < μ*} − 1{U < μ_a} well defined next to the
paper's pseudo-regret μ* − μ_a, and all algorithms of a run face the same users.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privbandit.datasets import real
from privbandit.datasets.real import DATASETS
from privbandit.protocol.primitives.seeding import stream

REAL = DATASETS  # scikit-learn's bundled sets (privbandit/datasets/real.py; sklearn loads on first use)
GENERATORS = ("paper", "paper-code", "authors-main") + REAL


@dataclass(frozen=True)
class LinearInstances:
    """R instances stacked: arms (R, K, d), θ* (R, d); ground truth, never shown to the analyzer."""

    arms: np.ndarray
    theta: np.ndarray
    feature_norm: float  # public bound on ‖φ‖₂
    entry_bound: float  # public bound on |φ_k|

    @property
    def means(self) -> np.ndarray:
        # matmul, not einsum: each run's means are computed alike however many runs are stacked
        return np.matmul(self.arms, self.theta[..., None])[..., 0]


def _sphere(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    z = rng.normal(size=(n, dim))
    return z / np.linalg.norm(z, axis=-1, keepdims=True)


def generate(generator: str, arms: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One instance: (arms (K, d), θ (d,))."""
    if d < 2:
        raise ValueError(f"d={d} must be ≥ 2")
    if generator == "paper":
        h = 1 / math.sqrt(2)
        x = np.concatenate([h * _sphere(rng, arms, d - 1), np.full((arms, 1), h)], axis=1)
        theta = np.concatenate([h * _sphere(rng, 1, d - 1)[0], [h]])
        return x, theta
    if generator == "paper-code":
        return _code_instance(_sphere(rng, arms, d - 1), 0.5 * _sphere(rng, 1, d - 1)[0])
    if generator in REAL:
        from privbandit.datasets.real import linear_instance

        return linear_instance(generator, arms, d, rng)
    raise ValueError(f"generator={generator!r} is not one of {GENERATORS}")


def _code_instance(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The authors' instance from arm directions u (K, d − 1) and θ's first entries v (d − 1,)."""
    arms, d = u.shape[0], u.shape[1] + 1
    x = np.concatenate([u, np.ones((arms, 1))], axis=1)
    k = min(d, arms)
    x[:k] = np.eye(d)[:k]
    x[:k, -1] = 1.0
    return x, np.concatenate([v, [0.5]])


def authors_main(arms: int, d: int, seed: int, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first ``count`` instances of the authors' ``__main__`` (``LinBanditPrivate.py``, lines
    389 and 414–429) after ``np.random.seed(seed)``, in their order and with their arithmetic (their
    norm is √(Σx²), which need not round as ``np.linalg.norm`` does)."""
    if d < 2:
        raise ValueError(f"d={d} must be ≥ 2")
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed={seed} must be in [0, 2**32 - 1] for the authors' np.random.seed draw")
    rng = np.random.RandomState(seed)  # np.random.seed(s) seeds exactly this legacy generator
    out = []
    for _ in range(count):
        u = rng.randn(arms, d - 1)
        u /= np.sqrt(np.square(u).sum(axis=1))[:, np.newaxis]
        v = rng.randn(d - 1)
        v *= 0.5 / np.sqrt(np.square(v).sum())
        out.append(_code_instance(u, v))
    return out


def bounds(generator: str) -> tuple[float, float]:
    """(max ‖φ‖₂, max |φ_k|): public bounds used to calibrate noise. The paper's instances meet
    Assumption 3.1 (‖φ‖ ≤ 1, so every entry of φy and φφᵀ is in [−1, 1]: Δ₁ = Δ₂ = 1); so do the real ones."""
    return (1.0, 1.0) if generator == "paper" or generator in REAL else (math.sqrt(2.0), 1.0)


def stack(instances: list[tuple[np.ndarray, np.ndarray]], generator: str) -> LinearInstances:
    norm, entry = bounds(generator)
    return LinearInstances(arms=np.stack([x for x, _ in instances]), theta=np.stack([t for _, t in instances]),
                           feature_norm=norm, entry_bound=entry)


def instances(generator: str, arms: int, d: int, seed: int, runs: list[int]) -> LinearInstances:
    """The instances of the given runs, stacked: run r's is drawn from ``(seed, "linear-instance", r)``,
    so run r of every algorithm faces the same arms and θ*. Ground truth: the users' and the
    observer's, never the analyzer's. ``authors-main`` takes run r from the authors' one sequence
    instead (:func:`authors_main`)."""
    if generator == "authors-main":
        drawn = authors_main(arms, d, seed, max(runs) + 1) if runs else []
        return stack([drawn[r] for r in runs], generator)
    return stack([generate(generator, arms, d, stream(seed, "linear-instance", r)) for r in runs], generator)


# --- the users' common random numbers ------------------------------------------------------------

def user_uniforms(seed: int, run: int, first: int, n: int, name: str = "linear-users") -> np.ndarray:
    """U_t for users first … first + n − 1 of run ``run``: draw t of ``(seed, name, run)``
    (one 64-bit draw each, so PCG64 jumps to any user)."""
    rng = stream(seed, name, run)
    rng.bit_generator.advance(first)
    return rng.random(n)


class UserUniforms:
    """The U_t of the given runs, stacked (R, n), drawn :data:`CHUNK` users at a time per run (any
    user's U_t is the same number whichever chunk, block or process asks for it: draw t of its run's
    stream ``(seed, name, run)``)."""

    CHUNK = 1 << 16

    def __init__(self, seed: int, runs: list[int], name: str = "linear-users"):
        self.seed, self.runs, self.name = seed, list(runs), name
        self.chunk, self.values = -1, None

    def _chunk(self, c: int) -> np.ndarray:
        if c != self.chunk:
            self.chunk = c
            self.values = np.stack([user_uniforms(self.seed, r, c * self.CHUNK, self.CHUNK, self.name)
                                    for r in self.runs])
        return self.values

    def get(self, first: int, n: int) -> np.ndarray:
        c0, c1 = first // self.CHUNK, (first + n - 1) // self.CHUNK
        if c0 == c1:
            off = first - c0 * self.CHUNK
            return self._chunk(c0)[:, off:off + n]
        return np.stack([user_uniforms(self.seed, r, first, n, self.name) for r in self.runs])


# --- per-user contexts: the supervised-to-bandit conversion ----------------------------------------

class ClassContexts:
    """The ``classes`` conversion (Dudík et al. 2011; Bietti et al.'s bake-off) of a real set for R
    runs: user t of run r draws one row x_t uniformly, its K = C arms are the classes with the disjoint
    encoding φ(x_t, a) = e_a ⊗ x_t (‖φ‖ = ‖x_t‖ ≤ 1, Assumption 3.1), and its reward is the label's
    1{a = y_t}: the paper's φ(c_t, a) with c_t = x_t (§3, Algorithm 1 line 3). Row t of run r is
    ⌊V_t·N⌋, V_t draw t of ``(seed, "linear-contexts", r)`` (one 64-bit draw each, so any user's row is
    the same whichever block or process asks; the bias of ⌊V·N⌋ is below N·2⁻⁵³). Ground truth:
    the users' and the observer's, never the analyzer's."""

    feature_norm = 1.0  # ‖φ‖ = ‖x‖ ≤ 1 (privbandit.datasets.real.contexts)
    entry_bound = 1.0

    def __init__(self, generator: str, arms: int, d: int, seed: int, runs: list[int]):
        real.check_classes(generator, arms, d)
        self.classes = arms
        self.x = real.contexts(generator, d // arms - 1)  # (N, p + 1)
        self.labels = real.load(generator)[1]
        self.rows = UserUniforms(seed, runs, "linear-contexts")
        # rounds.csv's ‖θ̂ − θ‖ reference: the least-squares fit of the labels, the same for every run
        self.theta = np.broadcast_to(real.class_fit(generator, d), (len(runs), d))

    def users(self, first: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Users first … first + n − 1 of every run: their arm sets (R, n, K, d) and labels (R, n)."""
        rows = np.minimum((self.rows.get(first, n) * self.x.shape[0]).astype(np.intp), self.x.shape[0] - 1)
        return real.disjoint(self.x[rows], self.classes), self.labels[rows]
