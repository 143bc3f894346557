"""The releases of Tenenbaum, Kaplan, Mansour & Stemmer (ICML 2023)'s counters, as ``privbandit
audit`` tests them.

Neighbouring inputs (the binary PSCO, Cor. 3.3/3.5): a node's users all hold bit 0, against the
same users where user 0 holds 1. Each sampled release comes from the family's own mechanism
objects (:mod:`.mechanisms`), the ones :func:`.counter.user_reports` and
:meth:`.counter.CounterServer.decode` call, drawn from the audit's generator instead of the run's
streams:

- shuffle modes (``csta_k``, ``sequential``, ``csta_binary``, the bad baselines): one target per
  level i, the release of one of its nodes, i.e. what shuffler i − 1 hands the analyzer: the total
  of the node's s_i count-encoded reports (:meth:`draw` then :meth:`encode` per user, summed), which
  determines the shuffled multiset of one-bit messages. For the ``bin-a`` baseline that is
  Σb + Bin(s_i·ℓ, q); for ``pvec`` P_Vec's one-coordinate label total (noise sd in the thousands:
  binned by the histogram tester, post-processing); for ``split-mix`` the shares' sum mod M decoded
  (Σb + Lap_Z(ε/k)): what the analyzer makes of the shuffled multiset of shares (the rest of the
  multiset is what the closeness bound covers; no statistic of it is tested here). Every node of a level has the
  same law, so one per level covers them all. Claim: the level's event (ε/k, δ/k) in lane
  ``level-i``, as :meth:`.parties.CounterAnalyzer.on_release` spends it; the audit's default δ is the
  node's δ/k, where that event states its ε.
- ``central_tree``: the trusted server's output for user 0, her L nodes' estimates (one per level,
  each the node's exact total plus :meth:`~.mechanisms.CentralLaplace.noise`), read as
  Σ_i (|x_i − 1| − |x_i|): the likelihood ratio of L equal-scale discrete Laplace releases shifted by 1
  is a function of it, so nothing is lost (and it is post-processing). Claim: the per-user PureDP
  the analyzer spends for a plan (the levels' ε summed: ε).
- ``ldp``: user 0's randomized-response report (the others are ancillary: independent, and
  identically distributed under both inputs). Claim: RR's ε on the grid.

- Algorithm 4 (``cs-linucb``): one node per level, the shuffler's P_Vec label totals of its s_i
  users' [φy, upper(φφᵀ)] (:func:`~privbandit.families.shuffle_linear_bandits.audit.vec_sum_target`
  with the level's own ``Alg4.vec`` parameters), user 0 at the linear family's farthest feasible
  pair for ‖φ‖ ≤ 1 (Assumption C.1), the others at input 0's. Claim: ``Alg4.event(level)`` in lane
  ``level-i``, at the node's δ/k. The exact-sum twin (``cs-linucb-exact``) releases raw sums (no
  claim) and has no target.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from privbandit.audit.targets import AuditTarget, NoWirePath, WireTarget, own_report, rule_check, wire_round
from privbandit.families.concurrent_shuffle import counter as cnt
from privbandit.families.concurrent_shuffle.mechanisms import SplitMixSum
from privbandit.families.concurrent_shuffle.tree import SHUFFLE_MODES
from privbandit.protocol.primitives.shuffle_sum import mixed_sum, split
from privbandit.protocol.privacy import PureDP
from privbandit.protocol.spine.events import Release

WIDE_VARIANCE = 50.0**2  # node totals with a noise sd above 50 values are binned (node_target)


def _claim(spec: cnt.CounterSpec, event, lane: str):
    """The family's ledger (:func:`.counter.ledger`) stated at the audit's δ, after one release of
    ``event`` in ``lane``. Only the ledger's δ changes: the mechanisms are the run's."""
    def claim(delta: float) -> dict:
        book = cnt.ledger(replace(spec, delta=delta))
        book.record(event, lane)
        return book.summary()
    return claim


def node_target(spec: cnt.CounterSpec, level: int, label: str, mechanism=None, family: str = "concurrent-shuffle",
                others: int = 0) -> AuditTarget:
    """One node of shuffle level ``level`` (1-based). ``mechanism``: the level's own (default), or a
    stand-in the tests break on purpose; the claim is always the one ``mechanism.event()`` states.
    ``others``: every other user's bit; user 0 holds it under input 0 and flips it under input 1
    (0: the default pair; 1: the search's other candidate, the top of the count's range)."""
    m = spec.mechanisms[level - 1] if mechanism is None else mechanism
    s = spec.tree.sizes[level - 1]
    mixed = isinstance(m, SplitMixSum)

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        bits = np.full((count, s), others, dtype=np.int8)
        bits[:, 0] = others ^ which
        total = m.encode(bits, m.draw((count, s), rng)).sum(axis=1).astype(np.int64)
        return m.analyze(total, s).astype(np.int64) if mixed else total  # split-mix: the sum mod M, decoded

    event = m.event()
    # A total whose noise spreads over many values (P_Vec's b noise bits per user) is binned by the
    # histogram tester: the likelihood-ratio test would rest on a handful of draws per value.
    wide = m.variance(s) > WIDE_VARIANCE
    details = {"n": s, "level": level, "levels": spec.k, "rule": "shuffle" if mixed else "sum",
               "trust_model": "shuffle", "event": type(event).__name__, "level_epsilon": spec.level_epsilon,
               "level_delta": spec.level_delta, "per_release": s,
               **{k: v for k, v in m.describe().items() if k in ("ell", "q", "g", "b", "p", "shares", "modulus")}}
    release = (f"one level-{level} node: the sum mod M of its {s} users' split-and-mix shares, decoded" if mixed else
               f"one level-{level} node: the total of its {s} users' count-encoded reports (the shuffled multiset "
               f"of one-bit messages)")
    return AuditTarget(
        family=family, label=f"{label}/level-{level}", algorithm=f"{spec.mode} ({m.name})", release=release,
        neighbours=f"{s} users with bit {others} vs the same with user 0's bit {1 - others}",
        kind="real" if wide else "integer", sample=sample, claim=_claim(spec, event, f"level-{level}"),
        delta=spec.level_delta,
        details=details)


def central_target(spec: cnt.CounterSpec, label: str, family: str = "concurrent-shuffle") -> AuditTarget:
    """The central tree's L node estimates around user 0 (see the module docstring)."""
    mechanisms = spec.mechanisms
    scales = {m.scale for m in mechanisms}
    if len(scales) != 1:  # the sufficient statistic below needs one scale
        raise ValueError(f"central tree levels with different Laplace scales {sorted(scales)}")

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        out = np.zeros(count, dtype=np.int64)
        for m in mechanisms:  # user 0's node at every level: total = her bit, plus the server's noise
            x = which + m.noise((count,), rng)
            out += np.abs(x - 1) - np.abs(x)
        return out

    # CounterAnalyzer._attributable spends the levels' pure ε summed, per user of the plan
    event = PureDP(sum(m.event().pure_epsilon for m in mechanisms))
    return AuditTarget(
        family=family, label=label, algorithm=spec.mode,
        release=f"the trusted server's {spec.k} node estimates containing user 0 (raw bits + Lap_Z per node), "
                f"as Σ(|x−1| − |x|)",
        neighbours="every user's bit 0 vs user 0's bit 1", kind="integer", sample=sample,
        claim=_claim(spec, event, "user"), delta=spec.delta,
        details={"n": 1, "levels": spec.k, "scale": mechanisms[0].scale, "rule": "pass", "trust_model": "central",
                 "event": "PureDP", "per_release": spec.k})


def ldp_target(spec: cnt.CounterSpec, label: str, family: str = "concurrent-shuffle") -> AuditTarget:
    m = spec.mechanisms[0]

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        return m.encode(np.full(count, which, dtype=np.int8), m.draw((count,), rng))

    return AuditTarget(
        family=family, label=label, algorithm=spec.mode, release="user 0's randomized-response report",
        neighbours="user 0's bit 0 vs 1 (the other users' reports are ancillary)", kind="integer", sample=sample,
        claim=_claim(spec, PureDP(sum(e.event().pure_epsilon for e in spec.mechanisms)), "user"),
        delta=min(spec.delta, 0.5),
        details={"n": 1, "keep": m.p, "rule": "pass", "trust_model": "local", "event": "PureDP", "per_release": 1})


def alg4_targets(family, config, label: str) -> list[AuditTarget]:
    from privbandit.families.concurrent_shuffle.bandit import alg4_of
    from privbandit.families.shuffle_linear_bandits.audit import neighbours, vec_sum_target

    public = family.public_task(config, label, [0])
    a = alg4_of(public)
    if not a.private:
        return []
    e0, e1 = neighbours(a.d, 1.0)
    k = a.tree.k
    out = []
    for level in range(1, k + 1):
        if not a.tree.nodes(level):
            continue
        event = a.event(level)

        def claim(delta: float, event=event, level=level) -> dict:
            book = replace(a, delta=delta).empty_ledger()  # only the ledger's δ: the P_Vec parameters are the run's
            book.record(event, f"level-{level}")
            return book.summary()

        out.append(vec_sum_target(
            family.name, f"{label}/level-{level}", "cs-linucb", a.vec[level - 1], e0, e1, a.tree.sizes[level - 1],
            claim, a.delta / k if event.status == "proven" else a.delta,
            f"one level-{level} node of Algorithm 4: P_Vec label totals of its users' [φy, upper(φφᵀ)]",
            {"level": level, "levels": k, "event": type(event).__name__}))
    return out


def counter_targets(family, config, label: str, cohort: int | None) -> list[AuditTarget]:
    """Every release of one counter or of Algorithm 4 (``cohort`` does not apply: a node's size is
    the tree's)."""
    if family.bandit(config, label):
        return alg4_targets(family, config, label)
    spec = family.spec(config, label)
    if spec.mode in SHUFFLE_MODES:
        return [node_target(spec, level, label, family=family.name) for level in range(1, spec.k + 1)
                if spec.tree.nodes(level)]
    if spec.mode == "central_tree":
        return [central_target(spec, label, family.name)]
    return [ldp_target(spec, label, family.name)]


def counter_candidates(family, config, label: str, cohort: int | None) -> list[list[AuditTarget]]:
    """``--search``: each shuffle level's node with every bit 0 (user 0's flipped to 1, the
    default) and with every bit 1 (user 0's flipped to 0). The other modes offer none (the central
    tree's and randomized response's laws are symmetric in the bit by construction)."""
    if family.bandit(config, label):
        return []
    spec = family.spec(config, label)
    if spec.mode not in SHUFFLE_MODES:
        return []
    return [[node_target(spec, level, label, family=family.name, others=b) for b in (0, 1)]
            for level in range(1, spec.k + 1) if spec.tree.nodes(level)]


# --- the MQTT audit's path (privbandit audit --transport mqtt) ---------------------------------------


def counter_wire(family, config, label: str, target: AuditTarget, mechanism=None) -> WireTarget:
    """``privbandit audit --transport mqtt``'s path for one of ``label``'s targets (the family hook
    :meth:`~privbandit.protocol.spine.family.Family.wire_target`), or :class:`NoWirePath` saying why
    it has none. Rounds and bodies are the analyzer's own (segment 0's plans: node 0 of the level):

    - a shuffle mode's node: the level's shuffler ``shuffler-i`` sums its s_i users' count-encoded
      reports (or releases the multiset of their split-and-mix shares), each user's bit (user 0's
      the neighbour's, the others 0) encoded by the level's mechanism (:meth:`draw`, :meth:`encode`,
      then split; ``mechanism``, if the tests break it, serves every level of the label: they break a
      one-level counter's); read as the node total (the shares' sum mod M, decoded), as
      :func:`node_target`;
    - Algorithm 4's node: the level's P_Vec round, by
      :func:`~privbandit.families.shuffle_linear_bandits.audit.vec_sum_wire` (``mechanism``: a
      randomizer);
    - ``ldp``: the aggregator passes attributable randomized responses; one user a round, as the
      in-process target samples (the plan's other users are ancillary), read as user 0's report.

    The central tree has none: what crosses the wire is every user's raw bit, and its privacy is
    the trusted server's Laplace noise, added after the wire."""
    from privbandit.families.shuffle_linear_bandits.audit import neighbours, vec_sum_wire

    public = family.public_task(config, label, [0])
    server = family.analyzer(public, [0])
    if family.bandit(config, label):
        level = int(target.details["level"])
        plan = server.plans()[level - 1]  # batch 0's plan at this level: it opens the level's node 0
        (rnd,) = plan.opens
        a = server.a
        e0, e1 = neighbours(a.d, 1.0)
        return vec_sum_wire(target, rnd, plan.body, a.vec[level - 1], e0, e1, mechanism)
    spec = server.spec
    if spec.mode == "central_tree":
        raise NoWirePath("central model: the aggregator passes every user's raw bit; the privacy is the trusted "
                         "server's Laplace node noise, added after the wire")
    if spec.mode in SHUFFLE_MODES:
        level = int(target.details["level"])
        plan = server.layout.plan(level - 1)  # segment 0's plan of this level
        rnd = wire_round(plan.opens[0])  # node 0 of the level
        m = spec.mechanisms[level - 1] if mechanism is None else mechanism
    else:  # ldp: one attributable pass round per plan, cut to user 0's
        plan = server.layout.plan(0)
        rnd = replace(plan.opens[0], expected=int(target.details["n"]))
        m = spec.mechanisms[0] if mechanism is None else mechanism

    def randomize(inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        bits = np.asarray(inputs, dtype=np.int8)
        residues = m.encode(bits, m.draw(bits.shape, rng))
        return split(residues, rnd.width, rnd.m, rng) if rnd.messages else residues

    def statistic(release: Release, first: int) -> int:
        if rnd.rule == "sum":
            return int(release.values[0, 0])
        if rnd.messages:
            return int(m.analyze(mixed_sum(release.values, rnd.m), rnd.expected)[0])
        return int(own_report(release, first)[0])

    notes = [] if rnd.rule != "pass" else ["one user a round: the plan's other users' responses are ancillary"]
    return WireTarget(target, rnd, plan.body, rnd.expected, randomize, statistic, rule_check(rnd), notes)


# --- the one-run canary audit of a whole run (Steinke, Nasr & Jagielski 2023) --------------------


def counter_hooks(mechanisms: tuple | None = None):
    """The counters' canary. The world's bits are all 0 (``input = "iid"``, p = 0), so a node's
    total is its noise and its canaries' bits. Shuffle modes: the first user of every executed node
    of every level is a canary of that node, her report her bit encoded by the level's own
    mechanism (:meth:`draw`, :meth:`encode`: what :func:`.counter.user_reports` calls); the score
    is the node's estimate S_v the analyzer decodes. A user who is the first of nodes at several
    levels is a canary in each, with independent bits: each report's input is then a canary of its
    own, which the per-user composition the ledger states covers (any change of her inputs).
    ``central_tree`` and ``ldp`` (one attributable round per plan): ``ldp``'s every user is a
    canary, her randomized response her score; ``central_tree``'s canaries are the first user of
    every leaf, their raw bits, each scored by the sum of her nodes' estimates (one per level; the
    nodes above the leaves also hold other canaries' bits, which weakens the score, never the
    bound). ``mechanisms``: the levels' own (default), or ones the tests break, given to every
    user (the analyzer keeps its own and its ledger)."""

    def hooks(server, user_logic):
        spec = user_logic.spec
        if mechanisms is not None:
            spec = user_logic.spec = replace(spec, mechanisms=tuple(mechanisms))
        layout = server.layout
        sizes = spec.tree.sizes

        def plant(plan, rnd, bit, rng):
            if spec.mode == "central_tree":
                return np.array([1 if bit else 0])
            m = spec.mechanisms[int(plan.body["level"]) - 1 if layout.shuffled else 0]
            message = m.encode(np.array([[bit]], dtype=np.int8), m.draw((1, 1), rng))[0]
            return split(message, m.shares, m.modulus, rng)[0] if isinstance(m, SplitMixSum) else message

        def slots(rnd, rep):
            if layout.shuffled:
                return (0,)
            if spec.mode == "ldp":
                return range(rep.user_ids.size)
            return np.flatnonzero(rep.user_ids % sizes[0] == 0)  # the first user of each leaf

        def score(release, record):
            b = record.body
            if layout.shuffled:
                return float(np.asarray(b["estimate"])[0])
            ids = release.user_ids
            if spec.mode == "ldp":
                return dict(zip(ids.tolist(), release.values[0, :, 0].tolist()))
            total = np.zeros(ids.size)
            for s, first, est in zip(sizes, b["first_node"], b["estimates"]):
                est = np.asarray(est)[0]
                node = ids // s - first
                inside = (node >= 0) & (node < est.size)  # a truncated tail's user has no node there
                total[inside] += est[node[inside]]
            return dict(zip(ids.tolist(), total.tolist()))

        return plant, score, slots

    return hooks


def counter_canary_audit(family, config, label: str, seed: int, confidence: float, run: int = 0,
                         mechanisms: tuple | None = None) -> dict:
    """One whole counter run with canaries (:func:`counter_hooks`,
    :func:`~privbandit.audit.canary.canary_run`). Algorithm 4 (``cs-linucb``) is refused: not
    built (its users' [φy, upper(φφᵀ)] reach k nodes of a tree whose prefix sums drive every later
    plan; its nodes are audited per release)."""
    from privbandit.audit.canary import canary_run

    if family.bandit(config, label):
        raise NotImplementedError(
            f"algorithms.{label}: no one-run audit of Algorithm 4 yet (its nodes are audited per release; "
            f"docs/audit.md)")
    zero = config.model_copy(update={"input": "iid", "p": 0.0})  # every other user's bit exactly 0
    spec = family.spec(zero, label)
    return canary_run(family, zero, label, seed, confidence, counter_hooks(mechanisms), run,
                      {"mode": spec.mode, "k": spec.k, "protocol": spec.protocol})
