"""From a resolved config to protocol objects: mechanisms, learners, bandit instances."""

from __future__ import annotations

import numpy as np

from privbandit.experiment.config import AlgorithmConfig, EnvironmentConfig
from privbandit.protocol.adversaries import USER_ADVERSARIES, Adversary
from privbandit.protocol.privacy import PrivacyLedger
from privbandit.protocol.environments import BanditInstance, uniform_means
from privbandit.protocol.learners.successive_elimination import (
    GeometricSchedule,
    Lemma2Width,
    SajedSheffetSchedule,
    SuccessiveElimination,
    sajed_sheffet_width,
)
from privbandit.protocol.mechanisms.base import Mechanism
from privbandit.protocol.mechanisms.distributed_dp_mab import (
    CentralDiscreteLaplace,
    CentralLaplace,
    DiscreteGaussianSecAgg,
    LocalDiscreteLaplace,
    NonPrivate,
    PolyaSecAgg,
    SkellamSecAgg,
)


def build_mechanism(a: AlgorithmConfig) -> Mechanism:
    match a.algorithm:
        case "dist-dp-se":
            return PolyaSecAgg(a.epsilon, a.p, a.dropout_tolerance)
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
    raise ValueError(f"unknown algorithm {a.algorithm!r}")


def build_learner(a: AlgorithmConfig, n_arms: int) -> SuccessiveElimination:
    if a.algorithm == "dp-se":
        return SuccessiveElimination(
            n_arms,
            SajedSheffetSchedule(a.epsilon, a.p),
            sajed_sheffet_width(a.p, a.width_multiplier),
        )
    return SuccessiveElimination(
        n_arms, GeometricSchedule(a.batch_growth), Lemma2Width(a.p, a.width_multiplier)
    )


def build_instance(env: EnvironmentConfig, rng: np.random.Generator) -> BanditInstance:
    """One bandit instance; with kind = 'uniform' each run draws fresh means (20 instances, §7)."""
    if env.kind == "uniform":
        return BanditInstance(uniform_means(env.arms, env.low, env.high, rng), env.reward, env.sd)
    if env.kind == "means":
        return BanditInstance(np.array(env.means), env.reward, env.sd)
    from privbandit.datasets.letor import ArmMeans

    arms = ArmMeans.from_json(env.path)
    return BanditInstance(
        np.asarray(arms.means),
        env.reward,
        env.sd,
        levels=np.asarray(arms.levels),
        probabilities=np.asarray(arms.probabilities),
    )


def build_adversary(a: AlgorithmConfig, mechanism: Mechanism, seed: int, stream_prefix: tuple,
                    instance: BanditInstance) -> Adversary | None:
    """The algorithm's adversary for one run, or None. Fleets and the engine build the same one."""
    if a.adversary is None or a.adversary.fraction == 0:
        return None
    cls = USER_ADVERSARIES[a.adversary.kind]
    extra = {"magnitude": a.adversary.magnitude} if a.adversary.kind == "out-of-range" else {}
    return cls(a.adversary.fraction, mechanism, seed, stream_prefix, best_arm=instance.best_arm, **extra)


def build_ledger(a: AlgorithmConfig, mechanism: Mechanism, delta: float) -> PrivacyLedger:
    """An empty ledger for one run of the algorithm (SE promises no ε)."""
    return PrivacyLedger(mechanism.trust_model, None if a.algorithm == "se" else a.epsilon, delta)
