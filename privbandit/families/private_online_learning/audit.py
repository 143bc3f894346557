"""The releases of Hu, Huang & Mehta's learners, as ``privbandit audit`` tests them.

- DP-SE runs on the distributed-DP MAB family's analyzer and is audited by its code
  (:func:`~privbandit.families.distributed_dp_mab.audit.elimination_targets`).
- Anytime-Lazy-UCB (Alg. 1, eq. 3): one full array of n users (``--cohort``, default 16; arrays
  hold 2^r pulls and the guarantee is the same for every size). Pair: every reward 0 against user 0's
  reward 1 (sensitivity 1 under replacement). Central: what the trusted analyzer outputs, the array
  sum plus the grid Laplace noise of its :class:`~.mechanisms.ArraySumRelease` (real-valued: the
  histogram tester). Distributed: the modular sum of the users' Pólya residues
  (:meth:`~.mechanisms.DistributedArraySum.randomize`), which the aggregator releases.
- FTNL (Alg. 2–3), central: the index report-noisy-max selects from one epoch's K fresh sums.
  Pair (replacement neighbours, the reason the ledger charges 2ε/c): user 0's reward vector e₀
  against e₁, the other users giving action 1 a head start of h = ⌈3b⌉ (b = c/ε the noise scale;
  feasible in any epoch of more than h users), where index 0 keeps probability ≈ 0.1 and its
  likelihood ratio is near its supremum e^{2/b}.

- FTNL under distributed trust: one epoch's cohort (``--cohort``, default 16) sends K Pólya-noised
  residues each (:meth:`~.mechanisms.DistributedNoisyMax.randomize`), the same pair and head start.
  The releases go through the spine's own :class:`~privbandit.protocol.spine.intermediary.Intermediary`
  with the analyzer's own round (:func:`.parties.modular_round`), the releases stacked on its runs
  axis: with ``argmax_at = "intermediary"`` it releases only the index (its ``argmax`` rule); with
  ``"analyzer"`` the K modular sums, read as (y₀ − y₁) mod m, a function of them. Claims: 2ε/c and
  Kε/c, the analyzer's ``privacy_event``.

The two central releases are one grid-Laplace call on a scalar (``release``) or a K-vector
(``select``); one call per release would cost ~60 µs. The targets therefore call the same
primitive, :func:`~privbandit.protocol.primitives.noise.grid_laplace`, on many releases at once
with the parameters read from the analyzer's own mechanism object (sensitivity 1, ε, and ε/c for
FTNL), and the tests check that its law is the method's. Claims: the event the analyzer spends
(``privacy_event``), recorded in the family's ledger.

- Hybrid-UCB (Alg. 4, central): an arm's observation that is the first leaf of tree r = 1 (the worst
  tree under the paper's depth r: each leaf in 2 nodes at scale 1/(ε/2), plus its array at ε/2).
  The analyzer's own :class:`~.hybrid_ucb.HybridUCB` is driven through the initial pull and the
  tree's two leaves with unit grid steps from its own sampler (``sample_grid_steps``), one learner
  per release (a Python loop: ~20 µs per release); rewards 0 except user 0's. The release is what
  it publishes: the private means after each pull and the array sum it folds in, from which the
  three values holding her reward (node [1], node [1, 2], array F⁽¹⁾) are recovered on their grids
  and read as Σ(|k − s| − |k|), s = round(1/g) each: every release is (⌊v/g⌉ + L)·g with the same
  unit steps L ~ Lap_Z(2²⁰), so this is their likelihood ratio, up to a factor. Claim: the analyzer's per-user
  spend, ``epsilon_spent()``: 1.5ε at depth r, ε at depth r + 1.

Over MQTT (``privbandit audit --transport mqtt``, :func:`online_wire`): the distributed Lazy-UCB
array and FTNL epoch go through the real aggregator process, fed by the same randomizers and read
as these targets read them; DP-SE through the MAB family's ``elimination_wire``. The central
releases (and Hybrid-UCB, central only) have no such path: what crosses the wire is raw data.
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.audit.targets import (NOT_WIRED, AuditTarget, NoWirePath, WireTarget, modular_row_sums, rule_check,
                                      wire_round)
from privbandit.families.private_online_learning.mechanisms import ArraySumRelease, ReportNoisyMax
from privbandit.protocol.primitives.noise import grid_laplace
from privbandit.protocol.privacy import PureDP
from privbandit.protocol.spine.events import Release

DEFAULT_COHORT = 16


def _claim(family, public: dict, event):
    def claim(delta: float) -> dict:
        book = family.ledger({**public, "delta": delta})
        book.record(event)
        return book.summary()
    return claim


def lazy_target(family, config, label: str, cohort: int | None, release=None, others: float = 0.0,
                pair: tuple[float, float] = (0.0, 1.0)) -> AuditTarget:
    """One Anytime-Lazy-UCB array release. ``release``: the analyzer's own (default) or one the
    tests break; the claim is always the analyzer's ``privacy_event``. ``others``, ``pair``: the
    other rewards and user 0's under the two inputs (the search's candidates; default 0, (0, 1))."""
    public = family.public_task(config, label, [0])
    server = family.analyzer(public, [0])
    own = server.release
    release = own if release is None else release
    n = DEFAULT_COHORT if cohort is None else cohort
    central = isinstance(release, ArraySumRelease)
    event = own.privacy_event(n)
    q = None if central else release.params(n)

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        if central:  # ArraySumRelease.release, vectorized (module docstring): the raw array sum
            return grid_laplace(np.full(count, (n - 1) * others + pair[which]), 1.0, release.epsilon, rng)[0]
        rewards = np.full((count, n), float(others))
        rewards[:, 0] = pair[which]
        return modular_row_sums(release.randomize(rewards.ravel(), q, rng).reshape(count, n), q.m)

    return AuditTarget(
        family=family.name, label=label, algorithm="anytime-lazy-ucb",
        release=("the trusted analyzer's noisy array sum (grid Laplace)" if central
                 else "the modular sum of the array's Pólya residues (secure aggregation)"),
        neighbours=(f"an array of {n} rewards 0 vs the same with user 0's reward 1" if (others, *pair) == (0, 0, 1)
                    else f"an array of {n} rewards {others:g}, user 0's {pair[0]:g} vs {pair[1]:g}"),
        kind="real" if central else "integer", sample=sample, claim=_claim(family, public, event),
        delta=public["delta"],
        details={"n": n, "rule": "pass" if central else "sum", "trust_model": "central" if central else "distributed",
                 "event": type(event).__name__, "per_release": 1 if central else n, "pair": [others, *pair],
                 **({} if central else {"g": q.g, "tau": q.tau, "m": q.m})})


def ftnl_target(family, config, label: str, rnm: ReportNoisyMax | None = None, lead: float = 3.0) -> AuditTarget:
    """FTNL's central report-noisy-max. ``rnm``: the analyzer's own (default) or a broken one;
    the claim is always the analyzer's. ``lead``: the head start in noise scales (⌈lead·b⌉)."""
    public = family.public_task(config, label, [0])
    own = family.analyzer(public, [0]).rnm
    rnm = own if rnm is None else rnm
    k = public["arms"]
    h = math.ceil(lead * own.scale)
    base = np.zeros((2, k))
    base[0, :2] = (1, h)
    base[1, :2] = (0, h + 1)
    event = own.privacy_event(k)

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        # ReportNoisyMax.select, vectorized (module docstring): argmax of grid Laplace at ε/c
        noisy, _ = grid_laplace(np.broadcast_to(base[which], (count, k)), 1.0, rnm.epsilon / rnm.multiplier, rng)
        return np.argmax(noisy, axis=1).astype(np.int64)

    return AuditTarget(
        family=family.name, label=label, algorithm="ftnl",
        release="the index report-noisy-max selects (the next epoch's action)",
        neighbours=f"user 0's reward vector e₀ vs e₁ (K = {k}); the others give action 1 a head start of {h}",
        kind="integer", sample=sample, claim=_claim(family, public, event), delta=public["delta"],
        details={"n": k, "head_start": h, "scale": own.scale, "multiplier": own.multiplier, "rule": "pass",
                 "trust_model": "central", "event": "PureDP", "per_release": k})


def ftnl_distributed_target(family, config, label: str, cohort: int | None, rnm=None, lead: float = 3.0
                            ) -> AuditTarget:
    """FTNL's distributed release (see the module docstring). ``rnm``: the analyzer's own
    :class:`~.mechanisms.DistributedNoisyMax` (default) or one the tests break. ``lead``: the head
    start in noise scales of the analyzer's own mechanism (⌈lead·c/ε⌉ rewards)."""
    from privbandit.families.private_online_learning.parties import modular_round
    from privbandit.protocol.spine.events import Join, Plan, Reports
    from privbandit.protocol.spine.intermediary import Intermediary

    public = family.public_task(config, label, [0])
    own = family.analyzer(public, [0]).rnm
    rnm = own if rnm is None else rnm
    n = DEFAULT_COHORT if cohort is None else cohort
    k = public["arms"]
    h = math.ceil(lead * own.multiplier / own.epsilon)
    if h + 1 > n:
        raise ValueError(f"the head start of {h} rewards needs more than {n} users per epoch")
    q = rnm.params(n)
    rule = "argmax" if own.argmax_at == "intermediary" else "sum"
    rnd = modular_round(0, n, q, width=k, rule=rule)
    plan = Plan(0, 0, n, {}, (rnd,), (Join(0, 0, n, n),))
    event = own.privacy_event(k)

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        vectors = np.zeros((count, n, k))
        vectors[:, 0, which] = 1.0  # user 0's reward vector: e₀ under input 0, e₁ under input 1
        vectors[:, 1:h + 1, 1] = 1.0  # the head start of action 1
        residues = rnm.randomize(vectors.reshape(count * n, k), q, rng).reshape(count, n, k)
        box = Intermediary("aggregator", count)
        box.open_plan(plan)
        box.receive(Reports(0, 0, np.arange(n), residues))
        values = box.release(0).values
        return values[:, 0] if rule == "argmax" else (values[:, 0] - values[:, 1]) % q.m

    return AuditTarget(
        family=family.name, label=label, algorithm="ftnl",
        release=("the index the intermediary's argmax releases" if rule == "argmax"
                 else "the K modular sums, as (y₀ − y₁) mod m"),
        neighbours=f"user 0's reward vector e₀ vs e₁ (K = {k}) among {n} users; {h} give action 1 a head start",
        kind="integer", sample=sample, claim=_claim(family, public, event), delta=public["delta"],
        details={"n": n, "head_start": h, "g": q.g, "tau": q.tau, "m": q.m, "rule": rule,
                 "trust_model": "distributed", "event": "PureDP", "per_release": n * k})


def hybrid_target(family, config, label: str, depth: str | None = None) -> AuditTarget:
    """Hybrid-UCB's tree r = 1 (see the module docstring). ``depth``: the learner's own (default),
    or another the tests use to break the noise under the analyzer's own claim."""
    from privbandit.families.private_online_learning.hybrid_ucb import HybridUCB
    from privbandit.protocol.primitives.noise.grid_laplace import sample_grid_steps

    public = family.public_task(config, label, [0])
    own = family.analyzer(public, [0]).learner
    depth = own.tree.depth if depth is None else depth
    probe = HybridUCB(1, own.epsilon, own.tree.depth)
    for x in (0.0, 0.0, 0.0):  # the claim: what the analyzer spends once tree 1 has been opened and filled
        probe.observe(0, x, 0.0, 0.0)
    event = PureDP(probe.epsilon_spent())
    h = HybridUCB(1, own.epsilon, depth)
    h.observe(0, 0.0, 0.0, 0.0)  # opens tree 1: its node grid
    grids = np.array([h.node_grid[0], h.node_grid[0], h.array_grid])
    shifts = np.rint(1.0 / grids).astype(np.int64)  # one reward, in each release's grid steps

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        steps = sample_grid_steps((count, 3, 2), rng)  # (node, array) unit steps per observation
        out = np.empty(count, dtype=np.int64)
        for i in range(count):
            h = HybridUCB(1, own.epsilon, depth)
            h.observe(0, 0.0, *steps[i, 0])  # the initial pull: array F⁽⁰⁾
            a0 = h.arrays_noisy[0]
            h.observe(0, float(which), *steps[i, 1])  # user 0: tree 1's first leaf
            node0 = 2 * h.means[0] - a0
            h.observe(0, 0.0, *steps[i, 2])  # the second leaf completes node [1, 2] and fills F⁽¹⁾
            k = np.rint(np.array([node0, 3 * h.means[0] - a0, h.arrays_noisy[0] - a0]) / grids).astype(np.int64)
            out[i] = int((np.abs(k - shifts) - np.abs(k)).sum())
        return out

    return AuditTarget(
        family=family.name, label=label, algorithm="hybrid-ucb",
        release="the private means after tree 1's pulls and the array it folds in: the three values holding "
                "user 0's reward, as Σ(|k − s| − |k|) on their grid",
        neighbours="user 0's reward 0 vs 1 as tree 1's first leaf (every other reward 0)",
        kind="real", sample=sample, claim=_claim(family, public, event), delta=public["delta"],
        details={"n": 1, "depth": depth, "grids": grids.tolist(), "rule": "pass", "trust_model": "central",
                 "event": "PureDP", "per_release": 3})


# The search's head starts for FTNL, in noise scales: the default first; its ratio grows toward
# e^{2ε/c} with the head start while the event it rests on grows rarer, so the best is a trade-off.
FTNL_LEADS = (3.0, 0.0, 1.0, 6.0)


def online_candidates(family, config, label: str, cohort: int | None) -> list[list[AuditTarget]]:
    """``--search``: DP-SE's and Lazy-UCB's releases under the MAB family's candidate pairs
    (:data:`~privbandit.families.distributed_dp_mab.audit.CANDIDATE_PAIRS`); central FTNL's under
    the head starts :data:`FTNL_LEADS`. Hybrid-UCB and distributed FTNL offer none yet."""
    from privbandit.families.distributed_dp_mab.audit import CANDIDATE_PAIRS, elimination_candidates

    a = family.algorithm(config, label)
    if a.algorithm == "dp-se":
        return [elimination_candidates(family, config, label, cohort)]
    if a.algorithm == "anytime-lazy-ucb":
        return [[lazy_target(family, config, label, cohort, None, o, (x, y)) for o, x, y in CANDIDATE_PAIRS]]
    if a.algorithm == "ftnl" and a.trust == "central":
        return [[ftnl_target(family, config, label, None, lead) for lead in FTNL_LEADS]]
    return []


def online_targets(family, config, label: str, cohort: int | None) -> list[AuditTarget]:
    a = family.algorithm(config, label)
    if a.algorithm == "dp-se":
        from privbandit.families.distributed_dp_mab.audit import elimination_targets

        return elimination_targets(family, config, label, cohort)
    if a.algorithm == "anytime-lazy-ucb":
        return [lazy_target(family, config, label, cohort)]
    if a.algorithm == "hybrid-ucb":
        return [hybrid_target(family, config, label)]
    if a.algorithm == "ftnl":
        return [ftnl_target(family, config, label) if a.trust == "central"
                else ftnl_distributed_target(family, config, label, cohort)]
    return []


# --- the one-run canary audit of a whole run (Steinke, Nasr & Jagielski 2023) --------------------
#
# The world is fixed so that every other user's data is known: every mean 0 and Bernoulli rewards,
# so each reward (and each full-information reward vector) is exactly 0 except the canaries'.
# Each released round (a Lazy-UCB array, a DP-SE batch, an FTNL epoch) takes one canary, its first
# reporter: a user is in one round, so the run's ε is its worst round's (parallel composition).

def lazy_hooks(release=None):
    """Anytime-Lazy-UCB: the canary's reward is her bit, as she sends it (raw to the trusted
    analyzer, or her :class:`~.mechanisms.DistributedArraySum` residues at her array's size);
    the score is the array's noisy sum the analyzer decodes (``estimate_sum``). ``release``: the
    analyzer's own (default), or one the tests break, given to the analyzer and the users (the
    ledger still records the analyzer's ``privacy_event``, which a broken release keeps)."""

    def hooks(server, user_logic):
        if release is not None:
            server.release = release
            if not server.central:
                user_logic.randomizer = release
        randomizer = user_logic.randomizer

        def plant(plan, rnd, bit, rng):
            x = np.array([float(bit)])
            return x if randomizer is None else randomizer.randomize(x, randomizer.params(rnd.expected), rng)

        return plant, lambda release_, record: record.body["estimate_sum"]

    return hooks


def ftnl_hooks(server, user_logic):
    """FTNL: the canary's reward vector is e₁ (bit 1) or e₀ (bit 0), the replacement pair the
    ledger's 2ε/c is for, sent raw or as her K Pólya residues; the score is +1 when the next action
    the analyzer selects is 1, −1 when it is 0, else 0 (the index is all that leaves in the central
    model and under ``argmax_at = "intermediary"``)."""
    randomizer, k = user_logic.randomizer, user_logic.instance.n_arms

    def plant(plan, rnd, bit, rng):
        x = np.zeros(k)
        x[int(bit)] = 1.0
        return x if randomizer is None else randomizer.randomize(x[None], randomizer.params(rnd.expected), rng)[0]

    return plant, lambda release, record: {1: 1.0, 0: -1.0}.get(int(record.body["next"]), 0.0)


def online_canary_audit(family, config, label: str, seed: int, confidence: float, run: int = 0,
                        release=None) -> dict:
    """One whole run of ``label`` with canaries (module section above; :func:`~privbandit.audit.canary.canary_run`).
    FTNL's epochs double, so its run has at most ⌊log₂ T⌋ + 1 canaries: the result's ``ceiling``
    (what guesses all right would bound) says how far that can see, below the claim at c = 1.
    Hybrid-UCB is refused: every user is a release of her own, and her reward reaches every later
    private mean through ~log T tree nodes, so a canary's score would carry the other canaries'
    rewards; not built."""
    from privbandit.audit.canary import canary_run
    from privbandit.families.distributed_dp_mab.audit import elimination_hooks
    from privbandit.families.private_online_learning import config as cfg

    a = family.algorithm(config, label)
    arms = len(config.environment.means)
    if a.algorithm in ("naive-ftnl", "ftl", "hedge"):
        raise NotImplementedError(f"algorithms.{label}: the experts baselines have no one-run audit yet "
                                  f"(docs/baselines.md)")
    if a.algorithm == "hybrid-ucb":
        raise NotImplementedError(
            f"algorithms.{label}: no one-run audit of Hybrid-UCB: each user is a release of her own and her reward "
            f"reaches every later private mean through the tree's nodes, so a canary's score would carry the other "
            f"canaries' rewards (docs/audit.md)")
    zero = cfg.OnlineEnvironment(means=[0.0] * arms, reward="bernoulli")  # every other reward exactly 0
    config = config.model_copy(update={"environment": zero})
    if a.algorithm == "ftnl":
        if release is not None:
            raise ValueError("a replaced release is for Lazy-UCB and DP-SE only")
        hooks = ftnl_hooks
    else:
        hooks = elimination_hooks(release) if a.algorithm == "dp-se" else lazy_hooks(release)
    # DP-SE's rounds follow the eliminations and Lazy-UCB's arrays the pulls: at most one canary per
    # user, whatever they decide; FTNL's epochs are fixed by T alone
    return canary_run(family, config, label, seed, confidence, hooks, run, {"arms": arms, "trust": a.trust},
                      most=None if a.algorithm == "ftnl" else config.horizon)


# --- the MQTT audit's path (privbandit audit --transport mqtt) ---------------------------------------

CENTRAL_WHY = {
    "anytime-lazy-ucb": "central model: the aggregator passes the array's raw rewards; the privacy is the trusted "
                        "analyzer's grid Laplace on the array sum (eq. 3), drawn after the wire",
    "ftnl": "central model: the aggregator passes every user's raw reward vector; the privacy is the trusted "
            "analyzer's report-noisy-max (grid Laplace at ε/c on the K sums), drawn after the wire",
    "hybrid-ucb": "central model (Hybrid-UCB has no other): the aggregator passes each user's raw reward; the "
                  "privacy is the trusted analyzer's tree and array noise, drawn after the wire",
}


def online_wire(family, config, label: str, target: AuditTarget, mechanism=None) -> WireTarget:
    """``privbandit audit --transport mqtt``'s path for one of ``label``'s targets (the family hook
    :meth:`~privbandit.protocol.spine.family.Family.wire_target`), or :class:`NoWirePath` saying why
    it has none. DP-SE's rounds are the MAB family's analyzer's
    (:func:`~privbandit.families.distributed_dp_mab.audit.elimination_wire`); the distributed
    Anytime-Lazy-UCB and FTNL rounds are the aggregator's (:func:`lazy_wire`, :func:`ftnl_wire`);
    the central versions pass raw data, their privacy the analyzer's own noise after the wire.
    ``mechanism``: the algorithm's own (default), or one the tests break, in the analyzer's round
    and the users' randomizer alike."""
    a = family.algorithm(config, label)
    if a.algorithm == "dp-se":
        from privbandit.families.distributed_dp_mab.audit import elimination_wire  # DP-SE's analyzer is that family's

        return elimination_wire(family, config, label, target, mechanism)
    if a.trust == "central":
        raise NoWirePath(CENTRAL_WHY[a.algorithm])
    if a.algorithm == "anytime-lazy-ucb":
        return lazy_wire(family, config, label, target, mechanism)
    if a.algorithm == "ftnl":
        return ftnl_wire(family, config, label, target, mechanism)
    raise NoWirePath(NOT_WIRED)


def lazy_wire(family, config, label: str, target: AuditTarget, release=None) -> WireTarget:
    """Distributed Anytime-Lazy-UCB's array (Alg. 1, eq. 3 under distributed trust): the round the
    analyzer opens for an array of n users (:func:`.parties.modular_round` at the mechanism's
    parameters for n, as :meth:`.parties.LazyServer.round_for` opens it), at the aggregator, whose
    ``sum`` rule releases the modular sum of the users' Pólya residues. Each user randomizes its
    reward (user 0's the neighbour's, the others 0) with :meth:`~.mechanisms.DistributedArraySum.randomize`
    at the array's parameters, as :class:`.parties.OnlineBanditUsers` does; the release is read as
    :func:`lazy_target` samples it, the modular sum itself. ``release``: the analyzer's own
    :class:`~.mechanisms.DistributedArraySum` (default) or one the tests break."""
    from privbandit.families.private_online_learning.parties import modular_round

    if target.details.get("pair") != [0.0, 0.0, 1.0]:
        raise ValueError(f"{target.name}: not the pair this release is audited at over MQTT (its --search "
                         f"candidates are audited in-process)")
    public = family.public_task(config, label, [0])
    server = family.analyzer(public, [0])
    release = server.release if release is None else release
    n, k = int(target.details["n"]), public["arms"]
    q = release.params(n)
    rnd = wire_round(modular_round(0, n, q))
    # The plan's public body as LazyServer broadcasts it: arm 0's filling array is round 0, of n users
    # (the size the users read their parameters from), the other arms' none.
    rounds, sizes = np.full(k, -1, dtype=np.int64), np.zeros(k, dtype=np.int64)
    rounds[0], sizes[0] = 0, n
    body = {"kind": "arms", "t0": 1, "arms": np.zeros((1, n), dtype=np.int64), "round_of_arm": rounds,
            "array_size": sizes}

    def randomize(inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return release.randomize(np.asarray(inputs, dtype=np.float64).ravel(), q, rng).reshape(inputs.shape)

    def statistic(out: Release, first: int) -> int:
        return int(out.values[0, 0])

    return WireTarget(target, rnd, body, n, randomize, statistic, rule_check(rnd))


def ftnl_wire(family, config, label: str, target: AuditTarget, rnm=None) -> WireTarget:
    """Distributed FTNL's epoch (Alg. 2–3 under distributed trust): the analyzer's round
    (:func:`.parties.modular_round`, width K: ``argmax`` when ``argmax_at = "intermediary"``, else
    ``sum``) at the aggregator. Each of the n users sends its reward vector's K Pólya residues
    (:meth:`~.mechanisms.DistributedNoisyMax.randomize`): user 0 e₀ or e₁ (the neighbour's), the
    target's ``head_start`` users after her e₁, the rest 0, as :func:`ftnl_distributed_target`
    samples them. Read as that target reads its release: the index, or (y₀ − y₁) mod m of the K
    modular sums. ``rnm``: the analyzer's own :class:`~.mechanisms.DistributedNoisyMax` (default)
    or one the tests break."""
    from privbandit.families.private_online_learning.parties import modular_round

    public = family.public_task(config, label, [0])
    server = family.analyzer(public, [0])
    own = server.rnm
    rnm = own if rnm is None else rnm
    n, k, h = int(target.details["n"]), public["arms"], int(target.details["head_start"])
    q = rnm.params(n)
    rule = "argmax" if own.argmax_at == "intermediary" else "sum"
    rnd = wire_round(modular_round(0, n, q, width=k, rule=rule))
    # FtnlServer's plan body: epoch of n users (the size the users read their parameters from)
    body = {"kind": "epoch", "t0": 1, "action": server.learner.action, "epoch": 0, "n": n}

    def randomize(inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rounds = inputs.shape[0]
        vectors = np.zeros((rounds, n, k))
        vectors[np.arange(rounds), 0, np.asarray(inputs[:, 0], dtype=np.int64)] = 1.0  # user 0: e₀ or e₁
        vectors[:, 1:h + 1, 1] = 1.0  # the head start of action 1
        return rnm.randomize(vectors.reshape(rounds * n, k), q, rng).reshape(rounds, n, k)

    def statistic(out: Release, first: int) -> int:
        v = out.values[0]
        return int(v[0]) if rule == "argmax" else int((v[0] - v[1]) % q.m)

    return WireTarget(target, rnd, body, n, randomize, statistic, rule_check(rnd))
