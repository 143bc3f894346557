"""The concurrent-shuffle counter (Tenenbaum, Kaplan, Mansour & Stemmer, ICML 2023) as a spine
plug-in: how an experiment file becomes each counter's public spec, its users and its server.

Run r of every counter reads the same bits (``(seed, "cs-world", r)``); a counter's users randomize
from ``(seed, "cs-user-noise", label, r, level, chunk)``; the central tree's trusted server from its
own key. The in-process engine steps all runs of a counter at once (its plans do not depend on the
data); over MQTT one task is one run, with the same numbers.

There is no regret: the users' truths carry zeros, and the counter's figures (max_t |Ŝ_t − S_t|,
RMSE, the bias/noise split, the per-node noise) are computed by :meth:`ConcurrentShuffle.finish` on
the observer, which holds the world (its seed) and the analyzer's node estimates (its records).
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.families.concurrent_shuffle import config as cfg
from privbandit.families.concurrent_shuffle import counter as cnt
from privbandit.families.concurrent_shuffle import world
from privbandit.families.concurrent_shuffle.bandit import BanditServer, BanditUsers, alg4_of
from privbandit.families.concurrent_shuffle.parties import CounterAnalyzer, CounterUsers, shuffler_of, spec_of
from privbandit.families.concurrent_shuffle.tree import SHUFFLE_MODES, prefix_estimates
from privbandit.protocol.privacy import Ledger, default_delta
from privbandit.protocol.spine.family import Family
from privbandit.protocol.spine.observer import checkpoint_grid

ROUND_FIELDS = ["level", "node", "first", "size", "estimate", "truth", "noise"]


class ConcurrentShuffle(Family):
    name = cfg.FAMILY
    title = "Tenenbaum, Kaplan, Mansour & Stemmer (ICML 2023), Concurrent Shuffle DP Under Continual Observation"
    algorithm_lines = {
        "csta_k": "Algorithm 3: k shufflers at once, level i's batches of d_low·d^(i−1) users (counter)",
        "sequential": "Algorithm 3 with k = 1: one shuffler, the sequential shuffle model (§2.6)",
        "csta_binary": "Algorithm 2: the binary tree, one shuffler per level, k = ⌈log₂ n⌉ − 1",
        "lowest_k_binary": "§2.5's bad baseline: only the k lowest levels of the binary tree",
        "highest_k_binary": "§2.5's bad baseline: only the k highest levels of the binary tree",
        "central_tree": "the central binary-tree counter: a trusted server adds Lap_Z per node",
        "ldp": "a local counter: randomized response per user, attributable reports",
        "cs-linucb": "Algorithm 4: private LinUCB on the counter, P_Vec per node at (ε/k, δ/k)",
        "cs-linucb-exact": "Algorithm 4's batches with exact sums (non-private reference)",
        "cs-random": "uniformly random arms on Algorithm 4's batches (no learning; nothing is released)",
    }
    experiment_model = cfg.CounterExperiment
    round_fields = ROUND_FIELDS

    def algorithm(self, config, label: str) -> cfg.CounterAlgorithm:
        a = config.algorithms[label]
        return a.model_copy(update={"epsilon": a.epsilon if a.epsilon is not None else config.epsilon})

    def stackable(self, config, label: str) -> bool:
        return True  # the plans never depend on the data: every run's plan j serves the same users

    def bandit(self, config, label: str) -> bool:
        return config.algorithms[label].algorithm in cfg.BANDITS

    def delta(self, config) -> float:
        return config.delta if config.delta is not None else default_delta(config.horizon)

    def spec(self, config, label: str) -> cnt.CounterSpec:
        return spec_of(self.public_task(config, label, [0]))

    def intermediaries(self, config) -> list[str]:
        """``shuffler-1`` … ``shuffler-K`` (K the most levels of any counter: level i's batches go
        to ``shuffler-i``, each its own party), and the ``aggregator`` of the baselines without one."""
        levels, aggregator = 0, False
        for label in config.algorithms:
            if self.bandit(config, label):
                levels = max(levels, alg4_of(self.public_task(config, label, [0])).tree.k)
                continue
            spec = self.spec(config, label)
            if spec.mode in SHUFFLE_MODES:
                levels = max(levels, spec.k)
            else:
                aggregator = True
        return ["aggregator"] * aggregator + [shuffler_of(i) for i in range(1, levels + 1)]

    def users_protected(self, config) -> int:
        return config.horizon

    def public_task(self, config, label: str, runs: list[int]) -> dict:
        """The counter's parameters; never the seed or the input (the world)."""
        out = {"algorithm": self.algorithm(config, label).model_dump(), "horizon": config.horizon,
               "delta": self.delta(config)}
        if self.bandit(config, label):
            out["dim"] = config.environment.dim  # public (the arms and θ* are the world's)
            out["preset"] = config.preset
        return out

    def analyzer(self, public: dict, keys: list[int], oracle=None):
        if public["algorithm"]["algorithm"] in cfg.BANDITS:
            return BanditServer(alg4_of(public), len(keys))
        return CounterAnalyzer(spec_of(public), keys)

    def ledger(self, public: dict) -> Ledger:
        if public["algorithm"]["algorithm"] in cfg.BANDITS:
            return alg4_of(public).empty_ledger()
        return cnt.ledger(spec_of(public), public["horizon"])

    def users(self, config, label: str, runs: list[int]):
        grid = checkpoint_grid(config.horizon, config.checkpoints)
        if self.bandit(config, label):
            return BanditUsers(alg4_of(self.public_task(config, label, runs)), config.environment, config.seed, runs,
                               label, grid)
        return CounterUsers(self.spec(config, label), config, label, runs, grid)

    def policy_users(self, config, label: str, run: int, ask, contexts=None):
        """Algorithm 4 in a caller's world (:mod:`.caller`, docs/api.md): the caller's fixed arms (K, d)
        and rewards in [0, 1]. A counter (Algorithms 2/3) is refused: it hands out no arms."""
        if not self.bandit(config, label):
            raise NotImplementedError(f"algorithms.{label}: a counter (Algorithms 2/3) hands out no arms: it counts "
                                      f"users' bits; run it with privbandit.run")
        from privbandit.families.concurrent_shuffle.caller import caller_users

        return caller_users(self, config, label, run, ask, contexts)

    def check_plan(self, plan) -> None:
        """A counter's {segment, level}, or Algorithm 4's with the broadcast (θ̂ (R, d), V⁻¹ (R, d, d), β)."""
        b = plan.body
        ints = {key: b.get(key) for key in ("segment", "level")}
        if set(b) not in ({"segment", "level"}, {"segment", "level", "theta", "v_inv", "beta"}) or any(
                isinstance(v, bool) or not isinstance(v, int) for v in ints.values()):
            raise ValueError(f"plan {plan.id}: body must be {{'segment': int, 'level': int[, theta, v_inv, beta]}}, "
                             f"got {sorted(b)}")
        if b["level"] < 1 or b["segment"] < 0:
            raise ValueError(f"plan {plan.id}: segment {b['segment']} and level {b['level']} out of range")
        if "theta" in b:
            theta, v_inv, beta = b["theta"], b["v_inv"], b["beta"]
            if not (isinstance(theta, np.ndarray) and theta.ndim == 2 and theta.dtype == np.float64
                    and isinstance(v_inv, np.ndarray) and v_inv.dtype == np.float64
                    and v_inv.shape == theta.shape + theta.shape[-1:]):
                raise ValueError(f"plan {plan.id}: theta (runs, d) and v_inv (runs, d, d) must be float64 arrays")
            if not (isinstance(beta, float) and np.isfinite(beta) and np.isfinite(theta).all()
                    and np.isfinite(v_inv).all()):
                raise ValueError(f"plan {plan.id}: θ̂, V⁻¹ and β must be finite")

    def audit_targets(self, config, label: str, cohort: int | None = None) -> list:
        from privbandit.families.concurrent_shuffle.audit import counter_targets  # docs/audit.md

        return counter_targets(self, config, label, cohort)

    def wire_target(self, config, label: str, target, mechanism=None):
        from privbandit.families.concurrent_shuffle.audit import counter_wire  # docs/audit.md

        return counter_wire(self, config, label, target, mechanism)

    def audit_candidates(self, config, label: str, cohort: int | None = None) -> list[list]:
        from privbandit.families.concurrent_shuffle.audit import counter_candidates

        return counter_candidates(self, config, label, cohort)

    def canary_audit(self, config, label: str, seed: int, confidence: float) -> dict:
        from privbandit.families.concurrent_shuffle.audit import counter_canary_audit  # docs/audit.md

        return counter_canary_audit(self, config, label, seed, confidence)

    # --- the observer's side ---------------------------------------------------------------------
    def row_maker(self, config, label: str):
        if self.bandit(config, label):
            return lambda record, truths: {"level": record.body["level"], "node": record.body["node"]}

        def row(record, truths) -> dict | None:
            b = record.body
            if "level" not in b:
                return {"_attributable": {"first_node": list(b["first_node"]),
                                          "estimates": [np.asarray(e) for e in b["estimates"]]}}
            return {"level": b["level"], "node": b["node"], "first": b["first"],
                    "_estimate": np.asarray(b["estimate"])}
        return row

    def finish(self, config, label: str, result) -> None:
        """The counter's figures per run, from the node estimates (records) and the world's bits:
        one rounds.csv row per run and node (shuffle modes), and per-run metrics in the learner.
        Algorithm 4: nothing to add (its regret is the observer's)."""
        if self.bandit(config, label):
            return
        spec = self.spec(config, label)
        R = len(result.runs)
        nodes = [np.full((R, spec.tree.nodes(i)), np.nan) for i in range(1, spec.k + 1)]
        for row in result.rounds:
            if "_attributable" in row:
                att = row["_attributable"]
                for i, (lo, est) in enumerate(zip(att["first_node"], att["estimates"])):
                    nodes[i][:, lo:lo + est.shape[1]] = est
            else:
                nodes[row["level"] - 1][:, row["node"]] = row["_estimate"]
        bits = np.stack([world.bits(config.input, config.p, spec.n, spec.k, spec.epsilon, config.seed, r, 0, spec.n)
                         for r in result.runs])
        truths = [bits[:, :spec.tree.nodes(i) * s].reshape(R, -1, s).sum(axis=2, dtype=np.int64)
                  for i, s in enumerate(spec.tree.sizes, start=1)]
        complete = all(not np.isnan(x).any() for x in nodes)
        rows = []
        for i, run in enumerate(result.runs):
            for row in result.rounds:
                if "_attributable" in row:
                    continue
                lvl, j = row["level"], row["node"]
                est, tr = float(nodes[lvl - 1][i, j]), int(truths[lvl - 1][i, j])
                rows.append({**{k: v for k, v in row.items() if not k.startswith("_")}, "run": run,
                             "size": spec.tree.sizes[lvl - 1], "estimate": est, "truth": tr, "noise": est - tr})
        result.rounds = rows
        if not complete:
            for i in range(R):
                result.learner[i]["error"] = "not every node executed: no counter figures"
            return
        run = cnt.CounterRun(spec, bits, [], nodes, truths, prefix_estimates(spec.tree, nodes))
        for i, m in enumerate(cnt.metrics(run)):
            result.learner[i].update(m)

    def label_summary(self, config, label: str, results: list) -> dict:
        if self.bandit(config, label):
            a = alg4_of(self.public_task(config, label, [0]))
            per_run = [x for r in results for x in r.learner]
            return {"alg4": {"sizes": list(a.tree.sizes), "lambda": a.lam, "sigma_tilde": a.sigma_tilde,
                             "private": a.private, "vec": [{"g": p.g, "b": p.b} for p in a.vec],
                             "batches_clipped": sum(x["batches_clipped"] for x in per_run)}}
        spec = self.spec(config, label)
        per_run = [x for r in results for x in r.learner]
        out = {"counter": spec.describe(), "communication_per_user": communication(spec)}
        for key in ("max_abs_error", "rmse", "max_abs_inter", "max_intra_bias"):
            vals = [x[key] for x in per_run if key in x]
            if vals:
                out[f"{key}_mean"] = float(np.mean(vals))
                out[f"{key}_stderr"] = float(np.std(vals, ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else 0.0
        return out

    def experiment_summary(self, config) -> dict:
        return {"delta": self.delta(config), "input": config.input, "p": config.p,
                "environment": config.environment.model_dump()}

    def plot_options(self, config) -> dict:
        return {"cumulative": True, "title": f"{config.name}: Algorithm 4's regret (counters have none: see summary.json)"}


def communication(spec: cnt.CounterSpec) -> dict:
    """Per user and per shuffler (level i's party, ``shuffler-i``): the one-bit messages of the
    protocol (theory), and the count encoding's bits (one integer up to the largest count)."""
    levels = []
    for i, m in enumerate(spec.mechanisms, start=1):
        counted = max(1, int(getattr(m, "max_report", 1)).bit_length())
        levels.append({"shuffler": shuffler_of(i) if spec.mode in SHUFFLE_MODES else None,
                       "batch": spec.tree.sizes[i - 1], "messages_theory": m.bits_per_user(),
                       "bits_theory": m.bits_per_user(), "bits_count_encoded": counted})
    if spec.mode not in SHUFFLE_MODES:  # one attributable report per user, whatever the tree
        levels = levels[:1]
    return {"levels": levels, "bits_theory_total": sum(x["bits_theory"] for x in levels),
            "bits_count_encoded_total": sum(x["bits_count_encoded"] for x in levels)}


FAMILY = ConcurrentShuffle()
