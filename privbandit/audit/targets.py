"""What a family hands the audit for one release of one algorithm (DP-Auditorium's *generator*):
two neighbouring inputs, a vectorized sampler of what the analyzer receives under each, and the
ledger's claim for that release.

A family builds its targets from its own mechanisms and analyzer logic
(:meth:`privbandit.protocol.spine.family.Family.audit_targets`); the audit never re-implements a
mechanism, so what it tests is the code a run executes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from privbandit.protocol.spine.events import Release, Round

# Draws per sampler call: bounds the memory one chunk of releases takes (cohort × releases).
CHUNK_DRAWS = 1 << 20


@dataclass
class AuditTarget:
    """One release to audit.

    ``sample(which, count, rng)``: ``count`` i.i.d. releases (or a function of each: a statistic
    the analyzer could compute, which only weakens the audit, never makes it unsound) under
    neighbouring input ``which`` ∈ {0, 1}. ``claim(delta)``: the ledger's summary after recording
    this one release's event (``guarantee``, ``epsilon_at_delta``, ``epsilon_pure``, …).
    """

    family: str
    label: str
    algorithm: str
    release: str  # what the analyzer receives, in words
    neighbours: str  # the two inputs, in words
    kind: Literal["integer", "real"]
    sample: Callable[[int, int, np.random.Generator], np.ndarray]
    claim: Callable[[float], dict]
    delta: float  # the δ the run's ledger states its ε at: the audit's default
    details: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.family}/{self.label}"

    def draw(self, which: int, count: int, rng: np.random.Generator, per_release: int = 1) -> np.ndarray:
        """``count`` releases, in chunks of at most :data:`CHUNK_DRAWS` underlying draws
        (``per_release``: draws one release costs, e.g. the cohort size)."""
        if which not in (0, 1):
            raise ValueError(f"which={which} must be 0 or 1")
        chunk = max(1, CHUNK_DRAWS // max(1, per_release))
        parts = [self.sample(which, min(chunk, count - start), rng) for start in range(0, count, chunk)]
        return np.concatenate(parts) if parts else np.zeros(0)


def modular_row_sums(messages: np.ndarray, m: int) -> np.ndarray:
    """``(Σ_j y_ij) mod m`` per row of residues: the secure aggregator's release for many rounds at
    once. Rows whose plain int64 sum could overflow are summed as Python ints."""
    messages = np.asarray(messages, dtype=np.int64)
    if messages.shape[1] * (m - 1) < 2**63 - 1:
        return messages.sum(axis=1) % m
    return np.array([sum(int(v) for v in row) % m for row in messages], dtype=np.int64)


class NoWirePath(ValueError):
    """A target whose release does not cross the broker from an intermediary (the reason says why)."""


# Why a release is audited in-process: no family hook wires it (the default
# ``Family.wire_target``, and a wiring family's release outside what it wires). A release with a
# reason of its own (the central model, no claim, …) is refused with that reason instead.
NOT_WIRED = ("no MQTT path yet: the wired releases are those an intermediary process hands the analyzer in the "
             "distributed-DP MAB family, the private-online-learning family (DP-SE, Anytime-Lazy-UCB's array sums, "
             "FTNL's argmax or K sums), the shuffle-linear family (LinUCB-LDP, SDP-Amp, SDP-Vec), the "
             "concurrent-shuffle family (shuffled counter nodes, Algorithm 4's nodes, randomized response) and "
             "ShuffleGLM's P_Vec rounds; this release is not one of them (docs/audit.md)")


@dataclass
class WireTarget:
    """What the MQTT audit needs of a target beyond the :class:`AuditTarget`: the round as the
    analyzer opens it and the plan body it sends, the users' randomizer, the target's statistic of
    a decoded release, and the round's rule to check a release against the reports sent.

    ``randomize(inputs, rng)``: ``inputs`` is (rounds, reports), each user's input under the
    round's neighbour: 0 for every user but user 0 (column 0), whose input is the round's neighbour
    index, 0 or 1 (the MAB rewards are these very values); the result is every user's message,
    (rounds, reports) for one entry each or (rounds, reports, width)."""

    target: AuditTarget
    round: Round  # its id is replaced per round
    body: dict
    reports: int  # reports per round (n less the dropouts)
    randomize: Callable[[np.ndarray, np.random.Generator], np.ndarray]  # inputs (rounds, reports) → messages
    statistic: Callable[[Release, int], int | float]  # (release, the round's first user id) → statistic
    ideal: Callable[[Release, np.ndarray, np.ndarray], bool]  # release == the rule's function of (ids, reports) sent?
    notes: list[str] = field(default_factory=list)
    label: str = ""  # the algorithm's label in the experiment, its task's (a target's may add "/level-2")

    @property
    def intermediary(self) -> str:
        return self.round.intermediary


def rule_check(rnd: Round, total: Callable[[np.ndarray], np.ndarray] | None = None
               ) -> Callable[[Release, np.ndarray, np.ndarray], bool]:
    """``ideal(release, ids, sent)`` for a round whose reports are vectors of ``rnd.width`` entries
    (``sent``: (reports,) or (reports, width)): is the release exactly the round's rule applied to
    them? ``sum``: ``total(sent)`` (default the entrywise sum, as integers or floats, and mod m when
    the round has a modulus: a secure aggregator's sum of residues; ``total``: e.g. a shuffler's
    per-label totals of count-encoded reports); ``argmax``: the index of the largest entry of that
    modular sum, each read as its representative in the round's ``decode`` interval; ``shuffle``:
    the same multiset of rows in every column group the round permutes independently
    (``rnd.groups``; P_Amp's S1 and S2), or, with ``messages``, the same multiset of every entry
    (split-and-mix shares); ``pass``: the same reports under the same ids."""
    width = rnd.width
    groups = np.cumsum((0, *(rnd.groups or (width,))))

    def rows(a: np.ndarray) -> np.ndarray:  # a (n, w) array's rows in lexicographic order
        return a[np.lexsort(a.T[::-1])] if a.shape[1] else a

    def summed(sent: np.ndarray) -> np.ndarray:
        if total is not None:
            return total(sent)
        # per column, exact for any n (modular_row_sums falls back to Python ints where int64 could overflow)
        return sent.sum(axis=0) if rnd.m is None else modular_row_sums(sent.T, rnd.m)

    def ideal(release: Release, ids: np.ndarray, sent: np.ndarray) -> bool:
        sent = np.asarray(sent).reshape(len(ids), width)
        if release.n_reports != len(ids):
            return False
        values = np.asarray(release.values)
        if rnd.rule == "sum":
            return values.shape == (1, width) and np.array_equal(values[0], summed(sent))
        if rnd.rule == "argmax":
            lo, _ = rnd.decode
            signed = (summed(sent) - lo) % rnd.m + lo
            return values.shape == (1, 1) and int(values[0, 0]) == int(np.argmax(signed))
        if rnd.messages:  # split-and-mix: the multiset of every entry sent, each a message of its own
            return values.shape == (1, len(ids) * width, 1) and np.array_equal(np.sort(values.ravel()),
                                                                               np.sort(sent.ravel()))
        if values.shape != (1, len(ids), width):
            return False
        if rnd.rule == "shuffle":
            return all(np.array_equal(rows(values[0, :, lo:hi]), rows(sent[:, lo:hi]))
                       for lo, hi in zip(groups[:-1], groups[1:]))
        if rnd.rule == "pass" and release.user_ids is not None:
            order = np.argsort(release.user_ids)
            return np.array_equal(release.user_ids[order], ids) and np.array_equal(values[0][order], sent)
        return False

    return ideal


def own_report(release: Release, user: int) -> np.ndarray:
    """User ``user``'s report in an attributable release (``pass``): its ``width`` entries."""
    mine = release.values[0][release.user_ids == user]
    if mine.shape[0] != 1:
        raise RuntimeError(f"round {release.round_id} released {mine.shape[0]} reports of user {user}, not one")
    return mine[0]


def neighbour_rows(inputs: np.ndarray, e0: np.ndarray, e1: np.ndarray) -> np.ndarray:
    """Every user's entries (rounds, reports, width): ``e1`` where its input is 1 (user 0 under
    neighbour 1), ``e0`` elsewhere."""
    return np.where((np.asarray(inputs) == 1)[..., None], e1, e0)


def wire_round(rnd: Round) -> Round:
    """``rnd`` if one round's reports fit one message as a fleet sends it (its users one block,
    their entries within the codec's array limit), else :class:`NoWirePath`."""
    from privbandit.protocol.primitives.seeding import USER_BLOCK
    from privbandit.services.codec import MAX_ARRAY_ELEMENTS

    if rnd.expected > USER_BLOCK:
        raise NoWirePath(f"a round of {rnd.expected} users: over MQTT at most {USER_BLOCK} users a round (one block)")
    if rnd.expected * rnd.width > MAX_ARRAY_ELEMENTS:
        raise NoWirePath(f"a round of {rnd.expected} reports of {rnd.width} entries: over MQTT at most "
                         f"{MAX_ARRAY_ELEMENTS} entries a round (one message)")
    return rnd
