"""The compiled steps of :mod:`.sequential`'s index policies: user t's arm (:func:`choose`), her
report entering the arms' statistics (:func:`observe`), and a looked-ahead block of users
(:func:`run_block`). Kept apart so that loading the MAB family does not import numba."""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def noise_bound(scales_squared, largest, tail):
    nu = max(math.sqrt(scales_squared), largest * math.sqrt(tail))
    return nu * math.sqrt(8.0 * tail)


@njit(cache=True)
def grid(scale):
    """``grid_step(scale)``: g = b′γ with b′ = b/(1 − bγ) (grid_laplace.py)."""
    return scale / (1.0 - scale * 9.5367431640625e-07) * 9.5367431640625e-07


@njit(cache=True)
def popcount(x):
    c = 0
    while x:
        x &= x - 1
        c += 1
    return c


@njit(cache=True)
def choose(kind, t, pulls, est, opened, normals, params):
    """User t's arm (t ≥ 1, 1-based). ``est``: each arm's (noisy) sum; ``opened``: the hybrid
    counter's open block r per arm; ``normals``: Thompson sampling's K standard normals for round t;
    ``params``: (ε, tree scale L/ε, grid Laplace scale b of a local report). Kind 5 (DP-UCB) is
    UCB1's index on the hybrid counter's noisy mean: no branch of its own below."""
    k = pulls.size
    if t <= k:
        return t - 1
    lt = math.log(t)
    tail = math.log(2.0) + 4.0 * lt  # ln(2/γ) at γ = t⁻⁴
    best, best_u = 0, -math.inf
    for j in range(k):
        n = pulls[j]
        mean = est[j] / n
        if kind == 1:
            u = mean + normals[j] / math.sqrt(n + 1.0)
        elif kind == 4:
            b = params[2]
            nu2 = 0.25 + 4.0 * b * b
            u = mean + max(math.sqrt(2.0 * nu2 * tail / n), 2.0 * math.sqrt(2.0) * b * tail / n)
        else:
            u = mean + math.sqrt(2.0 * lt / n)
            if kind == 2:
                b = params[1]
                u += noise_bound(popcount(n) * b * b, b, tail) / n
            elif kind == 3:
                r = opened[j]
                ba, bt = 2.0 / params[0], 2.0 * (r + 1) / params[0]
                nodes = popcount(n - ((1 << r) - 1))
                u += noise_bound(r * ba * ba + nodes * bt * bt, bt if nodes else ba, tail) / n
        if u > best_u:
            best, best_u = j, u
    return best


@njit(cache=True)
def tree_insert(j, x, leaves, alpha, alpha_noisy, tree_noisy, g, step):
    """Insert leaf x into arm j's binary counter: the insert completes one node, at level tz(c), whose
    true p-sum is x plus the nodes below it; they leave the released set, the new node joins it with
    its noise (one unit grid step ``step`` at grid ``g``). Returns the change of the noisy prefix."""
    c = leaves[j] + 1
    leaves[j] = c
    level = 0
    while not (c >> level) & 1:
        level += 1
    s, dropped = x, 0.0
    for lv in range(level):
        s += alpha[j, lv]
        dropped += alpha_noisy[j, lv]
        alpha[j, lv] = 0.0
        alpha_noisy[j, lv] = 0.0
    noisy = (np.rint(s / g) + step) * g
    alpha[j, level] = s
    alpha_noisy[j, level] = noisy
    tree_noisy[j] += noisy - dropped
    return noisy - dropped


@njit(cache=True)
def observe(kind, j, x, pulls, est, opened, leaves, alpha, alpha_noisy, tree_noisy, block_sum, blocks_noisy,
             steps, params):
    """Arm j's report x (a reward, or a local report) enters its statistic; ``steps``: the round's
    two unit grid steps (node, block)."""
    if kind <= 1 or kind == 4:  # exact sum (non-private), or the sum of local reports
        est[j] += x
        pulls[j] += 1
        return
    if kind == 2:  # one binary counter over the whole stream, Lap(L/ε) per node
        tree_insert(j, x, leaves, alpha, alpha_noisy, tree_noisy, grid(params[1]), steps[0])
        pulls[j] += 1
        est[j] = tree_noisy[j]
        return
    # kinds 3 and 5: the hybrid counter. Block 0 is the first pull alone; block r ≥ 1 holds pulls
    # 2^r … 2^{r+1} − 1, released whole at its end with Lap(2/ε), with a tree inside it meanwhile.
    ga = grid(2.0 / params[0])
    if pulls[j] == 0:
        blocks_noisy[j] = (np.rint(x / ga) + steps[1]) * ga
        pulls[j] = 1
        opened[j] = 1
        leaves[j] = 0
        tree_noisy[j] = 0.0
        block_sum[j] = 0.0
        est[j] = blocks_noisy[j]
        return
    r = opened[j]
    tree_insert(j, x, leaves, alpha, alpha_noisy, tree_noisy, grid(2.0 * (r + 1) / params[0]), steps[0])
    block_sum[j] += x
    pulls[j] += 1
    if pulls[j] == (1 << (r + 1)) - 1:  # the block is full: its sum is released, a new tree opens
        blocks_noisy[j] += (np.rint(block_sum[j] / ga) + steps[1]) * ga
        for lv in range(alpha.shape[1]):
            alpha[j, lv] = 0.0
            alpha_noisy[j, lv] = 0.0
        opened[j] = r + 1
        leaves[j] = 0
        tree_noisy[j] = 0.0
        block_sum[j] = 0.0
    est[j] = blocks_noisy[j] + tree_noisy[j]


@njit(cache=True)
def run_block(kind, t0, candidates, normals, steps, pulls, est, opened, leaves, alpha, alpha_noisy, tree_noisy,
               block_sum, blocks_noisy, params, arms, reports):
    """Users t0 … t0 + n − 1 one after another, looking ahead: ``candidates[i, j]`` is what user
    t0 + i reports if she pulls j. Fills ``arms`` and ``reports``."""
    for i in range(candidates.shape[0]):
        j = choose(kind, t0 + i, pulls, est, opened, normals[i], params)
        x = candidates[i, j]
        arms[i] = j
        reports[i] = x
        observe(kind, j, x, pulls, est, opened, leaves, alpha, alpha_noisy, tree_noisy, block_sum, blocks_noisy,
                 steps[i], params)
