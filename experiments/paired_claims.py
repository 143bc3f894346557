"""The distributed-DP paper's claims, each as paired comparisons on the same instances.

    python experiments/paired_claims.py [--results results/reproduce] [--calibrated DIR ...]

Reads the results directories `experiments/reproduce.py` wrote (their ``runs.csv``: every run's
regret at every checkpoint) and prints, for each claim's pairs, the paired difference of
time-average pseudo-regret a − b (Reg(t)/t): its mean, standard error, t and the runs each won,
at several t of the same runs. Run r of every algorithm shares instance r, so differences are
taken run by run (``privbandit.runner.paired``). Under ``paper-code`` (p = 0.1, independent of T)
a run's regret at t equals that of a run with horizon t, so one file gives "as T grows" on the
same instances.

``--calibrated DIR``: a results directory run with ``--set calibrate=true`` (equal guarantees);
its pairs are printed the same way.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from privbandit.runner.paired import paired, read_runs

CLAIMS = {
    "1 Dist-DP-SE vs DP-SE (gap shrinks with T and ε)": [
        (stem, "Dist-DP-SE", "DP-SE") for stem in ("fig2_easy_eps0.1", "fig2_easy_eps0.5", "fig2_easy_eps1",
                                                    "fig3_hard_eps0.1", "fig3_hard_eps0.5", "fig3_hard_eps1",
                                                    "fig1_mslr_eps1", "fig1_mslr_eps5", "fig1_mslr_eps10")],
    "2 Dist-RDP-SE (s=10) vs Dist-DP-SE (gain, most at small ε)": [
        (stem, "Dist-RDP-SE", "Dist-DP-SE") for stem in ("fig2_easy_eps0.1", "fig2_easy_eps0.5", "fig2_easy_eps1",
                                                          "fig3_hard_eps0.1", "fig3_hard_eps0.5", "fig3_hard_eps1")],
    "3 s = 100 vs s = 10 (larger s, larger gain)": [
        (stem, "Dist-RDP-SE-s100", "Dist-RDP-SE") for stem in ("fig2_easy_eps0.1", "fig2_easy_eps0.5",
                                                                "fig2_easy_eps1", "fig3_hard_eps0.1",
                                                                "fig3_hard_eps0.5", "fig3_hard_eps1")],
    "4 Fig. 4 trust models": [
        ("fig4_trust_models", "CDP-SE", "Dist-DP-SE"), ("fig4_trust_models", "Dist-DP-SE", "LDP-SE"),
        ("fig4_trust_models", "Dist-RDP-SE", "Dist-DP-SE"), ("fig4_trust_models", "Dist-CDP-SE", "Dist-RDP-SE")],
}
TIMES = (10**5, 10**6, 10**7)


def at(t: np.ndarray, target: int) -> int:
    """The checkpoint nearest ``target`` (checkpoints are log- and linearly spaced)."""
    return int(np.argmin(np.abs(np.log(t) - np.log(target))))


def rows(directory: Path, a: str, b: str) -> list[tuple[int, object]]:
    t, curves = read_runs(directory)
    out = []
    for target in TIMES:
        if target > t[-1] * 1.01:
            continue
        i = at(t, target)
        out.append((int(t[i]), paired(curves[a][:, i] / t[i], curves[b][:, i] / t[i])))
    return out


def show(title: str, pairs: list[tuple[Path, str, str]]) -> None:
    print(f"\n{title}")
    print(f"  {'file':<22} {'a':<17} {'b':<12} {'t':>10}  {'mean a−b':>10} {'± se':>9} {'t-stat':>7}  a won / b won")
    for directory, a, b in pairs:
        if not (directory / "runs.csv").exists():
            print(f"  {directory.name:<22} (no runs.csv: run experiments/reproduce.py first)")
            continue
        for t, p in rows(directory, a, b):
            print(f"  {directory.name:<22} {a:<17} {b:<12} {t:>10,}  {p.mean_difference:>+10.5f} {p.stderr:>9.5f} "
                  f"{p.t:>+7.2f}  {p.a_won:>2} / {p.b_won:<2} of {p.runs}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results/reproduce"))
    ap.add_argument("--calibrated", type=Path, action="append", default=[],
                    help="a results directory run with --set calibrate=true")
    args = ap.parse_args()
    for title, pairs in CLAIMS.items():
        show(title, [(args.results / stem, a, b) for stem, a, b in pairs])
    for directory in args.calibrated:
        _, curves = read_runs(directory)
        labels = list(curves)
        show(f"equal guarantees: {directory}", [(directory, a, "Dist-DP-SE") for a in labels if a != "Dist-DP-SE"])


if __name__ == "__main__":
    main()
