"""An example privbandit family, outside privbandit: randomized-response explore-then-commit.

Each user pulls one arm and reports its Bernoulli reward through randomized response (pure ε-LDP,
Warner 1965): the true bit with probability p = e^ε/(1+e^ε), else its flip. The aggregator sums
each arm's ``explore`` reports; the analyzer debiases each sum, ``(S − n(1−p)) / (2p−1)``, and
commits every later user to the best estimate. One entry point in ``pyproject.toml`` plugs it in;
privbandit's spine gives it the MQTT services, report MACs, checkpoints and the results writer.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.privacy import Ledger, PureDP, default_delta
from privbandit.protocol.spine.events import Join, Plan, Round, Truth
from privbandit.protocol.spine.family import BlockAnswer, Family, Spend
from privbandit.protocol.spine.observer import checkpoint_grid, checkpoints_in
from privbandit.runner.config import ExperimentFile, StrictModel

GRID = 2**53  # the keep-probability is a multiple of 2^-53, drawn exactly from 53 random bits


def keep_probability(epsilon: float) -> tuple[int, float]:
    """RR's keep-probability on the 2^-53 grid, rounded down, and the ε it truly gives:
    log(p'/(1−p')) ≤ ε, so the ledger states what the sampled law holds, not the nominal ε."""
    keep = math.floor(GRID * math.exp(epsilon) / (1 + math.exp(epsilon)))
    while math.log(keep) - math.log(GRID - keep) > epsilon:  # float rounding may have rounded p up
        keep -= 1
    return keep, math.log(keep) - math.log(GRID - keep)


class CoinAlgorithm(StrictModel):
    algorithm: Literal["rr-etc"] = "rr-etc"
    explore: Annotated[int, Field(ge=1, le=10**7)] = 1000  # users per arm before committing
    epsilon: Annotated[float, Field(gt=0, le=20)] | None = None


class CoinExperiment(ExperimentFile):
    family: Literal["coin"] = "coin"
    name: str = "coin"
    description: str = ""
    horizon: Annotated[int, Field(ge=2, le=10**9)]
    seed: Annotated[int, Field(ge=0)] = 0
    epsilon: Annotated[float, Field(gt=0, le=20)] = 1.0
    runs: Annotated[int, Field(ge=1, le=10_000)] = 1
    delta: Annotated[float, Field(gt=0, lt=1)] | None = None
    checkpoints: Annotated[int, Field(ge=4, le=100_000)] = 100
    means: Annotated[list[Annotated[float, Field(ge=0, le=1)]], Field(min_length=2, max_length=100)]
    algorithms: dict[str, CoinAlgorithm]


class CoinServer:
    """The analyzer's logic: one explore plan per arm (a sum round at the aggregator), then one
    commit plan for every remaining user."""

    def __init__(self, arms: int, horizon: int, explore: int, epsilon: float):
        self.arms, self.horizon, self.explore = arms, horizon, explore
        keep, self.epsilon = keep_probability(epsilon)
        self.keep = keep / GRID
        self.planned, self.estimates, self.done = 0, {}, False

    def plans(self) -> list[Plan]:
        if self.done or (self.planned and len(self.estimates) < self.arms):
            return []
        if not self.planned:  # explore: arm a's users are a contiguous cohort reporting into round a
            out = []
            for a in range(self.arms):
                n = min(self.explore, self.horizon - self.planned)
                if n <= 0:
                    break
                rnd = Round(a, "aggregator", "sum", expected=n, low=0, high=1)
                out.append(Plan(a, self.planned, n, {"arm": a}, (rnd,), (Join(a, self.planned, n, n),)))
                self.planned += n
            self.arms = len(out)
            return out
        self.done = True  # commit the rest to the best estimate
        best = max(self.estimates, key=lambda a: (self.estimates[a], -a))
        rest = self.horizon - self.planned
        return [Plan(self.arms, self.planned, rest, {"arm": best})] if rest else []

    def on_release(self, rnd: Round, release) -> tuple[dict, Spend]:
        n, p = release.n_reports, self.keep
        estimate = (float(release.values[0, 0]) - n * (1 - p)) / (2 * p - 1) / n
        self.estimates[rnd.id] = estimate
        return {"arm": rnd.id, "estimate": estimate}, Spend(PureDP(self.epsilon))

    def summary(self) -> list[dict]:
        return [{"estimates": [self.estimates.get(a) for a in range(self.arms)]}]


class CoinUsers:
    """Users of one run: Bernoulli rewards; a block's draws come from its own stream."""

    def __init__(self, means: list[float], seed: int, prefix: tuple, epsilon: float, checkpoints: np.ndarray):
        self.means, self.seed, self.prefix = np.asarray(means), seed, prefix
        self.keep = keep_probability(epsilon)[0]
        self.checkpoints = checkpoints

    def shard(self, plan: Plan, block: int, shards: int) -> int:
        return block % shards

    def act(self, plan: Plan, block: int, first: int, size: int, stay) -> BlockAnswer:
        arm, best = plan.body["arm"], int(np.argmax(self.means))
        rng = stream(self.seed, *self.prefix, "users", plan.id, block)
        reward = rng.random(size) < self.means[arm]
        regret = np.cumsum((rng.random(size) < self.means[best]).astype(float) - reward)
        reports = []
        if plan.joins:
            keep = rng.integers(0, GRID, size, dtype=np.uint64) < self.keep  # exact Bernoulli(p')
            offsets = np.arange(size) if stay is None else np.flatnonzero(stay)
            bits = (reward == keep)[offsets].astype(np.int64)  # the true bit if kept, else its flip
            reports.append((plan.id, offsets, bits.reshape(1, -1, 1), None))
        cps = checkpoints_in(self.checkpoints, first, size)
        gap = float(self.means[best] - self.means[arm])
        truth = Truth(plan.id, block, first, size, pseudo=np.array([gap * size]), realized=regret[-1:],
                      pseudo_at=(gap * (cps - first))[None], realized_at=regret[cps - first - 1][None])
        return BlockAnswer(truth, reports)


class CoinFamily(Family):
    name = "coin"
    title = "Example: randomized-response explore-then-commit (a family outside privbandit)"
    experiment_model = CoinExperiment
    round_fields = ["arm", "estimate"]

    def _epsilon(self, config, label: str) -> float:
        return config.algorithms[label].epsilon or config.epsilon

    def intermediaries(self, config) -> list[str]:
        return ["aggregator"]

    def users_protected(self, config) -> int:
        return config.horizon

    def public_task(self, config, label: str, runs: list[int]) -> dict:
        delta = config.delta or default_delta(config.horizon)
        return {"arms": len(config.means), "horizon": config.horizon, "explore": config.algorithms[label].explore,
                "epsilon": self._epsilon(config, label), "delta": delta}

    def analyzer(self, public: dict, keys: list[int], oracle=None) -> CoinServer:
        return CoinServer(public["arms"], public["horizon"], public["explore"], public["epsilon"])

    def ledger(self, public: dict) -> Ledger:
        return Ledger("local", public["epsilon"], public["delta"], users=public["horizon"])

    def users(self, config, label: str, runs: list[int]) -> CoinUsers:
        (run,) = runs
        return CoinUsers(config.means, config.seed, (run, label), self._epsilon(config, label),
                         checkpoint_grid(config.horizon, config.checkpoints))

    def row_maker(self, config, label: str):
        return lambda record, truths: dict(record.body)


FAMILY = CoinFamily()
