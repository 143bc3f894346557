"""The one-run audit (Steinke, Nasr & Jagielski, "Privacy Auditing with One (1) Training Run",
NeurIPS 2023): m canaries, each included independently with probability ½; from the run's output
the auditor guesses the inclusion of r of them (abstaining on the rest) and gets v right.

If the run is (ε, δ)-DP with respect to each canary, their Theorem 3 bounds the number of correct
guesses W:

    P[W ≥ v] ≤ P[Bin(r, q) ≥ v] + 2mδ · max_{1≤i≤v} P[v − i ≤ Bin(r, q) < v] / i,   q = e^ε/(1 + e^ε).

So an observed v whose bound is below β rejects (ε, δ)-DP with confidence 1 − β, and the largest ε
it rejects is a lower bound on the run's ε. Unlike :mod:`.testers`, one run suffices, and what is
audited is the whole run (every release a canary reaches, composed as the protocol composes them),
not one release; the price is a looser bound (the guesses' accuracy, not a likelihood ratio).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
from scipy.stats import binom


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """The bound above on P[W ≥ v] for an (ε, δ)-DP run with m canaries and r guesses."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 ≤ v ≤ r ≤ m, got v={v}, r={r}, m={m}")
    if epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError(f"epsilon={epsilon} must be ≥ 0 and delta={delta} in [0, 1]")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(binom.sf(v - 1, r, q))
    slack = 0.0
    if delta > 0 and v > 0:
        i = np.arange(1, v + 1)
        below = np.cumsum(binom.pmf(v - i, r, q))  # P[v − i ≤ Bin(r, q) < v]
        slack = float(np.max(below / i))
    return min(1.0, tail + 2 * m * delta * slack)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, beta: float) -> float:
    """The largest ε the observation rejects at level β (0 if it rejects none), to 10⁻⁶: the bound
    grows with ε, so bisection."""
    if not 0 < beta < 1:
        raise ValueError(f"beta={beta} must lie in (0, 1)")
    if p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2 * hi
        if hi > 1e3:
            return math.inf  # every ε is rejected (e.g. δ = 0 and all guesses right with r large)
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p_value(m, r, v, mid, delta) < beta else (lo, mid)
    return lo


def guess_and_bound(scores: np.ndarray, included: np.ndarray, delta: float, confidence: float,
                    fractions: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0), planted: int | None = None) -> dict:
    """Guess "included" for the r/2 highest scores and "excluded" for the r/2 lowest, for each r in
    ``fractions`` of m fixed in advance; each r's bound is taken at β/len(fractions) (Bonferroni),
    so the best of them holds with the stated confidence. ``ceiling``: the bound were every guess
    right, the most these m canaries can show (a claim above it cannot be flagged by this run).
    ``planted``: m of Theorem 3, where some canaries were never scored (a round never released,
    or never opened: abstentions decided by the output); its δ term counts them all (default: the
    scored)."""
    scores, included = np.asarray(scores, dtype=np.float64), np.asarray(included, dtype=bool)
    m = scores.size
    if m < 2 or included.shape != scores.shape:
        raise ValueError(f"need at least 2 canaries with one inclusion bit each, got {m}")
    total = m if planted is None else planted
    if total < m:
        raise ValueError(f"planted={planted} canaries cannot be fewer than the {m} scored")
    beta = (1 - confidence) / len(fractions)
    order = np.argsort(scores, kind="stable")
    rows = []
    for f in fractions:
        k = max(1, int(f * m) // 2)
        low, high = order[:k], order[m - k:]
        v = int((~included[low]).sum() + included[high].sum())
        rows.append({"r": 2 * k, "v": v, "epsilon": epsilon_lower_bound(total, 2 * k, v, delta, beta)})
    best = max(rows, key=lambda row: row["epsilon"])  # the first of the largest
    # What the same m canaries would bound were every guess right: how far this run can see at all.
    ceiling = max(epsilon_lower_bound(total, 2 * k, 2 * k, delta, beta)
                  for k in {max(1, int(f * m) // 2) for f in fractions})
    return {"canaries": m, "planted": total, "included": int(included.sum()), "delta": delta, "confidence": confidence,
            "ceiling": ceiling,
            "epsilon": best["epsilon"], "guesses": best["r"], "correct": best["v"], "by_guesses": rows}


# --- one whole run of a family, with canaries (the families' ``canary_audit``) -------------------


class CanaryUsers:
    """The spine's users of one run, with canaries: in the first report batch each round receives,
    the reports at ``slots(rnd, rep)`` (default: the first only) are replaced by ``plant(plan, rnd,
    bit, rng)``, the report a user holding the canary's bit would send, encoded by the family's own
    randomizer; each bit is 1 with probability ½, drawn from the audit's generator. ``plant``
    returns None for a round that takes no canary. A canary is named (round id, user id).

    A canary is thereby a replacement neighbour of whichever user sat in her place: the ledger's
    guarantee is per user and per change of her data, so it covers her (Steinke et al. need each
    canary's inclusion to be (ε, δ)-DP given the rest, which it is, by the same proof)."""

    def __init__(self, users, plant: Callable, rng: np.random.Generator, slots: Callable | None = None):
        self.users, self.plant, self.rng = users, plant, rng
        self.slots = slots or (lambda rnd, rep: (0,))
        self.seen: set[int] = set()  # rounds whose first batch has been planted
        self.bits: dict[tuple[int, int], bool] = {}  # (round id, user id) → canary included

    def respond(self, plan, blocks=None, rounds=None):
        reports, truths = self.users.respond(plan, blocks, rounds)
        rounds = {**(rounds or {}), **{r.id: r for r in plan.opens}}
        for rep in reports:
            if rep.round_id in self.seen or not rep.user_ids.size:
                continue
            self.seen.add(rep.round_id)
            rnd = rounds[rep.round_id]
            for at in self.slots(rnd, rep):
                bit = bool(self.rng.random() < 0.5)
                message = self.plant(plan, rnd, bit, self.rng)
                if message is None:
                    break
                rep.values[0, at] = message  # run 0 of the one run
                self.bits[(rep.round_id, int(rep.user_ids[at]))] = bit
        return reports, truths

    def serve(self, plan, blocks=None, rounds=None):
        """The engine's way in: the plan's blocks gathered into one batch (a canary goes into the
        first batch a round receives, as a fleet would send it)."""
        yield self.respond(plan, blocks, rounds)


class ReleaseScores:
    """The analyzer of the canary run, tapped: ``score(release, record)`` of every release it
    decodes (what it receives, and what it makes of it), kept per round: one number (the round's
    one canary) or ``{user id: number}`` (a round with several)."""

    def __init__(self, analyzer, score: Callable):
        self.analyzer, self.score, self.scores = analyzer, score, {}

    def next_plans(self):
        return self.analyzer.next_plans()

    def on_release(self, release):
        record = self.analyzer.on_release(release)
        self.scores[release.round_id] = self.score(release, record)
        return record

    def of(self, canary: tuple[int, int]) -> float | None:
        """A canary's score, None if her round was never released."""
        got = self.scores.get(canary[0])
        return float(got[canary[1]] if isinstance(got, dict) else got) if got is not None else None


def audit_delta(ledger, m: int, confidence: float) -> float:
    """The δ a one-run audit of m canaries states its bound at: the run's own, unless Theorem 3's
    δ term (2mδ times a factor up to 1) would take more than a tenth of β = 1 − confidence (at the
    linear family's δ = 0.1 no number of right guesses could reject anything) and the ledger
    states its ε at the smaller δ = β/(20m) too (a curve, not only (ε, δ) statements); then that.
    It depends on m and the ledger alone, never on the guesses, so the bound keeps its confidence."""
    beta = 1 - confidence
    if 2 * m * ledger.delta <= beta / 10:
        return ledger.delta
    small = beta / (20 * m)
    claim = dataclasses.replace(ledger, delta=small).summary()
    return small if claim["guarantee"] != "proven" or claim["epsilon_at_delta"] is not None else ledger.delta


def canary_run(family, config, label: str, seed: int, confidence: float, hooks: Callable, run: int = 0,
               details: dict | None = None, most: int | None = None) -> dict:
    """One whole run of ``label`` through the spine's in-process engine (the family's analyzer,
    intermediaries, users and ledger, as ``privbandit run`` makes them), with canaries, and its
    one-run bound (:func:`guess_and_bound`) against the run's own ledger, both at the run's own δ
    (or the smaller :func:`audit_delta`).

    ``hooks(analyzer_logic, user_logic) -> (plant, score)`` or ``(plant, score, slots)``: the
    family's canary and where in a round it goes (see :class:`CanaryUsers`), and the auditor's
    score from a round's release and the analyzer's record (:class:`ReleaseScores`; a larger
    score: the canary more likely included). ``config``: the family's world
    already fixed so that the other users' data is known where it can be (e.g. every mean 0).
    The analyzer gets no oracle: it must not look ahead at the users' data the canaries replace.

    ``most``: where the number of rounds depends on the data (an elimination schedule, Lazy-UCB's
    arrays), so on earlier canaries' bits, a bound on the canaries any run of this config can plant,
    fixed before it (e.g. its users): Theorem 3 counts m canaries fixed in advance, those never
    planted being abstentions, so its δ term and :func:`audit_delta` take this m. None: the
    schedule is fixed, and so is the number planted."""
    import time

    from privbandit.audit.run import verdict
    from privbandit.protocol.primitives.seeding import stream
    from privbandit.protocol.spine import engine
    from privbandit.runner.tasks import parties

    start = time.perf_counter()
    if family.dropout_rate(config, label) or family.adversary(config, label, run) is not None:
        raise ValueError(f"algorithms.{label}: the canary run takes no dropouts and no adversary")
    public, analyzer, users, boxes, observer = parties(family, config, label, [run], oracle=False)
    plant, score, *slots = hooks(analyzer.logic, users.logic)
    canaries = CanaryUsers(users, plant, stream(seed, "audit-canary", label, run), *slots)
    tapped = ReleaseScores(analyzer, score)
    engine.run(tapped, canaries, boxes, observer)
    scored = {c: tapped.of(c) for c in sorted(canaries.bits)}
    ids = [c for c, v in scored.items() if v is not None]
    if len(ids) < 2:
        raise ValueError(f"algorithms.{label}: the run released {len(ids)} canary(ies); the one-run audit needs at "
                         f"least 2 (a longer horizon)")
    planted = len(canaries.bits)  # a canary whose round was never released is an abstention
    if most is not None and most < planted:
        raise RuntimeError(f"algorithms.{label}: {planted} canaries planted, above the bound of {most}")
    m = planted if most is None else most
    delta = audit_delta(analyzer.ledger, m, confidence)
    claim = dataclasses.replace(analyzer.ledger, delta=delta).summary()  # the ledger's own ε, at that δ
    out = guess_and_bound(np.array([scored[i] for i in ids]), np.array([canaries.bits[i] for i in ids]),
                          delta, confidence, planted=m)
    return {"name": f"{family.name}/{label}", "label": label, "algorithm": public["algorithm"]["algorithm"],
            "horizon": config.horizon, "run_delta": analyzer.ledger.delta, **(details or {}), **out,
            "planted": planted, "counted": m,
            "claim": {"guarantee": claim["guarantee"], "epsilon_at_delta": claim["epsilon_at_delta"],
                      "delta": claim["delta"]},
            "verdict": verdict(out["epsilon"], claim), "seconds": time.perf_counter() - start}
