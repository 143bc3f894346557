"""The releases of Sarmasarkar's GLM bandits, as ``privbandit audit`` tests them.

ShuffleGLM (Algorithm 1, shuffle DP): what the shuffler hands the analyzer in each round is P_Vec's
per-label totals of 1-bits over the batch (:class:`~privbandit.families.shuffle_linear_bandits.
mechanisms.LabelCountShuffler`), every user's counts drawn by the family's own
:class:`~privbandit.families.shuffle_linear_bandits.mechanisms.BitSumRandomizer` with the round's
parameters (:meth:`.shuffle_parties.ShuffleSetup.cov_vec` / :meth:`~.shuffle_parties.ShuffleSetup.pgd`).
Two rounds per batch k < M − 1 are audited:

- the covariance round (R2 of upper(w·x xᵀ), Δ = 1 in the warm-up, 1/κ* after it): user 0's
  matrix w·e₁e₁ᵀ against w·e₂e₂ᵀ (w = Δ, the largest weight; ℓ2 distance √2·Δ, the sensitivity
  Lemma S.2 is stated for), the other B − 1 users at w·e₁e₁ᵀ;
- one 𝒫_GD gradient round (R1 of (μ(⟨x,θ⟩) − r)·x, Δ = 1): user 0's gradient e₁ against −e₁ (the
  ends of the range the randomizer encodes), the others at e₁.

The P_Vec rounds are sampled by :func:`~privbandit.families.shuffle_linear_bandits.audit.vec_sum_target`
(only the labels the pair moves; their signed total, binned). Claims: the ledger's event of that round
(``covariance``: ApproxDP(ε/2, δ/2); ``optimizer``: one AdvancedComposition round, (ε₀, δ₀) on its
own), at the round's own δ by default. ``--cohort`` replaces the batch sizes (P_Vec is then
calibrated, by the family's own code, for that many users), else the experiment's batches are used.

Private-GLM (Algorithm 2, central, joint DP): the trusted analyzer publishes the V tree's prefix
sums (:class:`~.mechanisms.GridGaussianTree`); leaf 1 sits in the m = ⌊log₂ T⌋ + 1 dyadic nodes
[1, 2ʲ], each released alone as the prefix after 2ʲ leaves. Pair: leaf 1 = e₁e₁ᵀ against e₂e₂ᵀ (ℓ2
distance √2, the V tree's sensitivity), rounded to the grid by the tree's own ``insert``. Each node
is its rounded leaf plus the tree's discrete Gaussian noise (``sample_discrete_gaussian`` at the
tree's diagonal σ²: App. I.1's noise has σ²/2 off the diagonal, but this pair moves two diagonal
entries only, as far in Frobenius norm as any replace-one pair); only the two coordinates that
differ are drawn (the others are ancillary), and the m
nodes are read as Σ_j ⟨x_j, q₁ − q₀⟩, the statistic the likelihood ratio of equal-σ Gaussians is a
function of (binned, as above). Claim: the per-user event the analyzer spends every round (lane ``trees``):
ZCDP(ρ_V + ρ_H), though this pair moves the V tree only (a user's leaf is in one tree).

Not audited: Private-GLM's optimizer calls (𝒫_GD or DP-SGD inside the trusted analyzer) and the
switching indicators' charge; the non-private baselines (no claim).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from privbandit.audit.targets import AuditTarget, NoWirePath, WireTarget
from privbandit.families.glm_bandits import mechanisms as mech
from privbandit.families.glm_bandits import parties as gp
from privbandit.families.glm_bandits import shuffle_parties as sp
from privbandit.families.shuffle_linear_bandits.audit import vec_sum_target
from privbandit.families.shuffle_linear_bandits.mechanisms import to_upper
from privbandit.protocol.primitives.noise.discrete_gaussian import sample_discrete_gaussian


def shuffle_glm_targets(family, config, label: str, cohort: int | None) -> list[AuditTarget]:
    public = family.public_task(config, label, [0])
    s = sp.shuffle_setup(public)
    if cohort is not None:
        s = replace(s, schedule=tuple(cohort for _ in s.schedule))

    def claim_of(event, lane: str, group=None):
        def claim(delta: float) -> dict:
            book = family.ledger({**public, "delta": delta})
            book.record(event, lane, group)
            return book.summary()
        return claim

    D, d = s.d * (s.d + 1) // 2, s.d
    out = []
    for k in range(min(2, s.batches - 1)):  # the warm-up (Δ = 1) and the first clipped batch (Δ = 1/κ*)
        n = s.schedule[k]
        cov, c0, c1 = round_pair(s, k, "covariance")
        event = s.cov_event(k)
        out.append(vec_sum_target(
            family.name, f"{label}/covariance-{k + 1}", "shuffle-glm", cov, c0, c1, n,
            claim_of(event, "covariance"), s.delta / 2 if event.status == "proven" else s.delta,
            f"batch {k + 1}'s covariance round: P_Vec label totals of upper(w·x xᵀ), {D} labels",
            {"batch": k + 1, "round": "covariance", "event": type(event).__name__}))
        p, gevent = s.pgd(k), s.grad_event(k)
        _, g0, g1 = round_pair(s, k, "gradient")
        out.append(vec_sum_target(
            family.name, f"{label}/gradient-{k + 1}", "shuffle-glm", p.vec, g0, g1, n,
            claim_of(gevent, "optimizer", k), p.delta_iter if gevent.status == "proven" else s.delta,
            f"one 𝒫_GD gradient round of batch {k + 1} ({p.iterations} in all): P_Vec label totals of the "
            f"gradients, {d} labels", {"batch": k + 1, "round": "gradient", "event": type(gevent).__name__,
                                       "eps_iter": p.eps_iter, "iterations": p.iterations}))
    return out


def round_pair(s: sp.ShuffleSetup, k: int, kind: str):
    """(P_Vec parameters, user 0's entries under input 0, under input 1) of batch k's ``kind``
    round (module docstring): ``covariance``, upper(w·e₁e₁ᵀ) against upper(w·e₂e₂ᵀ); ``gradient``,
    e₁ against −e₁."""
    e1, e2 = np.eye(s.d)[0], np.eye(s.d)[1]
    if kind == "covariance":
        w = s.shift(k)
        return s.cov_vec(k), to_upper(w * np.outer(e1, e1)), to_upper(w * np.outer(e2, e2))
    return s.pgd(k).vec, e1, -e1


def shuffle_glm_wire(family, config, label: str, target: AuditTarget, mechanism=None) -> WireTarget:
    """``privbandit audit --transport mqtt``'s path for one of ShuffleGLM's P_Vec rounds (the
    family hook :meth:`~privbandit.protocol.spine.family.Family.wire_target`), or
    :class:`NoWirePath` saying why a release has none: the shuffler sums the batch's users' label
    counts of the round the analyzer opens (:meth:`.shuffle_parties.ShuffleSetup.cov_round` or
    ``grad_round``, under its plan body's phase), each user's entries counted by
    :class:`~privbandit.families.shuffle_linear_bandits.mechanisms.BitSumRandomizer` with the
    round's parameters (``mechanism``: a randomizer the tests break), through
    :func:`~privbandit.families.shuffle_linear_bandits.audit.vec_sum_wire`. Private-GLM's tree is
    the trusted analyzer's noise, added after the wire."""
    from privbandit.families.shuffle_linear_bandits.audit import vec_sum_wire

    kind = family.algorithm(config, label).algorithm
    if kind == "private-glm":
        raise NoWirePath("central model: the aggregator passes the raw (x, r); the privacy is the trusted analyzer's "
                         "tree noise, added after the wire")
    if kind != "shuffle-glm":
        raise NoWirePath("non-private: the aggregator passes the raw (x, r), and no claim is made")
    public = family.public_task(config, label, [0])
    server = family.analyzer(public, [0])
    s, n = server.s, int(target.details["n"])
    k = int(target.details["batch"]) - 1
    if s.schedule[k] != n:  # --cohort: every batch that size, P_Vec calibrated for it (as the target)
        s = replace(s, schedule=tuple(n for _ in s.schedule))
    (first,) = server.plans()  # batch 1's plan: its billboard, as every plan carries it
    phase = target.details["round"]
    vec, e0, e1 = round_pair(s, k, phase)
    if phase == "covariance":
        rnd, body = s.cov_round(0, k), first.body
    else:
        rnd = s.grad_round(0, k)
        body = {**first.body, "phase": sp.PHASE_GRADIENT, "point": np.zeros((1, s.d))}
    return vec_sum_wire(target, rnd, body, vec, e0, e1, mechanism)


def tree_target(family, config, label: str, cal: mech.TreeCalibration | None = None) -> AuditTarget:
    """Private-GLM's V tree (see the module docstring). ``cal``: the tree's own calibration
    (default), or one the tests break; the claim is always the analyzer's own event."""
    public = family.public_task(config, label, [0])
    s = gp.setup(public)
    cal = s.spec.tree_v[0] if cal is None else cal
    d, m = s.d, cal.levels
    rounded = []
    for x in np.eye(d)[:2]:  # the tree's own rounding of leaf 1 (its node sum in grid units)
        tree = mech.GridGaussianTree(cal, 1, [np.random.default_rng(0)])
        tree.insert(np.outer(x, x)[None])
        rounded.append(tree.raw[0, 0].copy())
    q0, q1 = rounded
    differ = np.flatnonzero(q0 != q1)
    diff = (q1 - q0)[differ]
    iu, ju = np.triu_indices(d)
    if np.any(iu[differ] != ju[differ]):  # the sampler below draws the diagonal law only
        raise ValueError("the tree audit's pair must differ on diagonal entries only")
    s2 = cal.sigma_on_grid_squared  # the diagonal entries' law

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        q = (q1 if which else q0)[differ]
        noise = sample_discrete_gaussian(s2, count * m * differ.size, rng).reshape(count, m, differ.size)
        return ((q + noise) @ diff).sum(axis=1)

    event = gp.GLMServer(s, [0]).tree_event()  # what the analyzer spends every round

    def claim(delta: float) -> dict:
        book = family.ledger({**public, "delta": delta})
        book.record(event, "trees")
        return book.summary()

    return AuditTarget(
        family=family.name, label=f"{label}/tree-V", algorithm="private-glm",
        release=f"the V tree's {m} dyadic nodes holding leaf 1 (each the prefix after 2^j leaves), as Σ_j ⟨x_j, q₁ − q₀⟩",
        neighbours=f"leaf 1 = e₁e₁ᵀ vs e₂e₂ᵀ (ℓ2 distance √2, {np.linalg.norm(q1 - q0):.0f} grid steps)",
        kind="real", sample=sample, claim=claim, delta=s.delta,  # binned: see the module docstring
        details={"n": 1, "levels": m, "sigma": cal.sigma, "grid": cal.grid, "rho_V": cal.rho,
                 "rho_H": s.spec.tree_h[0].rho, "rule": "pass", "trust_model": "central", "event": "ZCDP",
                 "per_release": m * differ.size})


def glm_targets(family, config, label: str, cohort: int | None) -> list[AuditTarget]:
    kind = family.algorithm(config, label).algorithm
    if kind == "shuffle-glm":
        return shuffle_glm_targets(family, config, label, cohort)
    if kind == "private-glm":
        return [tree_target(family, config, label)]
    return []  # the non-private baselines: raw data by design


# --- the one-run canary audit of a whole run (Steinke, Nasr & Jagielski 2023) --------------------


def shuffle_glm_hooks(vec_constant: float | None = None):
    """ShuffleGLM's canary: the first user of every batch is a canary in each of her P_Vec rounds
    (the covariance round and every 𝒫_GD gradient round, an independent bit each: the ledger's
    per-user composition covers any change of her inputs, so each report is a canary of its own).
    Her report is the pair the per-release audit uses (covariance: upper(Δ·e₁e₁ᵀ) for bit 0,
    upper(Δ·e₂e₂ᵀ) for 1; gradient: e₁ against −e₁), counted by the family's own
    :class:`~privbandit.families.shuffle_linear_bandits.mechanisms.BitSumRandomizer` with the
    round's parameters. The other users act on the world (their counts are summed in: this weakens
    the score, never the bound's soundness). Score: the released label totals on the labels the
    pair moves, signed. ``vec_constant``: eq. (127)'s constant of the users' randomizers, theirs
    (default) or one the tests break (the analyzer and its ledger keep theirs)."""
    from privbandit.families.shuffle_linear_bandits.mechanisms import BitSumRandomizer

    def hooks(server, user_logic):
        if vec_constant is not None:
            user_logic.s = replace(user_logic.s, vec_constant=vec_constant)
        s = user_logic.s

        def pair(plan):
            return round_pair(s, int(plan.body["batch"]), "covariance" if plan.body["phase"] == sp.PHASE_BATCH
                              else "gradient")

        signs = {}

        def plant(plan, rnd, bit, rng):
            params, a, b = pair(plan)
            signs[rnd.id] = np.sign(b - a)
            return BitSumRandomizer(params).randomize((b if bit else a)[None], rng)[0]

        return plant, lambda release, record: float(release.values[0] @ signs[release.round_id])

    return hooks


def glm_canary_audit(family, config, label: str, seed: int, confidence: float, run: int = 0,
                     vec_constant: float | None = None) -> dict:
    """One whole ShuffleGLM run with canaries (:func:`shuffle_glm_hooks`,
    :func:`~privbandit.audit.canary.canary_run`). Private-GLM is refused: its trusted analyzer
    publishes prefix sums through the trees, so every user's canary reaches every later release
    and none is one canary's (its V tree is audited per release); the non-private baselines send
    raw data by design, with no claim to test."""
    from privbandit.audit.canary import canary_run

    kind = family.algorithm(config, label).algorithm
    if kind == "private-glm":
        raise NotImplementedError(
            f"algorithms.{label}: no one-run audit of Private-GLM: its analyzer releases prefix sums through the "
            f"trees, so every user's canary reaches every later release and none is one canary's (the per-release "
            f"audit samples leaf 1's tree nodes; docs/audit.md)")
    if kind != "shuffle-glm":
        raise NotImplementedError(f"algorithms.{label}: no one-run audit of {kind}: it sends raw data by design, "
                                  f"with no claim to test")
    s = sp.shuffle_setup(family.public_task(config, label, [run]))
    return canary_run(family, config, label, seed, confidence, shuffle_glm_hooks(vec_constant), run,
                      {"batches": s.batches, "d": s.d})
