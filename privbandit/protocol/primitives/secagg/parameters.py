"""SecAgg+ graph degree k and Shamir threshold t from a threat model. Bell et al. 2020 (CCS,
*Secure Single-Server Aggregation with (Poly)Logarithmic Overhead*) choose (k, t) numerically
for a statistical security and a failure probability, and Google's federated-compute ``secagg``
does so for its Harary graphs; this is an independent derivation, its bounds stated below.

Threat model (:class:`ThreatModel`): a semi-honest (curious) server colluding with at most
``A = ⌊γn⌋`` corrupt users (γ = ``corrupt_fraction``), and at most ``D = ⌊δn⌋`` users dropping out
(δ = ``dropout_rate``); the round's graph is a random Harary graph H(n, k) whose relabelling is
independent of who is corrupt and who drops out, so both sets sit at uniformly random positions.
Each user u Shamir-shares ``b_u`` and ``s_u^SK`` t-of-(k + 1) among its holders N(u) ∪ {u}
(:mod:`.graph`).

Bad events and the bound used for each (every term is exact for one user or one pair of gaps; the
sums over users or gap pairs are union bounds):

*Insecurity* (the adversary learns more than the sum), ≤ 2^−``security_bits``:

- S1, some honest user u has ≥ t corrupt neighbours: they pool t shares of *both* ``b_u`` and
  ``s_u^SK`` and unmask y_u. Per user the count is hypergeometric, ``X ~ Hyp(n − 1, A, k)``;
  bound ``(n − A)·P[X ≥ t]``.
- S2, the graph of honest survivors is disconnected: the server then sums masked inputs over one
  component and learns a partial sum. Removing nodes from H(n, k) disconnects it only if the
  removed positions contain two separate runs of k/2 consecutive positions (an edge spans at most
  k/2 positions, so one such run cuts the ring once, and a ring cut once is still a path). There
  are at most ``n(n − k − 1)/2`` such pairs of runs, and each lies inside the ``B = A + D``
  removed positions with probability ``C(n − k, B − k)/C(n, B)``.

*Failure* (an honest round aborts, nothing released), ≤ 2^−``failure_bits``:

- F1, a survivor with fewer than t live holders (``1 + k − X < t``, ``X ~ Hyp(n − 1, D, k)``
  dropped neighbours), or a dropped user with fewer than t surviving neighbours to rebuild its
  ``s^SK`` (``k − X′ < t``, ``X′ ~ Hyp(n − 1, D − 1, k)``): bound
  ``(n − D)·P[X ≥ k + 2 − t] + D·P[X′ ≥ k + 1 − t]``;
- F2, the survivors' graph is disconnected (the protocol refuses to unmask): S2's bound with
  ``B = D``.

:func:`derive` returns the smallest even k < n − 1 (then the complete graph, k = n − 1) for which
some t meets both targets, with the smallest such t, and never t < 2 (so no single holder ever
holds another user's secret outright). The complete graph makes every count deterministic, so
it meets any target iff ``A < t ≤ n − D`` for its t; a model that even it cannot meet is refused
with :class:`ParameterError`, which names the field and the limit.

Probabilities are computed in log space from exact hypergeometric masses (``gammaln``), not from
normal or Chernoff approximations; the comparison leaves a relative slack of 10⁻⁹ on the safe
side for rounding. ``tests/protocol/secagg/test_parameters.py`` checks the bounds against Monte
Carlo estimates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# ⌊γn⌋ and ⌊δn⌋ computed from floats: a hair of slack so that 0.1·30 = 3.0000000000000004 and
# 0.7·10 both count the users the simulation drops (⌊q·size⌋ of spine/parties.py), or more.
_COUNT_SLACK = 1e-9
_LOG_SLACK = 1e-9  # relative slack on the log-probability comparison, towards refusing
MIN_THRESHOLD = 2


class ParameterError(ValueError):
    """No (k, t) meets the threat model: the message names the field and the limit."""


@dataclass(frozen=True)
class ThreatModel:
    """What the graph must withstand: the fractions of corrupt users and of dropouts, and the
    targets ``P[insecure] ≤ 2^−security_bits``, ``P[abort] ≤ 2^−failure_bits``.

    ``corrupt_fraction`` defaults to 0.05, the setting of Bell et al.'s headline result (5 %
    corrupt clients at n = 10⁴) and of this project's simulated colluders; the targets default
    to fcp's 2⁻⁴⁰ and 2⁻²⁰."""

    corrupt_fraction: float = 0.05
    dropout_rate: float = 0.0
    security_bits: float = 40.0
    failure_bits: float = 20.0

    def __post_init__(self):
        for name, lo, hi in (("corrupt_fraction", 0.0, 1.0), ("dropout_rate", 0.0, 1.0)):
            v = getattr(self, name)
            if not lo <= v < hi:
                raise ParameterError(f"{name} = {v!r} must lie in [{lo:g}, {hi:g})")
        for name in ("security_bits", "failure_bits"):
            v = getattr(self, name)
            if not 1 <= v <= 128:
                raise ParameterError(f"{name} = {v!r} must lie in [1, 128]")

    def corrupt(self, n: int) -> int:
        return math.floor(self.corrupt_fraction * n + _COUNT_SLACK)

    def dropouts(self, n: int) -> int:
        return math.floor(self.dropout_rate * n + _COUNT_SLACK)


@dataclass(frozen=True)
class GraphParameters:
    """The graph of one round: n users, degree k (k = n − 1: complete), threshold t, and the
    bounds (log₂) it achieves on the insecurity and failure probabilities."""

    n: int
    k: int
    t: int
    log2_insecurity: float
    log2_failure: float

    @property
    def complete(self) -> bool:
        return self.k >= self.n - 1

    def describe(self) -> str:
        def p(v):
            return "0" if v == -math.inf else f"2^{v:.1f}"
        return f"n = {self.n}: k = {self.k}, t = {self.t} (P[insecure] ≤ {p(self.log2_insecurity)}, P[abort] ≤ {p(self.log2_failure)})"


def log_hypergeom_tails(population: int, successes: int, draws: int) -> np.ndarray:
    """``L[x] = ln P[X ≥ x]`` for x = 0 … draws + 1, ``X ~ Hyp(population, successes, draws)``
    (draws without replacement), from the exact masses."""
    N, K, d = population, successes, draws
    if not (0 <= K <= N and 0 <= d <= N):
        raise ValueError(f"hypergeometric({N}, {K}, {d}) is undefined")
    x = np.arange(d + 1)
    ok = (x <= K) & (d - x <= N - K)
    xs = x[ok]
    logpmf = np.full(d + 1, -np.inf)

    from scipy.special import gammaln  # here: importing scipy costs every party start-up time

    def lbinom(a, b):
        return gammaln(a + 1) - gammaln(b + 1) - gammaln(a - b + 1)

    logpmf[ok] = lbinom(K, xs) + lbinom(N - K, d - xs) - lbinom(N, d)
    tails = np.logaddexp.accumulate(logpmf[::-1])[::-1]
    return np.concatenate([tails, [-np.inf]])


def log_disconnect_bound(n: int, k: int, removed: int) -> float:
    """ln of the bound on P[H(n, k) minus ``removed`` random nodes is disconnected] (S2/F2 above)."""
    if k >= n - 1 or removed < k:
        return -math.inf  # a complete graph never splits; fewer than k removed cannot cover two runs
    from scipy.special import gammaln

    pairs = math.log(n) + math.log(n - k - 1) - math.log(2)
    # C(n − k, B − k)/C(n, B) = B!(n − k)! / (n!(B − k)!)
    return pairs + float(gammaln(removed + 1) + gammaln(n - k + 1) - gammaln(n + 1) - gammaln(removed - k + 1))


def _logadd(*terms: float) -> float:
    return float(np.logaddexp.reduce(np.asarray(terms, dtype=float)))


def _log_mul(count: int, log_p: float) -> float:
    return -math.inf if count == 0 or log_p == -math.inf else math.log(count) + log_p


def bounds(n: int, k: int, t: int, threat: ThreatModel) -> tuple[float, float]:
    """(log₂ insecurity bound, log₂ failure bound) of the graph (n, k, t) under ``threat``."""
    if not (2 <= n and 1 <= k <= n - 1 and 1 <= t <= k + 1):
        raise ValueError(f"no such graph: n = {n}, k = {k}, t = {t}")
    a, d = threat.corrupt(n), threat.dropouts(n)
    corrupt_tail = log_hypergeom_tails(n - 1, min(a, n - 1), k)
    s1 = _log_mul(n - a, corrupt_tail[t])
    s2 = log_disconnect_bound(n, k, min(n, a + d))
    dropped_tail = log_hypergeom_tails(n - 1, min(d, n - 1), k)
    f1 = _log_mul(n - d, dropped_tail[k + 2 - t])
    if d > 0:
        f1 = _logadd(f1, _log_mul(d, log_hypergeom_tails(n - 1, d - 1, k)[k + 1 - t]))
    f2 = log_disconnect_bound(n, k, d)
    return _logadd(s1, s2) / math.log(2), _logadd(f1, f2) / math.log(2)


def _meets(log2_p: float, bits: float) -> bool:
    return log2_p == -math.inf or log2_p <= -bits * (1 + _LOG_SLACK)


def _smallest_threshold(n: int, k: int, threat: ThreatModel) -> int | None:
    """The smallest t ≥ 2 whose S1 + S2 bound meets the security target, or None."""
    a, d = threat.corrupt(n), threat.dropouts(n)
    s2 = log_disconnect_bound(n, k, min(n, a + d))
    if not _meets(s2 / math.log(2), threat.security_bits):
        return None
    tail = log_hypergeom_tails(n - 1, min(a, n - 1), k)
    with np.errstate(divide="ignore"):
        s1 = (np.log(n - a) + tail[1:k + 2]) if n > a else np.full(k + 1, -np.inf)  # t = 1 … k + 1
    total = np.logaddexp(s1, s2) / math.log(2)
    ok = (total == -np.inf) | (total <= -threat.security_bits * (1 + _LOG_SLACK))
    ok[: MIN_THRESHOLD - 1] = False
    hits = np.flatnonzero(ok)
    return int(hits[0]) + 1 if hits.size else None


def check(n: int, k: int, t: int, threat: ThreatModel) -> GraphParameters:
    """The given graph's bounds; :class:`ParameterError` if it misses a target."""
    sec, fail = bounds(n, k, t, threat)
    if not _meets(sec, threat.security_bits):
        raise ParameterError(f"a {'complete' if k >= n - 1 else f'degree-{k}'} graph of n = {n} users with threshold "
                             f"t = {t} is insecure beyond security_bits = {threat.security_bits:g} "
                             f"(bound 2^{sec:.1f}) at corrupt_fraction = {threat.corrupt_fraction:g}: "
                             f"t must exceed the {threat.corrupt(n)} corrupt users")
    if not _meets(fail, threat.failure_bits):
        raise ParameterError(f"a {'complete' if k >= n - 1 else f'degree-{k}'} graph of n = {n} users with threshold "
                             f"t = {t} aborts beyond failure_bits = {threat.failure_bits:g} (bound 2^{fail:.1f}) "
                             f"at dropout_rate = {threat.dropout_rate:g}: t must be at most the "
                             f"{n - threat.dropouts(n)} survivors")
    return GraphParameters(n, k, t, sec, fail)


@lru_cache(maxsize=4096)
def derive(n: int, threat: ThreatModel) -> GraphParameters:
    """The smallest (k, t) meeting ``threat`` for a round of n users (module docstring)."""
    if n < 2:
        raise ParameterError(f"a secure-aggregation round needs at least 2 users, got n = {n}")
    for k in range(2, n - 1, 2):  # H(n, k) is k-regular for even k
        t = _smallest_threshold(n, k, threat)
        if t is None:
            continue
        sec, fail = bounds(n, k, t, threat)
        if _meets(fail, threat.failure_bits):
            return GraphParameters(n, k, t, sec, fail)
    a, d = threat.corrupt(n), threat.dropouts(n)
    t = max(MIN_THRESHOLD, a + 1)
    # Complete graph: t > A corrupt users, and t ≤ n − D holders left to a survivor and to a dropped user.
    if t > n - d:
        limit = _dropout_limit(n, t)
        raise ParameterError(
            f"no graph meets the threat model for a round of n = {n} users: even the complete graph needs "
            f"t ≥ {t} (> ⌊corrupt_fraction·n⌋ = {a}, and ≥ {MIN_THRESHOLD}) but keeps only n − ⌊dropout_rate·n⌋ = "
            f"{n - d} live holders; with corrupt_fraction = {threat.corrupt_fraction:g}, dropout_rate must be "
            f"{limit}, or corrupt_fraction lower")
    return check(n, n - 1, t, threat)


def _dropout_limit(n: int, t: int) -> str:
    room = n - t  # dropouts the complete graph can absorb with threshold t
    if room < 0:
        return f"impossible at n = {n} (t = {t} > n)"
    return f"< {(room + 1) / n:g} (at most {room} of {n} users)"


def check_complete(n: int, t: int, threat: ThreatModel) -> GraphParameters:
    """The complete graph's bounds with the threshold t it uses (``secagg_graph = "complete"``)."""
    return check(n, n - 1, t, threat)


def graph_for(mode: str, n: int, threat: ThreatModel) -> GraphParameters:
    """A round's (k, t) in ``mode``: sparse, :func:`derive`; complete, ``t = ⌊2n/3⌋ + 1`` checked
    against ``threat`` (:func:`check_complete`)."""
    if mode == "sparse":
        return derive(n, threat)
    if mode == "complete":
        return check_complete(n, min(n, (2 * n) // 3 + 1), threat)
    raise ValueError(f"unknown graph mode {mode!r}")
