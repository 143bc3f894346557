"""The shuffle-model linear contextual bandits (Chowdhury & Zhou, ICML 2022) as a spine plug-in:
how an experiment file becomes the public setup of each algorithm, its worlds and party logic.

Run r of every algorithm faces the instance drawn from ``(seed, "linear-instance", r)`` and the same
users ``(seed, "linear-users", r)``; an algorithm's users randomize from ``(seed,
"linear-user-noise", label, r, k)``, its analyzer (JDP's tree) from its own key. The in-process
engine steps all runs of an algorithm at once (their batches line up); over MQTT one task is one
run, with the same numbers.
"""

from __future__ import annotations

import json

import numpy as np

from privbandit.families.shuffle_linear_bandits import calibration
from privbandit.families.shuffle_linear_bandits import config as cfg
from privbandit.families.shuffle_linear_bandits import params as lp
from privbandit.families.shuffle_linear_bandits.parties import (ContextUsers, LinearServer, LinearUsers, Setup,
                                                               diagnostics, setup)
from privbandit.families.shuffle_linear_bandits.world import ClassContexts, instances
from privbandit.protocol.privacy import Ledger
from privbandit.protocol.spine.family import Family
from privbandit.protocol.spine.observer import PER_RUN, checkpoint_grid, spread_per_run

ROUND_FIELDS = ["batch", "t", "lambda_min", "clipped", "theta_error", "u_error_mean", "u_error_var",
                "V_error_mean", "V_error_var"]


class ShuffleLinearBandits(Family):
    name = cfg.FAMILY
    title = "Chowdhury & Zhou (ICML 2022), Shuffle Private Linear Contextual Bandits"
    algorithm_lines = {
        "linucb": "batched LinUCB without privacy (Algorithm 1's learner on raw statistics)",
        "linucb-jdp": "Shariff & Sheffet's joint-DP LinUCB: a trusted tree of Gaussian prefix sums",
        "linucb-ldp": "Zheng et al.'s local-DP LinUCB: every report Gaussian-noised, attributable",
        "linucb-sdp-amp": "Algorithm 1 with P_Amp: Gaussian reports shuffled (amplification by shuffling)",
        "linucb-sdp-vec": "Algorithm 1 with P_Vec: bit-sum reports, per-label totals from the shuffler",
    }
    experiment_model = cfg.LinearExperiment
    round_fields = ROUND_FIELDS

    def __init__(self):
        self._solved: dict[str, float] = {}

    def algorithm(self, config, label: str) -> cfg.LinearAlgorithm:
        """The algorithm with its batch, ε and P_Vec span filled in (the span from the preset:
        ``paper-code`` the authors' ``delta``, ``theory`` the provable ``2delta``). With
        ``calibrate``, an ε the table does not set is solved so that the ledger reads the
        experiment's (ε, δ) (:mod:`.calibration`)."""
        a = config.algorithms[label]
        span = a.vec_span or ("delta" if config.preset == "paper-code" else "2delta")
        a = a.model_copy(update={"batch": cfg.batch_of(a), "vec_span": span,
                                 "epsilon": a.epsilon if a.epsilon is not None else config.epsilon})
        if config.calibrate and config.algorithms[label].epsilon is None and a.algorithm != "linucb":
            a = a.model_copy(update={"epsilon": self._calibrated(config, label, a)})
        return a

    def _calibrated(self, config, label: str, a: cfg.LinearAlgorithm) -> float:
        key = json.dumps([self._public(config, a), config.epsilon, config.delta], sort_keys=True)
        if key not in self._solved:  # algorithm() is asked often; the bisection costs ~50 ledgers

            def spent(eps: float) -> float | None:
                public = self._public(config, a.model_copy(update={"epsilon": eps}))
                return calibration.run_epsilon(setup(public), self.ledger(public))

            self._solved[key] = calibration.calibrated_epsilon(spent, label, a.algorithm, config.epsilon, config.delta)
        return self._solved[key]

    def stackable(self, config, label: str) -> bool:
        return True  # fixed batches: every run's plan m serves users mB … mB + B − 1

    def setup(self, config, label: str) -> Setup:
        return setup(self.public_task(config, label, [0]))

    def intermediaries(self, config) -> list[str]:
        needed = {"shuffler" if a.algorithm.startswith("linucb-sdp") else "aggregator"
                  for a in config.algorithms.values()}
        return [name for name in ("aggregator", "shuffler") if name in needed]

    def users_protected(self, config) -> int:
        return config.horizon

    def public_task(self, config, label: str, runs: list[int]) -> dict:
        """Everything but the seed (from which the world, θ*, the users' contexts and rewards follow)."""
        return self._public(config, self.algorithm(config, label))

    def _public(self, config, a: cfg.LinearAlgorithm) -> dict:
        grid = checkpoint_grid(config.horizon, config.checkpoints)
        return {"algorithm": a.model_dump(), "horizon": config.horizon, "dim": config.environment.dim,
                "delta": config.delta, "preset": config.preset, "generator": config.generator,
                "participations": cfg.participations(config, a),
                "diagnostic": [int(m) for m in cfg.diagnostic_batches(config.horizon, grid, a.batch)]}

    def analyzer(self, public: dict, keys: list[int], oracle=None) -> LinearServer:
        """``oracle``: the users' (in-process only), for the one-user-batch learners' look-ahead."""
        return LinearServer(setup(public), keys, oracle)

    def ledger(self, public: dict) -> Ledger:
        kind = public["algorithm"]["algorithm"]
        return Ledger(lp.TRUST_MODEL[kind], None if kind == "linucb" else public["algorithm"]["epsilon"],
                      public["delta"], users=public["horizon"])

    def audit_targets(self, config, label: str, cohort: int | None = None) -> list:
        """LinUCB-LDP's reports, P_Vec's label counts, P_Amp's shuffled reports, JDP's tree (:mod:`.audit`)."""
        from privbandit.families.shuffle_linear_bandits.audit import linear_targets

        return linear_targets(self, config, label, cohort)

    def audit_candidates(self, config, label: str, cohort: int | None = None) -> list[list]:
        from privbandit.families.shuffle_linear_bandits.audit import linear_targets

        return linear_targets(self, config, label, cohort, search=True)

    def canary_audit(self, config, label: str, seed: int, confidence: float) -> dict:
        from privbandit.families.shuffle_linear_bandits.audit import linear_canary_audit  # docs/audit.md

        return linear_canary_audit(self, config, label, seed, confidence)

    def wire_target(self, config, label: str, target, mechanism=None):
        from privbandit.families.shuffle_linear_bandits.audit import linear_wire  # docs/audit.md

        return linear_wire(self, config, label, target, mechanism)

    def users(self, config, label: str, runs: list[int]) -> LinearUsers:
        env = config.environment
        if env.conversion == "classes":  # every user her own context (world.ClassContexts)
            return ContextUsers(setup(self.public_task(config, label, runs)),
                                ClassContexts(config.generator, env.arms, env.dim, config.seed, runs), config.seed,
                                runs, label, checkpoint_grid(config.horizon, config.checkpoints))
        return LinearUsers(setup(self.public_task(config, label, runs)),
                           instances(config.generator, env.arms, env.dim, config.seed, runs), config.seed, runs, label,
                           checkpoint_grid(config.horizon, config.checkpoints))

    def policy_users(self, config, label: str, run: int, ask, contexts=None):
        """:class:`LinearUsers` with the caller's arms and rewards (:mod:`.caller`)."""
        from privbandit.families.shuffle_linear_bandits.caller import caller_users

        return caller_users(self, config, label, run, ask, contexts)

    # --- what arrives from the wire ------------------------------------------------------------
    def check_plan(self, plan) -> None:
        """A plan the analyzer makes: ``batch`` = its id, finite θ̂ (R, d), V⁻¹ (R, d, d), β."""
        b = plan.body
        if set(b) != {"batch", "theta", "v_inv", "beta"}:
            raise ValueError(f"plan {plan.id}: body fields {sorted(b)} are not batch, theta, v_inv, beta")
        theta, v_inv, beta = b["theta"], b["v_inv"], b["beta"]
        if b["batch"] != plan.id or isinstance(b["batch"], bool):
            raise ValueError(f"plan {plan.id}: batch {b['batch']!r} is not its id")
        if not (isinstance(theta, np.ndarray) and theta.ndim == 2 and theta.dtype == np.float64):
            raise ValueError(f"plan {plan.id}: theta must be a float64 (runs, d) array")
        if not (isinstance(v_inv, np.ndarray) and v_inv.dtype == np.float64
                and v_inv.shape == theta.shape + theta.shape[-1:]):
            raise ValueError(f"plan {plan.id}: v_inv must be a float64 (runs, d, d) array")
        finite = np.isfinite(theta).all() and np.isfinite(v_inv).all()
        if not (isinstance(beta, float) and np.isfinite(beta) and finite):
            raise ValueError(f"plan {plan.id}: θ̂, V⁻¹ and β must be finite")

    # --- the observer's extras ---------------------------------------------------------------
    def row_maker(self, config, label: str):
        """Diagnostic batches only (those ending nearest the checkpoints), per run: λ_min(V_m), ‖θ̂ − θ*‖
        and the analyzer's error on the batch sum (its estimate against the users' true sum)."""
        B, d = self.algorithm(config, label).batch, config.environment.dim

        def rows_of(bodies: list[dict], sums: list[list], theta_star) -> list[dict]:
            true_sums = np.stack([sum(np.asarray(x) for x in s) for s in sums])
            err = np.stack([np.asarray(b["estimate"]) for b in bodies]) - true_sums
            per_run = diagnostics(np.stack([np.asarray(b["lambda_min"]) for b in bodies]),
                                  np.stack([np.asarray(b["clipped"]) for b in bodies]),
                                  np.stack([np.asarray(b["theta"]) for b in bodies]), np.asarray(theta_star), err, d)
            return [{"batch": b["batch"] + 1, "t": (b["batch"] + 1) * B, PER_RUN: p} for b, p in zip(bodies, per_run)]

        def row(record, truths) -> dict | list[dict] | None:
            b = record.body
            if "diagnostics" in b:  # an in-process block: the rows of its batches, as their own releases'
                sums, star = {}, None
                for t in truths:
                    for j, m in enumerate(t.extras.get("diagnostic_batches", ())):
                        sums[int(m)] = t.extras["entries_sums"][:, j]
                        star = t.extras["theta_star"]
                made = rows_of(b["diagnostics"], [[sums[g["batch"]]] for g in b["diagnostics"]], star)
                return [{"round": g["batch"], "n": B, "reports": B, **r} for g, r in zip(b["diagnostics"], made)]
            if "theta" not in b or not truths or "entries_sum" not in truths[0].extras:
                return None
            return rows_of([b], [[t.extras["entries_sum"] for t in truths]], truths[0].extras["theta_star"])[0]

        return row

    def finish(self, config, label: str, result) -> None:
        spread_per_run(result)  # one rounds.csv row per run, as one task per run writes them over MQTT

    def label_summary(self, config, label: str, results: list) -> dict:
        per_run = [x for r in results for x in r.learner]
        return {"batch": self.algorithm(config, label).batch,
                "batches_clipped": sum(x["batches_clipped"] for x in per_run),
                "batches_not_pd": sum(x["batches_not_pd"] for x in per_run),
                "mechanism": self.setup(config, label).describe()}

    def experiment_summary(self, config) -> dict:
        env = config.environment
        out = {"delta": config.delta, "preset": config.preset, "generator": config.generator, "dim": env.dim,
               "arms": env.arms, "returning_users": config.returning_users}
        if env.conversion == "classes":
            out["conversion"] = "classes"
            out["regret"] = ("mistakes against the label, Σ_t 1 − 1{a_t = y_t}: pseudo-regret against the "
                             "deterministic reward 1{a = y_t} (realized regret is the same)")
        if config.calibrate:  # each algorithm's solved ε is in algorithms.<label>.parameters.epsilon
            out["calibrated_to"] = {"epsilon": config.epsilon, "delta": config.delta}
        return out

    def plot_options(self, config) -> dict:
        return {"cumulative": True, "realized": "realized regret (authors' metric)",
                "title": f"{config.name}: ε = {config.epsilon}, δ = {config.delta}, d = {config.environment.dim}, "
                         f"preset {config.preset}, {config.runs} runs, mean ± stderr"}


FAMILY = ShuffleLinearBandits()
