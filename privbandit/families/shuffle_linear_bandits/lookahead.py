"""The in-process look-ahead: Algorithm 1's loop, lines 4–16, for a block of batches in one compiled
loop, exactly as one plan per batch. For the one-user-batch learners (LinUCB, LinUCB-JDP,
LinUCB-LDP; B = 1) and for LinUCB-SDP-Amp and LinUCB-SDP-Vec (any B).

With B = 1 every user's arm depends on the previous user's report, and with any B every batch's arm
on the previous batch's release, so no two batches can be decided together; what a plan per batch
costs (the plan, its round, the intermediary's admission, the release and its checks, the users'
block, the observer's truth) is the cost of a round. In-process the analyzer may instead look ahead
into what the users would report (the users' ``oracle``: their reward from every arm and their
randomizer's draws) and step the learner itself. SDP-Amp's block is one round whose shuffle permutes
each batch on its own (``Round.segment``), so the analyzer receives what one round per batch gives,
and checks each batch's sum. SDP-Vec's block is one round whose ``sum`` releases each batch's
per-label totals on their own (``Round.segment``): what one round per batch gives the analyzer, and
no more.

"Exactly" is bit for bit: the loop is :func:`.kernels.look_ahead` (B = 1) or
:func:`.kernels.batch_ahead` (SDP-Amp; SDP-Vec: the users' counts from per-arm tables of ⌊w⌋ and
w − ⌊w⌋, their integer totals, Algorithm 7's decoding), which call
the kernels :class:`~.learners.BatchedLinUCB` and the users' arm choice call for a release of their
own (the tests and the reference runs hold the two drivers equal). What changes is only the way
there:

- a user's report and its entries are looked up in tables built once per arm and reward (x·y,
  [φy, upper(φφᵀ)] are elementwise products: the same bits whenever they are computed);
- a sum over one report is x + 0.0 (numpy's reduction starts from its identity, 0.0: −0.0 becomes
  0.0, as there), and the mirror of the upper triangle is a gather;
- JDP's tree changes, which do not depend on the arms, come for the whole block at once
  (:func:`tree_changes`: per count, the same subtractions in the same order as the tree's step);
- each user's β is computed before the loop, by the same function the learner calls after a release.

With B = 1 every user's arm is a function of every earlier report, so the loop is per user; deciding
several users at once by speculating on their arms would fail at about every second user on the
paper's instance (the chosen arm changes that often).

A V_m that fails the Cholesky test (the non-PD safeguard, rare) stops the loop; the learner clips
that user's runs (:meth:`~.learners.BatchedLinUCB.clip`) and the loop resumes with the next user.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.shuffle_linear_bandits import kernels
from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.protocol.primitives.noise.grid_gaussian import to_grid


class LookAhead:
    """One task's look-ahead: the per-arm tables of its runs' fixed arms (R, K, d); ``batch`` users
    per batch (1, or LinUCB-SDP-Amp's or -Vec's B); ``vec``: P_Vec's parameters (SDP-Vec)."""

    def __init__(self, kind: str, arms: np.ndarray, batch: int = 1, vec: slb.VecParams | None = None):
        self.kind = kind
        self.batch = batch
        self.arms = np.ascontiguousarray(arms, dtype=np.float64)
        self.scores = kernels.arm_table(arms)
        r, k, d = arms.shape
        self.runs = r
        self.d = d
        y = np.array([0.0, 1.0])[None, None, :, None]
        x = np.broadcast_to(arms[:, :, None, :], (r, k, 2, d))
        ys = np.broadcast_to(y[..., 0], (r, k, 2))
        # [run, arm, reward]: what a user reports and what the analyzer decodes from it
        self.raw = np.concatenate([x, ys[..., None]], axis=-1)  # (φ, y), as the users concatenate it
        # [φy, upper(φφᵀ)] on the grid, as the Gaussian randomizer and the tree round them (rounding is
        # idempotent: the users' and the analyzer's own rounding of these gives the same bits)
        self.entries = to_grid(slb.user_entries(x, ys))
        self.decoded = self.entries + 0.0  # JDP: the analyzer's sum over the one report
        self.mirror = slb.mirror_indices(d)  # entries index of V[i, j]
        self.largest_entry = float(np.abs(self.entries).max())
        self._none = (np.zeros((1, 1, 2, 1)), np.zeros((1, 1, 1)))  # the unused table and draws
        # what batch_ahead's other kind reads, unused: P_Vec's tables, draws, totals and decoding
        self._no_vec = (np.zeros((1, 1, 2, 1), dtype=np.int64), np.zeros((1, 1, 2, 1)))
        self._no_draws = (np.zeros((1, 1, 1)), np.zeros((1, 1, 1), dtype=np.int64))
        self._no_totals = np.zeros((1, 1, 1), dtype=np.int64)
        self.decoding = (0.0, 1.0, 0.0)
        if vec is not None:  # P_Vec: each user's scaled entries w = (entry + Δ)/(span/g), as R_Vec scales them
            scaled = (slb.user_entries(x, ys) + vec.shift) / vec.scale
            low = np.floor(scaled)
            self.vec_tables = (low.astype(np.int64), scaled - low)  # ⌊w⌋ and w − ⌊w⌋
            # Algorithm 7 on a full batch of B users, with the analyzer's own expressions: centre, scale, shift
            self.decoding = (vec.p * vec.debias_bits * batch, vec.scale, batch * vec.shift)

    def exact(self, noise) -> bool:
        """Are all of SDP-Amp's batch sums of these draws' reports exact in float64 (every partial
        sum of B grid values below 2³³ in magnitude)? SDP-Vec's are integers: always."""
        if self.kind == "linucb-sdp-vec":
            return True
        return self.batch * (self.largest_entry + np.abs(noise).max()) < 2.0 ** 33

    def decide(self, learner, rewards: np.ndarray, noise: np.ndarray | None, betas: np.ndarray, tree=None,
               tree_noise: np.ndarray | None = None, marks: np.ndarray = np.empty(0, np.int64)) -> tuple:
        """Serve the block's n batches in order: (their arms (R, n), their users' reports (R, n·B,
        width), the first release's tree lane or None, the diagnostics after each batch of ``marks``,
        what the release must show: the reports, or SDP-Amp's batch sums (R, n, D)). ``rewards``
        (R, n·B, K, bool) and ``noise`` (R, n·B, D) the users' (oracle), ``betas`` (n,) the β each
        batch's decision uses, ``tree_noise`` (R, n, D) the JDP analyzer's node draws for these
        batches, ``marks`` the (sorted) batches with a rounds.csv row: for each, its decoded estimate
        and the model after it, as :meth:`~.parties.LinearServer._learn` records them."""
        r, n = rewards.shape[0], rewards.shape[1] // self.batch
        kind, L = self.kind, learner
        chosen = np.empty((r, n), dtype=np.int64)
        ys = np.empty((r, n), dtype=np.int64)
        lane = None
        table, draws = self._none
        values = draws
        estimates = None
        if kind == "linucb-jdp":  # the tree's releases do not depend on the arms: all n at once
            lane = tree.lane()
            changes = tree_changes(tree, tree_noise) if tree_noise is not None else tree.changes(n)  # reused: its own
            table, draws = self.decoded, changes
        elif kind in ("linucb-ldp", "linucb-sdp-amp"):
            table, draws = self.entries, np.ascontiguousarray(noise)
            values = np.empty((r, n * self.batch, self.entries.shape[-1]))
        if kind in ("linucb-sdp-amp", "linucb-sdp-vec"):
            estimates = np.empty((r, n, self.entries.shape[-1]))
        totals = None
        if kind == "linucb-sdp-vec":  # the shuffler's per-label totals, what the release must show
            totals = np.empty((r, n, self.entries.shape[-1]), dtype=np.int64)
            uniforms, ones = (np.ascontiguousarray(part) for part in noise)
        else:
            uniforms, ones = self._no_draws
        pending = np.zeros(r, dtype=np.bool_)
        rewards = np.ascontiguousarray(rewards)
        betas = np.ascontiguousarray(betas, dtype=np.float64)

        def step(i: int, end: int) -> int:
            if estimates is not None:
                vec = totals is not None
                return kernels.batch_ahead(i, end, self.batch, self.scores, rewards, betas, L.u, L.V, L.v_inv,
                                           L.theta, vec, table, draws, *(self.vec_tables if vec else self._no_vec),
                                           uniforms, ones, *self.decoding, self.mirror, L.floor, chosen, values,
                                           totals if vec else self._no_totals, estimates, pending)
            code = kernels.LINUCB if kind == "linucb" else kernels.ADDITIVE
            return kernels.look_ahead(code, i, end, self.arms, self.scores, rewards, betas, L.u, L.V, L.v_inv,
                                      L.theta, table, draws, kind == "linucb-ldp", self.mirror, L.floor, chosen, ys,
                                      values, pending)

        rows = np.arange(r)
        diagnostics = []
        ends = [(int(k) + 1, True) for k in marks]
        if not ends or ends[-1][0] < n:
            ends.append((n, False))
        i = 0
        for end, mark in ends:
            while i < end:
                i = step(i, end)
                if i < end:  # the safeguard's branch for this batch's runs
                    L.clip(pending)
                    pending[:] = False
                    i += 1
            if mark:
                k = end - 1  # the batch's estimate: its reports' sum, as the kernel added it
                if estimates is not None:
                    estimate = estimates[:, k].copy()
                else:
                    estimate = table[rows, chosen[:, k], ys[:, k]] + draws[:, k]
                    if kind == "linucb-ldp":
                        estimate = estimate + 0.0
                diagnostics.append((k, estimate, L.theta.copy(), L.V.copy()))
        if diagnostics:  # λ_min of each V_m, one stacked call (the same LAPACK routine per matrix)
            lam = np.linalg.eigvalsh(np.stack([v for *_, v in diagnostics]))[..., 0]
            diagnostics = [(k, est, theta, lam[i]) for i, (k, est, theta, _) in enumerate(diagnostics)]
        L.t += n * self.batch
        L.lambda_min = None
        L.beta = L.beta_fn(L.t)
        if kind in ("linucb", "linucb-jdp"):
            values = self.raw[rows[:, None], chosen, ys]
        check = totals if totals is not None else values if estimates is None else estimates
        return chosen, values, lane, diagnostics, check


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
    # the live nodes before the block, level by level (a level without one is never read: the kernel
    # says so if it would be)
    live = np.zeros((max(len(tree.nodes), 1), r, width))
    present = np.zeros(live.shape[0], dtype=np.bool_)
    for j, node in enumerate(tree.nodes):
        if node is not None:
            live[j], present[j] = node, True
    change = np.empty_like(fresh)
    if not kernels.tree_changes(c0, np.ascontiguousarray(fresh), live, present, change):
        raise ValueError(f"tree at count {c0}: a change of the next {n} counts needs a node the tree does not hold")
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
