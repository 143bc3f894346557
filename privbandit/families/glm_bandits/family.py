"""The GLM bandits (Sarmasarkar, "Shuffle and joint differential privacy for generalized linear
contextual bandits") as a spine plug-in: Algorithm 2 (Private-GLM, joint DP, central trust), the
non-private RS-GLinUCB, GLM-UCB, GLOC and ECOLog baselines, and Algorithm 1 (ShuffleGLM, shuffle DP, batches
of persistent users through the ``shuffler``; :mod:`.shuffle_parties`).

Run r of every algorithm faces the world drawn from ``(seed, "glm-world", r)`` (run 0's for every
run when contexts are reused, as the authors' code does) and the reward uniforms of ``(seed,
"glm-rewards", r)``; the analyzer's noise (trees, optimizers) comes from its own key per run. κ and
κ* are computed from each run's arms and θ* and handed to the analyzer as public constants (the
paper assumes them known; spec §11.1). The in-process engine steps all runs of an algorithm at once
(one user per plan in every run); over MQTT one task is one run, with the same numbers.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.glm_bandits import config as cfg
from privbandit.families.glm_bandits import shuffle_parties as sp
from privbandit.families.glm_bandits.parties import GLMServer, GLMUsers, setup
from privbandit.families.glm_bandits.world import world_of
from privbandit.protocol.privacy import Ledger
from privbandit.protocol.spine.family import Family
from privbandit.protocol.spine.observer import PER_RUN, checkpoint_grid, spread_per_run

ROUND_FIELDS = ["t", "explored", "count1", "count2", "theta_o_error", "theta_error"]


class GLMBandits(Family):
    name = cfg.FAMILY
    title = "Sarmasarkar, Shuffle and joint differential privacy for generalized linear contextual bandits"
    algorithm_lines = {
        "private-glm": "Algorithm 2: joint DP through binary-tree noise, optimizer 𝒫_GD (shuffle) or DP-SGD",
        "shuffle-glm": "Algorithm 1: shuffle DP, batched, P_Vec covariance and 𝒫_GD gradients",
        "rs-glinucb": "RS-GLinUCB (Sawarni et al. 2024), non-private baseline",
        "glm-ucb": "GLM-UCB (Filippi et al. 2010), non-private baseline",
        "gloc": "GLOC (Jun et al. 2017), non-private baseline",
        "ecolog": "ada-OFU-ECOLog (Faury et al. 2022, Algorithm 2), non-private logistic baseline",
    }
    experiment_model = cfg.GLMExperiment
    round_fields = ROUND_FIELDS

    def algorithm(self, config, label: str) -> cfg.GLMAlgorithm:
        return cfg.resolved(config, label)

    def stackable(self, config, label: str) -> bool:
        if self.algorithm(config, label).algorithm == "shuffle-glm":
            return config.reuse_contexts  # its schedule and rounds depend on κ, κ*: one world for all runs
        return True  # plan t serves user t in every run

    def intermediaries(self, config) -> list[str]:
        # central trust: raw reports pass to the trusted analyzer; Algorithm 1's go through the shuffler
        kinds = {self.algorithm(config, label).algorithm for label in config.algorithms}
        return sorted({"shuffler" if kind == "shuffle-glm" else "aggregator" for kind in kinds})

    def users_protected(self, config) -> int:
        return config.horizon

    def world(self, config, runs: list[int]):
        env = config.environment
        return world_of(env.link, config.theta_generator, config.seed, runs, config.horizon, env.arms, env.dim,
                        env.norm, config.reuse_contexts, env.conversion)

    def public_task(self, config, label: str, runs: list[int]) -> dict:
        """Everything but the seed: the algorithm, the world's shape and each run's κ, κ*."""
        a = self.algorithm(config, label)
        w = self.world(config, runs)
        ks = [w.kappas(i) for i in range(len(runs))]
        grid = checkpoint_grid(config.horizon, config.checkpoints)
        env = config.environment
        return {"algorithm": a.model_dump(), "horizon": config.horizon, "dim": env.dim, "link": env.link,
                "norm": env.norm, "reward_bound": config.reward_bound, "delta": config.privacy_delta,
                "zeta": config.zeta, "preset": config.preset,
                "kappa": [k.kappa for k in ks], "kappa_star": [k.kappa_star for k in ks],
                "diagnostic": [int(c) for c in grid[np.linspace(0, len(grid) - 1, 8).astype(int)]]}

    def analyzer(self, public: dict, keys: list[int], oracle=None):
        if public["algorithm"]["algorithm"] == "shuffle-glm":
            return sp.ShuffleGLMServer(sp.shuffle_setup(public), keys)
        return GLMServer(setup(public), keys)

    def ledger(self, public: dict) -> Ledger:
        if public["algorithm"]["algorithm"] == "shuffle-glm":
            return Ledger("shuffle (trusted shuffler, per-label bit counts)", public["algorithm"]["epsilon"],
                          public["delta"], users=public["horizon"])
        private = public["algorithm"]["algorithm"] == "private-glm"
        return Ledger("central (joint DP)" if private else "non-private",
                      public["algorithm"]["epsilon"] if private else None, public["delta"], users=public["horizon"])

    def users(self, config, label: str, runs: list[int]):
        if self.algorithm(config, label).algorithm == "shuffle-glm":
            return sp.ShuffleGLMUsers(sp.shuffle_setup(self.public_task(config, label, runs)), self.world(config, runs),
                                      config.seed, label, runs, checkpoint_grid(config.horizon, config.checkpoints))
        return GLMUsers(setup(self.public_task(config, label, runs)), self.world(config, runs),
                        checkpoint_grid(config.horizon, config.checkpoints))

    policy_contexts = "per-user"  # privbandit.Policy: each user's own arm set, in user order

    def policy_users(self, config, label: str, run: int, ask, contexts=None, world: dict | None = None):
        """Every algorithm in a caller's world (:mod:`.caller`, docs/api.md): each user's arm set from the
        caller, her Bernoulli reward asked; κ, κ* stated (``world``) or bounded from S."""
        from privbandit.families.glm_bandits.caller import caller_users

        return caller_users(self, config, label, run, ask, contexts, world)

    def audit_targets(self, config, label: str, cohort: int | None = None) -> list:
        from privbandit.families.glm_bandits.audit import glm_targets  # docs/audit.md

        return glm_targets(self, config, label, cohort)

    def wire_target(self, config, label: str, target, mechanism=None):
        from privbandit.families.glm_bandits.audit import shuffle_glm_wire  # docs/audit.md

        return shuffle_glm_wire(self, config, label, target, mechanism)

    def canary_audit(self, config, label: str, seed: int, confidence: float) -> dict:
        from privbandit.families.glm_bandits.audit import glm_canary_audit  # docs/audit.md

        return glm_canary_audit(self, config, label, seed, confidence)

    # --- what arrives from the wire ------------------------------------------------------------
    def check_plan(self, plan) -> None:
        """A plan the analyzer makes: round t = its id, finite float64 billboard arrays."""
        b = plan.body
        if "phase" in b:
            return sp.check_plan(plan)
        fields = {"t", "theta_o", "v_inv", "threshold", "width_o", "theta", "h_inv", "beta"}
        if set(b) not in (fields, fields | {"reward_index"}):
            raise ValueError(f"plan {plan.id}: body fields {sorted(b)} are not the GLM billboard")
        if "reward_index" in b and b["reward_index"] is not True:
            raise ValueError(f"plan {plan.id}: reward_index must be true when present (ECOLog's reward-scale index)")
        if b["t"] != plan.id + 1 or isinstance(b["t"], bool):
            raise ValueError(f"plan {plan.id}: t = {b['t']!r} is not its id + 1")
        theta = b["theta"]
        if not (isinstance(theta, np.ndarray) and theta.ndim == 2 and theta.dtype == np.float64):
            raise ValueError(f"plan {plan.id}: theta must be a float64 (runs, d) array")
        R, d = theta.shape
        shapes = {"theta_o": (R, d), "v_inv": (R, d, d), "h_inv": (R, d, d), "threshold": (R,), "width_o": (R,),
                  "beta": (R,)}
        for key, shape in shapes.items():
            v = b[key]
            if not (isinstance(v, np.ndarray) and v.dtype == np.float64 and v.shape == shape):
                raise ValueError(f"plan {plan.id}: {key} must be a float64 {shape} array")
        if not all(np.isfinite(b[k]).all() for k in ("theta_o", "v_inv", "h_inv", "theta", "beta")):
            raise ValueError(f"plan {plan.id}: θ's, inverses and β must be finite")

    # --- the observer's extras ---------------------------------------------------------------
    def row_maker(self, config, label: str):
        if self.algorithm(config, label).algorithm == "shuffle-glm":
            return self._shuffle_row(config, label)

        def row(record, truths) -> dict | None:
            b = record.body
            if not truths or "theta_star" not in truths[0].extras:
                return None
            star = np.asarray(truths[0].extras["theta_star"])
            per_run = []
            for i in range(star.shape[0]):
                r = {"theta_error": float(np.linalg.norm(np.asarray(b.get("theta_tau", b.get("theta")))[i] - star[i]))}
                if "theta_o" in b:
                    r.update(theta_o_error=float(np.linalg.norm(np.asarray(b["theta_o"])[i] - star[i])),
                             explored=int(b["explored"][i]), count1=int(b["count1"][i]), count2=int(b["count2"][i]))
                per_run.append(r)
            return {"t": b["t"], PER_RUN: per_run}

        return row

    def _shuffle_row(self, config, label: str):
        """One row per batch learned (its 𝒫_GD's last round): t = the users served so far, ‖θ̂_k − θ*‖."""
        def row(record, truths) -> dict | None:
            b = record.body
            if "theta" not in b or not truths or "theta_star" not in truths[0].extras:
                return None
            star = np.asarray(truths[0].extras["theta_star"])
            theta = np.asarray(b["theta"])
            t = truths[-1].first_user + truths[-1].size
            return {"t": t, PER_RUN: [{"theta_error": float(np.linalg.norm(theta[i] - star[i]))}
                                      for i in range(star.shape[0])]}

        return row

    def finish(self, config, label: str, result) -> None:
        spread_per_run(result)  # one rounds.csv row per run, as one task per run writes them over MQTT

    def label_summary(self, config, label: str, results: list) -> dict:
        per_run = [x for r in results for x in r.learner]
        if self.algorithm(config, label).algorithm == "shuffle-glm":
            out = {"setup": [sp.shuffle_setup(self.public_task(config, label, [r])).describe()
                             for r in range(1 if config.reuse_contexts else config.runs)]}
        else:
            out = {"setup": setup(self.public_task(config, label, [0])).describe()}
        if per_run and per_run[0]:
            out["learner"] = per_run
        return out

    def experiment_summary(self, config) -> dict:
        env = config.environment
        return {"delta": config.privacy_delta, "zeta": config.zeta, "preset": config.preset, "link": env.link,
                "dim": env.dim, "arms": env.arms, "norm": env.norm, "theta_generator": config.theta_generator,
                "reuse_contexts": config.reuse_contexts}

    def plot_options(self, config) -> dict:
        env = config.environment
        return {"cumulative": True,
                "title": f"{config.name}: {env.link}, d = {env.dim}, K = {env.arms}, S = {env.norm}, "
                         f"preset {config.preset}, {config.runs} runs, mean ± stderr"}


FAMILY = GLMBandits()
