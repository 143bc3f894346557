"""The results directory, the same for every family and both transports: the contract scripts read.

- ``summary.json``: the machine-readable summary (keys in the README, "The results directory"),
  with its ``provenance`` (:mod:`.provenance`);
- ``config.json``: the experiment as run, every default and preset value filled in (to read);
- ``config.toml``: the experiment as a file ``privbandit run`` accepts as it stands (to run again);
- ``curves.csv``: pseudo- and realized regret, mean ± stderr over runs, per checkpoint and algorithm;
- ``runs.csv``: pseudo- and realized regret of every run at every checkpoint (long format), for
  paired comparisons (:mod:`privbandit.runner.paired`, ``privbandit compare``);
- ``rounds.csv``: one row per released round of every run: the spine's columns (round, n, reports,
  the round's own ε, protocol bits) and the family's diagnostics;
- ``regret.png``: regret against t, mean ± stderr.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import time
from pathlib import Path

import numpy as np
import tomli_w

from privbandit.runner.provenance import broker_record, provenance

ROUND_COLUMNS = ["algorithm", "run", "round", "n", "reports", "epsilon", "bits"]


def mean_stderr(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over runs (axis 0) and its standard error; stderr is 0 for a single run."""
    mean = x.mean(axis=0)
    if x.shape[0] < 2:
        return mean, np.zeros_like(mean)
    return mean, x.std(axis=0, ddof=1) / math.sqrt(x.shape[0])


def worst_privacy(ledgers: list[dict]) -> dict:
    """The ledger across runs: each number is the worst (largest) any run spent."""
    out = dict(ledgers[0])
    for key in ("epsilon_pure", "cdp_epsilon", "epsilon_at_delta"):
        vals = [l.get(key) for l in ledgers]
        out[key] = None if any(v is None for v in vals) else max(vals)
    out["rdp"] = {a: (None if any(l["rdp"][a] is None for l in ledgers) else max(l["rdp"][a] for l in ledgers))
                  for a in ledgers[0]["rdp"]}
    out["releases"] = float(np.mean([l["releases"] for l in ledgers]))  # per run, on average
    order = ("non-private", "none proven", "proven")
    out["guarantee"] = min((l["guarantee"] for l in ledgers), key=order.index)
    return out


def per_run(results: list) -> tuple[np.ndarray, np.ndarray]:
    """(runs, C) pseudo- and realized regret over every task of an algorithm, in run order."""
    return np.concatenate([r.pseudo for r in results]), np.concatenate([r.realized for r in results])


def summarize(fam, config, results: dict[str, list], compute: dict[str, float], elapsed: float,
              transport: str = "inproc", store=None) -> dict:
    """``summary.json``'s content. ``elapsed``: this run's wall seconds; with the run's
    :class:`~privbandit.runner.store.TaskStore`, ``elapsed_s`` also counts the earlier legs whose
    kept tasks it reused, and ``provenance.tasks`` says how many it reused and computed."""
    from privbandit.runner.store import experiment_key

    now = time.time()
    started, this_leg = now - elapsed, elapsed
    record = {"config_hash": store.config_hash if store is not None else experiment_key(config)}
    if store is not None:
        elapsed += store.earlier_elapsed()
        started = min([started, *store.earlier_legs])
        legs = len(store.earlier_legs) + int(store.computed > 0)  # this run is a leg if it computed a task
        record["tasks"] = {"reused": store.reused, "computed": store.computed, "legs": legs,
                           "elapsed_s_this_leg": round(this_leg, 3)}
    summary = {
        "experiment": config.name, "family": fam.name, "horizon": config.horizon, "runs": config.runs,
        "seed": config.seed, "epsilon": config.epsilon, **fam.experiment_summary(config),
        "transport": transport, "elapsed_s": round(elapsed, 3),
        "algorithms": {}, "privacy": {}, "communication": {},
    }
    rejected: dict[str, int] = {}
    for label, tasks in results.items():
        pseudo, realized = per_run(tasks)
        pm, ps = mean_stderr(pseudo[:, -1:])
        rm, rs = mean_stderr(realized[:, -1:])
        algo = fam.algorithm(config, label)
        summary["algorithms"][label] = {
            "algorithm": algo.algorithm,
            "runs": int(pseudo.shape[0]),
            "regret_final_mean": float(pm[0]),
            "regret_final_stderr": float(ps[0]),
            "realized_regret_final_mean": float(rm[0]),
            "realized_regret_final_stderr": float(rs[0]),
            **fam.label_summary(config, label, tasks),
            "users_per_s": config.horizon * pseudo.shape[0] / compute[label] if compute[label] else None,
            "parameters": algo.model_dump(),
        }
        ledgers = [t.privacy for t in tasks for _ in t.runs]
        summary["privacy"][label] = worst_privacy(ledgers)
        if "coalition" in tasks[0].privacy:  # colluders: the same ledger against the coalition
            summary["privacy"][label]["coalition"] = {
                **worst_privacy([t.privacy["coalition"] for t in tasks]),
                "colluders": sum(t.privacy["coalition"]["colluders"] for t in tasks)}
        reports = sum(t.reports * len(t.runs) for t in tasks)
        summary["communication"][label] = {
            "bits_per_user_protocol": sum(t.protocol_bits * len(t.runs) for t in tasks) / reports if reports else 0.0,
            "bits_per_user_protocol_max": max(t.max_report_bits for t in tasks),
            "reports_per_run": reports / pseudo.shape[0],
        }
        for t in tasks:
            for reason, n in t.rejected.items():
                rejected[reason] = rejected.get(reason, 0) + n
    # Reports the intermediaries refused, by reason (over MQTT the services' counters replace it).
    summary["rejected"] = dict(sorted(rejected.items()))
    if transport == "mqtt":
        summary["broker"] = broker_record()
    summary["provenance"] = {**provenance(started, now), **record}
    return summary


def privacy_cell(p: dict) -> str:
    """The guarantee that holds for what the analyzer received: "none proven" and "non-private"
    are not numbers; a δ that is not small against 1/N is flagged."""
    if p.get("guarantee", "proven") != "proven":
        return p["guarantee"]
    if p["epsilon_pure"] is not None:
        return f"{p['epsilon_pure']:g} (pure)"
    if p["epsilon_at_delta"] is None:
        return "∞"
    flag = " δ≥1/N!" if p.get("delta_warning") else ""
    return f"{p['epsilon_at_delta']:.3g} (δ={p['delta']:.2g}){flag}"


def experiment_toml(config) -> str:
    """The experiment as a file ``privbandit run`` accepts as it stands, every default filled in
    (so a later change of a default does not change what it runs)."""
    return tomli_w.dumps(config.model_dump(mode="json", exclude_none=True))


RESULT_FILES = ("summary.json", "config.json", "config.toml", "curves.csv", "runs.csv", "rounds.csv", "regret.png")


def prepare_out(out: Path, overwrite: bool = False, resume: bool = False) -> None:
    """Before any work: ``out`` is, or can be made, a writable directory, and holds no earlier
    results unless ``overwrite`` (their files, the finished tasks kept in ``.tasks/``, a
    distributed run's ``logs/`` and an audit of the earlier experiment, ``audit/`` or
    ``audit.json``, are then removed, so nothing is left stale beside the new ones) or ``resume`` (the result files are
    removed, the finished tasks kept for reuse, :mod:`.store`). Raises
    :class:`~privbandit.runner.config.ConfigError` naming what is wrong."""
    from privbandit.runner.config import ConfigError
    from privbandit.runner.store import DIRNAME

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory")
    if out.is_dir():
        held = sorted(p.name for p in out.iterdir())
        if held and not (overwrite or resume):
            shown = ", ".join(held[:6]) + (", …" if len(held) > 6 else "")
            more = " (--resume reuses its finished tasks)" if DIRNAME in held else ""
            raise ConfigError(f"--out {out}: not empty ({shown}); pass --overwrite to replace an earlier run's "
                              f"results{more}, or choose another --out")
        for name in RESULT_FILES:
            (out / name).unlink(missing_ok=True)
        if overwrite and not resume and (out / DIRNAME).is_dir():
            shutil.rmtree(out / DIRNAME)
        if overwrite and not resume:
            # a distributed run's party logs, and an audit of the earlier experiment
            # (`privbandit audit … --out <results>/audit`, which the dashboard shows beside the results)
            for name in ("logs", "audit"):
                if (out / name).is_dir():
                    shutil.rmtree(out / name)
            (out / "audit.json").unlink(missing_ok=True)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".privbandit-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None


def regret_columns(t: np.ndarray, per_label: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """``curves.csv``'s columns: ``t``, then per label the pseudo- and realized regret's mean and
    stderr over runs, from each label's (runs, C) pseudo- and realized regret (:func:`per_run`)."""
    columns = {"t": t}
    for label, values in per_label.items():
        for kind, runs in zip(("pseudo", "realized"), values):
            mean, se = mean_stderr(runs)
            columns[f"{label}.{kind}_mean"] = mean
            columns[f"{label}.{kind}_stderr"] = se
    return columns


def write_results(out: Path, fam, config, summary: dict, results: dict[str, list]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    resolved = config.model_dump()
    resolved["algorithms"] = {label: fam.algorithm(config, label).model_dump() for label in results}
    (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")
    (out / "config.toml").write_text(experiment_toml(config))

    columns = regret_columns(next(iter(results.values()))[0].checkpoints,
                             {label: per_run(tasks) for label, tasks in results.items()})
    with open(out / "curves.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows(zip(*columns.values()))

    with open(out / "runs.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["algorithm", "run", "t", "pseudo", "realized"])
        t = columns["t"]
        for label, tasks in results.items():
            for task in tasks:
                for i, run in enumerate(task.runs):
                    w.writerows(zip([label] * t.size, [run] * t.size, t, task.pseudo[i], task.realized[i]))

    with open(out / "rounds.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=ROUND_COLUMNS + fam.round_fields, extrasaction="ignore")
        w.writeheader()
        for label, tasks in results.items():
            for t in tasks:
                for row in t.rounds:
                    w.writerow({"algorithm": label, "run": t.runs[0], **row})
    plot_regret(out / "regret.png", config, columns, list(results), **fam.plot_options(config))


LINE_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 2)))


def coincident_labels(curves: dict[str, np.ndarray], rel: float = 0.01) -> dict[str, str]:
    """Legend labels that say when a curve lies on an earlier one: ``"B (on A)"`` where B never
    departs from A by more than ``rel`` of the panel's range, so a reader knows why B cannot be seen
    (distinct line styles alone do not show a curve drawn exactly over another)."""
    ys = {k: np.asarray(v, dtype=float) for k, v in curves.items()}
    finite = [y[np.isfinite(y)] for y in ys.values()]
    span = max((np.ptp(y) for y in finite if y.size), default=0.0) or 1.0
    out, seen = {}, []
    for label, y in ys.items():
        under = next((o for o in seen if ys[o].shape == y.shape and np.nanmax(np.abs(ys[o] - y)) <= rel * span), None)
        out[label] = label if under is None else f"{label} (on {under})"
        seen.append(label)
    return out


def plot_regret(path: Path, config, columns: dict, labels: list[str], title: str | None = None,
                cumulative: bool = False, realized: str = "realized regret") -> None:
    """Pseudo- and realized regret, mean ± stderr over runs, one panel each: time-averaged Reg(t)/t
    on a log axis (the bandit families), or ``cumulative`` (the linear family). ``title`` defaults
    to the experiment's name, ε, T and runs."""
    regret_figure(config, columns, labels, title, cumulative, realized).savefig(path, dpi=110)


def regret_figure(config, columns: dict, labels: list[str], title: str | None = None, cumulative: bool = False,
                  realized: str = "realized regret"):
    """:func:`plot_regret`'s figure, not saved: a :class:`matplotlib.figure.Figure` made without
    pyplot, so it neither switches the backend of a notebook that shows it nor stays open."""
    from matplotlib.figure import Figure

    t = columns["t"].astype(float)
    scale = 1.0 if cumulative else t
    rows = (len(labels) + 4) // 5  # legend rows below the panels, five entries a row
    fig = Figure(figsize=(11, 4 + 0.3 * rows))
    axes = fig.subplots(1, 2)
    shown = coincident_labels({label: columns[f"{label}.pseudo_mean"] / scale for label in labels})
    for i, label in enumerate(labels):
        for ax, kind in zip(axes, ("pseudo", "realized")):
            mean, se = columns[f"{label}.{kind}_mean"] / scale, columns[f"{label}.{kind}_stderr"] / scale
            # A line style per algorithm as well as a colour: curves that coincide stay visible.
            line, = ax.plot(t, mean, label=shown[label], linestyle=LINE_STYLES[i % len(LINE_STYLES)])
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
    # Below the panels, not over the curves.
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=min(5, len(labels)), fontsize=8,
               frameon=False)
    fig.suptitle(title or f"{config.name}: ε = {config.epsilon}, T = {config.horizon:,}, {config.runs} runs, "
                          f"mean ± stderr")
    fig.tight_layout(rect=(0, 0.07 * rows * 4 / (4 + 0.3 * rows), 1, 1))
    return fig
