"""``privbandit audit``: measure the privacy a release really gives, from what the analyzer receives.

A ledger states what a proof promises; an audit measures what the implementation delivers. The
split is DP-Auditorium's: a *target* (:mod:`.targets`, built by each family from its own
mechanisms) proposes two neighbouring inputs and samples the release under each; a *tester*
(:mod:`.testers`) turns the two samples into an ε lower bound at a stated δ with confidence 1 − β;
:mod:`.run` compares it with the ledger's claim and writes ``audit.json`` and the plots.

The package is also the API's function: ``privbandit.audit("experiments/quickstart.toml",
samples=10_000)`` is :func:`privbandit.api.audit` (the name is both, so neither shadows the other).
"""

import sys
import types

from privbandit.audit.run import audit_target, run_audit, verdict, write_audit
from privbandit.audit.targets import AuditTarget
from privbandit.audit.testers import Bound, clopper_pearson, histogram_test, likelihood_ratio_test

__all__ = ["AuditTarget", "Bound", "audit_target", "clopper_pearson", "histogram_test", "likelihood_ratio_test",
           "run_audit", "verdict", "write_audit"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from privbandit.api import audit

        return audit(*args, **kwargs)

    __call__.__doc__ = "privbandit.audit(...): :func:`privbandit.api.audit`."


# `privbandit.audit` is this package once anything imports it (the import system sets the attribute),
# so the API's function is reached through the package itself.
sys.modules[__name__].__class__ = _CallableModule
