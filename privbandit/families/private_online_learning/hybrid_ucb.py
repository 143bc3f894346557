"""Hybrid-UCB: Hu, Huang & Mehta, Algorithm 4 (Appendix E.2), central model only.

Per arm, the observations so far split into full arrays F⁽⁰⁾…F⁽ʳ⁻¹⁾ (the *logarithmic mechanism*:
one cached ``Z⁽ˢ⁾ ~ Lap(1/(ε/2))`` per array, eq. 32) and the tree B⁽ʳ⁾ being filled (the *binary
mechanism*: one cached ``Y ~ Lap(r/(ε/2))`` per dyadic p-sum node, eq. 33). The private mean is
refreshed on every pull from *all* observations (eq. 34): neither lazy nor forgetful, which is the
point of the comparison. The index is eq. (35), with base-2 logs as the paper writes them.

The tree is the standard binary counter (Chan et al. 2011) kept in O(1) amortized time: inserting
leaf c completes exactly one node, at level tz(c) (trailing zeros), whose true p-sum is the new leaf
plus the nodes below it; those lower nodes leave the released set S, the new one joins it.

Why no cohort vectorization: every pull changes the pulled arm's estimate with fresh node noise, so
the next user's arm depends on this user's reward. One :meth:`HybridUCB.choose` and
:meth:`HybridUCB.observe` per round is the readable reference (the analyzer runs that over MQTT);
:class:`~.hybrid_streaks.HybridStreaks` gets the same arms, bit for bit, by running the leader's
streaks of consecutive pulls as numpy windows.
"""

from __future__ import annotations

import math

from privbandit.families.private_online_learning.mechanisms import BinaryMechanism, refresh_count
from privbandit.protocol.primitives.noise.grid_laplace import grid_step

BONUS = 6.0 * math.sqrt(8.0)  # eq. (35)'s 6√8
LEVELS = 64


class HybridUCB:
    """Algorithm 4's state for one run. Sans-I/O: :meth:`choose` gives round t's arm,
    :meth:`observe` takes the reward and the unit grid steps the mechanisms need (so the learner
    holds no randomness of its own and tests can feed it anything).

    Every release is on a grid: a node or array sum v of Laplace scale b is released as
    ``(round(v / g) + L) * g`` with ``g = grid_step(b)`` and ``L ~ Lap_Z(2²⁰)``
    (:mod:`~privbandit.protocol.primitives.noise.grid_laplace`), (1/b)-DP with the ideal Lap_Z and
    (1/b, δ)-DP with numpy's sampler, δ bounded by ``sampler_bounds.grid_step_delta``; the
    eqs. (32)–(33) scales and so the ledger's ε are the paper's."""

    def __init__(self, n_arms: int, epsilon: float, depth: str = "r"):
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon={epsilon} must be finite and > 0")
        if depth not in ("r", "r+1"):
            raise ValueError(f"tree noise depth {depth!r} must be 'r' or 'r+1'")
        self.n_arms = n_arms
        self.epsilon = float(epsilon)
        self.tree = BinaryMechanism(epsilon / 2, depth)  # type: ignore[arg-type]
        self.array_grid = grid_step(2.0 / epsilon)  # Lap(1/(0.5ε)), on its grid
        k = range(n_arms)
        self.pulls = [0] * n_arms  # O_j
        self.r = [0] * n_arms  # index of the tree (and array) being filled
        self.leaves = [0] * n_arms  # leaves filled in tree r
        self.arrays_noisy = [0.0] * n_arms  # F̃_{j,0:r−1}, eq. (32)
        self.array_sum = [0.0] * n_arms  # ΣF⁽ʳ⁾ = ΣB⁽ʳ⁾ so far (true; never released as is)
        self.tree_noisy = [0.0] * n_arms  # B̃_{j,r}, eq. (33)
        self.node_grid = [0.0] * n_arms  # the open tree's grid step: Lap(r/(0.5ε)), eq. (33)
        self.alpha = [[0.0] * LEVELS for _ in k]  # true p-sums of the nodes in S, per level
        self.alpha_noisy = [[0.0] * LEVELS for _ in k]
        self.means = [0.0] * n_arms  # μ̃_{j,O_j}, eq. (34)
        self.b1 = [0.0] * n_arms  # sqrt(3/O_j): the index is μ̃ + b1·sqrt(log t) + b2·log t
        self.b2 = [0.0] * n_arms  # 6√8·⌊log(O_j + 1)⌋/(O_j ε)
        self.trees_opened: list[int] = []  # tree indices, for the privacy ledger

    def copy(self) -> HybridUCB:
        """An independent copy of the state (what a speculation may change without touching this one)."""
        c = object.__new__(HybridUCB)
        for name, value in vars(self).items():
            if name in ("alpha", "alpha_noisy"):
                value = [list(row) for row in value]
            elif isinstance(value, list):
                value = list(value)
            setattr(c, name, value)
        return c

    def choose(self, t: int) -> int:
        """Eq. (35) at round t > K; the lowest index wins ties."""
        if t <= self.n_arms:
            return t - 1
        lt = math.log2(t)
        slt = math.sqrt(lt)
        best, best_u = 0, -math.inf
        for j in range(self.n_arms):
            u = self.means[j] + slt * self.b1[j] + lt * self.b2[j]
            if u > best_u:
                best, best_u = j, u
        return best

    def observe(self, arm: int, x: float, node_noise: float, array_noise: float) -> bool:
        """Insert arm's new observation. ``node_noise`` is the unit grid step of the node this
        insert completes; ``array_noise`` is used only if it fills the array (returns True then),
        and at the initial pull (array 0). (``round`` is numpy's ``rint``: half to even.)"""
        j = arm
        ga = self.array_grid
        if self.pulls[j] == 0:  # initialization: F⁽⁰⁾ of size 1, μ̃ = x + Z⁽⁰⁾
            self.arrays_noisy[j] = (round(x / ga) + array_noise) * ga
            self.pulls[j] = 1
            self.means[j] = self.arrays_noisy[j]
            self._open_tree(j, 1)
            return True
        c = self.leaves[j] + 1
        self.leaves[j] = c
        level = (c & -c).bit_length() - 1
        a, ah = self.alpha[j], self.alpha_noisy[j]
        s, dropped = x, 0.0
        for lv in range(level):  # the nodes below merge into the new one and leave S
            s += a[lv]
            dropped += ah[lv]
            a[lv] = ah[lv] = 0.0
        g = self.node_grid[j]
        noisy = (round(s / g) + node_noise) * g
        a[level], ah[level] = s, noisy
        self.tree_noisy[j] += noisy - dropped
        self.array_sum[j] += x
        o = self.pulls[j] + 1
        self.pulls[j] = o
        self.means[j] = (self.arrays_noisy[j] + self.tree_noisy[j]) / o
        filled = o == refresh_count(self.r[j])
        if filled:  # F⁽ʳ⁾ joins the logarithmic part with its own cached Z⁽ʳ⁾; a new tree opens
            self.arrays_noisy[j] += (round(self.array_sum[j] / ga) + array_noise) * ga
            a[level] = ah[level] = 0.0
            self._open_tree(j, self.r[j] + 1)
        else:
            self._bonus(j)
        return filled

    def _open_tree(self, j: int, r: int) -> None:
        self.r[j] = r
        self.leaves[j] = 0
        self.array_sum[j] = 0.0
        self.tree_noisy[j] = 0.0
        self.node_grid[j] = grid_step(self.tree.scale(r))
        self.trees_opened.append(r)
        self._bonus(j)

    def _bonus(self, j: int) -> None:
        o = self.pulls[j]
        self.b1[j] = math.sqrt(3.0 / o)
        # ⌊log2(O + 1)⌋ equals the open tree's index r (Appendix E); computed exactly on ints.
        self.b2[j] = BONUS * ((o + 1).bit_length() - 1) / (o * self.epsilon)

    def epsilon_spent(self) -> float:
        """Per observation: its array's ε/2 plus its tree's share (see :func:`hybrid_epsilon`)."""
        return max((self.epsilon / 2 + self.tree.epsilon_spent(r) for r in set(self.trees_opened)), default=0.0)
