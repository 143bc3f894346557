"""The shuffle protocols of Chowdhury & Zhou, "Shuffle Private Linear Contextual Bandits" (ICML 2022).

Every protocol moves one user's statistics: the vector φ(c,a)·y and the matrix φ(c,a)φ(c,a)ᵀ. A
report carries them as one *entries* vector of length d + d(d+1)/2: φy, then the upper triangle of
φφᵀ row by row (:func:`to_upper`). The lower triangle carries no information; the analyzer mirrors the
upper one (:func:`from_upper`), so every Ṽ it releases is exactly symmetric.

Parties, all sans-I/O, all vectorized over any leading axes (runs, users):

- P_Amp (§3.2, App. B): :class:`GaussianRandomizer` (Algorithm 2), :class:`PermutationShuffler`
  (Algorithm 3: a uniformly permuted list, no sender, no order), :class:`SumAnalyzer` (Algorithm 4).
- P_Vec (§3.3, App. C): :class:`BitSumRandomizer` (Algorithm 5, count-encoded: the number of 1-bits
  per label), :class:`LabelCountShuffler` (Algorithm 6 seen by the analyzer: per-label totals, which
  determine the shuffled multiset of labelled bits), :class:`BitSumAnalyzer` (Algorithm 7, with the
  paper's −B·Δ re-centring).
- LinUCB-LDP (Zheng et al. 2020): the Gaussian randomizer behind a :class:`PassThrough` intermediary
  (attributable reports).
- LinUCB-JDP (Shariff & Sheffet 2018): raw reports to a trusted analyzer that releases prefix sums
  through the binary-tree mechanism, :class:`TreeAggregator`.

On the spine, the intermediaries are the spine's (:mod:`privbandit.protocol.spine.intermediary`): P_Amp's
round is a ``shuffle`` with the column groups (d, D − d) (S1 and S2 permute independently), P_Vec's a
``sum`` of the counts at the shuffler (the per-label totals of :class:`LabelCountShuffler`), LDP's a
``pass`` (attributable). :class:`PermutationShuffler`, :class:`LabelCountShuffler` and
:class:`PassThrough` remain as the reference the tests check those releases' laws against.

Where the randomness comes from (the end of this module) is one layout for both transports: each
run's users draw per *noise block* of consecutive batches, so a stacked in-process task and one
MQTT task per run draw the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from privbandit.protocol.primitives.noise.grid_gaussian import grid_gaussian_noise, to_grid
from privbandit.protocol.primitives.seeding import stream


# --- the entries layout ------------------------------------------------------------------------

@lru_cache(maxsize=64)
def upper_indices(d: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(d)


def n_entries(d: int) -> int:
    return d + d * (d + 1) // 2


def to_upper(w: np.ndarray) -> np.ndarray:
    iu, ju = upper_indices(w.shape[-1])
    return w[..., iu, ju]


def from_upper(v: np.ndarray, d: int) -> np.ndarray:
    """The symmetric matrix whose upper triangle is ``v`` (Alg. 2 "copy to the lower terms")."""
    iu, ju = upper_indices(d)
    out = np.empty(v.shape[:-1] + (d, d), dtype=v.dtype)
    out[..., iu, ju] = v
    out[..., ju, iu] = v
    return out


def user_entries(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """A user's statistics [φy, upper(φφᵀ)] for features ``x`` (..., d) and rewards ``y`` (...)."""
    iu, ju = upper_indices(x.shape[-1])
    return np.concatenate([x * y[..., None], x[..., iu] * x[..., ju]], axis=-1)


@lru_cache(maxsize=64)
def mirror_indices(d: int) -> np.ndarray:
    """(d, d): the entries index of matrix element (i, j), the upper triangle's for both (i, j) and (j, i)."""
    iu, ju = upper_indices(d)
    out = np.empty((d, d), dtype=np.intp)
    out[iu, ju] = out[ju, iu] = d + np.arange(iu.size)
    return out


def split_entries(e: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(vector part (..., d), symmetric matrix (..., d, d)) of an entries array: the matrix is
    :func:`from_upper` of the rest, as one gather."""
    return e[..., :d], e[..., mirror_indices(d)]


# --- P_Amp and the local Gaussian randomizer ---------------------------------------------------

@dataclass(frozen=True)
class GaussianRandomizer:
    """Algorithm 2 (R_Amp): Gaussian noise of standard deviation σ on every entry of φy and of
    upper(φφᵀ), on the grid: the entries rounded to γℤ plus γ·N_ℤ(0, (σ/γ)²) each
    (:mod:`~privbandit.protocol.primitives.noise.grid_gaussian`; the paper's N(0, σ²) in floating
    point would not be the mechanism its theorem is about, Mironov 2012).

    Algorithm 2 prints σ₂ for the vector and σ₁ for the matrix (a swap, spec §11 item 4); every theorem
    sets σ₁ = σ₂, which is all we support. Noise on the upper triangle only, mirrored by the analyzer,
    is the paper's "perturb upper diagonal entries and copy to the lower terms".
    """

    sigma: float

    def randomize(self, entries: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.apply(entries, self.draw(entries.shape, rng))

    # randomize = apply ∘ draw: each run draws from its own stream (a noise block at a time,
    # :class:`BlockStreams`) and the draws of all runs stacked are applied at once.
    def draw(self, shape: tuple, rng: np.random.Generator) -> np.ndarray:
        return grid_gaussian_noise(self.sigma, shape, rng)

    def apply(self, entries: np.ndarray, noise: np.ndarray) -> np.ndarray:
        return to_grid(entries) + noise  # both on the grid: the sum is exact


@dataclass(frozen=True)
class PermutationShuffler:
    """Algorithm 3: a uniform permutation of one batch's reports (axis −2), per leading index.

    ``independent``: S1 and S2 each "generate a uniform permutation" (Alg. 3), so by default the
    vector part and the matrix part get independent permutations, which also unlinks a user's vector
    from her matrix. The release is the permuted list: no sender id, no arrival order.
    """

    d: int
    independent: bool = True

    def release(self, reports: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.apply(reports, self.draw(reports.shape, rng))

    def draw(self, shape: tuple, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        """The permutation(s) of a batch of reports of this shape: (π,) or (π_vector, π_matrix)."""
        lead_n = shape[:-1]
        return tuple(rng.random(lead_n).argsort(axis=-1) for _ in range(2 if self.independent else 1))

    def apply(self, reports: np.ndarray, perms: tuple[np.ndarray, ...]) -> np.ndarray:
        if not self.independent:
            return _permute(reports, perms[0])
        out = np.empty_like(reports)
        out[..., : self.d] = _permute(reports[..., : self.d], perms[0])
        out[..., self.d:] = _permute(reports[..., self.d:], perms[1])
        return out


def _permute(x: np.ndarray, perm: np.ndarray) -> np.ndarray:
    return np.take_along_axis(x, perm[..., None], axis=-2)


@dataclass(frozen=True)
class PassThrough:
    """The local model's intermediary: attributable reports, in arrival order, forwarded as they are."""

    def release(self, reports: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        return reports

    def draw(self, shape: tuple, rng: np.random.Generator | None = None) -> None:
        return None

    def apply(self, reports: np.ndarray, _noise: None = None) -> np.ndarray:
        return reports


@dataclass(frozen=True)
class SumAnalyzer:
    """Algorithm 4 (A1, A2; the second is misprinted "A1(Y2)"): the sum of the released reports."""

    def analyze(self, release: np.ndarray) -> np.ndarray:
        return release.sum(axis=-2)


# --- P_Vec: the bit-sum protocol ---------------------------------------------------------------

@dataclass(frozen=True)
class VecParams:
    """Public parameters of P_Vec: accuracy g, b Bernoulli(p) noise bits per entry, and the encoding.

    ``shift`` is Δ (entries lie in [−Δ, Δ], so w = entry + Δ ∈ [0, 2Δ]); ``span`` is the range the
    scalar randomizer R_Δ maps onto [0, g]. Algorithm 5 passes span = Δ (spec §11 item 8), so x̂ can
    reach 2g and a user's bits overflow the "g + b" container; ``span = 2Δ`` is Cheu et al.'s
    encoding of [0, 2Δ] and keeps x̂ ≤ g, the sensitivity the privacy proof assumes.
    """

    g: int
    b: int
    p: float
    shift: float
    span: float
    centre_bits: float | None = None  # the b Algorithm 7 subtracts, if not the b drawn (the authors' float b)

    @property
    def debias_bits(self) -> float:
        return self.b if self.centre_bits is None else self.centre_bits

    @property
    def max_count(self) -> int:
        return int(math.ceil(2 * self.shift / self.span * self.g)) + self.b

    @property
    def scale(self) -> float:
        return self.span / self.g


QUARTER_BITS_MAX = 512  # above, numpy's binomial sampler is the cheaper of the two


def quarter_bits_count(b: int, shape: tuple, rng: np.random.Generator, ands: int = 2) -> np.ndarray:
    """The number of ones among b bits, each 1 with probability 2^−ands (1/4, Thm 3.5's p, by
    default; ½ for the ``exact`` preset's fair bits), for every cell of ``shape``: Algorithm 5's
    noise bits literally, each the AND of ``ands`` fair random bits, counted 64 at a time (popcount
    of uniform 64-bit words ANDed). Exactly Bin(b, 2^−ands), in integers; at p = 1/4 about 10×
    numpy's binomial at the paper's b ≈ 60, whose inversion sampler loops ~b·p times."""
    words = -(-b // 64)
    size = int(np.prod(shape))
    raw = rng.integers(0, 2**64 - 1, size=(ands, size, words), dtype=np.uint64, endpoint=True)
    bits = np.bitwise_and.reduce(raw, axis=0)
    if b % 64:
        bits[:, -1] &= np.uint64((1 << (b % 64)) - 1)
    return np.bitwise_count(bits).sum(axis=-1, dtype=np.int64).reshape(shape)


@dataclass(frozen=True)
class BitSumRandomizer:
    """Algorithm 5 (R_Vec), count-encoded: per label, the number of 1-bits among its g + b bits.

    For w ∈ [0, span]: x̄ = ⌊w·g/span⌋, γ₁ ~ Ber(w·g/span − x̄), γ₂ ~ Bin(b, p); the message is the
    multiset with x̄ + γ₁ + γ₂ ones. Footnote 9 lets the user order her bits randomly, so the count is
    all the bits say; we send it instead of ~10⁹ literal bits (spec §7).
    """

    params: VecParams

    def randomize(self, entries: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.apply(entries, self.draw(entries.shape, rng))

    def draw(self, shape: tuple, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Uniforms for the randomized rounding (γ₁), then the Bin(b, p) noise bits' counts (γ₂)."""
        uniforms = rng.random(shape)
        b, p = self.params.b, self.params.p
        if p == 0.25 and b <= QUARTER_BITS_MAX:
            return uniforms, quarter_bits_count(b, shape, rng)
        if p == 0.5:  # the exact preset's fair bits: exactly Bin(b, ½), whatever b (its guarantee rests on them)
            return uniforms, quarter_bits_count(b, shape, rng, ands=1)
        return uniforms, rng.binomial(b, p, size=shape)

    def apply(self, entries: np.ndarray, noise: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        pr = self.params
        uniforms, noise_ones = noise
        scaled = (entries + pr.shift) / pr.scale
        floor = np.floor(scaled)
        return floor.astype(np.int64) + (uniforms < scaled - floor) + noise_ones


@dataclass(frozen=True)
class LabelCountShuffler:
    """Algorithm 6 as the analyzer sees it: the number of 1-bits per label over the whole batch.

    Labels are public and a label's bits are exchangeable after the shuffle, so the shuffled multiset
    of labelled bits is determined by these totals (and (g + b)·B bits per label). Per-user counts
    never leave the shuffler.
    """

    def release(self, counts: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        return counts.sum(axis=-2)

    def draw(self, shape: tuple, rng: np.random.Generator | None = None) -> None:
        return None  # the totals need no randomness

    def apply(self, counts: np.ndarray, _noise: None = None) -> np.ndarray:
        return self.release(counts)


@dataclass(frozen=True)
class BitSumAnalyzer:
    """Algorithm 7: (span/g)·(Σ bits − p·b·B) − B·Δ per label; the paper's correction of Cheu et al.
    is the −B·Δ (they subtract Δ once; every one of the B users shifted by Δ)."""

    params: VecParams

    def analyze(self, totals: np.ndarray, n: int) -> np.ndarray:
        pr = self.params
        return pr.scale * (totals - pr.p * pr.debias_bits * n) - n * pr.shift

    def error_variance(self, entries: np.ndarray) -> np.ndarray:
        """Exact variance of the analyzer's error for these inputs (users on axis −2):
        (span/g)²·(Σ f(1−f) + B·b·p(1−p)), f the fractional part of each user's scaled entry."""
        pr = self.params
        scaled = (entries + pr.shift) / pr.scale
        f = scaled - np.floor(scaled)
        n = entries.shape[-2]
        return pr.scale**2 * ((f * (1 - f)).sum(axis=-2) + n * pr.b * pr.p * (1 - pr.p))


# --- JDP: the binary-tree mechanism --------------------------------------------------------------

@dataclass
class TreeAggregator:
    """The central analyzer of LinUCB-JDP: prefix sums through the binary-tree mechanism
    (Chan, Shi & Song 2010; Dwork et al. 2010), as Shariff & Sheffet 2018 use it.

    The c-th released prefix sum is the sum of the observations, each rounded to the grid γℤ, plus the
    noise of the nodes of c's binary decomposition, one fresh γ·N_ℤ(0, (σ/γ)²) per node (per entry,
    upper triangle mirrored; :mod:`~privbandit.protocol.primitives.noise.grid_gaussian`, so every
    release lies on the grid). Going from c to c+1
    drops the nodes of c's trailing one-bits and opens one new node, so each step costs O(1) draws
    amortized. The authors' code instead reuses ⌊ln n⌋+1 fixed noise draws (spec §9, §11 item 18).
    """

    sigma: float
    shape: tuple[int, ...]
    nodes: list = field(default_factory=list)  # nodes[i]: noise of the open level-i node, or None
    count: int = 0

    def level(self) -> int:
        """The level of the node the next step opens: the number of trailing ones of the count."""
        c, j = self.count, 0
        while c & 1:
            c >>= 1
            j += 1
        return j

    def step(self, raw_sum: np.ndarray, source) -> np.ndarray:
        """Absorb one observation (a batch sum); return the change of the released prefix sum.
        ``source``: a generator, or the new node's grid noise already drawn (``shape``)."""
        fresh = source if isinstance(source, np.ndarray) else grid_gaussian_noise(self.sigma, self.shape, source)
        change = fresh.copy()
        c, j = self.count, 0
        while c & 1:  # the nodes of c's trailing ones merge into the new level-j node
            change -= self.nodes[j]
            self.nodes[j] = None
            c >>= 1
            j += 1
        if j == len(self.nodes):
            self.nodes.append(None)
        self.nodes[j] = fresh
        self.count += 1
        return to_grid(raw_sum) + change

    def prefix_noise(self) -> np.ndarray:
        """The noise in the current prefix sum (for tests and diagnostics)."""
        live = [n for n in self.nodes if n is not None]
        return sum(live) if live else np.zeros(self.shape)

    def lane(self) -> str:
        """The ledger lane of the next release: its node's level (a level's nodes cover disjoint batches)."""
        return f"level-{self.level()}"


# What the analyzer's releases disclose under ``tree_noise = "authors-reused"`` (ReusedTreeNoise).
REUSED_LEAK = ("tree_noise = 'authors-reused' (the authors' LinBanditPrivate.py, not Shariff & Sheffet's tree): "
               "the prefix sums after c and c + 1 batches carry the same ⌊ln(1 + c)⌋ + 1 reused draws unless "
               "ln(1 + c) crosses an integer, so the difference of two consecutive releases is the batch's "
               "raw sum, exactly; every batch but ⌊ln n⌋ + 1 of the n is disclosed, no (ε, δ) with δ < 1 holds")


def reused_draws(count: int) -> int:
    """⌊ln(1 + c)⌋ + 1: how many of the reused draws the authors' ``JDPLinUCB.get_arm`` adds to the
    prefix sum of c observations (``LinBanditPrivate.py`` lines 213–216; np.log as theirs)."""
    return int(np.floor(np.log(1 + count))) + 1


@dataclass
class ReusedTreeNoise:
    """LinUCB-JDP's analyzer with the authors' noise (``tree_noise = "authors-reused"``): the prefix
    sum of c batches carries the first :func:`reused_draws` (c) draws N₀, N₁, … of one fixed list,
    each γ·N_ℤ(0, (σ/γ)²) per entry as :class:`TreeAggregator`'s nodes (upper triangle mirrored;
    their code symmetrizes a full matrix, (N + Nᵀ)/2), drawn once per run from the analyzer's key
    (``draw(i)``: draw i of every run, ``shape``). Not the binary-tree mechanism: a release's noise
    changes only when ln(1 + c) crosses an integer, so two releases between those counts differ by
    the raw data alone (:data:`REUSED_LEAK`; the ledger says none proven). Nothing is released
    before the first batch, so the first release brings N₀ (their code also adds N₀ to the empty
    statistics of round 0's decision, which is the one decision where the two differ).

    Same interface as :class:`TreeAggregator` (``step``, ``lane``, ``nodes``/``count`` as the
    look-ahead saves them) plus :meth:`changes`, the look-ahead's block of steps."""

    sigma: float
    shape: tuple[int, ...]
    draw: Callable[[int], np.ndarray]
    nodes: list = field(default_factory=list)  # the draws made so far, N₀, N₁, …
    count: int = 0

    def lane(self) -> str:
        return "round"  # none proven: one lane, nothing to compose per level

    def changes(self, n: int) -> np.ndarray:
        """The changes of the released prefix sum over the next n counts, (shape[0], n, shape[1]):
        count c → c + 1 adds the draws k(c) … k(c + 1) − 1 (k = :func:`reused_draws`, k(0) = 0), in
        that order, to zeros; 0.0 where none is added (the same numbers one :meth:`step` at a time)."""
        out = np.zeros((self.shape[0], n) + tuple(self.shape[1:]))
        after = np.floor(np.log(1 + (self.count + np.arange(1, n + 1)))).astype(np.int64) + 1  # k(c + 1)
        before = np.concatenate([[0 if self.count == 0 else reused_draws(self.count)], after[:-1]])
        for i in np.flatnonzero(after > before):  # ⌊ln n⌋ + 1 counts in a whole run
            for j in range(before[i], after[i]):
                while len(self.nodes) <= j:
                    self.nodes.append(self.draw(len(self.nodes)))
                out[:, i] += self.nodes[j]
        self.count += n
        return out

    def step(self, raw_sum: np.ndarray, _source=None) -> np.ndarray:
        """Absorb one batch sum; return the change of the released prefix sum (see :meth:`changes`)."""
        return to_grid(raw_sum) + self.changes(1)[:, 0]

    def prefix_noise(self) -> np.ndarray:
        """The noise in the current prefix sum: the first k(count) draws."""
        if self.count == 0:
            return np.zeros(self.shape)
        return sum(self.nodes[:reused_draws(self.count)])


def tree_levels(n: int) -> int:
    """Nodes in the binary decomposition of any count ≤ n: ⌊log₂ n⌋ + 1."""
    return max(1, n.bit_length())


# --- where the randomness comes from -----------------------------------------------------------
#
# - User t of run r gets the common random number U_t (world.user_uniforms).
# - Every randomizer (LDP, SDP-Amp, SDP-Vec) draws per run and per *noise block* of
#   ``batches_per_block(B)`` consecutive batches (about NOISE_BLOCK_USERS users): block k of run r
#   draws from ``(seed, "linear-user-noise", label, r, k)``, the randomizer's draws for the whole
#   block at once, shape (batches, B, D), batch m taking its row (:class:`BlockStreams`). A fleet hosts
#   whole blocks (:func:`fleet_of`), so sharding never changes what a user draws, and a restarted
#   fleet draws the block again.
# - JDP's trusted analyzer draws the tree's node noise from its own key per run, the same way
#   (``(key_r, "linear-tree", k)``, one node per batch).
# - Permutations are the shuffler's (the spine's intermediary, from its own key per run and round).
#
# Drawing per (run, block) instead of for all runs at once costs the in-process engine one draw call
# per run per block and one stack per block (benchmarks/bench_linear.py).

# A noise block is the batches of about this many users: one stream and one draw call per
# (run, block) keeps the Python overhead negligible, the block's draws small (runs × 512 × D numbers
# in-process), and a block is what a fleet hosts.
NOISE_BLOCK_USERS = 512


def batches_per_block(batch: int) -> int:
    return max(1, NOISE_BLOCK_USERS // batch)


def block_of(batch_index: int, batch: int) -> int:
    return batch_index // batches_per_block(batch)


def fleet_of(batch_index: int, batch: int, shards: int) -> int:
    """The fleet hosting the users of batch ``batch_index``: block k lives on fleet k mod N."""
    return block_of(batch_index, batch) % shards


class BlockStreams:
    """A party's draws for one run, a noise block at a time.

    ``draw(rng, shape)`` is the party's ``draw`` (a randomizer's or a shuffler's): what it draws
    depends only on the shape, so drawing the whole block, (batches_per_block, B, D), in one call is
    both cheap (one call per block instead of one per batch) and the definition of what batch m gets:
    row m − k·batches_per_block of block k. Any party asking for any batch, in any order (a restarted
    fleet), gets the same numbers.
    """

    def __init__(self, root: Callable[[int], np.random.Generator], batch: int, width: int,
                 draw: Callable[[np.random.Generator, tuple], object]):
        self.root = root
        self.per_block = batches_per_block(batch)
        self.shape = (self.per_block, batch, width)
        self.draw = draw
        self.block = -1
        self.noise = None

    def for_block(self, k: int):
        if k != self.block:
            self.block, self.noise = k, self.draw(self.root(k), self.shape)
        return self.noise

    def for_batch(self, m: int):
        k = m // self.per_block
        return _row(self.for_block(k), m - k * self.per_block, axis=0)


class StackedStreams:
    """Every run's :class:`BlockStreams`, as the in-process engine uses them: block k's draws of all
    runs stacked once, (R, batches_per_block, B, D), and batch m's (R, B, D) a view into them."""

    def __init__(self, runs: list[BlockStreams]):
        self.runs = runs
        self.per_block = runs[0].per_block
        self.block = -1
        self.noise = None
        self._last = None

    def for_batch(self, m: int):
        k = m // self.per_block
        if k != self.block:
            draws = [s.for_block(k) for s in self.runs]
            self.block, self.noise = k, _stack(draws)
        return _row(self.noise, m - k * self.per_block, axis=1)

    def rows(self, m: int, n: int):
        """Batches m … m + n − 1's draws, (R, n, B, D): the rows :meth:`for_batch` gives them, one
        block at a time (an array of draws, or P_Vec's tuple (uniforms, noise-bit counts) of them).
        The last answer is kept: a look-ahead's users ask again for (part of) what its oracle asked."""
        last = self._last
        if last is not None and last[0] <= m and m + n <= last[0] + _first(last[1]).shape[1]:
            return _cols(last[1], m - last[0], m - last[0] + n)
        self._last = (m, self._rows(m, n))
        return self._last[1]

    def _rows(self, m: int, n: int):
        parts = []
        while n > 0:
            k, off = divmod(m, self.per_block)
            take = min(n, self.per_block - off)
            if k != self.block:
                self.block, self.noise = k, _stack([s.for_block(k) for s in self.runs])
            parts.append(_cols(self.noise, off, off + take))
            m, n = m + take, n - take
        if len(parts) == 1:
            return parts[0]
        if isinstance(parts[0], tuple):
            return tuple(np.concatenate(p, axis=1) for p in zip(*parts))
        return np.concatenate(parts, axis=1)


def _first(noise) -> np.ndarray:
    return noise[0] if isinstance(noise, tuple) else noise


def _cols(noise, lo: int, hi: int):
    """Rows lo … hi − 1 (axis 1) of stacked draws: an array or a tuple of arrays."""
    if isinstance(noise, tuple):
        return tuple(part[:, lo:hi] for part in noise)
    return noise[:, lo:hi]


def _stack(draws: list):
    if draws[0] is None:
        return None
    if isinstance(draws[0], tuple):
        return tuple(np.stack(parts) for parts in zip(*draws))
    return np.stack(draws)


def _row(noise, i: int, axis: int):
    """Batch i's part of a block's draws (an array, a tuple of arrays, or None)."""
    if noise is None:
        return None
    if isinstance(noise, tuple):
        return tuple(np.take(part, i, axis=axis) for part in noise)
    return np.take(noise, i, axis=axis)


def user_noise(seed: int, label: str, run: int, batch: int, randomizer, width: int) -> BlockStreams:
    """Run ``run``'s users' randomizer draws (see the module docstring)."""
    return BlockStreams(lambda k: stream(seed, "linear-user-noise", label, run, k), batch, width,
                        lambda rng, shape: randomizer.draw(shape, rng))


def tree_noise(key: int, sigma: float, width: int) -> BlockStreams:
    """The trusted analyzer's tree-node noise for one run (one node per batch), from its own key."""
    return BlockStreams(lambda k: stream(key, "linear-tree", k), 1, width,
                        lambda rng, shape: grid_gaussian_noise(sigma, shape, rng))


def reused_noise(keys: list[int], sigma: float, width: int) -> Callable[[int], np.ndarray]:
    """:class:`ReusedTreeNoise`'s draw i of every run, (R, width), each run's from its own key."""
    return lambda i: np.stack([grid_gaussian_noise(sigma, (width,), stream(k, "linear-tree-reused", i)) for k in keys])
