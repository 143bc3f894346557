"""Hybrid-UCB (Algorithm 4) run fast and exactly: speculative execution of the leader's streaks.

Hybrid-UCB refreshes the pulled arm's private mean on every pull (eq. 34), so user t + 1's arm
depends on user t's reward and no cohort of users can be scored at once. But once t is large the
leader is pulled many times in a row (in setting 1 at T = 2^19, 93–99 % of rounds lie in streaks
of ≥ 16 pulls, at every ε), and while arm j is the only one pulled:

- every other arm's index depends on t alone (its μ̃, O and ⌊log2(O+1)⌋ are frozen), so it is one
  vector over the window's rounds;
- j's next W private means are a vector too: its rewards and the rounds' node-noise draws are
  pre-drawn per *round* (whoever is pulled), the leaf counts c0+1 … c0+W are consecutive, and
  insert c completes the node at level tz(c), merging the nodes completed at c − 2^lv, lv < tz(c)
  (the binary counter of :class:`~privbandit.families.private_online_learning.hybrid_ucb.HybridUCB.observe`).

So :func:`leader_streak` assumes j keeps winning for W rounds, computes all of it with numpy, finds
the first round j would lose under :meth:`HybridUCB.choose`'s rule (the lowest index wins ties),
and commits only the prefix before it. Windows never contain an array fill (``O_j`` reaching
``2^{r+1} − 1``); fills, streak starts and short streaks go through the learner's own
:meth:`~HybridUCB.observe`.

Exactness. Every float is computed with the same operations in the same order as the step loop:
true and noisy p-sums are accumulated level by level from level 0 up (as ``observe`` does), the
tree's running noisy sum is a left-to-right ``numpy.add.accumulate`` (sequential, unlike ``sum``),
the index is ``μ̃ + √(log2 t)·b1 + log2 t·b2`` evaluated elementwise (``u_i ≥ u_j`` as
``nextafter(u_i, ∞) > u_j``, exact for floats), ``log2 t`` equals ``math.log2(t)`` as in
``choose`` (:class:`_Log2Rounds`), and regret is the same running sum. So the pulls, the regret
curves and the learner's final state equal :func:`~privbandit.families.private_online_learning.hybrid_ucb.
run_hybrid_stepwise`'s bit for bit; the tests check that.
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.families.private_online_learning.hybrid_ucb import BONUS, HybridUCB
from privbandit.families.private_online_learning.mechanisms import refresh_count
from privbandit.protocol.spine.one_user import decided_windows

# A streak is handed to numpy once the step loop has seen the same arm win this many rounds in a
# row (a window costs tens of µs, a step a few µs, so one-round streaks stay in the step loop).
STREAK_TRIGGER = 6
FIRST_WINDOW = 256  # rounds; doubled after every window the leader wins through
MAX_WINDOW = 1 << 14


class _Log2Rounds:
    """log2 t for a block of rounds, equal to ``math.log2(t)`` (what :meth:`HybridUCB.choose` uses).

    numpy's vectorized ``log2`` is not promised to round like the C library's on every platform,
    so each t is checked against ``math.log2`` once per process; while they agree (they do on
    x86-64 glibc) later runs get numpy's speed, and at the first disagreement this falls back to
    ``math.log2`` for good.
    """

    def __init__(self, vectorized=np.log2):
        self.vectorized = vectorized
        self.checked = 0  # vectorized log2 equals math.log2 for every t ≤ checked
        self.numpy_ok = True

    def __call__(self, t0: int, n: int) -> np.ndarray:
        last = t0 + n - 1
        if self.numpy_ok and last <= self.checked:
            return self.vectorized(np.arange(t0, last + 1, dtype=np.float64))
        exact = np.fromiter(map(math.log2, range(t0, last + 1)), dtype=np.float64, count=n)
        if self.numpy_ok and t0 <= self.checked + 1:
            if np.array_equal(self.vectorized(np.arange(t0, last + 1, dtype=np.float64)), exact):
                self.checked = max(self.checked, last)
            else:
                self.numpy_ok = False
        return exact


log2_rounds = _Log2Rounds()


def _add_merged_nodes(acc: np.ndarray, src: np.ndarray, before: list[float], c0: int) -> None:
    """``acc[i] += value of each node that insert c = c0 + 1 + i merges``, lowest level first.

    Insert c merges, for every lv < tz(c), the level-lv node completed at insert c − 2^lv. Its
    value is ``src[c − 2^lv − c0 − 1]`` if that insert lies in the window, else ``before[lv]`` (the
    node is then still in S from before the window: at most the first merge of each level).
    The inserts merging level lv are those with c ≡ 0 mod 2^{lv+1}: one strided slice per level.
    """
    w = len(acc)
    lv = 0
    while True:
        half, step = 1 << lv, 2 << lv
        p0 = (-(c0 + 1)) % step  # first window position whose count is a multiple of 2^{lv+1}
        if p0 >= w:
            return
        n = (w - 1 - p0) // step + 1
        q0 = p0 - half
        if q0 < 0:
            acc[p0] += before[lv]
            if n > 1:
                acc[p0 + step :: step] += src[p0 + step - half :: step][: n - 1]
        else:
            acc[p0::step] += src[q0::step][:n]
        lv += 1


def leader_streak(h: HybridUCB, j: int, x: np.ndarray, node_noise: np.ndarray, lt: np.ndarray, slt: np.ndarray,
                  margin: float = 0.0) -> int:
    """Pull arm j at W = len(x) consecutive rounds for as long as it keeps winning; commit those.

    j has already won the window's first round. ``x``: j's rewards in the window's rounds;
    ``node_noise``: those rounds' unit grid steps of the node draws; ``lt``, ``slt``: log2 t and its
    square root. The window must end before j's array fills. Returns the pulls committed (≥ 1).
    ``margin``: j must win by more than this (:func:`decided_streak`; 0 is the learner's rule).
    """
    w = len(x)
    o0, c0, r = h.pulls[j], h.leaves[j], h.r[j]
    if o0 < 1 or o0 + w >= refresh_count(r):
        raise ValueError(f"arm {j}: a streak window of {w} from pull {o0} would cross its array fill")
    s = x.copy()  # true p-sum of the node each insert completes
    _add_merged_nodes(s, s, h.alpha[j], c0)
    g = h.node_grid[j]
    noisy = (np.rint(s / g) + node_noise) * g  # HybridUCB.observe's release, to the bit
    dropped = np.zeros(w)
    _add_merged_nodes(dropped, noisy, h.alpha_noisy[j], c0)
    tree = noisy - dropped
    tree[0] += h.tree_noisy[j]  # so the prefix sums are the running sum observe() keeps, to the bit
    tree = np.add.accumulate(tree)
    o = np.arange(o0 + 1, o0 + w + 1, dtype=np.float64)
    means = (h.arrays_noisy[j] + tree) / o
    b1 = np.sqrt(3.0 / o)
    b2 = BONUS * r / (o * h.epsilon)  # ⌊log2(O + 1)⌋ = r for every O inside tree r before its fill

    won = w
    if w > 1:  # round k ≥ 1 of the window sees j after k pulls, the others as they are
        lt1, slt1 = lt[1:], slt[1:]
        lead = means[:-1] + slt1 * b1[:-1] + lt1 * b2[:-1]
        if margin:
            lead -= margin
        others = slice(0, j), slice(j + 1, None)
        m, c1, c2 = (np.array(v[others[0]] + v[others[1]])[:, None] for v in (h.means, h.b1, h.b2))
        rivals = m + slt1 * c1 + lt1 * c2  # (K − 1, w − 1), the other arms in index order
        if j:  # a lower index wins a tie, so beating u needs more than u: the next float up
            rivals[:j] = np.nextafter(rivals[:j], np.inf)
        lose = np.maximum.reduce(rivals) > lead
        first = int(lose.argmax())  # the first True, or 0 if none
        if lose[first]:
            won = 1 + first

    k = won - 1
    ce = c0 + won
    h.pulls[j], h.leaves[j] = o0 + won, ce
    h.tree_noisy[j] = float(tree[k])
    h.means[j], h.b1[j], h.b2[j] = float(means[k]), float(b1[k]), float(b2[k])
    xs = x[:won].copy()
    xs[0] += h.array_sum[j]
    h.array_sum[j] = float(np.add.accumulate(xs)[-1])
    a, ah = h.alpha[j], h.alpha_noisy[j]
    # S after ce leaves is its set bits; above the highest bit where ce and c0 differ, S is as it was.
    for lv in range((ce ^ c0).bit_length()):
        if ce >> lv & 1:
            name = (ce >> lv) << lv
            if name > c0:  # completed inside the window (else it predates it and stays)
                a[lv], ah[lv] = float(s[name - c0 - 1]), float(noisy[name - c0 - 1])
        else:
            a[lv] = ah[lv] = 0.0
    return won


class HybridStreaks:
    """Decide Hybrid-UCB's arms for a block of rounds at once, exactly as one round at a time.

    ``decide(t0, xs, noise)`` takes the block's rewards of every arm ``xs`` (n, K) (what the trusted
    analyzer of the central model looks ahead at) and its (n, 2) unit grid steps (node, array), runs the
    leader's streaks through :func:`leader_streak` and everything else through the learner's own
    :meth:`~HybridUCB.choose`/:meth:`~HybridUCB.observe`, and returns the n arms. ``stats``: what
    bounds the run's time: ``windows`` (numpy windows), ``speculated`` (rounds computed in them),
    ``streak_rounds`` (rounds they committed) and ``step_rounds`` (rounds run by ``observe``)."""

    def __init__(self, learner: HybridUCB):
        self.learner = learner
        self.window = FIRST_WINDOW
        self.stats = {"windows": 0, "speculated": 0, "streak_rounds": 0, "step_rounds": 0}

    def decide(self, t: int, xs: np.ndarray, noise: np.ndarray) -> np.ndarray:
        learner, stats = self.learner, self.stats
        n = len(xs)
        node = np.ascontiguousarray(noise[:, 0])
        lt = log2_rounds(t, n)
        slt = np.sqrt(lt)
        arms = np.empty(n, dtype=np.int64)
        run_arm, run_len = -1, 0
        k = 0
        while k < n:
            j = learner.choose(t + k)
            if j == run_arm:
                run_len += 1
            else:
                run_arm, run_len, self.window = j, 1, FIRST_WINDOW
            if run_len >= STREAK_TRIGGER and t + k > learner.n_arms:
                w = min(self.window, refresh_count(learner.r[j]) - learner.pulls[j] - 1, n - k)
                if w >= 2:
                    won = leader_streak(learner, j, xs[k : k + w, j], node[k : k + w], lt[k : k + w], slt[k : k + w])
                    arms[k : k + won] = j
                    k += won
                    stats["windows"] += 1
                    stats["speculated"] += w
                    stats["streak_rounds"] += won
                    if won == w:
                        self.window = min(2 * self.window, MAX_WINDOW)
                    continue
            learner.observe(j, float(xs[k, j]), float(noise[k, 0]), float(noise[k, 1]))
            stats["step_rounds"] += 1
            arms[k] = j
            k += 1
        return arms


UNIT_ROUNDOFF = 2.0**-53
FIRST_DECIDED_WINDOW = 64


def decided_margin(h: HybridUCB, j: int, pulls: int, node_steps: float, lt: float) -> float:
    """How much arm j's index may fall short of the index it gets with rewards 0, over its next
    ``pulls`` pulls from state ``h``, through rounding alone (``node_steps``: the largest |unit grid
    step| of their node draws; ``lt``: the largest log2 t).

    Let R(x) be the index computed in real arithmetic from the block's released node values, each
    a float the learner computes as ``(rint(s / g) + L)·g`` from float sums s of rewards: every one
    of those operations is non-decreasing in each reward, so R is too, and R(x) ≥ R(0). The float
    index F differs from R only by the roundings of the tree's running sum (at most 4·pulls + 64
    additions in the block: a node, its dropped children, the running sum), of μ̃ = (F̃ + B̃)/O and
    of the index's two additions; what came before the block is the same floats either way. Every
    partial sum of the tree is, up to those roundings, its start B̃₀ less some of the nodes S held
    at the start plus at most 65 new nodes, each at most ``2(2·leaves + g·(1 + |L|))``: so at most
    ``M = 2(|B̃₀| + Σ|S₀| + 65·2(2·leaves + g(1 + |L|)))``, and with u = 2⁻⁵³
    ``|F − R| ≤ E = (4·pulls + 64)·u·M/O + 3u·(|F̃| + M)/O + 3u·(2(|F̃| + M)/O + bonus)``. So
    F(x) ≥ F(0) − 2E; the margin is 4E plus the rounding of subtracting it: generous on purpose,
    and still below 10⁻⁷ of the index over 5,000 pulls, so it shortens next to no block."""
    o = h.pulls[j] + 1
    leaves = h.leaves[j] + pulls
    fixed = abs(h.arrays_noisy[j])
    node = 2.0 * (2.0 * leaves + h.node_grid[j] * (1.0 + node_steps))
    m = 2.0 * (abs(h.tree_noisy[j]) + sum(map(abs, h.alpha_noisy[j])) + 65.0 * node)
    bonus = math.sqrt(lt) * h.b1[j] + lt * h.b2[j]  # b1, b2 only fall as j is pulled
    mean = 2.0 * (fixed + m) / o
    e = (4 * pulls + 64) * UNIT_ROUNDOFF * m / o + 3 * UNIT_ROUNDOFF * (fixed + m) / o \
        + 3 * UNIT_ROUNDOFF * (mean + bonus)
    return 4.0 * e + 4.0 * UNIT_ROUNDOFF * (mean + bonus)


def _wins_by(h: HybridUCB, j: int, t: int, margin: float) -> bool:
    """Whether j wins round t under :meth:`HybridUCB.choose`'s rule with its index less ``margin``."""
    lt = math.log2(t)
    slt = math.sqrt(lt)
    u = [m + slt * b1 + lt * b2 for m, b1, b2 in zip(h.means, h.b1, h.b2)]
    lead = u[j] - margin
    return max(u[:j], default=-math.inf) < lead and max(u[j + 1:], default=-math.inf) <= lead


def decided_streak(h: HybridUCB, t0: int, n: int, node_noise) -> int:
    """How many of users t0 … t0 + n − 1 (at least one) pull user t0's arm j whatever rewards in
    [0, 1] the earlier ones report: what the analyzer may plan before any of them reports.

    While only j is pulled, every other arm's index is a function of t alone, and j's is
    non-decreasing in each of its rewards up to rounding (:func:`decided_margin`). So j wins every
    round that it wins with rewards 0 by more than that margin: :func:`leader_streak` on a copy of
    the learner fed zeros, in windows that double from 64 rounds. A block ends before j's array
    fills (the fill's pull, with its array noise, starts the next). ``node_noise(t, n)``: the unit
    grid steps of rounds t … t + n − 1's node draws (the analyzer's, fixed before the plan)."""
    j = h.choose(t0)
    if t0 <= h.n_arms or h.pulls[j] < 1:
        return 1
    shadow = h.copy()
    steps = [0.0]  # the largest |node step| so far

    def window(k: int, m: int) -> int:
        cap = min(m, refresh_count(shadow.r[j]) - shadow.pulls[j] - 1)
        if cap < 1:
            return 0
        node = np.ascontiguousarray(node_noise(t0 + k, cap))
        steps[0] = max(steps[0], float(np.abs(node).max()))
        lt = log2_rounds(t0 + k, cap)
        margin = decided_margin(h, j, k + cap, steps[0], float(lt[-1]))
        if k and not _wins_by(shadow, j, t0 + k, margin):  # leader_streak takes its first round as won
            return 0
        return leader_streak(shadow, j, np.zeros(cap), node, lt, np.sqrt(lt), margin)

    return max(decided_windows(n, window, FIRST_DECIDED_WINDOW, MAX_WINDOW), 1)
