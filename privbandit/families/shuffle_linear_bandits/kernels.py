"""Compiled kernels of batched LinUCB (Algorithm 1, lines 4 and 13–16), R runs per call.

Every floating-point operation of the learner and of the users' arm choice happens here, in loops
with one fixed order (sums left to right; numba without ``fastmath`` lets the compiler neither
reassociate nor contract them). That order is the method's arithmetic, whichever driver calls it:
the analyzer's update over MQTT, the users' choice in their fleet, and the in-process look-ahead
(:func:`look_ahead`) that inlines the same functions all produce the same bits (the tests hold them
equal), and no BLAS library's choice of kernel enters but in the rare clipping below (numpy's matrix
products sum in an order that depends on the CPU OpenBLAS picks its kernel for).

- :func:`ucb_argmax`: line 4, a_t ∈ argmax ⟨φ_a, θ̂⟩ + β‖φ_a‖_{V⁻¹}, the first of equal scores.
- :func:`rank_one`: the non-private update with one user (Sherman–Morrison; V stays ⪰ λI).
- :func:`update`: lines 13–15, V_m += Ṽ, u_m += ũ, then V_m⁻¹ and θ̂_m = V_m⁻¹u_m from the Cholesky
  factor of V_m, if V_m − floor·I has one; a run without it is left for the caller's eigenvalue
  clipping (:meth:`~.learners.BatchedLinUCB.clip`, rare: numpy's ``eigh``).
- :func:`tree_changes`: the JDP tree's changes of a block of counts (:func:`.lookahead.tree_changes`).
- :func:`look_ahead`: the one-user batches of LinUCB, JDP and LDP, user after user, and
  :func:`batch_ahead`: LinUCB-SDP-Amp's and LinUCB-SDP-Vec's batches, batch after batch (see
  :mod:`.lookahead`).

The kernels compile on first use (a few seconds) and are cached beside this file (numba's
``cache=True``; ``NUMBA_CACHE_DIR`` moves the cache where the package directory is read-only).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

LINUCB, ADDITIVE = 0, 1  # look_ahead's kinds: rank-one (non-private), table + per-user draws (JDP, LDP)


def arm_table(arms: np.ndarray) -> np.ndarray:
    """The coefficients of every arm's score, (R, P, K), P = d + d(d+1)/2: φ_i (rows 0 … d − 1), then
    φ_i² and 2φ_iφ_j (i < j) in the upper triangle's row-major order, so that
    ⟨φ, θ̂⟩ = Σ_i φ_i θ̂_i and ‖φ‖²_{V⁻¹} = Σ_{i≤j} c_ij (V⁻¹)_ij (V⁻¹ symmetric). Arms run along the
    last axis: the kernel's inner loops go over arms, one multiply-add per arm, which the compiler
    vectorizes without reordering any arm's sum."""
    r, k, d = arms.shape
    iu, ju = np.triu_indices(d)
    pairs = arms[..., iu] * arms[..., ju] * np.where(iu == ju, 1.0, 2.0)
    return np.ascontiguousarray(np.concatenate([arms, pairs], axis=-1).transpose(0, 2, 1), dtype=np.float64)


@njit(cache=True, nogil=True)
def _accumulate(table, lo, hi, coef, acc):
    """acc[k] = (((0 + table[lo, k]·coef[lo]) + table[lo + 1, k]·coef[lo + 1]) + …) over rows lo … hi − 1:
    each arm's sum left to right, as one row per pass adds it, but four rows per pass over the arms
    (each pass loads and stores ``acc`` once: with one row per pass those loads and stores, not the
    arithmetic, bounded the loop)."""
    n = table.shape[1]
    for k in range(n):
        acc[k] = 0.0
    p = lo
    while p + 4 <= hi:
        r0, r1, r2, r3 = table[p], table[p + 1], table[p + 2], table[p + 3]
        c0, c1, c2, c3 = coef[p], coef[p + 1], coef[p + 2], coef[p + 3]
        for k in range(n):
            acc[k] = (((acc[k] + r0[k] * c0) + r1[k] * c1) + r2[k] * c2) + r3[k] * c3
        p += 4
    while p < hi:
        r0, c0 = table[p], coef[p]
        for k in range(n):
            acc[k] = acc[k] + r0[k] * c0
        p += 1


@njit(cache=True, nogil=True)
def _argmax(table, theta, v_inv, beta, mean, quad, coef):
    """One run: the first arm of the largest ⟨φ, θ̂⟩ + β√max(‖φ‖²_{V⁻¹}, 0) (``table`` (P, K) from
    :func:`arm_table`; ``mean`` and ``quad`` (K,), ``coef`` (P,) scratch: θ̂, then upper(V⁻¹) in
    the table's row order)."""
    k_arms = table.shape[1]
    d = theta.shape[0]
    p = d
    for i in range(d):
        coef[i] = theta[i]
        for j in range(i, d):
            coef[p] = v_inv[i, j]
            p += 1
    _accumulate(table, 0, d, coef, mean)
    _accumulate(table, d, table.shape[0], coef, quad)
    best = -math.inf
    arg = 0
    for k in range(k_arms):
        score = mean[k] + beta * math.sqrt(max(quad[k], 0.0))
        if score > best:
            best = score
            arg = k
    return arg


@njit(cache=True, nogil=True)
def ucb_argmax(table, theta, v_inv, beta, out):
    """Line 4 for R runs: ``table`` (R, P, K) (:func:`arm_table`), θ̂ (R, d), V⁻¹ (R, d, d), β (R,)
    → ``out`` (R,) int64."""
    mean = np.empty(table.shape[2])
    quad = np.empty(table.shape[2])
    coef = np.empty(table.shape[1])
    for r in range(table.shape[0]):
        out[r] = _argmax(table[r], theta[r], v_inv[r], beta[r], mean, quad, coef)


@njit(cache=True, nogil=True)
def _theta(v_inv, u, theta):
    d = u.shape[0]
    for i in range(d):
        acc = 0.0
        for j in range(d):
            acc += v_inv[i, j] * u[j]
        theta[i] = acc


@njit(cache=True, nogil=True)
def thetas(v_inv, u, theta):
    """θ̂ = V⁻¹u for R runs (the clipped runs' θ̂, in the kernels' order)."""
    for r in range(u.shape[0]):
        _theta(v_inv[r], u[r], theta[r])


@njit(cache=True, nogil=True)
def _rank_one(u, V, v_inv, theta, x, y, vx):
    """u += φy, V += φφᵀ, V⁻¹ −= (V⁻¹φ)(V⁻¹φ)ᵀ / (1 + φᵀV⁻¹φ), θ̂ = V⁻¹u (one run; ``vx`` scratch)."""
    d = x.shape[0]
    for i in range(d):
        u[i] += x[i] * y
        for j in range(d):
            V[i, j] += x[i] * x[j]
    den = 1.0
    for i in range(d):
        acc = 0.0
        for j in range(d):
            acc += v_inv[i, j] * x[j]
        vx[i] = acc
        den += acc * x[i]
    for i in range(d):
        for j in range(d):
            v_inv[i, j] -= vx[i] * vx[j] / den
    _theta(v_inv, u, theta)


@njit(cache=True, nogil=True)
def rank_one(u, V, v_inv, theta, x, y):
    """The non-private one-user update for R runs: φ (R, d), y (R,)."""
    vx = np.empty(x.shape[1])
    for r in range(x.shape[0]):
        _rank_one(u[r], V[r], v_inv[r], theta[r], x[r], y[r], vx)


@njit(cache=True, nogil=True)
def _cholesky(a, shift, low):
    """The lower Cholesky factor of a − shift·I into ``low``; False if a pivot is not > 0 (or NaN)."""
    d = a.shape[0]
    for j in range(d):
        acc = a[j, j] - shift
        for k in range(j):
            acc -= low[j, k] * low[j, k]
        if not acc > 0.0:
            return False
        piv = math.sqrt(acc)
        low[j, j] = piv
        for i in range(j + 1, d):
            s = a[i, j]
            for k in range(j):
                s -= low[i, k] * low[j, k]
            low[i, j] = s / piv
        for i in range(j):
            low[i, j] = 0.0
    return True


@njit(cache=True, nogil=True)
def _inverse(low, inv, work):
    """(L Lᵀ)⁻¹ = L⁻ᵀ L⁻¹ from the factor ``low``, exactly symmetric (``work`` scratch (d, d))."""
    d = low.shape[0]
    for j in range(d):  # work = L⁻¹, lower triangular, column by column
        for i in range(d):
            work[i, j] = 0.0
        work[j, j] = 1.0 / low[j, j]
        for i in range(j + 1, d):
            acc = 0.0
            for k in range(j, i):
                acc -= low[i, k] * work[k, j]
            work[i, j] = acc / low[i, i]
    for i in range(d):
        for j in range(i + 1):
            acc = 0.0
            for k in range(i, d):
                acc += work[k, i] * work[k, j]
            inv[i, j] = acc
            inv[j, i] = acc


@njit(cache=True, nogil=True)
def _update(u, V, v_inv, theta, u_inc, v_inc, floor, low, work):
    """Lines 13–15 for one run; False (u, V updated, V⁻¹ and θ̂ not) if V − floor·I has no factor."""
    d = u.shape[0]
    for i in range(d):
        u[i] += u_inc[i]
        for j in range(d):
            V[i, j] += v_inc[i, j]
    if not _cholesky(V, floor, low) or not _cholesky(V, 0.0, low):
        return False
    _inverse(low, v_inv, work)
    _theta(v_inv, u, theta)
    return True


@njit(cache=True, nogil=True)
def update(u, V, v_inv, theta, u_inc, v_inc, floor, ok):
    """Lines 13–15 for R runs: ũ (R, d), Ṽ (R, d, d); ``ok`` (R,) bool: V⁻¹ and θ̂ set."""
    d = u.shape[1]
    low = np.empty((d, d))
    work = np.empty((d, d))
    for r in range(u.shape[0]):
        ok[r] = _update(u[r], V[r], v_inv[r], theta[r], u_inc[r], v_inc[r], floor, low, work)


@njit(cache=True, nogil=True)
def _learn_entries(u, V, v_inv, theta, inc, mirror, floor, u_inc, v_inc, low, work):
    """:func:`_update` from one decoded entries vector [ũ, upper(Ṽ)] (one run): ũ its first d, Ṽ the
    ``mirror`` gather (:func:`~.mechanisms.split_entries`)."""
    d = u.shape[0]
    for p in range(d):
        u_inc[p] = inc[p]
        for q in range(d):
            v_inc[p, q] = inc[mirror[p, q]]
    return _update(u, V, v_inv, theta, u_inc, v_inc, floor, low, work)


@njit(cache=True, nogil=True)
def tree_changes(c0, fresh, live, present, change):
    """The tree's changes of counts c0 … c0 + n − 1 into ``change`` (R, n, D): count c's is its fresh
    node ``fresh[:, c − c0]`` minus the nodes its t trailing ones merge, opened at counts c − 1, c − 2,
    c − 4, …, c − 2^(t−1), subtracted in that order (:meth:`~.mechanisms.TreeAggregator.step`'s
    order): a node opened inside the block is that count's fresh draw, one opened before it the tree's
    live node of its level, ``live[j]`` (``present[j]``: the tree holds one). False if a count needs a
    level the tree does not hold (``change`` then incomplete)."""
    n_runs, n, width = fresh.shape
    for i in range(n):
        for r in range(n_runs):
            for e in range(width):
                change[r, i, e] = fresh[r, i, e]
        c = c0 + i
        j = 0
        while c & 1:
            src = i - (1 << j)
            if src >= 0:
                for r in range(n_runs):
                    for e in range(width):
                        change[r, i, e] -= fresh[r, src, e]
            else:
                if j >= live.shape[0] or not present[j]:
                    return False
                for r in range(n_runs):
                    for e in range(width):
                        change[r, i, e] -= live[j, r, e]
            c >>= 1
            j += 1
    return True


@njit(cache=True, nogil=True)
def look_ahead(kind, start, end, arms, scores, rewards, betas, u, V, v_inv, theta, table, draws, plus_zero, mirror,
               floor, chosen, ys, values, pending):
    """Users start … end − 1 of a look-ahead block, user after user, each run's arm (line 4) then its
    update, until a run's V − floor·I has no Cholesky factor: returns that user's index (``pending``
    marks the runs the caller must clip before calling again from the next user), or ``end``.

    ``arms`` (R, K, d) and ``scores`` their :func:`arm_table`; ``rewards`` (R, n, K) bool; ``betas``
    (n,) the β of each user's decision. ``kind`` LINUCB: the report is (φ, y) and the update
    :func:`_rank_one`. ``kind`` ADDITIVE: the decoded report is ``table[r, a, y] + draws[r, i]``
    (JDP: the looked-up entries plus the tree's change; LDP: the entries plus the user's noise, stored
    in ``values``, then + 0.0 as the sum over one report adds), learned by :func:`_learn_entries`."""
    n_runs, d, width = rewards.shape[0], u.shape[1], table.shape[3]
    mean, quad, coef = np.empty(scores.shape[2]), np.empty(scores.shape[2]), np.empty(scores.shape[1])
    vx, u_inc, low, work, v_inc = np.empty(d), np.empty(d), np.empty((d, d)), np.empty((d, d)), np.empty((d, d))
    inc = np.empty(width)
    for i in range(start, end):
        stop = False
        for r in range(n_runs):
            a = _argmax(scores[r], theta[r], v_inv[r], betas[i], mean, quad, coef)
            y = 1 if rewards[r, i, a] else 0
            chosen[r, i] = a
            ys[r, i] = y
            if kind == LINUCB:
                _rank_one(u[r], V[r], v_inv[r], theta[r], arms[r, a], float(y), vx)
                continue
            for e in range(width):
                inc[e] = table[r, a, y, e] + draws[r, i, e]
            if plus_zero:
                for e in range(width):
                    values[r, i, e] = inc[e]
                    inc[e] = inc[e] + 0.0
            if not _learn_entries(u[r], V[r], v_inv[r], theta[r], inc, mirror, floor, u_inc, v_inc, low, work):
                pending[r] = True
                stop = True
        if stop:
            return i
    return end


@njit(cache=True, nogil=True)
def batch_ahead(start, end, batch, scores, rewards, betas, u, V, v_inv, theta, vec, table, draws, floors, fracs,
                uniforms, ones, centre, scale, shift, mirror, floor, chosen, values, totals, estimates, pending):
    """Batches start … end − 1 of ``batch`` users each, batch after batch (the look-ahead of
    LinUCB-SDP-Amp, and of LinUCB-SDP-Vec if ``vec``): each run's arm for the batch (line 4, every
    user of a batch has the same context), its users' reports summed into the batch's estimate
    ``estimates`` (R, n, D), then lines 13–15, until a run's V − floor·I has no Cholesky factor:
    returns that batch's index (``pending`` marks the runs to clip), or ``end``.

    SDP-Amp: the reports ``table[r, a, y] + draws[r, i]`` into ``values`` (R, n·B, D), summed left
    to right. They are grid values whose every partial sum the caller has bounded below 2³³, so each
    sum is exact: the same double in this order as in the analyzer's sorted order.

    SDP-Vec: each user's counts (Algorithm 5, :meth:`~.mechanisms.BitSumRandomizer.apply`: ⌊w⌋ from
    ``floors[r, a, y]``, + 1 where her uniform is below the fraction ``fracs[r, a, y]``, + her noise
    bits' count ``ones``), their per-label total (Algorithm 6, int64, exact in any order) into
    ``totals`` (R, n, D), its decoding (Algorithm 7, :meth:`~.mechanisms.BitSumAnalyzer.analyze`:
    ``scale·(total − centre) − shift``, centre = p·b·B and shift = B·Δ as the analyzer computes them)
    the estimate. The arrays of the other kind are not read (any shape)."""
    n_runs, d, width = rewards.shape[0], u.shape[1], estimates.shape[2]
    mean, quad, coef = np.empty(scores.shape[2]), np.empty(scores.shape[2]), np.empty(scores.shape[1])
    u_inc, low, work, v_inc = np.empty(d), np.empty((d, d)), np.empty((d, d)), np.empty((d, d))
    acc = np.empty(width)
    counts = np.empty(width, dtype=np.int64)
    for j in range(start, end):
        stop = False
        for r in range(n_runs):
            a = _argmax(scores[r], theta[r], v_inv[r], betas[j], mean, quad, coef)
            chosen[r, j] = a
            for e in range(width):
                acc[e] = 0.0
                counts[e] = 0
            for b in range(batch):
                i = j * batch + b
                y = 1 if rewards[r, i, a] else 0
                if vec:
                    for e in range(width):
                        counts[e] += floors[r, a, y, e] + (1 if uniforms[r, i, e] < fracs[r, a, y, e] else 0) \
                            + ones[r, i, e]
                else:
                    for e in range(width):
                        v = table[r, a, y, e] + draws[r, i, e]
                        values[r, i, e] = v
                        acc[e] += v
            if vec:
                for e in range(width):
                    totals[r, j, e] = counts[e]
                    acc[e] = scale * (float(counts[e]) - centre) - shift
            for e in range(width):
                estimates[r, j, e] = acc[e]
            if not _learn_entries(u[r], V[r], v_inv[r], theta[r], acc, mirror, floor, u_inc, v_inc, low, work):
                pending[r] = True
                stop = True
        if stop:
            return j
    return end
