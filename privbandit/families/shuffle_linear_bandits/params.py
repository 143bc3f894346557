"""Parameter rules and privacy events of the shuffle-model linear bandits, per preset.

Presets:

- ``theory``: the theorems' constants. P_Amp σ of Thm 3.2; P_Vec g, b of Thm C.1 (b with 24·10⁴);
  LDP σ of Prop. F.1; JDP a Gaussian tree calibrated by zCDP; λ and β_m of Lemma A.2 / A.4.
- ``paper-code``: the constants of the authors' experiments (``LinBanditPrivate.py``, spec §9), named
  as such. Their defects are not reproduced: g and b are integers (ceil), the JDP tree draws fresh
  noise per node, P_Vec's encoding does not overflow (see :class:`VecParams`), and every ledger shows
  the privacy those constants actually give (often none proven).
- ``exact``: ``theory`` everywhere but P_Vec, whose noise is fair bits (p = ½) and whose b is the
  fewest for which the exact accountant of the released label counts gives the batch's (ε, δ)
  (:func:`exact_vec_params`; issue #30 item 4): no proof constant, and the ledger names the
  accountant.

Privacy is declared per release (:func:`batch_event`): the spine's ledger composes the events
(each batch's users are disjoint, so a run's guarantee is its worst batch; returning users put
every batch in one group, sequential composition).

All sensitivities scale with ``feature_norm`` L (max ‖φ‖₂) and ``entry_bound`` (max |φ_k|); rewards
lie in [0, 1]. Theorems assume L = 1 (Assumption 3.1, spec §1); for larger L we scale σ by max(L, L²).
"""

from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass

from privbandit.families.shuffle_linear_bandits.mechanisms import REUSED_LEAK, VecParams, n_entries, tree_levels
from privbandit.protocol.primitives.noise.grid_gaussian import GAUSSIAN_GRID, grid_sensitivity
from privbandit.protocol.primitives.noise.sampler_bounds import discrete_gaussian_fast_tv_bound
from privbandit.protocol.privacy import ZCDP, ApproxDP, NonPrivate, NoneProven, PrivacyEvent
from privbandit.protocol.privacy import amplification as amp
from privbandit.protocol.privacy import counts

ALGORITHMS = ("linucb", "linucb-jdp", "linucb-ldp", "linucb-sdp-amp", "linucb-sdp-vec")
PRESETS = ("theory", "paper-code", "exact")
# The ledger's trust model, and in words.
TRUST_MODEL = {"linucb": "none", "linucb-jdp": "central", "linucb-ldp": "local", "linucb-sdp-amp": "shuffle",
               "linucb-sdp-vec": "shuffle"}
TRUST = {"linucb": "none (raw data to the server)", "linucb-jdp": "central (trusted server, JDP)",
         "linucb-ldp": "local (pass-through, attributable reports)",
         "linucb-sdp-amp": "shuffle (trusted shuffler, permuted list)",
         "linucb-sdp-vec": "shuffle (trusted shuffler, per-label bit counts)"}
# Thm C.1's constant (adapted from Cheu et al. 2021); Thm 3.5 / C.1 hold for ε ≤ 15, δ < 1/2.
VEC_THEORY_CONSTANT = 24e4
VEC_MAX_EPSILON = 15.0


@dataclass(frozen=True)
class Budget:
    """The (ε, δ) one batch's release is calibrated to, and how many batches one user can join."""

    epsilon: float
    delta: float
    participations: int  # 1 for unique users; M for returning users (Assumption 4.1)


def batch_budget(epsilon: float, delta: float, participations: int) -> Budget:
    """Unique users: (ε, δ) per batch (parallel composition). Returning users in up to M batches:
    ε_m = ε/(2√(2M log(2/δ))), δ_m = δ/(2M) (Thm E.2 as the paper applies it, spec §2.3)."""
    if participations <= 1:
        return Budget(epsilon, delta, 1)
    m = participations
    return Budget(epsilon / (2 * math.sqrt(2 * m * math.log(2 / delta))), delta / (2 * m), m)


def report_sensitivity(feature_norm: float) -> float:
    """ℓ2 distance between two users' [φy, upper(φφᵀ)]: ≤ 2√(L² + L⁴) for y ∈ [0, 1]."""
    return 2 * math.sqrt(feature_norm**2 + feature_norm**4)


def amp_sigma(preset: str, budget: Budget, batch: int, feature_norm: float) -> float:
    eps, delta = budget.epsilon, budget.delta
    if preset == "paper-code":  # the code's sd: no 4, no √(2 log(2/δ)) (≈ 9.8× below Thm 3.2 at δ = 0.1)
        return math.sqrt(math.log(2.5 * batch / delta)) / (eps * math.sqrt(batch))
    return (4 * math.sqrt(2 * math.log(2.5 * batch / delta) * math.log(2 / delta)) / (eps * math.sqrt(batch))
            * max(feature_norm, feature_norm**2))


def amp_admissible(budget: Budget, batch: int) -> bool:
    """Thm 3.2's range ε ≤ √(log(2/δ)/B), which keeps ε₀ ≤ 1 in Lemma B.4."""
    return budget.epsilon <= math.sqrt(math.log(2 / budget.delta) / batch)


def ldp_sigma(preset: str, budget: Budget, feature_norm: float) -> float:
    eps, delta = budget.epsilon, budget.delta
    if preset == "paper-code":
        return math.sqrt(math.log(2.5 / delta)) / eps
    return 4 * math.sqrt(2 * math.log(2.5 / delta)) / eps * max(feature_norm, feature_norm**2)


def jdp_sigma(preset: str, budget: Budget, observations: int, feature_norm: float, d: int) -> float:
    """Per-node sd of the tree. Theory: each user sits in ≤ ⌊log₂ n⌋+1 nodes; Gaussian nodes compose
    as ρ = levels·Δ²/(2σ²)-zCDP, solved for ρ(ε, δ) (user-level: Δ grows by M₀, Prop. 4.3), Δ the
    grid-widened sensitivity :func:`node_event` charges."""
    eps, delta = budget.epsilon, budget.delta
    if preset == "paper-code":  # the code's sd uses ln n for the node count
        return math.sqrt(math.log(observations)) * math.log(2.5 / delta) / eps
    levels = tree_levels(observations)
    sens = grid_sensitivity(report_sensitivity(feature_norm), n_entries(d)) * budget.participations
    return sens * math.sqrt(levels / (2 * amp.zcdp_rho(eps, delta)))


def vec_params(preset: str, budget: Budget, batch: int, d: int, entry_bound: float, feature_norm: float,
               scale: float | None, span: str, bits: str = "integer") -> VecParams:
    """Thm 3.5 / C.1: p = 1/4, g = max{2√B, d, 4}, b = C·g²·log²(4(d²+1)/δ)/(ε²B), C = 24·10⁴.
    paper-code: b = C·g²·ln²(d/δ)/(ε²B) with the code's C = ``scale`` (1; "tuned 10 for ε = 1, 10"),
    shift Δ = max ‖φ‖₂ as the code does. exact: :func:`exact_vec_params` (no constant to scale,
    and only the span 2Δ its accountant covers)."""
    if preset == "exact":
        if scale is not None or span != "2delta":
            raise ValueError("preset = 'exact' calibrates P_Vec by its accountant: vec_scale must be unset "
                             "and vec_span '2delta'")
        return exact_vec_params(budget, batch, d, entry_bound)
    eps, delta = budget.epsilon, budget.delta
    g = math.ceil(max(2 * math.sqrt(batch), d, 4))
    if preset == "paper-code" and bits == "authors-float":  # their g, b: ⌊b⌋ bits drawn, b subtracted
        g = max(2 * math.sqrt(batch), d, 4)
        b = (1.0 if scale is None else scale) * g**2 * math.log(d / delta) ** 2 / (eps**2 * batch)
        return VecParams(g=g, b=math.floor(b), p=0.25, shift=feature_norm,  # ε = 10: b = 0.61, no bit
                         span=2 * feature_norm if span == "2delta" else feature_norm, centre_bits=b)
    if preset == "paper-code":
        c = 1.0 if scale is None else scale
        b = c * g**2 * math.log(d / delta) ** 2 / (eps**2 * batch)
        shift = feature_norm
    else:
        c = VEC_THEORY_CONSTANT if scale is None else scale
        b = c * g**2 * math.log(4 * (d**2 + 1) / delta) ** 2 / (eps**2 * batch)
        shift = max(entry_bound, entry_bound**2)
    return VecParams(g=g, b=max(1, math.ceil(b)), p=0.25, shift=shift,
                     span=2 * shift if span == "2delta" else shift)


def exact_vec_params(budget: Budget, batch: int, d: int, entry_bound: float = 1.0) -> VecParams:
    """P_Vec under the ``exact`` preset: Thm C.1's g = max{2√B, d, 4} and Cheu et al.'s encoding
    (span 2Δ: a user moves each label's count by at most g), fair noise bits (p = ½, drawn exactly)
    and the fewest b for which the exact accountant of the released label counts
    (:func:`privbandit.protocol.privacy.counts.fewest_noise_bits`, all D labels composed) gives the
    batch's (ε, δ): no proof constant."""
    g = math.ceil(max(2 * math.sqrt(batch), d, 4))
    shift = max(entry_bound, entry_bound**2)
    b = counts.fewest_noise_bits(batch, g, n_entries(d), budget.epsilon, budget.delta)
    return VecParams(g=g, b=b, p=0.5, shift=shift, span=2 * shift)


def exact_vec_event(budget: Budget, batch: int, vec: VecParams, labels: int) -> ApproxDP:
    """The ``exact`` preset's P_Vec release: ε at the batch's δ from the exact accountant of the
    ``labels`` counts its users' fair noise bits hide (:func:`exact_vec_params`)."""
    if vec.p != 0.5 or vec.span < 2 * vec.shift:
        raise ValueError("the exact count accountant covers fair noise bits (p = ½) and span 2Δ only")
    return ApproxDP(counts.count_epsilon(batch * vec.b, vec.g, labels, budget.delta), budget.delta, counts.BASIS)


def vec_bits(params: VecParams, d: int) -> dict:
    """Communication per user: Alg. 5/6's (d + d²)(g + b) one-bit messages, the same without the
    mirrored lower triangle, and the count-encoded wire size (one unsigned integer per label)."""
    per_label = params.g + params.b
    width = max(8, 1 << math.ceil(math.log2(math.ceil(math.log2(params.max_count + 1)))))
    return {"bits_per_user_theory": (d + d * d) * per_label,
            "bits_per_user_upper": n_entries(d) * per_label,
            "bytes_per_user_wire": n_entries(d) * min(width, 64) // 8}


# --- confidence widths (Algorithm 1's λ and β) --------------------------------------------------

def noise_scale_total(algorithm: str, sigma: float, horizon: int, batch: int, vec: VecParams | None) -> float:
    """σ̃: sd of one entry of the noise accumulated over the whole horizon (Assumption A.3)."""
    if algorithm in ("linucb-sdp-amp", "linucb-ldp"):
        return sigma * math.sqrt(horizon)
    if algorithm == "linucb-sdp-vec":
        per_batch = vec.scale * math.sqrt(batch / 4 + batch * vec.b * vec.p * (1 - vec.p))
        return per_batch * math.sqrt(horizon / batch)
    if algorithm == "linucb-jdp":
        return sigma * math.sqrt(tree_levels(math.ceil(horizon / batch)))
    return 0.0


@dataclass(frozen=True)
class Confidence:
    """λ (V₀ = λI), the eigenvalue floor of the non-PD safeguard, and β_m as a function of t_m."""

    lam: float
    floor: float
    alpha: float
    reward_sd: float
    fixed_width: float | None  # paper-code: one width for the whole run
    lam_min: float = 1.0
    lam_max: float = 1.0
    nu: float = 0.0

    def beta(self, t: int, d: int) -> float:
        if self.fixed_width is not None:
            return self.fixed_width
        self_normalized = self.reward_sd * math.sqrt(2 * math.log(1 / self.alpha)
                                                     + d * math.log(1 + t / (d * self.lam_min)))
        return self_normalized + math.sqrt(self.lam_max) + self.nu


def confidence(preset: str, algorithm: str, sigma_total: float, horizon: int, batch: int, d: int,
               feature_norm: float, paper_code_noise: float, alpha: float | None) -> Confidence:
    """Theory (Lemma A.2/A.4 with c₁ = c₂ = 1): λ = 2Σ_N, Σ_N = σ̃(√d + √log(M/α)), λ_min = Σ_N,
    λ_max = 3Σ_N, ν = √(σ̃(√d + √log(M/α))); non-private: λ = 1, λ_min = λ_max = 1, ν = 0.
    The floor is λ_min: V_m ⪰ λ_min·I is the event the regret proof conditions on.

    paper-code (spec §9): Γ from the algorithm's noise, Λ = 2Γ (LinUCB: Γ = 1, Λ = 10⁻⁴), one width
    √Γ·√d + R·√(d·log((1 + T·L²/Γ)/α)) with R = 0.5 and α = 1/T, computed at T and held fixed."""
    reward_sd = 0.5  # Bernoulli rewards are ½-sub-Gaussian
    if preset == "paper-code":
        a = 1.0 / horizon if alpha is None else alpha
        if algorithm == "linucb":
            gamma, lam = 1.0, 1e-4
        else:
            factor = {"linucb-jdp": math.sqrt(math.log(horizon)), "linucb-sdp-vec": 0.25 * math.sqrt(horizon)}
            gamma = paper_code_noise * factor.get(algorithm, math.sqrt(horizon)) * math.sqrt(d)
            lam = 2 * gamma
        width = math.sqrt(gamma) * math.sqrt(d) + reward_sd * math.sqrt(
            d * math.log((1 + horizon * feature_norm**2 / gamma) / a))
        return Confidence(lam=lam, floor=lam / 2, alpha=a, reward_sd=reward_sd, fixed_width=width)
    a = 1.0 / horizon if alpha is None else alpha
    if sigma_total == 0:
        return Confidence(lam=1.0, floor=0.5, alpha=a, reward_sd=reward_sd, fixed_width=None)
    batches = max(1, horizon // batch)
    sigma_n = sigma_total * (math.sqrt(d) + math.sqrt(math.log(batches / a)))
    lam = max(1.0, 2 * sigma_n)
    return Confidence(lam=lam, floor=lam / 2, alpha=a, reward_sd=reward_sd, fixed_width=None,
                      lam_min=lam / 2, lam_max=1.5 * lam, nu=math.sqrt(sigma_n))


def paper_code_noise(algorithm: str, epsilon: float, delta: float, batch: int, horizon: int, d: int) -> float:
    """The "noise" each algorithm of the authors' code feeds into Γ (spec §9)."""
    if algorithm == "linucb-ldp":
        return math.sqrt(math.log(2.5 / delta)) / epsilon
    if algorithm == "linucb-jdp":
        return math.sqrt(math.log(horizon)) * math.log(2.5 / delta) / epsilon
    if algorithm == "linucb-sdp-amp":
        return math.sqrt(math.log(2.5 * batch / delta)) / (epsilon * math.sqrt(batch))
    if algorithm == "linucb-sdp-vec":
        return math.log(d / delta) / (epsilon * math.sqrt(batch))
    return 0.0


# --- privacy events ------------------------------------------------------------------------------

# The ideal discrete Gaussian's guarantee: the double-coin sampler's distance from it is the
# mechanism's sampler_tv_per_entry, which these figures do not include.
SAMPLER_CAVEAT = "; for the ideal discrete Gaussian, not the sampler (mechanism.sampler_tv_per_entry)"
AMP_BASIS = ("Feldman-McMillan-Talwar 2021, Thm 3.2 numeric + Thm 3.8 (amplification by shuffling of the "
             "grid's discrete Gaussian randomizer, its (ε₀, δ₀) from ρ-zCDP, Canonne-Kamath-Steinke 2020 Thm 14)"
             + SAMPLER_CAVEAT)
LDP_BASIS = ("discrete Gaussian on the grid, ρ-zCDP (Canonne-Kamath-Steinke 2020, Thm 14), one attributable "
             "report per user and batch" + SAMPLER_CAVEAT)
VEC_BASIS = "Chowdhury & Zhou 2022, Thm 3.5 / C.1 (Cheu et al. 2021 adapted)"


def vec_warnings(preset: str, budget: Budget, vec: VecParams, vec_scale: float | None) -> tuple[bool, list[str]]:
    """Does Thm C.1 cover these P_Vec parameters? And, if not, why."""
    warnings = []
    covered = preset == "theory" and (vec_scale is None or vec_scale >= VEC_THEORY_CONSTANT)
    if vec.span < 2 * vec.shift:
        covered = False
        warnings.append("span = Δ (Algorithm 5 as printed): counts reach 2g + b, twice the sensitivity "
                        "Thm C.1 assumes; no guarantee is claimed")
    if budget.epsilon > VEC_MAX_EPSILON or budget.delta >= 0.5:
        covered = False
        warnings.append(f"per-batch (ε, δ) = ({budget.epsilon:.4g}, {budget.delta:.4g}) outside Thm 3.5's "
                        "range ε ≤ 15, δ < 1/2")
    if preset == "paper-code" or (vec_scale is not None and vec_scale < VEC_THEORY_CONSTANT):
        warnings.append("b below Thm C.1's constant 24·10⁴ (paper-code constants): no proven guarantee")
    return covered, warnings


def report_rho(feature_norm: float, d: int, sigma: float) -> float:
    """ρ of one report through the grid Gaussian randomizer: (Δ + √D·γ)²/(2σ²), Δ the reports'
    ℓ2 sensitivity (:func:`report_sensitivity`), widened by the rounding of D entries to the grid
    (:func:`~privbandit.protocol.primitives.noise.grid_gaussian.grid_sensitivity`)."""
    return grid_sensitivity(report_sensitivity(feature_norm), n_entries(d)) ** 2 / (2 * sigma**2)


def batch_event(algorithm: str, preset: str, budget: Budget, batch: int, feature_norm: float,
                sigma: float | None, vec: VecParams | None, vec_scale: float | None,
                d: int | None = None, tree_noise: str = "fresh") -> PrivacyEvent:
    """What one batch's release guarantees its users (JDP: one tree node, see :func:`node_event`;
    with the authors' reused draws, nothing: :data:`~.mechanisms.REUSED_LEAK`).
    ``d``: the features' dimension, which the Gaussian mechanisms' grid rounding needs."""
    if algorithm == "linucb":
        return NonPrivate()
    if algorithm == "linucb-jdp" and tree_noise == "authors-reused":
        return NoneProven(REUSED_LEAK)
    if algorithm != "linucb-sdp-vec" and d is None:
        raise ValueError(f"{algorithm}: the privacy event needs the dimension d (its grid rounding widens Δ)")
    if algorithm == "linucb-sdp-amp":
        return _amp_event(batch, report_rho(feature_norm, d, sigma), budget.delta)
    if algorithm == "linucb-ldp":
        return ZCDP(report_rho(feature_norm, d, sigma))
    if algorithm == "linucb-jdp":
        return node_event(budget, feature_norm, sigma, d)
    if preset == "exact":
        if d is None:
            raise ValueError("linucb-sdp-vec under preset 'exact': the accountant needs the dimension d (its labels)")
        return exact_vec_event(budget, batch, vec, n_entries(d))
    covered, warnings = vec_warnings(preset, budget, vec, vec_scale)
    if not covered:
        return NoneProven("P_Vec: " + "; ".join(warnings))
    return ApproxDP(budget.epsilon, budget.delta, VEC_BASIS)


@lru_cache(maxsize=256)
def _amp_event(batch: int, rho: float, delta: float) -> ApproxDP:
    """P_Amp's batch event: the shuffled grid-Gaussian randomizer's (ε̃, δ̃) (a bisection over δ₀ of
    root-findings, a few ms: computed once per (B, ρ, δ), as every run of a task asks for it)."""
    a = amp.amplified_randomizer(batch, amp.discrete_gaussian_local_epsilon(rho), delta)
    return ApproxDP(a["epsilon"], a["delta"], AMP_BASIS)


def node_event(budget: Budget, feature_norm: float, sigma: float, d: int) -> ZCDP:
    """One node of JDP's tree: Δ²/(2σ²)-zCDP (Bun & Steinke 2016; for the grid's discrete Gaussian,
    Canonne-Kamath-Steinke 2020 Thm 14) for the users whose reports it sums. Δ is the ℓ2 distance of
    two users' reports widened by the rounding of the batch sum to the grid, times M₀ for returning
    users (Prop. 4.3). The analyzer records level j's nodes in lane ``level-j``: a level's nodes cover
    disjoint batches, levels compose sequentially, so a user pays ≤ ⌊log₂ n⌋ + 1 nodes, the tree's
    bound."""
    sens = grid_sensitivity(report_sensitivity(feature_norm), n_entries(d)) * budget.participations
    return ZCDP(sens**2 / (2 * sigma**2))


def describe(algorithm: str, preset: str, epsilon: float, delta: float, budget: Budget, batch: int,
             feature_norm: float, sigma: float | None, vec: VecParams | None, vec_scale: float | None,
             horizon: int, tree_noise: str = "fresh") -> dict:
    """The mechanism's parameters and the caveats of its guarantee, for ``summary.json`` (the
    guarantee itself is the ledger's, composed from :func:`batch_event`)."""
    out = {"trust": TRUST[algorithm], "preset": preset, "epsilon_target": epsilon, "delta_target": delta,
           "participations": budget.participations, "epsilon_batch_target": budget.epsilon,
           "delta_batch_target": budget.delta, "warnings": []}
    if algorithm == "linucb":
        return out
    if algorithm in ("linucb-sdp-amp", "linucb-ldp", "linucb-jdp"):
        # The ledger's ρ is the ideal discrete Gaussian's; the double-coin sampler is only within
        # this total variation of it per entry (an upper bound), which no ledger figure includes.
        out["sampler_tv_per_entry"] = (discrete_gaussian_fast_tv_bound(sigma / GAUSSIAN_GRID)
                                       if sigma / GAUSSIAN_GRID >= 1 else 1.0)
    if algorithm in ("linucb-sdp-amp", "linucb-ldp"):
        out["sigma"] = sigma
        out["accountant"] = AMP_BASIS if algorithm == "linucb-sdp-amp" else LDP_BASIS
        if algorithm == "linucb-sdp-amp" and not amp_admissible(budget, batch):
            out["warnings"].append(
                f"per-batch ε = {budget.epsilon:.4g} is outside Thm 3.2's range ε ≤ √(log(2/δ)/B) = "
                f"{math.sqrt(math.log(2 / budget.delta) / batch):.4g}: the paper's O(ε, δ) claim does not apply; "
                "the numeric accountant's ε̃ still holds")
        return out
    if algorithm == "linucb-jdp":
        out.update(sigma=sigma, tree_levels=tree_levels(math.ceil(horizon / batch)),
                   accountant=("Gaussian tree, zCDP (Bun & Steinke 2016), one lane per tree level"
                               + SAMPLER_CAVEAT),
                   guarantee_kind="JDP (billboard: actions depend on the released prefix sums only)",
                   tree_noise=tree_noise)
        if tree_noise == "authors-reused":
            out.update(accountant="none: the authors' reused draws are not the tree mechanism",
                       reused_draws=f"⌊ln(1 + c)⌋ + 1 after c batches (≤ {math.floor(math.log(horizon / batch)) + 1})")
            out["warnings"].append(REUSED_LEAK)
        return out
    if preset == "exact":
        out.update(accountant=counts.BASIS, g=vec.g, b=vec.b, p=vec.p, shift=vec.shift, span=vec.span, covered=True)
        return out
    covered, warnings = vec_warnings(preset, budget, vec, vec_scale)
    out.update(accountant=VEC_BASIS, g=vec.g, b=vec.b, p=vec.p, shift=vec.shift, span=vec.span, covered=covered)
    out["warnings"] += warnings
    return out
