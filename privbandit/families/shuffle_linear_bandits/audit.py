"""The releases of Chowdhury & Zhou (2022)'s protocols, as ``privbandit audit`` tests them.

LinUCB-LDP (Zheng et al. 2020's local Gaussian randomizer, Algorithm 2's R_Amp with the LDP σ):
the analyzer receives every user's report [φy + noise, upper(φφᵀ) + noise] attributably.
Neighbouring inputs: user 0 with the pair of feasible contexts (‖φ‖ ≤ L, y ∈ {0, 1}) whose entries
lie farthest apart in ℓ2, among (L·e₁, 1) against (−L·e₁, 1), (L·e₂, 1) and (L·e₂, 0). The other
users' reports are ancillary (independent, identically distributed under both inputs), so user 0's
report is sampled alone, by the family's own randomizer, and read as its projection on the
difference of the two honest entries vectors: the likelihood ratio of isotropic (discrete) Gaussian
noise is a function of it, so nothing is lost (and any function is post-processing: the bound stays sound).

The ledger's claim is the analyzer's batch event: the grid discrete Gaussian's ρ-zCDP converted at
δ, at the report's ℓ2 sensitivity bound 2√(L² + L⁴) (widened by the grid's √D·γ). No feasible pair is that far apart: with y = y′ = 1 and
φ = L·u, φ′ = L·v, u·v = c, the distance² is at most L²(2 − 2c) + L⁴(2 − 2c²), largest at
c = −1/(2L²) (L = √2: ≈ 3.54 against the bound's 4.90; our pairs reach 3.46). So the audit cannot
reach the claim whatever its samples: the sensitivity bound is loose, not the noise.
LinUCB-SDP-Vec (P_Vec, Algorithms 5–7): the analyzer receives the shuffler's per-label totals of
1-bits over the batch (:class:`~.mechanisms.LabelCountShuffler`), so every user's counts are drawn
by the family's :class:`~.mechanisms.BitSumRandomizer` (the other B − 1 users hold user 0's
entries under input 0: they are summed in, not ancillary). The pair's contexts keep every entry
within the randomizer's range (|φ_k| ≤ the generator's entry bound), and the totals are read as
their projection on the two inputs' difference (post-processing).

LinUCB-SDP-Amp (P_Amp, Algorithms 2–4): the analyzer receives the batch's B Gaussian-noised reports
as a shuffled multiset, S1 (φy) and S2 (upper(φφᵀ)) permuted independently. The pair is
(L·e₁, 1) against (−L·e₁, 1), which differ in S1 only, and the multiset is read as the largest
projection of an S1 part on the difference: computable from the release whatever the permutations
(so they are not drawn), and a function of it (sound). The other B − 1 users hold input 0's entries.

LinUCB-JDP (Shariff & Sheffet's binary tree, :class:`~.mechanisms.TreeAggregator`): the trusted
analyzer publishes prefix sums of the batches' entries; batch 0 sits in the nodes [0, 2ʲ) of every
level j < L = ⌊log₂ n⌋ + 1 (n batches), and the prefix after 2ʲ batches is that node alone. Pair: batch
0's user at the farthest feasible pair above. Each node is drawn by the aggregator's own ``step``
(at the count 2ʲ − 1, whose lower nodes are the ones it merges: given as zeros, the step returns the
raw sum plus the new node's grid Gaussian noise); the other users' raw entries are the same under both
inputs (a common constant, dropped) and only the entries the pair moves are drawn (the others'
noise is independent and ancillary). The L nodes are read as Σ_j ⟨x_j, e₁ − e₀⟩, the statistic
the likelihood ratio of equal-σ Gaussians is a function of. Claim: the node event in every level's
lane, as the analyzer records it (:func:`.calibration.batch_lane`): L nodes' zCDP.
"""

from __future__ import annotations

import numpy as np

from privbandit.audit.targets import (AuditTarget, NoWirePath, WireTarget, neighbour_rows, own_report, rule_check,
                                      wire_round)
from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits.calibration import batch_lane
from privbandit.protocol.spine.events import Release, Round


def pairs(d: int, norm: float, s1_only: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """User 0's entries under the two inputs, for each candidate pair: (L·e₁, 1) against (−L·e₁, 1),
    (L·e₁, 0), (L·e₂, 1) and (L·e₂, 0); ``s1_only``: those that differ in φy alone (P_Amp's
    statistic reads S1 only)."""
    e1 = np.zeros(d)
    e1[0] = norm
    e2 = np.zeros(d)
    e2[min(1, d - 1)] = norm
    base = slb.user_entries(e1[None], np.array([1.0]))[0]
    other = ((-e1, 1.0), (e1, 0.0)) if s1_only else ((-e1, 1.0), (e2, 1.0), (e2, 0.0), (e1, 0.0))
    return [(base, slb.user_entries(x[None], np.array([y]))[0]) for x, y in other]


def neighbours(d: int, norm: float, s1_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The farthest apart in ℓ2 of the candidate :func:`pairs` (or of those differing in φy alone)."""
    return max(pairs(d, norm, s1_only), key=lambda p: float(np.linalg.norm(p[1] - p[0])))


def linear_targets(family, config, label: str, cohort: int | None, search: bool = False) -> list:
    """The release of one algorithm at its farthest pair; ``search``: instead, the candidates of
    ``--search``, one list per release (every pair of :func:`pairs`, the farthest first; JDP's
    tree offers none)."""
    public = family.public_task(config, label, [0])
    server = family.analyzer(public, [0])
    s = server.s
    if s.kind == "linucb-jdp":
        if s.tree_noise == "authors-reused":  # no claim to test: its ledger says none proven (REUSED_LEAK)
            return []
        return [] if search else [jdp_target(family, public, label, s)]
    if s.kind not in ("linucb-ldp", "linucb-sdp-vec", "linucb-sdp-amp"):
        return []
    if not search:
        return [noised_target(family, public, server, label, *default_pair(s))]
    far = default_pair(s)
    rest = [p for p in pairs(*_pair_space(s)) if not np.array_equal(p[1], far[1])]
    return [[noised_target(family, public, server, label, e0, e1) for e0, e1 in [far] + rest]]


def _pair_space(s) -> tuple[int, float, bool]:
    """(d, the norm of user 0's contexts, whether the pair may differ in φy only) for setup ``s``:
    P_Vec keeps every entry within its randomizer's range, P_Amp's statistic reads S1 only."""
    vec, amp = s.kind == "linucb-sdp-vec", s.kind == "linucb-sdp-amp"
    return s.d, min(s.feature_norm, s.entry_bound) if vec else s.feature_norm, amp


def default_pair(s) -> tuple[np.ndarray, np.ndarray]:
    """The pair a release of setup ``s`` is audited at: the farthest of :func:`pairs`."""
    d, norm, s1_only = _pair_space(s)
    return neighbours(d, norm, s1_only=s1_only)


def noised_target(family, public: dict, server, label: str, e0: np.ndarray, e1: np.ndarray,
                  randomizer=None) -> AuditTarget:
    """LDP's report, P_Vec's label totals or P_Amp's multiset with user 0's entries ``e0`` or
    ``e1`` (module docstring). ``randomizer``: the users' own (default), or one the tests break;
    the claim is always the analyzer's batch event."""
    s = server.s
    vec, amp = s.kind == "linucb-sdp-vec", s.kind == "linucb-sdp-amp"
    direction = (e1 - e0) / np.linalg.norm(e1 - e0)
    randomizer = s.randomizer if randomizer is None else randomizer
    event = server.event
    users = 1 if s.kind == "linucb-ldp" else s.batch

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        if users == 1:
            entries = np.broadcast_to(e1 if which else e0, (count, e0.size)).copy()
            return randomizer.randomize(entries, rng) @ direction
        # P_Amp: only the S1 parts (φy) are drawn: the direction is zero on S2, and the randomizer
        # noises every entry independently, so the S2 draws would be ancillary (a quarter of the
        # work at d = 5)
        width = s.d if amp else e0.size
        entries = np.broadcast_to(e0[:width], (count, users, width)).copy()
        if which:
            entries[:, 0] = e1[:width]
        reports = randomizer.randomize(entries, rng)
        if amp:
            return (reports @ direction[: s.d]).max(axis=1)
        return slb.LabelCountShuffler().release(reports) @ direction

    def claim(delta: float) -> dict:
        ledger = family.ledger({**public, "delta": delta})
        ledger.record(event)
        return ledger.summary()

    rnd = s.round(0)
    return AuditTarget(
        family=family.name, label=label, algorithm=s.kind,
        release={"linucb-ldp": "user 0's attributable report, projected on the two inputs' difference",
                 "linucb-sdp-vec": "the shuffler's per-label totals of 1-bits, projected on the two inputs' difference",
                 "linucb-sdp-amp": "the shuffled multiset of reports, as its largest S1 projection on the "
                                   "two inputs' difference"}[s.kind],
        neighbours=f"user 0's entries [φy, upper(φφᵀ)] {np.linalg.norm(e1 - e0):.3g} apart in ℓ2 (feasible "
                   f"contexts, ‖φ‖ ≤ {s.feature_norm:g})" + (f"; {users - 1} other users at input 0's" if users > 1 else ""),
        kind="real", sample=sample, claim=claim, delta=public["delta"],
        details={"n": s.batch, "d": s.d, "sigma": s.sigma, "rule": rnd.rule,
                 "trust_model": "local" if users == 1 else "shuffle", "event": type(event).__name__,
                 "per_release": users * e0.size, **({"g": s.vec.g, "b": s.vec.b, "p": s.vec.p} if vec else {}),
                 "distance": float(np.linalg.norm(e1 - e0))})


def jdp_target(family, public: dict, label: str, s, sigma: float | None = None) -> AuditTarget:
    """LinUCB-JDP's tree (see the module docstring). ``sigma``: the tree's own (default), or one
    the tests break; the claim is always the analyzer's node event."""
    sigma = s.sigma if sigma is None else sigma
    e0, e1 = neighbours(s.d, s.feature_norm)
    differ = np.flatnonzero(e0 != e1)
    diff = (e1 - e0)[differ]
    batches = -(-s.horizon // s.batch)
    levels = slb.tree_levels(batches)
    event = s.event()

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        raw = np.broadcast_to((e1 if which else e0)[differ], (count, differ.size))
        out = np.zeros(count)
        for j in range(levels):  # the node opened at count 2^j − 1: level j, over batches [0, 2^j)
            tree = slb.TreeAggregator(sigma, (count, differ.size), [np.zeros((count, differ.size))] * j, 2**j - 1)
            out += tree.step(raw, rng) @ diff
        return out

    def claim(delta: float) -> dict:
        ledger = family.ledger({**public, "delta": delta})
        for j in range(levels):  # one node per level reaches batch 0's users (LinearServer's lanes)
            ledger.record(event, batch_lane(s.kind, 2**j - 1))
        return ledger.summary()

    return AuditTarget(
        family=family.name, label=label, algorithm=s.kind,
        release=f"the trusted analyzer's {levels} tree nodes holding batch 0 (prefix sums after 2^j batches), "
                f"projected on the two inputs' difference",
        neighbours=f"batch 0's user's entries [φy, upper(φφᵀ)] {np.linalg.norm(e1 - e0):.3g} apart in ℓ2 (feasible "
                   f"contexts, ‖φ‖ ≤ {s.feature_norm:g})",
        kind="real", sample=sample, claim=claim, delta=public["delta"],
        details={"n": s.batch, "d": s.d, "sigma": sigma, "levels": levels, "rule": "pass", "trust_model": "central",
                 "event": type(event).__name__, "per_release": levels * differ.size,
                 "distance": float(np.linalg.norm(e1 - e0))})


def vec_sum_target(family: str, label: str, algorithm: str, vec: slb.VecParams, e0: np.ndarray, e1: np.ndarray,
                   users: int, claim, delta: float, release: str, details: dict) -> AuditTarget:
    """One P_Vec round of ``users`` users (the other families' P_Vec releases: ShuffleGLM's rounds,
    the concurrent-shuffle family's Algorithm 4 nodes): user 0's entries ``e0`` or ``e1``, the
    others ``e0``, every user's counts drawn by :class:`~.mechanisms.BitSumRandomizer`.

    Only the labels where the two inputs differ are sampled: the randomizer draws every label's
    bits independently and the other labels have the same law under both inputs (ancillary), so the
    likelihood ratio is theirs. The release is read as the signed sum of those labels' totals (an
    integer the analyzer can compute: post-processing, sound), binned by the histogram tester: its
    spread (thousands of values under the theorems' b) would leave the likelihood-ratio test a
    handful of draws per value."""
    differ = np.flatnonzero(e0 != e1)
    sign = np.sign(e1[differ] - e0[differ]).astype(np.int64)
    a, b = e0[differ], e1[differ]
    randomizer = slb.BitSumRandomizer(vec)

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        entries = np.broadcast_to(a, (count, users, a.size)).copy()
        if which:
            entries[:, 0] = b
        return slb.LabelCountShuffler().release(randomizer.randomize(entries, rng)) @ sign

    return AuditTarget(
        family=family, label=label, algorithm=algorithm, release=release,
        neighbours=f"user 0's entries {np.linalg.norm(e1 - e0):.3g} apart in ℓ2; {users - 1} other users at input 0's",
        kind="real", sample=sample, claim=claim, delta=delta,
        details={"n": users, "g": vec.g, "b": vec.b, "p": vec.p, "shift": vec.shift, "rule": "sum",
                 "trust_model": "shuffle", "labels_sampled": int(differ.size), "per_release": users * differ.size,
                 **details})


# --- the MQTT audit's path (privbandit audit --transport mqtt) ---------------------------------------


def vec_sum_wire(target: AuditTarget, rnd: Round, body: dict, vec: slb.VecParams, e0: np.ndarray, e1: np.ndarray,
                 randomizer=None) -> WireTarget:
    """The MQTT path of a :func:`vec_sum_target` round (ShuffleGLM's, Algorithm 4's nodes): the
    analyzer's own round ``rnd`` (a shuffler's ``sum`` of every label's counts) under its plan
    ``body``; each of its users counts every label of its entries (user 0 ``e0`` or ``e1``, the
    others ``e0``) with :class:`~.mechanisms.BitSumRandomizer` (``randomizer``, if the tests break
    it); a release is read as the target reads it, the signed total of the labels the pair moves.
    Every label crosses the wire; the others' totals are ancillary, as in-process."""
    rnd = wire_round(rnd)
    if rnd.rule != "sum" or rnd.width != e0.size or rnd.expected != target.details["n"]:
        raise ValueError(f"{target.name}: round {rnd} is not the {target.details['n']} users' P_Vec round the target "
                         f"samples")
    differ = np.flatnonzero(e0 != e1)
    sign = np.sign(e1[differ] - e0[differ]).astype(np.int64)
    randomizer = slb.BitSumRandomizer(vec) if randomizer is None else randomizer

    def randomize(inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return randomizer.randomize(neighbour_rows(inputs, e0, e1), rng)

    def statistic(release: Release, first: int) -> int:
        return int(release.values[0][differ] @ sign)

    return WireTarget(target, rnd, body, rnd.expected, randomize, statistic,
                      rule_check(rnd, slb.LabelCountShuffler().release))


def linear_wire(family, config, label: str, target: AuditTarget, mechanism=None) -> WireTarget:
    """``privbandit audit --transport mqtt``'s path for ``label``'s release (the family hook
    :meth:`~privbandit.protocol.spine.family.Family.wire_target`), or :class:`NoWirePath` saying why
    it has none. The round is the analyzer's batch round (:meth:`.parties.Setup.round`: P_Vec's
    ``sum`` of the users' label counts and P_Amp's ``shuffle`` of S1 and S2 at the shuffler,
    LDP's attributable ``pass`` at the aggregator), opened under its first plan's body (the
    broadcast model); each of the B users randomizes the entries of its input (user 0 the pair's
    ``e0`` or ``e1``, the others ``e0``, as the in-process target) with the users' own randomizer
    (Algorithm 2 or 5), ``mechanism`` if the tests break it. A release is read as the in-process
    target reads it (:func:`noised_target`): the label totals, the multiset's largest S1
    projection, user 0's report, each on the pair's difference."""
    public = family.public_task(config, label, [0])
    server = family.analyzer(public, [0])
    s = server.s
    if s.kind == "linucb":
        raise NoWirePath("non-private: the aggregator passes the raw (φ, y), and no claim is made")
    if s.kind == "linucb-jdp":
        raise NoWirePath("central model: the aggregator passes the raw (φ, y); the privacy is the trusted "
                         "analyzer's tree noise, added after the wire")
    e0, e1 = default_pair(s)
    if not np.isclose(np.linalg.norm(e1 - e0), target.details["distance"]):
        raise ValueError(f"{target.name}: not the pair this release is audited at (its --search candidates "
                         f"are audited in-process)")
    randomizer = s.randomizer if mechanism is None else mechanism
    direction = (e1 - e0) / np.linalg.norm(e1 - e0)
    rnd = wire_round(s.round(0))
    (plan,) = server.plans()  # batch 0's plan: the broadcast (θ̂, V⁻¹, β) of a fresh learner
    d, rule = s.d, rnd.rule

    def randomize(inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return randomizer.randomize(neighbour_rows(inputs, e0, e1), rng)

    def statistic(release: Release, first: int) -> float:
        if rule == "sum":  # P_Vec: the per-label totals
            return float(release.values[0] @ direction)
        if rule == "shuffle":  # P_Amp: S1 rows, whatever their order
            return float((release.values[0][:, :d] @ direction[:d]).max())
        return float(own_report(release, first) @ direction)  # LDP: user 0's report

    # P_Vec's release is the shuffler's per-label totals (LabelCountShuffler, Algorithm 6 as the analyzer sees it)
    total = slb.LabelCountShuffler().release if rule == "sum" else None
    return WireTarget(target, rnd, plan.body, rnd.expected, randomize, statistic, rule_check(rnd, total))


# --- the one-run canary audit of a whole run (Steinke, Nasr & Jagielski 2023) --------------------


def linear_hooks(seed: int, label: str, run: int, randomizer=None):
    """Batched LinUCB's canary: the first user of every batch (a user reports in one batch, so the
    run's ε is its worst batch's) sends the entries of the pair the per-release audit uses
    (:func:`neighbours`, the farthest, or for P_Amp the farthest differing in φy alone; bit 1: the
    second), randomized by the users' own randomizer, or raw (φ, y) = (±L·e₁, 1) to LinUCB's
    trusted analyzer (no randomizer: nothing to claim). The other users act on the
    world as in any run: their reports are summed in (P_Vec) or shuffled with hers (P_Amp), which
    weakens the score, never the bound's soundness. The score reads the release as the per-release
    audit does: her attributable report (LDP) or raw φ (LinUCB), the largest S1 projection of the
    multiset (P_Amp), the label totals (P_Vec), each projected on the pair's difference.
    ``randomizer``: the users' own (default), or one the tests break, given to every user."""

    def hooks(server, user_logic):
        s = server.s
        if randomizer is not None:
            user_logic.randomizer = randomizer
            user_logic.noise = slb.StackedStreams([slb.user_noise(seed, label, run, s.batch, randomizer, s.width)])
        own = user_logic.randomizer
        vec, amp = s.kind == "linucb-sdp-vec", s.kind == "linucb-sdp-amp"
        e0, e1 = default_pair(s)
        direction = (e1 - e0) / np.linalg.norm(e1 - e0)
        phi = np.zeros(s.d)
        phi[0] = s.feature_norm  # (±L·e₁, y = 1), raw

        def plant(plan, rnd, bit, rng):
            if own is None:
                return np.concatenate([phi if bit else -phi, [1.0]])
            return own.randomize((e1 if bit else e0)[None], rng)[0]

        def score(release, record):
            v = release.values[0]
            if own is None:
                return v[0, 0]  # the round's first reporter, the canary: φ₀
            if vec:
                return v @ direction
            if amp:
                return (v[:, : s.d] @ direction[: s.d]).max()
            return v[0] @ direction

        return plant, score

    return hooks


def linear_canary_audit(family, config, label: str, seed: int, confidence: float, run: int = 0,
                        randomizer=None) -> dict:
    """One whole run of ``label`` with a canary per batch (:func:`linear_hooks`,
    :func:`~privbandit.audit.canary.canary_run`). LinUCB-JDP is refused: its trusted analyzer
    publishes prefix sums through the tree, so every batch's canary reaches every later release and
    no release belongs to one canary; the tree of batch 0 is audited per release instead."""
    from privbandit.audit.canary import canary_run

    public = family.public_task(config, label, [run])
    kind = public["algorithm"]["algorithm"]
    if kind == "linucb-jdp":
        raise NotImplementedError(
            f"algorithms.{label}: no one-run audit of LinUCB-JDP: its analyzer releases prefix sums through the tree, "
            f"so every batch's canary reaches every later release and none is one canary's (the per-release audit "
            f"samples batch 0's tree nodes; docs/audit.md)")
    return canary_run(family, config, label, seed, confidence, linear_hooks(config.seed, label, run, randomizer), run,
                      {"batch": public["algorithm"]["batch"], "d": public["dim"]})
