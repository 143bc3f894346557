"""The sequential baselines (:mod:`.sequential`) as the spine's analyzer and user logic.

- :class:`SequentialServer`: every user is a release; over MQTT a plan serves one user, or for
  UCB1 and Thompson sampling the users whose arm no reward can change
  (:meth:`~.sequential.SequentialLearner.decided`); in-process a looked-ahead draw block
  (:class:`~privbandit.protocol.spine.one_user.OneUserPlans`; the reports a ``pass`` round of raw
  or local rewards). The drivers give the same arms bit for bit
  (tests/families/distributed_dp_mab/test_sequential.py).
- :class:`SequentialUsers`: user t's draws depend on t alone (the online family's
  :class:`~privbandit.families.private_online_learning.world.OnlineUsers`: uniforms per block of
  user indices), so one user per plan and a block per plan draw the same rewards. Under LDP-UCB
  each user adds her own grid Laplace draw, also keyed by her index. Regret on the dyadic grid
  (:func:`~privbandit.families.private_online_learning.parties.on_regret_grid`) adds up the same in
  any grouping.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.distributed_dp_mab.sequential import BASIS, KINDS, NOISE_BLOCK, TRUST, SequentialLearner
from privbandit.families.distributed_dp_mab.world import BanditInstance
from privbandit.families.private_online_learning.parties import on_regret_grid
from privbandit.families.private_online_learning.world import OnlineUsers, rewards_from_uniforms
from privbandit.protocol.primitives.noise.grid_laplace import LAPLACE_GRID, grid_laplace_scale
from privbandit.protocol.primitives.noise.polya import sample_discrete_laplace
from privbandit.protocol.primitives.seeding import USER_BLOCK, stream
from privbandit.protocol.privacy import NonPrivate, PureDP
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Plan, Release, Round, Truth
from privbandit.protocol.spine.family import BlockAnswer
from privbandit.protocol.spine.one_user import OneUserPlans


def report_round(rid: int, n: int, local: bool) -> Round:
    """The users' reports, attributable: raw rewards in [0, 1] to the trusted analyzer (refused
    outside it), or local reports, which any real number may be (the grid Laplace is unbounded).
    Every user of the plan must report (:class:`OneUserPlans` asks all)."""
    return Round(rid, "aggregator", "pass", expected=n, width=1, integer=False,
                 low=None if local else 0.0, high=None if local else 1.0)


DECIDED = (KINDS["ucb1"], KINDS["thompson"])  # the kinds whose blocks SequentialLearner.decided proves


class SequentialServer(OneUserPlans):
    """The analyzer of one sequential run (module docstring; :class:`OneUserPlans` serves its plans).
    ``oracle(t0, n)``: every arm's report for users t0 …, (n, K); in-process only."""

    block = NOISE_BLOCK

    def __init__(self, name: str, n_arms: int, epsilon: float | None, horizon: int, key: int, oracle=None):
        self.learner = SequentialLearner(name, n_arms, epsilon, horizon, key)
        self.local = TRUST[name] == "local"
        # Every user is a release: a reward is one leaf of one arm's counter, or one local report.
        self._event = NonPrivate() if TRUST[name] == "none" else PureDP(float(epsilon), basis=BASIS[name])
        self.start(horizon, oracle)

    def choose(self, t: int) -> int:
        return self.learner.choose(t)

    def decided(self, t0: int, n: int) -> np.ndarray:
        if self.learner.kind not in DECIDED:
            return super().decided(t0, n)
        return self.learner.decided(t0, n)

    def observe_decided(self, rnd: Round, release: Release, x: np.ndarray) -> np.ndarray:
        # Every column the user's reward: the learner reads the pulled arm's.
        return self.learner.run(rnd.id + 1, np.repeat(x[:, None], self.learner.pulls.size, axis=1))[0]

    def look_ahead(self, t0: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self.learner.run(t0, self.oracle(t0, n))

    def report_round(self, rid: int, n: int) -> Round:
        return report_round(rid, n, self.local)

    def observe(self, rnd: Round, release: Release, arm: int, x: np.ndarray) -> None:
        if release.n_reports != 1:
            raise ProtocolError("bad-report-count", f"plan {rnd.id}: one user's report, got {release.n_reports}")
        self.learner.observe(rnd.id + 1, arm, float(x[0]))

    def event(self) -> PureDP | NonPrivate:
        return self._event

    def summary(self) -> list[dict]:
        return [{"pulls": self.learner.pulls.tolist()}]


class SequentialUsers:
    """The users of one sequential run: rewards keyed by user index, and LDP-UCB's local noise."""

    def __init__(self, instance: BanditInstance, name: str, epsilon: float | None, seed: int, prefix: tuple,
                 checkpoints: np.ndarray):
        if instance.reward == "categorical":
            raise ValueError(f"{name}: categorical rewards (a means file's levels) are not built for the sequential "
                             f"baselines; use reward = 'gaussian' or 'bernoulli'")
        self.users = OnlineUsers(instance, seed, prefix, 2)
        self.instance, self.seed, self.prefix = instance, seed, prefix
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)
        self.local = TRUST[name] == "local"
        self.scale = grid_laplace_scale(1.0, float(epsilon)) if self.local else None
        self.gaps = on_regret_grid(instance.gaps)
        self._noise: dict[int, np.ndarray] = {}

    def shard(self, plan: Plan, block: int, shards: int) -> int:
        return block % shards

    def local_steps(self, t0: int, n: int) -> np.ndarray:
        """Users t0 …'s grid Laplace steps Lap_Z((1 + γ)/(γε)), one per user, from ``(…, "ldp", block)``
        per block of user indices."""
        out, first = np.empty(n), t0 - 1
        for b in range(first // USER_BLOCK, (first + n - 1) // USER_BLOCK + 1):
            if b not in self._noise:
                if len(self._noise) > 2:
                    self._noise.pop(min(self._noise))
                self._noise[b] = sample_discrete_laplace(self.scale, USER_BLOCK,
                                                         stream(self.seed, *self.prefix, "ldp", b)).astype(np.float64)
            lo, hi = max(first, b * USER_BLOCK), min(first + n, (b + 1) * USER_BLOCK)
            out[lo - first:hi - first] = self._noise[b][lo - b * USER_BLOCK:hi - b * USER_BLOCK]
        return out

    def reports(self, t0: int, rewards: np.ndarray) -> np.ndarray:
        """What users t0 … send for these rewards ((n,) or (n, K)): the reward, or ⌊x⌉_γ + γ·L."""
        if not self.local:
            return rewards
        steps = self.local_steps(t0, rewards.shape[0])
        steps = steps if rewards.ndim == 1 else steps[:, None]
        return (np.rint(rewards / LAPLACE_GRID) + steps) * LAPLACE_GRID

    def oracle(self, t0: int, n: int) -> np.ndarray:
        """Every arm's report of users t0 … t0 + n − 1, (n, K) (in-process look-ahead only)."""
        u = self.users.uniforms(t0, n)
        return self.reports(t0, rewards_from_uniforms(self.instance, self.instance.means[None], u[:, :1]))

    def act(self, plan: Plan, block: int, first: int, size: int, stay) -> BlockAnswer:
        b = plan.body
        t = np.arange(first + 1, first + size + 1)
        arms = np.asarray(b["arms"])[0][t - b["t0"]]
        got, realized = self.users.pull(first + 1, arms)
        running = np.cumsum(on_regret_grid(realized))
        pseudo = np.cumsum(self.gaps[arms])
        lo, hi = np.searchsorted(self.checkpoints, [first + 1, first + size + 1])
        at = self.checkpoints[lo:hi] - first - 1
        truth = Truth(plan.id, block, first, size, pseudo=pseudo[-1:], realized=running[-1:],
                      pseudo_at=pseudo[at][None], realized_at=running[at][None])
        offsets = np.arange(size) if stay is None else np.flatnonzero(stay)
        values = self.reports(first + 1, got)[offsets]
        return BlockAnswer(truth, [(plan.joins[0].round_id, offsets, values.reshape(1, -1, 1), None)])
