"""The standard sequential baselines of private multi-armed bandits: one decision per user.

Every algorithm here is an index policy: each user t pulls ``argmax_j I_j(t)`` (ties to the lowest
index), after one initial pull of every arm (users 1 … K pull arms 0 … K − 1), and the analyzer
updates one arm's state from that user's report. What differs is the index and what the analyzer
keeps of an arm's rewards:

| name            | paper                                  | trust   | arm statistic                     | privacy          |
|-----------------|----------------------------------------|---------|-----------------------------------|------------------|
| ``ucb1``        | Auer, Cesa-Bianchi & Fischer 2002      | none    | the exact sum                     | non-private      |
| ``thompson``    | Agrawal & Goyal 2013 (Gaussian priors) | none    | the exact sum                     | non-private      |
| ``mt-ucb``      | Mishra & Thakurta, UAI 2015            | central | a binary-tree counter per arm     | ε-DP             |
| ``dp-ucb-bound``| Tossou & Dimitrakakis, AAAI 2016       | central | the hybrid counter per arm        | ε-DP             |
| ``dp-ucb``      | Tossou & Dimitrakakis, AAAI 2016       | central | the hybrid counter per arm        | ε-DP             |
| ``ldp-ucb``     | Ren et al. 2020 (LDP-UCB-L)            | local   | the sum of the users' noisy reports | ε-LDP          |

Indices (n = the arm's pulls, ℓ = ln(2t⁴): the confidence t⁻⁴ of a two-sided tail):

- UCB1 [P]: ``µ̂ + sqrt(2 ln t/n)``.
- Thompson sampling [P] (Agrawal & Goyal's Gaussian-prior version for rewards in [0, 1]): a draw
  ``θ_j ∼ N(µ̂_j, 1/(n_j + 1))`` per arm; the standard normals come from the analyzer's key.
- Private UCB of Mishra & Thakurta [R]: the arm's rewards are the leaves of a binary-tree counter
  (Chan, Shi & Song 2011; Dwork et al. 2010) with L = ⌊log₂ T⌋ + 1 levels, each released node
  carrying ``Lap(L/ε)``; a leaf enters at most L released nodes, so each arm's stream, and by
  parallel composition the run, is ε-DP. Index ``µ̃ + sqrt(2 ln t/n) + B/n``, B the tree noise's
  tail bound at t⁻⁴ (:func:`laplace_sum_bound`). The paper's own text was not available to this
  project: its index is stated as "the UCB index plus the counter's error bound", which is what is
  built; its constants are ours.
- DP-UCB-Bound of Tossou & Dimitrakakis [R]: the hybrid counter of Chan et al. (the logarithmic
  mechanism on the arm's pulls 2^r … 2^{r+1} − 1 as one block, ``Lap(2/ε)`` per block, plus a binary
  tree inside the open block, ``Lap(2(r+1)/ε)`` per node: ε/2 + ε/2) and the index
  ``µ̃ + sqrt(2 ln t/n) + B/n``, B the hybrid noise's tail bound at t⁻⁴. Not the paper's text either
  (unavailable); its DP-UCB-INT (the interval mechanism, (ε, δ)) is not built.
- DP-UCB of Tossou & Dimitrakakis [R]: the same hybrid counter per arm, and UCB1's index on the
  noisy mean, ``µ̃ + sqrt(2 ln t/n)``, with no term for the counter's noise: the noise is zero-mean
  and the paper's variant drops DP-UCB-Bound's bound B/n. The paper's text was not available (the
  `search` tool's corpora hold its abstract and first page); the index is the one two independent
  public implementations of the paper's DP-UCB use, and Hu et al. 2021 (App. E.1,
  /work/shared/papers/private-online-learning.txt) confirm only that both variants run the hybrid
  mechanism in UCB. Privacy is the counter's alone (the index post-processes its releases), so
  the ledger's ε is DP-UCB-Bound's: ε/2 for the blocks plus ε/2 for the tree (:data:`BASIS`).
- LDP-UCB-L of Ren et al. [R]: each user reports ``⌊x⌉_γ + γ·Lap_Z((1 + γ)/(γε))``, the exact grid
  Laplace of sensitivity 1 (:func:`~privbandit.protocol.primitives.noise.grid_laplace.grid_laplace`,
  ε-DP alone); the analyzer's index is ``µ̃ + max{sqrt(2ν²ℓ/n), 2√2·bℓ/n}`` with ν² = 1/4 + 4b² and
  b = (1 + γ)/ε: rewards in [0, 1] are ¼-sub-Gaussian and Laplace(b) is (4b², √2b)-sub-exponential
  (:class:`~.mechanisms.LocalDiscreteLaplace`'s argument), so the noisy mean's Bernstein tail gives
  that width [I].

Every private counter's noise is on a grid: a node or block sum v of Laplace scale b is released as
``(⌊v/g⌉ + L)·g`` with unit steps ``L ∼ Lap_Z(2²⁰)`` and ``g = grid_step(b)``, (1/b)-DP with the
ideal Lap_Z (:mod:`~privbandit.protocol.primitives.noise.grid_laplace`), as Hybrid-UCB's are; numpy's
sampler adds a δ bounded in :mod:`~privbandit.protocol.primitives.noise.sampler_bounds`. The unit steps are
drawn per *round* from the analyzer's key in blocks, before anyone knows which arm a round pulls, so
deciding one user per plan (over MQTT) and a block of users at once (in-process, looking ahead at
the rewards the trusted analyzer receives anyway) give the same numbers. The state lives in numpy
arrays and each step is compiled (:func:`.sequential_kernels.choose`,
:func:`.sequential_kernels.observe`), so a block of users is one compiled loop; the MQTT path calls
the same two functions one user at a time, or, for the users :meth:`SequentialLearner.decided`
plans at once, the same loop over their release.
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.protocol.primitives.noise.grid_laplace import LAPLACE_GRID, sample_grid_steps
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.spine.one_user import decided_windows

KINDS = {"ucb1": 0, "thompson": 1, "mt-ucb": 2, "dp-ucb-bound": 3, "ldp-ucb": 4, "dp-ucb": 5}
TRUST = {"ucb1": "none", "thompson": "none", "mt-ucb": "central", "dp-ucb-bound": "central", "ldp-ucb": "local",
         "dp-ucb": "central"}
HYBRID = (3, 5)  # the kinds that keep the hybrid counter per arm
_HYBRID_BASIS = ("the hybrid counter of Chan, Shi & Song 2011 per arm (Tossou & Dimitrakakis 2016): each reward is "
                 "in one block of the logarithmic mechanism, Lap(2/ε), and in at most r + 1 nodes of the open "
                 "block's tree, Lap(2(r + 1)/ε): ε/2 + ε/2; arms hold disjoint users (parallel composition) and "
                 "the index post-processes the releases")
# What each private baseline's ledger names as its proof (every one pure ε-DP per user).
BASIS = {
    "mt-ucb": "a binary-tree counter per arm (Mishra & Thakurta 2015; Chan, Shi & Song 2011): each reward is in "
              "at most L = ⌊log₂ T⌋ + 1 released nodes, Lap(L/ε) each; arms hold disjoint users (parallel "
              "composition)",
    "dp-ucb-bound": _HYBRID_BASIS,
    "dp-ucb": _HYBRID_BASIS,
    "ldp-ucb": "each user's report carries γ·Lap_Z((1 + γ)/(γε)), the exact grid Laplace at sensitivity 1 (Ren et "
               "al. 2020, LDP-UCB-L): ε-LDP, so ε-DP for whatever the analyzer computes from it",
}
LEVELS = 64
NOISE_BLOCK = 1 << 16  # the analyzer's per-round draws come this many rounds at a time


def laplace_sum_bound(scales_squared: float, largest: float, tail: float) -> float:
    """A (1 − e^{−tail}·2)-probability bound on |Σ Lap(b_i)|: Chan, Shi & Song 2011, Lemma 2.8
    (P[|Y| > λ] ≤ exp(−λ²/(8ν²)) for ν² ≥ Σ b_i², 0 < λ < 2√2ν²/max b_i), at ν = max{√Σb², b_max√tail}
    and λ = ν·sqrt(8·tail). (The same formula, compiled, is
    :func:`~.sequential_kernels.noise_bound`.)"""
    return _kernels().noise_bound(scales_squared, largest, tail)


def _kernels():
    """The compiled steps, loaded on first use: numba's import (0.2 CPU-s, 57 MB) is paid only by a
    run of a sequential baseline, not by every process that loads the MAB family."""
    from privbandit.families.distributed_dp_mab import sequential_kernels

    return sequential_kernels


class SequentialLearner:
    """One run's index policy (module docstring): the arms' state, its per-round draws from the
    analyzer's key, and the two steps: :meth:`choose` (user t's arm) and :meth:`observe` (her report),
    or :meth:`run` for a block of users looked ahead at."""

    def __init__(self, name: str, n_arms: int, epsilon: float | None, horizon: int, key: int):
        if name not in KINDS:
            raise ValueError(f"unknown sequential algorithm {name!r}; choose from {', '.join(KINDS)}")
        self.name, self.kind, self.key = name, KINDS[name], key
        private = TRUST[name] != "none"
        if private and not (epsilon is not None and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"{name} needs a finite epsilon > 0, got {epsilon}")
        eps = float(epsilon) if private else 1.0
        self.levels = max(1, int(horizon).bit_length())  # L = ⌊log₂ T⌋ + 1: a leaf's nodes
        # The scales whose grid steps the releases use must stay below 2²⁰ (grid_step refuses
        # larger): ε below about L·10⁻⁶ is refused here rather than mid-run.
        local_b = (1.0 + LAPLACE_GRID) / eps
        for scale in ((self.levels / eps,) if name == "mt-ucb" else
                      (2.0 * (self.levels + 1) / eps,) if self.kind in HYBRID else ()):
            if not scale * LAPLACE_GRID < 1:
                raise ValueError(f"epsilon={eps} is too small for {name}'s exact grid Laplace (scale {scale:.3g})")
        self.params = np.array([eps, self.levels / eps, local_b])
        k = n_arms
        self.pulls = np.zeros(k, dtype=np.int64)
        self.est = np.zeros(k)
        self.opened = np.zeros(k, dtype=np.int64)
        self.leaves = np.zeros(k, dtype=np.int64)
        self.alpha = np.zeros((k, LEVELS))
        self.alpha_noisy = np.zeros((k, LEVELS))
        self.tree_noisy = np.zeros(k)
        self.block_sum = np.zeros(k)
        self.blocks_noisy = np.zeros(k)
        self._block, self._normals, self._steps = -1, None, None

    def _state(self):
        return (self.pulls, self.est, self.opened, self.leaves, self.alpha, self.alpha_noisy, self.tree_noisy,
                self.block_sum, self.blocks_noisy)

    def draws(self, t0: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Rounds t0 … t0 + n − 1's draws: K standard normals (Thompson sampling) and two unit grid
        steps (the counters), from ``(key, "draws", block)`` in blocks of :data:`NOISE_BLOCK` rounds,
        so a round's draws do not depend on how rounds are grouped into plans."""
        k = self.pulls.size
        normals, steps = np.empty((n, k)), np.empty((n, 2))
        i = 0
        while i < n:
            b, off = divmod(t0 + i - 1, NOISE_BLOCK)
            if b != self._block:
                rng = stream(self.key, "draws", b)
                self._block = b
                self._normals = rng.standard_normal((NOISE_BLOCK, k)) if self.kind == 1 else np.zeros((NOISE_BLOCK, k))
                self._steps = (sample_grid_steps((NOISE_BLOCK, 2), rng) if self.kind in (2, *HYBRID)
                               else np.zeros((NOISE_BLOCK, 2)))
            take = min(n - i, NOISE_BLOCK - off)
            normals[i:i + take] = self._normals[off:off + take]
            steps[i:i + take] = self._steps[off:off + take]
            i += take
        return normals, steps

    def choose(self, t: int) -> int:
        normals, _ = self.draws(t, 1)
        return int(_kernels().choose(self.kind, t, self.pulls, self.est, self.opened, normals[0], self.params))

    def observe(self, t: int, arm: int, report: float) -> None:
        _, steps = self.draws(t, 1)
        _kernels().observe(self.kind, arm, float(report), *self._state(), steps[0], self.params)

    def decided(self, t0: int, n: int) -> np.ndarray:
        """UCB1's and Thompson sampling's users t0 … (at least one, at most n) whose arm no reward in
        [0, 1] of the earlier ones can change: the leader j's streak that a copy of the learner fed
        rewards of 0 plays, in windows doubling from 64 users. Exact, no margin: while only j is
        pulled every other arm's index is a function of t (and of the round's normals), and j's is
        non-decreasing in each reward, every operation from a reward to it (the float sum, the
        division by n, the added width or normal) being monotone. The private counters' noisy
        sums subtract dropped nodes, and LDP-UCB's reports are unbounded: one user per plan."""
        if self.kind not in (0, 1):
            raise ValueError(f"{self.name}: no decided blocks (only ucb1 and thompson have an exactly monotone index)")
        copy = object.__new__(SequentialLearner)
        copy.__dict__.update(self.__dict__)  # the draws' cache is read only
        (copy.pulls, copy.est, copy.opened, copy.leaves, copy.alpha, copy.alpha_noisy, copy.tree_noisy,
         copy.block_sum, copy.blocks_noisy) = (a.copy() for a in self._state())
        lead = self.choose(t0)  # user t0's own arm: nothing is pending yet

        def window(k: int, m: int) -> int:
            same = copy.run(t0 + k, np.zeros((m, self.pulls.size)))[0] == lead
            return m if same.all() else int(same.argmin())

        return np.full(decided_windows(n, window), lead)

    def run(self, t0: int, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Users t0 … in turn, each reporting ``candidates[i, arm]``: (arms, reports)."""
        n = candidates.shape[0]
        normals, steps = self.draws(t0, n)
        arms, reports = np.empty(n, dtype=np.int64), np.empty(n)
        _kernels().run_block(self.kind, t0, np.ascontiguousarray(candidates, dtype=np.float64), normals, steps,
                             *self._state(), self.params, arms, reports)
        return arms, reports
