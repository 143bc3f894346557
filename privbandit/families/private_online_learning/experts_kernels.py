"""The compiled steps of :mod:`.experts`: user t's action under FTL (kind 0) or Hedge (kind 1) from
the sums of the vectors so far (:func:`choose`), and a block of users one after another (:func:`run`).
Kept apart so that loading the online family does not import numba."""

from __future__ import annotations

import math

from numba import njit


@njit(cache=True)
def choose(kind, sums, eta, u):
    k = sums.size
    best = 0
    for j in range(1, k):
        if sums[j] > sums[best]:
            best = j
    if kind == 0:
        return best
    top = sums[best]
    total = 0.0
    for j in range(k):  # weights relative to the leader's, so no exponent overflows
        total += math.exp(eta * (sums[j] - top))
    acc, target = 0.0, u * total
    for j in range(k):
        acc += math.exp(eta * (sums[j] - top))
        if target < acc:
            return j
    return k - 1


@njit(cache=True)
def run(kind, vectors, sums, eta, uniforms, arms):
    for i in range(vectors.shape[0]):
        arms[i] = choose(kind, sums, eta, uniforms[i])
        for j in range(sums.size):
            sums[j] += vectors[i, j]
