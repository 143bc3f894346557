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
- a shuffler of residues (``shuffle``, ``intermediary = "shuffler-residues"``): the multiset of
  residues, reduced to the number of residues equal to g mod m, user 0's encoding under input 1 (a
  statistic the analyzer can compute, so the bound stays sound; the permutation does not change
  it, so it is not drawn);
- the split-and-mix shuffler (``shuffle`` of ``messages``, ``intermediary = "shuffler"``): every
  user's residue split into the round's shares by the family's own users' code, the multiset of all
  shares reduced to their sum mod m (what the analyzer decodes; the shares' other structure is what
  the closeness bound covers, and no statistic of it is tested here);
- the raw rewards' sum (``sum`` of reals, SE): the sum as it is;
- attributable reports (``pass``, LDP-SE): user 0's report only. The other n − 1 reports are
  independent of it and identically distributed under both inputs, so the likelihood ratio of the
  whole release is that of user 0's report: the audit loses nothing and skips n − 1 draws;
- a trusted analyzer (central model: CDP-SE, DP-SE): what it outputs, the aggregate after its own
  noise (:meth:`~.base.Mechanism.protect`), since the central model protects the output.

The claimed guarantee is the ledger's (:meth:`.family.DistributedDpMab.ledger`) after recording
the event the analyzer's logic spends for that release (:func:`.parties.release_event`).
"""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np

from privbandit.audit.targets import (NOT_WIRED, AuditTarget, NoWirePath, WireTarget, modular_row_sums, own_report,
                                      rule_check)
from privbandit.families.distributed_dp_mab.base import Mechanism
from privbandit.families.distributed_dp_mab.parties import EliminationServer, params_of, release_event
from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.protocol.primitives.shuffle_sum import split
from privbandit.protocol.spine.events import Release

# n = 16 keeps a distributed release at 16 users' shares (≈ 2·10⁵ releases/s on one core) while
# every guarantee the family states holds for any n; ``--cohort`` sets it.
DEFAULT_COHORT = 16

RELEASES = {
    "sum": "the modular sum of the cohort's residues (secure aggregation)",
    "real-sum": "the sum of the cohort's raw rewards, as it is (no noise)",
    "mix": "the shuffled multiset of the cohort's split-and-mix shares, as their sum mod m",
    "shuffle": "the shuffled multiset of the cohort's residues, as the count equal to user 0's input-1 encoding",
    "pass": "user 0's attributable report (the others are ancillary)",
    "central": "the trusted analyzer's output: the aggregate after its own noise",
}


def mechanism_target(mechanism: Mechanism, rnd, n: int, claim, delta: float, family: str, label: str,
                     algorithm: str, reports: int | None = None, others: float = 0.0,
                     pair: tuple[float, float] = (0.0, 1.0)) -> AuditTarget:
    """The target of one mechanism's release of one round ``rnd`` (its rule and modulus) of
    ``n`` users, ``reports`` of whom report (default n; the others dropped out: user 0 stays).
    ``claim(event, delta)`` turns the release's event into the ledger's summary; ``delta``: the
    run's own δ.
    ``others``: every other user's reward; ``pair``: user 0's reward under input 0 and under input 1
    (default: the theorems' worst case, all 0 against user 0's 1; :func:`elimination_candidates`
    offers the others). Also how the tests audit deliberately broken mechanisms through the same path."""
    q = mechanism.params(n)
    k = n if reports is None else reports
    if not 1 <= k <= n:
        raise ValueError(f"reports={k} must lie in [1, n={n}]")
    central = mechanism.trust_model == "central"
    integer = q.m is not None
    view = ("central" if central else "mix" if rnd.messages else
            "real-sum" if rnd.rule == "sum" and not integer else rnd.rule)
    event = release_event(mechanism, rnd, q, k, delta)

    def rewards(which: int, count: int, users: int) -> np.ndarray:
        r = np.full((count, users), float(others))
        r[:, 0] = pair[which]
        return r.ravel()

    top = round(pair[1] * q.g) % q.m if q.m is not None else None  # user 0's encoding under input 1

    def sample(which: int, count: int, rng: np.random.Generator) -> np.ndarray:
        if view == "pass":
            return mechanism.randomize(rewards(which, count, 1), q, rng).messages
        messages = mechanism.randomize(rewards(which, count, k), q, rng).messages.reshape(count, k)
        if view == "shuffle":
            return (messages == top).sum(axis=1).astype(np.int64)
        if view == "mix":  # the users' own split, then the analyzer's sum of the multiset
            messages = split(messages, rnd.width, q.m, rng).reshape(count, k * rnd.width)
        total = modular_row_sums(messages, q.m) if integer else messages.sum(axis=1)
        return mechanism.protect(total, q, rng)[0] if central else total

    details = {"n": n, "reports": k, "g": q.g, "tau": q.tau, "m": q.m, "rule": rnd.rule, "trust_model": mechanism.trust_model,
               "event": type(event).__name__, **({"shares": rnd.width} if rnd.messages else {})}
    return AuditTarget(
        family=family, label=label, algorithm=algorithm, release=RELEASES[view],
        neighbours=(f"{n} users with reward 0 vs the same with user 0's reward 1 (encoded sums 0 vs g)"
                    if (others, *pair) == (0.0, 0.0, 1.0) else
                    f"{n} users with reward {others:g}, user 0's {pair[0]:g} vs {pair[1]:g}"),
        kind="integer" if integer else "real", sample=sample, claim=lambda delta: claim(event, delta), delta=delta,
        details=details | {"per_release": 1 if view == "pass" else k})


def elimination_targets(family, config, label: str, cohort: int | None,
                        pairs: tuple = ((0.0, 0.0, 1.0),)) -> list[AuditTarget]:
    """The target of one algorithm whose analyzer is an :class:`~.parties.EliminationServer` (this
    family's, and DP-SE in the private-online-learning family): a round of ``cohort`` users as that
    analyzer opens it (its intermediary's rule), the claim from ``family``'s own ledger. ``pairs``:
    (the others' reward, user 0's under input 0, under input 1), one target each."""
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
                             public["algorithm"]["algorithm"], reports, others, (a, b)) for others, a, b in pairs]


# The neighbour search's candidates (privbandit audit --search): (every other user's reward, user
# 0's reward under input 0, under input 1). The first is the default pair; the second the same
# sensitivity at the top of the range (a mechanism whose noise depends on the rewards, or an
# encoding that saturates, differs there); the last two at half the sensitivity or with the others
# at a mid value, whose randomized rounding adds its own noise (a correct mechanism is weaker there).
CANDIDATE_PAIRS = ((0.0, 0.0, 1.0), (1.0, 1.0, 0.0), (0.5, 0.0, 1.0), (0.0, 0.0, 0.5))


def elimination_candidates(family, config, label: str, cohort: int | None) -> list[AuditTarget]:
    """:func:`elimination_targets`' release under each of :data:`CANDIDATE_PAIRS`."""
    return elimination_targets(family, config, label, cohort, CANDIDATE_PAIRS)


# --- the one-run canary audit of a whole run (Steinke, Nasr & Jagielski 2023) --------------------


def elimination_hooks(mechanism: Mechanism | None = None):
    """The canary of a run whose analyzer is an :class:`~.parties.EliminationServer` (this family's,
    and DP-SE's): each collected round's first reporter sends the mechanism's own randomizer applied
    to her canary bit, with the round's parameters from the plan; the score is the round's decoded
    estimate, what the analyzer publishes. ``mechanism``: the algorithm's own (default), or one the
    tests break, given to both the analyzer and the users."""

    def hooks(server, user_logic):
        if mechanism is not None:
            server.mechanism = user_logic.mechanism = mechanism
        own = server.mechanism

        def plant(plan, rnd, bit, rng):
            q = params_of(plan)
            message = own.randomize(np.array([float(bit)]), q, rng).messages
            return split(message, rnd.width, q.m, rng)[0] if rnd.messages else message[0]  # split-and-mix: her shares

        return plant, lambda release, record: record.body["estimate"]

    return hooks


def canary_audit(family, config, label: str, seed: int, confidence: float, run: int = 0,
                 mechanism: Mechanism | None = None) -> dict:
    """One whole run of ``label`` through the spine's in-process engine (the analyzer, its
    intermediary, the family's users and ledger) on the experiment's horizon and arms, every mean 0,
    so that each collected round's sum is its canary's bit: m canaries, one per round (a user is in
    one round, so the run's ε is its worst round's). Scores: the analyzer's decoded estimates;
    guesses and bound: :func:`privbandit.audit.canary.guess_and_bound`, at the run's own δ. The
    claim: the run's own ledger, as the analyzer recorded it. ``mechanism``: the algorithm's own
    (default), or one the tests break, given to both the analyzer and the users."""
    from privbandit.audit.canary import canary_run
    from privbandit.families.distributed_dp_mab import config as cfg
    from privbandit.families.distributed_dp_mab.family import instance_for

    arms = instance_for(config, run).means.size
    zero = cfg.EnvironmentConfig.model_validate({"kind": "means", "arms": arms, "means": [0.0] * arms,
                                                "reward": "bernoulli"})  # every other reward exactly 0
    config = config.model_copy(update={"environment": zero})
    # the rounds follow the eliminations: at most one canary per user, whatever they decide
    return canary_run(family, config, label, seed, confidence, elimination_hooks(mechanism), run, {"arms": arms},
                      most=config.horizon)


# --- the MQTT audit's path (privbandit audit --transport mqtt) ---------------------------------------


def elimination_wire(family, config, label: str, target: AuditTarget, mechanism=None) -> WireTarget:
    """``privbandit audit --transport mqtt``'s path for one of ``label``'s targets (the family
    hook :meth:`~privbandit.protocol.spine.family.Family.wire_target`, of this family and of the
    online family's DP-SE, whose analyzer is this one), or :class:`NoWirePath` saying why it has none.
    ``mechanism``: the algorithm's own (default), or one the tests break, in the analyzer's logic
    (its rounds) and the users' randomizer alike."""
    public = family.public_task(config, label, [0])
    server = family.analyzer(public, [0])
    if not isinstance(server, EliminationServer):
        raise NoWirePath(NOT_WIRED)
    if mechanism is not None:
        server.mechanism = mechanism
    mechanism = server.mechanism
    if mechanism.trust_model == "central":
        raise NoWirePath("central model: the intermediary sums the users' unnoised data; the privacy is the "
                         "analyzer's own noise, drawn after the wire")
    if mechanism.trust_model == "none":
        raise NoWirePath("non-private: the intermediary sums the raw rewards, and no claim is made")
    n, k = int(target.details["n"]), int(target.details.get("reports", target.details["n"]))
    if n > USER_BLOCK:
        raise NoWirePath(f"--cohort {n}: over MQTT at most {USER_BLOCK} users a round (one block)")
    q = mechanism.params(n)
    rnd = server.round_of(0, n, q)
    notes = []
    if rnd.secagg is not None:
        # The same release (the modular sum) by the aggregator's ideal functionality: the fleets' side
        # of Bonawitz et al. costs milliseconds per user per round and releases exactly that sum
        # (tests/services/test_distributed.py); the reports then reach the aggregator in the clear.
        notes.append(f"secure aggregation ({rnd.secagg}) replaced by the aggregator's ideal modular sum: "
                     "the same release; the masking protocol is not exercised")
        rnd = replace(rnd, secagg=None, secagg_degree=None, secagg_threshold=None)
    body = {"batch": 0, "arm": 0, "params": asdict(q)}  # as the analyzer's plans carry it (public)

    def randomize(rewards: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        messages = mechanism.randomize(rewards.ravel(), q, rng).messages.reshape(rewards.shape)
        return split(messages, rnd.width, q.m, rng) if rnd.messages else messages  # the users' own split

    def statistic(release: Release, first: int) -> int | float:
        if rnd.rule == "sum":
            v = release.values[0, 0]
            return int(v) if q.m is not None else float(v)
        if rnd.messages:  # the split-and-mix shares' sum, what the analyzer decodes
            return server.value_of(rnd, release, q)
        values = release.values[0, :, 0]
        if rnd.rule == "shuffle":
            return int((values == q.g % q.m).sum())
        return own_report(release, first)[0].item()  # "pass": user 0's attributable report

    # The exact check is the round's rule (``rule_check``): the modular sum of the residues (the
    # aggregator's, which every modular mechanism's ``aggregate`` is), the same multiset, or the same
    # reports under the same ids.
    return WireTarget(target, rnd, body, k, randomize, statistic, rule_check(rnd), notes)
