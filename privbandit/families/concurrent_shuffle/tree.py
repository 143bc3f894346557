"""The trees of the concurrent-shuffle counter (Tenenbaum, Kaplan, Mansour & Stemmer, ICML 2023).

A tree is its k internal levels, lowest first: level i's nodes are the consecutive batches of
``sizes[i−1]`` users that shuffler i collects back to back (Alg. 1 step 2; each size divides the
next, so a level's batches tile the timeline and every user is in exactly one node per level).

- Algorithm 3 (CSTA, ``csta_k``): s_i = d_low·d^{i−1}, d_low = ⌈n^{1/(2k+1)}⌉, d = d_low² (§3.2), or,
  where d_low² would make the top level's batches longer than n, the smallest d with d_low·d^k ≥ n;
  ``sequential`` is k = 1 (§2.6, the sequential shuffle model).
- Algorithm 2 (``csta_binary``): the binary tree without leaves and root, s_i = 2^i, i = 1…L−1,
  L = ⌈log₂ n⌉ (k = log n − 1 shufflers).
- §2.5's bad baselines: ``lowest_k_binary`` (2¹…2^k) and ``highest_k_binary`` (2^{L−k}…2^{L−1}).
- ``central_tree``: Dwork et al. 2010 / Chan et al. 2011's binary tree with its leaves (2⁰…2^{L−1}).
- ``ldp``: one level of single users (every user her own node).

Truncation (spec §7, §8 item 7): when n is not d_low·d^k (or not a power of 2) the tree is the one
for n' = d_low·d^k ≥ n, cut at n: a node is opened only if its last user is ≤ n. The users after the
last complete node of a level join fewer than k mechanisms (never more), and the counter stops
improving after the last multiple of s_1 (their bits stay in the intra-batch bias).

V_t (Definition 3.1): the highest-level completed nodes covering [1, t0], t0 = s_1·⌊t/s_1⌋, i.e.
the digits of t0 in the mixed radix (s_1, s_2/s_1, …): at level i the nodes
⌊t0/s_{i+1}⌋·(s_{i+1}/s_i) … ⌊t0/s_i⌋ − 1 (0-based), and at the top level 0 … ⌊t0/s_k⌋ − 1. That is
O(k) per step, and at t = n = d_low·d^k it is the root's d children (footnote 11).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SHUFFLE_MODES = ("csta_k", "sequential", "csta_binary", "lowest_k_binary", "highest_k_binary")
MODES = SHUFFLE_MODES + ("central_tree", "ldp")


def ceil_root(n: int, r: int) -> int:
    """⌈n^{1/r}⌉ in integers (floats misround perfect powers such as 1000^{1/3})."""
    x = max(1, int(round(n ** (1.0 / r))))
    while x**r < n:
        x += 1
    while x > 1 and (x - 1) ** r >= n:
        x -= 1
    return x


def ceil_log2(n: int) -> int:
    return max(0, (n - 1).bit_length())


@dataclass(frozen=True)
class Tree:
    """k internal levels of sizes s_1 | s_2 | … | s_k over users 1…n (see the module docstring)."""

    mode: str
    n: int
    sizes: tuple[int, ...]
    d_low: int | None = None
    degree: int | None = None  # d (``D_tree`` in the spec: the paper's d clashes with the dimension)

    def __post_init__(self) -> None:
        if not self.sizes or self.sizes[0] < 1:
            raise ValueError(f"a tree needs at least one level of size ≥ 1, got {self.sizes}")
        for lo, hi in zip(self.sizes, self.sizes[1:]):
            if hi <= lo or hi % lo:
                raise ValueError(f"level sizes {self.sizes} must increase, each dividing the next")
        if self.sizes[-1] > self.n:
            raise ValueError(f"the top level's batches ({self.sizes[-1]} users) exceed the horizon n = {self.n}: "
                             f"no node of it would ever complete; lower k")

    @property
    def k(self) -> int:
        return len(self.sizes)

    @property
    def covered(self) -> int:
        """The last user any estimate covers: the last multiple of s_1 ≤ n."""
        return self.sizes[0] * (self.n // self.sizes[0])

    @property
    def full(self) -> int:
        """n' = d_low·d^k (or 2^L): the horizon of the untruncated tree."""
        if self.degree is not None:
            return self.d_low * self.degree ** self.k
        return 1 << ceil_log2(self.n)

    @property
    def truncated(self) -> bool:
        return self.full != self.n

    def nodes(self, level: int) -> int:
        """Complete nodes of a level (1-based): only those whose last user is ≤ n are opened."""
        return self.n // self.sizes[level - 1]

    def digits(self, t0: np.ndarray | int, level: int) -> tuple:
        """Level ``level``'s nodes in V_t (0-based indices lo … hi − 1) for t0 a multiple of s_1."""
        s = self.sizes[level - 1]
        hi = np.asarray(t0) // s
        if level == self.k:
            return np.zeros_like(hi), hi
        up = self.sizes[level]
        return (np.asarray(t0) // up) * (up // s), hi

    def node_set(self, t: int) -> list[tuple[int, int, int]]:
        """V_t (Definition 3.1) as (level, first user, last user), 1-based, highest level first: O(k)."""
        if not 1 <= t <= self.n:
            raise ValueError(f"t = {t} must lie in 1…{self.n}")
        t0 = self.sizes[0] * (t // self.sizes[0])
        out = []
        for level in range(self.k, 0, -1):
            lo, hi = self.digits(t0, level)
            s = self.sizes[level - 1]
            out += [(level, j * s + 1, (j + 1) * s) for j in range(int(lo), int(hi))]
        return out

    def node_count(self, t0: np.ndarray) -> np.ndarray:
        """|V_t| for an array of t0 (multiples of s_1)."""
        total = np.zeros_like(np.asarray(t0))
        for level in range(1, self.k + 1):
            lo, hi = self.digits(t0, level)
            total = total + (hi - lo)
        return total

    def memberships(self, user: int) -> list[tuple[int, int]]:
        """The mechanisms user ``user`` (1-based) joins: (level, node index), one per level whose
        node around her is complete (Alg. 3 step 3: exactly k for an untruncated tree)."""
        out = []
        for level, s in enumerate(self.sizes, start=1):
            j = (user - 1) // s
            if j < self.nodes(level):
                out.append((level, j))
        return out

    def describe(self) -> dict:
        return {"mode": self.mode, "n": self.n, "k": self.k, "sizes": list(self.sizes), "d_low": self.d_low,
                "D_tree": self.degree, "full_horizon": self.full, "truncated": self.truncated,
                "last_user_covered": self.covered,
                "nodes_per_level": [self.nodes(i) for i in range(1, self.k + 1)]}


def tree_for(mode: str, n: int, k: int | None = None, d_low: int | None = None, degree: int | None = None) -> Tree:
    """The tree of a counter mode (see the module docstring); errors name the parameter and its range."""
    if mode not in MODES:
        raise ValueError(f"mode = {mode!r} is not one of {', '.join(MODES)}")
    if n < 2:
        raise ValueError(f"n = {n} must be ≥ 2")
    L = ceil_log2(n)
    if mode in ("csta_k", "sequential"):
        k = 1 if mode == "sequential" else k
        if k is None or not 1 <= k <= max(1, L):
            raise ValueError(f"k = {k} must lie in 1…⌈log₂ n⌉ = {max(1, L)} for mode {mode}")
        low = ceil_root(n, 2 * k + 1) if d_low is None else d_low
        deg = low * low if degree is None else degree
        if degree is None and low * deg ** (k - 1) > n:
            # ⌈·⌉ in d_low can push the top level's batches past n (n = 2^14, k = 5: d_low = 3, s_5 =
            # 19683): then no top node completes. Take the smallest degree whose tree still covers n
            # (= d_low² on the exact trees n = d_low^{2k+1}) [INF, documented in the docs].
            deg = max(2, ceil_root(-(-n // low), k))
        if low < 1 or deg < 2:
            raise ValueError(f"d_low = {low} must be ≥ 1 and D_tree = {deg} ≥ 2")
        if low * deg**k < n:
            raise ValueError(f"d_low·D_tree^k = {low}·{deg}^{k} = {low * deg**k} must be ≥ n = {n} "
                             f"(the tree of Alg. 3 covers the horizon; defaults: d_low = ⌈n^(1/(2k+1))⌉, D_tree = d_low²)")
        sizes = tuple(low * deg ** (i - 1) for i in range(1, k + 1))
        return Tree(mode, n, sizes, low, deg)
    if mode == "ldp":
        return Tree(mode, n, (1,))
    if mode == "central_tree":
        return Tree(mode, n, tuple(1 << i for i in range(0, max(1, L))))
    if mode == "csta_binary":
        if L < 2:
            raise ValueError(f"n = {n}: Algorithm 2 needs n ≥ 3 (at least one internal level)")
        return Tree(mode, n, tuple(1 << i for i in range(1, L)))
    if k is None or not 1 <= k <= L - 1:
        raise ValueError(f"k = {k} must lie in 1…⌈log₂ n⌉ − 1 = {L - 1} for mode {mode}")
    if mode == "lowest_k_binary":
        return Tree(mode, n, tuple(1 << i for i in range(1, k + 1)))
    return Tree(mode, n, tuple(1 << i for i in range(L - k, L)))


def prefix_estimates(tree: Tree, node_estimates: list[np.ndarray]) -> np.ndarray:
    """Ŝ at t0 = s_1, 2s_1, …, covered: Σ_{v∈V_t} S_v (Alg. 3 step 5), for every run at once.

    ``node_estimates[i]``: (R, nodes of level i+1). Each level's part of V_t is a run of consecutive
    nodes (:meth:`Tree.digits`), so it is a difference of that level's prefix sums: O(k) per t, no
    loop over t. Returns (R, covered/s_1).
    """
    t0 = np.arange(1, tree.n // tree.sizes[0] + 1, dtype=np.int64) * tree.sizes[0]
    runs = node_estimates[0].shape[0]
    out = np.zeros((runs, t0.size))
    for level in range(1, tree.k + 1):
        est = node_estimates[level - 1]
        prefix = np.concatenate([np.zeros((runs, 1)), np.cumsum(est, axis=1)], axis=1)
        lo, hi = tree.digits(t0, level)
        out += prefix[:, hi] - prefix[:, lo]
    return out


def log2_levels(n: int) -> int:
    """log n of Alg. 2's budget split ε/log n (spec §8 item 8: the paper's, slightly conservative)."""
    return max(1, ceil_log2(n))


__all__ = ["MODES", "SHUFFLE_MODES", "Tree", "tree_for", "prefix_estimates", "ceil_root", "ceil_log2",
           "log2_levels"]
