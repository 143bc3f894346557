"""Bandit instances from the real datasets scikit-learn bundles (issue #34 item 3; docs/real-data.md).

Only ``sklearn.datasets.load_*`` is called: those read files shipped inside the package, so nothing
here touches the network (``fetch_*``, which downloads, is never used). Tags: [P] the source's
statement, [I] our choice.

=============  =====  ====  =======  =============================================================
dataset        rows   raw   classes  used by
=============  =====  ====  =======  =============================================================
digits         1797   64    10       linear (classes or fixed arms), concurrent (fixed arms), GLM
wine           178    13    3        linear (classes), GLM (contexts)
iris           150    4     3        GLM (contexts)
breast_cancer  569    30    2        MAB (k-means arms); linear, concurrent, GLM
=============  =====  ====  =======  =============================================================

Contexts. [I] Each column is z-scored (:func:`privbandit.datasets.letor.zscore`), then projected
on its first p principal components (SVD of the whole z-scored table, each component's sign fixed
so that its largest-magnitude loading is positive: deterministic, no solver randomness), then
divided by the largest row norm, so every z lies in the unit ball of R^p. A context is
x = (z/√2, 1/√2) ∈ R^{p+1}: ‖x‖ ≤ 1 (the linear paper's Assumption 3.1, the GLM paper's unit-ball
arms) and the last entry is an intercept.

Four conversions, because the families model different worlds:

- :func:`disjoint` (``conversion = "classes"`` in the linear family,
  :class:`privbandit.families.shuffle_linear_bandits.world.ClassContexts`, whose users Algorithm 4 of
  the concurrent family also takes, and in the GLM family, :func:`glm_contexts` with ``labels``): the supervised-to-bandit
  conversion of Dudík et al. 2011 (Bietti et al.'s bake-off): user t's context is a row x_t drawn
  uniformly with the run's stream, her K = C arms are the classes with the disjoint encoding
  φ(x_t, a) = e_a ⊗ x_t (d = C·(p + 1), ‖φ‖ = ‖x_t‖ ≤ 1), her reward the label's 1{a = y_t}; regret
  is the mistake count. :func:`class_fit` (the labels' least-squares fit) is only a diagnostic reference.
- :func:`linear_instance` (the linear family's fixed arms, and the concurrent family, whose users share
  K *fixed* arms): arm a is a row of the dataset drawn with the run's stream, φ_a = x_a, and θ* is the
  least-squares fit of the indicator 1{y = c} of a target class c (drawn with the run's stream) on
  every row's x, shrunk toward the constant ½ predictor just enough that every row's mean
  ⟨x, θ*⟩ lies in [0, 1] and ‖θ*‖ ≤ 1. Rewards Bernoulli(⟨φ_a, θ*⟩): the linear model holds exactly
  (a realizable, semi-synthetic instance on real features, as the MAB paper's MSLR arms are).
- :func:`glm_contexts` (GLM family, contextual): user t's context is a row x_t drawn uniformly with
  the run's stream; its K = C arms are the disjoint encoding φ(x_t, a) = e_a ⊗ x_t (d = C·(p + 1)),
  and θ* = (w_1, …, w_C) stacks the one-vs-rest maximum-likelihood fits of 1{y = a} on x under the
  family's link (ridge 10⁻³), scaled to the experiment's norm S. Rewards Bernoulli(μ(⟨φ, θ*⟩)): the
  realizable instance: the label's reward 1{a = y} is replaced by the fitted model's probability of
  it, so the instance's κ-parameters are finite and its regret is the pseudo-regret against the best
  arm of each context under that model (``conversion = "classes"`` keeps the label, with κ from S's
  bounds: ``glm_bandits.world.kappa_bounds``).
- :func:`mab_arms` (MAB family): k-means on the z-scored features, arm mean = the cluster's
  fraction of label 1, exactly :func:`privbandit.datasets.letor.cluster_arms` (the paper's MSLR
  recipe) with a binary label; Bernoulli rewards are a random row's label of the cluster.
"""

from __future__ import annotations

import functools
import math

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from privbandit.datasets.letor import ArmMeans

# Every family's world names its real instances by these (imported from here, one list): importing
# this module costs numpy only; scikit-learn and the LETOR module (scipy.cluster) load on first use.
DATASETS = ("digits", "wine", "iris", "breast_cancer")
BINARY = ("breast_cancer",)  # a label in {0, 1}: a reward (MAB arms)
# (rows, columns) of each table, as scikit-learn ships it: an experiment's sizes are checked against
# these when its file is read, without loading scikit-learn (tests/test_real_data.py checks them).
SHAPES = {"digits": (1797, 64), "wine": (178, 13), "iris": (150, 4), "breast_cancer": (569, 30)}
CLASSES = {"digits": 10, "wine": 3, "iris": 3, "breast_cancer": 2}  # labels 0 … C − 1 (tests check them)
_RIDGE = 1e-3  # the GLM fit's penalty: keeps the separable classes' fits finite


def _check(name: str) -> None:
    if name not in DATASETS:
        raise ValueError(f"dataset = {name!r} is not one of {', '.join(DATASETS)} (scikit-learn's bundled sets)")


@functools.lru_cache(maxsize=None)
def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The bundled table (features (n, F) float64, labels (n,) int64), read-only. [P] scikit-learn's
    copy of the UCI sets, read from files inside the package (``load_*``; never ``fetch_*``)."""
    _check(name)
    from sklearn import datasets  # imported here: 1.5–2.5 s at load 20, paid only by runs on real data

    bunch = getattr(datasets, f"load_{name}")()
    x, y = np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, dtype=np.int64)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def check_fixed_arms(name: str, arms: int, dim: int) -> None:
    """ValueError naming ``environment.arms`` or ``environment.dim`` when :func:`linear_instance`
    could not draw ``arms`` rows of ``name`` in R^``dim`` (dim − 1 principal components + intercept)."""
    _check(name)
    rows, cols = SHAPES[name]
    if not 2 <= arms <= rows:
        raise ValueError(f"environment.arms = {arms}: generator {name!r} draws the arms from its {rows} rows; "
                         f"must lie in [2, {rows}]")
    if not 2 <= dim <= cols + 1:
        raise ValueError(f"environment.dim = {dim}: generator {name!r} has {cols} columns (dim − 1 principal "
                         f"components plus an intercept); must lie in [2, {cols + 1}]")


def check_instance(field: str, generator: str, arms: int, dim: int, conversion: str) -> None:
    """The one check of an experiment's real-data sizes, when its file is read (scikit-learn stays
    unloaded): ``conversion = "classes"`` needs a real set in ``environment.<field>``; a real set's
    arms and dim must fit its encoding, the K fixed rows of :func:`check_fixed_arms` for
    ``"fixed-arms"``, the classes of :func:`check_classes` for any other (the GLM family's "model"
    rewards use the classes' disjoint encoding too)."""
    if conversion == "classes" and generator not in DATASETS:
        raise ValueError(f"environment.conversion = 'classes' needs a real dataset in environment.{field} "
                         f"({', '.join(DATASETS)}), not {field} = {generator!r}")
    if generator in DATASETS:
        (check_fixed_arms if conversion == "fixed-arms" else check_classes)(generator, arms, dim)


def classes(name: str) -> int:
    return int(load(name)[1].max()) + 1


def check_classes(name: str, arms: int, dim: int) -> None:
    """ValueError naming ``environment`` unless ``arms`` is the number of classes C and ``dim`` is
    C·(p + 1) with 1 ≤ p ≤ the set's columns: the disjoint encoding φ(x, a) = e_a ⊗ x of the
    supervised-to-bandit conversion (:func:`disjoint`). Uses :data:`CLASSES`, so scikit-learn stays
    unloaded while a file is read."""
    _check(name)
    c, cols = CLASSES[name], SHAPES[name][1]
    if arms != c or dim % c or not 2 <= dim // c <= cols + 1:
        raise ValueError(f"environment: the {name} instance has K = {c} arms (its classes) and d = {c}·(p + 1) "
                         f"with 1 ≤ p ≤ {cols} principal components (d in {c * 2}, {c * 3}, …, {c * (cols + 1)}); "
                         f"got arms = {arms}, dim = {dim}")


def disjoint(x: np.ndarray, c: int) -> np.ndarray:
    """The disjoint encoding of contexts x (..., p + 1) for C = ``c`` arms: (..., C, C·(p + 1)), arm a's
    vector e_a ⊗ x (block a holds x, every other block is 0), so ‖φ(x, a)‖ = ‖x‖ ≤ 1 (Dudík et al.
    2011's arms = classes, in the linear paper's φ(c_t, a))."""
    out = np.zeros(x.shape[:-1] + (c, c, x.shape[-1]))
    out[..., np.arange(c), np.arange(c), :] = x[..., None, :]
    return out.reshape(x.shape[:-1] + (c, c * x.shape[-1]))


@functools.lru_cache(maxsize=None)
def class_fit(name: str, d: int) -> np.ndarray:
    """θ_LS (d,): the C one-vs-rest least-squares fits of 1{y = a} on every row's x, stacked (the
    disjoint encoding's population least-squares fit of the reward 1{a = y} under a uniform row), read-only.
    Not a θ* the rewards follow (they are the label): the reference the linear family's rounds.csv
    measures ‖θ̂ − θ‖ against in the ``classes`` conversion."""
    check_classes(name, CLASSES[name], d)
    c = CLASSES[name]
    x = contexts(name, d // c - 1)
    _, y = load(name)
    theta = np.concatenate([np.linalg.lstsq(x, (y == a).astype(np.float64), rcond=None)[0] for a in range(c)])
    theta.setflags(write=False)
    return theta


@functools.lru_cache(maxsize=None)
def contexts(name: str, p: int) -> np.ndarray:
    """Every row's context x = (z/√2, 1/√2) ∈ R^{p+1}, ‖x‖ ≤ 1 (module docstring), read-only."""
    from privbandit.datasets.letor import zscore

    features, _ = load(name)
    if not 1 <= p <= features.shape[1]:
        raise ValueError(f"{name}: {p} principal components asked, need 1 … {features.shape[1]} "
                         f"(its columns); the context dimension is that + 1")
    z = zscore(features)
    _, _, vt = np.linalg.svd(z, full_matrices=False)
    comp = vt[:p]
    comp *= np.sign(comp[np.arange(p), np.abs(comp).argmax(axis=1)])[:, None]
    scores = z @ comp.T
    scores /= np.linalg.norm(scores, axis=1).max()
    h = 1 / math.sqrt(2)
    x = np.concatenate([h * scores, np.full((scores.shape[0], 1), h)], axis=1)
    x.setflags(write=False)
    return x


def linear_instance(name: str, arms: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One fixed-arm instance (arms (K, d), θ* (d,)) for the linear and concurrent families: K rows
    drawn without replacement, a target class c, θ* as the module docstring says. ‖φ‖ ≤ 1,
    ‖θ*‖ ≤ 1, every mean in [0, 1]."""
    check_fixed_arms(name, arms, d)
    x = contexts(name, d - 1)
    _, y = load(name)
    rows = rng.choice(x.shape[0], size=arms, replace=False)
    target = int(rng.integers(classes(name)))
    theta = np.linalg.lstsq(x, (y == target).astype(np.float64), rcond=None)[0]
    return np.array(x[rows]), _shrink(x, theta)


def _shrink(x: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """θ0 + λ(θ − θ0), θ0 = (0, …, 0, 1/√2) the constant ½ predictor, with the largest λ ≤ 1 that
    keeps every row's ⟨x, θ⟩ in [0, 1] and ‖θ‖ ≤ 1 (both feasible sets are intervals [0, λ_max]:
    ‖θ0‖ = 1/√2 < 1 and ⟨x, θ0⟩ = ½)."""
    theta0 = np.zeros_like(theta)
    theta0[-1] = 1 / math.sqrt(2)
    step = theta - theta0
    spread = np.abs(x @ theta - 0.5).max()
    lam = 1.0 if spread <= 0.5 else 0.5 / spread
    a, b, c = step @ step, 2 * theta0 @ step, theta0 @ theta0 - 1.0  # ‖θ0 + λ·step‖² = 1
    if a > 0:
        lam = min(lam, (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a))
    while True:  # λ_max itself can round a boundary mean an ulp outside [0, 1]: step inside
        out = theta0 + lam * step
        means = x @ out
        if means.min() >= 0 and means.max() <= 1 and np.linalg.norm(out) <= 1:
            return out
        lam *= 1 - 1e-9


@functools.lru_cache(maxsize=None)
def _glm_fit(name: str, p: int, link: str) -> np.ndarray:
    """The one-vs-rest fits (C, p + 1) of 1{y = a} on x under ``link``, by L-BFGS on the penalized
    negative log-likelihood (deterministic: a zero start, no randomness)."""
    from scipy.optimize import minimize

    from privbandit.families.glm_bandits.world import log_mu, mu, mu_dot

    x = contexts(name, p)
    _, y = load(name)
    fits = []
    for a in range(classes(name)):
        t = (y == a).astype(np.float64)

        def loss(w, t=t):
            z = x @ w
            m = np.clip(mu(link, z), 1e-12, 1 - 1e-12)
            # d/dz of −[t log μ + (1 − t) log(1 − μ)] = μ̇ (μ − t) / (μ(1 − μ)); log(1 − μ(z)) = log μ(−z)
            value = -(t * log_mu(link, z) + (1 - t) * log_mu(link, -z)).sum() + 0.5 * _RIDGE * w @ w
            grad = x.T @ (mu_dot(link, z) * (m - t) / (m * (1 - m))) + _RIDGE * w
            return value, grad

        res = minimize(loss, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B")
        if not res.success:  # every set and link converges in < 30 iterations; never use a half fit
            raise ArithmeticError(f"{name}: the {link} fit of class {a} did not converge ({res.message})")
        fits.append(res.x)
    return np.stack(fits)


def glm_theta(name: str, link: str, arms: int, d: int, norm: float) -> np.ndarray:
    """θ* (d,) = the stacked one-vs-rest fits scaled to ‖θ*‖ = S (``norm``). ``arms`` must be the
    number of classes C and ``d`` a multiple C·(p + 1) of it (the disjoint encoding)."""
    check_classes(name, arms, d)
    c = classes(name)
    w = _glm_fit(name, d // c - 1, link).ravel()
    return norm * w / np.linalg.norm(w)


def glm_contexts(name: str, arms: int, d: int, rng: np.random.Generator, horizon: int,
                 labels: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """T users' arm sets (T, K, d): user t's row x_t drawn uniformly with replacement, its arms
    φ(x_t, a) = e_a ⊗ x_t (the disjoint encoding; ‖φ‖ = ‖x_t‖ ≤ 1). ``labels``: also the rows'
    labels y_t (T,), for the supervised-to-bandit conversion's rewards 1{a = y_t}."""
    c = classes(name)
    x = contexts(name, d // c - 1)
    rows = rng.integers(x.shape[0], size=horizon)
    arms_ = disjoint(x[rows], c)
    return (arms_, load(name)[1][rows]) if labels else arms_


def mab_arms(name: str, k: int, seed: int = 0) -> ArmMeans:
    """K arms by k-means (the paper's MSLR recipe, :func:`~privbandit.datasets.letor.cluster_arms`:
    z-scored features, scipy kmeans2 ``++``, seed ``seed``): arm mean = the cluster's fraction of
    label 1 (breast_cancer: benign). One instance for every run, as the MSLR file is."""
    from privbandit.datasets.letor import cluster_arms

    _check(name)
    if name not in BINARY:
        raise ValueError(f"dataset = {name!r}: the MAB arms need a binary label (a reward); use one of {', '.join(BINARY)}")
    features, y = load(name)
    return cluster_arms(y, features, k, seed, max_label=1,
                        source=f"scikit-learn load_{name}: {y.size} rows, z-scored, kmeans2 ++ seed {seed}")
