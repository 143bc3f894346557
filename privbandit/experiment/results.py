"""The results directory: the contract scripts read.

- ``summary.json``: the machine-readable summary (keys documented in the README);
- ``config.json``: the resolved experiment, preset defaults filled in;
- ``curves.csv``: pseudo- and realized-regret mean ± stderr per checkpoint and algorithm;
- ``rounds.csv``: one row per released round of every run (g, τ, m, bits, wrap-arounds, decode
  failures, noise realised vs its Assumption-1 bound);
- ``regret.png``: time-average regret Reg(t)/t, as the paper plots it.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from privbandit.experiment.config import AlgorithmConfig, ExperimentConfig
from privbandit.protocol.observer import RunResult


def _mean_stderr(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over runs (axis 0) and its standard error; stderr is 0 for a single run."""
    mean = x.mean(axis=0)
    if x.shape[0] < 2:
        return mean, np.zeros_like(mean)
    return mean, x.std(axis=0, ddof=1) / math.sqrt(x.shape[0])


def _worst_privacy(ledgers: list[dict]) -> dict:
    """The ledger across runs: each number is the worst (largest) any run spent."""
    out = dict(ledgers[0])
    for key in ("epsilon_pure", "cdp_epsilon", "epsilon_at_delta"):
        vals = [l[key] for l in ledgers]
        out[key] = None if any(v is None for v in vals) else max(vals)
    out["rdp"] = {
        a: (None if any(l["rdp"][a] is None for l in ledgers) else max(l["rdp"][a] for l in ledgers))
        for a in ledgers[0]["rdp"]
    }
    out["releases"] = float(np.mean([l["releases"] for l in ledgers]))  # per run, on average
    return out


def summarize(
    config: ExperimentConfig,
    results: dict[str, list[RunResult]],
    algos: dict[str, AlgorithmConfig],
    compute: dict[str, float],
    elapsed: float,
    transport: str = "inproc",
) -> dict:
    summary = {
        "experiment": config.name,
        "horizon": config.horizon,
        "runs": config.runs,
        "seed": config.seed,
        "epsilon": config.epsilon,
        "preset": config.preset,
        "transport": transport,
        "elapsed_s": round(elapsed, 3),
        "algorithms": {},
        "privacy": {},
        "communication": {},
    }
    rejected: dict[str, int] = {}
    for label, runs in results.items():
        pseudo = np.array([r.pseudo_regret[-1] for r in runs])
        realized = np.array([r.realized_regret[-1] for r in runs])
        pm, ps = _mean_stderr(pseudo[:, None])
        rm, rs = _mean_stderr(realized[:, None])
        rows = [row for r in runs for row in r.rounds]
        summary["algorithms"][label] = {
            "algorithm": algos[label].algorithm,
            "runs": len(runs),
            "regret_final_mean": float(pm[0]),
            "regret_final_stderr": float(ps[0]),
            "realized_regret_final_mean": float(rm[0]),
            "realized_regret_final_stderr": float(rs[0]),
            "best_arm_eliminated_runs": sum(r.best_arm_eliminated for r in runs),
            "rounds_per_run": float(np.mean([len(r.rounds) for r in runs])),
            "reports_dropped": sum(x["n"] - x["reports"] for x in rows),
            "wrap_arounds": sum(bool(x["wrapped"]) for x in rows),
            "decode_failures": sum(bool(x.get("decode_failure", False)) for x in rows),
            "noise_bound_exceeded": sum(abs(x["noise"]) > x["noise_bound"] for x in rows if x["noise_bound"] > 0),
            "attackers": sum(x.get("attackers", 0) for x in rows),  # adversarial reports sent, all runs
            "users_per_s": config.horizon * len(runs) / compute[label] if compute[label] else None,
            "parameters": algos[label].model_dump(),
        }
        summary["privacy"][label] = _worst_privacy([r.privacy for r in runs])
        if "coalition" in runs[0].privacy:  # colluders: the same ledger against the coalition
            summary["privacy"][label]["coalition"] = {
                **_worst_privacy([r.privacy["coalition"] for r in runs]),
                "colluders": sum(r.privacy["coalition"]["colluders"] for r in runs),
            }
        reports = sum(r.reports for r in runs)
        summary["communication"][label] = {
            "bits_per_user_protocol": sum(r.protocol_bits for r in runs) / reports if reports else 0.0,
            "bits_per_user_protocol_max": max(r.max_report_bits for r in runs),
            "reports_per_run": reports / len(runs),
        }
        for r in runs:
            for reason, n in r.rejected.items():
                rejected[reason] = rejected.get(reason, 0) + n
    # Reports the intermediaries refused, by reason (over MQTT the services' counters replace it).
    summary["rejected"] = dict(sorted(rejected.items()))
    return summary


def write_results(out: Path, config: ExperimentConfig, summary: dict, results: dict[str, list[RunResult]],
                  algos: dict[str, AlgorithmConfig]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    resolved = config.model_dump()
    resolved["algorithms"] = {k: a.model_dump() for k, a in algos.items()}
    (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")

    first = next(iter(results.values()))[0]
    t = first.checkpoints
    columns = {"t": t}
    for label, runs in results.items():
        for kind in ("pseudo", "realized"):
            mean, se = _mean_stderr(np.array([getattr(r, f"{kind}_regret") for r in runs]))
            columns[f"{label}.{kind}_mean"] = mean
            columns[f"{label}.{kind}_stderr"] = se
    with open(out / "curves.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows(zip(*columns.values()))

    fields = ["algorithm", "run", "round", "batch", "arm", "n", "reports", "epsilon", "g", "tau", "m", "bits", "wrapped",
              "estimate_sum", "true_sum", "noise", "noise_bound", "noise_encoded", "decode_failure", "attackers", "epsilon_coalition"]
    with open(out / "rounds.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for label, runs in results.items():
            for run, r in enumerate(runs):
                for row in r.rounds:
                    w.writerow({"algorithm": label, "run": run, **row})
    plot_regret(out / "regret.png", config, columns, list(results))


def plot_regret(path: Path, config, columns: dict, labels: list[str], title: str | None = None,
                cumulative: bool = False, realized: str = "realized regret") -> None:
    """Pseudo- and realized regret, mean ± stderr over runs, one panel each: time-averaged Reg(t)/t
    on a log axis (the bandit families), or ``cumulative`` (the linear family). ``title`` defaults
    to the experiment's name, ε, T and runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = columns["t"].astype(float)
    scale = 1.0 if cumulative else t
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for label in labels:
        for ax, kind in zip(axes, ("pseudo", "realized")):
            mean, se = columns[f"{label}.{kind}_mean"] / scale, columns[f"{label}.{kind}_stderr"] / scale
            line, = ax.plot(t, mean, label=label)
            ax.fill_between(t, mean - se, mean + se, color=line.get_color(), alpha=0.25)
    for ax, kind in zip(axes, ("pseudo-regret", realized)):
        if cumulative:
            ax.set_xlabel("round t")
            ax.set_ylabel(f"cumulative {kind}")
        else:
            ax.set_xscale("log")
            ax.set_xlabel("users t")
            ax.set_ylabel(f"time-average {kind}  Reg(t)/t")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(title or f"{config.name}: ε = {config.epsilon}, T = {config.horizon:,}, {config.runs} runs, "
                          f"mean ± stderr")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
