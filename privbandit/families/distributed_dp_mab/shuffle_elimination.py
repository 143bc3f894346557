"""VB-SDP-AE: Tenenbaum, Kaplan, Mansour & Stemmer (NeurIPS 2021), the shuffle-model MAB of the
MAB paper's Table 1, as built here.

What the paper states and we keep [P, from its abstract and the MAB paper's account of it]:
(ε, δ)-DP in the shuffle model; arm elimination in batches whose estimates use *all* of an arm's
past data (not only the last batch, Chowdhury & Zhou's "forgetting"); a binary summation through
the shuffler with binomial noise (Chowdhury & Zhou, App. I: "binomial noise in Tenenbaum et al.
(2021) via secure shuffling"); regret O(Σ log T/Δ_a + K·sqrt(log(1/δ))·log T/ε).

What we built where the paper's text was not available to this project [R/I]:

- **Batches**: batch b gives each active arm l(b) = ⌈η^b⌉ new users (η = ``batch_growth``, 2 by
  default), as Algorithm 1 of Chowdhury & Zhou does.
- **The randomizer: binomial bits, so the exact count accountant, not split-and-mix.** User i turns
  her reward x ∈ [0, 1] into one bit Ber(x) (randomized rounding: unbiased, and the rewards need
  not be binary) and sends it with her share of N fair noise bits, each bit a message of its own;
  the shuffler releases the multiset of bits, i.e. the count of ones: the users' bits plus
  Bin(N, ½). N is the fewest noise bits for which that count is (ε, δ)-DP, computed by the exact
  accountant of shuffled counts (:func:`~privbandit.protocol.privacy.counts.fewest_noise_bits`,
  one label, shift 1: one user moves the count by at most one), and the ledger records the
  accountant's own ε at δ (:func:`~privbandit.protocol.privacy.counts.count_epsilon`). So the noise a
  guarantee rests on is N exactly fair bits (numpy's ``integers(0, 2)``), and the guarantee is
  computed, not a proof constant. Split-and-mix would sum the same bits with shares mod m, but a
  shuffled multiset of bits *is* its count: there is nothing left to hide, so the cheaper protocol
  is exact here. Each user sends 1 + ⌈N/n⌉ one-bit messages; slots beyond the round's N noise bits
  carry a 0, which changes no count.
- **Estimates and elimination**: arm a's estimate is (Σ_batches (C_b − N_b/2)) / Σ_b n_b; its radius
  is Hoeffding's on the Σ n_b reward bits plus the binomial noise's sub-Gaussian tail (variance
  proxy Σ N_b/4), both at confidence p/(2K b²) (p = 1/T); arm a is eliminated when its upper bound
  falls below another's lower bound.
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.families.distributed_dp_mab.world import BanditInstance
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.privacy import ApproxDP
from privbandit.protocol.privacy.counts import BASIS, count_epsilon, fewest_noise_bits
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Round, Truth
from privbandit.protocol.spine.family import BlockAnswer, Spend


def noise_bits(epsilon: float, delta: float) -> int:
    """N: the fewest fair noise bits that make one shuffled count (ε, δ)-DP (any number of users)."""
    return fewest_noise_bits(1, 1, 1, float(epsilon), float(delta))


def round_width(n: int, noise: int) -> int:
    """Messages per user: her reward bit and her share of the round's N noise bits."""
    return 1 + math.ceil(noise / n)


def count_event(noise: int, delta: float) -> ApproxDP:
    """A round's guarantee: the exact count accountant's ε at δ for Bin(N, ½) noise."""
    return ApproxDP(count_epsilon(noise, 1, 1, delta), delta, BASIS)


class ShuffleEliminationServer:
    """VB-SDP-AE's analyzer: one ``shuffle`` round of one-bit messages per (batch, active arm)."""

    def __init__(self, n_arms: int, epsilon: float, delta: float, horizon: int, growth: float, p: float):
        self.k, self.horizon, self.growth, self.p = n_arms, horizon, growth, p
        self.noise = noise_bits(epsilon, delta)
        self.event = count_event(self.noise, delta)
        self.active = np.arange(n_arms)
        self.sums = np.zeros(n_arms)  # Σ_b (C_b − N_b/2): the arm's estimated reward-bit sum
        self.users = np.zeros(n_arms)  # Σ_b n_b
        self.noise_total = np.zeros(n_arms)  # Σ_b N_b
        self.eliminated_at = np.zeros(n_arms, dtype=np.int64)
        self.batch, self.t, self.next_id = 1, 0, 0
        self.open: dict[int, tuple[int, int, int]] = {}  # round → (arm, n, batch)
        self.concluded: dict[int, tuple[float, int]] = {}  # this batch's arms: (estimated sum, n)
        self.batch_arms: list[int] = []

    @property
    def done(self) -> bool:
        return self.t >= self.horizon

    def plans(self) -> list[Plan]:
        if self.open or self.done:
            return []
        l = math.ceil(self.growth ** self.batch)
        plans, self.batch_arms = [], []
        for arm in self.active.tolist():
            n = min(l, self.horizon - self.t)
            if n < 1:
                break
            body = {"batch": self.batch, "arm": arm}
            if n == l:  # a complete batch round; the horizon's truncated last one is never released
                rid, self.next_id = self.next_id, self.next_id + 1
                width = round_width(n, self.noise)
                rnd = Round(rid, "shuffler", "shuffle", expected=n, width=width, m=2, messages=True)
                self.open[rid] = (arm, n, self.batch)
                self.batch_arms.append(arm)
                plans.append(Plan(self.t, self.t, n, {**body, "noise": self.noise}, (rnd,), (Join(rid, self.t, n, n),)))
            else:
                plans.append(Plan(self.t, self.t, n, body))
            self.t += n
        return plans

    def on_release(self, rnd: Round, release: Release) -> tuple[dict, Spend]:
        if rnd.id not in self.open:
            raise ProtocolError("unknown-round", f"no open round {rnd.id}")
        arm, n, batch = self.open[rnd.id]
        if release.n_reports != n:
            raise ProtocolError("bad-report-count", f"round {rnd.id}: {release.n_reports} reports, not {n}")
        count = int(np.asarray(release.values).sum())
        del self.open[rnd.id]
        estimate = count - self.noise / 2
        self.concluded[arm] = (estimate, n)
        if not self.open and set(self.concluded) == set(self.batch_arms) and self.batch_arms:
            self.conclude()
        return ({"batch": batch, "arm": arm, "count": count,
                 "estimate_sum": estimate, "noise_bits": self.noise}, Spend(self.event))

    def radius(self) -> np.ndarray:
        """Hoeffding on the arm's reward bits plus the binomial noise's tail, at p/(2K b²) each."""
        log = math.log(4 * self.k * self.batch**2 / self.p)
        n = self.users[self.active]
        return np.sqrt(log / (2 * n)) + np.sqrt(self.noise_total[self.active] * log / 2) / n

    def conclude(self) -> None:
        for arm, (estimate, n) in self.concluded.items():
            self.sums[arm] += estimate
            self.users[arm] += n
            self.noise_total[arm] += self.noise
        self.concluded = {}
        if len(self.batch_arms) == self.active.size:  # every active arm's round of this batch is in
            mu = self.sums[self.active] / self.users[self.active]
            radius = self.radius()
            keep = mu + radius >= (mu - radius).max()
            self.eliminated_at[self.active[~keep]] = self.batch
            self.active = self.active[keep]
        self.batch += 1

    def summary(self) -> list[dict]:
        return [{"eliminated_at": self.eliminated_at.tolist()}]


class ShuffleEliminationUsers:
    """VB-SDP-AE's users: the arm's reward, its bit Ber(x), the fair noise bits of the user's slots.
    Draws come from ``(seed, run, label, "users", plan, block)`` (rewards, then bits)."""

    def __init__(self, instance: BanditInstance, seed: int, prefix: tuple, checkpoints: np.ndarray, noise: int):
        self.instance, self.seed, self.prefix = instance, seed, prefix
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)
        self.noise = noise  # the noise bits the users' own (ε, δ) needs: a round asking fewer is refused

    def shard(self, plan: Plan, block: int, shards: int) -> int:
        return block % shards

    def act(self, plan: Plan, block: int, first: int, size: int, stay) -> BlockAnswer:
        inst, arm = self.instance, plan.body["arm"]
        rng = stream(self.seed, *self.prefix, "users", plan.id, block)
        rewards = inst.sample(arm, size, rng)
        running = (np.zeros(size) if arm == inst.best_arm
                   else np.cumsum(inst.sample(inst.best_arm, size, rng) - rewards))
        lo, hi = np.searchsorted(self.checkpoints, [first + 1, first + size + 1])
        cps = self.checkpoints[lo:hi]
        gap = float(inst.gaps[arm])
        truth = Truth(plan.id, block, first, size, pseudo=np.array([gap * size]), realized=np.array([running[-1]]),
                      pseudo_at=(gap * (cps - first))[None], realized_at=running[cps - first - 1][None],
                      extras={"reward_sum": float(rewards.sum()), "attackers": 0})
        if not plan.joins:
            return BlockAnswer(truth)
        rnd = plan.opens[0]
        noise, width = int(plan.body["noise"]), rnd.width
        need = round_width(rnd.expected, self.noise)
        if noise < self.noise or width < round_width(rnd.expected, noise):
            # a curious analyzer asking for less noise than the users' (ε, δ) needs gets no report
            raise ProtocolError("bad-round", f"round {rnd.id}: {noise} noise bits in messages of {width}; this "
                                             f"run's (ε, δ) needs {self.noise} in {need}")
        bits = np.zeros((size, width), dtype=np.int64)
        bits[:, 0] = rng.random(size) < rewards  # Ber(x): randomized rounding of the reward to a bit
        # Slot j ≥ 1 of the round's i-th user is live iff (i·(width − 1) + j − 1) < N: the N noise bits,
        # filled user by user; the others stay 0.
        i = (first - plan.first_user) + np.arange(size)
        live = (i[:, None] * (width - 1) + np.arange(width - 1)[None]) < noise
        bits[:, 1:] = np.where(live, rng.integers(0, 2, size=(size, width - 1)), 0)
        offsets = np.arange(size) if stay is None else np.flatnonzero(stay)
        return BlockAnswer(truth, [(rnd.id, offsets, bits[offsets][None], None)])
