"""The ledger as an accountant object, in the manner of Opacus's ``get_epsilon(delta)``:
``spent()`` says what the analyzer has received so far (ε, δ, the trust model, the mechanism and
the proofs the figure rests on) and ``epsilon(delta)`` reads the same composition at another δ.

It states no more than the :class:`~.ledger.Ledger` composed: a run's Rényi curves convert at the
asked δ (dp-accounting's conversion, :func:`~.ledger.rdp_to_dp`); the (ε, δ) statements of theorems
and of the exact count accountant (PLD, :mod:`.counts`) hold at the δ they were computed for, so a
smaller δ is refused rather than guessed; a release no proof covers ("none proven") makes every
reading a refusal that names why.

A live ledger (a :class:`~privbandit.policy.Policy`'s) is read exactly. A finished run's summary
(``Results.accountant``) keeps its ε at its own δ, the pure ε and the Rényi curve at
:data:`~.events.REPORTED_ORDERS` only: at another δ it converts that sparser curve, a valid bound
that may be looser than the live ledger's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privbandit.protocol.privacy.ledger import Ledger, rdp_to_dp

CONVERSION = ("Rényi curve → (ε, δ): Canonne, Kamath & Steinke 2020, Prop. 12 (the paper's Lemma 10; "
              "dp-accounting's compute_epsilon)")
PURE = "pure ε: basic composition of ε-DP releases (and parallel composition over disjoint users)"
STATEMENTS = "(ε, δ) statements of the theorems cited in basis, by basic composition"


class NoProof(ValueError):
    """No proof covers the ε asked for: the message says which release or which δ."""


@dataclass
class Accountant:
    """What one run has spent, per user. ``source``: the run's live :class:`~.ledger.Ledger`, or its
    summary (a dict as ``summary.json``'s ``privacy`` holds). ``mechanism``: one line naming the
    algorithm and its mechanism (the family's ``algorithm_lines``)."""

    source: Ledger | dict
    mechanism: str = ""
    label: str = ""
    _cache: dict = field(default_factory=dict, repr=False)

    def _summary(self, delta: float | None = None) -> dict:
        if isinstance(self.source, Ledger):
            return self.source.summary(delta)
        return dict(self.source)

    def spent(self) -> dict:
        """The ledger's summary at the run's δ (``epsilon_at_delta``, ``epsilon_pure``, ``rdp``,
        ``guarantee``, ``trust_model``, ``releases``…), with ``mechanism`` and ``proofs``: what the
        figures rest on."""
        s = self._summary()
        return {**s, "algorithm": self.label, "mechanism": self.mechanism, "proofs": proofs(s)}

    @property
    def delta(self) -> float:
        """The run's own δ (1/(10·N) unless the experiment set one)."""
        return float(self._summary()["delta"])

    def epsilon(self, delta: float) -> float:
        """The smallest ε the ledger proves at ``delta`` for what was released so far. ``delta`` = 0:
        the pure ε, where every release has one. Raises :class:`NoProof` where no proof covers it (a
        release with none proven, raw data, a δ below what the theorems' statements spend, δ = 0 for
        a guarantee that holds only at δ > 0), and ValueError for a δ outside [0, 1)."""
        if isinstance(delta, bool) or not isinstance(delta, (int, float, np.floating)) or not 0 <= delta < 1:
            raise ValueError(f"delta={delta!r}: must be a number in [0, 1)")
        delta = float(delta)
        s = self._summary()
        if s["guarantee"] == "none proven":
            raise NoProof(f"none proven: {'; '.join(s.get('basis') or ['a release no proof covers'])}")
        if s["guarantee"] == "non-private":
            raise NoProof(f"non-private: {self.label or 'this algorithm'} releases users' data without noise")
        if s["releases"] == 0:
            return 0.0  # the analyzer received nothing
        pure = s["epsilon_pure"]
        if delta == 0:
            if pure is None:
                raise NoProof(f"δ = 0: no pure ε is proven for {self.label or 'these releases'} (its guarantee "
                              f"holds at δ > 0 only: {'; '.join(proofs(s))})")
            return float(pure)
        if isinstance(self.source, Ledger):
            eps = self._summary(delta)["epsilon_at_delta"]
        else:
            eps = self._from_summary(s, delta)
        if eps is None:
            spent_delta = s.get("delta_from_theorems")
            why = (f"the theorems' (ε, δ) statements alone spend δ = {spent_delta:.3g}" if spent_delta
                   else "the composition gives no finite ε there")
            raise NoProof(f"δ = {delta:.3g}: no ε is proven ({why}; the run's δ is {s['delta']:.3g})")
        return float(eps)

    def _from_summary(self, s: dict, delta: float) -> float | None:
        """A finished run's ε at δ from its summary: the stated ε at its own δ holds at any larger δ;
        the reported orders' curve converts at any δ; a pure ε holds everywhere. The least of them."""
        found = []
        if s["epsilon_pure"] is not None:
            found.append(s["epsilon_pure"])
        if s["epsilon_at_delta"] is not None and delta >= s["delta"]:
            found.append(s["epsilon_at_delta"])
        rdp = s.get("rdp") or {}
        if not s.get("delta_from_theorems") and rdp and all(v is not None for v in rdp.values()):
            orders = np.array([float(a) for a in rdp], dtype=np.float64)
            curve = np.array([rdp[a] for a in rdp], dtype=np.float64)
            eps = rdp_to_dp(curve, delta, orders)
            if math.isfinite(eps):
                found.append(eps)
        return min(found) if found else None


def proofs(summary: dict) -> list[str]:
    """What a ledger summary's figures rest on: the composition used and the theorems cited."""
    if summary["guarantee"] != "proven":
        return [f"{summary['guarantee']}: {b}" for b in summary.get("basis", [])] or [summary["guarantee"]]
    out = []
    if summary["epsilon_pure"] is not None:
        out.append(PURE)
    if any(v for v in (summary.get("rdp") or {}).values()):
        out.append(CONVERSION)
    if summary.get("delta_from_theorems"):
        out.append(STATEMENTS)
    return out + list(summary.get("basis", []))
