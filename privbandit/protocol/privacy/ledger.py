"""The ledger: what one run spent, per user, composed from the events of the releases it made.

Every release's event is recorded under a *lane* and a *group*:

- releases in one group of one lane reach the same users: they compose sequentially (pure ε and
  Rényi curves add, (ε, δ) statements add, and :class:`~.events.AdvancedComposition` rounds are
  charged their k-fold advanced-composition bound);
- different groups of one lane reach disjoint users (parallel composition): a user's guarantee in
  the lane is that of the worst group;
- every user takes part in one group of every lane: lanes compose sequentially.

So the distributed-DP MAB family records every round in lane ``"round"`` with its own group (each
user's reward enters one release: the run's guarantee is its worst round, Alg. 1 footnote 4); a
concurrent-shuffle counter records level i's batches in lane ``"level-i"``; persistent users' gradient
steps share their batch's group. The ledger never states more than the composition of what it was
given; its (ε, δ) conversion of Rényi curves is dp-accounting's formula (:func:`rdp_to_dp`).

δ is a claim about a population: a default of 1/(10·N) for the N users a run protects
(:func:`default_delta`), and a warning in the summary whenever δ ≥ 1/N.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from privbandit.protocol.privacy.events import ORDERS, REPORTED_ORDERS, AdvancedComposition, PrivacyEvent

log = logging.getLogger(__name__)


def default_delta(users: int) -> float:
    """δ = 1/(10·N) for N protected users: δ must be small against 1/N, or "(ε, δ)-DP" allows a
    mechanism that publishes one user's data outright with probability δ·N."""
    if users < 1:
        raise ValueError(f"the number of protected users must be ≥ 1 (got {users})")
    return 1.0 / (10.0 * users)


def rdp_to_dp(rdp: np.ndarray, delta: float, orders: np.ndarray = ORDERS) -> float:
    """The smallest ε with (ε, δ)-DP implied by a Rényi curve ε(α) over ``orders``: the minimum over
    the orders α of

        ε(α) + log(1 − 1/α) − log(αδ)/(α − 1)

    (Chowdhury & Zhou 2023, Lemma 10; Canonne, Kamath & Steinke 2020, Proposition 12), or 0 at an
    order where δ ≥ sqrt(1 − e^{−ε(α)}) (total variation from the KL divergence, which ε(α) bounds),
    or 0 where the curve is negative; orders up to 1.01 are not used (the bound is unstable there).
    This is dp-accounting's ``compute_epsilon``, term for term: the terms that depend on α and δ
    alone come from the same ``math`` calls, so the result is the same double
    (``tests/protocol/test_rdp_conversion.py`` holds it to the library over many curves). It is
    written here so that no run imports dp-accounting for it: the library loads scipy.signal and
    scipy.stats, 0.7–0.8 CPU-seconds in every process that converts."""
    if not 0 < delta < 1:
        raise ValueError(f"delta={delta} must lie in (0, 1)")
    rdp = np.asarray(rdp, dtype=np.float64)
    finite = np.isfinite(rdp)
    if not finite.any():
        return math.inf
    alphas, curve = np.asarray(orders, dtype=np.float64)[finite], rdp[finite]
    log_term, delta_term, stable, tv_bound = _conversion_terms(tuple(alphas.tolist()), float(delta))
    eps = np.where(stable, (curve + log_term) - delta_term, math.inf)
    if (curve < 0).any():  # numerical noise from extreme events: dp-accounting warns and takes 0
        log.warning("negative Rényi divergence %.3g at order %g, probably numerical instability of an "
                    "extreme event; ε = 0 at that order", curve.min(), alphas[curve.argmin()])
        eps[curve < 0] = 0.0
    # δ ≥ sqrt(1 − e^{−ε(α)}), i.e. δ² + expm1(−ε(α)) > 0, only where ε(α) is below about δ²; decided
    # with math.expm1, as the library does, for those few orders.
    for i in np.flatnonzero(curve <= tv_bound):
        if delta * delta + math.expm1(-float(curve[i])) > 0:
            eps[i] = 0.0
    return max(0.0, float(eps.min()))


@lru_cache(maxsize=256)
def _conversion_terms(alphas: tuple[float, ...], delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Per order α: log(1 − 1/α) and log(αδ)/(α − 1) (``math``'s, as dp-accounting computes them),
    whether α > 1.01; and a bound above which no ε(α) can meet the total-variation condition."""
    if any(a < 1 for a in alphas):
        raise ValueError(f"Rényi orders must be at least 1 (got {min(alphas)})")
    log_term = np.array([math.log1p(-1 / a) if a > 1.01 else 0.0 for a in alphas])
    delta_term = np.array([math.log(delta * a) / (a - 1) if a > 1.01 else 0.0 for a in alphas])
    stable = np.array([a > 1.01 for a in alphas])
    # δ² + expm1(−r) > 0 ⟺ r < −log1p(−δ²); twice that leaves any rounding far behind.
    tv_bound = -2.0 * math.log1p(-delta * delta)
    for arr in (log_term, delta_term, stable):
        arr.setflags(write=False)
    return log_term, delta_term, stable, tv_bound


@lru_cache(maxsize=4096)
def _curve(event: PrivacyEvent) -> np.ndarray:
    curve = np.asarray(event.rdp(ORDERS), dtype=np.float64)
    curve.setflags(write=False)
    return curve


def _finite_or_none(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


@dataclass
class _Group:
    """Releases that reach the same users: their sequential composition."""

    pure: float = 0.0
    rdp: np.ndarray = field(default_factory=lambda: np.zeros_like(ORDERS))
    rho: float | None = 0.0  # zCDP ρ, None once an event has no CDP statement
    approx_eps: float = 0.0  # basic composition of (ε, δ) statements
    approx_delta: float = 0.0
    releases: int = 0
    # Rounds that compose by advanced composition: how many of each kind, charged only when the
    # group is read (:meth:`folded`), so k rounds cost the k-fold bound, not k times one round's.
    advanced: dict[AdvancedComposition, int] = field(default_factory=dict)

    def add(self, event: PrivacyEvent) -> None:
        self.pure += event.pure_epsilon
        cdp = event.cdp_epsilon
        self.rho = None if self.rho is None or cdp is None else self.rho + 0.5 * cdp**2
        if isinstance(event, AdvancedComposition) and event.status == "proven":
            self.advanced[event] = self.advanced.get(event, 0) + 1
        elif event.approx is not None and event.status == "proven":
            # An (ε, δ) statement without a curve composes by basic composition in approx_*; it
            # adds nothing to the Rényi curve (an infinite curve would void the statement).
            self.approx_eps += event.approx[0]
            self.approx_delta += event.approx[1]
        else:
            self.rdp = self.rdp + _curve(event)
        self.releases += 1

    def folded(self) -> _Group:
        """A copy whose advanced-composition rounds are charged into its (ε, δ) statements (each
        kind's k rounds by their k-fold bound; different kinds by basic composition)."""
        out = _Group(self.pure, self.rdp.copy(), self.rho, self.approx_eps, self.approx_delta, self.releases)
        for event, k in self.advanced.items():
            eps, delta = event.composed(k)
            out.approx_eps += eps
            out.approx_delta += delta
        return out

    def worst(self, other: _Group) -> None:
        """Parallel composition: keep, number by number, the worse of two (folded) groups."""
        self.pure = max(self.pure, other.pure)
        self.rdp = np.maximum(self.rdp, other.rdp)
        self.rho = None if self.rho is None or other.rho is None else max(self.rho, other.rho)
        self.approx_eps = max(self.approx_eps, other.approx_eps)
        self.approx_delta = max(self.approx_delta, other.approx_delta)


@dataclass
class _Lane:
    """One lane: its keyed groups, and the running worst of the releases that are a group of their
    own (most releases: kept as a running maximum, so a run of 10⁶ releases costs no memory)."""

    groups: dict[object, _Group] = field(default_factory=dict)
    single: _Group | None = None


@dataclass
class Ledger:
    """The events of one run, composed per user. ``users`` is N, the population the run protects."""

    trust_model: str
    epsilon_target: float | None
    delta: float
    users: int
    lanes: dict[str, _Lane] = field(default_factory=lambda: defaultdict(_Lane))
    statuses: set = field(default_factory=set)
    bases: set = field(default_factory=set)
    releases: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.delta < 1:
            raise ValueError(f"delta={self.delta} must lie in (0, 1)")

    def record(self, event: PrivacyEvent, lane: str = "round", group: object = None, releases: int = 1) -> None:
        """One release's event; ``group`` None gives it a group of its own (disjoint users).
        ``releases``: how many releases of disjoint users it stands for (all with this event)."""
        lane_ = self.lanes[lane]
        if group is None:
            one = _Group()
            one.add(event)
            one = one.folded()
            if lane_.single is None:
                lane_.single = one
            else:
                lane_.single.worst(one)
        else:
            lane_.groups.setdefault(group, _Group()).add(event)
        self.statuses.add(event.status)
        if getattr(event, "basis", "") or getattr(event, "reason", ""):
            self.bases.add(getattr(event, "basis", "") or getattr(event, "reason", ""))
        self.releases += releases

    def event_epsilon(self, event: PrivacyEvent) -> float | None:
        """One release's own guarantee: its pure ε if finite, else its ε at the ledger's δ."""
        return _event_epsilon(event, self.delta)

    @property
    def guarantee(self) -> str:
        """``proven``, ``none proven`` or ``non-private``: the weakest status of any release."""
        if "non-private" in self.statuses:
            return "non-private"
        if "none proven" in self.statuses:
            return "none proven"
        return "proven"

    def _per_user(self) -> _Group:
        """Parallel composition inside each lane (the worst group), sequential across lanes."""
        total = _Group()
        for lane in self.lanes.values():
            parts = [g.folded() for g in lane.groups.values()] + ([lane.single] if lane.single is not None else [])
            if not parts:
                continue
            worst = _Group(rdp=parts[0].rdp.copy(), pure=parts[0].pure, rho=parts[0].rho,
                           approx_eps=parts[0].approx_eps, approx_delta=parts[0].approx_delta)
            for g in parts[1:]:
                worst.worst(g)
            total.pure += worst.pure
            total.rdp = total.rdp + worst.rdp
            total.rho = None if total.rho is None or worst.rho is None else total.rho + worst.rho
            total.approx_eps += worst.approx_eps
            total.approx_delta += worst.approx_delta
        return total

    def summary(self, delta: float | None = None) -> dict:
        """What the run spent per user. ``delta``: read the composition at another δ than the run's
        (:class:`~.accountant.Accountant`): the curves convert at it, and the theorems' (ε, δ)
        statements, whose δ is fixed, leave it what they do not spend (below it: no ε is proven)."""
        if delta is None:
            delta = self.delta
        elif not 0 < delta < 1:
            raise ValueError(f"delta={delta} must lie in (0, 1)")
        status = self.guarantee
        total = self._per_user()
        proven = status == "proven"
        pure = total.pure if proven else math.inf
        eps_delta = math.inf
        if proven and self.releases == 0:  # the analyzer received nothing: 0-DP, not "∞"
            pure = eps_delta = 0.0
        elif proven:
            # The releases with curves and those with only (ε, δ) statements compose by basic
            # composition: the curve part gets what δ the statements leave.
            rest = delta - total.approx_delta
            if total.approx_delta == 0 and total.approx_eps == 0:
                eps_delta = rdp_to_dp(total.rdp, delta)
            elif not np.any(total.rdp) and rest >= 0:  # (ε, δ) statements only, within δ
                eps_delta = total.approx_eps
            elif rest > 0:  # (an (ε, 0) statement, e.g. k rounds by basic composition, lands here too)
                eps_delta = total.approx_eps + rdp_to_dp(total.rdp, rest)
            eps_delta = min(eps_delta, pure)
        cdp = None if total.rho is None or not proven else math.sqrt(2 * total.rho)
        out = {
            "guarantee": status,
            "trust_model": self.trust_model,
            "epsilon_target": self.epsilon_target,
            "releases": self.releases,
            "epsilon_pure": _finite_or_none(pure),
            "rdp": {str(a): _finite_or_none(float(total.rdp[np.searchsorted(ORDERS, a)]))
                    if proven and not total.approx_delta else None for a in REPORTED_ORDERS},
            "cdp_epsilon": _finite_or_none(cdp),
            "delta": delta,
            "epsilon_at_delta": _finite_or_none(eps_delta),
            "users_protected": self.users,
            "delta_warning": (f"delta = {delta:.3g} is not small against 1/N = {1 / self.users:.3g} "
                              f"for the N = {self.users} users protected") if delta >= 1 / self.users else None,
        }
        if total.approx_delta:
            out["delta_from_theorems"] = total.approx_delta
        if self.bases:
            out["basis"] = sorted(self.bases)
        return out


@lru_cache(maxsize=4096)
def _event_epsilon(event: PrivacyEvent, delta: float) -> float | None:
    if event.status != "proven":
        return None
    pure = event.pure_epsilon
    if math.isfinite(pure):
        return float(pure)
    if event.approx is not None:
        return float(event.approx[0]) if event.approx[1] <= delta else None
    return _finite_or_none(rdp_to_dp(_curve(event), delta))
