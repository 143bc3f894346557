"""Algorithm 1 of Chowdhury & Zhou (ICML 2022) as the spine's analyzer and user logic.

- :class:`LinearServer` (the analyzer's logic): batched LinUCB. It opens one batch at a time: a plan
  to the batch's B users with the broadcast (θ̂, V⁻¹, β) (line 16) and, for a full batch, one round
  at the intermediary its trust path names; it decodes the release into (ũ, Ṽ) and updates
  (lines 13–15). A trailing partial batch is served from the last model and never aggregated
  (Algorithm 1 only updates at t = mB; spec §11 item 15). It never sees a report (only releases),
  ground truth, or the run seed (only its own key per run).
- :class:`LinearUsers` (the users' logic): from the plan and their own context each user picks her
  arm (line 4), observes her reward, and reports [φy, upper(φφᵀ)] randomized by her trust path's
  randomizer (line 7), or raw (φ, y) to a trusted analyzer. With fixed arms (the paper's
  experiments) every user of a batch has the same context, so a batch's choice is one computation.
- :class:`ContextUsers`: users who bring their own context (the ``classes`` conversion of a real
  set): each scores her own arm set, vectorized over the block, and her regret is her mistake.

The round a plan opens says what leaves the intermediary (line 11):

=================  ==========  ========  ===========================================================
algorithm          at          rule      report (width)
=================  ==========  ========  ===========================================================
LinUCB             aggregator  pass      raw (φ, y) (d + 1) to the trusted analyzer
LinUCB-JDP         aggregator  pass      raw (φ, y); the analyzer releases prefix sums by the tree
LinUCB-LDP         aggregator  pass      Gaussian-noised entries (D = d + d(d+1)/2), attributable
LinUCB-SDP-Amp     shuffler    shuffle   Gaussian-noised entries, S1 and S2 permuted independently
LinUCB-SDP-Vec     shuffler    sum       per-label bit counts; only the totals leave the shuffler
=================  ==========  ========  ===========================================================

In-process, the one-user-batch learners (LinUCB, JDP, LDP with B = 1), SDP-Amp and SDP-Vec look
ahead through the users' ``oracle`` and decide a block of batches in one compiled loop
(:mod:`.lookahead`), one plan and one round per block (pass-through; SDP-Amp's a shuffle of each
batch on its own, SDP-Vec's a sum of each batch's counts on their own), bit for bit the run one plan
per batch makes (which is what they do over MQTT). Users with their own contexts offer no oracle
(the look-ahead decides from one fixed arm table), so their batches get one plan each.

Everything carries the runs axis first: the in-process engine steps all runs of an algorithm at
once (their batches line up), over MQTT one task is one run, and a run's numbers never depend on
the runs stacked with it (per-run streams; :class:`~.learners.BatchedLinUCB` decides per run).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits import params as lp
from privbandit.families.shuffle_linear_bandits.lookahead import LookAhead
from privbandit.families.shuffle_linear_bandits.learners import BatchedLinUCB, Widths, context_actions
from privbandit.families.shuffle_linear_bandits.world import ClassContexts, LinearInstances, UserUniforms, bounds
from privbandit.protocol.primitives.noise.grid_gaussian import to_grid
from privbandit.protocol.privacy import PrivacyEvent
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Round, Truth
from privbandit.protocol.spine.family import BlockAnswer, Spend
from privbandit.protocol.spine.observer import checkpoints_in

RAW = ("linucb", "linucb-jdp")  # raw (φ, y) to a trusted analyzer
LOOK_AHEAD = ("linucb", "linucb-jdp", "linucb-ldp")  # one user per batch: decided a block at a time in-process
# batches of any size: decided a block of batches at a time in-process
BATCH_AHEAD = ("linucb-sdp-amp", "linucb-sdp-vec")
# Users one look-ahead block decides at most: a single run of T = 20000 (the authors' instance) in one
# block (each block costs ~3 ms of Python: the oracle, the observer's running sums, the round, the
# rows; 4096 made it five); the cells bound below keeps stacked runs' blocks small.
LOOK_AHEAD_USERS = 1 << 15
LOOK_AHEAD_CELLS = 1 << 22  # and at most this many (run, user, arm) rewards looked at (bytes)


@dataclass(frozen=True)
class Setup:
    """Everything public about one algorithm of an experiment: its trust path, noise, widths."""

    kind: str
    preset: str
    batch: int
    horizon: int
    d: int
    epsilon: float
    delta: float
    budget: lp.Budget
    feature_norm: float
    entry_bound: float
    sigma: float | None
    vec: slb.VecParams | None
    vec_scale: float | None
    independent: bool
    conf: lp.Confidence
    diagnostic: frozenset
    tree_noise: str = "fresh"  # LinUCB-JDP: the tree's fresh nodes, or the authors' reused draws

    @property
    def width(self) -> int:
        """Entries of one report: raw (φ, y), or [φy, upper(φφᵀ)]."""
        return self.d + 1 if self.kind in RAW else slb.n_entries(self.d)

    @property
    def intermediary(self) -> str:
        return "shuffler" if self.kind.startswith("linucb-sdp") else "aggregator"

    @property
    def randomizer(self):
        if self.kind in ("linucb-sdp-amp", "linucb-ldp"):
            return slb.GaussianRandomizer(self.sigma)
        if self.kind == "linucb-sdp-vec":
            return slb.BitSumRandomizer(self.vec)
        return None

    def round(self, rid: int) -> Round:
        """Batch ``rid``'s round: B reports, released complete or not at all."""
        B, D = self.batch, self.width
        if self.kind == "linucb-sdp-vec":
            return Round(rid, "shuffler", "sum", expected=B, width=D, integer=True, low=0, high=self.vec.max_count)
        if self.kind == "linucb-sdp-amp":
            groups = (self.d, D - self.d) if self.independent else ()
            return Round(rid, "shuffler", "shuffle", expected=B, width=D, integer=False, groups=groups)
        if self.kind == "linucb-ldp":
            return Round(rid, "aggregator", "pass", expected=B, width=D, integer=False)
        bound = max(self.feature_norm, 1.0)  # |φ_k| ≤ ‖φ‖, y ∈ {0, 1}
        return Round(rid, "aggregator", "pass", expected=B, width=D, integer=False, low=-bound, high=bound)

    def event(self) -> PrivacyEvent:
        return lp.batch_event(self.kind, self.preset, self.budget, self.batch, self.feature_norm, self.sigma,
                              self.vec, self.vec_scale, self.d, self.tree_noise)

    def describe(self) -> dict:
        out = lp.describe(self.kind, self.preset, self.epsilon, self.delta, self.budget, self.batch,
                          self.feature_norm, self.sigma, self.vec, self.vec_scale, self.horizon, self.tree_noise)
        out = {**out, "lambda": self.conf.lam, "eigenvalue_floor": self.conf.floor}
        if self.vec is not None:  # Alg. 5/6's one-bit messages against the count encoding
            out["communication"] = lp.vec_bits(self.vec, self.d)
        return out


def setup(public: dict) -> Setup:
    """A task's :class:`Setup` from its public spec (``family.public_task``)."""
    a = public["algorithm"]
    kind, preset, T, d = a["algorithm"], public["preset"], public["horizon"], public["dim"]
    B, eps, delta = a["batch"], a["epsilon"], public["delta"]
    norm, entry = bounds(public["generator"])
    budget = lp.batch_budget(eps, delta, public["participations"])
    sigma, vec = None, None
    if kind == "linucb-sdp-amp":
        sigma = lp.amp_sigma(preset, budget, B, norm)
    elif kind == "linucb-ldp":
        sigma = lp.ldp_sigma(preset, budget, norm)
    elif kind == "linucb-jdp":
        sigma = lp.jdp_sigma(preset, budget, math.ceil(T / B), norm, d)
    elif kind == "linucb-sdp-vec":
        vec = lp.vec_params(preset, budget, B, d, entry, norm, a["vec_scale"], a["vec_span"], a["vec_bits"])
    sigma_total = lp.noise_scale_total(kind, sigma or 0.0, T, B, vec)
    conf = lp.confidence(preset, kind, sigma_total, T, B, d, norm,
                         lp.paper_code_noise(kind, budget.epsilon, budget.delta, B, T, d), a["alpha"])
    return Setup(kind, preset, B, T, d, eps, delta, budget, norm, entry, sigma, vec, a["vec_scale"],
                 a["independent_permutations"], conf, frozenset(int(m) for m in public["diagnostic"]),
                 a.get("tree_noise", "fresh"))


class LinearServer:
    """The analyzer's logic of one task (R runs; see the module docstring). ``keys``: the analyzer's
    own key per run (JDP's tree noise)."""

    def __init__(self, s: Setup, keys: list[int], oracle: Callable | None = None):
        self.s = s
        self.runs = len(keys)
        d = s.d
        self.learner = BatchedLinUCB(self.runs, d, s.conf.lam, s.conf.floor, lambda t: s.conf.beta(t, d))
        self.event = s.event()
        self.group = "returning" if s.budget.participations > 1 else None
        # In-process look-ahead (see :meth:`_block`): one-user batches, or SDP-Amp's, of a learner
        # that composes each release on its own (group None), so a block's releases are one record.
        self.oracle = oracle if (oracle is not None and self.group is None and (
            (s.batch == 1 and s.kind in LOOK_AHEAD) or s.kind in BATCH_AHEAD)) else None
        self.expected: dict[int, np.ndarray] = {}  # a block plan's round → what its release must show
        self._lanes: dict[int, str] = {}
        self._diagnostics: dict[int, list[dict]] = {}  # a block plan's round → its rounds.csv batches
        self.look: LookAhead | None = None
        self.tree = None
        if s.kind == "linucb-jdp" and s.tree_noise == "authors-reused":
            width = slb.n_entries(d)
            self.tree = slb.ReusedTreeNoise(s.sigma, (self.runs, width), slb.reused_noise(keys, s.sigma, width))
        elif s.kind == "linucb-jdp":
            width = slb.n_entries(d)
            self.tree = slb.TreeAggregator(s.sigma, (self.runs, width))
            self.tree_noise = slb.StackedStreams([slb.tree_noise(k, s.sigma, width) for k in keys])
        if s.kind == "linucb-sdp-vec":
            self.vec_analyzer = slb.BitSumAnalyzer(s.vec)
        self.next_batch = 0
        self.planned = 0
        self.open: int | None = None

    @property
    def done(self) -> bool:
        return self.planned >= self.s.horizon

    def plans(self) -> list[Plan]:
        """The next batch, or [] while one is open or once the horizon is served."""
        if self.open is not None or self.done:
            return []
        if self.oracle is not None and (block := self._block()) is not None:
            return [block]
        B = self.s.batch
        theta, v_inv, beta = self.learner.broadcast()
        m, first = self.next_batch, self.planned
        cohort = min(B, self.s.horizon - first)
        body = {"batch": m, "theta": theta.copy(), "v_inv": v_inv.copy(), "beta": float(beta)}
        if cohort == B:
            rnd = self.s.round(m)
            plan = Plan(m, first, cohort, body, (rnd,), (Join(m, first, B, B),))
            self.open = m
        else:
            plan = Plan(m, first, cohort, body)
        self.next_batch += 1
        self.planned += cohort
        return [plan]

    # --- the in-process look-ahead ---------------------------------------------------------------
    def _block_end(self, m: int) -> int:
        """One past the last batch a block starting at m may decide: at most a block's users, the
        full batches only (a trailing partial batch has no round), and (JDP) before the next count
        that opens a new tree level, 2^j − 1: the block's releases are recorded once, under its
        first lane, which must leave the ledger as they would one by one (each lane keeps the worst
        of identical events, in order of first use)."""
        if not hasattr(self, "_block_users"):
            arms = self.oracle(m, 1)[0].shape[1]  # K (public: the experiment file says it)
            self._block_users = max(64, min(LOOK_AHEAD_USERS, LOOK_AHEAD_CELLS // (self.runs * arms)))
        end = min(self.s.horizon // self.s.batch, m + max(1, self._block_users // self.s.batch))
        if isinstance(self.tree, slb.TreeAggregator):
            nxt = (1 << (m + 1).bit_length()) - 1  # the smallest 2^j − 1 above m
            end = min(end, nxt)
        return end

    def _marks(self, m: int, n: int) -> np.ndarray:
        """The batches of block m … m + n − 1 with a rounds.csv row (none for non-private LinUCB),
        relative to m."""
        if self.s.kind == "linucb":
            return np.empty(0, dtype=np.int64)
        if not hasattr(self, "_diag_sorted"):
            self._diag_sorted = np.array(sorted(self.s.diagnostic), dtype=np.int64)
        lo, hi = np.searchsorted(self._diag_sorted, [m, m + n])
        return self._diag_sorted[lo:hi] - m

    def _block(self) -> Plan | None:
        """Decide batches m … end − 1 at once, exactly as one plan per batch would: the same kernel
        calls, in the same order, on what the users would report, which the users' ``oracle`` shows
        ahead (their reward from every arm, their randomizer's draws; the trusted analyzer of
        LinUCB/JDP receives the raw data anyway, LDP's the noised reports, attributably, and
        SDP-Amp's each batch's sum, which its shuffled release keeps, SDP-Vec's each batch's label
        totals, its release). One plan gives the users their arms; its one round collects their
        reports, which :meth:`on_release` checks against those looked at: a pass-through round, or
        SDP-Amp's shuffle / SDP-Vec's sum of each batch on its own (``segment``). Batches with a
        rounds.csv row inside the block leave their estimate and model in the release's body, as
        their own releases would. None: no block (only a trailing
        partial batch is left, or SDP-Amp's sums would not be exact)."""
        s = self.s
        B = s.batch
        m = self.next_batch
        n = self._block_end(m) - m
        if n < 1:
            return None
        arms, rewards, noise, fits = self.oracle(m, n)
        if self.look is None:
            self.look = LookAhead(s.kind, arms, B, s.vec)
        if s.kind in BATCH_AHEAD and not self.look.exact(noise):
            return None
        fresh = isinstance(self.tree, slb.TreeAggregator)
        tree_noise = self.tree_noise.rows(m, n)[:, :, 0] if fresh else None
        betas = self._betas(self.learner.t, n)
        saved = self._state()
        chosen, values, lane, diag, check = self.look.decide(self.learner, rewards, noise, betas, self.tree,
                                                             tree_noise, self._marks(m, n))
        k = fits(chosen)
        if k < n:  # rare: the observer could not add this block's regret as one batch at a time would
            self._restore(saved)
            n = k
            head = None if noise is None else users_part(noise, 0, n * B)  # P_Vec's draws are a tuple
            chosen, values, lane, diag, check = self.look.decide(
                self.learner, rewards[:, :n * B], head, betas[:n], self.tree,
                None if tree_noise is None else tree_noise[:, :n], self._marks(m, n))
        self.expected[m] = check
        self._diagnostics[m] = [{"batch": m + i, "estimate": est, "theta": theta, "lambda_min": lam,
                                 "clipped": (lam < s.conf.floor).astype(np.int64)} for i, est, theta, lam in diag]
        self._lanes[m] = lane or "round"
        self.next_batch += n
        self.planned += n * B
        self.open = m
        rnd = replace(s.round(m), expected=n * B, segment=B if s.kind in BATCH_AHEAD else None)
        return Plan(m, m * B, n * B, {"batch": m, "arms": chosen}, (rnd,), (Join(m, m * B, n * B, n * B),))

    def _betas(self, t: int, n: int) -> np.ndarray:
        """β of the next n batches' decisions, t users served before them: the learner's own
        ``beta_fn``, one call per batch unless the preset holds one width for the whole run."""
        conf = self.s.conf
        if conf.fixed_width is not None:
            return np.full(n, float(conf.fixed_width))
        return np.array([self.learner.beta_fn(t + i * self.s.batch) for i in range(n)], dtype=np.float64)

    def _state(self) -> tuple:
        L, t = self.learner, self.tree
        copy = lambda v: v.copy() if isinstance(v, np.ndarray) else v  # noqa: E731
        return ({k: copy(getattr(L, k)) for k in ("u", "V", "v_inv", "theta", "beta", "t", "lambda_min")},
                L.clipped.copy(), L.not_pd.copy(), None if t is None else (list(t.nodes), t.count))

    def _restore(self, saved: tuple) -> None:
        arrays, clipped, not_pd, tree = saved
        for k, v in arrays.items():
            setattr(self.learner, k, v.copy() if isinstance(v, np.ndarray) else v)
        self.learner.clipped, self.learner.not_pd = clipped, not_pd
        if tree is not None:
            self.tree.nodes, self.tree.count = list(tree[0]), tree[1]

    def on_release(self, rnd: Round, release: Release) -> tuple[dict, Spend]:
        if rnd.id in self.expected:
            shown = release.values
            if rnd.segment is not None and rnd.rule == "shuffle":  # each batch's sum (exact: grid values, bounded)
                shown = shown.reshape(self.runs, -1, rnd.segment, shown.shape[-1]).sum(axis=2)
            if rnd.id != self.open or not np.array_equal(shown, self.expected[rnd.id]):
                raise ProtocolError("look-ahead-mismatch", f"block {rnd.id}: the users' reports are not those "
                                                           f"the analyzer looked ahead at")
            del self.expected[rnd.id]
            self.open = None
            body = {"batch": rnd.id}
            if diag := self._diagnostics.pop(rnd.id):
                body["diagnostics"] = diag
            return body, Spend(self.event, self._lanes.pop(rnd.id), self.group,
                               releases=rnd.expected // self.s.batch)
        if rnd.id != self.open:
            raise ProtocolError("unknown-round", f"batch {rnd.id} is not the open batch {self.open}")
        body = {"batch": rnd.id}
        lane = self._learn(rnd.id, release.values, release.n_reports, body)
        self.open = None
        return body, Spend(self.event, lane, self.group)

    def _learn(self, m: int, values: np.ndarray, n: int = 1, body: dict | None = None) -> str:
        """Decode batch m's release (``n`` reports, ``values``) and learn from it (lines 11–16);
        its diagnostics go into ``body``. Returns the release's ledger lane."""
        s, d = self.s, self.s.d
        rank_one = s.kind == "linucb" and s.batch == 1
        # Decode (nothing changes before here; the spine has checked shape, type and range).
        if s.kind == "linucb-sdp-vec":
            estimate = self.vec_analyzer.analyze(values.astype(np.int64), n)
        elif s.kind == "linucb-sdp-amp":
            # The shuffled list is a multiset: summed in sorted order, the estimate does not depend on
            # the permutation (nor on whether the shuffler's was reproducible or the OS CSPRNG's).
            estimate = np.sort(values, axis=1).sum(axis=1)
        elif s.kind == "linucb-ldp":
            estimate = values.sum(axis=1)
        elif not rank_one:
            estimate = slb.user_entries(values[..., :d], values[..., d]).sum(axis=1)
        lane = "round"
        if rank_one:  # non-private, one user: Sherman–Morrison keeps V⁻¹ exactly (no diagnostics)
            self.learner.update_rank_one(values[:, 0, :d], values[:, 0, d])
        else:
            if self.tree is not None:  # central: the trusted analyzer adds tree noise to prefix sums
                lane = self.tree.lane()
                fresh = self.tree_noise.for_batch(m)[:, 0] if isinstance(self.tree, slb.TreeAggregator) else None
                estimate = self.tree.step(estimate, fresh)
            u_inc, v_inc = slb.split_entries(estimate, d)
            self.learner.update(u_inc, v_inc, n)
            if body is not None and m in s.diagnostic:
                lam = self.learner.smallest_eigenvalues()
                body.update(estimate=np.array(estimate, dtype=np.float64),
                            theta=self.learner.theta.copy(), lambda_min=lam.copy(),
                            clipped=(lam < s.conf.floor).astype(np.int64))
        return lane

    def summary(self) -> list[dict]:
        return [{"batches_clipped": int(self.learner.clipped[r]), "batches_not_pd": int(self.learner.not_pd[r])}
                for r in range(self.runs)]


class LinearUsers:
    """The users of R runs stacked: their worlds (arms, θ*, U_t) and their randomizers' streams."""

    def __init__(self, s: Setup, instances: LinearInstances, seed: int, runs: list[int], label: str,
                 checkpoints: np.ndarray):
        self._streams(s, seed, runs, label, checkpoints)
        self.arms = instances.arms  # (R, K, d)
        self.widths = Widths(self.arms)
        # [φy, upper(φφᵀ)] of every arm for y = 0, 1 (R, K, 2, D): a user's entries, looked up
        ys = np.broadcast_to(np.array([0.0, 1.0]), self.arms.shape[:2] + (2,))
        self.entries = slb.user_entries(np.broadcast_to(self.arms[:, :, None, :], ys.shape + self.arms.shape[-1:]), ys)
        self.gridded = to_grid(self.entries)  # rounding is elementwise: these are the rounded entries of any user
        self.means = instances.means
        self.best = self.means.max(axis=1)
        self.theta_star = instances.theta
        self.uniforms = UserUniforms(seed, runs)

    def _streams(self, s: Setup, seed: int, runs: list[int], label: str, checkpoints: np.ndarray) -> None:
        """What every world's users hold: the setup, their randomizers' streams, the observer's sums."""
        self.s = s
        self.ridx = np.arange(len(runs))
        self.randomizer = s.randomizer
        self.noise = None if self.randomizer is None else slb.StackedStreams(
            [slb.user_noise(seed, label, r, s.batch, self.randomizer, s.width) for r in runs])
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)
        # The observer's running regret sums (it adds each block's total in serving order): a block
        # plan's truth is set so that those sums are the one-user-per-plan ones, bit for bit.
        self.sums = np.zeros((2, len(runs)))

    def oracle(self, m: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """What the analyzer's in-process look-ahead may see of batches m … m + n − 1 (users
        m·B … (m + n)·B − 1): their contexts (the fixed arms, (R, K, d)), the reward each user would
        get from every arm (R, n·B, K, bool), their randomizer's draws (R, n·B, D) or None, and
        :meth:`fits`."""
        B = self.s.batch
        u = self.uniforms.get(m * B, n * B)
        rewards = u[:, :, None] < self.means[:, None, :]
        noise = None
        if self.noise is not None:
            rows = self.noise.rows(m, n)
            noise = _users(rows, n * B)
        return self.arms, rewards, noise, lambda arms: self.fits(m, arms)

    def _running(self, m: int, arms: np.ndarray, u: np.ndarray | None = None):
        """The observer's running regret sums over batches m … m + n − 1 played with ``arms``
        (R, n), one batch per plan, as it would add them: (after each batch (k, R, n), at the
        checkpoints inside (k, R, c), those checkpoints' user offsets); k = 1 (pseudo-regret) or 2
        (and realized, from the users' uniforms ``u`` (R, n·B)). Within a batch the users' regrets
        are cumulated as :meth:`_act` does; batch totals are added one at a time, from
        :attr:`sums`."""
        B = self.s.batch
        r, n = arms.shape
        mu = self.means[self.ridx[:, None], arms]
        within = [np.repeat((self.best[:, None] - mu)[:, :, None], B, axis=2).cumsum(axis=2)]
        if u is not None:
            u = u.reshape(r, n, B)
            within.append(((u < self.best[:, None, None]) - (u < mu[:, :, None]).astype(np.float64)).cumsum(axis=2))
        w = np.stack(within)  # (k, R, n, B)
        start = self.sums[:len(within)]
        after = np.cumsum(np.concatenate([start[:, :, None], w[..., -1]], axis=2), axis=2)
        at = checkpoints_in(self.checkpoints, m * B, n * B) - m * B - 1
        marks = after[:, :, at // B] + w[:, :, at // B, at % B]
        return after[:, :, 1:], marks, at

    def fits(self, m: int, arms: np.ndarray) -> int:
        """How many of the batches m … playing ``arms`` (R, n) one block plan may serve: the most
        whose running regret sums, at the checkpoints and at the end, the observer reproduces from
        its own sum by one addition (:func:`exact_steps`; one batch always fits)."""
        n = arms.shape[1]
        after, marks, at = self._running(m, arms)
        before = self.sums[0][:, None]
        _, ends = exact_steps(before, after[0])
        ok = ends.all(axis=0)
        ok[0] = True
        stop = n
        if at.size:
            _, reach = exact_steps(before, marks[0])
            bad = np.flatnonzero(~reach.all(axis=0))
            if bad.size:
                stop = max(1, int(at[bad[0]]) // self.s.batch)  # batches before the first unreachable checkpoint
        return int(np.flatnonzero(ok[:stop])[-1]) + 1

    def shard(self, plan: Plan, block: int, shards: int) -> int:
        """A fleet hosts whole noise blocks (block k of batches on fleet k mod N)."""
        return (slb.block_of(plan.id, self.s.batch) + block) % shards

    def act(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None) -> BlockAnswer:
        answer = self._act_block(plan, block, first, size, stay) if "arms" in plan.body else \
            self._act(plan, block, first, size, stay)
        t = answer.truth
        self.sums[0] += t.pseudo
        self.sums[1] += t.realized
        return answer

    def _act_block(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None) -> BlockAnswer:
        """A look-ahead block (in-process): each batch's users play the arm the plan gives the batch,
        as they would have chosen it from the batch's own plan."""
        B = self.s.batch
        m, n = first // B, size // B
        lo = m - plan.id
        a = np.ascontiguousarray(np.asarray(plan.body["arms"])[:, lo:lo + n])
        rows = self.ridx[:, None]
        a_user = np.repeat(a, B, axis=1)
        u = self.uniforms.get(first, size)
        y = (u < self.means[rows, a_user]).astype(np.float64)
        if self.s.kind in RAW:
            values = np.concatenate([self.arms[rows, a_user], y[..., None]], axis=-1)
        elif self.s.kind == "linucb-sdp-vec":  # R_Vec's counts, each user's entries looked up
            noise = _users(self.noise.rows(m, n), size)
            values = self.randomizer.apply(self.entries[rows, a_user, y.astype(np.intp)], noise)
        else:  # the Gaussian randomizer's to_grid(entries) + noise, the rounded entries looked up
            values = self.gridded[rows, a_user, y.astype(np.intp)] + _users(self.noise.rows(m, n), size)
        offsets = np.arange(size) if stay is None else np.flatnonzero(stay)
        # One batch per plan, the observer would add the batches' regrets one at a time: these
        # running sums, and a block total and checkpoint values that reproduce them exactly from its own.
        after, targets, _ = self._running(m, a, u)
        total = exact_step(self.sums, after[:, :, -1])
        marks = exact_step(self.sums[:, :, None], targets)
        extras = {}
        diag = np.array(sorted(k for k in self.s.diagnostic if m <= k < m + n), dtype=np.int64)
        if diag.size and self.s.kind != "linucb":  # the true sums of the batches with a rounds.csv row
            true = self.entries[rows, a_user, y.astype(np.intp)]  # (R, n·B, D)
            sums = [true[:, np.arange((k - m) * B, (k - m + 1) * B)].sum(axis=1) for k in diag]  # as _act sums
            extras = {"diagnostic_batches": diag, "entries_sums": np.stack(sums, axis=1),
                      "theta_star": self.theta_star.copy()}
        truth = Truth(plan.id, block, first, size, pseudo=total[0], realized=total[1],
                      pseudo_at=marks[0], realized_at=marks[1], extras=extras)
        return BlockAnswer(truth, [(plan.joins[0].round_id, offsets, np.ascontiguousarray(values[:, offsets]), None)])

    def rewards(self, a: np.ndarray, first: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Users ``first`` … ``first + size − 1`` all play arm ``a`` (R,): their Bernoulli rewards
        y = 1{U_t < μ_a} (§5), (R, size), and their uniforms U_t, which the realized regret compares
        with the best arm's mean. The seam a caller's world replaces (:mod:`.caller`)."""
        u = self.uniforms.get(first, size)
        return (u < self.means[self.ridx, a][:, None]).astype(np.float64), u

    def _broadcast(self, plan: Plan) -> tuple[np.ndarray, np.ndarray, float]:
        """The plan's (θ̂, V⁻¹, β) (line 16), their shapes checked against this task's runs and d."""
        b = plan.body
        theta, v_inv = np.asarray(b["theta"]), np.asarray(b["v_inv"])
        if theta.shape != (self.ridx.size, self.s.d) or v_inv.shape != theta.shape + (self.s.d,):
            raise ValueError(f"plan {plan.id}: θ̂ {theta.shape} and V⁻¹ {v_inv.shape} do not fit "
                             f"{self.ridx.size} runs in d = {self.s.d}")
        return theta, v_inv, float(b["beta"])

    def _act(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None) -> BlockAnswer:
        a = self.widths(*self._broadcast(plan))  # line 4 (ucb_actions)
        mu_a = self.means[self.ridx, a]
        y, u = self.rewards(a, first, size)
        gap = self.best - mu_a
        pseudo = np.repeat(gap[:, None], size, axis=1).cumsum(axis=1)
        realized = ((u < self.best[:, None]) - y).cumsum(axis=1)
        played = lambda: np.repeat(self.arms[self.ridx, a][:, None, :], size, axis=1)  # noqa: E731
        entries = lambda: self.entries[self.ridx[:, None], a[:, None], y.astype(np.intp)]  # noqa: E731
        return self._answer(plan, block, first, size, stay, pseudo, realized, y, played, entries)

    def _answer(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None, pseudo: np.ndarray,
                realized: np.ndarray, y: np.ndarray, played: Callable, entries: Callable) -> BlockAnswer:
        """The block's truth (running regrets ``pseudo``, ``realized`` (R, size)) and reports (line 7),
        from the users' rewards ``y`` (R, size), the φ they played (``played()``, (R, size, d)) and
        their entries [φy, upper(φφᵀ)] (``entries()``, (R, size, D)), each computed only if needed."""
        at = checkpoints_in(self.checkpoints, first, size) - first - 1
        extras = {}
        reports = []
        if plan.joins:
            offsets = np.arange(size) if stay is None else np.flatnonzero(stay)
            if self.s.kind in RAW:
                values = np.concatenate([played(), y[..., None]], axis=-1)
                mine = None
            else:
                mine = entries()
                lo = first - plan.first_user
                noise = users_part(self.noise.for_batch(plan.id), lo, lo + size)
                values = self.randomizer.apply(mine, noise)  # line 7
            sent = values if stay is None else np.ascontiguousarray(values[:, offsets])  # fresh, contiguous
            reports.append((plan.joins[0].round_id, offsets, sent, None))
            if plan.id in self.s.diagnostic and not (self.s.kind == "linucb" and self.s.batch == 1):
                if mine is None:
                    mine = entries()
                extras = {"entries_sum": mine[:, offsets].sum(axis=1), "theta_star": self.theta_star.copy()}
        truth = Truth(plan.id, block, first, size, pseudo=pseudo[:, -1].copy(), realized=realized[:, -1].copy(),
                      pseudo_at=pseudo[:, at], realized_at=realized[:, at], extras=extras)
        return BlockAnswer(truth, reports)


class ContextUsers(LinearUsers):
    """The users of R runs when each brings her own context (the ``classes`` conversion,
    :class:`~.world.ClassContexts`): user t picks a_t ∈ argmax ⟨φ(c_t, a), θ̂⟩ + β‖φ(c_t, a)‖_{V⁻¹}
    over her own arm set (Algorithm 1 lines 3–4, :func:`~.learners.context_actions`, vectorized
    over the block), gets y_t = 1{a_t = label_t} and reports [φy, upper(φφᵀ)] of the arm she played
    (line 7). Regret is the mistake count Σ_t 1 − 1{a_t = y_t}: pseudo-regret against the
    deterministic reward (the best arm, the label, always pays 1), realized the same.

    No look-ahead: the analyzer's in-process look-ahead (:mod:`.lookahead`) decides from a fixed
    arm table, so these users offer no ``oracle`` and every batch gets its own plan, in-process as
    over MQTT."""

    oracle = None  # runner.tasks.parties passes the users' oracle to the analyzer: none, one plan per batch

    def __init__(self, s: Setup, world: ClassContexts, seed: int, runs: list[int], label: str,
                 checkpoints: np.ndarray):
        self._streams(s, seed, runs, label, checkpoints)
        self.world = world
        self.theta_star = world.theta

    def _act(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None) -> BlockAnswer:
        phi, labels = self.world.users(first, size)  # (R, n, K, d), (R, n)
        a = context_actions(phi, *self._broadcast(plan))  # line 4, each user her own arm set
        y = (a == labels).astype(np.float64)
        mistakes = (1.0 - y).cumsum(axis=1)
        x = np.take_along_axis(phi, a[:, :, None, None], axis=2)[:, :, 0]  # φ(c_t, a_t) (R, n, d)
        return self._answer(plan, block, first, size, stay, mistakes, mistakes.copy(), y, lambda: x,
                            lambda: slb.user_entries(x, y))


def exact_steps(before: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x, found): x with ``before + x == target`` exactly, elementwise, where one exists (found).

    For 0 ≤ before ≤ target (running regret sums): below 2·before, target − before is exact
    (Sterbenz); beyond, it may be an ulp off, and a step may not exist at all: when ``before`` lies
    exactly halfway between two multiples of the target's ulp, every sum is a tie and rounds to even,
    missing an odd target. Candidates: target − before and its neighbours within two ulps."""
    x0 = target - before
    x = x0.copy()
    found = before + x0 == target
    for k in (1, -1, 2, -2):
        if found.all():
            break
        cand = x0 + k * np.spacing(x0)
        hit = ~found & (before + cand == target)
        x = np.where(hit, cand, x)
        found |= hit
    return x, found


def exact_step(before: np.ndarray, target: np.ndarray) -> np.ndarray:
    x, found = exact_steps(before, target)
    if not found.all():
        raise ArithmeticError("no exact step between running regret sums")
    return x


def _users(rows, users: int):
    """Draws (R, n, B, D) of n batches as (R, n·B, D): an array or P_Vec's tuple of arrays."""
    if isinstance(rows, tuple):
        return tuple(part.reshape(part.shape[0], users, part.shape[-1]) for part in rows)
    return rows.reshape(rows.shape[0], users, rows.shape[-1])


def users_part(noise, lo: int, hi: int):
    """Users lo … hi − 1 of a batch's draws (R, B, D): an array or a tuple of arrays."""
    if isinstance(noise, tuple):
        return tuple(part[:, lo:hi] for part in noise)
    return noise[:, lo:hi]


def diagnostics(lam_min: np.ndarray, clipped: np.ndarray, theta: np.ndarray, theta_star: np.ndarray,
                err: np.ndarray, d: int) -> list[list[dict]]:
    """Per batch and run: λ_min(V_m) as released, whether it was clipped, ‖θ̂ − θ*‖ and the
    analyzer's error on the batch sum (mean and variance over the vector and the matrix entries),
    for n batches at once: λ_min and clipped (n, R), θ̂ (n, R, d), θ* (R, d), errors (n, R, D).
    Each number is a reduction over one row, computed alone whatever batches and runs are stacked
    with it."""
    u, v = np.ascontiguousarray(err[..., :d]), np.ascontiguousarray(err[..., d:])
    cols = {"lambda_min": lam_min, "clipped": clipped, "theta_error": np.linalg.norm(theta - theta_star, axis=-1),
            "u_error_mean": u.mean(axis=-1), "u_error_var": u.var(axis=-1),
            "V_error_mean": v.mean(axis=-1), "V_error_var": v.var(axis=-1)}
    lists = [c.tolist() for c in cols.values()]
    return [[dict(zip(cols, values)) for values in zip(*(c[i] for c in lists))] for i in range(len(lam_min))]
