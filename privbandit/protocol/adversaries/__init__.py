"""Adversaries as first-class, configurable parties (issue #5).

In-process adversaries (sans-I/O, vectorized over a block of users) are chosen per algorithm in an
experiment file, ``adversary = {kind = "max-shift", fraction = 0.05}``, or with
``privbandit attack KIND EXPERIMENT``. Traffic adversaries act on the wire against a running MQTT
session (:mod:`privbandit.services.hostile`): ``privbandit attack KIND --broker URL --run ID``.
"""

from __future__ import annotations

from privbandit.protocol.adversaries.base import Adversary, Block
from privbandit.protocol.adversaries.collusion import Colluders
from privbandit.protocol.adversaries.defences import bounded_sum, in_window, report_slack
from privbandit.protocol.adversaries.poisoning import MaxShift, OutOfRange, WindowEdge

USER_ADVERSARIES: dict[str, type[Adversary]] = {
    cls.kind: cls for cls in (MaxShift, OutOfRange, WindowEdge, Colluders)
}

# Adversaries on the wire; they need a broker and a running session (services/hostile.py).
TRAFFIC_ADVERSARIES: dict[str, str] = {
    "replay": "re-sends reports for rounds that already closed, and for the running task's old rounds",
    "impersonate": "sends reports under invited users' ids, racing the genuine fleets",
    "sybil": "sends reports from ids outside the invited cohort",
    "flood": "floods the report topic: duplicates, junk, malformed and oversized messages",
    "curious-analyzer": "with the analyzer's credentials: subscribes to reports and metrics, forges releases",
}


def catalogue() -> dict[str, str]:
    """Every adversary's name and one-line description, in-process ones first."""
    return {**{k: c.summary for k, c in USER_ADVERSARIES.items()}, **TRAFFIC_ADVERSARIES}


__all__ = ["Adversary", "Block", "Colluders", "MaxShift", "OutOfRange", "WindowEdge", "USER_ADVERSARIES",
           "TRAFFIC_ADVERSARIES", "bounded_sum", "catalogue", "in_window", "report_slack"]
