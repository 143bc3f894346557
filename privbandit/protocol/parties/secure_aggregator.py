"""A real secure-aggregation round in place of the ideal modular sum (in-process engine).

The release is the same ``(Σ y_i) mod m`` as :class:`Intermediary`'s, computed by the
Bonawitz et al. protocol of :mod:`privbandit.protocol.secagg`: users mask, the server unmasks.
In-process the collected ``values`` stand for the users' inputs; only :func:`secure_sum`'s user
objects read them. Costs a few milliseconds per user (docs/performance.md), so it suits small
cohorts; the distributed runtime does not route it yet (issue #4).
"""

from __future__ import annotations

from privbandit.protocol.events import Release
from privbandit.protocol.parties.intermediary import Intermediary, ProtocolError
from privbandit.protocol.secagg.driver import secure_sum


class SecureAggregator(Intermediary):
    def __init__(self, plan, mechanism, graph_mode: str = "sparse", rejected=None):
        if plan.params.m is None:
            raise ProtocolError("not-modular", f"{mechanism.key} sends raw rewards: nothing to sum in Z_m")
        super().__init__(plan, mechanism, rejected)
        self.graph_mode = graph_mode

    def release(self) -> Release:
        n = self._require_complete()
        ids = range(self.plan.first_user, self.plan.first_user + self.plan.cohort)
        value = secure_sum(ids, self.values, self.plan.params.m, mode=self.graph_mode, round_id=self.plan.round_id)
        return Release(round_id=self.plan.round_id, n_reports=n, value=value)
