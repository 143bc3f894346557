"""The private-online-learning family (Hu, Huang & Mehta) as a spine plug-in."""

from __future__ import annotations

import numpy as np

from privbandit.families.distributed_dp_mab.learners import SajedSheffetSchedule, SuccessiveElimination, sajed_sheffet_width
from privbandit.families.distributed_dp_mab.mechanisms import CentralLaplace, PolyaSecAgg
from privbandit.families.distributed_dp_mab.parties import BanditUsers, EliminationServer
from privbandit.families.distributed_dp_mab.world import BanditInstance
from privbandit.families.private_online_learning import config as cfg
from privbandit.families.private_online_learning.mechanisms import DistributedArraySum, DistributedNoisyMax
from privbandit.families.private_online_learning.parties import FtnlServer, HybridServer, LazyServer, OnlineBanditUsers
from privbandit.families.private_online_learning.world import OnlineUsers
from privbandit.protocol.privacy import Ledger, default_delta
from privbandit.protocol.spine.family import Family
from privbandit.protocol.spine.observer import checkpoint_grid

ROUND_FIELDS = ["user", "arm", "array", "epoch", "batch", "played", "next", "estimate_sum", "wrapped", "g", "tau",
                "m", "sums_released"]


def instance_of(config: cfg.OnlineExperiment) -> BanditInstance:
    env = config.environment
    return BanditInstance(np.array(env.means), env.reward, env.sd)


class PrivateOnlineLearning(Family):
    name = "private-online-learning"
    title = "Hu, Huang & Mehta, Near-Optimal Algorithms for Private Online Learning in a Stochastic Environment"
    experiment_model = cfg.OnlineExperiment
    round_fields = ROUND_FIELDS

    def algorithm(self, config, label: str) -> cfg.OnlineAlgorithm:
        a = config.algorithms[label]
        return a if a.epsilon is not None else a.model_copy(update={"epsilon": config.epsilon})

    def intermediaries(self, config) -> list[str]:
        return ["aggregator"]

    def users_protected(self, config) -> int:
        return config.horizon

    def delta(self, config) -> float:
        return config.delta if config.delta is not None else default_delta(config.horizon)

    def public_task(self, config, label: str, runs: list[int]) -> dict:
        return {"algorithm": self.algorithm(config, label).model_dump(), "horizon": config.horizon,
                "arms": len(config.environment.means), "delta": self.delta(config)}

    def analyzer(self, public: dict, keys: list[int], oracle=None):
        a = cfg.OnlineAlgorithm.model_validate(public["algorithm"])
        horizon, k, key = public["horizon"], public["arms"], keys[0]
        p = a.p if a.p is not None else 1.0 / horizon  # decode failure per release: 1/T (§6)
        if a.algorithm == "anytime-lazy-ucb":
            return LazyServer(k, a.epsilon, horizon, key, a.trust, p)
        if a.algorithm == "hybrid-ucb":
            return HybridServer(k, a.epsilon, a.tree_depth, horizon, key, oracle)
        if a.algorithm == "ftnl":
            return FtnlServer(k, a.epsilon, horizon, key, a.trust, p, a.rnm_multiplier, a.argmax_at)
        beta = a.beta if a.beta is not None else 1.0 / horizon
        learner = SuccessiveElimination(k, SajedSheffetSchedule(a.epsilon, beta), sajed_sheffet_width(beta))
        return EliminationServer(learner, self.dp_se_mechanism(a, beta), horizon, key)

    @staticmethod
    def dp_se_mechanism(a: cfg.OnlineAlgorithm, beta: float):
        """DP-SE (Sajed & Sheffet 2019, β = 1/T as Hu et al. §6): central Laplace, or Dist-DP-SE's
        Pólya shares under DP-SE's epoch schedule and radius (distributed)."""
        return CentralLaplace(a.epsilon) if a.trust == "central" else PolyaSecAgg(a.epsilon, beta)

    def ledger(self, public: dict) -> Ledger:
        a = cfg.OnlineAlgorithm.model_validate(public["algorithm"])
        return Ledger(a.trust, a.epsilon, public["delta"], users=public["horizon"])

    def users(self, config, label: str, runs: list[int]):
        (run,) = runs
        a = self.algorithm(config, label)
        inst, prefix = instance_of(config), (run, label)
        checkpoints = checkpoint_grid(config.horizon, config.checkpoints)
        if a.algorithm == "dp-se":
            beta = a.beta if a.beta is not None else 1.0 / config.horizon
            return BanditUsers(inst, self.dp_se_mechanism(a, beta), config.seed, prefix, checkpoints)
        p = a.p if a.p is not None else 1.0 / config.horizon
        width = inst.n_arms if a.algorithm == "ftnl" else 2
        randomizer = None
        if a.trust == "distributed":
            randomizer = (DistributedNoisyMax(a.epsilon, p, a.rnm_multiplier, a.argmax_at) if a.algorithm == "ftnl"
                          else DistributedArraySum(a.epsilon, p))
        return OnlineBanditUsers(OnlineUsers(inst, config.seed, prefix, width), config.seed, prefix, checkpoints,
                                 randomizer)

    def row_maker(self, config, label: str):
        kind = self.algorithm(config, label).algorithm
        if kind == "hybrid-ucb":  # one release per user: rounds.csv lists none
            return lambda record, truths: None
        if kind == "dp-se":
            def dp_se_row(record, truths):
                b = record.body
                q = b["params"]
                return {"batch": b["batch"], "arm": b["arm"], "estimate_sum": b["estimate"], "wrapped": b["wrapped"],
                        "g": q["g"], "tau": q["tau"], "m": q["m"]}

            return dp_se_row
        return lambda record, truths: dict(record.body)

    def label_summary(self, config, label: str, results: list) -> dict:
        a = self.algorithm(config, label)
        rows = [row for r in results for row in r.rounds]
        return {"trust": a.trust, "releases_per_run": float(np.mean([r.privacy["releases"] for r in results])),
                "wrap_arounds": sum(bool(x.get("wrapped")) for x in rows)}

    def experiment_summary(self, config) -> dict:
        env = config.environment
        return {"means": env.means, "reward": env.reward}


FAMILY = PrivateOnlineLearning()
