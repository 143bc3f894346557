"""The releases of Chowdhury & Zhou (2023)'s mechanisms, as ``privbandit audit`` tests them.

Neighbouring inputs (Alg. 1's sensitivity): a cohort of n users whose rewards are all 0, against
the same cohort where user 0's reward is 1. With the algorithm's ``dropout_rate`` q, ⌊q·n⌋ of them
(never user 0) drop out before reporting, as the spine drops them, and the release is the
survivors': the ledger's event for it is then the partial-share one (``polya_sum_epsilon`` for
Pólya shares), which the audit thereby checks too. Rewards in {0, 1} encode exactly (x̂ ∈ {0, g}), so the
encoded sums differ by g, the sensitivity every theorem of the paper is stated for.

What is sampled is what the analyzer receives, from the family's own code: the mechanism's
randomizer (:meth:`~.base.Mechanism.randomize`) over every user of the cohort, then

- secure aggregation (``sum``): the modular sum of the residues;
- a shuffler (``shuffle``): the multiset of residues, reduced to the number of residues equal to
  g mod m, user 0's encoding under input 1 (a statistic the analyzer can compute, so the bound
  stays sound; the permutation does not change it, so it is not drawn);
- attributable reports (``pass``, LDP-SE): user 0's report only. The other n − 1 reports are
  independent of it and identically distributed under both inputs, so the likelihood ratio of the
  whole release is that of user 0's report: the audit loses nothing and skips n − 1 draws;
- a trusted analyzer (central model: CDP-SE, DP-SE): what it outputs, the aggregate after its own
  noise (:meth:`~.base.Mechanism.protect`), since the central model protects the output.

The claimed guarantee is the ledger's (:meth:`.family.DistributedDpMab.ledger`) after recording
the event the analyzer's logic spends for that release (:func:`.parties.release_event`).
"""

from __future__ import annotations

import numpy as np

from privbandit.audit.targets import AuditTarget, modular_row_sums
from privbandit.families.distributed_dp_mab.base import Mechanism
from privbandit.families.distributed_dp_mab.parties import params_of, release_event

# n = 16 keeps a distributed release at 16 users' shares (≈ 2·10⁵ releases/s on one core) while
# every guarantee the family states holds for any n; ``--cohort`` sets it.
DEFAULT_COHORT = 16

RELEASES = {
    "sum": "the modular sum of the cohort's residues (secure aggregation)",
    "shuffle": "the shuffled multiset of the cohort's residues, as the count equal to g mod m",
    "pass": "user 0's attributable report (the others are ancillary)",
    "central": "the trusted analyzer's output: the aggregate after its own noise",
}


def mechanism_target(mechanism: Mechanism, rnd, n: int, claim, delta: float, family: str, label: str,
                     algorithm: str, reports: int | None = None) -> AuditTarget:
    """The target of one mechanism's release of one round ``rnd`` (its rule and modulus) of
    ``n`` users, ``reports`` of whom report (default n; the others dropped out: user 0 stays).
    ``claim(event, delta)`` turns the release's event into the ledger's summary; ``delta``: the
    run's own δ.
    Also how the tests audit deliberately broken mechanisms through the same path."""
    q = mechanism.params(n)
    k = n if reports is None else reports
    if not 1 <= k <= n:
        raise ValueError(f"reports={k} must lie in [1, n={n}]")
    central = mechanism.trust_model == "central"
    view = "central" if central else rnd.rule
    integer = q.m is not None
    event = release_event(mechanism, rnd, q, k)

    def rewards(which: int, count: int, users: int) -> np.ndarray:
        r = np.zeros((count, users))
        r[:, 0] = which
        return r.ravel()

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        if view == "pass":
            return mechanism.randomize(rewards(which, count, 1), q, rng).messages
        messages = mechanism.randomize(rewards(which, count, k), q, rng).messages.reshape(count, k)
        if view == "shuffle":
            return (messages == q.g % q.m).sum(axis=1).astype(np.int64)
        total = modular_row_sums(messages, q.m) if integer else messages.sum(axis=1)
        return mechanism.protect(total, q, rng)[0] if central else total

    details = {"n": n, "reports": k, "g": q.g, "tau": q.tau, "m": q.m, "rule": rnd.rule, "trust_model": mechanism.trust_model,
               "event": type(event).__name__}
    return AuditTarget(
        family=family, label=label, algorithm=algorithm, release=RELEASES[view],
        neighbours=f"{n} users with reward 0 vs the same with user 0's reward 1 (encoded sums 0 vs g)",
        kind="integer" if integer else "real", sample=sample, claim=lambda delta: claim(event, delta), delta=delta,
        details=details | {"per_release": 1 if view == "pass" else k})


def elimination_targets(family, config, label: str, cohort: int | None) -> list[AuditTarget]:
    """The target of one algorithm whose analyzer is an :class:`~.parties.EliminationServer` (this
    family's, and DP-SE in the private-online-learning family): a round of ``cohort`` users as that
    analyzer opens it (its intermediary's rule), the claim from ``family``'s own ledger."""
    n = DEFAULT_COHORT if cohort is None else cohort
    public = family.public_task(config, label, [0])
    server = family.analyzer(public, [0])
    rnd = server.round_of(0, n, server.mechanism.params(n))
    # The spine's dropouts: exactly ⌊q·size⌋ of a block's users never report (spine/parties.py,
    # one block up to 65,536 users); the ledger then records the survivors' event.
    reports = n - int(family.dropout_rate(config, label) * n)

    def claim(event, delta: float) -> dict:
        ledger = family.ledger({**public, "delta": delta})
        ledger.record(event)
        return ledger.summary()

    return [mechanism_target(server.mechanism, rnd, n, claim, public["delta"], family.name, label,
                             public["algorithm"]["algorithm"], reports)]


# --- the one-run canary audit of a whole run (Steinke, Nasr & Jagielski 2023) --------------------


class _CanaryUsers:
    """The spine's users of one run, with the first user of every collected round a canary: her
    report is replaced by the mechanism's own randomizer applied to her canary bit (1 with
    probability ½, drawn from the audit's generator), as a user with that reward would send it."""

    def __init__(self, users, mechanism: Mechanism, rng: np.random.Generator):
        self.users, self.mechanism, self.rng = users, mechanism, rng
        self.bits: dict[int, bool] = {}  # round id → canary included

    def respond(self, plan, blocks=None, rounds=None):
        reports, truths = self.users.respond(plan, blocks, rounds)
        firsts = {j.round_id: j.first for j in plan.joins}
        for rep in reports:
            if rep.round_id not in firsts or rep.round_id in self.bits:
                continue
            at = np.flatnonzero(rep.user_ids == firsts[rep.round_id])
            if at.size:
                bit = bool(self.rng.random() < 0.5)
                message = self.mechanism.randomize(np.array([float(bit)]), params_of(plan), self.rng).messages[0]
                rep.values[0, at[0], 0] = message
                self.bits[rep.round_id] = bit
        return reports, truths


class _Records:
    """The observer of the canary run: keeps each released round's decoded estimate."""

    def __init__(self, observer):
        self.observer, self.estimates = observer, {}

    def on_truth(self, truth):
        return self.observer.on_truth(truth)

    def on_record(self, record):
        self.estimates[record.round_id] = float(record.body["estimate"])
        return self.observer.on_record(record)


def canary_audit(family, config, label: str, seed: int, confidence: float, run: int = 0,
                 mechanism: Mechanism | None = None) -> dict:
    """One whole run of ``label`` through the spine's in-process engine (the analyzer, its
    intermediary, the family's users and ledger) on the experiment's horizon and arms, every mean 0,
    so that each collected round's sum is its canary's bit: m canaries, one per round (a user is in
    one round, so the run's ε is its worst round's). Scores: the analyzer's decoded estimates;
    guesses and bound: :func:`privbandit.audit.canary.guess_and_bound`, at the run's own δ. The
    claim: the run's own ledger, as the analyzer recorded it. ``mechanism``: the algorithm's own
    (default), or one the tests break, given to both the analyzer and the users."""
    import time

    from privbandit.audit.canary import guess_and_bound
    from privbandit.audit.run import verdict
    from privbandit.families.distributed_dp_mab import config as cfg
    from privbandit.families.distributed_dp_mab.family import instance_for
    from privbandit.protocol.primitives.seeding import stream
    from privbandit.protocol.spine import engine
    from privbandit.runner.tasks import parties

    start = time.perf_counter()
    arms = instance_for(config, run).means.size
    zero = cfg.EnvironmentConfig.model_validate({"kind": "means", "arms": arms, "means": [0.0] * arms,
                                                "reward": "bernoulli"})  # every other reward exactly 0
    config = config.model_copy(update={"environment": zero})
    if family.dropout_rate(config, label) or family.algorithm(config, label).adversary is not None:
        raise ValueError(f"algorithms.{label}: the canary run takes no dropouts and no adversary")
    public, analyzer, users, boxes, observer = parties(family, config, label, [run], oracle=False)
    if mechanism is not None:
        analyzer.logic.mechanism = users.logic.mechanism = mechanism
    canaries = _CanaryUsers(users, analyzer.logic.mechanism, stream(seed, "audit-canary", label, run))
    records = _Records(observer)
    engine.run(analyzer, canaries, boxes, records)
    claim = analyzer.ledger.summary()
    ids = sorted(set(canaries.bits) & set(records.estimates))
    out = guess_and_bound(np.array([records.estimates[i] for i in ids]), np.array([canaries.bits[i] for i in ids]),
                          claim["delta"], confidence)
    return {"name": f"{family.name}/{label}", "label": label, "algorithm": public["algorithm"]["algorithm"],
            "horizon": config.horizon, "arms": arms, **out,
            "claim": {"guarantee": claim["guarantee"], "epsilon_at_delta": claim["epsilon_at_delta"],
                      "delta": claim["delta"]},
            "verdict": verdict(out["epsilon"], claim), "seconds": time.perf_counter() - start}
