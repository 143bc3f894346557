"""Does a measured regret grow like a theorem's bound? Rate fits with a verdict that can fail (issue #34).

A regret theorem of the papers here reads ``E[Reg(T)] = O(Σ_j c_j · (ln T)^{a_j} · ε^{-b_j})``: a sum of
non-negative terms, each a power of ln T times a power of 1/ε, times instance constants (Σ_a 1/Δ_a, K).
Chowdhury & Zhou (ICLR 2023) Thm 1 and Thm 5 are ``Σ_a ln T/Δ_a + K ln T/ε`` (terms (1, 0), (1, 1)),
Thm 2 adds ``K √ln T/ε`` (½, 1), Thm 4 is ``Σ_a ln T/Δ_a + K √ln T/ε``, and the local model's
``Σ_a ln T/(ε² Δ_a)`` (Ren et al. 2020, which the paper's Appendix H claims for Thm 6) is (1, 2).

Data: one final regret per run, at every (T, ε) of a grid; the runs are grouped (by run index, so
the same instance and seed stream at every T and ε) and each group gets its own intercept.

**The test.** For such a form with constants c_j ≥ 0 (plus any constant c_0 ≥ 0), the elasticities
``∂ ln R/∂ ln ln T`` and ``∂ ln R/∂ ln(1/ε)`` are at most ``γ_max = max_j a_j`` and ``ν_max = max_j b_j``
everywhere: each is a weighted mean of the terms' powers. The least-squares fit

    ln R = u_group + γ · ln ln T + ν · ln(1/ε)

over a full (T × ε × run) grid has orthogonal regressors, so γ̂ is a weighted mean of the pairwise
slopes of ln R in ln ln T at fixed (ε, run), and by the mean value theorem each of these is at most
γ_max (ν̂ likewise). So a regret of the theorem's form gives γ̂ ≤ γ_max and ν̂ ≤ ν_max up to noise.
The verdict is **refuted** when the 95 % confidence interval (Student t, residual degrees of freedom)
of γ̂ lies wholly above γ_max, or that of ν̂ wholly above ν_max: the regret grows faster in ln T, or
in 1/ε, than any form the theorem allows. Otherwise **consistent**. A polynomial regret T^a gives
γ̂ ≈ a · ln T (√T on T = 10⁴…10⁸: γ̂ ≈ 7); (ln T)² gives γ̂ = 2; a regret ∝ 1/ε² under a 1/ε
theorem gives ν̂ = 2.

Beside the verdict (not part of it) the fit reports the theorem's constants, ``R = u_group + Σ_j θ_j ·
x_j`` with ``x_j`` the theorem's terms (instance constants included, so θ_j is the O(·)'s constant
of term j), and the power-law exponent a of ``ln R = u_group + a · ln T``.

**T-power forms** (:class:`PowerLaw`, :func:`check_power`). A bound polynomial in T, ``O(T^p · (ln T)^q ·
ε^{-b})`` (the online paper's problem-independent Thm 4 on an instance whose gap shrinks with T,
shuffle-linear Cor. 3.3's T^{3/5}, concurrent-shuffle Thm 5.1's T^{(k+1)/(2k+1)}, GLM Thm 6.2's √T with
Thm I.8's polylog terms), has elasticity
``∂ ln R/∂ ln T = p + q/ln T ≤ a_max = p + q/ln T_min`` on a grid starting at T_min; the fit is
``ln R = u_group + a · ln T (+ ν · ln(1/ε))`` and, by the same mean-value argument, the verdict is
**refuted** when the interval of â lies wholly above a_max (or that of ν̂ above b).

Where it falls short: an O(·) bound holds for T beyond an unknown T₀, and its constant is
unknown, so no finite grid can refute the theorem itself; "refuted" says the measured regret, on
this grid, grows faster than the form (often: the grid's small T are still in the exploration phase,
where regret is linear in T). A regret with a negative offset (``β ln T − c``) has elasticity above 1
and would be refuted although O(ln T); successive elimination's offset is positive (its confidence
widths grow with ln(|Φ| b² T) ≥ ln T). Batched elimination's regret is a staircase in T (arms leave
at batch ends, batches double), so residuals are lack of fit as much as noise, and the runs at one T
are not independent of those at another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

LEVEL = 0.95  # two-sided confidence of every interval here


@dataclass(frozen=True)
class Term:
    """One term ``scale · (ln T)^log_t · ε^{-inv_eps}`` of a regret bound; ``scale`` carries the
    instance's constants (Σ_a 1/Δ_a, K) so that its fitted multiplier is the O(·)'s constant."""

    label: str
    log_t: float
    inv_eps: float
    scale: float = 1.0

    def __call__(self, T: np.ndarray, eps: np.ndarray) -> np.ndarray:
        return self.scale * np.log(T) ** self.log_t * eps ** (-self.inv_eps)


@dataclass(frozen=True)
class Form:
    """A theorem's regret form: a sum of :class:`Term`s (an intercept per group is always fitted)."""

    name: str
    terms: tuple[Term, ...]

    def __post_init__(self):
        if not self.terms:
            raise ValueError(f"form {self.name!r}: needs at least one term")
        for t in self.terms:
            if not (t.log_t >= 0 and t.inv_eps >= 0 and t.scale > 0):
                raise ValueError(f"form {self.name!r}, term {t.label!r}: log_t = {t.log_t} and inv_eps = "
                                 f"{t.inv_eps} must be ≥ 0 and scale = {t.scale} > 0")

    @property
    def gamma_max(self) -> float:
        return max(t.log_t for t in self.terms)

    @property
    def nu_max(self) -> float:
        return max(t.inv_eps for t in self.terms)

    def __call__(self, T, eps, coefficients=None) -> np.ndarray:
        """The form's value, each term times its coefficient (1 when not given: the bound drawn with
        constant 1)."""
        T, eps = np.asarray(T, float), np.asarray(eps, float)
        c = [1.0] * len(self.terms) if coefficients is None else coefficients
        return sum(ci * t(T, eps) for ci, t in zip(c, self.terms))


@dataclass(frozen=True)
class Estimate:
    value: float
    stderr: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.value:.3g} [{self.low:.3g}, {self.high:.3g}]"


@dataclass(frozen=True)
class Verdict:
    form: Form
    consistent: bool
    gamma: Estimate  # elasticity in ln T
    nu: Estimate | None  # elasticity in 1/ε (None: one ε only)
    power: Estimate  # exponent a of R ∝ T^a, descriptive
    coefficients: dict[str, Estimate]  # the form's constants θ_j ({} when not identified: see note)
    n: int
    reasons: list[str] = field(default_factory=list)
    note: str = ""  # why the constants were not fitted

    @property
    def word(self) -> str:
        return "consistent" if self.consistent else "refuted"

    def text(self) -> str:
        nu = "" if self.nu is None else f", ν = {self.nu} (≤ {self.form.nu_max:g} allowed)"
        coef = (", ".join(f"θ[{k}] = {v.value:.3g} ± {v.stderr:.2g}" for k, v in self.coefficients.items())
                or f"constants not fitted ({self.note})")
        why = f": {'; '.join(self.reasons)}" if self.reasons else ""
        return (f"{self.word}{why}. γ = {self.gamma} (≤ {self.form.gamma_max:g} allowed){nu}; "
                f"R ∝ T^a with a = {self.power}; {coef}; {self.n} runs, {LEVEL:.0%} intervals")


def ols(y: np.ndarray, X: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Least squares ``y = u_group + X·θ``: θ, its standard errors (from the residuals), and the
    residual degrees of freedom. Raises when the design leaves no degree of freedom or θ is not
    identified (a regressor constant within every group)."""
    labels, g = np.unique(groups, return_inverse=True)
    D = np.hstack([np.eye(len(labels))[g], X])
    n, p = D.shape
    rank = np.linalg.matrix_rank(D)
    if rank < p:
        raise ValueError(f"regressors not identified: design rank {rank} < {p} columns ({len(labels)} group "
                         f"intercepts + {X.shape[1]} regressors); vary T and ε within a group")
    df = n - p
    if df < 1:
        raise ValueError(f"{n} observations for {p} parameters: no residual degree of freedom; add runs, T or ε")
    coef, *_ = np.linalg.lstsq(D, y, rcond=None)
    resid = y - D @ coef
    cov = (resid @ resid / df) * np.linalg.inv(D.T @ D)
    k = len(labels)
    return coef[k:], np.sqrt(np.diag(cov)[k:]), df


def _estimate(value: float, se: float, df: int) -> Estimate:
    q = stats.t.ppf(0.5 + LEVEL / 2, df)
    return Estimate(float(value), float(se), float(value - q * se), float(value + q * se))


def _validated(regret, T, eps, groups) -> tuple[np.ndarray, ...]:
    """The fit's data as float arrays, refused by name when a log of it is undefined."""
    R, T, eps, groups = (np.asarray(v) for v in (regret, T, eps, groups))
    R, T, eps = R.astype(float), T.astype(float), eps.astype(float)
    if not (R.shape == T.shape == eps.shape == groups.shape and R.ndim == 1):
        raise ValueError(f"regret, T, eps and groups must be 1-D of one length; got shapes {R.shape}, {T.shape}, "
                         f"{eps.shape}, {groups.shape}")
    if not np.all(np.isfinite(R)) or np.any(R <= 0):
        raise ValueError(f"regret: every value must be finite and > 0 (the fit takes its log); "
                         f"min {np.nanmin(R):g}")
    if np.any(T <= math.e):
        raise ValueError(f"T: every horizon must be > e (the fit takes ln ln T); min {T.min():g}")
    if np.any(eps <= 0):
        raise ValueError(f"eps: every ε must be > 0; min {eps.min():g}")
    if len(np.unique(T)) < 2:
        raise ValueError(f"T: need at least 2 distinct horizons, got {np.unique(T).tolist()}")
    return R, T, eps, groups


def power_fit(regret, T, eps=None, groups=None) -> tuple[Estimate, Estimate | None]:
    """The exponents of ``ln R = u_group + a · ln T + ν · ln(1/ε)``: â and ν̂ (None at one ε) with
    their intervals. ``eps`` None: one ε; ``groups`` None: one intercept (independent runs)."""
    n = np.shape(regret)
    R, T, eps, groups = _validated(regret, T, np.ones(n) if eps is None else eps,
                                   np.zeros(n, int) if groups is None else groups)
    several_eps = len(np.unique(eps)) > 1
    b, se, df = ols(np.log(R), np.column_stack([np.log(T)] + ([np.log(1 / eps)] if several_eps else [])), groups)
    return _estimate(b[0], se[0], df), _estimate(b[1], se[1], df) if several_eps else None


def check(regret, T, eps, groups, form: Form) -> Verdict:
    """Fit ``form`` to final regrets (one per run) at horizons T and privacy levels ε, and judge it
    by the elasticity test of the module's docstring. ``groups`` pairs runs across T and ε (the run
    index); each group gets its own intercept."""
    R, T, eps, groups = _validated(regret, T, eps, groups)
    several_eps = len(np.unique(eps)) > 1
    y = np.log(R)
    X = np.column_stack([np.log(np.log(T))] + ([np.log(1 / eps)] if several_eps else []))
    b, se, df = ols(y, X, groups)
    gamma = _estimate(b[0], se[0], df)
    nu = _estimate(b[1], se[1], df) if several_eps else None
    power, _ = power_fit(R, T, eps, groups)
    # The theorem's constants: terms constant over the grid (a term without ε at one ε, say) are
    # not identified beside the group intercepts; they are left out of this descriptive fit.
    cols = [t(T, eps) for t in form.terms]
    keep = [i for i, c in enumerate(cols) if np.ptp(c) > 0]
    coefficients, note = {}, ""
    try:
        b, se, df_c = ols(R, np.column_stack([cols[i] for i in keep]), groups)
        coefficients = {form.terms[i].label: _estimate(bi, si, df_c) for i, bi, si in zip(keep, b, se)}
    except ValueError as e:  # the verdict does not need them; the report says why they are missing
        note = str(e)
    reasons = []
    if gamma.low > form.gamma_max:
        reasons.append(f"regret grows like (ln T)^{gamma.value:.2f}, interval [{gamma.low:.2f}, {gamma.high:.2f}] "
                       f"above the form's {form.gamma_max:g}")
    if nu is not None and nu.low > form.nu_max:
        reasons.append(f"regret grows like (1/ε)^{nu.value:.2f}, interval [{nu.low:.2f}, {nu.high:.2f}] "
                       f"above the form's {form.nu_max:g}")
    return Verdict(form, not reasons, gamma, nu, power, coefficients, len(R), reasons, note)


@dataclass(frozen=True)
class PowerLaw:
    """A bound ``O(T^t_pow · (ln T)^log_t · ε^{-inv_eps})``, polynomial in T (module docstring), plus
    any lower-order terms ``also = ((p, q), …)``, each ``T^p (ln T)^q``: a polylog term such as
    Sarmasarkar et al.'s Thm I.8 (ln T)⁵ has elasticity q/ln T, which on a grid starting at small T
    can exceed the leading term's; ``inv_eps`` is the largest ε power of any term."""

    name: str
    t_pow: float
    log_t: float = 0.0
    inv_eps: float = 0.0
    also: tuple[tuple[float, float], ...] = ()

    def __post_init__(self):
        if not (self.t_pow > 0 and self.log_t >= 0 and self.inv_eps >= 0):
            raise ValueError(f"power law {self.name!r}: t_pow = {self.t_pow} must be > 0, log_t = {self.log_t} "
                             f"and inv_eps = {self.inv_eps} ≥ 0")
        for p, q in self.also:
            if not (p >= 0 and q >= 0 and p + q > 0):
                raise ValueError(f"power law {self.name!r}, lower-order term T^{p} (ln T)^{q}: p and q must be ≥ 0, "
                                 f"not both 0")

    def a_max(self, t_min: float) -> float:
        """The largest elasticity ``p + q/ln T`` over T ≥ t_min of any term T^p (ln T)^q: a sum of
        such terms has a weighted mean of theirs, so at most the largest."""
        if not t_min > 1:
            raise ValueError(f"t_min = {t_min}: the elasticity bound needs T > 1")
        return max(p + q / math.log(t_min) for p, q in ((self.t_pow, self.log_t), *self.also))

    def __call__(self, T, eps=1.0) -> np.ndarray:
        T = np.asarray(T, float)
        return T ** self.t_pow * np.log(T) ** self.log_t * np.asarray(eps, float) ** (-self.inv_eps)


@dataclass(frozen=True)
class PowerVerdict:
    law: PowerLaw
    consistent: bool
    power: Estimate  # â of R ∝ T^a
    a_max: float  # the law's largest elasticity on the grid
    nu: Estimate | None
    n: int
    reasons: list[str] = field(default_factory=list)

    @property
    def word(self) -> str:
        return "consistent" if self.consistent else "refuted"

    def text(self) -> str:
        nu = "" if self.nu is None else f", ν = {self.nu} (≤ {self.law.inv_eps:g} allowed)"
        why = f": {'; '.join(self.reasons)}" if self.reasons else ""
        also = "".join(f" + T^{p:g} (ln T)^{q:g}" for p, q in self.law.also)
        return (f"{self.word}{why}. a = {self.power} (≤ {self.a_max:.3g} allowed: T^{self.law.t_pow:.3g}"
                f"{f' (ln T)^{self.law.log_t:g}' if self.law.log_t else ''}{also}){nu}; {self.n} runs, "
                f"{LEVEL:.0%} intervals")


def check_power(regret, T, law: PowerLaw, eps=None, groups=None) -> PowerVerdict:
    """Judge a T-power bound: refuted when the interval of â (of ν̂) lies wholly above the law's
    ``a_max`` on this grid (above its ε power)."""
    a, nu = power_fit(regret, T, eps, groups)
    a_max = law.a_max(float(np.min(T)))
    reasons = []
    if a.low > a_max:
        reasons.append(f"regret grows like T^{a.value:.3f}, interval [{a.low:.3f}, {a.high:.3f}] above the law's "
                       f"{a_max:.3f}")
    if nu is not None and nu.low > law.inv_eps:
        reasons.append(f"regret grows like (1/ε)^{nu.value:.2f}, interval [{nu.low:.2f}, {nu.high:.2f}] above "
                       f"the law's {law.inv_eps:g}")
    return PowerVerdict(law, not reasons, a, a_max, nu, int(np.size(regret)), reasons)
