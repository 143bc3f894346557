"""Non-private full-information baselines for the experts variant (decision-theoretic online
learning): Follow the Leader and Hedge. Each user sees every action's reward (her vector X(t)), plays
one action, and reports the whole vector; the learner updates on every user.

- **FTL**: user t plays ``argmax_j G_j(t − 1)``, G the sums of all vectors so far (ties to the
  lowest index): Hu, Huang & Mehta §5 name it as what FTNL privatizes.
- **Hedge** (Freund & Schapire 1997; exponential weights): user t plays j with probability
  ∝ exp(η·G_j(t − 1)), η = sqrt(8·ln K / T) (the rate for rewards in [0, 1] with a known horizon,
  Cesa-Bianchi & Lugosi 2006, Thm 2.2); the draw is the inverse CDF at one uniform per round from the
  analyzer's key, drawn in blocks so that it does not depend on how users are grouped into plans.

Both are sequential: user t + 1's action depends on user t's vector. The step is compiled
(:func:`.experts_kernels.run`), so in-process a block of users looked ahead at (the trusted analyzer
receives every vector anyway) is one compiled loop. Over MQTT a plan serves the users whose action
no vector the earlier ones may report can change (:func:`ftl_decided`, :func:`hedge_decided`), and
their release goes through the same loop.
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.spine.one_user import decided_windows

EXPERTS = {"ftl": 0, "hedge": 1}
DRAW_BLOCK = 1 << 16


def _kernels():
    """The compiled steps, loaded on first use: numba's import (0.2 CPU-s, 57 MB) is paid only by a
    run of FTL or Hedge, not by every process that loads the online family."""
    from privbandit.families.private_online_learning import experts_kernels

    return experts_kernels


def ftl_decided(sums: np.ndarray, n: int) -> int:
    """How many of the next n users (at least one) FTL sends to today's leader j whatever vectors
    in [0, 1]^K the earlier ones report: what its analyzer may plan before any of them reports.

    Float addition is non-decreasing in each operand, so after k users j's sum is at least its sum now
    (it adds rewards ≥ 0) and any other arm's at most its sum now plus k ones added one at a time,
    as :func:`.experts_kernels.run` adds them (``numpy.add.accumulate`` is that sequential sum, to
    the bit). User k is decided while j's sum now beats every such bound under
    :func:`.experts_kernels.choose`'s rule (the lowest index wins a tie). No margin is needed: there
    is no rounding to bound, only monotone steps. A bound passes j's sum after about S_j − S_i ones,
    so only that many are computed."""
    j = int(np.argmax(sums))  # the first maximum: choose's leader
    rivals = np.delete(sums, j)
    if rivals.size == 0:
        return max(n, 1)
    if n <= 1:
        return 1
    w = int(min(n, max(0.0, sums[j] - rivals.max()) + 2))
    hi = np.add.accumulate(np.concatenate([rivals[:, None], np.ones((rivals.size, w - 1))], axis=1), axis=1)
    lower = np.arange(rivals.size) < j  # the arms before j win a tie against it
    beaten = np.where(lower[:, None], hi < sums[j], hi <= sums[j]).all(axis=0)
    return w if beaten.all() else int(beaten.argmin())


HEDGE_MARGIN = 1e-9  # in probability: far above the roundings of choose and of the bounds (below)
FIRST_HEDGE_WINDOW = 64


def hedge_decided(sums: np.ndarray, eta: float, uniforms: np.ndarray) -> np.ndarray:
    """The actions of the next users (at least one, at most ``len(uniforms)``) that Hedge draws
    whatever vectors in [0, 1]^K the earlier ones report: what its analyzer may plan before any of
    them reports. ``uniforms``: their draws, in order.

    Every user's vector adds to every sum, so before user k of the block sum i lies in [S_i, S_i + k]
    (the upper end as :func:`.experts_kernels.run` would add k ones, to the bit), and in exact
    arithmetic the draw picks j when ``C_{j−1} ≤ u < C_j``, C the cumulative weights exp(η·G) over
    their total. C_j is at least ``Σ_{i≤j} lo_i / (Σ_{i≤j} lo_i + Σ_{i>j} hi_i)`` and at most the
    same with lo and hi swapped; user k is decided with action j when u clears both ends by
    :data:`HEDGE_MARGIN`. That margin covers the roundings: :func:`.experts_kernels.choose`'s
    weights are exp of a difference to the leader (each within an ulp or two of exact, the leader's
    exactly 1, so the total is ≥ 1) summed over K ≤ 1000 terms, as are the bounds here, each a
    relative error below (2K + 4)·2⁻⁵² ≈ 5·10⁻¹³ of a quantity in [0, 1]. The block ends at its
    first undecided user; the first user alone is the learner's own draw (nothing pending)."""
    arms = [np.array([int(_kernels().choose(1, sums, eta, uniforms[0]))])]
    top = float(sums.max())
    lo = np.exp(eta * (sums - top))[:, None]  # (K, 1): the weights if every pending vector is 0

    def window(k: int, m: int) -> int:  # users 1 + k … of the block: 1 + k … pending vectors
        p = 1 + k
        ones = np.ones((sums.size, m + p))
        ones[:, 0] = sums
        hi = np.exp(eta * (np.add.accumulate(ones, axis=1)[:, p:] - top))  # (K, m)
        lo_cum, hi_cum = np.cumsum(lo, axis=0), np.cumsum(hi, axis=0)
        c_low = lo_cum / (lo_cum + _tail_sums(hi))  # C_j at least
        c_high = hi_cum / (hi_cum + _tail_sums(lo))  # C_j at most
        u = uniforms[p:p + m]
        above = c_low > (u + HEDGE_MARGIN)[None, :]
        j = np.where(above.any(axis=0), above.argmax(axis=0), sums.size)  # the first j with C_j surely above u
        below = np.where(j > 0, c_high[np.clip(j - 1, 0, sums.size - 1), np.arange(m)], 0.0)
        ok = (j < sums.size) & (below <= u - HEDGE_MARGIN)
        run = m if ok.all() else int(ok.argmin())
        arms.append(j[:run])
        return run

    decided_windows(len(uniforms) - 1, window, FIRST_HEDGE_WINDOW)
    return np.concatenate(arms).astype(np.int64)


def _tail_sums(w: np.ndarray) -> np.ndarray:
    """Σ_{i>j} w_i for every row j of ``w`` (K, m), w ≥ 0, added from the last row up: sums of
    positive terms only, so each is within (K − 1)·2⁻⁵³ of exact in relative terms. The total less
    the prefix would not be: the weights span many orders of magnitude, and the difference of two
    large sums loses the small tail to the larger one's rounding (sums (121, 0) at η ≈ 0.3 after 108
    pending vectors: a tail of 0.0211 came out 0.0156, and a draw Hedge sends to action 1 was
    planned for action 0)."""
    inclusive = np.cumsum(w[::-1], axis=0)[::-1]
    return np.concatenate([inclusive[1:], np.zeros((1, w.shape[1]))], axis=0)


class ExpertsLearner:
    """One run's FTL or Hedge: the sums G and the per-round uniforms (Hedge)."""

    def __init__(self, name: str, n_actions: int, horizon: int, key: int):
        if name not in EXPERTS:
            raise ValueError(f"unknown experts baseline {name!r}; choose from {', '.join(EXPERTS)}")
        self.kind, self.key = EXPERTS[name], key
        self.eta = math.sqrt(8 * math.log(n_actions) / horizon) if n_actions > 1 else 0.0
        self.sums = np.zeros(n_actions)
        self._block, self._u = -1, None

    def uniforms(self, t0: int, n: int) -> np.ndarray:
        out, i = np.zeros(n), 0
        if self.kind == 0:
            return out
        while i < n:
            b, off = divmod(t0 + i - 1, DRAW_BLOCK)
            if b != self._block:
                self._block, self._u = b, stream(self.key, "draws", b).random(DRAW_BLOCK)
            take = min(n - i, DRAW_BLOCK - off)
            out[i:i + take] = self._u[off:off + take]
            i += take
        return out

    def choose(self, t: int) -> int:
        return int(_kernels().choose(self.kind, self.sums, self.eta, self.uniforms(t, 1)[0]))

    def observe(self, vector: np.ndarray) -> None:
        arms = np.empty(1, dtype=np.int64)  # the same compiled additions as a block's
        _kernels().run(self.kind, np.ascontiguousarray(vector, dtype=np.float64).reshape(1, -1), self.sums,
                       self.eta, np.zeros(1), arms)

    def run(self, t0: int, vectors: np.ndarray) -> np.ndarray:
        arms = np.empty(vectors.shape[0], dtype=np.int64)
        _kernels().run(self.kind, np.ascontiguousarray(vectors, dtype=np.float64), self.sums, self.eta,
                       self.uniforms(t0, vectors.shape[0]), arms)
        return arms
