"""A real secure-aggregation round in place of the ideal modular sum (in-process engine).

The release is the same ``(Σ y_i) mod m`` as :class:`Intermediary`'s, computed by the
Bonawitz et al. protocol of :mod:`privbandit.protocol.secagg`: users mask, the server unmasks.
In-process the collected ``values`` stand for the users' inputs; only :func:`secure_sum`'s user
objects read them. Costs a few milliseconds per user (docs/secagg-performance.md), so it suits
small cohorts.

Cohort members whose report never came took part in the key rounds and then dropped out before
sending their masked input, the case that exercises Bonawitz et al.'s recovery (their dangling
pairwise masks are removed with Shamir-reconstructed keys). If too few remain, or a sparse
neighbourhood falls below its threshold, the round aborts and nothing is released.
"""

from __future__ import annotations

import numpy as np

from privbandit.protocol.events import Release
from privbandit.protocol.parties.intermediary import Intermediary, ProtocolError
from privbandit.protocol.secagg.driver import secure_sum
from privbandit.protocol.secagg.errors import SecAggAbort


class SecureAggregator(Intermediary):
    def __init__(self, plan, mechanism, graph_mode: str = "sparse", rejected=None):
        if plan.params.m is None:
            raise ProtocolError("not-modular", f"{mechanism.key} sends raw rewards: nothing to sum in Z_m")
        super().__init__(plan, mechanism, rejected)
        self.graph_mode = graph_mode

    def release(self, partial: bool = False) -> Release:
        n = self._require_enough(partial)
        ids = np.arange(self.plan.first_user, self.plan.first_user + self.plan.cohort)
        try:
            value = secure_sum(ids, self.values, self.plan.params.m, mode=self.graph_mode,
                               round_id=self.plan.round_id, dropped=ids[~self.received])
        except SecAggAbort as exc:
            raise ProtocolError("secagg-abort", f"round {self.plan.round_id}: {exc}") from None
        return Release(round_id=self.plan.round_id, n_reports=n, value=value)
