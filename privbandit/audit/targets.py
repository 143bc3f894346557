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


# Why a release with no wired MQTT path is audited in-process (every family but the ones whose
# analyzer is the successive-elimination one).
NOT_WIRED = ("no MQTT path yet: only the successive-elimination analyzer's rounds are wired, and this release's "
             "statistic is its family's own (docs/audit.md)")


@dataclass
class WireTarget:
    """What the MQTT audit needs of a target beyond the :class:`AuditTarget`: the round as the
    analyzer opens it and the plan body it sends, the users' randomizer, the target's statistic of
    a decoded release, and the round's rule to check a release against the reports sent."""

    target: AuditTarget
    round: Round  # its id is replaced per round
    body: dict
    reports: int  # reports per round (n less the dropouts)
    randomize: Callable[[np.ndarray, np.random.Generator], np.ndarray]  # rewards (rounds, reports) → messages
    statistic: Callable[[Release, int], int | float]  # (release, the round's first user id) → statistic
    ideal: Callable[[Release, np.ndarray, np.ndarray], bool]  # release == the rule's function of (ids, reports) sent?
    notes: list[str] = field(default_factory=list)

    @property
    def intermediary(self) -> str:
        return self.round.intermediary
