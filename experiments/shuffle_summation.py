"""Theorem 3's route through a real shuffler (issue #30): what split-and-mix costs against secure
aggregation, paired on the same instances and users.

    python experiments/shuffle_summation.py [--horizon 1000000] [--runs 20] [--epsilon 0.5]
                                            [--mqtt-horizon 100000] [--out results/shuffle-summation]

For each of Dist-DP-SE, Dist-RDP-SE and Dist-CDP-SE (the quickstart's easy instance, K = 10):

- the aggregator (secure aggregation's ideal sum) against the split-and-mix shuffler at the *same*
  noise parameters (ε, p; Dist-DP-SE with ``noise_budget = "whole"``): the analyzer decodes the same sums, so the regret is equal in every run
  (the shares are drawn from a stream of their own); only the ledger and the bits differ;
- Dist-DP-SE at Theorem 3's parameters (the default ``noise_budget = "theorem-3"`` under the preset
  ``paper``: noise at ε′ = ε/2, τ at p′ = 1/(2T)), the paper's nominal comparison, against the
  aggregator at ε;
- at equal guarantees (``calibrate = true``: every user (ε, δ)-DP by the ledger), the shuffler
  against the aggregator;
- communication: protocol bits per user in-process, and over MQTT (``--mqtt-horizon``, one run each)
  messages, payload and wire bytes per user.

A label keys its users' streams, so each route runs under the same label in its own experiment and
the runs are paired by index (run r: instance r, users r). Prints the paired differences of final
pseudo-regret (a − b: mean ± se, t, runs a won) and writes ``summary.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tomli_w

from privbandit.runner import run
from privbandit.runner.paired import paired

ALGORITHMS = ("dist-dp-se", "dist-rdp-se", "dist-cdp-se")


def experiment(args, algorithm: str, route: str, **extra) -> dict:
    table = {"algorithm": algorithm, **({} if route == "aggregator" else {"intermediary": "shuffler"})}
    table.update({k: v for k, v in extra.items() if k in ("epsilon", "p", "s", "noise_budget")})
    if algorithm != "dist-dp-se":
        table.setdefault("s", 10)
    top = {k: v for k, v in extra.items() if k == "calibrate"}
    return {"name": f"shuffle-summation-{algorithm}-{route}", "horizon": args.horizon, "seed": 1,
            "epsilon": args.epsilon, "runs": args.runs, **top,
            "environment": {"kind": "uniform", "arms": 10, "low": 0.25, "high": 0.75, "reward": "gaussian", "sd": 0.1},
            "algorithms": {"x": table}}


def final_regret(res) -> np.ndarray:
    rows = res.table()
    rows = rows if isinstance(rows, list) else rows.to_dict("records")
    last = max(r["t"] for r in rows)
    return np.array([r["pseudo"] for r in sorted(rows, key=lambda r: r["run"]) if r["t"] == last])


def ledger(res) -> dict:
    p = res.summary["privacy"]["x"]
    return {k: p.get(k) for k in ("guarantee", "epsilon_pure", "epsilon_at_delta", "delta", "delta_from_theorems")}


def bits(res) -> float:
    return float(res.summary["communication"]["x"]["bits_per_user_protocol"])


def shares(res) -> float | None:
    """Split-and-mix shares (messages) per user, over every released round of every run."""
    rows = [r for task in res.results["x"] for r in task.rounds]
    if not rows or rows[0].get("shares") is None:
        return None
    return float(sum(r["shares"] * r["reports"] for r in rows) / sum(r["reports"] for r in rows))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--horizon", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--epsilon", type=float, default=0.5)
    ap.add_argument("--mqtt-horizon", type=int, default=100_000, help="0: skip the MQTT sessions")
    ap.add_argument("--out", type=Path, default=Path("results/shuffle-summation"))
    args = ap.parse_args()
    out, start = {}, time.perf_counter()
    for algorithm in ALGORITHMS:
        eps, p = (args.epsilon, 1 / args.horizon)
        same = {"epsilon": eps, "p": p}
        whole = {"noise_budget": "whole"} if algorithm == "dist-dp-se" else {}  # not Theorem 3's half
        secagg = run(experiment(args, algorithm, "aggregator", **same))
        mixed = run(experiment(args, algorithm, "shuffler", **same, **whole))
        a, b = final_regret(mixed), final_regret(secagg)
        row = {"same parameters": {"shuffler − aggregator": paired(a, b).as_dict(), "identical": bool(np.array_equal(a, b)),
                                   "ledger_shuffler": ledger(mixed), "ledger_aggregator": ledger(secagg),
                                   "bits_shuffler": bits(mixed), "bits_aggregator": bits(secagg),
                                   "shares_per_user": shares(mixed),
                                   "regret_aggregator": float(b.mean())}}
        if algorithm == "dist-dp-se":
            theorem3 = run(experiment(args, algorithm, "shuffler"))  # preset paper: ε′ = ε/2, p′ = 1/(2T)
            c = final_regret(theorem3)
            row["theorem 3"] = {"shuffler(ε/2) − aggregator(ε)": paired(c, b).as_dict(), "ledger": ledger(theorem3),
                                "regret": float(c.mean())}
        equal_mixed = run(experiment(args, algorithm, "shuffler", calibrate=True))
        equal_secagg = run(experiment(args, algorithm, "aggregator", calibrate=True))
        row["equal guarantees"] = {
            "shuffler − aggregator": paired(final_regret(equal_mixed), final_regret(equal_secagg)).as_dict(),
            "ledger_shuffler": ledger(equal_mixed), "ledger_aggregator": ledger(equal_secagg),
            "nominal_epsilon_shuffler": equal_mixed.summary["algorithms"]["x"]["parameters"]["epsilon"],
            "nominal_epsilon_aggregator": equal_secagg.summary["algorithms"]["x"]["parameters"]["epsilon"]}
        out[algorithm] = row
        print(f"{algorithm}: same (ε, p) → shuffler − aggregator identical in every run: {row['same parameters']['identical']}; "
              f"bits/user {row['same parameters']['bits_shuffler']:.1f} vs {row['same parameters']['bits_aggregator']:.1f} "
              f"({row['same parameters']['shares_per_user']:.2f} shares per user); "
              f"ledger {row['same parameters']['ledger_shuffler']} vs {row['same parameters']['ledger_aggregator']}")
        if "theorem 3" in row:
            t3 = row["theorem 3"]["shuffler(ε/2) − aggregator(ε)"]
            print(f"   Theorem 3's parameters (ε/2): regret {row['theorem 3']['regret']:.0f} vs {b.mean():.0f}; "
                  f"paired {t3['mean_difference']:+.0f} ± {t3['stderr']:.0f} (t = {t3['t']:.1f}, aggregator won "
                  f"{t3['b_won']} of {t3['runs']}); ledger {row['theorem 3']['ledger']}")
        eq = row["equal guarantees"]
        print(f"   equal guarantees (ε, δ) = ({args.epsilon}, 1/(10T)): shuffler − aggregator "
              f"{eq['shuffler − aggregator']['mean_difference']:+.0f} ± {eq['shuffler − aggregator']['stderr']:.0f} "
              f"(t = {eq['shuffler − aggregator']['t']:.1f}); nominal ε {eq['nominal_epsilon_shuffler']:.4f} vs "
              f"{eq['nominal_epsilon_aggregator']:.4f}")
    if args.mqtt_horizon:  # one session per route, every party its own process (the CLI's --transport mqtt)
        wire = {}
        for route in ("aggregator", "shuffler"):
            data = experiment(argparse.Namespace(**{**vars(args), "horizon": args.mqtt_horizon, "runs": 1}),
                              "dist-dp-se", route, epsilon=args.epsilon, p=1 / args.mqtt_horizon,
                              **({"noise_budget": "whole"} if route == "shuffler" else {}))
            path = args.out / f"mqtt-{route}.toml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(tomli_w.dumps(data))
            subprocess.run([sys.executable, "-m", "privbandit", "run", str(path), "--transport", "mqtt",
                            "--out", str(args.out / f"mqtt-{route}"), "--overwrite"], check=True, stdout=subprocess.DEVNULL)
            summary = json.loads((args.out / f"mqtt-{route}" / "summary.json").read_text())
            c = summary["communication"]["x"]
            wire[route] = {"bits_per_user_protocol": c["bits_per_user_protocol"],
                           **{f"{k}_per_user": v for k, v in c["per_user"]["total"].items()}}
            print(f"MQTT, Dist-DP-SE, T = {args.mqtt_horizon:,}, {route}: "
                  + ", ".join(f"{k} {v:.3g}" for k, v in wire[route].items()))
        out["mqtt"] = wire
    out["seconds"] = round(time.perf_counter() - start, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(out, indent=1))
    print(f"{out['seconds']:.0f} s; {args.out / 'summary.json'}")


if __name__ == "__main__":
    main()
