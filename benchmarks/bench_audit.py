"""privbandit audit: releases sampled per second per mechanism at cohort 1024 (and at the audit's
default cohort), and the whole audit of the distributed-DP MAB family's mechanisms; with
``--families``, releases per second of every target of the other families' audit files instead.

    python benchmarks/bench_audit.py [--samples N]
    python benchmarks/bench_audit.py --families

A release is one round's worth of what the analyzer receives, sampled by the family's own code
(privbandit/families/distributed_dp_mab/audit.py); one core, best of 2 after a warm-up.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from privbandit import registry
from privbandit.audit import run_audit
from privbandit.runner import config as experiment_files

ALGORITHMS = ("dist-dp-se", "dist-rdp-se", "dist-cdp-se", "cdp-se", "ldp-se", "dp-se", "se")
BUDGET_S = 1.0  # seconds of sampling per measurement


def config(epsilon: float = 1.0):
    data = {"family": "distributed-dp-mab", "horizon": 1_000_000, "epsilon": epsilon,
            "algorithms": {a: {"algorithm": a} for a in ALGORITHMS}
            | {"dist-dp-se-shuffled": {"algorithm": "dist-dp-se", "intermediary": "shuffler"}}}
    return experiment_files.load_data(data)[1]


def releases_per_second(target, rng) -> float:
    per = int(target.details.get("per_release", 1))
    count = 1000
    t0 = time.perf_counter()
    target.draw(1, count, rng, per)  # warm-up, and a first estimate of the rate
    count = max(1000, int(count * BUDGET_S / max(time.perf_counter() - t0, 1e-6)))
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        target.draw(1, count, rng, per)
        best = min(best, time.perf_counter() - t0)
    return count / best


# The other families' releases, as their audit files (or experiments) define them.
FAMILY_FILES = ("experiments/audit_concurrent.toml", "experiments/audit_glm.toml", "experiments/pol_setting1.toml",
                "experiments/pol_ftnl.toml")


def families() -> None:
    rng = np.random.default_rng(0)
    print(f"{'release':<52} {'users':>6} {'releases/s':>14}")
    for path in FAMILY_FILES:
        fam, cfg = experiment_files.load_data(experiment_files.read_experiment_data(path, []), path)
        for label in fam.labels(cfg):
            for t in fam.audit_targets(cfg, label):
                print(f"{t.name:<52} {t.details.get('n', ''):>6} {releases_per_second(t, rng):>12,.0f}/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1_000_000, help="releases per neighbour, whole audit")
    parser.add_argument("--families", action="store_true", help="the other families' targets' sampling rates")
    args = parser.parse_args()
    if args.families:
        return families()
    fam = registry.family("distributed-dp-mab")
    cfg = config()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"numpy {np.__version__}")
    rng = np.random.default_rng(0)
    print(f"{'mechanism':<22} {'release':<58} {'n = 1024':>14} {'n = 16':>14}")
    for label in cfg.algorithms:
        rates = []
        for n in (1024, 16):
            (t,) = fam.audit_targets(cfg, label, n)
            rates.append(releases_per_second(t, rng))
        print(f"{label:<22} {t.release[:58]:<58} {rates[0]:>12,.0f}/s {rates[1]:>12,.0f}/s")
    targets = [t for label in cfg.algorithms for t in fam.audit_targets(cfg, label)]
    t0 = time.perf_counter()
    results = run_audit(targets, args.samples, None, 0.95, 0)
    total = time.perf_counter() - t0
    print(f"\nwhole audit: {len(targets)} mechanisms, {args.samples:,} releases per neighbour, default cohort "
          f"{targets[0].details['n']}: {total:.1f} s")
    for r in results:
        claimed = r["claim"]["epsilon_at_delta"]
        print(f"  {r['name']:<40} claimed {claimed if claimed is None else round(claimed, 4)!s:>8}  "
              f"audited ≥ {r['audit']['epsilon']:.4f}  {r['verdict']:<10} {r['seconds']['total']:6.1f} s")


if __name__ == "__main__":
    main()
