"""The private-online-learning family (Hu, Huang & Mehta) as a spine plug-in."""

from __future__ import annotations

import numpy as np

from privbandit.families.distributed_dp_mab import adversaries as mab_adversaries
from privbandit.families.distributed_dp_mab.base import RoundParams
from privbandit.families.distributed_dp_mab.learners import SajedSheffetSchedule, SuccessiveElimination, sajed_sheffet_width
from privbandit.families.distributed_dp_mab.mechanisms import CentralLaplace, PolyaSecAgg
from privbandit.families.distributed_dp_mab.parties import BanditUsers, EliminationServer
from privbandit.families.distributed_dp_mab.world import BanditInstance
from privbandit.families.private_online_learning import adversaries, config as cfg
from privbandit.families.private_online_learning.mechanisms import (
    DistributedArraySum,
    DistributedNoisyMax,
    ReportNoisyMax,
    hybrid_epsilon,
)
from privbandit.families.private_online_learning.parties import (
    ExpertsServer,
    FtnlServer,
    HybridServer,
    LazyServer,
    OnlineBanditUsers,
)
from privbandit.families.private_online_learning.world import OnlineUsers
from privbandit.protocol.privacy import Ledger, NonPrivate as NonPrivateEvent, PureDP, default_delta
from privbandit.protocol.spine.family import Family
from privbandit.protocol.spine.observer import checkpoint_grid

ROUND_FIELDS = ["user", "arm", "array", "epoch", "batch", "played", "next", "estimate_sum", "wrapped", "g", "tau",
                "m", "sums_released", "attackers", "epsilon_coalition"]


def instance_of(config: cfg.OnlineExperiment) -> BanditInstance:
    env = config.environment
    return BanditInstance(np.array(env.means), env.reward, env.sd)


def spent_per_unit_epsilon(a: cfg.OnlineAlgorithm, n_arms: int, horizon: int) -> float:
    """What each user spends, as the ledger records it, per unit of the algorithm's nominal ε.

    Every release of this family is pure ε-DP and its ε is linear in the nominal one, so
    calibrating to a target is a division: Anytime-Lazy-UCB's arrays and DP-SE's batches spend ε;
    Hybrid-UCB's array and tree together 1.5ε with the paper's depth r (ε with r + 1,
    :func:`~.mechanisms.hybrid_epsilon`); FTNL's report noisy max 2ε/c, or Kε/c when the K sums
    reach the analyzer (the mechanisms' own privacy events)."""
    if a.algorithm == "hybrid-ucb":
        return hybrid_epsilon(1.0, a.tree_depth, max(1, horizon.bit_length()))
    if a.algorithm in ("naive-ftnl", "ftl", "hedge"):  # ε by basic composition; the others non-private
        return 1.0
    if a.algorithm == "ftnl":
        rnm = (ReportNoisyMax(1.0, a.rnm_multiplier) if a.trust == "central"
               else DistributedNoisyMax(1.0, 1.0 / horizon, a.rnm_multiplier, a.argmax_at))
        return rnm.privacy_event(n_arms).pure_epsilon
    return 1.0


class PrivateOnlineLearning(Family):
    name = "private-online-learning"
    title = "Hu, Huang & Mehta, Near-Optimal Algorithms for Private Online Learning in a Stochastic Environment"
    algorithm_lines = {
        "anytime-lazy-ucb": "Algorithm 1: lazy UCB on doubling arrays with Laplace sums (central or distributed)",
        "hybrid-ucb": "Algorithm 4: tree-based and array-based private means (central)",
        "dp-se": "Sajed & Sheffet's DP successive elimination, the paper's bandit baseline",
        "ftnl": "Algorithms 2–3: follow the noisy leader with report noisy max (full information)",
        "naive-ftnl": "baseline (§5): FTNL with every action's epoch sum released at ε/K (full information)",
        "ftl": "baseline: Follow the Leader on every user's reward vector, non-private (full information)",
        "hedge": "baseline: Hedge, exponential weights with η = sqrt(8 ln K/T), non-private (full information)",
    }
    experiment_model = cfg.OnlineExperiment
    round_fields = ROUND_FIELDS
    adversaries = adversaries.ADVERSARIES

    def algorithm(self, config, label: str) -> cfg.OnlineAlgorithm:
        a = config.algorithms[label]
        if a.epsilon is not None:
            return a
        scale = spent_per_unit_epsilon(a, len(config.environment.means), config.horizon) if config.calibrate else 1.0
        return a.model_copy(update={"epsilon": config.epsilon / scale})

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
        secagg = a.secagg_graph if a.intermediary == "secagg" else None
        if a.algorithm == "anytime-lazy-ucb":
            return LazyServer(k, a.epsilon, horizon, key, a.trust, p, secagg, a.threat_model())
        if a.algorithm == "hybrid-ucb":
            return HybridServer(k, a.epsilon, a.tree_depth, horizon, key, oracle)
        if a.algorithm in ("ftnl", "naive-ftnl"):
            return FtnlServer(k, a.epsilon, horizon, key, a.trust, p, a.rnm_multiplier, a.argmax_at, secagg,
                              a.threat_model(), naive=a.algorithm == "naive-ftnl")
        if a.algorithm in ("ftl", "hedge"):
            return ExpertsServer(a.algorithm, k, horizon, key, oracle)
        beta = a.beta if a.beta is not None else 1.0 / horizon
        learner = SuccessiveElimination(k, SajedSheffetSchedule(a.epsilon, beta), sajed_sheffet_width(beta))
        return EliminationServer(learner, self.dp_se_mechanism(a, beta), horizon, key, secagg=secagg,
                                 threat=a.threat_model())

    @staticmethod
    def dp_se_mechanism(a: cfg.OnlineAlgorithm, beta: float):
        """DP-SE (Sajed & Sheffet 2019, β = 1/T as Hu et al. §6): central Laplace, or Dist-DP-SE's
        Pólya shares under DP-SE's epoch schedule and radius (distributed)."""
        return CentralLaplace(a.epsilon) if a.trust == "central" else PolyaSecAgg(a.epsilon, beta)

    def check_secure_round(self, config, label: str, rnd) -> None:
        self.algorithm(config, label).check_secure_round(label, rnd)

    def ledger(self, public: dict) -> Ledger:
        a = cfg.OnlineAlgorithm.model_validate(public["algorithm"])
        if a.algorithm in ("ftl", "hedge"):
            return Ledger("none", None, public["delta"], users=public["horizon"])
        return Ledger(a.trust, a.epsilon, public["delta"], users=public["horizon"])

    def audit_targets(self, config, label: str, cohort: int | None = None) -> list:
        from privbandit.families.private_online_learning.audit import online_targets  # docs/audit.md

        return online_targets(self, config, label, cohort)

    def audit_candidates(self, config, label: str, cohort: int | None = None) -> list[list]:
        from privbandit.families.private_online_learning.audit import online_candidates

        return online_candidates(self, config, label, cohort)

    def canary_audit(self, config, label: str, seed: int, confidence: float) -> dict:
        from privbandit.families.private_online_learning.audit import online_canary_audit  # docs/audit.md

        return online_canary_audit(self, config, label, seed, confidence)

    def wire_target(self, config, label: str, target, mechanism=None):
        from privbandit.families.private_online_learning.audit import online_wire  # docs/audit.md

        return online_wire(self, config, label, target, mechanism)

    def users(self, config, label: str, runs: list[int], world=None):
        """``world``: the users' rewards in place of the simulated :class:`OnlineUsers` (a Policy's caller world)."""
        (run,) = runs
        a = self.algorithm(config, label)
        inst, prefix = instance_of(config), (run, label)
        checkpoints = checkpoint_grid(config.horizon, config.checkpoints)
        if a.algorithm == "dp-se":
            beta = a.beta if a.beta is not None else 1.0 / config.horizon
            return BanditUsers(inst if world is None else world.instance, self.dp_se_mechanism(a, beta), config.seed,
                               prefix, checkpoints)
        full = a.algorithm in ("ftnl", "naive-ftnl", "ftl", "hedge")
        width = inst.n_arms if full else 2
        online = OnlineUsers(inst, config.seed, prefix, width) if world is None else world
        return OnlineBanditUsers(online, config.seed, prefix, checkpoints,
                                 self.randomizer(config, a), full_information=a.algorithm in ("ftl", "hedge"))

    def policy_users(self, config, label: str, run: int, ask, contexts=None):
        """The bandit-feedback algorithms' users with the caller's rewards (:mod:`.caller`)."""
        from privbandit.families.private_online_learning.caller import caller_users

        return caller_users(self, config, label, run, ask, contexts)

    def adversary(self, config, label: str, run: int):
        """Poisoning users or colluders of one run (:mod:`.adversaries`); DP-SE's batches are the
        MAB family's rounds and take the MAB family's adversaries."""
        a = self.algorithm(config, label)
        if a.adversary is None or a.adversary.fraction == 0:
            return None
        extra = {"magnitude": a.adversary.magnitude} if a.adversary.kind == "out-of-range" else {}
        best = instance_of(config).best_arm
        if a.algorithm == "dp-se":
            beta = a.beta if a.beta is not None else 1.0 / config.horizon
            return mab_adversaries.ADVERSARIES[a.adversary.kind](
                a.adversary.fraction, self.dp_se_mechanism(a, beta), config.seed, (run, label), best_arm=best, **extra)
        return adversaries.ADVERSARIES[a.adversary.kind](a.adversary.fraction, self.randomizer(config, a),
                                                         config.seed, (run, label), best_arm=best, **extra)

    def randomizer(self, config, a: cfg.OnlineAlgorithm):
        """The users' randomizer of a distributed Anytime-Lazy-UCB or FTNL; None in the central model."""
        if a.trust != "distributed":
            return None
        p = a.p if a.p is not None else 1.0 / config.horizon
        if a.algorithm == "naive-ftnl":  # the K sums released, Lap_Z(K·g/ε) each (FtnlServer)
            return DistributedNoisyMax(a.epsilon, p, float(len(config.environment.means)), "analyzer")
        return (DistributedNoisyMax(a.epsilon, p, a.rnm_multiplier, a.argmax_at) if a.algorithm == "ftnl"
                else DistributedArraySum(a.epsilon, p))

    def row_maker(self, config, label: str):
        kind = self.algorithm(config, label).algorithm
        attacked = self.algorithm(config, label).adversary is not None

        def attackers(truths) -> dict:  # a round of one plan (a DP-SE batch, an FTNL epoch): its users' truths
            return {"attackers": sum(t.extras.get("attackers", 0) for t in truths)} if attacked else {}

        if kind in ("hybrid-ucb", "ftl", "hedge"):  # one release per user: rounds.csv lists none
            return lambda record, truths: None
        if kind == "dp-se":
            def dp_se_row(record, truths):
                b = record.body
                q = b["params"]
                return {"batch": b["batch"], "arm": b["arm"], "estimate_sum": b["estimate"], "wrapped": b["wrapped"],
                        "g": q["g"], "tau": q["tau"], "m": q["m"], "_params": q, **attackers(truths),
                        "true_sum": sum(t.extras["reward_sum"] for t in truths)}  # for privbandit attack's error

            return dp_se_row
        if kind in ("ftnl", "naive-ftnl"):
            return lambda record, truths: {**record.body, **attackers(truths)}
        return lambda record, truths: dict(record.body)

    def finish(self, config, label: str, result) -> None:
        """With colluders (DP-SE, FTNL), the ledger against the analyzer and the colluders: each
        round's event for its ``reports − colluders`` honest shares (the MAB family's dropout
        machinery: ``PolyaSecAgg.privacy_event``; FTNL's per coordinate, times 2 for the index or K
        for the sums, as :meth:`DistributedNoisyMax.privacy_event`). Central guarantees do not
        depend on the shares: the coalition's ε is the ledger's."""
        a = self.algorithm(config, label)
        colluding = a.adversary is not None and a.adversary.fraction > 0 and a.adversary.kind == "colluders"
        ledger = Ledger(a.trust, a.epsilon, self.delta(config), users=config.horizon) if colluding else None
        k = len(config.environment.means)
        for row in result.rounds:
            q = row.pop("_params", None)
            if ledger is None:
                continue
            honest = row["reports"] - row["attackers"]
            event = self.coalition_event(config, a, q, row, honest, k)
            ledger.record(event)
            row["epsilon_coalition"] = ledger.event_epsilon(event)
        if ledger is not None:
            result.privacy = {**result.privacy, "coalition": {
                **ledger.summary(), "colluders": sum(row["attackers"] for row in result.rounds)}}

    def coalition_event(self, config, a: cfg.OnlineAlgorithm, q: dict | None, row: dict, honest: int, k: int):
        """One release's guarantee when only ``honest`` of its shares are secret from the analyzer."""
        if honest < 1:
            return NonPrivateEvent()
        if a.trust == "central":
            return (CentralLaplace(a.epsilon).privacy_event(RoundParams(**q)) if a.algorithm == "dp-se"
                    else ReportNoisyMax(a.epsilon, a.rnm_multiplier).privacy_event(k))
        if a.algorithm == "dp-se":
            beta = a.beta if a.beta is not None else 1.0 / config.horizon
            return self.dp_se_mechanism(a, beta).privacy_event(RoundParams(**q), honest)
        rnm = self.randomizer(config, a)
        per = rnm.mechanism.privacy_event(rnm.params(row["n"]), honest).pure_epsilon
        return PureDP(per * (k if a.argmax_at == "analyzer" else 2))

    def label_summary(self, config, label: str, results: list) -> dict:
        a = self.algorithm(config, label)
        rows = [row for r in results for row in r.rounds]
        out = {"trust": a.trust, "releases_per_run": float(np.mean([r.privacy["releases"] for r in results])),
               "wrap_arounds": sum(bool(x.get("wrapped")) for x in rows)}
        if a.adversary is not None and a.algorithm != "anytime-lazy-ucb":  # the attackers' reports, all runs
            out["attackers"] = sum(x.get("attackers", 0) for x in rows)  # (an array's are not counted per round)
        return out

    def experiment_summary(self, config) -> dict:
        env = config.environment
        out = {"means": env.means, "reward": env.reward}
        if config.calibrate:  # each algorithm's solved ε is in algorithms.<label>.parameters.epsilon
            out["calibrated_to"] = {"epsilon": config.epsilon}
        return out


FAMILY = PrivateOnlineLearning()
