"""An analyzer that serves one user per plan, a block decided before its reports, or, in-process,
a looked-ahead block.

Sequential learners (Hybrid-UCB, the MAB family's UCB-type baselines, FTL and Hedge) decide each
user's arm from everything released before her. Over MQTT a plan therefore serves one user: the
analyzer chooses her arm, she reports into a round of one, the analyzer observes. A learner that
can prove the next users' arms do not depend on the reports still to come (:meth:`decided`: every
report a user may send gives the same arms) serves them in one plan instead, and observes their
release one user at a time, as if each had had a plan of her own; the arms it then chooses must be
the planned ones (``decided-mismatch`` otherwise). That uses nothing the analyzer does not hold
before the plan, so it works over MQTT. In-process the analyzer may look ahead: ``oracle(t0, n)``
gives what each of the next n users would report (what the analyzer receives anyway for the arm
she pulls), so it can decide up to the end of its draw block at once in one compiled loop; the
plan then carries the arms, and the release must bring exactly the reports it looked at
(``speculation-mismatch`` otherwise). Every driver gives the same arms bit for bit, as long as a
user's draws depend on her index alone.

:class:`OneUserPlans` holds that bookkeeping once; a family's analyzer supplies the learner's
steps (:meth:`choose`, :meth:`look_ahead`, :meth:`observe`, and optionally :meth:`decided` and
:meth:`observe_decided`), its round and its privacy event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from privbandit.protocol.privacy import PrivacyEvent
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Round
from privbandit.protocol.spine.family import Spend


def decided_windows(n: int, window: Callable[[int, int], int], first: int = 64, largest: int = 1 << 14) -> int:
    """How many of a block's n users are decided, asked in windows that double from ``first`` users
    (up to ``largest``): ``window(k, m)`` says how many of users k … k + m − 1 (0-based in the block)
    are, in order, given that all before k are; the first window it answers short ends the block.
    A learner's :meth:`OneUserPlans.decided` rule supplies the window; short blocks cost little."""
    k, w = 0, first
    while k < n:
        m = min(w, n - k)
        got = window(k, m)
        k += got
        if got < m:
            break
        w = min(2 * w, largest)
    return k


class OneUserPlans:
    """Plans of one user, or of a looked-ahead block up to the end of a ``block`` of users, one
    plan open at a time. Subclasses call :meth:`start` and define the hooks below."""

    block: int  # users per draw block: a look-ahead never crosses its end
    reports = "reports"  # what a user reports, for the mismatch error ("rewards", "vectors")
    plan_body: dict = {}  # extra fields of every plan's body

    def start(self, horizon: int, oracle: Callable[[int, int], np.ndarray] | None) -> None:
        self.horizon, self.oracle = horizon, oracle
        self.t = 1
        self.plans_made = 0
        self.pending: dict[int, np.ndarray] = {}  # an open plan's arms
        self.expected: dict[int, np.ndarray] = {}  # the reports a looked-ahead plan must bring

    # --- the family's hooks ---------------------------------------------------------------------
    def choose(self, t: int) -> int:
        """User t's arm, from what was released before her."""
        raise NotImplementedError

    def decided(self, t0: int, n: int) -> np.ndarray:
        """The arms of users t0 … (at least one, at most n) that every report the earlier ones may
        send leaves the same. By default user t0's alone."""
        return np.array([self.choose(t0)])

    def observe_decided(self, rnd: Round, release: Release, x: np.ndarray) -> np.ndarray:
        """A decided block's release (more than one user, every one of them in it, each report in
        [0, 1]): the learner takes the reports ``x`` in the users' order; returns the arms it chose."""
        raise NotImplementedError

    def look_ahead(self, t0: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Users t0 … t0 + n − 1 decided at once: their arms and the reports their release must bring."""
        raise NotImplementedError

    def report_round(self, rid: int, n: int) -> Round:
        raise NotImplementedError

    def reported(self, release: Release) -> np.ndarray:
        """The users' reports in a release, as :meth:`look_ahead` predicts them."""
        return release.values[0, :, 0]

    def observe(self, rnd: Round, release: Release, arm: int, x: np.ndarray) -> None:
        """One user's release (not looked ahead): the learner takes her report ``x[0]``."""
        raise NotImplementedError

    def event(self) -> PrivacyEvent:
        """Each user's guarantee, once her release is observed."""
        raise NotImplementedError

    # --- the spine's analyzer ---------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.t > self.horizon

    def plans(self) -> list[Plan]:
        if self.pending or self.done:
            return []
        t0 = self.t
        n = min(self.horizon - t0 + 1, self.block - (t0 - 1) % self.block)  # never past a draw block
        if self.oracle is None:
            arms = self.decided(t0, n)
        else:  # exactly as one user at a time
            arms, self.expected[t0 - 1] = self.look_ahead(t0, n)
        self.pending[t0 - 1] = arms
        self.plans_made += 1
        self.t += arms.size
        # Every user of a plan must report, as the one user of a one-user plan must: the analyzer
        # takes them in order, each as if she had had her own plan (whatever the family's round
        # would otherwise release over).
        rnd = dataclasses.replace(self.report_round(t0 - 1, arms.size), threshold=arms.size)
        return [Plan(t0 - 1, t0 - 1, arms.size, {"kind": "arms", "t0": t0, "arms": arms[None], **self.plan_body},
                     (rnd,), (Join(rnd.id, t0 - 1, arms.size, arms.size),))]

    def on_release(self, rnd: Round, release: Release) -> tuple[dict, Spend]:
        arms = self.pending.get(rnd.id)
        if arms is None:
            raise ProtocolError("unknown-round", f"no open plan {rnd.id}")
        x = self.reported(release)
        if rnd.id in self.expected:
            if not np.array_equal(x, self.expected[rnd.id]):
                raise ProtocolError("speculation-mismatch", f"plan {rnd.id}: the users' {self.reports} are not "
                                                            f"those the analyzer looked ahead at")
            del self.expected[rnd.id]
        elif arms.size == 1:
            self.observe(rnd, release, int(arms[0]), x)
        else:
            # The round asks every user and refuses a report outside [0, 1], which the proof of
            # :meth:`decided` rests on; checked again, as a learner fed one would be past repair.
            if release.n_reports != arms.size:
                raise ProtocolError("bad-report-count", f"plan {rnd.id}: {arms.size} users' {self.reports}, got "
                                                        f"{release.n_reports}")
            if not (np.all(x >= 0.0) and np.all(x <= 1.0)):
                raise ProtocolError("out-of-range", f"plan {rnd.id}: {self.reports} outside [0, 1]")
            if not np.array_equal(self.observe_decided(rnd, release, x), arms):
                raise ProtocolError("decided-mismatch", f"plan {rnd.id}: the users' {self.reports} led to other "
                                                        f"arms than the plan's, which none in [0, 1] should")
        del self.pending[rnd.id]
        # Every user is a release; a block decided at once stands for as many, each with the
        # run's per-user guarantee.
        return {}, Spend(self.event(), releases=arms.size)
