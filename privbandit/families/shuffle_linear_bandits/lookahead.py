"""The in-process look-ahead of the one-user-batch learners (LinUCB, LinUCB-JDP, LinUCB-LDP; B = 1):
Algorithm 1's loop, lines 4–16, for a block of users in one tight loop, exactly as one plan per user.

With B = 1 every user's arm depends on the previous user's report, so no two users can be decided
together; what a plan per user costs (the plan, its round, the intermediary's admission, the
release and its checks, the users' block, the observer's truth) is the cost of a round. In-process
the analyzer may instead look ahead into what the users would report (the users' ``oracle``: their
reward from every arm and their randomizer's draws) and step the learner itself.

"Exactly" is bit for bit: every number is computed by the same floating-point operations, on the
same operands, in the same order as :class:`~.learners.BatchedLinUCB` and
:class:`~.parties.LinearServer` do for a one-user release (the tests and the reference runs hold the
two drivers equal). What changes is only the way there:

- a user's report and its entries are looked up in tables built once per arm and reward (x·y,
  xxᵀ, [φy, upper(φφᵀ)] are elementwise products: the same bits whenever they are computed);
- a sum over one report is x + 0.0 (numpy's reduction starts from its identity, 0.0: −0.0 becomes
  0.0, as there), and the mirror of the upper triangle is a gather;
- numpy's linear-algebra kernels are called without their Python wrappers (the same gufuncs,
  :mod:`numpy.linalg`'s own), the Cholesky test reading the kernel's NaN instead of an exception;
- the widths use preallocated outputs (the same matmul kernels, the same elementwise operations);
- JDP's tree changes, which do not depend on the arms, come for the whole block at once
  (:func:`tree_changes`: per count, the same subtractions in the same order as the tree's step).

The loop itself is per user, in Python: with B = 1 that is Algorithm 1 (each user's arm is a function
of every earlier report), and deciding several users per kernel call by speculating on their arms
fails at about every second user on the paper's instance (the chosen arm changes that often).

A V_m that fails the Cholesky test (the non-PD safeguard, rare) goes through
:meth:`~.learners.BatchedLinUCB.update` itself.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits.learners import Widths, _einsum, _inv, _pd
from privbandit.protocol.primitives.noise.grid_gaussian import to_grid


class LookAhead:
    """One task's look-ahead: the per-arm tables of its runs' fixed arms (R, K, d)."""

    def __init__(self, kind: str, arms: np.ndarray, outer: np.ndarray):
        self.kind = kind
        self.arms = arms
        self.outer = outer
        r, k, d = arms.shape
        self.runs = r
        self.d = d
        y = np.array([0.0, 1.0])[None, None, :, None]
        x = np.broadcast_to(arms[:, :, None, :], (r, k, 2, d))
        ys = np.broadcast_to(y[..., 0], (r, k, 2))
        # [run, arm, reward]: what a user reports and what the analyzer decodes from it
        self.raw = np.concatenate([x, ys[..., None]], axis=-1)  # (φ, y), as the users concatenate it
        self.xy = arms[:, :, None, :] * y  # φ·y, as update_rank_one multiplies it
        self.xx = arms[..., :, None] * arms[..., None, :]  # φφᵀ
        # [φy, upper(φφᵀ)] on the grid, as the Gaussian randomizer and the tree round them (rounding is
        # idempotent: the users' and the analyzer's own rounding of these gives the same bits)
        self.entries = to_grid(slb.user_entries(x, ys))
        self.decoded = self.entries + 0.0  # JDP: the analyzer's sum over the one report
        self.mirror = slb.mirror_indices(d)  # entries index of V[i, j]
        self.decoded_v = self.decoded[..., self.mirror]  # its matrix part, mirrored (a gather: same bits)
        self.widths = Widths(arms, outer)

    def _arms(self, theta: np.ndarray, v_inv: np.ndarray, beta: float):
        """Line 4 (:func:`~.learners.ucb_actions`): argmax ⟨φ, θ̂⟩ + β‖φ‖_{V⁻¹} per run."""
        mu = self.widths.scores(theta, v_inv, beta)
        if self.runs == 1:
            return int(mu[0, :, 0].argmax())
        return mu[:, :, 0].argmax(axis=1)

    def decide(self, learner, rewards: np.ndarray, noise: np.ndarray | None, tree=None,
               tree_noise: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, str | None]:
        """Serve the block's n users in order: (their arms (R, n), their reports (R, n, width), the
        first release's tree lane or None). ``rewards`` (R, n, K, bool) and ``noise`` (R, n, D) the
        users' (oracle), ``tree_noise`` (R, n, D) the JDP analyzer's node draws for these batches."""
        r, n = rewards.shape[:2]
        d, kind = self.d, self.kind
        single = r == 1
        sel = slice(None) if single else np.arange(r)
        width = self.raw.shape[-1] if kind in ("linucb", "linucb-jdp") else self.entries.shape[-1]
        chosen = np.empty((r, n), dtype=np.int64)
        values = np.empty((r, n, width))
        lane = None
        floor_eye = learner.floor * np.eye(d)
        L = learner
        beta_fn, decide_arm = L.beta_fn, self._arms
        raw, xy, xx, arms, entries, decoded, mirror = (self.raw, self.xy, self.xx, self.arms, self.entries,
                                                       self.decoded, self.mirror)
        add, matmul = np.add, np.matmul
        ys = np.empty((r, n), dtype=np.intp)
        if kind == "linucb-jdp":  # the tree's releases do not depend on the arms: all n at once
            lane = f"level-{tree.level()}"
            change = tree_changes(tree, tree_noise)
            change_v = change[..., mirror]
            decoded_v = self.decoded_v
        with np.errstate(invalid="ignore"):  # the Cholesky test reads NaN, not a warning
            for i in range(n):
                a = decide_arm(L.theta, L.v_inv, L.beta)
                y = int(rewards[0, i, a]) if single else rewards[sel, i, a].astype(np.intp)
                chosen[:, i] = a
                ys[:, i] = y
                if kind == "linucb":  # update_rank_one (Sherman–Morrison), operation for operation
                    x = arms[sel, a]
                    L.u += xy[sel, a, y]  # (V, which no decision reads, is summed after the loop)
                    v_inv = L.v_inv
                    vx = _einsum("rde,re->rd", v_inv, x)
                    v_inv -= vx[:, :, None] * vx[:, None, :] / (1.0 + np.add.reduce(vx * x, axis=-1))[:, None, None]
                    L.theta = _einsum("rde,re->rd", v_inv, L.u)
                    L.t += 1
                    L.beta = beta_fn(L.t)
                    continue
                if kind == "linucb-jdp":  # TreeAggregator.step: raw sum + change, then split
                    u_inc = add(decoded[sel, a, y], change[:, i])[:, :d]
                    v_inc = add(decoded_v[sel, a, y], change_v[:, i])
                else:  # LDP: the noised entries, summed over the one report
                    estimate = add(entries[sel, a, y], noise[:, i], out=values[:, i]) + 0.0
                    u_inc = estimate[:, :d]
                    v_inc = estimate[:, mirror]
                V = L.V + v_inc
                if not _pd(V - floor_eye):  # the safeguard's branch: BatchedLinUCB.update itself
                    L.update(u_inc, v_inc, 1)
                    continue
                L.u += u_inc
                L.V = V
                L.t += 1
                L.lambda_min = None
                v_inv = L.v_inv = _inv(V)
                L.theta = matmul(v_inv, L.u[:, :, None])[:, :, 0]
                L.beta = beta_fn(L.t)
        if kind != "linucb-ldp":
            values[:] = raw[np.arange(r)[:, None], chosen, ys]
        if kind == "linucb":  # V += φφᵀ user after user: a running sum, added in the same order
            steps = np.concatenate([L.V[None], np.moveaxis(xx[np.arange(r)[:, None], chosen], 1, 0)])
            L.V = np.add.accumulate(steps, axis=0)[-1]
        return chosen, values, lane


def tree_changes(tree, fresh: np.ndarray) -> np.ndarray:
    """:meth:`~.mechanisms.TreeAggregator.step`'s changes of the next n counts at once, ``fresh``
    (R, n, D) their new nodes' noise; leaves the tree as n steps would.

    Count c merges the nodes of its t trailing ones, opened at counts c − 1, c − 2, c − 4, …,
    c − 2^(t−1) (nodes opened before the first of these counts are the tree's live ones): its change
    is fresh_c − node_0 − node_1 − …, subtracted in that order, as the step does, here for every
    count with at least j + 1 trailing ones at the j-th subtraction."""
    r, n, width = fresh.shape
    c0 = tree.count
    counts = c0 + np.arange(n)
    ones = np.zeros(n, dtype=np.int64)  # trailing ones of each count
    c = counts.copy()
    while (odd := (c & 1) == 1).any():
        ones += odd
        c = np.where(odd, c >> 1, 0)
    change = fresh.copy()
    for j in range(int(ones.max()) if n else 0):
        at = np.flatnonzero(ones > j)
        src = counts[at] - (1 << j) - c0
        inside = src >= 0
        node = np.empty((r, at.size, width))
        node[:, inside] = fresh[:, src[inside]]
        if not inside.all():
            node[:, ~inside] = tree.nodes[j][:, None, :]
        change[:, at] -= node
    end = c0 + n
    levels = max(len(tree.nodes), int(ones.max()) + 1 if n else 0)
    nodes = []
    for j in range(levels):
        if not (end >> j) & 1:
            nodes.append(None)
            continue
        opened = ((end >> (j + 1)) << (j + 1)) + (1 << j) - 1  # the count whose step opened it
        nodes.append(fresh[:, opened - c0] if opened >= c0 else tree.nodes[j])
    tree.nodes, tree.count = nodes, end
    return change
