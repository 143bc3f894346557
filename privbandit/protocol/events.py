"""The messages of the plan → reports → release loop.

Small immutable values, as h11's events: the analyzer emits :class:`RoundPlan`, users answer with
:class:`Reports`, the intermediary emits a :class:`Release`. Ground truth travels separately, as
:class:`BlockTruth`, to the observer only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privbandit.protocol.mechanisms.base import RoundParams


@dataclass(frozen=True)
class RoundPlan:
    """Analyzer → users: serve ``arm`` to users ``first_user … first_user + cohort − 1``.

    ``collect`` is False for the trailing partial batch: Algorithm 1 exits at T (line 9) before the
    batch is aggregated (line 11), so those users are served but send no report.
    """

    round_id: int
    batch: int
    arm: int
    first_user: int
    cohort: int
    params: RoundParams
    collect: bool = True


@dataclass(frozen=True)
class Reports:
    """Users → intermediary: one record per user (``user_ids[i]`` sent ``values[i]``)."""

    round_id: int
    user_ids: np.ndarray
    values: np.ndarray


@dataclass(frozen=True)
class Release:
    """Intermediary → analyzer: a modular sum (SecAgg), or the reports themselves (local model)."""

    round_id: int
    n_reports: int
    value: int | float | None = None
    reports: np.ndarray | None = None


@dataclass(frozen=True)
class BlockTruth:
    """Users → observer only: what the simulated world knows about one block of a round's cohort.

    Truth travels per block (:data:`~privbandit.protocol.seeding.USER_BLOCK` users) because a
    block is the unit a fleet hosts; the observer adds blocks up in order, so a sharded run and an
    in-process run produce the same sums bit for bit.
    """

    round_id: int
    block: int
    first_user: int
    size: int
    gap: float  # Δ of the served arm: pseudo-regret per user
    realized_regret: float  # Σ (r_t(a*) − r_t(a_t)) over the block
    realized_at_checkpoints: np.ndarray  # cumulative realized regret within the block, per checkpoint inside it
    reward_sum: float  # Σ x, what the release estimates
    noise_sum: int  # Σ η of the users' shares
    attackers: int = 0  # reporting users of the block who are adversaries (protocol/adversaries)
