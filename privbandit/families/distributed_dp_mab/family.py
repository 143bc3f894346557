"""The distributed-DP multi-armed bandit family (Chowdhury & Zhou, ICLR 2023) as a spine plug-in:
how an experiment file becomes mechanisms, learners, worlds and party logic."""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from privbandit import registry
from privbandit.families.distributed_dp_mab import adversaries, config as cfg
from privbandit.families.distributed_dp_mab.base import Mechanism, RoundParams
from privbandit.families.distributed_dp_mab.learners import (
    GeometricSchedule,
    Lemma2Width,
    SajedSheffetSchedule,
    SuccessiveElimination,
    sajed_sheffet_width,
)
from privbandit.families.distributed_dp_mab.mechanisms import (
    CentralDiscreteLaplace,
    CentralLaplace,
    DiscreteGaussianSecAgg,
    LocalDiscreteLaplace,
    NonPrivate,
    PolyaSecAgg,
    SkellamSecAgg,
)
from privbandit.families.distributed_dp_mab.parties import (
    BanditUsers,
    EliminationServer,
    check_split_round,
    release_event,
    split_round,
    split_shares,
)
from privbandit.families.distributed_dp_mab.returning import advanced_ledger, advanced_targets, b_fold
from privbandit.families.distributed_dp_mab.sequential import TRUST as SEQUENTIAL_TRUST, SequentialLearner
from privbandit.families.distributed_dp_mab.sequential_parties import SequentialServer, SequentialUsers
from privbandit.families.distributed_dp_mab.shuffle_elimination import (
    ShuffleEliminationServer,
    ShuffleEliminationUsers,
    count_event,
    noise_bits,
)
from privbandit.families.distributed_dp_mab.world import BanditInstance, uniform_means
from privbandit.protocol.primitives.secagg.parameters import bounds as secagg_bounds, graph_for
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.privacy import Ledger, NonPrivate as NonPrivateEvent, default_delta
from privbandit.protocol.spine.events import Truth
from privbandit.protocol.spine.family import Family
from privbandit.protocol.spine.observer import checkpoint_grid
from privbandit.runner.config import ConfigError

ROUND_FIELDS = ["batch", "arm", "g", "tau", "m", "wrapped", "estimate_sum", "true_sum", "noise", "noise_bound",
                "noise_encoded", "decode_failure", "attackers", "epsilon_coalition", "secagg_k", "secagg_t", "shares",
                "closeness"]


def build_mechanism(a: cfg.AlgorithmConfig) -> Mechanism:
    match a.algorithm:
        case "dist-dp-se":  # through the split-and-mix shuffler, by default at Theorem 3's ε′ = ε/2
            return PolyaSecAgg(a.epsilon / 2 if cfg.theorem3_noise(a) else a.epsilon, a.p, a.dropout_tolerance)
        case "dist-rdp-se":
            return SkellamSecAgg(a.epsilon, a.p, s=a.s, tau_rule=a.tau_rule, dropout_tolerance=a.dropout_tolerance)
        case "dist-cdp-se":
            return DiscreteGaussianSecAgg(a.epsilon, a.p, s=a.s, dropout_tolerance=a.dropout_tolerance)
        case "cdp-se":
            return CentralDiscreteLaplace(a.epsilon, a.p)
        case "ldp-se":
            return LocalDiscreteLaplace(a.epsilon, a.p, c=a.ldp_c)
        case "dp-se":
            return CentralLaplace(a.epsilon)
        case "se":
            return NonPrivate()
    if a.algorithm in cfg.MECHANISM_PLUGINS:
        return _plugin("mechanism", a.algorithm, Mechanism, a)
    raise ValueError(f"unknown algorithm {a.algorithm!r}")


def _plugin(kind: str, name: str, expected: type, *args):
    """A registered plug-in's factory called with ``args``; what it returns must be ``expected``."""
    made = registry.plugins(cfg.FAMILY_NAME, kind)[name].load()(*args)
    if not isinstance(made, expected):
        raise ValueError(f"the {kind} plug-in {name!r} made a {type(made).__name__}, not a {expected.__name__}")
    return made


def check_options(a: cfg.AlgorithmConfig) -> None:
    """Every key of ``options`` is read by the table's plug-in mechanism or learner: each factory
    names what it reads in its ``options`` attribute, so a misspelt key is an error, not ignored."""
    readers = [(kind, name) for kind, name, plugged in (("mechanism", a.algorithm, a.algorithm in cfg.MECHANISM_PLUGINS),
                                                          ("learner", a.learner, a.learner != "auto")) if plugged]
    known = {key: name for kind, name in readers
             for key in getattr(registry.plugins(cfg.FAMILY_NAME, kind)[name].load(), "options", ())}
    if unknown := sorted(set(a.options) - set(known)):
        read = ", ".join(f"{name} reads {', '.join(k for k, n in known.items() if n == name) or 'none'}"
                         for _, name in readers)
        raise ValueError(f"options: {', '.join(unknown)} read by no plug-in of this table ({read})")


def build_learner(a: cfg.AlgorithmConfig, n_arms: int) -> SuccessiveElimination:
    if a.learner != "auto":
        return _plugin("learner", a.learner, SuccessiveElimination, a, n_arms)
    if a.algorithm == "dp-se":
        return SuccessiveElimination(n_arms, SajedSheffetSchedule(a.epsilon, a.p), sajed_sheffet_width(a.p, a.width_multiplier))
    return SuccessiveElimination(n_arms, GeometricSchedule(a.batch_growth), Lemma2Width(a.p, a.width_multiplier))


def release_sizes(a: cfg.AlgorithmConfig, horizon: int) -> list[int]:
    """Every round size n a run of ``a`` can release: l(b) per active arm, while it fits in T."""
    if a.learner != "auto":
        raise ConfigError(f"calibrate: the plug-in learner {a.learner!r} sets its own batch sizes, so the sizes "
                          f"its releases can have are unknown here; set the algorithm's epsilon")
    if a.algorithm == "dp-se":  # DP-SE's releases are pure ε whatever their size
        return [2]
    sizes, b = [], 1
    while (n := math.ceil(a.batch_growth ** b)) <= horizon:
        sizes.append(n)
        b += 1
    return sizes or [horizon]


def calibrated_epsilon(a: cfg.AlgorithmConfig, target: float, delta: float, horizon: int, returning: int = 1) -> float:
    """:func:`_calibrated`, cached by the table's JSON (a table holding ``options`` is not hashable)."""
    return _calibrated(a.model_dump_json(), target, delta, horizon, returning)


@lru_cache(maxsize=256)
def _calibrated(table: str, target: float, delta: float, horizon: int, returning: int = 1) -> float:
    """The largest nominal ε at which every release ``a`` can make is (target, δ)-DP for its users.

    Each user is in one release (one arm of one batch), so a user's guarantee is that release's; the
    worst over the possible round sizes is what must meet the target. The release's ε at δ is the
    ledger's own reading of its privacy event (pure ε, or the RDP/zCDP curve converted at δ), and it
    grows with the nominal ε, so bisection on log ε finds the answer to 10⁻⁹ relative. A release
    that spends less than its nominal ε (Theorem 3's split: the noise at ε/2) is solved upwards.
    Dropouts are not planned for: a round released by fewer users spends more, as the ledger then
    records."""
    a = cfg.AlgorithmConfig.model_validate_json(table)
    sizes = release_sizes(a, horizon)
    if a.intermediary == "shuffler-residues" and build_mechanism(a).trust_model == "distributed":
        raise ConfigError(f"calibrate: {a.algorithm} behind a shuffler releases every user's residue, which no proof "
                          f"covers (the ledger says none proven): there is no ε to calibrate; set its epsilon")

    def worst(eps: float) -> float:
        mech = build_mechanism(a.model_copy(update={"epsilon": eps}))
        if returning > 1:  # a user in B releases: B times the worst of them (returning.b_fold), at δ
            spent = b_fold([released_event(a, mech, n, delta) for n in sizes], returning, delta, horizon).summary()
            return math.inf if spent["epsilon_at_delta"] is None else spent["epsilon_at_delta"]
        ledger = Ledger(mech.trust_model, eps, delta, users=horizon)
        spent = [ledger.event_epsilon(released_event(a, mech, n, delta)) for n in sizes]
        if any(e is None for e in spent):
            raise ConfigError(f"calibrate: {a.algorithm} has a release with no proven guarantee to calibrate")
        return max(spent)

    at = worst(target)
    if at == target:  # pure ε-DP releases: the nominal ε is the guarantee
        return target
    lo, hi = 1e-6, target
    if at < target:  # spends less than it is named for: the answer lies above
        lo = hi = target
        while worst(hi) <= target:
            lo, hi = hi, 2 * hi
            if hi > 64 * target:
                return lo
    if worst(lo) > target:
        raise ConfigError(f"calibrate: {a.algorithm} cannot reach ε = {target} at δ = {delta} (ε = {lo} spends "
                          f"{worst(lo):.3g})")
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if worst(mid) <= target else (lo, mid)
        if hi / lo - 1 < 1e-9:
            break
    return lo


def released_event(a: cfg.AlgorithmConfig, mechanism: Mechanism, n: int, delta: float):
    """The event of a complete round of n users on ``a``'s route: the mechanism's own, or through the
    split-and-mix shuffler the secure sum's within the closeness of the shares it opens with."""
    q = mechanism.params(n)
    if a.intermediary != "shuffler":
        return mechanism.privacy_event(q)
    rnd = split_round(0, n, split_shares(mechanism, q, n, delta), q.m)  # the shares the analyzer asks for
    return release_event(mechanism, rnd, q, n, delta)


def build_instance(env: cfg.EnvironmentConfig, rng: np.random.Generator) -> BanditInstance:
    """One bandit instance; with kind = 'uniform' each run draws fresh means (20 instances, §7)."""
    if env.kind == "uniform":
        return BanditInstance(uniform_means(env.arms, env.low, env.high, rng), env.reward, env.sd)
    if env.kind == "means":
        return BanditInstance(np.array(env.means), env.reward, env.sd)
    from privbandit.datasets.letor import ArmMeans

    if env.kind == "bundled":  # k-means arms of a bundled real set, the paper's MSLR recipe
        from privbandit.datasets.real import mab_arms

        arms = mab_arms(env.dataset, env.arms)
    else:
        arms = ArmMeans.from_json(env.path)
    return BanditInstance(np.asarray(arms.means), env.reward, env.sd, levels=np.asarray(arms.levels),
                          probabilities=np.asarray(arms.probabilities))


def instance_for(config: cfg.ExperimentConfig, run: int) -> BanditInstance:
    """Run r of every algorithm faces the same instance, drawn from ``(seed, "instance", r)``."""
    return build_instance(config.environment, stream(config.seed, "instance", run))


def delta_of(config) -> float:
    return config.delta if config.delta is not None else default_delta(config.horizon)


class DistributedDpMab(Family):
    name = "distributed-dp-mab"
    title = "Chowdhury & Zhou (ICLR 2023), Distributed Differential Privacy in Multi-Armed Bandits"
    algorithm_lines = {
        "dist-dp-se": "Algorithm 1 with Pólya noise shares through secure aggregation: pure ε-DP (intermediary = "
                      "'shuffler': split-and-mix shares through a shuffler, Theorem 3's route, (ε/2, δ)-DP)",
        "dist-rdp-se": "Algorithm 1 with Skellam noise shares through secure aggregation: Rényi DP",
        "dist-cdp-se": "Algorithm 1 with discrete Gaussian shares through secure aggregation: concentrated DP",
        "cdp-se": "central: a trusted analyzer adds discrete Laplace noise to the encoded sums",
        "ldp-se": "local: each user adds Lap_Z(g/ε) alone, attributable reports",
        "dp-se": "Sajed & Sheffet's central DP successive elimination (grid Laplace)",
        "se": "successive elimination without privacy (raw rewards)",
        "ucb1": "baseline: UCB1 (Auer et al. 2002), non-private, one user per release",
        "thompson": "baseline: Thompson sampling with Gaussian priors (Agrawal & Goyal 2013), non-private",
        "mt-ucb": "baseline: private UCB on a binary-tree counter per arm (Mishra & Thakurta 2015), central ε-DP",
        "dp-ucb-bound": "baseline: DP-UCB-Bound, the hybrid counter per arm (Tossou & Dimitrakakis 2016), central ε-DP",
        "dp-ucb": "baseline: DP-UCB, the hybrid counter per arm, UCB1's index on its noisy mean without the noise "
                  "bound (Tossou & Dimitrakakis 2016), central ε-DP",
        "ldp-ucb": "baseline: LDP-UCB-L, grid Laplace on every reward (Ren et al. 2020), local ε-DP",
        "vb-sdp-ae": "baseline: Tenenbaum et al. 2021's shuffle-model arm elimination, reward bits and fair noise bits "
                     "through the shuffler, (ε, δ) by the exact count accountant",
    }
    experiment_model = cfg.ExperimentConfig
    round_fields = ROUND_FIELDS
    adversaries = adversaries.ADVERSARIES

    def load(self, data: dict, path: str) -> cfg.ExperimentConfig:
        config = cfg.ExperimentConfig.model_validate(data)
        if config.environment.path and not Path(config.environment.path).is_absolute():
            # absolute: the config.toml a results directory holds must find it from anywhere
            env = config.environment.model_copy(
                update={"path": str((Path(path).parent / config.environment.path).resolve())})
            config = config.model_copy(update={"environment": env})
        for label in config.algorithms:
            a = self.algorithm(config, label)
            if a.algorithm in cfg.SEQUENTIAL:
                try:
                    SequentialLearner(a.algorithm, 2, a.epsilon, config.horizon, 0)
                    if instance_for(config, 0).reward == "categorical":
                        raise ValueError("categorical rewards (a means file's levels) are not built for the sequential "
                                         "baselines; use reward = 'gaussian' or 'bernoulli'")
                except (ValueError, OSError) as exc:
                    raise ConfigError(f"algorithms.{label}: {exc}") from None
                continue
            if a.algorithm in cfg.SHUFFLE_BASELINES:
                try:
                    noise_bits(*self.count_target(config, a))
                except ValueError as exc:
                    raise ConfigError(f"algorithms.{label}: {exc}") from None
                continue
            try:  # fail before any work starts: bad parameters, a missing means file, ...
                check_options(a)
                mechanism = build_mechanism(a)
                mechanism.params(2)
                if a.intermediary == "secagg" and mechanism.intermediary != "modular-sum":
                    raise ValueError(f"intermediary = 'secagg' needs a modular-sum mechanism; {a.algorithm} "
                                     f"uses {mechanism.intermediary}")
                if a.intermediary == "secagg" and a.learner == "auto":
                    # Every cohort size a run can release must have a graph meeting the threat model
                    # (a plug-in learner's sizes are unknown here: its analyzer refuses at run time).
                    for n in release_sizes(a, config.horizon):
                        graph_for(a.secagg_graph, n, a.threat_model())
                if a.intermediary == "shuffler" and a.learner == "auto":
                    # ... and, through split-and-mix, shares within the closeness bound (else refused by name)
                    for n in release_sizes(a, config.horizon):
                        released_event(a, mechanism, n, delta_of(config))
                build_learner(a, instance_for(config, 0).n_arms)
            except (ValueError, OSError) as exc:
                raise ConfigError(f"algorithms.{label}: {exc}") from None
        return config

    def algorithm(self, config, label: str) -> cfg.AlgorithmConfig:
        a = cfg.resolve_algorithm(config, label)
        if a.algorithm in cfg.BASELINES:  # each user's guarantee is at most the file's (ε, δ) by construction
            return a
        if config.calibrate and config.algorithms[label].epsilon is None and build_mechanism(a).trust_model != "none":
            target, delta, b = config.epsilon, delta_of(config), config.returning
            if b > 1 and a.composition == "advanced":  # each release (ε_i, δ_i)-DP as App. I splits (ε, δ)
                eps_i, delta_i, _ = advanced_targets(target, delta, b)
                eps = calibrated_epsilon(a, eps_i, delta_i, config.horizon)
            else:
                eps = calibrated_epsilon(a, target, delta, config.horizon, returning=b)
            a = a.model_copy(update={"epsilon": eps})
        return a

    def intermediaries(self, config) -> list[str]:
        """The aggregator always; the shuffler when an algorithm routes through it."""
        resolved = [self.algorithm(config, label) for label in config.algorithms]
        shuffled = any(a.intermediary in ("shuffler", "shuffler-residues") or a.algorithm in cfg.SHUFFLE_BASELINES
                       for a in resolved)
        return ["aggregator", *(["shuffler"] if shuffled else [])]

    def count_target(self, config, a: cfg.AlgorithmConfig) -> tuple[float, float]:
        """VB-SDP-AE's (ε, δ) per round: the table's, or App. I's (ε_i, δ_i) split with returning users."""
        if config.returning > 1:
            eps_i, delta_i, _ = advanced_targets(a.epsilon, delta_of(config), config.returning)
            return eps_i, delta_i
        return a.epsilon, delta_of(config)

    def users_protected(self, config) -> int:
        return config.horizon  # every user's reward enters one release (Alg. 1, footnote 4)

    def public_task(self, config, label: str, runs: list[int]) -> dict:
        a = self.algorithm(config, label)
        extra = {"count_target": list(self.count_target(config, a))} if a.algorithm in cfg.SHUFFLE_BASELINES else {}
        return {"algorithm": a.model_dump(), "horizon": config.horizon,
                "arms": instance_for(config, runs[0]).n_arms, "delta": delta_of(config), **extra}

    def analyzer(self, public: dict, keys: list[int], oracle=None) -> EliminationServer:
        a = cfg.AlgorithmConfig.model_validate(public["algorithm"])
        if a.algorithm in cfg.SEQUENTIAL:
            return SequentialServer(a.algorithm, public["arms"], a.epsilon, public["horizon"], keys[0], oracle)
        if a.algorithm in cfg.SHUFFLE_BASELINES:
            eps, delta = public["count_target"]
            return ShuffleEliminationServer(public["arms"], eps, delta, public["horizon"], a.batch_growth, a.p)
        route = a.intermediary if a.intermediary in ("shuffler", "shuffler-residues") else "aggregator"
        return EliminationServer(build_learner(a, public["arms"]), build_mechanism(a), public["horizon"], keys[0],
                                 intermediary=route, secagg=a.secagg_graph if a.intermediary == "secagg" else None,
                                 bounded=a.range_check, threat=a.threat_model(), delta=public["delta"])

    def ledger(self, public: dict) -> Ledger:
        a = cfg.AlgorithmConfig.model_validate(public["algorithm"])
        if a.algorithm in cfg.SEQUENTIAL:
            trust = SEQUENTIAL_TRUST[a.algorithm]
            return Ledger(trust, None if trust == "none" else a.epsilon, public["delta"], users=public["horizon"])
        if a.algorithm in cfg.SHUFFLE_BASELINES:
            return Ledger("shuffle", a.epsilon, public["delta"], users=public["horizon"])
        mechanism = build_mechanism(a)
        return Ledger(mechanism.trust_model, None if mechanism.trust_model == "none" else a.epsilon, public["delta"],
                      users=public["horizon"])

    def users(self, config, label: str, runs: list[int], instance=None) -> BanditUsers:
        """``instance``: the world in place of run r's simulated one (a Policy's caller world)."""
        (run,) = runs
        a = self.algorithm(config, label)
        instance = instance_for(config, run) if instance is None else instance
        if a.algorithm in cfg.SEQUENTIAL:
            return SequentialUsers(instance, a.algorithm, a.epsilon, config.seed, (run, label),
                                   checkpoint_grid(config.horizon, config.checkpoints))
        if a.algorithm in cfg.SHUFFLE_BASELINES:
            return ShuffleEliminationUsers(instance, config.seed, (run, label),
                                           checkpoint_grid(config.horizon, config.checkpoints),
                                           noise_bits(*self.count_target(config, a)))
        return BanditUsers(instance, build_mechanism(a), config.seed, (run, label),
                           checkpoint_grid(config.horizon, config.checkpoints),
                           delta=delta_of(config) if a.intermediary == "shuffler" else None)

    def policy_users(self, config, label: str, run: int, ask, contexts=None):
        """Algorithm 1's users (and VB-SDP-AE's) with the caller's rewards (:mod:`.caller`)."""
        from privbandit.families.distributed_dp_mab.caller import caller_users

        return caller_users(self, config, label, run, ask, contexts)

    def dropout_rate(self, config, label: str) -> float:
        return self.algorithm(config, label).dropout_rate

    def check_secure_round(self, config, label: str, rnd) -> None:
        """The secure-aggregation graph (:meth:`~.config.SecureAggregationOptions.check_secure_round`),
        and a split-and-mix round's shares (:func:`~.parties.check_split_round`)."""
        a = self.algorithm(config, label)
        if a.algorithm in cfg.SHUFFLE_BASELINES:
            return  # its users check the round's noise bits themselves (ShuffleEliminationUsers.act)
        a.check_secure_round(label, rnd)
        if rnd.messages != (a.intermediary == "shuffler"):
            raise ValueError(f"round {rnd.id} is {'' if rnd.messages else 'not '}a split-and-mix round, but {label} "
                             f"here runs intermediary = {a.intermediary!r}")
        if rnd.messages:
            check_split_round(build_mechanism(a), delta_of(config), rnd)

    def adversary(self, config, label: str, run: int):
        a = self.algorithm(config, label)
        if a.adversary is None or a.adversary.fraction == 0:
            return None
        kind = adversaries.ADVERSARIES[a.adversary.kind]
        extra = {"magnitude": a.adversary.magnitude} if a.adversary.kind == "out-of-range" else {}
        return kind(a.adversary.fraction, build_mechanism(a), config.seed, (run, label),
                    best_arm=instance_for(config, run).best_arm, **extra)

    # --- privbandit audit ----------------------------------------------------------------------
    def audit_targets(self, config, label: str, cohort: int | None = None) -> list:
        """One release per algorithm: a round of ``cohort`` users as this algorithm's analyzer opens
        it (its intermediary's rule), the claim from this family's ledger (:mod:`.audit`)."""
        from privbandit.families.distributed_dp_mab.audit import elimination_targets

        if self.algorithm(config, label).algorithm in cfg.BASELINES:
            return []  # not audited yet (docs/baselines.md)
        return elimination_targets(self, config, label, cohort)

    def audit_candidates(self, config, label: str, cohort: int | None = None) -> list[list]:
        from privbandit.families.distributed_dp_mab.audit import elimination_candidates

        if self.algorithm(config, label).algorithm in cfg.BASELINES:
            return []
        return [elimination_candidates(self, config, label, cohort)]

    def canary_audit(self, config, label: str, seed: int, confidence: float) -> dict:
        from privbandit.families.distributed_dp_mab.audit import canary_audit

        return canary_audit(self, config, label, seed, confidence)

    def wire_target(self, config, label: str, target, mechanism=None):
        from privbandit.families.distributed_dp_mab.audit import elimination_wire

        return elimination_wire(self, config, label, target, mechanism)

    # --- the observer's extras ---------------------------------------------------------------
    def row_maker(self, config, label: str):
        """Per released round: g, τ, m, wrap-around, the noise realised against Assumption 1's
        bound ``σ·sqrt(log(2/p)) + h·log(2/p)``, decode failure (|Σ η| > τ), attackers."""
        if self.algorithm(config, label).algorithm in cfg.SEQUENTIAL:
            return lambda record, truths: None  # one release per user: rounds.csv lists none
        if self.algorithm(config, label).algorithm in cfg.SHUFFLE_BASELINES:
            def count_row(record, truths: list[Truth]) -> dict:
                b = record.body
                true_sum = sum(t.extras["reward_sum"] for t in truths)
                return {"batch": b["batch"], "arm": b["arm"], "estimate_sum": b["estimate_sum"], "true_sum": true_sum,
                        "noise": b["estimate_sum"] - true_sum}  # rounding to bits and binomial noise together

            return count_row
        log2p = math.log(2 / self.algorithm(config, label).p)

        def row(record, truths: list[Truth]) -> dict:
            b = record.body
            q = RoundParams(**b["params"])
            reward_sum = sum(t.extras["reward_sum"] for t in truths)
            noise_sum = sum(t.extras["noise_sum"] for t in truths)
            out = {"batch": b["batch"], "arm": b["arm"], "g": q.g, "tau": q.tau, "m": q.m, "wrapped": b["wrapped"],
                   "estimate_sum": b["estimate"], "true_sum": reward_sum, "noise": b["estimate"] - reward_sum,
                   "noise_bound": q.sigma * math.sqrt(log2p) + q.h * log2p,
                   "attackers": sum(t.extras.get("attackers", 0) for t in truths),
                   "_params": q}  # for finish(); not a rounds.csv column
            if "secagg_k" in b:  # the secure-aggregation graph the round's plan carried
                out["secagg_k"], out["secagg_t"] = b["secagg_k"], b["secagg_t"]
            if "shares" in b:  # split-and-mix: shares per user, and the closeness they reach
                out["shares"], out["closeness"] = b["shares"], b["closeness"]
            if q.g is not None:
                total_eta = noise_sum + round(b["central_noise"] * q.g)
                out["noise_encoded"] = total_eta
                out["decode_failure"] = abs(total_eta) > q.tau
            return out

        return row

    def finish(self, config, label: str, result) -> None:
        """With colluders, the ledger against the analyzer and the colluders (adversaries.Colluders):
        each round's event for the ``reports − colluders`` honest shares."""
        a = self.algorithm(config, label)
        colluding = (a.adversary is not None and a.adversary.fraction > 0
                     and adversaries.ADVERSARIES[a.adversary.kind].leaks_shares)
        mechanism = build_mechanism(a) if colluding else None
        ledger = None
        if colluding:
            ledger = Ledger(mechanism.trust_model, a.epsilon, delta_of(config), users=config.horizon)
        if config.returning > 1:
            self.charge_returning(config, a, result)
        for row in result.rounds:
            q = row.pop("_params", None)  # the baselines' rows carry none
            if ledger is not None:
                honest = row["reports"] - row["attackers"]
                if honest < 1:
                    event = NonPrivateEvent()
                elif row.get("shares") is not None:  # their noise shares revealed; the split shares still mixed
                    rnd = split_round(0, row["reports"], row["shares"], q.m)
                    event = release_event(mechanism, rnd, q, row["reports"], delta_of(config), noise_shares=honest)
                else:
                    event = mechanism.privacy_event(q, honest)
                ledger.record(event)
                row["epsilon_coalition"] = ledger.event_epsilon(event)
        if ledger is not None:
            result.privacy = {**result.privacy, "coalition": {
                **ledger.summary(), "colluders": sum(row["attackers"] for row in result.rounds)}}

    def charge_returning(self, config, a: cfg.AlgorithmConfig, result) -> None:
        """Returning users (App. I): the run's ledger becomes what a user of B batches spends
        (:mod:`.returning`), the unique-user ledger kept under ``unique_users``."""
        b, delta = config.returning, delta_of(config)
        if a.algorithm in cfg.SHUFFLE_BASELINES:
            eps_i, delta_i = self.count_target(config, a)
            events = [count_event(noise_bits(eps_i, delta_i), delta_i)] if result.rounds else []
        elif build_mechanism(a).trust_model == "none":
            return
        else:
            mechanism = build_mechanism(a)
            events = [mechanism.privacy_event(row["_params"], row["reports"]) for row in result.rounds]
        if a.composition == "advanced":
            _, delta_i, _ = advanced_targets(1.0, delta, b)
            at = Ledger("returning", None, delta_i, users=config.horizon)
            spent = [at.event_epsilon(e) for e in events]
            if any(e is None for e in spent):
                raise ValueError(f"returning users: a release of {a.algorithm} is not (ε, δ_i)-DP at "
                                 f"δ_i = {delta_i:.3g}")
            ledger = advanced_ledger(max(spent, default=0.0), b, delta, config.horizon)
        else:
            ledger = b_fold(events, b, delta, config.horizon)
        summary = ledger.summary()
        summary.update(trust_model=result.privacy["trust_model"], epsilon_target=result.privacy["epsilon_target"],
                       releases=result.privacy["releases"])
        result.privacy = {**summary, "returning": b, "composition": a.composition, "unique_users": result.privacy}

    def label_summary(self, config, label: str, results: list) -> dict:
        rows = [row for r in results for row in r.rounds]
        extra = {}
        a = self.algorithm(config, label)
        if a.algorithm in cfg.SEQUENTIAL:
            best = [instance_for(config, r.runs[0]).best_arm for r in results]
            return {"best_arm_pulls": float(np.mean([r.learner[0]["pulls"][b] for r, b in zip(results, best)]))}
        if a.algorithm in cfg.SHUFFLE_BASELINES:
            return {"best_arm_eliminated_runs": sum(
                r.learner[0]["eliminated_at"][instance_for(config, r.runs[0]).best_arm] > 0 for r in results),
                "rounds_per_run": float(np.mean([len(r.rounds) for r in results])),
                "noise_bits_per_round": noise_bits(*self.count_target(config, a))}
        if a.intermediary == "secagg":
            extra["secagg"] = secagg_summary(a, rows)
        return {
            **extra,
            "best_arm_eliminated_runs": sum(
                r.learner[0]["eliminated_at"][instance_for(config, r.runs[0]).best_arm] > 0 for r in results),
            "rounds_per_run": float(np.mean([len(r.rounds) for r in results])),
            "reports_dropped": sum(x["n"] - x["reports"] for x in rows),
            "wrap_arounds": sum(bool(x["wrapped"]) for x in rows),
            "decode_failures": sum(bool(x.get("decode_failure", False)) for x in rows),
            "noise_bound_exceeded": sum(abs(x["noise"]) > x["noise_bound"] for x in rows if x["noise_bound"] > 0),
            "attackers": sum(x.get("attackers", 0) for x in rows),  # adversarial reports sent, all runs
        }

    def experiment_summary(self, config) -> dict:
        out = {"preset": config.preset}
        if config.calibrate:  # each algorithm's solved ε is in algorithms.<label>.parameters.epsilon
            out["calibrated_to"] = {"epsilon": config.epsilon, "delta": delta_of(config)}
        return out


def secagg_summary(a: cfg.AlgorithmConfig, rows: list[dict]) -> dict:
    """``summary.json`` → ``secagg``: the threat model and, per cohort size released, the graph's
    (k, t) the rounds carried and the bounds they achieve (log₂ of P[insecure], P[abort])."""
    threat = a.threat_model()
    graphs = {}
    for row in rows:
        if row.get("secagg_k") is not None:
            graphs[row["n"]] = (int(row["secagg_k"]), int(row["secagg_t"]))
    out = []
    for n, (k, t) in sorted(graphs.items()):
        sec, fail = secagg_bounds(n, k, t, threat)
        out.append({"n": n, "k": k, "t": t, "log2_insecurity": None if sec == -math.inf else round(sec, 2),
                    "log2_failure": None if fail == -math.inf else round(fail, 2)})
    return {"graph": a.secagg_graph, "corrupt_fraction": a.corrupt_fraction, "dropout_rate": a.dropout_rate,
            "security_bits": a.secagg_security_bits, "failure_bits": a.secagg_failure_bits, "rounds": out}


FAMILY = DistributedDpMab()
