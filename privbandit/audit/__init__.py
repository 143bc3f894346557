"""``privbandit audit``: measure the privacy a release really gives, from what the analyzer receives.

A ledger states what a proof promises; an audit measures what the implementation delivers. The
split is DP-Auditorium's: a *target* (:mod:`.targets`, built by each family from its own
mechanisms) proposes two neighbouring inputs and samples the release under each; a *tester*
(:mod:`.testers`) turns the two samples into an ε lower bound at a stated δ with confidence 1 − β;
:mod:`.run` compares it with the ledger's claim and writes ``audit.json`` and the plots.
"""

from privbandit.audit.run import audit_target, run_audit, verdict, write_audit
from privbandit.audit.targets import AuditTarget
from privbandit.audit.testers import Bound, clopper_pearson, histogram_test, likelihood_ratio_test

__all__ = ["AuditTarget", "Bound", "audit_target", "clopper_pearson", "histogram_test", "likelihood_ratio_test",
           "run_audit", "verdict", "write_audit"]
