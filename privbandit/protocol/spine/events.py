"""The events of the one loop every family runs: plan → reports → release (and truth, to the
observer only). Small immutable values, as h11's events; :mod:`.parties` holds who makes them.

1. The analyzer emits :class:`Plan` s. A plan asks the users ``first_user … first_user + cohort − 1``
   to act on its public ``body`` (pull arm a; act on the broadcast model (θ̂, V⁻¹, β); report a
   gradient at θ; …). It may open :class:`Round` s at intermediaries and says, with :class:`Join` s,
   which of its users report into which round. A round can be joined by several plans (an
   Anytime-Lazy-UCB array fills over many cohorts) and a user may report to several rounds at
   different intermediaries (the concurrent shuffle tree).
2. Users answer with :class:`Reports`, one record per user.
3. An intermediary releases a round once every report it expects came (or its deadline passed and
   the round allows a partial release): a :class:`Release`, by the round's ``rule``:

   - ``sum``: the entrywise sum of the reports (mod ``m`` when set): secure aggregation's
     functionality (computed by an ideal sum or by real pairwise masking, ``secagg``);
   - ``shuffle``: the reports uniformly permuted, stripped of sender and order (with ``messages``,
     every entry of every report is a message of its own, all permuted together: the split-and-mix
     shuffler of :mod:`~privbandit.protocol.primitives.shuffle_sum`);
   - ``pass``: the reports with their senders: the local model's attributable reports, or raw
     data for a trusted analyzer (the central model);
   - ``argmax``: only the index of the largest entry of the modular sum, each entry read as its
     representative in the round's ``decode`` interval (an ideal secure computation: FTNL's
     report-noisy-max inside the intermediary).
4. The analyzer decodes the release, learns, and plans again.

Ground truth (regret, true sums) travels as :class:`Truth`, to the observer only.

Arrays carry a leading *runs* axis R: the in-process engine may step R runs of one algorithm at
once when their plans line up (the linear bandits' fixed batches); over MQTT, R = 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Rule = Literal["sum", "shuffle", "pass", "argmax"]
RULES = ("sum", "shuffle", "pass", "argmax")


@dataclass(frozen=True)
class Round:
    """One collection at one intermediary: who reports into it, what each report is, what leaves.

    ``expected`` reports complete it. Each report is ``width`` entries, integers (``integer``) or
    floats; integers lie in ``[0, m)`` when ``m`` is set, else in ``[low, high]``; floats must be
    finite and, where bounds are set, within them. ``window`` (with ``m``) is the clear-text
    range check of :mod:`privbandit.families.distributed_dp_mab.defences`: residues whose
    representative in ``[lo, hi]`` mod m does not exist are refused. ``threshold`` is the fewest
    reports a partial release (dropouts) may cover; None: the round is released complete or not
    at all. ``groups``: a shuffle permutes these column groups independently (P_Amp's S1 and S2).
    ``secagg`` ("complete" | "sparse"): the aggregator computes the sum by real secure aggregation,
    over a graph of degree ``secagg_degree`` with Shamir threshold ``secagg_threshold`` (the (k, t)
    of :mod:`privbandit.protocol.primitives.secagg.parameters`; None: that module's defaults).
    ``decode`` (with ``m``, rule ``argmax``): the interval ``[lo, hi]`` whose representatives of the
    sums mod m are compared. ``segment`` (rule ``shuffle``, complete rounds only): every
    consecutive ``segment`` reports are permuted among themselves and released in place, as that many
    separate shuffles would be (an in-process look-ahead block of P_Amp's batches); (rule ``sum``,
    integer, no modulus or secure aggregation): every consecutive ``segment`` reports are summed on
    their own, released as (R, expected/segment, width), as that many sums would be (P_Vec's block). ``messages``
    (rule ``shuffle``): each of a report's ``width`` entries is a message of its own (a user's
    split-and-mix shares, :mod:`~privbandit.protocol.primitives.shuffle_sum`): the release is the
    multiset of all n·width entries of the n reports, uniformly permuted together, shape
    (R, n·width, 1), so no entry can be told to share a sender with another.
    """

    id: int
    intermediary: str
    rule: Rule
    expected: int
    width: int = 1
    integer: bool = True
    m: int | None = None
    low: float | None = None
    high: float | None = None
    window: tuple[int, int] | None = None
    threshold: int | None = None
    groups: tuple[int, ...] = ()
    secagg: str | None = None
    decode: tuple[int, int] | None = None
    secagg_degree: int | None = None
    secagg_threshold: int | None = None
    segment: int | None = None
    messages: bool = False

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"round {self.id}: rule {self.rule!r} is not one of {', '.join(RULES)}")
        if self.expected < 1 or self.width < 1:
            raise ValueError(f"round {self.id}: expected={self.expected} and width={self.width} must be ≥ 1")
        if self.m is not None and not self.integer:
            raise ValueError(f"round {self.id}: a modulus needs integer reports")
        if self.groups and sum(self.groups) != self.width:
            raise ValueError(f"round {self.id}: groups {self.groups} do not add up to width {self.width}")
        if self.secagg is not None and (self.rule != "sum" or self.m is None):
            raise ValueError(f"round {self.id}: secure aggregation computes a modular sum")
        if (self.secagg_degree is not None or self.secagg_threshold is not None) and self.secagg is None:
            raise ValueError(f"round {self.id}: a graph degree and threshold belong to a secure-aggregation round")
        if self.secagg_degree is not None:
            k = self.secagg_degree
            if not 1 <= k <= self.expected - 1 or (k < self.expected - 1 and k % 2):
                raise ValueError(f"round {self.id}: secagg_degree {k} must be even in [2, {self.expected - 2}] or "
                                 f"{self.expected - 1} (complete)")
        if self.secagg_threshold is not None:
            k = self.expected - 1 if self.secagg_degree is None else self.secagg_degree
            if not 1 <= self.secagg_threshold <= k + 1:
                raise ValueError(f"round {self.id}: secagg_threshold {self.secagg_threshold} must lie in [1, {k + 1}]")
        if (self.rule == "argmax") != (self.decode is not None) or (self.rule == "argmax" and self.m is None):
            raise ValueError(f"round {self.id}: an argmax reads modular sums in a decode interval, and only it does")
        plain_sum = self.rule == "sum" and self.integer and self.m is None and self.secagg is None
        if self.segment is not None and ((self.rule != "shuffle" and not plain_sum) or self.threshold is not None
                                         or self.segment < 1 or self.expected % self.segment):
            raise ValueError(f"round {self.id}: segment {self.segment} needs a complete shuffle or integer sum "
                             f"(no modulus) whose expected {self.expected} it divides")
        if self.messages and (self.rule != "shuffle" or self.groups or self.segment is not None):
            raise ValueError(f"round {self.id}: messages (each entry a message of its own) is a shuffle's, without "
                             f"groups or segments")

    @property
    def min_reports(self) -> int:
        return self.expected if self.threshold is None else self.threshold


@dataclass(frozen=True)
class Join:
    """``reports`` of the plan's users ``first … first + count − 1`` report into round ``round_id``
    (each of them at most once per plan and intermediary).

    ``users``: None, or the ids (increasing, inside the range, ``reports`` of them) of the only users
    who may report. A secure round's joins name them when its reporters are not a whole range:
    Anytime-Lazy-UCB's array of arm j is filled by the users who pull j, spread over many plans,
    and secure aggregation must run among exactly those users (the others are not dropouts). The
    arms are a public function of the broadcast policy, so naming them tells no one anything new."""

    round_id: int
    first: int
    count: int
    reports: int
    users: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.users is not None:
            u = self.users
            if (len(u) != self.reports or any(b <= a for a, b in zip(u, u[1:]))
                    or (u and (u[0] < self.first or u[-1] >= self.first + self.count))):
                raise ValueError(f"round {self.round_id}: a join's users must be {self.reports} increasing ids in "
                                 f"[{self.first}, {self.first + self.count})")

    def members(self) -> np.ndarray:
        """Who may report: the named users, else the whole range."""
        if self.users is not None:
            return np.asarray(self.users, dtype=np.int64)
        return np.arange(self.first, self.first + self.count, dtype=np.int64)


@dataclass(frozen=True)
class Plan:
    """Analyzer → users (and, for its rounds and joins, → intermediaries). ``body`` is public and
    family-typed (its arrays have the runs axis first)."""

    id: int
    first_user: int
    cohort: int
    body: dict[str, Any] = field(default_factory=dict)
    opens: tuple[Round, ...] = ()
    joins: tuple[Join, ...] = ()


@dataclass(frozen=True)
class Reports:
    """Users → intermediary: ``values[r, i]`` (``width`` entries) is user ``user_ids[i]``'s report
    in run r, for round ``round_id``, sent under plan ``plan_id``."""

    round_id: int
    plan_id: int
    user_ids: np.ndarray
    values: np.ndarray


@dataclass(frozen=True)
class Release:
    """Intermediary → analyzer. ``values``: (R, width) for a sum ((R, expected/segment, width) for a
    segmented one); (R, n, width) for a shuffle or a pass (with ``user_ids``, attributable, for a
    pass only); (R, n·width, 1) for a shuffle of ``messages``."""

    round_id: int
    n_reports: int
    values: np.ndarray
    user_ids: np.ndarray | None = None


@dataclass(frozen=True)
class Truth:
    """Users → observer only: the ground truth of one block of a plan's served users.

    Regret is per run (axis 0): the block's pseudo- and realized-regret totals, and their running
    values at the observer's checkpoints that fall inside the block (``*_at``, shape (R, c)).
    ``extras`` are the family's (true sums, noise sums, attackers…) for its round diagnostics.
    Truth travels per block because a block is the unit a fleet hosts; the observer adds blocks
    up in the order users were served, so any sharding gives the same sums bit for bit.
    """

    plan_id: int
    block: int
    first_user: int
    size: int
    pseudo: np.ndarray
    realized: np.ndarray
    pseudo_at: np.ndarray
    realized_at: np.ndarray
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Record:
    """Analyzer → observer: its diagnostics of one decoded release; ``epsilon`` is the guarantee
    this release gave on its own (None where none is proven)."""

    round_id: int
    n_reports: int
    epsilon: float | None
    body: dict[str, Any] = field(default_factory=dict)
