"""The release mechanisms of Hu, Huang & Mehta, "Near-Optimal Algorithms for Private Online Learning
in a Stochastic Environment" (spec: ``private-online-learning.md``).

Every private datum reaches a learner of this paper through one of these releases:

| name                         | used by                   | paper                         | release                       |
|------------------------------|---------------------------|-------------------------------|-------------------------------|
| :class:`ArraySumRelease`     | Anytime-Lazy-UCB (Alg. 1) | eq. (3)                       | ΣT + Lap(1/ε), once, when full|
| :class:`BinaryMechanism`     | Hybrid-UCB (Alg. 4)       | eq. (33), Chan et al. 2011    | tree p-sums, Lap(r/(ε/2))     |
| logarithmic part             | Hybrid-UCB (Alg. 4)       | eq. (32)                      | array sums, Lap(1/(ε/2))      |
| :class:`ReportNoisyMax`      | FTNL (Alg. 2–3)           | Alg. 3, Dwork–Roth Claim 3.9  | argmax_j (G_j + Lap(c/ε))     |

and, for the distributed trust model (not in the paper, spec §5.4 [INFERRED]), the same block sums
computed by a secure aggregator from users' Pólya shares, reusing :class:`PolyaSecAgg`
(Chowdhury & Zhou 2023, Thm 1) unchanged: one round per block (one Anytime-Lazy-UCB array, or one
FTNL epoch's K coordinates), whose modular sum the aggregator releases (:mod:`.parties`).

- :class:`DistributedArraySum` / :class:`DistributedNoisyMax`: the block-sum releases in the
  distributed model. For FTNL the argmax can be taken *inside* the intermediary (an ideal secure
  computation releases only the index: the RNM guarantee; the spine's ``argmax`` rule) or at the
  analyzer (K noisy sums leave the intermediary: a Laplace mechanism with L1 sensitivity K,
  accounted as Kε/c).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from privbandit.families.distributed_dp_mab.base import RoundParams
from privbandit.families.distributed_dp_mab.mechanisms import PolyaSecAgg
from privbandit.protocol.primitives.noise import grid_laplace
from privbandit.protocol.privacy import PureDP


def _check_epsilon(epsilon: float) -> float:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon={epsilon} must be finite and > 0")
    return float(epsilon)


# --- Anytime-Lazy-UCB's arrays -----------------------------------------------------------------


def array_of_pull(count: np.ndarray | int) -> np.ndarray | int:
    """The array an arm's ``count``-th observation lands in: ``⌊log2 count⌋`` (spec §2.1).

    Array 0 is the initial pull (size λ⁽⁰⁾ = 1); array r ≥ 1 holds pull counts 2^r … 2^{r+1} − 1.
    """
    c = np.asarray(count, dtype=np.int64)
    if np.any(c < 1):
        raise ValueError("pull counts start at 1")
    out = np.floor(np.log2(c)).astype(np.int64)
    # log2 in float64 is exact at powers of two up to 2^52, but guard the boundary anyway.
    out += (np.left_shift(1, out + 1) <= c).astype(np.int64)
    out -= (np.left_shift(1, out) > c).astype(np.int64)
    return out if out.ndim else int(out)


def refresh_count(r: int) -> int:
    """The pull count at which array r becomes full: ``Σ_{s=0}^{r} 2^s = 2^{r+1} − 1``.

    So an arm's private mean is refreshed at pull counts 1, 3, 7, 15, … (Alg. 1's threshold
    ``O_j = Σ_{r=0}^{r_j+1} λ^{(r)}``).
    """
    if r < 0:
        raise ValueError(f"array index r={r} must be ≥ 0")
    return 2 ** (r + 1) - 1


@dataclass(frozen=True)
class ArraySumRelease:
    """Eq. (3) in the central model: the trusted learner adds ``Lap(1/ε)`` to a full array's sum.

    One array is a disjoint block of rounds and one observation lies in [0, 1], so the sum has
    sensitivity 1 under replacement and each release is ε-DP; arrays partition the rounds, so the
    run is ε-DP (parallel composition, Appendix B). The noise is the exact Laplace on the grid 2⁻²⁰
    (:func:`~privbandit.protocol.primitives.noise.grid_laplace`), never floating-point Laplace.
    """

    epsilon: float
    trust_model: str = "central"

    def __post_init__(self):
        _check_epsilon(self.epsilon)

    def release(self, reward_sum: float, n: int, rng: np.random.Generator) -> float:
        return float(grid_laplace(float(reward_sum), 1.0, self.epsilon, rng)[0])

    def privacy_event(self, n: int) -> PureDP:
        return PureDP(self.epsilon)

    def bits(self, n: int) -> int:
        return 64  # a raw float64 reward per user


# --- distributed trust: one secure-aggregation session per block -------------------------------


@dataclass
class DistributedArraySum:
    """Eq. (3) in the distributed model: users of one array send Pólya-noised residues
    (:class:`PolyaSecAgg`, Chowdhury & Zhou Thm 1), the aggregator sums them mod m, the analyzer
    decodes ``Lap_Z(g/ε)``-noised ``Σ x̂`` and divides by g. ε-DP per array against the analyzer
    and everyone outside the users (spec §5.4–5.5).

    ``p`` is the decode-failure probability per release that sets τ (p = 1/T by default in the
    family; an anytime deployment would set it per block instead, spec §5.4).
    """

    epsilon: float
    p: float
    trust_model: str = "distributed"
    mechanism: PolyaSecAgg = field(init=False)

    def __post_init__(self):
        self.mechanism = PolyaSecAgg(self.epsilon, self.p)

    def params(self, n: int) -> RoundParams:
        return self.mechanism.params(n)

    def randomize(self, rewards: np.ndarray, params: RoundParams, rng: np.random.Generator) -> np.ndarray:
        return self.randomized(rewards, params, rng)[0]

    def randomized(self, rewards: np.ndarray, params: RoundParams, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The residues and each user's encoding x̂ (what a poisoning user swaps out, adversaries.py)."""
        out = self.mechanism.randomize(rewards, params, rng)
        return out.messages, out.encoded

    def decode(self, released: int, params: RoundParams, rng: np.random.Generator):
        """The analyzer's A: the noisy reward sum (reward units), and whether it wrapped."""
        est = self.mechanism.analyze(int(released), params, rng)
        return est.reward_sum, est.wrapped

    def privacy_event(self, n: int) -> PureDP:
        return PureDP(self.epsilon)

    def bits(self, n: int) -> int:
        return self.params(n).bits


# --- Hybrid-UCB's tree: the binary mechanism ----------------------------------------------------


def binary_nodes(count: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """The dyadic p-sum nodes whose noisy values make up a tree's noisy prefix of ``count`` leaves.

    Each node is named by the insert that completes it: node ``count & ~(2^i − 1)`` for every set
    bit i of ``count`` (e.g. 13 = 1101b uses the nodes completed at inserts 8, 12 and 13). Returns
    ``(names, used)`` of shape ``count.shape + (levels,)``; ``used`` masks the set bits.
    """
    c = np.asarray(count, dtype=np.int64)[..., None]
    lv = np.arange(levels, dtype=np.int64)
    used = ((c >> lv) & 1).astype(bool)
    names = (c >> lv) << lv
    return names, used


def binary_prefix_noise(count: np.ndarray, node_noise: np.ndarray) -> np.ndarray:
    """Σ of the noise on the nodes :func:`binary_nodes` picks; ``node_noise[c]`` is the noise of the
    node completed at insert c (index 0 unused). Vectorized over any array of counts."""
    levels = max(1, int(np.max(count, initial=1)).bit_length())
    names, used = binary_nodes(count, levels)
    return np.where(used, node_noise[np.where(used, names, 0)], 0.0).sum(axis=-1)


def tree_nodes_per_leaf(r: int) -> int:
    """How many *released* p-sums one leaf of a 2^r-leaf tree enters: r + 1 (leaf 0 enters the
    level-0 node, …, the root). The paper's eq. (33) calibrates to ``|S| ≤ r`` (spec §7 item 8)."""
    return r + 1


@dataclass(frozen=True)
class BinaryMechanism:
    """The tree part of Hybrid-UCB, eq. (33): each p-sum node of tree r carries one cached
    ``Lap(depth/(ε/2))`` draw, with ``depth = r`` (the paper) or ``r + 1`` (covers every node a
    leaf enters, so the tree part is exactly ε/2-DP; spec §7 item 8).
    """

    epsilon_share: float  # ε/2 in Hybrid-UCB
    depth: Literal["r", "r+1"] = "r"

    def scale(self, r: int) -> float:
        d = r if self.depth == "r" else r + 1
        return max(d, 1) / self.epsilon_share

    def epsilon_spent(self, r: int) -> float:
        """ε of tree r: each leaf is in r + 1 released nodes, each with Laplace of this scale."""
        return tree_nodes_per_leaf(r) / self.scale(r)


def hybrid_epsilon(epsilon: float, depth: str, max_tree: int) -> float:
    """What Hybrid-UCB actually spends per observation: ε/2 (its array) + its tree's share.

    With the paper's depth r the worst tree is r = 1 (each leaf in 2 nodes, noise scale 1/(ε/2)):
    ε/2 + ε = 1.5ε. With depth r + 1 every tree spends ε/2, total ε.
    """
    tree = BinaryMechanism(epsilon / 2, depth)  # type: ignore[arg-type]
    return epsilon / 2 + max(tree.epsilon_spent(r) for r in range(1, max(1, max_tree) + 1))


# --- FTNL: report noisy max ----------------------------------------------------------------------

ArgmaxAt = Literal["intermediary", "analyzer"]


@dataclass(frozen=True)
class ReportNoisyMax:
    """Algorithm 3 in the central model: ``argmax_j (G_j + Lap(c/ε))`` over one epoch's fresh sums.

    ``multiplier`` is c (spec §1.3): c = 1 is the paper; under the paper's *replacement*
    neighbours one round can raise some G_j and lower others, the queries are not monotone, and
    Dwork–Roth's ε holds only for c = 2. The ledger therefore records 2ε/c.
    The noise is the exact Laplace on the grid 2⁻²⁰; ties go to the lowest index.
    """

    epsilon: float
    multiplier: float = 1.0
    trust_model: str = "central"

    def __post_init__(self):
        _check_epsilon(self.epsilon)
        if not self.multiplier > 0:
            raise ValueError(f"noise multiplier c={self.multiplier} must be > 0")

    @property
    def scale(self) -> float:
        return self.multiplier / self.epsilon

    def select(self, sums: np.ndarray, rng: np.random.Generator) -> int:
        # Each rounded sum moves by at most 1 + γ between neighbours; grid Laplace at ε/c on
        # sensitivity 1 has scale c(1 + γ)/ε, so every coordinate is (ε/c)-DP and report noisy max
        # (Dwork & Roth Claim 3.9, whose threshold argument holds for integer noise with ties to
        # the lowest index) spends 2ε/c.
        noisy, _ = grid_laplace(np.asarray(sums, dtype=np.float64), 1.0, self.epsilon / self.multiplier, rng)
        return int(np.argmax(noisy))

    def privacy_event(self, n_actions: int) -> PureDP:
        return PureDP(2.0 / self.scale)


@dataclass(frozen=True)
class NoisyMeans:
    """The naive FTNL of §5 in the central model: every action's epoch sum is released with its own
    ``Lap(K/ε)`` (ε/K-DP each: one round moves each coordinate by at most 1 under replacement), the
    leader of the noisy sums is played, and basic composition over the K releases gives ε (the
    paper's argument; the released means are what it protects, so the ledger charges ε, not report
    noisy max's smaller figure for an index alone). The noise is the exact grid Laplace."""

    epsilon: float
    n_actions: int
    trust_model: str = "central"

    def __post_init__(self):
        _check_epsilon(self.epsilon)

    def release(self, sums: np.ndarray, rng: np.random.Generator) -> tuple[int, np.ndarray]:
        """The leader and the K noisy sums."""
        noisy, _ = grid_laplace(np.asarray(sums, dtype=np.float64), 1.0, self.epsilon / self.n_actions, rng)
        return int(np.argmax(noisy)), noisy

    def select(self, sums: np.ndarray, rng: np.random.Generator) -> int:
        return self.release(sums, rng)[0]

    def privacy_event(self, n_actions: int) -> PureDP:
        return PureDP(self.epsilon)


@dataclass
class DistributedNoisyMax:
    """Algorithm 3 in the distributed model. Users of epoch s send K residues each, Pólya shares
    calibrated to ``Lap_Z(c·g/ε)`` per coordinate; one secure sum per epoch (a round
    with width K).

    - ``argmax_at = "intermediary"``: the secure computation decodes and releases only the index
      (report noisy max as in the central model: 2ε/c under replacement neighbours).
    - ``argmax_at = "analyzer"``: the K decoded sums leave the intermediary; that is the Laplace
      mechanism on a K-vector of L1 sensitivity K, i.e. Kε/c, and the ledger says so.
    """

    epsilon: float
    p: float
    multiplier: float = 1.0
    argmax_at: ArgmaxAt = "intermediary"
    trust_model: str = "distributed"
    mechanism: PolyaSecAgg = field(init=False)

    def __post_init__(self):
        _check_epsilon(self.epsilon)
        if self.argmax_at not in ("intermediary", "analyzer"):
            raise ValueError(f"argmax_at={self.argmax_at!r} must be 'intermediary' or 'analyzer'")
        # Coordinate noise Lap_Z(c·g/ε) is PolyaSecAgg's Lap_Z(g/ε') at ε' = ε/c.
        self.mechanism = PolyaSecAgg(self.epsilon / self.multiplier, self.p)

    def params(self, n: int) -> RoundParams:
        return self.mechanism.params(n)

    def randomize(self, vectors: np.ndarray, params: RoundParams, rng: np.random.Generator) -> np.ndarray:
        """Each user's K residues; ``vectors`` has one row per user."""
        return self.randomized(vectors, params, rng)[0]

    def randomized(self, vectors: np.ndarray, params: RoundParams, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The residues and their encodings x̂, one row of K per user (adversaries.py swaps the latter)."""
        v = np.asarray(vectors, dtype=np.float64)
        out = self.mechanism.randomize(v.ravel(), params, rng)
        return out.messages.reshape(v.shape), out.encoded.reshape(v.shape)

    def decode(self, released: np.ndarray, params: RoundParams, rng: np.random.Generator) -> np.ndarray:
        return np.array([self.mechanism.analyze(int(y), params, rng).reward_sum for y in released])

    def select(self, released: np.ndarray, params: RoundParams, rng: np.random.Generator) -> tuple[int, np.ndarray | None]:
        """The index, plus the decoded sums only when the trust model lets them out."""
        sums = self.decode(released, params, rng)
        return int(np.argmax(sums)), (sums if self.argmax_at == "analyzer" else None)

    def privacy_event(self, n_actions: int) -> PureDP:
        per_coordinate = self.epsilon / self.multiplier
        return PureDP(n_actions * per_coordinate if self.argmax_at == "analyzer" else 2 * per_coordinate)

    def bits(self, n: int, n_actions: int) -> int:
        return n_actions * self.params(n).bits
